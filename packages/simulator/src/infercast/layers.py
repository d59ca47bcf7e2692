"""Simulator layers: one rank's share of each module, calling the kernels an engine launches.

They hold meta tensors of their per-rank weights (packed when quantized), so weight memory
is read off the same objects the trace runs. Layouts follow sglang: MLA with a replicated
fused QKV-down projection, heads split over TP, the absorbed form in decode; QKV fused for
GQA; gate and up fused for MLPs; routed experts as a grouped GEMM; collectives where the
engine puts them.
"""

from __future__ import annotations

import contextlib
import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Iterator

import torch
from infercast_adapters import InfercastError
from torch import nn

from infercast import ops  # noqa: F401  (registers torch.ops.infercast)
from infercast import routing
from infercast.memory import MemoryLimits
from infercast.parallel import Parallel, Workload
from infercast.quant import BF16, FP32, QuantPlan, QuantScheme

if TYPE_CHECKING:
    from infercast.engines import PointwiseFusions

OPS = torch.ops.infercast
ACT_DTYPE = torch.bfloat16
META = torch.device("meta")

KV_DTYPES = {"bf16": torch.bfloat16, "auto": torch.bfloat16, "fp16": torch.float16, "fp8": torch.float8_e4m3fn,
             "fp8_e4m3": torch.float8_e4m3fn, "fp8_e5m2": torch.float8_e5m2}


@dataclass
class SimContext:
    """What every layer needs to shard and size itself. Layers read ``workload`` only when
    they run, so one built model is traced for many workloads (:meth:`using`)."""

    parallel: Parallel
    workload: Workload
    quant: QuantPlan
    kv_cache_dtype: torch.dtype = torch.bfloat16
    mtp_quant: QuantPlan | None = None
    """The checkpoint's plan for its MTP layer where it differs from the decoder's (NVIDIA's NVFP4
    DeepSeek checkpoints keep it in bf16); None: the decoder's."""
    expert_imbalance: str = "balanced"
    """Routing distribution over experts (:mod:`infercast.routing`)."""
    prefill_graph_tokens: int = 0
    """The most tokens per rank a prefill forward replays from piecewise CUDA graphs (0: every
    prefill forward launches eagerly); set by :func:`infercast.pricing.prefill_graph_tokens`."""
    decode_graph_tokens: int | None = None
    """The most tokens per rank a decode step replays a CUDA graph for where the launch sets the
    engine's capture size (vLLM's one size list bounds decode too); None: the engine's default
    batch limit. Set by :func:`infercast.pricing.decode_graph_tokens`."""
    all_reduce_fusion_tokens: int = 0
    """The most tokens per rank for which each decoder layer's all-reduce and the RMSNorm after it
    run as one kernel (0: never); set by :func:`infercast.pricing.all_reduce_fusion`."""
    memory: MemoryLimits = field(default_factory=MemoryLimits)
    """The share of each device the engine may take and the KV pool's cap (the request's
    ``--mem-fraction-static`` and ``--max-total-tokens``)."""
    kv_pool_tokens: int = 0
    """The KV pool's slots per rank where the engine's MLA decode casts the whole FP8 pool to bf16
    every layer (0: it does not); set by :func:`infercast.pricing.mla_pool_cast`."""
    absorbed_prefix_below: int = 0
    """An MLA prefill whose requests have between 1 and this many cached tokens in all, less one,
    attends in the absorbed form, as decode does (0: every prefill expands its cache); set by
    :func:`infercast.pricing.absorbed_prefix_below`."""
    absorbed_in_graphs: bool = False
    """An MLA prefill that replays piecewise CUDA graphs attends in the absorbed form (the
    engine's rule, for a model with MLA)."""
    in_prefill_graphs: bool = False
    """The forward being traced replays piecewise CUDA graphs: set around a trace from its
    phase (:meth:`replaying_graphs`)."""
    attn_input_scattered: bool = False
    """The engine's scattered attention input is on for this deployment (sglang's
    ``--enable-attn-tp-input-scattered`` where its checks pass): prefill forwards keep each
    layer's input reduce-scattered over TP (:attr:`scatters_attn_input`); set by
    :func:`infercast.pricing.scattered_attention_input`."""
    moe_runner: str = ""
    """The fused-MoE kernel the engine's defaults launch for this model's architecture (``""``:
    the engine's kernels for the experts' dtype); set by :func:`infercast.pricing.moe_runner`."""
    pointwise: PointwiseFusions | None = None
    """Pointwise kernels the serving engine folds into their neighbours (the engine's). Its FP8
    fusions apply to the ``fp8`` kernel family (no block scales: TensorRT-LLM's per-tensor FP8);
    block-scaled FP8 keeps its per-group quantize kernels."""
    sliding_kv: Any = None
    """The engine's :class:`~infercast.engines.SlidingKV` (None: a sliding layer's cache holds the
    whole context)."""
    fp32_router: Any = None
    """The engine's :class:`~infercast.engines.FP32Router` (None: every router GEMM in bf16);
    read when the model is built."""

    moe_all_to_all: bool = True
    """Under expert parallelism, tokens reach their experts' ranks through an all-to-all backend
    (DeepEP); False: the engine's standard dispatcher (set from
    :attr:`~infercast.engines.Engine.moe_all_to_all` before the model is built)."""

    @property
    def moe_dispatch(self) -> str:
        """How routed experts see tokens: ``tp`` (no expert parallelism: every rank holds a slice
        of every expert), ``all_to_all`` (each rank's tokens are sent to their experts' ranks) or
        ``local`` (every rank runs its local experts over all of the group's tokens, gathered
        first under DP attention; the layer's all-reduce or reduce-scatter sums the outputs)."""
        if self.parallel.ep == 1:
            return "tp"
        return "all_to_all" if self.moe_all_to_all else "local"

    def using(self, workload: Workload) -> contextlib.AbstractContextManager[None]:
        """Trace (and size) for ``workload`` inside the block."""
        return self._swapped("workload", workload)

    @property
    def cached_tokens(self) -> int:
        """Cached prompt tokens of this rank's requests in all (the workload's prefix)."""
        return self.requests * self.workload.context_length

    @property
    def absorbs_prefix(self) -> bool:
        """Whether this prefill's short cached prefix makes the engine's MLA attend in the absorbed form."""
        return not self.workload.decode and 0 < self.cached_tokens < self.absorbed_prefix_below

    @property
    def scatters_attn_input(self) -> bool:
        """Whether the forward being traced runs with the attention input scattered: prefill and
        mixed steps of a deployment that has it on (not decode, not a draft's extend)."""
        return self.attn_input_scattered and not self.workload.decode

    def scattering(self, on: bool) -> contextlib.AbstractContextManager[None]:
        """Trace for a server that has the scattered attention input ``on`` (or off) inside the
        block; off also for a forward the engine never scatters (a draft's extend)."""
        return self._swapped("attn_input_scattered", on)

    def replaying_graphs(self, on: bool) -> contextlib.AbstractContextManager[None]:
        """Trace a forward that does (``on``) or does not replay piecewise CUDA graphs."""
        return self._swapped("in_prefill_graphs", on)

    @contextlib.contextmanager
    def _swapped(self, name: str, value: Any) -> Iterator[None]:
        previous = getattr(self, name)
        setattr(self, name, value)
        try:
            yield
        finally:
            setattr(self, name, previous)

    @property
    def requests(self) -> int:
        return self.workload.requests_per_rank(self.parallel)

    @property
    def tokens(self) -> int:
        return self.workload.tokens_per_rank(self.parallel)


def by_part(ctx: SimContext, tensors: tuple[torch.Tensor, ...], core) -> torch.Tensor:
    """Run an attention core once per part of the step (one part, or a mixed step's decoding
    requests and prompt chunks, :class:`~infercast.parallel.MixedWorkload`), each on its rows
    of ``tensors`` and under its own workload; the outputs fill one tensor, as a varlen kernel
    writes them."""
    parts = ctx.workload.parts
    if len(parts) == 1:
        return core(*tensors)
    outputs, start = [], 0
    for part in parts:
        rows = part.tokens_per_rank(ctx.parallel)
        with ctx.using(part):
            outputs.append(core(*(t[start:start + rows] for t in tensors)))
        start += rows
    return outputs[0].new_empty((tensors[0].shape[0], *outputs[0].shape[1:]))


_GENERATION = [0]
"""Bumped whenever a simulator module gains a weight or a submodule: the per-module caches
below (weight ids, names, signatures, weight bytes) are valid for one generation."""


def structure_changed() -> None:
    """Say that weights or submodules were added or replaced outside :meth:`SimModule.weight`."""
    _GENERATION[0] += 1


class SimModule(nn.Module):
    """A module whose weights are per-rank meta tensors listed in ``self.weights``.

    What a trace needs about the module tree (weight ids, module names, layer signatures,
    weight bytes) is computed once and cached until the tree changes: walking the ~2,200
    weights of a 61-layer model for every trace took a third of a plan's time. A copy
    (``copy.deepcopy``, pickling) starts without these caches, since its tensors are new."""

    _CACHES = ("_weight_ids", "_module_names", "_signature", "_weight_bytes")

    def __init__(self) -> None:
        super().__init__()
        self.weights: dict[str, torch.Tensor] = {}
        self.logical_params = 0
        """Parameters of the unsharded module this rank holds a share of (0 if counted by a child)."""

    def __setattr__(self, name: str, value: object) -> None:
        if isinstance(value, (nn.Module, torch.Tensor)):
            structure_changed()
        super().__setattr__(name, value)

    def __getstate__(self) -> dict:
        return {k: v for k, v in super().__getstate__().items() if k not in self._CACHES}

    def _cached(self, key: str, compute: Callable[[], object]) -> object:
        entry = self.__dict__.get(key)
        if entry is None or entry[0] != _GENERATION[0]:
            entry = self.__dict__[key] = (_GENERATION[0], compute())
        return entry[1]

    def weight(self, name: str, shape: tuple[int, ...], dtype: torch.dtype = ACT_DTYPE) -> torch.Tensor:
        tensor = torch.empty(*shape, dtype=dtype, device=META)
        self.weights[name] = tensor
        structure_changed()
        return tensor

    def all_weights(self) -> Iterator[tuple[str, torch.Tensor]]:
        for prefix, module in self.named_modules():
            if isinstance(module, SimModule):
                for name, tensor in module.weights.items():
                    yield f"{prefix}.{name}".lstrip("."), tensor

    def weight_bytes(self) -> int:
        """Bytes of the distinct weight tensors (a tied matrix is stored once)."""
        def compute() -> int:
            unique = {id(t): t for _, t in self.all_weights()}
            return sum(t.numel() * t.element_size() for t in unique.values())

        return self._cached("_weight_bytes", compute)

    def total_logical_params(self) -> int:
        return sum(m.logical_params for m in self.modules() if isinstance(m, SimModule))

    def signature(self) -> tuple:
        """Identical signatures trace identically (same classes, same per-rank shapes)."""
        return self._cached("_signature", lambda: tuple(
            (type(m).__name__, tuple((n, tuple(t.shape), t.dtype) for n, t in m.weights.items()))
            for m in self.modules() if isinstance(m, SimModule)))

    def weight_ids(self) -> frozenset[int]:
        """The ids of every weight tensor under this module, MLA's absorbed ``w_kc``/``w_vc``
        views included: what a trace tells apart from activations."""
        def compute() -> frozenset[int]:
            ids = {id(t) for _, t in self.all_weights()}
            ids |= {id(getattr(m, a)) for m in self.modules() for a in ("w_kc", "w_vc") if hasattr(m, a)}
            return frozenset(ids)

        return self._cached("_weight_ids", compute)

    def module_names(self) -> dict[int, str]:
        """Qualified name of every submodule by id."""
        return self._cached("_module_names", lambda: {id(m): n for n, m in self.named_modules()})


def _shard(size: int, parts: int, what: str) -> int:
    if size % parts:
        valid = [d for d in range(1, parts + 1) if size % d == 0]
        raise InfercastError(f"the {what} ({size}) cannot be split over {parts} ranks; this layout needs a split "
                             f"that divides it ({', '.join(map(str, valid[-6:]))} ...); for routed experts the split "
                             f"is --num-devices / --ep-size")
    return size // parts


class SimLinear(SimModule):
    """One (possibly quantized, possibly TP-sharded) linear layer: y = x @ W.T."""

    def __init__(self, in_features: int, out_features: int, scheme: QuantScheme, *, shard: str = "replicated",
                 tp: int = 1) -> None:
        super().__init__()
        self.logical_params = in_features * out_features
        if shard == "column":
            out_features = _shard(out_features, tp, "column-parallel output")
        elif shard == "row":
            in_features = _shard(in_features, tp, "row-parallel input")
        self.in_features, self.out_features, self.scheme = in_features, out_features, scheme
        if scheme.packed:
            per_int32 = 32 // scheme.weight_bits
            self.weight("weight_packed", (out_features, math.ceil(in_features / per_int32)), torch.int32)
            groups = math.ceil(in_features / (scheme.group_size or in_features))
            self.weight("weight_scale", (out_features, groups), torch.bfloat16 if scheme.scale_bits == 16 else torch.uint8)
        elif scheme.weight_bits == 8:
            dtype = torch.float8_e4m3fn if scheme.compute_dtype == "fp8" else torch.int8
            self.weight("weight", (out_features, in_features), dtype)
            if scheme.block:
                self.weight("weight_scale", (math.ceil(out_features / scheme.block[0]), math.ceil(in_features / scheme.block[1])), torch.float32)
            else:
                self.weight("weight_scale", (out_features, 1), torch.float32)
        else:
            self.weight("weight", (out_features, in_features), torch.float32 if scheme.weight_bits == 32 else ACT_DTYPE)

    def forward(self, x: torch.Tensor, quantized_input: bool = False) -> torch.Tensor:
        """``quantized_input``: the producer of ``x`` already wrote it in the compute dtype."""
        scheme = self.scheme
        if scheme.weight_bits >= 16:
            return OPS.gemm(x, self.weights["weight"], scheme.kernel_dtype)
        if scheme.dynamic_activation and not quantized_input:
            OPS.quantize_activation(x, scheme.compute_dtype)
        weight = self.weights["weight_packed"] if scheme.packed else self.weights["weight"]
        return OPS.quant_gemm(x, weight, self.weights["weight_scale"], self.out_features, scheme.kernel_dtype)


class SimRMSNorm(SimModule):
    def __init__(self, hidden_size: int) -> None:
        super().__init__()
        self.logical_params = hidden_size
        self.weight("weight", (hidden_size,))

    def forward(self, x: torch.Tensor, residual: torch.Tensor | None = None):
        if residual is None:
            return OPS.rms_norm(x, self.weights["weight"])
        return OPS.fused_add_rms_norm(x, residual, self.weights["weight"])


class SimMLP(SimModule):
    """Gated MLP: fused gate/up GEMM, SiLU-and-mul, down GEMM (no collective: the caller reduces)."""

    def __init__(self, hidden_size: int, intermediate_size: int, scheme: QuantScheme, tp: int,
                 ctx: SimContext | None = None) -> None:
        super().__init__()
        self.ctx = ctx
        self.gate_up_proj = SimLinear(hidden_size, 2 * intermediate_size, scheme, shard="column", tp=tp)
        self.down_proj = SimLinear(intermediate_size, hidden_size, scheme, shard="row", tp=tp)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        ctx = self.ctx
        fusions = ctx.pointwise if ctx else None
        fused = bool(fusions and fusions.fp8_swiglu and self.down_proj.scheme.kernel_dtype == "fp8")
        normed = bool(fusions and fusions.fp8_norm and self.gate_up_proj.scheme.kernel_dtype == "fp8")
        return self.down_proj(OPS.silu_and_mul(self.gate_up_proj(x, quantized_input=normed)), quantized_input=fused)


class SimGQAAttention(SimModule):
    """Multi-head / grouped-query attention with a paged KV cache."""

    def __init__(self, ctx: SimContext, *, hidden_size: int, num_heads: int, num_kv_heads: int, head_dim: int,
                 qk_norm: bool, bias: bool = False, input_size: int | None = None,
                 qk_norm_across_heads: bool = False, window: int = 0) -> None:
        """``input_size``: width of the attention input when it is not ``hidden_size`` (an
        EAGLE3 draft layer reads 2 x hidden). ``qk_norm_across_heads``: the query and key norms
        span all heads (MiniMax-M2), so TP ranks all-reduce each token's two sums of squares.
        ``window``: the layer's sliding window (0: it attends to the whole context)."""
        super().__init__()
        tp = ctx.parallel.tp
        self.ctx = ctx
        self.heads = _shard(num_heads, tp, "attention heads")
        self.kv_heads = max(1, num_kv_heads // tp)  # KV heads are replicated when TP exceeds them
        self.head_dim = head_dim
        self.window = window
        width = input_size or hidden_size
        self.qkv_proj = SimLinear(width, (self.heads + 2 * self.kv_heads) * head_dim, ctx.quant.attention_input)
        self.qkv_proj.logical_params = width * (num_heads + 2 * num_kv_heads) * head_dim
        self.o_proj = SimLinear(num_heads * head_dim, hidden_size, ctx.quant.attention_output, shard="row", tp=tp)
        self.qk_norm_across_heads = qk_norm and qk_norm_across_heads
        if self.qk_norm_across_heads:
            self.q_norm, self.k_norm = SimRMSNorm(self.heads * head_dim), SimRMSNorm(self.kv_heads * head_dim)
            self.q_norm.logical_params, self.k_norm.logical_params = num_heads * head_dim, num_kv_heads * head_dim
        else:
            self.q_norm = SimRMSNorm(head_dim) if qk_norm else None
            self.k_norm = SimRMSNorm(head_dim) if qk_norm else None

    def kv_bytes_per_token(self) -> int:
        return 2 * self.kv_heads * self.head_dim * self.ctx.kv_cache_dtype.itemsize

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        ctx, T = self.ctx, x.shape[0]
        normed = bool(ctx.pointwise and ctx.pointwise.fp8_norm and self.qkv_proj.scheme.kernel_dtype == "fp8")
        qkv = self.qkv_proj(x, quantized_input=normed)
        q, k, v = qkv.split([self.heads * self.head_dim, self.kv_heads * self.head_dim, self.kv_heads * self.head_dim], -1)
        if self.qk_norm_across_heads:
            # each rank holds some heads, so the norms' mean squares need every rank's partial sums:
            # one all-reduce of both (vLLM's MiniMaxText01RMSNormTP.forward_qk; sglang's
            # MiniMaxM2QKRMSNorm between its sum-of-squares and apply kernels)
            if ctx.parallel.tp > 1:
                OPS.all_reduce(q.new_empty(T, 2, dtype=torch.float32), ctx.parallel.tp, "attn_tp")
            q, k = self.q_norm(q), self.k_norm(k)
        q = q.reshape(T, self.heads, self.head_dim)
        k = k.reshape(T, self.kv_heads, self.head_dim)
        if self.q_norm is not None and not self.qk_norm_across_heads:
            q, k = self.q_norm(q), self.k_norm(k)
        fusions = ctx.pointwise
        if fusions and fusions.rope_in_cache_write:
            q = OPS.rope_kv_cache_write(q, k, v, str(ctx.kv_cache_dtype))
        else:
            q, k = OPS.rope(q, k)
            OPS.kv_cache_write(k.reshape(T, -1), v, str(ctx.kv_cache_dtype))
        out = by_part(ctx, (q,), self._attend)
        fp8_out = bool(fusions and fusions.fp8_attention_output and ctx.kv_cache_dtype == torch.float8_e4m3fn
                       and self.o_proj.scheme.kernel_dtype == "fp8")
        return self.o_proj(out.reshape(T, self.heads * self.head_dim), quantized_input=fp8_out)

    def _attend(self, q: torch.Tensor) -> torch.Tensor:
        ctx = self.ctx
        cached = ctx.requests * ctx.workload.kv_length
        k_cache = torch.empty(cached, self.kv_heads, self.head_dim, dtype=ctx.kv_cache_dtype, device=META)
        return OPS.attention(q, k_cache, k_cache, ctx.requests, ctx.workload.query_length, ctx.workload.kv_length, True,
                             self.window)


class SimMLAAttention(SimModule):
    """Multi-head latent attention (DeepSeek-V2/V3, Kimi-K2.5).

    Decode runs the absorbed form: q_nope is multiplied into the latent space (bmm with W_UK),
    attention runs over the 576-wide latent cache, and the output leaves through W_UV (bmm).
    Prefill runs the expanded form: kv_b_proj expands every cached latent to K and V; where the
    engine says so, a prefill over a short cached prefix (``ctx.absorbed_prefix_below``) or one
    that replays piecewise CUDA graphs (``ctx.absorbed_in_graphs``) runs the absorbed form instead.
    """

    def __init__(self, ctx: SimContext, *, hidden_size: int, num_heads: int, q_lora_rank: int | None,
                 kv_lora_rank: int, qk_nope_head_dim: int, qk_rope_head_dim: int, v_head_dim: int,
                 input_size: int | None = None) -> None:
        """``input_size``: width of the attention input when it is not ``hidden_size`` (the
        EAGLE3 MLA draft's fused down projection reads 2 x hidden)."""
        super().__init__()
        tp = ctx.parallel.tp
        self.ctx = ctx
        self.heads = _shard(num_heads, tp, "attention heads")
        self.kv_lora_rank, self.nope, self.rope_dim, self.v_dim = kv_lora_rank, qk_nope_head_dim, qk_rope_head_dim, v_head_dim
        self.q_lora_rank = q_lora_rank
        attention_in = ctx.quant.attention_input
        qk_head = qk_nope_head_dim + qk_rope_head_dim
        down = (q_lora_rank or 0) + kv_lora_rank + qk_rope_head_dim
        width = input_size or hidden_size
        self.fused_qkv_a_proj = SimLinear(width, down, attention_in)  # replicated, as sglang does
        if q_lora_rank:
            self.q_a_layernorm = SimRMSNorm(q_lora_rank)
            self.q_b_proj = SimLinear(q_lora_rank, num_heads * qk_head, attention_in, shard="column", tp=tp)
        else:
            self.q_proj = SimLinear(width, num_heads * qk_head, attention_in, shard="column", tp=tp)
        self.kv_a_layernorm = SimRMSNorm(kv_lora_rank)
        self.kv_b_proj = SimLinear(kv_lora_rank, num_heads * (qk_nope_head_dim + v_head_dim), BF16, shard="column", tp=tp)
        # The absorbed decode path reads kv_b_proj as two per-head matrices (same bytes, views).
        kv_b = self.kv_b_proj.weights["weight"].view(self.heads, qk_nope_head_dim + v_head_dim, kv_lora_rank)
        self.w_kc = kv_b[:, :qk_nope_head_dim, :]                     # [H, nope, latent]
        self.w_vc = kv_b[:, qk_nope_head_dim:, :].transpose(1, 2)     # [H, latent, v]
        self.o_proj = SimLinear(num_heads * v_head_dim, hidden_size, ctx.quant.attention_output, shard="row", tp=tp)

    @property
    def latent_width(self) -> int:
        return self.kv_lora_rank + self.rope_dim

    def kv_bytes_per_token(self) -> int:
        return self.latent_width * self.ctx.kv_cache_dtype.itemsize

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        ctx = self.ctx
        down = self.fused_qkv_a_proj(x)
        if ctx.scatters_attn_input:  # this rank's share of the tokens: gather the narrow latent of all of them
            down = OPS.all_gather(down, ctx.parallel.tp, "attn_tp")[: ctx.tokens]
        T = down.shape[0]
        if self.q_lora_rank:
            q_lat, latent = down.split([self.q_lora_rank, self.latent_width], -1)
            q = self.q_b_proj(self.q_a_layernorm(q_lat))
        else:
            latent = down
            q = self.q_proj(x)
        q = q.view(T, self.heads, self.nope + self.rope_dim)
        q_nope, q_pe = q.split([self.nope, self.rope_dim], -1)
        kv_c, k_pe = latent.split([self.kv_lora_rank, self.rope_dim], -1)
        kv_c = self.kv_a_layernorm(kv_c)
        q_pe, k_pe = OPS.rope(q_pe, k_pe)
        OPS.kv_cache_write(latent, None, str(ctx.kv_cache_dtype))
        out = by_part(ctx, (q_nope, q_pe), lambda qn, qp: self._attend(qn, qp, k_pe))
        return self.o_proj(out.reshape(T, self.heads * self.v_dim))

    def _attend(self, q_nope: torch.Tensor, q_pe: torch.Tensor, k_pe: torch.Tensor) -> torch.Tensor:
        ctx = self.ctx
        requests, kv_len = ctx.requests, ctx.workload.kv_length
        in_graphs = ctx.in_prefill_graphs and ctx.absorbed_in_graphs
        if ctx.workload.decode or in_graphs or ctx.absorbs_prefix:
            OPS.mla_bmm(q_nope.transpose(0, 1), self.w_kc, "pre")                             # [H, T, latent]
            # FA3, FlashInfer and cutlass MLA take the absorbed q and q_pe as two inputs (sglang's
            # forward_absorb_core): no concat kernel; only Blackwell's trtllm_mla joins them (one
            # small kernel a layer, not priced)
            q_full = torch.empty(q_pe.shape[0], self.heads, self.latent_width, dtype=q_pe.dtype, device=META)  # [T, H, 576]
            cache = torch.empty(requests * kv_len, self.latent_width, dtype=ctx.kv_cache_dtype, device=META)
            out_latent = OPS.mla_attention(q_full, cache, requests, ctx.workload.query_length, kv_len, self.kv_lora_rank)
            out = OPS.mla_bmm(out_latent.transpose(0, 1), self.w_vc, "post").transpose(0, 1)   # [T, H, v]
        else:
            cached_latent = torch.empty(requests * kv_len, self.kv_lora_rank, dtype=ACT_DTYPE, device=META)
            kv = self.kv_b_proj(cached_latent).view(requests * kv_len, self.heads, self.nope + self.v_dim)
            k_nope, v = kv.split([self.nope, self.v_dim], -1)
            k = OPS.cat([k_nope, k_pe.new_empty(requests * kv_len, 1, self.rope_dim).expand(-1, self.heads, -1)], -1)
            q_full = OPS.cat([q_nope, q_pe], -1)
            out = OPS.mla_prefill_attention(q_full, k, v, requests, ctx.workload.query_length, kv_len,
                                            str(ctx.kv_cache_dtype))
        return out


@dataclass(frozen=True)
class MoEShape:
    num_experts: int
    top_k: int
    hidden_size: int
    expert_intermediate_size: int
    shared_intermediate_size: int
    router: str
    n_group: int | None = None
    """Expert groups of group-limited routing (DeepSeek-V3: 8), None without."""
    topk_group: int | None = None
    """Groups one token may route to (DeepSeek-V3: 4)."""
    family: str = ""
    """The MoE architecture family (:class:`~infercast_adapters.arch.MoEArchitecture`), which
    decides with the engine the router GEMM's dtype."""


class SimMoE(SimModule):
    """Router GEMM (in FP32 where the engine runs this family's router so, after a cast kernel
    where it launches one: ``ctx.fp32_router``), the fused routed experts (under expert
    parallelism, DeepEP's dispatch and combine around them, or the standard dispatcher's local
    experts: ``ctx.moe_dispatch``), and shared experts.

    Routing follows ``ctx.expert_imbalance`` (balanced by default), stated in the report.
    """

    def __init__(self, ctx: SimContext, shape: MoEShape) -> None:
        super().__init__()
        p = ctx.parallel
        self.ctx, self.shape = ctx, shape
        self.local_experts = (shape.num_experts + p.redundant_experts) // p.ep
        fp32 = ctx.fp32_router is not None and shape.family in ctx.fp32_router.families
        self.gate = SimLinear(shape.hidden_size, shape.num_experts, FP32 if fp32 else BF16)
        self.router_cast = fp32 and ctx.fp32_router.cast_kernel
        scheme = ctx.quant.routed_experts
        inter = _shard(shape.expert_intermediate_size, p.moe_tp, "expert intermediate size")
        self.w13 = _ExpertWeights(self.local_experts, 2 * inter, shape.hidden_size, scheme)
        self.w2 = _ExpertWeights(self.local_experts, shape.hidden_size, inter, scheme)
        self.w13.logical_params = shape.num_experts * 2 * shape.expert_intermediate_size * shape.hidden_size
        self.w2.logical_params = shape.num_experts * shape.expert_intermediate_size * shape.hidden_size
        self.shared_experts = None
        if shape.shared_intermediate_size:
            if ctx.moe_dispatch == "local":  # sharded like the routed experts' group: every rank
                shared_tp = p.num_devices
            else:
                shared_tp = p.tp if (p.ep == 1 or p.shared_expert_tp) else 1
            self.shared_experts = SimMLP(shape.hidden_size, shape.shared_intermediate_size, ctx.quant.dense, shared_tp,
                                         ctx)

    @property
    def routing_assumption(self) -> str:
        return routing.describe(self.ctx.expert_imbalance)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        p, s, ctx = self.ctx.parallel, self.shape, self.ctx
        tokens = x
        T = x.shape[0]
        router_input = tokens
        if self.gate.scheme is FP32:  # read in FP32: cast by a kernel of its own, or inside the kernel before
            router_input = (OPS.to_dtype(tokens, "fp32") if self.router_cast
                            else tokens.new_empty(tokens.shape, dtype=torch.float32))
        self.gate(router_input)
        slots = s.num_experts + p.redundant_experts
        dispatch = ctx.moe_dispatch
        # all-to-all: every rank's tokens reach the expert group; local and TP: each rank has them all
        group_tokens = T * p.ep if dispatch == "all_to_all" else T
        rows = group_tokens * s.top_k * self.local_experts / slots
        imbalance = ctx.expert_imbalance
        active = routing.expected_active_experts(s.num_experts, s.top_k, group_tokens, self.local_experts, imbalance)
        # every rank waits for the busiest: uneven random picks (most at a few tokens) or a lasting skew
        groups = (s.n_group, s.topk_group) if slots == s.num_experts else (None, None)  # redundant slots: groups split
        chance = routing.busiest_rank(group_tokens, slots, s.top_k, p.ep, *groups) if p.ep > 1 else 1.0
        straggler = max(chance, routing.straggler(imbalance, s.num_experts, s.top_k, p.ep))
        if imbalance == "balanced" and chance > 1.0:  # the busiest rank's rows touch more of its experts
            active = max(active, self.local_experts * (1.0 - (1.0 - 1.0 / self.local_experts) ** (rows * chance)))
        scheme = ctx.quant.routed_experts
        received = math.ceil(rows * straggler)
        if dispatch == "all_to_all":
            mode = "ll" if ctx.workload.decode else "normal"
            nodes = max(1, p.ep // p.scale_up_domain)
            reach = routing.expected_destination_nodes(s.num_experts, s.top_k, nodes, s.n_group, s.topk_group)
            sent = x.new_empty(T, s.hidden_size, dtype=torch.float8_e4m3fn)  # DeepEP dispatches FP8
            x = OPS.all_to_all(sent, received, p.ep, "ep", "dispatch", mode, s.top_k, s.num_experts, reach)
        h = OPS.fused_moe(x, self.w13.weights["weight_packed"], self.w13.weights["weight_scale"],
                          self.w2.weights["weight_packed"], self.w2.weights["weight_scale"], group_tokens,
                          s.top_k, s.num_experts, self.local_experts, float(rows), float(active), float(straggler),
                          p.moe_tp, scheme.kernel_dtype, routing.DISTRIBUTIONS[imbalance], dispatch, ctx.moe_runner)
        if dispatch == "all_to_all":
            h = OPS.all_to_all(h, T, p.ep, "ep", "combine", mode, s.top_k, s.num_experts, reach)
            if p.moe_tp > 1:
                h = OPS.all_reduce(h, p.moe_tp, "moe_tp")
        out = h
        if self.shared_experts is not None:
            if dispatch == "all_to_all" and p.shared_expert_tp and p.tp > 1:
                gathered = OPS.all_gather(tokens, p.tp, "attn_tp")
                shared = OPS.reduce_scatter(self.shared_experts(gathered), p.tp, "attn_tp")
            else:
                shared = self.shared_experts(tokens)
            out = OPS.add(out, shared)
        return out


class _ExpertWeights(SimModule):
    """Every local expert's weight for one projection, stacked: [E_local, N, K] (packed when quantized)."""

    def __init__(self, experts: int, out_features: int, in_features: int, scheme: QuantScheme) -> None:
        super().__init__()
        self.scheme, self.out_features = scheme, out_features
        if scheme.packed:
            self.weight("weight_packed", (experts, out_features, math.ceil(in_features * scheme.weight_bits / 32)), torch.int32)
            self.weight("weight_scale", (experts, out_features, math.ceil(in_features / (scheme.group_size or in_features))),
                        torch.bfloat16 if scheme.scale_bits == 16 else torch.uint8)
        elif scheme.weight_bits == 8:
            self.weight("weight_packed", (experts, out_features, in_features),
                        torch.float8_e4m3fn if scheme.compute_dtype == "fp8" else torch.int8)
            block = scheme.block or (out_features, in_features)
            self.weight("weight_scale", (experts, math.ceil(out_features / block[0]), math.ceil(in_features / block[1])), torch.float32)
        else:
            self.weight("weight_packed", (experts, out_features, in_features))
            self.weight("weight_scale", (experts, 0, 0))


class SimDecoderLayer(SimModule):
    """Pre-norm decoder layer with the engine's collectives between attention and MLP."""

    def __init__(self, ctx: SimContext, attn: SimModule, mlp: SimModule, hidden_size: int, index: int) -> None:
        super().__init__()
        self.ctx, self.index = ctx, index
        self.input_layernorm = SimRMSNorm(hidden_size)
        self.self_attn = attn
        self.post_attention_layernorm = SimRMSNorm(hidden_size)
        self.mlp = mlp

    @property
    def is_moe(self) -> bool:
        return isinstance(self.mlp, SimMoE)

    def signature(self) -> tuple:
        """With all-reduce fusion the first layer traces apart: its input norm follows the
        embedding, not a fused all-reduce; a sliding-window layer traces apart from a full one."""
        return (super().signature(), self.index == 0 and self.ctx.all_reduce_fusion_tokens > 0,
                getattr(self.self_attn, "window", 0))

    def forward(self, h: torch.Tensor, residual: torch.Tensor, *,
                first: bool | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """``first``: the input comes from no decoder layer's all-reduce (default: layer 0; an
        MTP module's layer, after its projection, also)."""
        p, ctx = self.ctx.parallel, self.ctx
        if ctx.scatters_attn_input and p.tp > 1:
            return self._with_scattered_input(h, residual)
        # the engine folds each all-reduce into the residual add and RMSNorm after it: the MLP's
        # into the next layer's input norm (not the last layer's), attention's into the norm below
        fused = p.tp > 1 and 0 < ctx.tokens <= ctx.all_reduce_fusion_tokens
        if not fused or (self.index == 0 if first is None else first):
            h, residual = self.input_layernorm(h, residual)
        a = self.self_attn(h)
        dispatch = ctx.moe_dispatch if self.is_moe else "tp"
        if dispatch == "local" and p.dp > 1:
            return self._through_gathered_moe(a, residual)
        scatter = dispatch == "all_to_all" and p.tp > 1
        if scatter:  # DP attention with attention-TP: each rank routes 1/tp of the tokens
            a = OPS.reduce_scatter(a, p.tp, "attn_tp")
            residual = residual[: a.shape[0]]
        elif p.tp > 1:
            a = OPS.all_reduce(a, p.tp, "attn_tp")
        if fused:
            h = a
        else:
            h, residual = self.post_attention_layernorm(a, residual)
        m = self.mlp(h)
        if scatter:
            m = OPS.all_gather(m, p.tp, "attn_tp")
            residual = m.new_empty(m.shape)
        elif p.tp > 1 and dispatch != "all_to_all":
            m = OPS.all_reduce(m, p.tp, "attn_tp")
        return m, residual

    def _with_scattered_input(self, h: torch.Tensor, residual: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """A prefill layer with the attention input scattered over TP (sglang's
        ``--enable-attn-tp-input-scattered``): ``h`` holds the previous MLP's (or the
        embedding's) partial sums, which a reduce-scatter sums onto each rank's 1/TP of the tokens
        (padded to a multiple of TP); the input norm and the attention's down projection run on
        those, the attention all-gathers the latent; after attention this rank's rows take the
        residual, an all-reduce sums every row and the norm runs on all of them. The MLP's output
        is returned unsummed: the next layer's reduce-scatter (or the head's all-reduce) sums it."""
        tp = self.ctx.parallel.tp
        local = -(-h.shape[0] // tp)
        h = OPS.reduce_scatter(h.new_empty(local * tp, *h.shape[1:]), tp, "attn_tp")
        h, residual = self.input_layernorm(h, residual[:local])
        a = self.self_attn(h)
        OPS.add(a[:local], residual)  # this rank's rows of the attention output take the residual
        residual = OPS.all_reduce(a, tp, "attn_tp")
        m = self.mlp(self.post_attention_layernorm(residual))
        return m, residual

    def _through_gathered_moe(self, a: torch.Tensor, residual: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """DP attention before an MoE without an all-to-all, as sglang's communicator runs it: every
        DP rank's tokens are gathered over all ranks and the MoE's output returned. In decode (max-len
        padding) a reduce-scatter over attention TP and an all-gather over all ranks, mirrored on the
        way back; in prefill (sum-len) an all-reduce over a buffer of every rank's tokens, each way.
        At attention TP 1 each rank normalizes its own tokens first; above it the residual joins
        the gathered partial sums, and every rank's tokens are normalized after the gather."""
        p, decode, tokens = self.ctx.parallel, self.ctx.workload.decode, a.shape[0]

        def gather(x: torch.Tensor) -> torch.Tensor:
            if decode:
                return OPS.all_gather(OPS.reduce_scatter(x, p.tp, "attn_tp") if p.tp > 1 else x, p.num_devices, "moe")
            return OPS.all_reduce(x.new_empty(tokens * p.dp, *x.shape[1:]), p.num_devices, "moe")

        if p.tp == 1:
            h, residual = self.post_attention_layernorm(a, residual)
            h = gather(h)
        else:
            gathered = gather(OPS.add(a, residual))
            residual = OPS.index(gathered, tokens)  # this rank's rows of the sum (dp_scatter)
            h = self.post_attention_layernorm(gathered)
        m = self.mlp(h)
        if decode:
            m = OPS.reduce_scatter(m, p.num_devices, "moe")
            if p.tp > 1:
                m = OPS.all_gather(m, p.tp, "attn_tp")
        else:
            m = OPS.index(OPS.all_reduce(m, p.num_devices, "moe"), tokens)
        return m, residual


class SimEmbedding(SimModule):
    """Vocabulary-parallel embedding: each TP rank holds vocab/TP rows, then an all-reduce."""

    def __init__(self, ctx: SimContext, vocab_size: int, hidden_size: int) -> None:
        super().__init__()
        self.ctx = ctx
        self.logical_params = vocab_size * hidden_size
        self.weight("weight", (math.ceil(vocab_size / ctx.parallel.tp), hidden_size))
        self.outside_language_model = False
        """The engine embeds the tokens before it enters the language model's forward, as sglang's
        multimodal wrapper does (``general_mm_embed_routine``): the embedding's all-reduce stays
        when that forward scatters its attention input."""

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        h = OPS.embedding(ids, self.weights["weight"])
        # scattered: the first layer's reduce-scatter sums the partial embeddings instead
        if self.ctx.parallel.tp > 1 and (self.outside_language_model or not self.ctx.scatters_attn_input):
            h = OPS.all_reduce(h, self.ctx.parallel.tp, "attn_tp")
        return h


class SimLMHead(SimModule):
    """Final norm, last-token selection, vocabulary-parallel lm_head and the logits all-gather."""

    def __init__(self, ctx: SimContext, vocab_size: int, hidden_size: int) -> None:
        super().__init__()
        self.ctx = ctx
        self.norm = SimRMSNorm(hidden_size)
        self.lm_head = SimLinear(hidden_size, vocab_size if vocab_size % ctx.parallel.tp == 0 else
                                 math.ceil(vocab_size / ctx.parallel.tp) * ctx.parallel.tp,
                                 ctx.quant.lm_head, shard="column", tp=ctx.parallel.tp)
        self.lm_head.logical_params = vocab_size * hidden_size

    def tie_to(self, embed: SimEmbedding) -> None:
        """``tie_word_embeddings``: the lm_head reads the embedding's matrix, as transformers
        and sglang tie them, so it is one parameter matrix and one copy in memory. A head whose
        weight is stored differently (quantized) keeps its own."""
        own, shared = self.lm_head.weights.get("weight"), embed.weights["weight"]
        if own is not None and own.shape == shared.shape and own.dtype == shared.dtype:
            self.lm_head.weights["weight"] = shared
            structure_changed()
            self.lm_head.logical_params = 0

    def forward(self, h: torch.Tensor, residual: torch.Tensor, rows: int | None = None) -> torch.Tensor:
        """Logits for ``rows`` tokens per request (default: every new token in decode, the
        last one in prefill)."""
        ctx = self.ctx
        if ctx.scatters_attn_input and ctx.parallel.tp > 1:  # the last layer sums its MLP output as usual
            h = OPS.all_reduce(h, ctx.parallel.tp, "attn_tp")
        h, _ = self.norm(h, residual)
        per_request = rows if rows is not None else (ctx.workload.query_length if ctx.workload.decode else 1)
        last = ctx.requests * per_request
        if last != h.shape[0]:
            h = OPS.index(h, last)
        logits = self.lm_head(h)
        if ctx.parallel.tp > 1:
            logits = OPS.all_gather(logits, ctx.parallel.tp, "attn_tp")
        return logits
