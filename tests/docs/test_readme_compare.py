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
