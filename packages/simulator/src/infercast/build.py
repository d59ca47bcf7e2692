"""Build a model on the meta device through the adapters, then swap in simulator layers."""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Any

import torch
from infercast_adapters import InfercastError, ModelProfile, patched
from infercast_adapters.arch import text_config_of
from infercast_adapters.manager import AdapterManager
from torch import nn

from infercast.layers import (
    MoEShape,
    SimContext,
    SimDecoderLayer,
    SimEmbedding,
    SimGQAAttention,
    SimLMHead,
    SimMLAAttention,
    SimMLP,
    SimModule,
    SimMoE,
)
from infercast.vision import SimVisionTower, convert_vision


def _get_path(root: Any, path: str) -> Any:
    obj = root
    for part in path.split("."):
        obj = getattr(obj, part)
    return obj


def _linear_out(module: nn.Module, name: str) -> int | None:
    linear = getattr(module, name, None)
    return getattr(linear, "out_features", None)


class SimModel(SimModule):
    """One rank of the deployed language model: embedding, decoder layers, head."""

    def __init__(self, ctx: SimContext, embed: SimEmbedding, layers: list[SimDecoderLayer], head: SimLMHead,
                 vision: SimVisionTower | None = None) -> None:
        super().__init__()
        self.ctx = ctx
        self.embed_tokens = embed
        self.layers = nn.ModuleList(layers)
        self.head = head
        self.vision = vision

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        h = self.embed_tokens(ids)
        residual = torch.zeros_like(h)
        for layer in self.layers:
            h, residual = layer(h, residual)
        return self.head(h, residual)


@dataclass
class BuiltModel:
    sim: SimModel
    hf_param_count: int
    """Parameters of the transformers model built on meta (embedding, lm_head and any vision
    tower and projector included)."""
    profile: ModelProfile
    text_config: Any
    vision_param_count: int = 0
    """Of which the vision tower and projector."""


def hf_language_model(config: Any, profile: ModelProfile, manager: AdapterManager) -> nn.Module:
    """The transformers model for ``config`` on meta, built under the adapters' class patches:
    the whole vision-language model when the profile has a vision tower, else the causal LM."""
    from transformers import AutoModelForCausalLM, AutoModelForImageTextToText
    from transformers.initialization import no_init_weights

    patches = manager.class_patches(config)
    vision = profile.has_vision and getattr(config, "vision_config", None) is not None
    target = config if vision or not profile.text_config_key else text_config_of(config)
    with patched(patches, config.model_type), torch.device("meta"), no_init_weights(), _quiet():
        try:
            if vision:
                return AutoModelForImageTextToText.from_config(target, dtype=torch.bfloat16)
            return AutoModelForCausalLM.from_config(target, dtype=torch.bfloat16)
        except Exception as exc:  # a config transformers cannot instantiate
            raise InfercastError(f"transformers could not build {target.model_type} on meta: {exc}") from exc


@contextlib.contextmanager
def _quiet():
    from transformers.utils import logging

    level = logging.get_verbosity()
    logging.set_verbosity_error()
    try:
        yield
    finally:
        logging.set_verbosity(level)


def convert(hf: nn.Module, config: Any, profile: ModelProfile, ctx: SimContext) -> BuiltModel:
    """Replace every decoder layer of ``hf`` with a simulator layer sharded for one rank."""
    text = text_config_of(config)
    hidden = text.hidden_size
    layers_path = profile.layers_path
    hf_layers = _get_path(hf, layers_path) if _has_path(hf, layers_path) else _get_path(hf, "model.layers")
    param_count = sum(p.numel() for p in hf.parameters())
    sim_layers = []
    for index, layer in enumerate(hf_layers):
        attn_module = _child_of_class(layer, profile.attention_class)
        if attn_module is None:
            raise InfercastError(f"layer {index}: no {profile.attention_class} module (profile {profile.model_type})")
        attn = _convert_attention(attn_module, text, profile, ctx)
        mlp_module = getattr(layer, "mlp", None)
        if profile.moe_class and type(mlp_module).__name__ == profile.moe_class:
            from infercast_adapters.arch import detect_moe_architecture

            arch = detect_moe_architecture(text)
            mlp = SimMoE(ctx, MoEShape(arch.num_experts, arch.top_k, hidden, arch.expert_intermediate_size,
                                       arch.shared_expert_intermediate_size, arch.router))
        else:
            inter = _linear_out(mlp_module, "gate_proj") or text.intermediate_size
            mlp = SimMLP(hidden, inter, ctx.quant.dense, ctx.parallel.tp)
        sim_layers.append(SimDecoderLayer(ctx, attn, mlp, hidden, index))
    for index, sim_layer in enumerate(sim_layers):
        hf_layers[index] = sim_layer
    tower, vision_params = None, 0
    if profile.has_vision and _has_path(hf, profile.vision_tower_path):
        hf_vision = _get_path(hf, profile.vision_tower_path)
        projector = _find_projector(hf, profile)
        vision_params = sum(p.numel() for p in hf_vision.parameters())
        vision_params += sum(p.numel() for p in projector.parameters()) if projector is not None else 0
        tower = convert_vision(_get_path(hf, profile.vision_blocks_path), projector, config, hidden, ctx)
    sim = SimModel(ctx, SimEmbedding(ctx, text.vocab_size, hidden), sim_layers, SimLMHead(ctx, text.vocab_size, hidden),
                   vision=tower)
    return BuiltModel(sim=sim, hf_param_count=param_count, profile=profile, text_config=text,
                      vision_param_count=vision_params)


def _find_projector(hf: nn.Module, profile: ModelProfile) -> nn.Module | None:
    """The multimodal projector: the child named like one next to the vision tower."""
    parent_path, _, _ = profile.vision_tower_path.rpartition(".")
    parent = _get_path(hf, parent_path) if parent_path else hf
    for name, child in parent.named_children():
        if "projector" in name or name in ("multi_modal_projector", "merger", "connector"):
            return child
    return None


def _has_path(root: Any, path: str) -> bool:
    try:
        _get_path(root, path)
        return True
    except AttributeError:
        return False


def _child_of_class(module: nn.Module, class_name: str) -> nn.Module | None:
    for child in module.children():
        if type(child).__name__ == class_name:
            return child
    return None


def _convert_attention(module: nn.Module, text: Any, profile: ModelProfile, ctx: SimContext) -> SimModule:
    if profile.attention_kind == "mla":
        latent = _linear_out(module, profile.field_name("kv_a_proj_with_mqa"))
        expected = text.kv_lora_rank + text.qk_rope_head_dim
        if latent is not None and latent != expected:
            raise InfercastError(f"{type(module).__name__}: latent projection is {latent} wide, config says {expected}")
        return SimMLAAttention(
            ctx, hidden_size=text.hidden_size, num_heads=text.num_attention_heads, q_lora_rank=text.q_lora_rank,
            kv_lora_rank=text.kv_lora_rank, qk_nope_head_dim=text.qk_nope_head_dim,
            qk_rope_head_dim=text.qk_rope_head_dim, v_head_dim=text.v_head_dim,
        )
    heads = text.num_attention_heads
    head_dim = getattr(text, "head_dim", None) or text.hidden_size // heads
    q_out = _linear_out(module, profile.field_name("q_proj"))
    if q_out is not None and q_out != heads * head_dim:
        raise InfercastError(f"{type(module).__name__}: q_proj is {q_out} wide, config says {heads} x {head_dim}")
    return SimGQAAttention(
        ctx, hidden_size=text.hidden_size, num_heads=heads, num_kv_heads=getattr(text, "num_key_value_heads", heads) or heads,
        head_dim=head_dim, qk_norm=hasattr(module, "q_norm"),
    )


def build(config: Any, profile: ModelProfile, ctx: SimContext, manager: AdapterManager) -> BuiltModel:
    """Config (phase-1 patched) -> transformers model on meta -> one rank's simulator model."""
    hf = hf_language_model(config, profile, manager)
    return convert(hf, config, profile, ctx)
