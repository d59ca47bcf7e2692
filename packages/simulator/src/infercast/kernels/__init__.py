"""Measured kernel tables: aiconfigurator-core's data for a device, engine and version.

:class:`MeasuredTables` loads each table kind the first time a query needs it (and keeps it
for the process), so a run reads only the files its operators touch. The table kinds and
their schema: :mod:`infercast.kernels.tables`; the reader: :mod:`infercast.kernels.aiconfigurator`;
a user's own tables: :mod:`infercast.kernels.calibration`.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator
from typing import TYPE_CHECKING

from infercast_adapters import InfercastError

from infercast.kernels import aiconfigurator as aic
from infercast.kernels.grid import Answer
from infercast.kernels.tables import KernelTable

if TYPE_CHECKING:
    from infercast.costmodel import Query
    from infercast.engines import Engine


def available() -> bool:
    """Whether aiconfigurator-core's data is installed."""
    return aic.data_root() is not None


@functools.lru_cache(maxsize=None)
def _load(kind: str, system: str, engine: str, version: str, lanes: tuple[str, ...]) -> KernelTable:
    return aic.load(kind, system, engine, version, {"attention_lanes": lanes})


def sibling_tables(kind: str, system: str, engine: str) -> Iterator[tuple[str, KernelTable]]:
    """(version, ``kind`` table) of another engine on ``system``, newest version first, for the
    versions with a ``kind`` file of their own (each table loaded when reached, its gaps filled
    from other versions as always), for what one engine's kernels share with another's."""
    from infercast.engines import engine_named

    lanes = engine_named(engine).attention_lanes  # as that engine's own runs load it: one cached table
    for version in aic.engine_versions(system, engine):
        if aic.has_own(kind, system, engine, version):
            yield version, _load(kind, system, engine, version, lanes)


class MeasuredTables:
    """The measured tables of one system for one engine version."""

    def __init__(self, system: str, engine: "Engine", version: str | None = None) -> None:
        self.system, self.engine = system, engine
        versions = aic.engine_versions(system, engine.tables)
        if not versions:
            raise InfercastError(f"{aic.PACKAGE} has no {engine.name} tables for {system}; use another --engine "
                                 f"or --cost-model analytic")
        self.note: str | None = None
        """Where the points of a version without tables of its own come from (None: it has some)."""
        if version is None:
            version = aic.default_version(system, engine.tables)
            if version is None:
                raise InfercastError(f"{aic.PACKAGE} has no {engine.name} GEMM table for {system}")
        elif version not in versions:
            if not aic.is_version(version):
                raise InfercastError(f"--engine-version {version!r} is not a version number; {engine.name} tables for "
                                     f"{system} exist for {', '.join(versions)}")
            older = [v for v in versions if aic.version_key(v) < aic.version_key(version)]
            self.note = (f"{engine.name} {version} has no kernel tables of its own for {system}: its points come from "
                         + (f"{older[0]} and older, then " if older else "") + f"the newest versions ({versions[0]} "
                         f"first); tables exist for {', '.join(versions)}")
        self.version = version

    def table(self, kind: str) -> KernelTable:
        return _load(kind, self.system, self.engine.tables, self.version, self.engine.attention_lanes)

    def answer(self, query: "Query") -> Answer | None:
        table = self.table(query.kind)
        found = table.query(query.key, query.coords, query.shape)
        if found is None or query.kind != "moe":
            return found
        return aic.random_routing(found, table, query.key, query.coords, query.shape)

    def origin_of(self, query: "Query") -> str:
        return self.table(query.kind).origin(query.key) or f"{self.engine.name} {self.version}"

    def __repr__(self) -> str:
        return f"MeasuredTables({self.system!r}, {self.engine.name!r}, {self.version!r})"


__all__ = ["Answer", "KernelTable", "MeasuredTables", "available", "sibling_tables"]
