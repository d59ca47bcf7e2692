"""EAGLE3 draft variants the simulator prices: a draft that reads the target's last hidden
state directly (``use_aux_hidden_state: false``) has no fc to price."""

from __future__ import annotations

import json
from dataclasses import replace

from infercast.simulate import UserInput, simulate

LLAMA = UserInput(model="meta-llama/Llama-3.1-8B-Instruct", device="H100", num_devices=1, context_length=1024,
                  speculative_algorithm="EAGLE3", speculative_draft_model="yuhuili/EAGLE3-LLaMA3.1-Instruct-8B",
                  speculative_num_steps=3, speculative_eagle_topk=1, accept_length=2.5)


def test_a_draft_without_aux_hidden_states_is_priced_without_fc(tmp_path) -> None:
    config = {"model_type": "llama", "architectures": ["LlamaForCausalLMEagle3"], "vocab_size": 128256,
              "hidden_size": 4096, "intermediate_size": 14336, "num_hidden_layers": 1, "num_attention_heads": 32,
              "num_key_value_heads": 8, "head_dim": 128, "max_position_embeddings": 131072, "rope_theta": 500000.0,
              "rms_norm_eps": 1e-5, "draft_vocab_size": 32000, "eagle_config": {"use_aux_hidden_state": False}}
    (tmp_path / "config.json").write_text(json.dumps(config))
    without = simulate(replace(LLAMA, speculative_draft_model=str(tmp_path)))
    with_fc = simulate(LLAMA)
    assert not [op for op in without.ops if op.name.startswith("gemm (draft.fc")]
    assert [op for op in with_fc.ops if op.name.startswith("gemm (draft.fc")]
    assert without.memory_gib["draft_weights"] < with_fc.memory_gib["draft_weights"]


def test_a_quantized_draft_runs_as_the_engine_runs_it_on_the_device(tmp_path) -> None:
    """An EAGLE3 draft checkpoint in FP8 on an A100, which has no FP8 tensor cores: vLLM runs it
    weight-only through Marlin, as it runs an FP8 target there (its GEMMs as 8-bit weight-only ones,
    no activation quantize kernels), and says so; TensorRT-LLM, which runs no FP8 on Ampere, is
    refused. On an H100 the draft keeps its FP8 GEMMs."""
    import pytest
    from infercast_adapters import InfercastError

    config = {"model_type": "llama", "architectures": ["LlamaForCausalLMEagle3"], "vocab_size": 128256,
              "hidden_size": 4096, "intermediate_size": 14336, "num_hidden_layers": 1, "num_attention_heads": 32,
              "num_key_value_heads": 8, "head_dim": 128, "max_position_embeddings": 131072, "rope_theta": 500000.0,
              "rms_norm_eps": 1e-5, "draft_vocab_size": 32000,
              "quantization_config": {"quant_method": "fp8", "activation_scheme": "dynamic"}}
    (tmp_path / "config.json").write_text(json.dumps(config))
    fp8_draft = replace(LLAMA, speculative_draft_model=str(tmp_path), engine="vllm", decode=True)
    a100 = simulate(replace(fp8_draft, device="A100"))
    assert a100.speculative["draft_quantization"].endswith("FP8 weight-only through Marlin on A100, which has no "
                                                           "FP8 tensor cores)")
    draft_gemms = [op for op in a100.ops if op.name.startswith("quant_gemm (draft.")]
    assert draft_gemms and all("w8a16" in op.origin for op in draft_gemms if op.source == "analytic")
    assert not [op for op in a100.ops if op.name.startswith("quantize_activation (draft.")]
    h100 = simulate(replace(fp8_draft, device="H100"))
    assert h100.speculative["draft_quantization"] == "FP8 (checkpoint fp8 per-channel)"
    assert [op for op in h100.ops if op.name.startswith("quant_gemm (draft.")]
    with pytest.raises(InfercastError, match="trtllm does not serve FP8 weights on A100"):
        simulate(replace(fp8_draft, device="A100", engine="trtllm"))
