"""Draft checkpoints in the tensor names serving engines and trainers use.

Reading: one canonical layout, sglang 0.5.23's (``layers.0.*``, ``fc_norm.<i>.*``, no ``model.``
prefix), reached from every published spelling: SpecForge's exporter, EAGLE's ``cnets.py``
and older Model-Optimizer exports write ``midlayer.*`` (sglang maps it to ``layers.0``), some
exports prefix ``model.``, legacy EAGLE 3.1 drafts name their per-aux norms ``aux_norm_low``,
``aux_norm_mid`` and ``aux_norm_high`` (sglang's ``fc_norm.0..2``). Semantics from sglang
0.5.23 ``python/sglang/srt/models/llama_eagle3.py`` and ``kimi_k25_eagle3.py``
(``load_weights``).

Writing: ``midlayer.*``, the one layer name that sglang 0.5.10 (whose Llama draft module is
``midlayer``), sglang 0.5.23 (both draft models) and SpecForge's exporter all read; ``d2t`` and
``t2d`` (SpecForge's boolean ``[vocab]`` mask) only for a pruned draft vocabulary, as SpecForge
registers them; ``embed_tokens`` only when the draft cannot use the target's (sglang replaces a
draft's embedding with the target's unless their widths differ; SpecForge drops it).

MLA drafts store ``q_a_proj`` and ``kv_a_proj_with_mqa`` separately; they are fused along the
output dimension into ``fused_qkv_a_proj_with_mqa`` on load and split on save.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterable
from pathlib import Path

import torch
from infercast_adapters import ConfigError
from safetensors import safe_open
from safetensors.torch import save_file

FUSED = "layers.0.self_attn.fused_qkv_a_proj_with_mqa"
SPLIT = ("layers.0.self_attn.q_a_proj", "layers.0.self_attn.kv_a_proj_with_mqa")
LEGACY_PREFIXES = (
    ("midlayer.", "layers.0."),
    ("aux_norm_low.", "fc_norm.0."),
    ("aux_norm_mid.", "fc_norm.1."),
    ("aux_norm_high.", "fc_norm.2."),
)
SAVED_LAYER_PREFIX = "midlayer."


def canonical_name(name: str) -> str:
    """A checkpoint tensor name in sglang 0.5.23's layout: no ``model.`` prefix, ``midlayer.`` as
    ``layers.0.``, legacy ``aux_norm_*`` as ``fc_norm.<i>``."""
    name = name.removeprefix("model.")
    for old, new in LEGACY_PREFIXES:
        if name.startswith(old):
            return new + name[len(old):]
    return name


def module_name(name: str) -> str:
    """A checkpoint tensor name as the draft module names it (the MLA down projections fused)."""
    name = canonical_name(name)
    for half in SPLIT:
        if name.startswith(half + "."):
            return FUSED + name[len(half):]
    return name


def checkpoint_to_module(tensors: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Checkpoint tensors to module state-dict names (fuse the MLA down projections, drop ``t2d``)."""
    state = {canonical_name(k): v for k, v in tensors.items() if canonical_name(k) != "t2d"}
    for suffix in (".weight", ".bias"):
        q, kv = (name + suffix for name in SPLIT)
        if q in state and kv in state:
            _check_halves(q, tuple(state[q].shape), kv, tuple(state[kv].shape), FUSED + suffix)
            state[FUSED + suffix] = torch.cat([state.pop(q), state.pop(kv)], 0)
    return state


def _check_halves(q: str, q_shape: tuple, kv: str, kv_shape: tuple, fused: str) -> None:
    if q_shape[1:] != kv_shape[1:]:
        raise ConfigError(f"{q} {q_shape} and {kv} {kv_shape} must have the same input width to fuse into {fused}")


def module_to_checkpoint(state: dict[str, torch.Tensor], q_lora_rank: int | None = None) -> dict[str, torch.Tensor]:
    """Module state-dict names to the names drafts are saved under: the fused projection split
    after ``q_lora_rank`` rows, the layer as ``midlayer.``."""
    out = {}
    for name, tensor in state.items():
        if name.startswith(FUSED + "."):
            if q_lora_rank is None:
                raise ConfigError("splitting the fused MLA projection needs q_lora_rank")
            suffix = name[len(FUSED):]
            out[SPLIT[0] + suffix], out[SPLIT[1] + suffix] = tensor[:q_lora_rank].contiguous(), tensor[q_lora_rank:].contiguous()
        else:
            out[name] = tensor
    return {SAVED_LAYER_PREFIX + k.removeprefix("layers.0.") if k.startswith("layers.0.") else k: v
            for k, v in out.items()}


def _files(path: str | Path) -> list[Path]:
    path = Path(path)
    if path.is_dir():
        files = sorted(path.glob("*.safetensors"))
        if not files:
            raise ConfigError(f"{path}: no *.safetensors files")
        return files
    if not path.exists():
        raise ConfigError(f"{path}: no such file or directory")
    return [path]


def checkpoint_names(path: str | Path) -> set[str]:
    """Canonical names of the tensors under ``path`` (read from the headers only)."""
    names: set[str] = set()
    for file in _files(path):
        with safe_open(str(file), "pt") as handle:
            names.update(canonical_name(k) for k in handle.keys())
    return names


class TensorCheck:
    """Checks checkpoint tensors one at a time against the module tensors a draft expects.

    ``see`` raises at once on an unknown or mis-shaped tensor; ``finish`` raises on a missing
    one. ``optional`` tensors may be absent; ``ignored`` ones are accepted and not loaded (the
    draft uses the target's, as sglang does), and reported by ``finish``."""

    def __init__(self, expected: dict[str, tuple[int, ...]], optional: Iterable[str] = (),
                 ignored: Iterable[str] = ()) -> None:
        self.expected, self.optional, self.ignored = expected, set(optional), set(ignored)
        self.seen: set[str] = set()
        self.skipped: list[str] = []
        self._halves: dict[str, tuple[str, tuple[int, ...]]] = {}

    def see(self, name: str, shape: Iterable[int]) -> str | None:
        """Check one tensor; returns its module name, or None when it is not loaded."""
        shape, canonical = tuple(shape), canonical_name(name)
        if canonical == "t2d":
            self.skipped.append(name)
            return None
        target = module_name(name)
        if canonical in self.ignored or target in self.ignored:
            self.skipped.append(name)
            return None
        if target not in self.expected:
            raise ConfigError(f"unexpected tensor in the checkpoint: {name}"
                              + (f" (read as {target})" if target != name else "")
                              + f"; the draft has: {', '.join(sorted(self.expected))}")
        half = next((h for h in SPLIT if canonical.startswith(h + ".")), None)
        if half is not None:  # one of the two halves of the fused projection
            suffix = target[len(FUSED):]
            self._halves[half + suffix] = (name, shape)
            q, kv = self._halves.get(SPLIT[0] + suffix), self._halves.get(SPLIT[1] + suffix)
            if q is None or kv is None:
                return target
            _check_halves(q[0], q[1], kv[0], kv[1], target)
            shape = (q[1][0] + kv[1][0], *q[1][1:])
        if shape != tuple(self.expected[target]):
            raise ConfigError(f"tensor {target} has shape {shape}, expected {tuple(self.expected[target])}")
        self.seen.add(target)
        return target

    def finish(self) -> list[str]:
        """Raise on missing tensors; returns the tensors accepted but not loaded."""
        missing = [k for k in self.expected if k not in self.seen and k not in self.optional]
        if missing:
            described = []
            for k in missing:
                halves = [half + k[len(FUSED):] for half in SPLIT] if k.startswith(FUSED + ".") else []
                absent = [h for h in halves if h not in self._halves]
                described.append(f"{k} {self.expected[k]}" + (f" (no {' or '.join(absent)})" if absent else ""))
            raise ConfigError(f"missing tensor(s) in the checkpoint: {', '.join(described)}")
        return self.skipped


def check_tensors(shapes: dict[str, tuple[int, ...]], expected: dict[str, tuple[int, ...]],
                  optional: Iterable[str] = ("d2t",), ignored: Iterable[str] = ()) -> list[str]:
    """Checkpoint tensor shapes against the draft's module tensors (see :class:`TensorCheck`)."""
    check = TensorCheck(expected, optional, ignored)
    for name, shape in shapes.items():
        check.see(name, shape)
    return check.finish()


def draft_expectations(draft) -> tuple[dict[str, tuple[int, ...]], set[str], set[str]]:
    """What a checkpoint for ``draft`` holds: (module tensors with shapes, the optional ones,
    names accepted but not loaded because the draft uses its target's or has no use for them)."""
    expected = {k: tuple(v.shape) for k, v in draft.state_dict().items()}
    optional = set() if draft.config.prunes_vocabulary else {"d2t"}
    if draft.config.shares_target_embedding:  # built without the target's: sglang would give it the target's
        optional.add("embed_tokens.weight")
    ignored = {name for name in ("embed_tokens.weight", "lm_head.weight") if name not in expected}
    if draft.fc is None:  # sglang's Llama draft builds fc even when it never applies it
        ignored |= {"fc.weight", "fc.bias"}
    return expected, optional, ignored


def load_weights(draft, path: str | Path) -> list[str]:
    """Load safetensors weights into ``draft`` after checking every name and shape from the
    file headers. Returns the tensors accepted but not loaded (``t2d``; an embedding or head
    the draft takes from its target), which are also reported as a warning."""
    check = TensorCheck(*draft_expectations(draft))
    plan: dict[Path, list[tuple[str, str]]] = {}
    for file in _files(path):
        with safe_open(str(file), "pt") as handle:
            for name in handle.keys():
                target = check.see(name, handle.get_slice(name).get_shape())
                if target is not None:
                    plan.setdefault(file, []).append((name, target))
    skipped = check.finish()
    state, parts = draft.state_dict(), {}
    with torch.no_grad():
        for file, entries in plan.items():
            with safe_open(str(file), "pt") as handle:
                for name, target in entries:
                    tensor = handle.get_tensor(name)
                    half = next((h for h in SPLIT if canonical_name(name).startswith(h + ".")), None)
                    if half is not None:  # fuse the two halves once both are read
                        parts.setdefault(target, {})[half] = tensor
                        if len(parts[target]) < 2:
                            continue
                        pair = parts.pop(target)
                        tensor = torch.cat([pair[SPLIT[0]], pair[SPLIT[1]]], 0)
                    state[target].copy_(tensor.to(state[target].dtype))
    if skipped:
        warnings.warn(f"{path}: not loaded (the draft uses its target's, as sglang does): {', '.join(skipped)}",
                      stacklevel=2)
    return skipped


def save_weights(draft, path: str | Path, *, include_embedding: bool | None = None) -> Path:
    """Write ``draft`` as a safetensors checkpoint sglang (0.5.10 and later) and SpecForge's
    exporter read: ``midlayer.*``, ``d2t`` and ``t2d`` for a pruned vocabulary only, the
    embedding only when the draft cannot use the target's (or when ``include_embedding``)."""
    state = {k: v.detach().contiguous() for k, v in draft.state_dict().items()}
    config = draft.config
    if include_embedding is None:
        include_embedding = not config.shares_target_embedding
    if not include_embedding:
        state.pop("embed_tokens.weight", None)
    if config.prunes_vocabulary:
        d2t = state["d2t"]
        t2d = torch.zeros(config.vocab_size, dtype=torch.bool)
        t2d[(torch.arange(d2t.shape[0]) + d2t.cpu())] = True
        state["t2d"] = t2d
    else:
        state.pop("d2t", None)
    q_lora = getattr(config.layer_config, "q_lora_rank", None)
    path = Path(path)
    if path.suffix != ".safetensors":
        path.mkdir(parents=True, exist_ok=True)
        path = path / "model.safetensors"
    save_file(module_to_checkpoint(state, q_lora), str(path))
    return path
