"""Planner speed: configurations evaluated per minute for a Kimi-K2.5 sweep on 8-16 H200s, on
1 core, 2 cores and all cores (the local process pool), and the overhead of Ray against the
local pool on the same grid.

The sweep: 8 and 16 devices (every valid TP / DP / EP layout), ten batch sizes, speculative
decoding off and five EAGLE3 chains with the bundled MLA draft (372 configurations, 7 work
units), under the default serving mode (aggregated continuous batching: `--mode agg`) or the
static view (`--mode static`: one prefill alone and the steady decode step). Target: >= 1,000
configurations per minute per core.

Each figure comes from a fresh Python process (no cache warmed by an earlier run): the sweep
time counts the pool's worker start-up (or the Ray runtime's), not the imports and the model
resolution every run shares, which are printed apart. The load average before each run is
printed: the machine may be shared.

Run: .venv/bin/python benchmarks/plan_speed.py [--repeat N] [--mode agg|static] [--no-ray] [--json]
(figures measured here: docs/simulate.md, "Where the sweep runs").
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

TARGET_PER_CORE = 1000


def request(mode: str = "agg"):
    from infercast.plan import PlanRequest, SpecChoice
    from infercast.simulate import UserInput

    return PlanRequest(
        mode=mode, model="moonshotai/Kimi-K2.5", device="H200", num_devices=(8, 16), tpot_slo_ms=20.0, ttft_slo_ms=2000.0,
        speculative=UserInput(speculative_algorithm="EAGLE3", speculative_draft_model="lightseekorg/kimi-k2.5-eagle3-mla"),
        spec_grid=tuple(SpecChoice(s, 1, s + 1) for s in range(1, 6)),
    )


def busy_seconds() -> float | None:
    """CPU time the whole machine has been busy (all processes, all cores), from /proc/stat."""
    try:
        with open("/proc/stat") as handle:
            fields = [int(v) for v in handle.readline().split()[1:]]
    except OSError:
        return None
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)  # idle + iowait
    return (sum(fields[:8]) - idle) / os.sysconf("SC_CLK_TCK")


def own_cpu_seconds() -> float:
    """CPU time of this process and of its children that have ended (the pool's workers)."""
    import resource

    me, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + children.ru_utime + children.ru_stime


def one_run(executor: str, workers: int, mode: str) -> dict:
    """One sweep in this process; what it measured, as a dict."""
    started = time.perf_counter()
    from infercast.executor import LocalExecutor, RayExecutor, SerialExecutor
    from infercast.plan import Planner

    planner = Planner(request(mode))
    setup = time.perf_counter() - started
    runtime_s = 0.0
    if executor == "serial":
        run = SerialExecutor()
    elif executor == "local":
        run = LocalExecutor(workers)
    else:
        import ray

        os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
        began = time.perf_counter()
        ray.init(num_cpus=workers, include_dashboard=False, log_to_driver=False, _node_ip_address="127.0.0.1")
        runtime_s = time.perf_counter() - began
        run = RayExecutor()
    load = os.getloadavg()[0]
    cpu, busy = own_cpu_seconds(), busy_seconds()
    result = planner.run(executor=run)
    cpu = own_cpu_seconds() - cpu
    others = busy_seconds() - busy - cpu if busy is not None else None
    if executor == "ray":
        import ray

        ray.shutdown()
    return {"executor": executor, "workers": workers, "configurations": result.evaluated, "sweep_s": result.sweep_s,
            "setup_s": setup, "ray_runtime_start_s": runtime_s, "load_before": load, "cpu_s": cpu,
            "other_cores": others / result.sweep_s if others is not None else None,
            "per_minute": result.evaluated / result.sweep_s * 60, "execution": result.execution,
            "best": result.best.to_dict() if result.best else None}


def measure(executor: str, workers: int, repeat: int, mode: str) -> dict:
    """The fastest of ``repeat`` fresh processes (the least disturbed by other load)."""
    runs = []
    for _ in range(repeat):
        out = subprocess.run([sys.executable, __file__, "--one", executor, "--workers", str(workers), "--mode", mode],
                             capture_output=True, text=True, check=True)
        runs.append(json.loads(out.stdout.strip().splitlines()[-1]))
    best = min(runs, key=lambda r: r["sweep_s"])
    best["sweep_s_all"] = [round(r["sweep_s"], 2) for r in runs]
    return best


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=1, help="fresh processes per figure; the fastest counts")
    parser.add_argument("--no-ray", action="store_true", help="skip the Ray figure")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    parser.add_argument("--mode", choices=("agg", "static"), default="agg",
                        help="agg: continuous batching, the plan's default (default); static: the steady decode step")
    parser.add_argument("--one", choices=("serial", "local", "ray"), help=argparse.SUPPRESS)
    parser.add_argument("--workers", type=int, default=1, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        print(json.dumps(one_run(args.one, args.workers, args.mode)))
        return 0

    from infercast.executor import default_workers

    cores = default_workers()
    plan = [("serial", 1), ("local", 2)] + ([("local", cores)] if cores > 2 else [])
    if not args.no_ray:
        plan.append(("ray", 2))
    figures = {f"{kind} {n}": measure(kind, n, args.repeat, args.mode) for kind, n in plan}
    serial = figures["serial 1"]
    differ = [key for key, f in figures.items() if f["best"] != serial["best"]]
    per_core = serial["per_minute"]
    if args.json:
        print(json.dumps({"cores": cores, "mode": args.mode, "figures": figures, "target_per_core": TARGET_PER_CORE}, indent=2))
    else:
        print(f"{serial['configurations']} configurations, --mode {args.mode}; {cores} cores here; model and draft resolved in "
              f"{serial['setup_s']:.1f} s per process (not counted)")
        print(f"{'run':<26}{'sweep s':>9}{'configs/min':>13}{'per core':>10}{'per CPU-min':>13}{'others':>8}"
              f"{'load':>6}  evaluated on")
        for key, f in figures.items():
            procs = f["execution"]["processes"]
            label = {"serial": "1 core (serial)", "local": f"{f['workers']} cores (local pool)",
                     "ray": f"{f['workers']} CPUs (Ray, local runtime)"}[f["executor"]]
            others = f"{f['other_cores']:.2f}" if f["other_cores"] is not None else "-"
            per_cpu = f"{f['configurations'] / f['cpu_s'] * 60:,.0f}" if f["executor"] != "ray" else "-"
            print(f"{label:<26}{f['sweep_s']:>9.2f}{f['per_minute']:>13,.0f}{f['per_minute'] / procs:>10,.0f}"
                  f"{per_cpu:>13}{others:>8}{f['load_before']:>6.2f}  {f['execution']['units_by_process']}")
        print("per CPU-min: configurations per minute of CPU time these processes used; others: cores busy with "
              "other processes during the sweep (Ray's own runtime counts there); load: 1-minute load average "
              "before it")
        if cores <= 2:
            print(f"all cores = {cores}: the 2-core figure is the all-core one on this machine")
        if "ray 2" in figures and "local 2" in figures:
            ray, local = figures["ray 2"], figures["local 2"]
            print(f"Ray overhead against the local pool (2 processes): {ray['sweep_s'] - local['sweep_s']:+.2f} s on "
                  f"the sweep ({ray['sweep_s'] / local['sweep_s']:.2f}x), plus {ray['ray_runtime_start_s']:.1f} s "
                  "starting the local Ray runtime")
        if differ:
            print(f"WARNING: {', '.join(differ)} chose a different best configuration than the serial run")
        print(f"target >= {TARGET_PER_CORE:,} per minute per core: "
              f"{'met' if per_core >= TARGET_PER_CORE else 'MISSED'} ({per_core:,.0f} on one core)")
    return 0 if per_core >= TARGET_PER_CORE and not differ else 1


if __name__ == "__main__":
    sys.exit(main())
