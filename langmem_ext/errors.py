"""Exceptions. Each one names the problem and carries the numbers as attributes."""

from __future__ import annotations

from typing import Any

__all__ = [
    "ContextOverflowError",
    "LangmemExtError",
    "MemoryBudgetExceeded",
    "TokenizerUnavailableError",
]


class LangmemExtError(Exception):
    """Base class of every exception this package raises on purpose."""


class TokenizerUnavailableError(LangmemExtError, RuntimeError):
    """A tokenizer could not be loaded (for tiktoken: usually no network and no cached files)."""


class ContextOverflowError(LangmemExtError, ValueError):
    """The messages that must be in the view do not fit in the budget.

    Raised with ``overflow="error"`` (the default) when, for example, the newest human message
    alone is larger than the budget. ``needed`` is what the required messages cost, ``available``
    what the budget leaves for them after the system message, the reserve, the safety margin and
    the per-request overhead.
    """

    def __init__(
        self,
        message: str,
        *,
        needed: int,
        available: int,
        max_tokens: int,
        reserve_tokens: int = 0,
        system_tokens: int = 0,
    ) -> None:
        super().__init__(message)
        self.needed = needed
        self.available = available
        self.max_tokens = max_tokens
        self.reserve_tokens = reserve_tokens
        self.system_tokens = system_tokens


class MemoryBudgetExceeded(ContextOverflowError):
    """The summary, ``min_messages`` and the newest human message cannot fit together.

    Raised by the summarizing strategies with ``overflow="error"``; the numbers are those of
    :class:`ContextOverflowError`, and ``summary_tokens`` is what the summary costs.
    """

    def __init__(self, message: str, *, summary_tokens: int = 0, **numbers: int) -> None:
        super().__init__(message, **numbers)
        self.summary_tokens = summary_tokens
        #: the MemoryState after this turn (a fold may have succeeded before the view overflowed):
        #: store it like ``result.state`` so the summarizer's work is not lost
        self.state: Any = None
