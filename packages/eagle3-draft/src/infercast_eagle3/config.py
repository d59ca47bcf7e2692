"""EAGLE3 draft configuration: a draft checkpoint's ``config.json`` read as sglang 0.5.23 reads it.

Upstream semantics (sglang 0.5.23): ``python/sglang/srt/models/llama_eagle3.py`` and
``kimi_k25_eagle3.py`` (fc width, ``fc_norm`` / ``use_aux_norm``, ``norm_before_fc``,
``norm_output``, ``bias``, ``draft_vocab_size``), ``model_executor/model_runner_components/
spec_aux_hidden_state.py`` (capture ids come from ``eagle_config`` only) and the targets'
``set_eagle3_layers_to_capture`` (``models/llama.py``, ``models/deepseek_v2.py``). Every field
that changes what the draft computes is either honoured or refused with an error naming it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from infercast_adapters import ConfigError

DEFAULT_AUX_RULE = "[2, N // 2, N - 3] at the inputs of those target layers"

ADD_ONE = "add_one"
ADD_ONE_IF_FIRST_IS_ONE = "add_one_if_first_is_one"
BUILTIN_CAPTURE_RULES: dict[str, str] = {
    # sglang's own models that add one only when the first id is 1 (deepseek_v2.py and
    # glm4_moe_lite.py); adapters answer for the families they own (Kimi: kimi_k25, kimi_k2).
    "deepseek_v2": ADD_ONE_IF_FIRST_IS_ONE,
    "deepseek_v3": ADD_ONE_IF_FIRST_IS_ONE,
    "deepseek_v32": ADD_ONE_IF_FIRST_IS_ONE,
    "glm4_moe_lite": ADD_ONE_IF_FIRST_IS_ONE,
}
"""Target model types whose capture rule sglang itself decides; every other family adds one."""

LLAMA_EAGLE3 = "LlamaForCausalLMEagle3"
MLA_EAGLE3 = "Eagle3DeepseekV2ForCausalLM"
REFUSED_ARCHITECTURES: dict[str, str] = {
    "LlamaForCausalLMEagle": "an EAGLE-1/2 draft (sglang's llama_eagle.py: fc over [embeds, hidden], no aux layers, "
                             "the target's lm_head)",
    "Qwen2ForCausalLMEagle": "an EAGLE-1/2 draft (sglang's qwen2_eagle.py)",
    "MistralForCausalLMEagle": "an EAGLE-1/2 draft (sglang's mistral_eagle.py)",
}
"""Draft architectures sglang serves with another algorithm than EAGLE3."""

HIDDEN_ACTIVATIONS = ("silu",)
"""What sglang's draft MLPs compute (LlamaMLP and DeepseekV2MLP raise on anything else)."""


def default_aux_layers(num_target_layers: int) -> list[int]:
    """sglang's capture points when the draft config names none: the inputs of target layers
    2, N // 2 and N - 3 (DeepSeek-family and Llama targets alike)."""
    n = num_target_layers
    if n < 6:
        raise ConfigError(f"a target with {n} layers is too shallow for the default aux layers {DEFAULT_AUX_RULE}; "
                          "give eagle_config.eagle_aux_hidden_state_layer_ids")
    return [2, n // 2, n - 3]


def _get(config: Any, key: str, default: Any = None) -> Any:
    if isinstance(config, Mapping):
        return config.get(key, default)
    return getattr(config, key, default)


@dataclass
class Eagle3Config:
    """A draft's shape and options. ``layer_config`` is the transformers config its decoder
    layer is built from; ``architecture`` is ``architectures[0]`` and chooses that layer."""

    hidden_size: int
    vocab_size: int
    draft_vocab_size: int
    target_hidden_size: int
    architecture: str
    layer_config: Any
    aux_layer_ids: list[int] | None = None
    """``eagle_config.eagle_aux_hidden_state_layer_ids``; None: sglang's default layers."""
    use_aux_hidden_state: bool = True
    num_aux: int = 3
    """Target hidden states concatenated into ``fc`` (1 when aux hidden states are off)."""
    fc_norm: bool = False
    """EAGLE 3.1: one RMSNorm per aux hidden state before ``fc`` (``fc_norm`` or legacy ``use_aux_norm``)."""
    norm_before_fc: bool = False
    """One RMSNorm over the concatenated aux hidden states before ``fc`` (Llama drafts)."""
    norm_output: bool = False
    """EAGLE 3.1: the next draft step reads the normed hidden state (default: before the norm)."""
    fc_bias: bool = False
    lm_head_from_target: bool = False
    """No ``draft_vocab_size`` in the config: sglang serves the target's lm_head (full vocabulary)."""
    tie_word_embeddings: bool = False

    @property
    def shares_target_embedding(self) -> bool:
        """sglang replaces the draft's embedding with the target's unless their widths differ."""
        return self.target_hidden_size == self.hidden_size

    @property
    def prunes_vocabulary(self) -> bool:
        return self.draft_vocab_size != self.vocab_size

    def capture_indices(self, num_target_layers: int, rule: str) -> list[int]:
        """Indices into a transformers ``hidden_states`` tuple (0 = embeddings, i = input of
        layer i, N = the final normed state) of what the draft reads, under the target
        family's capture ``rule`` (:data:`ADD_ONE` or :data:`ADD_ONE_IF_FIRST_IS_ONE`), in
        the ascending layer order sglang concatenates them in."""
        n = num_target_layers
        if not self.use_aux_hidden_state:
            return [n]  # the target's last (normed) hidden state, as for EAGLE-1/2
        if self.aux_layer_ids is None:
            return default_aux_layers(n)
        if rule == ADD_ONE:
            indices = [i + 1 for i in self.aux_layer_ids]
        elif rule == ADD_ONE_IF_FIRST_IS_ONE:
            indices = [i + 1 for i in self.aux_layer_ids] if self.aux_layer_ids[0] == 1 else list(self.aux_layer_ids)
        else:
            raise ConfigError(f"unknown EAGLE3 capture rule {rule!r}; valid: {ADD_ONE}, {ADD_ONE_IF_FIRST_IS_ONE}")
        bad = [i for i, index in zip(self.aux_layer_ids, indices) if not 0 <= index < n]
        if bad:
            raise ConfigError(f"eagle_config.eagle_aux_hidden_state_layer_ids {self.aux_layer_ids} under the target's "
                              f"capture rule {rule!r} reads the inputs of layers {indices}; a target with {n} layers "
                              f"has inputs 0..{n - 1} (bad id(s): {bad})")
        return sorted(indices)


def target_capture_rule(target_config: Any, manager: Any = None) -> str:
    """The capture rule of ``target_config``'s family: an adapter's answer to
    ``infercast_eagle3_capture_rule`` for its model_type (then its text model's), else
    :data:`BUILTIN_CAPTURE_RULES`, else :data:`ADD_ONE`."""
    types = [getattr(target_config, "model_type", None)]
    text = target_config.get_text_config() if hasattr(target_config, "get_text_config") else target_config
    types.append(getattr(text, "model_type", None))
    types = [t for t in dict.fromkeys(types) if t]
    if manager is not None:
        for model_type in types:
            rule = manager.eagle3_capture_rule(model_type)
            if rule is not None:
                return rule
    for model_type in types:
        if model_type in BUILTIN_CAPTURE_RULES:
            return BUILTIN_CAPTURE_RULES[model_type]
    return ADD_ONE


def _aux_ids(value: Any, field: str) -> list[int] | None:
    if value is None:
        return None
    if (not isinstance(value, (list, tuple)) or not value
            or not all(isinstance(i, int) and not isinstance(i, bool) for i in value)):
        raise ConfigError(f"{field} must be a non-empty list of layer numbers, got {value!r}")
    if len(set(value)) != len(value):
        raise ConfigError(f"{field} {list(value)} names a layer twice; sglang would capture it once and feed fc "
                          "fewer hidden states than it expects")
    return list(value)


def from_transformers(config: Any) -> Eagle3Config:
    """Read a draft's transformers config (``LlamaForCausalLMEagle3``, ``Eagle3DeepseekV2ForCausalLM``...)."""
    architectures = getattr(config, "architectures", None) or []
    if not architectures:
        raise ConfigError(f"the draft config has no architectures; sglang chooses the draft model by it: "
                          f"{LLAMA_EAGLE3} (Llama layer) or {MLA_EAGLE3} (MLA layer, infercast-kimi-k25)")
    architecture = architectures[0]
    if architecture in REFUSED_ARCHITECTURES:
        raise ConfigError(f"architectures[0] {architecture} is {REFUSED_ARCHITECTURES[architecture]}; infercast-eagle3 "
                          f"runs EAGLE3 drafts ({LLAMA_EAGLE3}, {MLA_EAGLE3})")
    layers = getattr(config, "num_hidden_layers", 1)
    if layers != 1:
        raise ConfigError(f"num_hidden_layers={layers}: infercast-eagle3 builds one-layer EAGLE3 drafts "
                          "(sglang's Eagle3DeepseekV2ForCausalLM allows nothing else)")
    act = getattr(config, "hidden_act", "silu")
    if act not in HIDDEN_ACTIVATIONS:
        raise ConfigError(f"hidden_act={act!r}: sglang's EAGLE3 draft MLP supports only {', '.join(HIDDEN_ACTIVATIONS)}")

    eagle = getattr(config, "eagle_config", None) or {}
    ids = _aux_ids(_get(eagle, "eagle_aux_hidden_state_layer_ids"), "eagle_config.eagle_aux_hidden_state_layer_ids")
    top_ids = _aux_ids(getattr(config, "eagle_aux_hidden_state_layer_ids", None), "eagle_aux_hidden_state_layer_ids")
    if top_ids is not None and top_ids != ids:
        raise ConfigError(
            f"eagle_aux_hidden_state_layer_ids {top_ids} is at the top level of the draft config"
            + (f" and disagrees with eagle_config's {ids}" if ids is not None else "")
            + "; sglang reads the layers to capture only from eagle_config.eagle_aux_hidden_state_layer_ids "
            f"(without it, the default {DEFAULT_AUX_RULE}), so move the ids into eagle_config")
    use_aux = bool(_get(eagle, "use_aux_hidden_state", True))
    captured = (len(ids) if ids is not None else 3) if use_aux else 1
    num_aux = getattr(config, "num_aux_hidden_states", None)
    if use_aux and num_aux is not None and num_aux != captured:
        raise ConfigError(f"num_aux_hidden_states={num_aux}, but the target's capture yields {captured} hidden "
                          f"state(s) ({'eagle_config.eagle_aux_hidden_state_layer_ids' if ids else 'the default'}); "
                          "fc would not fit what it is fed")

    hidden = config.hidden_size
    target_hidden = getattr(config, "target_hidden_size", None) or hidden
    if not use_aux and target_hidden != hidden:
        raise ConfigError(f"eagle_config.use_aux_hidden_state is false, so the draft reads the target's last hidden "
                          f"state directly; that needs target_hidden_size ({target_hidden}) == hidden_size ({hidden})")
    fc_norm = bool(getattr(config, "fc_norm", None) or getattr(config, "use_aux_norm", False))
    norm_before_fc = bool(_get(eagle, "norm_before_fc", getattr(config, "norm_before_fc", False)))
    if not use_aux and (fc_norm or norm_before_fc):
        field = "fc_norm" if fc_norm else "norm_before_fc"
        raise ConfigError(f"{field} normalises the aux hidden states before fc, but eagle_config.use_aux_hidden_state "
                          "is false: there is no fc to feed and it would be ignored")
    if norm_before_fc and architecture != LLAMA_EAGLE3:
        raise ConfigError(f"norm_before_fc is set, but sglang's {architecture} has no norm before fc (only "
                          f"{LLAMA_EAGLE3} does); it would be ignored")

    vocab = config.vocab_size
    draft_vocab = getattr(config, "draft_vocab_size", None)
    tie = bool(getattr(config, "tie_word_embeddings", False))
    if draft_vocab is not None and draft_vocab > vocab:
        raise ConfigError(f"draft_vocab_size {draft_vocab} exceeds the vocabulary {vocab}")
    if tie and draft_vocab not in (None, vocab):
        raise ConfigError(f"tie_word_embeddings is true, so the draft's lm_head is its {vocab}-row embedding; "
                          f"draft_vocab_size {draft_vocab} cannot be pruned")
    return Eagle3Config(
        hidden_size=hidden, vocab_size=vocab, draft_vocab_size=draft_vocab if draft_vocab is not None else vocab,
        target_hidden_size=target_hidden, architecture=architecture, layer_config=config, aux_layer_ids=ids,
        use_aux_hidden_state=use_aux, num_aux=captured, fc_norm=fc_norm, norm_before_fc=norm_before_fc,
        norm_output=bool(getattr(config, "norm_output", False)), fc_bias=bool(getattr(config, "bias", False)),
        lm_head_from_target=draft_vocab is None and not tie, tie_word_embeddings=tie)
