"""Checkpoint quantization formats beyond FP8 blocks and integer groups: NVIDIA ModelOpt (FP8,
NVFP4, its ``hf_quant_config.json``), compressed-tensors floats and W8A8, and where engines
serve NVFP4."""

from __future__ import annotations

import json

import pytest

from infercast.quant import plan_from_checkpoint
from infercast.simulate import UserInput, simulate
from infercast_adapters import InfercastError

DEEPSEEK = type("Profile", (), {"layers_path": "model.layers"})()

# 70B-class dimensions, so weights, not launches, decide a one-request decode step
DENSE = dict(model_type="llama", architectures=["LlamaForCausalLM"], hidden_size=8192, intermediate_size=28672,
             num_hidden_layers=4, num_attention_heads=64, num_key_value_heads=8, vocab_size=128256,
             max_position_embeddings=8192, rms_norm_eps=1e-5, tie_word_embeddings=False, torch_dtype="bfloat16")
MODELOPT_FP8 = {"producer": {"name": "modelopt", "version": "0.23.0"},
                "quantization": {"quant_algo": "FP8", "kv_cache_quant_algo": "FP8", "exclude_modules": ["lm_head"]}}
MODELOPT_NVFP4 = {"producer": {"name": "modelopt"},
                  "quantization": {"quant_algo": "NVFP4", "group_size": 16, "exclude_modules": ["lm_head"]}}


def _model_dir(tmp_path, name: str, config: dict, hf_quant: dict | None = None) -> str:
    path = tmp_path / name
    path.mkdir()
    (path / "config.json").write_text(json.dumps(config))
    if hf_quant is not None:
        (path / "hf_quant_config.json").write_text(json.dumps(hf_quant))
    return str(path)


def _sim(model: str, **kw):
    args = dict(model=model, device="B200", num_devices=1, decode=True, context_length=1024)
    return simulate(UserInput(**{**args, **kw}))


def test_a_modelopt_checkpoint_is_read_from_its_hf_quant_config(tmp_path) -> None:
    """nvidia/*-FP8 checkpoints state their quantization only in hf_quant_config.json: read as
    BF16 they would hold twice the bytes."""
    bf16 = _sim(_model_dir(tmp_path, "bf16", DENSE))
    fp8 = _sim(_model_dir(tmp_path, "fp8", DENSE, MODELOPT_FP8))
    assert fp8.quantization.startswith("FP8 (checkpoint modelopt FP8; its FP8 KV cache applies with --kv-cache-dtype")
    embeddings = 2 * 128256 * 8192 * 2 / 2**30  # the embedding and the head stay 16-bit
    ratio = (fp8.memory_gib["weights"] - embeddings) / (bf16.memory_gib["weights"] - embeddings)
    assert ratio == pytest.approx(0.5, rel=0.01)  # a byte a weight (and one FP32 scale a row) against two


def test_a_config_json_with_its_own_quantization_ignores_the_hf_quant_config(tmp_path) -> None:
    fp8_blocks = dict(DENSE, quantization_config={"quant_method": "fp8", "weight_block_size": [128, 128]})
    result = _sim(_model_dir(tmp_path, "own", fp8_blocks, MODELOPT_NVFP4))
    assert "fp8 128x128 blocks" in result.quantization


def test_nvfp4_stores_four_and_a_half_bits_a_weight_and_decodes_faster_than_fp8_on_b200(tmp_path) -> None:
    fp8 = _sim(_model_dir(tmp_path, "fp8", DENSE, MODELOPT_FP8))
    nvfp4 = _sim(_model_dir(tmp_path, "nvfp4", DENSE, MODELOPT_NVFP4))
    embeddings = 2 * 128256 * 8192 * 2 / 2**30
    ratio = (nvfp4.memory_gib["weights"] - embeddings) / (fp8.memory_gib["weights"] - embeddings)
    assert ratio == pytest.approx((0.5 + 1 / 16) / 1.0, rel=0.01)  # E2M1 plus an FP8 scale per 16, against FP8
    gemms = [r for r in nvfp4.ops if r.name.startswith("quant_gemm")]
    assert gemms and all(r.source in ("measured", "interpolated", "extrapolated") for r in gemms)
    assert nvfp4.step_latency_ms < fp8.step_latency_ms


@pytest.mark.parametrize(("engine", "refused"), [("sglang", True), ("trtllm", True), ("vllm", False)])
def test_nvfp4_without_fp4_tensor_cores_runs_only_where_the_engine_has_marlin(tmp_path, engine, refused) -> None:
    model = _model_dir(tmp_path, "nvfp4", DENSE, MODELOPT_NVFP4)
    if refused:
        with pytest.raises(InfercastError, match=rf"{engine} does not serve NVFP4 weights on H200, which has no FP4 "
                                                 r"tensor cores .*--engine vllm"):
            _sim(model, device="H200", engine=engine)
        return
    result = _sim(model, device="H200", engine=engine)
    # read from Marlin's INT4 rows: the same kernel streaming 4-bit weights
    gemms = [r for r in result.ops if r.name.startswith("quant_gemm")]
    assert gemms and all("marlin" in r.origin or r.source != "analytic" for r in gemms)
    bf16 = _sim(_model_dir(tmp_path, "bf16", DENSE), device="H200", engine=engine)
    assert result.step_latency_ms < bf16.step_latency_ms


def test_modelopt_exclusions_keep_each_kind_of_linear_apart() -> None:
    """nvidia/DeepSeek-V3.1-NVFP4 lists, layer by layer, MLA's input projections as excluded and
    leaves the output projection, the experts and the shared experts in NVFP4."""
    excluded = ["lm_head"] + [f"model.layers.{i}.self_attn.{m}" for i in range(61)
                              for m in ("kv_a_proj_with_mqa", "kv_b_proj", "q_a_proj", "q_b_proj")]
    plan = plan_from_checkpoint({"quant_method": "modelopt", "producer": {"name": "modelopt"},
                                 "quantization": {"quant_algo": "NVFP4", "group_size": 16,
                                                  "exclude_modules": excluded}}, DEEPSEEK, 61)
    assert plan.attention_input.name == "BF16"
    assert plan.attention_output.name == plan.dense.name == plan.routed_experts.name == "NVFP4"
    assert plan.routed_experts.kernel_dtype == "nvfp4"
    assert plan.describe().startswith("routed experts NVFP4, attention inputs BF16, attention output NVFP4")
    # a wildcard over the attention block (config.json's "ignore", as nvidia/GLM-5.1-NVFP4 writes it)
    flat = plan_from_checkpoint({"quant_method": "modelopt", "quant_algo": "NVFP4",
                                 "ignore": ["lm_head", "model.layers.*.self_attn*", "model.layers.*.mlp.shared_experts*"]},
                                DEEPSEEK, 78)
    assert (flat.attention_input.name, flat.attention_output.name, flat.dense.name, flat.routed_experts.name) == (
        "BF16", "BF16", "BF16", "NVFP4")
    # the checkpoint nests the decoder as language_model.model.layers, transformers as model.language_model.layers
    kimi = type("Profile", (), {"layers_path": "model.language_model.layers"})()
    nested = plan_from_checkpoint({"quant_method": "modelopt", "quant_algo": "NVFP4",
                                   "ignore": [f"language_model.model.layers.{i}.self_attn*" for i in range(61)]},
                                  kimi, 61)
    assert (nested.attention_input.name, nested.attention_output.name, nested.dense.name) == ("BF16", "BF16", "NVFP4")


def test_a_modelopt_algorithm_not_read_is_refused_by_name() -> None:
    with pytest.raises(InfercastError, match=r"ModelOpt quant_algo 'W4A8_AWQ' is not read \(infercast reads FP8, "
                                             r"FP8_PER_CHANNEL_PER_TOKEN, NVFP4\); pass --quantize-linear-action"):
        plan_from_checkpoint({"quant_method": "modelopt", "quantization": {"quant_algo": "W4A8_AWQ"}})
    with pytest.raises(InfercastError, match=r"NVFP4 quantizes in groups of 16 weights, the checkpoint says "
                                             r"group_size 32"):
        plan_from_checkpoint({"quant_method": "modelopt", "quant_algo": "NVFP4", "group_size": 32})
    # ModelOpt's own config.json entry names its producer, not a quant_method (Qwen3-32B-FP8-Static-PerTensor)
    plan = plan_from_checkpoint({"quant_algo": "FP8", "producer": {"name": "modelopt", "version": "0.31.0"},
                                 "ignore": ["lm_head"]})
    assert plan.dense.kernel_dtype == plan.routed_experts.kernel_dtype == "fp8"


def _compressed(weights: dict, inputs: dict | None, ignore=("lm_head",)) -> dict:
    group = {"weights": weights, "targets": ["Linear"]}
    if inputs is not None:
        group["input_activations"] = inputs
    return {"quant_method": "compressed-tensors", "config_groups": {"group_0": group}, "ignore": list(ignore)}


@pytest.mark.parametrize(("weights", "inputs", "kernel", "source"), [
    # RedHatAI's FP8-dynamic checkpoints: FP8 channels, FP8 tokens quantized at run time
    ({"num_bits": 8, "type": "float", "strategy": "channel"}, {"num_bits": 8, "type": "float", "dynamic": True},
     "fp8", "checkpoint compressed-tensors fp8 per-channel"),
    ({"num_bits": 8, "type": "float", "strategy": "block", "block_structure": [128, 128]},
     {"num_bits": 8, "type": "float", "dynamic": True, "strategy": "group", "group_size": 128},
     "fp8_block", "checkpoint compressed-tensors fp8 128x128 blocks"),
    # FP8 weights alone run weight-only
    ({"num_bits": 8, "type": "float", "strategy": "channel"}, None, "w8a16", "checkpoint compressed-tensors fp8 weight-only"),
    # quantized.w8a8: int8 weights and int8 tokens
    ({"num_bits": 8, "type": "int", "strategy": "channel"}, {"num_bits": 8, "type": "int", "dynamic": True},
     "int8", "checkpoint compressed-tensors int8 weights, int8 activations"),
    # the nvfp4 preset: FP4 weights and activations in groups of 16
    ({"num_bits": 4, "type": "float", "group_size": 16}, {"num_bits": 4, "type": "float", "group_size": 16},
     "nvfp4", "checkpoint compressed-tensors nvfp4"),
    ({"num_bits": 4, "type": "float", "group_size": 16}, None, "w4a16", "checkpoint compressed-tensors nvfp4 weight-only"),
    ({"num_bits": 4, "type": "int", "group_size": 128}, None, "w4a16", "checkpoint compressed-tensors int4 group 128"),
])
def test_compressed_tensors_weights_and_activations_give_the_kernel(weights, inputs, kernel, source) -> None:
    plan = plan_from_checkpoint(_compressed(weights, inputs))
    assert plan.dense.kernel_dtype == plan.routed_experts.kernel_dtype == kernel
    assert plan.source.startswith(source)


def test_compressed_tensors_fp4_of_another_group_is_refused() -> None:
    with pytest.raises(InfercastError, match=r"float weights of 4 bits in groups of 32 are not read"):
        plan_from_checkpoint(_compressed({"num_bits": 4, "type": "float", "group_size": 32}, None))


def test_nvfp4_experts_read_the_nvfp4_moe_table_on_b200() -> None:
    result = _sim("deepseek-ai/DeepSeek-V3", num_devices=8, quantize_linear_action="NVFP4",
                  num_hidden_layers_override=4)
    assert result.quantization == "NVFP4 (--quantize-linear-action NVFP4)"
    (moe,) = [r for r in result.ops if r.name.startswith("fused_moe")]
    assert moe.source != "analytic" and moe.origin.startswith("moe sglang")


def test_configs_aiconfigurator_ships_resolve_offline_with_their_quantization() -> None:
    """nvidia/Llama-3.1-70B-Instruct-FP8 comes with aiconfigurator-core as a config.json and the
    hf_quant_config.json beside it: a byte a weight."""
    from infercast_adapters.config import load_config

    from infercast.plugins import get_manager

    config = load_config("NVIDIA/llama-3.1-70b-instruct-fp8", manager=get_manager())  # hub ids ignore case
    assert config.quantization_config["quantization"]["quant_algo"] == "FP8"
    result = _sim("nvidia/Llama-3.1-70B-Instruct-FP8", device="H200", num_devices=8)
    assert result.quantization.startswith("FP8 (checkpoint modelopt FP8")
    attention = 2 * 8192 * 8192 + 2 * 8192 * 1024  # q and o; k and v (8 KV heads of 128)
    layer = attention + 3 * 8192 * 28672  # and the MLP: a byte a weight
    embeddings = 2 * 128256 * 8192 * 2  # embedding and head in bf16
    expected = (80 * layer + embeddings) / 8 / 2**30  # all of it split over TP8
    assert result.memory_gib["weights"] == pytest.approx(expected, rel=0.005)
    # a current hub name of a renamed repository finds the config under its old name
    big = load_config("meta-llama/Llama-3.1-405B-Instruct", manager=get_manager())
    assert (big.hidden_size, big.num_hidden_layers, big.intermediate_size) == (16384, 126, 53248)


def test_models_lists_the_shipped_configs_its_profiles_serve(capsys) -> None:
    from infercast import cli

    assert cli.main(["models", "--json"]) == 0
    listed = json.loads(capsys.readouterr().out)
    shipped = {r["ref"]: r for r in listed["aiconfigurator_configs"]}
    assert shipped["nvidia/DeepSeek-V3.1-NVFP4"] == {"ref": "nvidia/DeepSeek-V3.1-NVFP4", "model_type": "deepseek_v3",
                                                    "quantization": "modelopt NVFP4"}
    assert shipped["moonshotai/Kimi-K2-Instruct"]["model_type"] == "kimi_k2"  # read as DeepSeek-V3 (an alias)
    assert "deepseek-ai/DeepSeek-V3.2" not in shipped  # deepseek_v32: no profile
    assert "deepseek-ai/DeepSeek-V3" not in shipped  # bundled: listed with the models
    assert {r["ref"] for r in listed["models"]} & set(shipped) == set()
