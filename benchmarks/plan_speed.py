"""Planner speed: configurations evaluated per minute for a Kimi-K2.5 sweep on 8-16 H200s.

The sweep: 8 and 16 devices (every valid TP / DP / EP layout), ten batch sizes, speculative
decoding off and five EAGLE3 chains with the bundled MLA draft. Target: >= 1,000 per minute
on a 2-core machine. Run: .venv/bin/python benchmarks/plan_speed.py
"""

from __future__ import annotations

import sys
import time

from infercast.plan import Planner, PlanRequest, SpecChoice
from infercast.simulate import UserInput


def main() -> int:
    started = time.perf_counter()
    request = PlanRequest(
        model="moonshotai/Kimi-K2.5", device="H200", num_devices=(8, 16), tpot_slo_ms=20.0, ttft_slo_ms=2000.0,
        speculative=UserInput(speculative_algorithm="EAGLE3", speculative_draft_model="lightseekorg/kimi-k2.5-eagle3-mla"),
        spec_grid=tuple(SpecChoice(s, 1, s + 1) for s in range(1, 6)),
    )
    planner = Planner(request)
    setup = time.perf_counter() - started
    result = planner.run()
    per_minute = result.evaluated / result.sweep_s * 60
    print(f"configurations evaluated: {result.evaluated}")
    print(f"distinct forwards traced: {result.traces}")
    print(f"sweep time: {result.sweep_s:.2f} s (plus {setup:.2f} s resolving the model and draft)")
    print(f"configurations per minute: {per_minute:,.0f} (target >= 1,000)")
    print(f"frontier points: {len(result.frontier)}; best: "
          f"{result.best.layout.describe() if result.best else None}, batch {result.best.batch if result.best else '-'}")
    return 0 if per_minute >= 1000 else 1


if __name__ == "__main__":
    sys.exit(main())
