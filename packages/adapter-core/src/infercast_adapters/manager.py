"""A typed facade over pluggy's plugin manager for the infercast hooks."""

from __future__ import annotations

import importlib.metadata
import os
from dataclasses import dataclass
from types import ModuleType
from typing import TYPE_CHECKING, Any, Callable, Iterator

import pluggy

from infercast_adapters import hookspecs
from infercast_adapters.catalog import ModelRef, SpecOption
from infercast_adapters.errors import InfercastError, PluginError, ProfileError
from infercast_adapters.profile import ModelProfile

if TYPE_CHECKING:
    from transformers import PretrainedConfig

    from infercast_adapters.patching import Patch

ENTRY_POINT_GROUP = "infercast.adapters"
SIM_LAYER_ROLES = ("attention", "mlp", "plan", "vision", "embedding", "head")
MODEL_TYPE_ROLES = ("plan", "vision", "embedding", "head")
"""Roles whose builders are keyed by model_type (or ``default``)."""
DISABLE_ENV = "INFERCAST_DISABLE_PLUGINS"
NO_AUTOLOAD_ENV = "INFERCAST_NO_PLUGIN_AUTOLOAD"


@dataclass(frozen=True)
class PluginInfo:
    """One plugin as ``infercast plugins`` shows it; ``error`` is set for a failed plugin."""

    name: str
    distribution: str | None
    version: str | None
    hooks: tuple[str, ...]
    error: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "distribution": self.distribution,
            "version": self.version,
            "hooks": list(self.hooks),
            "error": self.error,
        }


@dataclass(frozen=True)
class RegisteredProfile:
    profile: ModelProfile
    plugin: str


def _blocked_names() -> list[str]:
    return [name.strip() for name in os.environ.get(DISABLE_ENV, "").split(",") if name.strip()]


class AdapterManager:
    """Loads adapter plugins and calls their hooks with real types.

    Plugins come from explicit :meth:`register` calls (built-ins) and from the
    ``infercast.adapters`` entry-point group (:meth:`load_entry_points`, run once).
    ``INFERCAST_DISABLE_PLUGINS=a,b`` blocks plugins by name; ``INFERCAST_NO_PLUGIN_AUTOLOAD=1``
    skips the entry points. A plugin that fails to import or to validate is recorded in
    :meth:`failures` and unregistered; the others keep working.
    """

    def __init__(self) -> None:
        self._pm = pluggy.PluginManager("infercast")
        self._pm.add_hookspecs(hookspecs)
        for name in _blocked_names():
            self._pm.set_blocked(name)
        self._origins: dict[str, tuple[str | None, str | None]] = {}
        self._failures: dict[str, PluginInfo] = {}
        self._entry_points_loaded = False
        self._profiles: dict[str, RegisteredProfile] | None = None
        self._draft_layers: dict[str, tuple[type, str]] | None = None
        self._sim_layers: dict[tuple[str, str], tuple[Callable[..., Any], str]] | None = None
        self._models: list[tuple[ModelRef, str]] | None = None
        self._speculative: list[tuple[SpecOption, str]] | None = None

    # --------------------------------------------------------------------- registration

    @property
    def pluggy_manager(self) -> pluggy.PluginManager:
        """The underlying pluggy manager, for consumers that add their own hookspecs."""
        return self._pm

    def add_hookspecs(self, module: ModuleType) -> None:
        self._pm.add_hookspecs(module)

    def register(self, plugin: object, name: str, *, distribution: str | None = None, version: str | None = None) -> bool:
        """Register a plugin object under ``name``; False when the name is blocked."""
        if self._pm.is_blocked(name):
            return False
        try:
            self._pm.register(plugin, name=name)
            self._pm.check_pending()  # an ``infercast_*`` function that matches no hook
        except Exception as exc:  # pluggy validation: unknown hook, wrong argument names
            if self._pm.has_plugin(name):
                self._pm.unregister(name=name)
            self._fail(name, distribution, version, exc)
            return False
        self._origins[name] = (distribution, version)
        self._invalidate()
        return True

    def unregister(self, name: str) -> None:
        plugin = self._pm.get_plugin(name)
        if plugin is not None:
            self._pm.unregister(plugin, name=name)
        self._origins.pop(name, None)
        self._invalidate()

    def load_entry_points(self) -> None:
        """Import every ``infercast.adapters`` entry point once; later calls do nothing."""
        if self._entry_points_loaded:
            return
        self._entry_points_loaded = True
        if os.environ.get(NO_AUTOLOAD_ENV, "").strip() not in ("", "0"):
            return
        for ep in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP):
            if self._pm.is_blocked(ep.name) or self._pm.has_plugin(ep.name):
                continue
            dist = ep.dist.name if ep.dist is not None else None
            version = ep.dist.version if ep.dist is not None else None
            try:
                plugin = ep.load()
            except Exception as exc:
                self._fail(ep.name, dist, version, exc)
                continue
            self.register(plugin, ep.name, distribution=dist, version=version)
        self._pm.check_pending()

    def _fail(self, name: str, distribution: str | None, version: str | None, exc: BaseException) -> None:
        self._failures[name] = PluginInfo(name, distribution, version, (), f"{type(exc).__name__}: {exc}")

    def _invalidate(self) -> None:
        self._profiles = None
        self._draft_layers = None
        self._sim_layers = None
        self._models = None
        self._speculative = None

    # --------------------------------------------------------------------- introspection

    def plugins(self) -> list[PluginInfo]:
        """Loaded plugins in registration order, then the failed ones with their errors."""
        self._collect()
        infos = []
        for name, plugin in self._pm.list_name_plugin():
            if plugin is None:  # a blocked name
                continue
            dist, version = self._origins.get(name, (None, None))
            hooks = tuple(sorted(caller.name for caller in self._pm.get_hookcallers(plugin) or ()))
            infos.append(PluginInfo(name, dist, version, hooks))
        return infos + list(self._failures.values())

    def failures(self) -> list[PluginInfo]:
        self._collect()
        return list(self._failures.values())

    def _impls(self, hook_name: str, *, registration_order: bool = False) -> Iterator[tuple[str, Callable[..., Any], list[str]]]:
        """Implementations of a hook in pluggy's call order (last registered first), or in
        registration order (built-ins first) for the register hooks, where the first claim wins."""
        impls = getattr(self._pm.hook, hook_name).get_hookimpls()
        for impl in impls if registration_order else reversed(impls):
            yield impl.plugin_name, impl.function, list(impl.argnames)

    def _call(self, plugin: str, hook_name: str, function: Callable[..., Any], argnames: list[str], **kwargs: Any) -> Any:
        try:
            return function(**{name: kwargs[name] for name in argnames})
        except InfercastError:
            raise
        except Exception as exc:
            raise PluginError(f"plugin {plugin!r} failed in hook {hook_name}: {type(exc).__name__}: {exc}") from exc

    # --------------------------------------------------------------------- start-up hooks

    def _collect(self) -> None:
        """Run the register hooks once per change of plugins; fail plugins that do not validate."""
        if self._profiles is not None:
            return
        while True:
            failed = self._try_collect()
            if failed is None:
                return
            name, exc = failed
            dist, version = self._origins.get(name, (None, None))
            self.unregister(name)
            self._fail(name, dist, version, exc)

    def _try_collect(self) -> tuple[str, BaseException] | None:
        profiles: dict[str, RegisteredProfile] = {}
        for plugin, function, argnames in self._impls("infercast_register_profiles", registration_order=True):
            found: list[ModelProfile] = []
            try:
                self._call(plugin, "infercast_register_profiles", function, argnames, register=found.append)
                for profile in found:
                    if not isinstance(profile, ModelProfile):
                        raise ProfileError("model_type", f"register() got {type(profile).__name__}, not a ModelProfile")
                    profile.validate()
                    other = profiles.get(profile.model_type)
                    if other is not None:
                        raise PluginError(
                            f"model_type {profile.model_type!r} is claimed by both plugin {other.plugin!r} "
                            f"and plugin {plugin!r}; block one with {DISABLE_ENV}={plugin}"
                        )
            except InfercastError as exc:
                if isinstance(exc, ProfileError):
                    exc = PluginError(f"plugin {plugin!r}: {exc}")
                return plugin, exc
            for profile in found:
                profiles[profile.model_type] = RegisteredProfile(profile, plugin)
        builders: dict[tuple[str, str], tuple[Callable[..., Any], str]] = {}
        for plugin, function, argnames in self._impls("infercast_register_sim_layers", registration_order=True):
            found_builders: list[tuple[str, str, Callable[..., Any]]] = []
            try:
                self._call(plugin, "infercast_register_sim_layers", function, argnames,
                           register=lambda role, key, builder: found_builders.append((role, key, builder)))
                for role, key, builder in found_builders:
                    if role not in SIM_LAYER_ROLES:
                        raise PluginError(f"plugin {plugin!r}: simulator layer role {role!r} is not one of "
                                          f"{', '.join(SIM_LAYER_ROLES)}")
                    if not callable(builder):
                        raise PluginError(f"plugin {plugin!r}: the {role} builder for {key!r} is not callable")
                    if role in MODEL_TYPE_ROLES and key != "default":
                        owner = profiles.get(key)
                        if owner is None or owner.plugin != plugin:
                            raise PluginError(
                                f"plugin {plugin!r} registers a {role} builder for model_type {key!r}, which it does "
                                f"not own ({'owned by ' + repr(owner.plugin) if owner else 'no profile'}); an adapter "
                                f"registers builders only for the model types it registers profiles for")
                    if (role, key) in builders:
                        raise PluginError(f"the {role} builder for {key!r} is registered by both plugin "
                                          f"{builders[(role, key)][1]!r} and plugin {plugin!r}")
            except InfercastError as exc:
                return plugin, exc
            for role, key, builder in found_builders:
                builders[(role, key)] = (builder, plugin)
        catalogs: dict[str, list] = {}
        for hook, kind in (("infercast_register_models", ModelRef), ("infercast_register_speculative", SpecOption)):
            entries: list = []
            for plugin, function, argnames in self._impls(hook, registration_order=True):
                found_entries: list = []
                try:
                    self._call(plugin, hook, function, argnames, register=found_entries.append)
                    for entry in found_entries:
                        if not isinstance(entry, kind):
                            raise PluginError(f"plugin {plugin!r}: {hook} got {type(entry).__name__}, not a "
                                              f"{kind.__name__}")
                        try:
                            entry.validate()
                        except ProfileError as exc:
                            raise PluginError(f"plugin {plugin!r}: {kind.__name__} {exc}") from exc
                        owner = profiles.get(entry.model_type)
                        if owner is None or owner.plugin != plugin:
                            raise PluginError(
                                f"plugin {plugin!r} registers a {kind.__name__} for model_type {entry.model_type!r}, "
                                f"which it does not own; an adapter names only its own model types")
                except InfercastError as exc:
                    return plugin, exc
                entries += [(entry, plugin) for entry in found_entries]
            catalogs[hook] = entries
        self._profiles, self._sim_layers = profiles, builders
        self._models, self._speculative = catalogs["infercast_register_models"], catalogs["infercast_register_speculative"]
        return None

    def profiles(self) -> dict[str, RegisteredProfile]:
        """Every registered profile by model_type, with the plugin that provides it."""
        self._collect()
        assert self._profiles is not None
        return dict(self._profiles)

    def profile_for(self, model_type: str) -> ModelProfile | None:
        entry = self.profiles().get(model_type)
        return entry.profile if entry else None

    def sim_layers(self) -> dict[tuple[str, str], tuple[Callable[..., Any], str]]:
        """Simulator layer builders by (role, key), with the plugin that registered each."""
        self._collect()
        assert self._sim_layers is not None
        return dict(self._sim_layers)

    def models(self) -> list[tuple[ModelRef, str]]:
        """Model references the plugins resolve offline, with the plugin naming each."""
        self._collect()
        assert self._models is not None
        return list(self._models)

    def default_model(self) -> str | None:
        """The reference offered as the default model with the highest priority, if any."""
        offers = [(ref.default, ref.ref) for ref, _ in self.models() if ref.default > 0]
        return max(offers)[1] if offers else None

    def speculative_options(self, model_type: str | None = None) -> list[SpecOption]:
        """Speculative options, all or one family's, in registration order."""
        self._collect()
        assert self._speculative is not None
        return [option for option, _ in self._speculative if model_type is None or option.model_type == model_type]

    def draft_layers(self) -> dict[str, type]:
        """EAGLE3 draft decoder-layer classes by draft architecture (``architectures[0]``). Collected on first use,
        not at start-up: registering a layer class imports model code."""
        self._collect()
        while self._draft_layers is None:
            failed = self._try_collect_draft_layers()
            if failed is not None:
                name, exc = failed
                dist, version = self._origins.get(name, (None, None))
                self.unregister(name)
                self._fail(name, dist, version, exc)
                self._collect()
        return {architecture: cls for architecture, (cls, _) in self._draft_layers.items()}

    def _try_collect_draft_layers(self) -> tuple[str, BaseException] | None:
        layers: dict[str, tuple[type, str]] = {}
        for plugin, function, argnames in self._impls("infercast_register_draft_layers", registration_order=True):
            found_layers: list[tuple[str, type]] = []
            try:
                self._call(
                    plugin, "infercast_register_draft_layers", function, argnames,
                    register=lambda architecture, cls: found_layers.append((architecture, cls)),
                )
                for architecture, cls in found_layers:
                    if not isinstance(cls, type):
                        raise PluginError(f"plugin {plugin!r}: draft layer for {architecture!r} is {cls!r}, not a class")
                    if architecture in layers:
                        raise PluginError(
                            f"draft layer for architecture {architecture!r} is registered by both plugin "
                            f"{layers[architecture][1]!r} and plugin {plugin!r}"
                        )
            except InfercastError as exc:
                return plugin, exc
            for architecture, cls in found_layers:
                layers[architecture] = (cls, plugin)
        self._draft_layers = layers
        return None

    # --------------------------------------------------------------------- per-model hooks

    def resolve_config(self, model_ref: str) -> PretrainedConfig | None:
        """The first plugin's config for ``model_ref``, or None when no plugin knows it."""
        self._collect()
        for plugin, function, argnames in self._impls("infercast_resolve_config"):
            result = self._call(plugin, "infercast_resolve_config", function, argnames, model_ref=model_ref)
            if result is not None:
                return result
        return None

    def eagle3_capture_rule(self, target_model_type: str) -> str | None:
        """The first plugin's EAGLE3 capture rule for ``target_model_type`` (a key of
        :data:`~infercast_adapters.hookspecs.EAGLE3_CAPTURE_RULES`), or None when no plugin
        owns the target."""
        self._collect()
        for plugin, function, argnames in self._impls("infercast_eagle3_capture_rule"):
            result = self._call(plugin, "infercast_eagle3_capture_rule", function, argnames,
                                target_model_type=target_model_type)
            if result is None:
                continue
            if result not in hookspecs.EAGLE3_CAPTURE_RULES:
                raise PluginError(f"plugin {plugin!r}: infercast_eagle3_capture_rule({target_model_type!r}) returned "
                                  f"{result!r}; valid: {', '.join(hookspecs.EAGLE3_CAPTURE_RULES)}")
            return result
        return None

    def patch_config(self, config: PretrainedConfig) -> None:
        """Phase 1: let every plugin normalise ``config`` in place."""
        self._collect()
        for plugin, function, argnames in self._impls("infercast_patch_config"):
            self._call(plugin, "infercast_patch_config", function, argnames, config=config)

    def class_patches(self, config: PretrainedConfig) -> list[Patch]:
        """Phase 2: every plugin's reversible class patches for ``config``."""
        from infercast_adapters.patching import Patch

        self._collect()
        patches: list[Patch] = []
        for plugin, function, argnames in self._impls("infercast_class_patches"):
            result = self._call(plugin, "infercast_class_patches", function, argnames, config=config)
            for patch in result or ():
                if not isinstance(patch, Patch):
                    raise PluginError(f"plugin {plugin!r}: infercast_class_patches returned {patch!r}, not a Patch")
                patches.append(patch)
        return patches


def load_default_manager() -> AdapterManager:
    """A manager with every installed entry-point plugin loaded (no built-ins)."""
    manager = AdapterManager()
    manager.load_entry_points()
    return manager
