"""A question about the past may spend more of the request on its retrieved context
(``RetrievalConfig.past_tokens``): the tokens are lent by the view's oldest verbatim turns, for
this request only.

The inner strategy's state is not touched: the turns lent are not folded, evicted or indexed,
and the next request shows them again. What is never lent: the system messages, the running
summary, and the newest :data:`KEEP_TURNS` turns (the request's turn and the one before it).
A view is only ever cut in front of a human message, so a tool call never loses its results.
Pure functions over a view: no I/O.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from langchain_core.messages import BaseMessage, HumanMessage, SystemMessage

from langmem_ext.core.fold_config import SUMMARY_ID
from langmem_ext.core.tokens import TokenCounter

__all__ = ["KEEP_TURNS", "Cut", "conversation_start", "cuts", "lent_view"]


#: the newest turns a lend never takes: the request's and the one before it
KEEP_TURNS = 2


@dataclass(frozen=True, slots=True)
class Cut:
    """The view may start its conversation at ``at`` (a human message) instead: the messages
    before it, from :func:`conversation_start`, are left out, freeing ``tokens``."""

    at: int
    tokens: int


def conversation_start(view: Sequence[BaseMessage]) -> int:
    """Where the view's conversation starts: after its leading system messages and running
    summary (which a lend never takes)."""
    i = 0
    while i < len(view) and (isinstance(view[i], SystemMessage) or view[i].id == SUMMARY_ID):
        i += 1
    return i


def cuts(view: Sequence[BaseMessage], counter: TokenCounter) -> list[Cut]:
    """Every place the view's conversation may start instead, oldest first (so each frees more
    than the one before): in front of a human message, keeping the newest :data:`KEEP_TURNS`
    turns whole. Empty when the view has no turn to lend."""
    start = conversation_start(view)
    humans = [
        i
        for i in range(start, len(view))
        if isinstance(view[i], HumanMessage) and view[i].id != SUMMARY_ID
    ]
    out: list[Cut] = []
    tokens, counted = 0, start
    for at in humans[: max(len(humans) - KEEP_TURNS + 1, 0)]:
        if at <= start:
            continue
        tokens += sum(counter.count_message(m) for m in view[counted:at])
        counted = at
        out.append(Cut(at, tokens))
    return out


def lent_view(
    view: Sequence[BaseMessage], options: Sequence[Cut], needed: int
) -> tuple[list[BaseMessage], Cut | None]:
    """``view`` without its oldest turns, freeing at least ``needed`` tokens with the fewest
    messages (``options``: its :func:`cuts`), and the cut taken; ``view`` itself and None when
    nothing is needed. A ``needed`` no cut frees is a caller's error."""
    if needed <= 0:
        return list(view), None
    cut = next((c for c in options if c.tokens >= needed), None)
    if cut is None:
        raise ValueError(f"no cut of the view frees {needed} tokens")
    start = conversation_start(view)
    return [*view[:start], *view[cut.at :]], cut
