"""Extract one ABI module as a pytorch-ir graph, check that it is complete, write and read it.

pytorch-ir (PyPI ``pytorch-ir``, import ``torch_ir``) is an optional dependency, installed with
``pip install 'infercast[ir]'``. Extraction is its ``extract_ir`` in two of its public steps,
``export_model`` (``torch.export`` on meta) and ``convert_exported_program``, so that the exported
program can be checked in between: a graph is complete when every operator is an ATen operator
and every tensor it reads is a weight a checkpoint holds, or a constant the graph carries. When
it is not, or when ``torch.export`` cannot trace the model, the error names the module at fault
and the hook that fixes it.
"""

from __future__ import annotations

import json
import operator
import re
from pathlib import Path
from typing import Any

import torch
from infercast_adapters import InfercastError
from torch import nn

IR_EXTRA = "infercast[ir]"
PYTORCH_IR_RANGE = ">=0.2.3,<0.3"
"""The pytorch-ir versions this module is tested with (the ``ir`` extra pins the same range)."""

FIX = ("An adapter makes a module exportable by returning a class patch for it from its "
       "infercast_class_patches hook (docs/hooks.md, 'Export').")


def require_pytorch_ir():
    """The ``torch_ir`` module, or an error naming the extra that installs it."""
    try:
        import torch_ir
    except ImportError:
        raise InfercastError(
            f"infercast export needs pytorch-ir, which is not installed. Install the extra: "
            f"pip install '{IR_EXTRA}' (pytorch-ir {PYTORCH_IR_RANGE}); from this checkout: "
            f"pip install -e 'packages/simulator[ir]'"
        ) from None
    return torch_ir


def extract(module: nn.Module, example_inputs: tuple, model_name: str, weight_prefix: str = ""):
    """Export ``module`` on meta and convert it to a ``torch_ir.IR`` whose weights are named
    without ``weight_prefix``; raises an :class:`InfercastError` naming the module that keeps
    the graph from being static."""
    torch_ir = require_pytorch_ir()
    with torch.no_grad():  # no grad-mode regions (higher-order ops) in the graph
        try:
            exported = torch_ir.export_model(module, example_inputs, strict=True)
        except torch_ir.ExportError as exc:
            raise untraceable(exc.__cause__ or exc, module, prefix=weight_prefix) from None
    problems = incomplete(exported, module, prefix=weight_prefix)
    if problems:
        raise InfercastError(f"the exported graph of {model_name} is not self-contained: {'; '.join(problems)}. {FIX}")
    ir = torch_ir.convert_exported_program(exported, model_name=model_name)
    ir.constants = {name: value for name, value in exported.constants.items()
                    if isinstance(value, torch.Tensor) and value.device.type != "meta"}
    strip_weight_prefix(ir, weight_prefix)
    return ir


def strip_weight_prefix(ir: Any, prefix: str) -> None:
    """Name weights and constants as the wrapped model's state dict does (``model.layers.0...``,
    not ``lm.model.layers.0...``), so a checkpoint's names find them."""

    def strip(name: str) -> str:
        return name[len(prefix):] if name.startswith(prefix) else name

    for meta in ir.weights:
        meta.name = strip(meta.name)
    ir.weight_name_mapping = {k: strip(v) for k, v in ir.weight_name_mapping.items()}
    ir.constants = {strip(k): v for k, v in ir.constants.items()}


def _module_names(root: nn.Module) -> dict[int, str]:
    return {id(m): name for name, m in root.named_modules()}


def untraceable(exc: BaseException, root: nn.Module, doing: str = "torch.export could not trace",
                prefix: str = "") -> InfercastError:
    """The deepest module of ``root`` whose forward was running when ``exc`` was raised, named
    with its class and its path (without ``prefix``), the reason in one line, and the hook
    that would fix it."""
    names = {key: name.removeprefix(prefix) for key, name in _module_names(root).items()}
    where = None
    tb = exc.__traceback__
    while tb is not None:
        owner = tb.tb_frame.f_locals.get("self")
        if isinstance(owner, nn.Module) and id(owner) in names and names[id(owner)]:
            where = (names[id(owner)], type(owner).__name__)
        tb = tb.tb_next
    reason = next((line.strip() for line in str(exc).splitlines() if line.strip()), type(exc).__name__)
    reason = f"{type(exc).__name__}: {reason[:300]}"
    if where is None:
        return InfercastError(f"{doing} the model on meta ({reason}). {FIX}")
    path, cls = where
    return InfercastError(f"{doing} {cls} (module {path}) on meta: {reason}. {FIX}")


def incomplete(exported: Any, root: nn.Module, prefix: str = "") -> list[str]:
    """What keeps an exported program from being run from its graph and a checkpoint: operators
    that are not ATen operators, and tensors read that are neither checkpoint weights nor
    constants with values (buffers computed at construction, which on meta have none)."""
    problems: dict[str, None] = {}
    for node in exported.graph.nodes:
        if node.op != "call_function" or node.target is operator.getitem:
            continue
        if isinstance(node.target, torch._ops.OpOverload) and node.target.namespace == "aten":
            continue
        stack = list((node.meta.get("nn_module_stack") or {}).values())
        path, cls = stack[-1] if stack else ("", None)
        cls_name = getattr(cls, "__name__", None) or str(cls or "?").rsplit(".", 1)[-1]
        problems[f"{cls_name} (module {path.removeprefix(prefix)}) runs {node.target}, which is not an ATen "
                 "operator"] = None
    signature = exported.graph_signature
    persistent = set(root.state_dict())
    inputs = {**signature.inputs_to_buffers, **signature.inputs_to_lifted_tensor_constants}
    for node in exported.graph.nodes:
        fqn = inputs.get(node.name) if node.op == "placeholder" else None
        if fqn is None or fqn in persistent or not node.users:
            continue
        value = exported.constants.get(fqn)
        if value is None:
            try:
                value = root.get_buffer(fqn)
            except AttributeError:
                value = None
        if isinstance(value, torch.Tensor) and value.device.type != "meta":
            continue
        owner_path = fqn.rpartition(".")[0]
        owner = root.get_submodule(owner_path) if owner_path else root
        problems[f"{type(owner).__name__} (module {owner_path.removeprefix(prefix)}) reads {fqn.rpartition('.')[2]}, "
                 "a buffer computed "
                 "at construction that no checkpoint holds (on meta it has no values)"] = None
    return list(problems)


# -------------------------------------------------------------------------------------------
# JSON


def _jsonable(value: Any) -> Any:
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, torch.dtype):
        return str(value).removeprefix("torch.")
    return str(value)  # torch.device ("meta"), layout and memory format ("torch.strided")


def write_ir(ir: Any, path: Path, infercast: dict[str, Any]) -> int:
    """Write ``ir`` as pytorch-ir's JSON, with ``infercast`` (what was exported, and how) as one
    more top-level key; attributes that are torch objects are written as text (dtypes by name,
    devices as ``meta``: a runtime places the graph where it runs). Returns the bytes written."""
    data = ir.to_dict()
    for node in data["nodes"]:
        node["attrs"] = _jsonable(node["attrs"])
    data["infercast"] = infercast
    text = json.dumps(data, indent=1)
    path.write_text(text)
    return len(text)


_TORCH_NAME = re.compile(r"^(torch\.)?[a-z_0-9]+$")


def _restore(name: str, value: Any, device: str) -> Any:
    if name == "device" and isinstance(value, str):
        return torch.device(device)
    if name in ("dtype", "layout", "memory_format") and isinstance(value, str) and _TORCH_NAME.match(value):
        found = getattr(torch, value.removeprefix("torch."), None)
        return found if found is not None else value
    return value


def load_ir(path: str | Path, device: str = "cpu"):
    """Read an IR file written by :func:`write_ir` back into a ``torch_ir.IR`` that pytorch-ir's
    executor runs on ``device`` (dtype, layout and device attributes become torch objects again)."""
    torch_ir = require_pytorch_ir()
    data = json.loads(Path(path).read_text())
    ir = torch_ir.IR.from_dict(data)
    for node in ir.nodes:
        node.attrs = {k: _restore(k, v, device) for k, v in node.attrs.items()}
    return ir
