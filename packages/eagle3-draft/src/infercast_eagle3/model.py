"""The EAGLE3 draft model: embedding, ``fc`` over the target's aux hidden states, one decoder
layer chosen by target architecture, final norm, ``lm_head`` over the draft vocabulary, d2t."""

from __future__ import annotations

from typing import Any

import torch
from infercast_adapters import ConfigError
from torch import nn

from infercast_eagle3.config import Eagle3Config
from infercast_eagle3.layers import LlamaDraftLayer, RMSNorm

BUILTIN_DRAFT_LAYERS: dict[str, type] = {"llama": LlamaDraftLayer}
"""Target model types with a built-in draft layer; other GQA families use the Llama layer too
(the draft layer is the draft's own architecture, not the target's)."""

LLAMA_DRAFT_ARCHITECTURES = ("LlamaForCausalLMEagle3", "LlamaForCausalLMEagle")


def draft_layer_class(config: Eagle3Config, target_model_type: str | None, manager: Any = None) -> type:
    """The decoder-layer class for this draft: an adapter's registration for the target's
    model_type (through ``infercast_register_draft_layers``) when the draft is not Llama-style,
    else the built-in Llama layer."""
    registered = manager.draft_layers() if manager is not None else {}
    if config.architecture in LLAMA_DRAFT_ARCHITECTURES:
        return LlamaDraftLayer
    for key in (target_model_type, getattr(config.layer_config, "model_type", None)):
        if key in registered:
            return registered[key]
        if key in BUILTIN_DRAFT_LAYERS:
            return BUILTIN_DRAFT_LAYERS[key]
    raise ConfigError(
        f"no EAGLE3 draft layer for architecture {config.architecture} (target model_type {target_model_type!r}); "
        f"registered: {', '.join(sorted({*registered, *BUILTIN_DRAFT_LAYERS})) or 'none'}. "
        "Install the target's adapter (e.g. infercast-kimi-k25 for Kimi-K2.5's MLA draft)."
    )


class Eagle3Draft(nn.Module):
    def __init__(self, config: Eagle3Config, layer_class: type, embed_tokens: nn.Embedding | None = None) -> None:
        super().__init__()
        self.config = config
        hidden = config.hidden_size
        self.embed_tokens = embed_tokens if embed_tokens is not None else nn.Embedding(config.vocab_size, hidden)
        if self.embed_tokens.embedding_dim != hidden:
            raise ConfigError(f"shared embedding is {self.embed_tokens.embedding_dim} wide, the draft is {hidden}")
        self.fc = nn.Linear(config.num_aux * config.target_hidden_size, hidden, bias=False)
        self.layers = nn.ModuleList([layer_class(config.layer_config, 0)])
        self.norm = RMSNorm(hidden, getattr(config.layer_config, "rms_norm_eps", 1e-6))
        self.lm_head = nn.Linear(hidden, config.draft_vocab_size, bias=False)
        self.register_buffer("d2t", torch.zeros(config.draft_vocab_size, dtype=torch.long))
        """Offsets: target id = draft id + d2t[draft id] (zeros when the vocabularies are equal)."""

    def project_aux(self, aux: torch.Tensor) -> torch.Tensor:
        """``[seq, n_aux * target_hidden]`` target features to the draft's width."""
        expected = self.fc.in_features
        if aux.shape[-1] != expected:
            raise ValueError(f"aux hidden states are {aux.shape[-1]} wide; fc expects {expected} "
                             f"({self.config.num_aux} x {self.config.target_hidden_size})")
        return self.fc(aux)

    def forward(self, input_ids: torch.Tensor, hidden: torch.Tensor, positions: torch.Tensor,
                mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """One draft pass over ``seq`` positions: ``input_ids [seq]`` are the tokens *after* the
        positions whose features ``hidden [seq, hidden]`` carries. Returns (logits over the
        draft vocabulary, the new hidden state that feeds the next draft step)."""
        h = self.layers[0](self.embed_tokens(input_ids), hidden, positions, mask)
        return self.lm_head(self.norm(h)), h

    def to_target_ids(self, draft_ids: torch.Tensor) -> torch.Tensor:
        return draft_ids + self.d2t[draft_ids]


def build_draft(config: Eagle3Config, target_model_type: str | None = None, manager: Any = None,
                embed_tokens: nn.Embedding | None = None) -> Eagle3Draft:
    """The draft for ``config``; a layer class may name its top-level model (``draft_model``,
    e.g. Kimi-K2.5's ``Eagle3DeepseekV2ForCausalLM``), else :class:`Eagle3Draft` holds it."""
    layer_class = draft_layer_class(config, target_model_type, manager)
    model_class = getattr(layer_class, "draft_model", Eagle3Draft)
    return model_class(config, layer_class, embed_tokens)
