"""sglang's and vLLM's FlashInfer all-reduce fusion: which versions, models, GPUs and layouts fuse
each decoder layer's all-reduce with the residual add and RMSNorm after it, and what the step loses."""

from __future__ import annotations

import pytest

from infercast.engines import ENGINES
from infercast.plugins import get_devices
from infercast.simulate import UserInput, simulate

FUSION = ENGINES["sglang"].all_reduce_fusion
KIMI = dict(model="moonshotai/Kimi-K2.5", device="H200", num_devices=8)
DSV3 = "DeepseekV3ForCausalLM"
LAYERS = 61  # Kimi-K2.5's and DeepSeek-V3's decoder layers


@pytest.mark.parametrize(("version", "architecture", "device", "nodes", "fuses"), [
    ("0.5.6.post2", DSV3, "B200", 1, True),   # 0.5.6: DeepSeek on sm_100 only
    ("0.5.6.post2", DSV3, "H200", 1, False),
    ("0.5.7", DSV3, "H200", 1, True),         # sm_90 from 0.5.7
    ("0.5.7", DSV3, "H20", 1, False),         # H20 left out (a FlashInfer bug) until 0.5.13
    ("0.5.13", DSV3, "H20", 1, True),
    ("0.5.6.post2", "Qwen3MoeForCausalLM", "B200", 1, False),  # Qwen3 MoE from 0.5.7
    ("0.5.7", "Qwen3MoeForCausalLM", "H100", 1, True),
    ("0.5.8", "KimiK25ForConditionalGeneration", "H200", 1, False),  # Kimi-K2.5 from 0.5.9
    ("0.5.9", "KimiK25ForConditionalGeneration", "H200", 1, True),
    ("0.5.14", "LlamaForCausalLM", "H200", 1, False),
    ("0.5.14", DSV3, "A100", 1, False),
    ("0.5.14", DSV3, "H200", 2, False),       # one node on sm_90
    ("0.5.14", DSV3, "B200", 2, True),        # sm_100 across nodes from 0.5.14
    ("0.5.12", DSV3, "B200", 2, False),
])
def test_the_versions_rules_decide_where_it_fuses(version, architecture, device, nodes, fuses) -> None:
    refusal = FUSION.refusal(version, architecture, get_devices().get(device), nodes)
    assert (refusal is None) is fuses, refusal


def _norms(result) -> tuple[int, float]:
    rows = [r for r in result.ops if r.name.startswith("fused_add_rms_norm")]
    return sum(r.count for r in rows), sum(r.total_ms for r in rows)


def _all_reduces(result) -> tuple[int, float]:
    rows = [r for r in result.ops if r.name.startswith("all_reduce")]
    return sum(r.count for r in rows), sum(r.total_ms for r in rows)


def test_a_fused_decode_step_drops_every_norm_an_all_reduce_carries() -> None:
    """61 layers: 2 x 61 all-reduces; each carries the norm after it but the last layer's MLP
    all-reduce, before the final norm. Left: layer 0's input norm and the head's."""
    fused = simulate(UserInput(**KIMI, decode=True, context_length=821))
    apart = simulate(UserInput(**KIMI, decode=True, context_length=821, all_reduce_fusion="off"))
    layers = LAYERS
    assert _norms(apart)[0] == 2 * layers + 1 and _norms(fused)[0] == 2
    assert _all_reduces(fused) == _all_reduces(apart)  # priced as the all-reduce alone
    assert apart.kernel_count - fused.kernel_count == 2 * layers - 1
    dropped = _norms(apart)[1] - _norms(fused)[1]
    assert apart.step_latency_ms - fused.step_latency_ms == pytest.approx(dropped, rel=1e-6)
    assert any("all-reduce fusion: sglang 0.5.14 fuses" in n for n in fused.notes)
    every = simulate(UserInput(**KIMI, decode=True, context_length=821, trace_every_layer=True))
    assert every.step_latency_ms == pytest.approx(fused.step_latency_ms, rel=1e-9)


@pytest.mark.parametrize("user", [
    UserInput(**KIMI, query_length=2049),                                        # above 2,048 tokens
    UserInput(**KIMI, decode=True, engine_version="0.5.9", all_reduce_fusion="off"),
    UserInput(model="deepseek-ai/DeepSeek-V3", device="H200", num_devices=8, dp_size=8, ep_size=8, decode=True),
    UserInput(model="deepseek-ai/DeepSeek-V3", device="H200", num_devices=8, ep_size=8, decode=True),
    UserInput(model="deepseek-ai/DeepSeek-V3", device="H200", num_devices=16, decode=True),
    UserInput(**KIMI, decode=True, engine="vllm", engine_version="0.14.0"),    # vLLM fuses from 0.17.0
    UserInput(**KIMI, num_queries=37, decode=True, engine="vllm"),                # 37 x 7,168 x 2 B > 0.5 MiB
])
def test_no_fusion_outside_the_rules(user: UserInput) -> None:
    result = simulate(user)
    assert _norms(result)[0] == 2 * LAYERS + 1
    assert not any("all-reduce fusion" in n for n in result.notes)


def test_on_overrides_the_version_but_not_the_layout_or_the_model_class() -> None:
    on = simulate(UserInput(**KIMI, decode=True, engine_version="0.5.6.post2", all_reduce_fusion="on"))
    assert _norms(on)[0] == 2
    dp = simulate(UserInput(model="deepseek-ai/DeepSeek-V3", device="H200", num_devices=8, dp_size=8, ep_size=8,
                            decode=True, all_reduce_fusion="on"))
    assert _norms(dp)[0] == 2 * LAYERS + 1
    # sglang's Llama has no fused path at any version: its 80 layers keep their 161 norms
    llama = simulate(UserInput(model="meta-llama/Llama-3.1-70B-Instruct", device="H100", num_devices=8, decode=True,
                               all_reduce_fusion="on"))
    assert _norms(llama)[0] == 2 * 80 + 1


def test_two_batch_overlap_never_fuses() -> None:
    """sglang runs two-batch overlap only with an MoE all-to-all backend, which turns fusion off."""
    tbo = simulate(UserInput(**KIMI, num_queries=2, query_length=1500, two_batch_overlap=True))
    assert _norms(tbo)[0] == 2 * LAYERS + 1 and not any("all-reduce fusion" in n for n in tbo.notes)


def test_the_mtp_layer_keeps_its_input_norm_and_fuses_after_attention() -> None:
    """sglang's NextN layer takes eh_proj's output without a residual: its input norm runs alone,
    its attention all-reduce carries the post-attention norm, and its MLP all-reduce, the
    module's last, runs before a separate final norm."""
    user = dict(model="deepseek-ai/DeepSeek-R1", device="B200", num_devices=8, decode=True,
                speculative_algorithm="MTP", speculative_num_steps=1, speculative_eagle_topk=1,
                speculative_num_draft_tokens=2, accept_length=1.8)
    fused, apart = simulate(UserInput(**user)), simulate(UserInput(**user, all_reduce_fusion="off"))
    assert any("input_layernorm" in r.name and "decoder" in r.name for r in fused.ops)
    assert not any("post_attention_layernorm" in r.name and "decoder" in r.name for r in fused.ops)
    assert any("post_attention_layernorm" in r.name and "decoder" in r.name for r in apart.ops)


def test_on_for_an_engine_without_it_is_a_flag_error(capsys) -> None:
    from infercast.cli import main

    assert main(["simulate", "moonshotai/Kimi-K2.5", "--engine", "trtllm", "--all-reduce-fusion", "on"]) == 2
    err = capsys.readouterr().err
    assert "--all-reduce-fusion" in err and "trtllm" in err and "auto or off" in err


@pytest.mark.parametrize(("mode", "version", "flags", "noted"), [
    ("on", None, ["--enable-flashinfer-allreduce-fusion"], False),
    ("off", None, ["--enforce-disable-flashinfer-allreduce-fusion"], False),
    ("off", "0.5.10", ["--enforce-disable-flashinfer-allreduce-fusion"], False),
    ("off", "0.5.9", [], True),  # no flag turns it off before 0.5.10: a launch note says so
    ("auto", None, [], False),
])
def test_plan_launch_commands_carry_the_mode(mode: str, version, flags, noted: bool) -> None:
    from infercast.plan import Config, Layout, PlanRequest, launch_notes, sglang_command

    request = PlanRequest(model="moonshotai/Kimi-K2.5", device="H200", all_reduce_fusion=mode, engine_version=version)
    config = Config(Layout(8, 8, 1, 1), None, 16, None)
    assert [a for a in sglang_command(request, config, 8, expert_dtype="w4a16", cuda_arch=90) if "allreduce-fusion" in a] == flags
    assert any("all-reduce fusion off" in n for n in launch_notes(request, config, expert_dtype="w4a16", cuda_arch=90)) is noted


VLLM = ENGINES["vllm"].all_reduce_fusion


@pytest.mark.parametrize(("device", "tp", "tokens"), [
    ("H200", 8, 32), ("H100", 4, 128), ("H100", 2, 4096), ("B200", 8, 64), ("B200", 4, 2048),
])
def test_vllm_fuses_any_model_from_0_17_up_to_its_all_reduce_size_limit(device, tp, tokens) -> None:
    """vLLM's compiler pass (default from 0.17.0 on sm_90 and sm_100 at TP > 1) fuses while the
    all-reduce is within FI_ALLREDUCE_FUSION_MAX_SIZE_MB: sm_90 64 / 2 / 0.5 MiB, sm_100 64 / 32 /
    1 MiB at TP 2 / 4 / 8; Llama-3.1-70B sends 8,192 x 2 bytes a token."""
    spec = get_devices().get(device)
    assert VLLM.refusal("0.17.0", "LlamaForCausalLM", spec, 1, tp) is None
    assert VLLM.refusal("0.16.0", "LlamaForCausalLM", spec, 1, tp) == "0.16.0 has no all-reduce fusion"
    assert VLLM.token_limit("0.19.0", spec, tp, 8192 * 2) == tokens
    result = simulate(UserInput(model="meta-llama/Llama-3.1-70B-Instruct", device=device, num_devices=tp,
                                decode=True, num_queries=tokens, engine="vllm"))
    over = simulate(UserInput(model="meta-llama/Llama-3.1-70B-Instruct", device=device, num_devices=tp,
                              decode=True, num_queries=tokens + 1, engine="vllm"))
    assert _norms(result)[0] == 2 and _norms(over)[0] == 2 * 80 + 1
    assert VLLM.refusal("0.19.0", "LlamaForCausalLM", get_devices().get("A100"), 1, tp) is not None


def test_vllm_launch_commands_turn_its_pass_on_or_off() -> None:
    from infercast.plan import Config, Layout, PlanRequest, vllm_command

    config = Config(Layout(8, 8, 1, 1), None, 16, None)

    def flags(mode: str, version: str | None = None) -> list[str]:
        request = PlanRequest(model="meta-llama/Llama-3.1-70B-Instruct", device="H200", engine="vllm",
                              all_reduce_fusion=mode, engine_version=version)
        return [a for a in vllm_command(request, config) if "fuse_allreduce_rms" in a]

    assert flags("auto") == [] and flags("on") == ["-cc.pass_config.fuse_allreduce_rms=true"]
    assert flags("off") == ["-cc.pass_config.fuse_allreduce_rms=false"] and flags("off", "0.16.0") == []
