"""Wall time and peak memory of simulating a full 61-layer DeepSeek-V3-architecture decode step.

Measured in-process after import, with and without layer repetition (identical layers traced
once and counted N times). The first simulation in a process also pays one-off costs
(transformers' lazy import of the model module, first calls of the custom ops); it is
reported separately from the steady state. Run: python benchmarks/speed.py
"""

from __future__ import annotations

import resource
import statistics
import sys
import time

from infercast.simulate import UserInput, simulate

REPEATS = 5
TARGET_S = 0.5
TARGET_GB = 2.0


def rss_peak_gb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 / 1e9  # ru_maxrss is KiB on Linux


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
    return 0


if __name__ == "__main__":
    sys.exit(main())
