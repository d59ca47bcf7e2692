"""Phase-1 patches: each fixes its problem, keeps what the user set, and touches only kimi_k25."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import transformers.utils
from transformers import AutoConfig

from infercast_kimi_k25 import config_patches
from infercast_kimi_k25.architecture import kimi_k25_config

from .conftest import tiny_native_config


def test_is_torch_fx_available_is_provided_when_missing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delattr(transformers.utils, "is_torch_fx_available", raising=False)
    with pytest.raises(ImportError):
        exec("from transformers.utils import is_torch_fx_available", {})
    assert config_patches.provide_is_torch_fx_available() is True
    namespace: dict = {}
    exec("from transformers.utils import is_torch_fx_available", namespace)
    assert namespace["is_torch_fx_available"]() is True
    assert config_patches.provide_is_torch_fx_available() is False  # once


def test_flash_attention_is_replaced_in_text_and_vision_configs(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(config_patches, "flash_attention_2_available", lambda: False)
    config = tiny_native_config()
    config.text_config._attn_implementation = "flash_attention_2"
    config.vision_config._attn_implementation = "flash_attention_2"
    assert config_patches.replace_flash_attention(config) == ["text_config", "vision_config"]
    assert config.text_config._attn_implementation == config.vision_config._attn_implementation == "sdpa"


def test_flash_attention_is_kept_where_flash_attn_is_installed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(config_patches, "flash_attention_2_available", lambda: True)
    config = tiny_native_config()
    config.vision_config._attn_implementation = "flash_attention_2"
    assert config_patches.replace_flash_attention(config) == []
    assert config.vision_config._attn_implementation == "flash_attention_2"


def test_a_flash_attn_namespace_package_does_not_keep_flash_attention(tmp_path, monkeypatch) -> None:
    """flash-attn 4 (installed with sglang) leaves a ``flash_attn`` namespace package: it
    imports, but transformers cannot use flash-attn 2, so the config must still fall back."""
    import importlib.util

    from transformers.utils import is_flash_attn_2_available

    if is_flash_attn_2_available():
        pytest.skip("flash-attn 2 is really usable here")
    (tmp_path / "flash_attn").mkdir()  # no __init__.py: a namespace package, as flash-attn 4 leaves it
    monkeypatch.syspath_prepend(str(tmp_path))
    assert importlib.util.find_spec("flash_attn") is not None
    config = tiny_native_config()
    config.vision_config._attn_implementation = "flash_attention_2"
    assert config_patches.replace_flash_attention(config) == ["vision_config"]
    assert config.vision_config._attn_implementation == "sdpa"
    assert config_patches.flash_attention_2_available() is False


def test_vision_names_are_bridged_both_ways_without_overwriting() -> None:
    vision = kimi_k25_config().vision_config
    added = config_patches.bridge_vision_names(vision)
    assert vision.spatial_merge_size == 2 and vision.temporal_patch_size == 1 and vision.in_channels == 3
    assert (vision.vt_hidden_size, vision.vt_num_hidden_layers, vision.vt_num_attention_heads,
            vision.vt_intermediate_size) == (1152, 27, 16, 4304)
    assert "hidden_size" not in added  # already there
    vision.in_channels = 1  # a user's value survives a second run
    config_patches.bridge_vision_names(vision)
    assert vision.in_channels == 1


def test_expert_counts_are_copied_to_the_root_with_fallbacks() -> None:
    config = kimi_k25_config()
    assert config_patches.copy_expert_counts(config) == {"n_routed_experts": 384, "n_shared_experts": 1,
                                                         "num_experts_per_tok": 8}
    # only the transformers-native spelling of routed experts, no shared-expert count
    other = SimpleNamespace(text_config=SimpleNamespace(num_local_experts=8, num_experts_per_tok=2))
    assert config_patches.copy_expert_counts(other) == {"n_routed_experts": 8, "n_shared_experts": 0,
                                                        "num_experts_per_tok": 2}
    dense = SimpleNamespace(text_config=SimpleNamespace(hidden_size=8))
    config_patches.copy_expert_counts(dense)
    assert not hasattr(dense, "n_routed_experts")  # a dense model is not made to look like MoE


def test_the_hook_patches_kimi_and_leaves_other_models_alone(kimi_manager) -> None:
    config = kimi_k25_config()
    kimi_manager.patch_config(config)
    assert config.n_routed_experts == 384 and config.vision_config.spatial_merge_size == 2
    for model_type in ("deepseek_v3", "llama", "qwen3_moe"):
        other = AutoConfig.for_model(model_type)
        before = other.to_dict()
        kimi_manager.patch_config(other)
        assert other.to_dict() == before


def test_published_vt_names_win_over_native_class_defaults() -> None:
    """A published-format config.json loads into the native class, which fills ``hidden_size``
    with its default; the file's ``vt_hidden_size`` is the real value."""
    from transformers import AutoConfig

    config = AutoConfig.for_model("kimi_k25", vision_config={"vt_hidden_size": 1024, "vt_num_hidden_layers": 4})
    assert config.vision_config.hidden_size == 1152  # the class default, not the file
    config_patches.bridge_vision_names(config.vision_config)
    assert (config.vision_config.hidden_size, config.vision_config.num_hidden_layers) == (1024, 4)
