"""A history with no human message: every strategy refuses it the same way.

No view of such a history is valid with ``start_on="human"`` (the default): providers want the
first message after the system message to be the user's, and a made-up one would put words in
the user's mouth. So each of the six strategies, and Retrieval around one, raises
:class:`~langmem_ext.errors.InvalidHistoryError` naming the fix, sync and async, before any
summarizer call; ``start_on="any"`` accepts the history and gives a view; a history with only a
system message (nothing to start on yet) still gives a view.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import pytest
from langchain_core.messages import AIMessage, BaseMessage, ChatMessage, SystemMessage, ToolMessage
from langgraph.store.memory import InMemoryStore

from langmem_ext import (
    Compacting,
    MemoryKey,
    Retrieval,
    SlidingWindow,
    SummaryBuffer,
    TieredSummary,
    TokenBudget,
    ToolDigest,
)
from langmem_ext.errors import InvalidHistoryError, LangmemExtError
from langmem_ext.strategies.engine import Strategy
from langmem_ext.testing import FakeSummaryModel

KEY = MemoryKey("acme", "ann", "chat")


def builders(model: FakeSummaryModel) -> dict[str, Callable[..., Strategy]]:
    return {
        "TokenBudget": lambda **kw: TokenBudget(2_000, **kw),
        "SlidingWindow": lambda **kw: SlidingWindow(20, **kw),
        "ToolDigest": lambda **kw: ToolDigest(2_000, **kw),
        "SummaryBuffer": lambda **kw: SummaryBuffer(2_000, summarizer=model, **kw),
        "Compacting": lambda **kw: Compacting(2_000, summarizer=model, **kw),
        "TieredSummary": lambda **kw: TieredSummary(4_000, summarizer=model, **kw),
        "Retrieval(SummaryBuffer)": lambda **kw: Retrieval(
            SummaryBuffer(2_000, summarizer=model, **kw),
            store=InMemoryStore(),
            ranking="bm25",
            key=KEY,
        ),
    }


NAMES = list(builders(FakeSummaryModel()))


def tool_round(k: int) -> list[BaseMessage]:
    call = {"name": "read_file", "args": {"path": f"f{k}.py"}, "id": f"c{k}"}
    return [
        AIMessage("", tool_calls=[call], id=f"a{k}"),
        ToolMessage("x = 1 " * 40, tool_call_id=f"c{k}", id=f"t{k}"),
    ]


HUMANLESS: dict[str, list[BaseMessage]] = {
    "greeting only": [SystemMessage("sys", id="s"), AIMessage("Hello, how can I help?", id="a")],
    "tool rounds, no system": [m for k in range(3) for m in tool_round(k)],
    "long, over the budget": [
        SystemMessage("sys", id="s"),
        *(m for k in range(60) for m in tool_round(k)),
        AIMessage("done", id="end"),
    ],
    "custom role and orphan": [
        ChatMessage(role="critic", content="note", id="n"),
        ToolMessage("lost", tool_call_id="nowhere", id="o"),
        AIMessage("ok", id="a"),
    ],
}


@pytest.mark.parametrize("history", list(HUMANLESS), ids=list(HUMANLESS))
@pytest.mark.parametrize("name", NAMES)
def test_strategy_refuses_a_history_without_a_human_message(name: str, history: str) -> None:
    model = FakeSummaryModel()
    strategy = builders(model)[name]()
    messages = HUMANLESS[history]
    with pytest.raises(InvalidHistoryError, match=r"no HumanMessage.*start_on='any'") as raised:
        strategy.apply(messages)
    assert isinstance(raised.value, LangmemExtError)
    assert 0 <= raised.value.index < len(messages)
    with pytest.raises(InvalidHistoryError, match="no HumanMessage"):
        asyncio.run(builders(model)[name]().aapply(messages))
    assert model.calls == 0  # refused before any summarizer call


@pytest.mark.parametrize(
    "name",
    [n for n in NAMES if n not in ("Compacting", "TieredSummary")],  # no start_on there
)
def test_strategy_with_start_on_any_gives_a_view_of_a_history_without_a_human_message(
    name: str,
) -> None:
    strategy = builders(FakeSummaryModel())[name](start_on="any")
    messages = HUMANLESS["tool rounds, no system"]
    result = strategy.apply(messages)
    assert [m.id for m in result.messages if m.id in {"a2", "t2"}] == ["a2", "t2"]


@pytest.mark.parametrize("name", NAMES)
def test_strategy_gives_a_view_of_a_history_with_only_a_system_message(name: str) -> None:
    strategy = builders(FakeSummaryModel())[name]()
    for messages in ([], [SystemMessage("sys", id="s")]):
        result = strategy.apply(messages)
        assert [m.id for m in result.messages] == [m.id for m in messages]
