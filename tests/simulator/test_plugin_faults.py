"""Plugin faults through the command line: a plugin that raises in a hook, exits at import,
returns nonsense or only fails when a model is resolved is skipped or named, never a
traceback; hook wrappers run, because every hook is called through pluggy."""

from __future__ import annotations

import json

import pytest

from infercast import cli, plugins


@pytest.fixture(autouse=True)
def fresh_manager():
    plugins.get_manager.cache_clear()
    yield
    plugins.get_manager.cache_clear()


RAISES_IN_DEVICES = """
from infercast_adapters import hookimpl

@hookimpl
def infercast_register_devices(register):
    raise RuntimeError("device table missing")
"""

EXITS_AT_IMPORT = """
import sys
sys.exit(3)
"""

DEVICE_NOT_A_SPEC = """
from infercast_adapters import hookimpl

@hookimpl
def infercast_register_devices(register):
    register("H100-but-a-string")
"""

FAILS_ON_PATCH = """
from infercast_adapters import hookimpl

@hookimpl
def infercast_class_patches(config):
    if config.model_type == "llama":
        raise KeyError("rotary")
"""


def test_a_plugin_raising_in_register_devices_is_skipped_with_a_warning(capsys, entry_point_plugins) -> None:
    entry_point_plugins({"faulty_devices": RAISES_IN_DEVICES}, dist="faulty-dist")
    assert cli.main(["devices", "--json"]) == 0
    captured = capsys.readouterr()
    assert {"H100", "H200"} <= {row["name"] for row in json.loads(captured.out)}
    assert "plugin faulty_devices skipped" in captured.err
    assert "infercast_register_devices" in captured.err and "device table missing" in captured.err
    assert "INFERCAST_DISABLE_PLUGINS=faulty_devices" in captured.err


def test_a_device_that_is_not_a_device_spec_skips_its_plugin(capsys, entry_point_plugins) -> None:
    entry_point_plugins({"stringly": DEVICE_NOT_A_SPEC})
    assert cli.main(["devices", "--json"]) == 0
    captured = capsys.readouterr()
    assert "H100-but-a-string" not in captured.out
    assert "not a DeviceSpec" in captured.err


def test_a_plugin_calling_sys_exit_at_import_does_not_end_the_command(capsys, entry_point_plugins) -> None:
    entry_point_plugins({"exits": EXITS_AT_IMPORT}, dist="exiting-dist")
    assert cli.main(["models", "--json"]) == 0
    captured = capsys.readouterr()
    assert "deepseek_v3" in {row["model_type"] for row in json.loads(captured.out)["model_types"]}
    assert "plugin exits skipped: SystemExit: 3" in captured.err


def test_plugins_dry_run_shows_a_hook_that_fails_only_at_run_time(capsys, entry_point_plugins) -> None:
    entry_point_plugins({"patchy": FAILS_ON_PATCH})
    rows = {row["name"]: row for row in json.loads(_run(capsys, "plugins", "--json"))}
    assert rows["patchy"]["error"] is None  # it imports and registers fine ...
    failures = rows["patchy"]["dry_run_failures"]
    assert len(failures) == 1 and failures[0].startswith("infercast_class_patches(")  # ... until a llama config is patched
    assert "KeyError" in failures[0]
    assert rows["infercast.builtin_models"]["dry_run_failures"] == []


def test_a_failing_per_model_hook_exits_2_naming_plugin_hook_and_the_way_out(capsys, entry_point_plugins) -> None:
    entry_point_plugins({"patchy": FAILS_ON_PATCH})
    from infercast_adapters import PluginError

    manager = plugins.get_manager()
    config = manager.resolve_config("meta-llama/Llama-3.1-8B-Instruct")
    with pytest.raises(PluginError) as caught:
        manager.class_patches(config)
    assert caught.value.plugin == "patchy"
    message = str(caught.value)
    assert "plugin 'patchy' failed in hook infercast_class_patches: KeyError" in message
    assert "INFERCAST_DISABLE_PLUGINS=patchy" in message


def _run(capsys, *argv: str) -> str:
    assert cli.main(list(argv)) == 0
    return capsys.readouterr().out
