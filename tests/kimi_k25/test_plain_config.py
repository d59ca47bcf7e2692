"""The bundled Kimi-K2.5 config is plain values (no transformers import on the engine view's
path); it must price exactly as transformers' own ``Kimi_K25Config`` of the same values."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from infercast_adapters.config import PlainConfig, to_transformers
from infercast.simulate import UserInput, simulate

import infercast_kimi_k25.plugin as plugin
from infercast_kimi_k25.architecture import TEXT_CONFIG, kimi_k25_config

KIMI = "moonshotai/Kimi-K2.5"
CASES = [
    UserInput(model=KIMI, query_length=256, image_batch_size=1, image_height=720, image_width=1280),
    UserInput(model=KIMI, num_devices=16, tp_size=8, dp_size=2, ep_size=16, num_queries=32, decode=True,
              context_length=4096),
    UserInput(model=KIMI, decode=True, num_queries=4, speculative_algorithm="EAGLE3",
              speculative_draft_model="lightseekorg/kimi-k2.5-eagle3-mla", accept_length=2.5),
]


def _json(user: UserInput) -> dict:
    result = simulate(user)
    result.simulation_wall_s = 0.0  # the one field that measures this machine, not the model
    return json.loads(result.to_json())


def test_the_native_class_reads_the_plain_values() -> None:
    from transformers.models.kimi_k25.configuration_kimi_k25 import Kimi_K25Config

    plain = kimi_k25_config()
    native = to_transformers(plain)
    assert isinstance(plain, PlainConfig) and isinstance(native, Kimi_K25Config)
    assert native.text_config.model_type == plain.text_config.model_type == "deepseek_v3"
    for key in ("hidden_size", "num_hidden_layers", "n_routed_experts", "kv_lora_rank", "q_lora_rank",
                "vocab_size", "first_k_dense_replace", "quantization_config"):
        assert getattr(native.text_config, key) == getattr(plain.text_config, key) == TEXT_CONFIG[key]
    assert (native.vision_config.hidden_size, native.vision_config.num_hidden_layers) == (1152, 27)


@pytest.mark.parametrize("user", CASES, ids=["prefill-image", "decode-ep16", "decode-eagle3"])
def test_plain_and_native_configs_simulate_identically(user: UserInput, monkeypatch: pytest.MonkeyPatch) -> None:
    plain = _json(user)
    monkeypatch.setattr(plugin, "kimi_k25_config", lambda: to_transformers(kimi_k25_config()))
    assert not isinstance(plugin.infercast_resolve_config(KIMI), PlainConfig)
    native = _json(user)
    assert plain == native


def test_a_kimi_simulation_does_not_import_transformers() -> None:
    """The engine view needs values only; transformers costs ~0.6 s of a ~1.2 s command."""
    code = ("import sys; from infercast.simulate import UserInput, simulate; "
            f"r = simulate(UserInput(model={KIMI!r}, decode=True)); "
            "print(r.tpot_ms > 0, sorted(m for m in sys.modules if m.split('.')[0] == 'transformers')[:3])")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["True", "[]"]
