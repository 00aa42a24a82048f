"""``docs/observing.md`` ("Seeing what the memory did"): every ```python block runs on its own,
offline, and prints what its comments say (the README's rule: a ``# ...`` line right after a
``print(`` line, or a trailing comment on the print line itself)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from doc_examples import expected_lines, run_alone

PAGE = Path(__file__).resolve().parents[2] / "docs" / "observing.md"


def blocks() -> list[tuple[int, str]]:
    """(line number of the block's first code line, code) for every ```python block."""
    text = PAGE.read_text(encoding="utf-8")
    return [
        (text.count("\n", 0, match.start(1)) + 1, match.group(1))
        for match in re.finditer(r"```python\n(.*?)```", text, flags=re.S)
    ]


def test_the_page_shows_every_way_to_see_the_report() -> None:
    code = "\n".join(code for _, code in blocks())
    assert len(blocks()) >= 4
    for needed in (
        'out["memory_report"]',
        "on_report=",
        "BaseCallbackHandler",
        "on_custom_event",
        "astream_events",
        "last_report",
    ):
        assert needed in code, f"docs/observing.md has no example using {needed}"


@pytest.mark.parametrize(
    ("line", "code"), blocks(), ids=[f"observing.md:{line}" for line, _ in blocks()]
)
def test_each_block_runs_alone_and_prints_what_it_claims(
    line: int, code: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    printed = run_alone(code, f"{PAGE}:{line}")
    claims = expected_lines(code)
    assert claims, f"observing.md:{line} claims no output"
    for claim in claims:
        assert claim in printed, f"observing.md:{line} claims {claim!r}, printed {printed!r}"
