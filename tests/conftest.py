"""Shared fixtures: no hub, no stray plugin settings, and plugins made visible through real entry points."""

from __future__ import annotations

import os
import sys
import textwrap
from pathlib import Path

import pytest

# huggingface_hub reads these when it is imported: set them before any test imports transformers.
os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["TRANSFORMERS_OFFLINE"] = "1"


@pytest.fixture(autouse=True, scope="session")
def _kernel_table_cache(tmp_path_factory: pytest.TempPathFactory) -> None:
    """Converted kernel tables go to a folder of the test session, not the user's cache."""
    os.environ["INFERCAST_CACHE_DIR"] = str(tmp_path_factory.mktemp("infercast-cache"))


@pytest.fixture(autouse=True)
def _offline_and_clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("TRANSFORMERS_OFFLINE", "1")
    monkeypatch.delenv("INFERCAST_DISABLE_PLUGINS", raising=False)
    monkeypatch.delenv("INFERCAST_NO_PLUGIN_AUTOLOAD", raising=False)


@pytest.fixture
def entry_point_plugins(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """Install plugins as a real distribution on a temporary ``sys.path`` entry.

    Call ``install({"entry_name": "module source" or None}, dist="demo-plugin")``; a None source
    points the entry point at a module that does not exist (an import failure).
    """
    created: list[str] = []

    def install(plugins: dict[str, str | None], dist: str = "demo-plugin", version: str = "1.2.3") -> None:
        root = tmp_path / dist
        root.mkdir()
        info = root / f"{dist.replace('-', '_')}-{version}.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: {version}\n")
        lines = ["[infercast.adapters]"]
        for entry, source in plugins.items():
            module = f"_ic_test_{dist.replace('-', '_')}_{entry}"
            if source is None:
                module += "_missing"
            else:
                (root / f"{module}.py").write_text(textwrap.dedent(source))
                created.append(module)
            lines.append(f"{entry} = {module}")
        (info / "entry_points.txt").write_text("\n".join(lines) + "\n")
        monkeypatch.syspath_prepend(str(root))

    yield install
    for module in created:
        sys.modules.pop(module, None)


# ------------------------------------------------------------------------------ slow tests

SLOW_ENV = "INFERCAST_RUN_SLOW"


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--run-slow", action="store_true",
                     help=f"also run the tests marked slow (the full lossless grids); CI sets {SLOW_ENV}=1")


def _run_slow(config: pytest.Config) -> bool:
    return config.getoption("--run-slow") or os.environ.get(SLOW_ENV, "").strip() not in ("", "0")


def pytest_report_header(config: pytest.Config) -> str:
    return "slow tests: " + ("included" if _run_slow(config) else
                             f"deselected (run them with --run-slow or {SLOW_ENV}=1)")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if _run_slow(config) or config.getoption("markexpr"):  # an explicit -m chooses for itself
        return
    slow = [item for item in items if item.get_closest_marker("slow")]
    if slow:
        items[:] = [item for item in items if not item.get_closest_marker("slow")]
        config.hook.pytest_deselected(items=slow)
