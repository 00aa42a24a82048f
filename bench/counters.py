"""The counters the benchmark hands to ``trim_messages``, and instrumented library counters.

``make_tiktoken_list_counter`` is what a user passes to ``trim_messages`` for exact OpenAI
counting: a plain ``list[BaseMessage] -> int`` function built on tiktoken directly, with **no
cache**, doing the same accounting as :class:`langmem_ext.TiktokenCounter` (3 tokens of framing
per message, role, content, name, tool-call names and JSON arguments, 3 for a tool_call_id, and 3
per request to prime the reply; the same sum ``ChatOpenAI.get_num_tokens_from_messages`` makes).
It counts its own encode calls with an integer increment (a few tens of nanoseconds against
microseconds per encode), so the one timed run also yields the counts.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import tiktoken
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage, ToolMessage
from langchain_core.messages.utils import count_tokens_approximately

from langmem_ext import TiktokenCounter

__all__ = [
    "MODEL",
    "CountingTiktokenCounter",
    "ListCounter",
    "TokenStats",
    "check_equivalence",
    "make_approx_list_counter",
    "make_tiktoken_list_counter",
]

MODEL = "gpt-4o"

ListCounter = Callable[[list[BaseMessage]], int]


@dataclass
class TokenStats:
    """What a counter did: list calls, messages counted and tokenizer encode calls."""

    calls: int = 0
    messages: int = 0
    encodes: int = 0
    encoding: str = ""


def _role(message: BaseMessage) -> str:
    if isinstance(message, HumanMessage):
        return "user"
    if isinstance(message, AIMessage):
        return "assistant"
    if isinstance(message, SystemMessage):
        return "system"
    if isinstance(message, ToolMessage):
        return "tool"
    return message.type


def make_tiktoken_list_counter(model: str = MODEL) -> tuple[ListCounter, TokenStats]:
    """An uncached exact counter for ``trim_messages`` and the stats it keeps."""
    encoding = tiktoken.encoding_for_model(model)
    encode = encoding.encode
    stats = TokenStats(encoding=encoding.name)

    def text_tokens(text: str) -> int:
        stats.encodes += 1
        return len(encode(text, disallowed_special=()))

    def content_tokens(content: str | list[str | dict[Any, Any]]) -> int:
        if isinstance(content, str):
            return text_tokens(content) if content else 0
        total = 0
        for block in content:
            if isinstance(block, str):
                total += text_tokens(block)
            elif block.get("type") == "text":
                total += text_tokens(str(block.get("text", "")))
            else:  # the synthetic histories have text only; count anything else as its JSON
                total += text_tokens(json.dumps(block, ensure_ascii=False, default=repr))
        return total

    def message_tokens(message: BaseMessage) -> int:
        stats.messages += 1
        tokens = 3 + text_tokens(_role(message)) + content_tokens(message.content)
        if isinstance(message, ToolMessage):
            return tokens + 3
        name = message.name or message.additional_kwargs.get("name")
        if name:
            tokens += text_tokens(str(name)) + 1
        if isinstance(message, AIMessage):
            for call in message.tool_calls:
                tokens += text_tokens(call["name"])
                tokens += text_tokens(json.dumps(call["args"], ensure_ascii=False))
            for bad in message.invalid_tool_calls:
                tokens += text_tokens(bad.get("name") or "")
                tokens += text_tokens(bad.get("args") or "")
        return tokens

    def count(messages: list[BaseMessage]) -> int:
        stats.calls += 1
        return 3 + sum(message_tokens(m) for m in messages)

    return count, stats


def make_approx_list_counter() -> tuple[ListCounter, TokenStats]:
    """``count_tokens_approximately`` with call and message counts (for untimed passes only)."""
    stats = TokenStats()

    def count(messages: list[BaseMessage]) -> int:
        stats.calls += 1
        stats.messages += len(messages)
        return count_tokens_approximately(messages)

    return count, stats


class CountingTiktokenCounter(TiktokenCounter):
    """:class:`TiktokenCounter` that counts uncached message counts and encode calls.

    Used only in the untimed instrumented pass; the timed passes use the plain class.
    """

    def __init__(self, model: str = MODEL) -> None:
        super().__init__(model)
        self.stats = TokenStats(encoding=self.encoding_name)

    def count_text(self, text: str) -> int:
        self.stats.encodes += 1
        return super().count_text(text)

    def count_uncached(self, message: BaseMessage) -> int:
        self.stats.messages += 1
        return super().count_uncached(message)


def check_equivalence(messages: Sequence[BaseMessage], model: str = MODEL) -> int:
    """Assert that the benchmark's uncached counter agrees with ``TiktokenCounter`` exactly.

    Per message and for the whole list (request overhead included). Returns how many messages
    were compared.
    """
    count, stats = make_tiktoken_list_counter(model)
    library = TiktokenCounter(model)
    if stats.encoding != library.encoding_name:
        raise AssertionError(f"encodings differ: {stats.encoding} vs {library.encoding_name}")
    overhead = count([])
    for i, message in enumerate(messages):
        ours = count([message]) - overhead
        theirs = library.count_message(message)
        if ours != theirs:
            raise AssertionError(
                f"message {i}: benchmark counter {ours} != TiktokenCounter {theirs}"
            )
    if count(list(messages)) != library.count_messages(messages):
        raise AssertionError("list totals differ between the benchmark counter and TiktokenCounter")
    return len(messages)
