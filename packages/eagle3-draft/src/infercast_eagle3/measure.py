"""Acceptance measurement: run prompts through a target and a draft and report what the
engines report (mean accept length, per-position acceptance rates, a histogram), and how fast
the measurement itself ran.

Target and draft keep KV caches (see :mod:`infercast_eagle3.loop`), so a few hundred prompts of
a few hundred tokens on a small target take minutes on a CPU; the numbers are exactly those of
greedy EAGLE3 decoding with the same settings.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch
from infercast_adapters import ConfigError

from infercast_eagle3.config import from_transformers, target_capture_rule
from infercast_eagle3.loop import (
    Acceptance,
    Cycle,
    SpecSettings,
    Target,
    greedy_reference,
    speculative_generate,
    summarize,
)
from infercast_eagle3.model import Eagle3Draft, build_draft


@dataclass
class Measurement:
    settings: SpecSettings
    acceptance: Acceptance
    prompts: int
    generated_tokens: int
    per_prompt_accept_length: list[float]
    wall_s: float
    lossless: bool | None
    """Whether every output equalled the target's own greedy decoding (None: not checked)."""
    capture: list[int] | None = None
    """The target hidden states the draft read (indices into transformers' ``hidden_states``)."""

    @property
    def tokens_per_s(self) -> float:
        """Generated tokens per second of the measurement (the lossless check excluded)."""
        return self.generated_tokens / self.wall_s if self.wall_s > 0 else float("inf")

    @property
    def prompts_per_s(self) -> float:
        return self.prompts / self.wall_s if self.wall_s > 0 else float("inf")

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["acceptance"]["histogram"] = {str(k): v for k, v in self.acceptance.histogram.items()}
        out["tokens_per_s"], out["prompts_per_s"] = self.tokens_per_s, self.prompts_per_s
        return out


def num_target_layers(model) -> int:
    return model.config.get_text_config().num_hidden_layers


def measure(model, drafter, prompts: Sequence[Sequence[int]], settings: SpecSettings = SpecSettings(),
            max_new_tokens: int = 64, *, capture: list[int] | None = None, eos_token_id: int | None = None,
            check_lossless: bool = False, on_prompt: Callable[[int], None] | None = None,
            manager: Any = None) -> Measurement:
    """Greedy speculative decoding of every prompt; acceptance over all cycles.

    ``drafter`` is an :class:`Eagle3Drafter` (its config names the aux layers, read with the
    target family's capture rule from ``manager``'s adapters) or any object with
    ``reset``/``begin``/``expand``/``to_target`` (then ``capture`` defaults to none)."""
    settings = settings.validated()
    if not prompts:
        raise ConfigError("no prompts to measure")
    if max_new_tokens < 2:
        raise ConfigError(f"max_new_tokens must be >= 2 (one draft/verify cycle), got {max_new_tokens}")
    if capture is None:
        draft = getattr(drafter, "draft", None)
        capture = [] if draft is None else draft.config.capture_indices(
            num_target_layers(model), target_capture_rule(model.config, _manager(manager)))
    target = Target(model, capture)
    cycles: list[Cycle] = []
    per_prompt, generated, lossless, wall = [], 0, True if check_lossless else None, 0.0
    for i, prompt in enumerate(prompts):
        start = time.perf_counter()
        out = speculative_generate(target, drafter, list(prompt), max_new_tokens, settings, eos_token_id)
        wall += time.perf_counter() - start
        if check_lossless and out.tokens != greedy_reference(model, list(prompt), len(out.tokens)):
            lossless = False
        cycles += out.cycles
        generated += len(out.tokens)
        if out.cycles:
            per_prompt.append(sum(c.accept_length for c in out.cycles) / len(out.cycles))
        if on_prompt is not None:
            on_prompt(i)
    return Measurement(settings, summarize(cycles, settings.num_steps), len(prompts), generated, per_prompt,
                       wall, lossless, capture)


def _manager(manager: Any) -> Any:
    if manager is None:
        from infercast_adapters.manager import load_default_manager

        manager = load_default_manager()
    return manager


# ------------------------------------------------------------------------------ loading


def load_target(ref: str, *, dtype: torch.dtype = torch.bfloat16, device: str = "cpu"):
    """A transformers causal LM (or image-text-to-text model, e.g. Kimi-K2.5) from a hub id or path."""
    from transformers import (
        AutoConfig,
        AutoModelForCausalLM,
        AutoModelForImageTextToText,
    )

    try:
        config = AutoConfig.from_pretrained(ref)
    except (OSError, ValueError) as exc:
        raise ConfigError(f"cannot read the target's config from {ref!r}: {exc}") from None
    for auto in (AutoModelForCausalLM, AutoModelForImageTextToText):
        try:
            return auto.from_pretrained(ref, config=config, dtype=dtype).to(device).eval()
        except ValueError:
            continue
    raise ConfigError(f"{ref}: model_type {config.model_type!r} is neither a causal LM nor an image-text-to-text model "
                      "transformers can build")


def load_draft(path: str | Path, model, *, manager: Any = None, dtype: torch.dtype = torch.bfloat16) -> Eagle3Draft:
    """An EAGLE3 draft from a directory with ``config.json`` and safetensors weights, checked
    against the target it will serve. As sglang does, it uses the target's embedding (unless
    ``target_hidden_size`` differs from ``hidden_size``) and, without ``draft_vocab_size``, the
    target's lm_head."""
    from infercast_adapters.config import load_local_config

    from infercast_eagle3.checkpoint import checkpoint_names, load_weights

    manager = _manager(manager)
    path = Path(path)
    if not (path / "config.json").is_file():
        raise ConfigError(f"{path}: expected a draft directory with config.json and *.safetensors")
    config = from_transformers(load_local_config(path, manager.config_aliases() if manager is not None else {}))
    target_config = model.config.get_text_config()
    names = checkpoint_names(path)
    check_fits(config, target_config.hidden_size, target_config.vocab_size, "d2t" in names)
    if config.lm_head_from_target and model.get_output_embeddings() is None:
        raise ConfigError("the draft config has no draft_vocab_size, so the draft uses the target's lm_head, "
                          "and this target has none")
    previous = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        with torch.device(model.device):
            draft = build_draft(config, target_config.model_type, manager, embed_tokens=model.get_input_embeddings(),
                                lm_head=model.get_output_embeddings())
    finally:
        torch.set_default_dtype(previous)
    owned = draft.state_dict()
    if "lm_head.weight" in owned and "lm_head.weight" not in names:
        raise ConfigError(f"the checkpoint has no lm_head.weight, but the config's draft_vocab_size "
                          f"({config.draft_vocab_size}) says the draft has its own head; sglang loads the target's "
                          "head only when draft_vocab_size is absent from config.json, so remove it there to use "
                          "the target's")
    if "embed_tokens.weight" in owned and "embed_tokens.weight" not in names:
        raise ConfigError(f"the checkpoint has no embed_tokens.weight, and the draft cannot use the target's: its "
                          f"hidden_size {config.hidden_size} differs from target_hidden_size {config.target_hidden_size}")
    load_weights(draft, path)
    return draft.eval()


def check_fits(config, target_hidden: int, target_vocab: int, has_d2t: bool) -> None:
    """A draft serves a target only if it reads the target's hidden states and maps its
    vocabulary onto the target's."""
    if config.target_hidden_size != target_hidden:
        raise ConfigError(f"the draft reads target hidden states {config.target_hidden_size} wide "
                          f"(target_hidden_size); the target's hidden size is {target_hidden}")
    if config.vocab_size != target_vocab:
        raise ConfigError(f"the draft's vocabulary has {config.vocab_size} tokens, the target's {target_vocab}")
    if config.draft_vocab_size != target_vocab and not has_d2t:
        raise ConfigError(f"the draft predicts {config.draft_vocab_size} of the target's {target_vocab} tokens but its "
                          "checkpoint has no d2t map from draft ids to target ids")

