"""Draft checkpoints in the tensor names serving engines use (sglang / SpecForge).

One mapping serves the plain-PyTorch loader here and the optional sglang glue: MLA drafts store
``q_a_proj`` and ``kv_a_proj_with_mqa`` separately and are fused along the output dimension
into ``fused_qkv_a_proj_with_mqa`` on load, split again on save.
"""

from __future__ import annotations

from pathlib import Path

import torch
from infercast_adapters import ConfigError
from safetensors.torch import load_file, save_file

FUSED = "layers.0.self_attn.fused_qkv_a_proj_with_mqa"
SPLIT = ("layers.0.self_attn.q_a_proj", "layers.0.self_attn.kv_a_proj_with_mqa")
OPTIONAL = ("embed_tokens.weight", "d2t", "t2d")


def checkpoint_to_module(tensors: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Checkpoint names to module state-dict names (fuse the MLA down projections, drop ``t2d``)."""
    state = {k.removeprefix("model."): v for k, v in tensors.items() if k != "t2d"}
    for suffix in (".weight", ".bias"):
        q, kv = (name + suffix for name in SPLIT)
        if q in state and kv in state:
            if state[q].shape[1:] != state[kv].shape[1:]:
                raise ConfigError(f"{q} {tuple(state[q].shape)} and {kv} {tuple(state[kv].shape)} must have the same "
                                  f"input width to fuse into {FUSED}{suffix}")
            state[FUSED + suffix] = torch.cat([state.pop(q), state.pop(kv)], 0)
    return state


def module_to_checkpoint(state: dict[str, torch.Tensor], q_lora_rank: int | None = None) -> dict[str, torch.Tensor]:
    """Module state-dict names to checkpoint names (split the fused projection after ``q_lora_rank`` rows)."""
    out = dict(state)
    for suffix in (".weight", ".bias"):
        if FUSED + suffix not in out:
            continue
        if q_lora_rank is None:
            raise ConfigError("splitting the fused MLA projection needs q_lora_rank")
        fused = out.pop(FUSED + suffix)
        out[SPLIT[0] + suffix], out[SPLIT[1] + suffix] = fused[:q_lora_rank].contiguous(), fused[q_lora_rank:].contiguous()
    return out


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


def check_tensors(shapes: dict[str, tuple[int, ...]], expected: dict[str, tuple[int, ...]]) -> None:
    """Module-named tensor shapes against the draft's: every unexpected, missing (beyond the
    optional ones) or mis-shaped tensor is a :class:`ConfigError` naming it."""
    unexpected = sorted(set(shapes) - set(expected))
    if unexpected:
        raise ConfigError(f"unexpected tensor(s) in the checkpoint: {', '.join(unexpected)}; "
                          f"the draft has: {', '.join(sorted(expected))}")
    missing = [k for k in expected if k not in shapes and k not in OPTIONAL]
    if missing:
        raise ConfigError(f"missing tensor(s) in the checkpoint: {', '.join(f'{k} {expected[k]}' for k in missing)}")
    for name, shape in shapes.items():
        if tuple(shape) != tuple(expected[name]):
            raise ConfigError(f"tensor {name} has shape {tuple(shape)}, expected {tuple(expected[name])}")


def load_weights(draft, path: str | Path, *, shared_embedding: bool = False) -> list[str]:
    """Load safetensors weights into ``draft``; every tensor must exist with the expected shape.
    Returns the optional tensors that were absent (``embed_tokens.weight`` when shared, ``d2t``)."""
    tensors: dict[str, torch.Tensor] = {}
    for file in _files(path):
        tensors.update(load_file(str(file)))
    state = checkpoint_to_module(tensors)
    expected = draft.state_dict()
    check_tensors({k: tuple(v.shape) for k, v in state.items()}, {k: tuple(v.shape) for k, v in expected.items()})
    if "d2t" in state:
        state["d2t"] = state["d2t"].to(torch.long)
    absent = [k for k in OPTIONAL if k in expected and k not in state]
    if "embed_tokens.weight" in absent and not shared_embedding:
        raise ConfigError("the checkpoint has no embed_tokens.weight; load it with shared_embedding=True and "
                          "pass the target's embedding")
    draft.load_state_dict(state, strict=False)
    return absent


def save_weights(draft, path: str | Path, *, include_embedding: bool = True) -> Path:
    state = {k: v.detach().contiguous() for k, v in draft.state_dict().items()}
    if not include_embedding:
        state.pop("embed_tokens.weight", None)
    q_lora = getattr(draft.config.layer_config, "q_lora_rank", None)
    path = Path(path)
    if path.suffix != ".safetensors":
        path.mkdir(parents=True, exist_ok=True)
        path = path / "model.safetensors"
    save_file(module_to_checkpoint(state, q_lora), str(path))
    return path
