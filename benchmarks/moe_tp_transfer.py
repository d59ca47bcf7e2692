"""How well one engine's fused-MoE rows price what its own tables lack.

The cost model carries an engine's ``moe`` row to a MoE TP its tables lack (twice or half one
they have). Two ways are compared here on every pair of neighbouring MoE TPs an engine's
shipped tables hold for the same experts in one version, so the truth is measured:

- ``analytic``: the row scaled by the analytic fused MoE's ratio between the two MoE TPs
  (:func:`infercast.costmodel.moe_shape`);
- ``sibling``: the row scaled by the ratio another engine's tables measure for the same kernel
  family (:data:`infercast.costmodel.SHARED_MOE_KERNELS`) between the same two MoE TPs, both in
  one version of that engine.

It prints the median and 90th-percentile |error| of each over the points (a pair of rows at
one token count both time), by system, kernel and dtype, direction and token band (decode-sized
batches up to 64 tokens, prefill-sized beyond), balanced routing, EP 1. A shape timed in two
versions of the target engine counts once for each.

A second table asks the same of a shape an engine's tables lack at every MoE TP: priced from the
other engine's row of the same kernel, shape and MoE TP, against the analytic price (the
engine's own Triton figure, :mod:`infercast.devices`, whose compute share is fitted to these
tables' rows from 4,096 tokens, so in sample there), on every key both engines time.

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


def fused_moe(tokens: float, key: tuple):
    """The fused-MoE record of a ``moe`` table key at ``tokens`` (every expert on the rank)."""
    import torch

    from infercast import routing
    from infercast.trace import OpRecord, TensorSpec

    dtype, _, _, top_k, experts, hidden, inter, tp = key
    width, weight = inter // tp, torch.float8_e4m3fn if dtype == "fp8_block" else torch.bfloat16
    x = TensorSpec((int(tokens), hidden), torch.bfloat16)
    named = dict(x=x, w13=TensorSpec((experts, 2 * width, hidden), weight, "weight"),
                 w13_scale=TensorSpec((experts, 2 * width // 128, hidden // 128), torch.float32, "weight"),
                 w2=TensorSpec((experts, hidden, width), weight, "weight"),
                 w2_scale=TensorSpec((experts, hidden // 128, width // 128), torch.float32, "weight"),
                 tokens=int(tokens), top_k=top_k, num_experts=experts, local_experts=experts,
                 routed_rows=float(tokens * top_k),
                 active_experts=float(routing.expected_active_experts(experts, top_k, int(tokens), experts)),
                 straggler=1.0, moe_tp=tp, dtype=dtype, distribution="balanced", dispatch="tp")
    return OpRecord("infercast::fused_moe", tuple(named.values()), (x,), "mlp", 0, named=named)


def same_shape_rows(devices) -> dict[tuple, list[float]]:
    """|error| of pricing an engine's Triton row from the other engine's row of the same key, and
    of its analytic price, over every key and token count both engines' own versions time."""
    from infercast.costmodel import CostModel, Phase

    phase = Phase(graph=False, decode=False, scale_up_domain=8)
    errors: dict[tuple, list[float]] = defaultdict(list)
    for system, device_name in SYSTEMS.items():
        device = devices.get(device_name)
        by_engine = {engine: versions_rows(system, engine, "triton") for engine in ("sglang", "vllm")}
        for target, sibling in (("sglang", "vllm"), ("vllm", "sglang")):
            analytic = CostModel(device, target, measured=False, moe_kernel="triton")
            theirs: dict[tuple, dict[float, float]] = {}
            for rows in by_engine[sibling].values():
                for key, points in rows.items():
                    theirs.setdefault(key, points)
            ours: dict[tuple, dict[float, float]] = {}
            for rows in by_engine[target].values():
                for key, points in rows.items():
                    ours.setdefault(key, points)
            for key, points in ours.items():
                if key not in theirs or key[0] not in ("bf16", "fp8_block"):
                    continue
                for tokens, latency in points.items():
                    if tokens not in theirs[key]:
                        continue
                    band = "<= 64 tokens" if tokens <= 64 else "> 64 tokens"
                    group = (device_name, f"{target} from {sibling}", band)
                    priced = analytic.price(fused_moe(tokens, key), phase).seconds * 1e6
                    errors[(*group, "analytic")].append(abs(priced / latency - 1))
                    errors[(*group, "sibling")].append(abs(theirs[key][tokens] / latency - 1))
    return errors


def print_table(title: str, columns: tuple[str, ...], errors: dict[tuple, list[float]]) -> None:
    table = Table(title=title)
    for column in (*columns, "points", "analytic median", "analytic p90", "sibling median", "sibling p90"):
        table.add_column(column)
    for group in sorted({k[:-1] for k in errors}):
        a, s = sorted(errors[(*group, "analytic")]), sorted(errors[(*group, "sibling")])
        table.add_row(*group, str(len(a)), f"{statistics.median(a):.1%}", f"{a[int(0.9 * len(a))]:.1%}",
                      f"{statistics.median(s):.1%}", f"{s[int(0.9 * len(s))]:.1%}")
    Console(width=160).print(table)
    every_a = [e for k, v in errors.items() if k[-1] == "analytic" for e in v]
    every_s = [e for k, v in errors.items() if k[-1] == "sibling" for e in v]
    print(f"all {len(every_a)} points: analytic median {statistics.median(every_a):.1%}, "
          f"sibling median {statistics.median(every_s):.1%}")


def carried(devices, families: dict[tuple[str, str], tuple[str, ...]]) -> dict[tuple, list[float]]:
    """|error| of carrying each engine's row of a (kernel, dtype) in ``families`` to a neighbouring
    MoE TP, by the analytic ratio and by the other engine's measured one, against its own row."""
    errors: dict[tuple, list[float]] = defaultdict(list)
    for system, device_name in SYSTEMS.items():
        device = devices.get(device_name)
        for (kernel, shared_dtype), engines in families.items():
            by_engine = {engine: versions_rows(system, engine, kernel) for engine in engines}
            for target, sibling in ((a, b) for a in engines for b in engines if a != b):
                for rows in by_engine[target].values():
                    for key, points in rows.items():
                        dtype, _, _, top_k, experts, hidden, inter, tp = key
                        if dtype != shared_dtype:
                            continue
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
                                group = (device_name, f"{kernel} {dtype}", f"{target} from {sibling}", band)
                                analytic = latency * shape_there((1, tokens)) / shape_here((1, tokens))
                                measured = latency * there[tokens] / here[tokens]
                                errors[(*group, "analytic")].append(abs(analytic / truth[tokens] - 1))
                                errors[(*group, "sibling")].append(abs(measured / truth[tokens] - 1))
    return errors


def main() -> int:
    devices = get_devices()
    print_table("a fused-MoE row carried to a neighbouring MoE TP: |error| against the measured row",
                ("device", "kernel", "rows of", "band"), carried(devices, SHARED_MOE_KERNELS))
    print_table("MXFP4 experts (not shared: vLLM's rows time OpenAI's triton_kernels, sglang's its own)",
                ("device", "kernel", "rows of", "band"),
                carried(devices, {("triton", "mxfp4_w4a16"): ("sglang", "vllm")}))
    print_table("a Triton fused-MoE shape priced from the other engine's row of it: |error| against the engine's own",
                ("device", "rows of", "band"), same_shape_rows(devices))
    return 0


if __name__ == "__main__":
    sys.exit(main())
