"""The failure backoff against a clock that steps back, and a clock that answers garbage.

After a failed fold ``retry_at`` is ``now + wait``. When the clock then steps back (NTP, a
resumed VM, another worker's clock), ``retry_at`` must not stay far ahead of every later ``now``:
it is never more than ``retry_max`` after the current clock (:func:`within_backoff`), so the
fold is tried again within ``retry_max`` of the new clock. A strategy's ``clock`` that answers
something other than a finite number of seconds is a clear error naming ``clock`` and the value.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import pytest
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage

from langmem_ext import ApproximateCounter, FoldPolicy, SummaryBuffer, TokenBudget
from langmem_ext.core.state import MemoryState
from langmem_ext.core.transitions import (
    FoldFailed,
    RetryPolicy,
    health_after,
    may_try_fold,
    within_backoff,
)

POLICY = RetryPolicy(degrade_after=3, retry_initial=2.0, retry_max=60.0)


# -- the pure rule --------------------------------------------------------------------------------


def test_state_backoff_after_the_clock_stepped_back_is_capped_at_retry_max() -> None:
    failed = health_after(MemoryState(), FoldFailed(ValueError("down")), 10_000.0, POLICY)
    assert failed.retry_at == 10_002.0
    capped = within_backoff(failed, 0.0, POLICY)
    assert capped.retry_at == 60.0
    assert (capped.health, capped.failures, capped.last_error) == (
        failed.health,
        failed.failures,
        failed.last_error,
    )
    assert not may_try_fold(failed, 0.0, POLICY)
    # once stored, the capped retry_at holds while the clock runs on: tried at 60
    assert not may_try_fold(capped, 59.9, POLICY) and may_try_fold(capped, 60.0, POLICY)
    assert within_backoff(capped, 30.0, POLICY) is capped


def test_state_backoff_with_a_clock_running_forward_is_unchanged() -> None:
    state = MemoryState()
    for _ in range(7):
        state = health_after(state, FoldFailed(ValueError("down")), 1_000.0, POLICY)
        assert within_backoff(state, 1_000.0, POLICY) is state
        assert state.retry_at is not None and state.retry_at - 1_000.0 <= POLICY.retry_max
        assert may_try_fold(state, state.retry_at, POLICY)
        assert not may_try_fold(state, state.retry_at - 0.5, POLICY)
    assert within_backoff(MemoryState(), 0.0, POLICY) == MemoryState()


@pytest.mark.parametrize("back_to", [0.0, 5_000.0, 9_999.0, -1e6])
def test_state_backoff_retry_at_never_more_than_retry_max_after_the_clock(back_to: float) -> None:
    state = MemoryState()
    for failures in range(1, 6):
        state = health_after(state, FoldFailed(ValueError("down")), 10_000.0 * failures, POLICY)
        capped = within_backoff(state, back_to, POLICY)
        assert capped.retry_at is not None
        assert capped.retry_at - back_to <= POLICY.retry_max


# -- end to end: a SummaryBuffer whose clock steps back -----------------------------------------


class Clock:
    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def conversation(turns: int) -> list[BaseMessage]:
    return [
        m
        for i in range(turns)
        for m in (
            HumanMessage(f"question {i}: " + "shipment " * 20, id=f"h{i}"),
            AIMessage(f"answer {i}: " + "details " * 20, id=f"a{i}"),
        )
    ]


def failing_then_healthy(calls: list[float], clock: Clock) -> Callable[[Any], str]:
    def model(_: Any) -> str:
        calls.append(clock.now)
        if len(calls) == 1:
            raise ValueError("provider down")
        return "The user asked questions about the shipment and got answers with details."

    return model


@pytest.mark.parametrize("driver", ["sync", "async"])
async def test_state_backoff_fold_is_retried_within_retry_max_after_the_clock_stepped_back(
    driver: str,
) -> None:
    clock = Clock(10_000.0)
    calls: list[float] = []
    strategy = SummaryBuffer(
        600,
        summarizer=failing_then_healthy(calls, clock),
        counter=ApproximateCounter(),
        policy=FoldPolicy(retry_max=60.0, clock=clock),
    )

    async def call(messages: list[BaseMessage], state: Any) -> Any:
        if driver == "sync":
            return strategy.apply(messages, state)
        return await strategy.aapply(messages, state)

    turns = 4
    result = await call(conversation(turns), None)
    while not calls:  # grow until the first fold is asked for (and fails at t=10,000)
        turns += 1
        result = await call(conversation(turns), result.state)
    assert result.state.health == "retrying" and result.state.retry_at == 10_002.0
    clock.now = 0.0  # the clock steps back
    while clock.now <= 120.0 and len(calls) == 1:
        result = await call(conversation(turns), result.state)
        retry_at = result.state.retry_at
        assert retry_at is None or retry_at - clock.now <= 60.0
        clock.now += 10.0
    assert len(calls) == 2 and calls[1] <= 60.0
    assert result.state.health == "healthy" and result.state.folded > 0


# -- a clock that answers garbage ------------------------------------------------------------------


BAD_CLOCKS: list[tuple[object, type[Exception]]] = [
    (None, TypeError),
    ("12", TypeError),
    (True, TypeError),
    (math.nan, ValueError),
    (math.inf, ValueError),
]


@pytest.mark.parametrize(("value", "error"), BAD_CLOCKS, ids=[repr(v) for v, _ in BAD_CLOCKS])
@pytest.mark.parametrize("kind", ["SummaryBuffer", "TokenBudget"])
async def test_engine_clock_answering_garbage_is_an_error_naming_clock(
    value: object, error: type[Exception], kind: str
) -> None:
    def clock() -> Any:
        return value

    strategy: Any
    if kind == "SummaryBuffer":
        strategy = SummaryBuffer(
            600,
            summarizer=lambda _: "summary",
            counter=ApproximateCounter(),
            policy=FoldPolicy(clock=clock),
        )
    else:
        strategy = TokenBudget(600, counter=ApproximateCounter())
        strategy.clock = clock
    messages = conversation(3)
    with pytest.raises(error, match=rf"clock must return .*got {value!r}".replace("(", r"\(")):
        strategy.apply(messages)
    with pytest.raises(error, match="clock must return"):
        await strategy.aapply(messages)
    with pytest.raises(error, match="clock must return"):
        strategy.view(messages)
