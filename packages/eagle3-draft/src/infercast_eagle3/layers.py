"""Building blocks of a draft decoder layer, and the built-in Llama-style layer."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


class RMSNorm(nn.Module):
    def __init__(self, size: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(size))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        dtype = x.dtype
        x = x.float()
        x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * x.to(dtype)


def rope(x: torch.Tensor, positions: torch.Tensor, theta: float) -> torch.Tensor:
    """Rotary embedding (rotate-half form) of ``x [..., seq, dim]`` at ``positions [seq]``."""
    dim = x.shape[-1]
    inv = 1.0 / (theta ** (torch.arange(0, dim, 2, device=x.device, dtype=torch.float32) / dim))
    freqs = positions.to(torch.float32)[:, None] * inv[None]
    cos, sin = torch.cat([freqs, freqs], -1).cos(), torch.cat([freqs, freqs], -1).sin()
    half = dim // 2
    rotated = torch.cat([-x[..., half:], x[..., :half]], -1)
    return (x.float() * cos + rotated.float() * sin).to(x.dtype)


def attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor, scale: float) -> torch.Tensor:
    """q [heads, q_len, d], k/v [heads, kv_len, d], boolean ``mask [q_len, kv_len]`` (True = may attend)."""
    return F.scaled_dot_product_attention(q.unsqueeze(0), k.unsqueeze(0), v.unsqueeze(0), attn_mask=mask,
                                          scale=scale).squeeze(0)


class GatedMLP(nn.Module):
    def __init__(self, hidden: int, intermediate: int) -> None:
        super().__init__()
        self.gate_proj = nn.Linear(hidden, intermediate, bias=False)
        self.up_proj = nn.Linear(hidden, intermediate, bias=False)
        self.down_proj = nn.Linear(intermediate, hidden, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class DraftLayer(nn.Module):
    """The EAGLE3 layer's common frame: ``[input_layernorm(embeds), hidden_norm(hidden)]``
    (2 x hidden wide) into attention, the hidden state as the residual, then an MLP.
    Subclasses provide ``self_attn(x, positions, mask)``."""

    def __init__(self, config) -> None:
        super().__init__()
        hidden, eps = config.hidden_size, getattr(config, "rms_norm_eps", 1e-6)
        self.input_layernorm = RMSNorm(hidden, eps)
        self.hidden_norm = RMSNorm(hidden, eps)
        self.post_attention_layernorm = RMSNorm(hidden, eps)
        self.mlp = GatedMLP(hidden, config.intermediate_size)

    def forward(self, embeds: torch.Tensor, hidden: torch.Tensor, positions: torch.Tensor,
                mask: torch.Tensor) -> torch.Tensor:
        """embeds, hidden ``[seq, hidden]``; returns the new hidden state ``[seq, hidden]``."""
        x = torch.cat([self.input_layernorm(embeds), self.hidden_norm(hidden)], -1)
        h = hidden + self.self_attn(x, positions, mask)
        return h + self.mlp(self.post_attention_layernorm(h))


class LlamaAttention(nn.Module):
    def __init__(self, config) -> None:
        super().__init__()
        self.heads = config.num_attention_heads
        self.kv_heads = getattr(config, "num_key_value_heads", None) or self.heads
        self.head_dim = getattr(config, "head_dim", None) or config.hidden_size // self.heads
        self.theta = getattr(config, "rope_theta", None) or (getattr(config, "rope_parameters", None) or {}).get(
            "rope_theta", 10000.0)
        wide = 2 * config.hidden_size
        self.q_proj = nn.Linear(wide, self.heads * self.head_dim, bias=False)
        self.k_proj = nn.Linear(wide, self.kv_heads * self.head_dim, bias=False)
        self.v_proj = nn.Linear(wide, self.kv_heads * self.head_dim, bias=False)
        self.o_proj = nn.Linear(self.heads * self.head_dim, config.hidden_size, bias=False)

    def forward(self, x: torch.Tensor, positions: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        seq = x.shape[0]
        q = self.q_proj(x).view(seq, self.heads, self.head_dim).transpose(0, 1)
        k = self.k_proj(x).view(seq, self.kv_heads, self.head_dim).transpose(0, 1)
        v = self.v_proj(x).view(seq, self.kv_heads, self.head_dim).transpose(0, 1)
        q, k = rope(q, positions, self.theta), rope(k, positions, self.theta)
        groups = self.heads // self.kv_heads
        k, v = k.repeat_interleave(groups, 0), v.repeat_interleave(groups, 0)
        out = attend(q, k, v, mask, self.head_dim ** -0.5)
        return self.o_proj(out.transpose(0, 1).reshape(seq, -1))


class LlamaDraftLayer(DraftLayer):
    """The Llama-style EAGLE3 layer (``LlamaForCausalLMEagle3``): q/k/v read 2 x hidden."""

    def __init__(self, config, layer_idx: int = 0) -> None:
        super().__init__(config)
        self.self_attn = LlamaAttention(config)
