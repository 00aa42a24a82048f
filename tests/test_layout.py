"""The layout shows the layers, and the layers hold.

``langmem_ext.core`` is the pure core (no LangGraph, no I/O libraries), ``langmem_ext.strategies``
runs it, ``langmem_ext.integrations`` are the surfaces. Imports only point down: core imports
nothing from strategies or integrations, strategies nothing from integrations. These tests read
the import statements of every module (no import side effects needed), so a new upward or
sideways import fails here with the module and the line.
"""

from __future__ import annotations

import ast
import importlib
import pkgutil
from pathlib import Path

import pytest

import langmem_ext

PACKAGE = Path(langmem_ext.__file__).parent

#: layer -> the layers it may import from (errors.py is the shared leaf of exceptions)
ALLOWED = {
    "core": {"core", "errors"},
    "counting": {"core", "counting", "errors"},
    "summarize": {"core", "summarize", "errors"},
    "strategies": {"core", "summarize", "strategies", "errors"},
    "retrieval": {"core", "strategies", "retrieval", "errors"},
    "integrations": {"core", "summarize", "strategies", "retrieval", "integrations", "errors"},
}
#: libraries the pure core must not import: graph runtime, stores, network, threads of I/O
CORE_FORBIDDEN = ("langgraph", "asyncio", "sqlite3", "psycopg", "httpx", "openai", "anthropic")


def _imports(path: Path) -> list[tuple[int, str]]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.append((node.lineno, node.module))
            if node.module == "langmem_ext":  # `from langmem_ext import core` style
                found += [(node.lineno, f"langmem_ext.{a.name}") for a in node.names]
    return found


def _layer_of(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 and parts[0] == "langmem_ext" else None


@pytest.mark.parametrize("layer", sorted(ALLOWED))
def test_imports_only_point_down(layer: str) -> None:
    files = sorted((PACKAGE / layer).glob("*.py"))
    assert len(files) >= 3, f"langmem_ext/{layer}/ is missing or nearly empty"
    wrong = [
        f"{path.relative_to(PACKAGE.parent)}:{line} imports {module}"
        for path in files
        for line, module in _imports(path)
        if (target := _layer_of(module)) is not None and target not in ALLOWED[layer]
    ]
    assert not wrong, "\n".join(wrong)


def test_the_core_imports_no_graph_runtime_and_no_io_library() -> None:
    wrong = [
        f"{path.relative_to(PACKAGE.parent)}:{line} imports {module}"
        for path in sorted((PACKAGE / "core").glob("*.py"))
        for line, module in _imports(path)
        if module.split(".")[0] in CORE_FORBIDDEN
    ]
    assert not wrong, "\n".join(wrong)


def test_no_flat_module_is_left_beside_the_layers() -> None:
    """Top level: the package's entry points only (public API, errors, CLI, test doubles, the
    tiktoken seeder, and ``compat``: the drop-in's documented import path)."""
    top = {p.stem for p in PACKAGE.glob("*.py")}
    assert top == {
        "__init__",
        "__main__",
        "cli",
        "compat",
        "errors",
        "testing",
    }


def test_compat_is_the_legacy_integration_under_its_documented_path() -> None:
    from langmem_ext import compat
    from langmem_ext.integrations import legacy

    assert compat.__all__
    for name in compat.__all__:
        assert getattr(compat, name) is getattr(legacy, name), name


def test_every_module_imports() -> None:
    """Every module of the three layers imports (the optional extras are installed in the
    test environment), so a move that left a stale import path fails here."""
    names = [
        info.name
        for info in pkgutil.walk_packages([str(PACKAGE)], prefix="langmem_ext.")
        if info.name != "langmem_ext.__main__"
    ]
    assert any(n.startswith("langmem_ext.core.") for n in names)
    for name in names:
        importlib.import_module(name)
