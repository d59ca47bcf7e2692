"""Speculative decoding: the draft models as simulator layers, and the cycle an engine runs.

One cycle (sglang's EAGLE / EAGLE3 worker, and DeepSeek-V3's MTP run the same way):

1. ``num_steps - 1`` draft forwards over ``batch x topk`` tokens (the first draft token comes
   from the previous cycle's extend);
2. one target forward verifying ``batch x num_draft_tokens`` tokens under the tree mask (the
   attention kernel computes the full block of the new tokens, as a causal step of that length);
3. one draft extend over ``batch x num_draft_tokens`` tokens, producing logits for one token
   per request.

Drafts are built through the adapters (an EAGLE3 draft with the layer its target's adapter
registers, on the meta device) and converted to the same simulator layers the target uses.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

import torch
from infercast_adapters import InfercastError
from torch import nn

from infercast.layers import (
    META,
    OPS,
    SimContext,
    SimDecoderLayer,
    SimGQAAttention,
    SimLinear,
    SimLMHead,
    SimMLAAttention,
    SimMLP,
    SimModule,
    SimRMSNorm,
)
from infercast.quant import QuantScheme
from infercast.trace import OpRecord, _module_paths, _Recorder, _take

ALGORITHMS = ("EAGLE3", "EAGLE", "MTP")
"""``EAGLE3``: a separate draft checkpoint; ``MTP`` (sglang runs it as ``EAGLE`` with the
target's own next-token-prediction layer): DeepSeek-V3's ``num_nextn_predict_layers``."""


@dataclass(frozen=True)
class Forward:
    """One kind of forward in a cycle: which model, tokens per request, how many times."""

    name: str
    model: str
    tokens_per_request: int
    count: int
    logits_per_request: int


def cycle_forwards(num_steps: int, topk: int, num_draft_tokens: int) -> list[Forward]:
    return [
        Forward("draft", "draft", topk, num_steps - 1, topk),
        Forward("verify", "target", num_draft_tokens, 1, num_draft_tokens),
        Forward("extend", "draft", num_draft_tokens, 1, 1),
    ]


class SimDraftLayer(SimModule):
    """The EAGLE3 decoder layer: ``[input_layernorm(embeds), hidden_norm(hidden)]`` into
    attention (2 x hidden wide), the hidden state as residual, then the MLP."""

    def __init__(self, ctx: SimContext, attn: SimModule, mlp: SimModule, hidden_size: int) -> None:
        super().__init__()
        self.ctx = ctx
        self.input_layernorm = SimRMSNorm(hidden_size)
        self.hidden_norm = SimRMSNorm(hidden_size)
        self.self_attn = attn
        self.post_attention_layernorm = SimRMSNorm(hidden_size)
        self.mlp = mlp

    def kv_bytes_per_token(self) -> int:
        return self.self_attn.kv_bytes_per_token()

    def forward(self, embeds: torch.Tensor, hidden: torch.Tensor) -> torch.Tensor:
        tp = self.ctx.parallel.tp
        x = OPS.cat([self.input_layernorm(embeds), self.hidden_norm(hidden)], -1)
        a = self.self_attn(x)
        if tp > 1:
            a = OPS.all_reduce(a, tp, "attn_tp")
        h, residual = self.post_attention_layernorm(a, hidden)
        m = self.mlp(h)
        if tp > 1:
            m = OPS.all_reduce(m, tp, "attn_tp")
        return OPS.add(m, residual)


class SimMTPLayer(SimModule):
    """DeepSeek-V3's MTP module: ``eh_proj([enorm(embeds), hnorm(hidden)])`` then one decoder
    layer of the target's kind (MLA + MoE)."""

    def __init__(self, ctx: SimContext, decoder: SimDecoderLayer, hidden_size: int,
                 eh_proj: QuantScheme | None = None) -> None:
        super().__init__()
        self.ctx = ctx
        self.enorm = SimRMSNorm(hidden_size)
        self.hnorm = SimRMSNorm(hidden_size)
        self.eh_proj = SimLinear(2 * hidden_size, hidden_size, eh_proj or ctx.quant.dense)
        self.decoder = decoder

    def kv_bytes_per_token(self) -> int:
        return self.decoder.self_attn.kv_bytes_per_token()

    def forward(self, embeds: torch.Tensor, hidden: torch.Tensor) -> torch.Tensor:
        x = self.eh_proj(OPS.cat([self.enorm(embeds), self.hnorm(hidden)], -1))
        with self.ctx.scattering(False):  # a draft's extend never scatters its attention input
            h, residual = self.decoder(x, x.new_empty(x.shape), first=True)
        return OPS.add(h, residual)


class SimDraft(SimModule):
    """One rank of a draft: shared embedding lookup, the projection of the target's hidden
    states (EAGLE3 ``fc`` over the aux layers; none for MTP), one layer, norm and lm_head."""

    def __init__(self, ctx: SimContext, layer: SimModule, *, hidden_size: int, vocab_size: int,
                 draft_vocab_size: int, fc_in: int | None, architecture: str) -> None:
        super().__init__()
        self.ctx, self.architecture = ctx, architecture
        self.hidden_size = hidden_size
        self.fc = SimLinear(fc_in, hidden_size, ctx.quant.dense) if fc_in else None
        self.layer = layer
        self.head = SimLMHead(ctx, draft_vocab_size, hidden_size)
        # The embedding is the target's (shared): looked up, not held.
        self.shared_embedding = torch.empty(-(-vocab_size // ctx.parallel.tp), hidden_size, dtype=torch.bfloat16,
                                            device=META)
        self.fc_in = fc_in or hidden_size

    def kv_bytes_per_token(self) -> int:
        return self.layer.kv_bytes_per_token()

    def forward(self, tokens: int, logits_rows: int) -> torch.Tensor:
        tp = self.ctx.parallel.tp
        embeds = OPS.embedding(torch.empty(tokens, dtype=torch.int64, device=META), self.shared_embedding)
        if tp > 1:
            embeds = OPS.all_reduce(embeds, tp, "attn_tp")
        hidden = torch.empty(tokens, self.fc_in, dtype=torch.bfloat16, device=META)
        if self.fc is not None:
            hidden = self.fc(hidden)
        h = self.layer(embeds, hidden)
        return self.head(h, h.new_empty(h.shape), rows=logits_rows)


def trace_draft(draft: SimDraft, tokens: int, logits_rows: int) -> list[OpRecord]:
    weight_ids = draft.weight_ids() | {id(draft.shared_embedding)}
    stack: list[str] = []
    recorder = _Recorder(weight_ids, stack)
    with _module_paths(draft, stack), recorder:
        draft(tokens, logits_rows)
    return _take(recorder)


def relabel(records: list[OpRecord], prefix: str, times: int) -> list[OpRecord]:
    """Records of one forward as part of a cycle: paths under ``prefix``, counted ``times``."""
    out = []
    for r in records:
        if prefix == "verify":
            out.append(dataclasses.replace(r, path=f"verify.{r.path}", count=r.count * times))
        else:
            out.append(dataclasses.replace(r, path=f"{prefix}.{r.path}", count=r.count * times, layer=None, layers=()))
    return out


# ------------------------------------------------------------------------------ building


def eagle3_draft(config: Any, target_model_type: str, ctx: SimContext, manager: Any) -> SimDraft:
    """Build the EAGLE3 draft that ``config`` describes on meta (through the adapters'
    draft-layer hook) and convert it to simulator layers for one rank."""
    from infercast_eagle3.config import from_transformers
    from infercast_eagle3.model import build_draft

    spec = from_transformers(config)
    with torch.device("meta"):
        draft = build_draft(spec, target_model_type, manager)
    layer_config = spec.layer_config
    attn = draft.layers[0].self_attn
    fused = getattr(attn, "fused_qkv_a_proj_with_mqa", None)
    if fused is not None:
        sim_attn: SimModule = SimMLAAttention(
            ctx, hidden_size=spec.hidden_size, num_heads=layer_config.num_attention_heads,
            q_lora_rank=layer_config.q_lora_rank, kv_lora_rank=layer_config.kv_lora_rank,
            qk_nope_head_dim=layer_config.qk_nope_head_dim, qk_rope_head_dim=layer_config.qk_rope_head_dim,
            v_head_dim=layer_config.v_head_dim, input_size=fused.in_features)
    else:
        heads = layer_config.num_attention_heads
        sim_attn = SimGQAAttention(
            ctx, hidden_size=spec.hidden_size, num_heads=heads,
            num_kv_heads=getattr(layer_config, "num_key_value_heads", None) or heads,
            head_dim=getattr(attn, "head_dim", None) or spec.hidden_size // heads, qk_norm=False,
            input_size=attn.q_proj.in_features)
    mlp = SimMLP(spec.hidden_size, draft.layers[0].mlp.gate_proj.out_features, ctx.quant.dense, ctx.parallel.tp,
                 ctx)
    layer = SimDraftLayer(ctx, sim_attn, mlp, spec.hidden_size)
    return SimDraft(ctx, layer, hidden_size=spec.hidden_size, vocab_size=spec.vocab_size,
                    draft_vocab_size=spec.draft_vocab_size, fc_in=draft.fc.in_features if draft.fc is not None else None,
                    architecture=spec.architecture)


def mtp_draft(target_last_layer: SimDecoderLayer, text: Any, ctx: SimContext,
              eh_proj: QuantScheme | None = None) -> SimDraft:
    """DeepSeek-V3's MTP module as a draft: a copy of the target's last (MoE) layer kind
    (``eh_proj``: its projection's scheme, default the decoder's dense one)."""
    layers = getattr(text, "num_nextn_predict_layers", 0) or 0
    if layers < 1:
        raise InfercastError(f"{getattr(text, 'model_type', 'this model')} has no MTP layer "
                             "(num_nextn_predict_layers = 0); use --speculative-algorithm EAGLE3 with a draft model")
    layer = SimMTPLayer(ctx, target_last_layer, text.hidden_size, eh_proj)
    return SimDraft(ctx, layer, hidden_size=text.hidden_size, vocab_size=text.vocab_size,
                    draft_vocab_size=text.vocab_size, fc_in=None, architecture="DeepSeek-V3 MTP")


def draft_for(draft_config: Any, built: Any, ctx: SimContext, manager: Any, engine: Any,
              device: Any) -> tuple[SimDraft, SimContext]:
    """The draft serving ``built`` and the context it runs in: DeepSeek-V3's MTP layer (same
    context and quantization as the target) when ``draft_config`` is None, else the EAGLE3
    draft ``draft_config`` describes, with its own checkpoint's quantization as ``engine`` runs
    it on ``device`` (:func:`~infercast.simulate.quant_on_device`: FP8 on an A100 through
    Marlin, or refused)."""
    from infercast.quant import plan_from_checkpoint
    from infercast.simulate import quant_on_device

    if draft_config is None:
        if ctx.mtp_quant is None:
            return mtp_draft(built.sim.layers[-1], built.text_config, ctx), ctx
        return mtp_draft(_mtp_decoder(built, ctx, manager), built.text_config, ctx, ctx.mtp_quant.dense), ctx
    # the draft's pool has the target's slots (sglang sizes both from the target's max_total_tokens)
    quant = quant_on_device(plan_from_checkpoint(getattr(draft_config, "quantization_config", None)), engine, device)
    draft_ctx = SimContext(parallel=ctx.parallel, workload=ctx.workload, quant=quant, kv_cache_dtype=ctx.kv_cache_dtype,
                           pointwise=ctx.pointwise, kv_pool_tokens=ctx.kv_pool_tokens)
    return eagle3_draft(draft_config, built.profile.model_type, draft_ctx, manager), draft_ctx


def _mtp_decoder(built: Any, ctx: SimContext, manager: Any) -> SimDecoderLayer:
    """A decoder layer of the target's last kind under the MTP layer's own plan
    (``ctx.mtp_quant``; layers read the plan when built)."""
    from infercast.build import Builders

    builders, text, profile = Builders(manager), built.text_config, built.profile
    kinds = builders.for_model("plan", profile.model_type)(config=text, profile=profile)[-1]
    decoder_quant, ctx.quant = ctx.quant, ctx.mtp_quant
    try:
        with torch.device("meta"):
            return builders.decoder_layer(kinds, ctx, text, text.num_hidden_layers - 1, profile)
    finally:
        ctx.quant = decoder_quant


def weight_bytes(module: nn.Module) -> int:
    return sum(t.numel() * t.element_size() for _, t in module.all_weights())
