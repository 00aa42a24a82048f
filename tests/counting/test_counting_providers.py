"""Provider-exact counting.

``AnthropicCounter`` against the fake server's ``/v1/messages/count_tokens`` (tests/llm_server.py,
through the real ``anthropic`` SDK): every message's count is what the endpoint adds for its turn,
a list's count is what the endpoint counts for the request, the frames are valid requests, counts
are cached, a list's misses are counted concurrently (sync and async), and a failure names the
model and the HTTP status. ``CalibratedCounter`` learns the fake's biased ``usage.input_tokens``
through a real ``create_agent`` + ``MemoryMiddleware`` run (sync and async) and, as a property, for
any positive bias. ``docs/counting.md`` runs.
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
import re
import threading
import time
from pathlib import Path
from typing import Any

import anthropic
import pytest
from fakes import RecordingChatModel
from hypothesis import given
from hypothesis import strategies as st
from langchain.agents import create_agent
from langchain_anthropic import ChatAnthropic
from langchain_anthropic.chat_models import _format_messages
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
from llm_server import (
    COUNT_PER_REQUEST,
    COUNT_PER_SYSTEM,
    FakeLLMServer,
    Fault,
    anthropic_message_tokens,
    anthropic_token_count,
    llm_server,
)

from langmem_ext import (
    ApproximateCounter,
    ChatModelCounter,
    MemoryMiddleware,
    TokenBudget,
    as_counter,
)
from langmem_ext.counting.anthropic import AnthropicCounter
from langmem_ext.counting.calibrated import CalibratedCounter, Correction
from langmem_ext.errors import TokenCountError

__all__ = ["llm_server"]  # the fixture, re-exported so pytest finds it

MODEL = "claude-test-1"
ROOT = Path(__file__).resolve().parents[2]


# -- helpers ------------------------------------------------------------------------------------


def client(server: FakeLLMServer) -> anthropic.Anthropic:
    return anthropic.Anthropic(
        base_url=server.anthropic_base_url, api_key="sk-ant-test", max_retries=0, timeout=5
    )


def async_client(server: FakeLLMServer) -> anthropic.AsyncAnthropic:
    return anthropic.AsyncAnthropic(
        base_url=server.anthropic_base_url, api_key="sk-ant-test", max_retries=0, timeout=5
    )


def counter(server: FakeLLMServer, **kwargs: Any) -> AnthropicCounter:
    return AnthropicCounter(MODEL, client=client(server), **kwargs)


def chat_model(server: FakeLLMServer) -> ChatAnthropic:
    return ChatAnthropic(  # type: ignore[call-arg]
        model=MODEL,
        base_url=server.anthropic_base_url,
        api_key="sk-ant-test",
        max_retries=0,
        default_request_timeout=5,
    )


def call(name: str, args: dict[str, Any], id: str) -> dict[str, Any]:
    return {"name": name, "args": args, "id": id, "type": "tool_call"}


#: conversations in the shapes real applications send; none merges two turns
CONVERSATIONS: dict[str, list[BaseMessage]] = {
    "plain": [
        HumanMessage("Hello there, how are you today?", id="p1"),
        AIMessage("Fine, thanks. What can I do for you?", id="p2"),
        HumanMessage("Tell me about the Berlin office move.", id="p3"),
    ],
    "system": [
        SystemMessage("You are a careful assistant who answers briefly.", id="s0"),
        HumanMessage("What is invoice 4471 about?", id="s1"),
    ],
    "tools": [
        SystemMessage("You track orders.", id="t0"),
        HumanMessage("Where is order 4471?", id="t1"),
        AIMessage("", tool_calls=[call("track", {"order": "4471"}, "toolu_a")], id="t2"),
        ToolMessage("in transit, arrives on Friday", tool_call_id="toolu_a", id="t3"),
        AIMessage("It is on its way and arrives on Friday.", id="t4"),
        HumanMessage("And order 4472?", id="t5"),
        AIMessage(
            "Let me look both up.",
            tool_calls=[
                call("track", {"order": "4472"}, "toolu_b"),
                call("track", {"order": "4473", "verbose": True}, "toolu_c"),
            ],
            id="t6",
        ),
        ToolMessage("delivered yesterday", tool_call_id="toolu_b", id="t7"),
        ToolMessage(
            "lost in the depot, a replacement ships Monday", tool_call_id="toolu_c", id="t8"
        ),
        AIMessage("4472 was delivered; 4473 is being replaced.", id="t9"),
    ],
    "content_lists": [
        HumanMessage(
            [{"type": "text", "text": "Two parts:"}, {"type": "text", "text": "first, second."}],
            id="c1",
        ),
        AIMessage([{"type": "text", "text": "Both noted, in that order."}], id="c2"),
        HumanMessage(
            ["a bare string block", {"type": "text", "text": "and a text block"}], id="c3"
        ),
    ],
}


def conversation(n: int) -> list[BaseMessage]:
    """``n`` messages, a human's and an assistant's in turn (no two merge into one turn)."""
    kinds = (HumanMessage, AIMessage)
    return [kinds[i % 2](f"message number {i} " * 3, id=f"m{i}") for i in range(n)]


def wire(messages: list[BaseMessage]) -> tuple[Any, list[dict[str, Any]]]:
    """What ChatAnthropic sends for ``messages`` (system, turns)."""
    return _format_messages(messages, model=MODEL)


def endpoint_count(messages: list[BaseMessage]) -> int:
    """The fake endpoint's own count of the request ChatAnthropic would send."""
    system, turns = wire(messages)
    body: dict[str, Any] = {"model": MODEL, "messages": turns}
    if system is not None:
        body["system"] = system
    return anthropic_token_count(body)


# -- AnthropicCounter: exact counts --------------------------------------------------------------


@pytest.mark.parametrize("shape", sorted(CONVERSATIONS))
def test_each_message_counts_its_turn_and_a_list_counts_the_request(
    llm_server: FakeLLMServer, shape: str
) -> None:
    messages = CONVERSATIONS[shape]
    counting = counter(llm_server)
    total = counting.count_messages(messages)
    # the whole list: what the endpoint counts for the request ChatAnthropic sends, both as the
    # fake's arithmetic and as the endpoint answers ChatAnthropic's own counting call
    assert total == endpoint_count(messages)
    assert total == chat_model(llm_server).get_num_tokens_from_messages(messages)
    assert counting.request_overhead == COUNT_PER_REQUEST == counting.count_messages([])
    # each message: what the endpoint adds for its turn; a tool-call unit (an AI message and its
    # tool results) adds up to what the endpoint counts for the unit's turns
    system, turns = wire(messages)
    per_turn = [anthropic_message_tokens(t) for t in turns]
    rest = [m for m in messages if not isinstance(m, SystemMessage)]
    if system is not None:
        assert counting.count_message(messages[0]) == COUNT_PER_SYSTEM + math.ceil(
            len(str(messages[0].content)) / 4
        )
    if shape != "tools":
        assert [counting.count_message(m) for m in rest] == per_turn
    else:
        units = [rest[0:1], rest[1:3], rest[3:4], rest[4:5], rest[5:8], rest[8:9]]
        unit_turns = [per_turn[0:1], per_turn[1:3], per_turn[3:4], per_turn[4:5], per_turn[5:7]]
        unit_turns.append(per_turn[7:8])
        assert [sum(counting.count_message(m) for m in unit) for unit in units] == [
            sum(t) for t in unit_turns
        ]
    # every frame was a valid request: the endpoint refused none
    assert [r.error for r in llm_server.count_requests() if r.error] == []


def test_a_trailing_tool_call_and_merged_turns_are_over_counted_never_under(
    llm_server: FakeLLMServer,
) -> None:
    messages = CONVERSATIONS["tools"]
    counting = counter(llm_server)
    in_flight = messages[:3]  # ends on an AI tool call with no result yet
    assert 0 < counting.count_messages(in_flight) - endpoint_count(in_flight) <= 8
    merged = [*messages[:4], HumanMessage("thanks, and the other one?", id="x")]
    assert len(wire(merged)[1]) == 3  # the tool result and the human message are one turn
    assert 0 < counting.count_messages(merged) - endpoint_count(merged) <= 8


def test_a_second_count_is_answered_from_the_cache_without_a_request(
    llm_server: FakeLLMServer,
) -> None:
    messages = CONVERSATIONS["tools"]
    counting = counter(llm_server)
    first = counting.count_messages(messages)
    requests = len(llm_server.count_requests())
    assert requests == 3 + 1 + len(messages)  # frame costs, one tool-result frame, the messages
    assert counting.count_messages(messages) == first
    assert [counting.count_message(m) for m in messages]
    assert counting.count_text("a summary of the conversation") == counting.count_text(
        "a summary of the conversation"
    )
    assert len(llm_server.count_requests()) == requests + 1  # the text, once
    # a message whose content changed is recounted, alone
    edited = messages[4].model_copy(update={"content": "It arrives on Saturday instead."})
    counting.count_messages([*messages[:4], edited])
    assert len(llm_server.count_requests()) == requests + 2


def test_the_misses_of_a_list_are_counted_concurrently(llm_server: FakeLLMServer) -> None:
    counting = counter(llm_server)
    counting.count_messages([])  # the frame costs
    messages = conversation(6)
    llm_server.max_in_flight = 0
    llm_server.push(*[Fault.delay(0.3)] * 6)
    start = time.perf_counter()
    total = counting.count_messages(messages)
    elapsed = time.perf_counter() - start
    assert total == endpoint_count(messages)
    assert len(llm_server.count_requests()) == 3 + 6
    assert llm_server.max_in_flight == 6  # all six in flight at once
    assert elapsed < 6 * 0.3 / 2  # serially it would take 1.8 s


def test_max_concurrency_bounds_the_requests_in_flight(llm_server: FakeLLMServer) -> None:
    counting = counter(llm_server, max_concurrency=2)
    counting.count_messages([])
    llm_server.max_in_flight = 0
    llm_server.push(*[Fault.delay(0.1)] * 6)
    counting.count_messages(conversation(6))
    assert llm_server.max_in_flight == 2


class NoSyncClient:
    """A sync client that fails the test if used: the async path must not block on it."""

    def __getattr__(self, name: str) -> Any:
        raise AssertionError(f"the sync client was used ({name}) on the async path")


async def test_the_async_path_counts_the_same_concurrently_on_the_async_client(
    llm_server: FakeLLMServer,
) -> None:
    messages = CONVERSATIONS["tools"]
    counting = AnthropicCounter(
        MODEL,
        client=NoSyncClient(),
        async_client=async_client(llm_server),  # type: ignore[arg-type]
    )
    assert await counting.acount_messages([]) == COUNT_PER_REQUEST
    llm_server.max_in_flight = 0
    llm_server.push(*[Fault.delay(0.2)] * (1 + len(messages)))
    start = time.perf_counter()
    total = await counting.acount_messages(messages)
    elapsed = time.perf_counter() - start
    assert total == endpoint_count(messages)
    assert llm_server.max_in_flight == 8  # 11 requests, at most max_concurrency=8 at once
    assert elapsed < 2 * 0.2 + 0.3  # two waves; serially 11 * 0.2 s
    requests = len(llm_server.count_requests())
    assert await counting.acount_message(messages[1]) == counting.count_message(messages[1])
    assert await counting.acount_text("hello there") == await counting.acount_text("hello there")
    assert len(llm_server.count_requests()) == requests + 1


def test_a_failed_count_names_the_model_and_the_status(llm_server: FakeLLMServer) -> None:
    counting = counter(llm_server)
    counting.count_messages([])
    llm_server.push(Fault.server_error(500))
    with pytest.raises(TokenCountError) as caught:
        counting.count_message(HumanMessage("hello", id="h"))
    error = caught.value
    assert isinstance(error, RuntimeError)
    assert (error.status_code, error.model, error.error_type) == (500, MODEL, "api_error")
    assert f"{MODEL!r}" in str(error) and "HTTP 500" in str(error)
    llm_server.push(Fault.rate_limit())
    with pytest.raises(TokenCountError, match=r"HTTP 429 \(rate_limit_error"):
        counting.count_text("hello")
    # nothing failed is cached: the next count asks again and succeeds
    assert counting.count_message(HumanMessage("hello", id="h")) > 0


async def test_a_failed_async_count_names_the_model_and_the_status(
    llm_server: FakeLLMServer,
) -> None:
    counting = AnthropicCounter(MODEL, async_client=async_client(llm_server))
    llm_server.push(Fault.server_error(529))
    with pytest.raises(TokenCountError) as caught:
        await counting.acount_messages([HumanMessage("hello", id="h")])
    assert caught.value.status_code == 529 and caught.value.error_type == "overloaded_error"
    assert MODEL in str(caught.value)


def test_the_fake_endpoint_refuses_what_the_real_api_refuses(llm_server: FakeLLMServer) -> None:
    sdk = client(llm_server)
    bad: list[list[dict[str, Any]]] = [
        [],
        [
            {
                "role": "user",
                "content": [{"type": "tool_result", "tool_use_id": "x", "content": "."}],
            }
        ],
        [
            {"role": "user", "content": "hi"},
            {
                "role": "assistant",
                "content": [{"type": "tool_use", "id": "x", "name": "t", "input": {}}],
            },
            {"role": "user", "content": "no result"},
        ],
        [{"role": "user", "content": ""}, {"role": "assistant", "content": "a"}],
        [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "trailing "}],
    ]
    for messages in bad:
        with pytest.raises(anthropic.BadRequestError) as caught:
            sdk.messages.count_tokens(model=MODEL, messages=messages)  # type: ignore[arg-type]
        assert caught.value.type == "invalid_request_error"
    assert len(llm_server.count_requests()) == len(bad)
    assert all(r.fault == "invalid_request" and r.error for r in llm_server.count_requests())
    ok = sdk.messages.count_tokens(model=MODEL, messages=[{"role": "user", "content": "abcd"}])
    assert ok.input_tokens == COUNT_PER_REQUEST + 4 + 1


def test_as_counter_passes_a_provider_counter_through_and_is_otherwise_unchanged(
    llm_server: FakeLLMServer,
) -> None:
    counting = counter(llm_server)
    assert as_counter(counting) is counting
    calibrated = CalibratedCounter(counting)
    assert as_counter(calibrated) is calibrated  # type: ignore[arg-type]
    assert calibrated.is_blocking and counting.is_blocking
    assert isinstance(as_counter(chat_model(llm_server)), ChatModelCounter)
    with pytest.raises(ValueError):
        as_counter("claude-sonnet-4-5")
    assert len(llm_server.count_requests()) == 0  # nothing counted yet: clients are lazy


# -- CalibratedCounter ----------------------------------------------------------------------------


class RecordingCalibration(CalibratedCounter):
    """Records, for every observed request, our count just before the observation (a true
    prediction: the request is new to the fit) and the provider's input_tokens."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.seen: list[tuple[int, int]] = []

    def _note(self, messages: Any, usage: Any, extra_tokens: int) -> None:
        assert isinstance(usage, AIMessage) and usage.usage_metadata is not None
        actual = usage.usage_metadata["input_tokens"]
        self.seen.append((self.count_messages(list(messages)) + extra_tokens, actual))

    def observe(self, messages: Any, usage: Any, **kwargs: Any) -> Correction | None:
        self._note(messages, usage, kwargs.get("extra_tokens", 0))
        return super().observe(messages, usage, **kwargs)

    async def aobserve(self, messages: Any, usage: Any, **kwargs: Any) -> Correction | None:
        await asyncio.to_thread(self._note, messages, usage, kwargs.get("extra_tokens", 0))
        return await super().aobserve(messages, usage, **kwargs)


def turn(i: int) -> HumanMessage:
    return HumanMessage(
        f"question {i}: " + "where is my order and when will it arrive? " * (1 + i % 4)
    )


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_calibration_through_an_agent_is_within_two_percent_and_never_under_in_ten_calls(
    llm_server: FakeLLMServer, mode: str
) -> None:
    llm_server.usage_bias = (1.3, 5)
    inner = AnthropicCounter(
        MODEL, client=client(llm_server), async_client=async_client(llm_server), max_concurrency=4
    )
    calibrated = RecordingCalibration(inner)
    agent = create_agent(
        chat_model(llm_server),
        tools=[],
        system_prompt="You track orders for a shop.",
        middleware=[MemoryMiddleware(TokenBudget(100_000, counter=calibrated))],
        checkpointer=InMemorySaver(),
    )
    config: Any = {"configurable": {"thread_id": "t"}}
    if mode == "sync":
        for i in range(12):
            agent.invoke({"messages": [turn(i)]}, config)
    else:

        async def run() -> None:  # one event loop for the whole run (the clients keep theirs)
            for i in range(12):
                await agent.ainvoke({"messages": [turn(i)]}, config)

        asyncio.run(run())
    assert len(calibrated.seen) == 12
    # every model request is a calibrated prediction checked against the reported usage
    chats = [r for r in llm_server.answered() if r.endpoint == "chat"]
    assert [actual for _, actual in calibrated.seen] == [
        math.floor(1.3 * anthropic_token_count(r.body or {}) + 5 + 0.5) for r in chats
    ]
    errors = [(ours - actual) / actual for ours, actual in calibrated.seen]
    good = [0 <= e <= 0.02 for e in errors]
    converged = good.index(True) + 1
    assert converged <= 10 and all(good[converged - 1 :]), errors
    assert errors[0] < 0  # before any observation it is the uncorrected (exact) count
    correction = calibrated.correction()
    assert correction is not None and 1.29 <= correction.scale <= 1.32


class ObserveRecorder(CalibratedCounter):
    """Records what the middleware feeds to ``observe`` / ``aobserve``."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        #: (sync or async, messages, response, extra_tokens, the correction in force)
        self.calls: list[tuple[str, list[BaseMessage], Any, int, Correction | None]] = []

    def _note(self, mode: str, messages: Any, usage: Any, kwargs: dict[str, Any]) -> None:
        extra = kwargs.get("extra_tokens", 0)
        self.calls.append((mode, list(messages), usage, extra, self.correction()))

    def observe(self, messages: Any, usage: Any, **kwargs: Any) -> Correction | None:
        self._note("sync", messages, usage, kwargs)
        return super().observe(messages, usage, **kwargs)

    async def aobserve(self, messages: Any, usage: Any, **kwargs: Any) -> Correction | None:
        self._note("async", messages, usage, kwargs)
        return await super().aobserve(messages, usage, **kwargs)


@tool
def track_order(order_id: str) -> str:
    """Look up where an order is."""
    return f"order {order_id} is in transit"


def test_the_middleware_feeds_the_messages_sent_the_answer_and_the_tool_tokens() -> None:
    schema = ApproximateCounter().count_text(
        json.dumps(convert_to_openai_tool(track_order), ensure_ascii=False)
    )

    def respond(messages: list[BaseMessage]) -> AIMessage:  # a provider counts the tools too
        tokens = round(1.2 * (ApproximateCounter().count_messages(messages) + schema) + 5)
        usage = {"input_tokens": tokens, "output_tokens": 2, "total_tokens": tokens + 2}
        return AIMessage("noted", usage_metadata=usage)  # type: ignore[arg-type]

    model = RecordingChatModel(respond=respond)
    recorder = ObserveRecorder(ApproximateCounter(), model="fake")
    agent = create_agent(
        model,
        [track_order],
        system_prompt="You track orders.",
        middleware=[MemoryMiddleware(TokenBudget(5_000, counter=recorder))],
        checkpointer=InMemorySaver(),
    )
    config: Any = {"configurable": {"thread_id": "t"}}
    agent.invoke({"messages": [HumanMessage("where is order 1?")]}, config)
    asyncio.run(agent.ainvoke({"messages": [HumanMessage("and order 2?")]}, config))
    assert [mode for mode, *_ in recorder.calls] == ["sync", "async"]
    for (_, sent, answer, extra, before), got in zip(recorder.calls, model.requests, strict=True):
        assert sent == got  # the system prompt and the view: what the model was sent
        assert isinstance(answer, AIMessage) and answer.content == "noted"
        # the tool schema, as the budget held it back (calibrated once there is a correction)
        assert extra == (before.tokens(schema) if before is not None else schema)
    assert recorder.calls[0][4] is None and recorder.calls[1][4] is not None
    correction = recorder.correction()
    assert correction is not None and correction.samples == 2


def test_calibration_failures_are_logged_and_never_reach_the_agent(
    llm_server: FakeLLMServer, caplog: pytest.LogCaptureFixture
) -> None:
    class Broken(CalibratedCounter):
        def observe(self, *args: Any, **kwargs: Any) -> Correction | None:
            raise RuntimeError("the calibration broke")

        async def aobserve(self, *args: Any, **kwargs: Any) -> Correction | None:
            raise RuntimeError("the async calibration broke")

    agent = create_agent(
        chat_model(llm_server),
        tools=[],
        middleware=[MemoryMiddleware(TokenBudget(10_000, counter=Broken(ApproximateCounter())))],
    )
    with caplog.at_level(logging.WARNING, logger="langmem_ext.integrations.agents"):
        out = agent.invoke({"messages": [HumanMessage("hello")]})
        assert isinstance(out["messages"][-1], AIMessage)
        out = asyncio.run(agent.ainvoke({"messages": [HumanMessage("hello")]}))
        assert isinstance(out["messages"][-1], AIMessage)
    warnings = [r.getMessage() for r in caplog.records]
    assert any("the calibration broke" in w for w in warnings)
    assert any("the async calibration broke" in w for w in warnings)


def test_observe_reads_every_usage_shape_and_ignores_missing_or_zero_usage() -> None:
    calibrated = CalibratedCounter(ApproximateCounter())
    sent = [HumanMessage("hello there " * 10, id="a")]
    ours = ApproximateCounter().count_messages(sent)
    assert calibrated.observe(sent, AIMessage("no usage")) is None
    assert calibrated.observe(sent, {"input_tokens": 0}) is None
    assert calibrated.observe(sent, 0) is None and calibrated.observe(sent, True) is None
    assert calibrated.corrections == {} and calibrated.count_messages(sent) == ours
    usage = {"input_tokens": ours * 2, "output_tokens": 1, "total_tokens": ours * 2 + 1}
    answer = AIMessage("hi", usage_metadata=usage, response_metadata={"model_name": "claude-x"})
    shapes: list[Any] = [
        ours * 2,
        {"input_tokens": ours, "cache_read_input_tokens": ours},  # Anthropic's raw usage
        {"prompt_tokens": ours * 2, "completion_tokens": 3},  # OpenAI's
    ]
    for shape in shapes:
        calibrated.observe(sent, shape, model="m")
    correction = calibrated.correction()
    assert correction is not None and (correction.model, correction.samples) == ("m", 3)
    assert correction.scale == pytest.approx(2 + 0.5 / ours)  # one size: the largest ratio
    assert calibrated.count_messages(sent) == 2 * ours + 1  # the margin: one token
    assert calibrated.count_message(sent[0]) == 2 * ours + 1  # scaled, rounded up
    # a response names its model; counting follows the model observed last
    calibrated.observe(sent, answer)
    assert set(calibrated.corrections) == {"m", "claude-x"}
    assert calibrated.correction() == calibrated.corrections["claude-x"]
    # a counter for one model files every observation under it
    pinned = CalibratedCounter(ApproximateCounter(), model="m")
    pinned.observe(sent, answer)
    assert set(pinned.corrections) == {"m"}
    # extra tokens (tool schemas, as the budget reserved them) are part of what was counted
    pinned.reset()
    pinned.observe(sent, 2 * (ours + 50), extra_tokens=50)
    correction = pinned.correction()
    assert correction is not None and correction.scale == pytest.approx(2 + 0.5 / (ours + 50))
    assert pinned.count_messages(sent) + pinned.count_text("x" * 200) >= 2 * (ours + 50)
    pinned.reset("m")
    assert pinned.correction() is None and pinned.count_messages(sent) == ours


def test_the_scale_is_clamped_and_outliers_do_not_lift_the_line() -> None:
    calibrated = CalibratedCounter(ApproximateCounter(), model="m", scale_bounds=(0.5, 3.0))
    sizes = [20, 60, 120, 200, 300, 420, 560, 700]
    requests = [[HumanMessage("word " * n, id=f"r{n}")] for n in sizes]
    raw = [ApproximateCounter().count_messages(r) for r in requests]
    for sent, x in zip(requests, raw, strict=True):
        calibrated.observe(sent, 10 * x)
    assert calibrated.correction() is not None
    assert calibrated.correction().scale == 3.0  # type: ignore[union-attr]
    calibrated.reset()
    for sent, x in zip(requests, raw, strict=True):
        calibrated.observe(sent, round(1.2 * x + 4))
    calibrated.observe(requests[3], 5 * raw[3])  # one wild report (an image we missed, say)
    correction = calibrated.correction()
    assert correction is not None and abs(correction.scale - 1.2) < 0.02
    assert correction.offset < 10  # not lifted to the outlier


def test_observations_from_many_threads_are_all_kept() -> None:
    calibrated = CalibratedCounter(ApproximateCounter(), model="m", window=1000)
    sent = [HumanMessage("hello " * 30, id="a")]
    ours = ApproximateCounter().count_messages(sent)

    def work() -> None:
        for _ in range(50):
            calibrated.observe(sent, round(1.5 * ours))

    threads = [threading.Thread(target=work) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    correction = calibrated.correction()
    assert correction is not None and correction.samples == 400


async def test_aobserve_and_acount_messages_use_the_async_counter(
    llm_server: FakeLLMServer,
) -> None:
    inner = AnthropicCounter(MODEL, client=NoSyncClient(), async_client=async_client(llm_server))  # type: ignore[arg-type]
    calibrated = CalibratedCounter(inner, model=MODEL)
    messages = CONVERSATIONS["plain"]
    exact = endpoint_count(messages)
    assert await calibrated.acount_messages(messages) == exact  # no correction yet
    await calibrated.aobserve(messages, round(1.5 * exact + 3))
    assert await calibrated.acount_messages(messages) >= round(1.5 * exact + 3)


# -- the property: any positive bias is learnt, and never under-counted after -------------------

WORDS = ["order", "invoice", "Berlin", "migration", "schedule", "x", "4471", "déjà", "ok"]


@st.composite
def requests_(draw: st.DrawFn) -> list[BaseMessage]:
    """A request of 1 to 12 messages, human and assistant in turn, of 1 to 150 words each."""
    sizes = draw(st.lists(st.integers(1, 150), min_size=1, max_size=12))
    start = draw(st.integers(0, len(WORDS) - 1))
    kinds = (HumanMessage, AIMessage)
    return [
        kinds[i % 2](" ".join(WORDS[(start + i + k) % len(WORDS)] for k in range(size)))
        for i, size in enumerate(sizes)
    ]


@given(
    scale=st.floats(0.6, 2.5),
    offset=st.integers(0, 300),
    observed=st.lists(requests_(), min_size=10, max_size=10),
    fresh=st.lists(requests_(), min_size=5, max_size=5),
)
def test_any_positive_bias_converges_and_is_never_under_counted_after(
    scale: float, offset: int, observed: list[list[BaseMessage]], fresh: list[list[BaseMessage]]
) -> None:
    base = ApproximateCounter()

    def provider(messages: list[BaseMessage]) -> int:  # rounds half up, like the fake server
        return math.floor(scale * base.count_messages(messages) + offset + 0.5)

    calibrated = CalibratedCounter(ApproximateCounter(), model="m")
    for sent in observed:
        calibrated.observe(sent, provider(sent))
    sizes = [base.count_messages(sent) for sent in observed]
    for sent in fresh:
        ours, truth = calibrated.count_messages(sent), provider(sent)
        assert ours >= truth, (ours, truth, calibrated.correction())  # never under
        # inside the sizes seen (spread out), within 2% and the few tokens the rounding allows:
        # the slopes' error bars (4 tokens over the spread), the margin, both roundings
        if max(sizes) - min(sizes) >= 50 and min(sizes) <= base.count_messages(sent) <= max(sizes):
            assert ours <= truth * 1.02 + 7, (ours, truth, calibrated.correction())


# -- docs/counting.md ---------------------------------------------------------------------------


def test_the_counting_page_runs_offline(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    page = (ROOT / "docs" / "counting.md").read_text(encoding="utf-8")
    blocks = re.findall(r"```python\n(.*?)```", page, flags=re.S)
    assert len(blocks) >= 4
    namespace: dict[str, Any] = {}
    for code in blocks:
        exec(compile(code, str(ROOT / "docs" / "counting.md"), "exec"), namespace)
    assert namespace["counter"].corrections["m"].samples == 6
