"""Check a resolved config before anything is built: every problem named with its field.

Values must have the right type and be positive; shapes must divide (heads by KV heads,
experts by groups, top-k at most the expert count); sizes must be within sane bounds. All
problems are reported at once, one line each, naming the model reference (the file, for a
local config) and the field.
"""

from __future__ import annotations

from typing import Any

from infercast_adapters import ConfigError

MAX_LAYERS = 10_000
MAX_VOCAB = 10_000_000
MAX_WIDTH = 1_000_000


def _int(text: Any, name: str, problems: list[str], *, minimum: int = 1, maximum: int | None = None,
         required: bool = True) -> int | None:
    value = getattr(text, name, None)
    if value is None:
        if required:
            problems.append(f"{name} is missing")
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        problems.append(f"{name} must be a whole number, got {value!r}")
        return None
    if value < minimum or (maximum is not None and value > maximum):
        problems.append(f"{name} must be between {minimum} and {maximum}, got {value}" if maximum is not None else
                        f"{name} must be at least {minimum}, got {value}")
        return None
    return value


def check_config(model_ref: str, config: Any, text: Any, profile: Any) -> None:
    """Raise :class:`ConfigError` listing every problem of ``text`` (the language-model config)."""
    problems: list[str] = []
    hidden = _int(text, "hidden_size", problems, maximum=MAX_WIDTH)
    _int(text, "num_hidden_layers", problems, maximum=MAX_LAYERS)
    _int(text, "vocab_size", problems, maximum=MAX_VOCAB)
    heads = _int(text, "num_attention_heads", problems, maximum=MAX_WIDTH)
    _int(text, "max_position_embeddings", problems, required=False)
    if profile.attention_kind == "mla":
        for name in ("kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim"):
            _int(text, name, problems, maximum=MAX_WIDTH)
        _int(text, "q_lora_rank", problems, maximum=MAX_WIDTH, required=False)
    elif profile.attention_kind == "gqa":
        kv = _int(text, "num_key_value_heads", problems, maximum=MAX_WIDTH, required=False)
        if heads and kv and heads % kv:
            problems.append(f"num_attention_heads {heads} is not a multiple of num_key_value_heads {kv}")
        head_dim = _int(text, "head_dim", problems, maximum=MAX_WIDTH, required=False)
        if heads and hidden and head_dim is None and getattr(text, "head_dim", None) is None and hidden % heads:
            problems.append(f"hidden_size {hidden} is not a multiple of num_attention_heads {heads} (and no head_dim)")
    if profile.is_moe:
        experts = _int(text, profile.routed_experts_key, problems, maximum=MAX_WIDTH)
        top_k = _int(text, "num_experts_per_tok", problems, maximum=MAX_WIDTH)
        if experts and top_k and top_k > experts:
            problems.append(f"num_experts_per_tok {top_k} exceeds the {experts} experts ({profile.routed_experts_key})")
        groups = _int(text, "n_group", problems, required=False)
        if experts and groups and experts % groups:
            problems.append(f"n_group {groups} does not divide the {experts} experts")
        topk_group = _int(text, "topk_group", problems, required=False)
        if groups and topk_group and topk_group > groups:
            problems.append(f"topk_group {topk_group} exceeds n_group {groups}")
        _int(text, "moe_intermediate_size", problems, maximum=MAX_WIDTH, required=False)
    _int(text, "intermediate_size", problems, maximum=MAX_WIDTH, required=not profile.is_moe)
    if problems:
        raise ConfigError(f"{model_ref} ({getattr(config, 'model_type', '?')}): the config cannot describe a model:\n"
                          + "\n".join(f"  - {p}" for p in problems))
