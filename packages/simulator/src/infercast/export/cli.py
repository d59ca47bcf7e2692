"""Command-line front ends of the model view: ``infercast export`` and ``simulate --from-ir``."""

from __future__ import annotations

import argparse
import json
from dataclasses import asdict
from typing import Any

from infercast_adapters import InfercastError
from rich.console import Console
from rich.table import Table

from infercast.export import DTYPE_NAMES, PHASES

STAGES = {"build": "building the model on meta", "export": "torch.export on meta + pytorch-ir",
          "write": "writing JSON", "done": "done"}


def add_export_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("model", help="hub id, alias, config.json or model directory (resolved through the adapters)")
    p.add_argument("--phase", choices=PHASES, default="both", help="which graphs (default both, with the KV mapping)")
    p.add_argument("--seq-len", type=int, default=128, metavar="S",
                   help="prompt tokens per sequence in the prefill graph (default 128)")
    p.add_argument("--max-cache-len", type=int, default=2048, metavar="C",
                   help="cache slots per sequence in the decode graph (default 2048; must exceed --seq-len)")
    p.add_argument("--batch", type=int, default=1, metavar="B", help="sequences per graph (default 1)")
    p.add_argument("--layers", type=int, default=None, metavar="N",
                   help="export only the first N decoder layers (default: all)")
    p.add_argument("--dtype", choices=list(DTYPE_NAMES), default="bf16", help="weights and activations (default bf16)")
    p.add_argument("--out", required=True, metavar="DIR", help="directory for the JSON files")
    p.add_argument("--name", default=None, metavar="STEM", help="file stem (default: from the model, kimi-k2.5)")
    p.add_argument("--json", action="store_true", help="print the result as JSON")


def export_command(args: argparse.Namespace, console: Console) -> int:
    from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

    from infercast.export.run import ExportRequest, export_model

    request = ExportRequest(model=args.model, phase=args.phase, seq_len=args.seq_len, max_cache_len=args.max_cache_len,
                            batch=args.batch, layers=args.layers, dtype=args.dtype, out_dir=args.out, name=args.name)
    with Progress(SpinnerColumn(), TextColumn("{task.description}"), TimeElapsedColumn(),
                  console=Console(stderr=True), transient=False) as bar:
        tasks: dict[str, Any] = {}

        def progress(phase: str, stage: str) -> None:
            task = tasks.get(phase)
            if task is None:
                task = tasks[phase] = bar.add_task(phase, total=1)
            bar.update(task, description=f"{phase}: {STAGES.get(stage, stage)}", completed=1 if stage == "done" else 0)

        result = export_model(request, progress=progress)
    if args.json:
        data = asdict(result)
        print(json.dumps(data, indent=2, default=str))
        return 0
    print_export(result, console)
    return 0


def print_export(result: Any, console: Console) -> None:
    whole = "all" if result.layers == result.model_layers else "the first"
    console.print(f"[bold]{result.model}[/bold] ({result.model_type}, text model {result.text_model_type}): "
                  f"{whole} {result.layers} of {result.model_layers} decoder layers, {result.dtype}, built on meta "
                  f"in {result.build_seconds:.1f} s")
    table = Table(title="exported graphs")
    for column in ("phase", "file", "nodes", "inputs", "outputs", "weights", "export s", "peak RSS MiB", "MB"):
        table.add_column(column, justify="left" if column in ("phase", "file") else "right")
    for p in result.phases:
        table.add_row(p.phase, str(p.path), f"{p.nodes:,}", str(p.inputs), str(p.outputs), f"{p.weights:,}",
                      f"{p.seconds:.1f}", f"{p.peak_rss_mib:,.0f}", f"{p.bytes_written / 1e6:.1f}")
    console.print(table)
    if result.kv_mapping is not None:
        console.print(f"KV mapping: {result.kv_mapping}")
    for note in result.notes:
        console.print(f"[yellow]note:[/yellow] {note}")
    console.print(f"total {result.total_seconds:.1f} s")


def price_ir_command(args: argparse.Namespace, console: Console) -> int:
    from infercast.costmodel import CostModel
    from infercast.export.pricing import engine_view, price_ir
    from infercast.kernels.calibration import load_calibration
    from infercast.plugins import get_devices

    device = get_devices().get(args.device)
    if args.cost_model not in ("measured", "analytic"):
        raise InfercastError(f"unknown --cost-model {args.cost_model!r}; valid: measured, analytic")
    calibration = load_calibration(args.calibration, device) if args.calibration else None
    model = CostModel(device, args.engine, args.engine_version, calibration, measured=args.cost_model == "measured")
    pricing = price_ir(args.from_ir, model)
    if pricing.meta is not None:
        fields = {"device": args.device, "engine": args.engine, "engine_version": args.engine_version,
                  "calibration": args.calibration, "cost_model": args.cost_model}
        try:
            pricing.engine = engine_view(pricing.meta, fields)
        except InfercastError as exc:
            pricing.notes.append(f"engine view skipped: {exc}")
    else:
        pricing.notes.append("the file carries no infercast export metadata (model, shapes): no engine view to compare")
    if args.json:
        print(json.dumps(pricing.to_dict(), indent=2))
    else:
        print_pricing(pricing, console, args.show_ops)
    return 0


def _ratio(a: float, b: float) -> str:
    return f"{a / b:.2f}x" if b else "-"


def print_pricing(pricing: Any, console: Console, show_ops: int) -> None:
    meta = pricing.meta or {}
    what = (f"{meta.get('model')} {meta.get('phase')} graph, batch {meta.get('batch')}, "
            f"{'prompt ' + str(meta.get('seq_len')) if meta.get('phase') == 'prefill' else 'cache ' + str(meta.get('max_cache_len'))}, "
            f"{meta.get('layers')} layers, {meta.get('dtype')}") if meta else "a pytorch-ir graph"
    t = pricing.totals
    console.print(f"[bold]{pricing.path}[/bold]: {what}; {pricing.nodes:,} nodes ({pricing.free_nodes:,} views and "
                  f"metadata, free), {t.kernels:,} kernels on {pricing.device} ({pricing.cost_model})")
    table = Table(title="IR operators, kernels back to back")
    for column in ("op", "count", "GFLOP", "MB", "ms", "bound", "source"):
        table.add_column(column, justify="left" if column in ("op", "bound", "source") else "right")
    for op in pricing.ops[:show_ops]:
        table.add_row(op.name, f"{op.count:,}", f"{op.flops / 1e9:,.3f}", f"{op.bytes / 1e6:,.2f}", f"{op.ms:,.3f}",
                      op.bound, ", ".join(f"{k} {v}" for k, v in sorted(op.sources.items())))
    console.print(table)
    ir = t.to_dict()
    engine = (pricing.engine or {}).get("totals")
    compare = Table(title="IR graph vs engine view (same model and shapes, 1 device, bf16)" if engine else "IR totals")
    compare.add_column("")
    compare.add_column("IR graph", justify="right")
    if engine:
        compare.add_column("engine view", justify="right")
        compare.add_column("IR / engine", justify="right")
    for key, label, scale, unit, digits in (("matmul_flops", "GEMM + attention", 1e9, "GFLOP", 3),
                                            ("other_flops", "other (elementwise)", 1e9, "GFLOP", 3),
                                            ("bytes", "HBM traffic", 1e9, "GB", 3), ("kernels", "kernels", 1, "", 0),
                                            ("ms", "kernel time", 1, "ms", 3)):
        row = [f"{label} {unit}".strip(), f"{ir[key] / scale:,.{digits}f}"]
        if engine:
            row += [f"{engine[key] / scale:,.{digits}f}", _ratio(ir[key], engine[key])]
        compare.add_row(*row)
    console.print(compare)
    if engine:
        console.print("Why they differ (eager attention over every cache slot, MLA without weight absorption, "
                      "gathered expert weights, no fusion): docs/simulate.md, 'Pricing an exported graph'.")
    for note in pricing.notes:
        console.print(f"[yellow]note:[/yellow] {note}")
