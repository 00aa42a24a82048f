"""The drivers: one sync and one async entry point around the same pure plan.

A strategy is a configuration; :class:`Strategy` turns ``apply`` / ``aapply`` into a call of its
plan with a coerced state. Planning is CPU-only for every local counter, so ``aapply`` runs it
inline; when the counter may do network I/O (``is_blocking``, e.g. a chat model's provider-side
token counting), ``aapply`` runs the same plan in a worker thread so the event loop never blocks.
"""

from __future__ import annotations

import asyncio
from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import Any

from langchain_core.messages import BaseMessage

from langmem_ext.result import MemoryResult
from langmem_ext.state import MemoryState
from langmem_ext.tokens import TokenCounter

__all__ = ["StateLike", "Strategy"]

StateLike = MemoryState | dict[str, Any] | None


class Strategy(ABC):
    """Base of every strategy: ``apply`` / ``aapply`` over one pure ``_plan``."""

    counter: TokenCounter

    @abstractmethod
    def _plan(self, messages: Sequence[BaseMessage], state: MemoryState) -> MemoryResult:
        """Pure: the view, next state and report. Never mutates ``messages``."""

    def apply(self, messages: Sequence[BaseMessage], state: StateLike = None) -> MemoryResult:
        """The view the model should see for ``messages``, the state for the next call, a report.

        ``state`` is the ``result.state`` of the previous call (or its ``to_dict()``, as stored in
        a checkpoint), or ``None`` on the first call. Passing it back is what makes a turn cost
        O(new messages) and what keeps a hysteresis cut in place.
        """
        return self._plan(_as_sequence(messages), MemoryState.coerce(state))

    async def aapply(
        self, messages: Sequence[BaseMessage], state: StateLike = None
    ) -> MemoryResult:
        """Async :meth:`apply`. Same plan; off the event loop when the counter does I/O."""
        seq = _as_sequence(messages)
        coerced = MemoryState.coerce(state)
        if getattr(self.counter, "is_blocking", False):
            return await asyncio.to_thread(self._plan, seq, coerced)
        return self._plan(seq, coerced)


def _as_sequence(messages: Sequence[BaseMessage]) -> Sequence[BaseMessage]:
    if isinstance(messages, (list, tuple)):
        return messages
    if isinstance(messages, (str, bytes, BaseMessage)) or not hasattr(messages, "__iter__"):
        raise TypeError(
            f"messages must be a sequence of BaseMessage, got {type(messages).__name__}"
        )
    return list(messages)
