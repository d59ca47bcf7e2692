"""The static prefill and decode interfaces (ABIs) wrapped around a causal language model.

Prefill, for a batch of ``B`` prompts of ``S`` tokens::

    input_ids [B, S] int64  ->  logits [B, 1, V] (the last position),
                                then per layer, in layer order, the cache tensors [B, h, S, d]

Decode, one new token per sequence, over a cache of ``C = max_cache_len`` slots::

    input_ids [B, 1] int64, cache_position [1] int64, then per layer the cache tensors [B, h, C, d]
        ->  logits [B, 1, V], then the cache tensors with the new token's rows written at
            cache_position (index_copy along axis 2, out of place: the graph returns them)

The cache tensors are the two tensors the model's own attention hands its cache (:data:`ROLES`):
key and value for multi-head and grouped-query attention; for MLA (DeepSeek-V3, Kimi-K2.5) the
normalised latent ``[B, 1, n, kv_lora_rank]`` and the roped shared key ``[B, 1, n, rope_dim]``.
Positions and the attention mask are computed inside the graph: prefill is causal over
0..S-1; decode puts the token at ``cache_position`` and lets it see slots 0..cache_position, so
slots after it may hold anything. Every sequence of a batch is at the same position. Weights are named as in the causal LM's
state dict (``model.layers.0.self_attn.q_proj.weight``, ``lm_head.weight``).
"""

from __future__ import annotations

import inspect
from typing import Sequence

import torch
from infercast_adapters import InfercastError
from torch import nn

SEQ_AXIS = 2
"""The sequence (slot) axis of every cache tensor."""

LM_PREFIX = "lm."
"""Where the ABIs hold the causal LM: stripped from weight names and module paths."""

ROLES = {"mla": ("latent", "rope_key"), "gqa": ("key", "value")}
"""Names of a layer's two cache tensors by the profile's ``attention_kind``."""


def cache_roles(attention_kind: str) -> tuple[str, str]:
    return ROLES.get(attention_kind, ROLES["gqa"])


def cache_input_names(num_layers: int, attention_kind: str) -> list[str]:
    """Decode graph input names of the cache tensors: ``layer_0_key``, ``layer_0_value``, ..."""
    return [f"layer_{i}_{role}" for i in range(num_layers) for role in cache_roles(attention_kind)]


class ABICache:
    """What the model's attention layers see as their cache inside an ABI.

    Every attention calls ``update(first, second, layer_idx)`` with its new cache tensors. With
    no slots (prefill) the cache keeps them and hands them back; with slots (decode) it writes
    them into that layer's slot tensors at ``cache_position`` with ``index_copy`` and hands back
    the whole slot tensors, which attention then reads under the mask.
    """

    def __init__(self, slots: Sequence[torch.Tensor] | None = None, cache_position: torch.Tensor | None = None):
        self.decode = slots is not None
        self.tensors: list[torch.Tensor | None] = list(slots) if slots is not None else []
        self.cache_position = cache_position

    def update(self, first: torch.Tensor, second: torch.Tensor, layer_idx: int, *args, **kwargs):
        pair = (first, second)
        if self.decode:
            pair = tuple(self.tensors[2 * layer_idx + i].index_copy(SEQ_AXIS, self.cache_position, new)
                         for i, new in enumerate(pair))
        else:
            while len(self.tensors) < 2 * layer_idx + 2:
                self.tensors.append(None)
            if self.tensors[2 * layer_idx] is not None:
                raise InfercastError(f"layer {layer_idx} updated its cache twice in one forward; the static ABI "
                                     "expects one update per layer")
        self.tensors[2 * layer_idx], self.tensors[2 * layer_idx + 1] = pair
        return pair

    def flat(self) -> list[torch.Tensor]:
        missing = [i // 2 for i, t in enumerate(self.tensors) if t is None]
        if missing:
            raise InfercastError(f"layers {sorted(set(missing))} never wrote their cache; the static ABI expects "
                                 "every decoder layer to call the cache's update()")
        return list(self.tensors)


def causal_mask(query_positions: torch.Tensor, key_slots: int, dtype: torch.dtype) -> torch.Tensor:
    """Additive mask [1, 1, Q, key_slots]: 0 where the key slot is at or before the query's
    position, the dtype's lowest value elsewhere."""
    keys = torch.arange(key_slots, device=query_positions.device)
    allowed = keys.unsqueeze(0) <= query_positions.unsqueeze(1)
    mask = torch.full(allowed.shape, torch.finfo(dtype).min, dtype=dtype, device=query_positions.device)
    return mask.masked_fill(allowed, 0.0).unsqueeze(0).unsqueeze(0)


def _run(lm: nn.Module, input_ids: torch.Tensor, positions: torch.Tensor, key_slots: int, cache: ABICache):
    dtype = next(lm.parameters()).dtype
    out = lm(input_ids=input_ids, attention_mask=causal_mask(positions, key_slots, dtype),
             position_ids=positions.unsqueeze(0).expand(input_ids.shape[0], -1), past_key_values=cache,
             use_cache=True, logits_to_keep=1)
    return (out.logits, *cache.flat())


class PrefillABI(nn.Module):
    """``input_ids [B, S]`` -> ``(logits [B, 1, V], *cache)``; see the module docstring."""

    def __init__(self, lm: nn.Module) -> None:
        super().__init__()
        self.lm = lm

    def forward(self, input_ids: torch.Tensor) -> tuple[torch.Tensor, ...]:
        seq = input_ids.shape[1]
        return _run(self.lm, input_ids, torch.arange(seq, device=input_ids.device), seq, ABICache())


class DecodeABI(nn.Module):
    """``(input_ids [B, 1], cache_position [1], *cache)`` -> ``(logits [B, 1, V], *cache)``; see
    the module docstring. Build it with :meth:`named` so the graph inputs carry the cache names."""

    def __init__(self, lm: nn.Module) -> None:
        super().__init__()
        self.lm = lm

    def forward(self, input_ids: torch.Tensor, cache_position: torch.Tensor, *cache: torch.Tensor):
        slots = cache[0].shape[SEQ_AXIS]
        return _run(self.lm, input_ids, cache_position, slots, ABICache(cache, cache_position))

    @classmethod
    def named(cls, lm: nn.Module, cache_names: Sequence[str]) -> "DecodeABI":
        """A DecodeABI whose forward signature names every cache input, so ``torch.export``
        names the graph inputs ``input_ids``, ``cache_position``, ``layer_0_key``, ..."""
        names = ["self", "input_ids", "cache_position", *cache_names]

        def forward(self, *inputs):
            return cls.forward(self, *inputs)

        forward.__signature__ = inspect.Signature(
            [inspect.Parameter(n, inspect.Parameter.POSITIONAL_OR_KEYWORD) for n in names])
        named_class = type(cls.__name__, (cls,), {"forward": forward, "__doc__": cls.__doc__})
        return named_class(lm)
