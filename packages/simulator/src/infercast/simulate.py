"""The Python API: :class:`UserInput` in, :class:`SimResult` out."""

from __future__ import annotations

import json
import math
import re
import time
from collections import defaultdict
from dataclasses import asdict, dataclass, field, fields
from typing import Any

from infercast_adapters import InfercastError
from infercast_adapters.arch import text_config_of
from infercast_adapters.config import load_config

from infercast.build import BuiltModel, build
from infercast.costmodel import SOURCES, CostModel, Phase
from infercast.devices import GIB, DeviceSpec
from infercast.layers import KV_DTYPES, SimContext, SimMoE
from infercast.parallel import Parallel, Workload, validate_layout, validate_workload
from infercast.quant import plan_from_action, plan_from_checkpoint
from infercast.step import HostRow, forward_seconds, price_records, step_time
from infercast.trace import OpRecord, trace

DEFAULT_MODEL = "moonshotai/Kimi-K2.5"
DEFAULT_DEVICE = "H200"
DEFAULT_DECODE_CONTEXT = 2048
MEMORY_FRACTION = 0.90
"""Share of device memory for weights, KV cache and activations (the rest: CUDA context,
graphs, allocator slack), close to sglang's ``mem_fraction_static`` on large GPUs."""


@dataclass
class UserInput:
    """One serving step to simulate, in the terms of the command line."""

    model: str = DEFAULT_MODEL
    device: str = DEFAULT_DEVICE
    num_devices: int = 8
    tp_size: int | None = None
    """Default: ``num_devices / dp_size``."""
    dp_size: int = 1
    ep_size: int = 1
    ep_num_redundant_experts: int = 0
    enable_shared_expert_tp: bool = False
    num_queries: int = 1
    query_length: int | None = None
    """New tokens per request. Given without ``decode``: a prefill step. Default: decode."""
    context_length: int | None = None
    """Cached tokens per request; default 2048 for decode, 0 for prefill."""
    decode: bool = False
    quantize_linear_action: str | None = None
    kv_cache_dtype: str = "bf16"
    num_mtp_tokens: int = 0
    two_batch_overlap: bool = False
    num_hidden_layers_override: int | None = None
    trace_every_layer: bool = False
    super_node: bool = False
    image_batch_size: int = 0
    """Images per request. In a prefill step the vision tower encodes them and their tokens join
    the prompt; in a decode step their tokens are already in the KV cache."""
    image_height: int | None = None
    image_width: int | None = None
    speculative_algorithm: str | None = None
    """``EAGLE3`` (a draft model), ``MTP`` (DeepSeek-V3's own MTP layer; also ``EAGLE`` as
    sglang names it) or None. ``num_mtp_tokens > 0`` alone means MTP with that many steps."""
    speculative_draft_model: str | None = None
    speculative_num_steps: int | None = None
    speculative_eagle_topk: int | None = None
    speculative_num_draft_tokens: int | None = None
    accept_length: float | None = None
    acceptance_rates: str | None = None
    """Comma-separated per-position rates (chain)."""
    acceptance_matrix: str | None = None
    """Depth x rank rates, rows separated by ``;`` (trees)."""
    acceptance_preset: str | None = None
    accept_length_from: str | None = None
    """An sglang server log or metrics text to read the measured accept length from."""
    engine: str = "sglang"
    """The serving engine: its kernels, CUDA graphs, host costs and measured tables."""
    engine_version: str | None = None
    """Which of the engine's measured tables (default: the newest with data)."""
    calibration: str | None = None
    """A calibration file of kernel tables measured on the user's hardware (first source)."""
    cost_model: str = "measured"
    """``measured`` (tables where they exist, analytic elsewhere) or ``analytic`` (roofline only)."""
    expert_imbalance: str = "balanced"
    """MoE routing: ``balanced``, ``power-law-1.01`` or ``power-law-1.2``."""


@dataclass
class OpRow:
    name: str
    count: int
    total_ms: float
    share: float
    bound: str
    source: str
    """``measured``, ``interpolated``, ``extrapolated``, ``analytic``, or ``engine`` for host rows."""
    origin: str = ""
    """The table (and engine version) or published figure behind it."""


@dataclass
class SimResult:
    model: str
    model_type: str
    device: str
    num_devices: int
    parallel: dict[str, Any]
    phase: str
    workload: dict[str, int]
    quantization: str
    kv_cache_dtype: str
    step_latency_ms: float
    ttft_ms: float | None
    tpot_ms: float | None
    throughput_tokens_per_s_per_device: float
    compute_ms: float
    communication_ms: float
    kernel_count: int
    memory_gib: dict[str, float]
    feasible: bool
    max_num_queries: int
    parameters_billion: float
    vision_parameters_billion: float
    routing_assumption: str | None
    ops: list[OpRow]
    simulation_wall_s: float
    cost_model: dict[str, Any] = field(default_factory=dict)
    """``{engine, engine_version, sources, measured_share, cuda_graph}``: what priced the step."""
    notes: list[str] = field(default_factory=list)
    images: dict[str, Any] | None = None
    speculative: dict[str, Any] | None = None
    _timed: list = field(default_factory=list, repr=False)

    def to_dict(self) -> dict[str, Any]:
        data = {f.name: getattr(self, f.name) for f in fields(self) if f.name != "_timed"}
        data["ops"] = [asdict(row) for row in self.ops]
        return data

    def to_json(self, indent: int | None = 2) -> str:
        return json.dumps(self.to_dict(), indent=indent)

    def chrome_trace(self) -> dict[str, Any]:
        """One step as Chrome trace events (Perfetto opens it): one track per stream."""
        events: list[dict[str, Any]] = [
            {"ph": "M", "name": "process_name", "pid": 1, "args": {"name": f"{self.model} rank 0"}},
            {"ph": "M", "name": "thread_name", "pid": 1, "tid": 1, "args": {"name": "compute"}},
            {"ph": "M", "name": "thread_name", "pid": 1, "tid": 2, "args": {"name": "communication"}},
        ]
        events += _timeline(self._timed)
        now = max((e["ts"] + e["dur"] for e in events if e["ph"] == "X"), default=0.0)
        hosts = [row for row in self.ops if row.source == "engine" and not row.name.startswith("request:")]
        if hosts:
            events.append({"ph": "M", "name": "thread_name", "pid": 1, "tid": 3, "args": {"name": "host"}})
        for row in hosts:
            dur = row.total_ms * 1e3
            events.append({"ph": "X", "pid": 1, "tid": 3, "name": row.name, "ts": round(now, 3), "dur": round(dur, 3),
                           "args": {"source": row.origin}})
            now += dur
        return {"traceEvents": events, "displayTimeUnit": "ms"}


def _resolve_quant(config: Any, text: Any, action: str | None):
    if action:
        return plan_from_action(action)
    q = getattr(text, "quantization_config", None) or getattr(config, "quantization_config", None)
    return plan_from_checkpoint(q)


def _path_pattern(path: str) -> str:
    return re.sub(r"(^|\.)\d+(?=\.|$)", r"\1*", path)


def simulate(user: UserInput, *, manager=None, devices=None) -> SimResult:
    """Resolve, build, trace and price one serving step."""
    from infercast.plugins import bundled_model_refs, get_devices, get_manager

    started = time.perf_counter()
    manager = manager or get_manager()
    devices = devices or get_devices()
    device = devices.get(user.device)
    config = load_config(user.model, manager=manager, num_hidden_layers_override=user.num_hidden_layers_override,
                         known_models=bundled_model_refs())
    manager.patch_config(config)
    profile = manager.profile_for(config.model_type)
    if profile is None:
        raise InfercastError(
            f"{user.model}: no adapter profile for model_type {config.model_type!r}. "
            f"Profiles exist for: {', '.join(sorted(manager.profiles()))}. Install an adapter plugin for it."
        )
    text = text_config_of(config)

    dp = user.dp_size
    tp = user.tp_size if user.tp_size is not None else max(1, user.num_devices // max(dp, 1))
    parallel = Parallel(
        num_devices=user.num_devices, tp=tp, dp=dp, ep=user.ep_size, shared_expert_tp=user.enable_shared_expert_tp,
        two_batch_overlap=user.two_batch_overlap, scale_up_domain=device.scale_up_domain(user.super_node),
        redundant_experts=user.ep_num_redundant_experts,
    )
    validate_layout(parallel, num_heads=text.num_attention_heads, num_experts=routed_experts(text, profile))

    decode = user.decode or user.query_length is None
    spec = speculative_request(user, text, profile, manager)
    if spec is not None and not decode:
        raise InfercastError("speculative decoding changes decode steps; drop --query-length (or add --decode) "
                             "to simulate decode with it")
    if decode:
        if user.query_length not in (None, 1):
            raise InfercastError(
                f"a decode step adds 1 token per request (speculative decoding verifies more per cycle); "
                f"drop --query-length {user.query_length} or drop --decode for a prefill step"
            )
        query_length = 1
        context = DEFAULT_DECODE_CONTEXT if user.context_length is None else user.context_length
    else:
        query_length = user.query_length
        context = 0 if user.context_length is None else user.context_length
    vision = _vision_request(user, config, profile)
    image_tokens = vision.tokens * user.image_batch_size if vision else 0
    if decode:
        context += image_tokens
    else:
        query_length += image_tokens
    workload = Workload(num_queries=user.num_queries, query_length=query_length, context_length=context, decode=decode)
    validate_workload(workload, max_positions=getattr(text, "max_position_embeddings", None))
    if user.kv_cache_dtype not in KV_DTYPES:
        raise InfercastError(f"unknown --kv-cache-dtype {user.kv_cache_dtype!r}; valid: {', '.join(KV_DTYPES)}")

    quant = _resolve_quant(config, text, user.quantize_linear_action)
    from infercast.routing import check_distribution

    ctx = SimContext(parallel=parallel, workload=workload, quant=quant, kv_cache_dtype=KV_DTYPES[user.kv_cache_dtype],
                     expert_imbalance=check_distribution(user.expert_imbalance))
    model = cost_model_for(user, device)
    built = build(config, profile, ctx, manager)
    images = ctx.requests * user.image_batch_size if vision and not decode else 0
    records = trace(built.sim, ctx.tokens, every_layer=user.trace_every_layer, images=images,
                    patches_per_image=vision.patches if vision else 0)
    micro = None
    if parallel.two_batch_overlap:
        half = Workload(num_queries=max(1, -(-user.num_queries // 2)), query_length=query_length,
                        context_length=context, decode=decode)
        with ctx.using(half):
            micro = trace(built.sim, ctx.tokens, every_layer=user.trace_every_layer)
    if spec is None:
        result = price(user, built, records, model, ctx, decode, query_length, context, quant.describe(), micro=micro)
    else:
        result = price_speculative(user, built, records, model, ctx, context, quant.describe(), spec, manager)
    if vision:
        result.images = {"per_request": user.image_batch_size, "height": vision.height, "width": vision.width,
                         "grid": [vision.grid_h, vision.grid_w], "patches_per_image": vision.patches,
                         "tokens_per_image": vision.tokens, "encoded_per_rank": images,
                         "vision_ms": sum(t.seconds * r.count for r, t in result._timed if r.path.startswith("vision")) * 1e3}
    result.simulation_wall_s = time.perf_counter() - started
    return result


def routed_experts(text: Any, profile: Any) -> int | None:
    """Routed experts per MoE layer (None for dense models), under any of the config names."""
    if not profile.is_moe:
        return None
    return (getattr(text, "n_routed_experts", None) or getattr(text, "num_experts", None)
            or getattr(text, "num_local_experts", None))


def _vision_request(user: UserInput, config: Any, profile: Any):
    """The image grid of ``user``'s images, or None without images; errors name what is wrong."""
    from infercast.vision import image_grid

    given = [n for n, v in (("--image-height", user.image_height), ("--image-width", user.image_width)) if v is not None]
    if not user.image_batch_size:
        if given:
            raise InfercastError(f"{' and '.join(given)} given without --image-batch-size (images per request)")
        return None
    if not isinstance(user.image_batch_size, int) or user.image_batch_size < 0:
        raise InfercastError(f"--image-batch-size must be a whole number of images per request, got {user.image_batch_size!r}")
    vision_config = getattr(config, "vision_config", None)
    if not profile.has_vision or vision_config is None:
        raise InfercastError(f"{user.model} ({config.model_type}) has no vision tower; drop --image-batch-size")
    if user.image_height is None or user.image_width is None:
        raise InfercastError("--image-batch-size needs --image-height and --image-width (pixels)")
    return image_grid(user.image_height, user.image_width, vision_config)


def cost_model_for(user: UserInput, device: DeviceSpec) -> CostModel:
    """The pricing stack ``user`` asks for: calibration file, measured tables, analytic."""
    from infercast.kernels.calibration import load_calibration

    if user.cost_model not in ("measured", "analytic"):
        raise InfercastError(f"unknown --cost-model {user.cost_model!r}; valid: measured, analytic")
    calibration = load_calibration(user.calibration, device) if user.calibration else None
    return CostModel(device, user.engine, user.engine_version, calibration, measured=user.cost_model == "measured")


def phase_of(model: CostModel, ctx: SimContext, decode: bool) -> Phase:
    """Decode replays a CUDA graph up to the engine's capture size; prefill launches eagerly
    unless the engine captures prefill too."""
    engine = model.engine
    graph = (ctx.requests <= engine.decode_graph_max_batch) if decode else engine.prefill_graph
    return Phase(graph=graph, decode=decode, scale_up_domain=ctx.parallel.scale_up_domain)


def price(user: UserInput, built: BuiltModel, records: list[OpRecord], model: CostModel, ctx: SimContext,
          decode: bool, query_length: int, context: int, quant_text: str, *, micro: list[OpRecord] | None = None,
          extra_weight_bytes: int = 0, extra_kv_per_token: int = 0, speculative: bool = False) -> SimResult:
    """Price every record, compose the step (streams, overlap, host), add memory
    (``extra_*``: a draft's share; ``micro``: one micro-batch's records under two-batch overlap)."""
    p = ctx.parallel
    device = model.device
    phase = phase_of(model, ctx, decode)
    priced = price_records(records, model, phase)
    step = step_time(priced, model, phase, micro=price_records(micro, model, phase) if micro else None,
                     requests=ctx.requests, host_step=not speculative)
    if speculative:
        step.host += spec_host_rows(model.engine, ctx.requests)
    step_s = step.seconds
    request_s = 0.0 if decode else model.engine.request.at(query_length)
    total_s = step_s + request_s
    shared = step.compute_s + step.communication_s + sum(h.seconds for h in step.host) + request_s
    # what the shares divide: the kernels back to back, plus the host rows

    rows: dict[tuple[str, str], list] = {}
    for r, t in priced:
        key = (f"{r.name.split('::')[-1]} ({_path_pattern(r.path)})", t.source)
        row = rows.setdefault(key, [0, 0.0, defaultdict(float), t.origin])
        row[0] += r.count
        row[1] += t.seconds * r.count
        row[2][t.bound] += t.seconds * r.count
    ops = [OpRow(name, int(v[0]), float(v[1]) * 1e3, float(v[1]) / shared if shared else 0.0,
                 max(v[2].items(), key=lambda kv: kv[1])[0], source, v[3]) for (name, source), v in rows.items()]
    hosts = step.host + ([HostRow("request: HTTP, tokenization, scheduling, first token out (TTFT)", request_s,
                                  model.engine.request.source)] if request_s else [])
    ops += [OpRow(h.name, 1, h.seconds * 1e3, h.seconds / shared if shared else 0.0, "host", "engine", h.source)
            for h in hosts]
    ops.sort(key=lambda row: row.total_ms, reverse=True)
    shares = {s: 0.0 for s in (*SOURCES, "engine")}
    for row in ops:
        shares[row.source] += row.share

    memory, max_queries = _memory(built, records, device, ctx, extra_weight_bytes, extra_kv_per_token)
    feasible = memory["total"] <= memory["capacity"]
    throughput = (user.num_queries * (1 if decode else query_length)) / step_s / p.num_devices
    moe = next((m for m in built.sim.modules() if isinstance(m, SimMoE)), None)
    notes = list(model.notes)
    if not feasible:
        notes.append(
            f"does not fit: needs {memory['total']:.1f} GiB per device, {memory['capacity']:.1f} GiB usable "
            f"({MEMORY_FRACTION:.0%} of {device.memory_bytes / GIB:.1f} GiB)"
        )
    return SimResult(
        model=user.model, model_type=built.profile.model_type, device=device.name, num_devices=p.num_devices,
        parallel={"tp": p.tp, "dp": p.dp, "ep": p.ep, "moe_tp": p.moe_tp, "shared_expert_tp": p.shared_expert_tp,
                  "two_batch_overlap": p.two_batch_overlap},
        phase="decode" if decode else "prefill",
        workload={"num_queries": user.num_queries, "query_length": query_length, "context_length": context,
                  "requests_per_rank": ctx.requests, "tokens_per_rank": ctx.tokens},
        quantization=quant_text, kv_cache_dtype=str(ctx.kv_cache_dtype).replace("torch.", ""),
        step_latency_ms=step_s * 1e3,
        ttft_ms=None if decode else total_s * 1e3,
        tpot_ms=step_s * 1e3 / query_length if decode else None,
        throughput_tokens_per_s_per_device=throughput,
        compute_ms=step.compute_s * 1e3, communication_ms=step.communication_s * 1e3,
        kernel_count=sum(r.count for r, _ in priced),
        memory_gib=memory, feasible=feasible, max_num_queries=max_queries,
        parameters_billion=built.hf_param_count / 1e9,
        vision_parameters_billion=built.vision_param_count / 1e9,
        routing_assumption=moe.routing_assumption if moe is not None else None,
        ops=ops, simulation_wall_s=0.0, notes=notes,
        cost_model={"engine": model.engine.name, "engine_version": model.engine_version, "sources": model.describe(),
                    "cuda_graph": phase.graph, "measured_share": shares},
        _timed=priced,
    )


def _memory(built: BuiltModel, records: list[OpRecord], device: DeviceSpec, ctx: SimContext, extra_weight_bytes: int = 0,
            extra_kv_per_token: int = 0) -> tuple[dict[str, float], int]:
    weights = built.sim.weight_bytes() + extra_weight_bytes
    kv_per_token = sum(layer.self_attn.kv_bytes_per_token() for layer in built.sim.layers) + extra_kv_per_token
    kv = kv_per_token * ctx.requests * ctx.workload.kv_length
    activation = 0
    for r in records:
        inputs = r.tensors()[:1] if r.name in ("infercast::attention", "infercast::mla_attention") else r.tensors()
        live = sum(t.nbytes for t in inputs if t.role == "activation") + sum(o.nbytes for o in r.outputs)
        activation = max(activation, live)
    capacity = device.memory_bytes * MEMORY_FRACTION
    per_request = kv_per_token * ctx.workload.kv_length + activation / max(ctx.requests, 1)
    max_requests = max(0, math.floor((capacity - weights) / per_request)) * ctx.parallel.dp if per_request else 0
    memory = {
        "weights": weights / GIB, "kv_cache": kv / GIB, "activations": activation / GIB,
        "total": (weights + kv + activation) / GIB, "capacity": capacity / GIB,
        "kv_cache_per_token_mib": kv_per_token / 2**20,
    }
    return memory, max_requests


def _timeline(timed: list[tuple[OpRecord, Any]]) -> list[dict[str, Any]]:
    """Serial schedule of one step, every layer expanded, as Chrome trace 'X' events."""
    by_layer: dict[int, list[tuple[OpRecord, Any]]] = defaultdict(list)
    head: list[tuple[OpRecord, Any]] = []
    embed: list[tuple[OpRecord, Any]] = []
    vision_before: list[tuple[OpRecord, Any]] = []
    vision_blocks: list[tuple[OpRecord, Any]] = []
    vision_after: list[tuple[OpRecord, Any]] = []
    for r, t in timed:
        if r.layer is not None:
            for index in r.layers or (r.layer,):
                by_layer[index].append((r, t))
        elif r.path.startswith("vision.blocks"):
            vision_blocks.append((r, t))
        elif r.path.startswith("vision"):
            (vision_after if vision_blocks else vision_before).append((r, t))
        elif r.path.startswith("embed"):
            embed.append((r, t))
        else:
            head.append((r, t))
    events, now = [], 0.0
    blocks = vision_blocks * (vision_blocks[0][0].count if vision_blocks else 0)
    sequence = (vision_before + blocks + vision_after + embed
                + [item for index in sorted(by_layer) for item in by_layer[index]] + head)
    for r, t in sequence:
        dur = t.seconds * 1e6
        events.append({
            "ph": "X", "pid": 1, "tid": 2 if t.bound == "communication" else 1,
            "name": r.name.split("::")[-1], "ts": round(now, 3), "dur": round(dur, 3),
            "args": {"module": r.path, "layer": r.layer, "bound": t.bound,
                     "inputs": [list(a.shape) for a in r.tensors()]},
        })
        now += dur
    return events


# ------------------------------------------------------------------------------ speculative


@dataclass
class SpecRequest:
    algorithm: str
    draft_model: str | None
    draft_config: Any
    settings: Any
    accept_length: float
    acceptance: str


def speculative_request(user: UserInput, text: Any, profile: Any, manager: Any) -> SpecRequest | None:
    """What ``user`` asks of speculative decoding, validated; None without it."""
    from infercast import acceptance as acc
    from infercast.plugins import bundled_model_refs

    if not isinstance(user.num_mtp_tokens, int) or user.num_mtp_tokens < 0:
        raise InfercastError(f"--num-mtp-tokens must be a whole number >= 0, got {user.num_mtp_tokens!r}")
    algorithm = (user.speculative_algorithm or ("MTP" if user.num_mtp_tokens else "")).upper()
    if algorithm == "NEXTN":
        algorithm = "MTP"
    acceptance_given = [n for n, v in (("--accept-length", user.accept_length), ("--acceptance-rates", user.acceptance_rates),
                                       ("--acceptance-matrix", user.acceptance_matrix),
                                       ("--acceptance-preset", user.acceptance_preset),
                                       ("--accept-length-from", user.accept_length_from)) if v is not None]
    if not algorithm:
        spec_flags = [n for n, v in (("--speculative-draft-model", user.speculative_draft_model),
                                     ("--speculative-num-steps", user.speculative_num_steps),
                                     ("--speculative-eagle-topk", user.speculative_eagle_topk),
                                     ("--speculative-num-draft-tokens", user.speculative_num_draft_tokens))
                      if v is not None] + acceptance_given
        if spec_flags:
            raise InfercastError(f"{', '.join(spec_flags)} given without --speculative-algorithm (EAGLE3 or MTP)")
        return None
    if algorithm not in ("EAGLE3", "EAGLE", "MTP"):
        raise InfercastError(f"unknown --speculative-algorithm {user.speculative_algorithm!r}; valid: EAGLE3, MTP "
                             "(EAGLE and NEXTN are accepted as sglang's names for MTP)")
    if len(acceptance_given) > 1:
        raise InfercastError(f"give one acceptance model, not {' and '.join(acceptance_given)}")
    if user.two_batch_overlap:
        raise InfercastError("two-batch overlap with speculative decoding is not modelled; drop one of them")

    mtp = algorithm in ("MTP", "EAGLE") and not user.speculative_draft_model
    if algorithm == "EAGLE3" and not user.speculative_draft_model:
        raise InfercastError("--speculative-algorithm EAGLE3 needs --speculative-draft-model (a hub id, a local "
                             "directory, or a bundled draft such as lightseekorg/kimi-k2.5-eagle3-mla)")
    draft_config = None
    if not mtp:
        from infercast_eagle3.config import from_transformers
        from infercast_eagle3.measure import check_fits

        draft_config = load_config(user.speculative_draft_model, manager=manager, known_models=bundled_model_refs())
        # a published draft ships its d2t map, so a smaller draft vocabulary is fine here
        check_fits(from_transformers(draft_config), text.hidden_size, text.vocab_size, has_d2t=True)
    default = (3, 1, 4) if profile.attention_kind == "mla" else (5, 4, 8)
    if mtp and user.num_mtp_tokens:
        if user.speculative_num_steps not in (None, user.num_mtp_tokens):
            raise InfercastError(f"--num-mtp-tokens {user.num_mtp_tokens} and --speculative-num-steps "
                                 f"{user.speculative_num_steps} disagree; give one")
        default = (user.num_mtp_tokens, 1, user.num_mtp_tokens + 1)
    s = user.speculative_num_steps if user.speculative_num_steps is not None else default[0]
    k = user.speculative_eagle_topk if user.speculative_eagle_topk is not None else (
        default[1] if user.speculative_num_steps is None else 1)
    n = user.speculative_num_draft_tokens
    if n is None and user.speculative_num_steps is None and user.speculative_eagle_topk is None:
        n = default[2]
    settings = acc.settings(s, k, n)

    if user.accept_length is not None:
        model, source = acc.MeasuredLength(float(user.accept_length)), None
    elif user.acceptance_rates is not None:
        model, source = acc.ChainRates(acc.parse_rates(user.acceptance_rates)), None
    elif user.acceptance_matrix is not None:
        model, source = acc.TreeMatrix(acc.parse_matrix(user.acceptance_matrix)), None
    elif user.accept_length_from is not None:
        value, samples = acc.accept_length_from_log(user.accept_length_from)
        model, source = acc.MeasuredLength(value), f"{samples} samples in {user.accept_length_from}"
    else:
        name = user.acceptance_preset or ("deepseek-v3-mtp" if mtp else
                                          acc.preset_for_draft(user.speculative_draft_model or ""))
        if name is None:
            raise InfercastError(
                f"no published acceptance for {user.speculative_draft_model}; give --accept-length, "
                f"--acceptance-rates, --acceptance-matrix, --accept-length-from or --acceptance-preset "
                f"({', '.join(acc.PRESETS)})")
        found = acc.preset(name)
        source = found.describe(settings.num_steps)
        model = found.model()
    tau = model.expected_accept_length(settings)
    return SpecRequest("MTP" if mtp else algorithm, None if mtp else user.speculative_draft_model, draft_config,
                       settings, tau, source or model.describe())


def spec_host_rows(engine: Any, requests: int) -> list[HostRow]:
    """The host time a speculative cycle waits for, in place of the decode step's: without
    the overlapped scheduler every cycle pays the engine's whole per-step host work."""
    cost = engine.spec_step()
    return [HostRow("host: per-cycle scheduling and output processing (speculative)", cost.at(requests), cost.source)]


def price_speculative(user: UserInput, built: BuiltModel, records: list[OpRecord], model: CostModel, ctx: SimContext,
                      context: int, quant_text: str, spec: SpecRequest, manager: Any) -> SimResult:
    """Price one speculative cycle (draft forwards, verify, extend) against plain decode."""
    from infercast.speculative import (
        cycle_forwards,
        draft_for,
        relabel,
        trace_draft,
        weight_bytes,
    )

    p, s = ctx.parallel, spec.settings
    base = price(user, built, records, model, ctx, True, 1, context, quant_text)
    phase = phase_of(model, ctx, True)
    draft, draft_ctx = draft_for(spec.draft_config, built, ctx, manager)
    draft_weights = weight_bytes(draft)
    cycle: list[OpRecord] = []
    forwards = []
    for forward in cycle_forwards(s.num_steps, s.topk, s.num_draft_tokens):
        workload = Workload(num_queries=user.num_queries, query_length=forward.tokens_per_request,
                            context_length=context, decode=True)
        if forward.model == "target":
            with ctx.using(workload):
                got = trace(built.sim, ctx.tokens)
        else:
            with draft_ctx.using(workload):
                got = trace_draft(draft, draft_ctx.tokens, forward.logits_per_request)
        seconds = forward_seconds(got, model, phase)
        forwards.append({"name": forward.name, "model": forward.model, "tokens_per_request": forward.tokens_per_request,
                         "count": forward.count, "ms_each": seconds * 1e3})
        if forward.count:
            cycle += relabel(got, forward.name, forward.count)
    n = s.num_draft_tokens
    with ctx.using(Workload(num_queries=user.num_queries, query_length=n, context_length=context, decode=True)):
        result = price(user, built, cycle, model, ctx, True, n, context, quant_text, extra_weight_bytes=draft_weights,
                       extra_kv_per_token=draft.kv_bytes_per_token(), speculative=True)
    cycle_ms = result.step_latency_ms
    tpot = cycle_ms / spec.accept_length
    result.workload["num_draft_tokens"] = n
    result.tpot_ms = tpot
    result.throughput_tokens_per_s_per_device = user.num_queries * spec.accept_length / (cycle_ms / 1e3) / p.num_devices
    result.memory_gib["draft_weights"] = draft_weights / GIB
    result.speculative = {
        "algorithm": spec.algorithm, "draft_model": spec.draft_model, "draft_architecture": draft.architecture,
        "num_steps": s.num_steps, "topk": s.topk, "num_draft_tokens": n,
        "acceptance": spec.acceptance, "accept_length": spec.accept_length,
        "accept_rate": (spec.accept_length - 1) / (n - 1),
        "cycle_ms": cycle_ms, "forwards": forwards,
        "baseline_tpot_ms": base.tpot_ms,
        "baseline_throughput_tokens_per_s_per_device": base.throughput_tokens_per_s_per_device,
        "speedup": base.tpot_ms / tpot,
        "draft_parameters_billion": draft.total_logical_params() / 1e9,
    }
    return result
