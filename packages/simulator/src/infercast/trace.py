"""Record every operator a forward pass runs, with a dispatch mode over meta tensors."""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from typing import Any, Iterator

import torch
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

from infercast.layers import META, SimDecoderLayer

# Metadata-only aten ops: no kernel runs for them in an engine (or in eager PyTorch).
FREE_OPS = frozenset({
    "aten::view", "aten::_unsafe_view", "aten::reshape", "aten::expand", "aten::permute", "aten::transpose",
    "aten::t", "aten::slice", "aten::select", "aten::unsqueeze", "aten::squeeze", "aten::split",
    "aten::split_with_sizes", "aten::detach", "aten::alias", "aten::as_strided", "aten::empty",
    "aten::empty_like", "aten::new_empty", "aten::empty_strided", "aten::arange", "aten::lift_fresh",
    "aten::_to_copy", "aten::zeros_like", "aten::zeros", "aten::unbind",
})


@dataclass(frozen=True)
class TensorSpec:
    shape: tuple[int, ...]
    dtype: torch.dtype
    role: str = "activation"
    """``weight`` for model weights, else ``activation`` (KV caches are named by the op's formula)."""

    @property
    def numel(self) -> int:
        n = 1
        for d in self.shape:
            n *= d
        return n

    @property
    def nbytes(self) -> int:
        return self.numel * self.dtype.itemsize


@dataclass
class OpRecord:
    """One operator call: name (``infercast::gemm``, ``aten::bmm``), arguments (tensors as
    :class:`TensorSpec`, scalars as they were), outputs, and where it ran."""

    name: str
    args: tuple[Any, ...]
    outputs: tuple[TensorSpec, ...]
    path: str
    layer: int | None
    count: int = 1
    layers: tuple[int, ...] = field(default_factory=tuple)
    named: dict[str, Any] = field(default_factory=dict)
    """Arguments by their schema names (``x``, ``top_k``, ...), for formulas that read them."""

    def tensors(self) -> list[TensorSpec]:
        return [a for a in self.args if isinstance(a, TensorSpec)]

    def __getitem__(self, name: str) -> Any:
        """An argument by name: ``record["num_seqs"]``."""
        try:
            return self.named[name]
        except KeyError:
            raise KeyError(f"{self.name} has no argument {name!r} (has {', '.join(self.named)})") from None


class _Recorder(TorchDispatchMode):
    @classmethod
    def _should_skip_dynamo(cls) -> bool:
        """The recorder never runs under torch.compile, so its ``__torch_dispatch__`` needs no
        dynamo guard (the guard imports torch._dynamo, 1.2 s, on the first traced op)."""
        return False

    def __init__(self, weight_ids: set[int], path_stack: list[str]) -> None:
        super().__init__()
        self.records: list[OpRecord] = []
        self.weight_ids = weight_ids
        self.path_stack = path_stack
        self.layer: int | None = None

    def _spec(self, value: Any) -> Any:
        if isinstance(value, torch.Tensor):
            role = "weight" if id(value) in self.weight_ids or id(getattr(value, "_base", None)) in self.weight_ids else "activation"
            return TensorSpec(tuple(value.shape), value.dtype, role)
        return value

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        name = func._schema.name
        if name not in FREE_OPS:
            flat_args, _ = tree_flatten((args, kwargs))
            flat_out, _ = tree_flatten(out)
            named = {}
            if func.namespace not in ("aten", "prims"):
                names = [a.name for a in func._schema.arguments]
                named = {n: self._spec(v) for n, v in zip(names, args)}
                named.update({n: self._spec(v) for n, v in kwargs.items()})
            self.records.append(OpRecord(
                name=name,
                args=tuple(self._spec(a) for a in flat_args),
                outputs=tuple(self._spec(o) for o in flat_out if isinstance(o, torch.Tensor)),
                path=self.path_stack[-1] if self.path_stack else "",
                layer=self.layer,
                named=named,
            ))
        return out


@contextlib.contextmanager
def _module_paths(model: nn.Module, stack: list[str]) -> Iterator[None]:
    names = model.module_names()

    def pre(module, args):
        stack.append(names.get(id(module), stack[-1] if stack else ""))

    def post(module, args, output):
        stack.pop()

    handles = [torch.nn.modules.module.register_module_forward_pre_hook(pre),
               torch.nn.modules.module.register_module_forward_hook(post)]
    try:
        yield
    finally:
        for handle in handles:
            handle.remove()


def trace(model: nn.Module, tokens: int, *, every_layer: bool = False, images: int = 0,
          patches_per_image: int = 0) -> list[OpRecord]:
    """Trace one forward of a :class:`~infercast.build.SimModel` over ``tokens`` tokens.

    Decoder layers with equal :meth:`signature` are traced once and their records counted
    for each of them, unless ``every_layer``. With ``images``, the vision tower first encodes
    that many images of ``patches_per_image`` patches (its blocks are identical: traced once).
    """
    stack: list[str] = []
    recorder = _Recorder(model.weight_ids(), stack)
    hidden = model.embed_tokens.weights["weight"].shape[1]
    groups: dict[tuple, list[SimDecoderLayer]] = {}
    for layer in model.layers:
        key = (id(layer),) if every_layer else layer.signature()
        groups.setdefault(key, []).append(layer)
    records: list[OpRecord] = []
    with _module_paths(model, stack), recorder:
        if images and getattr(model, "vision", None) is not None:
            records += _trace_vision(model.vision, recorder, images, patches_per_image)
        ids = torch.empty(tokens, dtype=torch.int64, device=META)
        h = model.embed_tokens(ids)
        records += _take(recorder)
        residual = h.new_empty(h.shape)
        for members in groups.values():
            recorder.layer = members[0].index
            members[0](torch.empty(tokens, hidden, dtype=h.dtype, device=META), residual)
            for record in _take(recorder):
                record.count = len(members)
                record.layers = tuple(m.index for m in members)
                records.append(record)
        recorder.layer = None
        model.head(torch.empty(tokens, hidden, dtype=h.dtype, device=META), residual)
        records += _take(recorder)
    return records


def _trace_vision(tower: nn.Module, recorder: _Recorder, images: int, patches: int) -> list[OpRecord]:
    records = []
    x = tower.embed(images * patches)
    records += _take(recorder)
    tower.blocks[0](x, images, patches)
    for record in _take(recorder):
        record.count = len(tower.blocks)
        records.append(record)
    tower.project(x)
    records += _take(recorder)
    return records


def _take(recorder: _Recorder) -> list[OpRecord]:
    taken, recorder.records = recorder.records, []
    return taken
