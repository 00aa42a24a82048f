"""Exceptions. Each one names the problem and carries the numbers as attributes."""

from __future__ import annotations

from typing import Any

__all__ = [
    "ContextOverflowError",
    "InvalidHistoryError",
    "InvalidStateError",
    "LangmemExtError",
    "MemoryBudgetExceeded",
    "TokenizerUnavailableError",
]


class LangmemExtError(Exception):
    """Base class of every exception this package raises on purpose."""


class TokenizerUnavailableError(LangmemExtError, RuntimeError):
    """A tokenizer could not be loaded (for tiktoken: usually no network and no cached files)."""


class InvalidStateError(LangmemExtError, ValueError):
    """A :class:`~langmem_ext.state.MemoryState` (or the dict it is read from) is not valid.

    Raised instead of reading a corrupted or foreign state silently: a wrong guess could fold,
    drop or re-summarize the wrong messages. ``field`` names the offending field (``None`` when
    the value as a whole is wrong) and ``value`` is what was found there.
    """

    def __init__(self, message: str, *, field: str | None = None, value: Any = None) -> None:
        super().__init__(message)
        self.field = field
        self.value = value


class InvalidHistoryError(LangmemExtError, ValueError):
    """A message history holds something a strategy must never send to a model.

    For example a ``RemoveMessage``: it is an instruction to LangGraph's ``add_messages``
    reducer, not a message, and must be applied before a strategy reads the history. ``index``
    is its position in the history and ``message_id`` its id.
    """

    def __init__(self, message: str, *, index: int, message_id: str | None = None) -> None:
        super().__init__(message)
        self.index = index
        self.message_id = message_id


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
