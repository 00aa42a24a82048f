"""An orphan tool result inside a turn is repaired away once, never counted as missing.

A ToolMessage whose call is nowhere (a lost call, a replayed log) can never be shown: the
documented repair drops it, and the report says so (``repaired``, ``messages_dropped``). It is
not a message the view failed to show: while the summarizer is healthy nothing is "not shown",
a summarizing strategy's trigger is computed on the repaired view (so an orphan does not send
every call into a fold), and a digesting strategy's point does not move for it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest
from langchain_core.messages import BaseMessage, HumanMessage, ToolMessage

from langmem_ext import SummaryBuffer, TieredSummary, TokenBudget, ToolDigest
from langmem_ext.core.result import MemoryResult
from langmem_ext.strategies.engine import Strategy
from langmem_ext.testing import FakeSummaryModel, agent_loop, check_strategy

ORPHAN_ID = "orphan-1"


def orphan() -> ToolMessage:
    return ToolMessage("stray output", tool_call_id="ghost", id=ORPHAN_ID)


def calls(with_orphan: bool, n: int = 200, at: int = 4) -> Iterator[list[BaseMessage]]:
    """The histories of an agent loop, with an orphan result at index ``at`` (inside the first
    turn: after the human message and its first reply)."""
    for history in agent_loop(n, seed=1, words=(20, 120), tool_rate=0.5):
        history = list(history)
        if with_orphan and len(history) > at:
            history.insert(at, orphan())
        yield history


def run(make: Callable[[], Strategy], with_orphan: bool, n: int = 200) -> list[MemoryResult]:
    strategy, state, out = make(), None, []
    for history in calls(with_orphan, n):
        result = strategy.apply(history, state)
        out.append(result)
        state = result.state
    return out


def first_fold(results: list[MemoryResult]) -> int:
    return next(i for i, r in enumerate(results) if r.report.folded)


def test_summary_buffer_counts_an_orphan_as_repaired_not_as_not_shown() -> None:
    results = run(lambda: SummaryBuffer(6_000, summarizer=FakeSummaryModel()), True)
    before_fold = results[: first_fold(results)]
    assert len(before_fold) > 10
    for r in before_fold:
        assert r.report.health == "healthy"
        assert r.report.not_shown == 0, r.report
        assert r.report.trigger is None, r.report
    # the orphan is in the stretch the view covers: dropped by the repair, and reported so
    late = before_fold[-1]
    assert late.report.repaired
    assert all(m.id != ORPHAN_ID for m in late.messages)
    assert late.report.messages_dropped >= 1


def test_summary_buffer_folds_at_the_same_call_with_or_without_an_orphan() -> None:
    def make() -> SummaryBuffer:
        return SummaryBuffer(6_000, summarizer=FakeSummaryModel())

    clean, dirty = run(make, False), run(make, True)
    assert first_fold(dirty) == first_fold(clean)
    i = first_fold(clean)
    # the fold came at the high-water mark, not at a fraction of it
    assert dirty[i - 1].report.tokens_after > 4_000
    assert abs(dirty[i - 1].report.tokens_after - clean[i - 1].report.tokens_after) < 50


def test_tool_digest_point_does_not_move_for_an_orphan() -> None:
    clean = run(lambda: ToolDigest(3_000), False, 120)
    dirty = run(lambda: ToolDigest(3_000), True, 120)
    assert sum(r.report.digested for r in clean) > 0
    assert [r.report.digested for r in dirty] == [r.report.digested for r in clean]
    assert [r.report.prefix_kept for r in dirty] == [r.report.prefix_kept for r in clean]


def test_token_budget_reports_the_orphan_dropped_and_repaired() -> None:
    history = next(h for h in calls(True) if len(h) > 8)
    result = TokenBudget(50_000).apply(history)
    assert result.report.repaired
    assert result.report.messages_dropped == 1
    assert [m.id for m in result.messages] == [m.id for m in history if m.id != ORPHAN_ID]


def test_summary_buffer_with_an_orphan_at_the_start_shows_everything_else() -> None:
    history = [orphan(), HumanMessage("hello", id="h"), *list(calls(False, 12))[-1][2:]]
    result = SummaryBuffer(6_000, summarizer=FakeSummaryModel()).apply(history)
    assert result.report.not_shown == 0
    assert result.report.trigger is None
    assert result.report.repaired


@pytest.mark.parametrize(
    "make",
    [
        lambda: SummaryBuffer(1_500, summarizer=FakeSummaryModel()),
        lambda: TieredSummary(3_000, summarizer=FakeSummaryModel()),
        lambda: ToolDigest(1_500),
    ],
    ids=["SummaryBuffer", "TieredSummary", "ToolDigest"],
)
def test_conformance_kit_passes_with_an_orphan_inside_a_turn(
    make: Callable[[], Strategy],
) -> None:
    check_strategy(make, histories=[list(calls(True, 60))])
