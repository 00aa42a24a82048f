"""The trimming strategies: presets of the one cutting plan (:mod:`langmem_ext.plan`)."""

from __future__ import annotations

from collections.abc import Sequence

from langchain_core.messages import BaseMessage

from langmem_ext.engine import Strategy
from langmem_ext.plan import CutConfig, Overflow, StartOn, plan_cut
from langmem_ext.result import MemoryResult
from langmem_ext.state import MemoryState
from langmem_ext.tokens import CounterLike, as_counter

__all__ = ["SlidingWindow", "TokenBudget"]


class TokenBudget(Strategy):
    """The newest whole units of the conversation that fit in ``max_tokens``.

    Args:
        max_tokens: what the whole request may cost: system message, kept messages, the counter's
            per-request overhead and ``reserve_tokens``.
        counter: a :class:`~langmem_ext.tokens.TokenCounter`, a chat model, a callable
            ``(BaseMessage) -> int``, a model or tiktoken encoding name, or ``"approximate"``
            (the default: :class:`~langmem_ext.tokens.ApproximateCounter`).
        safety_margin: fraction of ``max_tokens`` held back for counter error (0.1 = 10%).
        reserve_tokens: room held back for tool schemas and the model's output.
        min_messages: the view holds at least this many messages (whole units); if they cannot
            fit, the overflow policy applies.
        target_tokens: turns on hysteresis. When the view would pass ``max_tokens`` it is cut down
            to ``target_tokens``; that cut is then kept while the view stays under ``max_tokens``,
            so the prompt prefix stays the same and provider prompt caches keep hitting.
        start_on: ``"human"`` (the view's first non-system message is a HumanMessage, as
            Anthropic and Gemini require) or ``"any"`` (any unit boundary).
        keep_system: keep the leading SystemMessage (always first, always counted).
        overflow: when the required messages (the newest human turn, the newest unit,
            ``min_messages``) do not fit: ``"error"`` raises
            :class:`~langmem_ext.errors.ContextOverflowError` with the numbers; ``"clip"`` clips
            the newest human message (then the largest required messages) with a visible marker.

    Example:
        >>> from langchain_core.messages import HumanMessage, AIMessage
        >>> strategy = TokenBudget(max_tokens=30)
        >>> history = [HumanMessage("hello " * 20), AIMessage("hi"), HumanMessage("and now?")]
        >>> result = strategy.apply(history)
        >>> [m.content for m in result.messages]
        ['and now?']
    """

    def __init__(
        self,
        max_tokens: int,
        *,
        counter: CounterLike = None,
        safety_margin: float = 0.0,
        reserve_tokens: int = 0,
        min_messages: int = 1,
        target_tokens: int | None = None,
        start_on: StartOn = "human",
        keep_system: bool = True,
        overflow: Overflow = "error",
    ) -> None:
        self.config = CutConfig(
            max_tokens=max_tokens,
            target_tokens=target_tokens,
            reserve_tokens=reserve_tokens,
            safety_margin=safety_margin,
            min_messages=min_messages,
            start_on=start_on,
            keep_system=keep_system,
            overflow=overflow,
        )
        self.counter = as_counter(counter)

    def __repr__(self) -> str:
        c = self.config
        target = f", target_tokens={c.target_tokens}" if c.target_tokens else ""
        return f"TokenBudget(max_tokens={c.max_tokens}{target}, counter={self.counter!r})"

    def _plan(self, messages: Sequence[BaseMessage], state: MemoryState) -> MemoryResult:
        return plan_cut(messages, state, self.config, self.counter)


class SlidingWindow(Strategy):
    """The last ``max_messages`` messages, moved to unit and human-turn boundaries.

    Counted in messages, not pairs; the pinned system message is not counted. The cut moves
    forward to the next boundary, so the window never splits a tool call from its results and
    (with ``start_on="human"``) always begins on a HumanMessage. The newest human message is
    always kept: when the current turn alone is longer than the window (a long tool loop), the
    view is that human message plus the newest units that fit (``report.gap``).

    ``max_tokens`` optionally adds a token budget on top (same meaning as in
    :class:`TokenBudget`); ``counter`` is used for it and for the report's token figures.

    Example:
        >>> from langchain_core.messages import HumanMessage, AIMessage
        >>> history = [HumanMessage("1"), AIMessage("2"), HumanMessage("3"), AIMessage("4")]
        >>> [m.content for m in SlidingWindow(max_messages=3).apply(history).messages]
        ['3', '4']
    """

    def __init__(
        self,
        max_messages: int = 20,
        *,
        max_tokens: int | None = None,
        counter: CounterLike = None,
        min_messages: int = 1,
        start_on: StartOn = "human",
        keep_system: bool = True,
        overflow: Overflow = "error",
    ) -> None:
        self.config = CutConfig(
            max_tokens=max_tokens,
            max_messages=max_messages,
            min_messages=min_messages,
            start_on=start_on,
            keep_system=keep_system,
            overflow=overflow,
        )
        self.counter = as_counter(counter)

    def __repr__(self) -> str:
        tokens = f", max_tokens={self.config.max_tokens}" if self.config.max_tokens else ""
        return f"SlidingWindow(max_messages={self.config.max_messages}{tokens})"

    def _plan(self, messages: Sequence[BaseMessage], state: MemoryState) -> MemoryResult:
        return plan_cut(messages, state, self.config, self.counter)
