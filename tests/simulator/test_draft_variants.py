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
