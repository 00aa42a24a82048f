"""The checkpoint-growth benchmark core runs end to end on ~30 turns and fills every field (no
timing or target claims: a thread this short says nothing about them)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from bench_helpers import assert_results_written

from bench.growth import CONFIGS, QUICK, RandomWordsSummarizer, run_growth, write_results

TINY = replace(QUICK, mode="smoke", turns=30, report_every=10)

REPORT_KEYS = {
    "turn",
    "file_bytes",
    "checkpoint_rows",
    "checkpoints_blob_bytes",
    "write_rows",
    "writes_blob_bytes",
    "latest_checkpoint_bytes",
    "state_serde_bytes",
    "messages_in_state",
    "view_messages",
    "memory_bytes",
    "folds",
    "summarizer_calls",
}


def test_fake_summarizer_is_deterministic_and_about_the_requested_size() -> None:
    first, second = RandomWordsSummarizer(300, seed=1), RandomWordsSummarizer(300, seed=1)
    texts = [first("prompt"), first(["another"])]
    assert texts == [second("x"), second("y")] and texts[0] != texts[1]
    assert first.calls == 2 and all(1_150 <= len(t) <= 1_201 for t in texts)


def test_growth_core_produces_every_config_and_target(tmp_path: Path) -> None:
    results = run_growth(TINY, log=lambda _: None)

    assert {"meta", "conversation", "configs", "targets"} <= results.keys()
    assert results["conversation"]["turns"] == 30
    assert tuple(results["configs"]) == CONFIGS
    for config in results["configs"].values():
        assert {
            "label",
            "windows",
            "early_max_bytes",
            "late_max_bytes",
            "growth_ratio",
            "first_fold_turn",
            "latest_checkpoint_bytes",
            "reports",
            "final",
            "timing",
        } <= config.keys()
        assert len(config["latest_checkpoint_bytes"]) == 30
        assert [r["turn"] for r in config["reports"]] == [10, 20, 30]
        assert all(r.keys() >= REPORT_KEYS for r in config["reports"])
        assert {"file_bytes", "checkpoints_blob_bytes", "dbstat_bytes"} <= config["final"].keys()
        assert {"median_turn_s", "median_last_tenth_s", "total_s"} <= config["timing"].keys()
    (target,) = results["targets"]
    assert isinstance(target["passed"], bool) and len(target["checks"]) == 4

    headings = ("## Verdict", "## Summary", "## Latest checkpoint", "## Messages in state")
    assert_results_written(write_results, results, tmp_path, "growth_smoke", headings)
