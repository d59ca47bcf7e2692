"""Built-in adapter plugin: profiles of the transformers-native model families.

Registered by :func:`infercast.plugins.get_manager` as an ordinary plugin named
``infercast.builtin_models``, so it can be listed and blocked like any other.
"""

from __future__ import annotations

from typing import Callable

from infercast_adapters import ModelProfile, hookimpl

PLUGIN_NAME = "infercast.builtin_models"

PROFILES = (
    ModelProfile(
        model_type="deepseek_v3",
        decoder_layer_class="DeepseekV3DecoderLayer",
        attention_class="DeepseekV3Attention",
        attention_kind="mla",
        moe_class="DeepseekV3MoE",
        routed_experts_key="n_routed_experts",
        shared_experts_key="n_shared_experts",
        moe_routing_after_dp_split=True,
    ),
    ModelProfile(
        model_type="qwen3_moe",
        decoder_layer_class="Qwen3MoeDecoderLayer",
        attention_class="Qwen3MoeAttention",
        moe_class="Qwen3MoeSparseMoeBlock",
        routed_experts_key="num_experts",
        moe_routing_after_dp_split=True,
    ),
    ModelProfile(
        model_type="mixtral",
        decoder_layer_class="MixtralDecoderLayer",
        attention_class="MixtralAttention",
        moe_class="MixtralSparseMoeBlock",
        routed_experts_key="num_local_experts",
    ),
    ModelProfile(model_type="qwen3", decoder_layer_class="Qwen3DecoderLayer", attention_class="Qwen3Attention"),
    ModelProfile(model_type="llama", decoder_layer_class="LlamaDecoderLayer", attention_class="LlamaAttention"),
)


@hookimpl
def infercast_register_profiles(register: Callable[[ModelProfile], None]) -> None:
    for profile in PROFILES:
        register(profile)
