"""Draft configs as sglang 0.5.23 reads them: capture ids by target family, the layer by the
draft's architecture, and every variant honoured or refused with an error naming its field."""

from __future__ import annotations

import types

import pytest
import torch
from infercast_adapters import ConfigError, hookimpl
from infercast_adapters.manager import AdapterManager
from infercast_eagle3.config import (
    ADD_ONE,
    ADD_ONE_IF_FIRST_IS_ONE,
    from_transformers,
    target_capture_rule,
)
from infercast_eagle3.layers import LlamaDraftLayer
from infercast_eagle3.loop import Eagle3Drafter, SpecSettings, Target, greedy_reference, speculative_generate
from infercast_eagle3.model import build_draft, draft_layer_class
from transformers import DeepseekV3Config, LlamaConfig

from .test_loop import VOCAB, random_prompt, tiny_llama_draft_config, tiny_llama_target

N = 61  # Kimi-K2.5's and DeepSeek-V3's depth


def draft_config(ids=None, **overrides):
    eagle = {"eagle_aux_hidden_state_layer_ids": ids} if ids is not None else {}
    return tiny_llama_draft_config(eagle_config=eagle, **overrides)


@pytest.mark.parametrize(("ids", "deepseek_rule", "llama_rule"), [
    ([0, 29, 57], [0, 29, 57], [1, 30, 58]),
    ([1, 29, 57], [2, 30, 58], [2, 30, 58]),
    ([2, 30, 58], [2, 30, 58], [3, 31, 59]),
    (None, [2, 30, 58], [2, 30, 58]),  # the default [2, N // 2, N - 3], inputs of those layers
], ids=["first-0", "first-1", "first-2", "default"])
def test_capture_ids_follow_sglangs_rule_for_the_target_family(ids, deepseek_rule, llama_rule) -> None:
    config = from_transformers(draft_config(ids))
    assert config.capture_indices(N, ADD_ONE_IF_FIRST_IS_ONE) == deepseek_rule
    assert config.capture_indices(N, ADD_ONE) == llama_rule


def test_the_rule_comes_from_the_adapters_then_sglangs_own_families() -> None:
    assert target_capture_rule(DeepseekV3Config()) == ADD_ONE_IF_FIRST_IS_ONE  # sglang's deepseek_v2.py
    assert target_capture_rule(LlamaConfig()) == ADD_ONE
    manager = AdapterManager()
    plugin = types.SimpleNamespace(infercast_eagle3_capture_rule=hookimpl(
        lambda target_model_type: ADD_ONE_IF_FIRST_IS_ONE if target_model_type == "llama" else None))
    manager.register(plugin, "llama_like_deepseek")
    assert target_capture_rule(LlamaConfig(), manager) == ADD_ONE_IF_FIRST_IS_ONE


def test_the_target_states_read_are_the_ones_the_rule_names() -> None:
    """Through the loop: the features the draft reads are the target's hidden states at the
    captured indices (here inputs of layers 0, 2 and 3 of a 6-layer target)."""
    model = tiny_llama_target(0)
    config = from_transformers(draft_config([0, 2, 3]))
    capture = config.capture_indices(6, ADD_ONE_IF_FIRST_IS_ONE)
    assert capture == [0, 2, 3]
    _, aux = Target(model, capture).run([5, 6, 7])
    states = model(input_ids=torch.tensor([[5, 6, 7]]), output_hidden_states=True).hidden_states
    assert torch.allclose(aux, torch.cat([states[0][0], states[2][0], states[3][0]], -1), atol=1e-6)


def test_unsorted_ids_are_captured_in_layer_order_as_sglang_concatenates_them() -> None:
    assert from_transformers(draft_config([57, 1, 29])).capture_indices(N, ADD_ONE) == [2, 30, 58]


@pytest.mark.parametrize(("overrides", "message"), [
    ({"eagle_aux_hidden_state_layer_ids": [1, 29, 57]},
     r"eagle_aux_hidden_state_layer_ids \[1, 29, 57\] is at the top level.*move the ids into eagle_config"),
    ({"eagle_aux_hidden_state_layer_ids": [1, 29, 57], "eagle_config": {"eagle_aux_hidden_state_layer_ids": [2, 30, 58]}},
     "disagrees with eagle_config's"),
    ({"num_aux_hidden_states": 2}, r"num_aux_hidden_states=2, but the target's capture yields 3"),
    ({"eagle_config": {"eagle_aux_hidden_state_layer_ids": [1, 1, 3]}}, "names a layer twice"),
    ({"eagle_config": {"eagle_aux_hidden_state_layer_ids": []}}, "non-empty list of layer numbers"),
    ({"eagle_config": {"use_aux_hidden_state": False}, "fc_norm": True}, "fc_norm .*use_aux_hidden_state is false"),
    ({"eagle_config": {"use_aux_hidden_state": False}, "target_hidden_size": 48}, r"target_hidden_size \(48\)"),
    ({"hidden_act": "gelu"}, "hidden_act='gelu': sglang's EAGLE3 draft MLP supports only silu"),
    ({"architectures": None}, "no architectures"),
    ({"architectures": ["LlamaForCausalLMEagle"]}, "LlamaForCausalLMEagle is an EAGLE-1/2 draft"),
    ({"num_hidden_layers": 2}, "num_hidden_layers=2"),
    ({"tie_word_embeddings": True, "draft_vocab_size": 50}, "tie_word_embeddings .*cannot be pruned"),
    ({"architectures": ["Eagle3DeepseekV2ForCausalLM"], "norm_before_fc": True},
     "norm_before_fc is set, but sglang's Eagle3DeepseekV2ForCausalLM has no norm before fc"),
    ({"draft_vocab_size": 200}, "draft_vocab_size 200 exceeds the vocabulary 97"),
])
def test_a_variant_sglang_would_not_serve_as_written_is_refused_by_field(overrides, message) -> None:
    fields = dict(overrides)
    config = tiny_llama_draft_config(**{k: v for k, v in fields.items() if k != "architectures"})
    if "architectures" in fields:
        config.architectures = fields["architectures"]
    with pytest.raises(ConfigError, match=message):
        from_transformers(config)


def test_capture_beyond_the_target_is_named() -> None:
    with pytest.raises(ConfigError, match=r"reads the inputs of layers \[2, 30, 61\].*inputs 0..60 \(bad id\(s\): \[60\]\)"):
        from_transformers(draft_config([1, 29, 60])).capture_indices(N, ADD_ONE)


def test_top_level_ids_agreeing_with_eagle_config_and_a_matching_num_aux_are_accepted() -> None:
    config = from_transformers(draft_config([1, 2, 4], eagle_aux_hidden_state_layer_ids=[1, 2, 4], num_aux_hidden_states=3))
    assert config.aux_layer_ids == [1, 2, 4] and config.num_aux == 3
    two = from_transformers(draft_config([1, 4], num_aux_hidden_states=2))
    assert two.num_aux == 2 and build_draft(two).fc.in_features == 2 * 32


def test_the_layer_is_chosen_by_the_drafts_architecture_not_the_target() -> None:
    config = from_transformers(draft_config())
    assert draft_layer_class(config, "kimi_k25") is LlamaDraftLayer
    unknown = from_transformers(draft_config(architectures=["Qwen3ForCausalLMEagle3"]))
    with pytest.raises(ConfigError, match="no EAGLE3 draft layer for architecture Qwen3ForCausalLMEagle3.*known "
                                          "architectures: LlamaForCausalLMEagle3"):
        draft_layer_class(unknown, "qwen3")
    mla = from_transformers(draft_config(architectures=["Eagle3DeepseekV2ForCausalLM"]))
    with pytest.raises(ConfigError, match="Install infercast-kimi-k25"):
        draft_layer_class(mla, "deepseek_v3", AdapterManager())


def test_without_aux_hidden_states_the_draft_reads_the_last_state_without_fc() -> None:
    model = tiny_llama_target(1)
    config = from_transformers(tiny_llama_draft_config(eagle_config={"use_aux_hidden_state": False}))
    assert config.capture_indices(6, ADD_ONE) == [6] and config.num_aux == 1
    torch.manual_seed(3)
    draft = build_draft(config)
    assert draft.fc is None and "fc.weight" not in draft.state_dict()
    prompt = random_prompt(1, 5)
    out = speculative_generate(Target(model, [6]), Eagle3Drafter(draft), prompt, 10, SpecSettings(3, 1))
    assert out.tokens == greedy_reference(model, prompt, 10)
    assert VOCAB == draft.lm_head.out_features
