"""Meta-tests that keep the contract honest: every hook documented with its exact signature,
every hook exercised by a test, and the packages versioned in lockstep."""

from __future__ import annotations

import inspect
import re
import sys
from pathlib import Path

import pytest

from infercast_adapters import hookspecs

from infercast import hookspecs as simulator_hookspecs

ROOT = Path(__file__).resolve().parents[1]
HOOKS = hookspecs.hook_names()
SPEC_MODULES = {name: hookspecs for name in HOOKS} | {"infercast_register_devices": simulator_hookspecs}

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    tomllib = pytest.importorskip("tomli")


def signature_text(name: str) -> str:
    fn = getattr(SPEC_MODULES[name], name)
    sig = inspect.signature(fn)
    params = ", ".join(f"{p.name}: {p.annotation}" for p in sig.parameters.values())
    return f"def {name}({params}) -> {sig.return_annotation}"


def test_the_hooks_in_calling_order() -> None:
    assert HOOKS == [
        "infercast_register_profiles",
        "infercast_register_draft_layers",
        "infercast_register_sim_layers",
        "infercast_register_models",
        "infercast_register_speculative",
        "infercast_register_config_aliases",
        "infercast_resolve_config",
        "infercast_patch_config",
        "infercast_class_patches",
        "infercast_eagle3_capture_rule",
    ]


@pytest.mark.parametrize("name", list(SPEC_MODULES))
def test_hook_is_documented_with_its_exact_signature(name: str) -> None:
    docs = (ROOT / "docs" / "hooks.md").read_text()
    assert f"## {name}" in docs
    assert signature_text(name) in docs, f"docs/hooks.md lacks: {signature_text(name)}"


@pytest.mark.parametrize("name", list(SPEC_MODULES))
def test_hook_docstring_names_every_parameter_and_the_return(name: str) -> None:
    fn = getattr(SPEC_MODULES[name], name)
    doc = inspect.getdoc(fn) or ""
    for param in inspect.signature(fn).parameters:
        assert f":param {param}:" in doc
    assert ":return:" in doc
    firstresult = fn.infercast_spec.get("firstresult", False)
    assert ("Stops at the first non-None result" in doc) == firstresult


def test_every_hook_is_called_through_the_manager() -> None:
    """Each hook reaches pluggy's hook caller from one of the manager's public methods, so
    wrappers and monitoring see every call (no implementation is called behind pluggy's back)."""
    from infercast_adapters.manager import AdapterManager

    from infercast.plugins import devices_from

    called: list[str] = []
    manager = AdapterManager()
    manager.add_hookspecs(simulator_hookspecs)
    manager.pluggy_manager.add_hookcall_monitoring(lambda name, impls, kwargs: called.append(name),
                                                   lambda outcome, name, impls, kwargs: None)
    config = manager.resolve_config("anything")
    manager.patch_config(config)
    manager.class_patches(config)
    manager.eagle3_capture_rule("llama")
    manager.draft_layers()
    devices_from(manager)
    assert sorted(set(called)) == sorted(SPEC_MODULES)


@pytest.mark.parametrize("name", list(SPEC_MODULES))
def test_hook_has_a_test(name: str) -> None:
    tests = [p for p in (ROOT / "tests").rglob("test_*.py") if p.name != "test_docs.py"]
    assert any(name in p.read_text() or name.removeprefix("infercast_") in p.read_text() for p in tests)


def test_packages_are_versioned_in_lockstep_with_exact_pins() -> None:
    projects = {p.parent.name: tomllib.loads(p.read_text())["project"] for p in (ROOT / "packages").glob("*/pyproject.toml")}
    assert set(projects) == {"adapter-core", "kimi-k25", "simulator", "eagle3-draft"}
    versions = {project["version"] for project in projects.values()}
    assert len(versions) == 1
    (version,) = versions
    members = {project["name"] for project in projects.values()}
    for project in projects.values():
        for requirement in project.get("dependencies", []):
            name = re.split(r"[<>=!~\[ ]", requirement, maxsplit=1)[0]
            if name in members:
                assert requirement == f"{name}=={version}", f"{project['name']} pins {requirement}"


@pytest.mark.parametrize("flag", ["--engine", "--engine-version", "--calibration", "--cost-model",
                                  "--expert-imbalance"])
def test_cost_model_flags_are_documented(flag: str) -> None:
    from infercast.cli import build_parser

    parser = build_parser()
    simulate = next(a for a in parser._subparsers._group_actions[0].choices.items() if a[0] == "simulate")[1]
    assert any(flag in action.option_strings for action in simulate._actions)
    docs = (ROOT / "docs" / "simulate.md").read_text()
    assert f"`{flag}" in docs
    assert "`source`" in docs and "`measured`" in docs and "`analytic`" in docs


def test_the_simulate_json_schema_is_generated_and_documented() -> None:
    """Every key of the result's generated schema is documented in docs/simulate.md, and the
    table documents nothing the result lacks."""
    from infercast.results import json_schema

    schema = json_schema()
    table = (ROOT / "docs" / "simulate.md").read_text().split("## How a step is priced")[0]
    documented = set()
    for line in table.splitlines():
        if line.startswith("| `"):
            documented |= set(re.findall(r"`([a-z_]+)`", line.split("|")[1]))
    assert set(schema["properties"]) == documented
    assert schema["properties"]["ttft_ms"]["type"] == ["number", "null"]
    assert set(schema["properties"]["ops"]["items"]["properties"]) == {
        "name", "count", "total_ms", "share", "bound", "source", "origin"}


@pytest.mark.parametrize("flag", ["--executor", "--workers", "--ray-address", "--report"])
def test_plan_execution_and_report_flags_are_documented(flag: str) -> None:
    from infercast.cli import build_parser

    parser = build_parser()
    plan = parser._subparsers._group_actions[0].choices["plan"]
    assert any(flag in action.option_strings for action in plan._actions)
    assert f"`{flag}" in (ROOT / "docs" / "simulate.md").read_text()
    assert flag in (ROOT / "README.md").read_text()
