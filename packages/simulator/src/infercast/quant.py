"""Quantization of linear layers: the ``--quantize-linear-action`` choices and checkpoint defaults."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from fnmatch import fnmatchcase as fnmatch
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
        ``w4a16`` (integer weight-only), ``w4a8``, ``mxfp4`` and ``nvfp4`` (FP4 in groups of 32
        with power-of-two scales, or of 16 with FP8 scales; the device decides whether FP4
        tensor cores run it or it is dequantised to bf16); ``fp32`` for FP32 weights."""
        if self.weight_bits >= 16:
            return "fp32" if self.weight_bits == 32 else "bf16"
        if self.compute_dtype == "fp8":
            return "fp8_block" if self.block else "fp8"
        if self.compute_dtype == "fp4":
            return "nvfp4" if self.group_size == 16 else "mxfp4"
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
        # NVIDIA's NVFP4 (ModelOpt, compressed-tensors' nvfp4 preset): E2M1 weights with one FP8
        # E4M3 scale per 16 (plus a per-tensor FP32 scale, left out), activations quantized to
        # NVFP4 per token group at run time
        QuantScheme("NVFP4", 4, 16, "fp4", dynamic_activation=True, scale_bits=8),
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
    """Dense MLPs and shared experts, and attention's projections unless set apart below."""
    lm_head: QuantScheme = BF16
    source: str = "default"
    attention_in: QuantScheme | None = None
    """Attention's input projections (q, k, v; MLA's down and query up projections) where the
    checkpoint stores them apart from the MLPs (None: as ``dense``)."""
    attention_out: QuantScheme | None = None
    """Attention's output projection where the checkpoint stores it apart (None: as ``dense``)."""
    checkpoint_method: str = ""
    """The ``quant_method`` whose engine config loads the checkpoint, where an engine rule depends
    on it (``modelopt``, ``compressed-tensors``); empty otherwise (a 16-bit checkpoint, a
    quantization action, the other quantized formats)."""

    @property
    def attention_input(self) -> QuantScheme:
        return self.attention_in or self.dense

    @property
    def attention_output(self) -> QuantScheme:
        return self.attention_out or self.dense

    def describe(self) -> str:
        kinds = {"routed experts": self.routed_experts, "attention inputs": self.attention_input,
                 "attention output": self.attention_output, "other linears": self.dense}
        if len({s.name for s in kinds.values()}) == 1:
            return f"{self.dense.name} ({self.source})"
        if kinds["attention inputs"] == kinds["attention output"] == self.dense:
            return f"routed experts {self.routed_experts.name}, other linears {self.dense.name} ({self.source})"
        return ", ".join(f"{kind} {s.name}" for kind, s in kinds.items()) + f" ({self.source})"


ROLE_MODULES = {
    "attention_in": ("self_attn.q_proj", "self_attn.qkv_proj", "self_attn.q_a_proj", "self_attn.fused_qkv_a_proj",
                     "self_attn.kv_a_proj_with_mqa", "self_attn.q_b_proj"),
    "attention_out": ("self_attn.o_proj",),
    "dense": ("mlp.gate_proj", "mlp.shared_experts.gate_proj", "mlp.shared_expert.gate_proj"),
    "routed": ("mlp.experts.0.gate_proj", "block_sparse_moe.experts.0.w1", "mlp.experts.gate_up_proj"),
}
"""Module names, under one decoder layer, whose exclusion from a checkpoint's quantization keeps
that kind of linear in 16 bits (any of them: a family names only some)."""


def _role_plan(scheme: QuantScheme, excluded: Callable[[str], bool], profile: Any, layer: int,
               source: str, method: str) -> QuantPlan:
    """The plan of a checkpoint that quantizes every linear to ``scheme`` except the modules
    ``excluded`` names, asked of layer ``layer`` (the last: earlier layers are the ones that
    checkpoints keep in 16 bits one by one) under the ``profile``'s layers path."""
    prefix = f"{getattr(profile, 'layers_path', 'model.layers')}.{layer}."
    kept = {role: any(excluded(prefix + name) for name in names) for role, names in ROLE_MODULES.items()}
    pick = {role: BF16 if kept[role] else scheme for role in ROLE_MODULES}
    dense = pick["dense"]
    return QuantPlan(pick["routed"], dense, source=source,
                     attention_in=None if pick["attention_in"] == dense else pick["attention_in"],
                     attention_out=None if pick["attention_out"] == dense else pick["attention_out"],
                     checkpoint_method=method)


def _matches(patterns: list[str], name: str) -> bool:
    """compressed-tensors' ``ignore`` rule: an exact module name or a ``re:`` regular expression."""
    for pattern in patterns:
        if pattern.startswith("re:") and re.match(pattern[3:], name):
            return True
        if pattern == name:
            return True
    return False


def _as_mapping(quantization_config: Any) -> dict | None:
    """A quantization_config as a dict (transformers' config objects through ``to_dict``); None
    when it is not a mapping."""
    if isinstance(quantization_config, dict):
        return quantization_config
    q = getattr(quantization_config, "to_dict", lambda: None)()
    return q if isinstance(q, dict) else None


def _method(q: dict) -> Any:
    """The checkpoint's quant_method, ``modelopt`` for any of ModelOpt's (``modelopt_fp4``, and its
    own config.json entry, which names its producer instead of a method)."""
    method, producer = q.get("quant_method"), q.get("producer")
    if isinstance(method, str) and method.startswith("modelopt"):
        return "modelopt"
    if method is None and isinstance(producer, dict) and producer.get("name") == "modelopt":
        return "modelopt"
    return method


def checkpoint_quantization(quantization_config: Any) -> str:
    """A short name of a checkpoint's quantization as its config states it: its method, and for
    ModelOpt its algorithm (``modelopt NVFP4``); ``bf16`` without one."""
    q = _as_mapping(quantization_config) if quantization_config else None
    if not q:
        return "bf16"
    method, inner = _method(q), q.get("quantization", q)
    algo = inner.get("quant_algo") if isinstance(inner, dict) else None
    return f"{method} {algo}" if method == "modelopt" and algo else str(method or "unnamed")


def plan_from_checkpoint(quantization_config: Any, profile: Any = None, layers: int = 2) -> QuantPlan:
    """The plan a checkpoint's ``quantization_config`` describes (BF16 when there is none).

    Understands compressed-tensors groups (Kimi-K2.5: INT4 group-32 routed experts, the
    ``ignore`` list keeping attention, shared experts and dense MLPs in bf16; integer W8A8 and
    W4A8; FP8 and NVFP4 floats), FP8 block quantization (DeepSeek-V3: e4m3 weights in 128x128
    blocks), NVIDIA ModelOpt's FP8 and NVFP4 (``quant_method`` ``modelopt``, or the
    ``hf_quant_config.json`` the config loader folds in), AWQ / GPTQ integer groups and gpt-oss's
    MXFP4 experts. Which linears a checkpoint keeps in 16 bits is asked of the names of one
    decoder layer (the last of ``layers``) under the ``profile``'s layers path.
    """
    if not quantization_config:
        return QuantPlan(BF16, BF16, source="bf16 checkpoint")
    q = _as_mapping(quantization_config)
    if q is None:
        raise InfercastError(f"the checkpoint's quantization_config is {type(quantization_config).__name__} "
                             f"{quantization_config!r}, not a mapping; fix the config or pass --quantize-linear-action")
    method = _method(q)
    layer = max(int(layers) - 1, 0) if isinstance(layers, int) and not isinstance(layers, bool) else 1
    if method == "fp8":
        block = q.get("weight_block_size")
        if not block:
            if block is not None:
                _block(block, "quantization_config.weight_block_size")
            return QuantPlan(SCHEMES["FP8"], SCHEMES["FP8"], source="checkpoint fp8 per-channel")
        block = _block(block, "quantization_config.weight_block_size")
        fp8 = QuantScheme("FP8_BLOCK", 8, None, "fp8", dynamic_activation=True, scale_bits=32, block=block)  # type: ignore[arg-type]
        return QuantPlan(fp8, fp8, source=f"checkpoint fp8 {block[0]}x{block[1]} blocks")
    if method == "compressed-tensors":
        return _compressed_tensors(q, profile, layer)
    if method == "modelopt":
        return _modelopt(q, profile, layer)
    if method in ("awq", "gptq"):
        return _integer_groups(q, method, profile)
    if method == "mxfp4":  # gpt-oss: MXFP4 experts; attention, router, embeddings and head in bf16
        return QuantPlan(SCHEMES["MXFP4"], BF16, source="checkpoint mxfp4 experts")
    raise InfercastError(
        f"checkpoint quantization_config has quant_method {method!r}, which infercast does not read "
        f"(it reads fp8, compressed-tensors, modelopt, awq, gptq and mxfp4); "
        f"pass --quantize-linear-action (one of {', '.join(ACTIONS)})"
    )


def _block(block: Any, what: str) -> tuple[int, int]:
    if not (isinstance(block, (list, tuple)) and len(block) == 2 and all(
            isinstance(b, int) and not isinstance(b, bool) and b > 0 for b in block)):
        raise InfercastError(f"{what} must be two positive integers, got {block!r}")
    return (block[0], block[1])


def _names(value: Any, what: str) -> list[str]:
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(m, str) for m in value):
        raise InfercastError(f"{what} must be a list of module names, got {value!r}")
    return value


def _compressed_tensors(q: dict, profile: Any, layer: int) -> QuantPlan:
    """compressed-tensors: the first config group's weights (integer or float, bits, group) and
    input activations (none: weight-only) give the scheme; ``ignore`` keeps modules in 16 bits."""
    groups = q.get("config_groups") or {}
    first = next(iter(groups.values()), {}) if isinstance(groups, dict) else None
    weights = first.get("weights") if isinstance(first, dict) else None
    weights = weights if isinstance(weights, dict) else {}
    inputs = first.get("input_activations") if isinstance(first, dict) else None
    bits, group = weights.get("num_bits", 16), weights.get("group_size")
    if bits not in (2, 3, 4, 8, 16) or isinstance(bits, bool):
        raise InfercastError(f"quantization_config weights num_bits must be 2, 3, 4, 8 or 16, got {bits!r}")
    if group is not None and (isinstance(group, bool) or not isinstance(group, int) or group < 1):
        raise InfercastError(f"quantization_config weights group_size must be a positive integer, got {group!r}")
    kind = weights.get("type", "int")
    if kind not in ("int", "float"):
        raise InfercastError(f"quantization_config weights type must be 'int' or 'float', got {kind!r}")
    act_bits = inputs.get("num_bits") if isinstance(inputs, dict) else None
    dynamic = inputs.get("dynamic", True) if isinstance(inputs, dict) else False
    if not isinstance(dynamic, bool):
        raise InfercastError(f"quantization_config input_activations dynamic must be true or false, got {dynamic!r}")
    if kind == "float" and bits == 8 and act_bits == 8:
        block = weights.get("block_structure") if weights.get("strategy") == "block" else None
        if block is not None:
            block = _block(block, "quantization_config weights block_structure")
            chosen = QuantScheme("FP8_BLOCK", 8, None, "fp8", dynamic_activation=True, scale_bits=32, block=block)
            what = f"fp8 {block[0]}x{block[1]} blocks"
        else:
            chosen, what = SCHEMES["FP8"], f"fp8 per-{weights.get('strategy') or 'channel'}"
    elif kind == "float" and bits == 4 and group in (16, 32):
        if group == 32:  # MXFP4: power-of-two scales a group of 32
            chosen, what = SCHEMES["MXFP4"], "mxfp4"
        elif act_bits == 4:
            chosen, what = SCHEMES["NVFP4"], "nvfp4"
        else:  # FP4 weights alone: Marlin's FP4 weight-only kernels
            chosen, what = QuantScheme("NVFP4_W4A16", 4, 16, "bf16", scale_bits=8), "nvfp4 weight-only"
    elif kind == "float" and bits != 8:
        raise InfercastError(f"compressed-tensors float weights of {bits} bits in groups of {group} are not read "
                             f"(FP8, and FP4 in groups of 16 or 32, are); pass --quantize-linear-action")
    elif act_bits == 8 and bits == 8:
        chosen = SCHEMES["W8A8_DYNAMIC" if dynamic else "W8A8_STATIC"]
        what = "int8 weights, int8 activations"
    elif act_bits == 8 and bits == 4:
        chosen = QuantScheme("W4A8_DYNAMIC", 4, group, "int8", dynamic_activation=True)
        what = "int4 weights, int8 activations"
    else:
        chosen = QuantScheme(f"W{bits}A16", bits, group, "bf16")
        what = "fp8 weight-only" if kind == "float" else f"int{bits} group {group}"
    ignore = _names(q.get("ignore"), "quantization_config ignore")
    return _role_plan(chosen, lambda name: _matches(ignore, name), profile, layer,
                      f"checkpoint compressed-tensors {what}", "compressed-tensors")


MODELOPT_ALGOS = {"FP8": "FP8", "FP8_PER_CHANNEL_PER_TOKEN": "FP8", "NVFP4": "NVFP4"}
"""ModelOpt's ``quant_algo`` values read, by the scheme each runs (vLLM's ``modelopt.py``:
per-tensor or per-channel FP8 weights with FP8 activations; NVFP4)."""


def _modelopt(q: dict, profile: Any, layer: int) -> QuantPlan:
    """NVIDIA ModelOpt: ``quant_algo`` and the modules it leaves out (``exclude_modules`` in
    ``hf_quant_config.json``, nested under ``quantization``; ``ignore`` in config.json), which
    are module names or shell wildcards."""
    inner = q.get("quantization", q)
    if not isinstance(inner, dict):
        raise InfercastError(f"the ModelOpt quantization entry (hf_quant_config.json's 'quantization') must be a "
                             f"mapping with a quant_algo, got {inner!r}")
    algo = inner.get("quant_algo")
    if not isinstance(algo, str) or not algo:
        raise InfercastError(f"the ModelOpt quantization entry names no quant_algo (a string such as FP8 or NVFP4), "
                             f"got {algo!r}; fix the checkpoint's hf_quant_config.json or pass --quantize-linear-action")
    algo = algo.upper()
    if algo not in MODELOPT_ALGOS:
        raise InfercastError(f"ModelOpt quant_algo {inner.get('quant_algo')!r} is not read (infercast reads "
                             f"{', '.join(MODELOPT_ALGOS)}); pass --quantize-linear-action")
    group = inner.get("group_size", 16)
    if algo == "NVFP4" and group != 16:
        raise InfercastError(f"ModelOpt NVFP4 quantizes in groups of 16 weights, the checkpoint says group_size "
                             f"{group!r}")
    excluded = _names(inner.get("exclude_modules", inner.get("ignore")), "ModelOpt exclude_modules")
    kv = inner.get("kv_cache_quant_algo")
    note = f", {kv} KV cache" if isinstance(kv, str) and kv else ""
    return _role_plan(SCHEMES[MODELOPT_ALGOS[algo]], lambda name: _modelopt_excludes(excluded, name), profile,
                      layer, f"checkpoint modelopt {algo}{note}", "modelopt")


def _modelopt_excludes(patterns: list[str], name: str) -> bool:
    """Whether a ModelOpt exclusion (a name or a shell wildcard) covers module ``name``, reading
    the decoder's known nestings as one (:data:`DECODER_PREFIXES`): Kimi-K2.5-NVFP4 writes
    ``language_model.model.layers.0.self_attn*`` for transformers' ``model.language_model.layers``."""
    own = _decoder_relative(name)
    return any(fnmatch(name, m) or (own is not None and _decoder_relative(m) is not None
                                    and fnmatch(own, _decoder_relative(m))) for m in patterns)


DECODER_PREFIXES = ("model.language_model.layers.", "language_model.model.layers.", "model.layers.")
"""Where checkpoints and transformers put the text decoder's layers."""


def _decoder_relative(name: str) -> str | None:
    """``name`` from ``layers.`` on when it starts with a decoder prefix, else None (a vision
    tower's ``vision_model.model.layers.*`` is not the decoder's)."""
    for prefix in DECODER_PREFIXES:
        if name.startswith(prefix):
            return "layers." + name[len(prefix):]
    return None


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


def checkpoint_kv_cache_dtype(quantization_config: Any) -> str | None:
    """``fp8`` where a ModelOpt checkpoint states an FP8 KV cache: ``kv_cache_quant_algo`` FP8 (in
    ``hf_quant_config.json`` or config.json) or a static ``kv_cache_scheme`` of 8-bit floats; else
    None. With their KV cache dtype left at ``auto``, vLLM (``get_kv_cache_quant_algo_string``,
    ModelOpt checkpoints only), sglang (``ModelRunner.configure_kv_cache_dtype``) and TensorRT-LLM
    take it."""
    q = _as_mapping(quantization_config)
    if q is None or _method(q) != "modelopt":
        return None
    inner = q.get("quantization") if isinstance(q.get("quantization"), dict) else {}
    for value in (inner.get("kv_cache_quant_algo"), q.get("kv_cache_quant_algo"), q.get("kv_cache_scheme")):
        if isinstance(value, str) and value.upper() == "FP8":
            return "fp8"
        if isinstance(value, dict) and (value.get("num_bits"), value.get("type"), value.get("dynamic")) == (
                8, "float", False):
            return "fp8"
    return None


def plan_from_action(action: str) -> QuantPlan:
    chosen = scheme(action)
    return QuantPlan(chosen, chosen, source=f"--quantize-linear-action {chosen.name}")
