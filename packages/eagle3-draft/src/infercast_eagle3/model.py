"""The EAGLE3 draft model: embedding, ``fc`` over the target's aux hidden states, one decoder
layer chosen by the draft's architecture, final norm, ``lm_head`` over the draft vocabulary, d2t.

Semantics of sglang 0.5.23 ``python/sglang/srt/models/llama_eagle3.py`` (``LlamaModel``,
``LlamaForCausalLMEagle3``) and ``kimi_k25_eagle3.py`` (``Eagle3MLAModel``), with the eagle
worker's sharing (``speculative/eagle_worker_v2.py``, ``init_lm_head``):

- the target's aux hidden states are normalised (``norm_before_fc``: one RMSNorm over the
  concatenation; ``fc_norm``: one per aux state) and projected by ``fc`` (bias: ``bias``); a
  hidden-wide input (``use_aux_hidden_state: false``) skips all three;
- the embedding is the target's unless ``target_hidden_size`` differs from ``hidden_size``;
- the head is the draft's ``lm_head``, the target's (no ``draft_vocab_size``), or the embedding
  (``tie_word_embeddings``);
- the next draft step reads the hidden state before the final norm, or after it with
  ``norm_output`` (EAGLE 3.1).

Modules the draft shares with its target are held, not owned: they are not in its state dict,
so they are neither loaded from nor saved to a draft checkpoint.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from infercast_adapters import ConfigError
from torch import nn

from infercast_eagle3.config import LLAMA_EAGLE3, MLA_EAGLE3, Eagle3Config
from infercast_eagle3.layers import KVCache, LlamaDraftLayer, RMSNorm

BUILTIN_DRAFT_LAYERS: dict[str, type] = {LLAMA_EAGLE3: LlamaDraftLayer}
"""Draft architectures with a built-in layer; adapters register others through
``infercast_register_draft_layers`` (Kimi-K2.5's MLA layer for ``Eagle3DeepseekV2ForCausalLM``)."""


def draft_layer_class(config: Eagle3Config, target_model_type: str | None = None, manager: Any = None) -> type:
    """The decoder-layer class for this draft, chosen by its architecture (``architectures[0]``)
    as sglang's model registry chooses the draft model; the target does not enter into it."""
    registered = manager.draft_layers() if manager is not None else {}
    layers = {**BUILTIN_DRAFT_LAYERS, **registered}
    if config.architecture in layers:
        return layers[config.architecture]
    hint = " Install infercast-kimi-k25 for its MLA draft layer." if config.architecture == MLA_EAGLE3 else ""
    raise ConfigError(f"no EAGLE3 draft layer for architecture {config.architecture}"
                      f"{f' (target model_type {target_model_type!r})' if target_model_type else ''}; "
                      f"known architectures: {', '.join(sorted(layers))}.{hint}")


def _hold(module: nn.Module, name: str, value: Any) -> None:
    """Keep ``value`` on ``module`` without registering it (not in the state dict, not moved)."""
    object.__setattr__(module, name, value)


class Eagle3Draft(nn.Module):
    def __init__(self, config: Eagle3Config, layer_class: type, embed_tokens: nn.Embedding | None = None,
                 lm_head: nn.Module | None = None) -> None:
        """``embed_tokens`` and ``lm_head``: the target's, to share where sglang shares them
        (without them the draft owns its own)."""
        super().__init__()
        self.config = config
        hidden, eps = config.hidden_size, getattr(config.layer_config, "rms_norm_eps", 1e-6)
        if embed_tokens is not None and config.shares_target_embedding:
            if embed_tokens.embedding_dim != hidden:
                raise ConfigError(f"shared embedding is {embed_tokens.embedding_dim} wide, the draft is {hidden}")
            _hold(self, "embed_tokens", embed_tokens)
        else:
            self.embed_tokens = nn.Embedding(config.vocab_size, hidden)
        wide = config.num_aux * config.target_hidden_size
        self.input_norm = RMSNorm(wide, eps) if config.norm_before_fc else None
        self.fc_norm = nn.ModuleList(RMSNorm(config.target_hidden_size, eps) for _ in range(config.num_aux)) \
            if config.fc_norm else None
        self.fc = nn.Linear(wide, hidden, bias=config.fc_bias) if config.use_aux_hidden_state else None
        self.layers = nn.ModuleList([layer_class(config.layer_config, 0)])
        self.norm = RMSNorm(hidden, eps)
        if config.tie_word_embeddings:
            _hold(self, "lm_head", None)
        elif config.lm_head_from_target and lm_head is not None:
            _hold(self, "lm_head", lm_head)
        else:
            self.lm_head = nn.Linear(hidden, config.draft_vocab_size, bias=False)
        self.register_buffer("d2t", torch.zeros(config.draft_vocab_size, dtype=torch.long))
        """Offsets: target id = draft id + d2t[draft id] (zeros when the vocabularies are equal)."""

    @property
    def dtype(self) -> torch.dtype:
        return self.norm.weight.dtype

    def project_aux(self, aux: torch.Tensor) -> torch.Tensor:
        """``[seq, n_aux * target_hidden]`` target features to the draft's width (a hidden-wide
        input, ``use_aux_hidden_state: false``, passes through)."""
        if self.fc is None:
            if aux.shape[-1] != self.config.hidden_size:
                raise ValueError(f"target hidden states are {aux.shape[-1]} wide; the draft reads {self.config.hidden_size}")
            return aux
        expected = self.fc.in_features
        if aux.shape[-1] != expected:
            raise ValueError(f"aux hidden states are {aux.shape[-1]} wide; fc expects {expected} "
                             f"({self.config.num_aux} x {self.config.target_hidden_size})")
        if self.input_norm is not None:
            aux = self.input_norm(aux)
        if self.fc_norm is not None:
            aux = torch.cat([norm(chunk) for norm, chunk in zip(self.fc_norm, aux.chunk(self.config.num_aux, -1))], -1)
        return self.fc(aux)

    def logits(self, normed: torch.Tensor) -> torch.Tensor:
        if self.lm_head is None:  # tied to the embedding
            return F.linear(normed, self.embed_tokens.weight.to(normed.dtype))
        bias = getattr(self.lm_head, "bias", None)
        return F.linear(normed, self.lm_head.weight.to(normed.dtype), None if bias is None else bias.to(normed.dtype))

    def forward(self, input_ids: torch.Tensor, hidden: torch.Tensor, positions: torch.Tensor,
                mask: torch.Tensor, cache: KVCache | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """One draft pass over ``seq`` positions: ``input_ids [seq]`` are the tokens *after* the
        positions whose features ``hidden [seq, hidden]`` carries; ``mask [seq, cached + seq]``.
        Returns (logits over the draft vocabulary, the hidden state that feeds the next draft
        step: before the final norm, or after it with ``norm_output``)."""
        embeds = self.embed_tokens(input_ids).to(self.dtype)
        h = self.layers[0](embeds, hidden, positions, mask, cache)
        normed = self.norm(h)
        return self.logits(normed), normed if self.config.norm_output else h

    def to_target_ids(self, draft_ids: torch.Tensor) -> torch.Tensor:
        return draft_ids + self.d2t[draft_ids]


def build_draft(config: Eagle3Config, target_model_type: str | None = None, manager: Any = None,
                embed_tokens: nn.Embedding | None = None, lm_head: nn.Module | None = None) -> Eagle3Draft:
    """The draft for ``config``: an :class:`Eagle3Draft` around the layer its architecture names."""
    return Eagle3Draft(config, draft_layer_class(config, target_model_type, manager), embed_tokens, lm_head)
