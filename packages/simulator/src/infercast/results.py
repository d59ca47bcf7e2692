"""What a simulation returns: typed results, their JSON, and the Chrome trace of a step."""

from __future__ import annotations

import json
from collections import defaultdict
from dataclasses import asdict, dataclass, field, fields
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from infercast.trace import OpRecord


@dataclass
class OpRow:
    name: str
    count: int
    total_ms: float
    share: float
    bound: str
    source: str
    """``measured``, ``interpolated``, ``extrapolated``, ``analytic``, or ``engine`` for host rows."""
    origin: str = ""
    """The table (and engine version) or published figure behind it."""


@dataclass
class SimResult:
    model: str
    model_type: str
    device: str
    num_devices: int
    parallel: dict[str, Any]
    phase: str
    workload: dict[str, int]
    quantization: str
    kv_cache_dtype: str
    step_latency_ms: float
    ttft_ms: float | None
    tpot_ms: float | None
    throughput_tokens_per_s_per_device: float
    compute_ms: float
    communication_ms: float
    kernel_count: int
    memory_gib: dict[str, float]
    feasible: bool
    max_num_queries: int
    parameters_billion: float
    vision_parameters_billion: float
    routing_assumption: str | None
    ops: list[OpRow]
    simulation_wall_s: float
    cost_model: dict[str, Any] = field(default_factory=dict)
    """``{engine, engine_version, sources, measured_share, cuda_graph, piecewise}``: what priced the step."""
    notes: list[str] = field(default_factory=list)
    images: dict[str, Any] | None = None
    speculative: dict[str, Any] | None = None
    _timed: list = field(default_factory=list, repr=False)

    def to_dict(self) -> dict[str, Any]:
        data = {f.name: getattr(self, f.name) for f in fields(self) if f.name != "_timed"}
        data["ops"] = [asdict(row) for row in self.ops]
        return data

    def to_json(self, indent: int | None = 2) -> str:
        return json.dumps(self.to_dict(), indent=indent)

    def chrome_trace(self) -> dict[str, Any]:
        """One step as Chrome trace events (Perfetto opens it): one track per stream."""
        events: list[dict[str, Any]] = [
            {"ph": "M", "name": "process_name", "pid": 1, "args": {"name": f"{self.model} rank 0"}},
            {"ph": "M", "name": "thread_name", "pid": 1, "tid": 1, "args": {"name": "compute"}},
            {"ph": "M", "name": "thread_name", "pid": 1, "tid": 2, "args": {"name": "communication"}},
        ]
        events += _timeline(self._timed)
        now = max((e["ts"] + e["dur"] for e in events if e["ph"] == "X"), default=0.0)
        hosts = [row for row in self.ops if row.source == "engine" and not row.name.startswith("request:")]
        if hosts:
            events.append({"ph": "M", "name": "thread_name", "pid": 1, "tid": 3, "args": {"name": "host"}})
        for row in hosts:
            dur = row.total_ms * 1e3
            events.append({"ph": "X", "pid": 1, "tid": 3, "name": row.name, "ts": round(now, 3), "dur": round(dur, 3),
                           "args": {"source": row.origin}})
            now += dur
        return {"traceEvents": events, "displayTimeUnit": "ms"}


_JSON_TYPES = {"str": "string", "int": "integer", "float": "number", "bool": "boolean", "None": "null"}


def _schema_of(annotation: str) -> dict[str, Any]:
    """A JSON-schema fragment for a dataclass field annotation (as written, postponed)."""
    options = [part.strip() for part in annotation.split("|")]
    types = []
    for option in options:
        if option.startswith("dict"):
            types.append("object")
        elif option.startswith("list"):
            types.append("array")
        else:
            types.append(_JSON_TYPES.get(option, "object"))
    return {"type": types[0] if len(types) == 1 else types}


def json_schema() -> dict[str, Any]:
    """The JSON schema of :meth:`SimResult.to_dict`, generated from the dataclasses."""
    row = {f.name: _schema_of(f.type) for f in fields(OpRow)}
    properties = {f.name: _schema_of(f.type) for f in fields(SimResult) if not f.name.startswith("_")}
    properties["ops"] = {"type": "array", "items": {"type": "object", "properties": row, "required": list(row)}}
    return {"$schema": "https://json-schema.org/draft/2020-12/schema", "title": "infercast simulate --json",
            "type": "object", "properties": properties, "required": list(properties)}


def _timeline(timed: list[tuple[OpRecord, Any]]) -> list[dict[str, Any]]:
    """Serial schedule of one step, every layer expanded, as Chrome trace 'X' events."""
    by_layer: dict[int, list[tuple[OpRecord, Any]]] = defaultdict(list)
    head: list[tuple[OpRecord, Any]] = []
    embed: list[tuple[OpRecord, Any]] = []
    vision_before: list[tuple[OpRecord, Any]] = []
    vision_blocks: list[tuple[OpRecord, Any]] = []
    vision_after: list[tuple[OpRecord, Any]] = []
    for r, t in timed:
        if r.layer is not None:
            for index in r.layers or (r.layer,):
                by_layer[index].append((r, t))
        elif r.path.startswith("vision.blocks"):
            vision_blocks.append((r, t))
        elif r.path.startswith("vision"):
            (vision_after if vision_blocks else vision_before).append((r, t))
        elif r.path.startswith("embed"):
            embed.append((r, t))
        else:
            head.append((r, t))
    events, now = [], 0.0
    blocks = vision_blocks * (vision_blocks[0][0].count if vision_blocks else 0)
    sequence = (vision_before + blocks + vision_after + embed
                + [item for index in sorted(by_layer) for item in by_layer[index]] + head)
    for r, t in sequence:
        dur = t.seconds * 1e6
        events.append({
            "ph": "X", "pid": 1, "tid": 2 if t.bound == "communication" else 1,
            "name": r.name.split("::")[-1], "ts": round(now, 3), "dur": round(dur, 3),
            "args": {"module": r.path, "layer": r.layer, "bound": t.bound,
                     "inputs": [list(a.shape) for a in r.tensors()]},
        })
        now += dur
    return events
