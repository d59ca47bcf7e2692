"""The cost-model stack: each operator priced by the first source that covers it.

1. a user's calibration file (``--calibration FILE``: kernel tables measured on their own
   hardware, :mod:`infercast.kernels.calibration`);
2. the measured kernel tables of aiconfigurator-core for the device, engine and version;
3. the analytic roofline (:mod:`infercast.analytic`).

A table answers a query exactly on its grid points (``measured``), by log-space
interpolation between them (``interpolated``), or by holding the utilisation of its nearest
edge outside them (``extrapolated``); the analytic model answers everything else
(``analytic``). Every priced operator says which, and from which table.

What maps an operator to a table query lives here (:func:`table_query`): the semantic ops
carry what the tables are keyed by (GEMM m, n, k and kernel dtype; attention heads, sequence
counts and lengths; the MoE shape, routing and EP split; collective sizes and groups).
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, replace
from typing import Any, Callable

from infercast_adapters import InfercastError

from infercast import analytic
from infercast.cost import COMPUTE_DTYPE, OpCost, attended_pairs, cache_itemsize, cost_of, window_kv_len
from infercast.devices import DeviceSpec
from infercast.engines import Engine, HostCost, engine_named
from infercast.kernels.aiconfigurator import EAGER_TIMED_GEMMS
from infercast.kernels.grid import EXTRAPOLATED, INTERPOLATED, Answer
from infercast.request import MOE_KERNELS
from infercast.trace import OpRecord

ANALYTIC = "analytic"
SOURCES = ("measured", INTERPOLATED, EXTRAPOLATED, ANALYTIC)

DTYPE_BYTES = {"fp32": 4.0, "bf16": 2.0, "fp16": 2.0, "fp8": 1.0, "fp8_block": 1.0, "int8": 1.0, "w8a16": 1.0,
               "w4a16": 0.5, "w4a8": 0.5, "mxfp4": 0.53, "mxfp4_w4a16": 0.53, "nvfp4": 0.56}
"""Weight bytes per value by kernel dtype (block/group scales included for the 4-bit ones)."""


@dataclass(frozen=True)
class Priced:
    seconds: float
    bound: str
    """``compute``, ``memory``, ``latency`` or ``communication`` (from the analytic model)."""
    source: str
    """``measured``, ``interpolated``, ``extrapolated`` or ``analytic``."""
    origin: str = ""
    """The table and version that priced it (``gemm sglang 0.5.14``), or why analytic."""


@dataclass(frozen=True)
class Query:
    kind: str
    key: tuple
    coords: tuple[float, ...]
    shape: Callable[[tuple[float, ...]], float]
    scale: float = 1.0
    """Applied to the table's answer (a prefix correction, a multi-token verify)."""
    scaled_quality: str | None = None
    """The quality an answer gets when ``scale`` stands for a mechanism the table lacks."""
    note: str = ""
    """Said after the table's name in the op row (what ``scale`` stands for)."""


@dataclass(frozen=True)
class Phase:
    """How the engine runs the step being priced."""

    graph: bool
    """Under CUDA graphs (decode up to the engine's capture size) or eagerly launched."""
    decode: bool
    scale_up_domain: int
    piecewise: bool = False
    """Under piecewise graphs: attention still launches eagerly between the captured pieces."""
    kv_pool_tokens: int = 0
    """Slots of the FP8 KV pool each MLA decode attention casts to bf16 first, after which it
    reads bf16 (0: no cast; the attention reads the cache in its own dtype)."""


DENSE_GEMMS = ("infercast::gemm", "infercast::quant_gemm")
DEEPEP_EXPERT_KERNEL = "deepgemm"
"""The expert kernel the tables' DeepEP MoE rows time (sglang's DeepEPMoE runs DeepGEMM's grouped
GEMMs): with ``--moe-kernel`` naming another, those rows do not price it."""
LOCAL_EXPERT_KERNELS = ("marlin",)
"""MoE kernels an engine keeps behind an all-to-all, over its local experts, where no DeepEP
kernel is measured for the dtype: vLLM's INT4 MoE method runs Marlin experts behind DeepEP's
prepare and finalize; the tables measure fused_marlin_moe with an expert map by EP size."""


class CostModel:
    """Prices :class:`OpRecord` s on one device for one engine (version), with an optional
    calibration file; answers are cached per distinct operator."""

    def __init__(self, device: DeviceSpec, engine: str | Engine = "sglang", engine_version: str | None = None,
                 calibration: Any = None, measured: bool = True, overlap: str = "auto",
                 moe_kernel: str = "auto") -> None:
        self.device = device
        self.engine = engine if isinstance(engine, Engine) else engine_named(engine)
        if self.engine.moe_kernels_by_arch:
            self.engine = replace(self.engine, moe_kernels=self.engine.moe_kernels_on(device.cuda_arch))
        self.moe_kernel = moe_kernel
        """``--moe-kernel``: ``auto`` (the engine's kernels, in its order, for each dtype) or the one
        family the engine was launched with, priced from that family's table rows only."""
        if moe_kernel not in MOE_KERNELS:
            raise InfercastError(f"unknown --moe-kernel {moe_kernel!r}; valid: {', '.join(MOE_KERNELS)}")
        if moe_kernel != "auto":
            self.engine = replace(self.engine, moe_kernels={
                dtype: (moe_kernel,) for dtype in {*self.engine.moe_kernels, *DTYPE_BYTES}})
        self.overlap = overlap
        """``--overlap-scheduling``: ``auto`` (the engine version's default), ``on`` or ``off``."""
        self.calibration = calibration
        self.notes: list[str] = []
        self.tables = None
        self.engine_version = engine_version
        if measured:
            self.tables = _measured_tables(device, self.engine, engine_version, self.notes)
            if self.tables is not None:
                self.engine_version = self.tables.version
        elif engine_version is not None:
            _check_version(engine_version)
            self.notes.append(f"--cost-model analytic: every operator is priced analytically; {self.engine.name} "
                              f"{engine_version} sets the version's defaults (prefill graphs, all-reduce fusion, "
                              "scheduling)")
        self._cache: dict[tuple, Priced] = {}

    def engine_kernel(self, dtype: str, rest: tuple, preferred: tuple[str, ...] | None = None,
                      only: bool = False) -> str | None:
        """The MoE kernel the engine launches for ``dtype`` among those measured for this
        shape (``rest``: the key after dtype and kernel): the first of ``preferred`` (default:
        the engine's list) that was measured, else any measured one unless ``only``."""
        present = set()
        for source in (self.calibration, self.tables):
            if source is not None:
                present |= {key[1] for key in source.table("moe").keys() if key[0] == dtype and key[2:] == rest}
        only = only or (preferred is None and self.moe_kernel != "auto")  # launched with one: never another's rows
        for kernel in preferred if preferred is not None else self.engine.moe_kernels.get(dtype, ()):
            if kernel in present:
                return kernel
        return None if only or not present else min(present)

    def host_step(self, *, speculative: bool = False) -> HostCost:
        """The engine's host time per step (per speculative cycle) at this version and overlap mode."""
        return self.engine.host_step(self.engine_version, self.overlap, speculative=speculative)

    def request_cost(self, tokenizer: str) -> HostCost:
        """The engine's per-request host time for a model with a ``tokenizer`` kind, at this version."""
        return self.engine.request_cost(tokenizer, self.engine_version)

    def overlapped(self, speculative: bool = False) -> bool:
        """Whether the scheduler runs one step ahead of the GPU (:meth:`Engine.overlapped`)."""
        return self.engine.overlapped(self.engine_version, self.overlap, speculative=speculative)

    def measured_at(self, kind: str, key: tuple, axis: int, value: float) -> bool:
        """Whether a source's ``kind`` table has a point for ``key`` whose coordinate ``axis`` is ``value``."""
        for source in (self.calibration, self.tables):
            grid = source.table(kind).grid(key) if source is not None else None
            if grid is not None and any(coords[axis] == value for coords, _ in grid.points()):
                return True
        return False

    def describe(self) -> str:
        sources = []
        if self.calibration is not None:
            sources.append(f"calibration {self.calibration.path}")
        if self.tables is not None:
            sources.append(f"measured tables {self.device.kernel_tables} {self.engine.name} {self.tables.version}")
        sources.append("analytic")
        launched = "" if self.moe_kernel == "auto" else f" (fused MoE: {self.moe_kernel} only)"
        return " > ".join(sources) + launched

    def price(self, record: OpRecord, phase: Phase) -> Priced:
        key = _record_key(record, phase)
        found = self._cache.get(key)
        if found is None:
            found = self._cache[key] = self._price(record, phase)
        return found

    def stream_kernel(self, record: OpRecord, cost: OpCost) -> str | None:
        """The kernel family the engine runs a GEMM in (a dense GEMM: the engine's dense kernel
        for its dtype; a fused MoE: the kernel the engine's defaults pick for the architecture
        (the record's ``runner``), else the first of its MoE kernels the device has a figure for,
        behind an all-to-all only if the engine keeps it there, :data:`LOCAL_EXPERT_KERNELS`), where
        the device has a streaming figure for that family measured for this dtype, the engine's
        own (``family:engine``) first; else None."""
        if record.name in DENSE_GEMMS:
            kernels = [self.engine.dense_kernels.get(cost.kernel_dtype)]
        elif record.name == "infercast::fused_moe":
            runner = record.named.get("runner") if self.moe_kernel == "auto" else None
            kernels = [runner] if runner else list(self.engine.moe_kernels.get(
                table_dtype(cost.kernel_dtype, self.device), ()))
            if (record["dispatch"] == "all_to_all" and self.moe_kernel == "auto"
                    and (kernels[:1] or [None])[0] not in LOCAL_EXPERT_KERNELS):
                return None  # behind DeepEP engines run their DeepEP MoE kernels (sglang: DeepGEMM), not this
        else:
            return None
        for kernel in kernels:
            if kernel is None:
                continue
            key = self.device.efficiency.stream_key(kernel, self.engine.tables)
            stream = self.device.efficiency.streams.get(key)
            if stream is not None and cost.kernel_dtype in stream.dtypes:
                return key
        return None

    def _price(self, record: OpRecord, phase: Phase) -> Priced:
        cost = cost_of(record)
        fp8_attention = self.engine.fp8_prefill_attention and prefills_over_fp8_cache(record)
        if fp8_attention:
            cost = replace(cost, compute_dtype="fp8")
        if phase.kv_pool_tokens and record.name == "infercast::mla_attention":
            cost = replace(cost, bytes=cost.bytes + record["latent_cache"].nbytes)  # reads the bf16 copy
        kernel = self.stream_kernel(record, cost)
        timed = (analytic.collective_time(cost, self.device, phase.scale_up_domain) if cost.collective
                 else analytic.kernel_time(cost, self.device, kernel))
        if cost.collective and cost.group_size <= 1:
            return Priced(0.0, "communication", "measured", "no peers")
        query = table_query(record, cost, self, phase)
        if query is not None:
            for source in (self.calibration, self.tables):
                if source is None:
                    continue
                answer = source.answer(query)
                if answer is not None:
                    quality = answer.quality if query.scale == 1.0 or query.scaled_quality is None else (
                        query.scaled_quality)
                    return Priced(answer.value * query.scale * 1e-6, timed.bound, quality,
                                  f"{query.kind} {source.origin_of(query)}{query.note}" + _busiest_note(record))
        why = _why_analytic(record, query, self)
        if kernel:
            why += f"; {kernel} stream"
        if fp8_attention and self.device.efficiency.attention_fp8 is not None:
            why += "; FP8 queries over the FP8 cache"
        return Priced(timed.seconds, timed.bound, ANALYTIC, why + _busiest_note(record))


def _busiest_note(record: OpRecord) -> str:
    """For a fused MoE whose busiest EP rank carries more than the mean, how much more (the
    rows it is priced at: :func:`infercast.routing.busiest_rank`)."""
    if record.name != "infercast::fused_moe" or record["straggler"] <= 1.0 + 1e-9:
        return ""
    return f"; the busiest EP rank: x{record['straggler']:.2f} the mean rank's rows"


def _record_key(record: OpRecord, phase: Phase) -> tuple:
    def spec(v):
        if isinstance(v, (list, tuple)):
            return tuple(spec(item) for item in v)
        shape = getattr(v, "shape", None)
        return (shape, str(v.dtype)) if shape is not None else v

    return (record.name, tuple(spec(v) for v in record.named.values()) or tuple(spec(a) for a in record.args),
            tuple(spec(o) for o in record.outputs), phase)


UNCOVERED = {
    "infercast::attention": "not causal: the attention tables time causal attention only",
    "infercast::mla_attention": "not DeepSeek-V3's MLA geometry, which the MLA tables are measured for",
    "infercast::mla_prefill_attention": "not DeepSeek-V3's MLA geometry, which the MLA tables are measured for",
    "infercast::mla_bmm": "not DeepSeek-V3's MLA geometry, which the MLA tables are measured for",
    "infercast::fused_moe": "no moe table of the engine's kernel for this dtype and expert shape",
    "infercast::all_reduce": "spans nodes: the tables cover one node",
    "infercast::all_gather": "spans nodes: the tables cover one node",
    "infercast::reduce_scatter": "spans nodes: the tables cover one node",
    "infercast::all_to_all": "not whole nodes of the device's scale-up domain, which the DeepEP tables time",
}
"""Why an operator of a table kind found no table to ask (its query builder returned None)."""
NO_TABLE_KIND = "no kernel table times this operator"
"""Why an operator no table kind covers (norms, RoPE, activations, adds, copies) is analytic."""


def _why_analytic(record: OpRecord, query: Query | None, model: CostModel) -> str:
    if record.name == "infercast::kv_pool_cast":
        return (f"{model.engine.name}'s whole-pool FP8-to-bf16 copy, {record['pool_tokens']:,} slots "
                f"at the device's cast rate")
    if model.tables is None and model.calibration is None:
        return "no measured tables"
    if query is None and record.name == "infercast::fused_moe" and model.moe_kernel != "auto":
        return (f"no moe table times {model.moe_kernel} (--moe-kernel) for this expert shape"
                + ("" if not _moe_kernels_measured(record, model) else
                   f"; measured with {', '.join(_moe_kernels_measured(record, model))}, which --moe-kernel leaves out"))
    runner = record.named.get("runner") if record.name == "infercast::fused_moe" else None
    if query is None and runner and model.moe_kernel == "auto":
        others = [k for k in _moe_kernels_measured(record, model) if k != runner]
        measured = f"; measured with {', '.join(others)}, which it does not run here" if others else ""
        return (f"no moe table times {runner}, which {model.engine.name} launches for this architecture, for this "
                f"expert shape{measured}")
    if query is None and record.name == "infercast::fused_moe":
        other = _moe_routings_measured(record, model)
        if other:
            from infercast.routing import DISTRIBUTIONS

            flag = next((f for f, table in DISTRIBUTIONS.items() if table in other), None)
            return (f"the moe tables time this expert shape with {' and '.join(other)} routing only, not "
                    f"{record['distribution']}" + (f" (--expert-imbalance {flag} reads them)" if flag else ""))
    if query is None:
        return UNCOVERED.get(record.name, NO_TABLE_KIND)
    if query.kind == "gemm" and query.key[0] in EAGER_TIMED_GEMMS.get(model.engine.tables, ()):
        return f"{model.engine.name}'s {query.key[0]} GEMM table was timed eagerly, host launches included: left out"
    return f"no {query.kind} table for {'/'.join(str(k) for k in query.key)}"


def _moe_routings_measured(record: OpRecord, model: CostModel) -> list[str]:
    """The routings the MoE tables measure this expert shape with (any kernel, as
    :meth:`CostModel.engine_kernel` takes them) when ``record``'s routing has none; empty when
    it has some or the experts are spread over EP ranks (a miss there has other causes: an EP
    size or a DeepEP kernel the tables lack)."""
    if record["local_experts"] < record["num_experts"]:
        return []
    dtype, shape = _moe_key(record, model.device)
    found = set()
    for source in (model.calibration, model.tables):
        if source is not None:
            found |= {key[2] for key in source.table("moe").keys() if key[0] == dtype and key[3:] == shape}
    return [] if record["distribution"] in found else sorted(found)


def _moe_kernels_measured(record: OpRecord, model: CostModel) -> list[str]:
    """The kernels the MoE tables time ``record``'s expert shape and routing with."""
    dtype, shape = _moe_key(record, model.device)
    found = set()
    for source in (model.calibration, model.tables):
        if source is not None:
            found |= {key[1] for key in source.table("moe").keys()
                      if key[0] == dtype and key[2] == record["distribution"] and key[3:] == shape}
    return sorted(found)


def _check_version(version: str) -> None:
    """Refuse an ``--engine-version`` that is not a version number where no tables list the valid ones."""
    from infercast.kernels.aiconfigurator import is_version

    if not is_version(version):
        raise InfercastError(f"--engine-version {version!r} is not a version number (e.g. 0.5.9)")


def _measured_tables(device: DeviceSpec, engine: Engine, version: str | None, notes: list[str]):
    from infercast.kernels import MeasuredTables, available

    if not device.kernel_tables:
        if version is not None:
            _check_version(version)
        defaults = (f"; {engine.name} {version} sets the version's defaults (prefill graphs, all-reduce fusion, "
                    "scheduling)" if version is not None else "")
        notes.append(f"{device.name} has no measured kernel tables: every operator is priced analytically"
                     f"{defaults} (efficiencies: {device.efficiency.source})")
        return None
    if not available():
        notes.append("aiconfigurator-core is not installed: every operator is priced analytically "
                     "(pip install aiconfigurator-core)")
        return None
    from infercast.kernels import aiconfigurator

    if version is None and not aiconfigurator.default_version(device.kernel_tables, engine.tables):
        notes.append(f"no {engine.name} kernel tables for {device.name}: every operator is priced analytically")
        return None
    tables = MeasuredTables(device.kernel_tables, engine, version)
    if tables.note:
        notes.append(tables.note)
    return tables


# ------------------------------------------------------------------------------ queries


def _kv(dtype) -> str:
    return "fp8" if getattr(dtype, "itemsize", 2) == 1 else "bf16"


FP8_QUERY_HEAD_DIM = 256
"""The widest head FA3 runs with FP8 queries (sglang casts them only up to it)."""


def prefills_over_fp8_cache(record: OpRecord) -> bool:
    """A prefill attention (GQA/MHA or MLA's expanded form) over an FP8 KV cache with heads FA3
    takes in FP8: sglang's FA3 backend then casts the queries, and MLA's fresh keys and values,
    to FP8 (``FlashAttentionBackend.forward_extend``)."""
    if record.name == "infercast::attention":
        q = record["q"]
        return (record["causal"] and not _decode_like(record["q_len"], record["kv_len"])
                and _kv(record["k_cache"].dtype) == "fp8" and q.shape[2] <= FP8_QUERY_HEAD_DIM)
    if record.name == "infercast::mla_prefill_attention":
        return cache_itemsize(record) == 1 and record["q"].shape[2] <= FP8_QUERY_HEAD_DIM
    return False


def table_query(record: OpRecord, cost: OpCost, model: CostModel, phase: Phase) -> Query | None:
    """The table lookup that covers ``record``, or None (analytic)."""
    builder = _QUERIES.get(record.name)
    return builder(record, cost, model, phase) if builder else None


def _gemm_query(record: OpRecord, cost: OpCost, model: CostModel, phase: Phase) -> Query | None:
    """The GEMM table of the kernel's dtype. An FP32 GEMM, which the shipped tables do not time, is
    read from a calibration file's ``fp32`` rows where it has them, else as the bf16 row of its
    shape scaled by what the analytic model gives the two (:func:`_gemm_shape_time`): at a few rows
    both are the kernel's fixed time and a weight stream, over many the CUDA cores' FP32 rate."""
    m, n, k = cost.gemm_mnk
    dtype = table_dtype(cost.kernel_dtype, model.device)
    device = model.device

    def shape(c, dtype=dtype):
        return _gemm_shape_time(c, dtype, device)

    if dtype == "fp32":
        own = Query("gemm", ("fp32",), (m, n, k), shape)
        if model.calibration is not None and model.calibration.answer(own) is not None:
            return own
        scale = shape((m, n, k)) / shape((m, n, k), "bf16")
        return Query("gemm", ("bf16",), (m, n, k), lambda c: shape(c, "bf16"), scale, EXTRAPOLATED,
                     f"; its bf16 row x{scale:.2f} for FP32 on the CUDA cores")
    return Query("gemm", (dtype,), (m, n, k), shape)


def _gemm_shape_time(c: tuple[float, ...], dtype: str, device: DeviceSpec) -> float:
    """The analytic time of an (m, n, k) GEMM of kernel ``dtype`` with activations in the compute
    dtype's width (bf16's for the quantized kinds)."""
    mm, nn, kk = c
    w = DTYPE_BYTES.get(dtype, 2.0)
    a = 4.0 if dtype == "fp32" else 2.0
    return analytic.kernel_time(OpCost(flops=2 * mm * nn * kk, compute_dtype=COMPUTE_DTYPE.get(dtype, "bf16"),
                                       bytes=a * mm * kk + w * nn * kk + a * mm * nn, kernel_dtype=dtype,
                                       kind="gemm", gemm_mnk=(int(mm), int(nn), int(kk))), device).seconds


def table_dtype(kernel_dtype: str, device: DeviceSpec) -> str:
    """The ``moe`` tables' dtype of experts in ``kernel_dtype`` on ``device`` (MXFP4 without FP4
    tensor cores runs weight-only)."""
    if kernel_dtype == "mxfp4" and "fp4" not in device.peak_flops_per_s:
        return "mxfp4_w4a16"
    return kernel_dtype


def _decode_like(q_len: int, kv_len: int) -> bool:
    """A few new tokens over a longer cache (decode, a speculative verify) run the decode kernel."""
    return q_len == 1 or (q_len <= 16 and kv_len > q_len)


def _attention_query(record: OpRecord, cost: OpCost, model: CostModel, phase: Phase) -> Query | None:
    if not record["causal"]:
        return None
    q, k_cache = record["q"], record["k_cache"]
    heads, head_dim, kv_heads = q.shape[1], q.shape[2], k_cache.shape[1]
    kv_key = 0 if kv_heads == heads else kv_heads
    seqs, q_len, kv_len = record["num_seqs"], record["q_len"], record["kv_len"]
    window = record.named.get("window", 0)
    kv_dtype = _kv(k_cache.dtype)
    device = model.device
    if _decode_like(q_len, kv_len):
        kv_len = window_kv_len(q_len, kv_len, window)  # within a sliding window a decode reads only it
        def shape(c):
            h, b, s = c
            return _attention_shape(device, h, kv_heads if kv_key else h, head_dim, b, 1, s, kv_dtype)

        scale = _attention_shape(device, heads, kv_heads, head_dim, seqs, q_len, kv_len, kv_dtype) / shape(
            (heads, seqs, kv_len))
        return Query("generation_attention", (kv_dtype, head_dim, kv_key), (heads, seqs, kv_len), shape, scale,
                     EXTRAPOLATED)

    def shape(c):
        h, s, b = c
        return _attention_shape(device, h, kv_heads if kv_key else h, head_dim, b, s, s, kv_dtype)

    fp8_queries = model.engine.fp8_prefill_attention and prefills_over_fp8_cache(record)
    # a sliding window scores fewer (query, key) pairs than the causal prefill the table times
    windowed = attended_pairs(1, q_len, kv_len, True, window) / attended_pairs(1, q_len, kv_len, True)
    return Query("context_attention", ("fp8" if fp8_queries else "bf16", kv_dtype, head_dim, kv_key),
                 (heads, kv_len, seqs), shape, _extend_share(q_len, kv_len) * windowed, EXTRAPOLATED)


def _extend_share(q_len: int, kv_len: int) -> float:
    """The share of a causal prefill of ``kv_len`` tokens that an extend of its last ``q_len``
    tokens computes: the (query, key) pairs its prefix leaves, (kv^2 - prefix^2) / kv^2."""
    prefix = kv_len - q_len
    return (kv_len ** 2 - prefix ** 2) / kv_len ** 2


def _attention_shape(device, heads, kv_heads, head_dim, seqs, q_len, kv_len, kv_dtype, v_dim=None,
                     kind: str = "attention") -> float:
    v_dim = v_dim or head_dim
    prefix = kv_len - q_len
    pairs = seqs * (q_len * prefix + q_len * (q_len + 1) / 2)
    kv_bytes = 1.0 if kv_dtype == "fp8" else 2.0
    cost = OpCost(flops=2.0 * heads * pairs * (head_dim + v_dim), kind=kind,
                  bytes=seqs * (q_len * heads * (head_dim + v_dim) * 2 + kv_len * kv_heads * (head_dim + v_dim) * kv_bytes))
    return analytic.kernel_time(cost, device).seconds


MLA_GEOMETRY = {"qk_head": 192, "v_head": 128, "latent": 576, "kv_lora": 512, "nope": 128}
"""The MLA tables are measured for DeepSeek-V3's geometry (Kimi-K2.5 shares it)."""


def _mla_latent_query(record: OpRecord, cost: OpCost, model: CostModel, phase: Phase) -> Query | None:
    """MLA over the latent cache: a decode (or a speculative verify) from the decode table, an
    extend of many tokens (the absorbed prefill over a short cached prefix) from the absorbed
    context table, each prefill of ``kv_len`` tokens scaled to the pairs the prefix leaves."""
    q, cache = record["q"], record["latent_cache"]
    if q.shape[2] != MLA_GEOMETRY["latent"] or record["v_head_dim"] != MLA_GEOMETRY["kv_lora"]:
        return None
    heads, seqs, q_len, kv_len = q.shape[1], record["num_seqs"], record["q_len"], record["kv_len"]
    device = model.device
    # after a whole-pool cast the kernel reads bf16; the tables' FP8 rows hold a cast of their own
    kv_dtype = "bf16" if phase.kv_pool_tokens else _kv(cache.dtype)
    if not _decode_like(q_len, kv_len):
        def prefill(c):
            h, s, b = c
            return _attention_shape(device, h, 1, 576, b, s, s, kv_dtype, v_dim=512, kind="mla_attention")

        return Query("context_mla_absorbed", ("bf16", kv_dtype), (heads, kv_len, seqs), prefill,
                     _extend_share(q_len, kv_len), EXTRAPOLATED)

    def shape(c):
        h, b, s = c
        return _attention_shape(device, h, 1, 576, b, 1, s, kv_dtype, v_dim=512, kind="mla_attention")

    scale = _attention_shape(device, heads, 1, 576, seqs, q_len, kv_len, kv_dtype, v_dim=512,
                             kind="mla_attention") / shape((heads, seqs, kv_len))
    return Query("generation_mla", (kv_dtype,), (heads, seqs, kv_len), shape, scale, EXTRAPOLATED)


def _mla_prefill_query(record: OpRecord, cost: OpCost, model: CostModel, phase: Phase) -> Query | None:
    q, k, v = record["q"], record["k"], record["v"]
    if q.shape[2] != MLA_GEOMETRY["qk_head"] or v.shape[2] != MLA_GEOMETRY["v_head"]:
        return None
    heads, seqs, q_len, kv_len = q.shape[1], record["num_seqs"], record["q_len"], record["kv_len"]
    device = model.device
    kv_dtype = _kv(k.dtype)

    def shape(c):
        h, s, b = c
        return _attention_shape(device, h, h, 192, b, s, s, kv_dtype, v_dim=128)

    return Query("context_mla", ("bf16", kv_dtype), (heads, kv_len, seqs), shape, _extend_share(q_len, kv_len),
                 EXTRAPOLATED)


def _mla_bmm_query(record: OpRecord, cost: OpCost, model: CostModel, phase: Phase) -> Query | None:
    x, w = record["x"], record["weight"]
    which = record["which"]
    expected = (MLA_GEOMETRY["nope"], MLA_GEOMETRY["kv_lora"]) if which == "pre" else (
        MLA_GEOMETRY["kv_lora"], MLA_GEOMETRY["nope"])
    if (w.shape[1], w.shape[2]) != expected:
        return None
    heads, tokens = x.shape[0], x.shape[1]
    device = model.device
    dtype = "fp8" if x.dtype.itemsize == 1 else "bf16"

    def shape(c):
        h, t = c
        return analytic.kernel_time(OpCost(flops=2 * h * t * 128 * 512, bytes=h * 128 * 512 * 2 + t * h * 640 * 2,
                                           kind="gemm", kernel_dtype=dtype), device).seconds

    return Query("mla_bmm", (dtype, which), (heads, tokens), shape)


def _moe_key(record: OpRecord, device: DeviceSpec) -> tuple[str, tuple]:
    """A fused MoE's table dtype and expert shape (top-k, experts, hidden, intermediate, MoE TP),
    the ``moe`` key after its kernel and routing."""
    hidden, inter = record["x"].shape[-1], record["w13"].shape[1] // 2 * record["moe_tp"]
    return (table_dtype(record["dtype"], device),
            (record["top_k"], record["num_experts"], hidden, inter, record["moe_tp"]))


def _moe_query(record: OpRecord, cost: OpCost, model: CostModel, phase: Phase) -> Query | None:
    dtype, (top_k, experts, hidden, inter, moe_tp) = _moe_key(record, model.device)
    local = record["local_experts"]
    ep = experts / local
    tokens = record["routed_rows"] / local * experts / top_k
    if record["distribution"] == "balanced":  # the tables spread tokens evenly: ask for the busiest rank's load
        tokens *= record["straggler"]

    def shape_at(tp: int) -> Callable[[tuple[float, ...]], float]:
        return moe_shape(model.device, dtype, top_k, experts, hidden, inter, tp)

    shape = shape_at(moe_tp)
    rest = (record["distribution"], top_k, experts, hidden, inter, moe_tp)
    runner = record.named.get("runner")  # the kernel the engine launches for this architecture: its rows only
    runner_only = (runner,) if runner and model.moe_kernel == "auto" else None
    if local < experts:  # expert parallel: behind DeepEP, its grouped GEMMs (low-latency layout in decode)
        kernel = None
        if record["dispatch"] == "all_to_all" and model.moe_kernel in ("auto", DEEPEP_EXPERT_KERNEL):
            kernel = model.engine_kernel(dtype, rest, ("deepep_ll",) if phase.decode else ("deepep_normal",),
                                         only=True)
        if kernel is None:  # the engine's own kernel over its local experts (the standard dispatcher's, or kept
            # behind the all-to-all), at an EP size the table has: never extrapolated along EP
            own = model.engine_kernel(dtype, rest, runner_only, only=True)
            kept = record["dispatch"] == "local" or own in LOCAL_EXPERT_KERNELS
            if own is not None and kept and model.measured_at("moe", (dtype, own, *rest), 0, ep):
                kernel = own
    else:
        kernel = model.engine_kernel(dtype, rest, runner_only, only=runner_only is not None)
        if kernel is None:
            near = _nearest_moe_tp(model, dtype, rest, runner_only)
            if near is not None:  # the same experts measured split over another MoE TP: its row, scaled
                kernel, tp = near
                sibling = _sibling_tp_ratio(model, dtype, kernel, rest, tp, (ep, tokens), shape_at)
                if sibling is not None:
                    scale, origin = sibling
                    why = f", the ratio {origin} measures for the same kernel"
                else:
                    scale, why = shape((ep, tokens)) / shape_at(tp)((ep, tokens)), ""
                return Query("moe", (dtype, kernel, *rest[:-1], tp), (ep, tokens), shape_at(tp), scale, EXTRAPOLATED,
                             f"; its MoE TP {tp} row x{scale:.2f} for MoE TP {moe_tp}{why}")
    if kernel is None:
        return None
    return Query("moe", (dtype, kernel, record["distribution"], top_k, experts, hidden, inter, moe_tp), (ep, tokens),
                 shape)


def moe_shape(device: DeviceSpec, dtype: str, top_k: int, experts: int, hidden: int, inter: int,
              moe_tp: int) -> Callable[[tuple[float, ...]], float]:
    """The analytic time of a fused MoE at (EP, tokens) that the ``moe`` tables are interpolated
    along: the experts' weights (a 1/``moe_tp`` slice) and the rows' activations streamed, their
    FLOPs, five kernels. Its ratio between two MoE TPs carries a row measured at one to the other."""
    w = DTYPE_BYTES.get(dtype, 2.0)

    def shape(c: tuple[float, ...]) -> float:
        e, t = c
        rows = t * top_k / e
        active = min(experts / e, rows)
        return analytic.kernel_time(OpCost(flops=6.0 * rows * hidden * inter / moe_tp,
                                           compute_dtype=COMPUTE_DTYPE.get(dtype, "bf16"),
                                           bytes=active * 3 * hidden * inter / moe_tp * w + rows * hidden * 4,
                                           kernel_dtype=dtype, kind="gemm", kernels=5), device).seconds
    return shape


def _nearest_moe_tp(model: CostModel, dtype: str, rest: tuple,
                    launched: tuple[str, ...] | None = None) -> tuple[str, int] | None:
    """(kernel, MoE TP) of the rows that time the same experts (``rest``: routing, top-k, experts,
    hidden, intermediate, MoE TP) split over a MoE TP at most twice or half ``rest``'s, at EP 1:
    the engine's kernel as :meth:`CostModel.engine_kernel` picks one, at the nearer MoE TP, a
    calibration file's before the shipped tables', then the smaller. Further off, the analytic
    ratio carries a row worse than the analytic price itself at a few tokens (docs/fidelity.md,
    "The same experts at another MoE TP"); None there. ``launched``: the one kernel the engine
    launches for this architecture (:attr:`~infercast.layers.SimContext.moe_runner`), whose rows
    alone count."""
    *shape, target = rest
    measured: dict[str, dict[int, int]] = {}  # kernel -> MoE TP -> rank of the first source that has it
    for rank, source in enumerate((model.calibration, model.tables)):
        table = source.table("moe") if source is not None else None
        for key in table.keys() if table is not None else ():
            tp = key[-1]
            if key[0] != dtype or list(key[2:-1]) != shape or tp == target or abs(math.log2(tp / target)) > 1:
                continue
            if any(coords[0] == 1 for coords, _ in table.grid(key).points()):  # EP 1: not DeepEP's rows alone
                measured.setdefault(key[1], {}).setdefault(tp, rank)
    kernels = [k for k in launched or model.engine.moe_kernels.get(dtype, ()) if k in measured]
    if not kernels and model.moe_kernel == "auto" and not launched:
        kernels = sorted(measured)  # as engine_kernel: another kernel's rows before none
    if not kernels:
        return None
    tps = measured[kernels[0]]
    return kernels[0], min(tps, key=lambda tp: (abs(math.log2(tp / target)), tps[tp], tp))


SHARED_MOE_KERNELS: dict[tuple[str, str], tuple[str, ...]] = {
    ("triton", "bf16"): ("sglang", "vllm"), ("triton", "fp8_block"): ("sglang", "vllm"),
    ("marlin", "w4a16"): ("sglang", "vllm")}
"""(MoE kernel, table dtype) whose code sglang and vLLM share (sglang's Triton fused MoE and its
Marlin MoE come from vLLM's) and both engines' tables time (per-tensor FP8 Triton rows are
vLLM's alone), by the engines' table folders: one engine's rows say how the
other's kernel scales with MoE TP. Not MXFP4: vLLM's ``triton`` rows of it time OpenAI's
triton_kernels, sglang's its own fused MoE, and the one's ratio predicts the other's worse than
the analytic ratio does. Carrying a row of one to a neighbouring MoE TP (twice or half) by the
other's measured ratio, instead of the analytic ratio (:func:`moe_shape`), cuts the median error
from 7.9% to 4.7% over the H100, H200 and B200 tables' pairs of rows, at each token count both
time (FP8 blocks everywhere, 4.6-11.9% -> 2.1-6.0%; of the 32 cells by device, kernel and dtype,
direction and band, 5 are worse, 3 of them INT4 Marlin on H200): ``benchmarks/moe_tp_transfer.py``."""


def _sibling_tp_ratio(model: CostModel, dtype: str, kernel: str, rest: tuple, tp: int, coords: tuple[float, ...],
                      shape_at: Callable[[int], Callable]) -> tuple[float, str] | None:
    """(latency at ``rest``'s MoE TP / latency at ``tp``, the table that measured both) from another
    engine's shipped tables on the same system that time ``kernel`` for ``dtype``
    (:data:`SHARED_MOE_KERNELS`) at both MoE TPs with EP 1 in one version (its newest such), at
    ``coords``; None where none does. Rows of two versions are not mixed: each has its own tuned
    tile configurations."""
    siblings = SHARED_MOE_KERNELS.get((kernel, dtype), ())
    if model.tables is None or model.engine.tables not in siblings:
        return None
    *shape, target = rest
    keys = ((dtype, kernel, *shape, target), (dtype, kernel, *shape, tp))
    found = _sibling_rows(model.tables.system, tuple(e for e in siblings if e != model.engine.tables), keys)
    if found is None:
        return None
    table, origin = found
    at, near = (table.query(k, coords, shape_at(t)) for k, t in zip(keys, (target, tp)))
    if at is None or near is None or near.value <= 0:
        return None
    return at.value / near.value, origin


@functools.lru_cache(maxsize=None)
def _sibling_rows(system: str, engines: tuple[str, ...], keys: tuple[tuple, ...]):
    """(the table, ``"<engine> <version>"``) of the first of ``engines``, newest version first,
    whose own rows (none filled from another version) time every one of ``keys`` at EP 1; None."""
    from infercast.kernels import sibling_tables

    for engine in engines:
        for version, table in sibling_tables("moe", system, engine):
            origin = f"{engine} {version}"
            grids = [table.grid(k) for k in keys]
            if all(g is not None and table.origin(k) == origin and any(c[0] == 1 for c, _ in g.points())
                   for g, k in zip(grids, keys)):
                return table, origin
    return None


def _collective_query(record: OpRecord, cost: OpCost, model: CostModel, phase: Phase) -> Query | None:
    n = cost.group_size
    if n > phase.scale_up_domain:
        return None  # hierarchical across nodes: analytic (the tables cover one node)
    device = model.device
    kind = cost.collective
    size = cost.message_bytes * (n if kind == "all_gather" else 1)  # nccl-tests sizes: the whole buffer

    def shape(c):
        (b,) = c
        return analytic.collective_time(OpCost(kind="collective", collective=kind, message_bytes=b / (
            n if kind == "all_gather" else 1), group_size=n), device, phase.scale_up_domain).seconds

    if kind == "all_reduce" and model.engine.custom_all_reduce:
        return Query("all_reduce", ("graph" if phase.graph else "eager", n), (size,), shape)
    return Query("nccl", (kind, "bf16", n), (size,), shape)


def _all_to_all_query(record: OpRecord, cost: OpCost, model: CostModel, phase: Phase) -> Query | None:
    a = cost.a2a
    ep, domain = cost.group_size, phase.scale_up_domain
    if ep % domain:
        return None  # the DeepEP tables are measured for whole nodes of 8
    nodes = ep // domain
    device = model.device

    def shape(c):
        nn, t = c
        return analytic.deepep_time(OpCost(kind="collective", collective="all_to_all", group_size=int(nn * domain),
                                           a2a={**a, "tokens": t}), device, domain).seconds

    kind = "deepep_ll" if a["mode"] == "ll" else "deepep_normal"
    return Query(kind, (a["phase"], a["hidden"], a["top_k"], a["num_experts"]), (nodes, a["tokens"]), shape)


_QUERIES: dict[str, Callable[..., Query | None]] = {
    "infercast::gemm": _gemm_query,
    "infercast::quant_gemm": _gemm_query,
    "aten::linear": _gemm_query,  # a pytorch-ir graph's GEMMs (--from-ir)
    "aten::addmm": _gemm_query,
    "infercast::attention": _attention_query,
    "infercast::mla_attention": _mla_latent_query,
    "infercast::mla_prefill_attention": _mla_prefill_query,
    "infercast::mla_bmm": _mla_bmm_query,
    "infercast::fused_moe": _moe_query,
    "infercast::all_reduce": _collective_query,
    "infercast::all_gather": _collective_query,
    "infercast::reduce_scatter": _collective_query,
    "infercast::all_to_all": _all_to_all_query,
}


def measured_share(rows: list[tuple[OpRecord, Priced]]) -> dict[str, float]:
    """Share of operator time by source."""
    total = sum(p.seconds * r.count for r, p in rows)
    out = {s: 0.0 for s in SOURCES}
    for r, p in rows:
        out[p.source] = out.get(p.source, 0.0) + (p.seconds * r.count / total if total else 0.0)
    return out


__all__ = ["CostModel", "Phase", "Priced", "Query", "measured_share", "table_query", "Answer"]
