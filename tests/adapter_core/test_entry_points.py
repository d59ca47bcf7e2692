"""End to end: plugins found through a real ``infercast.adapters`` entry point."""

from __future__ import annotations

import pytest

from infercast_adapters.manager import AdapterManager

GOOD = """
from infercast_adapters import ModelProfile, hookimpl

@hookimpl
def infercast_register_profiles(register):
    register(ModelProfile(model_type="ep_demo", decoder_layer_class="L", attention_class="A"))
"""

INVALID = """
from infercast_adapters import ModelProfile, hookimpl

@hookimpl
def infercast_register_profiles(register):
    register(ModelProfile(model_type="ep_invalid", decoder_layer_class="L", attention_class="A", layers_path="1bad"))
"""


def test_discovers_loads_once_and_reports_failures(entry_point_plugins) -> None:
    entry_point_plugins({"good": GOOD, "broken": None, "invalid": INVALID})
    manager = AdapterManager()
    manager.load_entry_points()
    manager.load_entry_points()  # idempotent
    infos = {info.name: info for info in manager.plugins()}
    assert infos["good"].error is None
    assert infos["good"].distribution == "demo-plugin" and infos["good"].version == "1.2.3"
    assert infos["good"].hooks == ("infercast_register_profiles",)
    assert "ModuleNotFoundError" in infos["broken"].error
    assert "'invalid'" in infos["invalid"].error and "layers_path" in infos["invalid"].error
    assert "ep_demo" in manager.profiles() and "ep_invalid" not in manager.profiles()


def test_blocked_entry_point_is_not_imported(entry_point_plugins, monkeypatch: pytest.MonkeyPatch) -> None:
    entry_point_plugins({"good": GOOD, "broken": None})
    monkeypatch.setenv("INFERCAST_DISABLE_PLUGINS", "broken,good")
    manager = AdapterManager()
    manager.load_entry_points()
    names = {info.name for info in manager.plugins()}
    assert "good" not in names and "broken" not in names


def test_no_autoload(entry_point_plugins, monkeypatch: pytest.MonkeyPatch) -> None:
    entry_point_plugins({"good": GOOD})
    monkeypatch.setenv("INFERCAST_NO_PLUGIN_AUTOLOAD", "1")
    manager = AdapterManager()
    manager.load_entry_points()
    assert "good" not in {info.name for info in manager.plugins()}
