"""Recognise MoE architectures from a config, and find the parts of a built model.

In the spirit of kt-kernel's ``arch.py``: one table of families, each naming the config
keys that carry its expert counts and sizes, so callers ask for numbers, not for field names.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from infercast_adapters.errors import UnsupportedArchitectureError


@dataclass(frozen=True)
class MoEArchitecture:
    """The MoE shape of a model, read from its config."""

    family: str
    model_type: str
    num_experts: int
    top_k: int
    expert_intermediate_size: int
    dense_intermediate_size: int | None
    """Intermediate size of the dense MLP layers (None when every layer is MoE)."""
    num_shared_experts: int
    shared_expert_intermediate_size: int
    """Total intermediate width of the shared expert(s); 0 when there are none."""
    router: str
    """``softmax_topk``, ``sigmoid_topk``, ``sigmoid_grouped_topk`` or ``softmax_grouped_topk``."""
    first_dense_layers: int


@dataclass(frozen=True)
class _Family:
    name: str
    model_types: tuple[str, ...]
    experts_key: str
    expert_size_key: str
    dense_size_key: str | None
    shared_count_key: str | None
    shared_size_key: str | None  # total shared width; when None: count x expert size
    first_dense_key: str | None


_FAMILIES = (
    _Family("deepseek", ("deepseek_v2", "deepseek_v3", "kimi_k2"), "n_routed_experts", "moe_intermediate_size",
            "intermediate_size", "n_shared_experts", None, "first_k_dense_replace"),
    _Family("glm4_moe", ("glm4_moe",), "n_routed_experts", "moe_intermediate_size", "intermediate_size",
            "n_shared_experts", None, "first_k_dense_replace"),
    _Family("qwen2_moe", ("qwen2_moe",), "num_experts", "moe_intermediate_size", "intermediate_size", None,
            "shared_expert_intermediate_size", None),
    _Family("qwen3_moe", ("qwen3_moe",), "num_experts", "moe_intermediate_size", "intermediate_size", None, None, None),
    _Family("qwen3_5_moe", ("qwen3_5_moe", "qwen3_5_moe_text"), "num_experts", "moe_intermediate_size", None, None,
            "shared_expert_intermediate_size", None),
    _Family("mixtral", ("mixtral",), "num_local_experts", "intermediate_size", None, None, None, None),
    _Family("minimax_m2", ("minimax_m2",), "num_local_experts", "intermediate_size", None, None, None, None),
    _Family("gpt_oss", ("gpt_oss",), "num_local_experts", "intermediate_size", None, None, None, None),
)

SUPPORTED_MOE_MODEL_TYPES = tuple(t for f in _FAMILIES for t in f.model_types)


def text_config_of(config: Any) -> Any:
    """The language-model config: ``config.text_config`` when present, else ``config``."""
    text = getattr(config, "text_config", None)
    return text if text is not None else config


def _router(family: _Family, config: Any) -> str:
    if family.name in ("deepseek", "glm4_moe"):
        scoring = getattr(config, "scoring_func", None)
        topk_method = getattr(config, "topk_method", None)
        if scoring == "sigmoid" or topk_method == "noaux_tc" or config.model_type in ("deepseek_v3", "kimi_k2", "glm4_moe"):
            return "sigmoid_grouped_topk"
        return "softmax_grouped_topk"
    if family.name == "minimax_m2":
        return "sigmoid_topk"
    return "softmax_topk"


def detect_moe_architecture(config: Any) -> MoEArchitecture:
    """Expert count, top-k, sizes, shared experts and router kind of an MoE config.

    Looks at ``config`` and then at ``config.text_config``.
    :raises UnsupportedArchitectureError: naming the model_type and the supported ones.
    """
    for candidate in (config, getattr(config, "text_config", None)):
        if candidate is None:
            continue
        model_type = getattr(candidate, "model_type", None)
        for family in _FAMILIES:
            if model_type in family.model_types and getattr(candidate, family.experts_key, None):
                return _read(family, candidate)
    model_type = getattr(config, "model_type", None)
    raise UnsupportedArchitectureError(
        f"model_type {model_type!r} is not a supported MoE architecture. "
        f"Supported: {', '.join(SUPPORTED_MOE_MODEL_TYPES)}."
    )


def _sliding(config: Any) -> tuple[int, list[bool]]:
    """The window and, per decoder layer, whether it slides: ``layer_types`` where the config
    lists them (gpt-oss; transformers derives them for Qwen2), else transformers' own rules on
    the plain fields: no layer slides when ``use_sliding_window`` is off, the layers from
    ``max_window_layers`` on slide where it is given (Qwen2), every layer otherwise (Mistral)."""
    window = int(getattr(config, "sliding_window", None) or 0)
    count = int(config.num_hidden_layers)
    kinds = getattr(config, "layer_types", None)
    if not window:
        return 0, [False] * count
    if kinds:
        return window, [kind == "sliding_attention" for kind in kinds]
    if not getattr(config, "use_sliding_window", True):
        return window, [False] * count
    first = getattr(config, "max_window_layers", None)
    return window, [first is None or i >= first for i in range(count)]


def sliding_window_layers(config: Any) -> tuple[int, int]:
    """``(window, layers)``: how many decoder layers of ``config`` (a language-model config)
    attend only to the last ``window`` tokens (:func:`_sliding`); ``(0, 0)`` where every layer
    attends to the whole context."""
    window, slides = _sliding(config)
    layers = sum(slides)
    return (window, layers) if layers else (0, 0)


def layer_window(config: Any, index: int) -> int:
    """The sliding window decoder layer ``index`` of ``config`` attends within (tokens); 0 where
    it attends to the whole context."""
    window, slides = _sliding(config)
    return window if slides[index] else 0


def moe_layer_mask(config: Any) -> list[bool]:
    """Which decoder layers of ``config`` (a language-model config) have a routed-expert MLP,
    by the conventions the families' transformers code follows: DeepSeek-style
    ``first_k_dense_replace`` dense layers first (then every ``moe_layer_freq``-th), Qwen-style
    ``mlp_only_layers`` and ``decoder_sparse_step``; every layer for the others."""
    layers = int(config.num_hidden_layers)
    arch = detect_moe_architecture(config)
    first_dense = arch.first_dense_layers
    freq = int(getattr(config, "moe_layer_freq", 1) or 1)
    step = int(getattr(config, "decoder_sparse_step", 1) or 1)
    dense_only = set(getattr(config, "mlp_only_layers", None) or ())
    return [i >= first_dense and i % freq == 0 and i not in dense_only and (i + 1) % step == 0
            for i in range(layers)]


def _read(family: _Family, config: Any) -> MoEArchitecture:
    if not getattr(config, "num_experts_per_tok", None):
        raise UnsupportedArchitectureError(
            f"{config.model_type} config has {family.experts_key} but no num_experts_per_tok (top-k); set it"
        )
    expert_size = int(getattr(config, family.expert_size_key))
    shared_count = int(getattr(config, family.shared_count_key) or 0) if family.shared_count_key else 0
    if family.shared_size_key:
        shared_size = int(getattr(config, family.shared_size_key) or 0)
        shared_count = 1 if shared_size else 0
    else:
        shared_size = shared_count * expert_size
    dense = int(getattr(config, family.dense_size_key)) if family.dense_size_key else None
    first_dense = int(getattr(config, family.first_dense_key) or 0) if family.first_dense_key else 0
    return MoEArchitecture(
        family=family.name,
        model_type=config.model_type,
        num_experts=int(getattr(config, family.experts_key)),
        top_k=int(config.num_experts_per_tok),
        expert_intermediate_size=expert_size,
        dense_intermediate_size=dense,
        num_shared_experts=shared_count,
        shared_expert_intermediate_size=shared_size,
        router=_router(family, config),
        first_dense_layers=first_dense,
    )


def experts_are_fused(experts: Any) -> bool:
    """True when ``experts`` holds 3-D weight tensors (one per projection, experts stacked),
    False when it is a list of per-expert modules."""
    parameters = getattr(experts, "parameters", None)
    if parameters is None:
        raise TypeError(f"{type(experts).__name__} is not a module")
    if any(getattr(p, "ndim", 0) == 3 for p in parameters(recurse=False)):
        return True
    children = list(experts.children()) if hasattr(experts, "children") else []
    if children and all(hasattr(child, "parameters") for child in children):
        return False
    raise UnsupportedArchitectureError(
        f"{type(experts).__name__}: neither 3-D expert tensors nor a list of expert modules"
    )


