"""docs/experimenting.md (moved there from the README): its ``compare`` commands run offline and
print the table the page shows."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

from subprocesses import run_python, without_api_keys

ROOT = Path(__file__).resolve().parents[2]
PAGE = (ROOT / "docs" / "experimenting.md").read_text(encoding="utf-8")


def _commands() -> list[list[str]]:
    """The two commands of the page's ``compare`` example, continuation lines joined."""
    start = PAGE.index("# Experimenting: replay your own conversations")
    block = PAGE[start:].split("```bash\n", 1)[1].split("```", 1)[0]
    joined = block.replace("\\\n", " ")
    commands = []
    for line in joined.splitlines():
        words = shlex.split(line, comments=True)
        if words:
            commands.append(words)
    return commands


def test_the_experimenting_compare_commands_print_the_pages_table(tmp_path: Path) -> None:
    make, compare = _commands()
    assert make[:2] == [".venv/bin/python", "examples/make_transcript.py"]
    assert compare[0] == ".venv/bin/langmem-ext" and compare[1] == "compare"
    transcript = tmp_path / make[2]
    done = run_python(str(ROOT / make[1]), str(transcript), *make[3:], env=without_api_keys())
    assert done.returncode == 0, done.stderr
    argv = [str(transcript) if a == make[2] else a for a in compare[2:]]
    plot = tmp_path / "compare.png"
    argv = [str(plot) if a == "docs/img/compare.png" else a for a in argv]
    done = run_python(
        "-m", "langmem_ext", "compare", *argv, "--no-progress", env=without_api_keys()
    )
    assert done.returncode == 0, done.stderr
    printed = [line for line in done.stdout.splitlines() if line.startswith("|")]
    shown = re.search(r"<!-- COMPARE:START -->\n(.*?)<!-- COMPARE:END -->", PAGE, re.S)
    assert shown is not None
    assert printed == shown.group(1).strip().splitlines()
    assert plot.read_bytes().startswith(b"\x89PNG")
    assert (ROOT / "docs" / "img" / "compare.png").is_file()


def _rows() -> dict[str, dict[str, str]]:
    """The page's table, by strategy: column name -> cell."""
    shown = re.search(r"<!-- COMPARE:START -->\n(.*?)<!-- COMPARE:END -->", PAGE, re.S)
    assert shown is not None
    lines = [line.strip("|").split("|") for line in shown.group(1).strip().splitlines()]
    header = [cell.strip() for cell in lines[0]]
    return {
        row[0].strip(): dict(zip(header, (c.strip() for c in row), strict=True))
        for row in lines[2:]
    }


def _span(values: list[float]) -> str:
    return f"{round(min(values))}-{round(max(values))}%"


def test_the_pages_reading_of_the_table_is_what_the_table_says() -> None:
    rows = _rows()
    percent = {name: float(row["prefix kept"].rstrip("%")) for name, row in rows.items()}
    cached = {name: float(row["cost, cached"].lstrip("$")) for name, row in rows.items()}
    ratio = {name: float(row["input ÷ full"].rstrip("x")) for name, row in rows.items()}
    cutting = [ratio[name] * 100 for name in rows if name != "full"]
    stable = [name for name in rows if "target_tokens" in name or "summary" in name]
    prose = " ".join(PAGE.split("What the table says", 1)[1].split("\n\n", 1)[0].split())
    assert f"input to {_span(cutting)} of sending everything" in prose
    assert f"prefix on {_span([percent[n] for n in stable])} of calls" in prose
    assert f"instead of {round(percent['token_budget:8000'])}%" in prose
    saved = [100 * (1 - cached[n] / cached["token_budget:8000"]) for n in stable]
    assert f"costs {_span(saved)} less than the plain budget" in prose
