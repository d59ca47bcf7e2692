"""With the Kimi-K2.5 adapter installed, other models simulate exactly as without it."""

from __future__ import annotations

import pytest
from infercast.plugins import devices_from, new_manager
from infercast.simulate import UserInput, simulate

CASES = [
    UserInput(model="deepseek-ai/DeepSeek-V3", num_devices=16, dp_size=2, ep_size=16, num_queries=64),
    UserInput(model="deepseek-ai/DeepSeek-V3", query_length=1024),
    UserInput(model="Qwen/Qwen3-235B-A22B", num_devices=8, ep_size=8, num_queries=16),
]


def _json(user: UserInput, monkeypatch: pytest.MonkeyPatch, *, blocked: bool) -> str:
    if blocked:
        monkeypatch.setenv("INFERCAST_DISABLE_PLUGINS", "kimi_k25")
    else:
        monkeypatch.delenv("INFERCAST_DISABLE_PLUGINS", raising=False)
    manager = new_manager()
    assert ("kimi_k25" in manager.profiles()) is not blocked
    result = simulate(user, manager=manager, devices=devices_from(manager))
    result.simulation_wall_s = 0.0  # the one field that measures this machine, not the model
    return result.to_json()


@pytest.mark.parametrize("user", CASES, ids=lambda u: f"{u.model}-{u.query_length or 'decode'}-ep{u.ep_size}")
def test_other_models_give_byte_identical_json(user: UserInput, monkeypatch: pytest.MonkeyPatch) -> None:
    with_plugin = _json(user, monkeypatch, blocked=False)
    without = _json(user, monkeypatch, blocked=True)
    assert with_plugin == without
