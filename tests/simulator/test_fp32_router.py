"""Router GEMMs an engine computes in FP32 (MiniMax-M2 on sglang and vLLM, GLM-4.x on vLLM):
FP32 weights, the CUDA cores' FP32 rate, and on sglang a cast kernel before them."""

from __future__ import annotations

import dataclasses

import pytest

from infercast.costmodel import _gemm_shape_time
from infercast.devices import BUILTIN_DEVICES
from infercast.engines import ENGINES
from infercast.simulate import UserInput, simulate

MINIMAX = dict(model="MiniMaxAI/MiniMax-M2.5", device="H200", num_devices=4)
GATE = "gemm (layers.*.mlp.gate)"
CAST = "to_dtype (layers.*.mlp)"
LAYERS = 62
HIDDEN, EXPERTS = 3072, 256
H200 = next(d for d in BUILTIN_DEVICES if d.name == "H200")


def _row(result, name):
    return next((row for row in result.ops if row.name == name), None)


@pytest.mark.parametrize("engine, cast", [("sglang", True), ("vllm", False)])
def test_minimax_routers_run_in_fp32_and_only_sglang_casts_in_a_kernel_of_its_own(engine, cast) -> None:
    result = simulate(UserInput(**MINIMAX, engine=engine, query_length=1024))
    gate = _row(result, GATE)
    assert gate.count == LAYERS and "for FP32 on the CUDA cores" in gate.origin
    assert (_row(result, CAST) is not None) == cast
    if cast:
        assert _row(result, CAST).count == LAYERS


def test_engines_and_families_without_an_fp32_router_keep_bf16() -> None:
    trtllm = simulate(UserInput(**MINIMAX, engine="trtllm", query_length=1024))
    assert "FP32" not in _row(trtllm, GATE).origin and _row(trtllm, CAST) is None
    qwen = simulate(UserInput(model="Qwen/Qwen3-235B-A22B", device="H200", num_devices=8, engine="vllm",
                              query_length=1024))
    assert "FP32" not in _row(qwen, GATE).origin and _row(qwen, CAST) is None


def test_the_fp32_router_weights_take_four_bytes_a_value() -> None:
    """Each rank holds the whole router (replicated): 62 layers x 256 x 3,072 values, two bytes
    more each than bf16."""
    fp32 = simulate(UserInput(**MINIMAX, engine="vllm", decode=True))
    bf16 = simulate(UserInput(**MINIMAX, engine="trtllm", decode=True))
    extra = (fp32.memory_gib["weights"] - bf16.memory_gib["weights"]) * 2 ** 30
    assert extra == pytest.approx(LAYERS * EXPERTS * HIDDEN * 2, rel=1e-3)


def test_a_prefill_router_is_its_bf16_row_scaled_to_the_fp32_rate(monkeypatch) -> None:
    """8,192 tokens: the FP32 GEMM is compute-bound at the CUDA cores' 67 TFLOP/s (times the
    device's GEMM efficiency) plus one kernel's fixed time; the bf16 row of the same shape is
    scaled by that over its own analytic time."""
    tokens = 8192
    fp32 = _row(simulate(UserInput(**MINIMAX, engine="vllm", query_length=tokens)), GATE)
    monkeypatch.setitem(ENGINES, "vllm", dataclasses.replace(ENGINES["vllm"], fp32_router=None))
    bf16 = _row(simulate(UserInput(**MINIMAX, engine="vllm", query_length=tokens)), GATE)
    flops = 2 * tokens * EXPERTS * HIDDEN
    by_hand = flops / (67e12 * H200.efficiency.gemm["bf16"]) + H200.efficiency.kernel_fixed_s
    ratio = by_hand / _gemm_shape_time((tokens, EXPERTS, HIDDEN), "bf16", H200)
    assert ratio > 10
    assert fp32.total_ms == pytest.approx(bf16.total_ms * ratio, rel=1e-6)
    assert fp32.source == "extrapolated"


def test_a_decode_router_pays_its_wider_weights_not_tensor_core_tiles() -> None:
    """One token: an FP32 GEMV streams 3 MB of weights where bf16 streams 1.5 MB, both mostly
    a kernel's fixed time; no 64-row tile is padded on the CUDA cores."""
    ratio = _gemm_shape_time((1, EXPERTS, HIDDEN), "fp32", H200) / _gemm_shape_time((1, EXPERTS, HIDDEN), "bf16", H200)
    weights = EXPERTS * HIDDEN * 2 / (H200.hbm_bandwidth_bytes_per_s * H200.efficiency.memory)
    assert 1.0 < ratio < 1.0 + weights / H200.efficiency.kernel_fixed_s


def test_every_nvidia_and_amd_device_states_its_fp32_rate_and_the_ascend_dies_fall_back() -> None:
    for device in BUILTIN_DEVICES:
        if device.name.startswith("ATLAS"):
            assert "fp32" not in device.peak_flops_per_s and device.peak("fp32") == device.peak("bf16")
            continue
        assert "fp32" in device.sources and "FP32" in device.sources["fp32"]
        assert device.peak("fp32") < device.peak("bf16") / 3  # the H20's tensor cores are capped the most


def test_a_calibration_files_fp32_rows_price_the_router_as_measured(tmp_path) -> None:
    """A user's FP32 row of the router's shape is taken as it is, not scaled from bf16."""
    import json

    path = tmp_path / "cal.json"
    path.write_text(json.dumps({"format": "infercast-calibration", "version": 1, "device": "H200", "tables": {
        "gemm": {"columns": ["dtype", "m", "n", "k", "latency_us"], "rows": [["fp32", 1, EXPERTS, HIDDEN, 50.0]]}}}))
    gate = _row(simulate(UserInput(**MINIMAX, engine="vllm", decode=True, calibration=str(path))), GATE)
    assert gate.total_ms == pytest.approx(LAYERS * 50.0e-3) and gate.origin.startswith("gemm calibration cal.json")
    assert gate.source == "measured"
