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

import math
from collections.abc import Callable, Generator, Mapping, Sequence
from dataclasses import dataclass, field, fields, replace
from typing import Any, Literal

from langchain_core.messages import BaseMessage, HumanMessage, SystemMessage

from langmem_ext.core.digest import DigestSettings, Tier1, digest_point, verbatim_tokens
from langmem_ext.core.fences import neutralize
from langmem_ext.core.identity import KeyChain, digest
from langmem_ext.core.messages import (
    Unit,
    clip_chars,
    ensure_message,
    is_human,
    iter_units_reverse,
    pinned_request,
)
from langmem_ext.core.plan import (
    CutConfig,
    CutTurn,
    Selection,
    ViewLimits,
    _Walk,
    leads,
    require_int,
    select_view,
)
from langmem_ext.core.result import MemoryReport, MemoryResult
from langmem_ext.core.state import Health, MemoryState
from langmem_ext.core.text import longest_prefix_within
from langmem_ext.core.tokens import TokenCounter
from langmem_ext.core.transitions import (
    Folded,
    FoldOutcome,
    RetryPolicy,
    health_after,
    may_try_fold,
    settled,
    within_backoff,
)
from langmem_ext.errors import ContextOverflowError, MemoryBudgetExceeded

__all__ = [
    "FoldConfig",
    "FoldOutcome",
    "FoldRequest",
    "Placement",
    "SummaryOverflow",
    "Trigger",
    "plan_fold",
    "render_summary",
]

SummaryOverflow = Literal["truncate_summary", "truncate_oldest", "error"]
#: which high-water mark sent a turn into a fold
Trigger = Literal["tokens", "messages"]
Placement = Literal["system", "human"]

_OPEN = "<conversation_summary>"
_CLOSE = "</conversation_summary>"
_SUMMARY_ID = "langmem-ext-summary"
_TRUNCATED = "\n[... summary shortened by langmem_ext to fit the context budget]"


@dataclass(frozen=True, slots=True)
class FoldRequest:
    """Fold ``messages`` (originals, oldest first) into ``previous`` (section -> text).

    ``background``: the view is past ``prefetch_tokens`` but not over the trigger: the fold may
    run off the critical path (the driver starts it and answers ``FoldDeferred`` until it has
    finished, then ``Folded`` with ``covers``); nothing has to be folded on this call."""

    previous: Mapping[str, str]
    messages: tuple[BaseMessage, ...]
    background: bool = False
    #: a fold due now (not ``background``) must cover at least this many of ``messages`` for
    #: the view to fit under the trigger: a background fold of fewer is not adopted for it
    least: int = 0


@dataclass(frozen=True, slots=True, kw_only=True)
class FoldConfig(ViewLimits):
    """The knobs of the fold stage (the strategies fill them in; see strategies.py). The view's
    limits (reserve, safety margin, ``min_messages``, ``start_on``, ``keep_system``) are
    :class:`~langmem_ext.core.plan.ViewLimits`, shared with the cutting stage's
    :class:`~langmem_ext.core.plan.CutConfig`."""

    max_tokens: int
    trigger_tokens: int
    target_tokens: int
    max_summary_tokens: int
    overflow: SummaryOverflow = "truncate_summary"
    placement: Placement = "system"
    #: TieredSummary: clip large bodies of older messages once the view passes this
    clip_tokens: int | None = None
    truncate_chars: int = 2_000
    #: TieredSummary: when the view passes the trigger, completed tool rounds older than the
    #: newest ``keep_rounds`` are shown as digests first (:mod:`langmem_ext.core.digest`), and
    #: a fold follows only if that is not enough; None: no digests
    digest: DigestSettings | None = None
    #: fold when more than this many messages are unfolded (None: the token trigger only)
    trigger_messages: int | None = None
    #: background compaction: past this level (below the trigger) the fold is asked for as a
    #: background request, so it is usually done before the trigger is crossed; None: off
    prefetch_tokens: int | None = None
    #: a fold keeps at most this many unfolded messages (with ``trigger_messages``)
    target_messages: int | None = None
    degrade_after: int = 3
    retry_initial: float = 2.0
    retry_max: float = 300.0

    def __post_init__(self) -> None:
        for name in ("max_tokens", "trigger_tokens", "target_tokens", "max_summary_tokens"):
            require_int(name, getattr(self, name), 1)
        for name in ("degrade_after", "truncate_chars"):
            require_int(name, getattr(self, name), 1)
        if self.clip_tokens is not None:
            require_int("clip_tokens", self.clip_tokens, 1)
        if self.digest is not None and self.clip_tokens is None:
            raise ValueError("digest needs clip_tokens (the tier at which rounds are digested)")
        self._check_message_triggers()
        for name in ("retry_initial", "retry_max"):
            value = getattr(self, name)
            if (
                not isinstance(value, (int, float))
                or isinstance(value, bool)
                or not math.isfinite(value)
                or value <= 0
            ):
                raise ValueError(
                    f"{name} must be a finite number of seconds > 0, got {value!r} (it sets when "
                    "a failed summarizer is tried again)"
                )
        self._check_limits(self.max_tokens)
        if not 0 < self.target_tokens <= self.trigger_tokens <= self.max_tokens:
            raise ValueError(
                f"need 0 < target_tokens ({self.target_tokens:,}) <= trigger ("
                f"{self.trigger_tokens:,}) <= max_tokens ({self.max_tokens:,})"
            )
        if self.prefetch_tokens is not None:
            require_int("prefetch_tokens", self.prefetch_tokens, 1)
            if not self.target_tokens < self.prefetch_tokens < self.trigger_tokens:
                raise ValueError(
                    f"prefetch_tokens ({self.prefetch_tokens:,}) must be between target_tokens "
                    f"({self.target_tokens:,}) and the fold trigger ({self.trigger_tokens:,}): "
                    "a background fold starts past it, before the trigger is crossed"
                )
        if self.max_summary_tokens >= self.target_tokens:
            raise ValueError(
                f"max_summary_tokens ({self.max_summary_tokens:,}) must be below the level a "
                f"fold goes down to ({self.target_tokens:,}), or a fold could never make room"
            )
        if self.overflow not in ("truncate_summary", "truncate_oldest", "error"):
            raise ValueError(
                "overflow must be 'truncate_summary', 'truncate_oldest' or 'error', "
                f"got {self.overflow!r}"
            )
        if self.placement not in ("system", "human"):
            raise ValueError(f"placement must be 'system' or 'human', got {self.placement!r}")

    def _check_message_triggers(self) -> None:
        if self.trigger_messages is None:
            if self.target_messages is not None:
                raise ValueError("target_messages needs trigger_messages (max_messages=)")
            return
        require_int("trigger_messages", self.trigger_messages, 2, "(max_messages)")
        target = self.target_messages
        if target is None:
            raise ValueError("trigger_messages needs target_messages (keep_messages=)")
        require_int("target_messages", target, 1, "(keep_messages)")
        if not max(self.min_messages, 1) <= target < self.trigger_messages:
            raise ValueError(
                f"need min_messages ({self.min_messages}) <= keep_messages ({target}) < "
                f"max_messages ({self.trigger_messages}): a fold goes down to keep_messages"
            )

    @property
    def retry_policy(self) -> RetryPolicy:
        """When a failing summarizer is tried again (see :mod:`langmem_ext.core.transitions`)."""
        return RetryPolicy(self.degrade_after, self.retry_initial, self.retry_max)

    @property
    def digest_slack(self) -> int:
        """Tokens of verbatim rounds after the digest point before it may move again: the gap
        between the two tiers. The point moves only when the view passes the trigger (in place
        of a fold), and then in batches, so the prefix holds longer."""
        return max(self.trigger_tokens - (self.clip_tokens or 0), 0)

    def cut(self, **changes: Any) -> CutConfig:
        """The cutting stage's config for the view under ``max_tokens`` (the shared limits as
        they are here, then ``changes``)."""
        limits = {f.name: getattr(self, f.name) for f in fields(ViewLimits)}
        limits["clip_request_last"] = True  # a huge tool result is clipped before the request
        return CutConfig(max_tokens=self.max_tokens, **{**limits, **changes})


def render_summary(sections: Mapping[str, str], note: str = "") -> str:
    """The summary block as it is placed in the view: fenced, labelled, one part per section."""
    # a summary is model output about untrusted text: it must not be able to close the fence
    # (a "</conversation_summary>" in it would put what follows outside, as an instruction)
    parts = [neutralize(text) for text in sections.values() if text]
    if len(sections) > 1:
        parts = [
            f"## {neutralize(name)}\n{neutralize(text)}" for name, text in sections.items() if text
        ]
    body = "\n\n".join(parts)
    lines = [_OPEN, "Summary of the earlier part of this conversation:"]
    if body:
        lines.append(body)
    if note:
        lines.append(note)
    lines.append(_CLOSE)
    return "\n".join(lines)


def _not_shown_note(count: int, health: Health, error: str | None) -> str:
    # the error itself stays in the state and the report: provider error text is not something
    # to put in front of the main model
    return (
        f"[langmem_ext: {count} earlier message(s) of this conversation are not shown and not yet "
        f"summarized; the summarizer is {health}.]"
    )


def _boundary(
    messages: Sequence[BaseMessage], body_start: int, state: MemoryState, keys: KeyChain
) -> tuple[int, bool]:
    """Index of the first unfolded message, and whether it had to be searched for.

    Keys are position-safe (:func:`~langmem_ext.core.identity.key_at`): an id-less "Sure." is found
    again only after the same history, never as another "Sure." further on."""
    if state.folded <= 0 or state.folded_key is None:
        return body_start, False
    last = body_start + state.folded - 1
    if last < len(messages) and keys(last) == state.folded_key:
        return last + 1, False
    for j in range(len(messages) - 1, body_start - 1, -1):  # rewritten: O(history), once
        if keys(j) == state.folded_key:
            return j + 1, True
    return body_start, True  # the folded messages were removed: the summary stands for them


def _unfolded_kept(chosen: Selection, b: int, n: int) -> int:
    """How many of the view's input messages are unfolded (at or after ``b``), with those a repair
    removed (an orphan result is never shown, and never missing). Only differs from
    ``chosen.represented`` when the view holds the pinned request (see :func:`pinned_request`): a
    contiguous view is a suffix of the history, a gap view its head message plus a suffix."""
    first = chosen.first
    if first is None or first >= b:
        return chosen.represented
    suffix = chosen.represented - (1 if chosen.gap else 0)
    return min(suffix, n - b)


def _fold_boundary(
    turn: _Turn,
    room: int,
    shown: Callable[[Unit], Unit] | None,
    *,
    in_turn: bool = True,
    hard_room: int | None = None,
) -> int:
    """Where the unfolded part should start after a fold: the oldest unit that may lead a view
    such that everything from it costs at most ``room`` (and holds at most ``target_messages``),
    but never inside the newest human turn or the newest ``min_messages`` messages; returns the
    current boundary when there is nothing to fold.

    When the newest turn alone does not fit (a long agent turn) and ``in_turn``, the boundary
    falls between its whole tool rounds instead (:func:`_in_turn_boundary`). When even the
    newest ``min_messages`` of the turn cannot fit ``hard_room`` (the whole budget; a huge tool
    result), they could only be hidden by the overflow policy: every round but the newest unit is
    folded instead, so nothing is hidden unread."""
    config = turn.config
    units = iter_units_reverse(turn.messages, turn.boundary)
    walk = _Walk(units if shown is None else map(shown, units), turn.counter.count_message)
    position = 0
    human: int | None = None  # walk position of the newest unit with a human message
    anchor: int | None = None  # ... and of the unit that leads a view for it
    required: int | None = None
    rounds: list[int] = []  # positions of the newest turn's rounds a boundary may precede
    oldest_round: int | None = None  # the oldest unfolded round of the newest turn
    while walk.has(position):
        unit = walk.units[position].unit
        enough = walk.cum_size[position] >= config.min_messages
        if human is None and unit.has_human:
            human = position
        if human is None and unit.kind in ("ai", "tool"):
            oldest_round = position
            if enough:
                rounds.append(position)
        if human is not None and leads(unit, config.start_on):
            anchor = position if anchor is None else anchor
            if enough:
                required = position
                break
        position += 1
    if required is None:
        # no older unit may lead a view (the unfolded part starts inside a folded turn):
        # min_messages is best-effort, as in select_view
        required = anchor
    elif (
        hard_room is not None
        and anchor is not None
        and required != anchor
        and walk.cum_tokens[required] > hard_room
    ):
        # the newest min_messages cannot be shown with the summary at any budget left: the view
        # would hold fewer of them (min_messages is best-effort) and hide the rest unread, so
        # fold them instead, down to the newest human turn
        required = anchor

    def fits(position: int, extra: int = 0) -> bool:
        return walk.cum_tokens[position] + extra <= room and (
            config.target_messages is None or walk.cum_size[position] <= config.target_messages
        )

    # in-turn folding pins the request of the newest turn (see _Turn.pinned)
    if in_turn and oldest_round is not None:
        request = turn.pinned() if human is None else walk.units[human].unit.start
        pin = 0 if request is None else turn.counter.count_message(turn.messages[request])
        kept = rounds[0] if rounds else oldest_round  # the min_messages run (or all there is)
        if hard_room is not None and walk.cum_tokens[kept] + pin > hard_room:
            return walk.units[0].unit.start  # it cannot be shown: fold it rather than hide it
        if rounds and (required is None or not fits(required)):
            return _in_turn_boundary(walk, rounds, lambda p: fits(p, pin))
    if required is None:
        return turn.boundary
    best = required
    position = required + 1
    while walk.has(position) and fits(position):
        if leads(walk.units[position].unit, config.start_on):
            best = position
        position += 1
    return walk.units[best].unit.start


def _in_turn_boundary(walk: _Walk, rounds: list[int], fits: Callable[[int], bool]) -> int:
    """The fold boundary inside the newest turn: before the oldest of its tool rounds such that
    the rounds from there on, with the pinned request, fit (``rounds``: walk positions, newest
    first, each already holding ``min_messages``); before the newest such round when none fit,
    so a fold still makes what room it can. The newest unit (an in-flight call) is never
    folded: position 0 is always kept."""
    best = rounds[0]
    for position in rounds[1:]:
        if not fits(position):
            break
        best = position
    return walk.units[best].unit.start


@dataclass(slots=True)
class _Turn:
    """One call of :func:`plan_fold`: its inputs, and the two things its phases move forward,
    the folded boundary (with the summary) and the TieredSummary clip point."""

    messages: Sequence[BaseMessage]
    config: FoldConfig
    counter: TokenCounter
    keys: KeyChain
    #: index of the first message after the system message
    body_start: int
    #: the pinned system message (None without one, or with ``keep_system=False``)
    system: SystemMessage | None
    #: tokens of the whole history, and whether it was rewritten since the last turn
    all_tokens: int
    rewritten: bool
    #: index of the first unfolded message, and the summary that stands for those before it
    boundary: int
    sections: dict[str, str]
    folded_tokens: int
    #: TieredSummary: messages before this index are shown with large bodies clipped
    clip_at: int
    #: TieredSummary: completed tool rounds before this index are shown as digests
    digest_at: int = 0
    #: the digests the state holds (round key -> text), and those shown on this call
    stored: Mapping[str, str] = field(default_factory=dict)
    made: dict[str, str] = field(default_factory=dict)
    memo: dict[tuple[object, ...], tuple[Selection, HumanMessage | None] | Exception] = field(
        default_factory=dict
    )
    #: boundary -> the request pinned before it (see :func:`pinned_request`)
    pins: dict[int, int | None] = field(default_factory=dict)

    @classmethod
    def begin(
        cls,
        messages: Sequence[BaseMessage],
        state: MemoryState,
        config: FoldConfig,
        counter: TokenCounter,
    ) -> _Turn:
        """Where the history stands against ``state``: totals, system message, folded boundary
        (searched for when the history was rewritten) and clip point."""
        n = len(messages)
        cut = CutTurn.begin(messages, state, config, counter)
        keys, body_start = cut.keys, cut.body_start
        boundary, searched = _boundary(messages, body_start, state, keys)
        folded_tokens = state.folded_tokens
        if searched:
            count = counter.count_message
            folded_tokens = sum(count(messages[i]) for i in range(body_start, boundary))
        clip_at = body_start + state.clipped if config.clip_tokens is not None else 0
        digest_at = body_start + state.digested if config.digest is not None else 0
        if cut.rewritten or searched:
            digest_at = boundary  # a rewritten history: start the digest tier afresh
        return cls(
            messages,
            config,
            counter,
            keys,
            body_start,
            cut.system,
            cut.all_tokens,
            cut.rewritten or searched,
            boundary,
            dict(state.sections),
            folded_tokens,
            min(max(clip_at, boundary), n),
            min(max(digest_at, boundary), n),
            dict(state.digests),
        )

    @property
    def n(self) -> int:
        return len(self.messages)

    def pinned(self) -> int | None:
        """The human message the view holds before the unfolded ones (None: they start with
        one); see :func:`pinned_request`. It depends on the boundary alone, so the prefix holds
        until the next fold. With ``start_on="any"`` (a view may start on any unit) it is held
        only while no human message is unfolded: it is the request of the newest turn, folded
        inside that turn; once a newer human message comes, the view holds that one instead."""
        b = self.boundary
        if b not in self.pins:
            pin = pinned_request(self.messages, self.body_start, b)
            if (
                pin is not None
                and self.config.start_on == "any"
                and any(is_human(ensure_message(self.messages[i], i)) for i in range(b, self.n))
            ):
                pin = None
            self.pins[b] = pin
        return self.pins[b]

    def unfolded_kept(self, chosen: Selection) -> int:
        return _unfolded_kept(chosen, self.boundary, self.n)

    def system_tokens(self) -> int:
        return self.counter.count_message(self.system) if self.system is not None else 0

    def tier1(self) -> Tier1:
        """TieredSummary's first tier as it stands: digests before the digest point, large
        bodies clipped before the clip point, the pinned request never changed."""
        config = self.config
        return Tier1(
            self.keys,
            self.counter,
            config.digest,
            self.digest_at,
            self.clip_at,
            config.truncate_chars if config.clip_tokens is not None else None,
            exempt=self.pinned(),
            stored=self.stored,
            made=self.made,
        )

    def shown(self) -> Callable[[Unit], Unit] | None:
        """How a unit is shown (TieredSummary's first tier), or None when every unit is shown
        as it is."""
        tier = self.tier1()
        return tier if tier.active(self.boundary) else None

    def leading(
        self, note: str, summary: Mapping[str, str]
    ) -> tuple[SystemMessage | None, HumanMessage | None]:
        """The view's leading messages with ``summary`` (and ``note``) placed as configured: in
        the system message, or in a marked HumanMessage after it."""
        system = self.system
        if not any(summary.values()) and not note:
            return system, None
        block = render_summary(summary, note)
        if self.config.placement == "human":
            return system, HumanMessage(block, id=_SUMMARY_ID)
        if system is None:
            return SystemMessage(block, id=_SUMMARY_ID), None
        text = system.content if isinstance(system.content, str) else None
        if text is None:
            blocks = [*system.content, {"type": "text", "text": block}]
            return system.model_copy(update={"content": blocks}), None
        return system.model_copy(update={"content": f"{text}\n\n{block}" if text else block}), None

    def select(
        self, note: str = "", summary: Mapping[str, str] | None = None, **cut: Any
    ) -> tuple[Selection, HumanMessage | None]:
        """The cutting stage over the unfolded messages (after the pinned request, if any) under
        the summary; memoized, since a turn asks the same twice."""
        parts = self.sections if summary is None else summary
        start, pinned = self.boundary, self.pinned()
        key = (
            start,
            pinned,
            note,
            tuple(parts.items()),
            tuple(sorted(cut.items())),
            self.clip_at,
            self.digest_at,
        )
        if key not in self.memo:
            system, human_summary = self.leading(note, parts)
            extra = self.counter.count_message(human_summary) if human_summary is not None else 0
            config = self.config.cut(reserve_tokens=self.config.reserve_tokens + extra, **cut)
            try:
                chosen = select_view(
                    self.messages,
                    start,
                    system,
                    config,
                    self.counter,
                    shown=self.shown(),
                    pinned=pinned,
                )
                self.memo[key] = (chosen, human_summary)
            except ContextOverflowError as error:
                self.memo[key] = error
        found = self.memo[key]
        if isinstance(found, Exception):
            raise found
        return found

    def past(self, tokens: int) -> bool:
        """Whether the unfolded messages, under the summary, do not all fit under ``tokens``
        (the background compaction mark)."""
        unfolded = self.n - self.boundary
        try:
            current, _ = self.select()
        except ContextOverflowError:
            return True
        return self.unfolded_kept(current) != unfolded or current.tokens > self.config.level(tokens)

    def over_trigger(self) -> Trigger | None:
        """Which high-water mark the unfolded messages, under the summary, pass: they do not all
        fit under ``trigger_tokens`` (``"tokens"``), or more than ``trigger_messages`` are
        unfolded (``"messages"``); None when neither."""
        unfolded = self.n - self.boundary
        try:
            current, _ = self.select()
        except ContextOverflowError:
            return "tokens"
        pinned = self.pinned()
        if (
            self.unfolded_kept(current) != unfolded
            or (pinned is not None and current.first != pinned)  # the request no longer fits
            or current.tokens > self.config.level(self.config.trigger_tokens)
        ):
            return "tokens"
        limit = self.config.trigger_messages
        return "messages" if limit is not None and unfolded > limit else None

    def move_clip_point(
        self, last_view_tokens: int, over: Trigger | None
    ) -> tuple[bool, Trigger | None]:
        """TieredSummary tier 1: when the view crosses ``clip_tokens`` (it was below on the last
        turn), clip the large bodies of everything older than the newest turn. The clip point then
        holds until the next crossing, so the prompt prefix does not change on every turn.
        Returns whether the prefix changed, and whether the view is still over the trigger."""
        config = self.config
        if config.clip_tokens is None or self.n <= self.boundary:
            return False, over
        tier1 = config.level(config.clip_tokens)
        try:
            current, _ = self.select()
            past_tier1 = (
                current.tokens > tier1 or self.unfolded_kept(current) < self.n - self.boundary
            )
        except ContextOverflowError:
            past_tier1 = True
        if not past_tier1 or (last_view_tokens > tier1 and not over):
            return False, over
        keep_from = _fold_boundary(self, 0, shown=None, in_turn=False)
        # the prefix only changes if a newly covered message is actually clipped or digested
        moved = keep_from > self.clip_at and any(
            clip_chars(m, config.truncate_chars) is not m
            for m in self.messages[self.clip_at : keep_from]
        )
        self.clip_at = max(self.clip_at, keep_from)
        if (
            over is not None
            and config.digest is not None
            and verbatim_tokens(self.messages, self.digest_at, self.counter) > config.digest_slack
        ):
            fixed = self.counter.count_messages(()) + self.system_tokens()
            target = digest_point(
                self.messages,
                self.digest_at,
                config.digest.keep_rounds,
                config.min_messages,
                self.counter.count_message,
                config.level(config.max_tokens) - fixed,
            )
            if target > self.digest_at:
                self.digest_at, moved = target, True
        if not moved:
            return False, over
        return True, self.over_trigger()

    def fold_request(self, early: bool = False) -> FoldRequest | None:
        """The oldest unfolded units to fold so the view, with a full-size summary, fits
        ``target_tokens``; None when nothing can be folded. ``early`` (background compaction,
        whose folds start at ``prefetch_tokens``, up to ``trigger - prefetch`` tokens before
        the trigger): the fold goes that much further down (at most half the way to the
        summary), as far as a fold at the trigger would have gone: background compaction folds
        as often as inline folding, not more often."""
        config = self.config
        allowance = config.max_summary_tokens + self.counter.count_text(render_summary({}, ""))
        overhead = self.counter.count_messages(())
        fixed = overhead + self.system_tokens() + allowance
        target = config.target_tokens
        if early and config.prefetch_tokens is not None:
            ahead = config.trigger_tokens - config.prefetch_tokens
            target -= min(ahead, (target - config.max_summary_tokens) // 2)
        room = config.level(target) - fixed
        hard_room = config.level(config.max_tokens) - fixed
        shown = self.shown()
        stop = _fold_boundary(self, room, shown=shown, hard_room=hard_room)
        if stop <= self.boundary:
            return None
        batch = tuple(ensure_message(self.messages[i], i) for i in range(self.boundary, stop))
        least = 0
        if config.prefetch_tokens is not None:  # background mode: what a fold due now needs
            trigger_room = config.level(config.trigger_tokens) - fixed
            needed = _fold_boundary(self, trigger_room, shown=shown, hard_room=hard_room)
            least = min(max(needed - self.boundary, 0), len(batch))
        return FoldRequest(dict(self.sections), batch, least=least)

    def adopt(self, request: FoldRequest, sections: Mapping[str, str]) -> None:
        """The fold of ``request`` succeeded: ``sections`` stand for its messages from now on."""
        count = self.counter.count_message
        self.sections = {k: str(v) for k, v in sections.items()}
        self.folded_tokens += sum(count(m) for m in request.messages)
        self.boundary += len(request.messages)


def plan_fold(
    messages: Sequence[BaseMessage],
    state: MemoryState,
    config: FoldConfig,
    counter: TokenCounter,
    now: float,
) -> Generator[FoldRequest, FoldOutcome, MemoryResult]:
    """The view for this turn, folding into the summary when over the high-water mark. Pure.

    The phases: where the history stands (:meth:`_Turn.begin`); is it over the trigger, and does
    the TieredSummary clip point move (:meth:`_Turn.move_clip_point`); the fold, if the
    summarizer may be tried (:func:`~.transitions.may_try_fold`), and the health after
    its outcome (:func:`~.transitions.health_after`); the view, with the not-shown note
    and the overflow policy (:func:`_final_view`); the state and report (:func:`_fold_result`).
    A ``retry_at`` further than ``retry_max`` ahead of ``now`` (the clock stepped back since the
    failure) is brought back first (:func:`~langmem_ext.core.transitions.within_backoff`)."""
    state = within_backoff(state, now, config.retry_policy)
    turn = _Turn.begin(messages, state, config, counter)
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
                after = replace(after, folds=after.folds + 1)
    turn.clip_at = max(turn.clip_at, turn.boundary)
    turn.digest_at = max(turn.digest_at, turn.boundary) if config.digest is not None else 0
    next_state = _bookkeeping(turn, after)
    try:
        chosen, human_summary, shown_sections = _final_view(turn, next_state)
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


def _adopt(turn: _Turn, request: FoldRequest, outcome: Folded) -> int:
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


def _bookkeeping(turn: _Turn, state: MemoryState) -> MemoryState:
    """The next state's positions, keys and summary (the view's figures come later)."""
    n, body_start, boundary, keys = turn.n, turn.body_start, turn.boundary, turn.keys
    return replace(
        state,
        seen=n,
        seen_tokens=turn.all_tokens,
        seen_key=keys(n - 1) if n else None,
        cut_index=None,
        cut_key=None,
        summary=tuple(turn.sections.items()),
        folded=boundary - body_start,
        folded_key=keys(boundary - 1) if boundary > body_start else None,
        folded_tokens=turn.folded_tokens,
        clipped=max(turn.clip_at - body_start, 0) if turn.config.clip_tokens is not None else 0,
        digested=max(turn.digest_at - body_start, 0) if turn.config.digest is not None else 0,
    )


def _fold_result(
    turn: _Turn,
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
    n, counter, keys = turn.n, turn.counter, turn.keys
    view = list(chosen.view)
    if human_summary is not None:
        view.insert(1 if view and isinstance(view[0], SystemMessage) else 0, human_summary)
    not_shown = _not_shown(chosen, turn)
    summary_tokens = (
        counter.count_text(render_summary(shown_sections)) if any(shown_sections.values()) else 0
    )
    tokens_after = counter.count_messages(view) if human_summary is not None else chosen.tokens
    # what the view's prefix is made of: if it is the same as on the last turn and nothing was
    # folded, the last view is a prefix of this one (the history only grew at the end)
    first = chosen.first if chosen.first is not None else n
    prefix_key = digest(
        view[0].content if view else "",
        str(human_summary.content) if human_summary is not None else "",
        keys(first) if first < n else "",
        not_shown,
        chosen.clipped,
    )
    digests = turn.tier1().shown_in(view)
    next_state = replace(
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


def _not_shown(chosen: Selection, turn: _Turn) -> int:
    """Unfolded messages the view leaves out (only while the summarizer is failing or the budget
    is too small for all of them)."""
    return (turn.n - turn.boundary) - turn.unfolded_kept(chosen)


def _final_view(
    turn: _Turn, state: MemoryState
) -> tuple[Selection, HumanMessage | None, dict[str, str]]:
    """The final view, with the not-shown note when needed and the overflow policy applied.
    The view is selected from the first unfolded message, after the pinned request when the
    unfolded messages do not start with a human message (:func:`pinned_request`); only unfolded
    messages count as not shown. Returns the selection, the summary message
    (``placement="human"``) and the summary shown."""
    sections = turn.sections
    try:
        chosen, human = _with_note(turn, state, sections)
        return chosen, human, sections
    except ContextOverflowError as error:
        first_error = error
    config = turn.config
    if config.overflow == "error":
        summary_tokens = turn.counter.count_text(render_summary(sections)) if sections else 0
        raise MemoryBudgetExceeded(
            f"the summary ({summary_tokens:,} tokens), min_messages={config.min_messages} and "
            f"the newest human message do not fit together: {first_error}",
            summary_tokens=summary_tokens,
            **_overflow_figures(first_error),
        ) from first_error
    last = first_error
    for summary, cut in _overflow_steps(turn, first_error):
        try:
            chosen, human = _with_note(turn, state, summary, **cut)
            return chosen, human, summary
        except ContextOverflowError as error:
            last = error
    raise MemoryBudgetExceeded(
        f"even without the summary and with the newest human message clipped, the view does "
        f"not fit: {last}",
        **_overflow_figures(last),
    ) from last


def _overflow_figures(error: ContextOverflowError) -> dict[str, int]:
    return {
        "needed": error.needed,
        "available": error.available,
        "max_tokens": error.max_tokens,
        "reserve_tokens": error.reserve_tokens,
        "system_tokens": error.system_tokens,
    }


def _overflow_steps(
    turn: _Turn, first_error: ContextOverflowError
) -> list[tuple[dict[str, str], dict[str, Any]]]:
    """The fixed, finite fallbacks of the overflow policy, in order: each either fits or moves
    on; after the last one the turn fails. The newest human message is clipped only once dropping
    the summary from the view was not enough."""
    config, sections = turn.config, turn.sections
    steps: list[tuple[dict[str, str], dict[str, Any]]] = []
    if config.overflow == "truncate_summary" and any(sections.values()):
        fixed = turn.counter.count_messages(()) + turn.system_tokens()
        room = max(config.level(config.max_tokens) - fixed - first_error.needed, 0)
        steps.append((_truncate_sections(sections, room, turn.counter), {}))
    if config.overflow == "truncate_oldest" and config.min_messages > 1:
        steps.append((dict(sections), {"min_messages": 1}))
    return [*steps, ({}, {"min_messages": 1}), ({}, {"min_messages": 1, "overflow": "clip"})]


def _with_note(
    turn: _Turn, state: MemoryState, summary: dict[str, str], **cut: Any
) -> tuple[Selection, HumanMessage | None]:
    """The view from ``start`` under ``summary``; when some unfolded messages do not fit, with a
    visible note that says how many. The note costs tokens, which can change how many fit: start
    from the most that could be missing and step down to the count the note states exactly (a
    few passes at most: only the digits change)."""
    chosen, human = turn.select("", summary, **cut)
    missing = _not_shown(chosen, turn)
    if missing <= 0:
        return chosen, human
    claimed = turn.n - turn.boundary
    for _ in range(8):
        note = _not_shown_note(claimed, state.health, state.last_error)
        chosen, human = turn.select(note, summary, **cut)
        missing = _not_shown(chosen, turn)
        if missing == claimed:
            break
        claimed = missing
    return chosen, human


def _truncate_sections(
    sections: Mapping[str, str], room: int, counter: TokenCounter
) -> dict[str, str]:
    """Shorten the sections (in the view only) so the summary block costs about ``room``."""
    frame = counter.count_text(render_summary({k: "" for k in sections}))
    per = max((room - frame) // max(len(sections), 1), 0)
    out: dict[str, str] = {}
    for name, text in sections.items():
        if counter.count_text(text) <= per:
            out[name] = text
            continue
        keep = longest_prefix_within(text, per - counter.count_text(_TRUNCATED), counter.count_text)
        out[name] = (text[:keep].rstrip() + _TRUNCATED) if keep > 0 else ""
    return out
