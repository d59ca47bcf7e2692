"""The Kimi-K2.5 adapter passes the adapter-core conformance kit."""

from __future__ import annotations

from infercast_adapters.testing import AdapterConformance

import infercast_kimi_k25.plugin


class TestKimiK25Conformance(AdapterConformance):
    plugin = infercast_kimi_k25.plugin
    plugin_name = "kimi_k25"
    model_type = "kimi_k25"
    offline_refs = ("moonshotai/Kimi-K2.5", "kimi-k2.5")


def test_profile_names_match_the_built_native_model() -> None:
    """Every class name and path in the profile exists on the native model built on meta."""
    import torch
    from transformers import AutoModelForImageTextToText

    from .conftest import tiny_native_config

    profile = infercast_kimi_k25.plugin.PROFILE
    with torch.device("meta"):
        model = AutoModelForImageTextToText.from_config(tiny_native_config())
    classes = {type(m).__name__ for m in model.modules()}
    assert {profile.decoder_layer_class, profile.attention_class, profile.moe_class, profile.vision_tower_class} <= classes

    def get(path):
        obj = model
        for part in path.split("."):
            obj = getattr(obj, part)
        return obj

    assert type(get(profile.vision_tower_path)).__name__ == profile.vision_tower_class
    assert len(get(profile.vision_blocks_path)) == 2 and len(get(profile.layers_path)) == 2
    assert get(profile.language_model_path) is model.model.language_model
    attention = get(profile.layers_path)[0].self_attn
    for name in ("q_a_proj", "kv_a_proj_with_mqa", "kv_b_proj", "o_proj"):
        assert hasattr(attention, profile.field_name(name))
