"""The examples in the package's docstrings run and print what they say."""

from __future__ import annotations

import doctest
import importlib
import pkgutil

import pytest

import langmem_ext

MODULES = sorted(
    info.name
    for info in pkgutil.walk_packages(langmem_ext.__path__, prefix="langmem_ext.")
    if info.name != "langmem_ext.__main__"
)


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name: str) -> None:
    module = importlib.import_module(name)
    failures, _ = doctest.testmod(module, optionflags=doctest.ELLIPSIS)
    assert failures == 0, f"{name}: {failures} docstring example(s) failed (output above)"
