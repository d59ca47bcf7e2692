"""Derive the analytic model's per-device efficiencies from aiconfigurator-core's measured tables.

The constants in ``infercast.devices`` for devices with tables (H100, H200, A100, B200) come
from this script; run it to check them: .venv/bin/python benchmarks/derive_device_constants.py

- GEMM efficiency by dtype: the median of achieved / peak over GEMMs with m, n, k >= 4096;
- attention efficiency: the median of achieved / bf16 peak over causal prefill attention with
  head_dim 128, isl >= 4096 and batch x isl >= 16384 (flops = 2 x heads x pairs x 256); the
  FP8 figure the same over the rows with FP8 queries and an FP8 cache, as sglang's FA3 runs
  prefill over an FP8 cache (still over the bf16 peak, so the two compare directly);
- memory efficiency: the slope of a least-squares line time = intercept + bytes / (efficiency x
  HBM peak) through the bf16 GEMMs with m = 1 and at least 8 MiB of weights (pure weight
  streams);
- per-kernel fixed time: the median duration of the bf16 GEMMs with m = 1 and at most 256 KiB
  of weights, kernels that move almost nothing (under 5% of their time at any of these
  devices' bandwidths). Not the line's intercept: that extrapolates large streams to zero
  bytes, and A100's GEMV reaches its bandwidth slowly (0.36 of peak at 10 MiB, 0.7 from
  80 MiB), which puts the intercept at 9.9 us where its small kernels take 3.2;
- attention fixed time: what the roofline leaves out of small decode attentions, the median of
  measured minus roofline time over the table's decodes of 1-8 requests over 64-2,048 tokens
  (bf16 cache, head dim 128, every head layout): 10-22 us, where a small GEMM takes 2-3
  (split-KV passes and their merge, the softmax pipeline's ramp);
- MLA attention fixed time: the same over the MLA decode table (DeepSeek-V3's latent geometry,
  bf16 cache), which takes longer again on Hopper (16 us);
- FP8 cast rate (Hopper): the slope of the FP8-cache MLA decode's time minus the bf16 one's over
  the tokens in the pool (64K and up). sglang's MLA decode on Hopper copies the whole FP8 pool
  to bf16 before attending (sglang issue 35291), and the collector's pool is the batch's tokens;
- the kernel floor is the shortest GEMM in the table (a kernel's minimum duration under CUDA
  graphs);
- link efficiency: custom all-reduce over 8 GPUs at the largest message, bus bandwidth
  2 (n - 1) / n x bytes / time over the NVLink peak; all-reduce floor: its smallest message;
- the Triton fused MoE's streaming at 1-16 tokens (``triton`` in the device's streams): a line
  through the engines' Triton MoE tables, fitted to relative error (:func:`triton_moe_stream`), and
  its compute-bound share of the bf16 peak, falling with the experts' width on a rank
  (:func:`triton_moe_compute`); shown: the tables over the analytic price at those figures
  (:func:`triton_moe`; docs/fidelity.md, "The analytic fused MoE at many tokens").

The tables have no dense weight-only int4 GEMM; Marlin's figure on sm_90 (``MARLIN_SM90``) is a
line time = fixed + bytes / (efficiency x HBM peak) through four published one-row Marlin
timings on an H200, fitted to their relative error (``kernel_points.MARLIN_H200``). Its fused
MoE's compute share (``grouped_compute``) is the median achieved / bf16 peak of the tables'
Marlin MoEs at EP 1 and at least 4,096 tokens on H100 and H200, and on the H20 (no
tables) of the published H20 timings with 16 or more rows an expert
(``kernel_points.MARLIN_MOE_H20``), each over a curve in the experts' width on a rank fitted to
the tables (``marlin_moe_compute``); its streaming (``marlin_moe_stream``) is a line through
each device's Marlin MoE tables at 1-4 tokens, the SMs' limit from the faster per SM and the
memory's from the smaller share of HBM. Both apply to MXFP4 experts on sm_90 as well (vLLM runs
them through the same Marlin MoE kernel when launched with Marlin), the compute share scaled by
the MXFP4 rows' own: the median share over the same curve of vLLM's and sglang's Marlin MXFP4
MoE rows (one expert shape) on H100 and H200, over INT4's (``grouped_compute_scale``).
"""

from __future__ import annotations

import statistics
import sys
from dataclasses import replace

from infercast import analytic
from infercast.cost import OpCost, cost_of
from infercast.devices import BUILTIN_DEVICES
from infercast.kernels import aiconfigurator as aic

ENGINE = "sglang"


def fit_line(points: list[tuple[float, float]]) -> tuple[float, float]:
    """Least-squares slope and intercept of y over x."""
    n = len(points)
    mx = sum(x for x, _ in points) / n
    my = sum(y for _, y in points) / n
    slope = sum((x - mx) * (y - my) for x, y in points) / sum((x - mx) ** 2 for x, _ in points)
    return slope, my - slope * mx


def fit_relative(points: list[tuple[float, float]]) -> tuple[float, float]:
    """Slope and intercept of the line minimising the squared relative error of y (a least-squares
    fit weighted by 1 / y^2)."""
    w = [1 / y**2 for _, y in points]
    sw, sx, sy = sum(w), sum(wi * x for wi, (x, _) in zip(w, points)), sum(wi * y for wi, (_, y) in zip(w, points))
    sxx = sum(wi * x * x for wi, (x, _) in zip(w, points))
    sxy = sum(wi * x * y for wi, (x, y) in zip(w, points))
    slope = (sw * sxy - sx * sy) / (sw * sxx - sx * sx)
    return slope, (sy - slope * sx) / sw


def marlin_stream(device) -> tuple[float, float, list[float]]:
    """Marlin's streaming efficiency, fixed time (s) and each point's relative error over the
    published H200 timings (kernel_points.MARLIN_H200), counting the bytes infercast's W4A16 GEMM
    reads: int4 weights, bf16 scales per 128 inputs, the activations."""
    from kernel_points import MARLIN_H200, int4_gemm

    points = [(cost_of(int4_gemm(m, n, k)).bytes, us * 1e-6) for m, n, k, us in MARLIN_H200]
    slope, intercept = fit_relative(points)
    return (1 / slope / device.hbm_bandwidth_bytes_per_s, intercept,
            [(intercept + slope * b) / t - 1 for b, t in points])


def marlin_moe_points(devices: list, engine: str = ENGINE, dtype: str = "w4a16") -> list[tuple[float, float]]:
    """(experts' width on a rank, achieved / bf16 peak) of the ``engine`` tables' Marlin MoEs of
    ``dtype`` at EP 1 and >= 4,096 tokens (flops 6 x tokens x top-k x hidden x width)."""
    points = []
    for device in devices:
        system = device.kernel_tables
        moe = aic.load("moe", system, engine, aic.default_version(system, engine))
        for key in moe.keys():
            kind, kernel, distribution, top_k, _, hidden, inter, moe_tp = key
            if (kind, kernel, distribution) != (dtype, "marlin", "balanced"):
                continue
            width = inter / moe_tp
            points += [(width, tokens * top_k * 6 * hidden * width / (us * 1e-6) / device.peak("bf16"))
                       for (ep, tokens), us in moe.grid(key).points() if ep == 1 and tokens >= 4096]
    return points


def share_at(points: list[tuple[float, float]], half: float) -> tuple[float, float]:
    """(median relative error, s) of the curve s x w / (w + half) through (width, share) points,
    s the median of each point's share over w / (w + half)."""
    share = statistics.median(e * (w + half) / w for w, e in points)
    return statistics.median(abs(share * w / (w + half) / e - 1) for w, e in points), share


def marlin_moe_compute(devices: list) -> tuple[float, float, float, float, list[float]]:
    """Marlin's fused MoE once compute-bound: share = s x w / (w + h) of the bf16 peak for experts
    w wide on a rank (intermediate / MoE TP). Over the H100 and H200 tables' points at EP 1 and
    >= 4,096 tokens (:func:`marlin_moe_points`), h is the half width (integers 0-400) with the
    least median relative error and s the median share over w / (w + h); on the H20, s is the
    median over the published timings with >= 16 rows an expert. Returns (s, h, that median
    error, the H20's s, the H20 shares)."""
    from kernel_points import MARLIN_MOE_H20

    points = marlin_moe_points(devices)
    half = min(range(401), key=lambda h: share_at(points, h)[0])
    error, share = share_at(points, half)
    h20 = next(d for d in BUILTIN_DEVICES if d.name == "H20")
    published = [m * top_k * 6 * k * n / (ms * 1e-3) / h20.peak("bf16")
                 for m, e, k, n, top_k, ms in MARLIN_MOE_H20 if m * top_k / e >= 16]
    widths = [n for m, e, k, n, top_k, ms in MARLIN_MOE_H20 if m * top_k / e >= 16]
    h20_share = statistics.median(p * (w + half) / w for p, w in zip(published, widths))
    return share, half, error, h20_share, published


def marlin_moe_stream(devices: list) -> tuple[float, float, float, dict[str, tuple[float, float, float]]]:
    """Marlin's fused MoE streaming its weights, from each device's tables at 1-4 tokens (EP 1,
    MoE TP 1, every shape): a line time = fixed + bytes / rate per device, fitted to relative
    error over the bytes infercast's fused MoE reads for the experts the tables' runs touched
    (the collector spreads T tokens over min(E, T x k) experts:
    :func:`infercast.kernels.aiconfigurator.random_routing`). The devices run the same sm_90 kernel: the
    fastest per SM is taken to be at the SMs' limit, and the slowest per SM, below it, at the
    memory's (its share of its HBM peak). Returns (bytes/s per SM, share of HBM, the mean fixed
    time, and each device's (rate, fixed, median |error|))."""
    from kernel_points import int4_moe

    fits = {}
    for device in devices:
        system = device.kernel_tables
        moe = aic.load("moe", system, ENGINE, aic.default_version(system, ENGINE))
        points = []
        for key in moe.keys():
            dtype, kernel, distribution, top_k, experts, hidden, inter, moe_tp = key
            if (dtype, kernel, distribution, moe_tp) != ("w4a16", "marlin", "balanced", 1):
                continue
            points += [(cost_of(int4_moe(tokens, experts, hidden, inter, top_k,
                                         active=min(experts, tokens * top_k))).bytes, us * 1e-6)
                       for (ep, tokens), us in moe.grid(key).points() if ep == 1 and tokens <= 4]
        slope, intercept = fit_relative(points)
        error = statistics.median(abs((intercept + slope * b) / t - 1) for b, t in points)
        fits[device.name] = (1 / slope, intercept, error)
    fastest = max(devices, key=lambda d: fits[d.name][0] / d.sm_count)
    slowest = min(devices, key=lambda d: fits[d.name][0] / d.sm_count)
    per_sm = fits[fastest.name][0] / fastest.sm_count
    share = fits[slowest.name][0] / slowest.hbm_bandwidth_bytes_per_s
    return per_sm, share, statistics.mean(f[1] for f in fits.values()), fits


TRITON_MOE_BYTES = {"bf16": 2.0, "fp8_block": 1.0}


def triton_points(device, engine: str):
    """The engine's Triton fused MoE points in the device's tables at balanced routing and EP 1:
    (dtype, top_k, hidden, width on a rank, tokens, the bytes the cost model's ``moe`` shape
    counts at that many tokens (the min(E, T x k) experts the collector's spread touches and the
    rows' activations), seconds). Nothing when the engine has no tables for the device."""
    version = aic.default_version(device.kernel_tables, engine)
    if version is None:
        return
    moe = aic.load("moe", device.kernel_tables, engine, version)
    for key in moe.keys():
        dtype, kernel, distribution, top_k, experts, hidden, inter, moe_tp = key
        if (kernel, distribution) != ("triton", "balanced") or dtype not in TRITON_MOE_BYTES:
            continue
        width = inter / moe_tp
        for (ep, tokens), us in moe.grid(key).points():
            if ep == 1:
                rows = tokens * top_k
                stream = min(experts, rows) * 3 * hidden * width * TRITON_MOE_BYTES[dtype] + rows * hidden * 4
                yield dtype, top_k, experts, hidden, width, tokens, stream, us * 1e-6


def triton_moe(device, engine: str) -> dict[tuple[str, str], float] | None:
    """The engine's Triton fused MoE in the device's tables (balanced routing, EP 1) against the
    analytic price infercast gives a fused MoE no table covers at the device's Triton figures, the
    engine's own (``triton:<engine>``) where the device has them
    (the cost model's ``moe`` shape: 6 x rows x hidden x width FLOPs, the touched experts' weights
    and the rows' activations): the median measured / analytic by (dtype, token band)."""
    from infercast.cost import COMPUTE_DTYPE

    ratios: dict[tuple[str, str], list[float]] = {}
    kernel = device.efficiency.stream_key("triton", engine)  # as the cost model
    for dtype, top_k, experts, hidden, width, tokens, stream, seconds in triton_points(device, engine):
        rows = tokens * top_k
        cost = OpCost(flops=6.0 * rows * hidden * width, compute_dtype=COMPUTE_DTYPE.get(dtype, "bf16"),
                      bytes=stream, kernel_dtype=dtype, kind="gemm", kernels=5, grouped=True,
                      gemm_mnk=(rows, 2 * width, hidden))
        band = ("32-512" if 32 <= tokens <= 512 else "1K-4K" if 1024 <= tokens <= 4096 else "8K+" if tokens >= 8192
                else None)
        if band:
            ratios.setdefault((dtype, band), []).append(seconds / analytic.kernel_time(cost, device, kernel).seconds)
    return {k: statistics.median(v) for k, v in ratios.items()} or None


def triton_moe_compute(device, engines: tuple[str, ...] = ("sglang", "vllm")
                       ) -> tuple[float, dict[str, tuple[float, int]], float, dict[str, float], int] | None:
    """The ``engines``' Triton fused MoE once compute-bound (``grouped_compute``): their tables'
    points from 4,096 tokens that take at least twice their weights' stream, as a share of the bf16
    peak, s x w / (w + h) for experts w wide on a rank, fitted for each dtype apart (the engines
    tune bf16 and FP8-block tiles apart: one half width for both misprices one by width). h is the
    half width (0-1,000 in steps of 5) with the least median relative error over the dtype's points,
    s the median of each point's share over w / (w + h). Returns (the largest s, each dtype's (s over
    it, h), the median relative error over all points, that error by engine, points)."""
    points = []
    for engine in engines:
        for dtype, top_k, experts, hidden, width, tokens, _, seconds in triton_points(device, engine):
            weights = experts * 3 * hidden * width * TRITON_MOE_BYTES[dtype]
            stream_s = weights / (device.hbm_bandwidth_bytes_per_s * device.efficiency.memory)
            if tokens >= 4096 and seconds >= 2 * stream_s:
                flops = 6 * tokens * top_k * hidden * width
                points.append((engine, dtype, width, flops / seconds / device.peak("bf16")))
    if not points:
        return None

    def fit(dtype_points: list[tuple[float, float]], half: int) -> tuple[float, float]:
        share = statistics.median(e * (w + half) / w for w, e in dtype_points)
        return statistics.median(abs(share * w / (w + half) / e - 1) for w, e in dtype_points), share

    curves = {}
    for dtype in sorted({p[1] for p in points}):
        mine = [(w, e) for _, d, w, e in points if d == dtype]
        half = min(range(0, 1001, 5), key=lambda h: fit(mine, h)[0])
        curves[dtype] = (fit(mine, half)[1], half)
    errors = [(engine, abs(curves[d][0] * w / (w + curves[d][1]) / e - 1)) for engine, d, w, e in points]
    top = max(share for share, _ in curves.values())
    by_engine = {g: statistics.median(e for engine, e in errors if engine == g) for g in {g for g, _ in errors}}
    return (top, {d: (share / top, half) for d, (share, half) in curves.items()},
            statistics.median(e for _, e in errors), by_engine, len(points))


def triton_moe_stream(device) -> tuple[float, float, list[float], set[str], set[str]] | None:
    """The engines' Triton fused MoE at 1-16 tokens in the device's tables (sglang's and vLLM's,
    balanced routing, EP 1, bf16 and FP8-block experts), as a line time = fixed + bytes /
    (efficiency x HBM peak) over the bytes the cost model counts (:func:`triton_points`), fitted
    to the points' relative error: (efficiency, fixed s, each point's relative error, the dtypes
    and the engines measured). Left out: points faster than the HBM peak allows for those bytes
    (the collector touched fewer experts there) and FP8-block experts whose width on a rank is
    not a multiple of the 128-wide scale blocks (up to 30 times the line: another code path)."""
    points, dtypes, engines = [], set(), set()
    for engine in ("sglang", "vllm"):
        for dtype, _, _, _, width, tokens, stream, seconds in triton_points(device, engine):
            if (tokens <= 16 and not (dtype == "fp8_block" and width % 128)
                    and stream / seconds <= device.hbm_bandwidth_bytes_per_s):
                points.append((stream, seconds))
                dtypes.add(dtype)
                engines.add(engine)
    if not points:
        return None
    slope, intercept = fit_relative(points)
    return (1 / slope / device.hbm_bandwidth_bytes_per_s, intercept,
            [(intercept + slope * b) / t - 1 for b, t in points], dtypes, engines)


def attention_fixed(device, system: str, version: str) -> tuple[list[float], list[float]]:
    """Measured minus roofline (us) of each small decode attention in the device's tables: GQA/MHA
    with head dim 128, and MLA over DeepSeek-V3's latent cache; bf16 caches."""
    bare = replace(device, efficiency=replace(device.efficiency, kernel_fixed_s=0.0, attention_fixed_s=0.0,
                                              mla_attention_fixed_s=0.0))

    def roofline_us(cost: OpCost) -> float:
        return analytic.kernel_time(cost, bare).seconds * 1e6

    def small(batch: float, context: float) -> bool:
        return batch <= 8 and 64 <= context <= 2048

    attention, mla = [], []
    decode = aic.load("generation_attention", system, ENGINE, version)
    for key in decode.keys():
        kv_dtype, head_dim, kv_heads = key
        if kv_dtype != "bf16" or head_dim != 128:
            continue
        for (heads, batch, context), us in decode.grid(key).points():
            if small(batch, context):
                cache = batch * context * (kv_heads or heads) * head_dim * 2
                cost = OpCost(flops=2.0 * heads * batch * context * 2 * head_dim, bytes=4 * batch * heads * head_dim
                              + 2 * cache, kind="attention")
                attention.append(us - roofline_us(cost))
    latent = aic.load("generation_mla", system, ENGINE, version)
    if ("bf16",) in latent.keys():
        for (heads, batch, context), us in latent.grid(("bf16",)).points():
            if small(batch, context):
                cost = OpCost(flops=2.0 * heads * batch * context * (576 + 512),
                              bytes=2 * batch * heads * (576 + 512) + 2 * batch * context * 576, kind="mla_attention")
                mla.append(us - roofline_us(cost))
    return attention, mla


def fp8_pool_cast(system: str, version: str) -> tuple[float, int] | None:
    """(seconds per pool token, points) of the FP8 minus bf16 MLA decode in the device's tables,
    the slope over 64K-token pools and up: sglang's Hopper MLA decode casts the whole FP8 pool to
    bf16 first, and the collector's pool holds exactly the batch's tokens."""
    latent = aic.load("generation_mla", system, ENGINE, version)
    if {("bf16",), ("fp8",)} - set(latent.keys()):
        return None
    bf16 = dict(latent.grid(("bf16",)).points())
    points = [(batch * context, us - bf16[heads, batch, context]) for (heads, batch, context), us
              in latent.grid(("fp8",)).points() if (heads, batch, context) in bf16 and batch * context >= 65536]
    return fit_line(points)[0] * 1e-6, len(points)


def main() -> int:
    for device in BUILTIN_DEVICES:
        system = device.kernel_tables
        if not system:
            continue
        version = aic.default_version(system, ENGINE)
        print(f"== {device.name} ({system}, {ENGINE} {version})")
        gemm = aic.load("gemm", system, ENGINE, version)
        for dtype in ("bf16", "fp8", "fp8_block"):
            grid = gemm.grid((dtype,))
            if grid is None:
                continue
            peak = device.peak({"bf16": "bf16"}.get(dtype, "fp8"))
            effs = [2 * m * n * k / (us * 1e-6) / peak for (m, n, k), us in grid.points() if min(m, n, k) >= 4096]
            print(f"  gemm {dtype}: median {statistics.median(effs):.3f} of peak over {len(effs)} shapes")
        grid = gemm.grid(("bf16",))
        streams = [(n * k * 2, us * 1e-6) for (m, n, k), us in grid.points() if m == 1 and n * k * 2 >= 2**23]
        slope, intercept = fit_line(streams)
        print(f"  memory: {1 / slope / device.hbm_bandwidth_bytes_per_s:.3f} of HBM peak (line through "
              f"{len(streams)} m=1 GEMMs; intercept {intercept * 1e6:.2f} us)")
        tiny = [us for (m, n, k), us in grid.points() if m == 1 and n * k * 2 <= 2**18]
        print(f"  kernel fixed: {statistics.median(tiny):.2f} us (median of {len(tiny)} m=1 GEMMs of <= 256 KiB)")
        print(f"  kernel floor: {min(us for _, us in grid.points()):.2f} us (shortest bf16 GEMM)")
        attention = aic.load("context_attention", system, ENGINE, version)
        for dtype in ("bf16", "fp8"):
            effs = []
            for key in attention.keys():
                if key[:3] != (dtype, dtype, 128):
                    continue
                for (heads, isl, batch), us in attention.grid(key).points():
                    if isl >= 4096 and batch * isl >= 16384:
                        flops = 2 * heads * batch * isl * (isl + 1) / 2 * 256
                        effs.append(flops / (us * 1e-6) / device.peak("bf16"))
            if effs:
                name = "attention" if dtype == "bf16" else "attention_fp8 (FP8 queries and cache)"
                print(f"  {name}: median {statistics.median(effs):.3f} of bf16 peak over {len(effs)} points")
        attention, mla = attention_fixed(device, system, version)
        if attention:
            print(f"  attention fixed: {statistics.median(attention):.2f} us (median excess over the roofline of "
                  f"{len(attention)} decodes of 1-8 requests over 64-2,048 tokens)")
        if mla:
            print(f"  MLA attention fixed: {statistics.median(mla):.2f} us (the same over {len(mla)} MLA decodes)")
        cast = fp8_pool_cast(system, version)
        if cast is not None and cast[0] > 0.2e-9:  # Blackwell's FP8 MLA is faster than bf16: no cast
            print(f"  FP8 pool cast: {cast[0] * 1e9:.4f} ns a pool token ({cast[0] / 576 * 1e12:.3f} ps an element; "
                  f"slope of FP8 - bf16 MLA decode over {cast[1]} points of 64K-token pools and up)")
        ar = aic.load("all_reduce", system, ENGINE, version)
        grid = ar.grid(("graph", 8))
        if grid is not None:
            points = grid.points()
            (size,), us = points[-1]
            bus = 2 * 7 / 8 * size / (us * 1e-6)
            print(f"  link: all-reduce of {size / 2**20:.0f} MiB on 8 GPUs, bus {bus / 1e9:.0f} GB/s = "
                  f"{bus / device.scale_up_bandwidth_bytes_per_s:.3f} of NVLink; floor {points[0][1]:.2f} us "
                  f"at {points[0][0][0]:.0f} bytes")
        for engine in ("sglang", "vllm"):
            ratios = triton_moe(device, engine)
            if ratios is not None:
                print(f"  Triton fused MoE ({engine}), measured / analytic at the triton figures: " + ", ".join(
                    f"{dtype} {band} tokens {r:.2f}" for (dtype, band), r in sorted(ratios.items())))
        fits = {engines: triton_moe_compute(device, engines) for engines in (("sglang", "vllm"), ("sglang",),
                                                                             ("vllm",))}
        for engines, compute in fits.items():
            if compute is None or (len(engines) == 1 and compute[-1] == fits[("sglang", "vllm")][-1]):
                continue  # one engine's tables alone: the pooled fit is that engine's
            top, curves, error, by_engine, n = compute
            print(f"  Triton fused MoE compute-bound ({' and '.join(engines)}): share of bf16 peak s x w / (w + h), "
                  + ", ".join(f"{d} s {f * top:.3f} ({f:.3f} of {top:.3f}) h {h}"
                              for d, (f, h) in sorted(curves.items()))
                  + f"; {n} points, median relative error {error:.1%} ("
                  + ", ".join(f"{g} {e:.1%}" for g, e in sorted(by_engine.items())) + ")")
        stream = triton_moe_stream(device)
        if stream is not None:
            memory, fixed, errors, dtypes, engines = stream
            print(f"  Triton fused MoE at 1-16 tokens: {memory:.3f} of HBM peak + {fixed * 1e6:.1f} us over "
                  f"{len(errors)} points of {' and '.join(sorted(dtypes))} experts, {' and '.join(sorted(engines))} "
                  f"(median |error| {statistics.median(map(abs, errors)):.1%})")
    h200 = next(d for d in BUILTIN_DEVICES if d.name == "H200")
    memory, fixed, errors = marlin_stream(h200)
    print(f"== Marlin W4A16 on sm_90 (H200, TileOPs PR 1874): {memory:.3f} of HBM peak + {fixed * 1e6:.2f} us; "
          f"points within {max(map(abs, errors)):.1%}")
    per_sm, hbm_share, fixed, fits = marlin_moe_stream([d for d in BUILTIN_DEVICES if d.name in ("H100", "H200")])
    print(f"== Marlin MoE streaming: min({per_sm / 1e9:.2f} GB/s per SM, {hbm_share:.3f} of HBM peak) + "
          f"{fixed * 1e6:.1f} us; " + "; ".join(f"{name} {rate / 1e12:.2f} TB/s + {t * 1e6:.1f} us (median error "
                                               f"{e:.1%})" for name, (rate, t, e) in fits.items()))
    share, half, error, h20_share, h20 = marlin_moe_compute([d for d in BUILTIN_DEVICES if d.name in ("H100", "H200")])
    print(f"== Marlin MoE compute-bound: {share:.3f} x w / (w + {half}) of bf16 peak on H100 and H200 (tables; median "
          f"relative error {error:.1%}); H20 (FlagGems PR 3609) {h20_share:.3f} x w / (w + {half}) from {len(h20)} "
          f"timings at {min(h20):.2f}-{max(h20):.2f} of peak")
    hoppers = [d for d in BUILTIN_DEVICES if d.name in ("H100", "H200")]
    points = marlin_moe_points(hoppers, "vllm", "mxfp4_w4a16") + marlin_moe_points(hoppers, "sglang", "mxfp4_w4a16")
    error, mxfp4_share = share_at(points, half)
    print(f"   MXFP4 experts (vLLM's and sglang's Marlin MXFP4 MoE rows, one expert shape): {mxfp4_share:.3f} x w / "
          f"(w + {half}) over {len(points)} points on H100 and H200 (median relative error {error:.1%}): "
          f"grouped_compute_scale {{'mxfp4': {mxfp4_share / share:.2f}}}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
