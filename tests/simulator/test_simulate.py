"""The simulator end to end: parameters, sharding, operators, memory, errors, outputs."""

from __future__ import annotations

import json

import pytest

from infercast import cli
from infercast.simulate import UserInput, simulate


def sim(**kwargs):
    return simulate(UserInput(**kwargs))


def op_names(result) -> set[str]:
    return {row.name.split(" ")[0] for row in result.ops}


@pytest.fixture(scope="module")
def kimi_default():
    return simulate(UserInput())


MOONVIT_BLOCK = 2 * 2 * 1152 + (1152 * 3456 + 3456) + (1152 * 1152 + 1152) + (1152 * 4304 + 4304) + (4304 * 1152 + 1152)
MOONVIT = 27 * MOONVIT_BLOCK + (588 * 1152 + 1152) + 64 * 64 * 1152 + 2 * 1152  # blocks, patch conv, pos grid, final LN
PROJECTOR = 2 * 1152 + (4608 * 4608 + 4608) + (4608 * 7168 + 7168)


def test_parameter_totals_match_analytic_counts(kimi_default) -> None:
    # DeepSeek-V3: 671.03 B without the MTP layer; Kimi-K2.5: 1,026.41 B text, MoonViT 416.9 M, projector 54.3 M.
    assert sim(model="deepseek-v3", num_hidden_layers_override=None).parameters_billion == pytest.approx(671.03, abs=0.01)
    assert MOONVIT / 1e6 == pytest.approx(416.9, abs=0.05) and PROJECTOR / 1e6 == pytest.approx(54.3, abs=0.05)
    assert kimi_default.vision_parameters_billion * 1e9 == MOONVIT + PROJECTOR
    assert kimi_default.parameters_billion - kimi_default.vision_parameters_billion == pytest.approx(1026.41, abs=0.01)


def test_weight_memory_matches_the_checkpoint_layout(kimi_default) -> None:
    """INT4 routed experts (group 32, bf16 scales) + bf16 elsewhere, split 8 ways, except the fused
    QKV-down projection and the router, which sglang replicates on every TP rank; the vision tower in bf16."""
    experts = 60 * 384 * 3 * 7168 * 2048  # routed expert weights, layers 1-60
    qkv_a = 61 * 7168 * (1536 + 512 + 64)
    int4_bytes = experts * (0.5 + 2 / 32)
    router = 60 * 384 * 7168  # replicated, like sglang's gate
    sharded = (1026.408209408e9 - experts - qkv_a - router) * 2
    vision = (MOONVIT + PROJECTOR) * 2 / 8  # bf16, split over TP8 (small replicated parts are inside the tolerance)
    expected = (int4_bytes + sharded) / 8 + (qkv_a + router) * 2 + vision
    assert kimi_default.memory_gib["weights"] == pytest.approx(expected / 2**30, rel=0.001)


def test_tp_divides_sharded_weights() -> None:
    from infercast.build import build
    from infercast.layers import SimContext
    from infercast.parallel import Parallel, Workload
    from infercast.plugins import get_manager
    from infercast.quant import plan_from_action
    from infercast_adapters.config import load_config

    manager = get_manager()
    config = load_config("deepseek-v3", manager=manager, num_hidden_layers_override=4)
    profile = manager.profile_for("deepseek_v3")
    sizes = {}
    for tp in (1, 8):
        ctx = SimContext(Parallel(tp, tp, 1, 1), Workload(1, 1, 16, True), plan_from_action("BF16"))
        attn = build(config, profile, ctx, manager).sim.layers[0].self_attn
        sizes[tp] = {name: getattr(attn, name).weight_bytes() for name in ("q_b_proj", "kv_b_proj", "o_proj", "fused_qkv_a_proj")}
    for name in ("q_b_proj", "kv_b_proj", "o_proj"):
        assert sizes[8][name] * 8 == sizes[1][name]
    assert sizes[8]["fused_qkv_a_proj"] == sizes[1]["fused_qkv_a_proj"]  # replicated, as sglang does


def test_mla_decode_layer_operators(kimi_default) -> None:
    names = op_names(kimi_default)
    assert {"mla_attention", "mla_bmm", "all_reduce", "fused_moe", "rope", "kv_cache_write"} <= names
    assert "all_to_all" not in names  # EP 1
    mla = next(r for r in kimi_default.ops if r.name.startswith("mla_attention"))
    assert mla.count == 61


def test_all_reduce_only_with_tp_and_all_to_all_only_with_ep() -> None:
    assert "all_reduce" not in op_names(sim(model="llama-3.1-8b", num_devices=1, query_length=128))
    assert "all_reduce" in op_names(sim(model="llama-3.1-8b", num_devices=2, query_length=128))
    ep = sim(model="qwen3-235b-a22b", device="H100", num_devices=8, tp_size=1, dp_size=8, ep_size=8, num_queries=64,
             decode=True, quantize_linear_action="FP8_BLOCK")
    assert "all_to_all" in op_names(ep) and "attention" in op_names(ep) and "mla_attention" not in op_names(ep)


def layer_records(result, name: str) -> list:
    """``name`` operators inside the decoder layers, first layer first."""
    return [r for r, _ in result._timed if r.name == f"infercast::{name}" and r.path.startswith("layers.")]


def test_expert_parallelism_without_an_all_to_all_runs_local_experts_on_every_token() -> None:
    """sglang's DeepEP runs FP8 experts only on CUDA: BF16 experts under DP8 EP8 are gathered
    from all 8 ranks (8 decode tokens each), each rank runs its 16 of 128 experts on all 64, and
    a reduce-scatter returns 8; vLLM runs its all-to-all across DP ranks whatever the dtype."""
    layout = dict(model="qwen3-235b-a22b", device="H100", num_devices=8, tp_size=1, dp_size=8, ep_size=8,
                  num_queries=64, decode=True)
    local = sim(**layout)
    assert "all_to_all" not in op_names(local) and {"all_gather", "reduce_scatter"} <= op_names(local)
    gather, scatter, experts = (layer_records(local, n)[0] for n in ("all_gather", "reduce_scatter", "fused_moe"))
    assert gather.outputs[0].shape[0] == 64 and gather["group_size"] == 8
    assert experts["x"].shape[0] == 64 and experts["dispatch"] == "local" and experts["local_experts"] == 16
    assert experts["routed_rows"] == pytest.approx(64 * 8 * 16 / 128)  # tokens x top-8 x the rank's share
    assert scatter.outputs[0].shape[0] == 8
    assert any("expert parallelism without an all-to-all: sglang has no all-to-all MoE path for bf16" in n
               for n in local.notes)
    vllm = sim(engine="vllm", **layout)
    assert "all_to_all" in op_names(vllm) and layer_records(vllm, "fused_moe")[0]["dispatch"] == "all_to_all"
    # TensorRT-LLM on a built-in device, and sglang's FP8 experts before Hopper (on Marlin there): no
    # all-to-all either
    for why, extra in (("trtllm runs no all-to-all MoE on H100", {"engine": "trtllm"}),
                       ("sglang has no all-to-all MoE path for w8a16 experts and runs no all-to-all MoE before "
                        "sm_90", {"device": "A100", "quantize_linear_action": "FP8_BLOCK"})):
        result = sim(**{**layout, **extra})
        assert "all_to_all" not in op_names(result) and any(why in n for n in result.notes)
    # TP attention: the tokens are on every rank already; attention's and the MoE's all-reduces sum them
    tp = sim(**{**layout, "tp_size": 8, "dp_size": 1, "num_queries": 8})
    assert not any(layer_records(tp, n) for n in ("all_to_all", "all_gather", "reduce_scatter"))
    assert sum(r.count for r in layer_records(tp, "all_reduce")) == 2 * 94  # after attention and the MoE
    experts = layer_records(tp, "fused_moe")[0]
    assert experts["x"].shape[0] == 8 and experts["routed_rows"] == pytest.approx(8 * 8 * 16 / 128)
    with pytest.raises(Exception, match="two-batch-overlap .* sglang has no all-to-all MoE path for bf16"):
        sim(two_batch_overlap=True, **layout)


def test_without_an_all_to_all_shared_experts_shard_over_every_rank_and_the_engine_keeps_its_graphs() -> None:
    """DeepSeek-V3's INT4 experts under sglang EP8 (TP attention): no DeepEP, so the shared expert
    is TP-sharded over all 8 ranks (2 x 2,048 / 8 gate/up columns) where DeepEP's layout keeps it
    whole on each; the all-reduce fusion and piecewise prefill graphs, which sglang turns off
    only for an all-to-all backend, stay on."""
    layout = dict(model="deepseek-v3", device="H200", num_devices=8, tp_size=8, ep_size=8, engine_version="0.5.14")

    def shared_columns(result) -> int:
        return next(r for r, _ in result._timed if r.path.endswith("shared_experts.gate_up_proj")
                    and r.name in ("infercast::gemm", "infercast::quant_gemm")).outputs[0].shape[-1]

    int4 = sim(quantize_linear_action="W4A16", num_queries=8, decode=True, **layout)
    fp8 = sim(num_queries=8, decode=True, **layout)  # the FP8 checkpoint: DeepEP
    assert layer_records(int4, "fused_moe")[0]["dispatch"] == "local" and shared_columns(int4) == 2 * 2048 // 8
    assert layer_records(fp8, "fused_moe")[0]["dispatch"] == "all_to_all" and shared_columns(fp8) == 2 * 2048
    assert any(n.startswith("all-reduce fusion:") for n in int4.notes)
    assert not any(n.startswith("all-reduce fusion:") for n in fp8.notes)
    prefill = {name: sim(num_queries=1, query_length=1024, **layout, **extra) for name, extra in
               (("int4", {"quantize_linear_action": "W4A16"}), ("fp8", {}))}
    assert not any("prefill launched eagerly" in n for n in prefill["int4"].notes)
    assert any("an MoE all-to-all backend (DeepEP)" in n for n in prefill["fp8"].notes)


def test_a_bf16_moe_without_an_all_to_all_is_priced_from_the_engines_own_table_at_its_ep_size() -> None:
    """The standard dispatcher runs the engine's own fused MoE (triton) over the local experts,
    which sglang's tables measure by EP size."""
    result = sim(model="qwen3-235b-a22b", device="H100", num_devices=8, tp_size=8, ep_size=8, num_queries=64,
                 decode=True)
    moe = next(op for op in result.ops if op.name.startswith("fused_moe"))
    assert moe.source in ("measured", "interpolated") and moe.origin.startswith("moe sglang")


@pytest.mark.parametrize("engine, dtype, dp, arch, reasons", [
    ("sglang", "fp8_block", 1, 90, []),  # DeepEP at any TP
    ("sglang", "bf16", 8, 90, ["has no all-to-all MoE path for bf16 experts"]),
    ("sglang", "bf16", 8, 80, ["has no all-to-all MoE path for bf16 experts", "runs no all-to-all MoE before sm_90"]),
    ("sglang", "fp8_block", 8, 80, ["runs no all-to-all MoE before sm_90"]),
    ("sglang", "bf16", 8, None, []),  # ROCm's and Ascend's paths run every method
    ("vllm", "w4a16", 8, 90, []),
    ("vllm", "fp8_block", 1, 90, ["runs its all-to-all only across DP attention ranks"]),
    ("trtllm", "fp8_block", 1, 90, ["runs no all-to-all MoE on this device",
                                    "runs its all-to-all only across DP attention ranks"]),
    ("trtllm", "bf16", 8, None, ["runs no all-to-all MoE on this device"]),
])
def test_each_engine_says_why_it_runs_no_all_to_all(engine, dtype, dp, arch, reasons) -> None:
    from infercast.engines import engine_named

    policy = engine_named(engine).moe_all_to_all
    assert policy.refusals(dtype, dp, arch) == reasons and policy.runs(dtype, dp, arch) is (not reasons)


def test_another_vendors_device_runs_sglangs_all_to_all_for_any_dtype_and_tensorrt_llms_for_none() -> None:
    layout = dict(model="qwen3-235b-a22b", device="MI300X", num_devices=8, tp_size=1, dp_size=8, ep_size=8,
                  num_queries=64, decode=True)
    assert "all_to_all" in op_names(sim(**layout))
    trtllm = sim(engine="trtllm", **layout)
    assert "all_to_all" not in op_names(trtllm)
    assert any("trtllm runs no all-to-all MoE on MI300X" in n for n in trtllm.notes)


def test_the_standard_dispatcher_gathers_dp_ranks_tokens_as_sglang_pads_them() -> None:
    """Decode (sglang's max-len padding): attention-TP ranks reduce-scatter, all 8 ranks gather,
    and the way back mirrors it. Prefill (sum-len): one all-reduce over a buffer of every DP
    rank's tokens before the MoE and one after it, then each rank copies out its own."""
    layout = dict(model="qwen3-235b-a22b", device="H100", num_devices=8, tp_size=2, dp_size=4, ep_size=8)
    decode = sim(num_queries=64, decode=True, **layout)  # 16 tokens per DP rank
    rows = {n: [(r["group_size"], r.outputs[0].shape[0]) for r in layer_records(decode, n)]
            for n in ("reduce_scatter", "all_gather")}
    assert rows == {"reduce_scatter": [(2, 8), (8, 8)], "all_gather": [(8, 64), (2, 16)]}
    assert layer_records(decode, "fused_moe")[0]["x"].shape[0] == 64
    prefill = sim(num_queries=4, query_length=256, **layout)  # 256 tokens per DP rank
    assert [(r["group_size"], r["x"].shape[0]) for r in layer_records(prefill, "all_reduce")] == [(8, 1024), (8, 1024)]
    assert layer_records(prefill, "fused_moe")[0]["x"].shape[0] == 1024
    # at attention TP 2 the residual is gathered with the partial sums and every rank's tokens are
    # normalized after the gather; each rank copies its own rows of the residual and of the output
    assert [r.outputs[0].shape[0] for r in layer_records(prefill, "index")] == [256, 256]
    norms = {r.name: r["x"].shape[0] for r, _ in prefill._timed if r.path.endswith("post_attention_layernorm")}
    assert norms == {"infercast::rms_norm": 1024}
    tp1 = sim(num_queries=8, query_length=256, **{**layout, "tp_size": 1, "dp_size": 8})
    norms = {r.name: r["x"].shape[0] for r, _ in tp1._timed if r.path.endswith("post_attention_layernorm")}
    assert norms == {"infercast::fused_add_rms_norm": 256}  # attention TP 1: each rank's own tokens first


def test_layer_repetition_gives_the_same_answer_as_tracing_every_layer() -> None:
    kwargs = dict(model="deepseek-v3", num_hidden_layers_override=6, num_queries=4, decode=True)
    once, every = sim(**kwargs), sim(trace_every_layer=True, **kwargs)
    assert once.step_latency_ms == pytest.approx(every.step_latency_ms, rel=1e-9)
    assert once.kernel_count == every.kernel_count


def test_kv_cache_grows_linearly_with_context() -> None:
    kv = [sim(model="deepseek-v3", num_queries=2, decode=True, context_length=c).memory_gib["kv_cache"] for c in (999, 1999, 3999)]
    assert kv[1] / kv[0] == pytest.approx(2.0) and kv[2] / kv[0] == pytest.approx(4.0)
    # MLA: 576 values x 2 bytes x 61 layers per token, replicated on every TP rank
    assert kv[0] * 2**30 == pytest.approx(2 * 1000 * 576 * 2 * 61)


def test_qwen2_and_mistral_price_as_the_llama_layers_they_are(tmp_path) -> None:
    """Both families are Llama's decoder with other defaults: the same widths give the same step.
    Qwen2's query, key and value biases are not priced (a vector add each, which engines fold
    into the projection's epilogue)."""
    dims = dict(hidden_size=4096, intermediate_size=14336, num_hidden_layers=32, num_attention_heads=32,
                num_key_value_heads=8, vocab_size=32768, max_position_embeddings=32768, rms_norm_eps=1e-5,
                tie_word_embeddings=False)
    steps = {}
    for family in ("llama", "qwen2", "mistral"):
        path = tmp_path / f"{family}.json"
        path.write_text(json.dumps(dict(dims, model_type=family, sliding_window=None)))
        result = sim(model=str(path), device="H100", num_devices=1, num_queries=4, decode=True, context_length=1000)
        steps[family] = (result.step_latency_ms, result.kernel_count, result.memory_gib["weights"])
        assert not any("sliding-window" in note for note in result.notes)
    assert steps["qwen2"] == steps["mistral"] == steps["llama"]


def test_minimax_m2s_query_and_key_norms_span_the_heads_and_all_reduce_their_statistic() -> None:
    """MiniMax-M2 normalizes all heads' queries (and keys) together: each TP rank holds 1/TP of
    them, so the ranks all-reduce each token's two sums of squares once a layer; Qwen3's
    per-head norms need nothing across ranks."""
    def rows(model: str, tp: int) -> dict[str, int]:
        result = sim(model=model, device="H200", num_devices=tp, num_queries=4, decode=True, context_length=1000)
        return {row.name: row.count for row in result.ops}, result
    minimax, result = rows("minimax-m2.5", 4)
    assert minimax["all_reduce (layers.*.self_attn)"] == 62  # one a layer, beside the layer's own two
    assert minimax["rms_norm (layers.*.self_attn.q_norm)"] == 62  # over the rank's 12 heads at once
    assert result.parameters_billion == pytest.approx(228.7, abs=0.1)  # "230B total", as published
    alone, _ = rows("minimax-m2.5", 1)
    assert not any(name.startswith("all_reduce") for name in alone)
    qwen3, _ = rows("qwen3-32b", 4)
    assert "all_reduce (layers.*.self_attn)" not in qwen3


def test_glm4_moe_prices_its_dense_first_layers_shared_expert_and_optional_query_key_norms(tmp_path) -> None:
    """GLM-4.5-Air's published shape (106B total): one dense layer, then 45 of 128 routed experts
    (top-8) beside a shared one; per-head query-key norms only where use_qk_norm is set."""
    air = dict(model_type="glm4_moe", hidden_size=4096, intermediate_size=10944, moe_intermediate_size=1408,
               num_hidden_layers=46, num_attention_heads=96, num_key_value_heads=8, head_dim=128,
               n_routed_experts=128, n_shared_experts=1, num_experts_per_tok=8, first_k_dense_replace=1,
               n_group=1, topk_group=1, vocab_size=151552, max_position_embeddings=131072, attention_bias=True,
               partial_rotary_factor=0.5, use_qk_norm=False, tie_word_embeddings=False)
    counts = {}
    for qk_norm in (False, True):
        path = tmp_path / f"glm-{qk_norm}.json"
        path.write_text(json.dumps(dict(air, use_qk_norm=qk_norm)))
        result = sim(model=str(path), device="H200", num_devices=8, num_queries=8, decode=True, context_length=1000)
        counts[qk_norm] = {row.name: row.count for row in result.ops}
        assert result.parameters_billion == pytest.approx(106.9, abs=0.2)
    assert counts[False]["fused_moe (layers.*.mlp)"] == 45
    assert "rms_norm (layers.*.self_attn.q_norm)" not in counts[False]
    assert counts[True]["rms_norm (layers.*.self_attn.q_norm)"] == 46


def test_qwen2_moe_prices_its_routed_and_shared_experts_at_its_published_size(tmp_path) -> None:
    """Qwen1.5-MoE-A2.7B (14.3B published): every layer routes each token to 4 of 60 experts of
    1,408 beside one shared expert of 5,632 (a sigmoid gate scales it)."""
    a27b = dict(model_type="qwen2_moe", hidden_size=2048, intermediate_size=5632, moe_intermediate_size=1408,
                shared_expert_intermediate_size=5632, num_experts=60, num_experts_per_tok=4, num_hidden_layers=24,
                num_attention_heads=16, num_key_value_heads=16, vocab_size=151936, max_position_embeddings=8192,
                decoder_sparse_step=1, norm_topk_prob=False, tie_word_embeddings=False)
    path = tmp_path / "config.json"
    path.write_text(json.dumps(a27b))
    result = sim(model=str(path), device="H100", num_devices=1, num_queries=8, decode=True, context_length=1000)
    names = {row.name: row.count for row in result.ops}
    assert result.parameters_billion == pytest.approx(14.32, abs=0.02)
    assert names["fused_moe (layers.*.mlp)"] == 24 and names["gemm (layers.*.mlp.shared_experts.down_proj)"] == 24
    (moe,) = layer_records(result, "fused_moe")[:1]
    assert (moe["num_experts"], moe["top_k"]) == (60, 4)


def test_deepseek_v2_lite_prices_mla_without_a_query_lora_and_its_published_size(tmp_path) -> None:
    """DeepSeek-V2-Lite (15.7B published): MLA whose queries skip the LoRA (one q_proj), a dense
    first layer, then 64 routed experts (top-6) beside two shared ones."""
    lite = dict(model_type="deepseek_v2", hidden_size=2048, intermediate_size=10944, moe_intermediate_size=1408,
                num_hidden_layers=27, num_attention_heads=16, num_key_value_heads=16, q_lora_rank=None,
                kv_lora_rank=512, qk_nope_head_dim=128, qk_rope_head_dim=64, v_head_dim=128, n_routed_experts=64,
                n_shared_experts=2, num_experts_per_tok=6, first_k_dense_replace=1, topk_method="greedy",
                n_group=1, topk_group=1, vocab_size=102400, max_position_embeddings=163840, tie_word_embeddings=False)
    path = tmp_path / "config.json"
    path.write_text(json.dumps(lite))
    result = sim(model=str(path), device="H100", num_devices=1, num_queries=8, decode=True, context_length=1000)
    names = {row.name: row.count for row in result.ops}
    assert result.parameters_billion == pytest.approx(15.71, abs=0.02)
    assert names["fused_moe (layers.*.mlp)"] == 26 and names["mla_attention (layers.*.self_attn)"] == 27
    assert not any("q_a_proj" in name or "q_b_proj" in name for name in names)


def test_gpt_oss_alternates_windowed_and_full_attention_over_mxfp4_experts() -> None:
    """gpt-oss-120b (116.8B published; 20b: 20.9B): half its layers attend within 128 tokens, so
    from 4K to 32K of context only the other half's attention grows; its experts are MXFP4."""
    def attention_rows(context: int) -> list[tuple[int, float]]:
        result = sim(model="gpt-oss-120b", device="H200", num_devices=1, decode=True, num_queries=8,
                     context_length=context)
        assert "routed experts MXFP4" in result.quantization
        return sorted((row.count, row.total_ms) for row in result.ops if row.name == "attention (layers.*.self_attn)")
    short, long = attention_rows(4096), attention_rows(32768)
    assert [count for count, _ in short] == [18, 18]
    (windowed_short, full_short), (windowed_long, full_long) = sorted(short, key=lambda r: r[1]), sorted(
        long, key=lambda r: r[1])
    assert windowed_long[1] == pytest.approx(windowed_short[1]) and full_long[1] > 4 * full_short[1]
    assert sim(model="gpt-oss-120b", decode=True).parameters_billion == pytest.approx(116.8, abs=0.1)
    assert sim(model="gpt-oss-20b", decode=True).parameters_billion == pytest.approx(20.9, abs=0.1)


def test_a_sliding_window_shorter_than_the_context_is_named_with_what_is_held_in_full(tmp_path) -> None:
    path = tmp_path / "mistral-v0.1.json"
    path.write_text(json.dumps(dict(model_type="mistral", hidden_size=4096, intermediate_size=14336, num_hidden_layers=32,
                                    num_attention_heads=32, num_key_value_heads=8, vocab_size=32000,
                                    max_position_embeddings=32768, sliding_window=4096)))
    def notes(context: int) -> list[str]:
        result = sim(model=str(path), device="H100", num_devices=1, decode=True, context_length=context)
        return [note for note in result.notes if note.startswith("sliding-window attention")]
    assert notes(3000) == []
    (note,) = notes(8000)
    assert "32 of 32 layers attend to the last 4,096 of the 8,001 tokens" in note


def test_a_sliding_window_bounds_what_attention_reads_and_scores(tmp_path) -> None:
    """Mistral-7B-v0.1 attends within 4,096 tokens: a decode step costs the same at 8K and 30K
    of context, where v0.3 (no window, otherwise the same layers) keeps growing; a prefill scores
    the window's (query, key) pairs only."""
    from infercast.cost import attended_pairs

    dims = dict(model_type="mistral", hidden_size=4096, intermediate_size=14336, num_hidden_layers=32,
                num_attention_heads=32, num_key_value_heads=8, vocab_size=32000, max_position_embeddings=32768)
    steps = {}
    for window in (4096, None):
        path = tmp_path / f"w{window}.json"
        path.write_text(json.dumps(dict(dims, sliding_window=window)))
        steps[window] = [sim(model=str(path), device="H100", num_devices=1, decode=True, num_queries=8,
                             context_length=c).step_latency_ms for c in (2000, 8000, 30000)]
    assert steps[4096][0] == pytest.approx(steps[None][0])  # inside the window: no difference
    assert steps[4096][1] == pytest.approx(steps[4096][2])
    assert steps[None][2] > steps[None][1] > steps[4096][1]
    # by hand: 10 new tokens over 5 cached within a window of 8 see 6, 7, 8, 8, ... keys
    assert attended_pairs(1, 10, 15, True, 8) == 6 + 7 + 8 * 8
    assert attended_pairs(2, 10, 15, True, 0) == 2 * (10 * 5 + 55)


def test_larger_batches_take_longer_but_give_more_throughput() -> None:
    small, large = (sim(model="deepseek-v3", num_queries=n, decode=True) for n in (1, 64))
    assert large.step_latency_ms > small.step_latency_ms
    assert large.throughput_tokens_per_s_per_device > 10 * small.throughput_tokens_per_s_per_device


def test_layout_that_does_not_fit_is_reported_not_raised() -> None:
    result = sim(model="deepseek-v3", device="H100", quantize_linear_action="BF16")
    assert not result.feasible
    assert result.memory_gib["weights"] > result.memory_gib["capacity"]
    assert any("does not fit" in note for note in result.notes)


def test_capacity_is_what_the_driver_reports_so_a_run_that_fit_fits() -> None:
    # sglang PR 13466 served Kimi-K2 with FP8 weights on 8 x H200 (TP8): ~1T parameters at one
    # byte, 121 GiB a GPU. Kimi-K2.5 with every linear layer in FP8 is that text model plus its
    # vision tower, the same 121 GiB. Against 141e9 bytes (the data sheet's "141 GB") it could not
    # fit; the card reports 143,771 MiB, of which the 90% pool holds it.
    result = sim(device="H200", num_devices=8, tp_size=8, query_length=1024, quantize_linear_action="FP8")
    weights = result.memory_gib["weights"]
    assert 0.9 * 141e9 / 2**30 < weights < result.memory_gib["capacity"]
    assert result.memory_gib["capacity"] == pytest.approx(0.9 * 143771 / 1024)
    assert result.feasible


def test_mem_fraction_static_sets_the_usable_share_and_the_fit() -> None:
    # Llama-3.1-70B in bf16 on 4 x H100 (TP4): 35.2 GiB of weights a GPU, which fit in 90% of
    # 81,559 MiB (71.7 GiB) and not in 40% (31.9 GiB)
    default, tight = (sim(model="meta-llama/Llama-3.1-70B-Instruct", device="H100", num_devices=4, decode=True,
                          mem_fraction_static=f) for f in (None, 0.4))
    for result, fraction in ((default, 0.9), (tight, 0.4)):
        assert result.memory_gib["capacity"] == pytest.approx(fraction * 81559 / 1024)
        assert result.memory_gib["fraction"] == fraction
    assert default.feasible and not tight.feasible
    assert default.memory_gib["weights"] == tight.memory_gib["weights"]
    (note,) = [n for n in tight.notes if n.startswith("does not fit")]
    assert "40% of 79.6 GiB" in note
    # the requests that fit shrink with the memory the weights leave
    per_request = default.memory_gib["kv_cache"] * 2**30  # one request at the default 2,048 cached + 1
    free = (default.memory_gib["capacity"] - default.memory_gib["weights"]) * 2**30
    assert default.max_num_queries == int(free // (per_request + default.memory_gib["activations"] * 2**30))


def test_max_total_tokens_caps_the_kv_pool_and_the_requests_that_fit() -> None:
    def run(queries: int, cap: int | None):
        return sim(model="deepseek-v3", decode=True, num_queries=queries, context_length=4095, max_total_tokens=cap)

    free, capped, over = run(32, None), run(32, 131_072), run(33, 131_072)
    # MLA keeps every request's latent cache on every TP rank: 32 requests of 4,096 slots fill 131,072
    assert capped.memory_gib["kv_slots_needed"] == 32 * 4096 == capped.memory_gib["kv_slots"]
    assert free.memory_gib["kv_slots"] > 5 * 131_072 and free.max_num_queries > 150
    assert capped.feasible and capped.max_num_queries == 32
    assert not over.feasible and over.memory_gib["kv_cache"] * 2**30 < over.memory_gib["capacity"] * 2**30
    (note,) = [n for n in over.notes if n.startswith("does not fit")]
    assert "needs 135,168 KV cache slots a rank, the pool holds 131,072" in note
    # the cap changes what fits, not what a step costs
    assert capped.step_latency_ms == free.step_latency_ms


def test_sglangs_default_memory_share_follows_its_server_args_rule() -> None:
    """(MiB - reserved) / MiB, rounded to 3 places, reserved = 512 + 1.5 x max(chunk, 2048) +
    2 x graph batch + TP/8 x 1024 (+ DP attention, prefill graphs, a draft), at least 10 GiB."""
    from types import SimpleNamespace

    from infercast.engines import SGLANG_STATIC_MEMORY as rule

    h200, h100, b200 = 143771 * 2**20, 81559 * 2**20, 183359 * 2**20

    def share(version, memory, **launch):
        return rule.default(version, memory, **{**dict(tp=8, dp=1, chunk=8192, prefill_graphs=False, mla=True,
                                                      speculative=False), **launch})

    assert share("0.5.14", h200) == (0.897, 512 + 8192 * 1.5 + 512 * 2 + 1024)  # 14,848 MiB kept
    assert share("0.5.14", h200, prefill_graphs=True) == (round((143771 - 14848 - 1536) / 143771, 3), 16384)
    # the captured prompt sizes: 4-32 (8), 48-256 (14), 288-512 (8), 576-1,024 (8), then 1,280-4,096
    # (12) and 4,608-8,192 (8); before 0.5.10 MLA captures (and reserves for) up to 2,048 by default
    assert share("0.5.9", h200, prefill_graphs=True)[1] == 14848 + (38 + 4) * 8
    assert share("0.5.14", h200, prefill_graphs=True, mla=False)[1] == 14848 + (38 + 12 + 8) * 8
    # launched with --piecewise-cuda-graph-max-tokens 1024: 38 sizes, 160 MiB less
    assert share("0.5.14", h200, prefill_graphs=True, mla=False, capture_tokens=1024)[1] == 14848 + 38 * 8
    assert share("0.5.14", h100, tp=1, mla=False) == (0.835, 512 + 12288 + 256 * 2 + 128)
    assert share("0.5.14", b200, chunk=16384) == (0.852, 512 + 16384 * 1.5 + 1024 + 1024)
    assert share("0.5.14", h200, dp=8)[1] == 14848 + 512 * 8 * 3 + 512 * 8 * 1.5  # DP attention
    assert share("0.5.14", h100, tp=72, dp=72)[0] < 0  # large DP needs the flag set by hand
    assert share("0.5.9", h200, speculative=True)[1] == 14848 + 2048
    assert share("0.5.12", h200, speculative=True)[1] == 14848 + 4096
    assert share("0.5.14", h200, speculative=True)[1] == 14848  # counts the draft's weights instead
    assert share("0.5.14", h200, tp=1, mla=False)[0] == 0.907  # above the 0.9 infercast prices
    moonvit = SimpleNamespace(num_hidden_layers=27, hidden_size=1152)  # 1.42 x ViT-L/14: 0.95 x 0.958
    assert share("0.5.14", h200, vision=moonvit)[0] == pytest.approx(0.897 * 0.95 * (1 - 0.1 * (27 * 1152**2 / (
        24 * 1024**2) - 1)))


def test_simulate_says_where_sglangs_default_share_is_below_the_priced_one(kimi_default) -> None:
    (note,) = [n for n in kimi_default.notes if n.startswith("memory:")]
    assert "sglang 0.5.14 defaults to 0.816" in note and "--mem-fraction-static 0.9" in note and "vision" in note
    assert kimi_default.memory_gib["capacity"] == pytest.approx(0.9 * 143771 / 1024)  # priced as before
    given = sim(mem_fraction_static=0.816)
    assert not any(n.startswith("memory:") for n in given.notes)
    assert given.max_num_queries < kimi_default.max_num_queries
    assert not any(n.startswith("memory:") for n in sim(model="deepseek-v3", engine="vllm", decode=True).notes)


def test_quantization_defaults_follow_the_checkpoint(kimi_default) -> None:
    assert "W4A16" in kimi_default.quantization and "BF16" in kimi_default.quantization
    assert "fp8" in sim(model="deepseek-v3", num_hidden_layers_override=4).quantization
    w4a8 = sim(num_hidden_layers_override=4, quantize_linear_action="W4A8_DYNAMIC")
    assert "quantize_activation" in op_names(w4a8)


@pytest.mark.parametrize(("config", "routed", "dense", "source"), [
    ({"quant_method": "awq", "bits": 4, "group_size": 128, "zero_point": True, "modules_to_not_convert": None},
     ("W4A16", 4, 128), ("W4A16", 4, 128), "checkpoint awq int4 group 128"),
    ({"quant_method": "gptq", "bits": 8, "group_size": -1, "desc_act": False},
     ("W8A16", 8, None), ("W8A16", 8, None), "checkpoint gptq int8 channel"),
    # MiniMax-M2.5-AWQ keeps its attention and router in 16 bits: only the experts are int4
    ({"quant_method": "awq", "bits": 4, "group_size": 128,
      "modules_to_not_convert": ["self_attn", "block_sparse_moe.gate", "model.layers.0."]},
     ("W4A16", 4, 128), ("BF16", 16, None), "checkpoint awq int4 group 128"),
])
def test_awq_and_gptq_checkpoints_are_read_as_integer_groups(config, routed, dense, source) -> None:
    from infercast.quant import plan_from_checkpoint

    plan = plan_from_checkpoint(config)
    assert (plan.routed_experts.name, plan.routed_experts.weight_bits, plan.routed_experts.group_size) == routed
    assert (plan.dense.name, plan.dense.weight_bits, plan.dense.group_size) == dense
    assert plan.source == source


def test_an_awq_checkpoint_streams_a_quarter_of_its_16_bit_weights(tmp_path) -> None:
    dims = dict(model_type="qwen2", hidden_size=3584, intermediate_size=18944, num_hidden_layers=28,
                num_attention_heads=28, num_key_value_heads=4, vocab_size=152064, max_position_embeddings=32768,
                tie_word_embeddings=False)
    weights = {}
    for name, extra in (("bf16", {}), ("awq", {"quantization_config": {"quant_method": "awq", "bits": 4,
                                                                       "group_size": 128}})):
        path = tmp_path / f"{name}.json"
        path.write_text(json.dumps(dict(dims, **extra)))
        weights[name] = sim(model=str(path), device="H100", num_devices=1, decode=True).memory_gib["weights"]
    embeddings = 2 * 152064 * 3584 * 2 / 2**30  # the embedding and the head stay 16-bit
    layers16, layers4 = weights["bf16"] - embeddings, weights["awq"] - embeddings
    # half a byte a weight and a 2-byte scale a group of 128, against 2 bytes a weight (norms stay 16-bit)
    assert layers4 / layers16 == pytest.approx((0.5 + 2 / 128) / 2, rel=0.01)


def test_an_integer_checkpoint_of_unreadable_width_is_refused_by_name() -> None:
    from infercast.quant import plan_from_checkpoint
    from infercast_adapters import InfercastError

    with pytest.raises(InfercastError, match=r"quantization_config.bits must be 2, 3, 4 or 8 for gptq, got 5"):
        plan_from_checkpoint({"quant_method": "gptq", "bits": 5, "group_size": 128})
    with pytest.raises(InfercastError, match=r"bits must be 2, 3, 4 or 8 for awq, got 4.0"):
        plan_from_checkpoint({"quant_method": "awq", "bits": 4.0, "group_size": 128})
    with pytest.raises(InfercastError, match=r"group_size must be a positive integer or -1 for awq, got 0"):
        plan_from_checkpoint({"quant_method": "awq", "bits": 4, "group_size": 0})
    with pytest.raises(InfercastError, match=r"modules_to_not_convert must be a list of module names for awq"):
        plan_from_checkpoint({"quant_method": "awq", "bits": 4, "group_size": 128, "modules_to_not_convert": "lm_head"})
    # an entry naming one layer keeps that layer (not priced), not every layer's linears
    plan = plan_from_checkpoint({"quant_method": "awq", "bits": 4, "group_size": 128,
                                 "modules_to_not_convert": ["model.layers.1", "lm_head"]})
    assert plan.dense.name == "W4A16"


def test_two_batch_overlap_pays_only_when_communication_is_large() -> None:
    """Two micro-batches hide all-to-all time but launch every kernel twice and read the
    expert weights twice: a win at 256 requests per GPU over 9 nodes (M2's setting), a loss
    at 4 per GPU where fixed costs dominate."""
    def step(per_gpu: int, tbo: bool) -> float:
        return sim(model="deepseek-v3", device="H100", num_devices=72, tp_size=1, dp_size=72, ep_size=72,
                   ep_num_redundant_experts=32, num_queries=72 * per_gpu, decode=True, num_hidden_layers_override=8,
                   two_batch_overlap=tbo).step_latency_ms

    assert step(256, True) < step(256, False)
    assert step(4, True) > step(4, False)


JSON_KEYS = {"model", "device", "num_devices", "parallel", "phase", "step_latency_ms", "ttft_ms", "tpot_ms",
             "throughput_tokens_per_s_per_device", "memory_gib", "ops"}


def test_cli_json_schema_and_files(tmp_path, capsys) -> None:
    trace_file, out_file = tmp_path / "trace.json", tmp_path / "out.json"
    code = cli.main(["simulate", "llama-3.1-8b", "--device", "H100", "--num-devices", "1", "--query-length", "512",
                     "--json", "--chrome-trace", str(trace_file), "--output-json", str(out_file)])
    assert code == 0
    data = json.loads(capsys.readouterr().out)
    assert JSON_KEYS <= set(data)
    assert data["phase"] == "prefill" and data["ttft_ms"] > 0 and data["tpot_ms"] is None
    assert set(data["parallel"]) >= {"tp", "dp", "ep"}
    assert set(data["memory_gib"]) >= {"weights", "kv_cache", "activations", "total", "capacity"}
    assert {"name", "count", "total_ms", "bound"} <= set(data["ops"][0])
    assert json.loads(out_file.read_text())["step_latency_ms"] == data["step_latency_ms"]
    events = [e for e in json.loads(trace_file.read_text())["traceEvents"] if e["ph"] == "X"]
    assert {e["tid"] for e in events} == {1, 3}  # TP1: kernels and host rows, no communication track
    assert sum(e["dur"] for e in events) / 1e3 == pytest.approx(data["step_latency_ms"], rel=1e-3)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--device", "Z100"], "unknown device 'Z100'"),
        (["--tp-size", "3", "--num-devices", "3"], "does not divide the 64 attention heads"),
        (["--ep-size", "7", "--num-devices", "7", "--tp-size", "1", "--dp-size", "7"], "does not divide the 384 expert slots"),
        (["--ep-size", "16"], "--ep-size 16 must divide --num-devices 8"),
        (["--tp-size", "4"], "--tp-size x --dp-size must equal --num-devices"),
        (["--num-queries", "0"], "--num-queries must be between 1 and 1e+08, got 0"),
        (["--query-length", "-5"], "--query-length must be between 1 and 1e+08, got -5"),
        (["--context-length", "300000"], "exceeds the model's max_position_embeddings"),
        (["--quantize-linear-action", "INT3"], "--quantize-linear-action is 'INT3'; valid: BF16"),
    ],
)
def test_cli_bad_input_exits_2_with_a_message(argv, message, capsys) -> None:
    assert cli.main(["simulate", *argv]) == 2
    err = capsys.readouterr().err
    assert message in " ".join(err.split()) and "Traceback" not in err


def test_a_negative_operator_count_is_refused_by_the_parser(capsys) -> None:
    with pytest.raises(SystemExit) as exit_:
        cli.main(["simulate", "--show-ops", "-1"])
    assert exit_.value.code == 2 and "--show-ops: '-1' is negative" in capsys.readouterr().err


def test_no_arguments_simulates_the_default(capsys) -> None:
    assert cli.main([]) == 0
    out = capsys.readouterr().out
    assert "Kimi-K2.5" in out and "TPOT" in out


def test_trace_caches_follow_the_module_tree() -> None:
    """Weight ids, names and signatures are cached per module: a weight added after first use is
    seen, and a deep copy (new tensors) traces exactly as its original."""
    import copy

    from infercast.layers import SimModule
    from infercast.plan import Planner
    from infercast.trace import trace

    from .test_plan import SMALL

    parent, child = SimModule(), SimModule()
    parent.child = child
    first = child.weight("a", (4, 4))
    assert parent.weight_ids() == {id(first)} and parent.signature()[1] == ("SimModule", (("a", (4, 4), first.dtype),))
    later = child.weight("b", (2, 4))
    assert parent.weight_ids() == {id(first), id(later)} and parent.weight_bytes() == (16 + 8) * first.element_size()

    planner = Planner(SMALL)
    built, _ = planner._model(planner.grid()[0][0], None)
    records = trace(built.sim, 16)
    twin = copy.deepcopy(built.sim)
    assert twin.weight_ids().isdisjoint(built.sim.weight_ids()) and len(twin.weight_ids()) == len(built.sim.weight_ids())

    def view(recs):  # what pricing reads: op, place, count and each tensor's shape, dtype and role
        return [(r.name, r.path, r.count, [(t.shape, t.dtype, t.role) for t in r.tensors()]) for r in recs]

    assert view(trace(twin, 16)) == view(records) and any(t.role == "weight" for r in records for t in r.tensors())


def test_a_sliding_layers_cache_is_counted_as_the_engine_keeps_it() -> None:
    """gpt-oss-20b: 12 of its 24 layers slide over 128 tokens. vLLM frees what leaves the window,
    so at 32,000 tokens a request holds 12 full layers plus 12 x 128 tokens, about half of what
    holding every layer in full (TensorRT-LLM) takes; sglang's sliding pool is 0.8 of the full
    layers' tokens: 12 + 12 x 0.8 = 21.6 layers' worth, 0.9 of it."""
    step = dict(model="openai/gpt-oss-20b", device="H100", num_devices=1, decode=True, context_length=32000)
    kv = {engine: simulate(UserInput(engine=engine, **step)).memory_gib["kv_cache"]
          for engine in ("trtllm", "sglang", "vllm")}
    tokens = 32001
    assert kv["vllm"] / kv["trtllm"] == pytest.approx((12 * tokens + 12 * 128) / (24 * tokens), rel=1e-6)
    assert kv["sglang"] / kv["trtllm"] == pytest.approx(21.6 / 24, rel=1e-6)
