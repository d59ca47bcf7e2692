"""Price a pytorch-ir graph: ``infercast simulate --from-ir FILE.json``.

Every node of the graph becomes an :class:`~infercast.trace.OpRecord` named ``aten::<op>`` with
its arguments bound by the operator's schema names, and is priced like any recorded operator:
its cost formula (:mod:`infercast.cost`), then the cost-model stack (a measured GEMM table for
``linear``/``addmm``, the analytic roofline for the rest). Views, reshapes and metadata nodes
cost nothing; each other node is one kernel, launched back to back. The file needs no
pytorch-ir to be read: it is plain JSON.

When the file was written by ``infercast export``, the same model and shapes are also
simulated in the engine view (one device, bf16, no parallelism) and both totals are reported
side by side; docs/simulate.md explains the differences.
"""

from __future__ import annotations

import json
from collections import defaultdict
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch
from infercast_adapters import InfercastError

from infercast.cost import OpCost, cost_of
from infercast.costmodel import CostModel, Phase, Priced
from infercast.trace import FREE_OPS, OpRecord, TensorSpec

FREE = (FREE_OPS - {"aten::_to_copy", "aten::zeros", "aten::zeros_like"}) | {
    "aten::chunk", "aten::_assert_tensor_metadata", "aten::lift_fresh_copy", "aten::sym_size", "aten::sym_numel",
    "<built-in function getitem>",
}
"""Nodes that launch no kernel: views, reshapes, splits, metadata. ``to``/``_to_copy`` are free
when the dtype does not change (a device move on meta), ``dropout`` when not training."""

MATMUL_KINDS = ("gemm", "attention", "mla_attention")


@dataclass
class Totals:
    flops: float = 0.0
    matmul_flops: float = 0.0
    """GEMMs, batched matmuls and attention: the tensor-core work."""
    bytes: float = 0.0
    kernels: int = 0
    seconds: float = 0.0

    def add(self, cost: OpCost, seconds: float, count: int = 1) -> None:
        self.flops += cost.flops * count
        self.matmul_flops += cost.flops * count if cost.kind in MATMUL_KINDS else 0.0
        self.bytes += cost.bytes * count
        self.kernels += cost.kernels * count
        self.seconds += seconds * count

    def to_dict(self) -> dict[str, float]:
        return {"flops": self.flops, "matmul_flops": self.matmul_flops, "other_flops": self.flops - self.matmul_flops,
                "bytes": self.bytes, "kernels": self.kernels, "ms": self.seconds * 1e3}


@dataclass
class OpGroup:
    name: str
    count: int = 0
    flops: float = 0.0
    bytes: float = 0.0
    ms: float = 0.0
    bound: str = ""
    sources: dict[str, int] = field(default_factory=dict)


@dataclass
class IRPricing:
    path: str
    meta: dict[str, Any] | None
    """The ``infercast`` key of a file ``infercast export`` wrote (model, phase, shapes), or None."""
    device: str
    cost_model: str
    nodes: int
    free_nodes: int
    totals: Totals
    ops: list[OpGroup]
    engine: dict[str, Any] | None = None
    """The engine view of the same model and shapes: ``totals`` and what was simulated."""
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {"ir": self.path, "ir_meta": self.meta, "device": self.device, "cost_model": self.cost_model,
                "nodes": self.nodes, "free_nodes": self.free_nodes, "totals": self.totals.to_dict(),
                "ops": [asdict(op) for op in self.ops], "engine_view": self.engine, "notes": self.notes}


def read_ir(path: str | Path) -> dict[str, Any]:
    """The IR file as a dict, or an error that says what is wrong with it."""
    path = Path(path)
    try:
        data = json.loads(path.read_text())
    except OSError as exc:
        raise InfercastError(f"--from-ir {path}: cannot read it ({exc.strerror or exc})") from exc
    except json.JSONDecodeError as exc:
        raise InfercastError(f"--from-ir {path}: not JSON (line {exc.lineno}: {exc.msg})") from exc
    if not isinstance(data, dict) or not isinstance(data.get("nodes"), list):
        raise InfercastError(f"--from-ir {path}: not a pytorch-ir graph (a JSON object with a 'nodes' list, as "
                             "torch_ir.IR.save and infercast export write)")
    return data


def _dtype(name: str) -> torch.dtype:
    found = getattr(torch, str(name), None)
    return found if isinstance(found, torch.dtype) else torch.float32


def _spec(meta: dict[str, Any]) -> TensorSpec:
    return TensorSpec(tuple(int(d) for d in meta["shape"]), _dtype(meta["dtype"]))


def _schema(op_type: str):
    parts = op_type.split(".")
    if parts[0] != "aten" or len(parts) < 2:
        return None
    packet = getattr(torch.ops.aten, parts[1], None)
    overload = getattr(packet, parts[2] if len(parts) > 2 else "default", None) if packet is not None else None
    return getattr(overload, "_schema", None)


def _frozen(value: Any) -> Any:
    """Lists as tuples, so records are hashable for the cost model's cache."""
    if isinstance(value, (list, tuple)):
        return tuple(_frozen(v) for v in value)
    if isinstance(value, dict):
        return tuple(sorted((str(k), _frozen(v)) for k, v in value.items()))
    return value


def bind(node: dict[str, Any], schema: Any) -> dict[str, Any]:
    """The node's arguments by schema name: tensors from its inputs in order (a tensor list
    takes the count pytorch-ir recorded), everything else from its attributes."""
    inputs = [_spec(t) for t in node.get("inputs", [])]
    attrs = node.get("attrs") or {}
    sizes = list(attrs.get("_tensor_list_sizes") or [])
    named: dict[str, Any] = {}
    at = 0
    for arg in schema.arguments:
        kind = str(arg.type)
        if "Tensor[]" in kind or "Tensor?[]" in kind:
            size = sizes.pop(0) if sizes else len(inputs) - at
            named[arg.name] = tuple(inputs[at:at + size])
            at += size
        elif kind.startswith("Tensor") and "?" not in kind:
            if at < len(inputs):
                named[arg.name], at = inputs[at], at + 1
            elif arg.name in attrs:
                named[arg.name] = _frozen(attrs[arg.name])
        elif kind.startswith("Tensor") and at < len(inputs) and arg.name not in attrs:
            named[arg.name], at = inputs[at], at + 1
        elif arg.name in attrs:
            named[arg.name] = _frozen(attrs[arg.name])
    return named


def node_record(node: dict[str, Any]) -> OpRecord | None:
    """The node as an OpRecord, or None when it launches no kernel."""
    op_type = str(node.get("op_type", ""))
    parts = op_type.split(".")
    name = f"aten::{parts[1]}" if parts[0] == "aten" and len(parts) > 1 else op_type
    inputs = tuple(_spec(t) for t in node.get("inputs", []))
    outputs = tuple(_spec(t) for t in node.get("outputs", []))
    attrs = node.get("attrs") or {}
    if name in FREE or not outputs:
        return None
    if name in ("aten::to", "aten::_to_copy") and all(i.dtype == o.dtype for i, o in zip(inputs, outputs)):
        return None
    if name in ("aten::dropout", "aten::alpha_dropout") and not attrs.get("train"):
        return None
    schema = _schema(op_type)
    named = bind(node, schema) if schema is not None else {}
    return OpRecord(name=name, args=inputs, outputs=outputs, path=str(node.get("name", "")), layer=None, named=named)


def price_ir(path: str | Path, model: CostModel) -> IRPricing:
    """Price every kernel node of the IR at ``path`` with ``model``."""
    data = read_ir(path)
    meta = data.get("infercast") if isinstance(data.get("infercast"), dict) else None
    decode = bool(meta and meta.get("phase") == "decode")
    phase = Phase(graph=decode, decode=decode, scale_up_domain=model.device.scale_up_domain())
    totals = Totals()
    groups: dict[str, OpGroup] = {}
    bounds: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    free = 0
    notes: list[str] = []
    for node in data["nodes"]:
        try:
            record = node_record(node)
        except (KeyError, TypeError, ValueError) as exc:
            raise InfercastError(f"--from-ir {path}: node {node.get('name')!r} is malformed ({exc})") from exc
        if record is None:
            free += 1
            continue
        cost = cost_of(record)
        priced: Priced = model.price(record, phase)
        totals.add(cost, priced.seconds)
        group = groups.setdefault(record.name, OpGroup(record.name))
        group.count += 1
        group.flops += cost.flops
        group.bytes += cost.bytes
        group.ms += priced.seconds * 1e3
        group.sources[priced.source] = group.sources.get(priced.source, 0) + 1
        bounds[record.name][priced.bound] += priced.seconds
        if not record.name.startswith("aten::") and f"non-ATen node {record.name}" not in " ".join(notes):
            notes.append(f"non-ATen node {record.name}: priced as a memory-bound kernel over its inputs and outputs")
    for name, group in groups.items():
        group.bound = max(bounds[name].items(), key=lambda kv: kv[1])[0]
    ops = sorted(groups.values(), key=lambda g: g.ms, reverse=True)
    notes += list(model.notes)
    return IRPricing(str(path), meta, model.device.name, model.describe(), len(data["nodes"]), free, totals, ops,
                     notes=notes)


def engine_view(meta: dict[str, Any], user_fields: dict[str, Any]) -> dict[str, Any]:
    """Simulate the model and shapes an exported graph holds in the engine view (one device,
    TP 1, bf16 linear layers and KV cache, whatever the graph's dtype) and total its operators'
    work. A decode graph computes all of its ``max_cache_len`` slots, so decode is simulated at a
    full cache (context ``max_cache_len - 1`` plus the new token)."""
    from infercast.simulate import UserInput, simulate

    decode = meta["phase"] == "decode"
    layers = meta["layers"] if meta.get("layers") and meta["layers"] < meta.get("model_layers", 0) else None
    user = UserInput(model=meta["model"], num_devices=1, tp_size=1, num_queries=meta["batch"],
                     query_length=None if decode else meta["seq_len"], decode=decode,
                     context_length=meta["max_cache_len"] - 1 if decode else 0,
                     quantize_linear_action="BF16", kv_cache_dtype="bf16",  # 16-bit weights and cache, as the graph
                     num_hidden_layers_override=layers, **user_fields)
    result = simulate(user)
    return {"simulated": {"model": user.model, "phase": result.phase, "workload": result.workload,
                          "quantization": result.quantization, "layers": layers or meta.get("model_layers")},
            "totals": engine_totals(result).to_dict(), "step_latency_ms": result.step_latency_ms}


def engine_totals(result: Any) -> Totals:
    """FLOPs, bytes, kernels and kernel time of a simulated step's operators. Reads the step's
    priced records (``SimResult._timed``): the one place the model view reads the engine view's
    internals."""
    totals = Totals()
    for record, priced in result._timed:
        cost = cost_of(record)
        if cost.collective:
            continue
        totals.add(cost, priced.seconds, record.count)
    return totals
