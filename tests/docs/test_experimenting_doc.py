"""docs/experimenting.md, section "Which facts survived": its Python block runs offline and
prints what its comments say, then its shell commands run on the chat that block wrote and
print the facts columns (the page's first ``compare`` command is checked against the page's
table by tests/docs/test_readme_compare.py)."""

from __future__ import annotations

import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from doc_examples import ROOT, check_claims, python_blocks, run_alone
from subprocesses import without_api_keys

PAGE = ROOT / "docs" / "experimenting.md"
SECTION = "## Which facts survived"


def _section() -> str:
    text = PAGE.read_text(encoding="utf-8")
    return text.split(SECTION, 1)[1].split("\n## ", 1)[0]


def _bash_blocks(text: str) -> list[str]:
    return [part.split("```", 1)[0] for part in text.split("```bash\n")[1:]]


def test_every_python_block_of_the_page_is_in_the_facts_section() -> None:
    blocks = python_blocks(PAGE, info=None)
    assert blocks, "the page shows the facts API in a ```python block"
    section = _section()
    assert all(block.code in section for block in blocks)


def test_the_facts_section_runs_offline_in_python_and_on_the_command_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    (block,) = python_blocks(PAGE, info=None)
    printed = run_alone(block.code, block.where)
    check_claims(block.code, printed, block.where)
    assert "['facts kept at end', 'mean share of later calls', 'summarizer $']" in printed
    assert (tmp_path / "facts.csv").read_text().count("ZX-4471") == 2
    assert (tmp_path / "chat.json").is_file()

    (script,) = _bash_blocks(_section())
    python = shlex.quote(sys.executable)
    script = script.replace(".venv/bin/langmem-ext", f"{python} -m langmem_ext")
    done = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", script],
        cwd=tmp_path,
        env=without_api_keys(),
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    rows = [
        [cell.strip() for cell in line.strip("|").split("|")]
        for line in done.stdout.splitlines()
        if line.startswith("| ") and "strategy" not in line
    ]
    # compare's two rows, then replay's (auto facts: many, a few of them kept)
    assert [(row[0], row[-3]) for row in rows[:2]] == [
        ("token_budget:2000", "0 / 1"),
        ("retrieval+token_budget:2000", "1 / 1"),
    ]
    assert rows[2][0] == "token_budget:2000" and rows[2][-3] != "0 / 0"
    facts_rows = (tmp_path / "calls-facts.csv").read_text().splitlines()
    assert facts_rows[1].startswith("token_budget:2000,ZX-4471,")
    assert "(found in the transcript): " in done.stdout
    assert "not modelled: the transcript has no timestamps" in done.stdout
