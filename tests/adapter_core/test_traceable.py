"""The export-friendly replacements compute what the transformers code they replace computes."""

from __future__ import annotations

import pytest
import torch
from infercast_adapters import patched
from infercast_adapters.traceable import (
    HOST_INV_FREQ,
    gathered_experts_forward,
    rope_from_position_ids,
    traceable_patches,
)
from transformers import AutoConfig
from transformers.models.deepseek_v3 import modeling_deepseek_v3 as ds
from transformers.models.llama import modeling_llama as llama
from transformers.models.qwen3_moe import modeling_qwen3_moe as qm


def _qwen3_moe_config():
    config = AutoConfig.for_model("qwen3_moe", hidden_size=32, moe_intermediate_size=24, num_experts=6,
                                  num_experts_per_tok=3, num_attention_heads=4, num_key_value_heads=2, head_dim=8)
    config._experts_implementation = "eager"  # transformers' loop over the experts a batch hits
    return config


def test_gathered_experts_equal_the_eager_experts_loop() -> None:
    torch.manual_seed(0)
    experts = qm.Qwen3MoeExperts(_qwen3_moe_config())
    for p in experts.parameters():
        torch.nn.init.normal_(p, std=0.3)
    x = torch.randn(7, 32)
    index = torch.stack([torch.randperm(6)[:3] for _ in range(7)])  # distinct experts per token
    weights = torch.rand(7, 3)
    with torch.no_grad():
        expected = experts(x, index, weights)
        got = gathered_experts_forward(experts, x, index, weights)
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-6)
    assert not torch.allclose(got, gathered_experts_forward(experts, x, index.roll(1, dims=1), weights))


def test_gathered_experts_refuse_a_layout_they_do_not_implement() -> None:
    experts = qm.Qwen3MoeExperts(_qwen3_moe_config())
    experts.is_transposed = True
    with pytest.raises(NotImplementedError, match="is_transposed"):
        gathered_experts_forward(experts, torch.randn(2, 32), torch.zeros(2, 3, dtype=torch.long), torch.ones(2, 3))


@pytest.mark.parametrize(("rotary", "config"), [
    (llama.LlamaRotaryEmbedding, dict(model_type="llama", hidden_size=64, num_attention_heads=4, rope_scaling={
        "rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
        "original_max_position_embeddings": 32})),
    (ds.DeepseekV3RotaryEmbedding, dict(model_type="deepseek_v3", qk_rope_head_dim=8, rope_scaling={
        "type": "yarn", "factor": 40.0, "original_max_position_embeddings": 64, "beta_fast": 32, "beta_slow": 1,
        "mscale": 1.0, "mscale_all_dim": 0.7})),
])
def test_rope_from_position_ids_equals_the_rotary_forward(rotary, config) -> None:
    values = dict(config)
    config = AutoConfig.for_model(values.pop("model_type"), **values)
    module = rotary(config)
    x = torch.randn(2, 5, 8, dtype=torch.bfloat16)
    positions = torch.tensor([[0, 1, 2, 3, 4], [7, 100, 1000, 3, 0]])
    expected = module(x, positions)
    got = rope_from_position_ids(module, x, positions)
    for g, e in zip(got, expected):
        assert g.dtype == torch.bfloat16
        torch.testing.assert_close(g, e)


def test_a_rotary_built_on_meta_keeps_host_frequencies_outside_its_buffers() -> None:
    config = AutoConfig.for_model("llama", hidden_size=64, num_attention_heads=4)
    reference = llama.LlamaRotaryEmbedding(config)
    with patched(traceable_patches("llama", rotary=llama.LlamaRotaryEmbedding), "llama"):
        with torch.device("meta"):
            module = llama.LlamaRotaryEmbedding(config)
        cos, sin = module(torch.empty(1, 3, 16, device="meta"), torch.arange(3, device="meta").unsqueeze(0))
    host = module.__dict__[HOST_INV_FREQ]
    assert module.inv_freq.device.type == "meta" and host.device.type == "cpu"
    torch.testing.assert_close(host, reference.inv_freq)
    assert HOST_INV_FREQ not in dict(module.named_buffers()) and HOST_INV_FREQ not in module.state_dict()
    assert cos.shape == (1, 3, 16) and cos.device.type == "meta"
    assert not hasattr(llama.LlamaRotaryEmbedding.__init__, "__infercast_wraps__")  # restored


def test_rope_types_that_change_with_the_length_are_refused() -> None:
    config = AutoConfig.for_model("llama", hidden_size=64, num_attention_heads=4,
                                  rope_scaling={"rope_type": "dynamic", "factor": 2.0})
    module = llama.LlamaRotaryEmbedding(config)
    with pytest.raises(NotImplementedError, match="dynamic"):
        rope_from_position_ids(module, torch.randn(1, 2, 16), torch.arange(2).unsqueeze(0))


def test_traceable_patches_are_gated_and_name_their_reasons() -> None:
    patches = traceable_patches("qwen3_moe", experts=qm.Qwen3MoeExperts, rotary=qm.Qwen3MoeRotaryEmbedding)
    assert [(p.owner.__name__, p.attribute) for p in patches] == [
        ("Qwen3MoeExperts", "forward"), ("Qwen3MoeRotaryEmbedding", "__init__"), ("Qwen3MoeRotaryEmbedding", "forward")]
    assert all(p.model_type == "qwen3_moe" and p.reason for p in patches)
    with patched(patches, "qwen3") as applied:
        assert applied == []
