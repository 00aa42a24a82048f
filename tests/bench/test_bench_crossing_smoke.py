"""The crossing-call benchmark runs end to end on a short chat and fills every field (no timing
claims: the full run's figures are in bench/results/crossing.md)."""

from __future__ import annotations

import json
from pathlib import Path

from bench.crossing import main


def test_crossing_quick_run_fills_every_section(tmp_path: Path) -> None:
    assert main(["--quick", "--out", str(tmp_path)]) == 0
    results = json.loads((tmp_path / "crossing_quick.json").read_text())
    for rhythm in ("spaced", "tight"):
        rows = {row["tool"]: row for row in results["rhythms"][rhythm]}
        assert len(rows) == 4
        for row in rows.values():
            assert row["summarizer_calls"] > 0, row  # every tool crossed its trigger
            assert row["crossing_ms"]["n"] > 0 and row["all_ms"]["p50"] > 0
        inline = rows["langmem_ext SummaryBuffer"]["crossing_ms"]
        delay_ms = results["meta"]["config"]["delay"] * 1_000
        assert inline["p50"] >= delay_ms  # an inline fold waits for the model
    failing = {row["tool"]: row["attempts"] for row in results["failing"]}
    # retries in the call: the crossing call makes every attempt; inline by default and in
    # background mode: at most one
    assert max(failing["langmem_ext SummaryBuffer (retry_in_call=True)"]) == 3
    inline = failing["langmem_ext SummaryBuffer"]
    assert len(inline) == results["meta"]["config"]["failing_calls"] and max(inline) == 1
    background = failing["langmem_ext SummaryBuffer + prefetch (background)"]
    assert background and max(background) <= 1
    assert "A summarizer that always times out" in (tmp_path / "crossing_quick.md").read_text()
