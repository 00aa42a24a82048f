"""The message-count trigger, ``on_turn_added``, the
``"task"`` summary template, and rewrite mode keeping the pinned request of a long turn."""

from __future__ import annotations

import pytest
from fakes import SummaryModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage, ToolMessage

from langmem_ext import Compacting, FoldPolicy, Summarizer, SummaryBuffer, TieredSummary
from langmem_ext.core.transitions import removals_for_rewrite
from langmem_ext.summarize.prompts import TEMPLATES


def chat(n: int) -> list[BaseMessage]:
    out: list[BaseMessage] = [SystemMessage("sys", id="s")]
    for i in range(n):
        out.append(HumanMessage(f"question {i}", id=f"h{i}"))
        out.append(AIMessage(f"answer {i}", id=f"a{i}"))
    return out


def long_turn(rounds: int, words: int = 60) -> list[BaseMessage]:
    out: list[BaseMessage] = [SystemMessage("sys", id="s"), HumanMessage("do the task", id="q")]
    for i in range(rounds):
        call = {"name": "tool", "args": {"i": i}, "id": f"c{i}"}
        out.append(AIMessage("", tool_calls=[call], id=f"a{i}"))
        out.append(ToolMessage("word " * words, tool_call_id=f"c{i}", id=f"t{i}"))
    return out


@pytest.mark.parametrize("cls", [SummaryBuffer, Compacting, TieredSummary])
def test_message_trigger_fires_before_the_token_one_and_says_so(cls: type) -> None:
    model = SummaryModel()
    memory = cls(100_000, summarizer=model, policy=FoldPolicy(max_messages=10, keep_messages=6))
    history = chat(4)  # 8 messages after the system one: under both triggers
    first = memory.apply(history)
    assert first.report.trigger is None and model.calls == 0
    history = chat(6)  # 12 unfolded messages > 10
    result = memory.apply(history, first.state)
    assert result.report.trigger == "messages" and model.calls == 1
    unfolded = len(history) - 1 - result.state.folded
    assert unfolded <= 6 and result.report.not_shown == 0


def test_token_trigger_is_reported_as_tokens() -> None:
    memory = SummaryBuffer(400, summarizer=SummaryModel(), policy=FoldPolicy(max_messages=500))
    result = memory.apply(long_turn(40))
    assert result.report.trigger == "tokens" and result.report.folded > 0


@pytest.mark.parametrize(
    ("kwargs", "word"),
    [
        ({"keep_messages": 3}, "keep_messages needs max_messages"),
        ({"max_messages": 1}, "max_messages"),
        ({"max_messages": 10, "keep_messages": 10}, "keep_messages (10) < max_messages (10)"),
        ({"max_messages": 10, "keep_messages": 1}, "min_messages (2) <= keep_messages (1)"),
    ],
)
def test_message_trigger_settings_are_checked_with_their_names(
    kwargs: dict[str, int], word: str
) -> None:
    with pytest.raises(ValueError, match=word.replace("(", r"\(").replace(")", r"\)")):
        SummaryBuffer(1_000, summarizer=SummaryModel(), policy=FoldPolicy(**kwargs))


def test_keep_messages_defaults_to_half_of_max_messages() -> None:
    memory = SummaryBuffer(1_000, summarizer=SummaryModel(), policy=FoldPolicy(max_messages=20))
    assert (memory.config.trigger_messages, memory.config.target_messages) == (20, 10)


def test_on_turn_added_gets_each_new_message_once_and_a_raise_is_ignored() -> None:
    seen: list[str] = []

    def added(messages: list[BaseMessage]) -> None:
        seen.extend(str(m.id) for m in messages)
        raise RuntimeError("a callback bug")  # never breaks the turn

    memory = SummaryBuffer(300, summarizer=SummaryModel(), policy=FoldPolicy(on_turn_added=added))
    history, state = [], None
    for message in long_turn(30):
        history.append(message)
        state = memory.apply(history, state).state
    memory.apply(history, state)  # nothing new: no call
    assert seen == [str(m.id) for m in history]
    memory.view([*history, HumanMessage("more", id="x")], state)  # read-only: no callbacks
    assert len(seen) == len(history)


async def test_on_turn_added_async_same_as_sync() -> None:
    got: list[list[str]] = [[], []]
    history = long_turn(10)
    for i, driver in enumerate(("apply", "aapply")):
        memory = SummaryBuffer(
            300,
            summarizer=SummaryModel(),
            policy=FoldPolicy(on_turn_added=lambda m, i=i: got[i].extend(str(x.id) for x in m)),
        )
        result = getattr(memory, driver)(history[:5])
        if driver == "aapply":
            result = await result
        again = getattr(memory, driver)(history, result.state)
        if driver == "aapply":
            await again
    assert got[0] == got[1] == [str(m.id) for m in history]


def test_task_template_asks_for_agent_progress_and_is_selectable() -> None:
    text = TEMPLATES["task"].lower()
    for needle in ("decisions", "files", "results", "failed", "next step"):
        assert needle in text, needle
    model = SummaryModel("progress")
    summarizer = Summarizer(model, templates=["task"], max_summary_tokens=200)
    memory = SummaryBuffer(400, summarizer=summarizer)
    result = memory.apply(long_turn(40))
    assert result.state.sections == {"task": "progress"}
    assert "Keep the progress on the current task" in str(model.prompts[0])


def test_rewrite_removes_folded_rounds_of_the_turn_but_keeps_the_request() -> None:
    memory = SummaryBuffer(400, summarizer=SummaryModel())
    history = long_turn(40)
    result = memory.apply(history)
    assert result.state.folded > 2  # the request and some rounds
    ids, rebased = removals_for_rewrite(history, result.state, memory.counter)
    assert "q" not in ids and "s" not in ids and ids
    kept = [m for m in history if m.id not in set(ids)]
    assert kept[1].id == "q" and rebased.folded == 1
    # the next call on the rewritten history: an append, not a rewrite; the request still leads
    after = memory.apply([*kept, AIMessage("done", id="end")], rebased)
    assert not after.report.history_rewritten
    assert after.messages[1].id == "q" and after.report.not_shown == 0
