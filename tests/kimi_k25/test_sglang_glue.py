"""The optional sglang glue, against a stand-in of the parts of sglang 0.5.23 it touches
(``sglang_standin/``): the config registry, the MLA draft model and what its ``load_weights``
loads or skips. A real sglang, where installed, is exercised by the last test."""

from __future__ import annotations

import importlib
import importlib.util
import sys
from importlib.metadata import entry_points
from pathlib import Path

import pytest
import torch
from infercast_adapters import ConfigError
from infercast_eagle3.checkpoint import module_to_checkpoint
from infercast_eagle3.config import from_transformers
from infercast_kimi_k25 import sglang_plugin
from infercast_kimi_k25.eagle3 import Eagle3DeepseekV2ForCausalLM, KimiK2Config
from transformers.models.auto.configuration_auto import CONFIG_MAPPING

from .test_eagle3 import tiny_mla_config

HAS_SGLANG = importlib.util.find_spec("sglang") is not None and "sglang_standin" not in str(
    importlib.util.find_spec("sglang").origin)
GLUE = "infercast_kimi_k25.sglang_models.eagle3_mla"


@pytest.fixture
def fresh_kimi_k2(monkeypatch: pytest.MonkeyPatch):
    """No ``kimi_k2`` in transformers' AutoConfig while the test runs (restored after)."""
    monkeypatch.delitem(CONFIG_MAPPING._extra_content, "kimi_k2", raising=False)


@pytest.fixture
def standin_sglang(monkeypatch: pytest.MonkeyPatch, fresh_kimi_k2):
    """The stand-in importable as ``sglang``; the glue's model package imported fresh."""
    monkeypatch.syspath_prepend(str(Path(__file__).parent / "sglang_standin"))
    for name in [n for n in sys.modules if n == "sglang" or n.startswith("sglang.") or n == GLUE]:
        monkeypatch.delitem(sys.modules, name)
    yield
    for name in [n for n in sys.modules if n == "sglang" or n.startswith("sglang.") or n == GLUE]:
        sys.modules.pop(name, None)


def test_the_sglang_plugin_entry_point_names_register() -> None:
    (point,) = [ep for ep in entry_points(group="sglang.srt.plugins") if ep.name == "infercast_kimi_k2"]
    assert point.load() is sglang_plugin.register


def test_register_adds_kimi_k2_only_where_missing(fresh_kimi_k2) -> None:
    registry: dict = {}
    assert sglang_plugin.register(registry) == ["sglang", "transformers"]
    assert registry == {"kimi_k2": KimiK2Config} and CONFIG_MAPPING["kimi_k2"] is KimiK2Config
    existing = {"kimi_k2": object}
    assert sglang_plugin.register(existing) == [] and existing == {"kimi_k2": object}


def test_register_finds_sglangs_registry_and_keeps_its_own_kimi_k2(standin_sglang) -> None:
    common = importlib.import_module(sglang_plugin.SGLANG_CONFIG_MODULE)
    assert sglang_plugin.sglang_config_registry() is common._CONFIG_REGISTRY
    assert sglang_plugin.register() == []  # sglang 0.5.23 has kimi_k2 already: nothing replaced
    assert common._CONFIG_REGISTRY["kimi_k2"] is common._KimiK2ConfigAlias
    assert CONFIG_MAPPING["kimi_k2"] is common._KimiK2ConfigAlias


def checkpoint_of(config) -> list[tuple[str, torch.Tensor]]:
    draft = Eagle3DeepseekV2ForCausalLM(from_transformers(config))
    return list(module_to_checkpoint(draft.state_dict(), config.q_lora_rank).items())


def test_the_external_model_package_serves_the_checked_mla_draft(standin_sglang) -> None:
    module = importlib.import_module(GLUE)
    upstream = importlib.import_module("sglang.srt.models.kimi_k25_eagle3").Eagle3DeepseekV2ForCausalLM
    (served,) = module.EntryClass  # fails when the plugin registers nothing
    assert served.__name__ == "Eagle3DeepseekV2ForCausalLM" and issubclass(served, upstream)
    config = tiny_mla_config()
    model = served(config)
    model.load_weights(checkpoint_of(config))
    assert model.skipped == [] and set(model.loaded) == {n for n, _ in model.named_parameters()}
    with pytest.raises(ConfigError, match="would skip layers.0.self_attn.bogus.weight"):
        served(config).load_weights(checkpoint_of(config) + [("layers.0.self_attn.bogus.weight", torch.zeros(1))])


def test_model_prefixed_and_legacy_names_reach_sglang_as_names_it_loads(standin_sglang) -> None:
    """Passed through, ``model.layers.0.*`` would become ``model.model.midlayer.*`` and be skipped."""
    module = importlib.import_module(GLUE)
    config = tiny_mla_config(fc_norm=True)
    weights = [("model." + name.replace("midlayer.", "layers.0."), t) for name, t in checkpoint_of(config)]
    weights = [(n.replace("model.fc_norm.0", "aux_norm_low"), t) for n, t in weights]
    upstream = importlib.import_module("sglang.srt.models.kimi_k25_eagle3").Eagle3DeepseekV2ForCausalLM
    unchecked = upstream(config)
    unchecked.load_weights(weights)
    assert len(unchecked.skipped) > 10  # what sglang alone makes of them
    model = module.EntryClass[0](config)
    model._params["model/fc_norm/0/weight"] = torch.nn.Parameter(torch.empty(32, device="meta"))
    model._params["model/fc_norm/1/weight"] = torch.nn.Parameter(torch.empty(32, device="meta"))
    model._params["model/fc_norm/2/weight"] = torch.nn.Parameter(torch.empty(32, device="meta"))
    model.load_weights(weights)
    assert model.skipped == [] and "model.fc_norm.0.weight" in model.loaded


def test_quantisation_scales_pass_where_sglangs_model_has_them(standin_sglang) -> None:
    module = importlib.import_module(GLUE)
    config = tiny_mla_config()
    scales = [("midlayer.self_attn.o_proj.weight_scale_inv", torch.ones(1, 1)),
              ("midlayer.mlp.gate_proj.weight_scale_inv", torch.ones(1, 1)),
              ("midlayer.mlp.up_proj.weight_scale_inv", torch.ones(1, 1))]
    model = module.EntryClass[0](config, quant_scales=True)
    model.load_weights(checkpoint_of(config) + scales)
    assert "model.midlayer.self_attn.o_proj.weight_scale_inv" in model.loaded and model.skipped == []
    with pytest.raises(ConfigError, match="would skip midlayer.self_attn.o_proj.weight_scale_inv"):
        module.EntryClass[0](config).load_weights(checkpoint_of(config) + scales)


def test_checked_weights_stream_and_spell_names_for_sglang() -> None:
    config = tiny_mla_config()
    weights = checkpoint_of(config)
    pulled = []

    def source():
        for item in weights:
            pulled.append(item[0])
            yield item

    stream = sglang_plugin.checked_weights(config, source())
    first = next(stream)
    assert len(pulled) == 1 and first[0] == weights[0][0].replace("midlayer.", "layers.0.")  # one in, one out
    rest = list(stream)
    assert all(a is b for (_, a), (_, b) in zip([first] + rest, weights))


def test_a_missing_tensor_is_named_when_the_stream_ends() -> None:
    config = tiny_mla_config()
    weights = [(n, t) for n, t in checkpoint_of(config) if "kv_a_proj_with_mqa" not in n]
    with pytest.raises(ConfigError, match="missing tensor.*fused_qkv_a_proj_with_mqa.weight .*no layers.0.self_attn."
                                          "kv_a_proj_with_mqa.weight"):
        list(sglang_plugin.checked_weights(config, weights))


@pytest.mark.parametrize("q_a_shape, message", [
    ((20, 64), r"fused_qkv_a_proj_with_mqa.weight has shape \(40, 64\), expected \(44, 64\)"),
    ((24, 32), r"q_a_proj.weight \(24, 32\) and .*kv_a_proj_with_mqa.weight \(20, 64\) must have the same input width"),
])
def test_checked_weights_name_a_misshaped_fused_half(q_a_shape, message) -> None:
    config = tiny_mla_config()
    weights = [(n, torch.zeros(q_a_shape) if n.endswith("q_a_proj.weight") else t) for n, t in checkpoint_of(config)]
    with pytest.raises(ConfigError, match=message):
        list(sglang_plugin.checked_weights(config, weights))


def test_sglangs_name_mapping() -> None:
    assert sglang_plugin.sglang_param_name("layers.0.mlp.gate_proj.weight") == "model.midlayer.mlp.gate_up_proj.weight"
    assert sglang_plugin.sglang_param_name("midlayer.self_attn.kv_a_proj_with_mqa.weight") == (
        "model.midlayer.self_attn.fused_qkv_a_proj_with_mqa.weight")
    assert sglang_plugin.sglang_param_name("lm_head.weight") == "lm_head.weight"
    assert sglang_plugin.sglang_param_name("model.fc.weight") == "model.model.fc.weight"  # why names are respelt
    assert sglang_plugin.sglang_param_name("d2t") is None


@pytest.mark.skipif(not HAS_SGLANG, reason="sglang is not installed (optional extra infercast-kimi-k25[sglang], "
                                           "CUDA wheels); the stand-in tests above cover the glue")
def test_the_external_model_package_serves_the_mla_draft_with_real_sglang() -> None:  # pragma: no cover
    module = importlib.import_module(GLUE)
    (served,) = module.EntryClass  # fails when the plugin registers nothing
    assert served.__name__ == "Eagle3DeepseekV2ForCausalLM" and issubclass(served, module.upstream_class())
    common = importlib.import_module(sglang_plugin.SGLANG_CONFIG_MODULE)
    assert common._CONFIG_REGISTRY["kimi_k2"] is not KimiK2Config  # sglang's own entry kept
