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


def test_there_are_six_hooks() -> None:
    assert HOOKS == [
        "infercast_register_profiles",
        "infercast_register_draft_layers",
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
