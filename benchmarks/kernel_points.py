"""infercast's price of single kernels against published kernel timings, where no measured table
covers the kernel (aiconfigurator-core has no dense weight-only GEMM and no H20 data).

Each row is one kernel as infercast traces it, priced by the engine that runs it through the
same cost model `simulate` uses, against a timing published in a pull request:

- vLLM's Marlin W4A16 GEMM at one row on an H200 (tile-ai/TileOPs PR 1874, CUPTI): the four
  points the Marlin figure on sm_90 is fitted to, so in-sample;
- the same kernel on an H100 at 1-4 rows (inclusionAI/humming PR 2, dense 8192 x 8192,
  channelwise scales: its TFLOP/s column turned into time); out of sample, from a harness that
  also times a bf16 GEMV at 0.69 of the H100's bandwidth, where cuBLAS reaches 0.86 in
  aiconfigurator's tables;
- vLLM's fused Marlin MoE (W4A16) on an H20, the 96 GB card (flagos-ai/FlagGems PR 3609, the
  'vLLM' column; shapes M x E x K x N x top-k with K the hidden size and N the expert's
  intermediate size; group size taken as 128), priced analytically: the H20 has no tables. The
  four with 16 or more rows an expert set the H20's Marlin MoE compute share (in-sample); its
  streaming comes from the H100 and H200 tables, so for it all thirteen are out of sample;
- the same analytic Marlin MoE against sglang's measured Marlin MoE tables on H100 and H200 at
  1-2,048 tokens (every shape and MoE TP at EP 1), below the >= 4,096 tokens its compute share
  was fitted at;
- DeepGEMM's FP8 grouped GEMM (masked layout, 1 x 128 activation and 128 x 128 weight scales,
  the decode MoE's expert GEMM) on an H20, DeepSeek-V3's expert shapes (deepseek-ai/DeepGEMM
  PR 192, the kernel before swapAB, 16 groups; issue 114, 32 groups; PR 116, 2-9 groups of
  16-32 rows), priced analytically: out of sample for the H20's GEMM efficiency, which is not
  fitted to any GEMM.

Nothing here feeds the simulator. Run: .venv/bin/python benchmarks/kernel_points.py
"""

from __future__ import annotations

import statistics
import sys

import torch
from rich.console import Console
from rich.table import Table

from infercast import analytic, routing
from infercast.cost import OpCost
from infercast.costmodel import CostModel, Phase
from infercast.devices import BUILTIN_DEVICES
from infercast.kernels.grid import Answer
from infercast.trace import OpRecord, TensorSpec

DEVICES = {d.name: d for d in BUILTIN_DEVICES}
DECODE = Phase(graph=True, decode=True, scale_up_domain=8)
PREFILL = Phase(graph=False, decode=False, scale_up_domain=8)
BF16 = torch.bfloat16
GROUP = 128

TILEOPS = "tile-ai/TileOPs PR 1874 (H200, CUPTI; in-sample: the Marlin figure is fitted to these)"
HUMMING = "inclusionAI/humming PR 2 (H100, dense 8192 x 8192, channelwise)"
FLAGGEMS = "flagos-ai/FlagGems PR 3609 (H20 96 GB, vLLM's fused Marlin MoE)"
DEEPGEMM = "deepseek-ai/DeepGEMM PR 192, PR 116 and issue 114 (H20, FP8 grouped GEMM, masked layout)"

# (rows, n, k, us)
MARLIN_H200 = [(1, 8192, 8192, 20.3), (1, 8192, 16384, 38.1), (1, 7168, 20480, 40.6), (1, 8192, 81920, 138.4)]
# (rows, TFLOP/s of marlin-w4a16) for n = k = 8192
MARLIN_H100 = [(1, 4.98), (2, 10.02), (4, 19.85)]
# (M, E, K, N, top-k, ms)
MARLIN_MOE_H20 = [
    (1, 8, 4096, 14336, 2, 0.144), (16, 8, 4096, 14336, 2, 0.457), (64, 8, 4096, 14336, 2, 1.206),
    (1, 256, 7168, 2048, 8, 0.143), (16, 256, 7168, 2048, 8, 1.395), (64, 256, 7168, 2048, 8, 2.973),
    (1, 512, 4096, 1024, 10, 0.084), (16, 512, 4096, 1024, 10, 0.599), (64, 512, 4096, 1024, 10, 1.498),
    (256, 512, 4096, 1024, 10, 2.227), (1024, 512, 4096, 1024, 10, 5.646), (2048, 512, 4096, 1024, 10, 8.665),
    (4096, 512, 4096, 1024, 10, 20.824),
]

# (groups, rows a group, n, k, us): PR 192's 'before' column (16 groups of aligned rows; its swapAB
# column is a kernel sglang did not ship by default), issue 114's run (32 groups of 64 rows) and
# PR 116's rerun of DeepGEMM's masked test on an H20 (expected rows a group, each group's drawn
# within +-30% of it; random inputs)
DEEPGEMM_H20 = [(16, 32, 4096, 7168, 257), (16, 32, 7168, 2048, 127), (16, 96, 4096, 7168, 497),
                (16, 96, 7168, 2048, 240), (16, 160, 4096, 7168, 921), (16, 160, 7168, 2048, 472),
                (32, 64, 4096, 7168, 485), (2, 16, 4096, 7168, 35), (4, 16, 4096, 7168, 66),
                (2, 32, 4096, 7168, 36), (9, 32, 4096, 7168, 142)]


def fp8_grouped_gemm(groups: int, m: int, n: int, k: int) -> OpCost:
    """One grouped FP8 GEMM over ``groups`` experts of ``m`` rows each: FP8 activations and
    weights with fp32 scales (1 x 128 per activation row, 128 x 128 per weight block), bf16 out."""
    weights = groups * (n * k + (n // 128) * (k // 128) * 4)
    activations = groups * m * (k + k // 128 * 4) + groups * m * n * 2
    return OpCost(flops=2.0 * groups * m * n * k, compute_dtype="fp8", bytes=weights + activations, kind="gemm",
                  kernel_dtype="fp8_block", gemm_mnk=(m, n, k), gemm_count=groups, grouped=True)


def int4_gemm(m: int, n: int, k: int, group: int = GROUP) -> OpRecord:
    """A dense W4A16 GEMM: int4 weights packed eight to an int32, bf16 scales per ``group`` inputs."""
    x, out = TensorSpec((m, k), BF16), TensorSpec((m, n), BF16)
    w, scale = TensorSpec((n, k // 8), torch.int32, "weight"), TensorSpec((n, k // group), BF16, "weight")
    return OpRecord("infercast::quant_gemm", (x, w, scale, n, "w4a16"), (out,), "kernel", 0,
                    named={"x": x, "weight_packed": w, "scale": scale, "out_features": n, "dtype": "w4a16"})


def int4_moe(tokens: int, experts: int, hidden: int, inter: int, top_k: int, active: float | None = None) -> OpRecord:
    """A fused W4A16 MoE over every expert on one GPU (no TP, no EP), balanced routing: the
    experts top-k at random touches, or ``active`` of them."""
    x, out = TensorSpec((tokens, hidden), BF16), TensorSpec((tokens, hidden), BF16)
    w13 = TensorSpec((experts, 2 * inter, hidden // 8), torch.int32, "weight")
    s13 = TensorSpec((experts, 2 * inter, hidden // GROUP), BF16, "weight")
    w2 = TensorSpec((experts, hidden, inter // 8), torch.int32, "weight")
    s2 = TensorSpec((experts, hidden, inter // GROUP), BF16, "weight")
    if active is None:
        active = routing.expected_active_experts(experts, top_k, tokens, experts)
    named = dict(x=x, w13=w13, w13_scale=s13, w2=w2, w2_scale=s2, tokens=tokens, top_k=top_k, num_experts=experts,
                 local_experts=experts, routed_rows=float(tokens * top_k), active_experts=float(active),
                 straggler=1.0, moe_tp=1, dtype="w4a16", distribution="balanced", dispatch="tp")
    return OpRecord("infercast::fused_moe", tuple(named.values()), (out,), "kernel", 0, named=named)


def rows() -> list[tuple[str, str, str, float, float, str]]:
    """(source, kernel, origin, measured us, simulated us, shape) for every published timing."""
    out = []
    for device, engine, source, points in (
            ("H200", "vllm", TILEOPS, [(int4_gemm(m, n, k), us, f"{m} x {n} x {k}") for m, n, k, us in MARLIN_H200]),
            ("H100", "vllm", HUMMING, [(int4_gemm(m, 8192, 8192, group=8192), 2 * m * 8192 * 8192 / (tf * 1e12) * 1e6,
                                        f"{m} x 8192 x 8192") for m, tf in MARLIN_H100]),
            ("H20", "vllm", FLAGGEMS, [(int4_moe(m, e, k, n, top_k), ms * 1e3, f"{m} x {e} x {k} x {n} x {top_k}")
                                       for m, e, k, n, top_k, ms in MARLIN_MOE_H20])):
        model = CostModel(DEVICES[device], engine)
        for record, measured_us, shape in points:
            priced = model.price(record, DECODE)
            kernel = "Marlin MoE" if record.name == "infercast::fused_moe" else "Marlin GEMM"
            out.append((source, f"{kernel}, {device}", priced.origin, measured_us, priced.seconds * 1e6, shape))
    h20 = DEVICES["H20"]
    for groups, m, n, k, us in DEEPGEMM_H20:
        timed = analytic.kernel_time(fp8_grouped_gemm(groups, m, n, k), h20)
        out.append((DEEPGEMM, "FP8 grouped GEMM, H20", "analytic (no H20 tables)", us, timed.seconds * 1e6,
                    f"{groups} x {m} x {n} x {k}"))
    return out


TABLE_TOKENS = (1, 16, 128, 512, 1024, 2048)
"""Token counts at which the analytic Marlin MoE is checked against the tables: below the
>= 4,096 tokens its compute share was fitted at (benchmarks/derive_device_constants.py)."""


def marlin_moe_against_tables() -> dict[tuple[str, int], list[float]]:
    """Relative error of the analytic Marlin MoE (``--cost-model analytic``) against sglang's
    measured Marlin MoE tables on H100 and H200, every shape and MoE TP at EP 1, by (device,
    tokens); each MoE TP slice is priced as one rank's experts at that width. Both sides route
    tokens at random: the table's answer as the simulator reads it (``random_routing``), since
    its collector spread the tokens over every expert."""
    from infercast.kernels import aiconfigurator as aic

    errors: dict[tuple[str, int], list[float]] = {}
    for device in ("H100", "H200"):
        system = DEVICES[device].kernel_tables
        table = aic.load("moe", system, "sglang", aic.default_version(system, "sglang"))
        model = CostModel(DEVICES[device], "sglang", measured=False)
        for key in table.keys():
            dtype, kernel, distribution, top_k, experts, hidden, inter, moe_tp = key
            if (dtype, kernel, distribution) != ("w4a16", "marlin", "balanced"):
                continue
            for (ep, tokens), us in table.grid(key).points():
                if ep == 1 and tokens in TABLE_TOKENS:
                    priced = model.price(int4_moe(tokens, experts, hidden, inter // moe_tp, top_k), PREFILL)
                    found = aic.random_routing(Answer(us, "measured"), table, key, (ep, tokens), lambda c: 1.0)
                    errors.setdefault((device, tokens), []).append(priced.seconds * 1e6 / found.value - 1)
    return errors


def main() -> int:
    console = Console(width=160)
    table = Table(title="infercast vs published kernel timings (no measured table covers these kernels)")
    for column in ("kernel", "shape", "measured us", "simulated us", "error", "priced as"):
        table.add_column(column)
    errors: dict[str, list[float]] = {}
    for source, kernel, origin, measured, simulated, shape in rows():
        error = simulated / measured - 1
        errors.setdefault(source, []).append(abs(error))
        table.add_row(kernel, shape, f"{measured:.1f}", f"{simulated:.1f}", f"{error:+.1%}", origin)
    console.print(table)
    for source, values in errors.items():
        console.print(f"{source}: median |error| {statistics.median(values):.1%} over {len(values)} kernels")
    checks = Table(title="analytic Marlin MoE vs sglang's measured tables, EP 1, every shape and MoE TP "
                         "(out of sample: the compute share was fitted at >= 4,096 tokens)")
    for column in ("device", "tokens", "points", "median error", "median |error|", "range"):
        checks.add_column(column)
    for (device, tokens), values in sorted(marlin_moe_against_tables().items()):
        checks.add_row(device, str(tokens), str(len(values)), f"{statistics.median(values):+.0%}",
                       f"{statistics.median(map(abs, values)):.0%}", f"{min(values):+.0%} to {max(values):+.0%}")
    console.print(checks)
    return 0


if __name__ == "__main__":
    sys.exit(main())
