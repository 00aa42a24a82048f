"""TokenBudget and SlidingWindow with exact messages and exact token figures.

The counter here is one token per word (at least 1 per message), so every number is readable.
"""

from __future__ import annotations

import copy
from itertools import pairwise
from typing import Any

import pytest
from fakes import words
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage, ToolMessage

from langmem_ext import (
    ApproximateCounter,
    CallableCounter,
    ContextOverflowError,
    MemoryState,
    SlidingWindow,
    TokenBudget,
    validate,
)


def W(**kwargs: Any) -> CallableCounter:
    return CallableCounter(words, **kwargs)


def text(n: int, tag: str = "w") -> str:
    return " ".join(f"{tag}{i}" for i in range(n))


def H(n: int, mid: str) -> HumanMessage:
    return HumanMessage(text(n, mid), id=mid)


def A(n: int, mid: str) -> AIMessage:
    return AIMessage(text(n, mid), id=mid)


def S(n: int = 2) -> SystemMessage:
    return SystemMessage(text(n, "sys"), id="sys")


def ids(messages: list[BaseMessage]) -> list[str | None]:
    return [m.id for m in messages]


def call(mid: str, *call_ids: str) -> AIMessage:
    return AIMessage("", tool_calls=[{"name": "f", "args": {}, "id": c} for c in call_ids], id=mid)


def res(call_id: str, n: int) -> ToolMessage:
    return ToolMessage(text(n, call_id), tool_call_id=call_id, id=f"t-{call_id}")


HISTORY = [S(), H(10, "h1"), A(10, "a1"), H(10, "h2"), A(10, "a2"), H(5, "h3")]


def test_keeps_the_newest_units_that_fit_and_counts_the_system_message() -> None:
    result = TokenBudget(27, counter=W()).apply(HISTORY)
    assert ids(result.messages) == ["sys", "h2", "a2", "h3"]
    assert result.report.tokens_after == 27 == result.report.budget
    assert result.report.tokens_before == 47
    assert (result.report.messages_before, result.report.messages_after) == (6, 4)
    assert result.report.messages_dropped == 2


def test_the_view_starts_on_a_human_message() -> None:
    # a2 would fit at 26 tokens, but a view may not start on an assistant message
    result = TokenBudget(26, counter=W()).apply(HISTORY)
    assert ids(result.messages) == ["sys", "h3"]
    anywhere = TokenBudget(26, counter=W(), start_on="any").apply(HISTORY)
    assert ids(anywhere.messages) == ["sys", "a2", "h3"]


def test_a_tool_call_and_its_parallel_results_are_kept_or_dropped_together() -> None:
    history = [S(), H(3, "h1"), call("ai", "x", "y"), res("x", 10), res("y", 10), H(5, "h2")]
    # whole unit: 1 + 10 + 10; with the system (2) and h2 (5): 28; h1 needs 3 more
    assert ids(TokenBudget(31, counter=W()).apply(history).messages) == [
        "sys",
        "h1",
        "ai",
        "t-x",
        "t-y",
        "h2",
    ]
    # 30: the unit fits but h1 does not, and the view may not start on the unit: only h2
    assert ids(TokenBudget(30, counter=W()).apply(history).messages) == ["sys", "h2"]
    # 27: t-y alone would fit, but never without its call
    view = TokenBudget(27, counter=W()).apply(history).messages
    assert ids(view) == ["sys", "h2"] and validate(view) == []


def test_reserve_and_safety_margin_shrink_the_budget() -> None:
    strategy = TokenBudget(40, counter=W(), reserve_tokens=3, safety_margin=0.1)
    result = strategy.apply(HISTORY)
    assert result.report.budget == 33  # floor(40 * 0.9) - 3
    assert ids(result.messages) == ["sys", "h2", "a2", "h3"]  # 27 <= 33 < 37


def test_overflow_error_names_the_numbers() -> None:
    history = [S(4), H(10, "old"), H(100, "huge")]
    with pytest.raises(ContextOverflowError) as info:
        TokenBudget(50, counter=W(), reserve_tokens=5).apply(history)
    error = info.value
    assert (error.needed, error.available, error.max_tokens) == (100, 41, 50)
    assert (error.reserve_tokens, error.system_tokens) == (5, 4)
    message = str(error)
    for fragment in ("need 100 tokens", "leaves 41", "max_tokens=50", "reserve_tokens=5"):
        assert fragment in message
    assert "overflow='clip'" in message


def test_overflow_clip_clips_the_newest_human_message_with_a_marker() -> None:
    counter = ApproximateCounter()
    history = [S(4), H(10, "old"), HumanMessage("lorem ipsum " * 500, id="huge")]
    result = TokenBudget(200, counter=counter, overflow="clip").apply(history)
    view = result.messages
    assert ids(view) == ["sys", "huge"]
    assert counter.count_messages(view) <= 200
    assert str(view[-1].content).endswith(
        "characters clipped by langmem_ext to fit the context budget]"
    )
    assert str(view[-1].content).startswith("lorem ipsum lorem")
    assert result.report.clipped == ("huge",)
    assert history[-1].content == "lorem ipsum " * 500  # the input is untouched


def test_overflow_clip_cannot_beat_a_system_message_larger_than_the_budget() -> None:
    with pytest.raises(ContextOverflowError, match="Clipping cannot help"):
        TokenBudget(10, counter=W(), overflow="clip").apply([S(20), H(3, "h")])


def test_hysteresis_keeps_the_cut_until_max_then_cuts_down_to_target() -> None:
    strategy = TokenBudget(60, target_tokens=30, counter=W())
    history: list[BaseMessage] = [S()]
    state: MemoryState | None = None
    starts: list[str | None] = []
    sizes: list[int] = []
    kept: list[bool] = []
    for i in range(12):
        history.append(H(9, f"h{i}"))
        result = strategy.apply(history, state)
        state = result.state
        starts.append(result.messages[1].id)
        sizes.append(result.report.tokens_after)
        kept.append(result.report.prefix_kept)
        history.append(A(9, f"a{i}"))
    # turn i sees 2 + 9 * (2i + 1) tokens: 11, 29, 47, then 65 > 60, which is cut down to the
    # target: the newest whole turns within 30 - 2 are h2 a2 h3 (27), so the view costs 29
    assert starts[:3] == ["h0"] * 3 and sizes[:3] == [11, 29, 47]
    assert starts[3] == "h2" and sizes[3] == 29
    assert kept[:4] == [False, True, True, False] and kept[4] is True
    assert starts[4] == "h2" and sizes[4] == 47  # the cut holds while under max_tokens
    assert all(s <= 60 for s in sizes)
    changes = sum(1 for a, b in pairwise(starts) if a != b)
    assert changes == 5  # once every second turn, instead of every turn
    without = TokenBudget(60, counter=W())
    moving, state = [], None
    for i in range(1, 13):
        r = without.apply(history[: 2 * i], state)
        state = r.state
        moving.append(r.messages[1].id)
    assert len(set(moving)) > len(set(starts))


def test_min_messages_keeps_more_context_or_reports_overflow() -> None:
    result = TokenBudget(100, counter=W(), min_messages=3).apply(HISTORY)
    assert len(result.messages) - 1 >= 3
    with pytest.raises(ContextOverflowError):
        TokenBudget(20, counter=W(), min_messages=3).apply(HISTORY)


def test_a_long_tool_loop_keeps_the_human_message_and_the_newest_rounds() -> None:
    history: list[BaseMessage] = [S(), H(5, "h0"), A(5, "a0"), H(5, "ask")]
    for i in range(10):
        history += [call(f"c{i}", f"k{i}"), res(f"k{i}", 19)]
    result = TokenBudget(50, counter=W()).apply(history)
    assert ids(result.messages) == ["sys", "ask", "c8", "t-k8", "c9", "t-k9"]
    assert result.report.gap is True
    assert result.report.tokens_after == 2 + 5 + 20 + 20
    assert validate(result.messages) == []


def test_state_round_trips_and_is_accepted_as_a_dict() -> None:
    strategy = TokenBudget(27, counter=W())
    first = strategy.apply(HISTORY)
    restored = MemoryState.from_json(first.state.to_json())
    assert restored == first.state
    again = strategy.apply([*HISTORY, A(3, "a3")], first.state.to_dict())
    assert again.report.history_rewritten is False
    assert again.report.tokens_before == 47 + 3
    with pytest.raises(ValueError, match="newer than this langmem_ext"):
        MemoryState.from_dict({"version": 99})
    with pytest.raises(TypeError, match="state must be a MemoryState"):
        strategy.apply(HISTORY, "nope")  # type: ignore[arg-type]


def test_a_rewritten_history_is_detected_and_recounted() -> None:
    strategy = TokenBudget(27, counter=W())
    first = strategy.apply(HISTORY)
    edited = [S(), H(1, "other"), A(1, "x")]
    result = strategy.apply(edited, first.state)
    assert result.report.history_rewritten is True
    assert result.report.tokens_before == 4


def test_the_running_total_counts_only_new_messages() -> None:
    seen: list[str | None] = []

    def spy(m: BaseMessage) -> int:
        seen.append(m.id)
        return words(m)

    strategy = TokenBudget(1000, counter=CallableCounter(spy, cache_size=2))
    history = [S(), *(H(3, f"m{i}") for i in range(50))]
    state = strategy.apply(history).state
    seen.clear()
    result = strategy.apply([*history, H(4, "new")], state)
    # the tiny cache forces recounts, so this shows what the plan *asks* for: the new message and
    # the view it walks, never the 50 old messages twice
    assert seen.count("new") >= 1
    assert result.report.tokens_before == 2 + 50 * 3 + 4


async def test_aapply_gives_the_same_result_as_apply() -> None:
    strategy = TokenBudget(27, counter=W(), target_tokens=20)
    sync = strategy.apply(HISTORY)
    async_ = await strategy.aapply(HISTORY)
    assert sync == async_


def test_configuration_errors_say_what_is_wrong() -> None:
    with pytest.raises(ValueError, match=r"target_tokens \(90\) must not exceed max_tokens \(80\)"):
        TokenBudget(80, target_tokens=90)
    with pytest.raises(ValueError, match=r"reserve_tokens .* leaves nothing"):
        TokenBudget(100, reserve_tokens=100)
    with pytest.raises(ValueError, match="safety_margin must be in"):
        TokenBudget(100, safety_margin=1.0)
    with pytest.raises(ValueError, match="start_on must be"):
        TokenBudget(100, start_on="assistant")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="overflow must be"):
        TokenBudget(100, overflow="truncate")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="max_tokens must be an integer >= 1"):
        TokenBudget(0)
    with pytest.raises(ValueError, match="max_messages must be an integer >= 1"):
        SlidingWindow(max_messages=0)
    with pytest.raises(TypeError, match="not a BaseMessage"):
        TokenBudget(100).apply([{"role": "user", "content": "hi"}])  # type: ignore[list-item]
    with pytest.raises(TypeError, match="sequence of BaseMessage"):
        TokenBudget(100).apply(HumanMessage("hi"))  # type: ignore[arg-type]


def test_system_messages_pinned_merged_or_dropped() -> None:
    history = [S(), H(3, "h1"), SystemMessage("late rule", id="late"), A(3, "a1"), H(3, "h2")]
    merged = TokenBudget(100, counter=W()).apply(history)
    assert [type(m).__name__ for m in merged.messages] == [
        "SystemMessage",
        "HumanMessage",
        "AIMessage",
        "HumanMessage",
    ]
    assert merged.messages[0].content == "sys0 sys1\n\nlate rule"
    assert merged.report.repaired is True
    dropped = TokenBudget(100, counter=W(), keep_system=False).apply(history)
    assert ids(dropped.messages) == ["h1", "a1", "h2"]


def test_empty_and_system_only_histories() -> None:
    assert TokenBudget(10).apply([]).messages == []
    system = [S()]
    assert TokenBudget(10).apply(system).messages == system


def test_strategies_never_mutate_their_input() -> None:
    history = [S(), H(3, "h1"), call("c", "k"), res("k", 3), HumanMessage("x " * 400, id="big")]
    snapshot = copy.deepcopy(history)
    TokenBudget(60, counter=W(), overflow="clip").apply(history)
    SlidingWindow(2).apply(history)
    assert history == snapshot


def test_sliding_window_counts_messages_and_moves_to_boundaries() -> None:
    history = [S(), H(1, "h1"), A(1, "a1"), H(1, "h2"), call("c", "k"), res("k", 1), A(1, "a2")]
    assert ids(SlidingWindow(5).apply(history).messages) == ["sys", "h2", "c", "t-k", "a2"]
    # the last 4 would start on the tool unit: the window moves forward to a human turn...
    result = SlidingWindow(3).apply([*history, H(1, "h3")])
    assert ids(result.messages) == ["sys", "h3"]
    # ...and never splits the call from its result
    anywhere = SlidingWindow(3, start_on="any").apply([*history, H(1, "h3")])
    assert ids(anywhere.messages) == ["sys", "a2", "h3"]  # t-k a2 h3 would orphan t-k


def test_sliding_window_keeps_the_newest_human_even_in_a_long_tool_loop() -> None:
    history: list[BaseMessage] = [H(1, "ask")]
    for i in range(6):
        history += [call(f"c{i}", f"k{i}"), res(f"k{i}", 1)]
    result = SlidingWindow(5).apply(history)
    assert ids(result.messages) == ["ask", "c4", "t-k4", "c5", "t-k5"]
    assert result.report.gap and validate(result.messages) == []


def test_sliding_window_with_a_token_budget_too() -> None:
    result = SlidingWindow(10, max_tokens=27, counter=W()).apply(HISTORY)
    assert ids(result.messages) == ["sys", "h2", "a2", "h3"]


def test_tool_rounds_after_the_newest_human_do_not_shrink_a_view_that_fits() -> None:
    # regression: the newest human followed by two tool rounds used to cut the view at that
    # human even though the whole history fitted
    history = [S(), H(3, "h1"), A(3, "a1"), H(3, "h2"), call("c1", "k1"), res("k1", 3)]
    history += [call("c2", "k2"), res("k2", 3)]
    plain, held = TokenBudget(100, counter=W()), TokenBudget(100, target_tokens=50, counter=W())
    for strategy in (plain, held):
        assert strategy.apply(history).messages == history
    state = held.apply(history[:4]).state
    result = held.apply(history, state)
    assert result.messages == history and result.report.prefix_kept


def test_a_system_message_inside_a_tool_round_is_merged_into_the_first() -> None:
    # regression: it used to stay in the middle of the view
    history = [S(), H(1, "q"), call("c", "k"), SystemMessage("be brief", id="late"), res("k", 1)]
    view = TokenBudget(1000, counter=W()).apply(history).messages
    assert [type(m).__name__ for m in view] == [
        "SystemMessage",
        "HumanMessage",
        "AIMessage",
        "ToolMessage",
    ]
    assert view[0].content == "sys0 sys1\n\nbe brief" and validate(view) == []
    result = TokenBudget(1000, counter=W(), keep_system=False).apply(history)
    assert ids(result.messages) == ["q", "c", "t-k"]
    assert result.report.tokens_after == W().count_messages(result.messages)


def test_the_only_human_message_inside_a_tool_round_starts_the_view() -> None:
    history = [call("c", "k"), H(2, "q"), res("k", 2), A(2, "a")]
    result = TokenBudget(1000, counter=W()).apply(history)
    assert ids(result.messages) == ["q", "a"]
    assert validate(result.messages) == []
    assert result.report.messages_dropped == 2
