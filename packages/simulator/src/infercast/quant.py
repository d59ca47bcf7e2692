"""Quantization of linear layers: the ``--quantize-linear-action`` choices and checkpoint defaults."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from infercast_adapters import InfercastError


@dataclass(frozen=True)
class QuantScheme:
    """How one linear layer's weight is stored and what its GEMM computes in."""

    name: str
    weight_bits: int
    group_size: int | None
    """Weights per scale (None: per-channel or, for 16-bit weights, no scale)."""
    compute_dtype: str
    """Tensor-core dtype of the GEMM: ``bf16``, ``fp8``, ``int8`` or ``fp4`` (where the device
    has FP4 tensor cores; elsewhere FP4 weights are dequantised and run in bf16); ``fp32`` for
    an FP32 GEMM, which runs on the CUDA cores."""
    dynamic_activation: bool = False
    """Activations are quantized per token at run time (an extra small kernel)."""
    scale_bits: int = 16
    block: tuple[int, int] | None = None
    """2-D weight-scale block (FP8 128x128) instead of 1-D groups."""

    @property
    def packed(self) -> bool:
        return self.weight_bits < 8

    @property
    def kernel_dtype(self) -> str:
        """The kernel family engines launch for this scheme, in the kernel tables' names:
        ``bf16``, ``fp8`` (per-channel scales), ``fp8_block``, ``int8`` (W8A8), ``w8a16`` and
        ``w4a16`` (integer weight-only), ``w4a8``, ``mxfp4`` (the device decides whether FP4
        tensor cores run it or it is dequantised to bf16); ``fp32`` for FP32 weights."""
        if self.weight_bits >= 16:
            return "fp32" if self.weight_bits == 32 else "bf16"
        if self.compute_dtype == "fp8":
            return "fp8_block" if self.block else "fp8"
        if self.compute_dtype == "fp4":
            return "mxfp4"
        if self.compute_dtype == "int8":
            return "int8" if self.weight_bits == 8 else f"w{self.weight_bits}a8"
        return f"w{self.weight_bits}a16"


BF16 = QuantScheme("BF16", 16, None, "bf16")
FP32 = QuantScheme("FP32", 32, None, "fp32")
"""An FP32 weight computed in FP32 without tensor cores: the router GEMM some engines run for
some MoE families (:class:`infercast.engines.FP32Router`), priced at the device's FP32 peak times
its bf16 GEMM efficiency (assumed: no table times an FP32 GEMM). Not a ``--quantize-linear-action``."""
SCHEMES: dict[str, QuantScheme] = {
    s.name: s
    for s in (
        BF16,
        QuantScheme("W8A16", 8, None, "bf16"),
        QuantScheme("W8A8_DYNAMIC", 8, None, "int8", dynamic_activation=True),
        QuantScheme("W8A8_STATIC", 8, None, "int8"),
        QuantScheme("W4A8_DYNAMIC", 4, 128, "int8", dynamic_activation=True),
        QuantScheme("W4A16", 4, 128, "bf16"),
        # online FP8 as engines do it for a 16-bit checkpoint (--quantization fp8): per-channel
        # weight scales, per-token dynamic activation scales
        QuantScheme("FP8", 8, None, "fp8", dynamic_activation=True, scale_bits=32),
        # DeepSeek-V3's checkpoint format: 128 x 128 weight blocks, per-token-group activations
        QuantScheme("FP8_BLOCK", 8, None, "fp8", dynamic_activation=True, scale_bits=32, block=(128, 128)),
        QuantScheme("MXFP4", 4, 32, "fp4", scale_bits=8),
    )
}
ACTIONS = tuple(SCHEMES)


def scheme(name: str) -> QuantScheme:
    try:
        return SCHEMES[name.upper()]
    except KeyError:
        raise InfercastError(f"unknown --quantize-linear-action {name!r}. Valid: {', '.join(ACTIONS)}") from None


@dataclass(frozen=True)
class QuantPlan:
    """Which scheme each kind of linear layer gets."""

    routed_experts: QuantScheme
    dense: QuantScheme
    """Attention projections, dense MLPs and shared experts."""
    lm_head: QuantScheme = BF16
    source: str = "default"

    def describe(self) -> str:
        if self.routed_experts == self.dense:
            return f"{self.dense.name} ({self.source})"
        return f"routed experts {self.routed_experts.name}, other linears {self.dense.name} ({self.source})"


def _matches(patterns: list[str], name: str) -> bool:
    for pattern in patterns:
        if pattern.startswith("re:") and re.match(pattern[3:], name):
            return True
        if pattern == name:
            return True
    return False


def plan_from_checkpoint(quantization_config: Any, profile: Any = None) -> QuantPlan:
    """The plan a checkpoint's ``quantization_config`` describes (BF16 when there is none).

    Understands compressed-tensors pack-quantized int groups (Kimi-K2.5: INT4 group-32 routed
    experts, the ``ignore`` list keeping attention, shared experts and dense MLPs in bf16), FP8
    block quantization (DeepSeek-V3: e4m3 weights in 128x128 blocks), AWQ / GPTQ integer groups and
    gpt-oss's MXFP4 experts. Whether dense linears
    are ignored is asked of the checkpoint with the name of an attention output projection
    under the ``profile``'s layers path.
    """
    if not quantization_config:
        return QuantPlan(BF16, BF16, source="bf16 checkpoint")
    q = quantization_config if isinstance(quantization_config, dict) else getattr(quantization_config, "to_dict",
                                                                                  lambda: None)()
    if not isinstance(q, dict):
        raise InfercastError(f"the checkpoint's quantization_config is {type(quantization_config).__name__} "
                             f"{quantization_config!r}, not a mapping; fix the config or pass --quantize-linear-action")
    method = q.get("quant_method")
    if method == "fp8":
        block = q.get("weight_block_size")
        if block is not None and not (isinstance(block, (list, tuple)) and len(block) == 2 and all(
                isinstance(b, int) and not isinstance(b, bool) and b > 0 for b in block)):
            raise InfercastError(f"quantization_config.weight_block_size must be two positive integers, got {block!r}")
        if not block:
            return QuantPlan(SCHEMES["FP8"], SCHEMES["FP8"], source="checkpoint fp8 per-channel")
        block = tuple(block)
        fp8 = QuantScheme("FP8_BLOCK", 8, None, "fp8", dynamic_activation=True, scale_bits=32, block=block)  # type: ignore[arg-type]
        return QuantPlan(fp8, fp8, source=f"checkpoint fp8 {block[0]}x{block[1]} blocks")
    if method == "compressed-tensors":
        groups = q.get("config_groups") or {}
        first = next(iter(groups.values()), {}) if isinstance(groups, dict) else None
        weights = first.get("weights") if isinstance(first, dict) else None
        weights = weights if isinstance(weights, dict) else {}
        bits, group = weights.get("num_bits", 16), weights.get("group_size")
        if bits not in (2, 3, 4, 8, 16) or isinstance(bits, bool):
            raise InfercastError(f"quantization_config weights num_bits must be 2, 3, 4, 8 or 16, got {bits!r}")
        if group is not None and (isinstance(group, bool) or not isinstance(group, int) or group < 1):
            raise InfercastError(f"quantization_config weights group_size must be a positive integer, got {group!r}")
        ignore = list(q.get("ignore") or [])
        routed = QuantScheme(f"W{bits}A16", bits, group, "bf16")
        layers_path = getattr(profile, "layers_path", "model.layers")
        dense_ignored = _matches(ignore, f"{layers_path}.1.self_attn.o_proj")
        dense = BF16 if dense_ignored else routed
        return QuantPlan(routed, dense, source=f"checkpoint compressed-tensors int{bits} group {group}")
    if method in ("awq", "gptq"):
        return _integer_groups(q, method, profile)
    if method == "mxfp4":  # gpt-oss: MXFP4 experts; attention, router, embeddings and head in bf16
        return QuantPlan(SCHEMES["MXFP4"], BF16, source="checkpoint mxfp4 experts")
    raise InfercastError(
        f"checkpoint quantization_config has quant_method {method!r}, which infercast does not read; "
        f"pass --quantize-linear-action (one of {', '.join(ACTIONS)})"
    )


def _integer_groups(q: dict, method: str, profile: Any) -> QuantPlan:
    """AWQ and GPTQ checkpoints: integer weights in groups along K (``bits``, ``group_size``;
    GPTQ's -1 is one scale a channel) for every decoder linear but those ``modules_to_not_convert``
    names a part of (transformers' rule: a module is kept when one of them occurs in its name).
    The plan has one scheme for the routed experts and one for the other linears, decided on a
    typical layer's attention output projection, so entries naming single layers
    (``model.layers.0.``) are not priced. Engines run 4- and 8-bit groups through Marlin (vLLM's
    and sglang's awq_marlin and gptq_marlin)."""
    bits = q.get("bits", q.get("w_bit", 4))
    group = q.get("group_size", q.get("q_group_size", 128))
    if isinstance(bits, bool) or not isinstance(bits, int) or bits not in (2, 3, 4, 8):
        raise InfercastError(f"quantization_config.bits must be 2, 3, 4 or 8 for {method}, got {bits!r}")
    if isinstance(group, bool) or not isinstance(group, int) or group == 0 or group < -1:
        raise InfercastError(f"quantization_config.group_size must be a positive integer or -1 for {method}, "
                             f"got {group!r}")
    kept = q.get("modules_to_not_convert") or []
    if not isinstance(kept, list) or not all(isinstance(m, str) for m in kept):
        raise InfercastError(f"quantization_config.modules_to_not_convert must be a list of module names for "
                             f"{method}, got {kept!r}")
    quantized = QuantScheme(f"W{bits}A16", bits, None if group == -1 else group, "bf16")
    # a layer index no per-layer entry names: "model.layers.1" would also keep layers 10-19
    attention = f"{getattr(profile, 'layers_path', 'model.layers')}.99999.self_attn.o_proj"
    dense = BF16 if any(m and m in attention for m in kept) else quantized
    per = "channel" if group == -1 else f"group {group}"
    return QuantPlan(quantized, dense, source=f"checkpoint {method} int{bits} {per}")


def plan_from_action(action: str) -> QuantPlan:
    chosen = scheme(action)
    return QuantPlan(chosen, chosen, source=f"--quantize-linear-action {chosen.name}")
