"""Building blocks of a draft decoder layer, and the built-in Llama-style layer.

The Llama layer follows sglang 0.5.23 ``python/sglang/srt/models/llama_eagle3.py`` (its
``LlamaDecoderLayer`` over ``models/llama.py``): q/k/v read the 2 x hidden input without bias,
``o_proj`` has a bias when the config's ``attention_bias`` or ``bias`` is set, the MLP has none,
and the rotary embedding is the target family's (transformers' rope initialisation for the
config's ``rope_parameters`` / ``rope_scaling``: llama3, yarn, linear, dynamic...).
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from infercast_adapters import ConfigError
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


class KVCache:
    """Keys and values of one attention layer, ``[heads, seq, dim]`` each: appended by every
    forward, cut back with :meth:`truncate` (the draft keeps the positions whose features came
    from the target and drops the tree it drafted on top of them)."""

    def __init__(self) -> None:
        self.keys: torch.Tensor | None = None
        self.values: torch.Tensor | None = None

    def __len__(self) -> int:
        return 0 if self.keys is None else self.keys.shape[-2]

    def update(self, keys: torch.Tensor, values: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Append this forward's keys and values; returns everything cached so far."""
        if self.keys is None:
            self.keys, self.values = keys, values
        else:
            self.keys, self.values = torch.cat([self.keys, keys], -2), torch.cat([self.values, values], -2)
        return self.keys, self.values

    def truncate(self, length: int) -> None:
        if self.keys is not None and length < len(self):
            self.keys, self.values = self.keys[..., :length, :], self.values[..., :length, :]


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat([-x[..., half:], x[..., :half]], -1)


def rope_config(config: Any) -> Any:
    """A LlamaConfig carrying ``config``'s rotary settings, for transformers' rope initialisation.

    ``rope_parameters`` (transformers 5) wins over ``rope_scaling`` + ``rope_theta``, as in
    sglang's ``LlamaDecoderLayer``; a top-level ``original_max_position_embeddings`` overrides the
    scaling's, as sglang does. Multimodal rope (``mrope_section``) is refused."""
    from transformers import LlamaConfig

    params = getattr(config, "rope_parameters", None)
    if params:
        params = dict(params)
    else:
        params = dict(getattr(config, "rope_scaling", None) or {"rope_type": "default"})
        params.setdefault("rope_theta", getattr(config, "rope_theta", None) or 10000.0)
    if "mrope_section" in params:
        raise ConfigError("rope_scaling.mrope_section (multimodal rope) is not supported in an EAGLE3 draft layer")
    original = getattr(config, "original_max_position_embeddings", None)
    if original and (params.get("rope_type") or params.get("type")) not in (None, "default"):
        params["original_max_position_embeddings"] = original
    if not getattr(config, "rope_is_neox_style", True):
        raise ConfigError("rope_is_neox_style is false (interleaved rotary): the Llama draft layer rotates halves")
    if getattr(config, "partial_rotary_factor", 1.0) not in (None, 1, 1.0):
        raise ConfigError(f"partial_rotary_factor={config.partial_rotary_factor}: the Llama draft layer rotates the "
                          "whole head")
    heads = config.num_attention_heads
    return LlamaConfig(hidden_size=config.hidden_size, num_attention_heads=heads,
                       head_dim=getattr(config, "head_dim", None) or config.hidden_size // heads,
                       max_position_embeddings=getattr(config, "max_position_embeddings", None) or 8192,
                       rope_parameters=params)


class Rotary(nn.Module):
    """Rotate-half rotary embedding with transformers' tables for the config's rope type,
    computed in float32 whatever the draft's dtype (as sglang keeps its cos/sin cache)."""

    def __init__(self, config: Any) -> None:
        super().__init__()
        self.config = rope_config(config)
        self.table = self._table()

    def _table(self) -> nn.Module:
        from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding

        return LlamaRotaryEmbedding(self.config)

    def forward(self, q: torch.Tensor, k: torch.Tensor, positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """q ``[heads, seq, dim]``, k ``[kv_heads, seq, dim]`` at ``positions [seq]``."""
        if self.table.inv_freq.dtype != torch.float32:  # the draft was cast: rebuild the table in float32
            with torch.device(self.table.inv_freq.device):
                self.table = self._table()
        cos, sin = self.table(q.float(), positions[None])
        cos, sin = cos[0], sin[0]
        rotated_q = q.float() * cos + rotate_half(q.float()) * sin
        rotated_k = k.float() * cos + rotate_half(k.float()) * sin
        return rotated_q.to(q.dtype), rotated_k.to(k.dtype)


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
    Subclasses provide ``self_attn(x, positions, mask, cache)``."""

    def __init__(self, config) -> None:
        super().__init__()
        hidden, eps = config.hidden_size, getattr(config, "rms_norm_eps", 1e-6)
        self.input_layernorm = RMSNorm(hidden, eps)
        self.hidden_norm = RMSNorm(hidden, eps)
        self.post_attention_layernorm = RMSNorm(hidden, eps)
        self.mlp = GatedMLP(hidden, config.intermediate_size)

    def forward(self, embeds: torch.Tensor, hidden: torch.Tensor, positions: torch.Tensor, mask: torch.Tensor,
                cache: KVCache | None = None) -> torch.Tensor:
        """embeds, hidden ``[seq, hidden]``; ``mask [seq, cached + seq]`` over the cached
        positions and these; returns the new hidden state ``[seq, hidden]``."""
        x = torch.cat([self.input_layernorm(embeds), self.hidden_norm(hidden)], -1)
        h = hidden + self.self_attn(x, positions, mask, cache)
        return h + self.mlp(self.post_attention_layernorm(h))


class LlamaAttention(nn.Module):
    def __init__(self, config) -> None:
        super().__init__()
        self.heads = config.num_attention_heads
        self.kv_heads = getattr(config, "num_key_value_heads", None) or self.heads
        self.head_dim = getattr(config, "head_dim", None) or config.hidden_size // self.heads
        wide = 2 * config.hidden_size
        out_bias = bool(getattr(config, "attention_bias", False) or getattr(config, "bias", False))
        self.q_proj = nn.Linear(wide, self.heads * self.head_dim, bias=False)
        self.k_proj = nn.Linear(wide, self.kv_heads * self.head_dim, bias=False)
        self.v_proj = nn.Linear(wide, self.kv_heads * self.head_dim, bias=False)
        self.o_proj = nn.Linear(self.heads * self.head_dim, config.hidden_size, bias=out_bias)
        self.rotary = Rotary(config)

    def forward(self, x: torch.Tensor, positions: torch.Tensor, mask: torch.Tensor,
                cache: KVCache | None = None) -> torch.Tensor:
        seq = x.shape[0]
        q = self.q_proj(x).view(seq, self.heads, self.head_dim).transpose(0, 1)
        k = self.k_proj(x).view(seq, self.kv_heads, self.head_dim).transpose(0, 1)
        v = self.v_proj(x).view(seq, self.kv_heads, self.head_dim).transpose(0, 1)
        q, k = self.rotary(q, k, positions)
        if cache is not None:
            k, v = cache.update(k, v)
        groups = self.heads // self.kv_heads
        k, v = k.repeat_interleave(groups, 0), v.repeat_interleave(groups, 0)
        out = attend(q, k, v, mask, self.head_dim ** -0.5)
        return self.o_proj(out.transpose(0, 1).reshape(seq, -1))


class LlamaDraftLayer(DraftLayer):
    """The Llama-style EAGLE3 layer (``LlamaForCausalLMEagle3``): q/k/v read 2 x hidden."""

    def __init__(self, config, layer_idx: int = 0) -> None:
        super().__init__(config)
        self.self_attn = LlamaAttention(config)
