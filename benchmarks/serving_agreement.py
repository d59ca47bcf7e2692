"""The steady-state serving model against a discrete-event simulation of the same engine policy
and the same step costs (Llama-3.1-8B-Instruct, one H100, sglang tables), at 30%, 60% and 85%
of the prompt queue's capacity: mean TTFT, p90 TTFT and mean TPOT, model error vs simulation.
Then the closed loop (`--concurrency N`): the model against N simulated clients that start
together and send their next request as the last one ends, over a benchmark-length run (3,000
requests after 500) and over a long one (60,000 after 30,000).

The cases the tests hold to their tolerance (tests/simulator/test_serving.py) and the ones
they do not, which docs/simulate.md reports. Run: .venv/bin/python benchmarks/serving_agreement.py
"""

from __future__ import annotations

import statistics
import sys

from infercast.agg import StepPricer, chunk_shape, closed_loop
from infercast.plan import Layout, Planner, PlanRequest
from infercast.serving import EnginePolicy, LengthDist, rate_at_utilisation, simulate_engine, steady_state

CASES = [
    ("mixed", 2048, 512, LengthDist.fixed(1024, 256)),
    ("separate", 2048, 4096, LengthDist.fixed(1024, 256)),
    ("prefill only", 8192, 10**9, LengthDist.fixed(2000, 1)),
    ("prefill only", 2048, 10**9, LengthDist(((512, 1, 3.0), (3000, 1, 1.0)), "512 x3 / 3000 x1 prompts")),
    ("mixed", 2048, 512, LengthDist(((512, 128, 3.0), (2048, 256, 1.0)), "512/128 x3, 2048/256 x1")),
    ("mixed", 8192, 512, LengthDist(((512, 128, 3.0), (2048, 256, 1.0)), "512/128 x3, 2048/256 x1")),
]

# the closed loop: lengths that vary, and one fixed length (whose clients fall into step)
CLOSED_CASES = [
    ("mixed", 2048, 512, LengthDist(((512, 128, 3.0), (2048, 256, 1.0)), "512/128 x3, 2048/256 x1")),
    ("mixed", 2048, 512, LengthDist.fixed(1024, 256)),
    ("separate", 2048, 512, LengthDist.fixed(1024, 256)),
]


def main() -> int:
    planner = Planner(PlanRequest(model="meta-llama/Llama-3.1-8B-Instruct", device="H100"))
    pricer = StepPricer(planner)
    layout = Layout(1, 1, 1, 1)
    print("| policy | chunk | lengths | load | req/s | TTFT mean: model / sim | TTFT p90: model / sim "
          "| TPOT: model / sim |")
    print("|---|---|---|---|---|---|---|---|")
    for policy, chunk, running, lengths in CASES:
        cost = pricer.grid(layout, None, min(running, 512), None, chunk_shape(lengths, chunk), chunk)
        engine = EnginePolicy(chunk, running, "separate" if policy == "prefill only" else policy)
        for load in (0.3, 0.6, 0.85):
            rate = rate_at_utilisation(cost, engine, lengths, load)
            model = steady_state(cost, engine, lengths, rate)
            sim = simulate_engine(cost, engine, lengths, rate, requests=6000, warmup=1000, seed=3)

            tpot = cell(model.tpot_s, statistics.mean(sim.tpot_s)) if sim.tpot_s else "-"
            print(f"| {policy} | {chunk} | {lengths.describe()} | {load:.0%} | {rate:.2f} | "
                  f"{cell(model.ttft_mean_s, statistics.mean(sim.ttft_s))} | "
                  f"{cell(model.ttft_p_s, sim.quantile(sim.ttft_s, 0.9))} | {tpot} |")
    print()
    print("| policy | chunk | lengths | clients | req/s: model / sim | TTFT mean: model / sim | TPOT: model / sim "
          "| TTFT mean: model / long run |")
    print("|---|---|---|---|---|---|---|---|")
    for policy, chunk, running, lengths in CLOSED_CASES:
        cost = pricer.grid(layout, None, running, None, chunk_shape(lengths, chunk), chunk)
        engine = EnginePolicy(chunk, running, policy)
        for clients in (1, 4, 16, 64):
            model = closed_loop(cost, engine, lengths, clients, 0.9)
            # a benchmark-length run from a common start, and a long one's steady state
            sim = simulate_engine(cost, engine, lengths, clients=clients, requests=3000, warmup=500, seed=3)
            long = simulate_engine(cost, engine, lengths, clients=clients, requests=60000, warmup=30000, seed=3)
            print(f"| {policy} | {chunk} | {lengths.describe()} | {clients} | {model.rate:.2f} / {sim.rate:.2f} | "
                  f"{cell(model.ttft_mean_s, statistics.mean(sim.ttft_s))} | "
                  f"{cell(model.tpot_s, statistics.mean(sim.tpot_s))} | "
                  f"{cell(model.ttft_mean_s, statistics.mean(long.ttft_s))} |")
    return 0


def cell(a: float, b: float) -> str:
    return f"{a * 1e3:.1f} / {b * 1e3:.1f} ms ({(a - b) / b:+.0%})"


if __name__ == "__main__":
    sys.exit(main())
