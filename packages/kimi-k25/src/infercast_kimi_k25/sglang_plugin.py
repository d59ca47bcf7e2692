"""Optional sglang glue (extra ``sglang``): nothing in infercast imports this module.

- :func:`register` is an sglang general plugin (entry-point group ``sglang.srt.plugins``): it
  registers the ``kimi_k2`` config alias with transformers' ``AutoConfig`` and with sglang's
  own config registry where the installed sglang lacks it.
- :mod:`infercast_kimi_k25.sglang_models` is usable as ``SGLANG_EXTERNAL_MODEL_PACKAGE``: it
  serves ``Eagle3DeepseekV2ForCausalLM`` with sglang's implementation, after checking every
  checkpoint tensor with :func:`checked_weights` — the same name mapping and shape checks the
  plain-PyTorch loader applies, so what CI tests is what sglang gets.
"""

from __future__ import annotations

import importlib
import logging
from collections.abc import Iterable, Iterator
from typing import Any

import torch

from infercast_kimi_k25.eagle3 import KimiK2Config, register_kimi_k2_config

logger = logging.getLogger(__name__)

SGLANG_CONFIG_MODULES = ("sglang.srt.utils.hf_transformers_utils", "sglang.srt.hf_transformers_utils")
"""Where sglang has kept its ``model_type -> config class`` registry (newest first)."""


def sglang_config_registry() -> dict | None:
    for name in SGLANG_CONFIG_MODULES:
        try:
            module = importlib.import_module(name)
        except ImportError:
            continue
        registry = getattr(module, "_CONFIG_REGISTRY", None)
        if isinstance(registry, dict):
            return registry
    return None


def register(config_registry: dict | None = None) -> list[str]:
    """Register ``kimi_k2`` where missing; returns the registries it was added to."""
    register_kimi_k2_config()
    registry = config_registry if config_registry is not None else sglang_config_registry()
    if registry is None or "kimi_k2" in registry:
        return []
    registry["kimi_k2"] = KimiK2Config
    logger.info("infercast: registered model_type kimi_k2 (DeepSeek-V3 config) with sglang")
    return ["sglang"]


def checked_weights(config: Any, weights: Iterable[tuple[str, torch.Tensor]]) -> Iterator[tuple[str, torch.Tensor]]:
    """Pass a checkpoint's tensors through unchanged after checking them against the draft
    that ``config`` describes (built on the meta device): an unexpected, missing or mis-shaped
    tensor stops loading with an error naming it and the expected shape."""
    from infercast_eagle3.checkpoint import check_tensors, checkpoint_to_module
    from infercast_eagle3.config import from_transformers

    from infercast_kimi_k25.eagle3 import Eagle3DeepseekV2ForCausalLM

    weights = list(weights)
    with torch.device("meta"):
        draft = Eagle3DeepseekV2ForCausalLM(from_transformers(config))
        module_named = checkpoint_to_module({name: torch.empty(tuple(t.shape)) for name, t in weights})
    check_tensors({name: tuple(t.shape) for name, t in module_named.items()},
                  {name: tuple(t.shape) for name, t in draft.state_dict().items()})
    yield from weights
