"""Building Kimi-K2.5 leaves nothing behind: in one process, the answers for other families and
the transformers classes the adapters patch are exactly what they were before.

The export path (``infercast export``) is where class patches are applied: it builds the text
model on meta inside ``infercast_adapters.patched(manager.class_patches(config), ...)``. Kimi-K2.5's
patches replace methods of transformers' DeepSeek-V3 classes (the ones DeepSeek-V3 itself uses)
and of the Kimi-K2.5 VL classes, and add an attribute the vision encoder lacks, so a patch that
outlived its build would change another family silently.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from infercast_adapters import Patch
from infercast_adapters.config import load_config

from infercast.cli import main
from infercast.plugins import get_manager, known_model_refs

KIMI = "moonshotai/Kimi-K2.5"
OTHERS = ("meta-llama/Llama-3.1-8B-Instruct", "deepseek-ai/DeepSeek-V3")
WALL_TIME_FIELDS = ("simulation_wall_s",)

Snapshot = dict[type, dict[str, Any]]


def class_patches_of(ref: str) -> list[Patch]:
    """The class patches every plugin hands out for ``ref``'s config (not applied)."""
    manager = get_manager()
    config = load_config(ref, manager=manager, known_models=known_model_refs(manager))
    manager.patch_config(config)
    return manager.class_patches(config)


def snapshot(classes) -> Snapshot:
    """Each class's own namespace, copied: attribute name -> the object it holds."""
    return {cls: dict(vars(cls)) for cls in classes}


def leaks(before: Snapshot) -> list[str]:
    """Every difference between the classes now and ``before``: attributes added, removed, or
    holding another object (compared by identity: a wrapper equal in name is still a leak)."""
    found = []
    for cls, was in before.items():
        now = vars(cls)
        name = f"{cls.__module__}.{cls.__qualname__}"
        found += [f"{name}.{attr} added" for attr in now.keys() - was.keys()]
        found += [f"{name}.{attr} removed" for attr in was.keys() - now.keys()]
        found += [f"{name}.{attr} replaced" for attr in was.keys() & now.keys() if now[attr] is not was[attr]]
    return sorted(found)


def simulate_json(capsys, ref: str, *flags: str) -> dict:
    code = main(["simulate", ref, *flags, "--json"])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    result = json.loads(captured.out)
    for field in WALL_TIME_FIELDS:
        assert result.pop(field) >= 0
    return result


@pytest.fixture(scope="module")
def patched_classes() -> list[type]:
    """The classes Kimi-K2.5's and the other families' patches target."""
    owners = {p.owner for ref in (KIMI, *OTHERS) for p in class_patches_of(ref)}
    assert owners and all(isinstance(owner, type) for owner in owners)
    return sorted(owners, key=lambda cls: (cls.__module__, cls.__qualname__))


def test_building_kimi_k25_leaves_other_families_and_the_patched_classes_as_they_were(
        capsys, tmp_path, patched_classes) -> None:
    kimi_patches = class_patches_of(KIMI)
    kimi_targets = {(p.owner, p.attribute) for p in kimi_patches}
    # Kimi-K2.5 patches transformers' DeepSeek-V3 classes, which DeepSeek-V3 uses too
    assert any(owner.__name__.startswith("DeepseekV3") for owner, _ in kimi_targets)
    # and adds an attribute its vision encoder layer does not have
    assert any(attr not in vars(owner) for owner, attr in kimi_targets)

    classes_before = snapshot(patched_classes)
    before = {ref: simulate_json(capsys, ref, "--num-hidden-layers-override", "4") for ref in OTHERS}

    # Kimi-K2.5 in the model view, under its class patches (both graphs, the first two layers) ...
    assert main(["export", KIMI, "--phase", "both", "--seq-len", "8", "--max-cache-len", "16", "--layers", "2",
                 "--out", str(tmp_path), "--json"]) == 0
    exported = json.loads(capsys.readouterr().out)
    assert exported["model_type"] == "kimi_k25" and exported["layers"] == 2
    assert sorted(p.name for p in tmp_path.iterdir()) == ["kimi-k2.5_decode_ir.json", "kimi-k2.5_kv_mapping.json",
                                                          "kimi-k2.5_prefill_ir.json"]
    # ... and in the engine view
    kimi = simulate_json(capsys, KIMI, "--num-hidden-layers-override", "2")
    assert kimi["model_type"] == "kimi_k25"

    assert leaks(classes_before) == []
    for ref in OTHERS:
        assert simulate_json(capsys, ref, "--num-hidden-layers-override", "4") == before[ref], ref


def test_the_leak_check_names_a_patch_that_was_not_undone(patched_classes) -> None:
    """The checker itself: Kimi-K2.5's patches applied by hand, without ``patched``, are each
    reported (a replaced method and an added attribute), then put back from the snapshot."""
    before = snapshot(patched_classes)
    kimi_patches = class_patches_of(KIMI)
    expected = []
    try:
        for patch in kimi_patches:
            owner = patch.owner
            name = f"{owner.__module__}.{owner.__qualname__}.{patch.attribute}"
            expected.append(f"{name} {'replaced' if patch.attribute in before[owner] else 'added'}")
            setattr(owner, patch.attribute, patch.replacement)
        assert leaks(before) == sorted(expected)
        assert any(line.endswith(" added") for line in expected) and any(line.endswith(" replaced") for line in expected)
    finally:
        for patch in kimi_patches:
            if patch.attribute in before[patch.owner]:
                setattr(patch.owner, patch.attribute, before[patch.owner][patch.attribute])
            else:
                delattr(patch.owner, patch.attribute)
    assert leaks(before) == []
