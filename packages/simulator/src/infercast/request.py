"""One simulation request in the terms of the command line, checked before anything is resolved.

:class:`UserInput` is the request of ``infercast simulate`` and of the Python API; its fields
carry their own flag, help, group and bounds, so the command line is generated from it (one
flag table) and :func:`check` validates every value before a model is resolved or a module
imported. Errors are :class:`FieldError` s that name the field; the command line shows the
flag instead. This module imports no model code.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, fields
from typing import Any

from infercast_adapters import InfercastError

DEFAULT_DEVICE = "H200"
DEFAULT_DECODE_CONTEXT = 2048
MAX_DEVICES = 1_000_000
MAX_REQUESTS = 100_000_000
MAX_TOKENS = 100_000_000
MAX_LAYERS = 1_000
"""Upper bound of ``--num-hidden-layers-override``: a thousand layers trace in seconds and
a few hundred MB; more is a typo, not a model."""

KV_CACHE_DTYPES = ("bf16", "auto", "fp16", "fp8", "fp8_e4m3", "fp8_e5m2")
QUANT_ACTIONS = ("BF16", "W8A16", "W8A8_DYNAMIC", "W8A8_STATIC", "W4A8_DYNAMIC", "W4A16", "FP8", "FP8_BLOCK", "MXFP4",
                 "NVFP4")
SPEC_ALGORITHMS = ("EAGLE3", "EAGLE", "MTP", "NEXTN")
ENGINES = ("sglang", "vllm", "trtllm")
COST_MODELS = ("measured", "analytic")
IMBALANCE = ("balanced", "power-law-1.01", "power-law-1.2")
PREFILL_GRAPH_MODES = ("auto", "on", "off")
ALL_REDUCE_FUSION_MODES = ("auto", "on", "off")
MOE_ALL_TO_ALL_MODES = ("auto", "on", "off")
MOE_KERNELS = ("auto", "marlin", "triton", "deepgemm", "flashinfer_cutlass", "cutlass", "trtllm")
"""``--moe-kernel``: the engine's default for the experts' dtype, or one fused-MoE kernel family
(the short names infercast reads from the kernel tables' ``kernel_source``)."""
OVERLAP_MODES = ("auto", "on", "off")
"""``--overlap-scheduling``: the engine version's default, or the scheduler forced one step
ahead of the GPU (sglang's overlap scheduler, vLLM's async scheduling) or in step with it."""


class FieldError(InfercastError):
    """A request field with a bad value: ``str()`` names the fields; :meth:`render` names them
    as the caller knows them (the command line passes :func:`flag_of`). Other fields appear in
    ``problem`` as ``{name}`` placeholders."""

    def __init__(self, name: str, problem: str) -> None:
        self.field, self.problem = name, problem
        super().__init__(self.render(lambda n: n))

    def render(self, label: Any) -> str:
        class Labels(dict):
            def __missing__(self, key: str) -> str:
                return label(key)

        return f"{label(self.field)} {self.problem.format_map(Labels())}"


def opt(default: Any, help: str, group: str, *, flag: str | None = None, kind: type | None = None,
        choices: tuple[str, ...] | None = None, minimum: float | None = None, maximum: float | None = None,
        metavar: str | None = None, positional: bool = False, upper: bool = False) -> Any:
    """A request field with what the command line and the checks need to know about it."""
    return field(default=default, metadata={
        "help": help, "group": group, "flag": flag, "kind": kind, "choices": choices, "minimum": minimum,
        "maximum": maximum, "metavar": metavar, "positional": positional, "upper": upper})


HW, WORK, NUM, SPEC, COST, OUT = ("hardware and layout", "workload", "numerics", "speculative decoding (sglang's "
                                  "flag names)", "cost model", "output")


@dataclass
class UserInput:
    """One serving step to simulate, in the terms of the command line."""

    model: str | None = opt(None, "hub id, alias, config.json or model directory (default: the installed adapters' "
                            "default model)", "model", positional=True)
    device: str = opt(DEFAULT_DEVICE, f"device name, see `infercast devices` (default {DEFAULT_DEVICE})", HW)
    num_devices: int = opt(8, "devices in the deployment (default 8)", HW, kind=int, minimum=1, maximum=MAX_DEVICES)
    tp_size: int | None = opt(None, "tensor parallel size (default: num-devices / dp-size)", HW, kind=int, minimum=1,
                              maximum=MAX_DEVICES)
    dp_size: int = opt(1, "data parallel (DP attention) size (default 1)", HW, kind=int, minimum=1, maximum=MAX_DEVICES)
    ep_size: int = opt(1, "expert parallel size for routed experts (default 1: TP MoE)", HW, kind=int, minimum=1,
                       maximum=MAX_DEVICES)
    ep_num_redundant_experts: int = opt(0, "extra expert slots for load balancing, spread over the EP ranks "
                                        "(default 0)", HW, kind=int, minimum=0, maximum=MAX_DEVICES)
    enable_shared_expert_tp: bool = opt(False, "shard shared experts over TP when EP > 1", HW, kind=bool)
    two_batch_overlap: bool = opt(False, "overlap communication with a second micro-batch", HW, kind=bool)
    enable_attn_tp_input_scattered: bool = opt(False, "sglang's: in prefill each TP rank normalizes and "
                                               "down-projects 1/TP of the tokens (MLA with a query LoRA, eager "
                                               "prefill; from 0.5.6)", HW, kind=bool)
    super_node: bool = opt(False, "treat the device's super-node as one scale-up domain (Ascend)", HW, kind=bool)
    mem_fraction_static: float | None = opt(None, "share of each device's memory for weights, KV cache and "
                                            "activations (sglang's --mem-fraction-static, vLLM's "
                                            "--gpu-memory-utilization; default 0.9)", HW, kind=float, minimum=0.05,
                                            maximum=1.0, metavar="F")
    max_total_tokens: int | None = opt(None, "KV cache slots per rank at most (sglang's --max-total-tokens; default: "
                                       "all the memory the weights leave)", HW, kind=int, minimum=1,
                                       maximum=MAX_TOKENS, metavar="N")
    num_queries: int = opt(1, "requests in the step, across all DP ranks (default 1)", WORK, kind=int, minimum=1,
                           maximum=MAX_REQUESTS)
    query_length: int | None = opt(None, "new tokens per request; given without --decode this is a prefill step", WORK,
                                   kind=int, minimum=1, maximum=MAX_TOKENS)
    context_length: int | None = opt(None, "tokens already cached per request (default: 2048 for decode, 0 for "
                                     "prefill)", WORK, kind=int, minimum=0, maximum=MAX_TOKENS)
    decode: bool = opt(False, "a decode step (the default when no --query-length is given)", WORK, kind=bool)
    num_mtp_tokens: int = opt(0, "DeepSeek-V3 MTP draft steps per cycle (same as --speculative-algorithm MTP "
                              "--speculative-num-steps N)", WORK, kind=int, minimum=0, maximum=16)
    image_batch_size: int = opt(0, "images per request (vision-language models): encoded in prefill, cached in "
                                "decode", WORK, kind=int, minimum=0, maximum=1024)
    image_height: int | None = opt(None, "image height in pixels", WORK, kind=int, minimum=1, maximum=1_000_000)
    image_width: int | None = opt(None, "image width in pixels", WORK, kind=int, minimum=1, maximum=1_000_000)
    quantize_linear_action: str | None = opt(None, f"one of {', '.join(QUANT_ACTIONS)} (default: the checkpoint's "
                                             "quantization_config)", NUM, choices=QUANT_ACTIONS, metavar="ACTION",
                                             upper=True)
    kv_cache_dtype: str = opt("auto", "auto (default: FP8 where the checkpoint's quantization_config states an FP8 KV "
                              "cache, as ModelOpt's do and engines read it; else bf16), bf16, fp16 or fp8", NUM,
                              choices=KV_CACHE_DTYPES)
    num_hidden_layers_override: int | None = opt(None, f"simulate only this many layers (at most {MAX_LAYERS})", NUM,
                                                 kind=int, minimum=1, maximum=MAX_LAYERS)
    trace_every_layer: bool = opt(False, "trace every layer instead of one per distinct shape", OUT, kind=bool)
    speculative_algorithm: str | None = opt(None, "EAGLE3 (with --speculative-draft-model) or MTP (DeepSeek-V3's "
                                            "own layer; EAGLE and NEXTN are accepted as sglang's names for it)", SPEC,
                                            choices=SPEC_ALGORITHMS, metavar="ALGO", upper=True)
    speculative_draft_model: str | None = opt(None, "draft: hub id, config.json or directory, or a bundled draft "
                                              "(`infercast models` lists them)", SPEC, metavar="NAME_OR_PATH")
    speculative_num_steps: int | None = opt(None, "draft steps per cycle (default: the family's)", SPEC, kind=int,
                                            minimum=1, maximum=64, metavar="S")
    speculative_eagle_topk: int | None = opt(None, "candidates kept per step; 1 = chain", SPEC, kind=int, minimum=1,
                                             maximum=64, metavar="K")
    speculative_num_draft_tokens: int | None = opt(None, "tokens verified per cycle (chain: S + 1)", SPEC, kind=int,
                                                   minimum=2, maximum=4096, metavar="N")
    accept_length: float | None = opt(None, "measured accept length at this setting (1 .. S + 1)", SPEC, kind=float,
                                      minimum=1.0, maximum=65.0, metavar="TAU")
    acceptance_rates: str | None = opt(None, "per-position acceptance rates of a chain, each in [0, 1]", SPEC,
                                       metavar="A1,A2,...")
    acceptance_matrix: str | None = opt(None, "depth x rank acceptance for trees: 'a11,a12;a21,a22;...'", SPEC,
                                        metavar="ROWS")
    acceptance_preset: str | None = opt(None, "published accept length (`infercast models` lists the presets)", SPEC,
                                        metavar="NAME")
    accept_length_from: str | None = opt(None, "an sglang server log or metrics file to read the accept length from",
                                         SPEC, metavar="LOG")
    engine: str = opt("sglang", "serving engine: its kernels, CUDA graphs, host costs and measured tables (default "
                      "sglang)", COST, choices=ENGINES)
    engine_version: str | None = opt(None, "the engine version that runs: its defaults, and its measured tables "
                                     "where it has them, other versions' points elsewhere (default: the newest "
                                     "with data)", COST, metavar="VERSION")
    calibration: str | None = opt(None, "kernel tables measured on your hardware (JSON, docs/simulate.md): priced "
                                  "first", COST, metavar="FILE")
    cost_model: str = opt("measured", "measured: tables where they exist, analytic elsewhere (default); analytic: "
                          "roofline only", COST, choices=COST_MODELS)
    expert_imbalance: str = opt("balanced", "MoE routing skew (default balanced)", COST, choices=IMBALANCE)
    prefill_cuda_graph: str = opt("auto", "prefill in piecewise CUDA graphs: auto (the engine version's default "
                                  "and its rules, default), on (also where the version makes it opt-in), off",
                                  COST, choices=PREFILL_GRAPH_MODES)
    prefill_cuda_graph_max_tokens: int | None = opt(None, "the most tokens per rank a forward replays CUDA graphs "
                                                    "for: vLLM's --max-cudagraph-capture-size (prefill and decode), "
                                                    "sglang's --piecewise-cuda-graph-max-tokens (prefill); default: "
                                                    "the engine's, vLLM 512 (gpt-oss 1,024), sglang the chunk, 2,048 "
                                                    "with MLA", COST, kind=int, minimum=1, maximum=MAX_TOKENS,
                                                    metavar="N")
    all_reduce_fusion: str = opt("auto", "each layer's all-reduce and the RMSNorm after it as one kernel (sglang's "
                                 "and vLLM's FlashInfer fusion): auto (the engine version's rules, default), on, off",
                                 COST,
                                 choices=ALL_REDUCE_FUSION_MODES)
    moe_kernel: str = opt("auto", "the fused-MoE kernel the engine is launched with (vLLM's --moe-backend or "
                          "VLLM_MXFP4_USE_MARLIN=1, sglang's --moe-runner-backend): auto (the engine's default for "
                          "the experts' dtype), or one family, priced from its own table rows only", COST,
                          choices=MOE_KERNELS)
    moe_all_to_all: str = opt("auto", "expert parallelism through the engine's MoE all-to-all (sglang's "
                              "--moe-a2a-backend deepep, vLLM's --all2all-backend): auto (wherever the engine runs "
                              "the experts' dtype behind it, as plan launches it; default), on, or off (the "
                              "standard dispatcher: local experts over every token, then an all-reduce, as sglang "
                              "runs --ep-size without --moe-a2a-backend)", COST, choices=MOE_ALL_TO_ALL_MODES)
    overlap_scheduling: str = opt("auto", "the scheduler prepares the next step while the GPU runs this one (sglang's "
                                  "overlap scheduler, vLLM's async scheduling from 0.14.0, TensorRT-LLM's overlap "
                                  "scheduler): auto (the engine version's default), on, off", COST,
                                  choices=OVERLAP_MODES)


def flag_of(name: str) -> str:
    """The command-line flag of a request field."""
    meta = _META.get(name)
    if meta and meta["positional"]:
        return name.upper()
    return (meta or {}).get("flag") or "--" + name.replace("_", "-")


def check_value(name: str, value: Any, meta: dict[str, Any]) -> Any:
    """``value`` checked against the field's kind, bounds and choices; returns it normalised."""
    if value is None:
        return None
    kind = meta["kind"]
    if kind is bool:
        if not isinstance(value, bool):
            raise FieldError(name, f"must be true or false, got {value!r}")
        return value
    if kind is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise FieldError(name, f"must be a whole number, got {value!r}")
    elif kind is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            raise FieldError(name, f"must be a finite number, got {value!r}")
    elif not isinstance(value, str) or not value.strip():
        raise FieldError(name, f"must be a non-empty string, got {value!r}")
    elif len(value) > 4096:
        raise FieldError(name, f"is {len(value)} characters long; at most 4096")
    low, high = meta["minimum"], meta["maximum"]
    if kind in (int, float) and ((low is not None and value < low) or (high is not None and value > high)):
        bounds = (f"at least {low:g}" if high is None else f"between {low:g} and {high:g}") if low is not None else (
            f"at most {high:g}")
        raise FieldError(name, f"must be {bounds}, got {value!r}")
    if meta["choices"]:
        normal = value.upper() if meta["upper"] else value
        if normal not in meta["choices"]:
            raise FieldError(name, f"is {value!r}; valid: {', '.join(meta['choices'])}")
        return normal
    return value


def check_flag(name: str, value: Any) -> Any:
    """``value`` checked as the request field ``name`` is (:func:`check_value`), for a caller that
    takes the same flag (``infercast plan``); its error names the flag."""
    try:
        return check_value(name, value, _META[name])
    except FieldError as exc:
        raise InfercastError(exc.render(flag_of)) from None


def check(user: UserInput) -> UserInput:
    """Every field checked (types, bounds, choices) and the combinations that need no model:
    raises :class:`FieldError` for the first problem."""
    for f in fields(UserInput):
        setattr(user, f.name, check_value(f.name, getattr(user, f.name), dict(f.metadata)))
    if user.tp_size is not None and user.tp_size * user.dp_size != user.num_devices:
        raise FieldError("tp_size", f"x {{dp_size}} must equal {{num_devices}}: TP x DP = {user.tp_size} x "
                         f"{user.dp_size} = {user.tp_size * user.dp_size}, not {user.num_devices}; for "
                         f"{user.num_devices} devices use e.g. TP {user.num_devices // user.dp_size} with DP "
                         f"{user.dp_size}" if user.num_devices % user.dp_size == 0 else
                         f"x {{dp_size}} must equal {{num_devices}} ({user.num_devices})")
    if user.tp_size is None and user.num_devices % user.dp_size:
        raise FieldError("dp_size", f"{user.dp_size} does not divide {{num_devices}} {user.num_devices}")
    if user.ep_size > user.num_devices or user.num_devices % user.ep_size:
        raise FieldError("ep_size", f"{user.ep_size} must divide {{num_devices}} {user.num_devices}")
    decode = user.decode or user.query_length is None
    if decode and user.query_length not in (None, 1):
        raise FieldError("query_length", f"is {user.query_length} with {{decode}}: a decode step adds 1 token per "
                         "request (speculative decoding verifies more per cycle); drop it, or drop {decode} for a "
                         "prefill step")
    given = [n for n in ("image_height", "image_width") if getattr(user, n) is not None]
    if not user.image_batch_size and given:
        raise FieldError(given[0], "is given without {image_batch_size} (images per request)")
    if user.image_batch_size and len(given) < 2:
        raise FieldError("image_batch_size", "needs {image_height} and {image_width} (pixels)")
    speculative = user.speculative_algorithm or user.num_mtp_tokens
    spec_fields = ("speculative_draft_model", "speculative_num_steps", "speculative_eagle_topk",
                   "speculative_num_draft_tokens", "accept_length", "acceptance_rates", "acceptance_matrix",
                   "acceptance_preset", "accept_length_from")
    if not speculative:
        stray = next((n for n in spec_fields if getattr(user, n) is not None), None)
        if stray:
            raise FieldError(stray, "is given without {speculative_algorithm} (EAGLE3 or MTP)")
    else:
        if not decode:
            raise FieldError("speculative_algorithm", "changes decode steps; drop {query_length} (or add {decode})")
        if user.two_batch_overlap:
            raise FieldError("two_batch_overlap", "with speculative decoding is not modelled; drop one of them")
        acceptance = [n for n in spec_fields[4:] if getattr(user, n) is not None]
        if len(acceptance) > 1:
            raise FieldError(acceptance[1], f"and {{{acceptance[0]}}} both give the acceptance; give one")
    from infercast.engines import engine_named

    if user.prefill_cuda_graph == "on" and engine_named(user.engine).prefill_graphs is None:
        raise FieldError("prefill_cuda_graph", f"on: infercast models no prefill CUDA graphs for {user.engine} "
                         "(sglang and vllm have them); use auto or off")
    if user.prefill_cuda_graph_max_tokens is not None:
        if engine_named(user.engine).prefill_graphs is None:
            raise FieldError("prefill_cuda_graph_max_tokens", f"is given, and infercast models no prefill CUDA graphs "
                             f"for {user.engine} (sglang and vllm have them); drop it")
        if user.prefill_cuda_graph == "off":
            raise FieldError("prefill_cuda_graph_max_tokens", "is given with {prefill_cuda_graph} off, which captures "
                             "nothing; drop one of them")
    if user.all_reduce_fusion == "on" and engine_named(user.engine).all_reduce_fusion is None:
        raise FieldError("all_reduce_fusion", f"on: infercast models no all-reduce fusion for {user.engine} "
                         "(sglang's and vLLM's); use auto or off")
    if user.enable_attn_tp_input_scattered and engine_named(user.engine).scattered_attention_input is None:
        raise FieldError("enable_attn_tp_input_scattered", f"is an sglang server flag; infercast models no such "
                         f"layout for {user.engine}")
    return user


_META = {f.name: dict(f.metadata) for f in fields(UserInput)}
