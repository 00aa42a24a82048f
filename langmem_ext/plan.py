"""The cutting plan: which messages the model sees, as a pure function.

``plan_cut(messages, state, config, counter)`` decides the view from the messages, the previous
:class:`~langmem_ext.state.MemoryState` and the configuration. It does no I/O of its own (the
counter is a deterministic function of a message), keeps no clock, and never mutates its input.
Every strategy is a configuration of this plan; the later stages (clipping, folding into a
summary, retrieval) build on the same walk.

How a view is chosen
--------------------
Units (see :mod:`langmem_ext.messages`) are walked from the newest backwards, with their token
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

import math
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from typing import Literal

from langchain_core.messages import BaseMessage, HumanMessage, SystemMessage

from langmem_ext._identity import KeyChain, stable_key
from langmem_ext.errors import ContextOverflowError
from langmem_ext.messages import (
    Unit,
    as_standard,
    clip_message,
    ensure_message,
    is_system,
    iter_units_reverse,
    merge_system_messages,
)
from langmem_ext.result import MemoryReport, MemoryResult
from langmem_ext.state import MemoryState
from langmem_ext.tokens import TokenCounter

__all__ = ["CutConfig", "Overflow", "StartOn", "plan_cut"]

StartOn = Literal["human", "any"]
Overflow = Literal["error", "clip"]


@dataclass(frozen=True, slots=True)
class CutConfig:
    """The knobs of the cutting stage. Validated on construction, with messages that say why."""

    max_tokens: int | None = None
    target_tokens: int | None = None
    max_messages: int | None = None
    reserve_tokens: int = 0
    safety_margin: float = 0.0
    min_messages: int = 1
    start_on: StartOn = "human"
    keep_system: bool = True
    overflow: Overflow = "error"

    def __post_init__(self) -> None:
        def positive_int(name: str, value: object, minimum: int) -> None:
            if value is not None and (
                not isinstance(value, int) or isinstance(value, bool) or value < minimum
            ):
                raise ValueError(f"{name} must be an integer >= {minimum}, got {value!r}")

        positive_int("max_tokens", self.max_tokens, 1)
        positive_int("target_tokens", self.target_tokens, 1)
        positive_int("max_messages", self.max_messages, 1)
        positive_int("reserve_tokens", self.reserve_tokens, 0)
        positive_int("min_messages", self.min_messages, 0)
        if (
            not isinstance(self.safety_margin, (int, float))
            or isinstance(self.safety_margin, bool)
            or not 0.0 <= self.safety_margin < 1.0  # also refuses NaN
        ):
            raise ValueError(f"safety_margin must be in [0, 1), got {self.safety_margin!r}")
        if self.target_tokens is not None:
            if self.max_tokens is None:
                raise ValueError("target_tokens needs max_tokens")
            if self.target_tokens > self.max_tokens:
                raise ValueError(
                    f"target_tokens ({self.target_tokens:,}) must not exceed max_tokens "
                    f"({self.max_tokens:,}); it is the level a cut goes down to"
                )
        if self.max_tokens is not None and self.reserve_tokens >= self.max_tokens:
            raise ValueError(
                f"reserve_tokens ({self.reserve_tokens:,}) leaves nothing of max_tokens "
                f"({self.max_tokens:,}) for messages"
            )
        if self.start_on not in ("human", "any"):
            raise ValueError(f"start_on must be 'human' or 'any', got {self.start_on!r}")
        if self.overflow not in ("error", "clip"):
            raise ValueError(f"overflow must be 'error' or 'clip', got {self.overflow!r}")

    def ceiling(self, tokens: int | None) -> int | None:
        """What a view may cost under a token level, after the safety margin and the reserve."""
        if tokens is None:
            return None
        return math.floor(tokens * (1.0 - self.safety_margin)) - self.reserve_tokens


@dataclass(slots=True)
class _Costed:
    unit: Unit
    tokens: int
    size: int  # messages the unit puts in a view
    clipped: tuple[str, ...] = ()


@dataclass(slots=True)
class _Walk:
    """Units from the newest backwards, pulled lazily, with running sums (position 0 = newest)."""

    walker: Iterator[Unit]
    count: Callable[[BaseMessage], int]
    units: list[_Costed] = field(default_factory=list)
    cum_tokens: list[int] = field(default_factory=list)
    cum_size: list[int] = field(default_factory=list)
    done: bool = False

    def has(self, pos: int) -> bool:
        while len(self.units) <= pos and not self.done:
            unit = next(self.walker, None)
            if unit is None:
                self.done = True
                break
            tokens = sum(self.count(m) for m in unit.messages)
            self.units.append(_Costed(unit, tokens, len(unit.messages)))
            self.cum_tokens.append((self.cum_tokens[-1] if self.cum_tokens else 0) + tokens)
            self.cum_size.append((self.cum_size[-1] if self.cum_size else 0) + len(unit.messages))
        return pos < len(self.units)

    def replace(self, pos: int, unit: Unit) -> None:
        """Put a changed unit (clipped, shortened) at ``pos`` and fix the running sums."""
        old = self.units[pos]
        tokens = sum(self.count(m) for m in unit.messages)
        d_tokens, d_size = tokens - old.tokens, len(unit.messages) - old.size
        self.units[pos] = _Costed(unit, tokens, len(unit.messages))
        for q in range(pos, len(self.units)):
            self.cum_tokens[q] += d_tokens
            self.cum_size[q] += d_size


def _fits(tokens: int, size: int, limit: int | None, max_messages: int | None) -> bool:
    return (limit is None or tokens <= limit) and (max_messages is None or size <= max_messages)


@dataclass(frozen=True, slots=True)
class Selection:
    """What :func:`select_view` chose: the view and the figures the callers report."""

    view: list[BaseMessage]
    #: tokens of the view by the counter, with the per-request overhead
    tokens: int
    #: input messages of ``messages[start:]`` the view represents
    kept: int
    #: index of the first kept message when the view is one contiguous run, else None
    cut: int | None
    #: index of the oldest kept message (also for a gap view)
    first: int | None = None
    clipped: tuple[str, ...] = ()
    repaired: bool = False
    #: hysteresis held the previous cut
    held: bool = False
    gap: bool = False


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


def plan_cut(
    messages: Sequence[BaseMessage],
    state: MemoryState,
    config: CutConfig,
    counter: TokenCounter,
) -> MemoryResult:
    """The view of ``messages`` for this turn, the next state, and the report. Pure."""
    n = len(messages)
    keys = KeyChain(messages)
    all_tokens, rewritten = running_total(messages, state, counter.count_message, keys)
    has_system = n > 0 and is_system(ensure_message(messages[0], 0))
    system = as_standard(messages[0]) if has_system and config.keep_system else None
    assert system is None or isinstance(system, SystemMessage)
    chosen = select_view(
        messages, 1 if has_system else 0, system, config, counter, state, keys=keys
    )
    kept = chosen.kept + (1 if system is not None else 0)
    next_state = replace(
        state,
        seen=n,
        seen_tokens=all_tokens,
        seen_key=keys(n - 1) if n else None,
        cut_index=chosen.cut,
        cut_key=keys(chosen.cut) if chosen.cut is not None else None,
    )
    prefix_kept = chosen.held or (
        chosen.cut is not None
        and state.cut_index == chosen.cut
        and state.cut_key == next_state.cut_key
    )
    report = MemoryReport(
        tokens_before=counter.count_messages(()) + all_tokens,
        tokens_after=chosen.tokens,
        messages_before=n,
        messages_after=len(chosen.view),
        messages_dropped=n - kept,
        budget=config.ceiling(config.max_tokens),
        clipped=chosen.clipped,
        repaired=chosen.repaired,
        prefix_kept=prefix_kept,
        gap=chosen.gap,
        history_rewritten=rewritten,
    )
    return MemoryResult(chosen.view, next_state, report)


def select_view(
    messages: Sequence[BaseMessage],
    start: int,
    system: SystemMessage | None,
    config: CutConfig,
    counter: TokenCounter,
    state: MemoryState | None = None,
    shown: Callable[[Unit], Unit] | None = None,
    keys: KeyChain | None = None,
) -> Selection:
    """The cutting stage: the view of ``messages[start:]`` under ``system``, within the budget.

    ``system`` is the message pinned first (the history's own system message, or one that also
    carries a summary); system messages found in ``messages[start:]`` are merged into it (or
    dropped with ``keep_system=False``). ``state`` supplies the previous cut for hysteresis;
    ``shown`` maps each unit to the form it takes in the view (e.g. clipped tool outputs);
    ``keys`` is the caller's :class:`~langmem_ext._identity.KeyChain` over ``messages``, if any.
    """
    count = counter.count_message
    overhead = counter.count_messages(())
    sys_tokens = count(system) if system is not None else 0
    fixed = overhead + sys_tokens
    max_view = config.ceiling(config.max_tokens)
    hi = None if max_view is None else max_view - fixed
    target_view = config.ceiling(config.target_tokens)
    lo = hi if target_view is None else target_view - fixed

    units = iter_units_reverse(messages, start)
    walk = _Walk(units if shown is None else map(shown, units), count)
    if not walk.has(0):  # nothing but (maybe) a system message
        view: list[BaseMessage] = [system] if system is not None else []
        return Selection(view, counter.count_messages(view), 0, None)

    # -- find the newest human turn and the unit that can start a view before it ---------------
    def leads(unit: Unit, start_on: StartOn) -> bool:
        if start_on == "human":
            return unit.kind == "human"
        return unit.kind in ("human", "ai", "tool")  # a custom role never leads a view

    h = 0
    while walk.has(h) and not walk.units[h].unit.has_human:
        h += 1
    start_on: StartOn = config.start_on
    anchor: int | None = None
    if walk.has(h):
        a = h
        while walk.has(a) and not leads(walk.units[a].unit, start_on):
            a += 1
        anchor = a if walk.has(a) else h
    if anchor is not None and start_on == "human" and not leads(walk.units[anchor].unit, "human"):
        # no human-led unit at all: the newest human message sits inside a tool round. The
        # unit's repaired order puts every result right after its call, so the part from that
        # human message on is itself valid: start the view there
        unit = walk.units[anchor].unit
        first = next(i for i, m in enumerate(unit.messages) if isinstance(m, HumanMessage))
        span = {id(messages[k]): k for k in range(unit.start, unit.stop)}
        omitted: tuple[tuple[int, Literal["cut"]], ...] = tuple(
            (span[id(m)], "cut") for m in unit.messages[:first] if id(m) in span
        )
        shorter = replace(
            unit, messages=unit.messages[first:], kind="human", dropped=unit.dropped + omitted
        )
        walk.replace(anchor, shorter)
    if anchor is None or not leads(walk.units[anchor].unit, start_on):
        start_on = "any"  # no human-led unit anywhere: the rule cannot hold, use unit boundaries
        if anchor is None:
            h = -1

    # -- the required tail: the newest unit and min_messages -----------------------------------
    t = 0
    while walk.cum_size[t] < config.min_messages and walk.has(t + 1):
        t += 1
    if (
        anchor is None
        or h <= t + 1
        or _fits(walk.cum_tokens[anchor], walk.cum_size[anchor], hi, config.max_messages)
    ):
        # head and tail touch, or everything from the head to the end fits: one contiguous
        # required run, which must start on a leading unit
        floor = 0 if anchor is None else anchor
        t, anchor = max(t, floor), None
        u = t
        while not leads(walk.units[u].unit, start_on) and walk.has(u + 1):
            u += 1
        if not leads(walk.units[u].unit, start_on):  # none older: min_messages is best-effort
            u = t
            while u > floor and not leads(walk.units[u].unit, start_on):
                u -= 1
        t = u
    head = range(h, anchor + 1) if anchor is not None else range(0)
    required = [*range(t + 1), *head]
    needed = walk.cum_tokens[t] + sum(walk.units[p].tokens for p in head)

    clipped: tuple[str, ...] = ()
    if hi is not None and needed > hi:
        needed, clipped = _overflow(walk, required, needed, hi, config, count, sys_tokens, fixed)

    # -- choose the selection --------------------------------------------------------------------
    prefix_kept = False
    selected: list[int]
    if clipped:
        selected = required
    elif anchor is None:
        # contiguous: keep the previous cut while it fits (hysteresis) or cut afresh
        kept_cut = (
            _held_cut(walk, messages, state, config, hi, t, keys)
            if target_view and state is not None
            else None
        )
        if kept_cut is not None:
            selected, prefix_kept = list(range(kept_cut + 1)), True
        else:
            best = t
            c = t
            while walk.has(c + 1) and _fits(
                walk.cum_tokens[c + 1], walk.cum_size[c + 1], lo, config.max_messages
            ):
                c += 1
                if leads(walk.units[c].unit, start_on):
                    best = c
            selected = list(range(best + 1))
    else:
        # gap: the head, then the newest units that fit after it
        g = t
        head_tokens = sum(walk.units[p].tokens for p in head)
        head_size = sum(walk.units[p].size for p in head)
        while g + 1 < h and _fits(
            walk.cum_tokens[g + 1] + head_tokens,
            walk.cum_size[g + 1] + head_size,
            hi,
            config.max_messages,
        ):
            g += 1
        selected = [*range(g + 1), *head]

    # -- build the view ----------------------------------------------------------------------------
    chosen = sorted(set(selected), reverse=True)  # oldest first
    strays: list[SystemMessage] = []  # system messages later in the history
    body: list[BaseMessage] = []
    kept_inputs = 0
    repaired = False
    for p in chosen:
        unit = walk.units[p].unit
        kept_inputs += unit.size - len(unit.dropped)
        repaired = repaired or unit.repaired
        for m in unit.messages:
            if isinstance(m, SystemMessage):
                strays.append(m)
            else:
                body.append(m)
    leading: list[BaseMessage] = []
    if config.keep_system and (system is not None or strays):
        parts = ([system] if system is not None else []) + strays
        leading = [merge_system_messages(parts)]
        repaired = repaired or bool(strays)
    elif system is not None:
        leading = [system]
    if strays and not config.keep_system:
        kept_inputs -= len(strays)
    view = leading + body

    # the walk already summed every kept message (clips included); only stray system messages
    # (merged into the first, or dropped) make the view differ from what the walk counted
    if strays:
        total = counter.count_messages(view)
    else:
        total = fixed + sum(walk.units[p].tokens for p in chosen)
    if max_view is not None and total > max_view:
        # only reachable when merging stray system messages cost more than the parts: drop them
        view = ([system] if system is not None else []) + body
        kept_inputs -= len(strays)
        total = counter.count_messages(view)
        if total > max_view:  # pragma: no cover - defensive: the selection above fits by sums
            raise ContextOverflowError(
                f"the view costs {total:,} tokens, over the budget of {max_view:,}",
                needed=total,
                available=max_view,
                max_tokens=config.max_tokens or 0,
                reserve_tokens=config.reserve_tokens,
                system_tokens=sys_tokens,
            )

    contiguous = anchor is None
    return Selection(
        view,
        total,
        kept_inputs,
        walk.units[chosen[0]].unit.start if contiguous and chosen else None,
        first=walk.units[chosen[0]].unit.start if chosen else None,
        clipped=clipped,
        repaired=repaired,
        held=prefix_kept,
        gap=not contiguous,
    )


def _held_cut(
    walk: _Walk,
    messages: Sequence[BaseMessage],
    state: MemoryState,
    config: CutConfig,
    hi: int | None,
    t: int,
    keys: KeyChain | None = None,
) -> int | None:
    """Position of the previous turn's cut if the view from it still fits, else None."""
    if state.cut_key is None or state.cut_index is None:
        return None
    keys = keys or KeyChain(messages)
    index_ok = state.cut_index < len(messages) and keys(state.cut_index) == state.cut_key
    p = 0
    while walk.has(p):
        if not _fits(walk.cum_tokens[p], walk.cum_size[p], hi, config.max_messages):
            return None
        unit = walk.units[p].unit
        at_cut = unit.start == state.cut_index if index_ok else keys(unit.start) == state.cut_key
        if at_cut:
            ok = p >= t and (unit.kind == "human" or config.start_on == "any")
            return p if ok else None
        if index_ok and unit.start < state.cut_index:
            return None
        p += 1
    return None


def _overflow(
    walk: _Walk,
    required: list[int],
    needed: int,
    available: int,
    config: CutConfig,
    count: Callable[[BaseMessage], int],
    sys_tokens: int,
    fixed: int,
) -> tuple[int, tuple[str, ...]]:
    """Make the required units fit by clipping, or raise. Returns (new cost, clipped keys)."""

    def fail(note: str) -> ContextOverflowError:
        newest_human = next(
            (
                (m, count(m))
                for p in required
                for m in reversed(walk.units[p].unit.messages)
                if isinstance(m, HumanMessage)
            ),
            None,
        )
        human = (
            f"; the newest human message alone needs {newest_human[1]:,}"
            if newest_human is not None
            else ""
        )
        return ContextOverflowError(
            f"the messages that must be in the view need {needed:,} tokens{human}, but the "
            f"budget leaves {max(available, 0):,} for them (max_tokens={config.max_tokens:,}, "
            f"safety_margin={config.safety_margin:g}, reserve_tokens={config.reserve_tokens:,}, "
            f"system message {sys_tokens:,}, request overhead {fixed - sys_tokens:,}){note}",
            needed=needed,
            available=available,
            max_tokens=config.max_tokens or 0,
            reserve_tokens=config.reserve_tokens,
            system_tokens=sys_tokens,
        )

    if config.overflow == "error":
        raise fail(". Raise max_tokens, or pass overflow='clip' to clip the message with a marker.")
    if available <= 0:
        raise fail(". Clipping cannot help: the system message and reserve alone exceed it.")

    # clip order: the newest human message first, then the largest required messages
    slots = [(p, i) for p in required for i in range(len(walk.units[p].unit.messages))]

    def msg(slot: tuple[int, int]) -> BaseMessage:
        return walk.units[slot[0]].unit.messages[slot[1]]

    humans = [s for s in slots if isinstance(msg(s), HumanMessage)]
    newest = [min(humans, key=lambda s: (s[0], -s[1]))] if humans else []
    rest = sorted(
        (s for s in slots if s not in newest),
        key=lambda s: -count(msg(s)),
    )
    excess = needed - available
    clipped: list[str] = []
    for slot in newest + rest:
        if excess <= 0:
            break
        original = msg(slot)
        before = count(original)
        new = clip_message(original, max(before - excess, 0), count)
        if new is None:
            continue
        after = count(new)
        if after >= before:
            continue
        p, i = slot
        unit_messages = list(walk.units[p].unit.messages)
        unit_messages[i] = new
        walk.replace(p, replace(walk.units[p].unit, messages=tuple(unit_messages)))
        excess -= before - after
        clipped.append(stable_key(original))
    if excess > 0:
        raise fail(". Clipping every required message was not enough.")
    return available + excess, tuple(clipped)
