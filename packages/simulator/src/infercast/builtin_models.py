"""Built-in adapter plugin: profiles, bundled configs and export patches of the
transformers-native model families.

Registered by :func:`infercast.plugins.get_manager` as an ordinary plugin named
``infercast.builtin_models``, so it can be listed and blocked like any other.
"""

from __future__ import annotations

from typing import Callable

from infercast_adapters import ModelProfile, ModelRef, SpecOption, hookimpl

PLUGIN_NAME = "infercast.builtin_models"

PROFILES = (
    ModelProfile(
        model_type="deepseek_v3",
        decoder_layer_class="DeepseekV3DecoderLayer",
        attention_class="DeepseekV3Attention",
        attention_kind="mla",
        moe_class="DeepseekV3MoE",
        routed_experts_key="n_routed_experts",
    ),
    ModelProfile(  # DeepSeek-V2, V2-Lite (no query LoRA), V2.5 and Coder-V2: V3's layers, softmax routing
        model_type="deepseek_v2",
        decoder_layer_class="DeepseekV2DecoderLayer",
        attention_class="DeepseekV2Attention",
        attention_kind="mla",
        moe_class="DeepseekV2Moe",
        routed_experts_key="n_routed_experts",
    ),
    ModelProfile(
        model_type="qwen3_moe",
        decoder_layer_class="Qwen3MoeDecoderLayer",
        attention_class="Qwen3MoeAttention",
        moe_class="Qwen3MoeSparseMoeBlock",
        routed_experts_key="num_experts",
        attention_qk_norm=True,
    ),
    # Qwen1.5-MoE and Qwen2-57B-A14B: Qwen2's attention (QKV bias, its cost not priced), softmax top-k
    # over the routed experts and one shared expert, which a sigmoid gate scales (one row, not priced)
    ModelProfile(
        model_type="qwen2_moe",
        decoder_layer_class="Qwen2MoeDecoderLayer",
        attention_class="Qwen2MoeAttention",
        moe_class="Qwen2MoeSparseMoeBlock",
        routed_experts_key="num_experts",
    ),
    ModelProfile(
        model_type="mixtral",
        decoder_layer_class="MixtralDecoderLayer",
        attention_class="MixtralAttention",
        moe_class="MixtralSparseMoeBlock",
        routed_experts_key="num_local_experts",
    ),
    ModelProfile(model_type="qwen3", decoder_layer_class="Qwen3DecoderLayer", attention_class="Qwen3Attention",
                 attention_qk_norm=True),
    ModelProfile(model_type="llama", decoder_layer_class="LlamaDecoderLayer", attention_class="LlamaAttention"),
    ModelProfile(
        model_type="minimax_m2",
        decoder_layer_class="MiniMaxM2DecoderLayer",
        attention_class="MiniMaxM2Attention",
        moe_class="MiniMaxM2SparseMoeBlock",
        routed_experts_key="num_local_experts",
        attention_qk_norm=True,
        attention_qk_norm_across_heads=True,
    ),
    # GLM-4.5 to 4.7: query-key norms only where the config sets use_qk_norm (the gqa builder reads it)
    ModelProfile(
        model_type="glm4_moe",
        decoder_layer_class="Glm4MoeDecoderLayer",
        attention_class="Glm4MoeAttention",
        moe_class="Glm4MoeMoE",
        routed_experts_key="n_routed_experts",
    ),
    # gpt-oss: every other layer attends within 128 tokens (layer_types), each head with a learned
    # sink logit (a value per head, not priced); 4 of the routed experts a token
    ModelProfile(
        model_type="gpt_oss",
        decoder_layer_class="GptOssDecoderLayer",
        attention_class="GptOssAttention",
        moe_class="GptOssMLP",
        routed_experts_key="num_local_experts",
    ),
    ModelProfile(model_type="qwen2", decoder_layer_class="Qwen2DecoderLayer", attention_class="Qwen2Attention"),
    ModelProfile(model_type="mistral", decoder_layer_class="MistralDecoderLayer", attention_class="MistralAttention"),
)


@hookimpl
def infercast_register_profiles(register: Callable[[ModelProfile], None]) -> None:
    for profile in PROFILES:
        register(profile)


@hookimpl
def infercast_register_sim_layers(register) -> None:
    from infercast.builders import BUILTIN

    for role, key, builder in BUILTIN:
        register(role, key, builder)


# -------------------------------------------------------------------------------------------
# Class patches: what makes each family's forward one static graph (``infercast export``).
# model_type -> (modeling module, stacked-experts class or None, rotary embedding class). Names
# only: a family's modeling code is imported when a model of that family is built.

TRACEABLE_CLASSES: dict[str, tuple[str, str | None, str]] = {
    "llama": ("transformers.models.llama.modeling_llama", None, "LlamaRotaryEmbedding"),
    "qwen3": ("transformers.models.qwen3.modeling_qwen3", None, "Qwen3RotaryEmbedding"),
    "qwen3_moe": ("transformers.models.qwen3_moe.modeling_qwen3_moe", "Qwen3MoeExperts", "Qwen3MoeRotaryEmbedding"),
    "deepseek_v3": ("transformers.models.deepseek_v3.modeling_deepseek_v3", "DeepseekV3Experts",
                    "DeepseekV3RotaryEmbedding"),
    "mixtral": ("transformers.models.mixtral.modeling_mixtral", "MixtralExperts", "MixtralRotaryEmbedding"),
    "qwen2": ("transformers.models.qwen2.modeling_qwen2", None, "Qwen2RotaryEmbedding"),
    "mistral": ("transformers.models.mistral.modeling_mistral", None, "MistralRotaryEmbedding"),
    "minimax_m2": ("transformers.models.minimax_m2.modeling_minimax_m2", "MiniMaxM2Experts",
                   "MiniMaxM2RotaryEmbedding"),
    "glm4_moe": ("transformers.models.glm4_moe.modeling_glm4_moe", "Glm4MoeExperts", "Glm4MoeRotaryEmbedding"),
}


@hookimpl
def infercast_class_patches(config):
    import importlib

    from infercast_adapters.traceable import traceable_patches

    model_type = getattr(config, "model_type", None)
    entry = TRACEABLE_CLASSES.get(model_type)
    if entry is None:
        return None
    module_name, experts, rotary = entry
    module = importlib.import_module(module_name)
    return traceable_patches(model_type, experts=getattr(module, experts) if experts else None,
                             rotary=getattr(module, rotary))


# -------------------------------------------------------------------------------------------
# Bundled architectures, written from the published config.json values of each model, so
# that these references resolve with no hub.

_DEEPSEEK_V3 = {
    "model_type": "deepseek_v3", "architectures": ["DeepseekV3ForCausalLM"],
    "vocab_size": 129280, "hidden_size": 7168, "intermediate_size": 18432, "moe_intermediate_size": 2048,
    "num_hidden_layers": 61, "num_attention_heads": 128, "num_key_value_heads": 128,
    "n_shared_experts": 1, "n_routed_experts": 256, "num_experts_per_tok": 8, "routed_scaling_factor": 2.5,
    "kv_lora_rank": 512, "q_lora_rank": 1536, "qk_rope_head_dim": 64, "v_head_dim": 128, "qk_nope_head_dim": 128,
    "n_group": 8, "topk_group": 4, "topk_method": "noaux_tc", "scoring_func": "sigmoid", "norm_topk_prob": True,
    "first_k_dense_replace": 3, "moe_layer_freq": 1, "num_nextn_predict_layers": 1,
    "max_position_embeddings": 163840, "rms_norm_eps": 1e-6, "hidden_act": "silu", "tie_word_embeddings": False,
    "rope_theta": 10000.0,
    "rope_scaling": {"type": "yarn", "factor": 40, "original_max_position_embeddings": 4096, "beta_fast": 32,
                     "beta_slow": 1, "mscale": 1.0, "mscale_all_dim": 1.0},
    "quantization_config": {"quant_method": "fp8", "fmt": "e4m3", "activation_scheme": "dynamic",
                            "weight_block_size": [128, 128]},
}

_QWEN3_235B = {
    "model_type": "qwen3_moe", "architectures": ["Qwen3MoeForCausalLM"],
    "vocab_size": 151936, "hidden_size": 4096, "intermediate_size": 12288, "moe_intermediate_size": 1536,
    "num_hidden_layers": 94, "num_attention_heads": 64, "num_key_value_heads": 4, "head_dim": 128,
    "num_experts": 128, "num_experts_per_tok": 8, "norm_topk_prob": True, "decoder_sparse_step": 1,
    "mlp_only_layers": [], "max_position_embeddings": 40960, "rope_theta": 1000000.0, "rms_norm_eps": 1e-6,
    "tie_word_embeddings": False,
}

_QWEN3_32B = {
    "model_type": "qwen3", "architectures": ["Qwen3ForCausalLM"],
    "vocab_size": 151936, "hidden_size": 5120, "intermediate_size": 25600, "num_hidden_layers": 64,
    "num_attention_heads": 64, "num_key_value_heads": 8, "head_dim": 128, "max_position_embeddings": 40960,
    "rope_theta": 1000000.0, "rms_norm_eps": 1e-6, "tie_word_embeddings": False,
}

_LLAMA_31_ROPE = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                  "original_max_position_embeddings": 8192}

_LLAMA_31_8B = {
    "model_type": "llama", "architectures": ["LlamaForCausalLM"],
    "vocab_size": 128256, "hidden_size": 4096, "intermediate_size": 14336, "num_hidden_layers": 32,
    "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 128, "max_position_embeddings": 131072,
    "rope_theta": 500000.0, "rope_scaling": _LLAMA_31_ROPE, "rms_norm_eps": 1e-5, "tie_word_embeddings": False,
}

_LLAMA_31_70B = dict(_LLAMA_31_8B, hidden_size=8192, intermediate_size=28672, num_hidden_layers=80,
                     num_attention_heads=64)

_MIXTRAL_8X7B = {
    "model_type": "mixtral", "architectures": ["MixtralForCausalLM"],
    "vocab_size": 32000, "hidden_size": 4096, "intermediate_size": 14336, "num_hidden_layers": 32,
    "num_attention_heads": 32, "num_key_value_heads": 8, "num_local_experts": 8, "num_experts_per_tok": 2,
    "max_position_embeddings": 32768, "rope_theta": 1000000.0, "rms_norm_eps": 1e-5, "tie_word_embeddings": False,
    "sliding_window": None,
}

_QWEN25_7B = {
    "model_type": "qwen2", "architectures": ["Qwen2ForCausalLM"],
    "vocab_size": 152064, "hidden_size": 3584, "intermediate_size": 18944, "num_hidden_layers": 28,
    "num_attention_heads": 28, "num_key_value_heads": 4, "max_position_embeddings": 32768, "rope_theta": 1000000.0,
    "rms_norm_eps": 1e-6, "tie_word_embeddings": False, "use_sliding_window": False, "sliding_window": 131072,
    "max_window_layers": 28,
}

_QWEN25_72B = dict(_QWEN25_7B, hidden_size=8192, intermediate_size=29568, num_hidden_layers=80,
                   num_attention_heads=64, num_key_value_heads=8, max_window_layers=80)

_MISTRAL_7B_V03 = {
    "model_type": "mistral", "architectures": ["MistralForCausalLM"],
    "vocab_size": 32768, "hidden_size": 4096, "intermediate_size": 14336, "num_hidden_layers": 32,
    "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 128, "max_position_embeddings": 32768,
    "rope_theta": 1000000.0, "rms_norm_eps": 1e-5, "tie_word_embeddings": False, "sliding_window": None,
}

# MiniMax-M2.5 (MiniMax-M2's architecture): 62 layers of GQA, whose query and key norms span all
# heads, with RoPE on 64 of each head's 128 dimensions, and 256 routed experts (top-8, sigmoid
# scores with a selection bias), every weight but the router's FP8 in 128 x 128 blocks.
_MINIMAX_M25 = {
    "model_type": "minimax_m2", "architectures": ["MiniMaxM2ForCausalLM"],
    "vocab_size": 200064, "hidden_size": 3072, "intermediate_size": 1536, "num_hidden_layers": 62,
    "num_attention_heads": 48, "num_key_value_heads": 8, "head_dim": 128, "rotary_dim": 64,
    "num_local_experts": 256, "num_experts_per_tok": 8, "scoring_func": "sigmoid", "use_routing_bias": True,
    "use_qk_norm": True, "qk_norm_type": "per_layer", "max_position_embeddings": 196608, "rope_theta": 5000000.0,
    "rms_norm_eps": 1e-6, "tie_word_embeddings": False,
    "quantization_config": {"quant_method": "fp8", "fmt": "float8_e4m3fn", "activation_scheme": "dynamic",
                            "weight_block_size": [128, 128],
                            "modules_to_not_convert": ["gate", "e_score_correction_bias", "lm_head"]},
}

# gpt-oss-120b: 36 layers alternating a 128-token sliding window and full attention (64 query
# heads of 64, 8 KV heads), 128 routed experts 2,880 wide (top-4) stored in MXFP4.
_GPT_OSS_120B = {
    "model_type": "gpt_oss", "architectures": ["GptOssForCausalLM"],
    "vocab_size": 201088, "hidden_size": 2880, "intermediate_size": 2880, "num_hidden_layers": 36,
    "num_attention_heads": 64, "num_key_value_heads": 8, "head_dim": 64, "num_local_experts": 128,
    "num_experts_per_tok": 4, "sliding_window": 128,
    "layer_types": ["sliding_attention", "full_attention"] * 18, "attention_bias": True,
    "max_position_embeddings": 131072, "rms_norm_eps": 1e-5, "tie_word_embeddings": False,
    "rope_scaling": {"rope_type": "yarn", "factor": 32.0, "beta_fast": 32.0, "beta_slow": 1.0, "truncate": False,
                     "original_max_position_embeddings": 4096},
    "rope_theta": 150000.0, "swiglu_limit": 7.0,
    "quantization_config": {"quant_method": "mxfp4", "modules_to_not_convert": [
        "model.layers.*.self_attn", "model.layers.*.mlp.router", "model.embed_tokens", "lm_head"]},
}

# gpt-oss-20b: the same layers, 24 of them, 32 experts.
_GPT_OSS_20B = dict(_GPT_OSS_120B, num_hidden_layers=24, num_local_experts=32,
                    layer_types=["sliding_attention", "full_attention"] * 12)

# The EAGLE-3 authors' draft for Llama-3.1-8B-Instruct (its published config.json): one
# Llama-style layer at the target's width reading 3 aux layers, a 32,000-token draft vocabulary.
_LLAMA_31_8B_EAGLE3 = dict(_LLAMA_31_8B, architectures=["LlamaForCausalLMEagle3"], num_hidden_layers=1,
                           draft_vocab_size=32000, target_hidden_size=4096)

BUNDLED: dict[str, dict] = {
    "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B": _LLAMA_31_8B_EAGLE3,
    "deepseek-ai/DeepSeek-V3": _DEEPSEEK_V3,
    "deepseek-ai/DeepSeek-R1": _DEEPSEEK_V3,  # same architecture and quantization
    "Qwen/Qwen3-235B-A22B": _QWEN3_235B,
    "Qwen/Qwen3-32B": _QWEN3_32B,
    "meta-llama/Llama-3.1-8B-Instruct": _LLAMA_31_8B,
    "meta-llama/Llama-3.1-70B-Instruct": _LLAMA_31_70B,
    "mistralai/Mixtral-8x7B-Instruct-v0.1": _MIXTRAL_8X7B,
    "Qwen/Qwen2.5-7B-Instruct": _QWEN25_7B,
    "Qwen/Qwen2.5-72B-Instruct": _QWEN25_72B,
    "mistralai/Mistral-7B-Instruct-v0.3": _MISTRAL_7B_V03,
    "MiniMaxAI/MiniMax-M2.5": _MINIMAX_M25,
    "openai/gpt-oss-120b": _GPT_OSS_120B,
    "openai/gpt-oss-20b": _GPT_OSS_20B,
}

ALIASES: dict[str, str] = {
    "deepseek-v3": "deepseek-ai/DeepSeek-V3",
    "deepseek-r1": "deepseek-ai/DeepSeek-R1",
    "qwen3-235b-a22b": "Qwen/Qwen3-235B-A22B",
    "qwen3-32b": "Qwen/Qwen3-32B",
    "llama-3.1-8b": "meta-llama/Llama-3.1-8B-Instruct",
    "meta-llama/Llama-3.1-8B": "meta-llama/Llama-3.1-8B-Instruct",
    "llama-3.1-70b": "meta-llama/Llama-3.1-70B-Instruct",
    "meta-llama/Llama-3.1-70B": "meta-llama/Llama-3.1-70B-Instruct",
    "mixtral-8x7b": "mistralai/Mixtral-8x7B-Instruct-v0.1",
    "mistralai/Mixtral-8x7B-v0.1": "mistralai/Mixtral-8x7B-Instruct-v0.1",
    "qwen2.5-7b": "Qwen/Qwen2.5-7B-Instruct",
    "qwen2.5-72b": "Qwen/Qwen2.5-72B-Instruct",
    "mistral-7b": "mistralai/Mistral-7B-Instruct-v0.3",
    "mistralai/Mistral-7B-v0.3": "mistralai/Mistral-7B-Instruct-v0.3",
    "minimax-m2.5": "MiniMaxAI/MiniMax-M2.5",
    "gpt-oss-120b": "openai/gpt-oss-120b",
    "gpt-oss-20b": "openai/gpt-oss-20b",
    # later checkpoints of the same architectures
    "deepseek-ai/DeepSeek-R1-0528": "deepseek-ai/DeepSeek-R1",
    "deepseek-ai/DeepSeek-V3-0324": "deepseek-ai/DeepSeek-V3",
    "deepseek-ai/DeepSeek-V3.1": "deepseek-ai/DeepSeek-V3",
    "meta-llama/Llama-3.3-70B-Instruct": "meta-llama/Llama-3.1-70B-Instruct",
    # configs aiconfigurator-core ships (kernels.aiconfigurator.model_configs), by their current hub names
    "meta-llama/Llama-3.1-405B": "meta-llama/Meta-Llama-3.1-405B",
    "meta-llama/Llama-3.1-405B-Instruct": "meta-llama/Meta-Llama-3.1-405B",
    "meta-llama/Meta-Llama-3.1-405B-Instruct": "meta-llama/Meta-Llama-3.1-405B",
}


DEFAULT_MODEL = "deepseek-ai/DeepSeek-V3"
"""The built-in default model, when no installed adapter offers one of higher priority."""

MTP_DEPTHS = (0.92, 0.66, 0.24, 0.17, 0.02)
"""DeepSeek-R1's MTP on 8 x B200 in TensorRT-LLM: accept length 1.92, 2.58, 2.82, 2.99, 3.01 with
1..5 MTP steps (TensorRT-LLM tech blog 1, 'Pushing latency boundaries ... on B200 GPUs'); their
differences are the probabilities that the first j drafts are all accepted."""


def _conditional(prefix: tuple[float, ...]) -> tuple[float, ...]:
    """Conditional per-depth rates from P(first j drafts accepted), j = 1, 2, ..."""
    return tuple(p / q for p, q in zip(prefix, (1.0, *prefix)))


@hookimpl
def infercast_register_models(register) -> None:
    aliases: dict[str, list[str]] = {}
    for alias, ref in ALIASES.items():
        aliases.setdefault(ref, []).append(alias)
    for ref, values in BUNDLED.items():
        draft = values.get("architectures", [""])[0].endswith("Eagle3")
        note = "EAGLE3 draft" if draft else ("the built-in default; installed adapters may offer another "
                                             "(pip install infercast-kimi-k25 for Kimi-K2.5)" if ref == DEFAULT_MODEL else "")
        register(ModelRef(ref, values["model_type"], tuple(aliases.get(ref, ())), default=int(ref == DEFAULT_MODEL),
                          description=note))


@hookimpl
def infercast_register_speculative(register) -> None:
    register(SpecOption(
        "deepseek_v3", "MTP", "deepseek-v3-mtp",
        "DeepSeek-V3 technical report: 85-90% second-token acceptance, midpoint, 1 MTP step",
        steps=3, topk=1, draft_tokens=4, accept_length=1.875, measured_steps=1,
        depth_shape=_conditional(MTP_DEPTHS), depth_source="DeepSeek-R1 MTP 1..5 steps in TensorRT-LLM (tech blog 1)"))
    register(SpecOption(
        "llama", "EAGLE3", "llama-3.1-8b-eagle3", "the EAGLE-3 authors' draft for Llama-3.1-8B-Instruct; no accept "
        "length is published at an engine setting: give --accept-length", draft="yuhuili/EAGLE3-LLaMA3.1-Instruct-8B",
        steps=5, topk=4, draft_tokens=8, default=False))


@hookimpl
def infercast_resolve_config(model_ref: str):
    """A bundled architecture as plain values: pricing it never imports transformers (each
    dictionary holds every field the simulator reads, with transformers' values; the tests
    compare both readings)."""
    from infercast_adapters.config import PlainConfig

    ref = ALIASES.get(model_ref, ALIASES.get(model_ref.lower(), model_ref))
    values = BUNDLED.get(ref)
    if values is None:
        return _aiconfigurator_config(ref)
    return PlainConfig(values)


def aiconfigurator_models(served: Callable[[str], bool]) -> list[dict[str, str]]:
    """The configs aiconfigurator-core ships whose model_type ``served`` accepts: hub id,
    model_type and the checkpoint's quantization as its config states it."""
    from infercast.kernels.aiconfigurator import model_configs
    from infercast.quant import checkpoint_quantization
    from infercast_adapters.config import _read_json, with_modelopt_quantization

    rows = []
    for ref, config, quant in model_configs().values():
        values = _read_json(config)
        model_type = values.get("model_type")
        if not isinstance(model_type, str) or not served(model_type):
            continue
        if quant is not None:
            values = with_modelopt_quantization(values, quant)
        q = values.get("quantization_config") or (values.get("text_config") or {}).get("quantization_config")
        rows.append({"ref": ref, "model_type": model_type, "quantization": checkpoint_quantization(q)})
    return rows


def _aiconfigurator_config(model_ref: str):
    """The config aiconfigurator-core ships for ``model_ref`` (a hub id, any case), read as a
    local checkpoint directory would be, its ``hf_quant_config.json`` included; None where it
    ships none."""
    from infercast.kernels.aiconfigurator import model_configs

    found = model_configs().get(model_ref.lower())
    if found is None:
        return None
    from infercast.plugins import get_manager
    from infercast_adapters.config import _read_json, config_from_dict, with_modelopt_quantization

    ref, config, quant = found
    values = _read_json(config)
    if quant is not None:
        values = with_modelopt_quantization(values, quant)
    return config_from_dict(values, source=f"{ref} ({config})", aliases=get_manager().config_aliases())


@hookimpl
def infercast_register_devices(register) -> None:
    from infercast.devices import BUILTIN_DEVICES

    for device in BUILTIN_DEVICES:
        register(device)
