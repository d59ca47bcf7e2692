from __future__ import annotations

import dataclasses

import pytest

from infercast_adapters import ModelProfile, ProfileError

BASE = dict(
    model_type="demo_moe",
    decoder_layer_class="DemoDecoderLayer",
    attention_class="DemoAttention",
    moe_class="DemoMoE",
    routed_experts_key="num_experts",
)


def make(**changes) -> ModelProfile:
    return ModelProfile(**{**BASE, **changes})


def test_valid_profile_passes_and_is_frozen() -> None:
    profile = make(field_overrides={"kv_a_proj_with_mqa": "kv_down"})
    profile.validate()
    assert profile.is_moe and not profile.has_vision
    assert profile.field_name("kv_a_proj_with_mqa") == "kv_down"
    assert profile.field_name("o_proj") == "o_proj"
    with pytest.raises(dataclasses.FrozenInstanceError):
        profile.model_type = "other"  # type: ignore[misc]
    with pytest.raises(TypeError):
        profile.field_overrides["x"] = "y"  # type: ignore[index]


def test_overrides_are_copied_from_the_callers_dict() -> None:
    overrides = {"a": "b"}
    profile = make(field_overrides=overrides)
    overrides["a"] = "changed"
    assert profile.field_name("a") == "b"


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"model_type": "has space"}, "model_type"),
        ({"model_type": ""}, "model_type"),
        ({"decoder_layer_class": "not.a.class"}, "decoder_layer_class"),
        ({"attention_class": None}, "attention_class"),
        ({"attention_kind": "not a kind"}, "attention_kind"),
        ({"routed_experts_key": None}, "routed_experts_key"),
        ({"moe_class": None}, "moe_class"),
        ({"layers_path": "model..layers"}, "layers_path"),
        ({"vision_tower_class": "Tower"}, "vision_tower_path"),
        ({"field_overrides": {"ok": "not ok"}}, "field_overrides"),
        ({"attention_qk_norm": "yes"}, "attention_qk_norm"),
        ({"tokenizer": "sentencepiece"}, "tokenizer"),
    ],
)
def test_invalid_field_is_named(changes: dict, field: str) -> None:
    with pytest.raises(ProfileError) as info:
        make(**changes).validate()
    assert info.value.field == field
    assert f"ModelProfile.{field}" in str(info.value)


def test_vision_fields_together_are_valid() -> None:
    make(vision_tower_class="Tower", vision_tower_path="vision_tower", vision_blocks_path="vision_tower.blocks").validate()


@pytest.mark.parametrize(("tokenizer_class", "kind"), [
    ("TikTokenTokenizer", "tiktoken"),
    ("LlamaTokenizerFast", "fast"),
    ("PreTrainedTokenizerFast", "fast"),
    ("TokenizersBackend", "fast"),
    ("LlamaTokenizer", None),
])
def test_tokenizer_class_kinds(tokenizer_class: str, kind: str | None) -> None:
    from infercast_adapters.profile import tokenizer_kind_of

    assert tokenizer_kind_of(tokenizer_class) == kind
