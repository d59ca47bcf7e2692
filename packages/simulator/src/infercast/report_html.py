"""``infercast plan --report FILE.html``: the plan as one self-contained page (plotly.js
inline, so it opens offline).

Sections: the request and every assumption behind the numbers; the Pareto frontier over
every configuration that fits (hover shows the configuration and its launch command);
aggregated against disaggregated serving (``--mode both``: each side's points and frontier,
their best side by side with launch commands); the op breakdown of the chosen configuration's
decode step, re-simulated with :func:`infercast.simulate.simulate` so its rows are those of
``infercast simulate --show-ops``.
"""

from __future__ import annotations

import html
import shlex
import textwrap
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from infercast_adapters import InfercastError

FIGURES = ("frontier", "modes", "ops")
"""The ids of the page's plot divs, in page order."""
REPORT_INSTALL = "pip install 'infercast[report]' (or pip install plotly)"
COLORS = {"agg": "#1f5fa8", "disagg": "#2ca02c"}
MODE_NAMES = {"agg": "aggregated", "disagg": "disaggregated"}
SPEC_COLORS = {False: "#9aa5b1", True: "#f0b37e"}


def is_disagg(config: Any) -> bool:
    """True for a disaggregated deployment (:class:`infercast.disagg.DisaggConfig`)."""
    return hasattr(config, "prefill_instances")


def describe(config: Any) -> str:
    """One line naming a configuration: layout, quantization, batch, speculation; a
    disaggregated deployment: xPyD and both instances."""
    if is_disagg(config):
        p, d = config.prefill, config.decode
        return (f"{config.describe()}: prefill {p.layout.num_devices} x {p.describe()} (chunk {p.chunk}), "
                f"decode {describe(d)}{', TBO' if d.two_batch_overlap else ''}")
    spec = config.spec.describe() if config.spec else "no speculation"
    quant = f", {config.quantization}" if config.quantization else ""
    return f"{config.layout.num_devices} x {config.layout.describe()}{quant}, batch {config.batch}, {spec}"


# ------------------------------------------------------------------------------ the op breakdown


@dataclass
class Breakdown:
    """The chosen configuration's decode step (or speculative cycle) as ``simulate`` prices it."""

    config: Any
    command: str
    """The ``infercast simulate`` command line that gives the same rows."""
    step_ms: float
    tpot_ms: float
    rows: list[Any]
    kinds: dict[str, float] = field(default_factory=dict)
    """Milliseconds per op kind (``op`` or ``forward: op`` in a speculative cycle; ``host``)."""
    acceptance: str = ""
    """Where the accept length of a speculative configuration comes from."""
    what: str = "the chosen configuration"
    sweep_tpot_ms: float = 0.0
    """The sweep's TPOT of the same decode step (:func:`decode_step_tpot_ms`)."""


def spec_of(planner: Any, config: Any) -> Any:
    """The resolved speculative setup ``config`` runs (draft, acceptance), None without one."""
    if config.spec is None:
        return None
    return planner.spec_for(config)


def simulate_input(request: Any, config: Any, spec: Any = None) -> Any:
    """The :class:`~infercast.request.UserInput` of ``config``'s decode step at the planner's
    context (input + half the output); ``spec`` (:func:`spec_of`) gives the speculative
    setup, its acceptance passed as the accept length the planner resolved at this setting.
    ``config`` is a plan configuration or a disaggregated decode instance (its two-batch
    overlap included)."""
    from infercast.request import UserInput

    layout = config.layout
    user = UserInput(
        model=request.model, device=request.device, num_devices=layout.num_devices, tp_size=layout.tp,
        dp_size=layout.dp, ep_size=layout.ep, ep_num_redundant_experts=layout.redundant_experts,
        num_queries=config.batch,
        context_length=request.input_length + request.output_length // 2, decode=True,
        quantize_linear_action=config.quantization, kv_cache_dtype=request.kv_cache_dtype, engine=request.engine,
        engine_version=request.engine_version, calibration=request.calibration, cost_model=request.cost_model,
        expert_imbalance=request.expert_imbalance, prefill_cuda_graph=request.prefill_cuda_graph,
        prefill_cuda_graph_max_tokens=request.prefill_cuda_graph_max_tokens,
        all_reduce_fusion=request.all_reduce_fusion, overlap_scheduling=request.overlap_scheduling,
        moe_kernel=request.moe_kernel, moe_all_to_all=request.moe_all_to_all,
        mem_fraction_static=request.mem_fraction_static, max_total_tokens=request.max_total_tokens,
        two_batch_overlap=getattr(config, "two_batch_overlap", False))
    if config.spec is not None and spec is not None:
        user = replace(user, speculative_algorithm=spec.algorithm, speculative_draft_model=spec.draft_model,
                       speculative_num_steps=config.spec.num_steps, speculative_eagle_topk=config.spec.topk,
                       speculative_num_draft_tokens=config.spec.num_draft_tokens,
                       accept_length=float(f"{config.accept_length:.12g}"))  # printable, same to 1e-12
    return user


def command_line(user: Any) -> str:
    """``infercast simulate ...`` with every field that differs from its default."""
    from infercast.request import UserInput, flag_of

    argv = ["infercast", "simulate", user.model]
    for f in fields(UserInput):
        value = getattr(user, f.name)
        if f.metadata["positional"] or value == f.default:
            continue
        argv += [flag_of(f.name)] if value is True else [flag_of(f.name), str(value)]
    return shlex.join(argv)


def op_kind(row: Any) -> str:
    """``gemm (verify.layers.*.mlp)`` -> ``verify: gemm``; plain decode ``gemm``; host rows ``host``."""
    if row.source == "engine":
        return "host"
    op, _, rest = row.name.partition(" (")
    stage = rest.split(".", 1)[0]
    return f"{stage}: {op}" if stage in ("draft", "verify", "extend") else op


def decode_step_tpot_ms(planner: Any, config: Any) -> float:
    """The sweep's TPOT of ``config``'s decode step alone at its batch, what ``simulate``
    prices: under a serving mode the configuration's TPOT also carries the prompt chunks that
    share its steps, so the plain step is looked up (priced once, cached by the planner)."""
    if not getattr(config, "serving", None):  # the static view, or a disaggregated decode instance
        return config.tpot_ms
    return planner.pricer.static(config.layout, config.quantization, config.batch, config.spec).tpot_ms


def chosen(result: Any) -> tuple[Any, str]:
    """The configuration the breakdown shows and what it is: the chosen aggregated one, the
    decode instance of the chosen disaggregated deployment, or the closest of either."""
    disagg = getattr(result, "disagg", None)
    if result.best is not None:
        return result.best, "the chosen configuration"
    if disagg is not None and disagg.best is not None:
        return disagg.best.decode, f"the decode instance of the chosen deployment ({disagg.best.describe()})"
    if result.closest:
        return result.closest[0], "the closest configuration"
    if disagg is not None and disagg.configs:
        closest = min(disagg.configs, key=lambda c: c.violation)
        return closest.decode, f"the decode instance of the closest deployment ({closest.describe()})"
    return None, ""


def nothing_to_break_down(result: Any) -> str:
    """Why the page has no breakdown, when nothing failed."""
    disagg = getattr(result, "disagg", None)
    if disagg is not None and not disagg.configs and not result.configs:
        return ("No disaggregated deployment could be balanced: no prefill instance serves a positive rate within "
                "the TTFT target, or no decode instance fits; so there is nothing to break down.")
    return "No configuration fits, so there is none to break down."


def breakdown(result: Any, planner: Any) -> Breakdown | None:
    """Re-simulate the decode step of the chosen configuration (the decode instance of a
    disaggregated deployment; the closest configuration when none meets the targets)."""
    from infercast.simulate import simulate

    config, what = chosen(result)
    if config is None:
        return None
    spec = spec_of(planner, config)
    user = simulate_input(result.request, config, spec)
    sim = simulate(user, manager=planner.manager)
    kinds: dict[str, float] = defaultdict(float)
    for row in sim.ops:
        kinds[op_kind(row)] += row.total_ms
    ordered = dict(sorted(kinds.items(), key=lambda kv: kv[1], reverse=True))
    return Breakdown(config, command_line(user) + " --show-ops 20", sim.step_latency_ms, sim.tpot_ms, sim.ops,
                     ordered, spec.acceptance if spec is not None else "", what,
                     decode_step_tpot_ms(planner, config))


# ------------------------------------------------------------------------------ figures


def _wrap(text: str, width: int = 96) -> str:
    return "<br>".join(html.escape(line) for line in textwrap.wrap(text, width, break_on_hyphens=False))


def launch_of(planner: Any, config: Any) -> dict[str, list[list[str]]]:
    """Launch commands by engine: one command for an aggregated configuration; prefill server,
    decode server and router (or proxy) for a disaggregated deployment."""
    if is_disagg(config):
        from infercast.disagg import launch_commands as disagg_commands

        return disagg_commands(planner, config)
    return {engine: [cmd] for engine, cmd in planner.commands_for(config).items()}


def _hover(config: Any, request: Any, planner: Any) -> str:
    engine, commands = next(iter(launch_of(planner, config).items()))
    if is_disagg(config):
        d = config.decode
        return "<br>".join([
            f"<b>{_wrap(describe(config))}</b>",
            f"{config.num_devices} devices, {config.rate:,.2f} requests/s; TPOT {config.tpot_ms:.2f} ms, TTFT "
            f"{config.ttft_ms:.1f} ms (KV transfer {config.prefill.transfer_ms:.2f} ms), accept length "
            f"{d.accept_length:.2f}",
            f"{config.tokens_per_s_per_device:,.1f} tok/s/device of the deployment "
            f"({d.tokens_per_s_per_device:,.1f} per decode device), {config.tokens_per_s_per_user:.1f} tok/s/user",
            "meets the targets" if config.meets_slo else f"misses the targets by {config.violation:.0%}",
            *(f"{engine} {role}: " + _wrap(shlex.join(cmd)) for role, cmd in zip(("prefill", "decode"), commands))])
    cmd = commands[0]
    lines = [f"<b>{html.escape(describe(config))}</b>",
             f"TPOT {config.tpot_ms:.2f} ms, TTFT {config.ttft_ms:.1f} ms, accept length {config.accept_length:.2f}",
             f"{config.tokens_per_s_per_device:,.1f} tok/s/device, {config.tokens_per_s_per_user:.1f} tok/s/user, "
             f"{config.memory_gib:.1f} GiB/device",
             "meets the targets" if config.meets_slo else f"misses the targets by {config.violation:.0%}",
             f"{engine}: " + _wrap(shlex.join(cmd))]
    return "<br>".join(lines)


def _scatter(configs: list[Any], name: str, hover: Callable[[Any], str], **style: Any) -> Any:
    import plotly.graph_objects as go

    return go.Scatter(x=[c.tokens_per_s_per_user for c in configs], y=[c.tokens_per_s_per_device for c in configs],
                      name=f"{name} ({len(configs)})", hovertext=[hover(c) for c in configs],
                      hovertemplate="%{hovertext}<extra></extra>", **style)


def _axes(fig: Any, request: Any, title: str, configs: list[Any]) -> None:
    """Log axes, title, and the TPOT target as a dashed line (a line trace: shapes misplace on log axes)."""
    import plotly.graph_objects as go

    fig.update_layout(title=dict(text=title, font=dict(size=14)), template="plotly_white", height=560,
                      hoverlabel=dict(align="left", font=dict(family="monospace", size=11)),
                      legend=dict(orientation="h", y=-0.18), margin=dict(l=70, r=30, t=60, b=40))
    fig.update_xaxes(type="log", title="output tokens/s per user (1000 / TPOT ms)")
    fig.update_yaxes(type="log", title="output tokens/s per device")
    if request.tpot_slo_ms and configs:
        ys = [c.tokens_per_s_per_device for c in configs]
        x = 1e3 / request.tpot_slo_ms
        fig.add_trace(go.Scatter(x=[x, x], y=[min(ys) / 1.3, max(ys) * 1.3], mode="lines", hoverinfo="skip",
                                 line=dict(dash="dash", color="#555", width=1),
                                 name=f"TPOT target {request.tpot_slo_ms:g} ms"))


def frontier_figure(result: Any, hover: Callable[[Any], str]) -> Any:
    """Every configuration of the grid that fits (by speculation), the frontier, the chosen
    point. Markers drawn: fits + frontier + 1 for the chosen point."""
    import plotly.graph_objects as go

    r = result.request
    fig = go.Figure()
    fits = [c for c in result.configs if c.fits]
    for speculative in (False, True):
        group = [c for c in fits if (c.spec is not None) == speculative]
        if group:
            fig.add_trace(_scatter(group, "fits, speculative" if speculative else "fits, no speculation", hover,
                                   mode="markers", marker=dict(size=7, color=SPEC_COLORS[speculative],
                                                               symbol="triangle-up" if speculative else "circle")))
    frontier = sorted(result.frontier, key=lambda c: c.tokens_per_s_per_user)
    if frontier:
        fig.add_trace(_scatter(frontier, "Pareto frontier (fits and meets the targets)", hover, mode="lines+markers",
                               line=dict(color="#1f5fa8"), marker=dict(size=8, color="#1f5fa8")))
    if result.best is not None:
        fig.add_trace(_scatter([result.best], "chosen", hover, mode="markers",
                               marker=dict(size=18, symbol="star", color="#d62728", line=dict(width=1, color="#fff"))))
    _axes(fig, r, f"{r.model} on {r.device} x {', '.join(map(str, r.num_devices))}: input {r.input_length}, "
                  f"output {r.output_length}", fits)
    return fig


def modes_figure(result: Any, hover: Callable[[Any], str]) -> Any:
    """Aggregated against disaggregated: each side's points (aggregated: those that fit;
    disaggregated: every deployment balanced), its own frontier, and its best as a star.
    Markers drawn: the points + the frontiers + one per best."""
    import plotly.graph_objects as go

    sides = {"agg": ([c for c in result.configs if c.fits], result.frontier, result.best)}
    if result.disagg is not None:
        d = result.disagg
        sides["disagg"] = (d.configs, d.frontier, d.best)
    fig = go.Figure()
    shown = []
    for mode, (points, frontier, best) in sides.items():
        if not points:
            continue
        color, name = COLORS[mode], MODE_NAMES[mode]
        shown += points
        fig.add_trace(_scatter(points, f"{name}: fits" if mode == "agg" else f"{name}: deployments", hover,
                               mode="markers", marker=dict(size=6, color=color, opacity=0.35)))
        if frontier:
            fig.add_trace(_scatter(sorted(frontier, key=lambda c: c.tokens_per_s_per_user), f"{name}: frontier",
                                   hover, mode="lines+markers", line=dict(color=color, width=2),
                                   marker=dict(size=8, color=color)))
        if best is not None:
            fig.add_trace(_scatter([best], f"{name}: best", hover, mode="markers", marker=dict(
                size=16, symbol="star", color=color, line=dict(width=1, color="#fff"))))
    _axes(fig, result.request, "aggregated against disaggregated serving (tokens/s per device of the whole "
                               "deployment)", shown)
    return fig


def ops_figure(found: Breakdown) -> Any:
    import plotly.graph_objects as go

    kinds = list(found.kinds.items())[::-1]  # largest at the top
    total = sum(found.kinds.values())
    fig = go.Figure(go.Bar(x=[ms for _, ms in kinds], y=[k for k, _ in kinds], orientation="h",
                           marker_color="#1f5fa8", name="ms per step",
                           hovertemplate="%{y}: %{x:.3f} ms (%{customdata:.1%})<extra></extra>",
                           customdata=[ms / total if total else 0.0 for _, ms in kinds]))
    fig.update_layout(template="plotly_white", height=max(300, 26 * len(kinds) + 120),
                      title=dict(text=f"time per op kind, {describe(found.config)}", font=dict(size=14)),
                      margin=dict(l=220, r=30, t=60, b=40), xaxis_title="ms per decode step or speculative cycle (kernels back to back, host rows)")
    return fig


# ------------------------------------------------------------------------------ the page


CSS = """
body { font: 14px/1.45 system-ui, sans-serif; margin: 24px auto; max-width: 1200px; color: #222; padding: 0 16px; }
h1 { font-size: 22px; } h2 { font-size: 18px; margin-top: 32px; border-bottom: 1px solid #ddd; }
table { border-collapse: collapse; font-size: 13px; } td, th { padding: 3px 8px; border-bottom: 1px solid #eee; }
th { text-align: left; background: #f6f6f6; } td.n { text-align: right; font-variant-numeric: tabular-nums; }
code, pre { font-size: 12px; background: #f6f8fa; } pre { padding: 8px; white-space: pre-wrap; word-break: break-all; }
.note { color: #7a5b00; } .best { font-weight: 600; color: #b00; }
"""


def _slot(name: str) -> str:
    return f"<!--infercast-figure:{name}-->"


def _table(headers: list[str], rows: list[list[str]], numeric: set[int] = frozenset()) -> str:
    head = "".join(f"<th>{html.escape(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td class=\"n\">{cell}</td>" if i in numeric else f"<td>{cell}</td>"
                                    for i, cell in enumerate(row)) + "</tr>" for row in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _config_rows(configs: list[Any], result: Any, planner: Any) -> list[list[str]]:
    """Table rows; a disaggregated deployment's accept length and memory are its decode
    instance's, its launch commands the prefill server, the decode server and the router."""
    disagg = result.disagg.best if result.disagg is not None else None
    rows = []
    for c in configs:
        engine, commands = next(iter(launch_of(planner, c).items()))
        own = c.decode if is_disagg(c) else c
        mark = "<span class=\"best\">chosen</span>" if c is result.best or c is disagg else (
            f"+{c.violation:.0%}" if c.violation else "")
        rows.append([html.escape(describe(c)), f"{own.accept_length:.2f}", f"{c.tpot_ms:.2f}", f"{c.ttft_ms:.1f}",
                     f"{c.tokens_per_s_per_user:.1f}", f"{c.tokens_per_s_per_device:,.1f}", f"{own.memory_gib:.1f}",
                     mark, "<br>".join(f"<code>{html.escape(engine)}: {html.escape(shlex.join(cmd))}</code>"
                                       for cmd in commands)])
    return rows


CONFIG_HEADERS = ["configuration", "accept", "TPOT ms", "TTFT ms", "tok/s/user", "tok/s/device", "GiB/dev", "",
                  "launch commands"]


def _counts(result: Any) -> list[str]:
    """What the sweep found, per serving side it planned."""
    counts = []
    if result.request.mode != "disagg":
        fits = [c for c in result.configs if c.fits]
        counts.append(f"{len(result.configs)} {'aggregated' if result.request.mode != 'static' else 'static'} "
                      f"configurations, {len(fits)} fit, {sum(c.meets_slo for c in fits)} also meet the targets")
    if result.disagg is not None:
        d = result.disagg
        counts.append(f"{len(d.configs)} disaggregated deployments balanced, {sum(c.meets_slo for c in d.configs)} "
                      "meet the targets")
    return counts


def launch_notes_of(planner: Any, config: Any) -> list[str]:
    """What the launch commands cannot say with a flag (:func:`infercast.plan.launch_notes`)."""
    if is_disagg(config):
        from infercast.disagg import launch_notes as disagg_notes

        return disagg_notes(planner, config)
    return planner.notes_for(config)


def _launch_block(planner: Any, config: Any) -> str:
    notes = "".join(f"<li>{html.escape(note)}</li>" for note in launch_notes_of(planner, config))
    return ("<pre>" + html.escape("\n\n".join(f"{engine}:\n" + "\n".join(shlex.join(cmd) for cmd in commands)
                                               for engine, commands in launch_of(planner, config).items())) + "</pre>"
            + (f"<ul class='notes'>{notes}</ul>" if notes else ""))


def render(result: Any, planner: Any, found: Breakdown | None = None, why_none: str = "") -> str:
    """The page for ``result``; ``found`` is the op breakdown (:func:`breakdown`), or None
    (``why_none`` says why, when it is not that nothing fits)."""
    import plotly.offline

    r = result.request
    fits = [c for c in result.configs if c.fits]
    disagg = result.disagg
    texts: dict[int, str] = {}

    def hover(config: Any) -> str:
        if id(config) not in texts:
            texts[id(config)] = _hover(config, r, planner)
        return texts[id(config)]

    kv = r.kv_cache_dtype
    if kv == "auto" and hasattr(planner, "kv_cache_dtype"):  # what auto resolved to, for the first quantization
        kv = f"auto ({planner.kv_cache_dtype(planner.quantizations[0])})"
    parts = [f"<h1>infercast plan: {html.escape(r.model)} on {html.escape(r.device)}</h1>"]
    slo = ", ".join(f"{name} &le; {v:g} ms" for name, v in (("TTFT", r.ttft_slo_ms), ("TPOT", r.tpot_slo_ms)) if v)
    rate = result.evaluated / max(result.sweep_s, 1e-9) * 60
    parts.append(
        f"<p>{html.escape(', '.join(map(str, r.num_devices)))} devices; input {r.input_length}, output "
        f"{r.output_length} tokens; {slo or 'no latency targets'}; engine {html.escape(r.engine)}"
        f"{' ' + html.escape(r.engine_version) if r.engine_version else ''}; KV cache {html.escape(kv)}."
        f"<br>{result.evaluated} configurations in {result.sweep_s:.2f} s ({rate:,.0f} per minute; {result.traces} "
        f"forwards traced): {'; '.join(_counts(result))}.</p>")
    if result.execution:
        from infercast.executor import Execution

        parts.append(f"<p>Evaluated on: {html.escape(Execution(**result.execution).describe())}.</p>")
    parts.append("<ul>" + "".join(f"<li class=\"note\">{html.escape(n)}</li>" for n in result.notes) + "</ul>")

    figures: dict[str, Any] = {}
    parts.append("<h2>Pareto frontier</h2>")
    if r.mode == "disagg":
        parts.append("<p>Aggregated serving was not planned (<code>--mode disagg</code>): the disaggregated "
                     "deployments are in the next section.</p>")
    elif fits:
        figures["frontier"] = frontier_figure(result, hover)
        parts.append("<p>Every configuration that fits in device memory; hover a point for its configuration and "
                     "launch command. The frontier keeps what also meets the targets and no other point beats on "
                     "both axes.</p>" + _slot("frontier"))
    else:
        parts.append("<p>No configuration fits in device memory.</p>")
    if result.best is not None:
        parts.append("<h3>chosen configuration</h3>" + _launch_block(planner, result.best))
    rows = result.frontier or result.closest
    if rows:
        parts.append("<h3>" + ("frontier" if result.frontier else "no configuration meets the targets; the closest "
                               "ones") + "</h3>")
        parts.append(_table(CONFIG_HEADERS, _config_rows(rows, result, planner), {1, 2, 3, 4, 5, 6}))

    parts.append("<h2>Aggregated against disaggregated serving</h2>")
    if disagg is None:
        parts.append(f"<p>This plan holds {MODE_NAMES['agg'] if r.mode != 'static' else 'static'} configurations "
                     "only (<code>--mode both</code> plans both): nothing to compare.</p>")
    elif disagg.configs or fits:
        figures["modes"] = modes_figure(result, hover)
        parts.append("<p>Throughput per device counts every device of a deployment: a disaggregated one's prefill "
                     "and decode instances together. Hover a point for its configuration and launch commands."
                     + ("" if disagg.configs else " No disaggregated deployment could be balanced (no prefill "
                        "instance serves a positive rate within the TTFT target, or no decode instance fits): "
                        "the figure holds the aggregated side alone.")
                     + "</p>" + _slot("modes"))
        best = [c for c in (result.best, disagg.best) if c is not None]
        if best:
            parts.append("<p>The best of each side (most tokens/s per device that meets the targets):</p>"
                         + _table(CONFIG_HEADERS, _config_rows(best, result, planner), {1, 2, 3, 4, 5, 6}))
        if disagg.best is not None:
            parts.append("<h3>chosen disaggregated deployment</h3>" + _launch_block(planner, disagg.best))
        elif disagg.configs:
            closest = sorted(disagg.configs, key=lambda c: c.violation)[:5]
            parts.append("<h3>no disaggregated deployment meets the targets; the closest ones</h3>"
                         + _table(CONFIG_HEADERS, _config_rows(closest, result, planner), {1, 2, 3, 4, 5, 6}))
    else:
        parts.append("<p>No disaggregated deployment could be balanced.</p>")

    parts.append("<h2>Op breakdown of the chosen configuration</h2>")
    if found is None:
        parts.append(f"<p>{html.escape(why_none or nothing_to_break_down(result))}</p>")
    else:
        figures["ops"] = ops_figure(found)
        drift = found.tpot_ms / found.sweep_tpot_ms - 1 if found.sweep_tpot_ms else 0.0
        serving = getattr(found.config, "serving", None)
        step = f"its decode step at batch {found.config.batch}"
        loaded = ""
        if serving:
            step = f"its decode step at the running-request limit of {found.config.batch} requests"
            running = serving.get("decode_batch")
            loaded = ("; under the plan's load " + (f"about {running:.1f} requests decode in a step on average and "
                                                     if running is not None else "the queue does not drain and ")
                      + ("prompt steps run between the decode steps" if serving.get("policy") == "separate"
                         else "prompt chunks share the steps") + f": TPOT {found.config.tpot_ms:.3f} ms")
        parts.append(
            f"<p>{html.escape(found.what)}, {html.escape(describe(found.config))}: {step}, alone, "
            f"re-simulated: step {found.step_ms:.3f} ms, TPOT {found.tpot_ms:.3f} ms (the sweep's "
            f"{found.sweep_tpot_ms:.3f} ms{'' if abs(drift) < 0.01 else f', {drift:+.1%}'}{loaded})"
            f"{'; acceptance: ' + html.escape(found.acceptance) if found.acceptance else ''}. Same rows as:</p>"
            f"<pre>{html.escape(found.command)}"
            "</pre>" + _slot("ops"))
        parts.append(_table(["op (module)", "count", "total ms", "share", "bound", "source"],
                            [[html.escape(row.name), str(row.count), f"{row.total_ms:.3f}", f"{row.share:.1%}",
                              html.escape(row.bound), html.escape(row.source)] for row in found.rows[:20]],
                            {1, 2, 3}))

    divs = {name: fig.to_html(full_html=False, include_plotlyjs=False, div_id=name,
                              default_height=f"{fig.layout.height}px", config={"displaylogo": False})
            for name, fig in figures.items()}
    body = "\n".join(parts)
    for name in FIGURES:
        body = body.replace(_slot(name), divs.get(name, ""))
    title = html.escape(f"infercast plan: {r.model} on {r.device}")
    return (f"<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>{title}</title>"
            f"<style>{CSS}</style><script type=\"text/javascript\">{plotly.offline.get_plotlyjs()}</script></head>"
            f"<body>\n{body}\n</body></html>\n")


def write_report(result: Any, planner: Any, path: str) -> int:
    """Write the page to ``path``; returns its size in bytes."""
    try:
        found, why_none = breakdown(result, planner), ""
    except InfercastError as exc:  # the page still shows the sweep, and why the breakdown is missing
        found, why_none = None, f"The chosen configuration could not be re-simulated: {exc}"
    text = render(result, planner, found, why_none)
    try:
        Path(path).write_text(text, encoding="utf-8")
    except OSError as exc:
        raise InfercastError(f"cannot write --report {path}: {exc.strerror or exc}") from exc
    return len(text.encode())
