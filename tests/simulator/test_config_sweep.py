"""Every bundled model family on every built-in NVIDIA device, engine and quantization: a step
is priced or refused with a message, never a traceback, and it behaves like a cost (positive,
finite, a longer prompt takes no less time). Pairwise by default, the full product behind ``slow``."""

from __future__ import annotations

import math

import pytest
from infercast_adapters import InfercastError

from infercast.simulate import UserInput, simulate

from ..grids import grid

MODELS = ("llama-3.1-8b", "qwen2.5-7b", "mistral-7b", "qwen3-32b", "mixtral-8x7b", "qwen3-235b-a22b",
          "minimax-m2.5", "gpt-oss-120b", "deepseek-v3", "kimi-k2.5")
DEVICES = ("A100", "H100", "H200", "H20", "B200")
ENGINES = ("sglang", "vllm", "trtllm")
QUANTIZATIONS = (None, "FP8", "FP8_BLOCK", "W4A16")
LAYOUTS = ((8, 1), (8, 8), (4, 1))  # (devices, EP); TP is the devices


def _priced(**fields) -> float | None:
    """The step's latency, or None when the request is refused as the tool refuses bad input."""
    try:
        result = simulate(UserInput(**fields))
    except InfercastError as refused:
        message = str(refused)
        assert message and "Traceback" not in message and len(message) < 2000, message
        return None
    assert math.isfinite(result.step_latency_ms) and result.step_latency_ms > 0
    return result.step_latency_ms


@pytest.mark.parametrize(("model", "device", "engine", "quantization", "layout"),
                         grid(MODELS, DEVICES, ENGINES, QUANTIZATIONS, LAYOUTS,
                              name=lambda m, d, e, q, lay: f"{m}-{d}-{e}-{q}-{lay[0]}x-ep{lay[1]}"))
def test_every_family_prices_or_refuses_cleanly(model, device, engine, quantization, layout) -> None:
    devices, ep = layout
    common = dict(model=model, device=device, engine=engine, quantize_linear_action=quantization,
                  num_devices=devices, ep_size=ep)
    short, long = _priced(query_length=256, **common), _priced(query_length=2048, **common)
    decode = _priced(decode=True, num_queries=8, context_length=1024, **common)
    if short is not None and long is not None:
        assert long >= short * (1 - 1e-9)  # equal where the host's eager launches bound both
    assert (short is None) == (long is None) == (decode is None)  # a layout is refused whatever the step
