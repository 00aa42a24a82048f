"""The state rules: every transition of a :class:`~langmem_ext.core.state.MemoryState` that is not
plain bookkeeping of one plan, in one place.

* **The fold outcome** is a closed set: :class:`Folded`, :class:`FoldFailed`,
  :class:`FoldDeferred`. A driver answers a :class:`~langmem_ext.core.fold.FoldRequest` with exactly
  one of them, and :func:`health_after` / the fold plan handle each case explicitly (``mypy``
  checks the match is exhaustive). A background fold whose result is adopted on a later turn
  would be one more case here (e.g. ``FoldAdopted(sections, boundary_key)``), not a new path.
* **Health** (``healthy`` → ``retrying`` → ``degraded`` → ``healthy``): :func:`may_try_fold` says
  whether the summarizer may be called now, :func:`health_after` moves ``health``, ``failures``,
  ``retry_at`` (exponential backoff, never sooner than the provider's ``retry_after``) and
  ``last_error`` on an outcome; :func:`within_backoff` keeps ``retry_at`` within ``retry_max``
  of the current clock, however far the clock stepped back.
* **Rebasing after a removal**: when the messages ``[start, stop)`` after the system message are
  removed from the front of the stored history (rewrite mode of the surfaces), the state is
  moved with them by :func:`rebase_after_removal`, so the next turn sees an append-only history.
  :func:`removal_span` says what a rewrite removes; :func:`removals_for_rewrite` puts the two
  together for the surfaces (the ids to remove, and the rebased state). They know every
  strategy's fields; no surface does.

Pure: no I/O, no clock (``now`` is passed in).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TypeAlias

from langchain_core.messages import BaseMessage
from typing_extensions import assert_never

from langmem_ext.core.identity import KeyChain
from langmem_ext.core.messages import is_system, pinned_request
from langmem_ext.core.state import MemoryState
from langmem_ext.core.tokens import TokenCounter

__all__ = [
    "FoldDeferred",
    "FoldFailed",
    "FoldOutcome",
    "Folded",
    "RetryPolicy",
    "health_after",
    "kept_request",
    "may_try_fold",
    "rebase_after_removal",
    "removal_span",
    "removals_for_rewrite",
    "removed_messages",
    "settled",
    "within_backoff",
]

#: how much of a provider's error text the state keeps (it is stored with every checkpoint)
_ERROR_CHARS = 300


@dataclass(frozen=True, slots=True)
class Folded:
    """The summarizer succeeded: ``sections`` (section -> text) is the new running summary.

    ``covers``: how many of the request's messages (its oldest) the summary stands for, when a
    fold started earlier in the background, on fewer messages, is adopted; None: all of them."""

    sections: Mapping[str, str]
    covers: int | None = None


@dataclass(frozen=True, slots=True)
class FoldFailed:
    """The summarizer failed (after its own retries and fallback) with ``error``.

    ``at``: when the failure was known (the strategy's clock), if later than the call's
    ``now``: the backoff counts from then, so an attempt that hung until its timeout does not
    let the very next call try again; None: from ``now``."""

    error: BaseException
    at: float | None = None


@dataclass(frozen=True, slots=True)
class FoldDeferred:
    """The fold was not attempted (a read-only call): nothing changes, nothing counts as a
    failure."""


#: what a driver answers to a fold request: one of a closed set
FoldOutcome: TypeAlias = Folded | FoldFailed | FoldDeferred


def settled(outcome: FoldOutcome) -> FoldOutcome:
    """``outcome``, with a success that carries no summary read as the failure it is."""
    if isinstance(outcome, Folded) and not outcome.sections:
        return FoldFailed(RuntimeError("the summarizer returned no summary"))
    return outcome


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """When a failing summarizer is tried again: ``retry_initial`` seconds after the first
    failure, doubling up to ``retry_max``; ``degraded`` from ``degrade_after`` failures on."""

    degrade_after: int = 3
    retry_initial: float = 2.0
    retry_max: float = 300.0

    def wait(self, failures: int, asked: object = None) -> float:
        """Seconds until the next attempt after ``failures`` consecutive failures; never
        sooner than the provider asked (``asked``: a ``Retry-After`` the Summarizer gave up on)."""
        seconds: float = min(self.retry_initial * 2 ** (failures - 1), self.retry_max)
        if isinstance(asked, (int, float)) and math.isfinite(asked):
            seconds = max(seconds, float(asked))
        return seconds


def within_backoff(state: MemoryState, now: float, policy: RetryPolicy) -> MemoryState:
    """``state`` with ``retry_at`` at most ``policy.retry_max`` after ``now``.

    A clock that stepped back after a failure (NTP, a resumed VM, another worker's clock) would
    otherwise leave ``retry_at`` far ahead of every later ``now``, and the summarizer would not
    be tried again until the clock caught up (hours, or never). ``retry_max`` is the longest
    wait the policy ever means, so a ``retry_at`` beyond it is moved to ``now + retry_max``, and
    stays there (the plan stores it) while the clock runs on. A provider's ``Retry-After``
    longer than ``retry_max`` is honoured by the failing call's ``retry_at`` only: the state
    cannot tell it from a clock that stepped back, so later calls cap it too (set
    ``retry_max`` above the longest ``Retry-After`` to honour)."""
    limit = now + policy.retry_max
    if state.retry_at is None or state.retry_at <= limit:
        return state
    return replace(state, retry_at=limit)


def may_try_fold(state: MemoryState, now: float, policy: RetryPolicy | None = None) -> bool:
    """Whether the summarizer may be called now: it is healthy, or its backoff has passed. With
    ``policy``, the backoff is read as :func:`within_backoff` caps it."""
    if policy is not None:
        state = within_backoff(state, now, policy)
    return state.health == "healthy" or state.retry_at is None or now >= state.retry_at


def health_after(
    state: MemoryState, outcome: FoldOutcome, now: float, policy: RetryPolicy
) -> MemoryState:
    """``state`` with ``health``, ``failures``, ``retry_at`` and ``last_error`` after ``outcome``.

    A success makes the summarizer healthy again; a failure counts, backs off and records the
    error (shortened: it is stored with every checkpoint); a deferred fold changes nothing."""
    match settled(outcome):
        case Folded():
            return replace(state, health="healthy", failures=0, retry_at=None, last_error=None)
        case FoldDeferred():
            return state
        case FoldFailed(error=error, at=at):
            failures = state.failures + 1
            since = now if at is None else max(now, at)
            return replace(
                state,
                health="degraded" if failures >= policy.degrade_after else "retrying",
                failures=failures,
                retry_at=since + policy.wait(failures, getattr(error, "retry_after", None)),
                last_error=f"{type(error).__name__}: {error}"[:_ERROR_CHARS],
            )
        case unknown:  # a new kind of outcome must be handled here (mypy checks it)
            assert_never(unknown)


def removal_span(messages: Sequence[BaseMessage], state: MemoryState) -> range:
    """What a rewrite removes from ``messages`` under ``state``: the messages folded into the
    summary (summarizing strategies), or the messages before the view's cut (trimming
    strategies); an empty range when there is nothing to remove. Starts after the system
    message."""
    body_start = 1 if messages and is_system(messages[0]) else 0
    if state.folded:
        return range(body_start, min(body_start + state.folded, len(messages)))
    if state.cut_index is not None and state.cut_index > body_start:
        return range(body_start, min(state.cut_index, len(messages)))
    return range(body_start, body_start)


def kept_request(messages: Sequence[BaseMessage], span: range) -> int | None:
    """The message of a removal ``span`` that stays: the request of a long agent turn whose
    older rounds were folded (:func:`~langmem_ext.core.messages.pinned_request`). It was folded,
    but every view still shows it, so a rewrite keeps it (as the one folded message left)."""
    if not span:
        return None
    return pinned_request(messages, span.start, span.stop)


def removed_messages(
    messages: Sequence[BaseMessage], state: MemoryState
) -> tuple[list[BaseMessage], list[BaseMessage], BaseMessage | None, int]:
    """What a rewrite under ``state`` does to ``messages``: the messages it removes, the history
    it leaves, the folded request it keeps (or None), and where the removal starts."""
    span = removal_span(messages, state)
    keep = kept_request(messages, span) if state.folded else None
    gone = [messages[i] for i in span if i != keep]
    pinned = messages[keep] if keep is not None else None
    head, tail = messages[: span.start], messages[span.stop :]
    kept = [*head, *([pinned] if pinned is not None else []), *tail]
    return gone, kept, pinned, span.start


def rebase_after_removal(
    state: MemoryState,
    kept_messages: Sequence[BaseMessage],
    *,
    removed_at: int,
    removed_count: int,
    removed_tokens: int,
    kept_folded_tokens: int | None = None,
) -> MemoryState:
    """``state`` as it is once ``removed_count`` messages (costing ``removed_tokens``) at
    ``removed_at`` are gone from the history, ``kept_messages`` being the history after that.

    Every position moves down by ``removed_count``; the folded part is gone (the summary stands
    for it); the clip point and Retrieval's index watermark move with the removed messages (an
    index watermark inside them becomes 0: nothing after them is indexed yet; the turn count
    carries on). Keys are recomputed over ``kept_messages``, since keys of id-less messages are
    chained over their predecessors. ``kept_folded_tokens`` is given when one folded message
    stays (the pinned request, at ``removed_at``): it is then the whole folded part."""
    gone = removed_count
    keys = KeyChain(kept_messages)
    total = len(kept_messages)

    def key_or(index: int | None, fallback: str | None) -> str | None:
        return keys(index) if index is not None and 0 <= index < total else fallback

    seen = state.seen - gone
    cut_index = None if state.cut_index is None else state.cut_index - gone
    indexed = state.indexed - gone if state.indexed > removed_at + gone else 0
    return replace(
        state,
        seen=seen,
        seen_tokens=state.seen_tokens - removed_tokens,
        seen_key=key_or(seen - 1, state.seen_key) if seen > 0 else state.seen_key,
        folded=0 if kept_folded_tokens is None else 1,
        folded_key=None if kept_folded_tokens is None else key_or(removed_at, None),
        folded_tokens=kept_folded_tokens or 0,
        cut_index=cut_index,
        cut_key=key_or(cut_index, state.cut_key),
        clipped=max(state.clipped - gone, 0),
        digested=max(state.digested - gone, 0),
        indexed=indexed,
        indexed_key=key_or(indexed - 1, None) if indexed > 0 else None,
    )


def removals_for_rewrite(
    messages: Sequence[BaseMessage], state: MemoryState, counter: TokenCounter
) -> tuple[list[str], MemoryState]:
    """Rewrite mode of the surfaces: the ids to remove from the stored history, and the state as
    it will be once they are gone (so the next turn sees an append-only history, not a rewritten
    one). Nothing is removed when a message to remove has no id: it could not be removed by id,
    so everything is kept this turn."""
    gone, kept, pinned, removed_at = removed_messages(messages, state)
    if not gone or any(m.id is None for m in gone):
        return [], state
    return [str(m.id) for m in gone], rebase_after_removal(
        state,
        kept,
        removed_at=removed_at,
        removed_count=len(gone),
        removed_tokens=sum(counter.count_message(m) for m in gone),
        kept_folded_tokens=counter.count_message(pinned) if pinned is not None else None,
    )
