"""Build one rank of a model's engine view from its config, through registered layer builders.

No transformers model is built: the layer plan (which attention and MLP each decoder layer
has) and every simulator layer come from builders the adapters register with
``infercast_register_sim_layers`` (the simulator's own are in :mod:`infercast.builders`), so a
new family is an adapter's work. The model view, the real transformers forward under the
adapters' class patches, belongs to the export path.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import torch
from infercast_adapters import InfercastError, ModelProfile
from infercast_adapters.arch import text_config_of
from infercast_adapters.manager import AdapterManager
from torch import nn

from infercast.layers import SimContext, SimDecoderLayer, SimEmbedding, SimLMHead, SimModule
from infercast.vision import SimVisionTower


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


@dataclass
class BuiltModel:
    sim: SimModel
    param_count: int
    """Parameters of the whole model (embedding, lm_head, any vision tower and projector)."""
    profile: ModelProfile
    text_config: Any
    vision_param_count: int = 0
    """Of which the vision tower and projector."""
    architecture: str = ""
    """``config.architectures[0]``, the model class an engine loads (empty when the config has none)."""


class Builders:
    """The registered builders, looked up by role and key with errors that say what exists."""

    def __init__(self, manager: AdapterManager) -> None:
        self._builders = manager.sim_layers()

    def find(self, role: str, key: str) -> Callable[..., Any] | None:
        entry = self._builders.get((role, key))
        return entry[0] if entry else None

    def get(self, role: str, key: str, model_type: str) -> Callable[..., Any]:
        builder = self.find(role, key)
        if builder is None:
            known = sorted(k for r, k in self._builders if r == role)
            raise InfercastError(
                f"{model_type}: no simulator {role} builder for {key!r} (registered: {', '.join(known) or 'none'}). "
                f"An adapter adds one with the infercast_register_sim_layers hook (docs/hooks.md)."
            )
        return builder

    def decoder_layer(self, kinds: tuple[str, str], ctx: SimContext, text: Any, index: int,
                      profile: ModelProfile) -> SimDecoderLayer:
        """Decoder layer ``index`` of the (attention kind, MLP kind) ``kinds``, built under ``ctx``
        (on the meta device when the caller is)."""
        attention_kind, mlp_kind = kinds
        attn = self.get("attention", attention_kind, profile.model_type)(ctx=ctx, config=text, index=index,
                                                                         profile=profile)
        mlp = self.get("mlp", mlp_kind, profile.model_type)(ctx=ctx, config=text, index=index, profile=profile)
        return SimDecoderLayer(ctx, attn, mlp, text.hidden_size, index)

    def for_model(self, role: str, model_type: str) -> Callable[..., Any] | None:
        """The builder registered for ``model_type``, else the ``default`` one."""
        return self.find(role, model_type) or self.find(role, "default")


def build(config: Any, profile: ModelProfile, ctx: SimContext, manager: AdapterManager) -> BuiltModel:
    """One rank's simulator model for ``config`` (phase-1 patched), sharded by ``ctx``."""
    builders = Builders(manager)
    text = text_config_of(config)
    model_type = profile.model_type
    plan = builders.for_model("plan", model_type)(config=text, profile=profile)
    if len(plan) != text.num_hidden_layers:
        raise InfercastError(f"{model_type}: the layer plan has {len(plan)} layers, the config "
                             f"{text.num_hidden_layers}")
    hidden = text.hidden_size
    layers = []
    with torch.device("meta"):
        for index, kinds in enumerate(plan):
            layers.append(builders.decoder_layer(kinds, ctx, text, index, profile))
        embed = builders.for_model("embedding", model_type)(ctx=ctx, config=text, profile=profile)
        head = builders.for_model("head", model_type)(ctx=ctx, config=text, profile=profile)
        tied = getattr(text, "tie_word_embeddings", False)
        if tied and isinstance(head, SimLMHead) and isinstance(embed, SimEmbedding):
            head.tie_to(embed)
        tower = None
        vision_builder = builders.find("vision", model_type)
        if profile.has_vision and getattr(config, "vision_config", None) is not None and vision_builder:
            tower = vision_builder(ctx=ctx, config=config, text_hidden=hidden, profile=profile)
            if isinstance(embed, SimEmbedding):
                embed.outside_language_model = True
    sim = SimModel(ctx, embed, layers, head, vision=tower)
    vision_params = tower.total_logical_params() if tower is not None else 0
    return BuiltModel(sim=sim, param_count=sim.total_logical_params(), profile=profile, text_config=text,
                      vision_param_count=vision_params, architecture=architecture_of(config))


def architecture_of(config: Any) -> str:
    """``config.architectures[0]`` (the class an engine loads), or "" when the config has none."""
    names = getattr(config, "architectures", None)
    return names[0] if isinstance(names, (list, tuple)) and names and isinstance(names[0], str) else ""
