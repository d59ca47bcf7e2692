from __future__ import annotations

import types

import pytest
import torch
from transformers import AutoConfig

from infercast_adapters import UnsupportedArchitectureError
from infercast_adapters.arch import detect_moe_architecture, experts_are_fused, sliding_window_layers


@pytest.mark.parametrize(
    ("model_type", "family", "experts", "top_k", "shared", "router"),
    [
        ("deepseek_v3", "deepseek", 256, 8, 1, "sigmoid_grouped_topk"),
        ("deepseek_v2", "deepseek", None, None, None, "softmax_grouped_topk"),
        ("qwen2_moe", "qwen2_moe", 60, 4, 1, "softmax_topk"),
        ("qwen3_moe", "qwen3_moe", 128, 8, 0, "softmax_topk"),
        ("qwen3_5_moe", "qwen3_5_moe", 256, 8, 1, "softmax_topk"),
        ("mixtral", "mixtral", 8, 2, 0, "softmax_topk"),
        ("glm4_moe", "glm4_moe", 128, 8, 1, "sigmoid_grouped_topk"),
        ("minimax_m2", "minimax_m2", 256, 8, 0, "sigmoid_topk"),
        ("gpt_oss", "gpt_oss", 128, 4, 0, "softmax_topk"),
    ],
)
def test_detects_each_family(model_type, family, experts, top_k, shared, router) -> None:
    config = AutoConfig.for_model(model_type, **({"num_experts_per_tok": 6} if model_type == "deepseek_v2" else {}))
    arch = detect_moe_architecture(config)
    text = getattr(config, "text_config", config)
    assert arch.family == family and arch.router == router
    if experts is not None:
        assert (arch.num_experts, arch.top_k, arch.num_shared_experts) == (experts, top_k, shared)
    assert arch.expert_intermediate_size == (text.intermediate_size if model_type in ("mixtral", "minimax_m2", "gpt_oss")
                                             else text.moe_intermediate_size)


@pytest.mark.parametrize(("model_type", "values", "expected"), [
    ("mistral", {"num_hidden_layers": 32}, (4096, 32)),  # MistralConfig's default window, every layer
    ("mistral", {"num_hidden_layers": 32, "sliding_window": None}, (0, 0)),
    ("qwen2", {"num_hidden_layers": 4, "sliding_window": 4096}, (0, 0)),  # use_sliding_window defaults to off
    ("qwen2", {"num_hidden_layers": 4, "sliding_window": 4096, "use_sliding_window": True, "max_window_layers": 1},
     (4096, 3)),  # the layers from max_window_layers on
    ("llama", {"num_hidden_layers": 4}, (0, 0)),
    ("gpt_oss", {"num_hidden_layers": 4}, (128, 2)),  # alternating, layer_types from the config class
])
def test_sliding_window_layers_follow_transformers_conventions(model_type, values, expected) -> None:
    config = AutoConfig.for_model(model_type, **values)
    assert sliding_window_layers(config) == expected
    # the same values as a plain config (no layer_types derived): the same answer
    plain = {k: getattr(config, k) for k in ("num_hidden_layers", "sliding_window", "use_sliding_window",
                                             "max_window_layers") if hasattr(config, k)}
    if model_type == "gpt_oss":
        plain["layer_types"] = config.layer_types
    assert sliding_window_layers(types.SimpleNamespace(**plain)) == expected


def test_deepseek_v3_sizes_and_dense_layers() -> None:
    arch = detect_moe_architecture(AutoConfig.for_model("deepseek_v3"))
    assert (arch.expert_intermediate_size, arch.dense_intermediate_size) == (2048, 18432)
    assert arch.shared_expert_intermediate_size == 2048 and arch.first_dense_layers == 3


def test_falls_back_to_text_config() -> None:
    config = AutoConfig.for_model("kimi_k25", text_config={"model_type": "deepseek_v3", "n_routed_experts": 384})
    arch = detect_moe_architecture(config)
    assert arch.num_experts == 384 and arch.family == "deepseek"


def test_missing_top_k_is_named() -> None:
    with pytest.raises(UnsupportedArchitectureError, match="num_experts_per_tok"):
        detect_moe_architecture(AutoConfig.for_model("deepseek_v2"))


def test_unsupported_lists_supported() -> None:
    with pytest.raises(UnsupportedArchitectureError) as info:
        detect_moe_architecture(AutoConfig.for_model("llama"))
    assert "'llama'" in str(info.value) and "mixtral" in str(info.value) and "qwen3_moe" in str(info.value)


def tiny(model_type: str, **extra):
    return AutoConfig.for_model(model_type, hidden_size=32, intermediate_size=64, moe_intermediate_size=16,
                                num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                                vocab_size=100, **extra)


def test_fused_expert_tensors_versus_module_list() -> None:
    from transformers import Qwen3MoeForCausalLM

    with torch.device("meta"):
        model = Qwen3MoeForCausalLM(tiny("qwen3_moe", num_experts=4, num_experts_per_tok=2))
    assert experts_are_fused(model.model.layers[0].mlp.experts)
    listed = torch.nn.ModuleList([torch.nn.Linear(4, 4) for _ in range(3)])
    assert not experts_are_fused(listed)
    with pytest.raises(UnsupportedArchitectureError):
        experts_are_fused(torch.nn.Identity())
