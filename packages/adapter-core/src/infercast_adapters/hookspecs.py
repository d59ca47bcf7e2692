"""Hook specifications of the infercast adapter contract.

A plugin implements any subset of these functions, decorated with
:data:`infercast_adapters.hookimpl`. Hooks are listed in the order a consumer calls them
when it builds a model: profiles and draft layers at start-up, then config resolution,
config patches (phase 1) and class patches (phase 2) for each model, and the EAGLE3 capture
rule when a draft is paired with its target.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable

import pluggy

if TYPE_CHECKING:
    from transformers import PretrainedConfig

    from infercast_adapters.catalog import ModelRef, SpecOption
    from infercast_adapters.config import PlainConfig
    from infercast_adapters.patching import Patch
    from infercast_adapters.profile import ModelProfile

hookspec = pluggy.HookspecMarker("infercast")

# -------------------------------------------------------------------------------------------
# start-up: what a plugin provides


@hookspec
def infercast_register_profiles(register: Callable[[ModelProfile], None]) -> None:
    """Register the model families this plugin describes.

    Called once, right after the plugin manager has loaded its plugins. Each profile is
    validated when it is registered; an invalid profile, or a model_type another plugin
    already registered, marks this plugin as failed (the others keep working).

    :param register: call ``register(profile)`` once per
        :class:`~infercast_adapters.profile.ModelProfile`.
    :return: nothing; profiles go through ``register``.
    """


@hookspec
def infercast_register_draft_layers(register: Callable[[str, type], None]) -> None:
    """Register EAGLE3 draft decoder layers by the draft's architecture.

    Called once at start-up by consumers that build EAGLE3 draft models. A draft's layer is
    chosen by the first entry of its config's ``architectures`` (as sglang's model registry
    chooses the draft model), whatever the target: a ``LlamaForCausalLMEagle3`` draft serving
    Kimi-K2.5 is a Llama layer.

    :param register: call ``register(architecture, layer_class)``, e.g.
        ``register("Eagle3DeepseekV2ForCausalLM", MLADraftLayer)``; ``layer_class`` is an
        ``nn.Module`` subclass constructed as ``layer_class(config, layer_idx)`` whose forward
        takes ``(embeds, hidden_states, positions, mask, cache)`` and returns the new hidden
        states. An architecture registered by two plugins fails the second.
    :return: nothing; layers go through ``register``.
    """


@hookspec
def infercast_register_sim_layers(register: Callable[[str, str, Callable[..., Any]], None]) -> None:
    """Register builders of the simulator's engine-view layers (what a serving engine launches
    for a module), so a new family is priced without changing the simulator.

    Called once at start-up by the simulator (other consumers never call it). A builder is
    only called when a model needs it, so registering imports nothing. Roles and what the
    simulator calls the builder with (all keyword arguments):

    - ``attention``, keyed by a profile's ``attention_kind``: ``builder(ctx, config, index)``
      returns the attention module of decoder layer ``index``;
    - ``mlp``, keyed by an MLP kind (``dense``, ``moe`` or a new one): ``builder(ctx, config,
      index)``;
    - ``plan``, keyed by a model_type (or ``default``): ``builder(config)`` returns one
      ``(attention_kind, mlp_kind)`` pair per decoder layer;
    - ``vision``, keyed by a model_type: ``builder(ctx, config, text_hidden)`` returns the
      vision tower and projector;
    - ``embedding`` and ``head``, keyed ``default`` or by a model_type: ``builder(ctx, config)``.

    ``config`` is the language-model config (the whole config for ``vision``) and ``ctx`` the
    simulator's per-rank context. A key that is a model_type must be one this plugin
    registered a profile for; a (role, key) registered by two plugins is an error naming both.

    :param register: call ``register(role, key, builder)``.
    :return: nothing; builders go through ``register``.
    """


@hookspec
def infercast_register_models(register: Callable[[ModelRef], None]) -> None:
    """Name the model references this plugin resolves offline, their aliases, and whether
    one is offered as the default model.

    Called once at start-up; it only names things (no model code is imported), so commands
    that list models stay fast. Each entry's model_type must be one this plugin registers a
    profile for.

    :param register: call ``register(ModelRef(...))`` once per model reference.
    :return: nothing; references go through ``register``.
    """


@hookspec
def infercast_register_speculative(register: Callable[[SpecOption], None]) -> None:
    """Name the speculative-decoding options of this plugin's model families: an EAGLE3 draft
    or the family's own MTP layers, with the engine's default setting and the published
    acceptance (the presets ``--acceptance-preset`` offers, the options ``infercast plan``
    sweeps by default).

    Called once at start-up; it only names things. Each option's model_type must be one this
    plugin registers a profile for.

    :param register: call ``register(SpecOption(...))`` once per option.
    :return: nothing; options go through ``register``.
    """


@hookspec
def infercast_register_config_aliases(register: Callable[[str, str], None]) -> None:
    """Name remote-code model types whose architecture transformers ships natively under
    another model_type (Kimi-K2's ``kimi_k2`` is ``deepseek_v3``).

    Called once at start-up; it only names things. The config loader reads a ``config.json``
    (or a hub config) of such a type as the native config class, with the same values, so no
    remote code runs and nothing is registered with ``AutoConfig``. An alias registered by two
    plugins for different native types is an error naming both.

    :param register: call ``register(model_type, native_model_type)`` once per alias.
    :return: nothing; aliases go through ``register``.
    """


# -------------------------------------------------------------------------------------------
# per model: resolve, then patch


@hookspec(firstresult=True)
def infercast_resolve_config(model_ref: str) -> PretrainedConfig | PlainConfig | None:
    """Turn a model reference into a config without the hub.

    Called by config loading after a local path has been ruled out and before the hub is
    asked, so bundled architectures work offline. Stops at the first non-None result.

    :param model_ref: what the user typed: a hub id (``moonshotai/Kimi-K2.5``) or an alias.
    :return: a fresh config object the caller may modify (a transformers config, or a
        :class:`~infercast_adapters.config.PlainConfig` when the values are complete: then
        pricing never imports transformers), or None when the reference is not this plugin's.
    """


@hookspec
def infercast_patch_config(config: PretrainedConfig) -> None:
    """Phase 1: normalise a config before any model class is touched.

    Called once per loaded config, for every plugin; an implementation changes nothing unless
    ``config.model_type`` is one it owns. Typical work: fill missing fields, replace an
    attention implementation that needs an absent package, copy fields stored under
    ``text_config`` to the root.

    :param config: the config to modify in place; it belongs to the caller, never to the user.
    :return: nothing.
    """


@hookspec
def infercast_class_patches(config: PretrainedConfig) -> list[Patch] | None:
    """Phase 2: return reversible patches to model classes for this config.

    Called after phase 1 for every plugin. The consumer applies all returned patches inside
    :func:`infercast_adapters.patching.patched` while it builds and runs the model, and the
    originals come back on exit.

    :param config: the phase-1-patched config of the model about to be built.
    :return: a list of :class:`~infercast_adapters.patching.Patch`, each gated on the
        model_type it is for, or None when this plugin has nothing for this config.
    """


# -------------------------------------------------------------------------------------------
# per target of an EAGLE3 draft

EAGLE3_CAPTURE_RULES: dict[str, str] = {
    "add_one": "every id names a layer output: capture the input of layer id + 1 "
               "(sglang's Llama, Qwen and most targets)",
    "add_one_if_first_is_one": "add one to every id when the first id is 1, else capture the inputs of the "
                               "layers as given (sglang >= 0.5.13 for DeepSeek-V2/V3 and Kimi targets)",
}
"""What :func:`infercast_eagle3_capture_rule` may answer, each with its meaning."""


@hookspec(firstresult=True)
def infercast_eagle3_capture_rule(target_model_type: str) -> str | None:
    """Say how a target family reads an EAGLE3 draft's ``eagle_aux_hidden_state_layer_ids``.

    Called when a draft is paired with a target, to choose the target hidden states the draft
    reads. Serving engines differ by target family: sglang adds one to every id for Llama
    targets but, for DeepSeek-V2/V3 and Kimi targets, only when the first id is 1. Answer only
    for model types this plugin owns. Stops at the first non-None result.

    :param target_model_type: the target's ``model_type`` (its text model's for a
        vision-language target, e.g. ``kimi_k2``; the consumer asks for both).
    :return: a key of :data:`EAGLE3_CAPTURE_RULES`, or None when the target is not this
        plugin's (the consumer then uses its built-in table, else ``"add_one"``).
    """


def hook_names() -> list[str]:
    """Names of every hook in this module, in definition order."""
    return [name for name, obj in globals().items() if name.startswith("infercast_") and callable(obj)]


__all__ = ["EAGLE3_CAPTURE_RULES", "hookspec", "hook_names"] + hook_names()

