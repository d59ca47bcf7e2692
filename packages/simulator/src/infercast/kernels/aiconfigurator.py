"""Measured kernel tables from the ``aiconfigurator-core`` package (NVIDIA, Apache-2.0).

The package ships parquet files under
``aiconfigurator_core/systems/data/<system>/<family>/<engine>/<version>/<table>.parquet``,
measured with sglang, vLLM and TensorRT-LLM on each system. This module reads them with
pyarrow (not aiconfigurator's estimator) and converts them to infercast's table kinds
(:mod:`infercast.kernels.tables`): latencies to microseconds, collective sizes from elements
to bytes, dtype names to infercast's. Only the files a run needs are read, once per process.

For an engine version V, each table comes from V's directory; points V lacks come from the
older versions of the same engine, nearest first, then from the newer ones, newest first. The
newest collectors time what the engines run best: sglang 0.5.10's fp8_block MoE rows on an H200
take 1.5-1.9x its 0.5.14 rows from 8 to 1,024 tokens, and would price DeepSeek-R1 decoding 8
requests at 14.9 ms a step where InferenceX measured 12.5 ms a token on sglang 0.5.9 (0.5.14's
rows: 11.9 ms). A slice's origin names every version that gave it points.
Repeated measurements of one point are combined by their median (DeepEP normal mode: the
fastest SM setting, as DeepEP's tuned configs choose).
"""

from __future__ import annotations

import functools
import importlib.util
import math
from pathlib import Path
from typing import Any, Callable, Iterable

from infercast_adapters import InfercastError

from infercast.kernels.grid import EXTRAPOLATED, INTERPOLATED, Answer, worse
from infercast.kernels.tables import KernelTable

PACKAGE = "aiconfigurator-core"

DTYPES = {"bfloat16": "bf16", "float16": "fp16", "fp8": "fp8", "fp8_block": "fp8_block", "int8_wo": "w8a16",
          "int4_wo": "w4a16", "sq": "int8", "w4a16_mxfp4": "mxfp4_w4a16", "nvfp4": "nvfp4", "half": "bf16",
          "int8": "int8"}
"""aiconfigurator's dtype names -> infercast's (``half`` is NCCL's 16-bit element)."""

MOE_KERNELS = ("marlin", "deepgemm", "flashinfer_cutlass", "cutlass", "trtllm", "triton")
"""Short kernel names for the MoE tables, matched in this order inside ``kernel_source``."""
MOE_KERNEL_ALIASES = {"vllm_fused_moe": "triton"}
"""``kernel_source`` labels naming none of :data:`MOE_KERNELS`: aiconfigurator's vLLM collector
(``collector/vllm/collect_moe_v1.py``, vLLM 0.14 and later) times vLLM's ``fused_experts``, its
Triton fused MoE, for bf16, FP8 and FP8-block experts as ``vllm_fused_moe`` (the tables of vLLM
0.19.0 and 0.22.0, and A100's 0.14.0 bf16 rows; 0.24.0's name the kernel). Not
``vllm_mxfp4_moe``: timed through vLLM's FusedMoE module, its kernel depends on the device."""


def data_root() -> Path | None:
    """``.../aiconfigurator_core/systems/data`` of the installed package, without importing it."""
    spec = importlib.util.find_spec("aiconfigurator_core")
    if spec is None or not spec.submodule_search_locations:
        return None
    root = Path(list(spec.submodule_search_locations)[0]) / "systems" / "data"
    return root if root.is_dir() else None


@functools.lru_cache(maxsize=1)
def model_configs() -> dict[str, tuple[str, Path, Path | None]]:
    """The ``config.json`` files aiconfigurator-core ships for the models it knows
    (``model_configs/<org>--<name>_config.json``, a ModelOpt checkpoint's quantization beside it
    as ``<org>--<name>_hf_quant_config.json``), by lower-cased hub id: (hub id, config file,
    quantization file or None). Empty without the package."""
    root = data_root()
    folder = root.parent.parent / "model_configs" if root is not None else None
    if folder is None or not folder.is_dir():
        return {}
    found = {}
    for file in sorted(folder.glob("*--*_config.json")):
        stem = file.name[:-len("_config.json")]
        if stem.endswith("_hf_quant"):
            continue
        quant = folder / f"{stem}_hf_quant_config.json"
        ref = stem.replace("--", "/", 1)
        found[ref.lower()] = (ref, file, quant if quant.is_file() else None)
    return found


def version_key(version: str):
    """Sort key of an engine version: PEP 440 order, names that do not parse first."""
    from packaging.version import InvalidVersion, Version

    try:
        return (0, Version(version))
    except InvalidVersion:
        return (-1, version)


def is_version(version: str) -> bool:
    """Whether ``version`` is a PEP 440 version number."""
    return version_key(version)[0] == 0


@functools.lru_cache(maxsize=None)
def engine_versions(system: str, engine: str) -> tuple[str, ...]:
    """Versions of ``engine`` with any table for ``system``, newest first."""
    root = data_root()
    if root is None or not (root / system).is_dir():
        return ()
    found = set()
    for family in (root / system).iterdir():
        engine_dir = family / engine
        if engine_dir.is_dir():
            found |= {v.name for v in engine_dir.iterdir() if v.is_dir() and any(v.glob("*.parquet"))}
    return tuple(sorted(found, key=version_key, reverse=True))


@functools.lru_cache(maxsize=None)
def default_version(system: str, engine: str) -> str | None:
    """The newest version of ``engine`` with a GEMM table on ``system`` (the table every model needs)."""
    root = data_root()
    for version in engine_versions(system, engine):
        if root and (root / system / "gemm" / engine / version / "gemm_perf.parquet").is_file():
            return version
    return None


def _read(path: Path, columns: Iterable[str]) -> dict[str, list]:
    """Named columns of a parquet file as Python lists; a bad file is an error naming it."""
    import pyarrow.parquet as pq

    try:
        table = pq.read_table(path)
    except Exception as exc:  # pyarrow raises several types for a truncated or foreign file
        raise InfercastError(f"measured kernel table {path} could not be read ({exc}); reinstall {PACKAGE} "
                             f"or run with --kernel-data analytic") from exc
    wanted = list(columns)
    missing = [c for c in wanted if c not in table.column_names]
    if missing:
        raise InfercastError(f"measured kernel table {path} lacks column(s) {', '.join(missing)} "
                             f"(has {', '.join(table.column_names)}); this {PACKAGE} version is not supported")
    return {c: table.column(c).to_pylist() for c in wanted}


def _short_moe_kernel(source: str) -> str:
    low = source.lower()
    return MOE_KERNEL_ALIASES.get(low) or next((name for name in MOE_KERNELS if name in low), low)


def _pick_lane(rows_by_lane: dict[tuple, dict[str, list]], preferred: tuple[str, ...]) -> list[tuple]:
    """Per slice, the rows of the engine's default attention kernel (first match of
    ``preferred`` inside the kernel name), else of the kernel with the most rows."""
    out = []
    for lanes in rows_by_lane.values():
        chosen = next((lanes[lane] for p in preferred for lane in sorted(lanes) if p in lane.lower()), None)
        if chosen is None:
            chosen = max(lanes.values(), key=len)
        out += chosen
    return out


# -- converters: parquet columns -> rows of an infercast table kind ---------------------------

Converter = Callable[[dict[str, list], dict[str, Any]], list[tuple]]


EAGER_TIMED_GEMMS = {"vllm": frozenset({"fp8_block"})}
"""GEMM dtypes an engine's collector timed eagerly, host launches included: vLLM's
``collect_gemm.py`` ran ``benchmark_with_power(..., use_cuda_graph=gemm_type != "fp8_block")``,
so its 0.24.0 ``fp8_block`` rows sit at 57-62 us for up to 17 rows on an H200 (n = k = 4,096)
where its graph-timed ``fp8`` rows take 10-12 us and sglang's ``fp8_block`` 10-14 us.
aiconfigurator's own reuse policy now excludes those rows (ai-dynamo/aisimulate PR 219: eager
148.55 us against 12.32 us under a graph at (1, 768, 7168) on a B200). They are left out, and
such GEMMs fall to the analytic model."""


SPIKE = 1.5
"""A GEMM row count measured more than this many times both neighbouring row counts of the same
(dtype, n, k) in one version's table is a spike: left out, so another version's row of that point
answers there where one has it (:func:`load` fills a version's gaps), else the neighbours'
interpolation."""


def _gemm(c: dict[str, list], opts: dict[str, Any]) -> list[tuple]:
    eager = EAGER_TIMED_GEMMS.get(opts.get("table_engine", ""), frozenset())
    rows = [(DTYPES[d], m, n, k, lat * 1e3) for d, m, n, k, lat in zip(c["gemm_dtype"], c["m"], c["n"], c["k"],
                                                                       c["latency"])
            if d in DTYPES and d not in eager]
    return without_spikes(rows)


def without_spikes(rows: list[tuple]) -> list[tuple]:
    """GEMM rows ``(dtype, m, n, k, us)`` less the spikes along m (:data:`SPIKE`). Within one
    shape a kernel's time does not fall as rows are added until the engine's dispatch changes
    tile configuration, which it does at row-count thresholds (CUTLASS's FP8 dispatch at 16, 64,
    128 rows), not for one count: vLLM 0.24.0's B200 FP8 rows take 32.4 us at 4 rows of
    (2,560, 8,192) between 12.9 and 12.8 us at 3 and 5, and InferenceX's Llama-3.3-70B FP8 runs
    on 4 x B200 decode no slower at 4 clients than at 8 (8.04 against 8.18 ms)."""
    by_shape: dict[tuple, list[tuple]] = {}
    for row in rows:
        by_shape.setdefault((row[0], row[2], row[3]), []).append(row)
    kept = []
    for shape_rows in by_shape.values():
        shape_rows.sort(key=lambda r: r[1])
        for i, row in enumerate(shape_rows):
            if 0 < i < len(shape_rows) - 1 and row[4] > SPIKE * max(shape_rows[i - 1][4], shape_rows[i + 1][4]):
                continue
            kept.append(row)
    return kept


def _attention(context: bool) -> Converter:
    def convert(c: dict[str, list], opts: dict[str, Any]) -> list[tuple]:
        windows = c.get("window_size") or [0] * len(c["latency"])
        by_lane: dict[tuple, dict[str, list]] = {}
        for i, lat in enumerate(c["latency"]):
            if windows[i] not in (0, None) or c["attn_dtype"][i] not in DTYPES or c["kv_cache_dtype"][i] not in DTYPES:
                continue
            heads, kv_heads = c["num_heads"][i], c["num_key_value_heads"][i]
            kv_key = 0 if kv_heads == heads else kv_heads
            if context:
                key = (DTYPES[c["attn_dtype"][i]], DTYPES[c["kv_cache_dtype"][i]], c["head_dim"][i], kv_key)
                row = (*key, heads, c["isl"][i], c["batch_size"][i], lat * 1e3)
            else:
                key = (DTYPES[c["kv_cache_dtype"][i]], c["head_dim"][i], kv_key)
                row = (*key, heads, c["batch_size"][i], c["isl"][i] + c["step"][i], lat * 1e3)
            by_lane.setdefault(key, {}).setdefault(c["kernel_source"][i], []).append(row)
        return _pick_lane(by_lane, opts.get("attention_lanes", ()))

    return convert


ABSORBED_CONTEXT_MLA = frozenset({"flash_attention"})
"""``kernel_source`` of context MLA tables that time the absorbed form, not the expanded one
``context_mla`` prices. aiconfigurator's sglang 0.5.14 collector (``collector/sglang/collect_mla.py``)
builds one ``RadixAttention`` with 576-wide q/k, 512-wide v and one KV head on the FA3 backend
(sm_90: ``flash_attention``), whose ``forward_extend`` then runs the absorbed branch
(``flash_attn_with_kvcache`` with ``qv``): about 600 TFLOP/s counted at those widths on H100 and
H200, 175 counted at the 192/128 of the expanded form. sglang prefills a batch without a cached
prefix (or with at least 8,192 cached tokens) in the expanded form, 3.4 times fewer FLOPs
(``_handle_attention_backend``, models/deepseek_common/attention_backend_handler.py, 0.5.9);
these rows price the ``context_mla_absorbed`` kind instead, the extends over 1-8,191 cached
tokens that sglang runs absorbed. Blackwell's ``trtllm_mla`` rows time the expanded form (1,090
TFLOP/s at 8K tokens on a B200, above its dense peak if counted absorbed) and stay."""


def _context_mla(absorbed: bool) -> Converter:
    def convert(c: dict[str, list], opts: dict[str, Any]) -> list[tuple]:
        return [(DTYPES[d], DTYPES[kv], h, isl, b, lat * 1e3) for src, d, kv, h, isl, b, lat in
                zip(c["kernel_source"], c["mla_dtype"], c["kv_cache_dtype"], c["num_heads"], c["isl"],
                    c["batch_size"], c["latency"])
                if d in DTYPES and kv in DTYPES and (src in ABSORBED_CONTEXT_MLA) == absorbed]
    return convert


def _generation_mla(c: dict[str, list], opts: dict[str, Any]) -> list[tuple]:
    return [(DTYPES[kv], h, b, isl + step, lat * 1e3) for kv, h, b, isl, step, lat in
            zip(c["kv_cache_dtype"], c["num_heads"], c["batch_size"], c["isl"], c["step"], c["latency"]) if kv in DTYPES]


def _mla_bmm(c: dict[str, list], opts: dict[str, Any]) -> list[tuple]:
    which = {"mla_gen_pre": "pre", "mla_gen_post": "post"}
    return [(DTYPES[d], which[op], h, t, lat * 1e3) for op, d, h, t, lat in
            zip(c["op_name"], c["bmm_dtype"], c["num_heads"], c["num_tokens"], c["latency"]) if d in DTYPES and op in which]


def _moe(c: dict[str, list], opts: dict[str, Any]) -> list[tuple]:
    short = {src: _short_moe_kernel(src) for src in set(c["kernel_source"])}
    return [(DTYPES[d], short[src], dist, topk, e, h, inter, tp, ep, t, lat * 1e3)
            for d, src, dist, topk, e, h, inter, tp, ep, t, lat in
            zip(c["moe_dtype"], c["kernel_source"], c["distribution"], c["topk"], c["num_experts"], c["hidden_size"],
                c["inter_size"], c["moe_tp_size"], c["moe_ep_size"], c["num_tokens"], c["latency"]) if d in DTYPES]


def _wideep_moe(kernel: str) -> Converter:
    """sglang's DeepEP expert compute (DeepGEMM grouped GEMMs after dispatch, no communication):
    ``num_tokens`` is per-rank tokens x EP size, as in ``moe``; ``uniform`` is balanced routing."""

    def convert(c: dict[str, list], opts: dict[str, Any]) -> list[tuple]:
        return [(DTYPES[d], kernel, "balanced" if dist == "uniform" else dist, topk, e, h, inter, tp, ep, t, lat * 1e3)
                for d, dist, topk, e, h, inter, tp, ep, t, lat in
                zip(c["moe_dtype"], c["distribution"], c["topk"], c["num_experts"], c["hidden_size"], c["inter_size"],
                    c["moe_tp_size"], c["moe_ep_size"], c["num_tokens"], c["latency"]) if d in DTYPES]

    return convert


def random_routing(found: Answer, table: KernelTable, key: tuple, coords: tuple, shape: Callable) -> Answer:
    """A ``moe`` answer for tokens routed at random, from a table measured with the collector's
    ``balanced`` routing. That routing (``balanced_logits`` in aiconfigurator's collectors) sends
    token i's j-th pick to expert (i + j x ceil(E/k)) mod E: T tokens touch about min(E, T x k)
    experts, all of them from T = ceil(E/k) on, where the table's latency stops growing with the
    weights it reads (Kimi-K2.5's 384 experts, top-8: flat from 48 tokens, in sglang's, vLLM's
    and TensorRT-LLM's tables alike). Tokens routed uniformly at random touch E(1 - (1 - k/E)^T)
    on average (:func:`infercast.routing.expected_active_experts`), fewer. So the latency is the
    table's at T less what the table pays between the token count that touches as many experts
    as random routing does and min(T, ceil(E/k)), with those tokens' rows given back at the
    rate the table adds rows once every expert is read (its slope from E/k to 2E/k tokens), and
    never more than the table's own. Kept as measured: EP > 1 (there the query already asks for
    the busiest rank's load, :func:`infercast.routing.busiest_rank`), slices with no EP-1 point
    (the answer is extrapolated along EP) and DeepEP's kernels."""
    from infercast.routing import expected_active_experts

    _, kernel, distribution, top_k, experts, *_ = key
    ep, tokens = coords
    if distribution != "balanced" or ep != 1 or tokens <= 1 or kernel.startswith("deepep"):
        return found
    grid = table.grid(key)
    if grid is None or not any(point[0] == 1 for point, _ in grid.points()):
        return found
    full = math.ceil(experts / top_k)
    spread = min(tokens, full)
    same = expected_active_experts(experts, top_k, tokens, experts) / top_k
    if same >= spread * (1 - 1e-9):
        return found
    top = found if tokens <= full else table.query(key, (ep, full), shape)
    low = table.query(key, (ep, same), shape)
    if top is None or low is None:
        return found
    saturated = top if tokens >= full else table.query(key, (ep, full), shape)
    beyond = table.query(key, (ep, 2 * full), shape)
    per_token = 0.0
    if saturated is not None and beyond is not None and beyond.quality != EXTRAPOLATED:
        per_token = max(0.0, (beyond.value - saturated.value) / full)
    quality = worse(worse(found.quality, top.quality), worse(low.quality, INTERPOLATED))
    return Answer(min(found.value, found.value - top.value + low.value + per_token * (spread - same)), quality)


def _custom_all_reduce(c: dict[str, list], opts: dict[str, Any]) -> list[tuple]:
    """Rows by launch mode. A table that does not tell CUDA-graph from eager launches apart
    (TensorRT-LLM's; sglang 0.5.6.post2's, whose kernel_source is TRTLLM) times the kernel
    alone, so it stands for both modes; the eager launch itself is priced by the engine."""
    backends = c.get("backend") or [""] * len(c["latency"])
    modes = ["eager" if str(src).endswith("_eager") or str(backend or "").endswith("_eager") else
             "graph" if str(src).endswith("_graph") or str(backend or "").endswith("_graph") else None
             for src, backend in zip(c["kernel_source"], backends)]
    rows = []
    for mode, n, size, lat in zip(modes, c["num_gpus"], c["message_size"], c["latency"]):
        for m in (mode,) if mode else ("graph", "eager"):
            rows.append((m, n, size * 2, lat * 1e3))  # bf16 elements -> bytes
    return rows


def _nccl(c: dict[str, list], opts: dict[str, Any]) -> list[tuple]:
    ops = {"all_reduce": "all_reduce", "all_gather": "all_gather", "reduce_scatter": "reduce_scatter",
           "alltoall": "all_to_all"}
    element = {"half": 2, "int8": 1}
    return [(ops[op], DTYPES[d], n, size * element[d], lat * 1e3) for op, d, n, size, lat in
            zip(c["op_name"], c["nccl_dtype"], c["num_gpus"], c["message_size"], c["latency"])
            if op in ops and d in element]


def _deepep_normal(c: dict[str, list], opts: dict[str, Any]) -> list[tuple]:
    rows = []
    for i in range(len(c["num_token"])):
        shape = (c["hidden_size"][i], c["num_topk"][i], c["num_experts"][i])
        for phase in ("dispatch", "combine"):
            us = c[f"{phase}_transmit_us"][i] + (c[f"{phase}_notify_us"][i] or 0.0)
            rows.append((phase, *shape, c["node_num"][i], c["num_token"][i], us))
    return rows


def _deepep_ll(c: dict[str, list], opts: dict[str, Any]) -> list[tuple]:
    rows = []
    for i in range(len(c["num_token"])):
        shape = (c["hidden_size"][i], c["num_topk"][i], c["num_experts"][i])
        for phase in ("dispatch", "combine"):
            rows.append((phase, *shape, c["node_num"][i], c["num_token"][i], c[f"{phase}_avg_t_us"][i]))
    return rows


def _moe_a2a(mode: str) -> Converter:
    """vLLM's and TensorRT-LLM's unified all-to-all table (microseconds): DeepEP high-throughput
    rows as ``normal``, low-latency rows as ``ll``; FP8 dispatch and bf16 combine kept."""
    wanted = {"dispatch": ("default", "fp8"), "combine": ("default", "bfloat16")}

    def convert(c: dict[str, list], opts: dict[str, Any]) -> list[tuple]:
        rows = []
        for i, backend in enumerate(c["comm_backend"]):
            is_ll = backend.endswith("_ll")
            if (mode == "ll") != is_ll or not ("deepep" in backend) or c["comm_dtype"][i] not in wanted[c["phase"][i]]:
                continue
            rows.append((c["phase"][i], c["hidden_size"][i], c["topk"][i], c["num_experts"][i], c["node_num"][i],
                         c["num_tokens"][i], c["latency"][i]))
        return rows

    return convert


SOURCES: dict[str, list[tuple[str, str, tuple[str, ...], Converter]]] = {
    # kind: [(family, file, columns, converter)], tried in order
    "gemm": [("gemm", "gemm_perf.parquet", ("gemm_dtype", "m", "n", "k", "latency"), _gemm)],
    "context_attention": [("attention", "context_attention_perf.parquet",
                           ("kernel_source", "attn_dtype", "kv_cache_dtype", "num_heads", "num_key_value_heads",
                            "head_dim", "isl", "batch_size", "latency"), _attention(True))],
    "generation_attention": [("attention", "generation_attention_perf.parquet",
                              ("kernel_source", "attn_dtype", "kv_cache_dtype", "num_heads", "num_key_value_heads",
                               "head_dim", "isl", "step", "batch_size", "latency"), _attention(False))],
    "context_mla": [("mla", "context_mla_perf.parquet",
                     ("kernel_source", "mla_dtype", "kv_cache_dtype", "num_heads", "isl", "batch_size", "latency"),
                     _context_mla(absorbed=False))],
    "context_mla_absorbed": [("mla", "context_mla_perf.parquet",
                              ("kernel_source", "mla_dtype", "kv_cache_dtype", "num_heads", "isl", "batch_size",
                               "latency"), _context_mla(absorbed=True))],
    "generation_mla": [("mla", "generation_mla_perf.parquet",
                        ("kv_cache_dtype", "num_heads", "isl", "step", "batch_size", "latency"), _generation_mla)],
    "mla_bmm": [("mla_bmm", "mla_bmm_perf.parquet", ("op_name", "bmm_dtype", "num_heads", "num_tokens", "latency"),
                 _mla_bmm)],
    "moe": [("moe", "moe_perf.parquet",
             ("moe_dtype", "kernel_source", "distribution", "topk", "num_experts", "hidden_size", "inter_size",
              "moe_tp_size", "moe_ep_size", "num_tokens", "latency"), _moe),
            ("moe", "wideep_generation_moe_perf.parquet",
             ("moe_dtype", "distribution", "topk", "num_experts", "hidden_size", "inter_size", "moe_tp_size",
              "moe_ep_size", "num_tokens", "latency"), _wideep_moe("deepep_ll")),
            ("moe", "wideep_context_moe_perf.parquet",
             ("moe_dtype", "distribution", "topk", "num_experts", "hidden_size", "inter_size", "moe_tp_size",
              "moe_ep_size", "num_tokens", "latency"), _wideep_moe("deepep_normal"))],
    "all_reduce": [("comm", "custom_allreduce_perf.parquet", ("kernel_source", "num_gpus", "message_size", "latency"),
                    _custom_all_reduce)],
    "deepep_normal": [("comm", "wideep_deepep_normal_perf.parquet",
                       ("node_num", "hidden_size", "num_token", "num_topk", "num_experts", "dispatch_transmit_us",
                        "dispatch_notify_us", "combine_transmit_us", "combine_notify_us"), _deepep_normal),
                      ("comm", "moe_a2a_perf.parquet",
                       ("comm_backend", "phase", "comm_dtype", "node_num", "hidden_size", "topk", "num_experts",
                        "num_tokens", "latency"), _moe_a2a("normal"))],
    "deepep_ll": [("comm", "wideep_deepep_ll_perf.parquet",
                   ("node_num", "hidden_size", "num_token", "num_topk", "num_experts", "dispatch_avg_t_us",
                    "combine_avg_t_us"), _deepep_ll),
                  ("comm", "moe_a2a_perf.parquet",
                   ("comm_backend", "phase", "comm_dtype", "node_num", "hidden_size", "topk", "num_experts",
                    "num_tokens", "latency"), _moe_a2a("ll"))],
}
OPTIONAL_COLUMNS = {"window_size", "backend"}


def _columns_of(path: Path, columns: tuple[str, ...]) -> dict[str, list]:
    import pyarrow.parquet as pq

    present = set(pq.read_schema(path).names)
    extra = [c for c in OPTIONAL_COLUMNS if c in present]
    return _read(path, (*columns, *extra))


def _plan(kind_name: str, system: str, engine: str, version: str) -> list[tuple[Path, str, Converter, tuple, bool]]:
    """The files a table is read from, in precedence order: (path, origin, converter,
    columns, whether repeats keep the fastest)."""
    root = data_root()
    if root is None:
        return []
    if kind_name == "nccl":
        path = _nccl_path(root, system)
        columns = ("op_name", "nccl_dtype", "num_gpus", "message_size", "latency")
        return [(path, f"NCCL {path.parent.name}", _nccl, columns, False)] if path is not None else []
    versions = engine_versions(system, engine)  # newest first
    at_or_older = [v for v in versions if version_key(v) <= version_key(version)]
    newer = [v for v in versions if version_key(v) > version_key(version)]
    files = []
    for family, filename, columns, convert in SOURCES.get(kind_name, []):
        for v in at_or_older + newer:
            path = root / system / family / engine / v / filename
            if path.is_file():
                files.append((path, f"{engine} {v}", convert, columns, kind_name == "deepep_normal"))
    return files


def has_own(kind_name: str, system: str, engine: str, version: str) -> bool:
    """Whether ``engine`` ``version`` ships a file of its own for the ``kind_name`` table on ``system``."""
    return any(origin == f"{engine} {version}" for _, origin, *_ in _plan(kind_name, system, engine, version))


def load(kind_name: str, system: str, engine: str, version: str, options: dict[str, Any] | None = None) -> KernelTable:
    """The ``kind_name`` table for ``engine`` ``version`` on ``system`` (older versions, then
    newer ones from the newest, fill the points it lacks). NCCL tables belong to the system, not
    the engine. Converted tables are kept in the user's cache folder, keyed by their source
    files' size and modification time, so a later process reads one pickle instead of
    re-converting the parquet rows."""
    opts = options or {}
    files = _plan(kind_name, system, engine, version)
    cache = _cache_path(kind_name, system, engine, version, opts, files)
    table = _read_cache(cache, kind_name) if cache else None
    if table is not None:
        return table
    table = KernelTable(kind_name)
    for path, origin, convert, columns, fastest in files:
        rows = convert(_columns_of(path, columns) if convert is not _nccl else _read(path, columns),
                       {**opts, "table_engine": path.parent.parent.name})
        table.add_rows(rows, origin, combine=min if fastest else None)
    if cache:
        _write_cache(cache, table)
    return table


CACHE_FORMAT = 8
"""Bump when the conversion changes, so old cached tables are not read."""


def cache_dir() -> Path:
    """``$INFERCAST_CACHE_DIR``, else ``$XDG_CACHE_HOME/infercast``, else ``~/.cache/infercast``."""
    import os

    explicit = os.environ.get("INFERCAST_CACHE_DIR")
    if explicit:
        return Path(explicit)
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "infercast"


def _cache_path(kind_name: str, system: str, engine: str, version: str, opts: dict[str, Any],
                files: list) -> Path | None:
    import hashlib
    import os

    if not files or os.environ.get("INFERCAST_NO_CACHE", "").strip() not in ("", "0"):
        return None
    key = [CACHE_FORMAT, kind_name, system, engine, version, sorted((k, str(v)) for k, v in opts.items())]
    for path, *_ in files:
        stat = path.stat()
        key.append((str(path), stat.st_size, stat.st_mtime_ns))
    digest = hashlib.sha256(repr(key).encode()).hexdigest()[:24]
    return cache_dir() / "kernel-tables" / f"{system}-{engine}-{version}-{kind_name}-{digest}.pickle"


def _read_cache(path: Path, kind_name: str) -> KernelTable | None:
    import pickle

    try:
        with open(path, "rb") as handle:
            table = pickle.load(handle)
    except Exception:  # absent, truncated or from another version: convert again
        return None
    return table if isinstance(table, KernelTable) and table.kind.name == kind_name else None


def _write_cache(path: Path, table: KernelTable) -> None:
    import os
    import pickle
    import tempfile

    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        handle, temporary = tempfile.mkstemp(dir=path.parent, suffix=".tmp")
        with os.fdopen(handle, "wb") as out:
            pickle.dump(table, out, protocol=pickle.HIGHEST_PROTOCOL)
        os.replace(temporary, path)
    except OSError:
        pass  # a read-only home: work without the cache


def _nccl_path(root: Path, system: str) -> Path | None:
    """The NCCL table the system's profile names (``misc.nccl_version``), else the newest."""
    base = root / system / "comm" / "nccl"
    if not base.is_dir():
        return None
    named = None
    yaml_file = root.parent / f"{system}.yaml"
    if yaml_file.is_file():
        for line in yaml_file.read_text().splitlines():
            if line.strip().startswith("nccl_version:"):
                named = line.split(":", 1)[1].strip().strip("'\"")
    versions = sorted((d.name for d in base.iterdir() if (d / "nccl_perf.parquet").is_file()), key=version_key)
    if not versions:
        return None
    chosen = named if named in versions else versions[-1]
    return base / chosen / "nccl_perf.parquet"


def nearest(values: Iterable[float], x: float) -> float:
    """The value closest to ``x`` in log space."""
    return min(values, key=lambda v: abs(math.log(v) - math.log(x)))
