"""The simulator's adapter manager: built-in plugins first, then installed entry points."""

from __future__ import annotations

import functools

from infercast_adapters.manager import AdapterManager

from infercast import __version__, builtin_models

BUILTIN_PLUGINS = ((builtin_models.PLUGIN_NAME, builtin_models),)


def new_manager() -> AdapterManager:
    """A fresh manager with the built-ins registered and the entry points loaded."""
    manager = AdapterManager()
    for name, plugin in BUILTIN_PLUGINS:
        manager.register(plugin, name, distribution="infercast", version=__version__)
    manager.load_entry_points()
    return manager


@functools.lru_cache(maxsize=1)
def get_manager() -> AdapterManager:
    """The process-wide manager (plugins are loaded once)."""
    return new_manager()
