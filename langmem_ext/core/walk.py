"""The walk a view is chosen by: units from the newest backwards, costed lazily, with running sums.

:class:`Walk` pulls units only as far as a plan looks (so a turn costs O(view), not O(history));
:class:`Selection` is what a plan chose and the figures it reports; :class:`Budget` and
:class:`Required` are the room of one selection and what every view must hold. Shared by the
cutting plan (:mod:`~langmem_ext.core.plan`), its overflow policy
(:mod:`~langmem_ext.core.overflow`) and the fold plan.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from langchain_core.messages import BaseMessage, SystemMessage

from langmem_ext.core.limits import CutConfig, StartOn
from langmem_ext.core.messages import (
    Unit,
)
from langmem_ext.core.tokens import TokenCounter

__all__ = ["Budget", "Costed", "Required", "Selection", "Walk", "budget_for", "fits_within"]


@dataclass(slots=True)
class Costed:
    unit: Unit
    tokens: int
    size: int  # messages the unit puts in a view
    clipped: tuple[str, ...] = ()


@dataclass(slots=True)
class Walk:
    """Units from the newest backwards, pulled lazily, with running sums (position 0 = newest)."""

    walker: Iterator[Unit]
    count: Callable[[BaseMessage], int]
    units: list[Costed] = field(default_factory=list)
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
            self.units.append(Costed(unit, tokens, len(unit.messages)))
            self.cum_tokens.append((self.cum_tokens[-1] if self.cum_tokens else 0) + tokens)
            self.cum_size.append((self.cum_size[-1] if self.cum_size else 0) + len(unit.messages))
        return pos < len(self.units)

    def replace(self, pos: int, unit: Unit) -> None:
        """Put a changed unit (clipped, shortened) at ``pos`` and fix the running sums."""
        old = self.units[pos]
        tokens = sum(self.count(m) for m in unit.messages)
        d_tokens, d_size = tokens - old.tokens, len(unit.messages) - old.size
        self.units[pos] = Costed(unit, tokens, len(unit.messages))
        for q in range(pos, len(self.units)):
            self.cum_tokens[q] += d_tokens
            self.cum_size[q] += d_size


def fits_within(tokens: int, size: int, limit: int | None, max_messages: int | None) -> bool:
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
    #: index of the first message of the view's newest contiguous run (``first`` unless a gap)
    suffix: int | None = None
    #: input messages a repair removed (orphan and duplicate tool results) in the selected units
    #: and next to the view's newest run: in ``messages_dropped`` (not in ``kept``), but never
    #: shown by any view, so they are not missing from it either (see :attr:`represented`)
    repaired_away: int = 0

    @property
    def represented(self) -> int:
        """Input messages the view stands for: those it keeps, and those a repair removed that no
        view could show. What "is every message accounted for" (a fold's trigger, the
        not-shown count, whether a verbatim message was cut) is measured against."""
        return self.kept + self.repaired_away

    def missing_from(self, index: int, n: int) -> int:
        """How many of the input messages ``index..n-1`` the view leaves out (a gap view's head
        counts as shown; messages a repair removed count as represented)."""
        if self.suffix is None:
            return n - index
        if self.suffix <= index:
            return 0
        head = self.represented - (n - self.suffix)  # the gap view's head messages
        shown_head = head if self.gap and self.first is not None and self.first >= index else 0
        return max(self.suffix - index - shown_head, 0)


@dataclass(frozen=True, slots=True)
class Budget:
    """The token room of one selection, after the fixed part of the request."""

    #: the pinned system message
    system_tokens: int
    #: request overhead plus the system message: what the view costs before any message
    fixed: int
    #: what the whole view may cost (``max_tokens`` after margin and reserve), None: no limit
    max_view: int | None
    #: what the view may cost at the hysteresis level (``target_tokens``), None: no target
    target_view: int | None
    #: room for messages under ``max_tokens``
    room: int | None
    #: room for messages at the level a fresh cut goes down to (``target_tokens`` or the top)
    cut_room: int | None


def budget_for(config: CutConfig, counter: TokenCounter, system: SystemMessage | None) -> Budget:
    system_tokens = counter.count_message(system) if system is not None else 0
    fixed = counter.count_messages(()) + system_tokens
    max_view = config.ceiling(config.max_tokens)
    room = None if max_view is None else max_view - fixed
    target_view = config.ceiling(config.target_tokens)
    cut_room = room if target_view is None else target_view - fixed
    return Budget(system_tokens, fixed, max_view, target_view, room, cut_room)


@dataclass(frozen=True, slots=True)
class Required:
    """What every view must hold, as walk positions (0 = newest unit)."""

    #: the contiguous run ``0..tail`` (newest unit, ``min_messages``, and, when the newest human
    #: turn fits with it, that turn from the unit that may lead a view)
    tail: int
    #: the newest human turn's head (the unit that leads it, up to its human message) when it is
    #: apart from the tail: a gap view. Empty for a contiguous view.
    head: range
    #: the start rule that holds (``"any"`` when no unit anywhere can lead by ``start_on``)
    start_on: StartOn

    @property
    def positions(self) -> list[int]:
        return [*range(self.tail + 1), *self.head]
