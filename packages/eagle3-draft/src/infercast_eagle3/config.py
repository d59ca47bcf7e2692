"""EAGLE3 draft configuration: what a draft checkpoint's config.json says, validated."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from infercast_adapters import ConfigError

DEFAULT_AUX_RULE = "[2, N // 2, N - 3] at the inputs of those target layers"


def default_aux_layers(num_target_layers: int) -> list[int]:
    """sglang's capture points when the draft config names none: the inputs of target layers
    2, N // 2 and N - 3 (DeepSeek-family and Llama targets alike)."""
    n = num_target_layers
    if n < 6:
        raise ConfigError(f"a target with {n} layers is too shallow for the default aux layers {DEFAULT_AUX_RULE}; "
                          "give eagle_config.eagle_aux_hidden_state_layer_ids")
    return [2, n // 2, n - 3]


@dataclass
class Eagle3Config:
    """A draft's shape. ``layer_config`` is the transformers config its decoder layer is built from."""

    hidden_size: int
    vocab_size: int
    draft_vocab_size: int
    target_hidden_size: int
    architecture: str
    layer_config: Any
    aux_layer_ids: list[int] | None = None
    """Target layers whose *outputs* the draft reads (checkpoint convention); None: the default."""
    use_aux_hidden_state: bool = True

    def capture_indices(self, num_target_layers: int) -> list[int]:
        """Indices into a transformers ``hidden_states`` tuple (0 = embeddings, i = input of
        layer i): explicit ids are layer outputs (id + 1), the default already names inputs."""
        if not self.use_aux_hidden_state:
            return [num_target_layers]  # EAGLE-1/2 style: the last hidden state only
        if self.aux_layer_ids is None:
            return default_aux_layers(num_target_layers)
        for i in self.aux_layer_ids:
            if not 0 <= i < num_target_layers:
                raise ConfigError(f"aux hidden-state layer id {i} is outside the target's 0..{num_target_layers - 1}")
        return [i + 1 for i in self.aux_layer_ids]

    @property
    def num_aux(self) -> int:
        return len(self.aux_layer_ids) if self.aux_layer_ids is not None and self.use_aux_hidden_state else (
            3 if self.use_aux_hidden_state else 1)


def from_transformers(config: Any) -> Eagle3Config:
    """Read a draft's transformers config (``LlamaForCausalLMEagle3``, ``Eagle3DeepseekV2ForCausalLM``...)."""
    layers = getattr(config, "num_hidden_layers", 1)
    if layers != 1:
        raise ConfigError(f"an EAGLE3 draft has exactly one decoder layer; this config has num_hidden_layers={layers}")
    eagle = getattr(config, "eagle_config", None) or {}
    ids = eagle.get("eagle_aux_hidden_state_layer_ids")
    use_aux = bool(eagle.get("use_aux_hidden_state", True))
    if ids is not None and (not isinstance(ids, list) or not all(isinstance(i, int) for i in ids) or not ids):
        raise ConfigError(f"eagle_config.eagle_aux_hidden_state_layer_ids must be a list of layer numbers, got {ids!r}")
    vocab = config.vocab_size
    draft_vocab = getattr(config, "draft_vocab_size", None) or vocab
    if draft_vocab > vocab:
        raise ConfigError(f"draft_vocab_size {draft_vocab} exceeds the vocabulary {vocab}")
    architecture = (getattr(config, "architectures", None) or ["LlamaForCausalLMEagle3"])[0]
    return Eagle3Config(hidden_size=config.hidden_size, vocab_size=vocab, draft_vocab_size=draft_vocab,
                        target_hidden_size=getattr(config, "target_hidden_size", None) or config.hidden_size,
                        architecture=architecture, layer_config=config, aux_layer_ids=ids, use_aux_hidden_state=use_aux)
