"""The draft/verify loop is lossless, and acceptance is measured with the engines' definitions."""

from __future__ import annotations

import pytest
import torch
from infercast_adapters import ConfigError
from infercast_eagle3.config import ADD_ONE, from_transformers
from infercast_eagle3.loop import (
    Eagle3Drafter,
    SpecSettings,
    Target,
    TargetDrafter,
    greedy_reference,
    speculative_generate,
    summarize,
)
from infercast_eagle3.model import build_draft
from transformers import AutoModelForCausalLM, LlamaConfig

from ..grids import grid

VOCAB = 97
SETTINGS = {"chain-s3": SpecSettings(3, 1), "tree-s3k2n5": SpecSettings(3, 2, 5), "tree-s2k3n6": SpecSettings(2, 3, 6),
            "tree-s3k2n7": SpecSettings(3, 2, 7)}


def tiny_llama_target(seed: int):
    torch.manual_seed(seed)
    config = LlamaConfig(vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=6,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256)
    config._attn_implementation = "eager"
    return AutoModelForCausalLM.from_config(config).eval()


def tiny_llama_draft_config(target_hidden: int = 32, **overrides) -> LlamaConfig:
    fields = dict(vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=4,
                  num_key_value_heads=2, architectures=["LlamaForCausalLMEagle3"], draft_vocab_size=VOCAB,
                  target_hidden_size=target_hidden)
    fields.update(overrides)
    return LlamaConfig(**fields)


def tiny_llama_draft(seed: int, target_hidden: int = 32, **overrides):
    torch.manual_seed(seed + 1000)
    return build_draft(from_transformers(tiny_llama_draft_config(target_hidden, **overrides)), "llama")


def random_prompt(seed: int, length: int) -> list[int]:
    return torch.randint(0, VOCAB, (length,), generator=torch.Generator().manual_seed(seed)).tolist()


@pytest.mark.parametrize(("seed", "prompt_length", "name"), grid([0, 1, 2], [1, 5, 13], list(SETTINGS),
                                                                  name=lambda s, p, n: f"{n}-{p}-{s}"))
def test_llama_target_with_llama_draft_is_lossless(seed, prompt_length, name) -> None:
    settings = SETTINGS[name]
    model = tiny_llama_target(seed)
    draft = tiny_llama_draft(seed)
    prompt = random_prompt(seed, prompt_length)
    target = Target(model, draft.config.capture_indices(model.config.num_hidden_layers, ADD_ONE))
    out = speculative_generate(target, Eagle3Drafter(draft), prompt, 12, settings)
    assert out.tokens == greedy_reference(model, prompt, 12)
    assert all(1 <= c.accept_length <= settings.num_steps + 1 for c in out.cycles)


def test_a_draft_that_reproduces_the_target_is_always_fully_accepted() -> None:
    model = tiny_llama_target(0)
    target = Target(model, [2, 3, 3])
    out = speculative_generate(target, TargetDrafter(model), [3, 1, 4], 1 + 4 * 5, SpecSettings(3, 1))
    assert out.tokens == greedy_reference(model, [3, 1, 4], 21)
    stats = summarize(out.cycles, 3)
    assert stats.mean_accept_length == 4.0 and stats.mean_accept_rate == 1.0  # s + 1 tokens every cycle
    assert stats.position_rates == [1.0, 1.0, 1.0] and stats.histogram == {1: 0, 2: 0, 3: 0, 4: 5}


def test_a_draft_wrong_from_its_second_token_gives_accept_length_two() -> None:
    model = tiny_llama_target(1)
    out = speculative_generate(Target(model, [2, 3, 3]), TargetDrafter(model, wrong_from=2), [7], 13, SpecSettings(3, 1))
    stats = summarize(out.cycles, 3)
    assert out.tokens == greedy_reference(model, [7], 13)
    assert stats.mean_accept_length == 2.0 and stats.mean_accept_rate == pytest.approx(1 / 3)
    assert stats.position_rates[:2] == [1.0, 0.0]


@pytest.mark.parametrize(("settings", "message"), [
    (SpecSettings(3, 1, 5), "num_steps \\+ 1 = 4"),
    (SpecSettings(2, 2, 9), "2..5"),
    (SpecSettings(0, 1), ">= 1"),
])
def test_bad_settings_are_errors(settings, message) -> None:
    with pytest.raises(ConfigError, match=message):
        settings.validated()


def test_a_tree_keeps_the_target_path_and_accepts_it_whole() -> None:
    model = tiny_llama_target(2)
    settings = SpecSettings(3, 2, 5)
    out = speculative_generate(Target(model, [2, 3, 3]), TargetDrafter(model), [5, 9], 17, settings)
    assert out.tokens == greedy_reference(model, [5, 9], 17)
    stats = summarize(out.cycles, 3)
    assert stats.mean_accept_length == 4.0 and stats.mean_accept_rate == pytest.approx(3 / 4)  # (4 - 1) / (5 - 1)


def test_wrong_from_counts_positions_from_one() -> None:
    with pytest.raises(ConfigError, match="from 1"):
        TargetDrafter(tiny_llama_target(0), wrong_from=0)
