"""Semantic operators: what a serving engine launches as one kernel.

Each is a ``torch.library`` custom op in the ``infercast`` namespace with a fake (meta)
kernel only: the simulator never computes, it records shapes. Scalar arguments carry what
shapes cannot (sequence counts, group sizes, quantization), so each cost formula in
:mod:`infercast.cost` has everything it needs from one recorded call.
"""

from __future__ import annotations

from typing import Optional

import torch

NAMESPACE = "infercast"


def _like(x: torch.Tensor, dtype: torch.dtype | None = None) -> torch.Tensor:
    """An empty tensor like ``x`` (``torch.empty_like`` on meta imports sympy on first use, ~0.4 s)."""
    return x.new_empty(x.shape, dtype=dtype or x.dtype)


# -- GEMMs -------------------------------------------------------------------------------


@torch.library.custom_op("infercast::gemm", mutates_args=())
def gemm(x: torch.Tensor, weight: torch.Tensor, dtype: str) -> torch.Tensor:
    """``x @ weight.T`` with an unpacked weight of shape [N, K]; ``dtype`` is the kernel's
    (``bf16``, ``fp8``, ``fp8_block``, ``int8``, ``w8a16``: see :mod:`infercast.quant`)."""
    raise NotImplementedError


@gemm.register_fake
def _(x, weight, dtype):
    return x.new_empty(*x.shape[:-1], weight.shape[0])


@torch.library.custom_op("infercast::quant_gemm", mutates_args=())
def quant_gemm(
    x: torch.Tensor, weight_packed: torch.Tensor, scale: torch.Tensor, out_features: int, dtype: str
) -> torch.Tensor:
    """GEMM reading a packed low-bit weight ([N, K*bits/32] int32) and its group scales."""
    raise NotImplementedError


@quant_gemm.register_fake
def _(x, weight_packed, scale, out_features, dtype):
    return x.new_empty(*x.shape[:-1], out_features)


@torch.library.custom_op("infercast::quantize_activation", mutates_args=())
def quantize_activation(x: torch.Tensor, dtype: str) -> torch.Tensor:
    """Per-token dynamic quantization of activations before a W8A8/W4A8/FP8 GEMM."""
    raise NotImplementedError


@quantize_activation.register_fake
def _(x, dtype):
    return _like(x, dtype=torch.int8)


# -- attention ---------------------------------------------------------------------------


@torch.library.custom_op("infercast::attention", mutates_args=())
def attention(
    q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, num_seqs: int, q_len: int, kv_len: int, causal: bool,
    window: int = 0,
) -> torch.Tensor:
    """Paged/flash attention: q [T, Hq, D] over each sequence's kv_len cached tokens
    (caches [num_seqs*kv_len, Hkv, D]); ``causal`` within the q_len new tokens; ``window`` > 0:
    each query attends to its last ``window`` tokens only (sliding-window attention)."""
    raise NotImplementedError


@attention.register_fake
def _(q, k_cache, v_cache, num_seqs, q_len, kv_len, causal, window=0):
    return q.new_empty(q.shape[0], q.shape[1], v_cache.shape[-1])


@torch.library.custom_op("infercast::mla_attention", mutates_args=())
def mla_attention(
    q: torch.Tensor, latent_cache: torch.Tensor, num_seqs: int, q_len: int, kv_len: int, v_head_dim: int
) -> torch.Tensor:
    """MLA decode in the absorbed form: q [T, H, kv_lora_rank + rope] against the shared
    latent cache [num_seqs*kv_len, kv_lora_rank + rope]; output [T, H, kv_lora_rank]."""
    raise NotImplementedError


@mla_attention.register_fake
def _(q, latent_cache, num_seqs, q_len, kv_len, v_head_dim):
    return q.new_empty(q.shape[0], q.shape[1], v_head_dim)


@torch.library.custom_op("infercast::mla_bmm", mutates_args=())
def mla_bmm(x: torch.Tensor, weight: torch.Tensor, which: str) -> torch.Tensor:
    """The absorbed MLA decode's per-head batched GEMM: ``x`` [H, T, K] @ ``weight`` [H, K, N];
    ``which`` is ``pre`` (q_nope into the latent space, K 128 -> N 512) or ``post`` (the
    latent output back to v, 512 -> 128). ``post`` writes [T, H, N] memory through its
    [H, T, N] view, as sglang does (``torch.bmm(..., out=buffer.transpose(0, 1))``), so the
    o_proj input is a view of it, not a copy."""
    raise NotImplementedError


@mla_bmm.register_fake
def _(x, weight, which):
    heads, tokens, n = x.shape[0], x.shape[1], weight.shape[-1]
    if which == "post":
        return x.new_empty_strided((heads, tokens, n), (n, heads * n, 1))
    return x.new_empty(heads, tokens, n)


@torch.library.custom_op("infercast::mla_prefill_attention", mutates_args=())
def mla_prefill_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, num_seqs: int, q_len: int, kv_len: int, cache_dtype: str
) -> torch.Tensor:
    """MLA in the expanded form engines use for prefill: q and k with nope + rope dims (192 for
    DeepSeek-V3), v with v_head_dim (128), causal over each sequence's ``kv_len`` tokens;
    ``cache_dtype`` is the KV cache's (an engine may run the attention in it)."""
    raise NotImplementedError


@mla_prefill_attention.register_fake
def _(q, k, v, num_seqs, q_len, kv_len, cache_dtype):
    return q.new_empty(q.shape[0], q.shape[1], v.shape[-1])


@torch.library.custom_op("infercast::kv_cache_write", mutates_args=())
def kv_cache_write(k: torch.Tensor, v: Optional[torch.Tensor], cache_dtype: str) -> torch.Tensor:
    """Store the step's new K and V rows (or, with ``v`` None, MLA's latent rows) into the
    paged cache in one kernel, as sglang's ``store_cache`` and vLLM's ``reshape_and_cache_flash`` do."""
    raise NotImplementedError


@kv_cache_write.register_fake
def _(k, v, cache_dtype):
    return k.new_empty(0)


@torch.library.custom_op("infercast::rope_kv_cache_write", mutates_args=())
def rope_kv_cache_write(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, cache_dtype: str) -> torch.Tensor:
    """RoPE on q and k and the new K and V rows into the paged cache in one kernel, returning the
    rotated q (TensorRT-LLM's QKV preprocessing before attention)."""
    raise NotImplementedError


@rope_kv_cache_write.register_fake
def _(q, k, v, cache_dtype):
    return _like(q)


@torch.library.custom_op("infercast::rope", mutates_args=())
def rope(q: torch.Tensor, k: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Rotary embedding applied to q and k in one kernel."""
    raise NotImplementedError


@rope.register_fake
def _(q, k):
    return _like(q), _like(k)


@torch.library.custom_op("infercast::cat", mutates_args=())
def cat(tensors: list[torch.Tensor], dim: int) -> torch.Tensor:
    """Concatenate along ``dim`` (a copy kernel; its meta ``aten::cat`` would import sympy)."""
    raise NotImplementedError


@cat.register_fake
def _(tensors, dim):
    first = tensors[0]
    dim = dim % first.dim()
    shape = list(first.shape)
    shape[dim] = sum(t.shape[dim] for t in tensors)
    return first.new_empty(shape)


@torch.library.custom_op("infercast::add", mutates_args=())
def add(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Elementwise sum (a residual or a second branch joined)."""
    raise NotImplementedError


@add.register_fake
def _(a, b):
    return _like(a)


@torch.library.custom_op("infercast::index", mutates_args=())
def index(x: torch.Tensor, rows: int) -> torch.Tensor:
    """Gather ``rows`` rows of ``x`` (the last token of each request before the lm_head)."""
    raise NotImplementedError


@index.register_fake
def _(x, rows):
    return x.new_empty(rows, *x.shape[1:])


# -- elementwise kernels engines fuse ----------------------------------------------------


@torch.library.custom_op("infercast::rms_norm", mutates_args=())
def rms_norm(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    raise NotImplementedError


@rms_norm.register_fake
def _(x, weight):
    return _like(x)


@torch.library.custom_op("infercast::fused_add_rms_norm", mutates_args=())
def fused_add_rms_norm(x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Residual add followed by RMSNorm; returns (normed, new residual)."""
    raise NotImplementedError


@fused_add_rms_norm.register_fake
def _(x, residual, weight):
    return _like(x), _like(residual)


@torch.library.custom_op("infercast::layer_norm", mutates_args=())
def layer_norm(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    """LayerNorm with affine weight and bias (vision encoders, projectors)."""
    raise NotImplementedError


@layer_norm.register_fake
def _(x, weight, bias):
    return _like(x)


@torch.library.custom_op("infercast::gelu", mutates_args=())
def gelu(x: torch.Tensor) -> torch.Tensor:
    """GELU (tanh or erf form; same cost)."""
    raise NotImplementedError


@gelu.register_fake
def _(x):
    return _like(x)


@torch.library.custom_op("infercast::silu_and_mul", mutates_args=())
def silu_and_mul(x: torch.Tensor) -> torch.Tensor:
    """``silu(x[..., :n]) * x[..., n:]`` for the fused gate/up projection output."""
    raise NotImplementedError


@silu_and_mul.register_fake
def _(x):
    return x.new_empty(*x.shape[:-1], x.shape[-1] // 2)


@torch.library.custom_op("infercast::embedding", mutates_args=())
def embedding(ids: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    raise NotImplementedError


@embedding.register_fake
def _(ids, weight):
    return weight.new_empty(ids.shape[0], weight.shape[1])


# -- MoE ---------------------------------------------------------------------------------


@torch.library.custom_op("infercast::fused_moe", mutates_args=())
def fused_moe(
    x: torch.Tensor, w13: torch.Tensor, w13_scale: torch.Tensor, w2: torch.Tensor, w2_scale: torch.Tensor,
    num_tokens: int, top_k: int, num_experts: int, local_experts: int, routed_rows: float, active_experts: float,
    straggler: float, moe_tp: int, dtype: str, distribution: str, dispatch: str, runner: str = "",
) -> torch.Tensor:
    """The routed experts on one rank, as engines launch them (sglang's fused MoE, marlin or
    DeepGEMM): top-k selection, token permutation, the gate/up grouped GEMM, SiLU-and-mul, the
    down grouped GEMM and the weighted un-permute. ``x`` is what enters the experts on this rank
    (tokens, or dispatched rows under EP); ``w13``/``w2`` hold the ``local_experts`` experts.

    ``num_tokens``: tokens before routing that the expert group sees (summed over DP ranks);
    ``routed_rows``: expected (token, expert) rows this rank computes under balanced routing;
    ``active_experts``: expected local experts touched (on the busiest rank, under balanced
    routing); ``straggler``: the busiest rank's load over the mean (uneven random picks under
    expert parallelism, or the skew of ``distribution``; 1 at EP 1); ``dispatch``: how the tokens
    reach the experts (:attr:`~infercast.layers.SimContext.moe_dispatch`); ``runner``: the kernel
    the engine launches for this architecture (:attr:`~infercast.layers.SimContext.moe_runner`;
    ``""``: the engine's kernels for ``dtype``)."""
    raise NotImplementedError


@fused_moe.register_fake
def _(x, w13, w13_scale, w2, w2_scale, num_tokens, top_k, num_experts, local_experts, routed_rows, active_experts,
      straggler, moe_tp, dtype, distribution, dispatch, runner=""):
    return _like(x)


@torch.library.custom_op("infercast::to_dtype", mutates_args=())
def to_dtype(x: torch.Tensor, dtype: str) -> torch.Tensor:
    """``x`` copied into ``dtype`` (``fp32``) by a kernel of its own, as ``tensor.to()`` launches it."""
    raise NotImplementedError


@to_dtype.register_fake
def _(x, dtype):
    return _like(x, dtype=TORCH_DTYPES[dtype])


TORCH_DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}
"""The dtypes :func:`to_dtype` converts to, by name."""


# -- collectives -------------------------------------------------------------------------


@torch.library.custom_op("infercast::all_reduce", mutates_args=())
def all_reduce(x: torch.Tensor, group_size: int, group: str) -> torch.Tensor:
    raise NotImplementedError


@all_reduce.register_fake
def _(x, group_size, group):
    return _like(x)


@torch.library.custom_op("infercast::all_gather", mutates_args=())
def all_gather(x: torch.Tensor, group_size: int, group: str) -> torch.Tensor:
    """Concatenate every rank's ``x`` along dim 0 (or the last dim for logits)."""
    raise NotImplementedError


@all_gather.register_fake
def _(x, group_size, group):
    return x.new_empty(x.shape[0] * group_size, *x.shape[1:])


@torch.library.custom_op("infercast::reduce_scatter", mutates_args=())
def reduce_scatter(x: torch.Tensor, group_size: int, group: str) -> torch.Tensor:
    raise NotImplementedError


@reduce_scatter.register_fake
def _(x, group_size, group):
    return x.new_empty(max(1, -(-x.shape[0] // group_size)), *x.shape[1:])


@torch.library.custom_op("infercast::all_to_all", mutates_args=())
def all_to_all(
    x: torch.Tensor, out_rows: int, group_size: int, group: str, phase: str, mode: str, top_k: int, num_experts: int,
    destinations: float,
) -> torch.Tensor:
    """EP dispatch (this rank's tokens ``x`` [T, H] to their experts' ranks) or combine (the
    expert outputs back), as DeepEP runs it: ``mode`` ``normal`` (prefill: a token crosses to
    each destination node once and is forwarded inside the node) or ``ll`` (low latency,
    decode: one message per (token, expert) pair). ``x``'s dtype is what travels (FP8 for
    dispatch, bf16 for combine); ``destinations``: expected distinct nodes (normal) a token
    reaches; ``out_rows``: rows this rank receives."""
    raise NotImplementedError


@all_to_all.register_fake
def _(x, out_rows, group_size, group, phase, mode, top_k, num_experts, destinations):
    return x.new_empty(out_rows, *x.shape[1:])


COLLECTIVES = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all")
