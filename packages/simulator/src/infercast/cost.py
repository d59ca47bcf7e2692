"""Per-operator work: one registry of formulas from a recorded call to what it costs.

A formula takes an :class:`~infercast.trace.OpRecord` (arguments by name) and returns an
:class:`OpCost`: flops and the dtype they run in, bytes moved through HBM, how many kernels
the operator launches, its efficiency class (GEMM, attention or streaming), and for
collectives the message and group. Time comes later, from the cost model stack
(:mod:`infercast.costmodel`): a measured kernel table where one covers the operator, the
analytic roofline (:mod:`infercast.analytic`) otherwise.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch

from infercast.trace import OpRecord

CostFormula = Callable[[OpRecord], "OpCost"]
_FORMULAS: dict[str, CostFormula] = {}

DTYPE_NAMES = {torch.bfloat16: "bf16", torch.float16: "fp16", torch.float32: "fp32",
               torch.float8_e4m3fn: "fp8", torch.float8_e5m2: "fp8", torch.int8: "int8"}

COMPUTE_DTYPE = {"bf16": "bf16", "fp16": "fp16", "fp8": "fp8", "fp8_block": "fp8", "int8": "int8", "w8a16": "bf16",
                 "w4a16": "bf16", "w4a8": "int8", "mxfp4": "fp4", "mxfp4_w4a16": "bf16", "nvfp4": "fp4",
                 "fp32": "fp32"}
"""Kernel dtype -> the tensor-core dtype it computes in (weight-only kernels dequantise)."""


@dataclass(frozen=True)
class OpCost:
    flops: float = 0.0
    compute_dtype: str = "bf16"
    bytes: float = 0.0
    kernel_dtype: str = ""
    """The kernel family (``bf16``, ``fp8_block``, ``w4a16``, ...) for GEMMs."""
    kind: str = "memory"
    """Efficiency class: ``gemm``, ``attention``, ``mla_attention`` (decode over a latent cache: the
    attention efficiency, its own fixed time), ``memory`` (streaming kernels), ``cast`` (an FP8-to-bf16
    copy, at the device's cast rate) or ``collective``."""
    kernels: int = 1
    """Kernels the operator launches (a fused MoE is several)."""
    gemm_kernels: int = 1
    """Of ``kernels``, those that run the GEMMs (a fused MoE's two expert GEMMs): a weight-only
    kernel family's own figure (:attr:`~infercast.devices.Efficiency.streams`) sets their fixed time."""
    gemm_mnk: tuple[int, int, int] | None = None
    """One GEMM's (m, n, k), for tile quantisation (per expert for grouped GEMMs)."""
    gemm_count: float = 1.0
    """GEMMs of that shape the operator runs (grouped GEMMs: one per active expert)."""
    grouped: bool = False
    """The GEMMs run as grouped kernels over many experts' weights (a fused MoE)."""
    routed_mean_rows: float = 0.0
    """The mean rows of a group when routing decides them, a Poisson count around it (padding is
    then the expected tiles, :func:`infercast.analytic.expected_row_tiles`, and ``gemm_mnk``'s m
    its rounding, for the waves); 0: every group has exactly m."""
    collective: str | None = None
    """``all_reduce``, ``all_gather``, ``reduce_scatter`` or ``all_to_all``."""
    message_bytes: float = 0.0
    """For collectives: this rank's input buffer."""
    group_size: int = 1
    group: str = ""
    a2a: dict | None = None
    """For EP all-to-all: ``tokens``, ``hidden``, ``bytes_per_token``, ``top_k``,
    ``num_experts``, ``mode``, ``destinations`` (see :func:`infercast.analytic.deepep_volume`)."""


def register_cost(*names: str) -> Callable[[CostFormula], CostFormula]:
    """Register a formula for operator names such as ``infercast::gemm`` or ``aten::bmm``."""

    def decorator(formula: CostFormula) -> CostFormula:
        for name in names:
            if name in _FORMULAS:
                raise ValueError(f"a cost formula for {name} is already registered ({_FORMULAS[name].__qualname__})")
            _FORMULAS[name] = formula
        return formula

    return decorator


def registered_ops() -> list[str]:
    return sorted(_FORMULAS)


def cost_of(record: OpRecord) -> OpCost:
    formula = _FORMULAS.get(record.name, _memory_bound)
    return formula(record)


def _io_bytes(record: OpRecord) -> float:
    return sum(t.nbytes for t in record.tensors()) + sum(t.nbytes for t in record.outputs)


def _memory_bound(record: OpRecord) -> OpCost:
    """Default for elementwise and data-movement kernels: read inputs, write outputs."""
    return OpCost(flops=sum(t.numel for t in record.outputs), bytes=_io_bytes(record))


# -- GEMMs -------------------------------------------------------------------------------


@register_cost("infercast::gemm", "infercast::quant_gemm")
def _gemm(record: OpRecord) -> OpCost:
    x, out = record["x"], record.outputs[0]
    k = x.shape[-1]
    m = x.numel // k
    n = out.shape[-1]
    return OpCost(flops=2.0 * m * n * k, compute_dtype=COMPUTE_DTYPE[record["dtype"]], bytes=_io_bytes(record),
                  kernel_dtype=record["dtype"], kind="gemm", gemm_mnk=(m, n, k))


@register_cost("infercast::mla_bmm")
def _mla_bmm(record: OpRecord) -> OpCost:
    x, w = record["x"], record["weight"]
    heads, tokens, k = x.shape
    n = w.shape[-1]
    return OpCost(flops=2.0 * heads * tokens * k * n, compute_dtype=DTYPE_NAMES.get(x.dtype, "bf16"),
                  bytes=_io_bytes(record), kind="gemm", gemm_mnk=(tokens, n, k), gemm_count=heads)


@register_cost("aten::bmm", "aten::mm")
def _bmm(record: OpRecord) -> OpCost:
    a, b = record.tensors()[:2]
    out = record.outputs[0]
    k = a.shape[-1]
    return OpCost(flops=2.0 * out.numel * k, compute_dtype=DTYPE_NAMES.get(a.dtype, "bf16"), bytes=_io_bytes(record),
                  kind="gemm")


@register_cost("infercast::fused_moe")
def _fused_moe(record: OpRecord) -> OpCost:
    """Routing, two grouped GEMMs and the activation over ``routed_rows`` rows on the busiest
    rank (rows x straggler), reading the weights of the experts the batch activates."""
    x, w13, s13, w2, s2 = (record[n] for n in ("x", "w13", "w13_scale", "w2", "w2_scale"))
    local = record["local_experts"]
    rows = record["routed_rows"] * record["straggler"]
    active = float(record["active_experts"])
    hidden = x.shape[-1]
    inter2 = w13.shape[1]  # gate + up columns on this rank
    flops = 2.0 * rows * hidden * inter2 + 2.0 * rows * (inter2 // 2) * hidden
    read_fraction = min(1.0, record["active_experts"] / local) if local else 0.0
    weights = (w13.nbytes + s13.nbytes + w2.nbytes + s2.nbytes) * read_fraction
    act_bytes = 2  # bf16 activations inside the expert kernels
    activations = rows * hidden * act_bytes * 2 + rows * inter2 * act_bytes * 1.5
    per_expert_rows = max(1, round(rows / active)) if active else 1
    return OpCost(flops=flops, compute_dtype=COMPUTE_DTYPE[record["dtype"]], bytes=weights + activations, kind="gemm",
                  kernel_dtype=record["dtype"], kernels=5, gemm_kernels=2, gemm_mnk=(per_expert_rows, inter2, hidden),
                  gemm_count=active, grouped=True, routed_mean_rows=rows / active if active else 1.0)


@register_cost("infercast::quantize_activation")
def _quantize(record: OpRecord) -> OpCost:
    x = record["x"]
    return OpCost(flops=x.numel, bytes=x.nbytes + x.numel + x.numel / 32, kind="memory")


# -- attention ---------------------------------------------------------------------------


def attended_pairs(num_seqs: int, q_len: int, kv_len: int, causal: bool, window: int = 0) -> float:
    """(query, key) pairs scored: each new token sees the cached prefix plus, when causal,
    the new tokens up to itself; within a sliding ``window``, at most its last ``window``."""
    if not causal:  # a window applies to causal attention (no caller combines them)
        return float(num_seqs * q_len * kv_len)
    prefix = kv_len - q_len
    if window and kv_len > window:  # query i (1..q) sees min(prefix + i, window) keys
        full = max(0, min(q_len, window - prefix))  # the first queries, before the window fills
        seen = full * prefix + full * (full + 1) / 2 + (q_len - full) * window
        return float(num_seqs * seen)
    return float(num_seqs * (q_len * prefix + q_len * (q_len + 1) / 2))


def window_kv_len(q_len: int, kv_len: int, window: int) -> int:
    """The cached tokens a step's queries read within a sliding ``window`` (all where 0)."""
    return min(kv_len, window + q_len - 1) if window else kv_len


@register_cost("infercast::attention")
def _attention(record: OpRecord) -> OpCost:
    q, k_cache, v_cache = record["q"], record["k_cache"], record["v_cache"]
    heads, qk_dim, v_dim = q.shape[1], q.shape[2], v_cache.shape[-1]
    window = record.named.get("window", 0)
    pairs = attended_pairs(record["num_seqs"], record["q_len"], record["kv_len"], record["causal"], window)
    flops = 2.0 * heads * pairs * (qk_dim + v_dim)
    kv_bytes = k_cache.nbytes + (v_cache.nbytes if v_cache is not k_cache else k_cache.nbytes)
    if window and record["causal"]:  # only the window's keys and values are read
        kv_bytes *= window_kv_len(record["q_len"], record["kv_len"], window) / record["kv_len"]
    return OpCost(flops=flops, compute_dtype="bf16", bytes=q.nbytes + record.outputs[0].nbytes + kv_bytes,
                  kind="attention")


@register_cost("infercast::mla_prefill_attention")
def _mla_prefill(record: OpRecord) -> OpCost:
    q, k, v = record["q"], record["k"], record["v"]
    heads, qk_dim, v_dim = q.shape[1], q.shape[2], v.shape[-1]
    pairs = attended_pairs(record["num_seqs"], record["q_len"], record["kv_len"], True)
    return OpCost(flops=2.0 * heads * pairs * (qk_dim + v_dim), compute_dtype="bf16",
                  bytes=q.nbytes + k.nbytes + v.nbytes + record.outputs[0].nbytes, kind="attention")


@register_cost("infercast::mla_attention")
def _mla_attention(record: OpRecord) -> OpCost:
    q, cache = record["q"], record["latent_cache"]
    heads, qk_dim = q.shape[1], q.shape[2]
    pairs = attended_pairs(record["num_seqs"], record["q_len"], record["kv_len"], True)
    flops = 2.0 * heads * pairs * (qk_dim + record["v_head_dim"])
    return OpCost(flops=flops, compute_dtype="bf16", bytes=q.nbytes + record.outputs[0].nbytes + cache.nbytes,
                  kind="mla_attention")


@register_cost("infercast::embedding")
def _embedding(record: OpRecord) -> OpCost:
    """A gather: the ids in, and only the looked-up rows read and written."""
    out = record.outputs[0]
    return OpCost(bytes=record["ids"].nbytes + 2.0 * out.nbytes)


CAST_BYTES_PER_ELEMENT = 3
"""An FP8-to-bf16 copy reads a byte and writes two for each element."""


@register_cost("infercast::kv_pool_cast")
def _kv_pool_cast(record: OpRecord) -> OpCost:
    """An FP8 KV pool cast to bf16 whole."""
    return OpCost(bytes=float(CAST_BYTES_PER_ELEMENT * record["pool_tokens"] * record["width"]), kind="cast")


def cache_itemsize(record: OpRecord) -> int:
    """Bytes an element of the KV cache takes, from the ``cache_dtype`` a cache op records."""
    return getattr(torch, record["cache_dtype"].removeprefix("torch.")).itemsize


@register_cost("infercast::kv_cache_write")
def _kv_cache_write(record: OpRecord) -> OpCost:
    """Reads the new rows and writes them in the cache's dtype (an FP8 cache writes a byte each)."""
    rows = [t for t in (record["k"], record["v"]) if t is not None]
    return OpCost(bytes=float(sum(t.nbytes + t.numel * cache_itemsize(record) for t in rows)))


@register_cost("infercast::rope_kv_cache_write")
def _rope_kv_cache_write(record: OpRecord) -> OpCost:
    """Reads q, k and v once; writes the rotated q and the K/V rows in the cache's dtype."""
    q, k, v = record["q"], record["k"], record["v"]
    return OpCost(bytes=float(2 * q.nbytes + k.nbytes + v.nbytes + (k.numel + v.numel) * cache_itemsize(record)))


# -- ATen operators (a pytorch-ir graph: ``infercast simulate --from-ir``) ---------------
#
# A node of an exported graph arrives as an OpRecord named ``aten::<op>`` with its arguments
# bound by the operator's schema names. GEMMs in fp32 run at the device's FP32 (CUDA-core) rate.


def _gemm_dtype(spec) -> str:
    return DTYPE_NAMES.get(spec.dtype, "bf16")


def _matmul_cost(record: OpRecord, a, b) -> OpCost:
    """``a [..., m, k] @ b [..., k, n]`` (a 2-D ``b`` applies to every row of ``a``)."""
    out = record.outputs[0]
    k = a.shape[-1]
    n = out.shape[-1] if out.shape else 1
    if len(b.shape) <= 2:
        m, count = a.numel // k if k else 0, 1
    else:
        m = a.shape[-2] if len(a.shape) >= 2 else 1
        count = out.numel // max(1, m * n)
    dtype = _gemm_dtype(a)
    return OpCost(flops=2.0 * out.numel * k, compute_dtype=dtype, bytes=_io_bytes(record), kernel_dtype=dtype,
                  kind="gemm", gemm_mnk=(m, n, k), gemm_count=count)


MATMUL_OPERANDS = {"aten::linear": ("input", "weight"), "aten::addmm": ("mat1", "mat2"),
                   "aten::matmul": ("self", "other"), "aten::baddbmm": ("batch1", "batch2")}
"""ATen GEMMs and the schema names of their two operands."""


def _matmul_formula(a: str, b: str) -> CostFormula:
    def formula(record: OpRecord) -> OpCost:
        return _matmul_cost(record, record[a], record[b])

    formula.__qualname__ = f"matmul_{a}_{b}"
    return formula


for _name, (_a, _b) in MATMUL_OPERANDS.items():
    register_cost(_name)(_matmul_formula(_a, _b))


@register_cost("aten::scaled_dot_product_attention")
def _aten_sdpa(record: OpRecord) -> OpCost:
    """Fused attention over [batch, heads, length, dim] tensors (flash: scores never in HBM)."""
    q, k, v = record["query"], record["key"], record["value"]
    batch_heads = q.numel // (q.shape[-2] * q.shape[-1])
    pairs = attended_pairs(batch_heads, q.shape[-2], k.shape[-2], bool(record.named.get("is_causal")))
    return OpCost(flops=2.0 * pairs * (q.shape[-1] + v.shape[-1]), compute_dtype="bf16",
                  bytes=q.nbytes + k.nbytes + v.nbytes + record.outputs[0].nbytes, kind="attention")


@register_cost("aten::index_copy")
def _aten_index_copy(record: OpRecord) -> OpCost:
    """A cache update, priced as the in-place write a runtime performs (read the new rows,
    write them into the cache), not as the graph's out-of-place copy of the whole cache."""
    return OpCost(bytes=record["index"].nbytes + 2.0 * record["source"].nbytes)


def _gather(record: OpRecord) -> OpCost:
    """Read the selected rows and the indices, write the rows."""
    indices = sum(t.nbytes for t in record.tensors() if not t.dtype.is_floating_point)
    return OpCost(bytes=indices + 2.0 * record.outputs[0].nbytes)


for _name in ("aten::index_select", "aten::embedding", "aten::gather", "aten::index"):
    register_cost(_name)(_gather)


# -- collectives -------------------------------------------------------------------------


def _collective(kind: str) -> CostFormula:
    def formula(record: OpRecord) -> OpCost:
        x = record["x"]
        return OpCost(kind="collective", collective=kind, message_bytes=float(x.nbytes),
                      group_size=int(record["group_size"]), group=str(record["group"]))

    formula.__qualname__ = f"collective_{kind}"
    return formula


for _kind in ("all_reduce", "all_gather", "reduce_scatter"):
    register_cost(f"infercast::{_kind}")(_collective(_kind))


@register_cost("infercast::all_to_all")
def _all_to_all(record: OpRecord) -> OpCost:
    """EP dispatch or combine: ``x`` holds what this rank sends (FP8 tokens, with one fp32
    scale per 128 values, for dispatch; bf16 expert outputs for combine). ``busiest``: the
    routed rows of the busiest rank over the mean, which that rank receives in the dispatch and
    sends back in the combine (the rows at the expert side over tokens x top-k)."""
    x = record["x"]
    phase = record["phase"]
    hidden = x.shape[-1]
    element = x.dtype.itemsize
    per_token = hidden * element + (hidden // 128 * 4 if element == 1 else 0)
    tokens, rows = (x.shape[0], record["out_rows"]) if phase == "dispatch" else (record["out_rows"], x.shape[0])
    busiest = max(1.0, rows / (tokens * record["top_k"])) if tokens else 1.0
    a2a = {"tokens": tokens, "hidden": hidden, "bytes_per_token": per_token, "top_k": record["top_k"],
           "num_experts": record["num_experts"], "mode": record["mode"], "phase": phase,
           "destinations": record["destinations"], "busiest": busiest}
    return OpCost(kind="collective", collective="all_to_all", message_bytes=float(tokens * per_token),
                  group_size=int(record["group_size"]), group=str(record["group"]), a2a=a2a)
