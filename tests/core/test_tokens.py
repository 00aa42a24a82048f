"""Token counters: agreement with the references, caching, coercion, errors."""

from __future__ import annotations

import base64
import struct
import threading
import zlib
from typing import Any

import pytest
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import (
    AIMessage,
    BaseMessage,
    HumanMessage,
    SystemMessage,
    ToolMessage,
)
from langchain_core.messages.utils import count_tokens_approximately
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_openai import ChatOpenAI
from pydantic import Field

from langmem_ext import (
    ApproximateCounter,
    CallableCounter,
    ChatModelCounter,
    TiktokenCounter,
    TokenBudget,
    TokenCounter,
    TokenizerUnavailableError,
    as_counter,
)
from langmem_ext.counting.local import openai_image_tokens

TEXT_AND_TOOL_MESSAGES: list[BaseMessage] = [
    SystemMessage("You are a terse assistant. Answer in one line."),
    HumanMessage("What's the weather in Zürich and in 東京 today? 🙂"),
    HumanMessage("named sender", name="alice"),
    AIMessage(
        "",
        tool_calls=[
            {"name": "get_weather", "args": {"city": "Zürich", "unit": "C"}, "id": "call_1"},
            {"name": "get_weather", "args": {"city": "東京"}, "id": "call_2"},
        ],
    ),
    ToolMessage('{"temp": 21, "sky": "clear"}', tool_call_id="call_1", name="get_weather"),
    ToolMessage("error: upstream timeout after 30s", tool_call_id="call_2"),
    AIMessage("Zürich is 21°C and clear; Tokyo timed out."),
    AIMessage("Let me check.", tool_calls=[{"name": "f", "args": {}, "id": "c3"}]),
    ToolMessage("", tool_call_id="c3"),
    HumanMessage(""),
    AIMessage("multi\nline\n\ttext with  spaces and numbers 1234567890"),
]


@pytest.mark.parametrize("model", ["gpt-4o", "gpt-4o-mini", "gpt-4", "gpt-3.5-turbo", "gpt-5"])
def test_tiktoken_counter_agrees_with_chatopenai_per_message_and_per_list(model: str) -> None:
    reference = ChatOpenAI(model=model, api_key="sk-test")  # type: ignore[arg-type]
    counter = TiktokenCounter(model=model)
    for message in TEXT_AND_TOOL_MESSAGES:
        # ChatOpenAI counts one message as the message plus the 3-token reply priming
        expected = reference.get_num_tokens_from_messages([message])
        assert counter.count_messages([message]) == expected, message
    assert counter.count_messages(TEXT_AND_TOOL_MESSAGES) == (
        reference.get_num_tokens_from_messages(TEXT_AND_TOOL_MESSAGES)
    )
    assert counter.count_messages([]) == 3


def test_tiktoken_counter_by_encoding_name_matches_model() -> None:
    by_model = TiktokenCounter(model="gpt-4o")
    by_encoding = TiktokenCounter(encoding="o200k_base")
    assert by_model.encoding_name == by_encoding.encoding_name == "o200k_base"
    assert TiktokenCounter(model="gpt-4").encoding_name == "cl100k_base"
    for m in TEXT_AND_TOOL_MESSAGES:
        assert by_model.count_message(m) == by_encoding.count_message(m)
    assert by_model.count_text("hello world") == 2


def _png_data_url(width: int, height: int) -> str:
    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    chunk = b"IHDR" + header
    png = (
        b"\x89PNG\r\n\x1a\n"
        + struct.pack(">I", len(header))
        + chunk
        + struct.pack(">I", zlib.crc32(chunk))
    )
    return "data:image/png;base64," + base64.b64encode(png).decode()


def test_tiktoken_counter_counts_images_by_openai_rule() -> None:
    counter = TiktokenCounter(model="gpt-4o", default_image_tokens=765)
    text_only = counter.count_message(HumanMessage([{"type": "text", "text": "look"}]))

    def with_image(block: dict[str, Any]) -> int:
        return counter.count_message(HumanMessage([{"type": "text", "text": "look"}, block]))

    low = {"type": "image_url", "image_url": {"url": "https://x/y.png", "detail": "low"}}
    assert with_image(low) - text_only == 85
    sized = {"type": "image_url", "image_url": {"url": _png_data_url(1024, 1024)}}
    # 1024x1024 -> shortest side 768 -> 2x2 tiles of 512 -> 4*170 + 85
    assert with_image(sized) - text_only == 765 == openai_image_tokens(1024, 1024)
    wide = {"type": "image_url", "image_url": {"url": _png_data_url(4096, 1024)}}
    # 4096x1024 -> 2048x512 -> 4x1 tiles -> 4*170 + 85
    assert with_image(wide) - text_only == 765
    unknown = {"type": "image_url", "image_url": {"url": "https://example.invalid/a.png"}}
    assert with_image(unknown) - text_only == 765  # the documented default
    small = TiktokenCounter(model="gpt-4o", default_image_tokens=100)
    base = small.count_message(HumanMessage([{"type": "text", "text": "look"}]))
    assert small.count_message(HumanMessage([{"type": "text", "text": "look"}, unknown])) == (
        base + 100
    )
    assert openai_image_tokens(512, 512) == 255


def test_approximate_counter_matches_count_tokens_approximately() -> None:
    counter = ApproximateCounter()
    for message in TEXT_AND_TOOL_MESSAGES:
        assert counter.count_message(message) == count_tokens_approximately([message])
    # per-message rounding adds up to langchain-core's own total
    assert counter.count_messages(TEXT_AND_TOOL_MESSAGES) == count_tokens_approximately(
        TEXT_AND_TOOL_MESSAGES
    )
    assert ApproximateCounter(chars_per_token=2.0).count_text("abcdef") == 3
    with pytest.raises(ValueError, match="chars_per_token"):
        ApproximateCounter(chars_per_token=0)


def test_cache_counts_each_message_once_and_recounts_only_changed_content() -> None:
    calls: list[str] = []

    def fn(message: BaseMessage) -> int:
        calls.append(str(message.content))
        return len(str(message.content))

    counter = CallableCounter(fn)
    history = [HumanMessage("a" * 10, id="1"), AIMessage("b" * 20, id="2")]
    assert counter.count_messages(history) == 30
    assert counter.count_messages(history) == 30
    assert calls == ["a" * 10, "b" * 20]
    info = counter.cache_info()
    assert (info.hits, info.misses, info.size) == (2, 2, 2)
    edited = [history[0], history[1].model_copy(update={"content": "c" * 5})]
    assert counter.count_messages(edited) == 15
    assert calls == ["a" * 10, "b" * 20, "c" * 5]


def test_cache_memory_is_bounded() -> None:
    counter = ApproximateCounter(cache_size=10)
    for i in range(50):
        counter.count_message(HumanMessage(f"message {i}", id=str(i)))
    assert counter.cache_info().size == 10
    with pytest.raises(ValueError, match="cache_size"):
        ApproximateCounter(cache_size=0)


def test_cache_distinguishes_ids_and_tool_calls() -> None:
    counter = TiktokenCounter(model="gpt-4o")
    a = AIMessage("", tool_calls=[{"name": "f", "args": {"x": 1}, "id": "1"}])
    b = AIMessage("", tool_calls=[{"name": "f", "args": {"x": 123456789}, "id": "1"}])
    assert counter.count_message(a) != counter.count_message(b)
    t1 = ToolMessage("same", tool_call_id="short")
    t2 = ToolMessage("same", tool_call_id="a-much-longer-tool-call-id")
    assert counter.count_message(t1) == counter.count_message(t2)  # OpenAI: flat 3 tokens


class CountingChatModel(BaseChatModel):
    """A chat model whose provider-side count is 2 tokens per word + 5 per request."""

    calls: int = 0
    threads: list[str] = Field(default_factory=list)

    @property
    def _llm_type(self) -> str:
        return "counting-fake"

    def _generate(self, messages: Any, stop: Any = None, **kwargs: Any) -> ChatResult:
        return ChatResult(generations=[ChatGeneration(message=AIMessage("ok"))])

    def get_num_tokens_from_messages(self, messages: Any, tools: Any = None) -> int:
        self.calls += 1
        self.threads.append(threading.current_thread().name)
        return 5 + sum(2 * len(str(m.content).split()) for m in messages)

    def get_num_tokens(self, text: str) -> int:
        return 2 * len(text.split())


def test_chat_model_counter_subtracts_request_overhead_and_caches() -> None:
    model = CountingChatModel()
    counter = ChatModelCounter(model)
    history = [HumanMessage("one two three", id="a"), AIMessage("four five", id="b")]
    assert counter.count_message(history[0]) == 6
    assert counter.request_overhead == 5
    assert counter.count_messages(history) == 5 + 6 + 4
    calls = model.calls
    assert counter.count_messages(history) == 15
    assert model.calls == calls  # served from the cache
    assert counter.count_text("a b c") == 6


async def test_aapply_runs_a_blocking_counter_off_the_event_loop() -> None:
    model = CountingChatModel()
    strategy = TokenBudget(100, counter=model)
    assert isinstance(strategy.counter, ChatModelCounter)
    result = await strategy.aapply([HumanMessage("hello there", id="h")])
    assert [m.content for m in result.messages] == ["hello there"]
    assert model.threads and threading.main_thread().name not in model.threads


def test_as_counter_accepts_every_documented_form() -> None:
    assert isinstance(as_counter(None), ApproximateCounter)
    assert isinstance(as_counter("approximate"), ApproximateCounter)
    gpt = as_counter("gpt-4o")
    assert isinstance(gpt, TiktokenCounter) and gpt.encoding_name == "o200k_base"
    enc = as_counter("cl100k_base")
    assert isinstance(enc, TiktokenCounter) and enc.encoding_name == "cl100k_base"
    assert isinstance(as_counter(CountingChatModel()), ChatModelCounter)
    fn_counter = as_counter(lambda m: 7)
    assert isinstance(fn_counter, CallableCounter)
    assert fn_counter.count_message(HumanMessage("x")) == 7
    existing = ApproximateCounter()
    assert as_counter(existing) is existing
    assert isinstance(existing, TokenCounter)
    with pytest.raises(TypeError, match="cannot use int as a token counter"):
        as_counter(42)  # type: ignore[arg-type]


def test_negative_count_is_rejected() -> None:
    counter = CallableCounter(lambda m: -1)
    with pytest.raises(ValueError, match="counted -1 tokens"):
        counter.count_message(HumanMessage("x"))


def test_tiktoken_load_failure_names_the_fix(monkeypatch: pytest.MonkeyPatch) -> None:
    import tiktoken

    def offline(name: str) -> None:
        raise ConnectionError("no route to host")

    monkeypatch.setattr(tiktoken, "get_encoding", offline)
    with pytest.raises(TokenizerUnavailableError, match="TIKTOKEN_CACHE_DIR") as info:
        TiktokenCounter(model="gpt-4o")
    assert "o200k_base" in str(info.value)
    with pytest.raises(ValueError, match="needs a model or an encoding"):
        TiktokenCounter(model=None)
