from __future__ import annotations

import json

import pytest

from infercast_adapters.testing import AdapterConformance

from infercast import builtin_models, cli, hookspecs, plugins
from infercast.builtin_models import PLUGIN_NAME


@pytest.fixture(autouse=True)
def fresh_manager():
    plugins.get_manager.cache_clear()
    yield
    plugins.get_manager.cache_clear()


def run_json(capsys, *argv: str):
    assert cli.main([*argv, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_plugins_json_lists_builtins_and_their_hooks(capsys) -> None:
    rows = {row["name"]: row for row in run_json(capsys, "plugins")}
    builtin = rows[PLUGIN_NAME]
    assert builtin["distribution"] == "infercast" and builtin["error"] is None
    assert "infercast_register_profiles" in builtin["hooks"]


def test_blocked_plugin_is_absent(capsys, monkeypatch) -> None:
    monkeypatch.setenv("INFERCAST_DISABLE_PLUGINS", PLUGIN_NAME)
    names = {row["name"] for row in run_json(capsys, "plugins")}
    assert PLUGIN_NAME not in names
    assert "deepseek_v3" not in {row["model_type"] for row in run_json(capsys, "models")["model_types"]}


def test_broken_plugin_is_listed_with_its_error_and_exit_is_zero(capsys, entry_point_plugins) -> None:
    entry_point_plugins({"broken": None}, dist="broken-dist")
    rows = {row["name"]: row for row in run_json(capsys, "plugins")}
    assert "ModuleNotFoundError" in rows["broken"]["error"]
    assert rows["broken"]["distribution"] == "broken-dist"
    assert rows[PLUGIN_NAME]["error"] is None


def test_models_lists_builtin_families_with_their_plugin(capsys) -> None:
    rows = {row["model_type"]: row for row in run_json(capsys, "models")["model_types"]}
    for model_type in ("deepseek_v3", "qwen3_moe", "qwen3", "llama", "mixtral"):
        assert rows[model_type]["plugin"] == PLUGIN_NAME
    assert rows["deepseek_v3"]["attention"] == "mla" and rows["deepseek_v3"]["moe"]
    assert not rows["llama"]["moe"]
    assert rows["llama"]["tokenizer"] == "fast"
    assert rows["kimi_k25"]["tokenizer"] == "tiktoken"


def test_plain_table_output(capsys) -> None:
    assert cli.main(["plugins"]) == 0
    assert "infercast" in capsys.readouterr().out


class TestBuiltinModelsConformance(AdapterConformance):
    """The built-in plugin passes the same conformance kit as any adapter."""

    plugin = builtin_models
    plugin_name = PLUGIN_NAME
    extra_hookspecs = (hookspecs,)
    offline_refs = ("deepseek-ai/DeepSeek-V3", "Qwen/Qwen3-235B-A22B", "meta-llama/Llama-3.1-8B-Instruct")
    model_type = "deepseek_v3"
    other_model_types = ("gemma2", "phi3")

    def make_config(self, adapter_manager):
        from transformers import AutoConfig

        return AutoConfig.for_model("deepseek_v3")


def test_a_plugin_adds_a_device(capsys) -> None:
    import types

    from infercast_adapters import hookimpl

    from infercast.devices import BUILTIN_DEVICES
    from infercast.plugins import devices_from, new_manager

    h200 = next(d for d in BUILTIN_DEVICES if d.name == "H200")
    from dataclasses import replace

    manager = new_manager()
    manager.register(types.SimpleNamespace(infercast_register_devices=hookimpl(
        lambda register: register(replace(h200, name="H200-LAB", aliases=())))), "lab")
    registry = devices_from(manager)
    assert registry.get("h200-lab").hbm_bandwidth_bytes_per_s == h200.hbm_bandwidth_bytes_per_s
    assert "H200" in registry.names()


def test_devices_lists_every_builtin_with_efficiency_sources(capsys) -> None:
    rows = run_json(capsys, "devices")
    names = {row["name"] for row in rows}
    assert {"A100", "H100", "H200", "H20", "B200", "MI300X", "ATLAS_800_A3_560T_128G_DIE",
            "ATLAS_800_A3_752T_128G_DIE"} <= names
    assert all(row["efficiency"]["source"] for row in rows)
    assert all(row["sources"] for row in rows)
    # a kernel family's fused-MoE figures are listed with its GEMM ones (the H20 has no Triton figure)
    from infercast.devices import BUILTIN_DEVICES

    streams = {row["name"]: row["efficiency"]["streams"] for row in rows}
    h200 = next(d for d in BUILTIN_DEVICES if d.name == "H200").efficiency.streams
    assert streams["H200"]["triton"]["grouped_fixed_us"] == pytest.approx(h200["triton"].grouped_fixed_s * 1e6)
    assert streams["H200"]["marlin"]["grouped_sm_gb_per_s"] == pytest.approx(h200["marlin"].grouped_sm_bytes_per_s / 1e9)
    assert streams["H200"]["triton"]["grouped_sm_gb_per_s"] is None and "triton" not in streams["H20"]


def test_the_console_command_returns_mains_code_and_freezes_the_heap_only_there(monkeypatch) -> None:
    import gc

    monkeypatch.setattr(cli, "main", lambda: 3)
    assert gc.get_freeze_count() == 0  # the library entry point, main(), leaves the collector alone
    try:
        assert cli.console_main() == 3
        assert gc.get_freeze_count() > 0
    finally:
        gc.unfreeze()


@pytest.mark.parametrize("command", ["models", "devices"])
def test_commands_that_only_name_things_import_no_model_code(command) -> None:
    """Listing what the plugins offer registers their layer builders and patches by name: neither
    torch nor transformers is imported (``infercast models`` took 1.5 s when they were)."""
    import subprocess
    import sys

    code = ("import sys; from infercast.cli import main; main([%r, '--json']); "
            "print(sorted(m for m in ('torch', 'transformers') if m in sys.modules))" % command)
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip().splitlines()[-1] == "[]"
