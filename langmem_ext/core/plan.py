"""The cutting plan: which messages the model sees, as a pure function.

``plan_cut(messages, state, config, counter)`` decides the view from the messages, the previous
:class:`~langmem_ext.core.state.MemoryState` and the configuration. It does no I/O of its own (the
counter is a deterministic function of a message), keeps no clock, and never mutates its input.
Every strategy is a configuration of this plan; the later stages (clipping, folding into a
summary, retrieval) build on the same walk.

How a view is chosen
--------------------
Units (see :mod:`langmem_ext.core.messages`) are walked from the newest backwards, with their token
costs taken from the counter's cache, and the walk stops as soon as the budget is spent. So a turn
costs O(view), not O(history).

* **Required**: the newest HumanMessage, with the units from the nearest unit that can start a view
  (a HumanMessage for ``start_on="human"``) up to it; the newest unit; and enough newest units to
  hold ``min_messages`` messages. If they do not fit, the overflow policy decides: ``"error"``
  raises :class:`~langmem_ext.errors.ContextOverflowError` with the numbers, ``"clip"`` clips the
  newest human message (then the largest required messages) with a visible marker.
* **Contiguous** (the normal case): the view is the longest suffix of whole units that fits and
  starts on a valid unit.
* **Gap**: when the newest human turn itself is too long (an agent loop of many tool rounds), the
  view is the human's head plus the newest units that fit; the tool rounds in between are left out.
  The report says so.
* **Hysteresis** (``target_tokens``): the previous view's start is kept while the view stays within
  ``max_tokens``; when it would pass, the view is cut down to ``target_tokens``. The view's prefix
  then stays byte-identical for many turns and provider prompt caches keep hitting.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Literal

from langchain_core.messages import BaseMessage, HumanMessage, SystemMessage, ToolMessage

from langmem_ext.core.identity import KeyChain, tool_call_ids
from langmem_ext.core.limits import CutConfig, StartOn, ViewLimits
from langmem_ext.core.messages import (
    Unit,
    as_standard,
    ensure_message,
    is_system,
    iter_units_reverse,
    merge_system_messages,
    pinned_request,
)
from langmem_ext.core.overflow import budget_error, make_required_fit
from langmem_ext.core.result import MemoryReport, MemoryResult
from langmem_ext.core.state import MemoryState
from langmem_ext.core.tokens import TokenCounter
from langmem_ext.core.transitions import after_cut
from langmem_ext.core.walk import (
    Budget,
    Required,
    Selection,
    Walk,
    budget_for,
    fits_within,
)
from langmem_ext.errors import InvalidHistoryError

__all__ = [
    "CutTurn",
    "cut_result",
    "leads",
    "plan_cut",
    "select_view",
]


def leads(unit: Unit, start_on: StartOn) -> bool:
    """Whether ``unit`` may be the first of a view under ``start_on``."""
    if start_on == "human":
        return unit.kind == "human"
    return unit.kind in ("human", "ai", "tool")  # a custom role never leads a view


def running_total(
    messages: Sequence[BaseMessage],
    state: MemoryState,
    count: Callable[[BaseMessage], int],
    keys: KeyChain | None = None,
) -> tuple[int, bool]:
    """Tokens of all ``messages`` and whether the history was rewritten since ``state``.

    When ``messages`` extends the history ``state`` saw (same stable key at ``seen - 1``), only the
    new messages are counted: O(new). Otherwise everything is counted once (from the cache).
    """
    n = len(messages)
    if (
        state.seen
        and state.seen <= n
        and state.seen_key is not None
        and ensure_message(messages[state.seen - 1], state.seen - 1) is not None
        and (keys or KeyChain(messages))(state.seen - 1) == state.seen_key
    ):
        new = sum(count(ensure_message(messages[i], i)) for i in range(state.seen, n))
        return state.seen_tokens + new, False
    return sum(count(ensure_message(m, i)) for i, m in enumerate(messages)), state.seen > 0


@dataclass(frozen=True, slots=True)
class CutTurn:
    """Where one call of a cutting plan stands: the keys, the history's tokens (and whether it
    was rewritten since the state), and the pinned system message."""

    messages: Sequence[BaseMessage]
    keys: KeyChain
    all_tokens: int
    rewritten: bool
    #: index of the first message after the system message
    body_start: int
    system: SystemMessage | None

    @property
    def n(self) -> int:
        return len(self.messages)

    @classmethod
    def begin(
        cls,
        messages: Sequence[BaseMessage],
        state: MemoryState,
        config: ViewLimits,
        counter: TokenCounter,
    ) -> CutTurn:
        keys = KeyChain(messages)
        all_tokens, rewritten = running_total(messages, state, counter.count_message, keys)
        has_system = len(messages) > 0 and is_system(ensure_message(messages[0], 0))
        system = as_standard(messages[0]) if has_system and config.keep_system else None
        assert system is None or isinstance(system, SystemMessage)
        return cls(messages, keys, all_tokens, rewritten, 1 if has_system else 0, system)


def plan_cut(
    messages: Sequence[BaseMessage],
    state: MemoryState,
    config: CutConfig,
    counter: TokenCounter,
) -> MemoryResult:
    """The view of ``messages`` for this turn, the next state, and the report. Pure."""
    turn = CutTurn.begin(messages, state, config, counter)
    chosen = select_view(
        messages, turn.body_start, turn.system, config, counter, state, keys=turn.keys
    )
    return cut_result(turn, state, chosen, config, counter)


def cut_result(
    turn: CutTurn,
    state: MemoryState,
    chosen: Selection,
    config: CutConfig,
    counter: TokenCounter,
    *,
    digested: int = 0,
    digests: tuple[tuple[str, str], ...] = (),
    prefix_changed: bool = False,
) -> MemoryResult:
    """The result of a cutting plan's ``chosen`` view: the next state (with the digest point
    and the digests shown, for :func:`~langmem_ext.core.digest.plan_digest`) and the report."""
    n, keys = turn.n, turn.keys
    kept = chosen.kept + (1 if turn.system is not None else 0)
    next_state = after_cut(
        state,
        keys,
        seen=n,
        seen_tokens=turn.all_tokens,
        cut_index=chosen.cut,
        digested=digested,
        digests=digests,
        gap_index=chosen.suffix if chosen.gap else None,
    )
    prefix_kept = not prefix_changed and (
        chosen.held
        or (
            chosen.cut is not None
            and state.cut_index == chosen.cut
            and state.cut_key == next_state.cut_key
        )
    )
    report = MemoryReport(
        tokens_before=counter.count_messages(()) + turn.all_tokens,
        tokens_after=chosen.tokens,
        messages_before=n,
        messages_after=len(chosen.view),
        messages_dropped=n - kept,
        budget=config.ceiling(config.max_tokens),
        clipped=chosen.clipped,
        repaired=chosen.repaired,
        prefix_kept=prefix_kept,
        gap=chosen.gap,
        history_rewritten=turn.rewritten,
        digested=len(digests),
    )
    return MemoryResult(chosen.view, next_state, report)


def _newest_human_turn(
    walk: Walk, messages: Sequence[BaseMessage], start_on: StartOn
) -> tuple[int, int | None, StartOn]:
    """The position of the newest unit with a human message (-1 when there is none), the position
    of the unit that can lead a view for it (None when there is no human message), and the start
    rule that can hold. Repairs the walk when the newest human message sits inside a tool round
    and no unit before it is human-led: the view then starts at that human message."""
    human = 0
    while walk.has(human) and not walk.units[human].unit.has_human:
        human += 1
    anchor: int | None = None
    if walk.has(human):
        lead = human
        while walk.has(lead) and not leads(walk.units[lead].unit, start_on):
            lead += 1
        anchor = lead if walk.has(lead) else human
    if anchor is None and start_on == "human":
        raise _no_human_message(walk, messages)
    if anchor is not None and start_on == "human" and not leads(walk.units[anchor].unit, "human"):
        walk.replace(anchor, _from_human_message(walk.units[anchor].unit, messages))
    if anchor is None or not leads(walk.units[anchor].unit, start_on):
        start_on = "any"  # no human-led unit anywhere: the rule cannot hold, use unit boundaries
        if anchor is None:
            human = -1
    return human, anchor, start_on


def _no_human_message(walk: Walk, messages: Sequence[BaseMessage]) -> InvalidHistoryError:
    """The error for a history with no human message at all (the walk went through all of it).

    No view of it is valid with ``start_on="human"``: providers want the first message after the
    system message to be the user's, and making one up would put words in the user's mouth. So
    every strategy refuses it the same way, before any summarizer call, naming the fix."""
    first = walk.units[-1].unit.start
    return InvalidHistoryError(
        f"the history has no HumanMessage (messages[{first}:] hold only AI, tool and other "
        "non-human messages), so no view can start with one as start_on='human' requires. "
        "Add the user's message before calling the strategy (TokenBudget, SlidingWindow, "
        "ToolDigest and SummaryBuffer also take start_on='any', to accept a view that starts "
        "with an AI or tool message)",
        index=first,
        message_id=ensure_message(messages[first], first).id if first < len(messages) else None,
    )


def _from_human_message(unit: Unit, messages: Sequence[BaseMessage]) -> Unit:
    """The part of ``unit`` from its human message on. The unit's repaired order puts every result
    right after its call, so that part is itself valid; what is before it is recorded as cut."""
    first = next(i for i, m in enumerate(unit.messages) if isinstance(m, HumanMessage))
    span = {id(messages[k]): k for k in range(unit.start, unit.stop)}
    omitted: tuple[tuple[int, Literal["cut"]], ...] = tuple(
        (span[id(m)], "cut") for m in unit.messages[:first] if id(m) in span
    )
    return replace(
        unit, messages=unit.messages[first:], kind="human", dropped=unit.dropped + omitted
    )


def _required(
    walk: Walk,
    messages: Sequence[BaseMessage],
    config: CutConfig,
    room: int | None,
) -> Required:
    """The units every view must hold: the newest unit, ``min_messages``, and the newest human
    turn from a unit that may lead a view: one contiguous run when they touch or all fit, else a
    tail and a head apart (a gap view)."""
    human, anchor, start_on = _newest_human_turn(walk, messages, config.start_on)
    tail = 0
    while walk.cum_size[tail] < config.min_messages and walk.has(tail + 1):
        tail += 1
    if (
        anchor is not None
        and human > tail + 1
        and not fits_within(
            walk.cum_tokens[anchor], walk.cum_size[anchor], room, config.max_messages
        )
    ):
        return Required(tail, range(human, anchor + 1), start_on)
    # head and tail touch, or everything from the head to the end fits: one contiguous required
    # run, which must start on a leading unit
    floor = 0 if anchor is None else anchor
    tail = max(tail, floor)
    lead = tail
    while not leads(walk.units[lead].unit, start_on) and walk.has(lead + 1):
        lead += 1
    if not leads(walk.units[lead].unit, start_on):  # none older: min_messages is best-effort
        lead = tail
        while lead > floor and not leads(walk.units[lead].unit, start_on):
            lead -= 1
    return Required(lead, range(0), start_on)


def _fresh_cut(walk: Walk, required: Required, config: CutConfig, room: int | None) -> int:
    """The oldest position of the longest contiguous run that fits ``room`` and starts on a
    leading unit (at least the required run)."""
    best = position = required.tail
    while walk.has(position + 1) and fits_within(
        walk.cum_tokens[position + 1], walk.cum_size[position + 1], room, config.max_messages
    ):
        position += 1
        if leads(walk.units[position].unit, required.start_on):
            best = position
    return best


def _gap_selection(
    walk: Walk, required: Required, config: CutConfig, budget: Budget, held: _HeldGap | None
) -> tuple[list[int], bool]:
    """The newest human turn's head, then the newest units that fit after it: from the previous
    gap view's oldest unit while the view from it fits the room (``held``: hysteresis inside a
    long turn, with ``target_tokens``), else as many as fit the cut room (the target, or the
    room without one); and whether the previous one was held."""
    head = required.head
    head_tokens = sum(walk.units[p].tokens for p in head)
    head_size = sum(walk.units[p].size for p in head)

    def fits(position: int, room: int | None) -> bool:
        return fits_within(
            walk.cum_tokens[position] + head_tokens,
            walk.cum_size[position] + head_size,
            room,
            config.max_messages,
        )

    if held is not None:
        position = 0
        while position < head.start and fits(position, budget.room):
            if held.keys(walk.units[position].unit.start) == held.key:
                if position >= required.tail:
                    return [*range(position + 1), *head], True
                break
            position += 1
    newest = required.tail
    while newest + 1 < head.start and fits(newest + 1, budget.cut_room):
        newest += 1
    return [*range(newest + 1), *head], False


@dataclass(frozen=True, slots=True)
class _HeldGap:
    """The previous gap view's oldest unit after the request (``MemoryState.gap_key``), and the
    keys to find it by."""

    key: str
    keys: KeyChain

    @classmethod
    def of(
        cls,
        messages: Sequence[BaseMessage],
        state: MemoryState | None,
        budget: Budget,
        keys: KeyChain | None,
    ) -> _HeldGap | None:
        if not budget.target_view or state is None or state.gap_key is None:
            return None
        return cls(state.gap_key, keys or KeyChain(messages))


def select_view(
    messages: Sequence[BaseMessage],
    start: int,
    system: SystemMessage | None,
    config: CutConfig,
    counter: TokenCounter,
    state: MemoryState | None = None,
    shown: Callable[[Unit], Unit] | None = None,
    keys: KeyChain | None = None,
    pinned: int | None = None,
) -> Selection:
    """The cutting stage: the view of ``messages[start:]`` under ``system``, within the budget.

    ``system`` is the message pinned first (the history's own system message, or one that also
    carries a summary); system messages found in ``messages[start:]`` are merged into it (or
    dropped with ``keep_system=False``). ``state`` supplies the previous cut for hysteresis;
    ``shown`` maps each unit to the form it takes in the view (e.g. clipped tool outputs);
    ``keys`` is the caller's :class:`~langmem_ext.core.identity.KeyChain` over ``messages``, if
    any. ``pinned`` is the index of a human message before ``start`` that the view holds as if it
    came right before ``messages[start]``: the request of a long agent turn whose older rounds
    were folded into the summary (see :mod:`langmem_ext.core.fold`); the messages between it and
    ``start`` are not part of the walk.

    The phases: the budget; the required units (:func:`_required`), clipped or refused when
    they do not fit (:func:`~langmem_ext.core.overflow.make_required_fit`); the selection (the
    held cut, a fresh cut, or a gap view); the view built from it (:func:`_assemble`).
    """
    budget = budget_for(config, counter, system)
    if pinned is None:
        far = _far_request(messages, start, config, counter, budget.room, shown)
        if far is not None:
            start, pinned = far
    units = iter_units_reverse(messages, start)
    if pinned is not None:
        units = itertools.chain(units, iter_units_reverse(messages, pinned, pinned + 1))
    walk = Walk(units if shown is None else map(shown, units), counter.count_message)
    if not walk.has(0):  # nothing but (maybe) a system message
        view: list[BaseMessage] = [system] if system is not None else []
        return Selection(view, counter.count_messages(view), 0, None)

    required = _required(walk, messages, config, budget.room)
    needed = walk.cum_tokens[required.tail] + sum(walk.units[p].tokens for p in required.head)
    clipped: tuple[str, ...] = ()
    if budget.room is not None and needed > budget.room:
        clipped = make_required_fit(walk, required.positions, needed, budget, config)

    if clipped:
        selected, held = required.positions, False
    elif required.head:
        previous = _HeldGap.of(messages, state, budget, keys)
        selected, held = _gap_selection(walk, required, config, budget, previous)
    else:
        selected, held = _contiguous(walk, messages, required, config, budget, state, keys)
    return _assemble(
        walk, selected, system, config, counter, budget, clipped, held, gap=bool(required.head)
    )


def _contiguous(
    walk: Walk,
    messages: Sequence[BaseMessage],
    required: Required,
    config: CutConfig,
    budget: Budget,
    state: MemoryState | None,
    keys: KeyChain | None,
) -> tuple[list[int], bool]:
    """A contiguous view's walk positions: from the previous cut while it fits (hysteresis),
    else from a fresh cut; and whether the previous cut was held."""
    kept_cut = (
        _held_cut(walk, messages, state, config, budget.room, required.tail, keys)
        if budget.target_view and state is not None
        else None
    )
    held = kept_cut is not None
    if kept_cut is None:
        kept_cut = _fresh_cut(walk, required, config, budget.cut_room)
    return list(range(kept_cut + 1)), held


def _far_request(
    messages: Sequence[BaseMessage],
    start: int,
    config: CutConfig,
    counter: TokenCounter,
    room: int | None,
    shown: Callable[[Unit], Unit] | None,
) -> tuple[int, int] | None:
    """A long agent turn whose request is out of reach: ``(s, r)`` when the units after the
    newest human message already overflow the room (with ``min_messages`` held) at the unit
    starting at ``s``, ``r`` being that human message. The view is then a gap view (the request,
    then the newest units that fit), whatever lies between ``r`` and ``s``, so the walk need not
    go there: :func:`select_view` walks ``messages[s:]`` with ``r`` pinned. O(view) instead of
    O(turn); None (walk everything) when the newest human turn is reached first."""
    if room is None and config.max_messages is None:
        return None
    tokens = size = 0
    for unit in iter_units_reverse(messages, start):
        if unit.has_human or unit.kind == "system":
            return None
        counted = shown(unit) if shown is not None else unit
        held = size >= max(config.min_messages, 1)  # the required tail lies in newer units
        tokens += sum(counter.count_message(m) for m in counted.messages)
        size += len(counted.messages)
        if held and not fits_within(tokens, size, room, config.max_messages):
            request = pinned_request(messages, start, unit.start)
            if request is None or not _answered_after(messages, request, unit.start):
                return None
            return unit.start, request
    return None


def _answered_after(messages: Sequence[BaseMessage], request: int, stop: int) -> bool:
    """Whether every tool result in ``messages[request + 1 : stop]`` answers a call made after
    ``request``: then no unit spans the request and it is a unit of its own (else a repair may
    apply to it, which the full walk does). A scan of ``isinstance`` checks, no counting."""
    made: set[str] = set()
    for i in range(request + 1, stop):
        message = messages[i]
        if isinstance(message, ToolMessage):
            if message.tool_call_id not in made:
                return False
        else:
            made.update(tool_call_ids(message))
    return True


def _repaired_away(unit: Unit) -> int:
    """Input messages of ``unit`` a repair removed (orphan and duplicate results)."""
    return sum(1 for _, why in unit.dropped if why != "cut")


def _collect(
    walk: Walk, chosen: list[int]
) -> tuple[list[BaseMessage], list[SystemMessage], int, bool, int]:
    """The messages of the walk positions ``chosen`` (oldest first), with the system messages
    found among them set apart; how many input messages they represent; whether a unit needed a
    repair; how many input messages a repair removed."""
    strays: list[SystemMessage] = []  # system messages later in the history
    body: list[BaseMessage] = []
    kept_inputs = away = 0
    repaired = False
    for p in chosen:
        unit = walk.units[p].unit
        kept_inputs += unit.size - len(unit.dropped)
        away += _repaired_away(unit)
        repaired = repaired or unit.repaired
        for m in unit.messages:
            if isinstance(m, SystemMessage):
                strays.append(m)
            else:
                body.append(m)
    return body, strays, kept_inputs, repaired, away


def _assemble(
    walk: Walk,
    selected: list[int],
    system: SystemMessage | None,
    config: CutConfig,
    counter: TokenCounter,
    budget: Budget,
    clipped: tuple[str, ...],
    held: bool,
    *,
    gap: bool,
) -> Selection:
    """The view of the selected walk positions: the pinned system message (with the stray system
    messages of the history merged in, or dropped), then the kept messages oldest first."""
    selected_set = set(selected)
    chosen = sorted(selected_set, reverse=True)  # oldest first
    body, strays, kept_inputs, repaired, away = _collect(walk, chosen)
    leading = _leading(system, strays, config)
    repaired = repaired or (config.keep_system and bool(strays))
    if strays and not config.keep_system:
        kept_inputs -= len(strays)
    view = leading + body

    # the walk already summed every kept message (clips included); only stray system messages
    # (merged into the first, or dropped) make the view differ from what the walk counted
    if strays:
        total = counter.count_messages(view)
    else:
        total = budget.fixed + sum(walk.units[p].tokens for p in chosen)
    max_view = budget.max_view
    if max_view is not None and total > max_view:
        # only reachable when merging stray system messages cost more than the parts: drop them
        view = ([system] if system is not None else []) + body
        kept_inputs -= len(strays)
        total = counter.count_messages(view)
        if total > max_view:  # pragma: no cover - defensive: the selection above fits by sums
            raise budget_error(
                f"the view costs {total:,} tokens, over the budget of {max_view:,}",
                total,
                max_view,
                budget,
                config,
            )
    first = walk.units[chosen[0]].unit.start if chosen else None
    newest_run, orphans_away, orphans = _newest_run(walk, selected_set, bool(chosen))
    away += orphans_away
    repaired = repaired or orphans
    return Selection(
        view,
        total,
        kept_inputs,
        None if gap else first,
        first=first,
        clipped=clipped,
        repaired=repaired,
        held=held,
        gap=gap,
        suffix=walk.units[newest_run].unit.start if chosen else None,
        repaired_away=away,
    )


def _leading(
    system: SystemMessage | None, strays: list[SystemMessage], config: CutConfig
) -> list[BaseMessage]:
    """The view's leading system message: the pinned one with the history's stray system
    messages merged in (``keep_system``), or the pinned one alone (none without one)."""
    if config.keep_system and (system is not None or strays):
        return [merge_system_messages(([system] if system is not None else []) + strays)]
    return [system] if system is not None else []


def _newest_run(walk: Walk, selected: set[int], any_chosen: bool) -> tuple[int, int, bool]:
    """The newest contiguous run of the selected walk positions (``0..run``: returns ``run``),
    with the input messages a repair removed from the orphan results right before it, and
    whether there were any.

    A run starts on a unit that may lead a view, never on an orphan: those orphans are removed
    by the repair as much as those inside it, and counted once, so an orphan neither reads as
    missing (a fold's trigger, "not shown") nor is shown."""
    run = 0
    while run + 1 in selected:
        run += 1
    away, found = 0, False
    beyond = run + 1
    while any_chosen and beyond not in selected and walk.has(beyond):
        unit = walk.units[beyond].unit
        if unit.kind != "orphan":
            break
        away += _repaired_away(unit)
        found = True
        beyond += 1
    return run, away, found


def _held_cut(
    walk: Walk,
    messages: Sequence[BaseMessage],
    state: MemoryState,
    config: CutConfig,
    room: int | None,
    tail: int,
    keys: KeyChain | None = None,
) -> int | None:
    """Hysteresis: the walk position of the previous turn's cut if the view from it still fits
    ``room`` and holds the required run ``0..tail``, else None."""
    if state.cut_key is None or state.cut_index is None:
        return None
    keys = keys or KeyChain(messages)
    index_ok = state.cut_index < len(messages) and keys(state.cut_index) == state.cut_key
    p = 0
    while walk.has(p):
        if not fits_within(walk.cum_tokens[p], walk.cum_size[p], room, config.max_messages):
            return None
        unit = walk.units[p].unit
        at_cut = unit.start == state.cut_index if index_ok else keys(unit.start) == state.cut_key
        if at_cut:
            ok = p >= tail and (unit.kind == "human" or config.start_on == "any")
            return p if ok else None
        if index_ok and unit.start < state.cut_index:
            return None
        p += 1
    return None
