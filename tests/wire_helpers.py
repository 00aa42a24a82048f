"""Building blocks of the wire tests (tests/summarize/test_wire.py and
test_summarizer_provider_faults.py): a ChatOpenAI / ChatAnthropic client pointed at the fake
server of tests/llm_server.py, a Summarizer and a SummaryBuffer with a controlled clock, a
history of ``msg-N``-marked messages, and the nothing-lost check."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from langchain_anthropic import ChatAnthropic
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage
from langchain_openai import ChatOpenAI
from llm_server import MARKER, FakeLLMServer

from langmem_ext import (
    FoldPolicy,
    MemoryResult,
    MemoryState,
    Summarizer,
    SummaryBuffer,
)
from langmem_ext.strategies.engine import Strategy

SUMMARY_BUDGET = 120
T0 = 1_000.0

_FILLER = (
    "we talked about the quarterly budget, the Berlin office move, invoice 4471 and the "
    "database migration schedule for next week"
)


# -- helpers ------------------------------------------------------------------------------------


def make_model(provider: str, server: FakeLLMServer, *, timeout: float = 2) -> BaseChatModel:
    if provider == "openai":
        return ChatOpenAI(
            model="gpt-4o-mini",
            base_url=server.openai_base_url,
            api_key="sk-test",
            max_retries=0,
            timeout=timeout,
        )
    return ChatAnthropic(
        model="claude-3-5-haiku-latest",
        base_url=server.anthropic_base_url,
        api_key="sk-ant-test",
        max_retries=0,
        default_request_timeout=timeout,
    )


def make_summarizer(model: Any, **kwargs: Any) -> Summarizer:
    kwargs.setdefault("max_summary_tokens", SUMMARY_BUDGET)
    return Summarizer(model, max_attempts=3, retry_initial_wait=0.01, retry_max_wait=0.05, **kwargs)


class Clock:
    """A controlled clock for ``clock=``: ``clock.t`` is now."""

    def __init__(self, t: float = T0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


def make_buffer(summarizer: Summarizer, clock: Clock | None = None, **kwargs: Any) -> SummaryBuffer:
    """A SummaryBuffer whose folds run the Summarizer's retries inside the call (unless the
    caller passes ``retry_in_call=False``)."""
    kwargs.setdefault("retry_in_call", True)
    kwargs.setdefault("retry_initial", 10.0)
    kwargs.setdefault("retry_max", 100.0)
    return SummaryBuffer(
        800, summarizer=summarizer, policy=FoldPolicy(clock=clock or Clock(), **kwargs)
    )


def message(i: int) -> BaseMessage:
    """Message i (1-based): odd ones are the user's, even ones the assistant's; about 45 tokens."""
    if i % 2:
        return HumanMessage(f"msg-{i} user: {_FILLER}. What next?", id=f"id-{i}")
    return AIMessage(f"msg-{i} assistant: noted, {_FILLER}.", id=f"id-{i}")


def history(n: int, *, system: bool = True) -> list[BaseMessage]:
    """A system message, then messages msg-1 .. msg-n (n odd: it ends on a human message)."""
    head: list[BaseMessage] = (
        [SystemMessage("You are a helpful assistant.", id="sys")] if system else []
    )
    return head + [message(i) for i in range(1, n + 1)]


def markers(messages: Sequence[BaseMessage]) -> list[str]:
    return [m for msg in messages for m in MARKER.findall(str(msg.content))]


def snapshot(messages: Sequence[BaseMessage]) -> list[dict[str, Any]]:
    return [m.model_dump() for m in messages]


async def run(
    strategy: Strategy, mode: str, messages: Sequence[BaseMessage], state: Any = None
) -> MemoryResult:
    if mode == "sync":
        return strategy.apply(messages, state)
    return await strategy.aapply(messages, state)


def folded_part(messages: Sequence[BaseMessage], state: MemoryState) -> list[BaseMessage]:
    start = 1 if messages and isinstance(messages[0], SystemMessage) else 0
    return list(messages[start : start + state.folded])


def assert_nothing_lost(messages: Sequence[BaseMessage], result: MemoryResult) -> None:
    """Every message is folded (a prefix after the system message) or still in the history, and
    every unfolded message that is not in the view is counted in the not-shown note."""
    body = [m for m in messages if not isinstance(m, SystemMessage)]
    folded = folded_part(messages, result.state)
    assert folded == body[: len(folded)]
    shown = [m for m in result.messages if not isinstance(m, SystemMessage)]
    unfolded = body[len(folded) :]
    assert shown == unfolded[len(unfolded) - len(shown) :]  # the newest unfolded, in order
    assert result.report.not_shown == len(unfolded) - len(shown)


def assert_single_leading_system(result: MemoryResult) -> SystemMessage:
    systems = [m for m in result.messages if isinstance(m, SystemMessage)]
    assert len(systems) == 1
    assert result.messages[0] is systems[0]
    return systems[0]
