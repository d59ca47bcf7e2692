"""Kimi-K2.5's architecture, written from its published config.json (no hub needed).

Values: shared/reference/kimi-k25.md (the model's config.json and model card). The text model
is DeepSeek-V3's architecture with 384 routed experts, 64 heads, one dense layer and a
163,840-token vocabulary; routed experts of layers 1-60 ship as INT4 (group 32).
"""

from __future__ import annotations

from typing import Any

MODEL_ID = "moonshotai/Kimi-K2.5"
DRAFT_MODEL_ID = "lightseekorg/kimi-k2.5-eagle3-mla"
"""The published EAGLE3 MLA draft (config in :func:`infercast_kimi_k25.eagle3.eagle3_mla_config`)."""
ALIASES = ("kimi-k2.5", "kimi-k25", "Kimi-K2.5")

TEXT_CONFIG: dict[str, Any] = {
    "model_type": "kimi_k2",
    "architectures": ["DeepseekV3ForCausalLM"],
    "hidden_size": 7168,
    "num_hidden_layers": 61,
    "num_attention_heads": 64,
    "num_key_value_heads": 64,
    "q_lora_rank": 1536,
    "kv_lora_rank": 512,
    "qk_nope_head_dim": 128,
    "qk_rope_head_dim": 64,
    "v_head_dim": 128,
    "n_routed_experts": 384,
    "n_shared_experts": 1,
    "num_experts_per_tok": 8,
    "moe_intermediate_size": 2048,
    "intermediate_size": 18432,
    "first_k_dense_replace": 1,
    "moe_layer_freq": 1,
    "n_group": 1,
    "topk_group": 1,
    "topk_method": "noaux_tc",
    "scoring_func": "sigmoid",
    "routed_scaling_factor": 2.827,
    "norm_topk_prob": True,
    "vocab_size": 163840,
    "max_position_embeddings": 262144,
    "rope_theta": 50000.0,
    "rope_scaling": {"type": "yarn", "factor": 64.0, "original_max_position_embeddings": 4096,
                     "beta_fast": 32.0, "beta_slow": 1.0, "mscale": 1.0, "mscale_all_dim": 1.0},
    "rms_norm_eps": 1e-5,
    "hidden_act": "silu",
    "num_nextn_predict_layers": 0,
    "tie_word_embeddings": False,
    "bos_token_id": 163584,
    "eos_token_id": 163585,
    "pad_token_id": 163839,
    "quantization_config": {
        "quant_method": "compressed-tensors",
        "format": "pack-quantized",
        "config_groups": {
            "group_0": {
                "targets": ["Linear"],
                "weights": {"num_bits": 4, "type": "int", "symmetric": True, "group_size": 32, "strategy": "group"},
                "input_activations": None,
            }
        },
        "ignore": ["lm_head", "re:.*self_attn.*", "re:.*shared_experts.*", "re:.*mlp\\.(gate|up|gate_up|down)_proj.*"],
    },
}

VISION_CONFIG: dict[str, Any] = {
    "patch_size": 14,
    "merge_kernel_size": [2, 2],
    "hidden_size": 1152,
    "num_hidden_layers": 27,
    "num_attention_heads": 16,
    "intermediate_size": 4304,
    "pos_emb_height": 64,
    "pos_emb_width": 64,
    "pos_emb_time": 4,
    "hidden_act": "gelu_pytorch_tanh",
    # The image processor's limits (transformers' Kimi_K25ImageProcessor defaults): larger images
    # are scaled down to at most 16,384 patches and 512 patches per side before padding.
    "max_patches": 16384,
    "max_patches_per_side": 512,
}


CONFIG: dict[str, Any] = {
    "model_type": "kimi_k25",
    "architectures": ["KimiK25ForConditionalGeneration"],
    # transformers' Kimi_K25Config reads the published text model_type kimi_k2 as deepseek_v3
    "text_config": dict(TEXT_CONFIG, model_type="deepseek_v3"),
    "vision_config": dict(VISION_CONFIG, model_type="kimi_k25_vision"),
    "projection_hidden_size": 1152,
    "projection_layer_norm_eps": 1e-5,
    "image_token_id": 163605,
    "bos_token_id": 163584,
    "eos_token_id": 163585,
    "pad_token_id": 163839,
    "tie_word_embeddings": False,
}
"""The whole config, as transformers' ``Kimi_K25Config`` holds it."""


def kimi_k25_config():
    """A fresh Kimi-K2.5 config as plain values (no transformers import: the engine view reads
    numbers only); ``infercast_adapters.config.to_transformers`` gives the native
    ``Kimi_K25Config`` where a transformers model is built."""
    from infercast_adapters.config import PlainConfig

    return PlainConfig(CONFIG)
