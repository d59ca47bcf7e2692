"""Derive sglang's eager launch time per kernel from a logged eager forward.

sglang PR 12160 (2025-10-14 log) timed a DeepSeek-V3 prefill of one new token over one cached
token at 82.6 ms launched eagerly ("forward cost") and 23.1 ms replayed as a CUDA graph (TP8, a
Hopper GPU, sglang main between 0.5.3 and 0.5.4). One token leaves almost nothing for the GPU
to do, so the eager forward is host-bound: the time sglang takes to launch its kernels.

The simulator prices an eager forward as, per decoder layer, the larger of the layer's GPU time
and its kernels x the launch time (``step.exposed_launch``). This script traces that forward as
the simulator does today and finds the launch time at which the simulated forward (GPU streams
plus exposed launches, without the engine's per-step scheduling row, which sglang's log does not
time) takes 82.6 ms. The result depends on how many kernels the tracer emits, so rerun it after
a change that adds or removes kernels from a DeepSeek forward and update
``infercast.engines.SGLANG_EAGER``. The GPU is not named in the log; the figure is printed for
each Hopper device with tables to show that it hardly depends on it.

Run: .venv/bin/python benchmarks/derive_engine_constants.py
"""

from __future__ import annotations

from dataclasses import replace

from infercast import engines
from infercast.simulate import UserInput, simulate

LOGGED_EAGER_S = 82.6406e-3
"""sglang PR 12160: ``#new-token: 1, #cached-token: 1`` ... ``forward cost-82.6406478881836 ms``."""
VERSION = "0.5.3"
"""The last release before the log (sglang main on 2025-10-14): eager prefill, no all-reduce
fusion on sm_90."""
STEP_ROW = "host: scheduling"


def eager_forward_s(device: str, launch_s: float) -> tuple[float, int]:
    """The simulated eager forward of PR 12160's batch at ``launch_s`` a kernel, and its kernels."""
    sglang = engines.ENGINES["sglang"]
    engines.ENGINES["sglang"] = replace(sglang, eager_launch=replace(sglang.eager_launch, seconds=launch_s))
    try:
        r = simulate(UserInput(model="deepseek-ai/DeepSeek-V3", device=device, num_devices=8, tp_size=8,
                               num_queries=1, query_length=1, context_length=1, engine_version=VERSION,
                               prefill_cuda_graph="off"))
    finally:
        engines.ENGINES["sglang"] = sglang
    step_row = sum(row.total_ms for row in r.ops if row.name.startswith(STEP_ROW))
    return (r.step_latency_ms - step_row) / 1e3, r.kernel_count


def launch_time_for(device: str, target_s: float = LOGGED_EAGER_S) -> tuple[float, int]:
    """The launch time at which the simulated forward takes ``target_s`` (bisection: the
    forward grows with the launch time)."""
    low, high = 0.0, 200e-6
    for _ in range(40):
        mid = (low + high) / 2
        if eager_forward_s(device, mid)[0] < target_s:
            low = mid
        else:
            high = mid
    return (low + high) / 2, eager_forward_s(device, high)[1]


def main() -> None:
    print(f"sglang {VERSION}, DeepSeek-V3 on 8 GPUs TP8, 1 new token over 1 cached, eager; "
          f"logged forward {LOGGED_EAGER_S * 1e3:.1f} ms (sglang PR 12160)")
    current = engines.SGLANG_EAGER.seconds
    for device in ("H100", "H200"):
        launch_s, kernels = launch_time_for(device)
        at_current = eager_forward_s(device, current)[0]
        print(f"{device}: {kernels:,} kernels; launch time {launch_s * 1e6:.1f} us a kernel "
              f"(infercast.engines.SGLANG_EAGER: {current * 1e6:.1f} us, which gives {at_current * 1e3:.1f} ms)")


if __name__ == "__main__":
    main()
