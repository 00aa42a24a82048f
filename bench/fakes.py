"""The stand-ins the summaries and agent-turn benchmarks run on instead of a model: the marked
conversation (every message opens with ``m<N>:`` so a summary's inputs can be traced), the fake
summarizer that records which markers it was shown, and a chat model that answers with it.
"""

from __future__ import annotations

import random
import re
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage
from langchain_core.messages.utils import count_tokens_approximately
from langchain_core.outputs import ChatGeneration, ChatResult
from pydantic import ConfigDict

__all__ = ["Conversation", "FakeChatModel", "MarkerTrackingSummarizer", "marked_loop"]


_MARKER = re.compile(r"\bm(\d+):")
_WORD = re.compile(r"[A-Za-z]+")


_CLIP_NOTE = "characters clipped by langmem_ext"


_LEADING_MARKER = re.compile(r"m(\d+):")


def _text(message: BaseMessage) -> str:
    content = message.content
    if isinstance(content, str):
        return content
    parts = []
    for block in content:
        if isinstance(block, str):
            parts.append(block)
        elif isinstance(block, dict) and block.get("type") == "text":
            parts.append(str(block.get("text", "")))
    return " ".join(parts)


def _mark(message: BaseMessage, number: int) -> BaseMessage:
    text = _text(message)
    marked = f"m{number}: {text}" if text else f"m{number}:"
    return message.model_copy(update={"content": marked})


def _marker(message: BaseMessage) -> int | None:
    """The marker at the start of a message's text (clipped copies keep it), else None."""
    match = _LEADING_MARKER.match(_text(message))
    return int(match.group(1)) if match else None


def _markers_shown(message: BaseMessage) -> list[int]:
    """The markers of the history messages ``message`` shows: its own, or, for a tool-round
    digest (langmem_ext ``ToolDigest`` / ``TieredSummary``), every message of the round (each
    text in a digest starts with its message's marker)."""
    from langmem_ext.core.digest import is_digest

    if is_digest(message):
        return [int(n) for n in _LEADING_MARKER.findall(_text(message))]
    number = _marker(message)
    return [] if number is None else [number]


@dataclass(frozen=True)
class Conversation:
    """The loop, marked once: ``messages[:length]`` is the history at each model call."""

    messages: tuple[BaseMessage, ...]
    lengths: tuple[int, ...]

    @property
    def final(self) -> tuple[BaseMessage, ...]:
        return self.messages[: self.lengths[-1]]

    @property
    def body(self) -> tuple[BaseMessage, ...]:
        """The conversation messages (not the system message) of the last model call."""
        return tuple(m for m in self.final if not isinstance(m, SystemMessage))


def marked_loop(n: int, seed: int) -> Conversation:
    """``agent_loop(n, seed)`` with each conversation message copied once with its marker."""
    from langmem_ext.testing import agent_loop

    messages: list[BaseMessage] = []
    lengths: list[int] = []
    number = 0
    for history in agent_loop(n, seed=seed):
        for message in history[len(messages) :]:
            if isinstance(message, SystemMessage):
                messages.append(message)
            else:
                number += 1
                messages.append(_mark(message, number))
        lengths.append(len(messages))
    return Conversation(tuple(messages), tuple(lengths))


_FILLER = (
    "The user and the assistant discussed the order pipeline, the shipment schedule, the "
    "refund queue, database latency and the quarterly budget; decisions were recorded with "
    "their reasons, open questions were listed with owners, and tool results were kept with "
    "their exact figures and identifiers. "
)


def _summary_body(messages: list[BaseMessage], chars: int, seed: int) -> str:
    """About ``chars`` characters of marker-free text made of the input's own words, in short
    sentences drawn without a pattern: what a summary looks like to the summary checks
    (``langmem_ext.summarize.checks``: no degenerate repetition, words shared with the input, not
    an echo of the prompt), so the strategies' folds succeed as with a real model."""
    words = (
        sorted(
            {w for m in messages for w in _WORD.findall(_MARKER.sub(" ", _text(m))) if len(w) > 3}
        )
        or _FILLER.split()
    )
    rng = random.Random(seed)
    sentences: list[str] = []
    size = 0
    while size < chars:
        sentence = " ".join(rng.choice(words) for _ in range(7)).capitalize() + "."
        sentences.append(sentence)
        size += len(sentence) + 1
    return " ".join(sentences)[:chars].rstrip()


def _as_messages(prompt: Any) -> list[BaseMessage]:
    if isinstance(prompt, str):
        return [HumanMessage(prompt)]
    if isinstance(prompt, BaseMessage):
        return [prompt]
    if hasattr(prompt, "to_messages"):  # a PromptValue
        return list(prompt.to_messages())
    return list(prompt)


@dataclass
class MarkerTrackingSummarizer:
    """Deterministic stand-in for a summarizing model that records what it was shown.

    Call it with the prompt (a list of messages, a string or a prompt value). It counts the call,
    its input tokens (``count_tokens_approximately`` of the prompt as messages), collects every
    ``m<N>:`` marker in the input, and returns ``summary_tokens`` tokens of marker-free text.
    ``seconds`` is the time spent inside it, which the benchmark subtracts from the tool's time.
    """

    summary_tokens: int = 800
    calls: int = 0
    input_tokens: int = 0
    seconds: float = 0.0
    seen: Counter[int] = field(default_factory=Counter)
    fresh: list[int] = field(default_factory=list)

    def __call__(self, prompt: Any) -> str:
        start = time.perf_counter()
        messages = _as_messages(prompt)
        self.calls += 1
        self.input_tokens += count_tokens_approximately(messages)
        found = {int(x) for m in messages for x in _MARKER.findall(_text(m))}
        for number in found:
            if number not in self.seen:
                self.fresh.append(number)
            self.seen[number] += 1
        head = f"Summary #{self.calls} of {len(found)} new messages. "
        chars = max(self.summary_tokens * 4 - len(head), 0)
        text = head + _summary_body(messages, chars, self.calls)
        self.seconds += time.perf_counter() - start
        return text

    def take_fresh(self) -> list[int]:
        """Markers seen for the first time since the last call of this method."""
        out, self.fresh = self.fresh, []
        return out


class FakeChatModel(BaseChatModel):
    """A LangChain chat model whose answer comes from a :class:`MarkerTrackingSummarizer`."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    fake: Any

    @property
    def _llm_type(self) -> str:
        return "fake-summarizer"

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: Any = None,
        **kwargs: Any,
    ) -> ChatResult:
        text = self.fake(messages)
        return ChatResult(generations=[ChatGeneration(message=AIMessage(text))])
