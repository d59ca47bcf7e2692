"""Kernel tables in infercast's own schema: what each kind is keyed by, and its analytic shape.

A table kind names its categorical keys (a slice per combination) and its numeric axes
(interpolated in log space, see :mod:`infercast.kernels.grid`); every row carries the
kernel's time in microseconds for one call on one device. Measured tables read from
aiconfigurator-core and a user's calibration file are converted to these kinds, so both
answer the same queries.

| kind | keys | axes | one call is |
|---|---|---|---|
| ``gemm`` | dtype | m, n, k | ``[m, k] @ [k, n]``; with 8-bit or 4-bit activations (``fp8``, ``fp8_block``, ``int8``, ``nvfp4``) also quantizing the ``[m, k]`` input, as aiconfigurator's collectors time it |
| ``context_attention`` | dtype, kv_dtype, head_dim, kv_heads | heads, isl, batch | causal prefill attention of ``batch`` sequences of ``isl`` tokens |
| ``generation_attention`` | kv_dtype, head_dim, kv_heads | heads, batch, kv_len | one new token per sequence over ``kv_len`` cached |
| ``context_mla`` | dtype, kv_dtype | heads, isl, batch | MLA prefill attention (DeepSeek-V3 geometry: q/k 192, v 128) |
| ``context_mla_absorbed`` | dtype, kv_dtype | heads, isl, batch | MLA prefill attention in the absorbed form, over the 576-wide latent cache (q/k 576, v 512, one KV head) |
| ``generation_mla`` | kv_dtype | heads, batch, kv_len | absorbed MLA decode over the 576-wide latent cache |
| ``mla_bmm`` | dtype, which | heads, tokens | the absorbed per-head bmm before (``pre``: 128 -> 512) or after (``post``: 512 -> 128) attention |
| ``moe`` | dtype, kernel, distribution, topk, num_experts, hidden, inter, moe_tp | ep, tokens | routed experts on one rank: routing, expert GEMMs, activation, un-permute (no gate GEMM, no communication); ``tokens`` before routing, summed over the DP group |
| ``all_reduce`` | mode, num_gpus | bytes | an engine's custom all-reduce in one node (``mode``: ``graph`` or ``eager``) |
| ``nccl`` | op, dtype, num_gpus | bytes | an NCCL collective in one node (``all_reduce``, ``all_gather``, ``reduce_scatter``, ``all_to_all``) |
| ``deepep_normal`` | phase, hidden, topk, num_experts | nodes, tokens | one DeepEP normal-mode dispatch or combine, ``tokens`` per rank |
| ``deepep_ll`` | phase, hidden, topk, num_experts | nodes, tokens | one DeepEP low-latency dispatch or combine |

``kv_heads`` is 0 for multi-head attention (as many KV heads as query heads). Heads are
per device. dtypes: ``bf16``, ``fp8`` (per-tensor or per-channel scales), ``fp8_block``
(128 x 128 weight blocks), ``int8`` (W8A8), ``w4a16`` and ``w8a16`` (integer weight-only),
``mxfp4_w4a16`` (MXFP4 weights, 16-bit compute), ``nvfp4``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence

from infercast.kernels.grid import Answer, Grid

Key = tuple[Any, ...]


@dataclass(frozen=True)
class TableKind:
    name: str
    keys: tuple[str, ...]
    axes: tuple[str, ...]
    description: str

    @property
    def columns(self) -> tuple[str, ...]:
        return (*self.keys, *self.axes, "latency_us")


KINDS: dict[str, TableKind] = {k.name: k for k in (
    TableKind("gemm", ("dtype",), ("m", "n", "k"), "[m, k] @ [k, n]"),
    TableKind("context_attention", ("dtype", "kv_dtype", "head_dim", "kv_heads"), ("heads", "isl", "batch"),
              "causal prefill attention"),
    TableKind("generation_attention", ("kv_dtype", "head_dim", "kv_heads"), ("heads", "batch", "kv_len"),
              "decode attention, one new token per sequence"),
    TableKind("context_mla", ("dtype", "kv_dtype"), ("heads", "isl", "batch"), "MLA prefill attention"),
    TableKind("context_mla_absorbed", ("dtype", "kv_dtype"), ("heads", "isl", "batch"),
              "MLA prefill attention in the absorbed form"),
    TableKind("generation_mla", ("kv_dtype",), ("heads", "batch", "kv_len"), "absorbed MLA decode attention"),
    TableKind("mla_bmm", ("dtype", "which"), ("heads", "tokens"), "absorbed MLA per-head bmm"),
    TableKind("moe", ("dtype", "kernel", "distribution", "topk", "num_experts", "hidden", "inter", "moe_tp"),
              ("ep", "tokens"), "routed experts on one rank"),
    TableKind("all_reduce", ("mode", "num_gpus"), ("bytes",), "custom all-reduce in one node"),
    TableKind("nccl", ("op", "dtype", "num_gpus"), ("bytes",), "NCCL collective in one node"),
    TableKind("deepep_normal", ("phase", "hidden", "topk", "num_experts"), ("nodes", "tokens"),
              "DeepEP normal-mode dispatch/combine"),
    TableKind("deepep_ll", ("phase", "hidden", "topk", "num_experts"), ("nodes", "tokens"),
              "DeepEP low-latency dispatch/combine"),
)}


def kind(name: str) -> TableKind:
    try:
        return KINDS[name]
    except KeyError:
        raise KeyError(f"unknown kernel table kind {name!r}; kinds: {', '.join(KINDS)}") from None


class KernelTable:
    """The slices of one table kind, each a :class:`Grid`, with where they came from."""

    def __init__(self, kind_name: str) -> None:
        self.kind = kind(kind_name)
        self._slices: dict[Key, Grid] = {}
        self._origin: dict[Key, str] = {}
        self._pending: dict[Key, dict[tuple[float, ...], float]] = {}
        self._pending_origin: dict[Key, str] = {}

    def add_rows(self, rows: Sequence[Sequence[Any]], origin: str, *,
                 combine: Callable[[list[float]], float] | None = None) -> None:
        """Add rows (key values, axis values, latency_us). Points already present (from a
        source added earlier, which takes precedence) are kept; a slice's origin is the
        first source that gave it points. Repeated points within one source are combined
        with ``combine`` (default: the median)."""
        nk, na = len(self.kind.keys), len(self.kind.axes)
        width = nk + na + 1
        collected: dict[Key, dict[tuple, float]] = {}
        repeated: dict[tuple[Key, tuple], list[float]] = {}
        for row in rows:
            if len(row) != width:
                raise ValueError(f"{self.kind.name}: a row needs {width} values ({', '.join(self.kind.columns)}), "
                                 f"got {len(row)}")
            latency = row[-1]
            if not latency > 0:
                continue
            key = tuple(row[:nk])
            coords = tuple(row[nk:-1])
            points = collected.setdefault(key, {})
            if coords in points:
                repeated.setdefault((key, coords), [points[coords]]).append(latency)
            else:
                points[coords] = latency
        for (key, coords), values in repeated.items():
            collected[key][coords] = (combine or _median)(values)
        for key, points in collected.items():
            if key in self._slices:
                raise ValueError(f"{self.kind.name}: slice {key} was queried before all its rows were added")
            existing = self._pending.get(key)
            if existing is None:
                self._pending[key] = points
                self._pending_origin[key] = origin
            else:
                added = {coords: value for coords, value in points.items() if coords not in existing}
                existing.update(added)
                if added and origin not in self._pending_origin[key]:
                    self._pending_origin[key] += f" (+{origin})"

    def keys(self) -> list[Key]:
        return [*self._slices, *self._pending]

    def origin(self, key: Key) -> str | None:
        return self._origin.get(key) or self._pending_origin.get(key)

    def grid(self, key: Key) -> Grid | None:
        grid = self._slices.get(key)
        if grid is None and key in self._pending:
            grid = self._slices[key] = Grid(self.kind.axes, self._pending.pop(key))
            self._origin[key] = self._pending_origin.pop(key)
        return grid

    def query(self, key: Key, coords: Sequence[float], shape: Callable[[tuple[float, ...]], float]) -> Answer | None:
        grid = self.grid(key)
        return None if grid is None else grid.query(coords, shape)

    def rows(self) -> list[tuple]:
        """Every row (for writing a calibration file)."""
        out = []
        for key in self.keys():
            grid = self.grid(key)
            out += [(*key, *coords, value) for coords, value in grid.points()]
        return out


def _median(values: list[float]) -> float:
    ordered = sorted(values)
    mid = len(ordered) // 2
    return ordered[mid] if len(ordered) % 2 else 0.5 * (ordered[mid - 1] + ordered[mid])


def as_rows(kind_name: str, records: Sequence[Mapping[str, Any]]) -> list[tuple]:
    """Column dicts -> rows in the kind's column order (errors name the missing column)."""
    columns = kind(kind_name).columns
    rows = []
    for i, record in enumerate(records):
        missing = [c for c in columns if c not in record]
        if missing:
            raise KeyError(f"{kind_name} row {i}: missing {', '.join(missing)} (columns: {', '.join(columns)})")
        rows.append(tuple(record[c] for c in columns))
    return rows
