"""Trimming strategies inside one long agent turn: with ``target_tokens`` the gap view (the
request, then the newest rounds that fit) moves its cut in batches, so the prompt prefix holds
on most calls; without it the cut moves every call (the newest rounds that fit the room)."""

from __future__ import annotations

from agent_turns import REQUEST, long_turn, model_call_ends
from langchain_core.messages import BaseMessage

from langmem_ext import (
    ApproximateCounter,
    MemoryState,
    TokenBudget,
    is_valid,
)


def _prefix(previous: list[BaseMessage], view: list[BaseMessage]) -> bool:
    return len(previous) <= len(view) and all(a == b for a, b in zip(previous, view, strict=False))


def _replay(strategy: TokenBudget, rounds: int) -> tuple[float, list[BaseMessage], MemoryState]:
    history = long_turn(rounds)
    state: MemoryState | None = None
    previous: list[BaseMessage] | None = None
    kept = calls = 0
    counter = ApproximateCounter()
    for end in model_call_ends(history):
        result = strategy.apply(history[:end], state)
        view, state = result.messages, result.state
        assert is_valid(view)
        assert view[1] == REQUEST  # the request, verbatim, right after the system message
        assert counter.count_messages(view) <= 3_000
        if previous is not None:
            calls += 1
            kept += _prefix(previous, view)
            if result.report.prefix_kept:  # the report never claims a prefix that broke
                assert _prefix(previous, view)
        previous = view
    assert state is not None
    return kept / calls, previous or [], state


def test_with_a_target_the_prefix_holds_on_most_calls_of_a_long_turn() -> None:
    share, _, state = _replay(
        TokenBudget(3_000, target_tokens=1_800, counter=ApproximateCounter()), 150
    )
    assert share >= 0.85
    assert state.gap_key is not None


def test_without_a_target_the_gap_view_fills_the_room_every_call() -> None:
    share, view, _ = _replay(TokenBudget(3_000, counter=ApproximateCounter()), 150)
    assert share < 0.5  # the oldest shown round changes on most calls once the turn overflows
    assert ApproximateCounter().count_messages(view) > 2_700


def test_the_gap_cut_survives_the_state_round_trip() -> None:
    strategy = TokenBudget(3_000, target_tokens=1_800, counter=ApproximateCounter())
    history = long_turn(150)
    ends = model_call_ends(history)
    state = strategy.apply(history[: ends[-2]]).state
    restored = MemoryState.from_dict(state.to_dict())
    assert restored.gap_key == state.gap_key is not None
    first = strategy.apply(history[: ends[-1]], state).messages
    again = strategy.apply(history[: ends[-1]], restored).messages
    assert first == again
