"""Reading what a documentation example claims to print: the expected-output comments of a
```python block (used by tests/docs/test_readme.py and test_migration.py)."""

from __future__ import annotations


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
