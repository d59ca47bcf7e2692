"""The Llama draft layer rotates queries and keys as its target family does (llama3, yarn)."""

from __future__ import annotations

import math

import pytest
import torch
from infercast_eagle3.layers import LlamaAttention
from transformers import LlamaConfig
from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding, apply_rotary_pos_emb

POSITIONS = torch.tensor([0, 1, 17, 1000, 2047, 3000, 4096, 5000, 6500, 8191])
LLAMA3 = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
          "original_max_position_embeddings": 1024}
YARN = {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 2048, "beta_fast": 32.0,
        "beta_slow": 1.0}


def layer_config(**rope) -> LlamaConfig:
    return LlamaConfig(hidden_size=64, num_attention_heads=2, num_key_value_heads=1, head_dim=32, intermediate_size=64,
                       num_hidden_layers=1, max_position_embeddings=16384, **rope)


def llama3_inv_freq(theta: float, dim: int, factor: float, low: float, high: float, original: int) -> torch.Tensor:
    """Llama 3.1's published rope scaling, written out: long wavelengths are divided by the
    factor, short ones kept, the band between interpolated smoothly."""
    inv = 1.0 / theta ** (torch.arange(0, dim, 2, dtype=torch.float64) / dim)
    out = []
    for f in inv.tolist():
        wavelen = 2 * math.pi / f
        if wavelen < original / high:
            out.append(f)
        elif wavelen > original / low:
            out.append(f / factor)
        else:
            smooth = (original / wavelen - low) / (high - low)
            out.append((1 - smooth) * f / factor + smooth * f)
    return torch.tensor(out)


def rotated(config: LlamaConfig):
    torch.manual_seed(0)
    q, k = torch.randn(2, len(POSITIONS), 32), torch.randn(1, len(POSITIONS), 32)
    ours = LlamaAttention(config).rotary(q, k, POSITIONS)
    return q, k, ours


@pytest.mark.parametrize("rope", [
    dict(rope_scaling=LLAMA3, rope_theta=500000.0),
    dict(rope_parameters=dict(LLAMA3, rope_theta=500000.0)),  # transformers 5 spelling
    dict(rope_scaling=YARN, rope_theta=1000000.0),
    dict(rope_parameters=dict(YARN, rope_theta=1000000.0)),
], ids=["llama3-rope_scaling", "llama3-rope_parameters", "yarn-rope_scaling", "yarn-rope_parameters"])
def test_rotary_equals_transformers_up_to_8k(rope) -> None:
    config = layer_config(**rope)
    q, k, (ours_q, ours_k) = rotated(config)
    cos, sin = LlamaRotaryEmbedding(config)(q, POSITIONS[None])
    ref_q, ref_k = apply_rotary_pos_emb(q[None], k[None], cos, sin)
    assert torch.allclose(ours_q, ref_q[0], atol=1e-5) and torch.allclose(ours_k, ref_k[0], atol=1e-5)
    plain = LlamaAttention(layer_config(rope_theta=config.rope_parameters["rope_theta"])).rotary(q, k, POSITIONS)[0]
    assert (plain - ours_q).abs().max() > 0.5  # plain theta, the old behaviour, is far off at these positions


def test_llama3_scaling_matches_the_published_formula() -> None:
    config = layer_config(rope_scaling=LLAMA3, rope_theta=500000.0)
    q, k, (ours_q, _) = rotated(config)
    inv = llama3_inv_freq(500000.0, 32, 8.0, 1.0, 4.0, 1024)
    angles = POSITIONS.double()[:, None] * inv[None]
    cos, sin = torch.cat([angles, angles], -1).cos().float(), torch.cat([angles, angles], -1).sin().float()
    half = torch.cat([-q[..., 16:], q[..., :16]], -1)
    assert torch.allclose(ours_q, q * cos + half * sin, atol=2e-4)


def test_yarn_scales_cos_and_sin_by_its_attention_factor() -> None:
    """transformers' yarn (as sglang's YaRN rotary): cos/sin carry 0.1 ln(factor) + 1."""
    config = layer_config(rope_scaling=YARN, rope_theta=1000000.0)
    q, k, (ours_q, _) = rotated(config)
    assert ours_q[:, 0].norm().item() == pytest.approx((0.1 * math.log(4.0) + 1) * q[:, 0].norm().item(), rel=1e-5)


def test_a_top_level_original_max_position_embeddings_overrides_the_scalings_as_sglang_does() -> None:
    base = layer_config(rope_scaling=dict(YARN), rope_theta=1000000.0)
    moved = layer_config(rope_scaling=dict(YARN, original_max_position_embeddings=1024), rope_theta=1000000.0)
    base.original_max_position_embeddings = 1024
    _, _, (a, _) = rotated(base)
    _, _, (b, _) = rotated(moved)
    assert torch.allclose(a, b)


def test_the_table_stays_float32_when_the_draft_is_cast() -> None:
    attn = LlamaAttention(layer_config(rope_scaling=LLAMA3, rope_theta=500000.0))
    q, k = torch.randn(2, len(POSITIONS), 32), torch.randn(1, len(POSITIONS), 32)
    exact, _ = attn.rotary(q, k, POSITIONS)
    attn.to(torch.bfloat16)
    cast, _ = attn.rotary(q.bfloat16(), k.bfloat16(), POSITIONS)
    assert attn.rotary.table.inv_freq.dtype == torch.float32
    assert torch.allclose(cast.float(), exact, atol=0.05)
