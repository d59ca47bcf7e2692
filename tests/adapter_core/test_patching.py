from __future__ import annotations

import pytest

from infercast_adapters import Patch, patched


class Base:
    def greet(self) -> str:
        return "base"

    @staticmethod
    def static() -> str:
        return "static"


class Child(Base):
    def own(self) -> str:
        return "own"


def test_applies_and_restores_exact_original() -> None:
    original = Child.__dict__["own"]
    patch = Patch(Child, "own", lambda self: "patched", model_type="demo")
    with patched([patch], "demo") as applied:
        assert applied == [patch]
        assert Child().own() == "patched"
    assert Child.__dict__["own"] is original


def test_restores_on_exception() -> None:
    original = Child.__dict__["own"]
    with pytest.raises(ValueError):
        with patched([Patch(Child, "own", lambda self: "x", "demo")], "demo"):
            raise ValueError("boom")
    assert Child.__dict__["own"] is original


def test_inherited_attribute_is_removed_not_copied() -> None:
    assert "greet" not in Child.__dict__
    with patched([Patch(Child, "greet", lambda self: "child", "demo")], "demo"):
        assert Child().greet() == "child"
        assert Base().greet() == "base"
    assert "greet" not in Child.__dict__
    assert Child().greet() == "base"


def test_descriptor_is_restored_as_the_raw_staticmethod() -> None:
    raw = Base.__dict__["static"]
    with patched([Patch(Base, "static", staticmethod(lambda: "new"), "demo")], "demo"):
        assert Base.static() == "new"
    assert Base.__dict__["static"] is raw
    assert Base.static() == "static"


def test_nested_and_repeated_application_unwinds_in_order() -> None:
    original = Child.__dict__["own"]
    first = Patch(Child, "own", lambda self: "first", "demo")
    second = Patch(Child, "own", lambda self: "second", "demo")
    with patched([first], "demo"):
        with patched([second, first], "demo"):
            assert Child().own() == "first"
        assert Child().own() == "first"
        with patched([first], "demo"):
            assert Child().own() == "first"
        assert Child.__dict__["own"] is first.replacement
    assert Child.__dict__["own"] is original


def test_gate_skips_patches_for_other_model_types() -> None:
    original = Child.__dict__["own"]
    with patched([Patch(Child, "own", lambda self: "x", "kimi_k25")], "deepseek_v3") as applied:
        assert applied == []
        assert Child.__dict__["own"] is original


def test_module_attribute_patch() -> None:
    import json

    original = json.dumps
    with patched([Patch(json, "dumps", lambda *a, **k: "{}", "demo")], "demo"):
        assert json.dumps({"a": 1}) == "{}"
    assert json.dumps is original
