"""MemoryMiddleware with langchain v1 create_agent."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from fakes import RecordingChatModel, SummaryModel, numbered_replies
from langchain.agents import create_agent
from langchain_core.messages import HumanMessage, SystemMessage
from langchain_core.tools import tool
from langchain_core.utils.function_calling import convert_to_openai_tool
from langgraph.checkpoint.memory import InMemorySaver

from langmem_ext import (
    ApproximateCounter,
    MemoryMiddleware,
    MemoryState,
    SummaryBuffer,
    TokenBudget,
    validate,
)

COUNTER = ApproximateCounter()


def recording_model() -> RecordingChatModel:
    """Answers every call ("reply <n>: ...", n from 1) and records the messages it was sent."""
    return RecordingChatModel(
        messages=numbered_replies(
            "the order is on its way " * 8, first=1, separator=": ", ids=False
        )
    )


@tool
def track_order(order_id: str) -> str:
    """Look up where an order is."""
    return f"order {order_id} is in transit"


def question(i: int) -> HumanMessage:
    return HumanMessage(f"question {i}: where is my order and when will it arrive? " * 4)


TOOL_TOKENS = COUNTER.count_text(json.dumps(convert_to_openai_tool(track_order)))


def test_the_system_prompt_and_tool_schemas_count_and_the_view_is_what_the_model_gets() -> None:
    model = recording_model()
    agent = create_agent(
        model,
        [track_order],
        system_prompt="You track orders.",
        middleware=[MemoryMiddleware(TokenBudget(700))],
        checkpointer=InMemorySaver(),
    )
    config = {"configurable": {"thread_id": "a"}}
    for i in range(10):
        out = agent.invoke({"messages": [question(i)]}, config)
    assert len(out["messages"]) == 20  # view mode: the history stays whole
    for sent in model.requests:
        assert isinstance(sent[0], SystemMessage) and sent[0].content == "You track orders."
        assert COUNTER.count_messages(sent) + TOOL_TOKENS <= 700
        assert validate(sent) == []
    assert len(model.requests[-1]) < 20
    memory = MemoryState.from_dict(out["memory"])
    assert memory.seen == 20  # system prompt + 19 messages when the last call was made


summarizer = SummaryModel("The user keeps asking where orders are.")


def test_the_summary_and_the_system_prompt_share_one_system_message_in_rewrite_mode() -> None:
    model = recording_model()
    strategy = SummaryBuffer(900, summarizer=summarizer, max_summary_tokens=100)
    agent = create_agent(
        model,
        [track_order],
        system_prompt="You track orders.",
        middleware=[MemoryMiddleware(strategy, mode="rewrite")],
        checkpointer=InMemorySaver(),
    )
    config = {"configurable": {"thread_id": "b"}}
    for i in range(16):
        out = agent.invoke({"messages": [question(i)]}, config)
    memory = MemoryState.from_dict(out["memory"])
    assert memory.folds >= 1 and len(out["messages"]) < 32
    last = model.requests[-1]
    assert [type(m).__name__ for m in last].count("SystemMessage") == 1
    assert str(last[0].content).startswith("You track orders.\n\n<conversation_summary>")
    assert all(COUNTER.count_messages(s) + TOOL_TOKENS <= 900 for s in model.requests)


def test_async_agent() -> None:
    model = recording_model()
    agent = create_agent(
        model,
        [],
        system_prompt="Be brief.",
        middleware=[MemoryMiddleware(TokenBudget(500))],
        checkpointer=InMemorySaver(),
    )
    config = {"configurable": {"thread_id": "c"}}

    async def run() -> dict[str, Any]:
        out: dict[str, Any] = {}
        for i in range(6):
            out = await agent.ainvoke({"messages": [question(i)]}, config)
        return out

    out = asyncio.run(run())
    assert out["memory"]["seen"] == 12
    assert all(COUNTER.count_messages(s) <= 500 for s in model.requests)
