"""STAND-IN (see package docstring): a transformers-4.x-style DeepSeek-V3 text model."""

import torch
from torch import nn
from transformers.models.deepseek_v3 import modeling_deepseek_v3 as native


class DeepseekV3Attention(native.DeepseekV3Attention):
    """4.x interface: computes RoPE from position_ids itself and returns three values."""

    def forward(self, hidden_states, attention_mask=None, position_ids=None, past_key_value=None, **kwargs):
        if not hasattr(self, "rotary_emb"):
            self.rotary_emb = native.DeepseekV3RotaryEmbedding(self.config).to(hidden_states.device)
        if position_ids is None:
            position_ids = torch.arange(hidden_states.shape[1], device=hidden_states.device).unsqueeze(0)
        cos_sin = self.rotary_emb(hidden_states, position_ids)
        out, weights = super().forward(hidden_states, cos_sin, attention_mask)
        return out, weights, past_key_value


class DeepseekV3MLP(native.DeepseekV3MLP):
    pass


class DeepseekV3MoE(nn.Module):
    """Experts as a ModuleList; dispatch reads routing results back to the host (``.tolist()``)."""

    def __init__(self, config):
        super().__init__()
        self.config = config
        self.num_experts_per_tok = config.num_experts_per_tok
        self.experts = nn.ModuleList(
            [DeepseekV3MLP(config, intermediate_size=config.moe_intermediate_size) for _ in range(config.n_routed_experts)])
        self.gate = native.DeepseekV3TopkRouter(config)
        self.shared_experts = DeepseekV3MLP(config, intermediate_size=config.moe_intermediate_size * config.n_shared_experts)

    def forward(self, hidden_states):
        shape = hidden_states.shape
        x = hidden_states.view(-1, shape[-1])
        _, weights, indices = self.gate(hidden_states)
        out = torch.zeros_like(x)
        counts = torch.bincount(indices.flatten(), minlength=len(self.experts)).tolist()
        for e, count in enumerate(counts):
            if count:
                token, slot = torch.where(indices == e)
                out[token] += self.experts[e](x[token]) * weights[token, slot, None]
        return out.view(shape) + self.shared_experts(hidden_states)


class DeepseekV3DecoderLayer(nn.Module):
    def __init__(self, config, layer_idx):
        super().__init__()
        self.self_attn = DeepseekV3Attention(config, layer_idx)
        self.mlp = DeepseekV3MoE(config) if layer_idx >= config.first_k_dense_replace else DeepseekV3MLP(config)
        self.input_layernorm = native.DeepseekV3RMSNorm(config.hidden_size, eps=config.rms_norm_eps)
        self.post_attention_layernorm = native.DeepseekV3RMSNorm(config.hidden_size, eps=config.rms_norm_eps)

    def forward(self, hidden_states, attention_mask=None, position_ids=None, **kwargs):
        residual = hidden_states
        hidden_states, _weights = self.self_attn(self.input_layernorm(hidden_states), attention_mask, position_ids)  # 4.x: 3 values
        hidden_states = residual + hidden_states
        return hidden_states + self.mlp(self.post_attention_layernorm(hidden_states))


class DeepseekV3ForCausalLM(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.config = config
        self.embed_tokens = nn.Embedding(config.vocab_size, config.hidden_size)
        self.layers = nn.ModuleList([DeepseekV3DecoderLayer(config, i) for i in range(config.num_hidden_layers)])
        self.norm = native.DeepseekV3RMSNorm(config.hidden_size, eps=config.rms_norm_eps)
        self.lm_head = nn.Linear(config.hidden_size, config.vocab_size, bias=False)

    def get_input_embeddings(self):
        return self.embed_tokens

    def forward(self, inputs_embeds, attention_mask=None, position_ids=None):
        h = inputs_embeds
        for layer in self.layers:
            h = layer(h, None, position_ids)
        return self.lm_head(self.norm(h))
