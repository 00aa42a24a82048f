"""The test doubles and the conformance kit of ``langmem_ext.testing``."""

from __future__ import annotations

import asyncio
import hashlib
import random
from collections.abc import Sequence

import pytest
from langchain_core.messages import BaseMessage, HumanMessage, ToolMessage

from langmem_ext.core.result import MemoryResult
from langmem_ext.core.state import MemoryState
from langmem_ext.strategies import (
    Compacting,
    SlidingWindow,
    Strategy,
    SummaryBuffer,
    TieredSummary,
    TokenBudget,
    ToolDigest,
)
from langmem_ext.strategies.engine import Plan
from langmem_ext.testing import (
    FakeSummaryModel,
    MockStrategy,
    RecordingSummarizer,
    agent_loop,
    check_strategy,
    random_words,
)

STRATEGIES = {
    "TokenBudget": lambda: TokenBudget(1_500),
    "SlidingWindow": lambda: SlidingWindow(6),
    "ToolDigest": lambda: ToolDigest(1_500, keep_rounds=1),
    "SummaryBuffer": lambda: SummaryBuffer(1_500, summarizer=FakeSummaryModel()),
    "Compacting": lambda: Compacting(2_000, summarizer=FakeSummaryModel()),
    "TieredSummary": lambda: TieredSummary(2_000, summarizer=FakeSummaryModel()),
}


@pytest.mark.parametrize("name", sorted(STRATEGIES))
def test_the_kit_passes_on_every_strategy_of_the_package(name: str) -> None:
    check_strategy(STRATEGIES[name](), seeds=2, messages=30)


class _Wrapped(Strategy):
    """A user's strategy that post-processes TokenBudget's result."""

    def __init__(self) -> None:
        self.inner = TokenBudget(1_200)
        self.counter = self.inner.counter

    def _plan(
        self, messages: Sequence[BaseMessage], state: MemoryState, now: float, extra: int
    ) -> Plan:
        result = yield from self.inner._plan(messages, state, now, extra)
        return self.alter(messages, result)

    def alter(self, messages: Sequence[BaseMessage], result: MemoryResult) -> MemoryResult:
        return result


class OverBudget(_Wrapped):
    """Reports a budget smaller than what it shows."""

    def alter(self, messages: Sequence[BaseMessage], result: MemoryResult) -> MemoryResult:
        report = result.report.__class__(
            **{**_fields(result.report), "budget": 100}  # a lie about the budget
        )
        return MemoryResult(result.messages, result.state, report)


class OrphansToolResults(_Wrapped):
    """Drops the AI message of the newest tool call, orphaning its results."""

    def alter(self, messages: Sequence[BaseMessage], result: MemoryResult) -> MemoryResult:
        view = list(result.messages)
        if isinstance(view[-1], ToolMessage):
            owner = next(
                i for i in range(len(view) - 1, -1, -1) if getattr(view[i], "tool_calls", None)
            )
            del view[owner]
        return MemoryResult(view, result.state, result.report)


class DropsNewestHuman(_Wrapped):
    def alter(self, messages: Sequence[BaseMessage], result: MemoryResult) -> MemoryResult:
        view = list(result.messages)
        newest = max(i for i, m in enumerate(view) if isinstance(m, HumanMessage))
        if newest > 1:
            del view[newest]
        return MemoryResult(view, result.state, result.report)


class LosesQuietly(_Wrapped):
    """Trims like TokenBudget but reports nothing dropped (and health "healthy")."""

    def alter(self, messages: Sequence[BaseMessage], result: MemoryResult) -> MemoryResult:
        report = result.report.__class__(**{**_fields(result.report), "messages_dropped": 0})
        return MemoryResult(result.messages, result.state, report)


class AsyncDiffers(_Wrapped):
    async def aapply(self, *args: object, **kwargs: object) -> MemoryResult:  # type: ignore[override]
        result = await super().aapply(*args, **kwargs)  # type: ignore[arg-type]
        return MemoryResult(result.messages, MemoryState(seen=result.state.seen + 1), result.report)


class ForgetsState(_Wrapped):
    """Trusts the state object it returned last (by identity), which a checkpoint loses."""

    last: MemoryState | None = None

    def _plan(
        self, messages: Sequence[BaseMessage], state: MemoryState, now: float, extra: int
    ) -> Plan:
        result = yield from self.inner._plan(messages, state, now, extra)
        kept = state is self.last and state.seen > 0
        report = result.report.__class__(**{**_fields(result.report), "prefix_kept": kept})
        self.last = result.state
        return MemoryResult(result.messages, result.state, report)


def _fields(report: object) -> dict[str, object]:
    return {name: getattr(report, name) for name in report.__slots__}  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("strategy", "pattern"),
    [
        (OverBudget(), r"^budget: chat seed=0 call \d+: view costs [\d,]+ tokens, budget 100$"),
        (
            OrphansToolResults(),
            r"^validity: .* call \d+: \d error finding\(s\).*orphan_tool_result",
        ),
        (DropsNewestHuman(), r"^validity: .* call \d+: the newest human message \(id 'h-\d+'"),
        (
            LosesQuietly(),
            r"^nothing lost: chat seed=0 call \d+: \d+ of \d+ messages are not in the view, "
            r"but the report accounts for 0 \(messages_dropped 0 \+ not_shown 0\)$",
        ),
        (AsyncDiffers(), r"^sync == async: chat seed=0 call 1: states differ: seen 2 vs 3"),
        (
            ForgetsState(),
            r"^state round-trip: chat seed=0 call 2: fed the round-tripped state: reports differ",
        ),
    ],
    ids=lambda v: type(v).__name__ if isinstance(v, Strategy) else "",
)
def test_the_kit_fails_broken_strategies_with_a_useful_message(
    strategy: Strategy, pattern: str
) -> None:
    with pytest.raises(AssertionError, match=pattern):
        check_strategy(strategy, seeds=1, messages=30)


def test_the_kit_fails_a_summarizing_strategy_that_hides_while_healthy() -> None:
    class Hides(_Wrapped):
        def alter(self, messages: Sequence[BaseMessage], result: MemoryResult) -> MemoryResult:
            report = result.report.__class__(**{**_fields(result.report), "not_shown": 1})
            return MemoryResult(result.messages, result.state, report)

    with pytest.raises(AssertionError, match=r"^nothing lost: .*health is 'healthy' but 1 "):
        check_strategy(Hides(), seeds=1, messages=10)


def test_max_tokens_bounds_a_strategy_without_a_budget() -> None:
    check_strategy(MockStrategy(), seeds=1, messages=4, max_tokens=100_000)
    with pytest.raises(AssertionError, match=r"^budget: .*, max_tokens 200$"):
        check_strategy(MockStrategy(), seeds=1, messages=30, max_tokens=200)


def test_the_clock_is_restored() -> None:
    strategy = TokenBudget(1_000)
    check_strategy(strategy, seeds=1, messages=10)
    assert "clock" not in vars(strategy)


def test_fake_summary_model_answers_non_empty_within_the_budget() -> None:
    model = FakeSummaryModel()
    strategy = SummaryBuffer(800, summarizer=model, max_summary_tokens=120)
    result = None
    for history in agent_loop(30, words=(20, 80)):
        result = strategy.apply(history, None if result is None else result.state)
    assert result is not None and model.calls > 0
    summary = result.state.sections["conversation"]
    assert summary.strip()
    assert strategy.counter.count_text(summary) <= 120
    assert str(FakeSummaryModel().invoke("").content).strip()


def test_recording_summarizer_records_every_folded_message_once() -> None:
    recorder = RecordingSummarizer(max_summary_tokens=100)
    strategy = SummaryBuffer(700, summarizer=recorder)
    state: MemoryState | None = None
    last: list[BaseMessage] = []
    for history in agent_loop(50, seed=3, words=(20, 80)):
        state = strategy.apply(history, state).state
        last = list(history)
    assert state is not None and len(recorder.batches) > 1
    ids = recorder.folded_ids
    assert len(ids) == len(set(ids)) == state.folded
    # the oldest body messages are the ones folded, in order
    body = [m.id for m in last if m.id != "sys"]
    assert ids == body[: len(ids)]


def test_recording_summarizer_records_async_folds_too() -> None:
    recorder = RecordingSummarizer(max_summary_tokens=100)
    strategy = SummaryBuffer(700, summarizer=recorder)

    async def run() -> MemoryState | None:
        state: MemoryState | None = None
        for history in agent_loop(40, seed=1, words=(20, 80)):
            state = (await strategy.aapply(history, state)).state
        return state

    state = asyncio.run(run())
    assert state is not None and state.folded == len(set(recorder.folded_ids)) > 0


def test_mock_strategy_records_calls_and_returns_the_configured_view() -> None:
    mock = MockStrategy()
    first = [HumanMessage("hi", id="a")]
    result = mock.apply(first)
    second = [*first, HumanMessage("again", id="b")]
    mock.apply(second, result.state, extra_tokens=7)
    assert [c.messages for c in mock.calls] == [first, second]
    assert mock.calls[0].state == MemoryState()
    assert mock.calls[1].state == result.state and mock.calls[1].extra_tokens == 7
    assert result.messages == first and result.report.messages_dropped == 0

    last_only = MockStrategy(lambda messages: messages[-1:], budget=50)
    out = asyncio.run(last_only.aapply(second))
    assert [m.id for m in out.messages] == ["b"]
    assert out.report.messages_dropped == 1 and out.report.budget == 50
    assert len(last_only.calls) == 1

    fixed = MockStrategy([HumanMessage("fixed", id="f")])
    assert [m.id for m in fixed.apply(second).messages] == ["f"]


def test_random_words_is_a_fixed_generator() -> None:
    """The benchmarks' recorded results were made with it: the same seed, the same sentences."""
    rng = random.Random(0)
    sentences = [random_words(rng, 0, 60) for _ in range(300)]
    digest = hashlib.sha256("\n".join(sentences).encode()).hexdigest()[:16]
    assert digest == "3242a3119026253b"


def test_random_words_draws_a_sentence_of_low_to_high_words() -> None:
    rng = random.Random(3)
    for low, high in ((0, 0), (1, 1), (2, 8), (50, 60)):
        for _ in range(50):
            text = random_words(rng, low, high)
            # an emoji may be appended as one more word
            assert low <= len(text.split()) <= high + 1 and text.endswith(".")
            assert text[:1] == text[:1].upper()


@pytest.mark.parametrize(("low", "high"), [(-1, 3), (5, 4)])
def test_random_words_rejects_an_empty_range(low: int, high: int) -> None:
    with pytest.raises(ValueError, match="0 <= low <= high"):
        random_words(random.Random(0), low, high)
