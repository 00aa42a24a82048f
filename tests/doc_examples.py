"""Reading and running documentation examples: the ```python blocks of README.md and docs/*.md
and the output their comments claim (used by tests/docs/test_readme.py, test_docs_pages.py and
test_migration.py)."""

from __future__ import annotations

import contextlib
import io
import re
import warnings
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
DOCS = ROOT / "docs"

#: a fenced block whose info string starts with ``python``: ```python, ```python deploying,
#: ```python no-run: why
_FENCE = re.compile(r"^```python([^\n]*)\n(.*?)^```", flags=re.S | re.M)


@dataclass(frozen=True)
class Block:
    """One ```python block of a Markdown file: where it is, its info string after ``python``
    (``""``, ``"deploying"``, ``"no-run: why"``) and its code."""

    path: Path
    line: int
    info: str
    code: str

    @property
    def where(self) -> str:
        """``docs/page.md:12``: the block's first code line, relative to the repository."""
        return f"{self.path.relative_to(ROOT).as_posix()}:{self.line}"

    @property
    def no_run_reason(self) -> str | None:
        """Why the block is not run (``python no-run: why``), or None for a runnable one."""
        head, _, reason = self.info.partition(":")
        if head.strip() != "no-run":
            return None
        return reason.strip() or "no reason given"


def python_blocks(path: Path, *, info: str | None = "") -> list[Block]:
    """The ```python blocks of ``path`` whose info string is ``info`` (``""``: plain
    ```python blocks only; None: every block, whatever its info string)."""
    text = path.read_text(encoding="utf-8")
    found = []
    for match in _FENCE.finditer(text):
        tag = match.group(1).strip()
        if info is None or tag == info:
            line = text.count("\n", 0, match.start(2)) + 1
            found.append(Block(path, line, tag, match.group(2)))
    return found


def expected_lines(code: str) -> list[str]:
    """The lines a block says it prints: each ``# ...`` line right after a line that calls
    ``print(`` (or right after another such line), and a trailing comment on a print line."""
    out: list[str] = []
    after_print = False
    for line in code.splitlines():
        stripped = line.strip()
        if after_print and stripped.startswith("# "):
            out.append(stripped[2:].strip())
            continue
        after_print = "print(" in stripped and not stripped.startswith("#")
        if after_print and "#" in stripped.split("print(", 1)[1]:
            # a trailing comment on the print line itself
            out.append(stripped.rsplit("#", 1)[1].strip())
    return out


def run_alone(code: str, where: str) -> str:
    """Run ``code`` in a fresh namespace, as a user pasting the block alone would; its stdout."""
    namespace: dict[str, object] = {"__name__": "__main__"}
    buffer = io.StringIO()
    with contextlib.redirect_stdout(buffer), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        exec(compile(code, where, "exec"), namespace)
    return buffer.getvalue()


def check_claims(code: str, printed: str, where: str) -> None:
    """Every line the block claims to print (text before a ``<-`` note) is in ``printed``."""
    for expected_line in expected_lines(code):
        expected = expected_line.split("<-")[0].strip()
        assert expected in printed, f"{where} claims {expected!r}, printed {printed!r}"
