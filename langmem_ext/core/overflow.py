"""The cutting plan's overflow policy: when the messages every view must hold do not fit.

``overflow="error"`` raises :class:`~langmem_ext.errors.ContextOverflowError` with every figure
that explains it; ``overflow="clip"`` clips the required messages (the newest human message
first, or last with ``clip_request_last``, then the largest) with a visible marker until they fit,
or raises when even that is not enough.
"""

from __future__ import annotations

import functools
from dataclasses import replace

from langchain_core.messages import BaseMessage, HumanMessage

from langmem_ext.core.identity import stable_key
from langmem_ext.core.limits import CutConfig
from langmem_ext.core.messages import (
    clip_message,
)
from langmem_ext.core.walk import Budget, Walk
from langmem_ext.errors import ContextOverflowError

__all__ = ["budget_error", "make_required_fit"]


def make_required_fit(
    walk: Walk,
    required: list[int],
    needed: int,
    budget: Budget,
    config: CutConfig,
) -> tuple[str, ...]:
    """Make the required units fit ``budget.room`` by clipping (``overflow="clip"``), or raise
    :class:`~langmem_ext.errors.ContextOverflowError` with the numbers. Returns the clipped
    messages' keys."""
    available = budget.room
    assert available is not None
    refuse = functools.partial(_overflow_error, walk, required, needed, budget, config)
    if config.overflow == "error":
        raise refuse(
            ". Raise max_tokens, or pass overflow='clip' to clip the message with a marker."
        )
    if available <= 0:
        raise refuse(". Clipping cannot help: the system message and reserve alone exceed it.")
    count = walk.count
    excess = needed - available
    clipped: list[str] = []
    for p, i in _clip_order(walk, required, request_last=config.clip_request_last):
        if excess <= 0:
            break
        original = walk.units[p].unit.messages[i]
        before = count(original)
        new = clip_message(original, max(before - excess, 0), count)
        if new is None:
            continue
        after = count(new)
        if after >= before:
            continue
        unit_messages = list(walk.units[p].unit.messages)
        unit_messages[i] = new
        walk.replace(p, replace(walk.units[p].unit, messages=tuple(unit_messages)))
        excess -= before - after
        clipped.append(stable_key(original))
    if excess > 0:
        raise refuse(". Clipping every required message was not enough.")
    return tuple(clipped)


def _clip_order(
    walk: Walk, required: list[int], *, request_last: bool = False
) -> list[tuple[int, int]]:
    """The required messages as (walk position, index in unit), in the order they are clipped:
    the newest human message first (last with ``request_last``), then the largest."""
    slots = [(p, i) for p in required for i in range(len(walk.units[p].unit.messages))]

    def message(slot: tuple[int, int]) -> BaseMessage:
        return walk.units[slot[0]].unit.messages[slot[1]]

    humans = [s for s in slots if isinstance(message(s), HumanMessage)]
    newest = [min(humans, key=lambda s: (s[0], -s[1]))] if humans else []
    rest = sorted((s for s in slots if s not in newest), key=lambda s: -walk.count(message(s)))
    return rest + newest if request_last else newest + rest


def _overflow_error(
    walk: Walk,
    required: list[int],
    needed: int,
    budget: Budget,
    config: CutConfig,
    note: str,
) -> ContextOverflowError:
    """The error for required messages that do not fit, with every figure that explains it."""
    available = budget.room if budget.room is not None else 0
    newest_human = next(
        (
            walk.count(m)
            for p in required
            for m in reversed(walk.units[p].unit.messages)
            if isinstance(m, HumanMessage)
        ),
        None,
    )
    human = (
        f"; the newest human message alone needs {newest_human:,}"
        if newest_human is not None
        else ""
    )
    return budget_error(
        f"the messages that must be in the view need {needed:,} tokens{human}, but the "
        f"budget leaves {max(available, 0):,} for them (max_tokens={config.max_tokens:,}, "
        f"safety_margin={config.safety_margin:g}, reserve_tokens={config.reserve_tokens:,}, "
        f"system message {budget.system_tokens:,}, request overhead "
        f"{budget.fixed - budget.system_tokens:,}){note}",
        needed,
        available,
        budget,
        config,
    )


def budget_error(
    message: str, needed: int, available: int, budget: Budget, config: CutConfig
) -> ContextOverflowError:
    """A :class:`~langmem_ext.errors.ContextOverflowError` carrying the budget's figures."""
    return ContextOverflowError(
        message,
        needed=needed,
        available=available,
        max_tokens=config.max_tokens or 0,
        reserve_tokens=config.reserve_tokens,
        system_tokens=budget.system_tokens,
    )
