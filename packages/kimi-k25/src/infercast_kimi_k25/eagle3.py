"""Kimi-K2.5's EAGLE3 draft: an MLA decoder layer over the doubled-width EAGLE3 input.

The layer reads ``[input_layernorm(embeds), hidden_norm(hidden)]`` (2 x hidden wide), so the
fused QKV-down projection ``fused_qkv_a_proj_with_mqa`` maps 2·hidden to
q_lora_rank + kv_lora_rank + qk_rope_head_dim (14336 -> 2112 for Kimi-K2.5); the rest is
DeepSeek-V3's MLA (up projections, interleaved YaRN rope on the shared rope key) followed by
the post-attention norm and a dense MLP. Checkpoints store ``q_a_proj`` and
``kv_a_proj_with_mqa`` separately; :mod:`infercast_eagle3.checkpoint` fuses and splits them.

Rotary tables and the YaRN softmax scale come from transformers' DeepSeek-V3 code, so a real
checkpoint sees the positions the target family uses. As in sglang 0.5.23
(``python/sglang/srt/models/kimi_k25_eagle3.py`` over ``deepseek_v2.py``'s
``DeepseekV2AttentionMLA`` and ``DeepseekV2MLP``), no projection has a bias and the MLP is SiLU.
"""

from __future__ import annotations

from typing import Any

import torch
from infercast_adapters import ConfigError
from infercast_eagle3.config import MLA_EAGLE3
from infercast_eagle3.layers import DraftLayer, KVCache, RMSNorm, attend
from infercast_eagle3.model import Eagle3Draft
from torch import nn
from transformers import AutoConfig, DeepseekV3Config
from transformers.models.deepseek_v3.modeling_deepseek_v3 import (
    DeepseekV3RotaryEmbedding,
    apply_rotary_pos_emb,
    apply_rotary_pos_emb_interleave,
    yarn_apply_mscale,
)

from infercast_kimi_k25.architecture import TEXT_CONFIG

ARCHITECTURE = MLA_EAGLE3


class KimiK2Config(DeepseekV3Config):
    """``model_type: kimi_k2`` in draft checkpoints: DeepSeek-V3's config under another name."""

    model_type = "kimi_k2"


def register_kimi_k2_config() -> bool:
    """Let ``AutoConfig`` read ``model_type: kimi_k2``; a no-op where it already can (a newer
    transformers, or sglang's own alias). Returns True when it registered ours."""
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING

    if "kimi_k2" in CONFIG_MAPPING:
        return False
    AutoConfig.register("kimi_k2", KimiK2Config)
    return True


class MLADraftAttention(nn.Module):
    """MLA whose down projections (q and kv, fused) read the 2 x hidden EAGLE3 input."""

    def __init__(self, config: Any) -> None:
        super().__init__()
        if getattr(config, "q_lora_rank", None) is None:
            raise ConfigError(f"the {ARCHITECTURE} draft layer needs q_lora_rank: its fused projection "
                              "fused_qkv_a_proj_with_mqa has q_lora_rank + kv_lora_rank + qk_rope_head_dim outputs; "
                              "this draft config has q_lora_rank=None")
        if getattr(config, "attention_bias", False):
            raise ConfigError(f"attention_bias is true, but sglang's {ARCHITECTURE} draft layer has no attention "
                              "biases (DeepseekV2AttentionMLA); it would be ignored")
        hidden, eps = config.hidden_size, config.rms_norm_eps
        self.heads = config.num_attention_heads
        self.q_lora_rank, self.kv_lora_rank = config.q_lora_rank, config.kv_lora_rank
        self.nope, self.rope_dim, self.v_dim = config.qk_nope_head_dim, config.qk_rope_head_dim, config.v_head_dim
        self.interleave = bool(getattr(config, "rope_interleave", True))
        self.fused_qkv_a_proj_with_mqa = nn.Linear(2 * hidden, self.q_lora_rank + self.kv_lora_rank + self.rope_dim,
                                                   bias=False)
        self.q_a_layernorm = RMSNorm(self.q_lora_rank, eps)
        self.q_b_proj = nn.Linear(self.q_lora_rank, self.heads * (self.nope + self.rope_dim), bias=False)
        self.kv_a_layernorm = RMSNorm(self.kv_lora_rank, eps)
        self.kv_b_proj = nn.Linear(self.kv_lora_rank, self.heads * (self.nope + self.v_dim), bias=False)
        self.o_proj = nn.Linear(self.heads * self.v_dim, hidden, bias=False)
        self.rotary = DeepseekV3RotaryEmbedding(config)
        self.scale = yarn_apply_mscale(config.rope_parameters, (self.nope + self.rope_dim) ** -0.5)

    def forward(self, x: torch.Tensor, positions: torch.Tensor, mask: torch.Tensor,
                cache: KVCache | None = None) -> torch.Tensor:
        """x ``[seq, 2 * hidden]``, positions ``[seq]``, boolean mask ``[seq, cached + seq]``."""
        seq = x.shape[0]
        q_lat, kv_lat, k_rot = self.fused_qkv_a_proj_with_mqa(x).split(
            [self.q_lora_rank, self.kv_lora_rank, self.rope_dim], -1)
        q = self.q_b_proj(self.q_a_layernorm(q_lat)).view(seq, self.heads, -1).transpose(0, 1)
        q_nope, q_rot = q.split([self.nope, self.rope_dim], -1)
        kv = self.kv_b_proj(self.kv_a_layernorm(kv_lat)).view(seq, self.heads, -1).transpose(0, 1)
        k_nope, v = kv.split([self.nope, self.v_dim], -1)
        cos, sin = self.rotary(x, positions[None])
        rotate = apply_rotary_pos_emb_interleave if self.interleave else apply_rotary_pos_emb
        q_rot, k_rot = rotate(q_rot[None], k_rot[None, None], cos, sin)
        q = torch.cat([q_nope, q_rot[0]], -1)
        k = torch.cat([k_nope, k_rot[0].expand(self.heads, -1, -1)], -1)
        if cache is not None:
            k, v = cache.update(k, v)
        out = attend(q, k, v, mask, self.scale)
        return self.o_proj(out.transpose(0, 1).reshape(seq, self.heads * self.v_dim))


class MLADraftLayer(DraftLayer):
    """Kimi-K2.5's EAGLE3 decoder layer: the EAGLE3 frame around :class:`MLADraftAttention`."""

    def __init__(self, config: Any, layer_idx: int = 0) -> None:
        super().__init__(config)
        self.self_attn = MLADraftAttention(config)


class Eagle3DeepseekV2ForCausalLM(Eagle3Draft):
    """The MLA EAGLE3 draft, under the architecture name its checkpoints carry."""

    def __init__(self, config, layer_class: type = MLADraftLayer, embed_tokens: nn.Embedding | None = None,
                 lm_head: nn.Module | None = None) -> None:
        super().__init__(config, layer_class, embed_tokens, lm_head)



def eagle3_mla_config(**overrides: Any) -> KimiK2Config:
    """The published MLA draft's config (``lightseekorg/kimi-k2.5-eagle3-mla``), offline.

    Values from its training template (shared/reference/kimi-k25.md): one layer at hidden 7168,
    dense MLP 18432, the target's MLA dimensions, full 163,840-token draft vocabulary. Rope and
    norm epsilon are taken to be the target's.

    Aux layer ids [2, 30, 58]: the published config names the captured hidden states as sglang
    uses them for Kimi targets (ids not starting at 1 are taken as given: the inputs of layers
    2, 30 and 58, i.e. the outputs of layers 1, 29 and 57 that the training template's
    [1, 29, 57] means). Read with the Llama rule (add one to each) they would be off by a
    layer. Derived from the issue's comparison against sglang; not checked against the hub
    file here (no network).
    """
    fields = {key: TEXT_CONFIG[key] for key in (
        "hidden_size", "num_attention_heads", "num_key_value_heads", "q_lora_rank", "kv_lora_rank",
        "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim", "intermediate_size", "vocab_size",
        "max_position_embeddings", "rope_theta", "rope_scaling", "rms_norm_eps", "hidden_act")}
    fields.update(num_hidden_layers=1, architectures=[ARCHITECTURE], draft_vocab_size=TEXT_CONFIG["vocab_size"],
                  target_hidden_size=TEXT_CONFIG["hidden_size"], tie_word_embeddings=False,
                  eagle_config={"eagle_aux_hidden_state_layer_ids": [2, 30, 58], "use_aux_hidden_state": True})
    fields.update(overrides)
    return KimiK2Config(**fields)
