"""The fused-MoE kernel an engine's defaults pick by model architecture: sglang on Blackwell
launches FlashInfer's TensorRT-LLM MoE for some architectures and dtypes from some version
(server_args.py ``_handle_model_specific_adjustments``) and its Triton fused MoE for the rest."""

from __future__ import annotations

import pytest

from infercast.engines import ENGINES
from infercast.simulate import UserInput, simulate

QWEN3 = dict(model="Qwen/Qwen3-235B-A22B", device="B200", num_devices=8, decode=True, context_length=821,
             all_reduce_fusion="off")
MOE = "fused_moe (layers.*.mlp)"
RULE = ENGINES["sglang"].arch_moe_runner


def _moe(result):
    return next(row for row in result.ops if row.name == MOE)


@pytest.mark.parametrize("version, architecture, dtype, kernel", [
    ("0.5.6", "Qwen3MoeForCausalLM", "bf16", "triton"),  # unquantized Qwen3-MoE joins in 0.5.8
    ("0.5.7", "Qwen3MoeForCausalLM", "bf16", "triton"),
    ("0.5.8", "Qwen3MoeForCausalLM", "bf16", "trtllm"),
    ("0.5.6", "Qwen3MoeForCausalLM", "fp8_block", "trtllm"),
    ("0.5.6", "DeepseekV3ForCausalLM", "fp8_block", "trtllm"),
    ("0.5.11", "DeepseekV3ForCausalLM", "bf16", "triton"),  # unquantized DeepSeek joins in 0.5.12
    ("0.5.12", "DeepseekV3ForCausalLM", "bf16", "trtllm"),
    ("0.5.6", "DeepseekV32ForCausalLM", "fp8_block", "trtllm"),  # read as DeepseekV3ForCausalLM up to 0.5.11
    ("0.5.8", "Qwen3_5MoeForConditionalGeneration", "bf16", "triton"),
    ("0.5.9", "Qwen3_5MoeForConditionalGeneration", "bf16", "trtllm"),
    ("0.5.8", "KimiK25ForConditionalGeneration", "fp8_block", "triton"),  # in the DeepSeek branch from 0.5.9
    ("0.5.9", "KimiK25ForConditionalGeneration", "fp8_block", "trtllm"),
    ("0.5.14", "Glm4MoeForCausalLM", "bf16", "triton"),  # GLM-4.x gets it for NVFP4 only
    ("0.5.14", "MiniMaxM2ForCausalLM", "fp8_block", "triton"),
    (None, "Qwen3MoeForCausalLM", "bf16", "trtllm"),  # no version: the newest
])
def test_sglang_picks_the_moe_kernel_on_blackwell_by_architecture_dtype_and_version(version, architecture, dtype,
                                                                                    kernel) -> None:
    assert RULE.launched(version, architecture, dtype, 100) == kernel


@pytest.mark.parametrize("version, architecture, dtype, cuda_arch", [
    ("0.5.6", "Qwen3MoeForCausalLM", "bf16", 90),  # Hopper: by dtype alone (the engine's kernel list)
    ("0.5.2", "Qwen3MoeForCausalLM", "bf16", 100),  # before the versions read
    ("0.5.8", "Qwen3MoeForCausalLM", "nvfp4", 100),  # a dtype the rule leaves to the kernel list
    ("0.5.8", "Qwen3MoeForCausalLM", "w4a16", 100),
    ("0.5.14", "MixtralForCausalLM", "bf16", 100),  # an architecture whose branch was not read
    ("0.5.14", "", "bf16", 100),
    ("0.5.10", "DeepseekV3ForCausalLM", "bf16", 100),  # quantized to FP8 online first up to 0.5.10
])
def test_the_rule_leaves_other_gpus_versions_architectures_and_dtypes_to_the_kernel_list(
        version, architecture, dtype, cuda_arch) -> None:
    assert RULE.launched(version, architecture, dtype, cuda_arch) is None


def test_a_compressed_tensors_checkpoint_runs_triton_where_sglang_fp8_would_run_trtllm() -> None:
    """sglang's check names fp8 and modelopt quantizations; a compressed-tensors FP8-block
    checkpoint loads as ``compressed-tensors`` and runs the generic kernel."""
    assert RULE.launched("0.5.9", "Qwen3MoeForCausalLM", "fp8_block", 100, "fp8") == "trtllm"
    assert RULE.launched("0.5.9", "Qwen3MoeForCausalLM", "fp8_block", 100, "compressed-tensors") == "triton"


def test_qwen3_on_sglang_0_5_6_runs_triton_where_0_5_8_runs_the_measured_trtllm_kernel() -> None:
    """The B200 tables time Qwen3-235B's experts with the TensorRT-LLM kernel only (0.5.14's
    dispatch), so 0.5.6's Triton MoE is priced analytically and costs more at one token."""
    old = simulate(UserInput(**QWEN3, engine_version="0.5.6"))
    new = simulate(UserInput(**QWEN3, engine_version="0.5.8"))
    assert _moe(new).source == "measured" and _moe(old).source == "analytic"
    assert "triton" in _moe(old).origin
    assert any("0.5.6 runs Qwen3MoeForCausalLM's bf16 experts in triton" in n for n in old.notes)
    assert any("0.5.8 runs Qwen3MoeForCausalLM's bf16 experts in trtllm" in n for n in new.notes)
    assert old.tpot_ms - new.tpot_ms == pytest.approx(_moe(old).total_ms - _moe(new).total_ms, rel=0.05)
    assert old.tpot_ms > new.tpot_ms


def test_expert_parallel_under_the_standard_dispatcher_reads_the_runner_s_rows_only() -> None:
    """EP8 with sglang's standard dispatcher: the newest version's TensorRT-LLM rows at EP 8, and
    0.5.6's Triton kernel (no row at EP 8) analytic."""
    ep = dict(QWEN3, ep_size=8, moe_all_to_all="off")
    new, old = simulate(UserInput(**ep)), simulate(UserInput(**ep, engine_version="0.5.6"))
    assert _moe(new).source != "analytic" and _moe(old).source == "analytic"
    assert "trtllm, which sglang launches" not in _moe(old).origin and "triton" in _moe(old).origin


def test_plan_prices_the_kernel_the_version_launches_as_simulate_does() -> None:
    from infercast.plan import Layout, PlanRequest, Planner

    for version, kernel in (("0.5.6", "triton"), ("0.5.8", "trtllm")):
        planner = Planner(PlanRequest(model=QWEN3["model"], device="B200", num_devices=(8,), engine_version=version))
        _, ctx = planner._model(Layout(8, 8, 1, 1), None)
        assert ctx.moe_runner == kernel


def test_a_launched_moe_kernel_and_other_gpus_decide_without_the_rule() -> None:
    launched = simulate(UserInput(**QWEN3, engine_version="0.5.6", moe_kernel="trtllm"))
    assert _moe(launched).source == "measured" and not any("fused MoE:" in n for n in launched.notes)
    hopper = simulate(UserInput(**{**QWEN3, "device": "H200"}, engine_version="0.5.6"))
    assert not any("fused MoE:" in n for n in hopper.notes)


def test_deepep_runs_its_own_kernels_whatever_the_architecture_rule() -> None:
    result = simulate(UserInput(model="deepseek-ai/DeepSeek-V3", device="B200", num_devices=16, dp_size=16,
                                ep_size=16, decode=True, num_queries=256, engine_version="0.5.9"))
    assert not any("fused MoE:" in n for n in result.notes)
