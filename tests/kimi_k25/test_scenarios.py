"""Kimi-K2.5 deployments simulated end to end, asserting on what the trace and memory hold."""

from __future__ import annotations

import pytest
from infercast.simulate import UserInput, simulate

KIMI = "moonshotai/Kimi-K2.5"
IMAGE_1080P = dict(image_batch_size=1, image_height=1080, image_width=1920)
# 1080 x 1920 pads to 1092 x 1932 (multiples of 14 x 2): 78 x 138 patches, a quarter of them tokens
PATCHES_1080P, TOKENS_1080P = 78 * 138, 78 * 138 // 4


def names(result) -> set[str]:
    return {r.name for r, _ in result._timed}


def paths(result, op: str) -> list[str]:
    return [r.path for r, _ in result._timed if r.name == f"infercast::{op}"]


def test_text_decode_16_devices_tp8_dp2_ep16_w4a8_shared_expert_tp() -> None:
    """W4A8 (INT4 weights, INT8 activations) is an Ascend scheme; sglang's NPU MoE runs it behind
    its all-to-all."""
    result = simulate(UserInput(model=KIMI, device="ATLAS_800_A3_752T_128G_DIE", num_devices=16, tp_size=8,
                                dp_size=2, ep_size=16, num_queries=32, quantize_linear_action="W4A8_DYNAMIC",
                                enable_shared_expert_tp=True))
    ops = names(result)
    assert {"infercast::mla_attention", "infercast::all_to_all", "infercast::quant_gemm",
            "infercast::quantize_activation"} <= ops
    experts = [r for r, _ in result._timed if r.name == "infercast::fused_moe"]
    assert experts and {r["dtype"] for r in experts} == {"w4a8"}  # INT4 expert weights, int8 activations
    assert all(r["local_experts"] == 384 // 16 for r in experts)
    assert any(".shared_experts." in p for p in paths(result, "quant_gemm"))  # shared expert quantized, TP-split
    assert result.parallel == {"tp": 8, "dp": 2, "ep": 16, "moe_tp": 1, "shared_expert_tp": True,
                               "two_batch_overlap": False}
    assert result.workload["requests_per_rank"] == 16
    assert not any(p.startswith("vision") for p in (r.path for r, _ in result._timed))


def test_vl_prefill_one_1080p_image() -> None:
    text = simulate(UserInput(model=KIMI, query_length=128))
    vl = simulate(UserInput(model=KIMI, query_length=128, **IMAGE_1080P))
    vision_ops = [r for r, _ in vl._timed if r.path.startswith("vision")]
    assert {r.name for r in vision_ops} >= {"infercast::layer_norm", "infercast::gemm", "infercast::attention",
                                            "infercast::gelu"}
    attention = next(r for r in vision_ops if r.name == "infercast::attention")
    assert attention.count == 27
    assert (attention["num_seqs"], attention["q_len"], attention["kv_len"], attention["causal"]) == (
        1, PATCHES_1080P, PATCHES_1080P, False)
    assert attention.tensors()[0].shape == (PATCHES_1080P, 16 // 8, 72)  # 2 of 16 heads per TP8 rank
    assert vl.images["tokens_per_image"] == TOKENS_1080P == 2691
    assert vl.workload["query_length"] == 128 + TOKENS_1080P
    assert vl.memory_gib["weights"] == text.memory_gib["weights"]  # the tower is loaded either way...
    assert vl.vision_parameters_billion == pytest.approx(0.4711, abs=1e-4)  # ...and counted: 416.9 M + 54.3 M
    assert vl.images["vision_ms"] > 0 and vl.ttft_ms > text.ttft_ms + vl.images["vision_ms"]


def test_long_context_text_kv_cache_grows_linearly() -> None:
    runs = [simulate(UserInput(model=KIMI, context_length=c)) for c in (4500, 9000)]
    kv = [r.memory_gib["kv_cache"] for r in runs]
    assert kv[0] > 0
    # MLA: 576 bf16 values per token per layer over 61 layers = 70,272 B/token; decode adds 1 token
    assert kv[0] * 2**30 == pytest.approx(70_272 * 4501)
    assert kv[1] / kv[0] == pytest.approx(9001 / 4501)
    assert runs[1].tpot_ms > runs[0].tpot_ms


def test_long_context_vl_decode_caches_image_tokens_and_skips_the_tower() -> None:
    decode = simulate(UserInput(model=KIMI, context_length=5000, **IMAGE_1080P))
    assert decode.workload["context_length"] == 5000 + TOKENS_1080P
    assert decode.memory_gib["kv_cache"] * 2**30 == pytest.approx(70_272 * (5000 + TOKENS_1080P + 1))
    assert not [r for r, _ in decode._timed if r.path.startswith("vision")]
    prefill = simulate(UserInput(model=KIMI, query_length=5000, **IMAGE_1080P))
    assert prefill.workload["query_length"] == 5000 + TOKENS_1080P and prefill.images["encoded_per_rank"] == 1


@pytest.mark.parametrize(("flags", "message"), [
    (dict(image_batch_size=1), "image_batch_size needs image_height and image_width"),
    (dict(image_height=1080), "image_height is given without image_batch_size"),
    (dict(image_batch_size=1, image_height=0, image_width=10), "image_height must be between 1 and"),
    (dict(model="deepseek-v3", image_batch_size=1, image_height=10, image_width=10), "has no vision tower"),
])
def test_bad_image_flags_are_clear_errors(flags, message) -> None:
    from infercast_adapters import InfercastError

    with pytest.raises(InfercastError, match=message):
        simulate(UserInput(**{"model": KIMI, "query_length": 16, **flags}))


def test_a_users_published_format_config_json_simulates_like_the_bundled_one(tmp_path) -> None:
    import json

    from infercast_kimi_k25.architecture import TEXT_CONFIG

    vision = {"patch_size": 14, "init_pos_emb_height": 64, "init_pos_emb_width": 64, "init_pos_emb_time": 4,
              "vt_num_attention_heads": 16, "vt_num_hidden_layers": 27, "vt_hidden_size": 1152,
              "vt_intermediate_size": 4304, "merge_kernel_size": [2, 2], "merge_type": "sd2_tpool",
              "_attn_implementation": "flash_attention_2", "mm_projector_type": "patchmerger", "mm_hidden_size": 1152}
    config = {"architectures": ["KimiK25ForConditionalGeneration"], "model_type": "kimi_k25",
              "text_config": TEXT_CONFIG, "vision_config": vision, "media_placeholder_token_id": 163605}
    (tmp_path / "config.json").write_text(json.dumps(config))
    user = simulate(UserInput(model=str(tmp_path), query_length=64, **IMAGE_1080P))
    bundled = simulate(UserInput(model=KIMI, query_length=64, **IMAGE_1080P))
    assert user.parameters_billion == bundled.parameters_billion
    assert user.ttft_ms == pytest.approx(bundled.ttft_ms) and user.images == bundled.images
