"""Long agent turns: one human request, then hundreds of tool rounds.

A coding or research agent gets ONE request and then calls tools for hundreds of rounds. The
summarizing strategies must fold inside that turn: between whole tool rounds (an AIMessage with
tool calls and all its ToolMessages), oldest first, each message given to the summarizer at most
once, while the request that opened the turn stays in every view verbatim, pinned right after
the system message (folded once, shown always; clipped with a marker only when it alone is over
the budget), and a call still in flight is never folded. While the summarizer is healthy nothing
leaves the view without being summarized (``report.not_shown == 0``).

Here through ``create_agent`` + :class:`MemoryMiddleware`, ``create_react_agent`` +
:class:`MemoryNode` (both modes), and ``strategy.apply`` directly, with the shared fakes
(:class:`RecordingChatModel` scripted to call a real tool, :class:`ScriptedSummarizer` recording
every batch it folds). The random version is ``test_properties_long_turns.py``.
"""

from __future__ import annotations

import asyncio
import json
import warnings
from collections.abc import Callable
from typing import Any

import pytest
from agent_turns import (
    REQUEST,
    SYS,
    body_of,
    check_call,
    check_whole_rounds,
    file_text,
    long_turn,
    model_call_ends,
    read_ids,
    recording,
    replay,
    shown_ids,
    tool_round,
    width,
)
from fakes import RecordingChatModel, ScriptedSummarizer, SummaryModel, words
from langchain.agents import create_agent
from langchain_core.messages import (
    AIMessage,
    BaseMessage,
    HumanMessage,
    SystemMessage,
    ToolMessage,
)
from langchain_core.tools import tool
from langchain_core.utils.function_calling import convert_to_openai_tool
from langgraph.checkpoint.memory import InMemorySaver

from langmem_ext import (
    CallableCounter,
    Compacting,
    MemoryAgentState,
    MemoryMiddleware,
    MemoryNode,
    MemoryState,
    SummaryBuffer,
    TieredSummary,
    is_valid,
    validate,
)
from langmem_ext.strategies.options import split_policy

# --------------------------------------------------------------------------------------------
# strategy.apply directly


STRATEGIES: dict[str, Callable[..., Any]] = {
    "SummaryBuffer": lambda n, **kw: SummaryBuffer(n, **{"max_summary_tokens": 200, **kw}),
    "Compacting": lambda n, **kw: Compacting(n, **kw),
    "TieredSummary": lambda n, **kw: TieredSummary(n, **{"max_summary_tokens": 200, **kw}),
}


def build(kind: str, max_tokens: int, **kwargs: Any) -> Any:
    counter = CallableCounter(words)
    policy, kwargs = split_policy(kwargs)
    return STRATEGIES[kind](
        max_tokens, summarizer=SummaryModel(), counter=counter, policy=policy, **kwargs
    )


@pytest.mark.parametrize("kind", list(STRATEGIES))
def test_a_300_round_turn_folds_whole_rounds_and_keeps_the_request(kind: str) -> None:
    """300 rounds after one request at max_tokens=8,000: the summarizer is called; at every
    call nothing is hidden (not_shown == 0), the request leads the view verbatim, the view is
    valid and within budget; batches are whole rounds, each message is read at most once, and
    the request itself was folded (once) while staying in the view."""
    strategy = build(kind, 8_000)
    summarizer = recording(strategy)
    history = long_turn(300)
    assert strategy.counter.count_messages(history) > 2 * 8_000
    calls = replay(strategy, history)
    assert summarizer.calls > 0, "a 300-round turn never reached the summarizer"
    for call in calls:
        check_call(strategy, call, REQUEST)
    check_whole_rounds(summarizer)
    read = read_ids(summarizer)
    assert read.count("req") == 1, "the request is folded exactly once"
    last = calls[-1]  # before the last round's AIMessage
    shown = set(shown_ids(last.history, last.result.messages))
    assert {str(m.id) for m in last.history[1:]} <= shown | set(read)


def test_a_call_in_flight_is_never_folded() -> None:
    """Views asked for mid-round (an AIMessage whose calls have no results yet) as well as
    before every model call: the call in flight is in the view and never given to the
    summarizer, also on a call that folds."""
    strategy = build("SummaryBuffer", 1_000, max_summary_tokens=100)
    summarizer = recording(strategy)
    history = long_turn(80, thought=40)  # big AIMessages: the trigger is often crossed by them
    calls = replay(strategy, history, model_call_ends(history, in_flight=True))
    in_flight = [c for c in calls if isinstance(c.history[-1], AIMessage)]
    assert len(in_flight) == 80
    for call in calls:
        check_call(strategy, call, REQUEST)
    for call in in_flight:
        pending = call.history[-1]
        assert pending.id in [m.id for m in call.result.messages], "call in flight not shown"
        assert pending.id not in call.read, "the call in flight was folded"
    assert any(c.result.report.folded for c in in_flight), "no fold happened mid-round"
    check_whole_rounds(summarizer)


def test_the_newest_unanswered_call_with_some_results_stays_whole() -> None:
    """A trailing AIMessage with three calls of which one is answered, over the trigger: it and
    its one result are in the view, neither was folded, and the older rounds were."""
    strategy = build("SummaryBuffer", 1_000, max_summary_tokens=100)
    summarizer = recording(strategy)
    history = long_turn(60)
    ai, *results = tool_round(71)  # three parallel calls
    assert len(results) == 3
    history = [*history, ai, results[1]]
    calls = replay(strategy, history, [*model_call_ends(history), len(history)])
    last = calls[-1]
    check_call(strategy, last, REQUEST)
    ids = [m.id for m in last.result.messages]
    assert ids[-2:] == ["ai-71", "t-71-1"]
    assert summarizer.calls > 0 and not {"ai-71", "t-71-1"} & set(last.read)


class Clock:
    def __init__(self) -> None:
        self.now = 1_000.0

    def __call__(self) -> float:
        self.now += 1.0  # one second per call
        return self.now


def test_a_failing_summarizer_loses_nothing_and_folding_resumes() -> None:
    """The summarizer fails its first three calls, then works. While it fails, every message is
    in the view or counted in ``not_shown`` (nothing is folded, nothing dropped silently); once
    the backoff has passed it folds again, and from then on nothing is hidden."""
    strategy = build(
        "SummaryBuffer",
        1_000,
        max_summary_tokens=100,
        degrade_after=2,
        retry_initial=1.0,
        retry_max=4.0,
        clock=Clock(),
    )
    summarizer = recording(strategy, failures=[True] * 3 + [False] * 1_000)
    calls = replay(strategy, long_turn(80))
    assert summarizer.calls > 3, "the summarizer was not tried again after its failures"
    health = [c.result.report.health for c in calls]
    assert {"retrying", "degraded"} <= set(health)
    for call in calls:
        check_call(strategy, call, REQUEST, healthy=call.result.report.health == "healthy")
    failing = [c for c in calls if c.result.report.health != "healthy"]
    assert any(c.result.report.not_shown for c in failing)
    recovered = len(health) - health[::-1].index("degraded")  # the first call after the last
    assert recovered < len(calls) and calls[recovered].result.report.folded > 0
    assert all(h == "healthy" for h in health[recovered:]), "folding did not resume"
    check_whole_rounds(summarizer)


def test_a_request_over_the_budget_is_clipped_with_a_marker() -> None:
    """A 1,500-word request under a 600-token budget (overflow="truncate_summary", the
    default): every view shows it clipped with the marker, first after the system message, and
    the rounds after it are still folded (nothing hidden); the summarizer read it whole, once."""
    big = HumanMessage(" ".join(f"spec{i}" for i in range(1_500)), id="req")
    strategy = build("SummaryBuffer", 600, max_summary_tokens=60)
    summarizer = recording(strategy)
    calls = replay(strategy, long_turn(40, request=big))
    for call in calls:
        view, report = call.result.messages, call.result.report
        first = body_of(view)[0]
        assert isinstance(first, HumanMessage) and first.id == "req"
        text = str(first.content)
        assert text.startswith("spec0 spec1 spec2") and text.endswith(
            "characters clipped by langmem_ext to fit the context budget]"
        )
        assert first.response_metadata["langmem_ext"]["clipped_from_tokens"] == 1_500
        assert report.clipped and is_valid(view)
        assert strategy.counter.count_messages(view) <= report.budget
        shown = {str(m.id) for m in body_of(view)}
        unseen = [m.id for m in call.history[1:] if m.id not in shown | set(call.read)]
        assert report.not_shown == 0 and not unseen, unseen
    folded = [m for batch in summarizer.batches for m in batch if m.id == "req"]
    assert len(folded) == 1 and folded[0].content == big.content


def test_a_huge_tool_result_is_clipped_before_the_request() -> None:
    """The newest round returns a result larger than the whole budget while the request is
    small: the request stays verbatim (DESIGN 2.3: clipped only when it alone is over the
    budget); the result is what gets clipped, with the marker."""
    strategy = build("SummaryBuffer", 600, max_summary_tokens=60)
    summarizer = recording(strategy)
    history = long_turn(30)
    ai, result = tool_round(30)
    huge = result.model_copy(update={"content": " ".join(f"row{i}" for i in range(2_000))})
    history = [*history, ai, huge]
    calls = replay(strategy, history, [*model_call_ends(history), len(history)])
    for call in calls:
        check_call(strategy, call, REQUEST)
    assert summarizer.calls > 0
    view, report = calls[-1].result.messages, calls[-1].result.report
    assert view[-2:][0].id == ai.id and view[-1].id == huge.id
    clipped = view[-1]
    assert clipped.response_metadata["langmem_ext"]["clipped_from_tokens"] == 2_000
    assert str(clipped.content).startswith("row0 row1") and report.clipped


def test_start_on_any_folds_inside_a_long_turn_too() -> None:
    """``start_on="any"`` (a view may start on any unit): a long turn is folded as well, and the
    request stays in every view; nothing is hidden while the summarizer is healthy."""
    strategy = build("SummaryBuffer", 1_000, max_summary_tokens=100, start_on="any")
    summarizer = recording(strategy)
    calls = replay(strategy, long_turn(80))
    for call in calls:
        check_call(strategy, call, REQUEST)
    assert summarizer.calls > 0
    check_whole_rounds(summarizer)


def test_apply_and_aapply_agree_on_a_long_turn() -> None:
    """The sync and async drivers give the same views, states, reports and folded batches at
    every call of a 120-round turn."""
    history = long_turn(120)

    def run(driver: str) -> tuple[list[Any], list[list[str]]]:
        strategy = build("SummaryBuffer", 1_500)
        summarizer = recording(strategy)
        state: MemoryState | None = None
        out = []
        for end in model_call_ends(history):
            if driver == "apply":
                result = strategy.apply(history[:end], state)
            else:
                result = asyncio.run(strategy.aapply(history[:end], state))
            out.append(([m.model_dump() for m in result.messages], result.state, result.report))
            state = result.state
        return out, [[str(m.id) for m in b] for b in summarizer.batches]

    sync, batches = run("apply")
    assert run("aapply") == (sync, batches)
    assert batches, "the turn never reached the summarizer"


# --------------------------------------------------------------------------------------------
# the surfaces: create_agent + MemoryMiddleware, create_react_agent + MemoryNode

ROUNDS = 200
BUDGET = 2_000


@tool
def read_file(path: str) -> str:
    """Read a source file of the repository."""
    _, k, p = path.removesuffix(".py").rsplit("_", 2)
    return file_text(int(k), int(p))


TOOL_TOKENS_TEXT = json.dumps(convert_to_openai_tool(read_file), ensure_ascii=False)


def ident(message: BaseMessage) -> str:
    """Which message this is: tool results by their call id (LangGraph gives them random ids)."""
    if isinstance(message, ToolMessage):
        return f"tool:{message.tool_call_id}"
    return str(message.id)


def made_before(k: int) -> set[str]:
    """The messages of the conversation when the model is called for the ``k``-th time."""
    out = {"req"}
    for j in range(k):
        out.add(f"ai-{j}")
        out.update(f"tool:call-{j}-{p}" for p in range(width(j)))
    return out


class ToolLoop:
    """The agent's model, scripted: calls ``read_file`` (1-3 parallel calls) on each of its
    first ``rounds`` calls, then answers. Records what the summarizer had read at each call."""

    def __init__(self, summarizer: ScriptedSummarizer, rounds: int = ROUNDS) -> None:
        self.summarizer = summarizer
        self.rounds = rounds
        self.read: list[list[str]] = []

    def __call__(self, request: list[BaseMessage]) -> AIMessage:
        k = len(self.read)
        self.read.append([ident(m) for b in self.summarizer.batches for m in b])
        if k == self.rounds:
            return AIMessage("All callers now use the Payments API.", id="ai-final")
        message = tool_round(k)[0]
        assert isinstance(message, AIMessage)
        return message


def check_agent_run(
    model: RecordingChatModel, loop: ToolLoop, counter: Any, reserve: int = 0
) -> None:
    """Every request the model got: valid, the request first and verbatim, within the budget,
    no not-shown note; every message made so far in it or read by the summarizer; no message
    read twice."""
    assert len(model.requests) == ROUNDS + 1
    for k, (view, read) in enumerate(zip(model.requests, loop.read, strict=True)):
        assert is_valid(view), [str(f) for f in validate(view)]
        assert isinstance(view[0], SystemMessage)
        assert "not shown" not in str(view[0].content), f"call {k}: messages hidden"
        first = body_of(view)[0]
        assert isinstance(first, HumanMessage) and first.content == REQUEST.content, first
        assert counter.count_messages(view) + reserve <= BUDGET, k
        assert len(read) == len(set(read)), f"call {k}: a message was summarized twice"
        unseen = made_before(k) - {ident(m) for m in view} - set(read)
        assert not unseen, f"call {k}: {len(unseen)} message(s) neither shown nor summarized"
    assert loop.read[-1], "the summarizer was never called"


def summary_buffer() -> tuple[SummaryBuffer, ScriptedSummarizer]:
    strategy = SummaryBuffer(BUDGET, summarizer=SummaryModel(), max_summary_tokens=200)
    return strategy, recording(strategy)


@pytest.mark.parametrize(
    ("mode", "driver"), [("view", "invoke"), ("rewrite", "invoke"), ("view", "ainvoke")]
)
def test_create_agent_with_200_tool_rounds_folds_inside_the_turn(mode: str, driver: str) -> None:
    """create_agent + MemoryMiddleware(SummaryBuffer) around a model that calls a real tool 200
    times for one request: see :func:`check_agent_run`; rewrite mode keeps the state bounded."""
    strategy, summarizer = summary_buffer()
    loop = ToolLoop(summarizer)
    model = RecordingChatModel(respond=loop)
    agent = create_agent(
        model,
        [read_file],
        system_prompt=str(SYS.content),
        middleware=[MemoryMiddleware(strategy, mode=mode)],  # type: ignore[arg-type]
        checkpointer=InMemorySaver(),
    )
    config: Any = {"configurable": {"thread_id": "long"}, "recursion_limit": 10 * ROUNDS}
    if driver == "invoke":
        out = agent.invoke({"messages": [REQUEST]}, config)
    else:
        out = asyncio.run(agent.ainvoke({"messages": [REQUEST]}, config))
    assert out["messages"][-1].id == "ai-final"
    reserve = strategy.counter.count_text(TOOL_TOKENS_TEXT)
    check_agent_run(model, loop, strategy.counter, reserve)
    memory = MemoryState.from_dict(out["memory"])
    assert memory.folds >= 2 and memory.health == "healthy"
    if mode == "rewrite":
        assert len(out["messages"]) < len(made_before(ROUNDS)) // 2


@pytest.mark.parametrize("mode", ["view", "rewrite"])
def test_create_react_agent_with_200_tool_rounds_folds_inside_the_turn(mode: str) -> None:
    """create_react_agent with pre_model_hook=MemoryNode(SummaryBuffer), view and rewrite mode:
    see :func:`check_agent_run`; rewrite mode removes the folded rounds of the current turn from
    the graph state, and the model still gets the request every time."""
    from langgraph.prebuilt import create_react_agent

    strategy, summarizer = summary_buffer()
    loop = ToolLoop(summarizer)
    model = RecordingChatModel(respond=loop)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        agent = create_react_agent(
            model,
            tools=[read_file],
            pre_model_hook=MemoryNode(strategy, mode=mode),  # type: ignore[arg-type]
            state_schema=MemoryAgentState,
            checkpointer=InMemorySaver(),
        )
    config: Any = {"configurable": {"thread_id": "long"}, "recursion_limit": 10 * ROUNDS}
    out = agent.invoke({"messages": [SYS, REQUEST]}, config)
    assert out["messages"][-1].id == "ai-final"
    check_agent_run(model, loop, strategy.counter)
    memory = MemoryState.from_dict(out["memory"])
    assert memory.folds >= 2 and memory.health == "healthy"
    if mode == "rewrite":
        assert len(out["messages"]) < len(made_before(ROUNDS)) // 2
    else:
        assert len(out["messages"]) == len(made_before(ROUNDS)) + 2  # system + final answer
