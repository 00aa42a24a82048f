"""The fold plan's final view: the not-shown note, and the overflow policy when nothing fits.

:func:`final_view` selects the view under the summary; when some unfolded messages do not fit
(the summarizer is failing, or the budget is small), it adds a visible note saying how many. When
the summary, ``min_messages`` and the newest human message cannot fit at all, the overflow policy
decides in a fixed number of steps (:func:`_overflow_steps`), or raises
:class:`~langmem_ext.errors.MemoryBudgetExceeded` with the numbers.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from langchain_core.messages import HumanMessage

from langmem_ext.core.fold_config import TRUNCATED, not_shown_note, render_summary
from langmem_ext.core.fold_turn import FoldTurn
from langmem_ext.core.state import MemoryState
from langmem_ext.core.text import longest_prefix_within
from langmem_ext.core.tokens import TokenCounter
from langmem_ext.core.walk import Selection
from langmem_ext.errors import ContextOverflowError, MemoryBudgetExceeded

__all__ = ["count_not_shown", "final_view"]


def count_not_shown(chosen: Selection, turn: FoldTurn) -> int:
    """Unfolded messages the view leaves out (only while the summarizer is failing or the budget
    is too small for all of them)."""
    return (turn.n - turn.boundary) - turn.unfolded_kept(chosen)


def final_view(
    turn: FoldTurn, state: MemoryState
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
    turn: FoldTurn, first_error: ContextOverflowError
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
    turn: FoldTurn, state: MemoryState, summary: dict[str, str], **cut: Any
) -> tuple[Selection, HumanMessage | None]:
    """The view from ``start`` under ``summary``; when some unfolded messages do not fit, with a
    visible note that says how many. The note costs tokens, which can change how many fit: start
    from the most that could be missing and step down to the count the note states exactly (a
    few passes at most: only the digits change)."""
    chosen, human = turn.select("", summary, **cut)
    missing = count_not_shown(chosen, turn)
    if missing <= 0:
        return chosen, human
    claimed = turn.n - turn.boundary
    for _ in range(8):
        note = not_shown_note(claimed, state.health, state.last_error)
        chosen, human = turn.select(note, summary, **cut)
        missing = count_not_shown(chosen, turn)
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
        keep = longest_prefix_within(text, per - counter.count_text(TRUNCATED), counter.count_text)
        out[name] = (text[:keep].rstrip() + TRUNCATED) if keep > 0 else ""
    return out
