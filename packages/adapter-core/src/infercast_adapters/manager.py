"""A typed facade over pluggy's plugin manager for the infercast hooks."""

from __future__ import annotations

import functools
import importlib.metadata
import os
from dataclasses import dataclass
from types import ModuleType
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

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
        self._aliases: dict[str, tuple[str, str]] | None = None
        self._current: str | None = None
        """The plugin whose hook implementation is running (set by the guard of each)."""
        self._answers: list[tuple[str, Any]] = []

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
        self._guard(name)
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
            except (Exception, SystemExit) as exc:  # a plugin that exits at import must not end the command
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
        self._aliases = None

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

    # --------------------------------------------------------------------- calling hooks

    def _guard(self, name: str) -> None:
        """Wrap each hook implementation of plugin ``name`` so that a call through ``pm.hook``
        knows which plugin is running and turns its failure into a :class:`PluginError` that
        names the plugin and the hook (wrappers included)."""
        plugin = self._pm.get_plugin(name)
        for caller in self._pm.get_hookcallers(plugin) or ():
            for impl in caller.get_hookimpls():
                if impl.plugin is plugin and not getattr(impl.function, "_infercast_guarded", False):
                    wrapping = impl.hookwrapper or getattr(impl, "wrapper", False)
                    impl.function = (self._guarded_wrapper if wrapping else self._guarded)(name, caller.name,
                                                                                          impl.function)

    def _blame(self, plugin: str, hook: str, exc: BaseException) -> PluginError:
        if isinstance(exc, PluginError):
            if exc.plugin is None:
                exc.plugin = plugin
            return exc
        return PluginError(f"plugin {plugin!r} failed in hook {hook}: {type(exc).__name__}: {exc}. "
                           f"Skip the plugin with {DISABLE_ENV}={plugin}", plugin=plugin)

    def _guarded(self, plugin: str, hook: str, function: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(function)
        def call(*args: Any, **kwargs: Any) -> Any:
            outer, self._current = self._current, plugin
            try:
                result = function(*args, **kwargs)
            except PluginError as exc:
                raise self._blame(plugin, hook, exc) from None
            except InfercastError:
                raise  # the user's input is wrong (an unknown model, a bad file): not the plugin's fault
            except (Exception, SystemExit) as exc:
                raise self._blame(plugin, hook, exc) from exc
            finally:
                self._current = outer
            if result is not None:
                self._answers.append((plugin, result))
            return result

        call._infercast_guarded = True  # type: ignore[attr-defined]
        return call

    def _guarded_wrapper(self, plugin: str, hook: str, function: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(function)
        def call(*args: Any, **kwargs: Any) -> Any:
            try:
                return (yield from function(*args, **kwargs))
            except InfercastError as exc:
                if isinstance(exc, PluginError) and exc.plugin is None:
                    exc.plugin = plugin
                raise
            except (Exception, SystemExit) as exc:
                raise self._blame(plugin, hook, exc) from exc

        call._infercast_guarded = True  # type: ignore[attr-defined]
        return call

    def _hook(self, hook_name: str, **kwargs: Any) -> tuple[Any, list[tuple[str, Any]]]:
        """Call a hook through pluggy: its result, and every non-None answer with its plugin."""
        outer, self._answers = self._answers, []
        try:
            result = getattr(self._pm.hook, hook_name)(**kwargs)
            return result, self._answers
        finally:
            self._answers = outer

    def _order(self) -> dict[str, int]:
        return {name: i for i, (name, _) in enumerate(self._pm.list_name_plugin())}

    def _gather(self, hook_name: str) -> list[tuple[str, tuple[Any, ...]]]:
        """Call a register hook through pluggy; each registration with the plugin that made
        it, in plugin registration order (built-ins first: the first claim wins)."""
        found: list[tuple[str, tuple[Any, ...]]] = []
        self._hook(hook_name, register=lambda *args: found.append((self._current or "?", args)))
        order = self._order()
        return sorted(found, key=lambda entry: order.get(entry[0], len(order)))

    def disable(self, exc: PluginError) -> None:
        """Unregister the plugin ``exc`` blames and record it in :meth:`failures` (what a
        consumer does with a registration it cannot use)."""
        assert exc.plugin is not None
        dist, version = self._origins.get(exc.plugin, (None, None))
        self.unregister(exc.plugin)
        self._fail(exc.plugin, dist, version, exc)

    def registrations(self, hook_name: str) -> list[tuple[str, tuple[Any, ...]]]:
        """Every registration a ``register(...)`` hook makes, as (plugin, arguments), for hooks
        a consumer adds (``infercast_register_devices``). A plugin whose hook raises is
        recorded in :meth:`failures` and unregistered, and the others are asked again."""
        self._collect()
        while True:
            try:
                return self._gather(hook_name)
            except PluginError as exc:
                if exc.plugin is None or not self._pm.has_plugin(exc.plugin):
                    raise
                self.disable(exc)
                self._collect()

    # --------------------------------------------------------------------- start-up hooks

    def _collect(self) -> None:
        """Run the register hooks once per change of plugins; fail plugins that do not validate."""
        while self._profiles is None:
            try:
                self._try_collect()
            except PluginError as exc:
                if exc.plugin is None or not self._pm.has_plugin(exc.plugin):
                    raise
                self.disable(exc)

    def _try_collect(self) -> None:
        profiles: dict[str, RegisteredProfile] = {}
        for plugin, (profile,) in self._gather("infercast_register_profiles"):
            if not isinstance(profile, ModelProfile):
                raise PluginError(f"plugin {plugin!r}: register() got {type(profile).__name__}, not a ModelProfile",
                                  plugin)
            try:
                profile.validate()
            except ProfileError as exc:
                raise PluginError(f"plugin {plugin!r}: {exc}", plugin) from exc
            other = profiles.get(profile.model_type)
            if other is not None:
                raise PluginError(f"model_type {profile.model_type!r} is claimed by both plugin {other.plugin!r} "
                                  f"and plugin {plugin!r}; block one with {DISABLE_ENV}={plugin}", plugin)
            profiles[profile.model_type] = RegisteredProfile(profile, plugin)
        builders: dict[tuple[str, str], tuple[Callable[..., Any], str]] = {}
        for plugin, (role, key, builder) in self._gather("infercast_register_sim_layers"):
            if role not in SIM_LAYER_ROLES:
                raise PluginError(f"plugin {plugin!r}: simulator layer role {role!r} is not one of "
                                  f"{', '.join(SIM_LAYER_ROLES)}", plugin)
            if not callable(builder):
                raise PluginError(f"plugin {plugin!r}: the {role} builder for {key!r} is not callable", plugin)
            if role in MODEL_TYPE_ROLES and key != "default":
                owner = profiles.get(key)
                if owner is None or owner.plugin != plugin:
                    raise PluginError(
                        f"plugin {plugin!r} registers a {role} builder for model_type {key!r}, which it does "
                        f"not own ({'owned by ' + repr(owner.plugin) if owner else 'no profile'}); an adapter "
                        f"registers builders only for the model types it registers profiles for", plugin)
            if (role, key) in builders:
                raise PluginError(f"the {role} builder for {key!r} is registered by both plugin "
                                  f"{builders[(role, key)][1]!r} and plugin {plugin!r}", plugin)
            builders[(role, key)] = (builder, plugin)
        catalogs: dict[str, list] = {}
        for hook, kind in (("infercast_register_models", ModelRef), ("infercast_register_speculative", SpecOption)):
            entries: list = []
            for plugin, (entry,) in self._gather(hook):
                if not isinstance(entry, kind):
                    raise PluginError(f"plugin {plugin!r}: {hook} got {type(entry).__name__}, not a {kind.__name__}",
                                      plugin)
                try:
                    entry.validate()
                except ProfileError as exc:
                    raise PluginError(f"plugin {plugin!r}: {kind.__name__} {exc}", plugin) from exc
                owner = profiles.get(entry.model_type)
                if owner is None or owner.plugin != plugin:
                    raise PluginError(f"plugin {plugin!r} registers a {kind.__name__} for model_type "
                                      f"{entry.model_type!r}, which it does not own; an adapter names only its own "
                                      f"model types", plugin)
                entries.append((entry, plugin))
            catalogs[hook] = entries
        aliases: dict[str, tuple[str, str]] = {}
        for plugin, (model_type, native) in self._gather("infercast_register_config_aliases"):
            if not (isinstance(model_type, str) and isinstance(native, str) and model_type and native):
                raise PluginError(f"plugin {plugin!r}: infercast_register_config_aliases got ({model_type!r}, "
                                  f"{native!r}); both must be model_type strings", plugin)
            if model_type in aliases and aliases[model_type][0] != native:
                other_native, other = aliases[model_type]
                raise PluginError(f"model_type {model_type!r} is an alias of {other_native!r} for plugin {other!r} "
                                  f"but of {native!r} for plugin {plugin!r}", plugin)
            aliases.setdefault(model_type, (native, plugin))
        self._aliases = aliases
        self._sim_layers = builders
        self._models, self._speculative = catalogs["infercast_register_models"], catalogs["infercast_register_speculative"]
        self._profiles = profiles

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

    def config_aliases(self) -> dict[str, str]:
        """Remote-code model types read as a native transformers type, by the plugins' say."""
        self._collect()
        assert self._aliases is not None
        return {model_type: native for model_type, (native, _) in self._aliases.items()}

    def draft_layers(self) -> dict[str, type]:
        """EAGLE3 draft decoder-layer classes by draft architecture (``architectures[0]``).
        Collected on first use, not at start-up: registering a layer class imports model code."""
        while self._draft_layers is None:
            layers: dict[str, tuple[type, str]] = {}
            for plugin, (architecture, cls) in self.registrations("infercast_register_draft_layers"):
                if not isinstance(cls, type):
                    error = PluginError(f"plugin {plugin!r}: draft layer for {architecture!r} is {cls!r}, not a class",
                                        plugin)
                elif architecture in layers:
                    error = PluginError(f"draft layer for architecture {architecture!r} is registered by both plugin "
                                        f"{layers[architecture][1]!r} and plugin {plugin!r}", plugin)
                else:
                    layers[architecture] = (cls, plugin)
                    continue
                self.disable(error)
                break
            else:
                self._draft_layers = layers
        return {architecture: cls for architecture, (cls, _) in self._draft_layers.items()}

    # --------------------------------------------------------------------- per-model hooks

    def resolve_config(self, model_ref: str) -> PretrainedConfig | None:
        """The first plugin's config for ``model_ref`` (last registered asked first), or None
        when no plugin knows it."""
        self._collect()
        return self._hook("infercast_resolve_config", model_ref=model_ref)[0]

    def eagle3_capture_rule(self, target_model_type: str) -> str | None:
        """The first plugin's EAGLE3 capture rule for ``target_model_type`` (a key of
        :data:`~infercast_adapters.hookspecs.EAGLE3_CAPTURE_RULES`), or None when no plugin
        owns the target."""
        self._collect()
        result, answers = self._hook("infercast_eagle3_capture_rule", target_model_type=target_model_type)
        if result is not None and result not in hookspecs.EAGLE3_CAPTURE_RULES:
            plugin = next((name for name, answer in answers if answer is result), "?")
            raise PluginError(f"plugin {plugin!r}: infercast_eagle3_capture_rule({target_model_type!r}) returned "
                              f"{result!r}; valid: {', '.join(hookspecs.EAGLE3_CAPTURE_RULES)}", plugin)
        return result

    def patch_config(self, config: PretrainedConfig) -> None:
        """Phase 1: let every plugin normalise ``config`` in place."""
        self._collect()
        self._hook("infercast_patch_config", config=config)

    def class_patches(self, config: PretrainedConfig) -> list[Patch]:
        """Phase 2: every plugin's reversible class patches for ``config`` (a
        :class:`~infercast_adapters.config.PlainConfig` is handed to the hooks as its native
        transformers config: the patches are for transformers' classes)."""
        from infercast_adapters.config import to_transformers
        from infercast_adapters.patching import Patch

        self._collect()
        results, answers = self._hook("infercast_class_patches", config=to_transformers(config))
        patches: list[Patch] = []
        for result in results:
            for patch in result or ():
                if not isinstance(patch, Patch):
                    plugin = next((name for name, answer in answers if answer is result), "?")
                    raise PluginError(f"plugin {plugin!r}: infercast_class_patches returned {patch!r}, not a Patch",
                                      plugin)
                patches.append(patch)
        return patches

    # --------------------------------------------------------------------- dry run

    def dry_run(self) -> dict[str, list[str]]:
        """Run every plugin's hooks once, as a command would, without stopping at a failure:
        the register hooks (the consumer's too), then for one model reference of each model
        type a plugin names: resolve_config, patch_config, class_patches and the EAGLE3
        capture rule. Returns the failures by plugin ("hook: error")."""
        import copy

        failed: dict[str, list[str]] = {}

        def note(exc: InfercastError, default: str, hook: str) -> None:
            plugin = getattr(exc, "plugin", None) or default
            failed.setdefault(plugin, []).append(f"{hook}: {exc}")

        before = set(self._failures)
        for caller_name in sorted(name for name in dir(self._pm.hook) if name.startswith("infercast_register_")):
            if caller_name == "infercast_register_draft_layers":
                self.draft_layers()
            else:
                self.registrations(caller_name)
        for name in set(self._failures) - before:
            failed.setdefault(name, []).append(self._failures[name].error or "failed")
        seen: set[str] = set()
        for ref, plugin in self.models():
            if ref.model_type in seen:
                continue
            seen.add(ref.model_type)
            hook = "infercast_resolve_config"
            try:
                config = self.resolve_config(ref.ref)
                if config is None:
                    raise PluginError(f"{ref.ref!r}, which it names, resolves to nothing offline", plugin)
                config = copy.deepcopy(config)
                hook = "infercast_patch_config"
                self.patch_config(config)
                hook = "infercast_class_patches"
                self.class_patches(config)
                hook = "infercast_eagle3_capture_rule"
                self.eagle3_capture_rule(ref.model_type)
            except InfercastError as exc:
                note(exc, plugin, f"{hook}({ref.ref})")
        return failed


def load_default_manager() -> AdapterManager:
    """A manager with every installed entry-point plugin loaded (no built-ins)."""
    manager = AdapterManager()
    manager.load_entry_points()
    return manager
