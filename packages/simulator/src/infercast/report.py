"""Human-readable summary of a simulation (rich)."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table

from infercast.simulate import SimResult


def print_summary(result: SimResult, console: Console, *, show_ops: int = 10) -> None:
    p = result.parallel
    w = result.workload
    console.print(
        f"[bold]{result.model}[/bold] ({result.model_type}, {result.parameters_billion:.2f} B parameters) on "
        f"{result.num_devices} x {result.device}: TP{p['tp']} DP{p['dp']} EP{p['ep']}"
        f"{' +TBO' if p['two_batch_overlap'] else ''}; {result.quantization}; KV {result.kv_cache_dtype}"
    )
    console.print(
        f"{result.phase} step: {w['num_queries']} requests x {w['query_length']} new tokens on "
        f"{w['context_length']} cached ({w['tokens_per_rank']} tokens per rank)"
    )
    if result.images:
        im = result.images
        where = (f"encoded this step ({im['encoded_per_rank']} per rank, vision tower {im['vision_ms']:.3f} ms)"
                 if result.phase == "prefill" else "already in the KV cache")
        console.print(
            f"images: {im['per_request']} per request, {im['width']}x{im['height']} px -> {im['grid'][1]}x{im['grid'][0]} "
            f"patches, {im['tokens_per_image']} tokens each; {where}"
        )
    spec = result.speculative
    if spec:
        draft = spec["draft_model"] or spec["draft_architecture"]
        console.print(
            f"speculative: {spec['algorithm']} with {draft} ({spec['draft_quantization']}), steps {spec['num_steps']}, "
            f"topk {spec['topk']}, "
            f"{spec['num_draft_tokens']} draft tokens; accept length {spec['accept_length']:.3f} ({spec['acceptance']})"
        )
        forwards = ", ".join(f"{f['name']} {f['count']} x {f['ms_each']:.3f} ms ({f['tokens_per_request']} tok/req)"
                             for f in spec["forwards"])
        console.print(f"cycle {spec['cycle_ms']:.3f} ms = {forwards}")
    summary = Table(show_header=False, box=None)
    summary.add_row("cycle latency" if spec else "step latency", f"{result.step_latency_ms:.3f} ms")
    if result.tpot_ms is not None:
        summary.add_row("TPOT", f"{result.tpot_ms:.3f} ms")
    if result.ttft_ms is not None:
        summary.add_row("TTFT", f"{result.ttft_ms:.3f} ms")
    if spec:
        summary.add_row("without speculation", f"TPOT {spec['baseline_tpot_ms']:.3f} ms, "
                        f"{spec['baseline_throughput_tokens_per_s_per_device']:,.1f} tokens/s per device")
        summary.add_row("speedup", f"{spec['speedup']:.2f}x")
    kind = "output" if result.phase == "decode" else "prompt"
    summary.add_row(f"{kind} tokens/s per device", f"{result.throughput_tokens_per_s_per_device:,.1f}")
    summary.add_row("compute / communication", f"{result.compute_ms:.3f} ms / {result.communication_ms:.3f} ms"
                    f" ({result.kernel_count} kernels)")
    m = result.memory_gib
    summary.add_row("memory per device", f"weights {m['weights']:.2f} + KV {m['kv_cache']:.3f} + activations "
                    f"{m['activations']:.3f} = {m['total']:.2f} GiB of {m['capacity']:.1f} usable")
    summary.add_row("fits", ("yes" if result.feasible else "[red]NO[/red]") + f"; up to {result.max_num_queries} "
                    f"requests at this context")
    if result.routing_assumption:
        summary.add_row("MoE routing", result.routing_assumption)
    cm = result.cost_model
    if cm:
        share = cm["measured_share"]
        summary.add_row("priced by", f"{cm['sources']}; engine {cm['engine']}"
                        f"{' ' + cm['engine_version'] if cm.get('engine_version') else ''}, "
                        f"{'piecewise CUDA graphs' if cm.get('piecewise') else 'CUDA graph' if cm['cuda_graph'] else 'eager launches'}")
        summary.add_row("from measurements", f"{share['measured'] + share['interpolated']:.0%} of the time "
                        f"(measured {share['measured']:.0%}, interpolated {share['interpolated']:.0%}; "
                        f"extrapolated {share['extrapolated']:.0%}, analytic {share['analytic']:.0%}, "
                        f"engine host {share['engine']:.0%})")
    console.print(summary)
    for note in result.notes:
        console.print(f"[yellow]note:[/yellow] {note}")
    if show_ops > 0:
        table = Table(title=f"top {min(show_ops, len(result.ops))} operators")
        for column, justify in (("op (module)", "left"), ("count", "right"), ("total ms", "right"),
                                ("share", "right"), ("bound", "left"), ("source", "left"), ("from", "left")):
            table.add_column(column, justify=justify, overflow="fold")
        for row in result.ops[:show_ops]:
            table.add_row(row.name, str(row.count), f"{row.total_ms:.3f}", f"{row.share:.1%}", row.bound, row.source,
                          row.origin)
        console.print(table)
    console.print(f"simulated in {result.simulation_wall_s:.2f} s")
