"""Per-operator cost formulas (one registry) and the roofline that turns them into time.

A formula takes an :class:`~infercast.trace.OpRecord` and returns an :class:`OpCost`: flops
and the dtype they run in, bytes moved through HBM, and for collectives the message size
and group. :func:`op_time` prices a cost on a device.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch

from infercast.devices import DeviceSpec
from infercast.trace import OpRecord

CostFormula = Callable[[OpRecord], "OpCost"]
_FORMULAS: dict[str, CostFormula] = {}

DTYPE_NAMES = {torch.bfloat16: "bf16", torch.float16: "fp16", torch.float32: "fp32",
               torch.float8_e4m3fn: "fp8", torch.float8_e5m2: "fp8", torch.int8: "int8"}


@dataclass(frozen=True)
class OpCost:
    flops: float = 0.0
    compute_dtype: str = "bf16"
    bytes: float = 0.0
    collective: str | None = None
    """``all_reduce``, ``all_gather``, ``reduce_scatter`` or ``all_to_all``."""
    message_bytes: float = 0.0
    """For collectives: this rank's input buffer."""
    group_size: int = 1
    group: str = ""


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
    x, weight = record.tensors()[:2]
    out = record.outputs[0]
    k = x.shape[-1]
    m = x.numel // k
    n = out.shape[-1]
    compute_dtype = record.args[-1]
    return OpCost(flops=2.0 * m * n * k, compute_dtype=compute_dtype, bytes=_io_bytes(record))


@register_cost("infercast::grouped_gemm")
def _grouped_gemm(record: OpRecord) -> OpCost:
    x, weight, scale = record.tensors()[:3]
    out = record.outputs[0]
    active = float(record.args[4])
    experts = weight.shape[0]
    read_fraction = min(1.0, active / experts) if experts else 0.0
    flops = 2.0 * x.shape[0] * out.shape[-1] * x.shape[-1]
    weight_bytes = (weight.nbytes + scale.nbytes) * read_fraction
    return OpCost(flops=flops, compute_dtype=record.args[-1], bytes=x.nbytes + out.nbytes + weight_bytes)


@register_cost("aten::bmm", "aten::mm")
def _bmm(record: OpRecord) -> OpCost:
    a, b = record.tensors()[:2]
    out = record.outputs[0]
    k = a.shape[-1]
    flops = 2.0 * out.numel * k
    return OpCost(flops=flops, compute_dtype=DTYPE_NAMES.get(a.dtype, "bf16"), bytes=_io_bytes(record))


# -- attention ---------------------------------------------------------------------------


def attended_pairs(num_seqs: int, q_len: int, kv_len: int, causal: bool) -> float:
    """(query, key) pairs scored: each new token sees the cached prefix plus, when causal,
    the new tokens up to itself."""
    if not causal:
        return float(num_seqs * q_len * kv_len)
    prefix = kv_len - q_len
    return float(num_seqs * (q_len * prefix + q_len * (q_len + 1) / 2))


@register_cost("infercast::attention")
def _attention(record: OpRecord) -> OpCost:
    q, k_cache, v_cache = record.tensors()[:3]
    num_seqs, q_len, kv_len, causal = record.args[3:7]
    heads, qk_dim, v_dim = q.shape[1], q.shape[2], v_cache.shape[-1]
    pairs = attended_pairs(num_seqs, q_len, kv_len, causal)
    flops = 2.0 * heads * pairs * (qk_dim + v_dim)
    kv_bytes = k_cache.nbytes + (v_cache.nbytes if v_cache is not k_cache else k_cache.nbytes)
    return OpCost(flops=flops, compute_dtype="bf16", bytes=q.nbytes + record.outputs[0].nbytes + kv_bytes)


@register_cost("infercast::mla_attention")
def _mla_attention(record: OpRecord) -> OpCost:
    q, cache = record.tensors()[:2]
    num_seqs, q_len, kv_len, v_dim = record.args[2:6]
    heads, qk_dim = q.shape[1], q.shape[2]
    pairs = attended_pairs(num_seqs, q_len, kv_len, True)
    flops = 2.0 * heads * pairs * (qk_dim + v_dim)
    return OpCost(flops=flops, compute_dtype="bf16", bytes=q.nbytes + record.outputs[0].nbytes + cache.nbytes)


@register_cost("infercast::kv_cache_write")
def _kv_cache_write(record: OpRecord) -> OpCost:
    (new,) = record.tensors()[:1]
    return OpCost(bytes=2.0 * new.nbytes)


# -- collectives -------------------------------------------------------------------------


def _collective(kind: str) -> CostFormula:
    def formula(record: OpRecord) -> OpCost:
        x = record.tensors()[0]
        if kind == "all_to_all":
            group_size, group = record.args[2], record.args[3]
        else:
            group_size, group = record.args[1], record.args[2]
        return OpCost(collective=kind, message_bytes=float(x.nbytes), group_size=int(group_size), group=str(group))

    formula.__qualname__ = f"collective_{kind}"
    return formula


for _kind in ("all_reduce", "all_gather", "reduce_scatter", "all_to_all"):
    register_cost(f"infercast::{_kind}")(_collective(_kind))


# -- time --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Timed:
    seconds: float
    bound: str
    """``compute``, ``memory``, ``communication`` or ``latency`` (fixed costs dominate)."""


def op_time(cost: OpCost, device: DeviceSpec, scale_up_domain: int) -> Timed:
    """Roofline with fixed per-kernel cost.

    Compute time = flops / (peak(dtype) x gemm_efficiency); memory time = bytes /
    (HBM bandwidth x memory_efficiency); a kernel takes the larger of the two plus the
    device's fixed per-kernel time, and is ``latency`` bound when that fixed time exceeds
    the roofline time. Collectives go to :func:`collective_time`.
    """
    cal = device.calibration
    if cost.collective is not None:
        return collective_time(cost, device, scale_up_domain)
    compute = cost.flops / (device.peak(cost.compute_dtype) * cal.gemm_efficiency) if cost.flops else 0.0
    memory = cost.bytes / (device.hbm_bandwidth_bytes_per_s * cal.memory_efficiency)
    roof = max(compute, memory)
    bound = "latency" if cal.kernel_fixed_s > roof else ("compute" if compute >= memory else "memory")
    return Timed(roof + cal.kernel_fixed_s, bound)


def collective_time(cost: OpCost, device: DeviceSpec, scale_up_domain: int) -> Timed:
    """Time of one collective over ``group_size`` ranks.

    With B this rank's buffer, n ranks, per-step latency a and link bandwidth w (scale-up
    inside the domain, scale-out when the group spans domains):

    - all-reduce: the best of ring, 2(n-1)a + 2(n-1)/n B/w, and, inside one domain,
      one-shot, 2a + (n-1)B/w (every rank reads every peer), and two-shot, 4a + 2(n-1)/n B/w;
    - all-gather: (n-1)a + (n-1)B/w, or 2a + (n-1)B/w directly through the switch;
      reduce-scatter: the same with (n-1)/n B;
    - all-to-all: a + the off-rank share of B over the link it crosses; when the group spans
      domains, the intra- and inter-domain shares move in parallel and the slower one counts.

    Every collective also pays the device's fixed per-kernel time.
    """
    n = cost.group_size
    cal = device.calibration
    if n <= 1:
        return Timed(0.0, "communication")
    spans = n > scale_up_domain
    bw_up = device.scale_up_bandwidth_bytes_per_s * cal.link_efficiency
    bw_out = device.scale_out_bandwidth_bytes_per_s * cal.link_efficiency
    bw, lat = (bw_out, device.scale_out_latency_s) if spans else (bw_up, device.scale_up_latency_s)
    B = cost.message_bytes
    if cost.collective == "all_reduce":
        options = [2 * (n - 1) * lat + 2 * (n - 1) / n * B / bw]
        if not spans:
            options += [2 * lat + (n - 1) * B / bw, 4 * lat + 2 * (n - 1) / n * B / bw]
        t = min(options)
    elif cost.collective == "all_gather":
        t = min((n - 1) * lat, 2 * lat) + (n - 1) * B / bw
    elif cost.collective == "reduce_scatter":
        t = min((n - 1) * lat, 2 * lat) + (n - 1) / n * B / bw
    elif cost.collective == "all_to_all":
        if spans:
            intra = B * (scale_up_domain - 1) / n / bw_up
            inter = B * (n - scale_up_domain) / n / bw_out
            t = device.scale_out_latency_s + max(intra, inter)
        else:
            t = lat + B * (n - 1) / n / bw_up
    else:  # pragma: no cover - registry only produces the four kinds
        raise ValueError(cost.collective)
    return Timed(t + cal.kernel_fixed_s, "communication")
