"""Draft checkpoints: sglang tensor names, fused MLA projection, clear errors."""

from __future__ import annotations

import pytest
import torch
from infercast_adapters import ConfigError
from infercast_eagle3.checkpoint import (
    FUSED,
    SPLIT,
    checkpoint_to_module,
    load_weights,
    module_to_checkpoint,
    save_weights,
)
from safetensors.torch import load_file, save_file

from .test_loop import tiny_llama_draft


def test_round_trip_keeps_every_tensor(tmp_path) -> None:
    draft = tiny_llama_draft(0)
    draft.d2t.copy_(torch.arange(draft.d2t.shape[0]) % 3)
    path = save_weights(draft, tmp_path)
    names = set(load_file(str(path)))
    assert {"fc.weight", "norm.weight", "lm_head.weight", "d2t", "layers.0.hidden_norm.weight"} <= names
    fresh = tiny_llama_draft(1)
    assert load_weights(fresh, tmp_path) == []
    for (name, a), (_, b) in zip(draft.state_dict().items(), fresh.state_dict().items()):
        assert torch.equal(a, b), name


def test_mla_down_projections_fuse_on_load_and_split_on_save() -> None:
    q_a, kv_a, q_bias, kv_bias = torch.randn(6, 16), torch.randn(5, 16), torch.randn(6), torch.randn(5)
    names = {part: [name + f".{part}" for name in SPLIT] for part in ("weight", "bias")}
    state = checkpoint_to_module({names["weight"][0]: q_a, names["weight"][1]: kv_a, names["bias"][0]: q_bias,
                                  names["bias"][1]: kv_bias, "t2d": torch.ones(3)})
    assert set(state) == {FUSED + ".weight", FUSED + ".bias"}
    assert torch.equal(state[FUSED + ".weight"], torch.cat([q_a, kv_a]))
    assert torch.equal(state[FUSED + ".bias"], torch.cat([q_bias, kv_bias]))
    back = module_to_checkpoint(state, q_lora_rank=6)
    assert torch.equal(back[names["weight"][0]], q_a) and torch.equal(back[names["weight"][1]], kv_a)
    assert torch.equal(back[names["bias"][0]], q_bias) and torch.equal(back[names["bias"][1]], kv_bias)
    with pytest.raises(ConfigError, match="q_lora_rank"):
        module_to_checkpoint(state)


def test_missing_unexpected_and_misshaped_tensors_are_named(tmp_path) -> None:
    draft = tiny_llama_draft(0)
    path = save_weights(draft, tmp_path)
    tensors = load_file(str(path))
    cases = {
        "missing": ({k: v for k, v in tensors.items() if k != "fc.weight"}, r"missing tensor\(s\).*fc.weight \(32, 96\)"),
        "unexpected": ({**tensors, "layers.1.mlp.up_proj.weight": torch.zeros(1)}, "unexpected.*layers.1.mlp.up_proj"),
        "shape": ({**tensors, "fc.weight": torch.zeros(32, 64)}, r"fc.weight has shape \(32, 64\), expected \(32, 96\)"),
    }
    for name, (content, message) in cases.items():
        bad = tmp_path / f"{name}.safetensors"
        save_file(content, str(bad))
        with pytest.raises(ConfigError, match=message):
            load_weights(tiny_llama_draft(0), bad)
    with pytest.raises(ConfigError, match="no such file"):
        load_weights(draft, tmp_path / "nope.safetensors")
