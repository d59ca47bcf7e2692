"""Test grids: every pair of factor levels by default, the full product behind the ``slow`` marker."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence

import pytest


def pairwise(*factors: Sequence) -> list[tuple]:
    """A small set of combinations that covers every pair of levels of every two factors
    (greedy: each pick covers the most pairs not yet covered; deterministic)."""
    def pairs(combo: tuple) -> set:
        return {(a, combo[a], b, combo[b]) for a, b in itertools.combinations(range(len(combo)), 2)}

    indexed = list(itertools.product(*(range(len(f)) for f in factors)))
    needed = set().union(*(pairs(c) for c in indexed))
    chosen: list[tuple] = []
    while needed:
        best = max(indexed, key=lambda c: len(pairs(c) & needed))
        chosen.append(best)
        needed -= pairs(best)
    return [tuple(f[i] for f, i in zip(factors, combo)) for combo in sorted(chosen)]


def grid(*factors: Sequence, name: Callable[..., str] | None = None) -> list:
    """``pytest.param`` for every combination: the pairwise ones run by default, the others are
    marked ``slow`` (run with ``--run-slow`` or ``INFERCAST_RUN_SLOW=1``, as CI does).
    ``name(*combo)`` gives each its test id."""
    fast = set(pairwise(*factors))
    return [pytest.param(*combo, marks=() if combo in fast else pytest.mark.slow,
                         id=name(*combo) if name is not None else None)
            for combo in itertools.product(*factors)]
