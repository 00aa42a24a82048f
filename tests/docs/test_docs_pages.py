"""Every ```python block of every docs/*.md page runs on its own and prints what its comments say.

The same harness as the README's (tests/docs/test_readme.py): each block in a fresh namespace, in
a temporary directory, with the offline tiktoken cache from conftest; its expected-output
comments (a ``# ...`` line right after a ``print(`` line) must be in what it printed.

Not run here:

- the pages that have a test of their own (``DEDICATED``, or any page a test module outside this
  harness names as ``docs/<page>``): migration.md runs its blocks in order in one namespace,
  counting.md some of them only with an API key, ...;
- a block fenced ```python TAG whose TAG names its own test (``TAGGED``: ```python deploying
  needs a PostgreSQL server with pgvector);
- a block fenced ```python no-run: REASON, reported as skipped with its reason.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from doc_examples import DOCS, ROOT, Block, check_claims, python_blocks, run_alone

#: pages whose blocks a test of their own runs (the page -> that test)
DEDICATED = {
    "migration.md": "tests/docs/test_migration.py",
    "custom_strategy.md": "tests/docs/test_custom_strategy_doc.py",
    "counting.md": "tests/counting/test_counting_providers.py",
    "summary_validation.md": "tests/summarize/test_summary_checks.py",
}
#: ```python TAG blocks and the test that runs them
TAGGED = {"deploying": "tests/docs/test_readme_deploying.py"}
#: this harness and the README's: naming a page here does not make a test of its own
HARNESS = {
    "doc_examples.py",
    "test_docs_pages.py",
    "test_doc_links.py",
    "test_readme.py",
    "test_examples.py",
    "test_demo_cli.py",
    "test_readme_figures.py",
}


def _named_by_another_test(page: str) -> bool:
    """A test module outside the harness reads ``docs/<page>``: it runs the page itself."""
    for module in (ROOT / "tests").rglob("*.py"):
        if module.name not in HARNESS and f"docs/{page}" in module.read_text(encoding="utf-8"):
            return True
    return False


def pages() -> list[Path]:
    """The docs pages whose blocks this module runs."""
    return [
        page
        for page in sorted(DOCS.glob("*.md"))
        if page.name not in DEDICATED and not _named_by_another_test(page.name)
    ]


def blocks() -> list[Block]:
    """Every ```python block of those pages, untagged or ``no-run``."""
    found = []
    for page in pages():
        for block in python_blocks(page, info=None):
            if block.info not in TAGGED:
                found.append(block)
    return found


BLOCKS = blocks()


@pytest.mark.parametrize("block", BLOCKS, ids=[block.where for block in BLOCKS])
def test_each_docs_block_runs_alone_and_prints_what_it_claims(
    block: Block, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    reason = block.no_run_reason
    if reason is not None:
        pytest.skip(f"{block.where} is marked no-run: {reason}")
    assert not block.info, f"{block.where}: unknown ```python {block.info} (known: {TAGGED})"
    monkeypatch.chdir(tmp_path)  # anything a block writes stays out of the repository
    printed = run_alone(block.code, str(ROOT / block.where))
    check_claims(block.code, printed, block.where)


def test_the_pages_moved_from_the_readme_are_run_here() -> None:
    """The README's sections moved to these pages; their blocks must run somewhere."""
    run_here = {block.path.name for block in BLOCKS}
    for name in (
        "strategies.md",
        "langgraph.md",
        "chat_history.md",
        "legacy.md",
        "retrieval.md",
        "guarantees.md",
    ):
        assert name in run_here, name
    assert len(BLOCKS) >= 15


def test_every_dedicated_test_exists_and_reads_its_page() -> None:
    for page, test in {**DEDICATED, **{"deploying.md": TAGGED["deploying"]}}.items():
        source = (ROOT / test).read_text(encoding="utf-8")
        assert page in source, f"{test} does not read docs/{page}"


def test_every_tagged_block_has_a_test() -> None:
    """A ```python TAG block is run by the test its tag names; an unknown tag is a typo."""
    for page in sorted(DOCS.glob("*.md")):
        for block in python_blocks(page, info=None):
            if block.info and block.no_run_reason is None:
                assert block.info in TAGGED, f"{block.where}: ```python {block.info}"


def test_no_run_blocks_are_skipped_with_their_reason(tmp_path: Path) -> None:
    """The harness itself: ``python no-run: why`` is recognised, with its reason; a plain block
    and a tagged one are not."""
    page = tmp_path / "page.md"
    page.write_text(
        "```python no-run: needs an API key\nraise SystemExit\n```\n\n"
        "```python\nprint(1)  # 1\n```\n\n```python deploying\nx = 1\n```\n",
        encoding="utf-8",
    )
    found = python_blocks(page, info=None)
    assert [block.no_run_reason for block in found] == ["needs an API key", None, None]
    assert [block.info for block in found] == ["no-run: needs an API key", "", "deploying"]
    assert [block.code for block in python_blocks(page)] == ["print(1)  # 1\n"]
    assert found[1].line == 6  # the block's first code line
