"""The count cache every counter here shares, and ``CachedCounter``, the base of every counter.

A counter counts a message *once* per (id, content fingerprint): the strategies ask for the same
recent messages on every turn, and re-encoding them is what makes ``trim_messages`` with an exact
tokenizer quadratic over an agent loop. Changing a message's content changes its fingerprint, so
only that message is recounted. The cache is locked (one counter serves every thread of a
worker), which is why it lives here and not in the pure core.

``count_messages(messages)`` is the sum of the per-message counts plus a fixed per-request
overhead (for OpenAI chat formats, the 3 tokens that prime the reply). ``count_messages([])`` is
therefore the overhead alone, which is how the engine reads it.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Sequence
from typing import NamedTuple

from langchain_core.messages import BaseMessage

from langmem_ext.core.identity import fingerprint
from langmem_ext.core.tokens import checked_count

__all__ = ["CacheInfo", "CachedCounter"]


class CacheInfo(NamedTuple):
    hits: int
    misses: int
    size: int
    maxsize: int


class _CountCache:
    """A thread-safe LRU map from (message id, fingerprint) to a token count, bounded in entries."""

    __slots__ = ("_data", "_lock", "hits", "maxsize", "misses")

    def __init__(self, maxsize: int) -> None:
        if maxsize < 1:
            raise ValueError(f"cache_size must be >= 1, got {maxsize}")
        self._data: OrderedDict[tuple[str | None, int], int] = OrderedDict()
        self._lock = threading.Lock()
        self.maxsize = maxsize
        self.hits = 0
        self.misses = 0

    def get(self, key: tuple[str | None, int]) -> int | None:
        with self._lock:
            value = self._data.get(key)
            if value is None:
                self.misses += 1
                return None
            self._data.move_to_end(key)
            self.hits += 1
            return value

    def put(self, key: tuple[str | None, int], value: int) -> None:
        with self._lock:
            self._data[key] = value
            self._data.move_to_end(key)
            while len(self._data) > self.maxsize:
                self._data.popitem(last=False)

    def clear(self) -> None:
        with self._lock:
            self._data.clear()
            self.hits = self.misses = 0

    def info(self) -> CacheInfo:
        with self._lock:
            return CacheInfo(self.hits, self.misses, len(self._data), self.maxsize)


class CachedCounter:
    """The base of every counter here, and of yours: the count cache, ``count_messages`` and the
    counting contract, so a provider's counter is a small subclass.

    A subclass implements ``count_uncached(message)`` (the tokens of one message, framing
    included; called once per message id and content, the cache does the rest) and
    ``count_text(text)``. It may set ``request_overhead`` (tokens every request costs on top of
    its messages, e.g. the 3 that prime an OpenAI reply) and ``is_blocking = True`` when
    counting does I/O (the async drivers then count in a worker thread).

    >>> from langchain_core.messages import HumanMessage
    >>> class WordCounter(CachedCounter):
    ...     request_overhead = 3
    ...     def count_text(self, text: str) -> int:
    ...         return len(text.split())
    ...     def count_uncached(self, message: BaseMessage) -> int:
    ...         return 4 + self.count_text(str(message.content))
    >>> counter = WordCounter()
    >>> hello = HumanMessage("hello there", id="m1")
    >>> counter.count_messages([hello, hello])
    15
    >>> counter.cache_info().hits  # the second count of the same message was a cache hit
    1
    """

    request_overhead: int = 0
    is_blocking: bool = False

    def __init__(self, *, cache_size: int = 65_536) -> None:
        self._cache = _CountCache(cache_size)

    def count_uncached(self, message: BaseMessage) -> int:
        """Tokens of one message, without the cache (what a subclass implements)."""
        raise NotImplementedError(
            f"{type(self).__name__} must implement count_uncached(message) (see CachedCounter)"
        )

    def count_text(self, text: str) -> int:
        """Tokens of a bare string (what a subclass implements)."""
        raise NotImplementedError(
            f"{type(self).__name__} must implement count_text(text) (see CachedCounter)"
        )

    def count_message(self, message: BaseMessage) -> int:
        key = (message.id, fingerprint(message))
        cached = self._cache.get(key)
        if cached is not None:
            return cached
        value = checked_count(self.count_uncached(message), self, "a message")
        self._cache.put(key, value)
        return value

    def count_messages(self, messages: Sequence[BaseMessage]) -> int:
        return self.request_overhead + sum(self.count_message(m) for m in messages)

    def cache_info(self) -> CacheInfo:
        """Hits, misses and size of this counter's count cache."""
        return self._cache.info()

    def cache_clear(self) -> None:
        self._cache.clear()
