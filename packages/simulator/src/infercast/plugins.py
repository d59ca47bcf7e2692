"""The simulator's adapter manager (built-ins first, then installed plugins) and devices."""

from __future__ import annotations

import functools

from infercast_adapters import InfercastError, PluginError
from infercast_adapters.manager import AdapterManager

from infercast import __version__, builtin_models, hookspecs
from infercast.devices import DeviceRegistry, DeviceSpec

BUILTIN_PLUGINS = ((builtin_models.PLUGIN_NAME, builtin_models),)


def new_manager() -> AdapterManager:
    """A fresh manager with the simulator's hooks, the built-ins and the entry points loaded."""
    manager = AdapterManager()
    manager.add_hookspecs(hookspecs)
    for name, plugin in BUILTIN_PLUGINS:
        manager.register(plugin, name, distribution="infercast", version=__version__)
    manager.load_entry_points()
    return manager


@functools.lru_cache(maxsize=1)
def get_manager() -> AdapterManager:
    """The process-wide manager (plugins are loaded once)."""
    return new_manager()


def devices_from(manager: AdapterManager) -> DeviceRegistry:
    """Every plugin's devices; a plugin whose hook fails or whose device is not a DeviceSpec
    or repeats a name is skipped (recorded in ``manager.failures()``) with its devices."""
    while True:
        registry = DeviceRegistry()
        try:
            for plugin, (device,) in manager.registrations("infercast_register_devices"):
                if not isinstance(device, DeviceSpec):
                    raise PluginError(f"plugin {plugin!r}: infercast_register_devices got {type(device).__name__}, "
                                      f"not a DeviceSpec", plugin)
                try:
                    registry.add(device)
                except InfercastError as exc:
                    raise PluginError(f"plugin {plugin!r}: {exc}", plugin) from exc
            return registry
        except PluginError as exc:
            if exc.plugin is None:
                raise
            manager.disable(exc)


def get_devices() -> DeviceRegistry:
    return devices_from(get_manager())


class OfflineRefs:
    """Model and draft references that resolve offline, read only when iterated (an unknown
    model's error lists them): the plugins' own, then the configs aiconfigurator-core ships for a
    model type with an adapter profile (:func:`~infercast.builtin_models.aiconfigurator_models`)."""

    def __init__(self, manager: AdapterManager) -> None:
        self.manager = manager

    def __iter__(self):
        yield from (ref.ref for ref, _ in self.manager.models())
        yield from (row["ref"] for row in shipped_configs(self.manager))


def shipped_configs(manager: AdapterManager) -> list[dict[str, str]]:
    """The configs aiconfigurator-core ships for a model type ``manager`` has a profile for, an
    aliased type included (:func:`~infercast.builtin_models.aiconfigurator_models`)."""
    from infercast.builtin_models import aiconfigurator_models

    profiles, aliases = manager.profiles(), manager.config_aliases()
    return aiconfigurator_models(lambda t: t in profiles or aliases.get(t) in profiles)


def known_model_refs(manager: AdapterManager | None = None) -> OfflineRefs:
    """Model and draft references that resolve offline (:class:`OfflineRefs`)."""
    return OfflineRefs(manager or get_manager())


def served_model(model: str, manager: AdapterManager | None = None) -> str:
    """What an engine's launch command loads for ``model``, read as the config loaders read it:
    a local path first (a ``config.json`` becomes its directory, made absolute), then a short
    alias (``deepseek-r1`` -> ``deepseek-ai/DeepSeek-R1``); a hub id stays as given, even one the
    bundle resolves to another checkpoint's architecture (a base model to its Instruct twin)."""
    from pathlib import Path

    from infercast_adapters.config import _looks_like_path

    if _looks_like_path(model):
        path = Path(model).expanduser().resolve()
        return str(path.parent if path.suffix == ".json" else path)
    if "/" in model:
        return model
    lowered = model.lower()
    for ref, _ in (manager or get_manager()).models():
        if lowered in (alias.lower() for alias in ref.aliases):
            return ref.ref
    return model


def default_model(manager: AdapterManager | None = None) -> str:
    """The default model: the installed adapters' highest offer (the built-ins offer
    DeepSeek-V3; infercast-kimi-k25 offers Kimi-K2.5)."""
    manager = manager or get_manager()
    ref = manager.default_model()
    if ref is None:
        from infercast_adapters import InfercastError

        raise InfercastError("no default model: no installed adapter offers one; name a model, e.g. "
                             "`infercast simulate deepseek-ai/DeepSeek-V3`")
    return ref
