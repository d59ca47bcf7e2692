"""The ``infercast`` command line."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Sequence

from infercast_adapters import InfercastError
from rich.console import Console
from rich.table import Table

from infercast import __version__
from infercast.plugins import get_manager

EXIT_USAGE = 2


def _cmd_plugins(args: argparse.Namespace, console: Console) -> int:
    infos = get_manager().plugins()
    if args.json:
        print(json.dumps([info.to_dict() for info in infos], indent=2))
        return 0
    table = Table(title="infercast plugins")
    for column in ("name", "distribution", "version", "hooks / error"):
        table.add_column(column, overflow="fold")
    for info in infos:
        detail = f"[red]failed: {info.error}[/red]" if info.error else ", ".join(info.hooks)
        table.add_row(info.name, info.distribution or "-", info.version or "-", detail)
    console.print(table)
    return 0


def _cmd_models(args: argparse.Namespace, console: Console) -> int:
    profiles = get_manager().profiles()
    rows = [
        {"model_type": t, "plugin": e.plugin, "attention": e.profile.attention_kind, "moe": e.profile.is_moe,
         "vision": e.profile.has_vision}
        for t, e in sorted(profiles.items())
    ]
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    table = Table(title="model types with a profile")
    for column in ("model_type", "plugin", "attention", "moe", "vision"):
        table.add_column(column, overflow="fold")
    for row in rows:
        table.add_row(row["model_type"], row["plugin"], row["attention"], "yes" if row["moe"] else "no",
                      "yes" if row["vision"] else "no")
    console.print(table)
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="infercast", description="Predict the cost of serving an LLM.")
    parser.add_argument("--version", action="version", version=f"infercast {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    p = sub.add_parser("plugins", help="list adapter plugins: name, distribution, version, hooks")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(handler=_cmd_plugins)
    p = sub.add_parser("models", help="list model types with a profile and the plugin providing each")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(handler=_cmd_models)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    console = Console()
    if args.command is None:
        parser.print_help()
        return 0
    try:
        return args.handler(args, console)
    except InfercastError as exc:
        Console(stderr=True).print(f"[bold red]error:[/bold red] {exc}", highlight=False)
        return EXIT_USAGE


if __name__ == "__main__":
    sys.exit(main())
