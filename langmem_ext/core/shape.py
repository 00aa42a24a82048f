"""A view's shape: what the model saw, in one short line (the CLI's tables, the demos, notebooks).

A view is a list of messages. Its shape writes one letter per message, the messages of one turn
together and the turns apart, so the structure reads at a glance and fits a table column::

    S+ 3×(HA) HcTcTTA H

=====  ===========================================================================================
``S``  a system message
``S+`` a system message that carries the running summary (with ``placement="human"`` the summary
       has a message of its own, also ``S+``)
``R``  the retrieved-context message :class:`~langmem_ext.retrieval.strategy.Retrieval` places
``H``  a human message: each starts a turn
``A``  an assistant answer
``c``  an assistant message calling tools
``T``  a tool result
``?``  anything else
=====  ===========================================================================================

``S``, ``S+`` and ``R`` stand alone; every other letter joins the turn before it. Consecutive
identical turns are written once with their count, ``3×(HA)`` (two or more). The summary and the
retrieved context are recognised the way the package places them: the summary by its message id
(:data:`~langmem_ext.core.fold_config.SUMMARY_ID`) or by the fenced block
:func:`~langmem_ext.core.fold_config.render_summary` writes into a system message, the context by
its id (:data:`RETRIEVED_ID`).

Pure: no I/O.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence

from langchain_core.messages import AIMessage, BaseMessage

from langmem_ext.core.fold_config import SUMMARY_ID, render_summary
from langmem_ext.core.messages import role_of

__all__ = ["RETRIEVED_ID", "SHAPE_LEGEND", "view_shape"]

#: the id of the context message :class:`~langmem_ext.retrieval.strategy.Retrieval` places in a
#: view (defined here, below retrieval, so this module can recognise it)
RETRIEVED_ID = "langmem_ext:retrieved"

#: one line that explains :func:`view_shape`'s letters, for the top of a table
SHAPE_LEGEND = (
    "shape: S system, S+ system with the running summary, R retrieved context, H human, "
    "A answer, c tool call, T tool result, ? other; a turn's letters together, 3×(HA) = 3 turns"
)

#: the opening line of the summary block, as every view places it
_SUMMARY_FENCE = render_summary({}).partition("\n")[0]
#: letters that stand alone: they never open or join a turn
_ALONE = frozenset({"S", "S+", "R"})
_ELLIPSIS = "…"


def _letter(message: BaseMessage) -> str:
    """The letter of one message (see the module notes)."""
    role = role_of(message)
    if role == "system":
        carries = message.id == SUMMARY_ID or _SUMMARY_FENCE in message.text
        return "S+" if carries else "S"
    if message.id == SUMMARY_ID:
        return "S+"
    if message.id == RETRIEVED_ID:
        return "R"
    if role == "human":
        return "H"
    if role == "ai":
        return "c" if isinstance(message, AIMessage) and message.tool_calls else "A"
    return "T" if role == "tool" else "?"


def _turns(letters: Sequence[str]) -> list[str]:
    """The letters in groups: each ``S``/``S+``/``R`` alone, a new turn at each ``H``, every other
    letter with the turn before it (or opening one when there is none to join)."""
    turns: list[list[str]] = []
    for letter in letters:
        opens = letter in _ALONE or letter == "H"
        if opens or not turns or turns[-1][0] in _ALONE:
            turns.append([letter])
        else:
            turns[-1].append(letter)
    return ["".join(turn) for turn in turns]


def _elide(text: str, width: int) -> str:
    """``text`` cut to at most ``width`` characters: its start, ``…``, and its end (the end, the
    newest turns, gets two thirds)."""
    if len(text) <= width:
        return text
    head = (width - 1) // 3
    tail = width - 1 - head
    return text[:head] + _ELLIPSIS + (text[-tail:] if tail else "")


def view_shape(messages: Sequence[BaseMessage], *, width: int | None = None) -> str:
    """The shape of ``messages`` (a view): one letter per message, turns apart, repeats counted.

    See the module notes for the letters (:data:`SHAPE_LEGEND` in one line). With ``width``, a
    longer shape keeps its start and its end around a ``…``, at most ``width`` characters in all.
    An empty view has the empty shape.

    >>> from langchain_core.messages import AIMessage, HumanMessage, SystemMessage, ToolMessage
    >>> call = AIMessage("", tool_calls=[{"name": "track", "args": {}, "id": "1"}])
    >>> turn = [HumanMessage("hi"), AIMessage("hello")]
    >>> view = [SystemMessage("Be brief."), *turn, *turn, *turn]
    >>> view += [HumanMessage("where is 4711?"), call, ToolMessage("shipped", tool_call_id="1")]
    >>> view_shape([*view, AIMessage("It has shipped.")])
    'S 3×(HA) HcTA'
    >>> view_shape([*view, AIMessage("It has shipped.")], width=10)
    'S 3…) HcTA'
    >>> view_shape([])
    ''

    Raises:
        ValueError: ``width`` is below 1.
    """
    if width is not None and width < 1:
        raise ValueError(f"width must be at least 1, got {width}")
    parts = []
    for turn, group in itertools.groupby(_turns([_letter(m) for m in messages])):
        count = sum(1 for _ in group)
        parts.append(f"{count}×({turn})" if count >= 2 else turn)
    text = " ".join(parts)
    return text if width is None else _elide(text, width)
