"""Throw-away source trees written under ``tmp_path``, for the tests that prove a layout rule
fails on a deliberate violation (tests/test_layout_rules.py, tests/test_test_layout.py)."""

from __future__ import annotations

import textwrap
from collections.abc import Mapping
from pathlib import Path


def write_tree(root: Path, files: Mapping[str, str]) -> Path:
    """Write ``files`` (path relative to ``root`` -> text) under ``root`` as given, making the
    folders on the way; return ``root``."""
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    return root


def write_package(tmp_path: Path, files: Mapping[str, str], name: str = "pkg") -> Path:
    """A package ``name`` under ``tmp_path`` holding ``files`` (path -> source, dedented, its
    leading newlines dropped); every folder of it gets an ``__init__.py`` (empty unless
    ``files`` gives one). Returns the package folder."""
    root = tmp_path / name
    folders = {Path("."), *(Path(path).parent for path in files)}
    inits = {
        str(folder / "__init__.py"): "" for path in folders for folder in [path, *path.parents]
    }
    sources = {path: textwrap.dedent(source).lstrip("\n") for path, source in files.items()}
    return write_tree(root, {**inits, **sources})
