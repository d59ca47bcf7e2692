"""`infercast plan`'s serving model against published runs under load: N clients at once
(`--concurrency N`), each sending its next request when its last one ends.

- NIM 1.8.0, Llama-3.3-70B-Instruct FP8 on 2 x H100 (TP2), AIPerf at concurrency 1-250 with
  fixed input/output lengths (the engine is not named; taken as TensorRT-LLM). Rows whose mean
  TTFT runs into seconds are left out: there the queue grew for the whole finite run, which no
  steady state describes.
- sgl-cookbook, `sglang.bench_serving` random 1K in / 1K out (lengths uniform in 1-1000) at
  `--max-concurrency` 16 and 100, sglang 0.5.6.x (prefill launched eagerly, prompt steps apart
  from the decodes: the launch commands give no --enable-mixed-chunk): Llama-3.1-70B on
  8 x A100, DeepSeek-R1-0528 on 8 x B200, Qwen3-235B-A22B-Instruct-2507 on 8 x B200, all TP8.
  M1's own loaded runs are in reference_points.py.

Each row is the planner's TP-only configuration at the published concurrency (the clients, not
a measured mean: the cookbook does not print one), with the planner's continuous batching
(prompt chunks mixed into decode steps, except where the engine ran them apart).
`--simulate-clients` adds the TTFT of the same step costs with the clients simulated one by one
(all start at once, each sends its next request as its last ends: `simulate_engine(...,
clients=N)`): for NIM's fixed lengths past a warm-up, which shows what clients that stay in step
would see; for the cookbook its whole runs of 5 x N prompts, the first wave included. Nothing
here feeds the simulator. Run:
.venv/bin/python benchmarks/serving_points.py [--simulate-clients]
"""

from __future__ import annotations

import argparse
import statistics
import sys

from rich.console import Console
from rich.table import Table

from infercast.agg import StepPricer, chunk_shape, chunk_of, rank_policy
from infercast.plan import Layout, Planner, PlanRequest
from infercast.serving import LengthDist, ServingOptions, simulate_engine

from published_points import fusion_in, moe_kernel_in

LLAMA70 = "meta-llama/Llama-3.1-70B-Instruct"
SATURATED_MS = 2000.0
"""A mean TTFT above this: the queue grew over the run (NIM's rows at the highest concurrency)."""

# (input, output, concurrency, TTFT ms, ITL ms, output tok/s) as NIM 1.8.0's benchmarking page lists
# them for Llama-3.3-70B-Instruct fp8 TP2 on 2 x H100 80G (public copy: zivbeker42/llm-guesstimator,
# tested_benchmarks/nim_llama33_70b_v1.8.0_2xH100_fp8TP2.csv); its throughput column is output tokens/s
NIM_LOADED = [
    (5000, 500, 5, 546.7, 21.83, 218.48), (5000, 500, 25, 688.69, 38.75, 623.4), (5000, 500, 50, 834.51, 59.73, 814.37),
    (5000, 500, 100, 7996.25, 92.91, 917.26),
    (500, 2000, 5, 126.53, 19.04, 261.83), (500, 2000, 25, 147.63, 21.69, 1149.05),
    (500, 2000, 50, 181.64, 23.97, 2078.43), (500, 2000, 100, 229.77, 29.98, 3322.87),
    (500, 2000, 150, 296.74, 37.85, 3948.26), (500, 2000, 200, 4867.89, 40.72, 4624.14),
    (200, 200, 5, 88.7, 18.83, 260.67), (200, 200, 25, 138.98, 20.61, 1178.68), (200, 200, 50, 156.28, 23.33, 2081.24),
    (200, 200, 100, 176.8, 29.87, 3263.31), (200, 200, 150, 195.51, 37.75, 3883.1),
    (200, 200, 200, 253.36, 42.95, 4534.54), (200, 200, 250, 264.22, 48.16, 5067.05),
    (1000, 1000, 5, 145.62, 19.07, 260.48), (1000, 1000, 25, 250.49, 22.45, 1102.23),
    (1000, 1000, 50, 278.62, 25.87, 1912.93), (1000, 1000, 100, 334.23, 34.21, 2895.49),
    (1000, 1000, 150, 428.54, 44.44, 3342.67), (1000, 1000, 200, 558.23, 50.66, 3901.74),
    (1000, 1000, 250, 3499.83, 56.3, 4167.39),
]

# (model, device, sglang version, concurrency, mean TTFT ms, mean TPOT ms, output tok/s): the
# sgl-cookbook pages' 1K/1K runs at --max-concurrency 16 (80 prompts) and 100 (500 prompts)
COOKBOOK_LOADED = [
    (LLAMA70, "A100", "0.5.6", 16, 264.84, 26.09, 513.48), (LLAMA70, "A100", "0.5.6", 100, 245.98, 47.19, 1919.38),
    ("deepseek-ai/DeepSeek-R1", "B200", "0.5.6.post1", 16, 273.51, 17.56, 795.30),
    ("deepseek-ai/DeepSeek-R1", "B200", "0.5.6.post1", 100, 563.14, 40.11, 2282.90),
    ("Qwen/Qwen3-235B-A22B", "B200", "0.5.6", 16, 215.70, 16.36, 832.04),
    ("Qwen/Qwen3-235B-A22B", "B200", "0.5.6", 100, 260.55, 32.94, 2738.78),
]
COOKBOOK_PROMPTS_PER_CLIENT = 5
"""The cookbook's loaded runs send 5 x N prompts from N clients (80 at 16, 500 at 100)."""
UNIFORM_1K = LengthDist(tuple((i, o, 1.0) for i in range(25, 1000, 50) for o in range(25, 1000, 50)),
                        "uniform 1-1000 in and out, as 50-token buckets")


def tp_only(request: PlanRequest, tp: int):
    """The plan's TP-only configuration (no DP, no EP) over ``tp`` devices."""
    return tp_config(Planner(request), tp)


def tp_config(planner: Planner, tp: int):
    """``planner``'s TP-only configuration (no DP, no EP) over ``tp`` devices."""
    return next(c for c in planner.run().configs if (c.layout.tp, c.layout.dp, c.layout.ep) == (tp, 1, 1))


def simulated_clients(request: PlanRequest, clients: int, tp: int, *, requests: int | None = None,
                      warmup: int | None = None, seeds: int = 1) -> float:
    """Mean TTFT (ms, with the request's host time) of ``clients`` simulated one by one on the
    planner's step costs for the TP-only layout and its running-request limit, with prompt steps
    mixed or apart as the request says: by default a long run past its warm-up (steady clients);
    ``requests`` and ``warmup`` set a benchmark's own run (``warmup=0``: every request from the
    first wave of clients on counts), averaged over ``seeds`` draws of its lengths."""
    planner = Planner(request)
    lengths, chunk, batch = request.serving.lengths, chunk_of(planner), max(request.batches)
    cost = StepPricer(planner).grid(Layout(tp, tp, 1, 1), request.quantizations[0], batch, None,
                                    chunk_shape(lengths, chunk), chunk)
    policy = rank_policy(chunk, batch, 1, "mixed" if request.serving.mixed_chunk else "separate",
                         lookahead=planner.costs.overlapped())
    runs = [simulate_engine(cost, policy, lengths, clients=clients, requests=requests or max(400, 20 * clients),
                            warmup=max(100, 4 * clients) if warmup is None else warmup, seed=seed)
            for seed in range(1, seeds + 1)]
    ttft = statistics.mean(statistics.mean(run.ttft_s) for run in runs)
    return (ttft + planner.costs.request_cost(planner.profile.tokenizer).at(round(lengths.mean_input))) * 1e3


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--simulate-clients", action="store_true",
                        help="also simulate the clients one by one: NIM's past a warm-up (fixed lengths: they can "
                             "stay in step), the cookbook's whole runs from their first wave")
    args = parser.parse_args()
    console = Console(width=max(Console().width, 180))
    table = Table(title="infercast plan --concurrency N vs published loaded runs")
    for column in ("source", "setting", "clients", "TTFT mean ms", "error", "TPOT ms", "error", "output tok/s",
                   "error") + (("TTFT, clients simulated",) if args.simulate_clients else ()):
        table.add_column(column, overflow="fold")
    errors: dict[str, list[float]] = {"TTFT": [], "TPOT": [], "throughput": []}

    def add(source: str, setting: str, clients: int, config, ttft: float, tpot: float, out: float,
            extra: tuple[str, ...] = ()) -> None:
        simulated = (config.serving["ttft_mean_ms"], config.tpot_ms,
                     config.tokens_per_s_per_device * config.layout.num_devices)
        cells = []
        for key, measured, value in zip(errors, (ttft, tpot, out), simulated):
            error = (value - measured) / measured
            errors[key].append(abs(error))
            cells += [f"{value:.1f} vs {measured:g}", f"{error:+.0%}"]
        table.add_row(source, setting, str(clients), *cells, *extra)

    for isl, osl, clients, ttft, itl, out in NIM_LOADED:
        if ttft > SATURATED_MS:
            continue
        request = PlanRequest(model=LLAMA70, device="H100", num_devices=(2,), input_length=isl, output_length=osl,
                              quantizations=("FP8",), batches=(256,), speculative=(), engine="trtllm",
                              serving=ServingOptions(concurrency=clients, lengths=LengthDist.fixed(isl, osl)))
        extra = ()
        if args.simulate_clients:
            value = simulated_clients(request, clients, 2)
            extra = (f"{value:.1f} ({(value - ttft) / ttft:+.0%})",)
        add("NIM 1.8.0", f"Llama-3.3-70B FP8, 2 x H100 TP2, {isl}/{osl}", clients, tp_only(request, 2), ttft, itl, out,
            extra)
    for model, device, version, clients, ttft, tpot, out in COOKBOOK_LOADED:
        request = PlanRequest(model=model, device=device, num_devices=(8,), batches=(128,), speculative=(),
                              all_reduce_fusion=fusion_in(version, model, device, 8), prefill_cuda_graph="off",
                              moe_kernel=moe_kernel_in(version, model, device),
                              serving=ServingOptions(concurrency=clients, lengths=UNIFORM_1K, mixed_chunk=False))
        extra = ()
        if args.simulate_clients:  # bench_serving: N clients start at once and send 5 x N prompts, all timed
            value = simulated_clients(request, clients, 8, requests=COOKBOOK_PROMPTS_PER_CLIENT * clients, warmup=0,
                                      seeds=8)
            extra = (f"{value:.1f} ({(value - ttft) / ttft:+.0%})",)
        add("sgl-cookbook", f"{model.split('/')[-1]}, 8 x {device} TP8, sglang {version}", clients,
            tp_only(request, 8), ttft, tpot, out, extra)
    console.print(table)
    for key, values in errors.items():
        console.print(f"median |error| of {key}: {statistics.median(values):.0%} over {len(values)} runs")
    console.print(f"left out: NIM rows with a mean TTFT above {SATURATED_MS / 1e3:g} s (the queue grew over the run)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
