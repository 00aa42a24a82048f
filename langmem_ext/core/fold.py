"""The fold stage: a running summary plus the recent messages verbatim, as a pure plan.

``plan_fold(messages, state, config, counter, now)`` is a generator. It yields at most one
:class:`FoldRequest` (the previous summary and the oldest messages to fold) and receives a
:data:`FoldOutcome`, one of a closed set (``Folded`` / ``FoldFailed`` / ``FoldDeferred``, see
:mod:`langmem_ext.core.transitions`, which also holds the health transition); it returns the
:class:`~langmem_ext.core.result.MemoryResult`. The drivers in :mod:`langmem_ext.strategies.engine`
fulfil the request with the summarizer, sync or async. The plan itself does no I/O and reads no
clock: ``now`` is passed in.

The rules it keeps:

* **Hysteresis.** Nothing is folded while the view fits under the high-water mark
  (``trigger_tokens``). When it would not, the oldest whole units are folded until the view,
  with a full-size summary, fits ``target_tokens``. So folds are rare and the view's prefix (the
  system message with the summary) stays the same between them.
* **Each message is folded exactly once**, and the previous summary is part of every fold's
  input: the folded boundary only moves forward, and only after the summarizer succeeded.
* **Long agent turns fold inside the turn.** When the newest turn alone does not fit (one
  request, then hundreds of tool rounds), the boundary falls between whole tool rounds of that
  turn: the oldest completed rounds (and the request) are folded, the newest rounds stay verbatim,
  and the request is pinned, verbatim, right after the summary in every view
  (:func:`pinned_request`). An in-flight call is never folded.
* **Two triggers.** The view is over the high-water mark when its tokens pass ``trigger_tokens``
  or, with ``trigger_messages``, when more messages than that are unfolded; a fold then goes down
  to ``target_tokens`` (and ``target_messages``). The report says which trigger fired.
* **Failure loses nothing.** If the summarizer fails, nothing is marked folded; the view is the
  last good summary plus the newest messages that fit, with a visible note saying how many earlier
  messages are not shown; health goes to ``retrying`` (then ``degraded`` after
  ``degrade_after`` failures) and the fold is tried again once ``retry_at`` has passed.
* **Overflow terminates.** When the summary, ``min_messages`` and the newest human message cannot
  fit, ``overflow`` decides in a fixed number of steps: ``"truncate_summary"`` clips the summary
  in the view (then the newest human message), ``"truncate_oldest"`` keeps fewer old messages
  (then clips), ``"error"`` raises :class:`~langmem_ext.errors.MemoryBudgetExceeded`.
"""

from __future__ import annotations

from collections.abc import Generator, Mapping, Sequence
from dataclasses import replace

from langchain_core.messages import BaseMessage, HumanMessage, SystemMessage

from langmem_ext.core.fold_config import (
    FoldConfig,
    FoldRequest,
    Trigger,
    render_summary,
)
from langmem_ext.core.fold_turn import FoldTurn
from langmem_ext.core.fold_view import count_not_shown, final_view
from langmem_ext.core.identity import digest
from langmem_ext.core.result import MemoryReport, MemoryResult
from langmem_ext.core.state import MemoryState
from langmem_ext.core.tokens import TokenCounter
from langmem_ext.core.transitions import (
    Folded,
    FoldOutcome,
    after_fold_plan,
    fold_counted,
    health_after,
    may_try_fold,
    settled,
    with_view,
    within_backoff,
)
from langmem_ext.core.walk import Selection
from langmem_ext.errors import MemoryBudgetExceeded

__all__ = ["plan_fold"]


def plan_fold(
    messages: Sequence[BaseMessage],
    state: MemoryState,
    config: FoldConfig,
    counter: TokenCounter,
    now: float,
) -> Generator[FoldRequest, FoldOutcome, MemoryResult]:
    """The view for this turn, folding into the summary when over the high-water mark. Pure.

    The phases: where the history stands (:meth:`FoldTurn.begin`); is it over the trigger, and does
    the TieredSummary clip point move (:meth:`FoldTurn.move_clip_point`); the fold, if the
    summarizer may be tried (:func:`~.transitions.may_try_fold`), and the health after
    its outcome (:func:`~.transitions.health_after`); the view, with the not-shown note
    and the overflow policy (:func:`final_view`); the state and report (:func:`_fold_result`).
    A ``retry_at`` further than ``retry_max`` ahead of ``now`` (the clock stepped back since the
    failure) is brought back first (:func:`~langmem_ext.core.transitions.within_backoff`)."""
    state = within_backoff(state, now, config.retry_policy)
    turn = FoldTurn.begin(messages, state, config, counter)
    clip_moved, trigger = turn.move_clip_point(state.view_tokens, turn.over_trigger())
    after, folded_now = state, 0
    early = (
        trigger is None and config.prefetch_tokens is not None and turn.past(config.prefetch_tokens)
    )
    if (trigger is not None or early) and may_try_fold(state, now):
        # background mode folds to one depth, early or not: a running fold's messages then
        # always lead the crossing call's request (adopted, not folded twice)
        deep = config.prefetch_tokens is not None
        request = turn.fold_request(early=deep)
        if request is not None:
            outcome = settled((yield replace(request, background=early)))
            after = health_after(state, outcome, now, config.retry_policy)
            if isinstance(outcome, Folded):
                folded_now = _adopt(turn, request, outcome)
                after = fold_counted(after)
    turn.clip_at = max(turn.clip_at, turn.boundary)
    turn.digest_at = max(turn.digest_at, turn.boundary) if config.digest is not None else 0
    next_state = _bookkeeping(turn, after)
    try:
        chosen, human_summary, shown_sections = final_view(turn, next_state)
    except MemoryBudgetExceeded as error:
        # a fold that just succeeded must not be lost with the turn: the caller stores this
        error.state = next_state
        raise
    return _fold_result(
        turn,
        state,
        next_state,
        chosen,
        human_summary,
        shown_sections,
        folded_now,
        clip_moved,
        trigger,
    )


def _adopt(turn: FoldTurn, request: FoldRequest, outcome: Folded) -> int:
    """Mark the messages ``outcome`` stands for folded (all of ``request``'s, or the oldest
    ``covers`` of them: a background fold started on fewer); how many."""
    if outcome.covers is not None:
        if not 0 < outcome.covers <= len(request.messages):
            raise RuntimeError(
                f"a fold covering {outcome.covers} of {len(request.messages)} messages cannot "
                "be adopted"
            )
        request = replace(request, messages=request.messages[: outcome.covers])
    turn.adopt(request, outcome.sections)
    return len(request.messages)


def _bookkeeping(turn: FoldTurn, state: MemoryState) -> MemoryState:
    """The next state's positions, keys and summary (the view's figures come later)."""
    n, body_start, boundary, keys = turn.n, turn.body_start, turn.boundary, turn.keys
    return after_fold_plan(
        state,
        keys,
        seen=n,
        seen_tokens=turn.all_tokens,
        sections=turn.sections,
        body_start=body_start,
        boundary=boundary,
        folded_tokens=turn.folded_tokens,
        clipped=max(turn.clip_at - body_start, 0) if turn.config.clip_tokens is not None else 0,
        digested=max(turn.digest_at - body_start, 0) if turn.config.digest is not None else 0,
    )


def _fold_result(
    turn: FoldTurn,
    state: MemoryState,
    next_state: MemoryState,
    chosen: Selection,
    human_summary: HumanMessage | None,
    shown_sections: Mapping[str, str],
    folded_now: int,
    clip_moved: bool,
    trigger: Trigger | None,
) -> MemoryResult:
    """The view (with the summary message placed), the next state and the report."""
    n, counter = turn.n, turn.counter
    view = list(chosen.view)
    if human_summary is not None:
        view.insert(1 if view and isinstance(view[0], SystemMessage) else 0, human_summary)
    not_shown = count_not_shown(chosen, turn)
    summary_tokens = (
        counter.count_text(render_summary(shown_sections)) if any(shown_sections.values()) else 0
    )
    tokens_after = counter.count_messages(view) if human_summary is not None else chosen.tokens
    prefix_key = _prefix_key(turn, view, chosen, human_summary, not_shown)
    digests = turn.tier1().shown_in(view)
    next_state = with_view(
        next_state, view_tokens=tokens_after, prefix_key=prefix_key, digests=digests
    )
    report = MemoryReport(
        tokens_before=counter.count_messages(()) + turn.all_tokens,
        tokens_after=tokens_after,
        messages_before=n,
        messages_after=len(view),
        messages_dropped=n - chosen.kept - (1 if turn.system is not None else 0),
        budget=turn.config.level(turn.config.max_tokens),
        clipped=chosen.clipped,
        repaired=chosen.repaired,
        prefix_kept=(
            state.seen > 0
            and folded_now == 0
            and not turn.rewritten
            and not chosen.clipped
            and not clip_moved
            and not_shown == 0
            and prefix_key == state.prefix_key
        ),
        gap=chosen.gap,
        history_rewritten=turn.rewritten,
        folded=folded_now,
        not_shown=not_shown,
        summary_tokens=summary_tokens,
        health=next_state.health,
        trigger=trigger,
        digested=len(digests),
    )
    return MemoryResult(view, next_state, report)


def _prefix_key(
    turn: FoldTurn,
    view: Sequence[BaseMessage],
    chosen: Selection,
    human_summary: HumanMessage | None,
    not_shown: int,
) -> str:
    """What the view's prefix is made of: if it is the same as on the last turn and nothing was
    folded, the last view is a prefix of this one (the history only grew at the end)."""
    n = turn.n
    first = chosen.first if chosen.first is not None else n
    return digest(
        view[0].content if view else "",
        str(human_summary.content) if human_summary is not None else "",
        turn.keys(first) if first < n else "",
        not_shown,
        chosen.clipped,
    )
