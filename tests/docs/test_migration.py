"""docs/migration.md's Python examples run, in order, and print what their comments say they print.

How the blocks run:

* The guide is split at its ``## `` headings. The ```python blocks of one section run in order
  in **one shared namespace** (a later block may use what an earlier one defined, as a reader
  going down the section would); every section starts with a fresh namespace, so each section
  is self-contained.
* Each section runs in its own temporary working directory: the SQLite files the examples
  create (``before.db``, ``agent.db`` ...) land there, not in the repository.
* Expected output is checked as in ``tests/docs/test_readme.py`` (``doc_examples.expected_lines``):
  a ``# ...`` line right after a line that calls ``print(`` (or right after another such line),
  or a trailing comment on the print line itself, must appear in what the block printed. Here
  the expected lines must also appear in the order the comments give them.
* Warnings are ignored while a block runs (the legacy classes warn about their deprecation);
  a block that is about a warning records it itself with ``warnings.catch_warnings``.

The side-by-side figures (the legacy class and ours on the same script) are printed by a tested
block, so they are measured on every run; the paragraph that discusses them may only quote
numbers that block prints (checked below).
"""

from __future__ import annotations

import contextlib
import io
import re
import warnings
from pathlib import Path

import pytest
from doc_examples import expected_lines

ROOT = Path(__file__).resolve().parents[2]
GUIDE = ROOT / "docs" / "migration.md"
README = ROOT / "README.md"

pytest.importorskip("langchain_classic")
pytest.importorskip("langchain_community")
pytest.importorskip("langchain")
pytest.importorskip("langgraph.checkpoint.sqlite")
pytest.importorskip("aiosqlite")


def sections() -> list[tuple[str, list[str]]]:
    """(heading, python blocks) for every ``## `` section of the guide that has blocks."""
    text = GUIDE.read_text(encoding="utf-8")
    out: list[tuple[str, list[str]]] = []
    for part in re.split(r"^## ", text, flags=re.M)[1:]:
        heading = part.splitlines()[0].strip()
        found = re.findall(r"```python\n(.*?)```", part, flags=re.S)
        if found:
            out.append((heading, found))
    return out


def check_printed(code: str, printed: str, where: str) -> int:
    """Every expected line of ``code`` is in ``printed``, in order; returns how many there were."""
    position = 0
    expected = [line.split("<-")[0].strip() for line in expected_lines(code)]
    for line in expected:
        found = printed.find(line, position)
        assert found >= 0, (
            f"{where}: the guide claims {line!r} (in this order), the block printed:\n{printed}"
        )
        position = found + len(line)
    return len(expected)


SECTIONS = sections()


def test_the_guide_has_the_three_paths_and_the_readme_links_it() -> None:
    headings = [heading for heading, _ in SECTIONS]
    assert [h[:3] for h in headings] == ["(a)", "(b)", "(c)"], headings
    assert sum(len(blocks) for _, blocks in SECTIONS) >= 12
    assert "(docs/migration.md)" in README.read_text(encoding="utf-8")


def test_the_figures_quoted_in_prose_are_the_measured_ones() -> None:
    """The paragraph that reads the side-by-side table quotes its figures: each number there must
    be one that the tested block prints (its expected-output lines)."""
    text = GUIDE.read_text(encoding="utf-8")
    start = text.index("### Side by side")
    block = re.search(r"```python\n(.*?)```", text[start:], flags=re.S)
    assert block is not None
    table = "\n".join(expected_lines(block.group(1)))
    assert "token-count calls" in table and "new object: summary" in table
    measured = set(re.findall(r"\d+", table))
    prose = text[start + block.end() : text.index("### Gotchas", start)]
    quoted = re.findall(r"\d+", prose)
    assert len(quoted) >= 8
    assert set(quoted) <= measured, f"quoted but not printed: {set(quoted) - measured}"


@pytest.mark.parametrize(
    "heading,blocks", SECTIONS, ids=[heading.split()[0] for heading, _ in SECTIONS]
)
def test_section_runs_and_prints_what_it_claims(
    heading: str, blocks: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    namespace: dict[str, object] = {"__name__": "migration"}
    checked = 0
    for number, code in enumerate(blocks, 1):
        where = f"docs/migration.md, section {heading!r}, block {number}"
        buffer = io.StringIO()
        with contextlib.redirect_stdout(buffer), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            exec(compile(code, where, "exec"), namespace)
        checked += check_printed(code, buffer.getvalue(), where)
    assert checked >= len(blocks), f"{heading!r}: most blocks should show their output"
