"""Wall time and peak memory of simulating a full 61-layer DeepSeek-V3-architecture decode step,
and the whole-process time of one Kimi-K2.5 answer from the command line.

In-process, after import, with and without layer repetition (identical layers traced once and
counted N times); the first simulation in a process also pays one-off costs (first calls of the
custom ops, reading the kernel tables) and is reported apart. Whole process: ``infercast
simulate moonshotai/Kimi-K2.5 --decode --json`` run as a user runs it (after one warm-up run
that fills the kernel-table cache), side by side with aiconfigurator's ``cli estimate`` for the
same point when its command is installed (``AICONFIGURATOR=/path/to/aiconfigurator`` or on
PATH). Run: .venv/bin/python benchmarks/speed.py
"""

from __future__ import annotations

import os
import resource
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

from infercast.simulate import UserInput, simulate

REPEATS = 5
TARGET_S = 0.5
TARGET_GB = 2.0


def rss_peak_gb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 / 1e9  # ru_maxrss is KiB on Linux


WHOLE_PROCESS_RUNS = 5
INFERCAST = [str(Path(sys.executable).with_name("infercast")), "simulate", "moonshotai/Kimi-K2.5", "--decode",
             "--json"]
AIC_POINT = ["cli", "estimate", "--model-path", "moonshotai/Kimi-K2.5", "--system", "h200_sxm", "--backend", "sglang",
             "--isl", "1024", "--osl", "1024", "--batch-size", "1", "--tp-size", "8", "--moe-tp-size", "8",
             "--moe-ep-size", "1", "--estimate-mode", "agg"]


def wall(command: list[str], runs: int) -> list[float]:
    env = dict(os.environ, HF_HUB_OFFLINE="1")
    # As on a user's machine: Python caches compiled modules (this sandbox sets
    # PYTHONDONTWRITEBYTECODE, which would recompile every editable-installed module per run;
    # pip-installed tools such as aiconfigurator ship theirs compiled at install).
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        done = subprocess.run(command, capture_output=True, env=env)
        times.append(time.perf_counter() - started)
        if done.returncode != 0:
            raise SystemExit(f"{' '.join(command)} failed: {done.stderr.decode()[-500:]}")
    return times


def whole_process() -> None:
    wall(INFERCAST, 1)  # fills the kernel-table cache, as a user's first run does
    aic = os.environ.get("AICONFIGURATOR") or shutil.which("aiconfigurator")
    ours, theirs = [], []
    for _ in range(WHOLE_PROCESS_RUNS):  # interleaved, so both see the same machine load
        ours += wall(INFERCAST, 1)
        if aic:
            theirs += wall([aic, *AIC_POINT], 1)
    print(f"whole process, Kimi-K2.5 8 x H200 TP8 decode: infercast median {statistics.median(ours):.2f} s "
          f"(min {min(ours):.2f}) over {len(ours)} runs")
    if theirs:
        ratio = statistics.median(ours) / statistics.median(theirs)
        print(f"  aiconfigurator cli estimate, same point: median {statistics.median(theirs):.2f} s "
              f"(min {min(theirs):.2f}); ratio {ratio:.2f} (target <= 0.5: {'met' if ratio <= 0.5 else 'MISSED'})")
    else:
        print("  aiconfigurator not found: set AICONFIGURATOR=/path/to/aiconfigurator to compare side by side")


def main() -> int:
    user = UserInput(model="deepseek-ai/DeepSeek-V3", device="H200", num_devices=8, num_queries=32, decode=True,
                     context_length=2048)
    before = rss_peak_gb()
    started = time.perf_counter()
    simulate(user)
    first = time.perf_counter() - started
    print(f"peak RSS after imports: {before:.2f} GB")
    print(f"first simulation in this process (one-off warm-up included): {first:.3f} s")
    for every_layer in (False, True):
        user.trace_every_layer = every_layer
        times = []
        for _ in range(REPEATS):
            started = time.perf_counter()
            result = simulate(user)
            times.append(time.perf_counter() - started)
        label = "every layer traced" if every_layer else "layer repetition  "
        median = statistics.median(times)
        print(f"{label}: median {median:.3f} s, min {min(times):.3f} s over {REPEATS} runs "
              f"({result.kernel_count} kernels priced; target < {TARGET_S} s: {'met' if median < TARGET_S else 'MISSED'})")
    peak = rss_peak_gb()
    print(f"peak RSS of the whole process: {peak:.2f} GB (target < {TARGET_GB} GB: {'met' if peak < TARGET_GB else 'MISSED'})")
    whole_process()
    return 0


if __name__ == "__main__":
    sys.exit(main())
