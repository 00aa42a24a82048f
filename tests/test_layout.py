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
from layout_checks import ALLOWED

import langmem_ext

PACKAGE = Path(langmem_ext.__file__).parent

# the layer table (which folder may import which) is ALLOWED in tests/layout_checks.py


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
    files = sorted((PACKAGE / layer).rglob("*.py"))
    assert len(files) >= 3, f"langmem_ext/{layer}/ is missing or nearly empty"
    wrong = [
        f"{path.relative_to(PACKAGE.parent)}:{line} imports {module}"
        for path in files
        for line, module in _imports(path)
        if (target := _layer_of(module)) is not None and target not in ALLOWED[layer]
    ]
    assert not wrong, "\n".join(wrong)


# --- the pure core: no threads, no I/O, no graph runtime --------------------------------------
#: what the pure core must not import: threads and event loops, files, processes and sockets,
#: stores, network clients, tokenizers that load files, the graph runtime. A name matches the
#: module itself and everything under it (``concurrent`` forbids ``concurrent.futures``).
CORE_FORBIDDEN = (
    "threading",
    "_thread",
    "concurrent",
    "multiprocessing",
    "asyncio",
    "sqlite3",
    "socket",
    "ssl",
    "subprocess",
    "os",
    "io",
    "pathlib",
    "shutil",
    "tempfile",
    "urllib.request",
    "tiktoken",
    "langgraph",
    "psycopg",
    "httpx",
    "requests",
    "openai",
    "anthropic",
)
#: builtins that do I/O: a file opened by name needs no import
CORE_FORBIDDEN_CALLS = ("open",)


def _forbidden(module: str) -> bool:
    return any(module == name or module.startswith(name + ".") for name in CORE_FORBIDDEN)


def core_violations(root: Path) -> list[str]:
    """Every forbidden import (at any depth: a lazy import in a function counts) and every call
    of a forbidden builtin in the modules under ``root``, as ``path:line what``."""
    found: list[str] = []
    for path in sorted(root.rglob("*.py")):
        where = path.relative_to(root.parent)
        found += [
            f"{where}:{line} imports {module}"
            for line, module in _imports(path)
            if _forbidden(module)
        ]
        tree = ast.parse(path.read_text(encoding="utf-8"))
        found += [
            f"{where}:{node.lineno} calls {node.func.id}()"
            for node in ast.walk(tree)
            if isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id in CORE_FORBIDDEN_CALLS
        ]
    return found


def test_the_core_imports_no_thread_no_io_and_no_graph_runtime() -> None:
    wrong = core_violations(PACKAGE / "core")
    assert not wrong, "\n".join(wrong)


def test_the_core_check_reports_a_deliberate_violation(tmp_path: Path) -> None:
    core = tmp_path / "core"
    core.mkdir()
    (core / "__init__.py").write_text('"""A pure package."""\n', encoding="utf-8")
    (core / "clean.py").write_text("import math\nfrom urllib.parse import quote\n")
    (core / "bad.py").write_text(
        "import threading\n"
        "from concurrent.futures import ThreadPoolExecutor\n"
        "import os.path\n"
        "\n"
        "def load(name):\n"
        "    import tiktoken\n"
        "    with open(name) as f:\n"
        "        return f.read()\n",
        encoding="utf-8",
    )
    assert core_violations(core) == [
        "core/bad.py:1 imports threading",
        "core/bad.py:2 imports concurrent.futures",
        "core/bad.py:3 imports os.path",
        "core/bad.py:6 imports tiktoken",
        "core/bad.py:7 calls open()",
    ]


def test_the_counting_layer_holds_what_caches_or_loads() -> None:
    """The counters that cache (a locked LRU) or load (tiktoken's files, a provider's model)
    live in ``counting``; the core keeps the protocol and the check of a count."""
    from langmem_ext.core import tokens

    assert set(tokens.__all__) == {"TokenCounter", "checked_count"}
    for name in ("CachedCounter", "TiktokenCounter", "ApproximateCounter", "ChatModelCounter"):
        assert getattr(langmem_ext, name).__module__.startswith("langmem_ext.counting."), name
    assert langmem_ext.as_counter.__module__ == "langmem_ext.counting.resolve"


# --- end of the pure-core block ---------------------------------------------------------------


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
