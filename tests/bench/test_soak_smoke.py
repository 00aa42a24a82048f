"""The soak benchmark at a tiny size on PostgreSQL (a fresh schema): every turn lands, nothing
is lost, leaked or failed, one worker is killed and restarted, and the report says so. No
timing thresholds: a run this small says nothing about speed."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage

from bench.soak import QUICK, _added, _shown_twice, render_markdown, run_soak
from bench.soak_worker import SoakModel, Summarizer, marker, question, thread_of


def test_markers_name_their_thread_and_turn() -> None:
    n = marker(12, 3, 2)
    assert thread_of(n) == 12 and (n % 1_000) // 4 == 3
    assert str(question(12, 3).content).startswith(f"m{marker(12, 3, 0)}: ")


def test_the_model_counts_a_foreign_message_in_its_view() -> None:
    model = SoakModel()
    own = [question(1, 1)]
    assert str(model.invoke(own).content).startswith(f"m{marker(1, 1, 3)}:")  # odd turn: a reply
    assert model.leaks == 0
    model.invoke([HumanMessage(f"m{marker(2, 0, 0)}: another thread's question"), *own])
    assert model.leaks == 1


def test_the_model_calls_its_tool_on_even_turns() -> None:
    reply = SoakModel().invoke([question(4, 2)])
    assert isinstance(reply, AIMessage) and reply.tool_calls
    done = SoakModel().invoke(
        [question(4, 2), reply, ToolMessage("m8010: found", tool_call_id=reply.tool_calls[0]["id"])]
    )
    assert not done.tool_calls and done.id == "t4-2-a3"


def test_the_summarizer_tags_its_thread_and_keeps_its_spans() -> None:
    lines: list[dict[str, object]] = []
    summarizer = Summarizer(lambda **fields: lines.append(fields), delay=0.0)  # type: ignore[arg-type]
    text = summarizer([question(5, 0), question(5, 1)])
    assert text.startswith("Summary of t5. ")
    [line] = lines
    assert {k: line[k] for k in ("kind", "markers", "threads")} == {
        "kind": "fold",
        "markers": [5000, 5004],
        "threads": [5],
    }
    assert isinstance(line["start"], float) and isinstance(line["end"], float)
    assert line["start"] <= line["end"]
    assert summarizer.overlap(5, 0.0, 10**9) >= 0.0 and summarizer.overlap(6, 0.0, 10**9) == 0.0


def test_added_latency_leaves_out_the_summarizer_of_any_worker() -> None:
    """An apply of 1 s on thread 3 that overlapped 0.2 s of its own worker's summarizer and
    two spans (0.3 s in all, overlapping each other) of another's: 0.7 s added; spans of
    another thread or outside the apply do not count."""
    spans = {3: [(10.1, 10.3), (10.2, 10.4), (11.5, 12.0)], 4: [(10.0, 11.0)]}
    added = _added((1.0, 0.2, 10.0, 11.0, 3), spans)
    assert abs(added - 0.7) < 1e-9  # max(own 0.2, any worker's 0.3) left out
    assert _added((1.0, 0.5, 10.0, 11.0, 3), spans) == 0.5
    assert _added((1.0, 0.0, 20.0, 21.0, 3), spans) == 1.0


def test_a_message_shown_again_after_its_worker_was_killed_is_not_a_double_fold() -> None:
    killed = {(0, 0)}
    calls = [(0, 0, [1, 2]), (1, 0, [1, 2, 3]), (1, 0, [3, 4]), (2, 0, [5]), (2, 0, [5])]
    assert _shown_twice(calls, killed) == {"after_kill": 2, "double": 2}


def test_quick_soak_loses_nothing(pg_schema_dsn: str) -> None:
    # a fold held by the killed worker is waited for 1 s at most (its lease outlives it)
    config = replace(
        QUICK, workers=2, threads_per_worker=4, turns=6, pool=2, delay=0.01, fold_wait=1.0
    )
    results = run_soak(config, log=lambda _: None, dsn=pg_schema_dsn)
    checks = results["checks"]
    assert results["run"]["turns_done"] == 2 * 4 * 6 and not results["run"]["kill"].get(
        "time_limit_hit"
    )
    assert results["run"]["kill"]["worker"] == 0  # one worker killed and restarted
    assert [r["killed"] for r in results["rss"]].count(True) == 1
    for name in ("lost_turns", "unanswered_turns", "duplicated_messages", "lost_messages"):
        assert checks[name] == 0, (name, checks)
    assert results["view_leaks"] == 0 and results["fold_input_leaks"] == 0
    assert checks["marker_leaks"] == 0
    assert results["error_count"] == 0 and results["given_up"] == 0, results["errors"]
    assert checks["store_notes"] == checks["store_notes_expected"] == 2 * 4 * 3
    assert checks["folds"] > 0 and results["summarizer_calls"] >= checks["folds"]
    # 3 tool turns of 2 model calls and 3 of one, per thread; the killed worker's are not reported
    assert 0 < results["throughput"]["model_calls"] <= 2 * 4 * 9
    results["meta"]["runtime_s"] = 1.0
    md = render_markdown(results)
    assert "| lost turns | 0 | PASS |" in md and "killed (SIGKILL)" in md


def test_percentiles_are_in_milliseconds() -> None:
    from bench.soak import _ms

    assert _ms([0.001, 0.002], 50) == pytest.approx(1.5)
    assert _ms([], 50) is None


def _reported(added_p99: float | None) -> dict[str, Any]:
    """A soak result as ``run_soak`` returns it, small and made up (no run)."""
    latency = dict.fromkeys(("added_p50", "apply_p50", "apply_p99", "turn_p50", "turn_p99"), 1.0)
    return {
        "meta": {
            "mode": "quick",
            "started_utc": "2026-01-01 00:00",
            "command": "python -m bench.soak --quick",
            "runtime_s": 1.0,
            "config": {"workers": 2, "threads_per_worker": 3, "turns": 4, "pool": 2, "delay": 0.0},
            "machine": {
                "cpu": "cpu",
                "cores": 2,
                "usable_cores": 2,
                "platform": "linux",
                "python": "3.12",
                "implementation": "CPython",
                "packages": {},
            },
            "load_average_start": [1.0, 1.0, 1.0],
            "load_average_end": [1.0, 1.0, 1.0],
        },
        "run": {"kill": {}},
        "checks": {"folds": 2},
        "view_leaks": 0,
        "fold_input_leaks": 0,
        "error_count": 0,
        "given_up": 0,
        "errors": {},
        "throughput": {"turns_per_s": 1.0, "calls_per_s": 2.0, "model_calls": 48},
        "latency_ms": {**latency, "added_p99": added_p99, "turn_max": 3.0, "turns_over_10s": 0},
        "summarizer_calls": 2,
        "summarizer_calls_per_fold": 1.0,
        "rss": [],
        "turn_outcomes": {},
    }


@pytest.mark.parametrize(
    ("added_p99", "value", "verdict"),
    [(49.5, "49.50 ms", "PASS"), (50.0, "50.00 ms", "PASS"), (61.3, "61.30 ms", "FAIL")],
)
def test_the_report_judges_the_added_latency_goal(
    added_p99: float, value: str, verdict: str
) -> None:
    md = render_markdown(_reported(added_p99))
    goals = md.split("## Goals\n", 1)[1].split("\n## ", 1)[0]
    row = (
        "| p99 added latency per call ≤ 50 ms (summarizer excluded, background compaction on) "
        f"| {value} | {verdict} |"
    )
    assert row in goals.splitlines()
    assert md.index("## Invariants") < md.index("## Goals") < md.index("## Throughput")


def test_the_report_gives_no_latency_verdict_without_a_measurement() -> None:
    goals = render_markdown(_reported(None)).split("## Goals\n", 1)[1]
    assert "| n/a | n/a |" in goals.split("\n## ", 1)[0]
