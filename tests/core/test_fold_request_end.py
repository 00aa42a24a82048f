"""A fold request's end never moves back while the history only grows under the same summary.

Background compaction starts a fold in the background and answers the plan ``FoldDeferred``; a
later call adopts the running fold only when its messages are the oldest of that call's request
(``_Job.begins``). So while the summary is unchanged and messages are only appended, each
request must reach at least as far as the ones before it; a request that stops earlier leaves
the running fold unadoptable, and its messages are summarized again. Each test grows one
history, asks the plan on every step (a fold is never adopted: the summary stays the same), and
checks the ends of the requests, covering each rule of ``fold_turn._fold_boundary`` that used to
move the end back."""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage

from langmem_ext import FoldPolicy, MemoryBudgetExceeded, SummaryBuffer
from langmem_ext.core.fold import plan_fold
from langmem_ext.core.state import MemoryState
from langmem_ext.core.transitions import FoldDeferred


def _strategy(max_tokens: int, min_messages: int, target: int, prefetch: int) -> SummaryBuffer:
    return SummaryBuffer(
        max_tokens,
        summarizer=lambda prompt: "a summary",
        max_summary_tokens=max_tokens // 8,
        target_tokens=target,
        min_messages=min_messages,
        policy=FoldPolicy(prefetch_tokens=prefetch),
    )


def _grown(groups: Sequence[Sequence[BaseMessage]]) -> Iterator[list[BaseMessage]]:
    history: list[BaseMessage] = []
    for group in groups:
        history = [*history, *group]
        yield list(history)


def _round(k: int, words: int) -> list[BaseMessage]:
    call = {"name": "search", "args": {"q": f"q{k}"}, "id": f"c{k}"}
    return [
        AIMessage(f"looking {k}", tool_calls=[call]),
        ToolMessage("r " * words, tool_call_id=f"c{k}"),
    ]


def _request_ends(strategy: SummaryBuffer, histories: Iterator[list[BaseMessage]]) -> list[int]:
    """The end (history index) of each fold request the plan makes while the history grows; no
    fold is ever adopted (the driver defers each one, as for a fold running in the background)."""
    state, ends = MemoryState(), []
    for history in histories:
        plan = plan_fold(history, state, strategy.config, strategy.counter, 0.0)
        try:
            request = next(plan)
        except StopIteration as done:
            state = done.value.state
            continue
        ends.append(state.folded + len(request.messages))
        try:
            plan.send(FoldDeferred())
        except StopIteration as done:
            state = done.value.state
        except MemoryBudgetExceeded as error:  # pragma: no cover - the budgets here fit
            raise AssertionError("the view did not fit") from error
    return ends


def _assert_never_back(ends: list[int]) -> None:
    assert len(ends) >= 2, ends
    assert ends == sorted(ends), f"a fold request stopped short of an earlier one: {ends}"


def test_a_short_question_after_a_long_agent_turn_keeps_the_cut_between_its_rounds() -> None:
    """The long turn did not fit, so the folds cut it between its tool rounds (its request is
    pinned); after a one-message question (fewer than min_messages), the newest min_messages
    reach back into that turn: the fold still cuts it there, not before its request."""
    groups: list[list[BaseMessage]] = [
        [HumanMessage("hello " * 10)],
        [AIMessage("hi " * 10)],
        [HumanMessage("please check all the orders " * 3)],
        *(_round(k, 60) for k in range(6)),
        [AIMessage("done " * 5)],
        [HumanMessage("thanks")],
    ]
    ends = _request_ends(_strategy(600, 4, 200, 360), _grown(groups))
    _assert_never_back(ends)
    assert ends[-1] > 3, "the last fold stops before the agent turn's request"


def test_newest_messages_too_large_to_show_are_folded_only_down_to_what_can_be_shown() -> None:
    """The newest min_messages cannot be shown (a huge reply among them): the fold goes down to
    the oldest human message from which the rest can be shown; one more message makes those
    newest ones showable, and the fold still stops there, not further back."""
    groups = [
        [HumanMessage("hi")],
        [AIMessage("x " * 3000)],
        [HumanMessage("y " * 500)],
        [HumanMessage("ok")],
        [HumanMessage("and?")],
    ]
    _assert_never_back(_request_ends(_strategy(1000, 3, 400, 700), _grown(groups)))


def test_tool_rounds_too_large_to_show_are_folded_only_down_to_what_can_be_shown() -> None:
    """Inside a long agent turn the newest min_messages cannot be shown (a huge tool result):
    the fold goes down to the oldest round from which the rest can be shown, which only moves
    forward as rounds come."""
    groups = [
        [HumanMessage("please check " * 5)],
        _round(0, 50),
        _round(1, 3000),
        *(_round(k, 100) for k in range(2, 5)),
    ]
    _assert_never_back(_request_ends(_strategy(1000, 5, 400, 700), _grown(groups)))


def test_with_fewer_messages_than_min_messages_the_fold_keeps_all_that_may_lead_a_view() -> None:
    """No human message holds min_messages after it (the history starts with a trimmed reply):
    the fold keeps all it may, from the oldest human message, which the next message then
    makes hold min_messages."""
    groups = [
        [AIMessage("x " * 3000), HumanMessage("y " * 500)],
        [HumanMessage("ok")],
        [HumanMessage("and?")],
    ]
    _assert_never_back(_request_ends(_strategy(1000, 3, 400, 700), _grown(groups)))
