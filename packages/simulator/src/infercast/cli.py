"""The ``infercast`` command line."""

from __future__ import annotations

import argparse
import dataclasses
import gc
import json
import os
import sys
from typing import Any, Sequence

from infercast_adapters import InfercastError
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from infercast import __version__

EXIT_USAGE = 2
PIPED_WIDTH = 160
"""Table width when the output is not a terminal."""


def _cmd_plugins(args: argparse.Namespace, console: Console) -> int:
    from infercast.plugins import devices_from, get_manager

    manager = get_manager()
    devices_from(manager)
    dry_run = manager.dry_run()
    infos = manager.plugins()
    if args.json:
        print(json.dumps([{**info.to_dict(), "dry_run_failures": dry_run.get(info.name, [])} for info in infos],
                         indent=2))
        return 0
    table = Table(title="infercast plugins (each plugin's hooks run once, dry)")
    for column in ("name", "distribution", "version", "hooks", "dry run"):
        table.add_column(column, overflow="fold")
    for info in infos:
        failures = dry_run.get(info.name, [])
        if info.error:
            status = f"[red]skipped: {escape(info.error)}[/red]"
        elif failures:
            status = "[red]" + escape("; ".join(failures)) + "[/red]"
        else:
            status = "[green]ok[/green]"
        table.add_row(info.name, info.distribution or "-", info.version or "-", ", ".join(info.hooks) or "-", status)
    console.print(table)
    if any(info.error for info in infos) or dry_run:
        console.print("A plugin can be left out with INFERCAST_DISABLE_PLUGINS=name[,name...].")
    return 0


def _warn_about_skipped_plugins() -> None:
    """One line on stderr per plugin that was skipped during this command (if plugins were loaded)."""
    plugins = sys.modules.get("infercast.plugins")
    if plugins is None or not plugins.get_manager.cache_info().currsize:
        return
    stderr = Console(stderr=True)
    for info in plugins.get_manager().failures():
        stderr.print(f"[yellow]warning:[/yellow] plugin {escape(info.name)!s} skipped: {escape(info.error or '')} "
                     f"(`infercast plugins` shows every plugin)", highlight=False, soft_wrap=True)


def _cmd_models(args: argparse.Namespace, console: Console) -> int:
    from infercast.plugins import get_manager

    manager = get_manager()
    profiles = manager.profiles()
    rows = [
        {"model_type": t, "plugin": e.plugin, "attention": e.profile.attention_kind, "moe": e.profile.is_moe,
         "vision": e.profile.has_vision, "tokenizer": e.profile.tokenizer}
        for t, e in sorted(profiles.items())
    ]
    default = manager.default_model()
    refs = [{"ref": ref.ref, "model_type": ref.model_type, "plugin": plugin, "aliases": list(ref.aliases),
             "default": ref.ref == default, "description": ref.description} for ref, plugin in manager.models()]
    options = [{"model_type": o.model_type, "algorithm": o.algorithm, "preset": o.name, "draft": o.draft,
                "setting": f"s{o.steps} k{o.topk} n{o.draft_tokens}", "accept_length": o.accept_length,
                "datasets": dict(o.datasets), "swept_by_plan": o.default, "source": o.source}
               for o in manager.speculative_options()]
    from infercast.plugins import shipped_configs

    named = {r["ref"].lower() for r in refs}
    shipped = [r for r in shipped_configs(manager) if r["ref"].lower() not in named]
    if args.json:
        print(json.dumps({"model_types": rows, "models": refs, "speculative": options,
                          "aiconfigurator_configs": shipped}, indent=2))
        return 0
    table = Table(title="model types with a profile")
    for column in ("model_type", "plugin", "attention", "moe", "vision", "tokenizer"):
        table.add_column(column, overflow="fold")
    for row in rows:
        table.add_row(row["model_type"], row["plugin"], row["attention"], "yes" if row["moe"] else "no",
                      "yes" if row["vision"] else "no", row["tokenizer"])
    console.print(table)
    table = Table(title="models available offline")
    for column in ("reference", "model_type", "aliases", "note"):
        table.add_column(column, overflow="fold")
    for ref in refs:
        note = "default; " * ref["default"] + ref["description"]
        table.add_row(ref["ref"], ref["model_type"], ", ".join(ref["aliases"]), note.strip("; "))
    console.print(table)
    if shipped:
        table = Table(title="more configs available offline, from aiconfigurator-core's model_configs")
        for column in ("reference", "model_type", "quantization"):
            table.add_column(column, overflow="fold")
        for row in shipped:
            table.add_row(row["ref"], row["model_type"], row["quantization"])
        console.print(table)
    table = Table(title="speculative options (acceptance presets)")
    for column in ("model_type", "algorithm", "preset", "draft", "setting", "accept length"):
        table.add_column(column, overflow="fold")
    for o in options:
        mean = o["accept_length"] or (sum(o["datasets"].values()) / len(o["datasets"]) if o["datasets"] else None)
        table.add_row(o["model_type"], o["algorithm"], o["preset"], o["draft"] or "-", o["setting"],
                      f"{mean:.3f}" if mean else "none published")
    console.print(table)
    return 0


def _cmd_devices(args: argparse.Namespace, console: Console) -> int:
    from infercast.devices import GIB
    from infercast.plugins import get_devices

    devices = get_devices().all()
    if args.json:
        print(json.dumps([d.to_dict() for d in devices], indent=2))
        return 0
    table = Table(title="devices")
    for column in ("name", "bf16 TFLOP/s", "fp8/int8", "fp32", "memory GiB", "HBM TB/s",
                   "scale-up GB/s", "per node", "measured tables"):
        table.add_column(column, overflow="fold")
    for d in devices:
        low = d.peak_flops_per_s.get("fp8") or d.peak_flops_per_s.get("int8")
        fp32 = d.peak_flops_per_s.get("fp32")
        table.add_row(d.name, f"{d.peak('bf16') / 1e12:.0f}", f"{low / 1e12:.0f}" if low else "-",
                      f"{fp32 / 1e12:g}" if fp32 else "-",
                      f"{d.memory_bytes / GIB:.1f}", f"{d.hbm_bandwidth_bytes_per_s / 1e12:.2f}",
                      f"{d.scale_up_bandwidth_bytes_per_s / 1e9:.0f}", str(d.devices_per_node),
                      d.kernel_tables or "none: analytic")
    console.print(table)
    console.print("Efficiencies and fixed costs are measured, not specified; their sources: `infercast devices --json`.")
    return 0


def _cmd_export(args: argparse.Namespace, console: Console) -> int:
    from infercast.export.cli import export_command

    return export_command(args, console)


IR_FIELDS = ("device", "engine", "engine_version", "calibration", "cost_model")
"""The request fields ``simulate --from-ir`` reads: the graph fixes the model, its shapes and layout."""


def _cmd_simulate(args: argparse.Namespace, console: Console) -> int:
    from infercast.request import UserInput, check, flag_of

    if args.from_ir:
        from infercast.export.cli import price_ir_command

        unused = [flag_of(f.name) for f in dataclasses.fields(UserInput)
                  if f.name not in IR_FIELDS and getattr(args, f.name) != f.default]
        if unused:
            raise InfercastError(f"{', '.join(unused)}: no effect with --from-ir (the graph fixes the model, its "
                                 f"shapes and layout); it reads {', '.join(flag_of(n) for n in IR_FIELDS)}")
        return price_ir_command(args, console)

    user = check(UserInput(**{f.name: getattr(args, f.name) for f in dataclasses.fields(UserInput)}))
    for path in (args.output_json, args.chrome_trace):
        if path:
            check_writable(path)
    from infercast.report import print_summary
    from infercast.simulate import simulate

    result = simulate(user)
    if args.output_json:
        _write(args.output_json, result.to_json())
    if args.chrome_trace:
        _write(args.chrome_trace, json.dumps(result.chrome_trace()))
    if args.json:
        print(result.to_json())
    else:
        print_summary(result, console, show_ops=args.show_ops)
    return 0


def request_fields(args: argparse.Namespace, names: Sequence[str]) -> dict:
    return {name: getattr(args, name) for name in names}


GRID_FIELDS = ("speculative_num_steps", "speculative_eagle_topk", "speculative_num_draft_tokens")
"""Speculative settings ``plan`` sweeps (``--speculative-grid``) instead of taking one."""
SPEC_FIELDS = ("speculative_algorithm", "speculative_draft_model", "speculative_num_steps", "speculative_eagle_topk",
               "speculative_num_draft_tokens", "accept_length", "acceptance_rates", "acceptance_matrix",
               "acceptance_preset", "accept_length_from")
COST_FIELDS = ("engine", "engine_version", "calibration", "cost_model", "expert_imbalance", "prefill_cuda_graph",
               "prefill_cuda_graph_max_tokens", "all_reduce_fusion", "overlap_scheduling", "moe_kernel",
               "moe_all_to_all", "enable_attn_tp_input_scattered")
MEMORY_FIELDS = ("mem_fraction_static", "max_total_tokens")


def add_request_arguments(p: argparse.ArgumentParser, *, only: Sequence[str] | None = None,
                          skip: Sequence[str] = ()) -> None:
    """Command-line flags generated from :class:`infercast.request.UserInput`'s field table."""
    from infercast.request import UserInput, flag_of

    groups: dict[str, Any] = {}
    for f in dataclasses.fields(UserInput):
        if f.name in skip or (only is not None and f.name not in only):
            continue
        meta = f.metadata
        group = groups.get(meta["group"])
        if group is None:
            group = groups[meta["group"]] = p if meta["group"] == "model" else p.add_argument_group(meta["group"])
        if meta["positional"]:
            group.add_argument(f.name, nargs="?", default=f.default, help=meta["help"])
        elif meta["kind"] is bool:
            group.add_argument(flag_of(f.name), dest=f.name, action="store_true", help=meta["help"])
        else:
            kind = {int: _int, float: _float}.get(meta["kind"], str)
            group.add_argument(flag_of(f.name), dest=f.name, type=kind, default=f.default, metavar=meta["metavar"],
                               help=meta["help"])


def check_writable(path: str) -> None:
    """Fail before any work when an output file cannot be written."""
    target = os.path.abspath(path)
    folder = os.path.dirname(target)
    if os.path.isdir(target):
        raise InfercastError(f"{path} is a directory; give a file name")
    if not os.path.isdir(folder):
        raise InfercastError(f"cannot write {path}: the folder {folder} does not exist")
    if not os.access(folder, os.W_OK) or (os.path.exists(target) and not os.access(target, os.W_OK)):
        raise InfercastError(f"cannot write {path}: permission denied")


def parse_device_counts(text: str, flag: str = "--num-devices") -> tuple[int, ...]:
    """``8,16`` (a list) or ``8-32`` (every power of two and multiple of 8 in the range)."""
    try:
        if "-" in text:
            low, high = (int(v) for v in text.split("-", 1))
            counts = [n for n in range(low, high + 1) if n & (n - 1) == 0 or n % 8 == 0]
        else:
            counts = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise InfercastError(f"{flag} takes a list (8,16) or a range (8-32), got {text!r}") from None
    if not counts or any(n < 1 for n in counts):
        raise InfercastError(f"{flag}: no positive device counts in {text!r}")
    return tuple(dict.fromkeys(counts))


def parse_int_list(text: str, flag: str) -> tuple[int, ...]:
    try:
        values = tuple(int(v) for v in text.split(",") if v.strip())
    except ValueError:
        raise InfercastError(f"{flag} takes comma-separated whole numbers, got {text!r}") from None
    if not values or any(v < 1 for v in values):
        raise InfercastError(f"{flag} takes positive whole numbers, got {text!r}")
    return values


def parse_spec_grid(text: str) -> tuple:
    """``3-1-4,2-2-4``: (steps, topk, draft tokens) triples; ``s3`` is the chain (3, 1, 4)."""
    from infercast.acceptance import settings
    from infercast.plan import SpecChoice

    choices = []
    for item in (v.strip() for v in text.split(",") if v.strip()):
        try:
            parts = [int(x) for x in item.lstrip("s").split("-")]
        except ValueError:
            raise InfercastError(f"--speculative-grid entries are S-K-N or sS (a chain), got {item!r}") from None
        valid = settings(parts[0], parts[1] if len(parts) > 1 else 1, parts[2] if len(parts) > 2 else None)
        choices.append(SpecChoice(valid.num_steps, valid.topk, valid.num_draft_tokens))
    return tuple(dict.fromkeys(choices))


def _cmd_plan(args: argparse.Namespace, console: Console) -> int:
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
    )

    from infercast.quant import ACTIONS
    from infercast.request import UserInput, check

    if args.plot:
        if args.plot.endswith(("/", "\\")) or os.path.isdir(args.plot):
            raise InfercastError(f"--plot {args.plot} is a folder; give a path stem such as {args.plot.rstrip('/')}"
                                 "/plan (PATH.png and PATH.svg are written)")
        check_writable(args.plot + ".png")
    if args.report:
        check_report_path(args.report)
    from infercast.executor import executor_from_flags

    if args.mode == "disagg":
        given = [flag for flag, value in (("--executor", args.executor), ("--workers", args.workers),
                                          ("--ray-address", args.ray_address)) if value is not None]
        if given:
            raise InfercastError(f"{given[0]} spreads the aggregated grid over processes; --mode disagg has none (its "
                                 "prefill and decode pools are priced in this process): drop it, or use --mode both")
    executor = executor_from_flags(args.executor, args.workers, args.ray_address)
    check(UserInput(**request_fields(args, COST_FIELDS + MEMORY_FIELDS)))
    from infercast.plan import Planner, PlanRequest, SpecChoice, plot

    grid = parse_spec_grid(args.speculative_grid) if args.speculative_grid is not None else None
    spec_flags = {f: getattr(args, f, None) for f in SPEC_FIELDS}
    explicit = [flag_name for flag_name, given in (("--speculative-algorithm", args.speculative_algorithm),
                                                   ("--num-mtp-tokens", args.num_mtp_tokens),
                                                   ("--speculative-grid", grid is not None)) if given]
    if args.no_speculative and explicit:
        raise InfercastError(f"--no-speculative turns speculative decoding off; it cannot go with {explicit[0]}")
    if args.num_mtp_tokens:
        if args.speculative_algorithm not in (None, "MTP", "mtp"):
            raise InfercastError(f"--num-mtp-tokens is MTP; it cannot go with --speculative-algorithm "
                                 f"{args.speculative_algorithm}")
        speculative: Any = (check(UserInput(model=args.model, **{**spec_flags, "speculative_algorithm": "MTP"})),)
        grid = grid or (SpecChoice(args.num_mtp_tokens, 1, args.num_mtp_tokens + 1),)
    elif args.speculative_algorithm:
        speculative = (check(UserInput(model=args.model, **spec_flags)),)
    elif args.no_speculative:
        speculative = ()
    else:
        speculative = None  # the model family's own options, as its adapter offers them
    if grid and args.acceptance_matrix is None and any(c.topk > 1 for c in grid):
        raise InfercastError("trees (topk > 1) in --speculative-grid need --acceptance-matrix (depth x rank); "
                             "a chain's accept length says nothing about other branches")
    quants = tuple(None if q in ("checkpoint", "none", "") else q for q in args.quantization.split(","))
    unknown = [q for q in quants if q is not None and q.upper() not in ACTIONS]
    if unknown:
        raise InfercastError(f"unknown --quantization {unknown[0]!r}; valid: checkpoint (the checkpoint's own), "
                             + ", ".join(ACTIONS))
    serving = serving_options(args)
    if serving.lengths is not None:  # the histogram's means set the decode context and the memory per request
        args.input_length = max(1, round(serving.lengths.mean_input))
        args.output_length = max(1, round(serving.lengths.mean_output))
    request = PlanRequest(
        mode=args.mode, serving=serving,
        model=args.model, device=args.device, num_devices=parse_device_counts(args.num_devices),
        input_length=args.input_length, output_length=args.output_length, ttft_slo_ms=args.ttft_slo_ms,
        tpot_slo_ms=args.tpot_slo_ms, quantizations=quants, batches=parse_int_list(args.batch_sizes, "--batch-sizes"),
        kv_cache_dtype=args.kv_cache_dtype, speculative=speculative, spec_grid=grid,
        **request_fields(args, COST_FIELDS + MEMORY_FIELDS),
    )
    planner = Planner(request)
    # refreshed by hand: a refresh thread would keep the local pool from forking its workers
    with Progress(TextColumn("sweeping"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  console=Console(stderr=True), transient=True, auto_refresh=False) as bar:
        task = bar.add_task("sweep", total=None)

        def progress(done: int, total: int) -> None:
            bar.update(task, completed=done, total=total)
            bar.refresh()

        result = planner.run(progress, executor=executor)
    launch, notes = {}, []
    if result.best is not None:
        launch, notes = planner.commands_for(result.best), planner.notes_for(result.best)
    disagg_launch, disagg_notes = {}, []
    if result.disagg is not None and result.disagg.best is not None:
        from infercast.disagg import launch_commands as disagg_commands
        from infercast.disagg import launch_notes as disagg_launch_notes

        disagg_launch = disagg_commands(planner, result.disagg.best)
        disagg_notes = disagg_launch_notes(planner, result.disagg.best)
    plots = plot(result, args.plot) if args.plot and result.configs else []
    if args.report:
        from infercast.report_html import write_report

        write_report(result, planner, args.report)
    if args.json:
        from infercast_adapters.jsonsafe import strict_json

        print(json.dumps(strict_json({
            "mode": request.mode, "serving": serving_json(request),
            "disagg": disagg_json(result.disagg, disagg_launch, disagg_notes),
            "model": request.model, "device": request.device, "num_devices": list(request.num_devices),
            "input_length": request.input_length, "output_length": request.output_length,
            "ttft_slo_ms": request.ttft_slo_ms, "tpot_slo_ms": request.tpot_slo_ms,
            "memory": {"fraction": planner.memory.fraction, "max_total_tokens": planner.memory.max_total_tokens,
                       "usable_gib_per_device": planner.memory.usable_bytes(planner.device) / 2**30},
            "configurations_evaluated": result.evaluated, "sweep_s": result.sweep_s, "distinct_forwards_traced": result.traces,
            "fits": sum(c.fits for c in result.configs), "meets_slo": sum(c.fits and c.meets_slo for c in result.configs),
            "frontier": [c.to_dict() for c in result.frontier], "best": result.best.to_dict() if result.best else None,
            "closest": [c.to_dict() for c in result.closest], "launch": {k: " ".join(v) for k, v in launch.items()},
            "launch_notes": notes, "plots": plots, "report": args.report, "notes": result.notes,
            "execution": result.execution,
        }), indent=2, allow_nan=False))
    else:
        if result.configs:
            print_plan(result, launch, plots, console, notes)
        else:
            print_header(result, console)
        if result.disagg is not None:
            print_disagg(result, disagg_launch, console, disagg_notes)
        if args.report:
            console.print(f"report: {args.report}", highlight=False)
    found = result.best is not None or (result.disagg is not None and result.disagg.best is not None)
    return 0 if found else 1


# ------------------------------------------------------------------------------ plan: serving modes


def add_serving_arguments(p: argparse.ArgumentParser) -> None:
    """``plan`` flags of the serving model (:mod:`infercast.serving`, :mod:`infercast.disagg`)."""
    from infercast.serving import MODES, TRANSFER_BACKENDS

    g = p.add_argument_group("serving (docs/simulate.md, infercast plan)")
    g.add_argument("--mode", default="agg", help=f"{' | '.join(MODES)}: aggregated continuous batching with chunked "
                   "prefill, disaggregated prefill/decode pools, or both side by side (default agg)")
    g.add_argument("--request-rate", type=_float, default=None, metavar="R",
                   help="requests/s offered to the deployment (Poisson); default: the largest rate meeting the SLOs")
    g.add_argument("--concurrency", type=_int, default=None, metavar="N",
                   help="N clients, each sending its next request when the last finishes (instead of a rate)")
    g.add_argument("--length-distribution", default=None, metavar="FILE",
                   help="request lengths as a histogram: CSV with header input_length,output_length,weight, or a "
                        "JSON list of such objects (default: --input-length / --output-length)")
    g.add_argument("--chunked-prefill-size", type=_int, default=None, metavar="TOKENS",
                   help="prompt tokens per step of an instance (default: sglang's for the device, 8192 on H100/H200)")
    g.add_argument("--scheduler-recv-interval", type=_int, default=1, metavar="N",
                   help="sglang polls for new requests every N decode steps (default 1: every step); a request "
                        "arriving during decodes waits for the next poll")
    g.add_argument("--mixed-chunk", default="on", metavar="on|off",
                   help="on (default): prompt chunks share steps with the running decodes (sglang "
                        "--enable-mixed-chunk; vLLM and TensorRT-LLM always do); off: sglang's default, each prompt "
                        "step runs apart from the decodes")
    g.add_argument("--ttft-percentile", type=_float, default=90.0, metavar="P",
                   help="the TTFT percentile the SLO and the output use (default 90)")
    g.add_argument("--prefill-devices", default=None, metavar="LIST",
                   help="device counts of one prefill instance, disaggregated (default: --num-devices)")
    g.add_argument("--decode-devices", default=None, metavar="LIST",
                   help="device counts of one decode instance, disaggregated (default: --num-devices)")
    g.add_argument("--disaggregation-transfer-backend", default="mooncake", dest="transfer_backend",
                   help=f"KV transfer engine named in the launch commands: {', '.join(TRANSFER_BACKENDS)} "
                        "(default mooncake)")


def serving_options(args: argparse.Namespace) -> Any:
    from infercast.serving import MODES, ServingOptions, load_lengths

    if args.mode not in MODES:
        raise InfercastError(f"unknown --mode {args.mode!r}; valid: {', '.join(MODES)}")
    if args.mixed_chunk not in ("on", "off"):
        raise InfercastError(f"unknown --mixed-chunk {args.mixed_chunk!r}; valid: on, off")
    lengths = load_lengths(args.length_distribution) if args.length_distribution else None
    return ServingOptions(
        request_rate=args.request_rate, concurrency=args.concurrency, lengths=lengths,
        chunked_prefill_size=args.chunked_prefill_size, ttft_percentile=args.ttft_percentile / 100,
        prefill_devices=parse_device_counts(args.prefill_devices, "--prefill-devices") if args.prefill_devices else None,
        decode_devices=parse_device_counts(args.decode_devices, "--decode-devices") if args.decode_devices else None,
        transfer_backend=args.transfer_backend, scheduler_recv_interval=args.scheduler_recv_interval,
        mixed_chunk=args.mixed_chunk == "on")


def serving_json(request: Any) -> dict:
    s = request.serving
    return {"request_rate": s.request_rate, "concurrency": s.concurrency, "chunked_prefill_size": s.chunked_prefill_size,
            "ttft_percentile": s.ttft_percentile * 100,
            "lengths": [list(row) for row in s.lengths.rows] if s.lengths else None,
            "prefill_devices": list(s.prefill_devices) if s.prefill_devices else None,
            "decode_devices": list(s.decode_devices) if s.decode_devices else None,
            "transfer_backend": s.transfer_backend, "scheduler_recv_interval": s.scheduler_recv_interval,
            "mixed_chunk": s.mixed_chunk}


def disagg_json(disagg: Any, launch: dict, notes: Sequence[str] = ()) -> dict | None:
    if disagg is None:
        return None
    return {"configurations": len(disagg.configs), "frontier": [c.to_dict() for c in disagg.frontier],
            "best": disagg.best.to_dict() if disagg.best else None,
            "closest": [c.to_dict() for c in sorted(disagg.configs, key=lambda c: c.violation)[:5]]
            if disagg.best is None else [],
            "launch": {k: [" ".join(cmd) for cmd in v] for k, v in launch.items()}, "launch_notes": list(notes)}


def print_header(result: Any, console: Console) -> None:
    r = result.request
    slo = ", ".join(f"{name} <= {v:g} ms" for name, v in (("TTFT", r.ttft_slo_ms), ("TPOT", r.tpot_slo_ms)) if v)
    console.print(f"[bold]{r.model}[/bold] on {r.device}; input {r.input_length}, output {r.output_length}; "
                  f"{slo or 'no latency targets'}; {result.evaluated} configurations in {result.sweep_s:.2f} s "
                  f"({result.traces} forwards traced)")
    for note in result.notes:
        console.print(f"[yellow]note:[/yellow] {note}")


def print_disagg(result: Any, launch: dict, console: Console, launch_notes: Sequence[str] = ()) -> None:
    import shlex

    d = result.disagg
    pct = f"p{result.request.serving.ttft_percentile * 100:g}"
    rows = d.frontier or sorted(d.configs, key=lambda c: c.violation)[:5]
    title = ("disaggregated: Pareto frontier" if d.frontier else
             "disaggregated: no deployment meets the targets; the closest ones")
    table = Table(title=title)
    for column in ("xPyD", "prefill instance", "decode instance", "batch", "TBO", "speculative", "devices", "req/s",
                   f"TTFT {pct} ms", "KV ms", "TPOT ms", "tok/s/user", "tok/s/device", "decode tok/s/dev", ""):
        table.add_column(column, justify="left" if column in ("xPyD", "prefill instance", "decode instance",
                                                              "speculative") else "right", no_wrap=True)
    for c in rows:
        mark = "[bold red]best[/bold red]" if c is d.best else (f"[red]+{c.violation:.0%}[/red]" if c.violation else "")
        table.add_row(c.describe(), f"{c.prefill.layout.num_devices}: {c.prefill.describe()}",
                      f"{c.decode.layout.num_devices}: {c.decode.layout.describe()}", str(c.decode.batch),
                      "yes" if c.decode.two_batch_overlap else "no",
                      c.decode.spec.describe() if c.decode.spec else "off", str(c.num_devices), f"{c.rate:,.2f}",
                      f"{c.ttft_ms:.1f}", f"{c.prefill.transfer_ms:.2f}", f"{c.tpot_ms:.2f}",
                      f"{c.tokens_per_s_per_user:.1f}", f"{c.tokens_per_s_per_device:,.1f}",
                      f"{c.decode.tokens_per_s_per_device:,.1f}", mark)
    Console(file=console.file, width=max(console.width, 200), highlight=False).print(table)
    best_agg = result.best
    if result.request.mode == "both":
        side = Table(title="best aggregated vs best disaggregated")
        for column in ("", "deployment", "devices", "req/s", f"TTFT {pct} ms", "TPOT ms", "tok/s/user",
                       "tok/s/device"):
            side.add_column(column, justify="left" if column in ("", "deployment") else "right", no_wrap=True)
        if best_agg is not None:
            a = best_agg
            side.add_row("aggregated", f"{a.layout.describe()}, max running {a.batch}, "
                         f"{a.spec.describe() if a.spec else 'no spec'}", str(a.layout.num_devices),
                         f"{a.serving['request_rate']:,.2f}", f"{a.ttft_ms:.1f}", f"{a.tpot_ms:.2f}",
                         f"{a.tokens_per_s_per_user:.1f}", f"{a.tokens_per_s_per_device:,.1f}")
        if d.best is not None:
            b = d.best
            side.add_row("disaggregated", f"{b.describe()}: P {b.prefill.describe()}, D "
                         f"{b.decode.layout.describe()} batch {b.decode.batch}", str(b.num_devices), f"{b.rate:,.2f}",
                         f"{b.ttft_ms:.1f}", f"{b.tpot_ms:.2f}", f"{b.tokens_per_s_per_user:.1f}",
                         f"{b.tokens_per_s_per_device:,.1f}")
        Console(file=console.file, width=max(console.width, 140), highlight=False).print(side)
    for engine, commands in launch.items():
        console.print(f"[bold]{engine} (disaggregated)[/bold]: prefill x{d.best.prefill_instances}, decode "
                      f"x{d.best.decode_instances}, then the {'router' if engine == 'sglang' else 'example proxy'}:")
        for cmd in commands:
            console.print(shlex.join(cmd), markup=False, highlight=False, soft_wrap=True)
    for note in launch_notes:
        console.print(f"[yellow]note:[/yellow] {escape(note)}", soft_wrap=True)


def print_plan(result, launch: dict, plots: list[str], console: Console, launch_notes: Sequence[str] = ()) -> None:
    import shlex

    r = result.request
    slo = ", ".join(f"{name} <= {v:g} ms" for name, v in (("TTFT", r.ttft_slo_ms), ("TPOT", r.tpot_slo_ms)) if v)
    console.print(f"[bold]{r.model}[/bold] on {r.device} x {', '.join(map(str, r.num_devices))}; input {r.input_length}, "
                  f"output {r.output_length}; {slo or 'no latency targets'}")
    console.print(f"{result.evaluated} configurations in {result.sweep_s:.2f} s "
                  f"({result.evaluated / max(result.sweep_s, 1e-9) * 60:,.0f} per minute; "
                  f"{result.traces} forwards traced); {sum(c.fits for c in result.configs)} fit, "
                  f"{sum(c.fits and c.meets_slo for c in result.configs)} also meet the targets")
    if result.execution:
        from infercast.executor import Execution

        console.print(f"evaluated on: {Execution(**result.execution).describe()}", highlight=False)
    for note in result.notes:
        console.print(f"[yellow]note:[/yellow] {note}")
    rows = result.frontier or result.closest
    title = "Pareto frontier" if result.frontier else "no configuration meets the targets; the closest ones"
    table = Table(title=title)
    quant = len(r.quantizations) > 1
    served = any(c.serving for c in rows)  # aggregated serving: the rate, and TTFT at its percentile
    ttft = f"TTFT p{r.serving.ttft_percentile * 100:g} ms" if served else "TTFT ms"
    columns = ["devices: layout", *(["quant"] if quant else []), "batch", "speculative", "accept", "TPOT ms",
               ttft, *(["req/s"] if served else []), "tok/s/user", "tok/s/device", "GiB/dev", ""]
    for column in columns:
        table.add_column(column, justify="left" if column in ("devices: layout", "quant", "speculative") else "right",
                         no_wrap=True)
    for c in rows:
        mark = "[bold red]best[/bold red]" if c is result.best else (f"[red]+{c.violation:.0%}[/red]" if c.violation else "")
        table.add_row(f"{c.layout.num_devices}: {c.layout.describe()}", *([c.quantization or "checkpoint"] if quant else []),
                      str(c.batch), c.spec.describe() if c.spec else "off", f"{c.accept_length:.2f}",
                      f"{c.tpot_ms:.2f}", f"{c.ttft_ms:.1f}",
                      *([f"{c.serving['request_rate']:,.2f}" if c.serving else "-"] if served else []),
                      f"{c.tokens_per_s_per_user:.1f}",
                      f"{c.tokens_per_s_per_device:,.1f}", f"{c.memory_gib:.1f}", mark)
    Console(file=console.file, width=max(console.width, 140), highlight=False).print(table)
    if plots:
        console.print(f"plot: {', '.join(plots)}")
    for engine, cmd in launch.items():
        console.print(f"[bold]{engine}[/bold]:")
        console.print(shlex.join(cmd), markup=False, highlight=False, soft_wrap=True)
    for note in launch_notes:
        console.print(f"[yellow]note:[/yellow] {escape(note)}", soft_wrap=True)



def add_plan_arguments(p: argparse.ArgumentParser) -> None:
    from infercast.request import DEFAULT_DEVICE

    p.add_argument("model", help="hub id, alias, config.json or model directory")
    p.add_argument("--device", default=DEFAULT_DEVICE, help=f"device name (default {DEFAULT_DEVICE})")
    p.add_argument("--num-devices", default="8", help="device counts: a list (8,16) or a range (8-32) (default 8)")
    p.add_argument("--input-length", type=_int, default=1024, help="prompt tokens per request (default 1024)")
    p.add_argument("--output-length", type=_int, default=1024, help="output tokens per request (default 1024)")
    p.add_argument("--ttft-slo-ms", type=_float, default=None, help="time-to-first-token target")
    p.add_argument("--tpot-slo-ms", type=_float, default=None, help="time-per-output-token target")
    p.add_argument("--quantization", default="checkpoint",
                   help="comma-separated --quantize-linear-action choices to sweep (default: the checkpoint's)")
    p.add_argument("--batch-sizes", default=",".join(map(str, (1, 2, 4, 8, 16, 32, 64, 128, 256, 512))),
                   help="concurrent requests to sweep (default 1,2,4,...,512)")
    p.add_argument("--kv-cache-dtype", default="auto", help="auto (default: FP8 where the checkpoint states an FP8 "
                   "KV cache, as engines read it; else bf16), bf16, fp16 or fp8")
    p.add_argument("--num-mtp-tokens", type=_int, default=0,
                   help="sweep MTP with this many draft steps only (the family's own MTP layers)")
    p.add_argument("--speculative-grid", default=None,
                   help="speculative settings besides 'off': S-K-N triples or sS chains (default s1,s2,s3,s4,s5)")
    p.add_argument("--no-speculative", action="store_true",
                   help="sweep without speculative decoding (by default the model family's own options are swept: "
                        "an EAGLE3 draft or MTP layers, as its adapter offers them; `infercast models` lists them)")
    p.add_argument("--plot", default=None, metavar="PATH",
                   help="write the frontier plot to PATH.png and PATH.svg (a path stem, not a folder)")
    p.add_argument("--report", default=None, metavar="FILE.html",
                   help="write a self-contained HTML report: frontier (hover for launch commands), aggregated vs "
                        "disaggregated, op breakdown of the chosen configuration (needs plotly: infercast[report])")
    p.add_argument("--json", action="store_true", help="print the plan as JSON")
    g = p.add_argument_group("execution")
    g.add_argument("--executor", default=None, choices=("local", "serial", "ray"),
                   help="local: a process pool on this machine (default); serial: this process only; ray: Ray tasks "
                        "(needs infercast[ray])")
    g.add_argument("--workers", type=_int, default=None, metavar="N",
                   help="processes of the local pool, or CPUs of a local Ray runtime (default: all cores)")
    g.add_argument("--ray-address", default=None, metavar="ADDR",
                   help="run on the Ray cluster at ADDR (auto, HOST:PORT or ray://HOST:PORT); implies --executor ray")


def check_report_path(path: str) -> None:
    """Fail before the sweep when ``--report`` is not a writable .html file or plotly is missing."""
    import importlib.util

    if not path.lower().endswith((".html", ".htm")):
        raise InfercastError(f"--report {path}: give a file name ending in .html (a self-contained page)")
    check_writable(path)
    if importlib.util.find_spec("plotly") is None:
        from infercast.report_html import REPORT_INSTALL

        raise InfercastError(f"--report needs plotly, which is not installed: {REPORT_INSTALL}")


def _write(path: str, text: str) -> None:
    try:
        with open(path, "w", encoding="utf-8") as handle:
            handle.write(text)
    except OSError as exc:
        raise InfercastError(f"cannot write {path}: {exc.strerror or exc}") from exc


def _float(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None


def _int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    return value


def _count(text: str) -> int:
    value = _int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"{text!r} is negative; give 0 (none) or more")
    return value


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
    p = sub.add_parser("devices", help="list device profiles")
    p.add_argument("--json", action="store_true", help="print JSON, efficiency sources included")
    p.set_defaults(handler=_cmd_devices)
    p = sub.add_parser("simulate", help="simulate one serving step (default: the adapters' default model on "
                                        "8 x H200, TP8, decode)")
    add_request_arguments(p)
    g = p.add_argument_group("output")
    g.add_argument("--json", action="store_true", help="print the result as JSON (schema: docs/simulate.md)")
    g.add_argument("--output-json", metavar="FILE", help="also write the JSON result to FILE")
    g.add_argument("--chrome-trace", metavar="FILE", help="write one step as a Chrome trace (open in Perfetto)")
    g.add_argument("--show-ops", type=_count, default=10, metavar="N",
                   help="operators in the summary table (default 10; 0: none)")
    g.add_argument("--from-ir", metavar="FILE.json", default=None,
                   help="price a pytorch-ir graph (infercast export's, or any) instead of the model's engine view; "
                        "uses --device and the cost-model flags (docs/simulate.md)")
    p.set_defaults(handler=_cmd_simulate)
    p = sub.add_parser("export", help="export the real forward as static prefill and decode graphs with pytorch-ir "
                                      "(needs the ir extra)")
    from infercast.export.cli import add_export_arguments

    add_export_arguments(p)
    p.set_defaults(handler=_cmd_export)
    p = sub.add_parser("plan", help="sweep layouts, batch sizes and speculative settings; Pareto frontier, plot, "
                                    "launch command")
    add_plan_arguments(p)
    add_serving_arguments(p)
    add_request_arguments(p, only=[f for f in SPEC_FIELDS if f not in GRID_FIELDS] + list(COST_FIELDS + MEMORY_FIELDS))
    p.set_defaults(handler=_cmd_plan)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv:
        argv = ["simulate"]  # no command and no flags: the documented default simulation
    args = parser.parse_args(argv)
    console = Console()
    if not console.is_terminal:  # piped: rich would wrap at 80 columns, mid-word in narrow cells
        console = Console(width=PIPED_WIDTH)
    if args.command is None:
        parser.print_help()
        return 0
    try:
        return args.handler(args, console)
    except InfercastError as exc:
        from infercast.request import FieldError, flag_of

        message = exc.render(flag_of) if isinstance(exc, FieldError) else str(exc)
        Console(stderr=True).print(f"[bold red]error:[/bold red] {escape(message)}", highlight=False, markup=True,
                                   soft_wrap=True)
        return EXIT_USAGE
    finally:
        if args.command != "plugins":
            _warn_about_skipped_plugins()


def console_main() -> int:
    """The ``infercast`` command: :func:`main`, then a shutdown without the final garbage collection.

    By exit everything a command built (torch's operator registry, the traced model) is garbage, and
    collecting it costs about 0.15 s of a 1.3 s answer; ``gc.freeze`` leaves it to the operating
    system. The usual teardown still runs (atexit handlers, threads joined, files flushed).
    Library callers and tests use :func:`main`, which leaves the collector alone (pytest splits its
    ``console_main`` from ``main`` the same way).
    """
    try:
        return main()
    finally:
        gc.freeze()


if __name__ == "__main__":
    sys.exit(console_main())
