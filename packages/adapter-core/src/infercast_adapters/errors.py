"""The one exception type users see, and its specialisations.

Every error a user can cause (an unknown model, a bad file, a plugin that does not validate)
is an :class:`InfercastError` whose message says what was asked, what exists and what to do.
Command-line front ends print the message without a traceback and exit with status 2.
"""

from __future__ import annotations


class InfercastError(Exception):
    """An error caused by input or installation, with a message meant for a person."""


class ConfigError(InfercastError):
    """A model reference or config file could not be turned into a model config."""


class PluginError(InfercastError):
    """A plugin failed to import, to validate, or collided with another plugin; ``plugin``
    names the one to blame when it is known."""

    def __init__(self, message: str, plugin: str | None = None):
        self.plugin = plugin
        super().__init__(message)


class ProfileError(InfercastError):
    """A :class:`~infercast_adapters.profile.ModelProfile` field holds an invalid value."""

    def __init__(self, field: str, message: str):
        self.field = field
        super().__init__(f"ModelProfile.{field}: {message}")


class UnsupportedArchitectureError(InfercastError):
    """A config describes an architecture that a detector does not know."""
