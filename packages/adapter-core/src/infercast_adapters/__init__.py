"""infercast_adapters: the contract between infercast and model adapters.

A plugin is a module whose functions carry the :data:`hookimpl` marker and whose
distribution names it under the ``infercast.adapters`` entry-point group in its own
``pyproject.toml``::

    [project.entry-points."infercast.adapters"]
    kimi_k25 = "infercast_kimi_k25.plugin"

and in the module::

    from infercast_adapters import ModelProfile, hookimpl

    @hookimpl
    def infercast_register_profiles(register):
        register(ModelProfile(model_type="kimi_k25", ...))

The hooks are documented in :mod:`infercast_adapters.hookspecs`.
"""

from __future__ import annotations

import pluggy

from infercast_adapters.errors import (
    ConfigError,
    InfercastError,
    PluginError,
    ProfileError,
    UnsupportedArchitectureError,
)
from infercast_adapters.catalog import ModelRef, SpecOption
from infercast_adapters.patching import Patch, patched
from infercast_adapters.profile import ModelProfile

hookimpl = pluggy.HookimplMarker("infercast")
"""Marker for hook implementations: ``@hookimpl`` above a function named like a hook."""

ENTRY_POINT_GROUP = "infercast.adapters"

__version__ = "0.1.0"

__all__ = [
    "ENTRY_POINT_GROUP",
    "ConfigError",
    "InfercastError",
    "ModelProfile",
    "ModelRef",
    "SpecOption",
    "Patch",
    "PluginError",
    "ProfileError",
    "UnsupportedArchitectureError",
    "hookimpl",
    "patched",
]
