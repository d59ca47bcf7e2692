"""``infercast plan --report``: the page's content, the op breakdown it re-simulates, and the page
rendered for real in headless Chromium (the points plotly drew, counted in the DOM)."""

from __future__ import annotations

import html.parser
import json
import os
import re
import shutil
import subprocess
from dataclasses import replace
from pathlib import Path

import pytest

from infercast.cli import build_parser, main
from infercast.plan import Planner
from infercast.report_html import (
    _launch_block,
    breakdown,
    launch_notes_of,
    op_kind,
    render,
    simulate_input,
    spec_of,
    write_report,
)
from infercast.request import UserInput

from .test_plan import SMALL

ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS = Path(os.environ.get("INFERCAST_TEST_ARTIFACTS", ROOT / "test-artifacts"))
REQUIRE_BROWSER = "INFERCAST_REQUIRE_BROWSER"
CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync",
                  "--hide-scrollbars", "--virtual-time-budget=10000"]

REQUEST = SMALL
"""Llama-3.1-8B on 1 and 2 H100s, six batches (1,024 requests do not fit one GPU), EAGLE3 chains;
aggregated serving (the default mode)."""


@pytest.fixture(scope="module")
def planned():
    planner = Planner(REQUEST)
    result = planner.run()
    assert result.best is not None and any(not c.fits for c in result.configs)  # something to leave out
    return planner, result, breakdown(result, planner)


@pytest.fixture(scope="module")
def planned_both():
    planner = Planner(replace(REQUEST, mode="both"))
    result = planner.run()
    assert result.best is not None and result.disagg is not None and result.disagg.best is not None
    return planner, result, breakdown(result, planner)


def test_the_breakdown_is_the_chosen_configuration_as_simulate_prices_it(planned) -> None:
    planner, result, found = planned
    assert found.config is result.best and found.what == "the chosen configuration"
    # its decode step alone: the sweep priced it before the serving model added the prompt chunks
    static = planner.evaluate(result.best.layout, result.best.quantization, result.best.batch, result.best.spec)
    assert found.tpot_ms == pytest.approx(static.tpot_ms, rel=1e-6) == pytest.approx(found.sweep_tpot_ms, rel=1e-12)
    assert result.best.serving and result.best.tpot_ms > found.tpot_ms
    assert sum(found.kinds.values()) == pytest.approx(sum(row.total_ms for row in found.rows))
    assert list(found.kinds.values()) == sorted(found.kinds.values(), reverse=True)
    # the printed command line parses back into the very request that was simulated
    argv = found.command.split()[1:]
    args = build_parser().parse_args(argv)
    user = UserInput(**{f: getattr(args, f) for f in UserInput.__dataclass_fields__})
    assert user == simulate_input(REQUEST, result.best, spec_of(planner, result.best)) and args.show_ops == 20


def test_the_simulate_command_carries_the_plans_engine_settings(planned) -> None:
    """Settings that price the decode step travel into the printed ``infercast simulate`` command
    and parse back unchanged."""
    from infercast.report_html import command_line

    planner, result, _ = planned
    request = replace(REQUEST, moe_kernel="triton", moe_all_to_all="off", overlap_scheduling="off",
                      all_reduce_fusion="off", mem_fraction_static=0.8)
    user = simulate_input(request, result.best, spec_of(planner, result.best))
    command = command_line(user)
    for flag in ("--moe-kernel triton", "--moe-all-to-all off", "--overlap-scheduling off",
                 "--all-reduce-fusion off", "--mem-fraction-static 0.8"):
        assert flag in command
    args = build_parser().parse_args(command.split()[1:])
    assert UserInput(**{f: getattr(args, f) for f in UserInput.__dataclass_fields__}) == user


def test_speculative_rows_are_grouped_by_forward(planned) -> None:
    planner, result, _ = planned
    spec = next(c for c in result.frontier if c.spec is not None)
    found = breakdown(replace(result, best=spec), planner)
    assert found.tpot_ms == pytest.approx(found.sweep_tpot_ms, rel=1e-6)
    assert {"verify: gemm", "draft: gemm", "extend: gemm", "host"} <= set(found.kinds)
    # the accept length the planner resolved from the per-position rates at this setting
    assert f"--accept-length {spec.accept_length:.12g} " in found.command and "--speculative-num-draft-tokens" in found.command
    assert found.acceptance == "per-position rates 0.8, 0.7, 0.6, 0.5"
    row = next(r for r in found.rows if r.name.startswith("gemm (verify."))
    assert op_kind(row) == "verify: gemm"


def test_the_page_holds_hover_commands_and_says_when_one_mode_is_planned(planned) -> None:
    planner, result, found = planned
    page = render(result, planner, found)
    assert page.count("<script") == 1 + 2 and page.count("Plotly.newPlot(") == 2  # plotly.js inline, two figures
    assert not re.search(r"<script[^>]*\bsrc=", page)  # nothing fetched: opens offline
    assert "This plan holds aggregated configurations only" in page and "disaggregated deployments" not in page
    # the breakdown is the step at the running-request limit; the load's own TPOT is given beside it
    running = result.best.serving["decode_batch"]
    assert f"at the running-request limit of {result.best.batch} requests" in page
    assert f"about {running:.1f} requests decode in a step on average" in page
    fits = [c for c in result.configs if c.fits]
    assert (f"{len(result.configs)} aggregated configurations, {len(fits)} fit, "
            f"{sum(c.meets_slo for c in fits)} also meet the targets") in page
    assert "--max-running-requests" in page and "launch_server" in page
    assert "KV cache auto (bf16)." in page  # the default, resolved: the checkpoint states no FP8 cache
    assert f"fits, speculative ({sum(c.fits and c.spec is not None for c in result.configs)})" in page
    assert f"Pareto frontier (fits and meets the targets) ({len(result.frontier)})" in page


def test_aggregated_and_disaggregated_are_compared_when_both_are_planned(planned_both) -> None:
    planner, result, found = planned_both
    d = result.disagg
    page = render(result, planner, found)
    assert "nothing to compare" not in page and page.count("Plotly.newPlot(") == 3
    assert (f"{len(d.configs)} disaggregated deployments balanced, {sum(c.meets_slo for c in d.configs)} meet the "
            "targets") in page
    fits = sum(c.fits for c in result.configs)
    assert f"aggregated: fits ({fits})" in page and f"disaggregated: deployments ({len(d.configs)})" in page
    assert f"aggregated: frontier ({len(result.frontier)})" in page
    assert f"disaggregated: frontier ({len(d.frontier)})" in page
    best = re.search(r"The best of each side.*?</table>", page, re.S).group(0)
    assert best.count("<tr>") == 1 + 2 and f"{d.best.describe()}: prefill" in best
    # the disaggregated row carries its prefill server, decode server and router
    assert "--disaggregation-mode prefill" in best and "--disaggregation-mode decode" in best
    assert "sglang_router.launch_router" in best
    # the breakdown is the aggregated choice here; with disaggregation alone, the decode instance
    assert found.config is result.best
    alone = replace(result, configs=[], frontier=[], best=None, closest=[])
    decode = breakdown(alone, planner)
    assert decode.config is d.best.decode and decode.what.startswith(f"the decode instance of the chosen deployment "
                                                                    f"({d.best.describe()})")
    assert decode.tpot_ms == pytest.approx(d.best.decode.tpot_ms, rel=1e-6)


def test_the_simulated_step_keeps_the_layout_s_redundant_expert_slots() -> None:
    from infercast.plan import Config, Layout

    config = Config(Layout(72, 1, 72, 72, redundant_experts=32), None, 256 * 72, None)
    user = simulate_input(replace(REQUEST, model="deepseek-ai/DeepSeek-V3"), config)
    assert (user.ep_size, user.ep_num_redundant_experts, user.dp_size) == (72, 32, 72)


def test_a_disaggregated_plan_that_misses_its_targets_breaks_down_the_closest(planned) -> None:
    planner = Planner(replace(REQUEST, mode="disagg", tpot_slo_ms=1.0))
    result = planner.run()
    d = result.disagg
    assert d.configs and d.best is None and not result.configs
    found = breakdown(result, planner)
    closest = min(d.configs, key=lambda c: c.violation)
    assert found.config is closest.decode and found.what.startswith("the decode instance of the closest deployment")
    assert "the closest ones" in render(result, planner, found)


def test_a_breakdown_that_cannot_be_simulated_is_explained_not_fatal(planned, tmp_path, monkeypatch) -> None:
    from infercast import report_html
    from infercast_adapters import InfercastError

    planner, result, _ = planned

    def refuse(*args):
        raise InfercastError("--context-length 3072 exceeds the model's window")

    monkeypatch.setattr(report_html, "breakdown", refuse)
    page = tmp_path / "plan.html"
    write_report(result, planner, str(page))
    text = page.read_text()
    assert "could not be re-simulated: --context-length 3072 exceeds" in text and 'id="ops"' not in text
    assert 'id="frontier"' in text


def test_the_launch_block_carries_what_the_commands_cannot_say(planned) -> None:
    """A speculative TensorRT-LLM setup lives in its options file: the report gives its contents."""
    from infercast.plan import Config, Layout, SpecChoice

    planner, _, _ = planned
    config = Config(Layout(1, 1, 1, 1), None, 8, SpecChoice(3, 1, 4, next(iter(planner.spec_requests))))
    notes = launch_notes_of(planner, config)
    assert any(n.startswith("trtllm: extra_llm_api_options.yaml holds") for n in notes)
    block = _launch_block(planner, config)
    assert "--extra_llm_api_options extra_llm_api_options.yaml" in block
    assert all(html.escape(note) in block for note in notes)


@pytest.mark.parametrize("path, message", [
    ("plan.png", "--report plan.png: give a file name ending in .html"),
    ("/nonexistent/plan.html", "cannot write /nonexistent/plan.html: the folder /nonexistent does not exist"),
])
def test_a_bad_report_path_fails_before_the_sweep(capsys, path, message) -> None:
    assert main(["plan", "meta-llama/Llama-3.1-8B-Instruct", "--report", path]) == 2
    assert message in " ".join(capsys.readouterr().err.split())


# ------------------------------------------------------------------------------ in a real browser


def chromium() -> str:
    """The Chromium binary; skips (or fails, where CI requires the browser) when there is none."""
    found = os.environ.get("INFERCAST_CHROMIUM") or next(
        (p for p in map(shutil.which, ("chromium", "chromium-browser", "google-chrome")) if p), None)
    if found:
        return found
    message = ("headless Chromium is not installed: run `bash scripts/setup-test-env.sh` as root (Debian package "
               "chromium), or point INFERCAST_CHROMIUM at a Chromium binary")
    if os.environ.get(REQUIRE_BROWSER, "").strip() not in ("", "0"):
        pytest.fail(f"{REQUIRE_BROWSER} is set but {message}")
    pytest.skip(message)


class PlotlyDom(html.parser.HTMLParser):
    """Counts what plotly drew under each figure div: scatter markers (``path.point``), bars
    (``g.point``), legend entries and the class plotly gives a div it has plotted."""

    def __init__(self) -> None:
        super().__init__()
        self.figure: str | None = None
        self.markers: dict[str, int] = {}
        self.bars: dict[str, int] = {}
        self.legend: dict[str, int] = {}
        self.plotted: set[str] = set()

    def handle_starttag(self, tag: str, attrs: list) -> None:
        attrs = dict(attrs)
        classes = (attrs.get("class") or "").split()
        if tag == "div" and attrs.get("id") in ("frontier", "modes", "ops"):
            self.figure = attrs["id"]
            if "js-plotly-plot" in classes:
                self.plotted.add(self.figure)
        if self.figure is None:
            return
        for counts, wanted in ((self.markers, tag == "path" and "point" in classes),
                               (self.bars, tag == "g" and "point" in classes),
                               (self.legend, tag == "g" and "traces" in classes)):
            if wanted:
                counts[self.figure] = counts.get(self.figure, 0) + 1


@pytest.mark.slow
def test_the_report_renders_in_headless_chromium(planned, tmp_path) -> None:
    browser = chromium()
    planner, result, _ = planned
    page = tmp_path / "plan.html"
    size = write_report(result, planner, str(page))
    assert size == page.stat().st_size and size > 3_000_000  # plotly.js is inline
    flags = [*CHROMIUM_FLAGS, f"--user-data-dir={tmp_path / 'profile'}"]
    dom = subprocess.run([browser, *flags, "--dump-dom", page.as_uri()], capture_output=True, text=True, timeout=120)
    assert dom.returncode == 0, dom.stderr[-2000:]
    seen = PlotlyDom()
    seen.feed(dom.stdout)
    fits = sum(c.fits for c in result.configs)
    assert seen.plotted == {"frontier", "ops"}, "plotly did not run"
    # every configuration that fits, the frontier drawn over them, and the chosen star
    assert seen.markers["frontier"] == fits + len(result.frontier) + 1
    assert fits < len(result.configs)  # what does not fit is left out
    # legend: fits with and without speculation, frontier, chosen, TPOT target line
    assert seen.legend["frontier"] == 5
    assert seen.bars["ops"] == len(breakdown(result, planner).kinds)
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    shot = ARTIFACTS / "plan-report.png"
    shot.unlink(missing_ok=True)
    taken = subprocess.run([browser, *flags, "--window-size=1280,1800", f"--screenshot={shot}", page.as_uri()],
                           capture_output=True, text=True, timeout=120)
    assert taken.returncode == 0, taken.stderr[-2000:]
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 50_000


@pytest.mark.slow
def test_aggregated_against_disaggregated_renders_in_headless_chromium(planned_both, tmp_path) -> None:
    browser = chromium()
    planner, result, _ = planned_both
    page = tmp_path / "both.html"
    write_report(result, planner, str(page))
    flags = [*CHROMIUM_FLAGS, f"--user-data-dir={tmp_path / 'profile'}"]
    dom = subprocess.run([browser, *flags, "--dump-dom", page.as_uri()], capture_output=True, text=True, timeout=120)
    assert dom.returncode == 0, dom.stderr[-2000:]
    seen = PlotlyDom()
    seen.feed(dom.stdout)
    d = result.disagg
    assert seen.plotted == {"frontier", "modes", "ops"}, "plotly did not run"
    # each side: its points, its frontier over them, its best as a star
    agg = sum(c.fits for c in result.configs) + len(result.frontier) + 1
    assert seen.markers["modes"] == agg + len(d.configs) + len(d.frontier) + 1


def test_cli_writes_the_report_and_names_it(tmp_path, capsys) -> None:
    page = tmp_path / "plan.html"
    assert main(["plan", "meta-llama/Llama-3.1-8B-Instruct", "--device", "H100", "--num-devices", "1",
                 "--batch-sizes", "1,8", "--tpot-slo-ms", "15", "--report", str(page), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["report"] == str(page) and "Plotly.newPlot" in page.read_text()


def test_without_a_browser_the_test_skips_or_fails_where_ci_requires_it(monkeypatch) -> None:
    monkeypatch.setattr(shutil, "which", lambda name: None)
    monkeypatch.delenv("INFERCAST_CHROMIUM", raising=False)
    monkeypatch.delenv(REQUIRE_BROWSER, raising=False)
    with pytest.raises(pytest.skip.Exception, match="setup-test-env.sh"):
        chromium()
    monkeypatch.setenv(REQUIRE_BROWSER, "1")
    with pytest.raises(pytest.fail.Exception, match="INFERCAST_REQUIRE_BROWSER is set but headless Chromium"):
        chromium()
