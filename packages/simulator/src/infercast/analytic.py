"""The analytic cost model: a roofline with measured efficiencies, for what no table covers.

A kernel's time is

    max(flops x pad / (peak(dtype) x efficiency x wave_use), bytes / (HBM x memory efficiency))
      + kernel_fixed x kernels   (attention kernels: attention_fixed, MLA decode mla_attention_fixed)

- ``efficiency`` depends on the kind of kernel: GEMMs by their kernel dtype (an FP8 GEMM
  reaches a lower share of its peak than a bf16 one), flash attention its own figure;
- ``pad``: tensor cores compute 64 rows and 8 columns at a time, so a GEMM with m rows and n
  columns costs ceil(m / 64) x 64 rows and ceil(n / 8) x 8 columns of compute (the small-m and
  small-n penalties); a grouped GEMM pads each expert's rows (a fused MoE's rows are what
  routing gives each expert, so it pays their expected tiles: :func:`expected_row_tiles`);
  weight-only kernels (Marlin) issue 16-row MMAs and pad to 16;
- ``wave_use``: a GEMM's 128 x 128 output tiles are spread over the SMs. Hopper-era libraries
  split a partial last wave over all SMs (CUTLASS stream-K, cuBLAS split-K), so only a GEMM
  with fewer MAC-loop iterations than SMs can keep busy (too few tiles x k / 128 steps) loses
  SMs; the measured efficiency, a median over large shapes, already carries the rest;
- an FP8-to-bf16 copy (``cast``, an engine's whole-pool cast of an FP8 cache) runs at the
  device's measured cast rate per element, which is not HBM-bound on Hopper;
- ``kernel_fixed`` is the per-kernel launch ramp and tail measured for the device; an attention
  kernel's is its own, larger figure (``attention_fixed``: split-KV passes, their merge, the
  softmax pipeline's ramp), what the device's small measured decode attentions take beyond their
  roofline, and MLA decode's its own again (``mla_attention_fixed``).

A weight-only GEMM whose kernel family the device has its own streaming figure for (Marlin on
sm_90: :attr:`~infercast.devices.Efficiency.streams`) streams at that figure, and its GEMM
kernels pay that figure's fixed time (a fused MoE's other kernels keep the device's); the
family's fused MoE computes its real rows at the family's own share of the bf16 peak where the
device has one (Marlin's MoE on sm_90: about a quarter for wide experts, less as MoE TP narrows
them: an Ampere kernel on Hopper), and streams its weights at the family's own limit, the SMs'
or the memory's, with one fixed time for the whole operator.

The kernel is ``latency`` bound when its fixed time exceeds the roofline, else ``compute``
or ``memory`` bound. Collectives: :func:`collective_time`; EP all-to-all:
:func:`deepep_volume`. Every constant is the device's (:class:`~infercast.devices.Efficiency`).
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

from infercast.cost import CAST_BYTES_PER_ELEMENT, COMPUTE_DTYPE, OpCost
from infercast.devices import DeviceSpec, KernelStream

ATTENTION_KINDS = ("attention", "mla_attention")
"""OpCost kinds priced at the device's attention efficiency."""
TILE_M = TILE_N = TILE_K = 128
"""Output tile and K step of a large GEMM (CUTLASS's and DeepGEMM's default on Hopper and Blackwell)."""
MMA_ROWS, MMA_COLS = 64, 8
"""Rows and columns one tensor-core instruction computes on Hopper (wgmma m64nNk16, N a multiple
of 8); fewer are padded."""
WEIGHT_ONLY_MMA_ROWS = 16
"""Rows a weight-only kernel pads to: Marlin and its MoE variant issue mma.sync m16n8k16 with the
activations as the 16-row operand on every architecture, so a one-row GEMM computes 16 rows, not
64. Marlin's time is flat from 1 to 16 rows and doubles by 64 (vllm-project/vllm PR 2497,
IST-DASLab bench.py on an A100-class GPU: 0.14 ms for 1-16 rows, 0.29 ms at 64)."""
WEIGHT_ONLY = frozenset(d for d, compute in COMPUTE_DTYPE.items() if compute == "bf16" and d != "bf16")
"""Kernel dtypes that dequantize weights in registers and multiply bf16 activations (``w4a16``,
``w8a16``, ``mxfp4_w4a16``: :data:`~infercast.cost.COMPUTE_DTYPE` runs them at bf16). Keyed by
dtype, not kernel: the other kernels that run them at few rows pad no more (TensorRT-LLM's
weight-only GEMV runs on CUDA cores; Triton's tl.dot, under the MXFP4 MoE, takes 16 rows)."""


@dataclass(frozen=True)
class Timed:
    seconds: float
    bound: str
    """``compute``, ``memory``, ``communication`` or ``latency`` (fixed costs dominate)."""


def wave_use(m: int, n: int, k: int, count: float, sm_count: int | None) -> float:
    """Share of the SMs a GEMM (``count`` of them, batched) keeps busy when stream-K spreads
    its tiles' K steps over the SMs: all of them unless there are fewer steps than SMs."""
    if not sm_count:
        return 1.0
    steps = math.ceil(m / TILE_M) * math.ceil(n / TILE_N) * math.ceil(k / TILE_K) * max(1, round(count))
    return min(1.0, steps / sm_count)


@functools.lru_cache(maxsize=4096)
def expected_row_tiles(mean_rows: float, tile: int) -> float:
    """Expected ``tile``-row MMA tiles of one expert that routing gave a Poisson count of rows,
    given at least one (a zero-truncated Poisson law with mean ``mean_rows``): tokens that pick
    their experts at random leave some experts a tile's worth and others one row over, so a
    grouped GEMM whose experts average 64 rows pays about 1.5 tiles an expert, not one. Random
    routing's spread; a skewed routing spreads the rows more."""
    if mean_rows <= 1.0:
        return 1.0
    low, high = 0.0, mean_rows  # lam / (1 - e^-lam) = mean_rows, increasing in lam: bisect
    for _ in range(80):
        lam = (low + high) / 2
        if lam / -math.expm1(-lam) < mean_rows:
            low = lam
        else:
            high = lam
    if lam > 1000:  # the last tile's fill is about uniform: (tile - 1) / (2 tile) of a tile on average
        return mean_rows / tile + (tile - 1) / (2 * tile)
    spread = 12 * math.sqrt(lam)
    total = mass = 0.0
    for x in range(max(1, int(lam - spread)), int(lam + spread) + tile + 12):
        p = math.exp(x * math.log(lam) - lam - math.lgamma(x + 1))  # in logs: e^-lam underflows past 745
        total += math.ceil(x / tile) * p
        mass += p
    return total / mass


def compute_seconds(cost: OpCost, device: DeviceSpec, stream: KernelStream | None = None) -> float:
    """The compute roof; a grouped GEMM of a kernel family with its own compute figure
    (``stream.grouped_compute``) runs its real rows at the share of the bf16 peak that figure
    gives its experts' width on this rank."""
    if not cost.flops:
        return 0.0
    eff = device.efficiency
    if cost.grouped and stream is not None and stream.grouped_compute and cost.kernel_dtype in stream.dtypes:
        width = cost.gemm_mnk[1] / 2 if cost.gemm_mnk else math.inf  # gate + up columns: twice the width
        return cost.flops / (device.peak("bf16") * stream.grouped_share(width, cost.kernel_dtype))
    peak = device.peak(cost.compute_dtype)
    if cost.kind in ATTENTION_KINDS:
        fp8 = cost.compute_dtype == "fp8" and eff.attention_fp8 is not None
        return cost.flops / (device.peak("bf16") * (eff.attention_fp8 if fp8 else eff.attention))
    if cost.kind != "gemm":
        return cost.flops / (peak * eff.gemm_efficiency("bf16", "bf16"))
    efficiency = eff.gemm_efficiency(cost.kernel_dtype, cost.compute_dtype)
    if cost.compute_dtype not in device.peak_flops_per_s:  # dequantised: the bf16 rate and figure
        efficiency = eff.gemm_efficiency("bf16", "bf16")
    pad, use = 1.0, 1.0
    if cost.gemm_mnk is not None and cost.compute_dtype != "fp32":  # full-precision FP32: no tensor-core tile
        m, n, k = cost.gemm_mnk
        if m > 0 and n > 0:
            rows = WEIGHT_ONLY_MMA_ROWS if cost.kernel_dtype in WEIGHT_ONLY else MMA_ROWS
            if cost.routed_mean_rows:  # a group's rows are a count around their mean, not m each
                pad = expected_row_tiles(cost.routed_mean_rows, rows) * rows / cost.routed_mean_rows
            else:
                pad = math.ceil(m / rows) * rows / m
            pad *= math.ceil(n / MMA_COLS) * MMA_COLS / n
            use = wave_use(m, n, k, cost.gemm_count, device.sm_count)
    return cost.flops * pad / (peak * efficiency * use)


def kernel_time(cost: OpCost, device: DeviceSpec, kernel: str | None = None) -> Timed:
    """Roofline plus the per-kernel fixed time (see the module docstring); GEMMs of a kernel
    family the device has its own streaming figure for (``kernel``: ``marlin``, ``triton``) stream at it,
    and its GEMM kernels pay its fixed time; the family's grouped operator (a fused MoE) streams
    and pays its fixed time as its ``grouped_*`` figures say."""
    stream = device.efficiency.streams.get(kernel) if kernel else None
    if stream is not None and cost.kernel_dtype not in stream.dtypes:
        stream = None  # measured for other dtypes: the generic figures
    compute = compute_seconds(cost, device, stream)
    if stream is not None and cost.grouped and stream.grouped_stream:
        memory, fixed = cost.bytes / stream.grouped_rate(device), stream.grouped_fixed_s
    elif cost.kind == "cast" and device.efficiency.fp8_cast_s_per_element:
        memory = cost.bytes / CAST_BYTES_PER_ELEMENT * device.efficiency.fp8_cast_s_per_element
        fixed = device.efficiency.kernel_fixed_s
    else:
        memory = cost.bytes / (device.hbm_bandwidth_bytes_per_s * (stream.memory if stream else device.efficiency.memory))
        streamed = min(cost.gemm_kernels, cost.kernels) if stream else 0
        fixed = device.efficiency.fixed_s(cost.kind) * (cost.kernels - streamed)
        if stream:
            fixed += stream.fixed_s * streamed
    roof = max(compute, memory)
    bound = "latency" if fixed > roof else ("compute" if compute >= memory else "memory")
    return Timed(roof + fixed, bound)


def collective_time(cost: OpCost, device: DeviceSpec, scale_up_domain: int) -> Timed:
    """One collective over ``group_size`` ranks, this rank's buffer B.

    Inside the scale-up domain, with floor f (the device's smallest all-reduce) and bus
    bandwidth w (link efficiency x link peak), as nccl-tests define bus bandwidth:
    all-reduce f + 2 (n - 1) / n B / w; all-gather f + (n - 1) B / w; reduce-scatter
    f + (n - 1) / n B / w.

    Across domains (nodes) a collective is hierarchical, as NCCL runs it: an all-reduce is a
    reduce-scatter inside each node, an all-reduce of B / d between the N nodes over the
    scale-out network (a tree for latency, log2 N hops each way, plus 2 (N - 1) / N of its
    data), and an all-gather inside the node; all-gather and reduce-scatter move their
    cross-node share over the scale-out link. EP all-to-all: :func:`deepep_time`.
    """
    n = cost.group_size
    if n <= 1:
        return Timed(0.0, "communication")
    if cost.collective == "all_to_all":
        return deepep_time(cost, device, scale_up_domain)
    B = cost.message_bytes
    if n <= scale_up_domain:
        return Timed(_intra(cost.collective, B, n, device), "communication")
    d = scale_up_domain
    nodes = math.ceil(n / d)
    out_bw = device.scale_out_bandwidth_bytes_per_s * device.efficiency.scale_out
    hops = 2 * math.ceil(math.log2(nodes)) * device.scale_out_latency_s
    if cost.collective == "all_reduce":
        t = (_intra("reduce_scatter", B, d, device) + hops + 2 * (nodes - 1) / nodes * (B / d) / out_bw
             + _intra("all_gather", B / d, d, device))
    elif cost.collective == "all_gather":
        t = _intra("all_gather", B, d, device) + hops + (nodes - 1) * d * B / out_bw / d
    else:  # reduce_scatter
        t = _intra("reduce_scatter", B, d, device) + hops + (nodes - 1) / nodes * B / out_bw
    return Timed(t, "communication")


def _intra(kind: str, B: float, n: int, device: DeviceSpec) -> float:
    if n <= 1:
        return 0.0
    eff = device.efficiency
    w = device.scale_up_bandwidth_bytes_per_s * eff.link
    share = {"all_reduce": 2 * (n - 1) / n, "all_gather": float(n - 1), "reduce_scatter": (n - 1) / n}[kind]
    return eff.collective_floor_s + share * B / w


@dataclass(frozen=True)
class Volume:
    scale_out_bytes: float
    """Bytes this rank sends over its scale-out NIC."""
    scale_up_bytes: float
    """Bytes this rank sends over the scale-up link (NVLink)."""


def expected_ranks(num_experts: int, top_k: int, ranks: int) -> float:
    """Distinct ranks a token's top-k experts live on (experts split evenly, uniform routing)."""
    per_rank = num_experts // ranks
    return ranks * (1.0 - math.comb(num_experts - per_rank, top_k) / math.comb(num_experts, top_k))


def deepep_volume(*, tokens: float, bytes_per_token: float, top_k: int, num_experts: int, mode: str, ep: int,
                  scale_up_domain: int, destinations: float) -> Volume:
    """Bytes one rank sends for one EP dispatch (or combine, the same rows back).

    - ``normal`` mode (DeepEP's high-throughput kernels, prefill): a token goes once to each
      destination node over RDMA (``destinations`` of the ``nodes``, its own node excluded:
      destinations x (1 - 1 / nodes) remote copies), then once to each destination GPU inside
      the node over NVLink;
    - ``ll`` mode (low latency, decode): one copy per (token, expert) pair; the share whose
      expert sits in another node crosses the scale-out network, the rest stays on NVLink.
    """
    nodes = max(1, math.ceil(ep / scale_up_domain))
    gpus_per_node = min(ep, scale_up_domain)
    if mode == "ll":
        copies = tokens * top_k
        remote = copies * (1 - 1 / nodes)
        return Volume(remote * bytes_per_token, (copies - remote) * bytes_per_token * (1 - 1 / gpus_per_node))
    remote_nodes = destinations * (1 - 1 / nodes) if nodes > 1 else 0.0
    gpus = expected_ranks(num_experts, top_k, ep)
    return Volume(tokens * remote_nodes * bytes_per_token, tokens * gpus * (1 - 1 / ep) * bytes_per_token)


def deepep_time(cost: OpCost, device: DeviceSpec, scale_up_domain: int) -> Timed:
    """The slower of the two links carrying :func:`deepep_volume`, for the busiest rank (which
    receives ``busiest`` times the mean in the dispatch and sends it back in the combine), plus
    the collective floor (and the scale-out latency when the group spans nodes)."""
    a = cost.a2a
    volume = deepep_volume(tokens=a["tokens"], bytes_per_token=a["bytes_per_token"], top_k=a["top_k"],
                           num_experts=a["num_experts"], mode=a["mode"], ep=cost.group_size,
                           scale_up_domain=scale_up_domain, destinations=a["destinations"])
    eff, busiest = device.efficiency, a.get("busiest", 1.0)
    up = volume.scale_up_bytes * busiest / (device.scale_up_bandwidth_bytes_per_s * eff.link)
    out = volume.scale_out_bytes * busiest / (device.scale_out_bandwidth_bytes_per_s * eff.scale_out)
    latency = eff.collective_floor_s + (device.scale_out_latency_s if cost.group_size > scale_up_domain else 0.0)
    return Timed(latency + max(up, out), "communication")
