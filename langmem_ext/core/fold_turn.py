"""One call of the fold plan: where the history stands, the folded boundary and the tier points.

:class:`FoldTurn` holds what :func:`~langmem_ext.core.fold.plan_fold` moves forward (the folded
boundary with the summary, the TieredSummary clip and digest points) and decides: whether the
view is over a trigger, where a fold goes down to (:func:`_fold_boundary`, between whole tool
rounds of a long turn when the turn alone does not fit: :func:`_in_turn_boundary`), what a fold
request holds, and the view under a given summary (:meth:`FoldTurn.select`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from langchain_core.messages import BaseMessage, HumanMessage, SystemMessage

from langmem_ext.core.digest import Tier1, digest_point, verbatim_tokens
from langmem_ext.core.fold_config import (
    SUMMARY_ID,
    FoldConfig,
    FoldRequest,
    Trigger,
    render_summary,
)
from langmem_ext.core.identity import KeyChain
from langmem_ext.core.limits import StartOn
from langmem_ext.core.messages import (
    Unit,
    clip_chars,
    ensure_message,
    is_human,
    iter_units_reverse,
    pinned_request,
)
from langmem_ext.core.plan import CutTurn, leads, select_view
from langmem_ext.core.state import MemoryState
from langmem_ext.core.tokens import TokenCounter
from langmem_ext.core.walk import Selection, Walk
from langmem_ext.errors import ContextOverflowError

__all__ = ["FoldTurn"]


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


@dataclass(slots=True)
class _NewestTurn:
    """What the walk back from the newest unit found of the newest human turn (walk positions,
    0 = newest unit)."""

    #: the newest unit with a human message, and the unit that leads a view for it
    human: int | None = None
    anchor: int | None = None
    #: the leading unit once the units after it hold ``min_messages`` (None: never)
    required: int | None = None
    #: the newest turn's rounds a boundary may precede, and its oldest unfolded round
    rounds: list[int] = field(default_factory=list)
    oldest_round: int | None = None


def _scan_newest_turn(walk: Walk, config: FoldConfig) -> _NewestTurn:
    """Walk back to the unit that leads the newest human turn, noting the turn's tool rounds on
    the way; stops there once ``min_messages`` are held."""
    found = _NewestTurn()
    position = 0
    while walk.has(position):
        unit = walk.units[position].unit
        enough = walk.cum_size[position] >= config.min_messages
        if found.human is None and unit.has_human:
            found.human = position
        if found.human is None and unit.kind in ("ai", "tool"):
            found.oldest_round = position
            if enough:
                found.rounds.append(position)
        if found.human is not None and leads(unit, config.start_on):
            found.anchor = position if found.anchor is None else found.anchor
            if enough:
                found.required = position
                break
        position += 1
    return found


def _fold_boundary(
    turn: FoldTurn,
    room: int,
    shown: Callable[[Unit], Unit] | None,
    *,
    in_turn: bool = True,
    hard_room: int | None = None,
    turn_room: int | None = None,
) -> int:
    """Where the unfolded part should start after a fold: the oldest unit that may lead a view
    such that everything from it costs at most ``room`` (and holds at most ``target_messages``),
    but never inside the newest human turn or the newest ``min_messages`` messages; returns the
    current boundary when there is nothing to fold.

    When the newest turn alone does not fit (a long agent turn) and ``in_turn``, the boundary
    falls between its whole tool rounds instead (:func:`_in_turn_boundary`); "fits" is judged
    against ``turn_room`` (default ``room``): a deeper background fold must not cut inside a turn
    a fold due now keeps whole (the turn may end first; the next request then stops before it,
    and the fold's messages would be summarized again). When even the newest ``min_messages``
    of the turn cannot fit ``hard_room`` (the whole budget; a huge tool result), every round but
    the newest unit is folded instead, so nothing is hidden unread. With ``hard_room`` (a fold,
    not the clip tier), ``min_messages`` reaching back past the newest human turn is kept only
    while it fits the room of a fold due now: otherwise the turns before the newest are folded,
    so that each fold frees its share of the budget."""
    config = turn.config
    units = iter_units_reverse(turn.messages, turn.boundary)
    walk = Walk(units if shown is None else map(shown, units), turn.counter.count_message)
    scan = _scan_newest_turn(walk, config)
    human = scan.human
    rounds, oldest_round = scan.rounds, scan.oldest_round
    # a fold's boundary (not the clip tier's, which keeps min_messages) judged at a due fold's room
    due = None if hard_room is None else (room if turn_room is None else turn_room)
    required = _required_start(walk, scan, due)

    def fits(position: int, extra: int = 0, within: int = room) -> bool:
        return walk.cum_tokens[position] + extra <= within and (
            config.target_messages is None or walk.cum_size[position] <= config.target_messages
        )

    # in-turn folding pins the request of the newest turn (see FoldTurn.pinned)
    if in_turn and oldest_round is not None:
        request = turn.pinned() if human is None else walk.units[human].unit.start
        pin = 0 if request is None else turn.counter.count_message(turn.messages[request])
        kept = rounds[0] if rounds else oldest_round  # the min_messages run (or all there is)
        if hard_room is not None and walk.cum_tokens[kept] + pin > hard_room:
            return walk.units[0].unit.start  # it cannot be shown: fold it rather than hide it
        within = room if turn_room is None else turn_room
        if rounds and (required is None or not fits(required, within=within)):
            return _in_turn_boundary(walk, rounds, lambda p: fits(p, pin))
    if required is None:
        return turn.boundary
    return _oldest_fitting_start(walk, required, fits, config.start_on)


def _required_start(walk: Walk, scan: _NewestTurn, due_room: int | None) -> int | None:
    """The oldest walk position every view must keep: the unit leading the newest human turn,
    or further back while the newest ``min_messages`` need it. With ``due_room`` (a fold's
    boundary), ``min_messages`` reaching back past the newest human turn that do not fit it are
    given up: held, they would leave the fold almost nothing to free (a fold on every call at
    a small budget) or, past the whole budget, be hidden unread. So a fold frees its share: the
    turns before the newest one are folded (``min_messages`` is kept while it fits)."""
    required, anchor = scan.required, scan.anchor
    if required is None:
        # no older unit may lead a view (the unfolded part starts inside a folded turn):
        # min_messages is best-effort, as in select_view
        return anchor
    if due_room is not None and anchor is not None and walk.cum_tokens[required] > due_room:
        return anchor
    return required


def _oldest_fitting_start(
    walk: Walk, required: int, fits: Callable[[int], bool], start_on: StartOn
) -> int:
    """The start of the oldest unit at or before walk position ``required`` that may lead a view
    and from which everything ``fits``."""
    best = required
    position = required + 1
    while walk.has(position) and fits(position):
        if leads(walk.units[position].unit, start_on):
            best = position
        position += 1
    return walk.units[best].unit.start


def _in_turn_boundary(walk: Walk, rounds: list[int], fits: Callable[[int], bool]) -> int:
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
class FoldTurn:
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
    ) -> FoldTurn:
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
            return system, HumanMessage(block, id=SUMMARY_ID)
        if system is None:
            return SystemMessage(block, id=SUMMARY_ID), None
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
        due_room = config.level(target) - fixed
        if early and config.prefetch_tokens is not None:
            ahead = config.trigger_tokens - config.prefetch_tokens
            target -= min(ahead, (target - config.max_summary_tokens) // 2)
        room = config.level(target) - fixed
        hard_room = config.level(config.max_tokens) - fixed
        shown = self.shown()
        stop = _fold_boundary(self, room, shown=shown, hard_room=hard_room, turn_room=due_room)
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
