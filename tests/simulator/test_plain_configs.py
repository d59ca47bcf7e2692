"""The built-in bundled architectures are plain values; each must price exactly as transformers'
own config class reads the same values."""

from __future__ import annotations

import json

import pytest
from infercast_adapters import hookimpl
from infercast_adapters.config import PlainConfig, to_transformers

from infercast import builtin_models
from infercast.plugins import devices_from, new_manager
from infercast.simulate import UserInput, simulate

MODELS = [ref for ref, values in builtin_models.BUNDLED.items() if not values["architectures"][0].endswith("Eagle3")]


def _devices(ref: str) -> int:
    """Eight, or the most up to eight that divide the model's attention heads (Qwen2.5-7B has 28)."""
    heads = builtin_models.BUNDLED[ref]["num_attention_heads"]
    return max(n for n in (1, 2, 4, 8) if heads % n == 0)


CASES = [UserInput(model=ref, num_devices=_devices(ref), query_length=512) for ref in MODELS] + [
    UserInput(model=ref, num_devices=_devices(ref), decode=True, num_queries=16, context_length=2048)
    for ref in MODELS] + [
    UserInput(model="deepseek-ai/DeepSeek-V3", num_devices=16, dp_size=2, ep_size=16, num_queries=64, decode=True),
    UserInput(model="deepseek-ai/DeepSeek-V3", decode=True, num_queries=8, speculative_algorithm="MTP"),
    UserInput(model="meta-llama/Llama-3.1-8B-Instruct", num_devices=1, decode=True, num_queries=4,
              speculative_algorithm="EAGLE3", speculative_draft_model="yuhuili/EAGLE3-LLaMA3.1-Instruct-8B",
              accept_length=2.0),
]


def _json(user: UserInput, manager) -> dict:
    result = simulate(user, manager=manager, devices=devices_from(manager))
    result.simulation_wall_s = 0.0  # the one field that measures this machine, not the model
    return json.loads(result.to_json())


def test_bundled_references_resolve_to_plain_values() -> None:
    config = builtin_models.infercast_resolve_config("deepseek-v3")
    assert isinstance(config, PlainConfig) and config.n_routed_experts == 256
    config.num_hidden_layers = 2  # a fresh copy each time: the bundled values stay as published
    assert builtin_models.BUNDLED["deepseek-ai/DeepSeek-V3"]["num_hidden_layers"] == 61
    assert builtin_models.infercast_resolve_config("acme/unknown") is None


@pytest.mark.parametrize("user", CASES, ids=lambda u: f"{u.model}-{'decode' if u.decode else 'prefill'}-"
                                                      f"{u.speculative_algorithm or f'ep{u.ep_size}'}")
def test_plain_and_native_configs_simulate_identically(user: UserInput, monkeypatch: pytest.MonkeyPatch) -> None:
    plain = _json(user, new_manager())
    resolve = builtin_models.infercast_resolve_config
    monkeypatch.setattr(builtin_models, "infercast_resolve_config", hookimpl(lambda model_ref: (
        None if (config := resolve(model_ref)) is None else to_transformers(config))))
    manager = new_manager()  # registers the module's hooks as they are now
    assert not isinstance(manager.resolve_config(user.model), PlainConfig)
    assert plain == _json(user, manager)
