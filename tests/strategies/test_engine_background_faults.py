"""Background folds of the engine under models that hang: every job ends at its deadline.

The models here never answer in time, in the ways that used to keep a background job alive for
good: a sync-only chat model (LangChain runs its ``_generate`` in the event loop's executor for
``ainvoke``) blocked on an event, and an async model that ignores its cancellation. Each test
releases them at its end (the ``release`` fixture), so no thread outlives the test.

What is pinned: the crossing ``aapply`` with ``fold_wait=None`` returns within the summarizer's
timeout plus a margin, with the timed-out fold adopted as a failure (nothing folded, nothing
lost, health ``retrying``); ``flush()`` and ``aflush()`` without a timeout return once the job
met its deadline, and with ``timeout=`` within it; a strategy whose model hangs leaves another
strategy's background folds running; and a model that blocks its event loop (so even the
summarizer's timeout cannot fire) is abandoned at the job's deadline.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import pytest
from langchain_core.callbacks import CallbackManagerForLLMRun
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage
from langchain_core.outputs import ChatGeneration, ChatResult

from langmem_ext import ApproximateCounter, FoldPolicy, Summarizer, SummaryBuffer
from langmem_ext.core.result import MemoryResult
from langmem_ext.core.state import MemoryState
from langmem_ext.strategies.engine import Strategy
from langmem_ext.strategies.folding import _jobs_of, job_deadline

COUNTER = ApproximateCounter()
#: the summarizer's timeout in these tests (seconds)
TIMEOUT = 0.5
#: what a call may take beyond the timeout before the test calls it hung
MARGIN = 2.0
SUMMARY = "The user asked questions about the shipment and got answers with shipment details."

_RELEASES: list[threading.Event] = []


@pytest.fixture(autouse=True)
def release() -> Iterator[threading.Event]:
    """The event every hanging model of a test waits on, set at the end of the test."""
    event = threading.Event()
    _RELEASES.append(event)
    yield event
    event.set()


class HangingChat(BaseChatModel):
    """A sync-only chat model whose ``_generate`` blocks until ``release`` is set (``ainvoke``
    runs it in the event loop's executor)."""

    release: Any

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        self.release.wait()
        return ChatResult(generations=[ChatGeneration(message=AIMessage(SUMMARY))])

    @property
    def _llm_type(self) -> str:
        return "hanging"


def cancel_ignoring(release: threading.Event) -> Callable[[Any], Any]:
    """An async model that swallows every cancellation until ``release`` is set."""

    async def model(_: Any) -> str:
        while not release.is_set():
            try:
                await asyncio.sleep(0.02)
            except asyncio.CancelledError:
                continue
        return SUMMARY

    return model


def loop_blocking(release: threading.Event) -> Callable[[Any], Any]:
    """An async model that blocks its event loop (so no timeout of that loop can fire); only
    off the main thread (a background fold), so that no call of the test's own loop blocks."""

    async def model(_: Any) -> str:
        if threading.current_thread() is not threading.main_thread():
            release.wait()
        return SUMMARY

    return model


def healthy(_: Any) -> str:
    return SUMMARY


def buffer(model: Any, *, fold_wait: float | None = None) -> SummaryBuffer:
    return SummaryBuffer(
        1_000,
        summarizer=Summarizer(model, timeout=TIMEOUT, max_summary_tokens=120),
        counter=COUNTER,
        policy=FoldPolicy(prefetch_tokens=700, fold_wait=fold_wait),
    )


def turn(conversation: int, i: int) -> list[BaseMessage]:
    tag = f"c{conversation}-{i}"
    return [
        HumanMessage(f"question {tag}: " + "shipment " * 30, id=f"h{tag}"),
        AIMessage(f"answer {tag}: " + "details " * 30, id=f"a{tag}"),
    ]


def running(strategy: Strategy) -> int:
    return sum(1 for job in _jobs_of(strategy).all() if not job.future.done())


async def until_background_fold(
    strategy: Strategy, conversation: int = 0
) -> tuple[list[BaseMessage], MemoryState | None, int]:
    """Add turns through ``aapply`` until the strategy starts a background fold; the history,
    the state and the number of turns."""
    history: list[BaseMessage] = []
    state: MemoryState | None = None
    started = len(_jobs_of(strategy).all())
    for i in range(40):
        history = history + turn(conversation, i)
        result = await asyncio.wait_for(strategy.aapply(history, state), MARGIN)
        assert result.report.folded == 0
        state = result.state
        if len(_jobs_of(strategy).all()) > started:
            return history, state, i + 1
    raise AssertionError(
        f"no background fold started: {strategy.background_running()} running, "
        f"{[job.future.done() for job in _jobs_of(strategy).all()]}"
    )


async def drive(strategy: Strategy, conversation: int, turns: int) -> MemoryState | None:
    """``turns`` turns of a conversation through ``aapply``; the last state."""
    history: list[BaseMessage] = []
    state: MemoryState | None = None
    for i in range(turns):
        history = history + turn(conversation, i)
        state = (await asyncio.wait_for(strategy.aapply(history, state), MARGIN)).state
    return state


async def cross(
    strategy: Strategy, conversation: int, history: list[BaseMessage], state: Any, turns: int
) -> tuple[MemoryResult, float]:
    """Add turns until a call over the trigger: that call's result and how long it took."""
    for i in range(turns, turns + 40):
        history = history + turn(conversation, i)
        started = time.monotonic()
        result = await asyncio.wait_for(strategy.aapply(history, state), TIMEOUT + MARGIN)
        took = time.monotonic() - started
        state = result.state
        if result.report.trigger is not None or result.state.health != "healthy":
            return result, took
    raise AssertionError("the trigger was never crossed")


def hanging_models() -> list[tuple[str, Callable[[threading.Event], Any]]]:
    return [
        ("sync-only chat model", lambda event: HangingChat(release=event)),
        ("cancel-ignoring coroutine", cancel_ignoring),
    ]


@pytest.mark.parametrize(("kind", "make"), hanging_models(), ids=[k for k, _ in hanging_models()])
async def test_engine_crossing_aapply_returns_when_the_background_model_hangs(
    kind: str, make: Callable[[threading.Event], Any], release: threading.Event
) -> None:
    """fold_wait=None: the crossing call waits for the running fold, which ends at the
    summarizer's timeout as a failed fold (nothing folded, nothing lost, retrying)."""
    strategy = buffer(make(release), fold_wait=None)
    history, state, turns = await until_background_fold(strategy)
    result, took = await cross(strategy, 0, history, state, turns)
    assert took < TIMEOUT + MARGIN, kind
    assert result.state.health in ("retrying", "degraded")
    assert result.state.folded == 0
    assert result.state.last_error is not None
    assert "TimeoutError" in result.state.last_error or "timeout" in result.state.last_error
    assert result.report.not_shown + len(result.messages) >= 2  # the note stands for the rest


@pytest.mark.parametrize(("kind", "make"), hanging_models(), ids=[k for k, _ in hanging_models()])
async def test_engine_flush_without_timeout_returns_once_a_hung_job_met_its_deadline(
    kind: str, make: Callable[[threading.Event], Any], release: threading.Event
) -> None:
    strategy = buffer(make(release), fold_wait=0.0)
    await until_background_fold(strategy)
    started = time.monotonic()
    assert strategy.flush(timeout=0.2) in (0, 1)
    assert time.monotonic() - started < 1.0
    outcome: list[int] = []
    flusher = threading.Thread(target=lambda: outcome.append(strategy.flush()), daemon=True)
    flusher.start()
    flusher.join(TIMEOUT + MARGIN)
    assert not flusher.is_alive(), f"flush() still waits on a hung {kind}"
    assert outcome == [0]
    assert await asyncio.wait_for(strategy.aflush(), TIMEOUT + MARGIN) == 0


async def test_engine_aflush_timeout_bounds_the_wait_for_a_hung_job(
    release: threading.Event,
) -> None:
    strategy = buffer(loop_blocking(release), fold_wait=0.0)
    await until_background_fold(strategy)
    started = time.monotonic()
    assert await strategy.aflush(timeout=0.2) == 1
    assert time.monotonic() - started < 1.0
    started = time.monotonic()
    assert strategy.flush(timeout=0.2) == 1
    assert time.monotonic() - started < 1.0


async def test_engine_job_blocking_its_event_loop_ends_at_its_deadline(
    release: threading.Event,
) -> None:
    """An async model that blocks its loop: the summarizer's timeout cannot fire there; the
    job's deadline (from the summarizer's timeout) ends it as a failed fold all the same."""
    strategy = buffer(loop_blocking(release), fold_wait=None)
    history, state, turns = await until_background_fold(strategy)
    (job,) = _jobs_of(strategy).all()
    assert job.deadline is not None and job.deadline <= 4 * TIMEOUT + 1.0
    result, took = await cross(strategy, 0, history, state, turns)
    assert took < job.deadline + MARGIN
    assert result.state.health == "retrying" and result.state.folded == 0
    assert result.state.last_error is not None and "TimeoutError" in result.state.last_error


def test_engine_job_deadline_follows_the_summarizer_timeout() -> None:
    """Every call the fold may make (per section: a fold call and a compress call per chunk),
    each at its longest (attempts x timeout, the waits between them, then the fallback)."""
    messages = turn(0, 0) + turn(0, 1)

    def summarizer(**kwargs: Any) -> Summarizer:
        return Summarizer(healthy, max_summary_tokens=120, max_attempts=1, **kwargs)

    assert job_deadline(summarizer(timeout=2.0), {}, messages) == pytest.approx(2 * 2.0 + 1.0)
    with_fallback = summarizer(timeout=2.0, fallback=healthy)
    assert job_deadline(with_fallback, {}, messages) == pytest.approx(2 * (2.0 + 2.0) + 1.0)
    retrying = Summarizer(healthy, timeout=2.0, max_attempts=2, retry_max_wait=3.0)
    assert job_deadline(retrying, {}, messages) == pytest.approx(2 * (2 * 2.0 + 3.0) + 1.0)
    two_sections = summarizer(timeout=2.0, templates=("conversation", "facts"))
    assert job_deadline(two_sections, {}, messages) == pytest.approx(2 * 2 * 2.0 + 1.0)
    # a backlog larger than one call's input is folded in chained calls, each bounded
    small = Summarizer(healthy, timeout=1.0, max_summary_tokens=100, max_input_tokens=400)
    long = [m for i in range(20) for m in turn(0, i)]
    assert job_deadline(small, {}, long) > 10 * job_deadline(small, {}, messages) / 2
    assert job_deadline(summarizer(timeout=None), {}, messages) is None
    assert job_deadline(healthy, {}, messages) is None  # type: ignore[arg-type]


@pytest.mark.parametrize(("kind", "make"), hanging_models(), ids=[k for k, _ in hanging_models()])
async def test_engine_hung_model_in_one_strategy_never_starves_another_strategys_folds(
    kind: str, make: Callable[[threading.Event], Any], release: threading.Event
) -> None:
    """Six conversations of strategy X start background folds on a hung model; strategy Y, with
    a healthy model in the same process, still gets its background fold run and adopted."""
    hung = buffer(make(release), fold_wait=0.0)
    _, _, turns = await until_background_fold(hung, 0)
    for conversation in range(1, 6):  # at background_limit, the rest are deferred
        await drive(hung, conversation, turns)
    assert hung.background_running() <= hung.background_limit
    ok = buffer(healthy, fold_wait=0.0)
    history, state, turns = await until_background_fold(ok, 100)
    assert await asyncio.wait_for(ok.aflush(timeout=MARGIN), MARGIN + 1) == 0
    history = history + turn(100, turns)
    result = await ok.aapply(history, state)
    assert result.report.folded > 0, kind
    assert result.state.health == "healthy" and result.state.summary
    # the sync driver too: another healthy strategy, through apply
    other = buffer(healthy, fold_wait=0.0)
    history, state = [], None
    for i in range(40):
        history = history + turn(200, i)
        state = other.apply(history, state).state
        if _jobs_of(other).all():
            break
    assert other.flush(timeout=MARGIN) == 0
    result = other.apply(history + turn(200, 99), state)
    assert result.report.folded > 0


async def test_engine_background_limit_defers_folds_beyond_it_and_starts_them_later(
    release: threading.Event,
) -> None:
    """At ``background_limit`` running jobs a strategy starts no more (the request is deferred,
    nothing lost); once they end, the next background request starts again."""
    strategy = buffer(loop_blocking(release), fold_wait=0.0)
    limit = strategy.background_limit
    for conversation in range(limit):
        _, _, turns = await until_background_fold(strategy, conversation)
    assert strategy.background_running() == limit
    history: list[BaseMessage] = []
    state: MemoryState | None = None
    for i in range(turns + 1):  # past prefetch_tokens, below the trigger: background requests
        history = history + turn(50, i)
        result = await asyncio.wait_for(strategy.aapply(history, state), MARGIN)
        assert result.report.trigger is None and result.state.health == "healthy"
        state = result.state
    assert strategy.background_running() == limit
    assert not any(job.messages[0].id == "hc50-0" for job in _jobs_of(strategy).all())
    release.set()  # the blocked loops return; their threads end
    assert await asyncio.wait_for(strategy.aflush(), 10) == 0
    deadline = time.monotonic() + 10
    while strategy.background_running() and time.monotonic() < deadline:
        await asyncio.sleep(0.01)
    assert strategy.background_running() == 0
    await strategy.aapply(history, state)
    assert any(job.messages[0].id == "hc50-0" for job in _jobs_of(strategy).all())


def _ids(messages: Sequence[BaseMessage]) -> list[str | None]:
    return [m.id for m in messages]
