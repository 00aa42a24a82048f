"""The public API is pinned: what ``langmem_ext`` exports, and every name the README documents.

Why: refactors move code between modules (and later into subpackages) while ``from langmem_ext
import ...`` must keep working. These tests fail when a refactor drops or renames a public name,
when a name is exported by accident, or when the README documents a name that does not import.
Adding a public name is a decision: add it to ``EXPECTED`` here, in the same change (the
provider counters added AnthropicCounter, CalibratedCounter, TokenCountError and VectorIndex; the
summary checks added DEFAULT_SUMMARY_CHECKS, SummaryCheck, SummaryContext, SummaryRejected and
ModelBusyError; the summarizing strategies' options added FoldPolicy; one notation for a view's
shape added view_shape and SHAPE_LEGEND; Retrieval's optional model calls added ModelSteps).
"""

from __future__ import annotations

import importlib
import re
from pathlib import Path

import pytest

import langmem_ext

README = Path(__file__).resolve().parents[2] / "README.md"

#: ``langmem_ext.__all__``, exactly (sorted as ruff keeps it)
EXPECTED = (
    "DEFAULT_SUMMARY_CHECKS",
    "SHAPE_LEGEND",
    "AnthropicCounter",
    "ApproximateCounter",
    "CachedCounter",
    "CalibratedCounter",
    "CallableCounter",
    "ChatModelCounter",
    "Compacting",
    "ContextOverflowError",
    "ExtractiveSummarizer",
    "Finding",
    "FoldPolicy",
    "FoldRateWarning",
    "GraphSchemaError",
    "GraphSchemaWarning",
    "IndexCacheStats",
    "InvalidHistoryError",
    "InvalidStateError",
    "LangmemExtError",
    "LocalMiniLMEmbeddings",
    "ManagedChatMessageHistory",
    "MemoryAgentState",
    "MemoryBudgetExceeded",
    "MemoryKey",
    "MemoryMessagesState",
    "MemoryMiddleware",
    "MemoryNode",
    "MemoryReport",
    "MemoryResult",
    "MemoryState",
    "MissingKeyError",
    "ModelBusyError",
    "ModelSteps",
    "Retrieval",
    "RetrievalConfig",
    "SlidingWindow",
    "Strategy",
    "Summarizer",
    "SummarizerError",
    "SummaryBuffer",
    "SummaryCheck",
    "SummaryContext",
    "SummaryRejected",
    "TieredSummary",
    "TiktokenCounter",
    "TokenBudget",
    "TokenCountError",
    "TokenCounter",
    "TokenizerUnavailableError",
    "ToolDigest",
    "Unit",
    "VectorIndex",
    "__version__",
    "as_counter",
    "is_valid",
    "repair",
    "split_units",
    "validate",
    "view_shape",
)

#: ``from langmem_ext[.module] import a, b`` or ``import (\n a,\n b,\n)``, in any README block
_IMPORT = re.compile(r"^from (langmem_ext(?:\.\w+)*) import (\([^)]*\)|[^\n]*)", re.M)
#: a name in backticks, alone or as the head of a call or an attribute: `Name`, `Name(...)`
_BACKTICKED = re.compile(r"`([A-Za-z_]\w*)(?:[.(][^`]*)?`")


def _readme() -> str:
    """The README and the docs pages its sections moved to."""
    pages = [README, *sorted((README.parent / "docs").glob("*.md"))]
    return "\n".join(p.read_text(encoding="utf-8") for p in pages)


def readme_imports() -> dict[str, set[str]]:
    """Module -> the names the README imports from it."""
    out: dict[str, set[str]] = {}
    for module, names in _IMPORT.findall(_readme()):
        names = re.sub(r"#[^\n]*", "", names).strip("()")
        for name in names.split(","):
            name = name.split(" as ")[0].strip()
            if name:
                out.setdefault(module, set()).add(name)
    return out


def readme_backticked_exports() -> set[str]:
    """Names in backticks in the README's prose and headings that ``langmem_ext`` exports."""
    return {name for name in _BACKTICKED.findall(_readme()) if name in EXPECTED}


def test_all_is_exactly_the_expected_public_names() -> None:
    assert tuple(langmem_ext.__all__) == EXPECTED, (
        "langmem_ext.__all__ changed: added "
        f"{sorted(set(langmem_ext.__all__) - set(EXPECTED))}, removed "
        f"{sorted(set(EXPECTED) - set(langmem_ext.__all__))}; update EXPECTED in "
        "tests/docs/test_api_surface.py if the change is meant"
    )


@pytest.mark.parametrize("name", EXPECTED)
def test_every_expected_name_imports_from_the_package(name: str) -> None:
    namespace: dict[str, object] = {}
    exec(f"from langmem_ext import {name}", namespace)  # the statement users write
    assert namespace[name] is getattr(langmem_ext, name)


def test_star_import_gives_every_public_name() -> None:
    namespace: dict[str, object] = {}
    exec("from langmem_ext import *", namespace)
    assert set(EXPECTED) <= set(namespace)


def test_readme_imports_from_the_package_are_public_names() -> None:
    """Every ``from langmem_ext import ...`` of the README names an exported name, so the
    quick-start code keeps working after modules move."""
    imported = readme_imports().get("langmem_ext", set())
    assert imported, "no `from langmem_ext import ...` line found in README.md"
    assert imported <= set(EXPECTED), sorted(imported - set(EXPECTED))
    for name in sorted(imported):
        assert getattr(langmem_ext, name) is not None


def test_readme_imports_from_submodules_still_resolve() -> None:
    """The README also imports a few names from submodules (``langmem_ext.compat``,
    ``langmem_ext.testing``): those paths are public too."""
    submodules = {m: names for m, names in readme_imports().items() if m != "langmem_ext"}
    assert submodules, "no `from langmem_ext.<module> import ...` line found in README.md"
    for module, names in sorted(submodules.items()):
        loaded = importlib.import_module(module)
        missing = sorted(n for n in names if not hasattr(loaded, n))
        assert not missing, f"README imports {missing} from {module}, which has no such name"


def test_names_the_readme_documents_in_backticks_are_exported() -> None:
    """The strategies, surfaces and errors the README's prose names in backticks are all
    importable from the package (the list is checked not to shrink to nothing)."""
    documented = readme_backticked_exports()
    assert {"TokenBudget", "MemoryNode", "MemoryMiddleware", "ManagedChatMessageHistory"} <= (
        documented
    )
    for name in sorted(documented):
        assert hasattr(langmem_ext, name), name
