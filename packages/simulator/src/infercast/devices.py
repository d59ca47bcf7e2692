"""Device profiles: specification numbers with units in their names, each with a source.

Peaks are dense (not sparse) tensor-core figures from the vendors' data sheets, collected in
the project's reference notes (shared/reference/devices.md). Efficiencies and fixed costs are
not specifications; they are marked ``calibrated`` and say how they were obtained.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Mapping

from infercast_adapters import InfercastError

GB = 1e9
GIB = 2**30
MIB = 2**20
TB = 1e12
TIB = 2**40
T = 1e12


@dataclass(frozen=True)
class KernelStream:
    """How one kernel family streams its weights on a device, where it differs from the
    device's generic streaming figure (Marlin's weight-only GEMMs and MoE, the engines' Triton
    fused MoE): a GEMM of that family with few rows takes ``fixed_s + bytes / (HBM peak x
    memory)``, its grouped operator the ``grouped_*`` figures."""

    memory: float
    """Achieved / peak HBM bandwidth (the slope)."""
    fixed_s: float
    """Time on top of the stream (the intercept)."""
    dtypes: frozenset[str]
    """The kernel dtypes it was measured for, or taken to match (the same kernel); the family's
    other dtypes stream at the generic figure."""
    source: str
    grouped_compute: float | None = None
    """Achieved / peak bf16 tensor rate of the family's grouped GEMMs (a fused MoE) once they are
    compute-bound, over their real rows, for wide experts (None: the device's GEMM figure, rows
    padded)."""
    grouped_half_width: float = 0.0
    """The expert intermediate width on a rank at which that share falls to half: a rank's share
    is ``grouped_compute x w / (w + grouped_half_width)`` for width ``w`` (MoE TP narrows it)."""
    grouped_sm_bytes_per_s: float | None = None
    """Bytes per second each SM streams in the family's grouped GEMMs (None: ``memory`` and
    ``fixed_s`` as for its other GEMMs)."""
    grouped_memory: float = 1.0
    """The most of the HBM peak its grouped GEMMs stream at, whatever the SMs could take."""
    grouped_fixed_s: float = 0.0
    """Time on top of a grouped operator's stream, all its kernels together."""
    grouped_compute_scale: tuple[tuple[str, float], ...] = ()
    """(kernel dtype, fraction) pairs: dtypes whose grouped GEMMs reach that fraction of
    ``grouped_compute`` (each dtype's own median over the same curve); a dtype not listed reaches
    all of it."""
    grouped_half_widths: tuple[tuple[str, float], ...] = ()
    """(kernel dtype, half width) pairs: dtypes whose share halves at a width of their own (an
    engine tunes their tiles apart); a dtype not listed halves at ``grouped_half_width``."""

    @property
    def grouped_stream(self) -> bool:
        """Whether the family's grouped operator (a fused MoE) has streaming figures of its own."""
        return self.grouped_sm_bytes_per_s is not None or self.grouped_fixed_s > 0

    def grouped_rate(self, device: DeviceSpec) -> float:
        """Bytes per second a grouped operator streams on ``device``: its SMs' limit or its memory's."""
        memory = self.grouped_memory * device.hbm_bandwidth_bytes_per_s
        if self.grouped_sm_bytes_per_s is None or not device.sm_count:
            return memory
        return min(self.grouped_sm_bytes_per_s * device.sm_count, memory)

    def __post_init__(self) -> None:
        for name, value, ok, valid in (
                ("memory", self.memory, 0 < self.memory <= 1, "in (0, 1]"),
                ("fixed_s", self.fixed_s, self.fixed_s >= 0, ">= 0"),
                ("grouped_compute", self.grouped_compute,
                 self.grouped_compute is None or 0 < self.grouped_compute <= 1, "None or in (0, 1]"),
                ("grouped_half_width", self.grouped_half_width, self.grouped_half_width >= 0, ">= 0"),
                ("grouped_sm_bytes_per_s", self.grouped_sm_bytes_per_s,
                 self.grouped_sm_bytes_per_s is None or self.grouped_sm_bytes_per_s > 0, "None or > 0"),
                ("grouped_memory", self.grouped_memory, 0 < self.grouped_memory <= 1, "in (0, 1]"),
                ("grouped_fixed_s", self.grouped_fixed_s, self.grouped_fixed_s >= 0, ">= 0"),
                *((f"grouped_compute_scale[{dtype!r}]", scale, 0 < scale <= 1, "in (0, 1]")
                  for dtype, scale in self.grouped_compute_scale),
                *((f"grouped_half_widths[{dtype!r}]", half, half >= 0, ">= 0")
                  for dtype, half in self.grouped_half_widths)):
            if not ok:
                raise InfercastError(f"KernelStream.{name} is {value!r}; it must be {valid}")

    def grouped_share(self, width: float, kernel_dtype: str | None = None) -> float:
        """Share of the bf16 peak a grouped GEMM of ``kernel_dtype`` over experts ``width`` wide on
        this rank reaches."""
        half = dict(self.grouped_half_widths).get(kernel_dtype, self.grouped_half_width)
        narrowing = 1.0 if width == math.inf else width / (width + half)
        scale = dict(self.grouped_compute_scale).get(kernel_dtype, 1.0)
        return (self.grouped_compute or 0.0) * narrowing * scale


MARLIN_STREAM_SOURCE = (
    "vLLM's Marlin W4A16 GEMM (int4, group 128) at one row on an H200, CUPTI kernel times: 20.3 us for 8192 x 8192, 38.1 us for 8192 x 16384, 40.6 us for 7168 x 20480 and 138.4 us for 8192 x 81920 (tile-ai/TileOPs "
    "PR 1874, the 'Marlin' column); over the int4 weights, their bf16 group scales and the activations, a "
    "least-squares fit of relative error gives 7.67 us + 0.520 of peak bandwidth, each point within 7.1% "
    "(benchmarks/derive_device_constants.py). Marlin is an Ampere kernel (mma.sync, cp.async) that sm_90 does not "
    "keep streaming: on an H100 it took 0.46 of a bf16 GEMV's time for 8192 x 8192 at one row while moving 0.25 of "
    "its bytes (inclusionAI/humming PR 2). Taken for every sm_90 device.")
MARLIN_SM90 = KernelStream(
    memory=0.520, fixed_s=7.67e-6, dtypes=frozenset({"w4a16", "mxfp4"}), grouped_compute=0.278, grouped_half_width=123,
    grouped_sm_bytes_per_s=22.71e9, grouped_memory=0.789, grouped_fixed_s=23.4e-6,
    grouped_compute_scale=(("mxfp4", 0.75),),
    source=MARLIN_STREAM_SOURCE + " Its fused MoE, once compute-bound, reaches 0.278 x w / (w + 123) of the bf16 "
    "tensor peak for experts w wide on a rank (intermediate size / MoE TP): sglang 0.5.14's Marlin MoE tables on H100 "
    "and H200 (aiconfigurator-core) at EP 1 and 4,096-16,384 tokens, 340 points over MoE TP 1-32, medians 0.075 at "
    "64 wide, 0.18 at 256, 0.26 at 1,024, 0.25-0.28 from 2,048; the median of the points' shares over that curve, and "
    "the half width with the least median relative error (3.2%; benchmarks/derive_device_constants.py). An Ampere "
    "kernel (mma.sync) on Hopper, whose short K loops over narrow experts do not amortise its pipeline. The fused MoE "
    "streams its weights at min(22.71 GB/s per SM, 0.789 of HBM peak) + 23.4 us: lines through the same tables at "
    "1-4 tokens (EP 1, MoE TP 1; the bytes of the min(E, T x k) experts the collector's spread routing touches) give "
    "3.00 TB/s + 23.9 us on H200 (median error 3.7%) and 2.64 TB/s + 22.9 us on H100 (6.1%); both have 132 SMs, so "
    "the H200 shows the SMs' limit and the H100, below it, its memory's. MXFP4 experts (gpt-oss) on these devices run "
    "the same kernel when an engine is launched with Marlin (vLLM's fused_marlin_moe with FP4 weights in groups of 32; "
    "--moe-kernel marlin) and stream at the same figures; once compute-bound they reach 0.75 of the INT4 share: "
    "vLLM 0.24.0's and sglang 0.5.14's Marlin MXFP4 MoE rows, one expert shape (3,584 hidden, 896 experts, top-16) at "
    "EP 1 and 4,096-16,384 tokens on H100 and H200, 110 points, reach 0.209 x w / (w + 123) of the bf16 peak (vLLM's "
    "0.214-0.220, sglang's 0.200) against INT4's 0.278 (benchmarks/derive_device_constants.py, "
    "tests/simulator/test_kernels.py); a ratio, so the H20 applies it to its own INT4 share")
MARLIN_H20 = replace(
    MARLIN_SM90, grouped_compute=0.360,
    source=MARLIN_STREAM_SOURCE + " On the H20, whose tensor rate is capped, its fused MoE reaches 0.360 x w / (w + "
    "123) of the bf16 peak (the H100/H200 tables' half width): the median over vLLM's fused Marlin MoE timings on an "
    "H20 96 GB with 16 or more rows an expert (flagos-ai/FlagGems PR 3609: Mixtral's shape at 64 tokens and a "
    "512-expert top-10 shape at 1,024-4,096 tokens, 0.25-0.40 of the peak) of each share over w / (w + 123) "
    "(benchmarks/derive_device_constants.py)")


@dataclass(frozen=True)
class Efficiency:
    """What the analytic model assumes a device achieves, each figure measured somewhere.

    For devices with aiconfigurator-core tables the figures are derived from those tables by
    ``benchmarks/derive_device_constants.py`` (medians over large shapes; a least-squares line
    through pure weight streams for memory; the median of the smallest GEMMs, which move almost
    nothing, for the fixed time, and what small decode attentions take beyond their roofline for
    an attention kernel's); ``source`` says where each came from.
    """

    gemm: Mapping[str, float]
    """Achieved / peak on large GEMMs, by kernel dtype (``bf16``, ``fp8``, ``fp8_block``,
    ``int8``, ``fp4``); a dtype not listed uses its compute dtype's entry, then ``bf16``'s."""
    attention: float
    """Achieved / bf16 peak of causal flash attention over long prompts."""
    memory: float
    """Achieved / peak HBM bandwidth of a streaming kernel (the slope, fixed time apart)."""
    kernel_fixed_s: float
    """Time a kernel costs on top of its roofline time (launch ramp-up and tail): what a kernel
    that moves almost nothing takes under a CUDA graph. Pointwise kernels (norms, RoPE,
    activations) pay it too, though they take less (1.26 us on an H200, 1.35 on an H100,
    ``benchmarks/pointwise_kernels.py``): docs/fidelity.md, "Measured on an H200 and an H100",
    says why."""
    link: float
    """Achieved bus bandwidth / peak scale-up link bandwidth of large all-reduces."""
    scale_out: float
    """Achieved / peak scale-out (RDMA) bandwidth of large transfers."""
    collective_floor_s: float
    """The smallest all-reduce inside the scale-up domain."""
    source: str
    attention_fp8: float | None = None
    """Achieved / bf16 peak of causal flash attention over long prompts with FP8 queries over an
    FP8 cache (FA3's FP8 forward, as sglang runs prefill over an FP8 cache). None: such
    prefills run at ``attention``."""
    attention_fixed_s: float | None = None
    """``kernel_fixed_s`` for an attention kernel, which pays more beyond its roofline (split-KV
    passes and their merge, the softmax pipeline's ramp): what small decode attentions take over
    their roofline. None: ``kernel_fixed_s``."""
    mla_attention_fixed_s: float | None = None
    """The same for MLA decode attention over a latent cache (FA3's MLA path, FlashMLA), which
    pays more again on Hopper. None: ``attention_fixed_s``."""
    streams: Mapping[str, KernelStream] = field(default_factory=dict)
    """Weight-only GEMM kernel families (``marlin``) measured to stream their weights
    differently from ``memory`` and ``kernel_fixed_s``; a family not listed streams at those.
    ``family:engine`` (``triton:sglang``) is that engine's own figure for the family, taken
    before the family's."""
    fp8_cast_s_per_element: float | None = None
    """Seconds per element of PyTorch's FP8-to-bf16 ``.to()`` over a large buffer (a ``cast``
    kernel; None: streamed at ``memory``). Not HBM-bound on Hopper: H100 and H200 cast at the
    same rate, about 1.05 TB/s of reads and writes, a third of the H100's bandwidth and a fifth
    of the H200's."""

    def stream_key(self, family: str, tables: str) -> str:
        """The ``streams`` entry a ``family`` kernel of an engine (its ``tables`` name) takes: the
        engine's own (``family:engine``, a copy of the family's with its curves) where there is one."""
        own = f"{family}:{tables}"
        return own if own in self.streams else family

    def gemm_efficiency(self, kernel_dtype: str, compute_dtype: str) -> float:
        return self.gemm.get(kernel_dtype) or self.gemm.get(compute_dtype) or self.gemm["bf16"]

    def fixed_s(self, kind: str) -> float:
        """The fixed time of one kernel of ``kind`` (an OpCost kind)."""
        if kind == "mla_attention" and self.mla_attention_fixed_s is not None:
            return self.mla_attention_fixed_s
        if kind in ("attention", "mla_attention") and self.attention_fixed_s is not None:
            return self.attention_fixed_s
        return self.kernel_fixed_s


AIC = "aiconfigurator-core 0.12.0 tables ({system}, sglang {version}), derived by benchmarks/derive_device_constants.py"


def _curves(curves: tuple[tuple[str, float, int], ...]) -> dict:
    """``KernelStream`` fields of per-dtype compute curves (dtype, share of the bf16 peak, half
    width): the largest share is ``grouped_compute``, the others fractions of it; per-tensor FP8
    experts run the FP8-block kernel and take its curve."""
    curves = curves + tuple(("fp8", share, half) for d, share, half in curves if d == "fp8_block")
    top = max(share for _, share, _ in curves)
    base = next(half for _, share, half in curves if share == top)
    return dict(grouped_compute=top, grouped_half_width=base,
                grouped_compute_scale=tuple((d, share / top) for d, share, _ in curves if share != top),
                grouped_half_widths=tuple((d, half) for d, _, half in curves if half != base))


def _described(curves: tuple[tuple[str, float, int], ...]) -> str:
    return ", ".join(f"{d} {share} x w / (w + {half})" for d, share, half in curves)


def triton_moe(memory: float, fixed_us: float, points: int, error: float, system: str, dtypes: tuple[str, ...],
               engines: str, *, curves: tuple[tuple[str, float, int], ...], compute_points: int,
               compute_error: float) -> KernelStream:
    """The engines' Triton fused MoE (sglang's and vLLM's ``fused_moe``: top-k, the alignment, two
    grouped GEMMs, the activation, the sum) on a device whose tables time it: where no table
    covers a shape, it streams the touched experts' weights at ``memory`` of HBM peak plus
    ``fixed_us`` for the whole operator, about ten times a small GEMM's fixed time, and once
    compute-bound reaches ``curves``: (dtype, share of the bf16 peak for wide experts, the width
    at which it halves), each dtype fitted apart. Per-tensor FP8 experts run the same kernel as
    the FP8-block ones and take their figures."""
    return KernelStream(
        memory=memory, fixed_s=fixed_us * 1e-6, dtypes=frozenset(dtypes), grouped_memory=memory,
        grouped_fixed_s=fixed_us * 1e-6, **_curves(curves),
        source=f"{engines}'s Triton fused MoE in aiconfigurator-core 0.12.0's {system} tables at 1-16 tokens "
        f"(balanced routing, EP 1, bf16 and FP8-block experts, every shape but those whose points beat the HBM "
        f"peak or whose FP8-block width is not a multiple of 128): a line through {points} points, {fixed_us} us + "
        f"the touched experts' weights and the rows' activations at {memory} of HBM peak, fitted to relative error, "
        f"median |error| {error}%. Once compute-bound (the same tables' points from 4,096 tokens that take at least "
        f"twice their weights' stream, {compute_points} of them, each dtype fitted apart): a share of the bf16 peak "
        f"for experts w wide on a rank, {_described(curves)}, median relative error {compute_error}% "
        "(benchmarks/derive_device_constants.py); a shape the engine ships a tuned tile configuration for runs "
        "faster (docs/fidelity.md, 'The analytic fused MoE at many tokens'). The generic figures priced these "
        "1.2-2.1 times too fast at one token and 1.7-3.4 times at 8,192 tokens and more")


TRITON_MOE_A100 = triton_moe(0.834, 44.9, 345, 5.9, "a100_sxm", ("bf16",), "sglang",
                             curves=(("bf16", 0.305, 60),), compute_points=343, compute_error=10.6)
TRITON_MOE_H100 = triton_moe(0.862, 27.0, 1765, 6.4, "h100_sxm", ("bf16", "fp8_block", "fp8"), "sglang and vLLM",
                             curves=(("bf16", 0.527, 310), ("fp8_block", 0.672, 350)), compute_points=1657,
                             compute_error=14.5)
TRITON_MOE_H200 = triton_moe(0.847, 28.5, 1781, 8.8, "h200_sxm", ("bf16", "fp8_block", "fp8"), "sglang and vLLM",
                             curves=(("bf16", 0.578, 300), ("fp8_block", 0.628, 235)), compute_points=1757,
                             compute_error=16.8)


def engine_triton_moe(base: KernelStream, label: str, *, curves: tuple[tuple[str, float, int], ...],
                      compute_points: int, compute_error: float) -> KernelStream:
    """``base`` with one engine's own compute-bound curves (``label`` names it), fitted to its
    Triton rows alone: the two engines tune their tile configurations apart (on Hopper sglang's
    bf16 experts reach about a third of its FP8-block share, vLLM's most of it), which pooled
    curves leave as a bias."""
    return replace(base, **_curves(curves),
                   source=f"{base.source}. {label}'s own rows from 4,096 tokens ({compute_points}): "
                   f"{_described(curves)} of the bf16 peak, median relative error {compute_error}%")


TRITON_MOE_H100_SGLANG = engine_triton_moe(TRITON_MOE_H100, "sglang", curves=(("bf16", 0.234, 80),
                                           ("fp8_block", 0.694, 310)), compute_points=956, compute_error=7.9)
TRITON_MOE_H100_VLLM = engine_triton_moe(TRITON_MOE_H100, "vLLM", curves=(("bf16", 0.545, 265),
                                         ("fp8_block", 0.648, 415)), compute_points=701, compute_error=8.1)
TRITON_MOE_H200_SGLANG = engine_triton_moe(TRITON_MOE_H200, "sglang", curves=(("bf16", 0.266, 75),
                                           ("fp8_block", 0.801, 345)), compute_points=998, compute_error=7.6)
TRITON_MOE_H200_VLLM = engine_triton_moe(TRITON_MOE_H200, "vLLM", curves=(("bf16", 0.667, 315),
                                         ("fp8_block", 0.661, 380)), compute_points=759, compute_error=7.5)
TRITON_MOE_B200 = triton_moe(0.667, 29.3, 335, 9.0, "b200_sxm", ("bf16", "fp8_block", "fp8"), "sglang",
                             curves=(("bf16", 0.218, 190), ("fp8_block", 0.449, 530)), compute_points=303,
                             compute_error=6.2)

HOPPER_H100 = Efficiency(
    gemm={"bf16": 0.724, "fp8": 0.514, "fp8_block": 0.619, "int8": 0.514}, attention=0.575, attention_fp8=0.695,
    memory=0.858,
    kernel_fixed_s=3.01e-6, attention_fixed_s=9.98e-6, mla_attention_fixed_s=15.88e-6, link=1.04, scale_out=0.8,
    collective_floor_s=4.82e-6, streams={"marlin": MARLIN_SM90, "triton": TRITON_MOE_H100,
                                        "triton:sglang": TRITON_MOE_H100_SGLANG, "triton:vllm": TRITON_MOE_H100_VLLM},
    fp8_cast_s_per_element=2.907e-12,
    source=AIC.format(system="h100_sxm", version="0.5.14") + "; int8 assumed at the fp8 rate (same tensor-core "
    "peak on sm_90, no int8 table); link above 1: NVLink SHARP reduces in the switch",
)
HOPPER_H200 = Efficiency(
    gemm={"bf16": 0.693, "fp8": 0.560, "fp8_block": 0.606, "int8": 0.560}, attention=0.559, attention_fp8=0.680,
    memory=0.845,
    kernel_fixed_s=3.02e-6, attention_fixed_s=10.35e-6, mla_attention_fixed_s=16.20e-6, link=1.038, scale_out=0.8,
    collective_floor_s=3.47e-6, streams={"marlin": MARLIN_SM90, "triton": TRITON_MOE_H200,
                                        "triton:sglang": TRITON_MOE_H200_SGLANG, "triton:vllm": TRITON_MOE_H200_VLLM},
    fp8_cast_s_per_element=2.809e-12,
    source=AIC.format(system="h200_sxm", version="0.5.14") + "; int8 assumed at the fp8 rate (same tensor-core "
    "peak on sm_90, no int8 table); link above 1: NVLink SHARP reduces in the switch",
)
AMPERE_A100 = Efficiency(
    gemm={"bf16": 0.794}, attention=0.638, memory=0.798, kernel_fixed_s=3.23e-6, attention_fixed_s=21.52e-6, link=0.758,
    scale_out=0.8, collective_floor_s=5.79e-6, streams={"triton": TRITON_MOE_A100},
    source=AIC.format(system="a100_sxm", version="0.5.10") + "; int8 has no table and uses the bf16 figure",
)
BLACKWELL_B200 = Efficiency(
    gemm={"bf16": 0.651, "fp8": 0.476, "fp8_block": 0.570}, attention=0.513, attention_fp8=0.551, memory=0.785,
    kernel_fixed_s=2.18e-6,
    attention_fixed_s=10.07e-6, mla_attention_fixed_s=12.13e-6, link=0.802, scale_out=0.8, collective_floor_s=7.00e-6,
    streams={"triton": TRITON_MOE_B200},
    source=AIC.format(system="b200_sxm", version="0.5.14") + "; fp4 has no table and uses the bf16 figure",
)
MI300X_MEASURED = replace(
    HOPPER_H100, gemm={"bf16": 0.54, "fp8": 0.49}, collective_floor_s=14.81e-6, streams={}, attention_fp8=None,
    source="GEMMs: AMD's max-achievable FLOPs with hipBLASLt on an MI300X, bf16 708 TFLOP/s = 0.54 of 1307 and fp8 "
    "1273 = 0.49 of 2615 (ROCm blogs, 'Measuring max-achievable FLOPs, part 2', 2025-02-28). Smallest all-reduce: "
    "14.81 us for 32 KiB of fp16 over 8 x MI300X with MK1 QuickReduce, RCCL 16.22 us (mk1-project/quickreduce "
    "README: ROCm 6.2.41134, RCCL 2.20.5). No MI300X attention, memory or per-kernel fixed-cost measurement was "
    "found: those are the H100 figures, an assumption: " + HOPPER_H100.source,
)
ASCEND_A3_MEASURED = replace(
    HOPPER_H100, gemm={"bf16": 0.89, "fp16": 0.89}, streams={}, attention_fp8=None,
    source="GEMMs: an Ascend 910B2 ran a 4096^3 bf16 torch matmul at 315 TFLOP/s (community data, "
    "zzc0721/torch-performance-test-data issue #109), 0.89 of the 354 TFLOP/s bf16 of an A3 die; assumed to "
    "carry over to the A3 die. No Ascend attention, memory or collective measurement was found: those are the "
    "H100 figures, an assumption: " + HOPPER_H100.source,
)
H20_CAPPED = replace(
    HOPPER_H100, gemm={"bf16": 0.85, "fp8": 0.85, "fp8_block": 0.85, "int8": 0.85}, attention=0.73,
    attention_fp8=round(0.73 * HOPPER_H100.attention_fp8 / HOPPER_H100.attention, 3),
    streams={"marlin": MARLIN_H20}, fp8_cast_s_per_element=HOPPER_H100.fp8_cast_s_per_element * 132 / 78,
    source="H20 has no measured tables. Attention: FlashAttention-3 forward on an H20 (head dim 128, 2,048 tokens, "
    "batch 2) ran at 107.8 TFLOP/s causal = 0.73 of 148 and 126.2 non-causal = 0.85 (Dao-AILab/flash-attention "
    "issue #1310); with FP8 queries over an FP8 cache, that times the H100 tables' FP8 / bf16 attention ratio "
    "(0.695 / 0.575), an assumption: no FP8 attention was found measured on an H20. GEMMs: the H20's tensor rate "
    "is capped far below what its 78 sm_90 SMs can issue, so GEMMs are taken to reach it as readily as the "
    "non-causal attention kernel does (0.85, every dtype); checked, not fitted, "
    "against DeepGEMM's FP8 grouped GEMM on an H20 at 16-160 rows an expert (deepseek-ai/DeepGEMM PRs 192 and 116, "
    "issue 114): median |error| 4.9% over 11 shapes, 160 rows 22-23% fast (benchmarks/kernel_points.py). FP8-to-bf16 "
    "casts: the H100's rate scaled by SMs (132 / 78; H100 and H200 cast at one rate whatever their bandwidth). "
    "Memory, fixed costs and links: the H100 figures (same sm_90 kernels), from "
    + HOPPER_H100.source,
)


@dataclass(frozen=True)
class DeviceSpec:
    """One accelerator and the machine it sits in."""

    name: str
    peak_flops_per_s: Mapping[str, float]
    """Dense tensor peaks by compute dtype: ``bf16``, ``fp16``, ``fp8``, ``int8``, ``fp4``; and
    ``fp32``, an FP32 GEMM's at full precision (NVIDIA's CUDA cores, AMD's FP32 matrix cores)."""
    memory_bytes: float
    """What the driver reports as the device's total memory (``nvidia-smi`` memory.total,
    ``torch.cuda.mem_get_info``), which engines size their pools from. Data sheets round it:
    an "80 GB" H100 has 81,559 MiB (85.5e9 bytes), a "192 GB" MI300X 205.8e9 bytes (191.7 GiB)."""
    hbm_bandwidth_bytes_per_s: float
    scale_up_bandwidth_bytes_per_s: float
    """Per device, one direction, inside the scale-up domain (NVLink, Infinity Fabric, HCCS)."""
    scale_up_latency_s: float
    """One synchronisation step of a collective inside the scale-up domain (calibrated estimate)."""
    scale_out_bandwidth_bytes_per_s: float
    """Per device, one direction, between nodes (e.g. 400 Gb/s InfiniBand = 50 GB/s)."""
    scale_out_latency_s: float
    devices_per_node: int
    efficiency: Efficiency
    sources: Mapping[str, str] = field(default_factory=dict)
    kernel_tables: str | None = None
    """aiconfigurator-core's system name for this device's measured kernel tables, if it has any."""
    sm_count: int | None = None
    """Streaming multiprocessors (GEMM waves are quantised to them), from the vendor's data sheet."""
    cuda_arch: int | None = None
    """NVIDIA compute capability as engines test it (80 sm_80, 90 sm_90, 100 sm_100); None for
    other vendors. Engines turn kernels on by it (sglang's FlashInfer all-reduce fusion)."""
    super_node_size: int | None = None
    """Devices in one scale-up domain beyond a node (Ascend CloudMatrix384), when enabled."""
    aliases: tuple[str, ...] = ()

    def peak(self, dtype: str) -> float:
        """Peak for a compute dtype, falling back to what the device runs it in without that
        tensor-core type: FP4 and FP8 weights are dequantised to bf16 (Hopper has no FP4
        tensor cores, A100 no FP8), int8 runs at the fp8 rate where only that is published.
        ``fp32`` is the full-precision FP32 rate (PyTorch's default matmul precision, "highest",
        keeps FP32 GEMMs off NVIDIA's TF32 tensor cores); a device with no published FP32 figure
        (the Ascend dies) takes its bf16 rate."""
        fallbacks = {"fp4": ("fp4", "bf16"), "fp8": ("fp8", "bf16"), "int8": ("int8", "fp8", "bf16"),
                     "fp16": ("fp16", "bf16"), "bf16": ("bf16", "fp16"), "fp32": ("fp32", "bf16")}
        for candidate in fallbacks.get(dtype, (dtype,)):
            if candidate in self.peak_flops_per_s:
                return self.peak_flops_per_s[candidate]
        raise InfercastError(f"{self.name}: no published peak for compute dtype {dtype!r}")

    def scale_up_domain(self, super_node: bool = False) -> int:
        return self.super_node_size if super_node and self.super_node_size else self.devices_per_node

    def to_dict(self) -> dict:
        return {
            "name": self.name,
            "peak_tflops": {k: v / T for k, v in self.peak_flops_per_s.items()},
            "memory_gb": self.memory_bytes / GB,
            "memory_gib": self.memory_bytes / GIB,
            "hbm_bandwidth_tb_per_s": self.hbm_bandwidth_bytes_per_s / TB,
            "scale_up_bandwidth_gb_per_s": self.scale_up_bandwidth_bytes_per_s / GB,
            "scale_out_bandwidth_gb_per_s": self.scale_out_bandwidth_bytes_per_s / GB,
            "devices_per_node": self.devices_per_node,
            "super_node_size": self.super_node_size,
            "sm_count": self.sm_count,
            "cuda_arch": self.cuda_arch,
            "kernel_tables": self.kernel_tables,
            "efficiency": {
                "gemm": dict(self.efficiency.gemm),
                "attention": self.efficiency.attention,
                "memory": self.efficiency.memory,
                "kernel_fixed_us": self.efficiency.kernel_fixed_s * 1e6,
                "attention_fixed_us": self.efficiency.fixed_s("attention") * 1e6,
                "mla_attention_fixed_us": self.efficiency.fixed_s("mla_attention") * 1e6,
                "link": self.efficiency.link,
                "collective_floor_us": self.efficiency.collective_floor_s * 1e6,
                "streams": {name: {"memory": k.memory, "fixed_us": k.fixed_s * 1e6, "dtypes": sorted(k.dtypes),
                                   "grouped_compute": k.grouped_compute, "grouped_half_width": k.grouped_half_width,
                                   "grouped_half_widths": dict(k.grouped_half_widths),
                                   "grouped_compute_scale": dict(k.grouped_compute_scale),
                                   "grouped_sm_gb_per_s": (k.grouped_sm_bytes_per_s / 1e9
                                                           if k.grouped_sm_bytes_per_s is not None else None),
                                   "grouped_memory": k.grouped_memory, "grouped_fixed_us": k.grouped_fixed_s * 1e6,
                                   "source": k.source} for name, k in self.efficiency.streams.items()},
                "source": self.efficiency.source,
            },
            "sources": dict(self.sources),
        }


NVIDIA_SPEC = "NVIDIA data sheet (dense tensor-core peaks), via shared/reference/devices.md"
IB_400G = 400e9 / 8  # 400 Gb/s per GPU, the typical scale-out NIC
CUDA_GPUS = "NVIDIA's CUDA GPU compute capability list (developer.nvidia.com/cuda-gpus)"
NVIDIA_SMI = "memory.total in nvidia-smi's listing (MiB), as public logs of the card print it"

BUILTIN_DEVICES: tuple[DeviceSpec, ...] = (
    DeviceSpec(
        name="A100", aliases=("A100-SXM-80GB",),
        peak_flops_per_s={"bf16": 312 * T, "fp16": 312 * T, "int8": 624 * T, "fp32": 19.5 * T},
        memory_bytes=81920 * MIB, hbm_bandwidth_bytes_per_s=2.04 * TB,
        scale_up_bandwidth_bytes_per_s=300 * GB, scale_up_latency_s=3e-6,
        scale_out_bandwidth_bytes_per_s=200e9 / 8, scale_out_latency_s=10e-6,
        kernel_tables='a100_sxm', sm_count=108, cuda_arch=80, devices_per_node=8, efficiency=AMPERE_A100,
        sources={"compute capability": CUDA_GPUS, "peaks, NVLink3": NVIDIA_SPEC, "memory": NVIDIA_SMI,
                 "scale-out": "200 Gb/s HDR per GPU, typical DGX A100",
                 "fp32": "NVIDIA A100 data sheet: FP32 19.5 TFLOPS (CUDA cores)"},
    ),
    DeviceSpec(
        name="H100", aliases=("H100-SXM", "H100-80GB"),
        peak_flops_per_s={"bf16": 989 * T, "fp16": 989 * T, "fp8": 1979 * T, "int8": 1979 * T, "fp32": 67 * T},
        memory_bytes=81559 * MIB, hbm_bandwidth_bytes_per_s=3.35 * TB,
        scale_up_bandwidth_bytes_per_s=450 * GB, scale_up_latency_s=3e-6,
        scale_out_bandwidth_bytes_per_s=IB_400G, scale_out_latency_s=10e-6,
        kernel_tables='h100_sxm', sm_count=132, cuda_arch=90, devices_per_node=8, efficiency=HOPPER_H100,
        sources={"compute capability": CUDA_GPUS, "peaks, NVLink4": NVIDIA_SPEC, "memory": NVIDIA_SMI,
                 "scale-out": "400 Gb/s per GPU typical",
                 "fp32": "NVIDIA H100 SXM data sheet: FP32 67 TFLOPS (CUDA cores)"},
    ),
    DeviceSpec(
        name="H200", aliases=("H200-SXM", "H200-141GB"),
        peak_flops_per_s={"bf16": 989 * T, "fp16": 989 * T, "fp8": 1979 * T, "int8": 1979 * T, "fp32": 67 * T},
        memory_bytes=143771 * MIB, hbm_bandwidth_bytes_per_s=4.8 * TB,
        scale_up_bandwidth_bytes_per_s=450 * GB, scale_up_latency_s=3e-6,
        scale_out_bandwidth_bytes_per_s=IB_400G, scale_out_latency_s=10e-6,
        kernel_tables='h200_sxm', sm_count=132, cuda_arch=90, devices_per_node=8, efficiency=HOPPER_H200,
        sources={"compute capability": CUDA_GPUS, "peaks, NVLink4": NVIDIA_SPEC, "memory": NVIDIA_SMI,
                 "scale-out": "400 Gb/s per GPU typical",
                 "fp32": "NVIDIA H200 SXM data sheet: FP32 67 TFLOPS (CUDA cores)"},
    ),
    DeviceSpec(
        name="H20", aliases=("H20-96G",),
        peak_flops_per_s={"bf16": 148 * T, "fp16": 148 * T, "fp8": 296 * T, "int8": 296 * T, "fp32": 44 * T},
        memory_bytes=97871 * MIB, hbm_bandwidth_bytes_per_s=4.0 * TB,
        scale_up_bandwidth_bytes_per_s=450 * GB, scale_up_latency_s=3e-6,
        scale_out_bandwidth_bytes_per_s=4 * IB_400G / 8, scale_out_latency_s=10e-6,
        sm_count=78, cuda_arch=90, devices_per_node=8, efficiency=H20_CAPPED,
        sources={"compute capability": CUDA_GPUS, "peaks, NVLink": NVIDIA_SPEC, "memory": NVIDIA_SMI,
                 "scale-out": "4 x 400 Gb/s RDMA NICs per 8-GPU node (H800: 8 x 400), 200 Gb/s a GPU: the H20-96G "
                              "column of the spec table in LMSYS's blog of 2025-09-26 (SGLang at Ant Group)",
                 "fp32": "NVIDIA H20 product brief: FP32 44 TFLOPS (CUDA cores)"},
    ),
    DeviceSpec(
        name="B200",
        peak_flops_per_s={"bf16": 2250 * T, "fp16": 2250 * T, "fp8": 4500 * T, "int8": 4500 * T, "fp4": 9000 * T,
                          "fp32": 75 * T},
        memory_bytes=183359 * MIB, hbm_bandwidth_bytes_per_s=8 * TB,
        scale_up_bandwidth_bytes_per_s=900 * GB, scale_up_latency_s=3e-6,
        scale_out_bandwidth_bytes_per_s=IB_400G, scale_out_latency_s=10e-6,
        kernel_tables='b200_sxm', sm_count=148, cuda_arch=100, devices_per_node=8, efficiency=BLACKWELL_B200,
        sources={"compute capability": CUDA_GPUS, "peaks, NVLink5": NVIDIA_SPEC, "memory": NVIDIA_SMI,
                 "scale-out": "400 Gb/s per GPU typical",
                 "fp32": "NVIDIA Blackwell data sheet, HGX B200 column: FP32 75 TFLOPS a GPU (CUDA cores)"},
    ),
    DeviceSpec(
        name="MI300X", sm_count=304,
        peak_flops_per_s={"bf16": 1307 * T, "fp16": 1307 * T, "fp8": 2615 * T, "int8": 2615 * T, "fp32": 163.4 * T},
        memory_bytes=205_822_885_888, hbm_bandwidth_bytes_per_s=5.3 * TB,
        scale_up_bandwidth_bytes_per_s=448 * GB, scale_up_latency_s=3e-6,
        scale_out_bandwidth_bytes_per_s=IB_400G, scale_out_latency_s=10e-6,
        devices_per_node=8, efficiency=MI300X_MEASURED,
        sources={"peaks, Infinity Fabric (aggregate)": "AMD data sheet, via shared/reference/devices.md",
                 "memory": "VRAM Total Memory in rocm-smi --showmeminfo vram (bytes), as public logs print it",
                 "fp32": "AMD Instinct MI300X data sheet: FP32 matrix 163.4 TFLOPS"},
    ),
    DeviceSpec(
        name="ATLAS_800_A3_560T_128G_DIE",
        peak_flops_per_s={"bf16": 246 * T, "fp16": 280 * T, "int8": 560 * T},
        memory_bytes=64 * GIB, hbm_bandwidth_bytes_per_s=1.6 * TIB,
        scale_up_bandwidth_bytes_per_s=196 * GB, scale_up_latency_s=5e-6,
        scale_out_bandwidth_bytes_per_s=IB_400G, scale_out_latency_s=15e-6,
        devices_per_node=16, super_node_size=384, efficiency=ASCEND_A3_MEASURED,
        sources={"peaks, memory, HCCS": "Huawei Atlas 800 A3 figures per die, via shared/reference/devices.md",
                 "node": "8 two-die chips = 16 dies per server; CloudMatrix384 super-node: 384 NPUs"},
    ),
    DeviceSpec(
        name="ATLAS_800_A3_752T_128G_DIE",
        peak_flops_per_s={"bf16": 354 * T, "fp16": 376 * T, "int8": 752 * T},
        memory_bytes=64 * GIB, hbm_bandwidth_bytes_per_s=1.6 * TIB,
        scale_up_bandwidth_bytes_per_s=196 * GB, scale_up_latency_s=5e-6,
        scale_out_bandwidth_bytes_per_s=IB_400G, scale_out_latency_s=15e-6,
        devices_per_node=16, super_node_size=384, efficiency=ASCEND_A3_MEASURED,
        sources={"peaks, memory, HCCS": "Huawei Atlas 800 A3 figures per die, via shared/reference/devices.md",
                 "node": "8 two-die chips = 16 dies per server; CloudMatrix384 super-node: 384 NPUs"},
    ),
)


class DeviceRegistry:
    """Devices by name (case-insensitive, aliases included); plugins add more."""

    def __init__(self, devices: tuple[DeviceSpec, ...] = ()) -> None:
        self._devices: dict[str, DeviceSpec] = {}
        self._keys: dict[str, str] = {}
        for device in devices:
            self.add(device)

    def add(self, device: DeviceSpec) -> None:
        for key in (device.name, *device.aliases):
            if key.lower() in self._keys:
                raise InfercastError(f"device name {key!r} is already registered")
        self._devices[device.name] = device
        for key in (device.name, *device.aliases):
            self._keys[key.lower()] = device.name

    def get(self, name: str) -> DeviceSpec:
        key = self._keys.get(name.lower())
        if key is None:
            raise InfercastError(
                f"unknown device {name!r}. Valid devices: {', '.join(self.names())}. "
                "A plugin can add one with the infercast_register_devices hook."
            )
        return self._devices[key]

    def names(self) -> list[str]:
        return list(self._devices)

    def all(self) -> list[DeviceSpec]:
        return list(self._devices.values())
