"""``overflow="clip"`` returns a valid view whenever clipping can make one fit.

The required part of a view (the newest human turn, the newest unit) may hold tool calls with a
large argument (a file written, a patch applied): when the user typed a message while such a call
ran, and the newest round has one too, the required part alone is over the budget. The text of
those messages is empty, so clipping text cannot help; clipping the arguments can. ToolDigest
(whose default is "clip": an agent loop must not stop on one large call) and
``TokenBudget(overflow="clip")`` then return a view within budget, with the clipped messages in
``report.clipped`` and the marker in the clipped arguments, as SummaryBuffer does.
"""

from __future__ import annotations

import json

import pytest
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage, ToolMessage

from langmem_ext import TokenBudget, ToolDigest, validate
from langmem_ext.core.messages import clip_message
from langmem_ext.counting.local import ApproximateCounter
from langmem_ext.errors import ContextOverflowError
from langmem_ext.strategies.engine import Strategy

BIG = "lorem ipsum dolor " * 400
MARK = "characters clipped by langmem_ext"


def write(call_id: str, ai_id: str, content: str = BIG) -> AIMessage:
    call = {"name": "write_file", "args": {"path": "a.py", "content": content}, "id": call_id}
    return AIMessage("", tool_calls=[call], id=ai_id)


def typed_while_running() -> list[BaseMessage]:
    return [
        SystemMessage("You are a coding agent.", id="s"),
        HumanMessage("please refactor the module", id="h1"),
        write("c1", "a1"),
        HumanMessage("also add tests please", id="h2"),  # typed while write_file ran
        ToolMessage("ok, written", tool_call_id="c1", id="t1"),
        write("c2", "a2"),
        ToolMessage("ok, written", tool_call_id="c2", id="t2"),
    ]


def check_view(strategy: Strategy, history: list[BaseMessage], budget: int) -> None:
    result = strategy.apply(history)
    view = result.messages
    assert strategy.counter.count_messages(view) <= budget
    assert [f for f in validate(view) if f.severity == "error"] == []
    assert any(m.id == "h2" and m.content == "also add tests please" for m in view)
    assert result.report.clipped, "something had to be clipped"
    clipped = [m for m in view if m.id in result.report.clipped]
    assert clipped and all(isinstance(m, AIMessage) for m in clipped)
    for m in clipped:
        assert isinstance(m, AIMessage)
        (call,) = m.tool_calls
        assert set(call["args"]) == {"path", "content"} and call["args"]["path"] == "a.py"
        assert MARK in call["args"]["content"]
        assert m.response_metadata["langmem_ext"]["clipped_from_tokens"] > 0


@pytest.mark.parametrize("budget", [300, 600, 1_000, 2_000, 3_000])
def test_tool_digest_clips_large_tool_call_arguments_to_fit(budget: int) -> None:
    check_view(ToolDigest(budget), typed_while_running(), budget)


@pytest.mark.parametrize("budget", [300, 600, 1_000, 2_000, 3_000])
def test_token_budget_clip_clips_large_tool_call_arguments_to_fit(budget: int) -> None:
    check_view(TokenBudget(budget, overflow="clip"), typed_while_running(), budget)


def test_token_budget_error_still_raises_with_the_numbers() -> None:
    with pytest.raises(ContextOverflowError) as raised:
        TokenBudget(2_000).apply(typed_while_running())
    assert raised.value.needed > raised.value.available


def test_tool_digest_agent_loop_with_large_arguments_never_stops() -> None:
    history: list[BaseMessage] = typed_while_running()
    strategy, state = ToolDigest(1_500), None
    for k in range(3, 12):
        history += [write(f"c{k}", f"a{k}"), ToolMessage("ok", tool_call_id=f"c{k}", id=f"t{k}")]
        result = strategy.apply(history, state)
        state = result.state
        assert strategy.counter.count_messages(result.messages) <= 1_500
        assert [f for f in validate(result.messages) if f.severity == "error"] == []


def test_clip_message_clips_arguments_and_keeps_the_call() -> None:
    counter = ApproximateCounter()
    raw = [
        {
            "id": "c1",
            "type": "function",
            "function": {"name": "write_file", "arguments": json.dumps({"content": BIG})},
        }
    ]
    message = AIMessage(
        [
            {"type": "text", "text": "writing it now"},
            {"type": "tool_use", "id": "c1", "name": "write_file", "input": {"content": BIG}},
        ],
        tool_calls=[{"name": "write_file", "args": {"content": BIG, "n": [1, BIG]}, "id": "c1"}],
        additional_kwargs={"tool_calls": raw},
        id="a1",
    )
    clipped = clip_message(message, 200, counter.count_message)
    assert clipped is not None and isinstance(clipped, AIMessage)
    assert counter.count_message(clipped) <= 200
    (call,) = clipped.tool_calls
    assert call["id"] == "c1" and call["name"] == "write_file"
    assert MARK in call["args"]["content"] and call["args"]["n"][0] == 1
    assert clipped.content[0] == {"type": "text", "text": "writing it now"}  # text kept
    assert clipped.content[1]["input"] == call["args"]  # no full copy beside the clipped one
    assert (
        json.loads(clipped.additional_kwargs["tool_calls"][0]["function"]["arguments"])
        == (call["args"])
    )
    assert BIG not in json.dumps(clipped.model_dump(), ensure_ascii=False)
    assert message.tool_calls[0]["args"]["content"] == BIG  # the input is never changed


def test_clip_message_clips_the_text_as_before_when_that_is_enough() -> None:
    counter = ApproximateCounter()
    message = AIMessage(BIG, tool_calls=[{"name": "f", "args": {"q": "x"}, "id": "c1"}], id="a")
    clipped = clip_message(message, 100, counter.count_message)
    assert clipped is not None and isinstance(clipped, AIMessage)
    assert clipped.tool_calls[0]["args"] == {"q": "x"}
    assert MARK in str(clipped.content)
