"""The README's Python examples run, in order, and print what their comments say they print.

An expected-output comment is a ``# ...`` line right after a line that calls ``print(`` (or right
after another expected-output line). The test runs with the offline tiktoken cache from conftest.
"""

from __future__ import annotations

import contextlib
import io
import re
import warnings
from pathlib import Path

README = Path(__file__).resolve().parent.parent / "README.md"


def blocks() -> list[str]:
    return re.findall(r"```python\n(.*?)```", README.read_text(encoding="utf-8"), flags=re.S)


def expected_lines(code: str) -> list[str]:
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


def test_readme_examples_run_and_print_what_they_claim() -> None:
    found = blocks()
    assert len(found) >= 6
    namespace: dict[str, object] = {"__name__": "readme"}
    for code in found:
        buffer = io.StringIO()
        with contextlib.redirect_stdout(buffer), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            exec(compile(code, str(README), "exec"), namespace)
        printed = buffer.getvalue()
        for line in expected_lines(code):
            expected = line.split("<-")[0].strip()
            assert expected in printed, f"README claims {expected!r}, printed {printed!r}"
