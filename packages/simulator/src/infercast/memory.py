"""One memory model for simulate and plan: weights, KV cache and activations per device."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from infercast.devices import GIB, DeviceSpec

if TYPE_CHECKING:
    from infercast.build import BuiltModel
    from infercast.layers import SimContext
    from infercast.trace import OpRecord

DEFAULT_MEMORY_FRACTION = 0.90
"""Share of device memory for weights, KV cache and activations (the rest: CUDA context,
graphs, allocator slack) when the request names none: vLLM's ``--gpu-memory-utilization``
default, and about sglang's ``--mem-fraction-static`` on 141 GB cards (0.897 at TP8 on an H200:
server_args.py, ``_handle_gpu_memory_settings``, reserves at least 10 GiB there)."""


@dataclass(frozen=True)
class MemoryLimits:
    """What the engine may take of each device: ``fraction`` of its memory for weights, KV cache
    and activations (sglang's ``--mem-fraction-static``, vLLM's ``--gpu-memory-utilization``), and
    at most ``max_total_tokens`` KV cache slots a rank (sglang's ``--max-total-tokens``; None:
    every slot the memory left after the weights holds)."""

    fraction: float = DEFAULT_MEMORY_FRACTION
    max_total_tokens: int | None = None

    @classmethod
    def asked(cls, fraction: float | None, max_total_tokens: int | None) -> MemoryLimits:
        """The limits a request gives (``--mem-fraction-static``, ``--max-total-tokens``), defaults for None."""
        return cls(DEFAULT_MEMORY_FRACTION if fraction is None else fraction, max_total_tokens)

    def usable_bytes(self, device: DeviceSpec) -> float:
        return device.memory_bytes * self.fraction

    def pool_tokens(self, device: DeviceSpec, weight_bytes: float, kv_bytes_per_token: int) -> int:
        """KV cache slots a rank: what the usable memory holds after ``weight_bytes`` (0 when
        the weights do not fit), capped at ``max_total_tokens``."""
        free = max(0.0, self.usable_bytes(device) - weight_bytes)
        slots = math.floor(free / kv_bytes_per_token) if kv_bytes_per_token else 0
        return slots if self.max_total_tokens is None else min(slots, self.max_total_tokens)

    def describe(self, device: DeviceSpec) -> str:
        cap = f"; at most {self.max_total_tokens:,} KV slots a rank" if self.max_total_tokens is not None else ""
        return f"{self.fraction:.0%} of {device.memory_bytes / GIB:.1f} GiB{cap}"


def kv_bytes_per_token(built: BuiltModel) -> int:
    """Cache bytes a token takes on a rank, over every decoder layer."""
    return sum(layer.self_attn.kv_bytes_per_token() for layer in built.sim.layers)


def kv_bytes_held(built: BuiltModel, tokens: int, sliding: Any = None) -> float:
    """Cache bytes a request of ``tokens`` holds on a rank: each layer's bytes per token for every
    token it keeps, a sliding-window layer's as the engine's ``sliding``
    (:class:`~infercast.engines.SlidingKV`) keeps them (None: the whole context)."""
    total = 0.0
    for layer in built.sim.layers:
        window = getattr(layer.self_attn, "window", 0)
        held = sliding.held(tokens, window) if window and sliding is not None else tokens
        total += layer.self_attn.kv_bytes_per_token() * held
    return total


def memory(built: BuiltModel, records: list[OpRecord], device: DeviceSpec, ctx: SimContext, extra_weight_bytes: int = 0,
           extra_kv_per_token: int = 0) -> tuple[dict[str, float], int]:
    """Per device: weights, the KV cache of this step's requests, the largest live activation,
    their total against the usable capacity (``ctx.memory``), the KV slots the step needs against
    the pool's, and how many requests fit at this context."""
    weights = built.sim.weight_bytes() + extra_weight_bytes
    kv_per_token = kv_bytes_per_token(built) + extra_kv_per_token
    held = kv_bytes_held(built, ctx.workload.kv_length, ctx.sliding_kv) + extra_kv_per_token * ctx.workload.kv_length
    kv = held * ctx.requests
    activation = 0
    for r in records:
        inputs = r.tensors()[:1] if r.name in ("infercast::attention", "infercast::mla_attention") else r.tensors()
        live = sum(t.nbytes for t in inputs if t.role == "activation") + sum(o.nbytes for o in r.outputs)
        activation = max(activation, live)
    limits = ctx.memory
    capacity = limits.usable_bytes(device)
    per_request = held + activation / max(ctx.requests, 1)
    max_requests = max(0, math.floor((capacity - weights) / per_request)) if per_request else 0
    if limits.max_total_tokens is not None and ctx.workload.kv_length:
        max_requests = min(max_requests, limits.max_total_tokens // ctx.workload.kv_length)
    memory = {
        "weights": weights / GIB, "kv_cache": kv / GIB, "activations": activation / GIB,
        "total": (weights + kv + activation) / GIB, "capacity": capacity / GIB,
        "kv_cache_per_token_mib": kv_per_token / 2**20, "fraction": limits.fraction,
        "kv_slots_needed": ctx.requests * ctx.workload.kv_length,
        "kv_slots": limits.pool_tokens(device, weights, kv_per_token),
    }
    return memory, max_requests * ctx.parallel.dp


def kv_pool_tokens(built: BuiltModel, device: DeviceSpec, limits: MemoryLimits, *, layers: int | None = None) -> int:
    """The KV pool's slots per rank when the engine gives the cache all the usable memory the
    target's weights leave (sglang sizes ``max_total_tokens`` so; activations and a speculative
    draft's 1-2 GiB are left out), capped by ``limits.max_total_tokens``, at least one.
    ``layers``: the model's real depth where fewer decoder layers were built
    (``--num-hidden-layers-override``, which keeps the first ones): each one left out weighs and
    caches as the last one built."""
    built_layers = built.sim.layers
    missing = max(0, (layers or len(built_layers)) - len(built_layers))
    last = built_layers[-1]  # the layers left out are the last ones, built like it
    weights = built.sim.weight_bytes() + missing * last.weight_bytes()
    kv_per_token = kv_bytes_per_token(built) + missing * last.self_attn.kv_bytes_per_token()
    return max(1, limits.pool_tokens(device, weights, kv_per_token)) if kv_per_token else 1
