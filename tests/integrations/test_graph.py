"""MemoryNode in LangGraph: a StateGraph node, a create_react_agent hook, checkpointers."""

from __future__ import annotations

import asyncio
import sqlite3
import warnings
from pathlib import Path
from typing import Any

import pytest
from fakes import RecordingChatModel, SummaryModel, numbered_replies
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.checkpoint.sqlite import SqliteSaver
from memory_graphs import memory_graph

from langmem_ext import (
    ApproximateCounter,
    MemoryAgentState,
    MemoryMessagesState,
    MemoryNode,
    MemoryState,
    SummaryBuffer,
    TokenBudget,
    validate,
)

COUNTER = ApproximateCounter()


def question(i: int) -> HumanMessage:
    return HumanMessage(f"question {i}: " + "tell me more about the shipment " * 12, id=f"q{i}")


def explicit_graph(node: MemoryNode, checkpointer: Any, seen: list[list[BaseMessage]]) -> Any:
    """memory -> model, where the model records the view it was given and answers."""

    def model(state: MemoryMessagesState) -> dict[str, Any]:
        view = list(state["llm_input_messages"])
        seen.append(view)
        number = str(view[-1].content).split(":")[0].removeprefix("question ")
        # deterministic ids, so two runs of the same conversation can be compared exactly
        return {"messages": [AIMessage(f"answer {number}: " + "details " * 40, id=f"a{number}")]}

    return memory_graph(node, model, checkpointer)


summarizer = SummaryModel("The user asked about shipments; the assistant gave details.")


def test_view_mode_keeps_the_history_and_the_model_sees_the_view() -> None:
    seen: list[list[BaseMessage]] = []
    node = MemoryNode(TokenBudget(600, target_tokens=400))
    graph = explicit_graph(node, InMemorySaver(), seen)
    config = {"configurable": {"thread_id": "t1"}}
    for i in range(12):
        graph.invoke({"messages": [question(i)]}, config)
    values = graph.get_state(config).values
    assert len(values["messages"]) == 24  # nothing removed in view mode
    memory = MemoryState.from_dict(values["memory"])
    assert memory.seen == 23  # the node ran before the last answer was added
    for i, view in enumerate(seen):
        assert view and view[-1].content == question(i).content
        assert COUNTER.count_messages(view) <= 600 and validate(view) == []
    assert len(seen[-1]) < 23


def test_rewrite_mode_removes_folded_messages_only_after_the_fold() -> None:
    seen: list[list[BaseMessage]] = []
    strategy = SummaryBuffer(1_200, summarizer=summarizer, max_summary_tokens=100)
    graph = explicit_graph(MemoryNode(strategy, mode="rewrite"), InMemorySaver(), seen)
    config = {"configurable": {"thread_id": "t1"}}
    sizes = []
    for i in range(20):
        graph.invoke({"messages": [question(i)]}, config)
        sizes.append(len(graph.get_state(config).values["messages"]))
    memory = MemoryState.from_dict(graph.get_state(config).values["memory"])
    assert memory.folds >= 2 and memory.folded == 0  # folded messages are gone from state
    assert memory.sections["conversation"].startswith("The user asked about shipments")
    assert max(sizes) < 20  # bounded, while 20 turns would hold 40 messages
    last = seen[-1]
    assert isinstance(last[0], SystemMessage) and "<conversation_summary>" in str(last[0].content)
    assert all(COUNTER.count_messages(v) <= 1_200 and validate(v) == [] for v in seen)


def test_a_failing_summarizer_removes_nothing_and_the_run_still_answers() -> None:
    def broken(prompt: list[BaseMessage]) -> str:
        raise ValueError("provider down")

    seen: list[list[BaseMessage]] = []
    strategy = SummaryBuffer(1_200, summarizer=broken, max_summary_tokens=100)
    graph = explicit_graph(MemoryNode(strategy, mode="rewrite"), InMemorySaver(), seen)
    config = {"configurable": {"thread_id": "t1"}}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for i in range(12):
            graph.invoke({"messages": [question(i)]}, config)
    values = graph.get_state(config).values
    assert len(values["messages"]) == 24  # nothing folded, so nothing removed
    assert values["memory"]["health"] in ("retrying", "degraded")
    assert "not shown" in str(seen[-1][0].content)
    assert all(COUNTER.count_messages(v) <= 1_200 for v in seen)


def test_as_pre_model_hook_of_create_react_agent() -> None:
    from langgraph.prebuilt import create_react_agent

    model = RecordingChatModel(messages=numbered_replies("words " * 30, ids=False))
    strategy = SummaryBuffer(1_000, summarizer=summarizer, max_summary_tokens=100)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        agent = create_react_agent(
            model,
            tools=[],
            pre_model_hook=MemoryNode(strategy, mode="rewrite"),
            state_schema=MemoryAgentState,
            checkpointer=InMemorySaver(),
        )
    config = {"configurable": {"thread_id": "agent"}}
    for i in range(15):
        out = agent.invoke({"messages": [question(i)]}, config)
    assert out["memory"]["folds"] >= 1
    assert len(out["messages"]) < 30
    assert out["messages"][-1].content.startswith("reply 14")


def test_the_view_is_stored_only_between_the_memory_step_and_the_model_step(
    tmp_path: Path,
) -> None:
    """llm_input_messages is ephemeral: not in the thread's later checkpoints, but an interrupt
    before the model (and a resume in a new graph object) still sends the view, never the full
    history (the langgraph#8925 fallback)."""
    from langgraph.prebuilt import create_react_agent

    conn = sqlite3.connect(str(tmp_path / "hitl.sqlite"), check_same_thread=False)
    model = RecordingChatModel(messages=numbered_replies("words " * 30))

    def agent() -> Any:  # a new graph object for every resume
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return create_react_agent(
                model,
                tools=[],
                pre_model_hook=MemoryNode(TokenBudget(500)),
                state_schema=MemoryAgentState,
                checkpointer=SqliteSaver(conn),
                interrupt_before=["agent"],
            )

    config = {"configurable": {"thread_id": "hitl"}}
    try:
        for i in range(10):
            agent().invoke({"messages": [question(i)]}, config)
            paused = agent().get_state(config)
            assert paused.next == ("agent",)
            view = paused.values["llm_input_messages"]  # kept across the interrupt
            assert view[-1].content == question(i).content
            agent().invoke(None, config)
            assert model.requests[-1] == view  # exactly the view, never the full history
            assert COUNTER.count_messages(view) <= 500
        history = [m.id for m in agent().get_state(config).values["messages"]]
        assert len(history) == 20 and len(model.requests[-1]) < 19
        states = list(agent().get_state_history(config))
        assert "llm_input_messages" not in states[0].values  # the latest checkpoint
        with_view = [s for s in states if "llm_input_messages" in s.values]
        assert with_view and all(s.next == ("agent",) for s in with_view)
        assert len(with_view) == 10  # one per turn: the checkpoint between hook and model
    finally:
        conn.close()


def test_threads_never_share_memory() -> None:
    seen: list[list[BaseMessage]] = []
    strategy = SummaryBuffer(1_000, summarizer=summarizer, max_summary_tokens=100)
    graph = explicit_graph(MemoryNode(strategy), InMemorySaver(), seen)
    for i in range(10):
        graph.invoke({"messages": [question(i)]}, {"configurable": {"thread_id": "a"}})
    graph.invoke({"messages": [HumanMessage("hello from b")]}, {"configurable": {"thread_id": "b"}})
    b = graph.get_state({"configurable": {"thread_id": "b"}}).values
    assert b["memory"]["summary"] == [] and b["memory"]["seen"] == 1
    assert [m.content for m in seen[-1]] == ["hello from b"]


def run_turns(path: Path, turns: range, thread: str = "t") -> dict[str, Any]:
    seen: list[list[BaseMessage]] = []
    conn = sqlite3.connect(str(path), check_same_thread=False)
    try:
        strategy = SummaryBuffer(1_000, summarizer=summarizer, max_summary_tokens=100)
        graph = explicit_graph(MemoryNode(strategy, mode="rewrite"), SqliteSaver(conn), seen)
        config = {"configurable": {"thread_id": thread}}
        for i in turns:
            graph.invoke({"messages": [question(i)]}, config)
        values = dict(graph.get_state(config).values)
    finally:
        conn.close()
    values["views"] = seen
    return values


def test_sqlite_restart_continues_exactly(tmp_path: Path) -> None:
    whole = run_turns(tmp_path / "a.sqlite", range(16))
    run_turns(tmp_path / "b.sqlite", range(8))
    resumed = run_turns(tmp_path / "b.sqlite", range(8, 16))  # a new connection and graph
    assert resumed["memory"] == whole["memory"]
    assert [m.content for m in resumed["messages"]] == [m.content for m in whole["messages"]]
    assert [[m.content for m in v] for v in resumed["views"]] == [
        [m.content for m in v] for v in whole["views"][8:]
    ]


def test_async_graph_run() -> None:
    async def afake(prompt: list[BaseMessage]) -> str:
        return "async summary"

    seen: list[list[BaseMessage]] = []
    strategy = SummaryBuffer(1_000, summarizer=afake, max_summary_tokens=100)
    graph = explicit_graph(MemoryNode(strategy, mode="rewrite"), InMemorySaver(), seen)
    config = {"configurable": {"thread_id": "t"}}

    async def run() -> dict[str, Any]:
        for i in range(14):
            await graph.ainvoke({"messages": [question(i)]}, config)
        return dict((await graph.aget_state(config)).values)

    values = asyncio.run(run())
    assert values["memory"]["summary"] == [["conversation", "async summary"]]


def test_bad_configuration_is_refused_clearly() -> None:
    with pytest.raises(TypeError, match="needs a langmem_ext strategy"):
        MemoryNode(object())  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="mode must be"):
        MemoryNode(TokenBudget(100), mode="delete")  # type: ignore[arg-type]
    with pytest.raises(KeyError, match="no 'messages'"):
        MemoryNode(TokenBudget(100)).invoke({"history": []})
