"""What the memory did, seen from every surface: the ``memory_report`` channel of the agent and
graph state (per thread, checkpointed), the ``on_report`` callback, ``last_report`` of the chat
history, and the ``langmem_ext.memory`` run / custom event in LangChain's callbacks."""

from __future__ import annotations

import asyncio
import itertools
import json
import logging
import sqlite3
from pathlib import Path
from typing import Annotated, Any
from uuid import UUID

import pytest
from fakes import RecordingChatModel, SummaryModel, numbered_replies
from langchain.agents import create_agent
from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.chat_history import InMemoryChatMessageHistory
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.graph.message import add_messages
from memory_graphs import memory_graph
from typing_extensions import NotRequired, TypedDict

from langmem_ext import (
    ManagedChatMessageHistory,
    MemoryMiddleware,
    MemoryNode,
    MemoryState,
    SummaryBuffer,
    TokenBudget,
)
from langmem_ext.core.keys import MemoryKey
from langmem_ext.core.result import MemoryReport
from langmem_ext.errors import ContextOverflowError
from langmem_ext.integrations.tracing import REPORT_EVENT, REPORT_RUN

BUDGET = 900

#: InMemoryChatMessageHistory is deprecated in langchain-core 1.6 (still the simplest backing)
pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


def question(i: int) -> HumanMessage:
    return HumanMessage(f"question {i}: where is my order and when will it arrive? " * 4)


def summarizing() -> SummaryBuffer:
    return SummaryBuffer(BUDGET, summarizer=SummaryModel("Orders asked about."))


def agent_with(middleware: MemoryMiddleware, checkpointer: Any = None) -> Any:
    model = RecordingChatModel(messages=numbered_replies("on its way " * 10, ids=False))
    return create_agent(
        model,
        [],
        system_prompt="You track orders.",
        middleware=[middleware],
        checkpointer=checkpointer or InMemorySaver(),
    )


def thread(name: str) -> dict[str, Any]:
    return {"configurable": {"thread_id": name}}


# -- MemoryReport as a dict -----------------------------------------------------------------------


def test_a_report_dict_survives_json_and_reads_back_equal() -> None:
    report = MemoryReport(
        500, 300, 12, 7, 5, budget=400, clipped=("m3",), folded=4, retrieved=("turn:2",)
    )
    data = json.loads(json.dumps(report.to_dict()))
    assert data["folded"] == 4 and data["retrieved"] == ["turn:2"] and data["version"] == 1
    assert MemoryReport.from_dict(data) == report


def test_a_report_dict_with_a_wrong_figure_is_refused() -> None:
    data = MemoryReport(5, 3, 2, 1, 1).to_dict()
    with pytest.raises(TypeError, match="folded"):
        MemoryReport.from_dict({**data, "folded": "4"})
    with pytest.raises(TypeError, match="clipped"):
        MemoryReport.from_dict({**data, "clipped": "m1"})


# -- create_agent + MemoryMiddleware --------------------------------------------------------------


def test_the_agent_state_holds_the_latest_calls_report_and_its_folds_add_up() -> None:
    reports: list[tuple[MemoryReport, MemoryKey | None]] = []
    agent = agent_with(
        MemoryMiddleware(summarizing(), on_report=lambda r, k: reports.append((r, k)))
    )
    for i in range(12):
        out = agent.invoke({"messages": [question(i)]}, thread("a"))
    assert len(reports) == 12  # one per model call
    latest = MemoryReport.from_dict(out["memory_report"])
    assert latest == reports[-1][0]
    assert latest.messages_before == len(out["messages"])  # system prompt + history - answer
    assert latest.tokens_after <= BUDGET and latest.budget is not None
    state = MemoryState.from_dict(out["memory"])
    assert state.folded > 0
    assert sum(report.folded for report, _ in reports) == state.folded
    assert {key for _, key in reports} == {MemoryKey(session="a")}


def test_each_thread_sees_only_its_own_report() -> None:
    agent = agent_with(MemoryMiddleware(summarizing()))
    for i in range(10):
        long_thread = agent.invoke({"messages": [question(i)]}, thread("long"))
    short_thread = agent.invoke({"messages": [question(0)]}, thread("short"))
    assert long_thread["memory_report"]["messages_before"] == 20
    assert short_thread["memory_report"]["messages_before"] == 2
    assert short_thread["memory_report"]["folded"] == 0
    again = agent.get_state(thread("long")).values["memory_report"]
    assert again == long_thread["memory_report"]


def test_the_agent_report_survives_a_sqlite_checkpoint(tmp_path: Path) -> None:
    with sqlite3.connect(tmp_path / "c.db", check_same_thread=False) as conn:
        agent = agent_with(MemoryMiddleware(summarizing()), SqliteSaver(conn))
        for i in range(8):
            out = agent.invoke({"messages": [question(i)]}, thread("t"))
    with sqlite3.connect(tmp_path / "c.db", check_same_thread=False) as conn:
        restored = agent_with(MemoryMiddleware(summarizing()), SqliteSaver(conn))
        stored = restored.get_state(thread("t")).values["memory_report"]
    assert stored == out["memory_report"]
    assert MemoryReport.from_dict(stored).messages_before == 16


def test_a_raising_on_report_is_logged_and_the_agent_answers(
    caplog: pytest.LogCaptureFixture,
) -> None:
    def broken(_report: MemoryReport, _key: MemoryKey | None) -> None:
        raise RuntimeError("dashboard down")

    agent = agent_with(MemoryMiddleware(TokenBudget(BUDGET), on_report=broken))
    with caplog.at_level(logging.ERROR, logger="langmem_ext"):
        out = agent.invoke({"messages": [question(0)]}, thread("a"))
    assert isinstance(out["messages"][-1], AIMessage)
    assert out["memory_report"]["messages_after"] == 2
    assert any("on_report" in r.getMessage() and r.exc_info for r in caplog.records)


def test_on_report_must_be_callable() -> None:
    with pytest.raises(TypeError, match="on_report"):
        MemoryMiddleware(TokenBudget(BUDGET), on_report="print")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="on_report"):
        MemoryNode(TokenBudget(BUDGET), on_report=1)  # type: ignore[arg-type]


# -- LangChain callbacks ---------------------------------------------------------------------------


class Recorder(BaseCallbackHandler):
    """Every chain run, chat model run and custom event, in order."""

    def __init__(self) -> None:
        self.starts: dict[UUID, tuple[str | None, Any, UUID | None]] = {}
        self.ends: dict[UUID, Any] = {}
        self.events: list[tuple[str, Any, UUID]] = []
        self.model_parents: list[UUID | None] = []

    def on_chain_start(
        self,
        serialized: dict[str, Any] | None,
        inputs: Any,
        *,
        run_id: UUID,
        parent_run_id: UUID | None = None,
        **kwargs: Any,
    ) -> None:
        self.starts[run_id] = (kwargs.get("name"), inputs, parent_run_id)

    def on_chain_end(self, outputs: Any, *, run_id: UUID, **kwargs: Any) -> None:
        self.ends[run_id] = outputs

    def on_chat_model_start(
        self,
        serialized: dict[str, Any],
        messages: list[list[BaseMessage]],
        *,
        run_id: UUID,
        parent_run_id: UUID | None = None,
        **kwargs: Any,
    ) -> None:
        self.model_parents.append(parent_run_id)

    def on_custom_event(self, name: str, data: Any, *, run_id: UUID, **kwargs: Any) -> None:
        self.events.append((name, data, run_id))

    def memory_runs(self) -> list[UUID]:
        return [run for run, (name, _, _) in self.starts.items() if name == REPORT_RUN]


def fake_summarizer() -> GenericFakeChatModel:
    return GenericFakeChatModel(
        messages=(AIMessage(f"Summary v{i}: orders asked about.") for i in itertools.count())
    )


def check_recorded(recorder: Recorder, outputs: list[dict[str, Any]]) -> None:
    """One memory run per call, whose outputs and custom event are that call's report, and the
    summarizer's model calls nested under a memory run."""
    runs = recorder.memory_runs()
    assert len(runs) == len(outputs)
    assert [recorder.ends[run] for run in runs] == outputs
    events = [(name, data) for name, data, _ in recorder.events]
    assert events == [(REPORT_EVENT, data) for data in outputs]
    assert [run for _, _, run in recorder.events] == runs
    inputs = recorder.starts[runs[-1]][1]
    assert inputs["messages"] == outputs[-1]["messages_before"]
    assert recorder.starts[runs[-1]][2] is not None  # a child of the model step
    assert any(parent in runs for parent in recorder.model_parents)  # the summarizer's calls


def test_a_callback_handler_sees_each_agent_memory_call_as_a_run_with_its_report() -> None:
    strategy = SummaryBuffer(BUDGET, summarizer=fake_summarizer())
    agent = agent_with(MemoryMiddleware(strategy))
    recorder = Recorder()
    outputs = []
    for i in range(10):
        config = {**thread("a"), "callbacks": [recorder]}
        outputs.append(agent.invoke({"messages": [question(i)]}, config)["memory_report"])
    assert any(out["folded"] for out in outputs)
    check_recorded(recorder, outputs)


def test_a_callback_handler_sees_each_agent_memory_call_async() -> None:
    strategy = SummaryBuffer(BUDGET, summarizer=fake_summarizer())
    agent = agent_with(MemoryMiddleware(strategy))
    recorder = Recorder()

    async def turns() -> list[dict[str, Any]]:
        outputs = []
        for i in range(10):
            config = {**thread("a"), "callbacks": [recorder]}
            out = await agent.ainvoke({"messages": [question(i)]}, config)
            outputs.append(out["memory_report"])
        return outputs

    check_recorded(recorder, asyncio.run(turns()))


def test_without_handlers_no_memory_run_is_made(monkeypatch: pytest.MonkeyPatch) -> None:
    """The child run costs a Runnable call; it is made only when someone listens."""
    import langmem_ext.integrations.tracing as tracing

    made: list[str] = []
    real = tracing.RunnableLambda

    def counting(*args: Any, **kwargs: Any) -> Any:
        made.append(kwargs.get("name", ""))
        return real(*args, **kwargs)

    monkeypatch.setattr(tracing, "RunnableLambda", counting)
    agent = agent_with(MemoryMiddleware(TokenBudget(BUDGET)))
    agent.invoke({"messages": [question(0)]}, thread("a"))
    assert made == []
    agent.invoke({"messages": [question(1)]}, {**thread("a"), "callbacks": [Recorder()]})
    assert made == [REPORT_RUN]


class ErrorRecorder(Recorder):
    def __init__(self) -> None:
        super().__init__()
        self.errors: dict[UUID, BaseException] = {}

    def on_chain_error(self, error: BaseException, *, run_id: UUID, **kwargs: Any) -> None:
        self.errors[run_id] = error


@pytest.mark.parametrize("run_async", [False, True], ids=["invoke", "ainvoke"])
def test_a_memory_call_that_raises_ends_its_run_as_an_error(run_async: bool) -> None:
    node = MemoryNode(TokenBudget(50))  # overflow="error": the newest message alone is over
    recorder = ErrorRecorder()
    state = {"messages": [question(0)]}
    with pytest.raises(ContextOverflowError):
        if run_async:
            asyncio.run(node.ainvoke(state, {"callbacks": [recorder]}))
        else:
            node.invoke(state, {"callbacks": [recorder]})
    [run] = recorder.memory_runs()
    assert isinstance(recorder.errors[run], ContextOverflowError)
    assert run not in recorder.ends and recorder.events == []


# -- StateGraph + MemoryNode ----------------------------------------------------------------------


def answer(state: dict[str, Any]) -> dict[str, Any]:
    return {"messages": [AIMessage(f"answer to {len(state['messages'])} messages " * 8)]}


def test_the_graph_state_holds_the_latest_report_per_thread_through_a_checkpointer() -> None:
    reports: list[MemoryReport] = []
    node = MemoryNode(summarizing(), on_report=lambda r, _k: reports.append(r))
    graph = memory_graph(node, answer, InMemorySaver())
    for i in range(12):
        out = graph.invoke({"messages": [question(i)]}, thread("a"))
    other = graph.invoke({"messages": [question(0)]}, thread("b"))
    assert len(reports) == 13
    assert MemoryReport.from_dict(out["memory_report"]) == reports[-2]
    assert MemoryReport.from_dict(other["memory_report"]) == reports[-1]
    assert other["memory_report"]["messages_before"] == 1
    assert sum(r.folded for r in reports[:-1]) == MemoryState.from_dict(out["memory"]).folded > 0
    assert graph.get_state(thread("a")).values["memory_report"] == out["memory_report"]


@pytest.mark.parametrize("run_async", [False, True], ids=["invoke", "ainvoke"])
def test_a_callback_handler_sees_each_graph_memory_call(run_async: bool) -> None:
    strategy = SummaryBuffer(BUDGET, summarizer=fake_summarizer())
    graph = memory_graph(MemoryNode(strategy), answer, InMemorySaver())
    recorder = Recorder()

    async def turns() -> list[dict[str, Any]]:
        outputs = []
        for i in range(12):
            config = {**thread("a"), "callbacks": [recorder]}
            if run_async:
                out = await graph.ainvoke({"messages": [question(i)]}, config)
            else:
                out = graph.invoke({"messages": [question(i)]}, config)
            outputs.append(out["memory_report"])
        return outputs

    check_recorded(recorder, asyncio.run(turns()))


class NoReportState(TypedDict):
    """A user's own schema from before the report channel: messages, memory and the view."""

    messages: Annotated[list[BaseMessage], add_messages]
    memory: NotRequired[dict[str, Any] | None]
    llm_input_messages: NotRequired[list[BaseMessage]]


def test_a_graph_state_without_the_report_channel_still_works() -> None:
    reports: list[MemoryReport] = []
    node = MemoryNode(TokenBudget(BUDGET), on_report=lambda r, _k: reports.append(r))
    graph = memory_graph(node, answer, InMemorySaver(), schema=NoReportState)
    for i in range(3):
        out = graph.invoke({"messages": [question(i)]}, thread("a"))
    assert "memory_report" not in out
    assert len(reports) == 3 and out["memory"]["seen"] == 5


def test_report_key_none_writes_no_report() -> None:
    update = MemoryNode(TokenBudget(BUDGET), report_key=None).invoke({"messages": [question(0)]})
    assert "memory_report" not in update
    update = MemoryNode(TokenBudget(BUDGET)).invoke({"messages": [question(0)]})
    assert update["memory_report"]["messages_after"] == 1


# -- ManagedChatMessageHistory --------------------------------------------------------------------


def test_the_history_keeps_the_report_of_its_latest_read_or_write() -> None:
    reports: list[tuple[MemoryReport, MemoryKey | None]] = []
    key = MemoryKey("acme", "u1", "chat-1")
    history = ManagedChatMessageHistory(
        InMemoryChatMessageHistory(),
        summarizing(),
        key=key,
        on_report=lambda r, k: reports.append((r, k)),
    )
    assert history.last_report is None
    for i in range(12):
        history.add_messages([question(i), AIMessage("on its way " * 30)])
    written = history.last_report
    assert written is not None and written == reports[-1][0] and reports[-1][1] == key
    assert written.messages_before == 24
    assert sum(r.folded for r, _ in reports) == history.state.folded > 0  # type: ignore[union-attr]
    view = history.messages  # a read reports the view it returned
    assert len(reports) == 13 and history.last_report == reports[-1][0]
    assert history.last_report.messages_after == len(view) < 24
    assert history.last_report.folded == 0  # a read never folds


def test_the_async_history_keeps_its_report_too() -> None:
    history = ManagedChatMessageHistory(
        InMemoryChatMessageHistory(), TokenBudget(BUDGET), key=MemoryKey("a", "b", "c")
    )

    async def turn() -> None:
        await history.aadd_messages([question(0), AIMessage("fine")])
        await history.aget_messages()

    asyncio.run(turn())
    assert history.last_report is not None and history.last_report.messages_after == 2
