"""The request row's tokenizing time follows the model's tokenizer kind and how the engine
version calls a slow tokenizer class (sglang PR 25265; vLLM 0.24.0's renderer)."""

from __future__ import annotations

import json

import pytest

from infercast.engines import (TIKTOKEN_ENCODE_PER_TOKEN_S, TIKTOKEN_PIPELINE_PER_TOKEN_S, TOKENIZE_PER_TOKEN_S,
                               engine_named)
from infercast.request import UserInput
from infercast.simulate import simulate
from infercast_adapters import ConfigError, InfercastError

from .toy_models import DEEPSEEK_V3


@pytest.mark.parametrize(("engine", "version", "per_token_s"), [
    ("sglang", "0.5.11", TIKTOKEN_PIPELINE_PER_TOKEN_S),
    ("sglang", "0.5.12", TIKTOKEN_ENCODE_PER_TOKEN_S),
    ("vllm", "0.23.0", TIKTOKEN_PIPELINE_PER_TOKEN_S),
    ("vllm", "0.24.0", TIKTOKEN_ENCODE_PER_TOKEN_S),
    ("vllm", None, TIKTOKEN_ENCODE_PER_TOKEN_S),
    ("trtllm", None, TIKTOKEN_ENCODE_PER_TOKEN_S),
])
def test_a_tiktoken_tokenizer_costs_what_the_engines_call_costs(engine: str, version: str | None,
                                                               per_token_s: float) -> None:
    policy = engine_named(engine)
    tiktoken = policy.request_cost("tiktoken", version)
    assert tiktoken.per_item_s == per_token_s
    # the per-request part (HTTP, scheduling, first token) does not depend on the tokenizer
    assert tiktoken.seconds == policy.request.seconds
    assert policy.request_cost("fast", version) == policy.request
    assert policy.request.per_item_s == TOKENIZE_PER_TOKEN_S


def test_an_unknown_kind_is_refused() -> None:
    with pytest.raises(InfercastError, match="unknown tokenizer kind 'sentencepiece'; known: fast, tiktoken"):
        engine_named("sglang").request_cost("sentencepiece", None)


def _request_ms(user: UserInput) -> float:
    result = simulate(user)
    rows = [op for op in result.ops if op.name.startswith("request:")]
    assert len(rows) == 1
    return rows[0].total_ms


def test_kimi_prompts_tokenize_at_the_versions_rate() -> None:
    """Kimi-K2.5's adapter profile names a tiktoken tokenizer: 4,000 more prompt tokens cost
    4,000 x 3.85 us through sglang 0.5.9's tokenizer(text) and 4,000 x 0.59 us through 0.5.12's
    encode()."""
    def delta(version: str) -> float:
        rows = [_request_ms(UserInput(model="moonshotai/Kimi-K2.5", query_length=n, engine_version=version,
                                      num_hidden_layers_override=2, cost_model="analytic")) for n in (1000, 5000)]
        return rows[1] - rows[0]

    assert delta("0.5.9") == pytest.approx(4000 * TIKTOKEN_PIPELINE_PER_TOKEN_S * 1e3)
    assert delta("0.5.12") == pytest.approx(4000 * TIKTOKEN_ENCODE_PER_TOKEN_S * 1e3)


def test_a_checkpoints_tokenizer_config_names_the_kind(tmp_path) -> None:
    """A DeepSeek-V3 checkpoint (the family's tokenizer is fast) whose tokenizer_config.json
    names TikTokenTokenizer, as Kimi-K2's does, is tokenized as tiktoken."""
    (tmp_path / "config.json").write_text(json.dumps(DEEPSEEK_V3))
    plain = _request_ms(UserInput(model=str(tmp_path), num_devices=1, query_length=1000, engine_version="0.5.9"))
    (tmp_path / "tokenizer_config.json").write_text(json.dumps({"tokenizer_class": "TikTokenTokenizer"}))
    kimi_like = _request_ms(UserInput(model=str(tmp_path), num_devices=1, query_length=1000, engine_version="0.5.9"))
    assert plain == pytest.approx(engine_named("sglang").request.at(1000) * 1e3)
    assert kimi_like - plain == pytest.approx(1000 * (TIKTOKEN_PIPELINE_PER_TOKEN_S - TOKENIZE_PER_TOKEN_S) * 1e3)


def test_an_unreadable_tokenizer_config_is_named(tmp_path) -> None:
    (tmp_path / "config.json").write_text(json.dumps(DEEPSEEK_V3))
    (tmp_path / "tokenizer_config.json").write_text("{not json")
    with pytest.raises(ConfigError, match="tokenizer_config.json: invalid JSON at line 1"):
        simulate(UserInput(model=str(tmp_path), num_devices=1, query_length=100))
