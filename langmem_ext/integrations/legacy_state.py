"""The legacy memory's state and its pruning plan: pure functions, no I/O.

:class:`SummaryBufferState` is what the legacy memory
(:class:`~langmem_ext.integrations.legacy.ConversationSummaryBufferMemory`) remembers besides the
history: the summary and the *watermark* (how many messages are pruned and the position-safe key
of the last one). The functions decide where the buffer starts in a history that may have been
rewritten underneath the memory (:func:`resolve_start`), where the watermark moves to
(:func:`watermark`), how many messages the legacy rule prunes (:func:`plan_prune`) and in which
batches they are summarized (:func:`batches`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from langchain_core.messages import BaseMessage

from langmem_ext.core.checks import is_int
from langmem_ext.core.identity import KeyChain, stable_key
from langmem_ext.errors import StoredStateError

__all__ = [
    "STATE_VERSION",
    "WINDOW",
    "SummaryBufferState",
    "batches",
    "plan_prune",
    "resolve_start",
    "watermark",
]

#: 2: ``last_pruned_key`` is position-safe (``_identity.key_at``) and ``last_pruned_window``
#: holds the content keys of the last pruned messages; 1: ``last_pruned_key`` was a content key
STATE_VERSION = 2
#: how many of the last pruned messages' content keys the watermark keeps, to find the last one
#: again (among repeated texts) when messages before it were deleted
WINDOW = 8


@dataclass(frozen=True, slots=True)
class SummaryBufferState:
    """What the memory remembers besides the history: JSON-serializable, versioned.

    ``pruned`` messages at the start of the history are folded into ``summary``;
    ``last_pruned_key`` is the position-safe key of the last of them (its id, or a digest chained
    over the id-less messages up to it: see ``langmem_ext.core.identity.key_at``), which is how a
    history rewritten underneath us is noticed. ``last_pruned_window`` holds the content keys
    of the last (up to ``WINDOW``) pruned messages, oldest first: when messages before the
    watermark were deleted, the chained key changes, and the window finds the last pruned
    message again by its content *and* the messages before it (a repeated "Sure." alone is
    not enough). Version 1 states (a content key, no window) are read and upgraded.
    """

    summary: str = ""
    pruned: int = 0
    last_pruned_key: str | None = None
    last_pruned_window: tuple[str, ...] = ()
    version: int = STATE_VERSION

    def to_dict(self) -> dict[str, Any]:
        return {
            "version": self.version,
            "summary": self.summary,
            "pruned": self.pruned,
            "last_pruned_key": self.last_pruned_key,
            "last_pruned_window": list(self.last_pruned_window),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], *, where: str = "state") -> SummaryBufferState:
        version = data.get("version")
        if not isinstance(version, int) or version < 1:
            raise StoredStateError(
                f"{where} is not a ConversationSummaryBufferMemory state: {data!r}"
            )
        if version > STATE_VERSION:
            raise StoredStateError(
                f"{where} was written by a newer langmem_ext (state version {version}, this one "
                f"reads up to {STATE_VERSION}); upgrade langmem_ext"
            )
        summary, pruned, key = data.get("summary"), data.get("pruned"), data.get("last_pruned_key")
        window = data.get("last_pruned_window", [])
        if (
            not isinstance(summary, str)
            or not is_int(pruned, 0)
            or not (key is None or isinstance(key, str))
            or (pruned > 0 and key is None)
            or not isinstance(window, list)
            or not all(isinstance(k, str) for k in window)
        ):
            raise StoredStateError(
                f"{where} is not a valid ConversationSummaryBufferMemory state: {data!r}"
            )
        return cls(
            summary=summary,
            pruned=pruned,
            last_pruned_key=key,
            last_pruned_window=tuple(window),
            version=version,
        )


# --------------------------------------------------------------------------------------------
# the plan: pure functions used by the one flow of each operation (see the memory's "flows")
#
# Why not the shared strategy engine (``engine.Strategy`` and ``fold.plan_fold``): parity with
# langchain-classic is the contract here, and the legacy rule differs from the engine's in every
# decision that shows: it pops single messages (no tool-call units, no pinned newest human
# message, no hysteresis), counts ``max_token_limit`` on the buffer only (the summary is not in
# the budget), summarizes through the overridable ``predict_new_summary`` with the legacy prompt
# into one string (not summary sections), and keeps its own versioned state (the watermark with
# its window, not a ``MemoryState``). What is shared is the machinery around it: the flow
# drivers and the ``StateStore`` of ``langmem_ext.integrations._store``, the position-safe keys of
# ``langmem_ext.core.identity``, and the token counters.


def _window(messages: Sequence[BaseMessage], end: int) -> tuple[str, ...]:
    """The content keys of the (up to ``WINDOW``) messages before ``end``, oldest first."""
    return tuple(stable_key(m) for m in messages[max(0, end - WINDOW) : end])


def watermark(
    state: SummaryBufferState, messages: Sequence[BaseMessage], end: int
) -> SummaryBufferState:
    """``state`` with the watermark after ``messages[:end]`` (current version)."""
    if end == 0:
        return replace(
            state, pruned=0, last_pruned_key=None, last_pruned_window=(), version=STATE_VERSION
        )
    return replace(
        state,
        pruned=end,
        last_pruned_key=KeyChain(messages)(end - 1),
        last_pruned_window=_window(messages, end),
        version=STATE_VERSION,
    )


def resolve_start(messages: Sequence[BaseMessage], state: SummaryBufferState) -> tuple[int, bool]:
    """Where the buffer starts in ``messages``, and whether the history was rewritten.

    The watermark holds when the message at ``pruned - 1`` has the recorded position-safe key:
    the same message after the same history, however often its text repeats. Otherwise the
    history was rewritten underneath us and the last pruned message is searched for:

    1. by its position-safe key (messages after it changed, or the chain restarts at an id
       after the change): exact;
    2. by content, among the positions whose preceding messages match the stored window best
       (messages before it were deleted, which changes every chained key after them). A tie
       between equally good positions (a history of identical turns) resolves to the earliest:
       a few messages may be summarized again, but none is skipped.

    If it is gone, the buffer is the whole history.
    """
    n, key = state.pruned, state.last_pruned_key
    if n == 0 or key is None:
        return 0, False
    if state.version < 2:  # a content key (version 1): the best a v1 state allows
        if n <= len(messages) and stable_key(messages[n - 1]) == key:
            return n, False
        return _by_window(messages, (key,), n)
    keys = KeyChain(messages)
    if n <= len(messages) and keys(n - 1) == key:
        return n, False
    nearest = sorted(range(len(messages)), key=lambda i: (abs(i - (n - 1)), i))
    for i in nearest:
        if keys(i) == key:
            return i + 1, True
    return _by_window(messages, state.last_pruned_window, n)


def _by_window(messages: Sequence[BaseMessage], window: Sequence[str], n: int) -> tuple[int, bool]:
    if not window:
        return 0, True
    content = [stable_key(m) for m in messages]
    best, found = 0, 0
    for i, k in enumerate(content):
        if k != window[-1]:
            continue
        match = 1
        while match < len(window) and i - match >= 0 and content[i - match] == window[-1 - match]:
            match += 1
        if match > best:  # strictly better only: ties keep the earliest
            best, found = match, i + 1
    return found, True


def batches(counts: Sequence[int], batch_tokens: int | None) -> list[int]:
    """Sizes of the consecutive groups the pruned messages are summarized in.

    One group (one summarizer call, as legacy) unless ``batch_tokens`` is set; then each group's
    messages cost at most ``batch_tokens`` (a single larger message is a group of its own).
    """
    if batch_tokens is None:
        return [len(counts)] if counts else []
    sizes: list[int] = []
    size = total = 0
    for count in counts:
        if size and total + count > batch_tokens:
            sizes.append(size)
            size = total = 0
        size += 1
        total += count
    if size:
        sizes.append(size)
    return sizes


def plan_prune(counts: Sequence[int], overhead: int, max_token_limit: int) -> int:
    """How many of the oldest buffer messages to prune: the legacy rule, on cached counts.

    Legacy: while ``count(buffer) > max_token_limit``, pop the oldest message and recount. With
    ``count(buffer) = overhead + sum(counts)`` the decisions are the same, from one count per
    message. Where legacy would pop from an empty list (``IndexError``), everything is pruned.
    """
    total = overhead + sum(counts)
    k = 0
    while total > max_token_limit and k < len(counts):
        total -= counts[k]
        k += 1
    return k
