"""ModelProfile: what a simulator needs to know about a model family, as data."""

from __future__ import annotations

import re
from dataclasses import dataclass, field, fields
from types import MappingProxyType
from typing import Mapping

from infercast_adapters.errors import ProfileError

_IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_DOTTED_PATH = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$")

ATTENTION_KINDS = ("gqa", "mla")
"""The attention kinds the simulator builds itself; a plugin may register builders for more."""

TOKENIZER_KINDS = ("fast", "tiktoken")
"""How a family's checkpoints tokenize: ``fast``, a Rust HuggingFace ``tokenizers`` class
(``PreTrainedTokenizerFast``); ``tiktoken``, a Python ``PreTrainedTokenizer`` over tiktoken whose
``encode()`` calls tiktoken directly while ``tokenizer(text)`` runs transformers' Python pipeline
(Kimi's ``TikTokenTokenizer``). Serving engines call one or the other, so the kind decides the
prompt's tokenizing time."""


def tokenizer_kind_of(tokenizer_class: str) -> str | None:
    """The kind (:data:`TOKENIZER_KINDS`) of a ``tokenizer_config.json``'s ``tokenizer_class``;
    None for a slow class other than tiktoken's, whose speed is not known here."""
    if tokenizer_class == "TikTokenTokenizer":
        return "tiktoken"
    if tokenizer_class.endswith("Fast") or tokenizer_class == "TokenizersBackend":
        return "fast"
    return None


@dataclass(frozen=True)
class ModelProfile:
    """Module names, config keys and module paths of one model family (one ``model_type``).

    Class names are matched against ``type(module).__name__`` of the transformers (or remote
    code) model; paths are attribute paths from the top-level model object.
    """

    model_type: str
    """The ``config.model_type`` this profile describes, e.g. ``"deepseek_v3"``."""
    decoder_layer_class: str
    """Class name of one decoder layer of the language model."""
    attention_class: str
    """Class name of the attention module inside a decoder layer."""
    attention_kind: str = "gqa"
    """``"gqa"`` (multi-head, grouped-query or multi-query), ``"mla"`` (multi-head latent), or a
    kind a plugin registers a simulator layer builder for (``infercast_register_sim_layers``)."""
    attention_qk_norm: bool = False
    """RMSNorm on each head's queries and keys before RoPE (Qwen3)."""
    moe_class: str | None = None
    """Class name of the sparse MoE block; None for dense models."""
    vision_tower_class: str | None = None
    """Class name of the vision encoder; None for text-only models."""
    routed_experts_key: str | None = None
    """Config key of the number of routed experts (``n_routed_experts``, ``num_experts``...)."""
    text_config_key: str | None = None
    """Config key of the language model's sub-config for multimodal models (``text_config``)."""
    language_model_path: str = "model"
    """Path of the language-model backbone (the module holding the decoder layers)."""
    layers_path: str = "model.layers"
    """Path of the ``ModuleList`` of decoder layers."""
    vision_tower_path: str | None = None
    """Path of the vision encoder."""
    vision_blocks_path: str | None = None
    """Path of the ``ModuleList`` of vision encoder blocks."""
    field_overrides: Mapping[str, str] = field(default_factory=dict)
    """Attribute names that differ from the transformers-native modules, canonical -> actual
    (e.g. ``{"kv_a_proj_with_mqa": "kv_down_proj"}``)."""
    tokenizer: str = "fast"
    """The family's tokenizer kind, one of :data:`TOKENIZER_KINDS` (after the fields above, so that
    profiles built with positional arguments keep their meaning)."""
    attention_qk_norm_across_heads: bool = False
    """With ``attention_qk_norm``: one RMSNorm over all heads' queries and one over all keys
    (MiniMax-M2), whose statistic tensor-parallel ranks all-reduce, instead of one per head."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "field_overrides", MappingProxyType(dict(self.field_overrides)))

    __hash__ = None  # type: ignore[assignment]  # field_overrides is a mapping

    @property
    def is_moe(self) -> bool:
        return self.moe_class is not None

    @property
    def has_vision(self) -> bool:
        return self.vision_tower_class is not None

    def validate(self) -> None:
        """Raise :class:`ProfileError` naming the first invalid field."""
        if not isinstance(self.model_type, str) or not _IDENTIFIER.match(self.model_type):
            raise ProfileError("model_type", f"{self.model_type!r} is not a model_type (letters, digits, '_')")
        for name in ("decoder_layer_class", "attention_class", "moe_class", "vision_tower_class"):
            value = getattr(self, name)
            required = name in ("decoder_layer_class", "attention_class")
            if value is None and not required:
                continue
            if not isinstance(value, str) or not _IDENTIFIER.match(value):
                raise ProfileError(name, f"{value!r} is not a class name")
        if not isinstance(self.attention_kind, str) or not _IDENTIFIER.match(self.attention_kind):
            raise ProfileError("attention_kind", f"{self.attention_kind!r} is not a kind name; built in: "
                               f"{', '.join(ATTENTION_KINDS)}")
        for name in ("routed_experts_key", "text_config_key"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, str) or not _IDENTIFIER.match(value)):
                raise ProfileError(name, f"{value!r} is not a config key")
        if self.moe_class is not None and self.routed_experts_key is None:
            raise ProfileError("routed_experts_key", "required when moe_class is set")
        if self.moe_class is None and self.routed_experts_key:
            raise ProfileError("moe_class", "expert-count keys are set but moe_class is None")
        for name in ("language_model_path", "layers_path", "vision_tower_path", "vision_blocks_path"):
            value = getattr(self, name)
            if value is None and name.startswith("vision"):
                continue
            if not isinstance(value, str) or not _DOTTED_PATH.match(value):
                raise ProfileError(name, f"{value!r} is not a dotted attribute path")
        vision = (self.vision_tower_class, self.vision_tower_path, self.vision_blocks_path)
        if any(v is not None for v in vision) and not all(v is not None for v in vision):
            raise ProfileError(
                "vision_tower_path",
                "vision_tower_class, vision_tower_path and vision_blocks_path go together",
            )
        for key, value in self.field_overrides.items():
            if not (isinstance(key, str) and isinstance(value, str) and _IDENTIFIER.match(key) and _IDENTIFIER.match(value)):
                raise ProfileError("field_overrides", f"{key!r} -> {value!r} is not an attribute-name pair")
        for name in ("attention_qk_norm", "attention_qk_norm_across_heads"):
            if not isinstance(getattr(self, name), bool):
                raise ProfileError(name, f"{getattr(self, name)!r} is not a bool")
        if self.attention_qk_norm_across_heads and not self.attention_qk_norm:
            raise ProfileError("attention_qk_norm_across_heads", "needs attention_qk_norm")
        if self.tokenizer not in TOKENIZER_KINDS:
            raise ProfileError("tokenizer",
                               f"{self.tokenizer!r} is not a tokenizer kind; known: {', '.join(TOKENIZER_KINDS)}")

    def field_name(self, canonical: str) -> str:
        """The attribute name this family uses for a canonical (transformers-native) name."""
        return self.field_overrides.get(canonical, canonical)

    def to_dict(self) -> dict:
        return {f.name: (dict(v) if isinstance(v := getattr(self, f.name), Mapping) else v) for f in fields(self)}
