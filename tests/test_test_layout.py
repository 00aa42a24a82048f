"""Rules for the test suite's own layout, each checked on tests/ and on a deliberate violation.

* A test module (``tests/**/test_*.py``) never imports from another test module: what two test
  modules share lives in a helper module at tests/ top level (fakes.py, wire_helpers.py, ...).
* No test file name or test function name carries an issue number (``issue123``): a test is
  named by the behaviour it checks.
* Module basenames are unique across the test folders: pytest's default import mode puts each
  folder on ``sys.path`` and imports a test module by its basename, so two ``test_x.py`` in two
  folders would collide (and a helper module named like a test module would shadow it).
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

from source_trees import write_tree

TESTS = Path(__file__).resolve().parent

#: modules pytest itself finds by name in every folder: many of them are expected
_PER_FOLDER = {"conftest.py", "__init__.py"}
_ISSUE_NUMBER = re.compile(r"issue_?\d+", re.I)


def _python_files(root: Path) -> Iterator[Path]:
    for path in sorted(root.rglob("*.py")):
        if "__pycache__" not in path.parts:
            yield path


def _test_modules(root: Path) -> Iterator[Path]:
    return (p for p in _python_files(root) if p.name.startswith("test_"))


def _imported_modules(tree: ast.AST) -> Iterator[str]:
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.module:
                yield node.module
            if node.level:  # `from . import test_x`: the names are the modules
                yield from (alias.name for alias in node.names)


def cross_test_imports(root: Path) -> list[str]:
    """``file: module`` for every import, in a test module under ``root``, of a test module
    (any dotted part of the imported name starts with ``test_``)."""
    found = []
    for path in _test_modules(root):
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        for module in _imported_modules(tree):
            if any(part.startswith("test_") for part in module.split(".")):
                found.append(f"{path.relative_to(root)}: imports {module}")
    return found


def issue_numbered_names(root: Path) -> list[str]:
    """Test files and test functions under ``root`` whose name carries an issue number."""
    found = []
    for path in _test_modules(root):
        if _ISSUE_NUMBER.search(path.name):
            found.append(str(path.relative_to(root)))
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        for node in ast.walk(tree):
            if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                continue
            if node.name.startswith("test") and _ISSUE_NUMBER.search(node.name):
                found.append(f"{path.relative_to(root)}::{node.name}")
    return found


def repeated_basenames(root: Path) -> list[str]:
    """Module basenames (conftest.py and __init__.py aside) found in more than one folder."""
    seen: dict[str, list[str]] = {}
    for path in _python_files(root):
        if path.name not in _PER_FOLDER:
            seen.setdefault(path.name, []).append(str(path.relative_to(root)))
    return [f"{name}: {', '.join(paths)}" for name, paths in seen.items() if len(paths) > 1]


# -- the suite ----------------------------------------------------------------------------------


def test_no_test_module_imports_from_another_test_module() -> None:
    assert cross_test_imports(TESTS) == []


def test_no_test_file_or_test_function_is_named_by_an_issue_number() -> None:
    assert issue_numbered_names(TESTS) == []


def test_module_basenames_are_unique_across_the_test_folders() -> None:
    assert repeated_basenames(TESTS) == []


# -- each rule finds a deliberate violation -----------------------------------------------------


def test_a_test_module_importing_another_test_module_is_found(tmp_path: Path) -> None:
    root = write_tree(
        tmp_path,
        {
            "helpers.py": "def make(): ...\n",
            "a/test_wire.py": "def history(): ...\n",
            "a/test_faults.py": "from test_wire import history\nfrom helpers import make\n",
            "b/test_agents.py": "import tests.a.test_wire\n",
            "b/test_fine.py": "from helpers import make\nimport pytest\n",
            "b/test_relative.py": "from . import test_fine\n",
        },
    )
    assert cross_test_imports(root) == [
        "a/test_faults.py: imports test_wire",
        "b/test_agents.py: imports tests.a.test_wire",
        "b/test_relative.py: imports test_fine",
    ]


def test_an_issue_number_in_a_test_file_or_function_name_is_found(tmp_path: Path) -> None:
    root = write_tree(
        tmp_path,
        {
            "core/test_issue42_clip.py": "def test_clip(): ...\n",
            "core/test_clip.py": (
                "def test_issue_7_regression(): ...\n"
                "async def test_Issue12(): ...\n"
                "def test_clips_the_oldest_message(): ...\n"
                "def helper_issue3(): ...\n"
            ),
        },
    )
    assert issue_numbered_names(root) == [
        "core/test_clip.py::test_issue_7_regression",
        "core/test_clip.py::test_Issue12",
        "core/test_issue42_clip.py",
    ]


def test_a_basename_in_two_folders_is_found(tmp_path: Path) -> None:
    root = write_tree(
        tmp_path,
        {
            "conftest.py": "",
            "a/conftest.py": "",
            "a/test_edge_cases.py": "",
            "b/test_edge_cases.py": "",
            "b/test_other.py": "",
            "fakes.py": "",
            "c/fakes.py": "",
        },
    )
    assert repeated_basenames(root) == [
        "test_edge_cases.py: a/test_edge_cases.py, b/test_edge_cases.py",
        "fakes.py: c/fakes.py, fakes.py",
    ]
