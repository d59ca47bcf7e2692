"""Optional sglang glue (extra ``sglang``): nothing in infercast imports this module.

- :func:`register` is an sglang general plugin (entry-point group ``sglang.srt.plugins``): it
  registers the ``kimi_k2`` config alias with sglang's config registry
  (``sglang.srt.utils.hf_transformers.common._CONFIG_REGISTRY``) and with transformers'
  ``AutoConfig``, each only where it is missing: sglang 0.5.23 has its own entry, which stays.
- :mod:`infercast_kimi_k25.sglang_models` is usable as ``SGLANG_EXTERNAL_MODEL_PACKAGE``: it
  serves ``Eagle3DeepseekV2ForCausalLM`` with sglang's implementation, after
  :func:`checked_weights` has checked every checkpoint tensor on its way to sglang's
  ``load_weights``.

What sglang's ``load_weights`` does with a name is modelled in :func:`sglang_param_name`
(sglang 0.5.23 ``python/sglang/srt/models/kimi_k25_eagle3.py``): ``layers.0.`` becomes
``midlayer.``, everything but ``lm_head`` gets a ``model.`` prefix, gate/up go to
``gate_up_proj``, q_a/kv_a are fused; a name that lands on no parameter is skipped with a
warning. The glue first spells every name the way that loader understands
(:func:`infercast_eagle3.checkpoint.canonical_name`: no ``model.`` prefix, which sglang would
double and skip; ``midlayer.`` as ``layers.0.``; legacy ``aux_norm_*`` as ``fc_norm.<i>``), then
accepts a tensor exactly when sglang would load it into one of the model's parameters
(quantisation scales included), with the draft's shape where the draft has the tensor.
"""

from __future__ import annotations

import importlib
import logging
import re
from collections.abc import Collection, Iterable, Iterator
from typing import Any

import torch
from infercast_adapters import ConfigError

from infercast_kimi_k25.eagle3 import ARCHITECTURE, KimiK2Config, register_kimi_k2_config

logger = logging.getLogger(__name__)

SGLANG_CONFIG_MODULE = "sglang.srt.utils.hf_transformers.common"
"""Where sglang keeps its ``model_type -> config class`` registry (0.5.x; ``hf_transformers_utils``
is only a re-exporting shim that does not carry the private registry)."""

STACKED = (".gate_proj", ".up_proj")
FUSED_HALVES = ("q_a_proj", "kv_a_proj_with_mqa")


def sglang_config_registry() -> dict | None:
    try:
        module = importlib.import_module(SGLANG_CONFIG_MODULE)
    except ImportError:
        return None
    registry = getattr(module, "_CONFIG_REGISTRY", None)
    return registry if isinstance(registry, dict) else None


def register(config_registry: dict | None = None) -> list[str]:
    """Register ``kimi_k2`` where it is missing; returns where it was added (``"sglang"``,
    ``"transformers"``). sglang's registry is looked up first: importing it registers sglang's
    own alias with ``AutoConfig``, which is then kept."""
    registry = config_registry if config_registry is not None else sglang_config_registry()
    added = []
    if registry is not None and "kimi_k2" not in registry:
        registry["kimi_k2"] = KimiK2Config
        added.append("sglang")
    if register_kimi_k2_config():
        added.append("transformers")
    if added:
        logger.info("infercast: registered model_type kimi_k2 (DeepSeek-V3 config) with %s", " and ".join(added))
    return added


def sglang_param_name(name: str) -> str | None:
    """The parameter sglang 0.5.23's ``Eagle3DeepseekV2ForCausalLM.load_weights`` loads the
    checkpoint tensor ``name`` into (None for ``d2t`` / ``t2d``, which it consumes itself). It
    loads the tensor only if that parameter exists; q_a / kv_a only as a pair, fused."""
    if name in ("d2t", "t2d") or name.endswith((".d2t", ".t2d")):
        return None
    mapped = re.sub(r"^layers\.0\.", "midlayer.", name)
    if not mapped.startswith("lm_head."):
        mapped = "model." + mapped
    for shard in STACKED:
        if shard in mapped:
            return mapped.replace(shard, ".gate_up_proj")
    if any(half in mapped for half in FUSED_HALVES):
        q = mapped.replace("kv_a_proj_with_mqa", "q_a_proj")
        return q.replace("q_a_proj", "fused_qkv_a_proj_with_mqa")
    return mapped


def sglang_params(draft) -> set[str]:
    """The parameter names of sglang's model for the unquantised draft ``draft`` (our module
    names, in sglang's layout)."""
    names = set()
    for name in draft.state_dict():
        if name == "d2t":
            continue
        name = re.sub(r"^layers\.0\.", "midlayer.", name)
        for shard in STACKED:
            name = name.replace(shard, ".gate_up_proj")
        names.add(name if name.startswith("lm_head.") else "model." + name)
    return names


def checked_weights(config: Any, weights: Iterable[tuple[str, torch.Tensor]],
                    params: Collection[str] | None = None) -> Iterator[tuple[str, torch.Tensor]]:
    """Stream a checkpoint's tensors to sglang's ``load_weights``, one at a time: each name
    spelt the way that loader understands, each tensor checked on the way. ``params``: the
    parameter names of the sglang model being loaded (default: those of the unquantised draft
    ``config`` describes). A tensor sglang would skip, or with a shape the draft does not have,
    stops loading with an error naming it; a missing one, once the stream ends."""
    from infercast_eagle3.checkpoint import TensorCheck, canonical_name, draft_expectations, module_name
    from infercast_eagle3.config import from_transformers

    from infercast_kimi_k25.eagle3 import Eagle3DeepseekV2ForCausalLM

    spec = from_transformers(config)
    with torch.device("meta"):
        draft = Eagle3DeepseekV2ForCausalLM(spec)
    expected, optional, ignored = draft_expectations(draft)
    if spec.lm_head_from_target:  # sglang loads the target's head over the draft's
        optional.add("lm_head.weight")
    params = set(params) if params is not None else sglang_params(draft)
    check = TensorCheck(expected, optional, ignored)
    for name, tensor in weights:
        forwarded = canonical_name(name)
        param = sglang_param_name(forwarded)
        if param is not None and param not in params:
            raise ConfigError(f"sglang's {ARCHITECTURE}.load_weights would skip {name}: it has no parameter {param}"
                              f"{f' (read as {forwarded})' if forwarded != name else ''}; its parameters: "
                              f"{', '.join(sorted(params))}")
        if param is None or module_name(forwarded) in expected:
            check.see(forwarded, tensor.shape)
        # else: a parameter sglang has and the plain draft has not (a quantisation scale)
        yield forwarded, tensor
    check.finish()
