"""The state rules: every transition of a ``MemoryState``, in one place.

:data:`TRANSITIONS` lists them as data, each with the fields it may change; every function below
goes through :func:`_move`, which refuses a field its entry does not list, so the table is the
whole story of how a state becomes the next one. The plans, the strategies and the surfaces call
these functions; none of them builds a state from another itself.

* **A plan's bookkeeping**: :func:`after_cut` (the cutting plans: where the history stands and
  where the view starts), :func:`after_fold_plan` (the folding plan: positions, keys, summary,
  the folded part and the tier points), :func:`fold_counted` (one more fold adopted) and
  :func:`with_view` (the figures of the view just chosen).
* **Indexing** (Retrieval): :func:`indexed_through` moves the index watermark.
* **The fold outcome** is a closed set: :class:`Folded`, :class:`FoldFailed`,
  :class:`FoldDeferred`. A driver answers a
  :class:`~langmem_ext.core.fold_config.FoldRequest` with exactly one of them, and
  :func:`health_after` / the fold plan handle each case explicitly (``mypy`` checks the match
  is exhaustive). A background fold whose result is adopted on a later turn
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
  strategy's fields; no surface does. :func:`without_stale_keys` drops a key that points past a
  history that became shorter.

Pure: no I/O, no clock (``now`` is passed in).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, TypeAlias

from langchain_core.messages import BaseMessage
from typing_extensions import assert_never

from langmem_ext.core.identity import KeyChain, key_at
from langmem_ext.core.messages import is_system, pinned_request
from langmem_ext.core.state import MemoryState
from langmem_ext.core.tokens import TokenCounter

__all__ = [
    "TRANSITIONS",
    "FoldDeferred",
    "FoldFailed",
    "FoldOutcome",
    "Folded",
    "RetryPolicy",
    "after_cut",
    "after_fold_plan",
    "fold_counted",
    "health_after",
    "indexed_through",
    "kept_request",
    "may_try_fold",
    "rebase_after_removal",
    "removal_span",
    "removals_for_rewrite",
    "removed_messages",
    "settled",
    "with_view",
    "within_backoff",
    "without_stale_keys",
]

#: every transition, by the name of its function: the fields of the state it may change (all
#: other fields are carried over unchanged). A new rule is a new line here and a function below.
TRANSITIONS: Mapping[str, frozenset[str]] = {
    name: frozenset(fields.split())
    for name, fields in {
        # a cutting plan ran: where the history stands, where the view starts, the digest tier
        "after_cut": "seen seen_tokens seen_key cut_index cut_key digested digests gap_key",
        # the folding plan ran: positions and keys, the summary, the folded part, the tier points
        "after_fold_plan": (
            "seen seen_tokens seen_key cut_index cut_key summary folded folded_key "
            "folded_tokens clipped digested"
        ),
        # a fold was adopted
        "fold_counted": "folds",
        # the view was chosen: what it cost, what its prefix is made of, the digests it shows
        "with_view": "view_tokens prefix_key digests",
        # the outcome of a fold attempt moved the summarizer's health
        "health_after": "health failures retry_at last_error",
        # the clock stepped back: the backoff is brought within reach
        "within_backoff": "retry_at",
        # messages were removed from the front of the stored history (rewrite mode)
        "rebase_after_removal": (
            "seen seen_tokens seen_key folded folded_key folded_tokens cut_index cut_key "
            "clipped digested indexed indexed_key"
        ),
        # a key points past a history that became shorter
        "without_stale_keys": "seen_key cut_key",
        # Retrieval indexed whole turns up to a watermark
        "indexed_through": "indexed indexed_key indexed_turns",
    }.items()
}


def _move(state: MemoryState, transition: str, **changes: Any) -> MemoryState:
    """``state`` with ``changes``, which must be fields ``transition`` lists in
    :data:`TRANSITIONS` (``replace`` validates the new state, as every construction does)."""
    allowed = TRANSITIONS[transition]
    if not changes.keys() <= allowed:  # a subset test builds no set on the way that passes
        extra = changes.keys() - allowed
        raise AssertionError(f"transition {transition!r} may not change {sorted(extra)}")
    return replace(state, **changes)


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
    return _move(state, "within_backoff", retry_at=limit)


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
            return _move(
                state,
                "health_after",
                health="healthy",
                failures=0,
                retry_at=None,
                last_error=None,
            )
        case FoldDeferred():
            return state
        case FoldFailed(error=error, at=at):
            failures = state.failures + 1
            since = now if at is None else max(now, at)
            return _move(
                state,
                "health_after",
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
    return _move(
        state,
        "rebase_after_removal",
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


def without_stale_keys(state: MemoryState, kept_messages: Sequence[BaseMessage]) -> MemoryState:
    """``state`` with ``seen_key`` and ``cut_key`` recomputed over ``kept_messages``, a history
    that became shorter; a key that points past it is dropped (None) rather than kept stale."""
    keys = KeyChain(kept_messages)
    total = len(kept_messages)
    seen, cut = state.seen, state.cut_index
    return _move(
        state,
        "without_stale_keys",
        seen_key=keys(seen - 1) if 0 < seen <= total else None,
        cut_key=keys(cut) if cut is not None and 0 <= cut < total else None,
    )


def _plan_position(
    keys: KeyChain, seen: int, seen_tokens: int, cut_index: int | None
) -> dict[str, Any]:
    """What a plan's next state knows (``seen`` messages costing ``seen_tokens``) and where its
    view starts (``cut_index``; None: no cut), each position with its message's key."""
    return {
        "seen": seen,
        "seen_tokens": seen_tokens,
        "seen_key": keys(seen - 1) if seen else None,
        "cut_index": cut_index,
        "cut_key": keys(cut_index) if cut_index is not None else None,
    }


def after_cut(
    state: MemoryState,
    keys: KeyChain,
    *,
    seen: int,
    seen_tokens: int,
    cut_index: int | None,
    digested: int = 0,
    digests: tuple[tuple[str, str], ...] = (),
    gap_index: int | None = None,
) -> MemoryState:
    """``state`` after a cutting plan: ``seen`` messages (costing ``seen_tokens``) are known, the
    view starts at ``cut_index`` (None: no cut), the digest point and the digests shown are
    those of :func:`~langmem_ext.core.digest.plan_digest` (nothing, for a plain cut), and a gap
    view shows the newest units from ``gap_index`` on (None: not a gap view)."""
    return _move(
        state,
        "after_cut",
        **_plan_position(keys, seen, seen_tokens, cut_index),
        digested=digested,
        digests=digests,
        gap_key=keys(gap_index) if gap_index is not None else None,
    )


def after_fold_plan(
    state: MemoryState,
    keys: KeyChain,
    *,
    seen: int,
    seen_tokens: int,
    sections: Mapping[str, str],
    body_start: int,
    boundary: int,
    folded_tokens: int,
    clipped: int,
    digested: int,
) -> MemoryState:
    """``state`` after the folding plan's fold (or none): ``seen`` messages are known, the
    messages ``[body_start, boundary)`` are folded into ``sections`` (costing
    ``folded_tokens``), a folding strategy has no cut, and the clip and digest points are
    ``clipped`` and ``digested`` messages after ``body_start``. The view's figures come later
    (:func:`with_view`)."""
    return _move(
        state,
        "after_fold_plan",
        **_plan_position(keys, seen, seen_tokens, None),
        summary=tuple(sections.items()),
        folded=boundary - body_start,
        folded_key=keys(boundary - 1) if boundary > body_start else None,
        folded_tokens=folded_tokens,
        clipped=clipped,
        digested=digested,
    )


def fold_counted(state: MemoryState) -> MemoryState:
    """``state`` with one more fold adopted."""
    return _move(state, "fold_counted", folds=state.folds + 1)


def with_view(
    state: MemoryState,
    *,
    view_tokens: int,
    prefix_key: str,
    digests: tuple[tuple[str, str], ...],
) -> MemoryState:
    """``state`` with the figures of the view just chosen: what it cost, the digest of what its
    prefix is made of (the next call compares it), and the digests it shows."""
    return _move(
        state, "with_view", view_tokens=view_tokens, prefix_key=prefix_key, digests=digests
    )


def indexed_through(
    state: MemoryState,
    messages: Sequence[BaseMessage],
    *,
    watermark: int,
    body_start: int,
    turns: int,
) -> MemoryState:
    """``state`` once Retrieval has indexed ``messages`` up to ``watermark`` (``turns`` whole
    turns in all): a watermark at or before ``body_start`` means nothing is indexed yet."""
    indexed = watermark > body_start
    return _move(
        state,
        "indexed_through",
        indexed=watermark if indexed else 0,
        indexed_key=key_at(messages, watermark - 1) if indexed else None,
        indexed_turns=turns,
    )
