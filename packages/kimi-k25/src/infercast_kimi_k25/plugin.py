"""Entry point of the Kimi-K2.5 adapter: profile, offline resolution, config and class patches.

Everything here is gated on model_type ``kimi_k25``; other models are never touched.
"""

from __future__ import annotations

from typing import Callable

from infercast_adapters import ModelProfile, ModelRef, SpecOption, hookimpl
from infercast_eagle3.config import ADD_ONE_IF_FIRST_IS_ONE

from infercast_kimi_k25 import config_patches as _config_patches
from infercast_kimi_k25.architecture import (
    ALIASES,
    DRAFT_MODEL_ID,
    MODEL_ID,
    kimi_k25_config,
)

MODEL_TYPE = "kimi_k25"
EAGLE3_CAPTURE_RULES = {MODEL_TYPE: ADD_ONE_IF_FIRST_IS_ONE, "kimi_k2": ADD_ONE_IF_FIRST_IS_ONE}
"""How Kimi targets read a draft's aux layer ids: as sglang's DeepSeek-V2/V3 model (which
serves Kimi-K2.5's text model) reads them since sglang 0.5.13 (``deepseek_v2.py``,
``set_eagle3_layers_to_capture``): one added to each id only when the first id is 1."""

PROFILE = ModelProfile(
    model_type=MODEL_TYPE,
    decoder_layer_class="DeepseekV3DecoderLayer",
    attention_class="DeepseekV3Attention",
    attention_kind="mla",
    moe_class="DeepseekV3MoE",
    vision_tower_class="Kimi_K25VisionModel",
    # the checkpoint ships a slow TikTokenTokenizer (tokenization_kimi.py over tiktoken.model) and no
    # tokenizer.json (TensorRT-LLM PR 14416)
    tokenizer="tiktoken",
    routed_experts_key="n_routed_experts",
    text_config_key="text_config",
    language_model_path="model.language_model",
    layers_path="model.language_model.layers",
    vision_tower_path="model.vision_tower",
    vision_blocks_path="model.vision_tower.layers",
)


@hookimpl
def infercast_register_profiles(register: Callable[[ModelProfile], None]) -> None:
    register(PROFILE)


@hookimpl
def infercast_register_models(register: Callable[[ModelRef], None]) -> None:
    register(ModelRef(MODEL_ID, MODEL_TYPE, tuple(ALIASES), default=10,
                      description="Kimi-K2.5: 1T MoE, MLA, MoonViT, native INT4 routed experts"))
    register(ModelRef(DRAFT_MODEL_ID, MODEL_TYPE, description="EAGLE3 draft with an MLA layer, for Kimi-K2.5"))


MLA_DRAFT_CARD = "lightseekorg/kimi-k2.5-eagle3-mla model card, s3 k1 n4, greedy"


@hookimpl
def infercast_register_speculative(register: Callable[[SpecOption], None]) -> None:
    register(SpecOption(
        MODEL_TYPE, "EAGLE3", "kimi-k2.5-eagle3-mla", MLA_DRAFT_CARD, draft=DRAFT_MODEL_ID, steps=3, topk=1,
        draft_tokens=4, measured_steps=3,
        datasets={"mtbench": 2.940, "ceval": 2.829, "gsm8k": 3.017, "humaneval": 2.969, "math500": 3.051,
                  "aime": 3.139, "mmstar": 2.597}))
    register(SpecOption(
        MODEL_TYPE, "EAGLE3", "kimi-k2.5-eagle3", "lightseekorg/kimi-k2.5-eagle3 model card (Llama-style draft), s3 "
        "k1 n4, greedy", draft="lightseekorg/kimi-k2.5-eagle3", steps=3, topk=1, draft_tokens=4, measured_steps=3,
        datasets={"mtbench": 2.687, "ceval": 2.295, "gsm8k": 3.201, "humaneval": 3.285, "math500": 3.342,
                  "aime": 3.033, "mmstar": 2.787}, default=False))
    register(SpecOption(
        MODEL_TYPE, "EAGLE3", "kimi-k2-eagle3", "AQ-MedAI/Kimi-K2-Instruct-eagle3 model card, measured on Kimi-K2 "
        "(Kimi-K2.5's text architecture), s3 k1 n4", draft="AQ-MedAI/Kimi-K2-Instruct-eagle3", steps=3, topk=1,
        draft_tokens=4, measured_steps=3, datasets={"humaneval": 3.372, "gsm8k": 3.165, "math500": 3.490},
        default=False))


@hookimpl
def infercast_register_draft_layers(register: Callable[[str, type], None]) -> None:
    from infercast_kimi_k25 import eagle3

    register(eagle3.ARCHITECTURE, eagle3.MLADraftLayer)


@hookimpl
def infercast_register_config_aliases(register: Callable[[str, str], None]) -> None:
    register("kimi_k2", "deepseek_v3")  # Kimi-K2's remote code is DeepSeek-V3 under another name


@hookimpl
def infercast_eagle3_capture_rule(target_model_type: str) -> str | None:
    return EAGLE3_CAPTURE_RULES.get(target_model_type)


@hookimpl
def infercast_register_sim_layers(register) -> None:
    from infercast_kimi_k25.sim_layers import moonvit_tower

    register("vision", MODEL_TYPE, moonvit_tower)


@hookimpl
def infercast_resolve_config(model_ref: str):
    if model_ref == MODEL_ID or model_ref in ALIASES or model_ref.lower() in ALIASES:
        return kimi_k25_config()
    if model_ref == DRAFT_MODEL_ID:
        from infercast_kimi_k25 import eagle3

        return eagle3.eagle3_mla_config()
    return None


@hookimpl
def infercast_patch_config(config) -> None:
    if getattr(config, "model_type", None) == MODEL_TYPE:
        _config_patches.patch_config(config)


@hookimpl
def infercast_class_patches(config):
    if getattr(config, "model_type", None) != MODEL_TYPE:
        return None
    from infercast_kimi_k25 import class_patches  # imports torch: only when a Kimi model is exported

    return class_patches.class_patches(config)
