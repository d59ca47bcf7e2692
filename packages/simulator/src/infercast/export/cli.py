"""Command-line front end of the model view: ``infercast export``."""

from __future__ import annotations

import argparse
import json
from dataclasses import asdict
from typing import Any

from rich.console import Console
from rich.table import Table

from infercast.export.run import DTYPES, PHASES

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
    p.add_argument("--dtype", choices=list(DTYPES), default="bf16", help="weights and activations (default bf16)")
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
