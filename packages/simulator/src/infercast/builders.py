"""The simulator's own layer builders, registered like any plugin's.

:mod:`infercast.builtin_models` registers these through ``infercast_register_sim_layers``:
multi-head / grouped-query attention (``gqa``) and multi-head latent attention (``mla``),
dense and MoE MLPs, the vocabulary-parallel embedding and head, and the default layer plan
(the profile's attention kind in every layer; MoE where the config's conventions put routed
experts). Builders read only the config, never a built transformers model. To add a family
with its own layers, register builders for new keys from an adapter (docs/hooks.md).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from infercast_adapters import ConfigError, ModelProfile
from infercast_adapters.arch import detect_moe_architecture, layer_window, moe_layer_mask

if TYPE_CHECKING:  # the layers import torch: registering these builders (every plugin listing) must not
    from infercast.layers import (
        SimContext,
        SimEmbedding,
        SimGQAAttention,
        SimLMHead,
        SimMLAAttention,
        SimMLP,
        SimMoE,
    )


def default_plan(config: Any, profile: ModelProfile) -> list[tuple[str, str]]:
    """``(attention kind, MLP kind)`` per decoder layer."""
    moe = moe_layer_mask(config) if profile.is_moe else [False] * int(config.num_hidden_layers)
    return [(profile.attention_kind, "moe" if is_moe else "dense") for is_moe in moe]


def gqa(ctx: SimContext, config: Any, index: int, profile: ModelProfile) -> SimGQAAttention:
    from infercast.layers import SimGQAAttention

    heads = config.num_attention_heads
    return SimGQAAttention(
        ctx, hidden_size=config.hidden_size, num_heads=heads,
        num_kv_heads=getattr(config, "num_key_value_heads", None) or heads,
        head_dim=getattr(config, "head_dim", None) or config.hidden_size // heads,
        qk_norm=profile.attention_qk_norm or bool(getattr(config, "use_qk_norm", False)),  # GLM-4.x: per config
        qk_norm_across_heads=profile.attention_qk_norm_across_heads, window=layer_window(config, index),
    )


def mla(ctx: SimContext, config: Any, index: int, profile: ModelProfile) -> SimMLAAttention:
    from infercast.layers import SimMLAAttention

    missing = [k for k in ("kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim")
               if not getattr(config, k, None)]
    if missing:
        raise ConfigError(f"{profile.model_type}: MLA attention needs {', '.join(missing)} in the config")
    return SimMLAAttention(
        ctx, hidden_size=config.hidden_size, num_heads=config.num_attention_heads,
        q_lora_rank=getattr(config, "q_lora_rank", None), kv_lora_rank=config.kv_lora_rank,
        qk_nope_head_dim=config.qk_nope_head_dim, qk_rope_head_dim=config.qk_rope_head_dim,
        v_head_dim=config.v_head_dim,
    )


def dense_mlp(ctx: SimContext, config: Any, index: int, profile: ModelProfile) -> SimMLP:
    from infercast.layers import SimMLP

    return SimMLP(config.hidden_size, config.intermediate_size, ctx.quant.dense, ctx.parallel.tp, ctx)


def moe(ctx: SimContext, config: Any, index: int, profile: ModelProfile) -> SimMoE:
    from infercast.layers import MoEShape, SimMoE

    arch = detect_moe_architecture(config)
    return SimMoE(ctx, MoEShape(arch.num_experts, arch.top_k, config.hidden_size, arch.expert_intermediate_size,
                                arch.shared_expert_intermediate_size, arch.router,
                                getattr(config, "n_group", None), getattr(config, "topk_group", None),
                                arch.family))


def embedding(ctx: SimContext, config: Any, profile: ModelProfile) -> SimEmbedding:
    from infercast.layers import SimEmbedding

    return SimEmbedding(ctx, config.vocab_size, config.hidden_size)


def head(ctx: SimContext, config: Any, profile: ModelProfile) -> SimLMHead:
    from infercast.layers import SimLMHead

    return SimLMHead(ctx, config.vocab_size, config.hidden_size)


BUILTIN = (
    ("plan", "default", default_plan),
    ("attention", "gqa", gqa),
    ("attention", "mla", mla),
    ("mlp", "dense", dense_mlp),
    ("mlp", "moe", moe),
    ("embedding", "default", embedding),
    ("head", "default", head),
)
