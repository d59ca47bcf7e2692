"""Checkpoint quantization formats beyond FP8 blocks and integer groups: NVIDIA ModelOpt (FP8,
NVFP4, its ``hf_quant_config.json``), compressed-tensors floats and W8A8, and where engines
serve NVFP4."""

from __future__ import annotations

import json
from dataclasses import replace

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
    assert fp8.quantization.startswith("FP8 (checkpoint modelopt FP8, FP8 KV cache")
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
    assert result.quantization.endswith("weight-only through Marlin on H200, which has no FP4 tensor cores)")
    # priced as Marlin's INT4 kernels stream 4-bit weights, group-16 FP8 scales a little more bytes
    marlin = _sim(_model_dir(tmp_path, "bf16", DENSE), device="H200", engine=engine, quantize_linear_action="W4A16")
    gemms = {r.name: r for r in result.ops if r.name.startswith("quant_gemm")}
    int4 = {r.name: r for r in marlin.ops if r.name.startswith("quant_gemm")}
    assert gemms.keys() == int4.keys() and all("w4a16" in r.origin for r in gemms.values())
    for name, row in gemms.items():
        assert int4[name].total_ms < row.total_ms < 1.15 * int4[name].total_ms
    assert not any(r.name.startswith("quantize_activation") for r in result.ops)  # bf16 activations


@pytest.mark.parametrize("engine", ["sglang", "vllm", "trtllm"])
def test_a_modelopt_fp8_checkpoint_loads_only_where_there_are_fp8_tensor_cores(tmp_path, engine) -> None:
    """vLLM and sglang run FP8 weights through Marlin on Ampere, but their ModelOptFp8Config wants
    compute capability 8.9, so a ModelOpt FP8 checkpoint (per tensor or per channel) on an A100 is
    refused, saying what would run instead; TensorRT-LLM runs no FP8 there at all, and no longer
    points at vLLM for this checkpoint. The same checkpoint on an H100 is served; a DeepSeek-style
    FP8-block checkpoint, a compressed-tensors FP8 one (its W8A16 fallback) or the 16-bit one
    quantized online run through Marlin on the A100 in vLLM and sglang."""
    per_channel = {"producer": {"name": "modelopt"}, "quantization": {"quant_algo": "FP8_PER_CHANNEL_PER_TOKEN"}}
    for name, hf_quant in (("modelopt", MODELOPT_FP8), ("per-channel", per_channel)):
        modelopt = _model_dir(tmp_path, name, DENSE, hf_quant)
        if engine == "trtllm":
            expected = (r"trtllm does not serve FP8 weights on A100, which has no FP8 tensor cores \(.*\); use a "
                        r"device with them \(H100\), or the model's 16-bit checkpoint \(not this ModelOpt one\)")
        else:
            expected = (rf"{engine} does not load a ModelOpt FP8 checkpoint on A100, which has no FP8 tensor cores "
                        rf"\(.*ModelOptFp8Config needs compute capability 8.9.*\); use a device with them "
                        rf"\(H100\), or the model's 16-bit checkpoint \(not this ModelOpt one\) quantized to FP8")
        with pytest.raises(InfercastError, match=expected) as refused:
            _sim(modelopt, device="A100", engine=engine)
        assert "--engine vllm" not in str(refused.value)
        assert "checkpoint modelopt FP8" in _sim(modelopt, device="H100", engine=engine).quantization
    if engine == "trtllm":
        return
    blocks = dict(DENSE, quantization_config={"quant_method": "fp8", "fmt": "e4m3", "activation_scheme": "dynamic",
                                              "weight_block_size": [128, 128]})
    fp8 = {"num_bits": 8, "type": "float"}
    compressed = dict(DENSE, quantization_config={
        "quant_method": "compressed-tensors", "ignore": ["lm_head"],
        "config_groups": {"group_0": {"targets": ["Linear"], "weights": {**fp8, "strategy": "channel"},
                                      "input_activations": {**fp8, "dynamic": True}}}})
    for served in (_sim(_model_dir(tmp_path, "blocks", blocks), device="A100", engine=engine),
                   _sim(_model_dir(tmp_path, "compressed", compressed), device="A100", engine=engine),
                   _sim(_model_dir(tmp_path, "bf16", DENSE), device="A100", engine=engine,
                        quantize_linear_action="FP8")):
        assert served.quantization.endswith("FP8 weight-only through Marlin on A100, which has no FP8 tensor cores)")


def test_the_plan_leaves_a_refused_modelopt_checkpoint_out_and_says_an_online_fp8_wants_the_16_bit_one() -> None:
    """Planning Qwen3-32B's ModelOpt FP8 checkpoint (shipped offline) on an A100 with vLLM, asked
    for the checkpoint and online FP8: the checkpoint is left out with vLLM's reason; the FP8
    configurations' commands would pass --quantization fp8 to an already quantized checkpoint,
    which the engines will not apply, so a note says to point them at the 16-bit one. A
    DeepSeek-style FP8 checkpoint (quant_method fp8) with the same flag gets no such note."""
    from infercast.plan import Planner, PlanRequest

    def planner(model: str, quantizations: tuple, device: str = "A100") -> Planner:
        return Planner(PlanRequest(model=model, device=device, num_devices=(1,), batches=(8,), speculative=(),
                                   quantizations=quantizations, engine="vllm"))

    modelopt = planner("Qwen/Qwen3-32B-FP8-Static-PerTensor", (None, "FP8"))
    assert modelopt.quantizations == ("FP8",)
    assert any(n.startswith("--quantization checkpoint left out: vllm does not load a ModelOpt FP8 checkpoint on "
                            "A100") for n in modelopt.spec_notes)
    result = modelopt.run()
    assert result.best is not None and result.best.quantization == "FP8"
    notes = modelopt.notes_for(result.best)
    assert any(n.startswith("sglang, vllm: --quantization fp8 quantizes a 16-bit checkpoint as it loads; "
                            "Qwen/Qwen3-32B-FP8-Static-PerTensor is already quantized (modelopt FP8)") for n in notes)
    blocks = planner("Qwen/Qwen3-32B-FP8", ("FP8",), "H100")
    assert not any("already quantized" in n for n in blocks.notes_for(blocks.run().best))
    assert planner("Qwen/Qwen3-32B", ("FP8",)).online_over_quantized("FP8") == []


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


def test_compressed_tensors_fp4_groups_of_32_are_mxfp4_and_others_refused() -> None:
    plan = plan_from_checkpoint(_compressed({"num_bits": 4, "type": "float", "group_size": 32}, None))
    assert plan.dense.kernel_dtype == "mxfp4"
    with pytest.raises(InfercastError, match=r"float weights of 4 bits in groups of 64 are not read"):
        plan_from_checkpoint(_compressed({"num_bits": 4, "type": "float", "group_size": 64}, None))


@pytest.mark.parametrize(("config", "message"), [
    (_compressed({"num_bits": 8, "type": "float", "strategy": "block", "block_structure": [128]},
                 {"num_bits": 8, "type": "float"}), r"weights block_structure must be two positive integers, got \[128\]"),
    (_compressed({"num_bits": 8, "type": "float", "strategy": "block", "block_structure": "128x128"},
                 {"num_bits": 8, "type": "float"}), r"block_structure must be two positive integers, got '128x128'"),
    (_compressed({"num_bits": 8, "type": "float"}, {"num_bits": 8, "type": "float", "dynamic": "false"}),
     r"input_activations dynamic must be true or false, got 'false'"),
    (_compressed({"num_bits": 4, "type": "int", "group_size": 128}, None, ignore=["lm_head", 7]),
     r"quantization_config ignore must be a list of module names, got \['lm_head', 7\]"),
    ({"quant_method": "modelopt", "quantization": "FP8"}, r"'quantization'\) must be a mapping with a quant_algo, "
                                                          r"got 'FP8'"),
    ({"quant_method": "modelopt", "quantization": {}}, r"names no quant_algo .* got None"),
    ({"quant_method": "modelopt", "quant_algo": "FP8", "ignore": "lm_head"},
     r"ModelOpt exclude_modules must be a list of module names, got 'lm_head'"),
])
def test_malformed_checkpoint_quantization_is_refused_by_name(config, message) -> None:
    with pytest.raises(InfercastError, match=message):
        plan_from_checkpoint(config)


def test_an_exclusion_of_another_towers_layers_is_not_the_decoders() -> None:
    """A vision encoder's layers (Llama-4's vision_model.model.layers) are not the decoder's."""
    plan = plan_from_checkpoint({"quant_method": "modelopt", "quant_algo": "NVFP4",
                                 "ignore": ["lm_head", "vision_model.model.layers.*"]}, DEEPSEEK, 61)
    assert {plan.attention_input.name, plan.attention_output.name, plan.dense.name,
            plan.routed_experts.name} == {"NVFP4"}


def test_nvfp4_is_refused_where_neither_fp4_cores_nor_marlin_run(tmp_path) -> None:
    model = _model_dir(tmp_path, "nvfp4", DENSE, MODELOPT_NVFP4)
    with pytest.raises(InfercastError, match=r"NVFP4 weights need FP4 tensor cores or Marlin's CUDA kernels, and "
                                             r"MI300X has neither"):
        _sim(model, device="MI300X", engine="vllm")


def test_the_mtp_layer_a_checkpoint_keeps_in_bf16_drafts_in_bf16() -> None:
    """nvidia/DeepSeek-V3.1-NVFP4 leaves model.layers.61 (the MTP layer) out of its quantization,
    and sglang loads that layer unquantized: the draft reads 16-bit experts."""
    def draft(model: str) -> float:
        result = _sim(model, num_devices=8, speculative_algorithm="MTP", speculative_num_steps=1,
                      speculative_eagle_topk=1, speculative_num_draft_tokens=2, accept_length=1.7)
        return result.memory_gib["draft_weights"]

    fp4_weights, fp8_weights = draft("nvidia/DeepSeek-V3.1-NVFP4"), draft("deepseek-ai/DeepSeek-V3")
    # one MoE layer of 256 experts (3 x 7168 x 2048 each) at TP8 and eh_proj (2 x 7168 in, 7168 out,
    # replicated): 2 bytes a weight against FP8's 1; the attention and shared expert add a little
    experts, eh_proj = 256 * 3 * 7168 * 2048 / 8, 2 * 7168 * 7168
    assert fp4_weights - fp8_weights == pytest.approx((experts + eh_proj) / 2**30, rel=0.05)
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


def test_an_unknown_model_error_names_the_shipped_configs_too(monkeypatch) -> None:
    """The checkpoints aiconfigurator-core ships configs for resolve offline, so an unknown
    model's error lists them beside the bundled models; those without an adapter profile do not."""
    import infercast_adapters.config as config

    def no_hub(*args, **kwargs):
        raise OSError("no hub in this test")

    monkeypatch.setattr(config, "load_hub_config", no_hub)
    with pytest.raises(InfercastError) as info:
        _sim("nobody/nothing-here")
    offline = str(info.value).split("Models available offline: ", 1)[1].split(". ", 1)[0].split(", ")
    assert "deepseek-ai/DeepSeek-V3" in offline and "nvidia/DeepSeek-V3.1-NVFP4" in offline
    assert "deepseek-ai/DeepSeek-V3.2" not in offline  # deepseek_v32: no profile
    # a model that resolves never reads the shipped configs' list
    import infercast.builtin_models as builtin

    def unread(*args, **kwargs):
        raise AssertionError("the offline list was read for a model that resolves")

    monkeypatch.setattr(builtin, "aiconfigurator_models", unread)
    assert _sim("meta-llama/Llama-3.1-8B-Instruct").step_latency_ms > 0


def test_plan_leaves_out_a_quantization_the_engine_cannot_serve_and_says_why() -> None:
    from infercast.plan import Planner, PlanRequest

    request = PlanRequest(model="meta-llama/Llama-3.1-70B-Instruct", device="H200", num_devices=(8,), batches=(8,),
                          speculative=(), quantizations=("NVFP4", "FP8"), engine="sglang")
    planner = Planner(request)
    assert planner.quantizations == ("FP8",)
    assert {quant for _, quant, _, _ in planner.grid()} == {"FP8"}
    assert any(n.startswith("--quantization NVFP4 left out: sglang does not serve NVFP4 weights on H200")
               for n in planner.spec_notes)
    with pytest.raises(InfercastError, match=r"sglang does not serve NVFP4 weights on H200"):
        Planner(replace(request, quantizations=("NVFP4",)))


def test_the_other_engines_commands_say_when_that_engine_refuses_the_plan() -> None:
    """vLLM serves FP8 on A100 through Marlin; the plan still prints trtllm-serve's equivalent,
    which TensorRT-LLM refuses there, and a note says so (sglang's, which serves it, gets none)."""
    from infercast.plan import Planner, PlanRequest

    request = PlanRequest(model="meta-llama/Llama-3.1-8B-Instruct", device="A100", num_devices=(1,), batches=(8,),
                          speculative=(), quantizations=("FP8",), engine="vllm")
    planner = Planner(request)
    shown = planner.notes_for(planner.run().best)
    refusals = [n for n in shown if "will not serve this plan" in n]
    assert len(refusals) == 1 and refusals[0].startswith("trtllm: its command will not serve this plan: trtllm does "
                                                         "not serve FP8 weights on A100")
    assert "; use " not in refusals[0]  # the reason only: the remedy is for the plan's own engine's refusal
    assert planner.refusals_by_other_engines(None) == []  # bf16: every engine serves it


@pytest.mark.parametrize("engine", ["sglang", "vllm"])
def test_fp8_on_ampere_runs_weight_only_through_marlin(engine) -> None:
    """A100 has no FP8 tensor cores: vLLM and sglang run FP8 checkpoints through Marlin's FP8
    weight-only kernels, bf16 activations and no quantize kernels, as an 8-bit weight-only GEMM."""
    fp8 = _sim("meta-llama/Llama-3.1-8B-Instruct", device="A100", engine=engine, quantize_linear_action="FP8")
    w8a16 = _sim("meta-llama/Llama-3.1-8B-Instruct", device="A100", engine=engine, quantize_linear_action="W8A16")
    assert fp8.quantization.endswith("FP8 weight-only through Marlin on A100, which has no FP8 tensor cores)")
    assert not any(r.name.startswith("quantize_activation") for r in fp8.ops)
    assert fp8.step_latency_ms == pytest.approx(w8a16.step_latency_ms, rel=0.01)  # scales: per channel in both
    with pytest.raises(InfercastError, match=r"trtllm does not serve FP8 weights on A100, which has no FP8 tensor "
                                             r"cores \(TensorRT-LLM's support matrix"):
        _sim("meta-llama/Llama-3.1-8B-Instruct", device="A100", engine="trtllm", quantize_linear_action="FP8")


def test_a_checkpoint_stating_an_fp8_kv_cache_gets_one_unless_asked_otherwise(tmp_path) -> None:
    """ModelOpt's kv_cache_quant_algo FP8: vLLM, sglang and TensorRT-LLM, their KV cache dtype left
    at auto, store the cache in FP8, half the bytes of a token."""
    from infercast.quant import checkpoint_kv_cache_dtype

    model = _model_dir(tmp_path, "fp8", DENSE, MODELOPT_FP8)
    auto, bf16 = _sim(model), _sim(model, kv_cache_dtype="bf16")
    assert auto.kv_cache_dtype == "float8_e4m3fn" and bf16.kv_cache_dtype == "bfloat16"
    assert auto.memory_gib["kv_cache"] == pytest.approx(bf16.memory_gib["kv_cache"] / 2)
    # a quantization action replaces the checkpoint's, its KV cache too
    assert _sim(model, quantize_linear_action="FP8").kv_cache_dtype == "bfloat16"
    assert checkpoint_kv_cache_dtype({"quant_method": "modelopt", "quant_algo": "NVFP4",  # config.json's form
                                      "kv_cache_scheme": {"num_bits": 8, "type": "float", "dynamic": False}}) == "fp8"
    # vLLM and sglang read a compressed-tensors kv_cache_scheme only when asked for fp8
    assert checkpoint_kv_cache_dtype({"quant_method": "compressed-tensors",
                                      "kv_cache_scheme": {"num_bits": 8, "type": "float", "dynamic": False}}) is None
    assert checkpoint_kv_cache_dtype({"quant_method": "fp8", "weight_block_size": [128, 128]}) is None
    assert _sim(_model_dir(tmp_path, "nvfp4", DENSE, MODELOPT_NVFP4)).kv_cache_dtype == "bfloat16"


# The engines' own KV cache dtype choices, as their sources give them: sglang's --kv-cache-dtype
# (server_args.py, 0.5.6.post2 and 0.5.9), vLLM's CacheDType (vllm/config/cache.py, 0.16.0) and
# TensorRT-LLM's PyTorch backend (_VALID_KV_CACHE_DTYPES, its model loader, 0.21 to 1.x).
SGLANG_KV_CHOICES = {"auto", "fp8_e5m2", "fp8_e4m3", "bf16", "bfloat16", "fp4_e2m1"}
VLLM_KV_CHOICES = {"auto", "bfloat16", "fp8", "fp8_e4m3", "fp8_e5m2", "fp8_inc", "fp8_ds_mla"}
TRTLLM_KV_CHOICES = {"fp8", "nvfp4", "auto"}


def test_launch_commands_pass_an_asked_kv_cache_dtype_and_leave_auto_to_the_engine() -> None:
    """An engine's own auto reads the checkpoint's KV quantization: a bf16 cache asked for a
    checkpoint that states FP8 must be named (sglang: bf16, vLLM: bfloat16), in each engine's
    own words; an E5M2 cache stays E5M2 where the engine has one (vLLM's "fp8" is E4M3)."""
    from infercast.plan import Config, Layout, PlanRequest, sglang_command, trtllm_command, trtllm_options, vllm_command

    config = Config(Layout(8, 8, 1, 1), None, 16, None)
    # (asked, sglang's --kv-cache-dtype, vLLM's, TensorRT-LLM's kv_cache_config.dtype)
    for asked, sglang, vllm, trtllm in (("auto", None, None, None), ("bf16", "bf16", "bfloat16", None),
                                        ("fp8", "fp8_e4m3", "fp8", "fp8"), ("fp8_e4m3", "fp8_e4m3", "fp8_e4m3", "fp8"),
                                        ("fp8_e5m2", "fp8_e5m2", "fp8_e5m2", "fp8")):
        request = PlanRequest(model="nvidia/Llama-3.1-70B-Instruct-FP8", device="H200", kv_cache_dtype=asked)
        for cmd, want, choices in ((sglang_command(request, config, 8, expert_dtype="fp8", cuda_arch=90), sglang,
                                    SGLANG_KV_CHOICES), (vllm_command(request, config), vllm, VLLM_KV_CHOICES)):
            given = cmd[cmd.index("--kv-cache-dtype") + 1] if "--kv-cache-dtype" in cmd else None
            assert given == want and "--dtype" not in cmd
            assert given is None or given in choices
        options = trtllm_options(config, kv_cache_dtype=asked)
        written = options.get("kv_cache_config", {}).get("dtype")
        assert written == trtllm and (written is None or written in TRTLLM_KV_CHOICES)
        assert ("--extra_llm_api_options" in trtllm_command(request, config)) == (trtllm is not None)


def test_launch_notes_say_what_a_kv_cache_flag_cannot() -> None:
    """Through the planner's notes for a configuration: an E5M2 cache on TensorRT-LLM runs as
    E4M3 and moves sglang off FlashAttention 3; a bf16 cache asked of a checkpoint stating FP8
    runs FP8 on TensorRT-LLM, whose dtype takes no bf16; nothing for auto."""
    from infercast.plan import Planner, PlanRequest

    def notes(model: str, asked: str) -> str:
        planner = Planner(PlanRequest(model=model, device="H200", num_devices=(8,), batches=(8,), speculative=(),
                                      kv_cache_dtype=asked))
        return " | ".join(planner.notes_for(planner.run().best))

    e5m2 = notes("meta-llama/Llama-3.1-70B-Instruct", "fp8_e5m2")
    assert "trtllm: no E5M2 KV cache" in e5m2 and "switches to its triton backend" in e5m2
    assert "will store the cache in FP8, where the plan priced bf16" in notes("nvidia/Llama-3.1-70B-Instruct-FP8",
                                                                             "bf16")
    assert "FP8" not in notes("meta-llama/Llama-3.1-70B-Instruct", "bf16")  # a bf16 checkpoint: its auto is bf16
    assert "KV cache" not in notes("nvidia/Llama-3.1-70B-Instruct-FP8", "auto")
    # FlashAttention 3 is sglang's attention on Hopper only: no switch to note on a B200
    planner = Planner(PlanRequest(model="meta-llama/Llama-3.1-70B-Instruct", device="B200", num_devices=(8,),
                                  batches=(8,), speculative=(), kv_cache_dtype="fp8_e5m2"))
    assert not any("triton backend" in n for n in planner.notes_for(planner.run().best))


def test_under_a_quantization_action_the_commands_name_the_priced_bf16_cache() -> None:
    """A quantization action replaces the checkpoint, and the plan prices --kv-cache-dtype auto as
    bf16: the commands point at another checkpoint, which may state an FP8 cache that the engines'
    auto would take, so sglang and vLLM name bf16 and TensorRT-LLM, which cannot, gets a note."""
    from infercast.plan import (Config, Layout, Planner, PlanRequest, launch_notes, sglang_command, trtllm_options,
                                vllm_command)

    request = PlanRequest(model="meta-llama/Llama-3.1-70B-Instruct", device="B200")
    config = Config(Layout(8, 8, 1, 1), "NVFP4", 16, None)
    sglang = sglang_command(request, config, 8, expert_dtype="nvfp4", cuda_arch=100)
    vllm = vllm_command(request, config)
    assert sglang[sglang.index("--kv-cache-dtype") + 1] == "bf16"
    assert vllm[vllm.index("--kv-cache-dtype") + 1] == "bfloat16"
    assert "kv_cache_config" not in trtllm_options(config, kv_cache_dtype="bf16")
    notes = launch_notes(request, config, expert_dtype="nvfp4", cuda_arch=100)
    assert any(n.startswith("trtllm: its kv_cache_config.dtype takes auto, fp8 or nvfp4 only") for n in notes)
    w4a16 = launch_notes(request, Config(Layout(8, 8, 1, 1), "W4A16", 16, None), expert_dtype="w4a16", cuda_arch=100)
    assert not any("kv_cache_config" in n for n in w4a16)  # GPTQ/AWQ checkpoints are not ModelOpt's
    # the checkpoint's own FP8 cache is not what the engines read under an action
    fp8 = Planner(PlanRequest(model="nvidia/Llama-3.1-70B-Instruct-FP8", device="H200", num_devices=(8,), batches=(8,),
                              speculative=()))
    assert fp8.checkpoint_fp8_kv(None) is True and fp8.checkpoint_fp8_kv("FP8") is False


def test_an_fp16_kv_cache_is_launched_as_the_model_dtype() -> None:
    """Neither sglang nor vLLM names an fp16 KV cache (their choices have none), nor does
    TensorRT-LLM's PyTorch backend: under auto the cache takes the model's dtype, so the commands
    run the model in float16 and say why, and say when the checkpoint's FP8 cache wins instead."""
    from infercast.plan import Config, Layout, PlanRequest, kv_cache_notes, sglang_command, trtllm_options, vllm_command

    config = Config(Layout(8, 8, 1, 1), None, 16, None)
    request = PlanRequest(model="meta-llama/Llama-3.1-70B-Instruct", device="H200", kv_cache_dtype="fp16")
    for cmd in (sglang_command(request, config, 8, expert_dtype="bf16", cuda_arch=90), vllm_command(request, config)):
        assert "--kv-cache-dtype" not in cmd and cmd[cmd.index("--dtype") + 1] == "float16"
    assert trtllm_options(config, kv_cache_dtype="fp16") == {"dtype": "float16"}
    plain, stated = kv_cache_notes("fp16"), kv_cache_notes("fp16", checkpoint_fp8=True)
    assert any("no fp16 KV cache dtype" in n for n in plain) and not any("FP8" in n for n in plain)
    assert sum("will store the cache in FP8" in n for n in stated) == 2  # sglang and vLLM; TensorRT-LLM


def test_fp8_weights_off_nvidia_keep_the_bf16_rate_nvfp4_is_refused() -> None:
    """Ascend has no FP8 tensor cores and no Marlin: DeepSeek-V3's FP8 blocks are priced at its
    bf16 rate, as before; NVFP4 has no kernel there at all."""
    result = _sim("deepseek-ai/DeepSeek-V3", device="ATLAS_800_A3_752T_128G_DIE", num_devices=16,
                  num_hidden_layers_override=4)
    assert result.quantization.startswith("FP8_BLOCK (checkpoint fp8 128x128 blocks)")
    with pytest.raises(InfercastError, match=r"NVFP4 weights need FP4 tensor cores or Marlin's CUDA kernels, and "
                                             r"ATLAS_800_A3_752T_128G_DIE has neither; use an NVIDIA device"):
        _sim("deepseek-ai/DeepSeek-V3", device="ATLAS_800_A3_752T_128G_DIE", num_devices=16,
             num_hidden_layers_override=4, quantize_linear_action="NVFP4")
