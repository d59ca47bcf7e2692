"""Loaded serving runs from aiconfigurator-core's silicon sample, each simulated as it was run.

aiconfigurator-core (a declared dependency) ships ``systems/silicon_sample.csv``: TTFT and TPOT
means of serving runs at 1 to 1,024 clients, which NVIDIA's estimator is checked against. Its
InferenceX rows (SemiAnalysis' InferenceMAX measurements, source ``db-dump/...`` or
``source_file=2026-...``) follow one protocol, as the estimator's own replay of them states
(ai-dynamo/aisimulate, ``scripts/e2e_accuracy``: ``request_count = concurrency x 10``,
``random_range_ratio = 0.8``): N clients start at once and send 10 x N requests in all, with
input and output lengths uniform in 0.8-1.0 of the row's ISL and OSL. This script replays
that: `infercast.serving.simulate_engine(..., clients=N)` over the planner's step costs for
the row's layout, with the engine's default step policy (sglang runs a prompt step apart from
the decodes unless launched with --enable-mixed-chunk; vLLM mixes them) and the scheduler its
version runs by default (vLLM from 0.14.0 one step ahead of the GPU; the all-reduce fused with
the norm after it by sglang's rules for the version, by vLLM's from 0.17.0), and the engine's
per-request host time added to each TTFT. The mean TTFT therefore includes the first wave of
N prompts arriving together.

Rows used: aggregated runs on H100, H200 and B200 of a model infercast ships, in the precision
it ships, through sglang or vLLM, without attention DP. Every run is priced with the newest
kernel tables of its engine (the versions named by the groups are the runs', not the tables').
Left out, with their counts printed:
- TensorRT-LLM rows: the CSV does not record InferenceX's ``spec_method``, and these recipes
  draft tokens (Llama-3.1-70B FP8 on one H200 decodes 4 clients at 14.6 ms a token, the time
  its 70 GB of weights take to read once at the full 4.8 TB/s);
- the ``aic-auto-gap-analysis`` rows: no protocol is stated, and some layouts cannot hold the
  model (Qwen3-235B-A22B in FP8, 235 GB, at TP1 on one 141 GB H200);
- rows whose measured TTFT passed 5 s: the queue grew through the finite run.
A run listed twice (under DeepSeek-V3 and -R1, the same architecture, or in two source files)
counts once; DeepSeek-R1 and -V3 are grouped as DeepSeek-R1/V3. Nothing here feeds the simulator. Run: .venv/bin/python benchmarks/silicon_points.py [--rows]
"""

from __future__ import annotations

import argparse
import collections
import statistics
import sys

import pyarrow.csv as pa_csv
from rich.console import Console
from rich.table import Table

from infercast.agg import StepPricer, chunk_of, chunk_shape, rank_policy
from infercast.engines import engine_named, reaches
from infercast.kernels import aiconfigurator as aic
from infercast.plan import Layout, Planner, PlanRequest
from infercast.serving import LengthDist, ServingOptions, simulate_engine

from published_points import fusion_in

MODELS = {  # (the CSV's model, precision) -> (infercast model, --quantize-linear-action; None: the checkpoint's own)
    ("meta-llama/Llama-3.1-70B", "fp8"): ("meta-llama/Llama-3.1-70B-Instruct", "FP8"),
    ("meta-llama/Llama-3.1-8B-Instruct", ""): ("meta-llama/Llama-3.1-8B-Instruct", None),
    ("nvidia/Llama-3.1-8B-Instruct-FP8", "fp8"): ("meta-llama/Llama-3.1-8B-Instruct", "FP8"),
    ("Qwen/Qwen3-32B", ""): ("Qwen/Qwen3-32B", None),
    ("Qwen/Qwen3-235B-A22B-FP8", "fp8"): ("Qwen/Qwen3-235B-A22B", "FP8_BLOCK"),
    ("deepseek-ai/DeepSeek-R1", "fp8"): ("deepseek-ai/DeepSeek-R1", None),
    ("deepseek-ai/DeepSeek-V3", "fp8"): ("deepseek-ai/DeepSeek-V3", None),
    ("moonshotai/Kimi-K2.5", "int4"): ("moonshotai/Kimi-K2.5", None),
}
DEVICES = {"h100_sxm": "H100", "h200_sxm": "H200", "b200_sxm": "B200"}
"""The systems with a built-in device and kernel tables (GB200 and B300 have neither here)."""
POLICY = {"sglang": "separate", "vllm": "mixed"}
"""Each engine's default: sglang runs prompt steps apart (--enable-mixed-chunk is off by
default), vLLM's scheduler fills each step's token budget with decodes and prompt chunks."""
SATURATED_MS = 5000.0
RANGE = (0.8, 0.85, 0.9, 0.95, 1.0)
"""InferenceX's lengths: uniform in 0.8-1.0 of the nominal, in five steps."""


def silicon_rows() -> list[dict]:
    root = aic.data_root()
    if root is None:
        raise SystemExit(f"{aic.PACKAGE} is not installed")
    return pa_csv.read_csv(root.parent / "silicon_sample.csv").to_pylist()


def inferencex(row: dict) -> bool:
    return row["silicon_data_source"].startswith(("db-dump/", "source_file=2026-"))


def select(rows: list[dict]) -> tuple[list[dict], collections.Counter]:
    """The rows this script replays, and why the others of ours were left out."""
    left: collections.Counter = collections.Counter()
    chosen, seen = [], set()
    for r in rows:
        if not (r["mode"] == "agg" and r["system"] in DEVICES and r["model_path"] in {m for m, _ in MODELS}):
            continue
        if not inferencex(r):
            left["no stated protocol (aic-auto-gap-analysis)"] += 1
        elif r["backend"] not in POLICY:
            left["TensorRT-LLM (speculative decoding not recorded)"] += 1
        elif (r["attention_dp_size"] or 1) != 1:
            left["attention DP"] += 1
        elif (r["model_path"], r["precision"]) not in MODELS:
            left[f"{r['precision']} weights (NVFP4: not a built-in quantization)" if r["precision"] == "fp4"
                 else f"{r['precision'] or 'unnamed'} weights, not mapped here"] += 1
        elif r["silicon_ttft_ms"] > SATURATED_MS:
            left[f"TTFT above {SATURATED_MS / 1e3:g} s (queue growing)"] += 1
        else:
            same = (r["system"], r["backend"], r["backend_version"], r["isl"], r["osl"], r["tp_size"],
                    r["batch_size"], round(r["silicon_ttft_ms"], 6), round(r["silicon_tpot_ms"], 6))
            if same in seen:
                left["the same run listed twice (another model name or source file)"] += 1
                continue
            seen.add(same)
            chosen.append(r)
    return chosen, left


def as_run(row: dict, model: str) -> dict:
    """What the run's engine version did by default where it differs from the newest tables'
    version, which prices every run: scheduling one step ahead of the GPU, fusing the all-reduce
    with the norm after it (an unnamed version is taken as the newest: ``auto``)."""
    engine, version = row["backend"], row["backend_version"]
    if not version:
        return {}
    since = engine_named(engine).overlap_since
    overlap = "auto" if since is None else "on" if reaches(version, since) else "off"
    return {"overlap_scheduling": overlap,
            "all_reduce_fusion": fusion_in(version, model, DEVICES[row["system"]], int(row["tp_size"]), engine)}


def replay(row: dict, pricers: dict) -> tuple[float, float]:
    """(mean TTFT ms, mean TPOT ms) of the row's benchmark run, simulated."""
    isl, osl, tp, clients = row["isl"], row["osl"], int(row["tp_size"]), int(row["batch_size"])
    ep = int(row["moe_ep_size"] or 1)
    model, quant = MODELS[(row["model_path"], row["precision"])]
    lengths = LengthDist(tuple((round(isl * a), round(osl * b), 1.0) for a in RANGE for b in RANGE),
                         "uniform in 0.8-1.0 of ISL and OSL")
    batch = max(256, clients)
    request = PlanRequest(model=model, device=DEVICES[row["system"]], num_devices=(tp,), batches=(batch,),
                          speculative=(), quantizations=(quant,), engine=row["backend"],
                          engine_version=None, input_length=isl, output_length=osl,
                          **as_run(row, model), serving=ServingOptions(concurrency=clients, lengths=lengths))
    key = (model, row["system"], row["backend"], request.overlap_scheduling, request.all_reduce_fusion, quant, isl,
           osl)
    if key not in pricers:
        planner = Planner(request)
        pricers[key] = (planner, StepPricer(planner))
    planner, pricer = pricers[key]
    chunk = chunk_of(planner)
    cost = pricer.grid(Layout(tp, tp, 1, ep), quant, batch, None, chunk_shape(lengths, chunk), chunk)
    run = simulate_engine(cost, rank_policy(chunk, batch, 1, POLICY[row["backend"]]), lengths, clients=clients,
                          requests=10 * clients, warmup=0, seed=0)
    host = planner.costs.engine.request.at(round(lengths.mean_input))
    return (statistics.mean(run.ttft_s) + host) * 1e3, statistics.mean(run.tpot_s) * 1e3


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", action="store_true", help="print every run, not only each group's medians")
    args = parser.parse_args()
    console = Console(width=max(Console().width, 160))
    rows, left = select(silicon_rows())
    groups: dict[tuple, list] = collections.defaultdict(list)
    pricers: dict = {}
    detail = Table(title="every run (errors: simulated vs measured)")
    for column in ("setting", "ISL/OSL", "TP", "clients", "TTFT ms", "error", "TPOT ms", "error"):
        detail.add_column(column)
    order = list(DEVICES)
    for r in sorted(rows, key=lambda r: (order.index(r["system"]), r["model_path"], r["backend"], r["backend_version"],
                                         r["isl"], r["osl"], r["tp_size"], r["batch_size"])):
        ttft, tpot = replay(r, pricers)
        e_ttft = (ttft - r["silicon_ttft_ms"]) / r["silicon_ttft_ms"]
        e_tpot = (tpot - r["silicon_tpot_ms"]) / r["silicon_tpot_ms"]
        model = "DeepSeek-R1/V3" if r["model_path"].startswith("deepseek-ai/") else r["model_path"].split("/")[-1]
        name = (f"{model} {r['precision']}, {DEVICES[r['system']]}, "
                f"{r['backend']} {r['backend_version'] or '(version not given)'}")
        groups[name].append((e_ttft, e_tpot))
        detail.add_row(name, f"{r['isl']}/{r['osl']}", str(int(r["tp_size"])), str(int(r["batch_size"])),
                       f"{ttft:.1f} vs {r['silicon_ttft_ms']:.1f}", f"{e_ttft:+.0%}",
                       f"{tpot:.2f} vs {r['silicon_tpot_ms']:.2f}", f"{e_tpot:+.0%}")
    if args.rows:
        console.print(detail)
    table = Table(title="infercast vs InferenceX runs in aiconfigurator-core's silicon sample (replayed: 10 x N "
                        "requests, N clients starting at once, lengths 0.8-1.0 x ISL/OSL)")
    for column in ("setting", "runs", "TTFT median error", "median |error|", "TPOT median error", "median |error|"):
        table.add_column(column)
    for name, errors in groups.items():
        ttft, tpot = [e for e, _ in errors], [e for _, e in errors]
        table.add_row(name, str(len(errors)), f"{statistics.median(ttft):+.0%}",
                      f"{statistics.median(map(abs, ttft)):.0%}", f"{statistics.median(tpot):+.0%}",
                      f"{statistics.median(map(abs, tpot)):.0%}")
    console.print(table)
    every = [e for errors in groups.values() for e in errors]
    console.print(f"median |error| over {len(every)} runs: TTFT {statistics.median(abs(e) for e, _ in every):.1%}, "
                  f"TPOT {statistics.median(abs(e) for _, e in every):.1%}")
    for device in DEVICES.values():
        some = [e for name, errors in groups.items() if f", {device}, " in name for e in errors]
        if some:
            console.print(f"  on {device}: {len(some)} runs, TTFT {statistics.median(abs(e) for e, _ in some):.1%}, "
                          f"TPOT {statistics.median(abs(e) for _, e in some):.1%}")
    used = sorted({planner.costs.describe() for planner, _ in pricers.values()})
    console.print("priced with: " + "; ".join(used))
    console.print("left out: " + "; ".join(f"{reason}: {n}" for reason, n in sorted(left.items())))
    return 0


if __name__ == "__main__":
    sys.exit(main())
