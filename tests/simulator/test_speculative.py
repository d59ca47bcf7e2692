"""Speculative decoding in the simulator: acceptance formulas, cycle composition, speedup
against batch, and the errors users see."""

from __future__ import annotations

from dataclasses import replace

import pytest
from infercast_adapters import InfercastError

from infercast import acceptance as acc
from infercast.cli import main
from infercast.simulate import UserInput, simulate
from infercast.speculative import cycle_forwards

LLAMA = UserInput(model="meta-llama/Llama-3.1-8B-Instruct", device="H100", num_devices=1, context_length=1024,
                  speculative_algorithm="EAGLE3", speculative_draft_model="yuhuili/EAGLE3-LLaMA3.1-Instruct-8B",
                  speculative_num_steps=3, speculative_eagle_topk=1, accept_length=2.5)
KIMI_DRAFT = "lightseekorg/kimi-k2.5-eagle3-mla"


def test_chain_rates_give_one_plus_the_sum_of_prefix_products() -> None:
    s = acc.settings(3)
    assert acc.ChainRates((0.8, 0.5, 0.25)).expected_accept_length(s) == pytest.approx(1 + 0.8 + 0.4 + 0.1)
    a = 0.6  # constant rate: the closed form (1 - a^(s+1)) / (1 - a)
    assert acc.ChainRates((a,) * 3).expected_accept_length(s) == pytest.approx((1 - a ** 4) / (1 - a))


def test_one_mtp_module_gains_less_at_each_depth() -> None:
    """DeepSeek's single MTP module, reused for deeper drafts, follows the published per-depth
    shape (TensorRT-LLM, DeepSeek-R1, 1..5 steps), not a constant rate: 1.875 at one step grows
    by under 0.6 to two steps and by less after, far from the constant rate's 3.31 at three."""
    mtp = acc.preset("deepseek-v3-mtp").model()
    lengths = [mtp.expected_accept_length(acc.settings(s)) for s in range(1, 6)]
    gains = [b - a for a, b in zip(lengths, lengths[1:])]
    assert lengths[0] == pytest.approx(1.875)
    assert all(g > 0 for g in gains) and gains[0] < 0.6 and gains[-1] < 0.05
    from infercast.builtin_models import MTP_DEPTHS

    prefix = list(MTP_DEPTHS)
    scale = 0.875 / 0.92
    assert lengths[2] == pytest.approx(1 + sum(p * scale ** (j + 1) for j, p in enumerate(prefix[:3])))
    assert lengths[2] < 3.0


def test_a_tree_sums_the_path_probabilities_of_its_best_nodes() -> None:
    matrix = acc.TreeMatrix(((0.6, 0.3), (0.5, 0.2)))
    # candidates: d1 ranks 0.6, 0.3; under 0.6: 0.30, 0.12; under 0.3: 0.15, 0.06. n - 1 = 3 nodes: 0.6, 0.3, 0.3
    s = acc.settings(2, 2, 4)
    assert sorted(p for _, p in matrix.tree(s)) == pytest.approx([0.3, 0.3, 0.6])
    assert matrix.expected_accept_length(s) == pytest.approx(2.2)
    assert matrix.expected_accept_length(acc.settings(2, 2, 5)) == pytest.approx(2.2 + 0.15)
    chain = acc.TreeMatrix(((0.7,), (0.4,)))  # one rank: the chain formula
    assert chain.expected_accept_length(acc.settings(2)) == pytest.approx(1 + 0.7 + 0.28)


def test_presets_reproduce_their_published_accept_length_at_their_setting() -> None:
    preset = acc.preset("kimi-k2.5-eagle3-mla/gsm8k")
    assert preset.model().expected_accept_length(acc.settings(3)) == pytest.approx(3.017, abs=1e-6)
    rates = preset.rates(5)  # no per-depth figures published for this draft: the stated decay model
    assert [b / a for a, b in zip(rates, rates[1:])] == pytest.approx([acc.DEPTH_DECAY] * 4)
    one_step = preset.model().expected_accept_length(acc.settings(1))
    assert one_step == pytest.approx(1 + rates[0]) and 1.0 < one_step < 2.0
    assert "extrapolated from s3 to s1" in preset.describe(1) and "extrapolated" not in preset.describe(3)
    assert acc.preset("deepseek-v3-mtp").model().expected_accept_length(acc.settings(1)) == pytest.approx(1.875)
    with pytest.raises(InfercastError, match="unknown acceptance preset .nope.; presets: deepseek-v3-mtp, kimi-k2.5-eagle3-mla/mtbench"):
        acc.preset("nope")


@pytest.mark.parametrize("make, message", [
    (lambda: acc.MeasuredLength(4.5).expected_accept_length(acc.settings(3)), r"outside \[1, num_steps \+ 1\] = \[1, 4\]"),
    (lambda: acc.MeasuredLength(0.9).expected_accept_length(acc.settings(3)), r"0.9 is outside"),
    (lambda: acc.ChainRates((0.5, 1.5)), r"must lie in \[0, 1\]; got 1.5"),
    (lambda: acc.ChainRates((0.5,)).expected_accept_length(acc.settings(3)), "1 acceptance rate.* for 3 draft steps"),
    (lambda: acc.TreeMatrix(((0.7, 0.4),)), "row 1 sums to 1.1"),
    (lambda: acc.settings(3, 1, 5), r"num_steps \+ 1 = 4 tokens; got num_draft_tokens 5"),
])
def test_bad_acceptance_input_is_named(make, message) -> None:
    with pytest.raises(InfercastError, match=message):
        make()


def test_accept_length_from_sglang_logs_and_metrics(tmp_path) -> None:
    log = tmp_path / "server.log"
    log.write_text("[2026-11-21] Decode batch. #running-req: 4, #token: 900, accept len: 2.50, gen throughput: 80\n"
                   "noise\n[2026-11-21] Decode batch. #running-req: 4, #token: 990, accept len: 3.00, cuda graph: True\n")
    assert acc.accept_length_from_log(log) == (pytest.approx(2.75), 2)
    metrics = tmp_path / "metrics.txt"
    metrics.write_text('# TYPE sglang:spec_accept_length gauge\nsglang:spec_accept_length{model_name="k"} 2.9\n')
    assert acc.accept_length_from_log(metrics) == (pytest.approx(2.9), 1)
    (tmp_path / "empty.log").write_text("nothing here\n")
    with pytest.raises(InfercastError, match="no accept length found"):
        acc.accept_length_from_log(tmp_path / "empty.log")


def test_a_cycle_is_s_minus_1_drafts_one_verify_one_extend() -> None:
    forwards = cycle_forwards(4, 2, 7)
    assert [(f.name, f.model, f.tokens_per_request, f.count) for f in forwards] == [
        ("draft", "draft", 2, 3), ("verify", "target", 7, 1), ("extend", "draft", 7, 1)]
    assert forwards[2].logits_per_request == 1


def test_the_simulated_cycle_adds_up_its_forwards() -> None:
    result = simulate(replace(LLAMA, num_queries=4))
    spec = result.speculative
    forwards = {f["name"]: f for f in spec["forwards"]}
    assert (forwards["draft"]["count"], forwards["draft"]["tokens_per_request"]) == (2, 1)
    assert (forwards["verify"]["tokens_per_request"], forwards["extend"]["tokens_per_request"]) == (4, 4)
    total = sum(f["count"] * f["ms_each"] for f in spec["forwards"])
    host = [op for op in result.ops if op.source == "engine"]
    assert len(host) == 1 and host[0].count == 1  # the engine's host work, once per cycle
    assert spec["cycle_ms"] == pytest.approx(total + host[0].total_ms, rel=1e-9)
    assert result.tpot_ms == pytest.approx(spec["cycle_ms"] / 2.5)
    assert result.throughput_tokens_per_s_per_device == pytest.approx(4 * 2.5 / (spec["cycle_ms"] / 1e3))
    assert spec["speedup"] == pytest.approx(spec["baseline_tpot_ms"] / result.tpot_ms)
    draft_gemms = [op for op in result.ops if op.name.startswith("gemm (draft.")]
    assert draft_gemms and all(op.count % 2 == 0 for op in draft_gemms)  # two draft forwards per cycle
    assert result.memory_gib["draft_weights"] > 0.5  # fc, one layer and a 32k-row lm_head in bf16


def test_speedup_falls_as_the_batch_grows_at_fixed_acceptance() -> None:
    speedups = [simulate(replace(LLAMA, num_queries=b)).speculative["speedup"] for b in (1, 16, 64, 256)]
    assert all(a > b for a, b in zip(speedups, speedups[1:])), speedups
    assert speedups[0] > 1.5 and speedups[-1] < speedups[0] * 0.8


def test_the_kimi_mla_draft_is_priced_with_its_doubled_width_projection() -> None:
    result = simulate(UserInput(speculative_algorithm="EAGLE3", speculative_draft_model=KIMI_DRAFT))
    spec = result.speculative
    assert spec["draft_architecture"] == "Eagle3DeepseekV2ForCausalLM"
    assert "preset kimi-k2.5-eagle3-mla" in spec["acceptance"] and (spec["num_steps"], spec["topk"]) == (3, 1)
    fused = [op for op in result.ops if "draft.layer.self_attn.fused_qkv_a_proj" in op.name]
    assert fused, [op.name for op in result.ops]


def test_mtp_uses_the_same_cycle_with_the_target_layer_as_draft() -> None:
    result = simulate(UserInput(model="deepseek-ai/DeepSeek-V3", device="H200", num_devices=16, tp_size=1, dp_size=16,
                                ep_size=16, num_queries=64, num_mtp_tokens=2, accept_length=2.4))
    spec = result.speculative
    assert spec["algorithm"] == "MTP" and (spec["num_steps"], spec["num_draft_tokens"]) == (2, 3)
    assert spec["draft_parameters_billion"] > 10  # a full MoE layer
    with pytest.raises(InfercastError, match="no MTP layer"):
        simulate(UserInput(num_mtp_tokens=1, accept_length=1.5))


@pytest.mark.parametrize("argv, message", [
    (["--speculative-algorithm", "EAGLE3", "--speculative-draft-model", "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B"],
     "reads target hidden states 4096 wide .* target's hidden size is 7168"),
    (["--speculative-algorithm", "EAGLE3", "--speculative-draft-model", KIMI_DRAFT, "--speculative-num-steps", "3",
      "--speculative-num-draft-tokens", "6"], r"chain \(topk 1\) verifies num_steps \+ 1 = 4"),
    (["--speculative-algorithm", "EAGLE3", "--speculative-draft-model", KIMI_DRAFT, "--accept-length", "4.2"],
     r"outside \[1, num_steps \+ 1\]"),
    (["--speculative-algorithm", "EAGLE3", "--speculative-draft-model", KIMI_DRAFT, "--acceptance-rates", "0.9,-0.1,0.5"],
     r"must lie in \[0, 1\]"),
    (["--accept-length", "2"], "given without --speculative-algorithm"),
    (["--speculative-algorithm", "MEDUSA"], "--speculative-algorithm is 'MEDUSA'; valid: EAGLE3"),
])
def test_bad_speculative_input_exits_2_with_a_named_error(capsys, argv, message) -> None:
    import re

    assert main(["simulate", *argv]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert re.search(message, err), err
