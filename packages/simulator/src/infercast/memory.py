"""One memory model for simulate and plan: weights, KV cache and activations per device."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from infercast.devices import GIB, DeviceSpec

if TYPE_CHECKING:
    from infercast.build import BuiltModel
    from infercast.layers import SimContext
    from infercast.trace import OpRecord

MEMORY_FRACTION = 0.90
"""Share of device memory for weights, KV cache and activations (the rest: CUDA context,
graphs, allocator slack), close to sglang's ``mem_fraction_static`` on large GPUs."""


def kv_bytes_per_token(built: BuiltModel) -> int:
    """Cache bytes a token takes on a rank, over every decoder layer."""
    return sum(layer.self_attn.kv_bytes_per_token() for layer in built.sim.layers)


def usable_bytes(device: DeviceSpec) -> float:
    return device.memory_bytes * MEMORY_FRACTION


def memory(built: BuiltModel, records: list[OpRecord], device: DeviceSpec, ctx: SimContext, extra_weight_bytes: int = 0,
           extra_kv_per_token: int = 0) -> tuple[dict[str, float], int]:
    """Per device: weights, the KV cache of this step's requests, the largest live activation,
    their total against the usable capacity, and how many requests fit at this context."""
    weights = built.sim.weight_bytes() + extra_weight_bytes
    kv_per_token = kv_bytes_per_token(built) + extra_kv_per_token
    kv = kv_per_token * ctx.requests * ctx.workload.kv_length
    activation = 0
    for r in records:
        inputs = r.tensors()[:1] if r.name in ("infercast::attention", "infercast::mla_attention") else r.tensors()
        live = sum(t.nbytes for t in inputs if t.role == "activation") + sum(o.nbytes for o in r.outputs)
        activation = max(activation, live)
    capacity = usable_bytes(device)
    per_request = kv_per_token * ctx.workload.kv_length + activation / max(ctx.requests, 1)
    max_requests = max(0, math.floor((capacity - weights) / per_request)) * ctx.parallel.dp if per_request else 0
    memory = {
        "weights": weights / GIB, "kv_cache": kv / GIB, "activations": activation / GIB,
        "total": (weights + kv + activation) / GIB, "capacity": capacity / GIB,
        "kv_cache_per_token_mib": kv_per_token / 2**20,
    }
    return memory, max_requests


def kv_pool_tokens(built: BuiltModel, device: DeviceSpec, *, layers: int | None = None) -> int:
    """The KV pool's slots per rank when the engine gives the cache all the usable memory the
    target's weights leave (sglang sizes ``max_total_tokens`` so; activations and a speculative
    draft's 1-2 GiB are left out), at least one. ``layers``: the model's real depth where fewer
    decoder layers were built (``--num-hidden-layers-override``, which keeps the first ones):
    each one left out weighs and caches as the last one built."""
    built_layers = built.sim.layers
    missing = max(0, (layers or len(built_layers)) - len(built_layers))
    last = built_layers[-1]  # the layers left out are the last ones, built like it
    weights = built.sim.weight_bytes() + missing * last.weight_bytes()
    kv_per_token = kv_bytes_per_token(built) + missing * last.self_attn.kv_bytes_per_token()
    free = usable_bytes(device) - weights
    return max(1, math.floor(free / kv_per_token)) if kv_per_token else 1
