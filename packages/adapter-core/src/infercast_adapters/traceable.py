"""Replacements that let transformers' model classes be exported as one static graph.

``torch.export`` on the meta device needs a forward whose shapes and control flow do not depend
on data, whose operators are all ATen operators, and whose inputs are parameters, persistent
buffers or constants a runtime can be given. Two things in transformers' own classes break this,
and each replacement here fixes one of them with the same numbers as the code it replaces:

* :func:`gathered_experts_forward`: the eager experts loop over the experts a batch hits
  (``nonzero``, a Python loop over its result); on meta transformers runs a custom
  ``grouped_mm`` operator instead, which no ATen runtime executes. The replacement gathers each
  (token, slot)'s expert weights and applies them with two batched GEMMs.
* :func:`keep_host_inv_freq` and :func:`rope_from_position_ids`: a rotary embedding reads its
  ``inv_freq`` buffer, which is computed at construction and not saved in a checkpoint; built on
  meta it has no values, so a weight-free graph would read a tensor nobody can supply. The
  replacement keeps a host copy computed by the class's own constructor and lets the graph
  carry it as a constant, then computes (cos, sin) from the position ids.

Adapters hand these out as :class:`~infercast_adapters.Patch` es from their
``infercast_class_patches`` hook (:func:`traceable_patches`), gated on the model types they own.
Importing this module imports torch (every adapter that hands these out depends on it); the
contract modules (hookspecs, manager, profile, patching) never import it.
"""

from __future__ import annotations

import functools
from typing import Callable

import torch

from infercast_adapters.patching import Patch

HOST_INV_FREQ = "_infercast_host_inv_freq"
"""Attribute under which :func:`keep_host_inv_freq` stores a meta-built rotary embedding's
``inv_freq`` computed on the host (a plain tensor attribute: ``torch.export`` lifts it as a
constant with its values)."""

_LAYOUT_FLAGS = {"has_bias": False, "is_transposed": False, "has_gate": True, "is_concatenated": True,
                 "has_post_expert_norm": False}
"""The expert layout :func:`gathered_experts_forward` implements, in the attribute names
transformers' ``use_experts_implementation`` sets."""


def gathered_experts_forward(self: torch.nn.Module, hidden_states: torch.Tensor, top_k_index: torch.Tensor,
                             top_k_weights: torch.Tensor) -> torch.Tensor:
    """Experts stored as 3-D tensors (``gate_up_proj`` [E, 2I, H], ``down_proj`` [E, H, I]) applied
    with static shapes: identical to transformers' eager experts forward except that, instead of
    looping over the experts the batch hits, each token's ``top_k`` experts are gathered by index
    (``index_select``) and applied with two batched GEMMs, then summed with their routing weights.

    :param hidden_states: [tokens, hidden].
    :param top_k_index: [tokens, top_k] expert ids from the router.
    :param top_k_weights: [tokens, top_k] routing weights.
    :return: [tokens, hidden] in ``hidden_states``' dtype.
    """
    odd = [name for name, standard in _LAYOUT_FLAGS.items() if getattr(self, name, standard) != standard]
    if odd:
        raise NotImplementedError(f"{type(self).__name__}: gathered_experts_forward implements gated, concatenated, "
                                  f"untransposed experts without bias; this one sets {', '.join(odd)}")
    tokens, hidden = hidden_states.shape
    top_k = top_k_index.shape[-1]
    slots = top_k_index.reshape(-1)
    rows = hidden_states.unsqueeze(1).expand(tokens, top_k, hidden).reshape(tokens * top_k, 1, hidden)
    gate_up = torch.bmm(rows, self.gate_up_proj.index_select(0, slots).transpose(1, 2))
    gate, up = gate_up.chunk(2, dim=-1)
    out = torch.bmm(self.act_fn(gate) * up, self.down_proj.index_select(0, slots).transpose(1, 2))
    out = out.view(tokens, top_k, hidden) * top_k_weights.unsqueeze(-1)
    return out.sum(dim=1).to(hidden_states.dtype)


def keep_host_inv_freq(init: Callable[..., None]) -> Callable[..., None]:
    """Wrap a rotary embedding's ``__init__``: when the module is built on meta, build a twin on
    the host with the same constructor and keep its ``inv_freq`` under :data:`HOST_INV_FREQ`."""

    @functools.wraps(init)
    def wrapper(self, config, *args, **kwargs):
        init(self, config, *args, **kwargs)
        inv_freq = getattr(self, "inv_freq", None)
        if isinstance(inv_freq, torch.Tensor) and inv_freq.device.type == "meta":
            twin = object.__new__(type(self))
            with torch.device("cpu"):
                init(twin, config, *args, **kwargs)
            # a plain attribute, not a buffer: the checkpoint does not hold it, the graph carries it
            self.__dict__[HOST_INV_FREQ] = twin.inv_freq.detach().clone()

    wrapper.__infercast_wraps__ = init
    return wrapper


def rope_from_position_ids(self: torch.nn.Module, x: torch.Tensor, position_ids: torch.Tensor):
    """A rotary embedding's forward computing (cos, sin) from ``position_ids`` and the host copy
    of ``inv_freq`` (the module's own buffer when it has values): identical to transformers'
    default, llama3 and yarn rotary forwards (the outer product of positions and inverse
    frequencies, duplicated, times ``attention_scaling``) without the ``no_grad`` and autocast
    contexts. Rope types that recompute frequencies per call (dynamic, longrope) are refused.

    :param x: any activation; gives the device and the output dtype.
    :param position_ids: [batch, seq] positions.
    :return: ``(cos, sin)``, each [batch, seq, rotary_dim].
    """
    rope_type = getattr(self, "rope_type", "default")
    if "dynamic" in rope_type or rope_type == "longrope":
        raise NotImplementedError(f"{type(self).__name__}: rope type {rope_type!r} recomputes its frequencies from "
                                  "the sequence length; a static graph cannot")
    inv_freq = getattr(self, HOST_INV_FREQ, None)
    if inv_freq is None:
        inv_freq = self.inv_freq
    freqs = position_ids[..., None].float() * inv_freq.to(device=x.device, dtype=torch.float32)
    emb = torch.cat((freqs, freqs), dim=-1)
    scaling = getattr(self, "attention_scaling", 1.0)
    return (emb.cos() * scaling).to(x.dtype), (emb.sin() * scaling).to(x.dtype)


def traceable_patches(model_type: str, *, experts: type | None = None, rotary: type | None = None) -> list[Patch]:
    """Patches for one model family's classes, gated on ``model_type``: ``experts`` (a 3-D
    stacked experts class) gets :func:`gathered_experts_forward`, ``rotary`` (a rotary embedding)
    gets :func:`keep_host_inv_freq` and :func:`rope_from_position_ids`."""
    patches = []
    if experts is not None:
        patches.append(Patch(experts, "forward", gathered_experts_forward, model_type,
                             "static expert dispatch: gather each token's experts, two batched GEMMs"))
    if rotary is not None:
        patches.append(Patch(rotary, "__init__", keep_host_inv_freq(rotary.__init__), model_type,
                             "keep the host inv_freq of a rotary embedding built on meta"))
        patches.append(Patch(rotary, "forward", rope_from_position_ids, model_type,
                             "RoPE from position ids and a host inv_freq constant"))
    return patches


__all__ = ["HOST_INV_FREQ", "gathered_experts_forward", "keep_host_inv_freq", "rope_from_position_ids",
           "traceable_patches"]
