"""Interpolation over a measured grid: log-space in every size, exact on grid points.

A :class:`Grid` holds one slice of a kernel table (fixed categorical keys, e.g. dtype) as a
nested map over its numeric axes (e.g. m -> n -> k -> latency). A query brackets each axis in
turn and blends the two neighbours geometrically in log(size):

    w = (ln x - ln x0) / (ln x1 - ln x0),   t = t0^(1 - w) * t1^w

which returns the stored value on a grid point and a value between t0 and t1 between them
(monotone along the axis). Outside the measured range of an axis (or of a ragged row of the
grid) the coordinate is clamped to the edge and the edge value scaled by ``shape(query) /
shape(edge)``: the kernel keeps the utilisation it had at the edge of what was measured.
Every answer says whether it was exact, interpolated or extrapolated.
"""

from __future__ import annotations

import bisect
import math
from dataclasses import dataclass
from typing import Callable, Sequence

EXACT, INTERPOLATED, EXTRAPOLATED = "measured", "interpolated", "extrapolated"
_RANK = {EXACT: 0, INTERPOLATED: 1, EXTRAPOLATED: 2}

Shape = Callable[[tuple[float, ...]], float]
"""Analytic time (any unit) of the kernel at a coordinate: only ratios of it are used."""


@dataclass(frozen=True)
class Answer:
    value: float
    quality: str
    """``measured`` (a grid point), ``interpolated`` or ``extrapolated``."""


def worse(a: str, b: str) -> str:
    return a if _RANK[a] >= _RANK[b] else b


class Grid:
    """One slice of a table: ``points`` maps coordinate tuples (one value per axis) to a
    positive value. Coordinates need not form a full product."""

    def __init__(self, axes: Sequence[str], points: dict[tuple[float, ...], float]) -> None:
        if not points:
            raise ValueError("a grid needs at least one point")
        self.axes = tuple(axes)
        self.size = len(points)
        self._points = points
        self._root = _Node(list(points.items()), 0, len(self.axes))

    def points(self) -> list[tuple[tuple[float, ...], float]]:
        return sorted(self._points.items())

    def query(self, coords: Sequence[float], shape: Shape) -> Answer:
        """The value at ``coords``."""
        if len(coords) != len(self.axes):
            raise ValueError(f"expected {len(self.axes)} coordinates ({', '.join(self.axes)}), got {len(coords)}")
        return self._query(self._root, tuple(float(c) for c in coords), 0, shape)

    def _query(self, node, q: tuple[float, ...], depth: int, shape: Shape) -> Answer:
        if depth == len(self.axes):
            return Answer(float(node), EXACT)
        keys, nodes = node.keys, node.children
        x = q[depth]
        i = bisect.bisect_left(keys, x)
        if i < len(keys) and keys[i] == x:
            return self._query(nodes[i], q, depth + 1, shape)
        if i == 0 or i == len(keys):  # outside the measured range: hold utilisation at the edge
            edge = 0 if i == 0 else len(keys) - 1
            at_edge = q[:depth] + (keys[edge],) + q[depth + 1:]
            inner = self._query(nodes[edge], at_edge, depth + 1, shape)
            return Answer(inner.value * _ratio(shape, q, at_edge), EXTRAPOLATED)
        x0, x1 = keys[i - 1], keys[i]
        q0 = q[:depth] + (x0,) + q[depth + 1:]
        q1 = q[:depth] + (x1,) + q[depth + 1:]
        lo = self._query(nodes[i - 1], q0, depth + 1, shape)
        hi = self._query(nodes[i], q1, depth + 1, shape)
        w = (math.log(x) - math.log(x0)) / (math.log(x1) - math.log(x0))
        value = math.exp((1.0 - w) * math.log(lo.value) + w * math.log(hi.value))
        return Answer(value, worse(worse(lo.quality, hi.quality), INTERPOLATED))


class _Node:
    """One level of the nested grid: the axis values present and, per value, the level below
    (built on first use, so a query touches only the part of a large table it needs)."""

    __slots__ = ("keys", "_groups", "_children", "_depth", "_axes")

    def __init__(self, items: list[tuple[tuple[float, ...], float]], depth: int, axes: int) -> None:
        groups: dict[float, list] = {}
        for item in items:
            groups.setdefault(item[0][depth], []).append(item)
        self.keys: list[float] = sorted(groups)
        self._groups: list[list] = [groups[key] for key in self.keys]
        self._children: list | None = None
        self._depth, self._axes = depth, axes

    @property
    def children(self) -> list:
        if self._children is None:
            if self._depth + 1 == self._axes:
                self._children = [group[0][1] for group in self._groups]
            else:
                self._children = [_Node(group, self._depth + 1, self._axes) for group in self._groups]
        return self._children


def _ratio(shape: Shape, query: tuple[float, ...], anchor: tuple[float, ...]) -> float:
    base = shape(anchor)
    return shape(query) / base if base > 0 else 1.0
