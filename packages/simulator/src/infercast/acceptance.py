"""How many tokens a speculative cycle yields: acceptance models, presets, engine logs.

The accept length counts the target's own token, so it lies in 1 .. num_steps + 1 (the
engines' definition). Models, from what a user knows:

- :class:`MeasuredLength`: an accept length measured at the simulated setting;
- :class:`ChainRates`: per-position rates a_j (draft j accepted given drafts 1..j-1 were):
  E = 1 + sum_j prod_{i<=j} a_i (Leviathan et al., arXiv 2211.17192, eq. 1);
- :class:`TreeMatrix`: a depth x rank matrix, entry (d, r) the probability that the rank-r
  candidate at depth d is the accepted child of an accepted parent. The tree holds the
  num_draft_tokens - 1 nodes of highest path probability and E = 1 + the sum of their path
  probabilities (Sequoia, arXiv 2402.12374, Prop. 3.4);
- presets: published accept lengths at the setting they were measured at, carried to other
  depths by the draft's published per-depth shape or, without one, a stated decay model
  (:class:`Preset`); the output says when a setting is extrapolated.
"""

from __future__ import annotations

import heapq
import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from infercast_adapters import InfercastError
from infercast_eagle3.loop import SpecSettings


def settings(num_steps: int, topk: int = 1, num_draft_tokens: int | None = None) -> SpecSettings:
    """Validated (s, k, n): k = 1 needs n = s + 1; n defaults to s + 1 (chain) or s x k + 1."""
    return SpecSettings(num_steps, topk, num_draft_tokens).validated()


@dataclass(frozen=True)
class MeasuredLength:
    accept_length: float

    def expected_accept_length(self, s: SpecSettings) -> float:
        if not 1.0 <= self.accept_length <= s.num_steps + 1:
            raise InfercastError(f"accept length {self.accept_length:g} is outside [1, num_steps + 1] = "
                                 f"[1, {s.num_steps + 1}] for --speculative-num-steps {s.num_steps}")
        return self.accept_length

    def describe(self) -> str:
        return f"measured accept length {self.accept_length:g}"


def _check_rates(rates, what: str) -> None:
    bad = [r for r in rates if not (isinstance(r, (int, float)) and 0.0 <= r <= 1.0)]
    if bad:
        raise InfercastError(f"{what} must lie in [0, 1]; got {', '.join(str(b) for b in bad)}")


@dataclass(frozen=True)
class ChainRates:
    rates: tuple[float, ...]

    def __post_init__(self) -> None:
        _check_rates(self.rates, "acceptance rates")
        if not self.rates:
            raise InfercastError("acceptance rates: give at least one rate")

    def expected_accept_length(self, s: SpecSettings) -> float:
        if s.topk > 1:
            return TreeMatrix(tuple((r,) for r in self.rates)).expected_accept_length(s)
        if len(self.rates) < s.num_steps:
            raise InfercastError(f"{len(self.rates)} acceptance rate(s) for {s.num_steps} draft steps; give one per step")
        total, prefix = 1.0, 1.0
        for a in self.rates[: s.num_steps]:
            prefix *= a
            total += prefix
        return total

    def describe(self) -> str:
        return "per-position rates " + ", ".join(f"{r:g}" for r in self.rates)


@dataclass(frozen=True)
class TreeMatrix:
    matrix: tuple[tuple[float, ...], ...]
    """Rows: depth 1..; columns: rank 1.. among siblings."""

    def __post_init__(self) -> None:
        for depth, row in enumerate(self.matrix, 1):
            _check_rates(row, f"acceptance matrix row {depth}")
            if sum(row) > 1.0 + 1e-9:
                raise InfercastError(f"acceptance matrix row {depth} sums to {sum(row):g}; at most one child is "
                                     "accepted, so a row sums to at most 1")

    def tree(self, s: SpecSettings) -> list[tuple[tuple[int, ...], float]]:
        """The n - 1 nodes of highest path probability (ranks from the root, probability)."""
        if len(self.matrix) < s.num_steps:
            raise InfercastError(f"the acceptance matrix has {len(self.matrix)} row(s) for {s.num_steps} draft steps")

        def p(depth: int, rank: int) -> float:
            row = self.matrix[depth - 1]
            return row[rank] if rank < len(row) else 0.0

        frontier = [(-p(1, r), (r,)) for r in range(s.topk)]
        heapq.heapify(frontier)
        chosen: list[tuple[tuple[int, ...], float]] = []
        while frontier and len(chosen) < s.num_draft_tokens - 1:
            negative, path = heapq.heappop(frontier)
            chosen.append((path, -negative))
            if len(path) < s.num_steps:
                for r in range(s.topk):
                    heapq.heappush(frontier, (negative * p(len(path) + 1, r), path + (r,)))
        return chosen

    def expected_accept_length(self, s: SpecSettings) -> float:
        return 1.0 + sum(prob for _, prob in self.tree(s))

    def describe(self) -> str:
        return "depth x rank matrix " + "; ".join(",".join(f"{v:g}" for v in row) for row in self.matrix)


DEPTH_DECAY = 0.96
"""Per-depth fall of conditional acceptance where a draft's own per-depth figures are not
published: EAGLE's n-alpha on MT-bench (T = 0) fell from 0.79 at depth 1 to 0.67 at depth 5 for
Vicuna-7B, (0.67 / 0.79)^(1/4) = 0.96 per depth (Li et al., EAGLE, arXiv 2401.15077, Table 2)."""

@dataclass(frozen=True)
class Preset:
    """A published accept length at one setting, and how acceptance changes with depth: the
    draft's own per-depth shape when one is published (``depth_shape``, conditional rates),
    else a geometric decay of :data:`DEPTH_DECAY` per depth. The shape is scaled so the
    published accept length holds at the published depth."""

    name: str
    accept_length: float
    num_steps: int
    source: str
    depth_shape: tuple[float, ...] | None = None
    depth_source: str = ""

    def _shape(self, depth: int) -> list[float]:
        shape = list(self.depth_shape or ())
        while len(shape) < depth:  # past what is published: the decay model
            shape.append((shape[-1] if shape else 1.0) * DEPTH_DECAY)
        return shape[:depth]

    def rates(self, depth: int) -> tuple[float, ...]:
        """Conditional rates for depths 1..``depth``, scaled to reproduce the published length."""
        shape = self._shape(max(depth, self.num_steps))

        def length(scale: float) -> float:
            total, prefix = 1.0, 1.0
            for r in shape[: self.num_steps]:
                prefix *= min(1.0, r * scale)
                total += prefix
            return total

        if not 1.0 <= self.accept_length <= self.num_steps + 1:
            raise InfercastError(f"preset {self.name}: accept length {self.accept_length:g} is outside "
                                 f"[1, {self.num_steps + 1}]")
        lo, hi = 0.0, 1.0 / min(shape[: self.num_steps])
        for _ in range(80):
            mid = (lo + hi) / 2
            lo, hi = (mid, hi) if length(mid) < self.accept_length else (lo, mid)
        scale = (lo + hi) / 2
        return tuple(min(1.0, r * scale) for r in shape[:depth])

    def model(self, depth: int = 16) -> ChainRates:
        return ChainRates(self.rates(depth))

    def describe(self, num_steps: int) -> str:
        how = (f"per-depth shape from {self.depth_source}" if self.depth_shape else
               f"conditional acceptance decaying x{DEPTH_DECAY} per depth (EAGLE, arXiv 2401.15077, Table 2)")
        where = "at the published depth" if num_steps == self.num_steps else (
            f"extrapolated from s{self.num_steps} to s{num_steps}")
        beyond = " (beyond the published depths: the decay model)" if self.depth_shape and num_steps > len(
            self.depth_shape) else ""
        return (f"preset {self.name}: accept length {self.accept_length:g} at s{self.num_steps} ({self.source}); "
                f"{where} with {how}{beyond}")


def presets(manager: Any = None) -> dict[str, Preset]:
    """Acceptance presets from the speculative options the plugins register: one per option
    with a published accept length (the mean over its datasets) and one per dataset
    (``name/dataset``)."""
    from infercast.plugins import get_manager

    found: dict[str, Preset] = {}
    for option in (manager or get_manager()).speculative_options():
        shape = dict(depth_shape=option.depth_shape, depth_source=option.depth_source)
        for dataset, tau in option.datasets.items():
            found[f"{option.name}/{dataset}"] = Preset(f"{option.name}/{dataset}", tau, option.measured_steps,
                                                       option.source, **shape)
        if option.datasets:
            mean = round(sum(option.datasets.values()) / len(option.datasets), 3)
            found[option.name] = Preset(option.name, mean, option.measured_steps,
                                        f"{option.source}: mean over {', '.join(option.datasets)}", **shape)
        elif option.accept_length is not None:
            found[option.name] = Preset(option.name, option.accept_length, option.measured_steps, option.source,
                                        **shape)
    return found


def preset_for_draft(draft_ref: str, manager: Any = None) -> str | None:
    """The preset of a draft checkpoint with a published accept length (its default acceptance)."""
    from infercast.plugins import get_manager

    for option in (manager or get_manager()).speculative_options():
        if option.draft and option.draft.lower() == draft_ref.lower() and option.name in presets(manager):
            return option.name
    return None


def preset(name: str, manager: Any = None) -> Preset:
    known = presets(manager)
    found = known.get(name.lower())
    if found is None:
        raise InfercastError(f"unknown acceptance preset {name!r}; presets: {', '.join(known)}")
    return found


def parse_rates(text: str) -> tuple[float, ...]:
    try:
        return tuple(float(v) for v in text.split(",") if v.strip())
    except ValueError:
        raise InfercastError(f"--acceptance-rates takes comma-separated numbers in [0, 1], got {text!r}") from None


def parse_matrix(text: str) -> tuple[tuple[float, ...], ...]:
    """``"0.8,0.1;0.7,0.1"``: rows (depths) separated by ``;``, ranks by ``,``; every cell given."""
    rows = [row for row in text.split(";")]
    if rows and not rows[-1].strip():
        rows.pop()  # a trailing ';'
    try:
        matrix = tuple(tuple(float(v) for v in row.split(",")) for row in rows)
    except ValueError:
        raise InfercastError(f"--acceptance-matrix takes rows 'a,b;c,d' of numbers in [0, 1] with every cell given, "
                             f"got {text!r}") from None
    if not matrix:
        raise InfercastError("--acceptance-matrix is empty; give rows 'a,b;c,d'")
    return matrix


LOG_PATTERN = re.compile(r"accept len(?:gth)?:\s*([0-9]*\.?[0-9]+)")
METRIC_PATTERN = re.compile(r"^sglang:spec_accept_length(?:\{[^}]*\})?\s+([0-9.eE+-]+)\s*$", re.MULTILINE)


def accept_length_from_log(path: str | Path) -> tuple[float, int]:
    """Mean accept length in an sglang server log (``accept len: 2.85`` on decode lines) or
    Prometheus metrics text (``sglang:spec_accept_length``); returns (mean, samples)."""
    path = Path(path)
    if not path.is_file():
        raise InfercastError(f"{path}: no such file")
    text = path.read_text(errors="replace")
    values = [float(v) for v in METRIC_PATTERN.findall(text)] or [float(v) for v in LOG_PATTERN.findall(text)]
    values = [v for v in values if math.isfinite(v) and v > 0]
    if not values:
        raise InfercastError(f"{path}: no accept length found (looked for sglang decode lines 'accept len: X' and "
                             "the metric sglang:spec_accept_length)")
    return sum(values) / len(values), len(values)
