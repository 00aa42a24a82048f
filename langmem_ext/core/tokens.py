"""Token accounting as the core sees it: the counting protocol and the check of a count.

The pure core only *uses* a counter, passed in by its caller; it never builds, caches or loads
one. The counters themselves (the locked count cache, tiktoken, the chat-model delegate, and
``as_counter``, which turns a name or a model into a counter) are in :mod:`langmem_ext.counting`.

``count_messages(messages)`` is the sum of the per-message counts plus a fixed per-request
overhead (for OpenAI chat formats, the 3 tokens that prime the reply). ``count_messages([])`` is
therefore the overhead alone, which is how the engine reads it.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Sequence
from typing import Protocol, runtime_checkable

from langchain_core.messages import BaseMessage

__all__ = ["TokenCounter", "checked_count"]


def checked_count(value: object, counter: object, what: str) -> int:
    """A counter's answer as a token count, or a clear error naming the counter and the value.

    A count is a non-negative integer (``numpy.int64`` and other integral types included). A
    finite non-negative float is rounded *up* (``12.5`` → 13: a budget is never undercounted).
    Everything else is refused rather than coerced: ``True`` (``int(True)`` is 1), ``"12"``
    (a string is not a count), ``None``, NaN and infinity (``TypeError`` for the wrong type,
    ``ValueError`` for a wrong number), so a broken counter fails where it answered, not as a
    raw ``int()`` error or a silently wrong budget.

    >>> checked_count(12, "words", "a message"), checked_count(2.5, "words", "a text")
    (12, 3)
    >>> checked_count(True, "words", "a message")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    TypeError: token counter 'words' counted True tokens for a message: ... not bool
    """
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(
            f"token counter {counter!r} counted {value!r} tokens for {what}: a token count must "
            f"be a non-negative int, not {type(value).__name__}"
        )
    if not isinstance(value, numbers.Integral) and not math.isfinite(value):
        raise ValueError(
            f"token counter {counter!r} counted {value!r} tokens for {what}: a token count must "
            f"be a finite non-negative number"
        )
    if value < 0:
        raise ValueError(
            f"token counter {counter!r} counted {value!r} tokens for {what}: a token count must "
            f"not be negative"
        )
    if isinstance(value, numbers.Integral):
        return int(value)
    return math.ceil(float(value))


@runtime_checkable
class TokenCounter(Protocol):
    """What the strategies need from a token counter.

    ``is_blocking`` is True when counting may do network or disk I/O (a provider's count-tokens
    endpoint): the async drivers then count in a worker thread instead of on the event loop.
    The easiest way to write one is a small subclass of
    :class:`~langmem_ext.counting.cache.CachedCounter`, which supplies ``is_blocking = False``,
    the count cache and ``count_messages``. (A duck-typed counter written before
    ``is_blocking`` existed is still accepted by :func:`~langmem_ext.counting.resolve.as_counter`
    and read as non-blocking.)
    """

    #: counting may block on I/O: async drivers run it in a worker thread
    is_blocking: bool

    def count_message(self, message: BaseMessage) -> int:
        """Tokens one message costs inside a request (its framing included)."""
        ...

    def count_messages(self, messages: Sequence[BaseMessage]) -> int:
        """Tokens of a whole request: the per-message counts plus any fixed overhead."""
        ...

    def count_text(self, text: str) -> int:
        """Tokens of a bare string (no message framing)."""
        ...
