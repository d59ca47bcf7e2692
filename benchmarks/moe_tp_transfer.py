"""How well a fused-MoE row measured at one MoE TP prices the same experts at a neighbouring one.

The cost model carries an engine's ``moe`` row to a MoE TP its tables lack (twice or half one
they have). Two ways are compared here on every pair of neighbouring MoE TPs an engine's
shipped tables hold for the same experts in one version, so the truth is measured:

- ``analytic``: the row scaled by the analytic fused MoE's ratio between the two MoE TPs
  (:func:`infercast.costmodel.moe_shape`);
- ``sibling``: the row scaled by the ratio another engine's tables measure for the same kernel
  family (:data:`infercast.costmodel.SHARED_MOE_KERNELS`) between the same two MoE TPs, both in
  one version of that engine.

It prints the median and 90th-percentile |error| of each, by system, kernel and token band
(decode-sized batches up to 64 tokens, prefill-sized beyond), balanced routing, EP 1.

    .venv/bin/python benchmarks/moe_tp_transfer.py
"""

from __future__ import annotations

import statistics
import sys
from collections import defaultdict

from rich.console import Console
from rich.table import Table

from infercast.costmodel import SHARED_MOE_KERNELS, moe_shape
from infercast.kernels import aiconfigurator as aic
from infercast.plugins import get_devices

SYSTEMS = {"h100_sxm": "H100", "h200_sxm": "H200", "b200_sxm": "B200", "a100_sxm": "A100"}


def versions_rows(system: str, engine: str, kernel: str) -> dict[str, dict[tuple, dict[float, float]]]:
    """Per version of ``engine``: its own balanced EP-1 ``kernel`` rows, key -> tokens -> latency (us)."""
    out = {}
    for version in aic.engine_versions(system, engine):
        table = aic.load("moe", system, engine, version)
        own = f"{engine} {version}"
        rows: dict[tuple, dict[float, float]] = {}
        for key in table.keys():
            if key[1] != kernel or key[2] != "balanced" or table.origin(key) != own:
                continue
            points = {coords[1]: value for coords, value in table.grid(key).points() if coords[0] == 1}
            if points:
                rows[key] = points
        if rows:
            out[version] = rows
    return out


def main() -> int:
    devices = get_devices()
    errors: dict[tuple, list[float]] = defaultdict(list)
    for system, device_name in SYSTEMS.items():
        device = devices.get(device_name)
        for kernel, engines in SHARED_MOE_KERNELS.items():
            by_engine = {engine: versions_rows(system, engine, kernel) for engine in engines}
            for target, sibling in ((a, b) for a in engines for b in engines if a != b):
                for rows in by_engine[target].values():
                    for key, points in rows.items():
                        dtype, _, _, top_k, experts, hidden, inter, tp = key
                        for other in (tp * 2, tp // 2):
                            truth = rows.get((*key[:-1], other))
                            ratio_rows = next((r for r in by_engine[sibling].values()
                                               if key in r and (*key[:-1], other) in r), None)
                            if truth is None or ratio_rows is None:
                                continue
                            here, there = ratio_rows[key], ratio_rows[(*key[:-1], other)]
                            shape_here = moe_shape(device, dtype, top_k, experts, hidden, inter, tp)
                            shape_there = moe_shape(device, dtype, top_k, experts, hidden, inter, other)
                            for tokens, latency in points.items():
                                if tokens not in truth or tokens not in here or tokens not in there:
                                    continue
                                band = "<= 64 tokens" if tokens <= 64 else "> 64 tokens"
                                group = (device_name, kernel, f"{target} from {sibling}", band)
                                analytic = latency * shape_there((1, tokens)) / shape_here((1, tokens))
                                measured = latency * there[tokens] / here[tokens]
                                errors[(*group, "analytic")].append(abs(analytic / truth[tokens] - 1))
                                errors[(*group, "sibling")].append(abs(measured / truth[tokens] - 1))
    table = Table(title="a fused-MoE row carried to a neighbouring MoE TP: |error| against the measured row")
    for column in ("device", "kernel", "rows of", "band", "pairs", "analytic median", "analytic p90",
                   "sibling median", "sibling p90"):
        table.add_column(column)
    for group in sorted({k[:-1] for k in errors}):
        a, s = sorted(errors[(*group, "analytic")]), sorted(errors[(*group, "sibling")])
        table.add_row(*group, str(len(a)), f"{statistics.median(a):.1%}", f"{a[int(0.9 * len(a))]:.1%}",
                      f"{statistics.median(s):.1%}", f"{s[int(0.9 * len(s))]:.1%}")
    Console(width=160).print(table)
    every_a = [e for k, v in errors.items() if k[-1] == "analytic" for e in v]
    every_s = [e for k, v in errors.items() if k[-1] == "sibling" for e in v]
    print(f"all {len(every_a)} pairs: analytic median {statistics.median(every_a):.1%}, "
          f"sibling median {statistics.median(every_s):.1%}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
