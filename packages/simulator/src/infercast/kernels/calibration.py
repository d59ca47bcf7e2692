"""Calibration files: kernel tables measured on the user's own hardware, priced first.

A calibration file is JSON with the same table kinds as the measured tables
(:mod:`infercast.kernels.tables`), so a point measured on your machine overrides the
shipped measurement of the same kernel and everything else falls through to the shipped
tables and then the analytic model::

    {
      "format": "infercast-calibration",
      "version": 1,
      "device": "H100",
      "source": "our cluster, nsys over sglang 0.5.14, 2026-11-20",
      "tables": {
        "gemm": {"columns": ["dtype", "m", "n", "k", "latency_us"],
                 "rows": [["bf16", 1, 7168, 2048, 10.4], ["bf16", 128, 7168, 2048, 14.9]]},
        "all_reduce": {"columns": ["mode", "num_gpus", "bytes", "latency_us"],
                       "rows": [["graph", 8, 14336, 6.1]]}
      }
    }

``device`` is optional; when given, the file is refused for another device. Each table lists
its kind's columns (any order; extra columns are ignored) and rows of values. Latencies are
microseconds per call on one device. :func:`write_calibration` writes this format.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping, Sequence

from infercast_adapters import InfercastError

from infercast.kernels.grid import Answer
from infercast.kernels.tables import KINDS, KernelTable

if TYPE_CHECKING:
    from infercast.costmodel import Query
    from infercast.devices import DeviceSpec

FORMAT = "infercast-calibration"
VERSION = 1


class CalibrationTables:
    """The tables of one calibration file."""

    def __init__(self, path: Path, tables: dict[str, KernelTable], device: str | None, source: str) -> None:
        self.path, self.device, self.source = path, device, source
        self._tables = tables

    def table(self, kind: str) -> KernelTable:
        return self._tables.get(kind) or KernelTable(kind)

    def kinds(self) -> list[str]:
        return sorted(self._tables)

    def answer(self, query: "Query") -> Answer | None:
        table = self._tables.get(query.kind)
        return None if table is None else table.query(query.key, query.coords, query.shape)

    def origin_of(self, query: "Query") -> str:
        return f"calibration {self.path.name}"


def load_calibration(path: str | Path, device: "DeviceSpec | None" = None) -> CalibrationTables:
    """Read and check a calibration file; every problem is an error naming the file and the
    table, row or field."""
    path = Path(path)
    if not path.is_file():
        raise InfercastError(f"--calibration {path}: no such file")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise InfercastError(f"--calibration {path}: not a JSON file ({exc})") from None
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise InfercastError(f"--calibration {path}: not an infercast calibration file (it needs "
                             f'"format": "{FORMAT}"; see docs/simulate.md)')
    if data.get("version") != VERSION:
        raise InfercastError(f"--calibration {path}: format version {data.get('version')!r}; this infercast reads "
                             f"version {VERSION}")
    wanted = data.get("device")
    if wanted is not None and device is not None and str(wanted).lower() not in (
            device.name.lower(), *(a.lower() for a in device.aliases)):
        raise InfercastError(f"--calibration {path} was measured on {wanted}, not {device.name}; simulate --device "
                             f"{wanted} or drop the file")
    raw = data.get("tables")
    if not isinstance(raw, dict) or not raw:
        raise InfercastError(f"--calibration {path}: \"tables\" must map table kinds to tables "
                             f"(kinds: {', '.join(KINDS)})")
    tables = {}
    for kind_name, table in raw.items():
        if kind_name not in KINDS:
            raise InfercastError(f"--calibration {path}: unknown table kind {kind_name!r}; kinds: {', '.join(KINDS)}")
        tables[kind_name] = _table(path, kind_name, table)
    return CalibrationTables(path, tables, wanted, str(data.get("source", "")))


def _table(path: Path, kind_name: str, table: Any) -> KernelTable:
    kind = KINDS[kind_name]
    where = f"--calibration {path}, table {kind_name}"
    if not isinstance(table, dict) or not isinstance(table.get("columns"), list) or not isinstance(
            table.get("rows"), list):
        raise InfercastError(f"{where}: a table is {{\"columns\": [...], \"rows\": [[...], ...]}}")
    columns = table["columns"]
    missing = [c for c in kind.columns if c not in columns]
    if missing:
        raise InfercastError(f"{where}: missing column(s) {', '.join(missing)}; needs {', '.join(kind.columns)}")
    index = [columns.index(c) for c in kind.columns]
    rows = []
    for i, row in enumerate(table["rows"]):
        if not isinstance(row, list) or len(row) != len(columns):
            raise InfercastError(f"{where}, row {i}: needs {len(columns)} values, one per column")
        values = [row[j] for j in index]
        for name, value in zip(kind.axes + ("latency_us",), values[len(kind.keys):]):
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
                raise InfercastError(f"{where}, row {i}: {name} must be a positive number, got {value!r}")
        rows.append(tuple(values))
    if not rows:
        raise InfercastError(f"{where}: no rows")
    result = KernelTable(kind_name)
    result.add_rows(rows, f"calibration {path.name}")
    return result


def write_calibration(path: str | Path, tables: Mapping[str, Sequence[Sequence[Any]]], *, device: str | None = None,
                      source: str = "") -> Path:
    """Write rows (in each kind's column order) as a calibration file."""
    body: dict[str, Any] = {"format": FORMAT, "version": VERSION}
    if device:
        body["device"] = device
    body["source"] = source
    out = {}
    for kind_name, rows in tables.items():
        if kind_name not in KINDS:
            raise InfercastError(f"unknown table kind {kind_name!r}; kinds: {', '.join(KINDS)}")
        out[kind_name] = {"columns": list(KINDS[kind_name].columns), "rows": [list(r) for r in rows]}
    body["tables"] = out
    path = Path(path)
    path.write_text(json.dumps(body, indent=1) + "\n", encoding="utf-8")
    return path
