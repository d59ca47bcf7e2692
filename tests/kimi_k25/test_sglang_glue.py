"""The optional sglang glue: what runs without sglang is tested here; the rest skips with the reason."""

from __future__ import annotations

import importlib.util
from importlib.metadata import entry_points

import pytest
import torch
from infercast_adapters import ConfigError
from infercast_eagle3.checkpoint import module_to_checkpoint
from infercast_kimi_k25 import sglang_plugin
from infercast_kimi_k25.eagle3 import Eagle3DeepseekV2ForCausalLM, KimiK2Config

from .test_eagle3 import tiny_mla_config

HAS_SGLANG = importlib.util.find_spec("sglang") is not None


def test_the_sglang_plugin_entry_point_names_register() -> None:
    (point,) = [ep for ep in entry_points(group="sglang.srt.plugins") if ep.name == "infercast_kimi_k2"]
    assert point.load() is sglang_plugin.register


def test_register_adds_kimi_k2_only_where_missing() -> None:
    registry: dict = {}
    assert sglang_plugin.register(registry) == ["sglang"] and registry == {"kimi_k2": KimiK2Config}
    existing = {"kimi_k2": object}
    assert sglang_plugin.register(existing) == [] and existing == {"kimi_k2": object}


def checkpoint_of(config) -> list[tuple[str, torch.Tensor]]:
    from infercast_eagle3.config import from_transformers

    draft = Eagle3DeepseekV2ForCausalLM(from_transformers(config))
    return list(module_to_checkpoint(draft.state_dict(), config.q_lora_rank).items())


def test_checked_weights_pass_a_good_checkpoint_through_unchanged() -> None:
    config = tiny_mla_config()
    weights = checkpoint_of(config)
    passed = list(sglang_plugin.checked_weights(config, iter(weights)))
    assert [name for name, _ in passed] == [name for name, _ in weights]
    assert all(a is b for (_, a), (_, b) in zip(passed, weights))


@pytest.mark.parametrize("q_a_shape, message", [
    ((20, 64), r"fused_qkv_a_proj_with_mqa.weight has shape \(40, 64\), expected \(44, 64\)"),
    ((24, 32), r"q_a_proj.weight \(24, 32\) and .*kv_a_proj_with_mqa.weight \(20, 64\) must have the same input width"),
])
def test_checked_weights_name_a_misshaped_fused_half(q_a_shape, message) -> None:
    config = tiny_mla_config()
    weights = [(n, torch.zeros(q_a_shape) if n.endswith("q_a_proj.weight") else t) for n, t in checkpoint_of(config)]
    with pytest.raises(ConfigError, match=message):
        list(sglang_plugin.checked_weights(config, weights))


@pytest.mark.skipif(not HAS_SGLANG, reason="sglang is not installed (optional extra infercast-kimi-k25[sglang], "
                                           "CUDA wheels); the external model package needs it")
def test_the_external_model_package_serves_the_mla_draft() -> None:  # pragma: no cover - needs sglang
    module = importlib.import_module("infercast_kimi_k25.sglang_models.eagle3_mla")
    names = [cls.__name__ for cls in module.EntryClass]
    assert names in ([], ["Eagle3DeepseekV2ForCausalLM"])
    assert (names == []) == (module.upstream_class() is None)
