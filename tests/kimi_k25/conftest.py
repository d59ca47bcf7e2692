"""Tiny Kimi-K2.5-shaped configs (native and remote-code stand-in) for running the patched classes."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

import pytest
from infercast_adapters.manager import AdapterManager

import infercast_kimi_k25.plugin as plugin

TINY_TEXT = dict(
    hidden_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=4, q_lora_rank=32, kv_lora_rank=16,
    qk_nope_head_dim=8, qk_rope_head_dim=8, v_head_dim=8, n_routed_experts=8, n_shared_experts=1, num_experts_per_tok=2,
    moe_intermediate_size=16, intermediate_size=96, first_k_dense_replace=1, n_group=1, topk_group=1, vocab_size=300,
    max_position_embeddings=256, rope_theta=50000.0,
)
TINY_VISION = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=48, patch_size=14,
                   merge_kernel_size=[2, 2], pos_emb_height=8, pos_emb_width=8, pos_emb_time=4)
IMAGE_TOKEN = 299


@pytest.fixture
def kimi_manager() -> AdapterManager:
    manager = AdapterManager()
    assert manager.register(plugin, "kimi_k25")
    return manager


def tiny_native_config():
    from transformers import AutoConfig

    return AutoConfig.for_model("kimi_k25", text_config=dict(TINY_TEXT, model_type="kimi_k2"),
                                vision_config=dict(TINY_VISION), projection_hidden_size=32,
                                image_token_id=IMAGE_TOKEN, video_token_id=298)


@pytest.fixture
def remote_standin(monkeypatch: pytest.MonkeyPatch):
    """The stand-in remote package, imported fresh, as ``remote_standin``."""
    monkeypatch.syspath_prepend(str(Path(__file__).parent))
    for name in [n for n in sys.modules if n.startswith("remote_standin")]:
        monkeypatch.delitem(sys.modules, name)
    yield importlib.import_module("remote_standin.configuration_kimi_k25")
    for name in [n for n in sys.modules if n.startswith("remote_standin")]:
        sys.modules.pop(name, None)


def tiny_remote_config(configuration):
    vision = dict(vt_hidden_size=32, vt_num_hidden_layers=2, vt_num_attention_heads=4, vt_intermediate_size=48,
                  mm_hidden_size=32, text_hidden_size=64)
    config = configuration.KimiK25Config(text_config=dict(TINY_TEXT), vision_config=vision,
                                         media_placeholder_token_id=IMAGE_TOKEN)
    config.vision_config._attn_implementation = "flash_attention_2"  # as shipped
    config.text_config._attn_implementation = "flash_attention_2"
    return config
