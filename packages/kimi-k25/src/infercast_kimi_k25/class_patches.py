"""Phase-2 patches: let Kimi-K2.5's model classes run on the meta device and be traced.

Two code paths exist: transformers' native ``kimi_k25`` (>= 5.13, DeepSeek-V3 text classes)
and the checkpoint's remote code (``KimiK25ForConditionalGeneration`` with MoonViT, written
for transformers 4.x). :func:`native_patches` covers the first, :func:`remote_patches` the
second when the config came from remote code. Every patch is a
:class:`~infercast_adapters.Patch` gated on model_type ``kimi_k25``, applied and undone by
:func:`infercast_adapters.patched`.

The replacements, one problem each:

* the VL forward takes the simulator's extra keyword arguments and maps ``image_grid_thw``
  to and from ``grid_thws`` (:func:`accept_extra_kwargs`);
* merging image features into token embeddings works on meta tensors, no ``.item()``
  (:func:`placeholder_mask_any_device`, :func:`merge_image_features`);
* the vision encoder's missing ``use_deterministic_attn`` attribute, and an attention that
  works on meta and never builds an (n x n) score matrix (:func:`varlen_sdpa`);
* the native experts dispatch the router's real choice with static shapes (each token's
  experts gathered by index, two batched GEMMs) and RoPE is computed from position ids with a
  host copy of ``inv_freq`` (:func:`infercast_adapters.traceable.traceable_patches`): the text
  model exports as one static graph with the numbers of the eager model (``infercast export``);
* the remote code's MoE becomes static and balanced (:func:`balanced_moe_forward`): its router
  reads data on the host, so routing is replaced by a fixed balanced assignment; the real
  routing semantics are the simulator's MoE layer's job;
* MLA given only ``position_ids`` computes its own (cos, sin) (:func:`mla_with_position_ids`);
* decoder layers accept attention modules returning 2 or 3 values (:func:`decoder_layer_forward`);
* the patch embedding takes flat 2-D patches, as a linear projection equal to its Conv2d
  (:func:`flat_patch_embed`).
"""

from __future__ import annotations

import functools
import inspect
import sys
from types import ModuleType
from typing import Any, Callable

import torch
import torch.nn.functional as F
from infercast_adapters import Patch
from infercast_adapters.traceable import traceable_patches

MODEL_TYPE = "kimi_k25"

SIMULATOR_KWARGS = ("grid_thws", "image_grid_thw", "num_images", "image_size")
"""Keyword arguments a simulator's input generator may pass to the VL forward."""


# -- the VL forward --------------------------------------------------------------------------


def accept_extra_kwargs(forward: Callable, grid_name: str) -> Callable:
    """Wrap a VL ``forward`` so it accepts both grid spellings and drops keyword arguments it
    has no parameter for (instead of failing deep inside). ``grid_name`` is the spelling this
    forward takes: ``image_grid_thw`` (native) or ``grid_thws`` (remote code)."""
    params = inspect.signature(forward).parameters
    takes_var_kwargs = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())
    other = "grid_thws" if grid_name == "image_grid_thw" else "image_grid_thw"

    @functools.wraps(forward)
    def wrapper(self, *args, **kwargs):
        if other in kwargs:
            value = kwargs.pop(other)
            if kwargs.get(grid_name) is None:
                kwargs[grid_name] = value
        for name in list(kwargs):
            if name in SIMULATOR_KWARGS and name != grid_name and name not in params:
                kwargs.pop(name)
            elif not takes_var_kwargs and name not in params:
                kwargs.pop(name)
        return forward(self, *args, **kwargs)

    wrapper.__infercast_wraps__ = forward
    return wrapper


def placeholder_mask_any_device(self, input_ids, inputs_embeds, image_features=None, video_features=None):
    """``get_placeholder_mask`` without the data-dependent count check on meta tensors, where
    the count is unknown (on real tensors the check still runs and names both counts)."""
    image_token = self.config.image_token_id
    video_token = getattr(self.config, "video_token_id", None)
    if input_ids is None:
        raise ValueError("the simulator passes input_ids; inputs_embeds-only calls are not supported while patched")
    image_mask = input_ids == image_token
    video_mask = input_ids == video_token if video_token is not None else torch.zeros_like(image_mask)
    hidden = inputs_embeds.shape[-1]
    for mask, features, kind in ((image_mask, image_features, "image"), (video_mask, video_features, "video")):
        if features is not None and mask.device.type != "meta":
            count = int(mask.sum())
            if count * hidden != features.numel():
                raise ValueError(f"{kind} features and {kind} tokens do not match: {count} tokens, "
                                 f"{features.numel() // hidden} feature rows")
    return image_mask.unsqueeze(-1).to(inputs_embeds.device), video_mask.unsqueeze(-1).to(inputs_embeds.device)


def merge_image_features(self, image_features, inputs_embeds, input_ids, attention_mask=None, labels=None, **_):
    """The remote code's merge reads token counts with ``.item()``; scatter the image rows into
    the placeholder positions with a mask instead (same result, works on meta)."""
    features = torch.cat(list(image_features), dim=0) if isinstance(image_features, (list, tuple)) else image_features
    features = features.reshape(-1, inputs_embeds.shape[-1]).to(inputs_embeds.dtype)
    mask = (input_ids == self.config.media_placeholder_token_id).unsqueeze(-1)
    merged = inputs_embeds.masked_scatter(mask, features)
    position_ids = None
    if attention_mask is not None:
        position_ids = (attention_mask.long().cumsum(-1) - 1).clamp(min=0)
    return merged, attention_mask, labels, position_ids


# -- vision encoder --------------------------------------------------------------------------


def varlen_sdpa(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, cu_seqlens: Any) -> torch.Tensor:
    """Non-causal attention within each image of a packed sequence: q, k, v are
    ``[total, heads, head_dim]``, ``cu_seqlens`` the host-side cumulative lengths. Each image
    goes through ``scaled_dot_product_attention`` on its own, so no (total x total) mask and,
    with a fused backend, no (n x n) score matrix is built. Returns ``[total, heads * head_dim]``."""
    bounds = cu_seqlens.tolist() if isinstance(cu_seqlens, torch.Tensor) else list(cu_seqlens)
    if bounds and bounds[0] != 0:
        bounds = [0, *bounds]
    outputs = []
    for start, end in zip(bounds[:-1], bounds[1:]):
        qi, ki, vi = (t[start:end].transpose(0, 1).unsqueeze(0) for t in (q, k, v))
        outputs.append(F.scaled_dot_product_attention(qi, ki, vi).squeeze(0).transpose(0, 1))
    out = torch.cat(outputs, dim=0) if outputs else q.new_empty(0, *q.shape[1:])
    return out.reshape(out.shape[0], -1)


def _host_cu_seqlens(cu_seqlens: Any) -> Any:
    if isinstance(cu_seqlens, torch.Tensor) and cu_seqlens.device.type == "meta":
        raise ValueError(
            "vision attention got cu_seqlens on the meta device; pass grid_thw / grid_thws as a CPU tensor "
            "(the grid is metadata, only pixel values go on meta)"
        )
    return cu_seqlens


def native_vision_attention_forward(self, hidden_states, cu_seqlens, position_embeddings=None, max_seqlen=None, **kwargs):
    """``Kimi_K25VisionAttention.forward`` with :func:`varlen_sdpa` in place of the per-chunk
    eager attention (which builds each image's full score matrix)."""
    module = sys.modules[type(self).__module__]
    seq = hidden_states.shape[0]
    q = self.q_proj(hidden_states).reshape(1, seq, -1, self.head_dim)
    k = self.k_proj(hidden_states).reshape(1, seq, -1, self.head_dim)
    v = self.v_proj(hidden_states).reshape(1, seq, -1, self.head_dim)
    cos, sin = position_embeddings
    q, k = module.apply_rotary_pos_emb_vision(q, k, cos, sin)
    out = varlen_sdpa(q[0], k[0], v[0], _host_cu_seqlens(cu_seqlens))
    return self.proj(out)


def host_metadata_vision_forward(forward: Callable) -> Callable:
    """Wrap the native vision model's forward: position ids, position-embedding gather
    indices, frame and merge indices are computed from ``grid_thw`` on the host and moved to
    the activations' device (meta in a simulation), where the original would mix host and
    meta tensors; ``cu_seqlens`` stay on the host for :func:`varlen_sdpa`."""
    from transformers import vision_utils

    @functools.wraps(forward)
    def wrapper(self, pixel_values, grid_thw, **kwargs):
        module = sys.modules[type(self).__module__]
        device = pixel_values.device
        grid = grid_thw.cpu() if isinstance(grid_thw, torch.Tensor) else torch.as_tensor(grid_thw)
        if device.type == "meta":
            pos = self.patch_embed.pos_emb
            indices, weights = vision_utils.get_vision_interpolation_indices_and_weights(
                grid, pos.num_grid_per_side, mode=pos.interpolation_mode, align_corners=pos.interpolation_align_corners)
            kwargs.setdefault("interp_indices", indices.to(device))
            kwargs.setdefault("interp_weights", weights.to(device))
            kwargs.setdefault("frame_index", module.get_vision_frame_index(grid).to(device))
            kwargs.setdefault("position_ids", vision_utils.get_vision_position_ids(grid, spatial_merge_size=1).to(device))
            kwargs.setdefault("temporal_merge_index",
                              _on_device(module.get_vision_temporal_merge_index(grid, *self.merge_kernel_size), device))
        return forward(self, pixel_values, grid, **kwargs)

    wrapper.__infercast_wraps__ = forward
    return wrapper


def _on_device(value: Any, device: torch.device) -> Any:
    """``value`` with its tensors on ``device``: a tensor, or a tuple of tensors and counts
    (transformers 5.24 returns the temporal merge index as (index, frame weights, tokens))."""
    if isinstance(value, tuple):
        return tuple(_on_device(item, device) for item in value)
    return value.to(device) if isinstance(value, torch.Tensor) else value


def remote_attention_qkvpacked(self, x, cu_seqlens, max_seqlen=None, rope_freqs_cis=None):
    """MoonViT's ``attention_qkvpacked`` with :func:`varlen_sdpa` in place of the flash-attn
    kernel (absent here) or the eager path (a dense (total x total) mask)."""
    module = sys.modules[type(self).__module__]
    qkv = self.wqkv(x).view(*x.shape[:-1], 3, self.num_heads, self.hidden_size_per_attention_head)
    q, k, v = torch.unbind(qkv, dim=-3)
    if rope_freqs_cis is not None:
        q, k = module.apply_rope(q, k, rope_freqs_cis)
    return self.wo(varlen_sdpa(q, k, v, _host_cu_seqlens(cu_seqlens)))


def remote_encoder_forward(self, hidden_states, grid_thws, grid_thws_list=None):
    """MoonViT3dEncoder's forward with ``cu_seqlens`` kept on the host next to ``grid_thws``
    (the original moves them to the activations' device, which is meta in a simulation)."""
    grid_list = grid_thws_list if grid_thws_list is not None else grid_thws.tolist()
    freqs = self.rope_2d.get_freqs_cis(grid_thws_list=grid_list, device=hidden_states.device)
    lengths = [int(t) * int(h) * int(w) for t, h, w in grid_list]
    cu_seqlens = torch.tensor([0, *lengths]).cumsum(0, dtype=torch.int32)
    for block in self.blocks:
        hidden_states = block(hidden_states, cu_seqlens, max(lengths), rope_freqs_cis=freqs)
    return self.final_layernorm(hidden_states)


def flat_patch_embed(forward: Callable) -> Callable:
    """Wrap a patch embedding so ``[num_patches, channels * patch * patch]`` input works: the
    Conv2d with stride = kernel is then exactly ``x @ weight.flatten(1).T + bias``."""

    @functools.wraps(forward)
    def wrapper(self, pixel_values, *args, **kwargs):
        if pixel_values.dim() == 2:
            conv = self.proj
            expected = conv.weight[0].numel()
            if pixel_values.shape[-1] != expected:
                raise ValueError(f"flat patches must be {expected} wide (channels x patch x patch), "
                                 f"got {pixel_values.shape[-1]}")
            channels, kh, kw = conv.weight.shape[1:]
            pixel_values = pixel_values.reshape(-1, channels, kh, kw)
        return forward(self, pixel_values, *args, **kwargs)

    wrapper.__infercast_wraps__ = forward
    return wrapper


# -- language model --------------------------------------------------------------------------


def balanced_assignment(num_tokens: int, top_k: int, num_experts: int) -> torch.Tensor:
    """Token t's j-th expert is ``(t * top_k + j) mod num_experts``: every expert gets the same
    number of assignments (within one), and the assignment never depends on data."""
    slots = torch.arange(num_tokens * top_k)
    return (slots % num_experts).view(num_tokens, top_k)


def balanced_moe_forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
    """A DeepSeek-V3 MoE forward with static, balanced routing: the router still runs (its
    GEMM is real work), its choice is replaced by :func:`balanced_assignment` with equal
    weights, and dispatch uses index tensors built from shapes alone. Works for experts stored
    as 3-D tensors (native) or as a ``ModuleList`` (remote code)."""
    shape = hidden_states.shape
    x = hidden_states.reshape(-1, shape[-1])
    self.gate(hidden_states)  # the router GEMM runs; routing semantics live in the simulator's MoE layer
    experts = self.experts
    num_experts = getattr(experts, "num_experts", None) or len(experts)
    top_k = getattr(self, "num_experts_per_tok", None) or self.config.num_experts_per_tok
    tokens = x.shape[0]
    slots = torch.arange(tokens * top_k)  # slot t*top_k + j goes to expert slot % num_experts
    out = torch.zeros_like(x)
    for e in range(min(num_experts, tokens * top_k)):
        token_idx = (slots[e::num_experts] // top_k).to(x.device)
        rows = x.index_select(0, token_idx)
        if isinstance(experts, torch.nn.ModuleList):
            y = experts[e](rows)
        else:
            gate, up = F.linear(rows, experts.gate_up_proj[e]).chunk(2, dim=-1)
            y = F.linear(experts.act_fn(gate) * up, experts.down_proj[e])
        out = out.index_add(0, token_idx, (y / top_k).to(out.dtype))
    out = out.view(shape)
    shared = getattr(self, "shared_experts", None)
    return out + shared(hidden_states) if shared is not None else out


def mla_with_position_ids(forward: Callable, rotary_class: type) -> Callable:
    """Wrap the native MLA forward: given ``position_ids`` but no ``position_embeddings`` (the
    model normally computes them once), compute (cos, sin) with the model's own rotary class."""

    @functools.wraps(forward)
    def wrapper(self, hidden_states, position_embeddings=None, attention_mask=None, *args, **kwargs):
        if position_embeddings is None:
            position_ids = kwargs.get("position_ids")
            if position_ids is None:
                seq = hidden_states.shape[1]
                position_ids = torch.arange(seq, device="cpu").unsqueeze(0).to(hidden_states.device)
            rotary = self.__dict__.get("_infercast_rotary")
            if rotary is None:
                rotary = rotary_class(self.config).to(hidden_states.device)
                self.__dict__["_infercast_rotary"] = rotary
            position_embeddings = rotary(hidden_states, position_ids)
        return forward(self, hidden_states, position_embeddings, attention_mask, *args, **kwargs)

    wrapper.__infercast_wraps__ = forward
    return wrapper


def decoder_layer_forward(self, hidden_states, attention_mask=None, position_ids=None, past_key_values=None,
                          use_cache=False, position_embeddings=None, **kwargs):
    """A DeepSeek-V3 decoder layer that takes the attention's first output whether the module
    returns (out, weights) as transformers 5 does or (out, weights, cache) as 4.x code does."""
    residual = hidden_states
    hidden_states = self.input_layernorm(hidden_states)
    attn_kwargs = dict(hidden_states=hidden_states, attention_mask=attention_mask, position_ids=position_ids,
                       use_cache=use_cache, **kwargs)
    if position_embeddings is not None:
        attn_kwargs["position_embeddings"] = position_embeddings
    if past_key_values is not None:
        attn_kwargs["past_key_values"] = past_key_values
    result = self.self_attn(**attn_kwargs)
    if isinstance(result, tuple):
        if len(result) not in (2, 3):
            raise ValueError(f"{type(self.self_attn).__name__} returned {len(result)} values; expected 2 or 3")
        result = result[0]
    hidden_states = residual + result
    residual = hidden_states
    hidden_states = self.mlp(self.post_attention_layernorm(hidden_states))
    return residual + hidden_states


# -- patch lists -----------------------------------------------------------------------------


def _patch(owner: Any, attribute: str, replacement: Any, reason: str) -> Patch:
    return Patch(owner, attribute, replacement, MODEL_TYPE, reason)


def native_patches() -> list[Patch]:
    """Patches for transformers' native ``kimi_k25`` and the DeepSeek-V3 text classes it uses."""
    from transformers.models.deepseek_v3 import modeling_deepseek_v3 as ds
    from transformers.models.kimi_k25 import modeling_kimi_k25 as kimi

    return [
        _patch(kimi.Kimi_K25ForConditionalGeneration, "forward",
               accept_extra_kwargs(kimi.Kimi_K25ForConditionalGeneration.forward, "image_grid_thw"),
               "VL forward takes the simulator's kwargs and grid_thws"),
        _patch(kimi.Kimi_K25Model, "forward", accept_extra_kwargs(kimi.Kimi_K25Model.forward, "image_grid_thw"),
               "VL forward takes the simulator's kwargs and grid_thws"),
        _patch(kimi.Kimi_K25Model, "get_placeholder_mask", placeholder_mask_any_device,
               "image merge works on meta (no data-dependent count check)"),
        _patch(kimi.Kimi_K25VisionEncoderLayer, "use_deterministic_attn", False,
               "vision encoder layers lack use_deterministic_attn"),
        _patch(kimi.Kimi_K25VisionAttention, "forward", native_vision_attention_forward,
               "vision attention on meta without an (n x n) matrix"),
        _patch(kimi.Kimi_K25VisionModel, "forward", host_metadata_vision_forward(kimi.Kimi_K25VisionModel.forward),
               "vision metadata from the host grid, on the activations' device"),
        _patch(kimi.Kimi_K25VisionPatchEmbed, "forward", flat_patch_embed(kimi.Kimi_K25VisionPatchEmbed.forward),
               "patch embedding takes flat 2-D patches"),
        _patch(ds.DeepseekV3Attention, "forward", mla_with_position_ids(ds.DeepseekV3Attention.forward,
                                                                        ds.DeepseekV3RotaryEmbedding),
               "MLA computes RoPE from position_ids"),
        _patch(ds.DeepseekV3DecoderLayer, "forward", decoder_layer_forward,
               "decoder layer accepts attention returning 2 or 3 values"),
        # the real router's choice, dispatched with static shapes; RoPE from position ids with a
        # host inv_freq: what makes the text model one static graph (``infercast export``)
        *traceable_patches(MODEL_TYPE, experts=ds.DeepseekV3Experts, rotary=ds.DeepseekV3RotaryEmbedding),
    ]


def remote_modules(config: Any) -> tuple[ModuleType, ModuleType | None] | None:
    """The remote-code modeling module for ``config`` (a sibling of its configuration module)
    and the DeepSeek text module it imports, or None for a native config."""
    config_module = type(config).__module__
    if config_module.split(".")[0] == "transformers":
        return None
    package = config_module.rpartition(".")[0]
    name = f"{package}.modeling_kimi_k25" if package else "modeling_kimi_k25"
    modeling = sys.modules.get(name)
    if modeling is None:
        import importlib

        try:
            modeling = importlib.import_module(name)
        except ImportError:
            return None
    causal = getattr(modeling, "DeepseekV3ForCausalLM", None)
    text = sys.modules.get(causal.__module__) if causal is not None else None
    return modeling, text


def remote_patches(modeling: ModuleType, text: ModuleType | None) -> list[Patch]:
    """The same fixes for the checkpoint's remote code (classes found by their published names)."""
    patches = []
    vl = getattr(modeling, "KimiK25ForConditionalGeneration", None)
    if vl is not None:
        patches.append(_patch(vl, "forward", accept_extra_kwargs(vl.forward, "grid_thws"),
                              "VL forward takes the simulator's kwargs and image_grid_thw"))
        if hasattr(vl, "_merge_input_ids_with_image_features"):
            patches.append(_patch(vl, "_merge_input_ids_with_image_features", merge_image_features,
                                  "image merge without .item()"))
    layer = getattr(modeling, "MoonViTEncoderLayer", None)
    if layer is not None:
        patches.append(_patch(layer, "use_deterministic_attn", False, "vision encoder layers lack use_deterministic_attn"))
        patches.append(_patch(layer, "attention_qkvpacked", remote_attention_qkvpacked,
                              "vision attention on meta without flash-attn or an (n x n) mask"))
    encoder = getattr(modeling, "MoonViT3dEncoder", None)
    if encoder is not None:
        patches.append(_patch(encoder, "forward", remote_encoder_forward, "cu_seqlens stay on the host"))
    embed = getattr(modeling, "MoonVision3dPatchEmbed", None)
    if embed is not None:
        patches.append(_patch(embed, "forward", flat_patch_embed(embed.forward), "patch embedding takes flat 2-D patches"))
    if text is not None:
        if hasattr(text, "DeepseekV3MoE"):
            patches.append(_patch(text.DeepseekV3MoE, "forward", balanced_moe_forward, "static balanced MoE routing"))
        if hasattr(text, "DeepseekV3DecoderLayer"):
            patches.append(_patch(text.DeepseekV3DecoderLayer, "forward", decoder_layer_forward,
                                  "decoder layer accepts attention returning 2 or 3 values"))
    return patches


def class_patches(config: Any) -> list[Patch]:
    """Every phase-2 patch for a ``kimi_k25`` config: native ones always, remote-code ones
    when the config's class comes from remote code."""
    patches = native_patches()
    remote = remote_modules(config)
    if remote is not None:
        patches += remote_patches(*remote)
    return patches
