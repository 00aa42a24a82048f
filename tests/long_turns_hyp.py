"""Hypothesis strategies for long agent turns: :func:`long_turns` (1-3 human requests, each
followed by many tool rounds of 1-3 parallel calls, results of varying size, now and then a huge
one, optionally a trailing call still in flight; every message tagged ``mk<N>:``) and
:func:`long_runs` (a property_harness :class:`Case` whose conversation is such a turn)."""

from __future__ import annotations

import itertools
import json
from dataclasses import replace
from typing import Any

from hypothesis import strategies as st
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage, ToolMessage
from property_harness import Case, cases, tagged
from strategies_hyp import SNIPPETS, TOOLS, ints

#: per-call result sizes in characters, one drawn per result: mostly small, some long, and
#: one in 16 "huge" (6,000 characters: over most of the budgets drawn here)
_SIZES = (0, 12, 40, 40, 60, 80, 80, 120, 120, 160, 200, 300, 400, 700, 1_600, 6_000)
_WIDTHS = (1, 1, 1, 1, 2, 2, 3)  # parallel calls per round
_DELTAS = st.sampled_from((0.0, 0.5, 1.0, 3.0, 10.0, 60.0))
_bools = st.booleans()


def _text(seed: int, chars: int) -> str:
    """``chars`` characters of snippet text (deterministic in ``seed``)."""
    if chars == 0:
        return ""
    words = itertools.cycle(SNIPPETS[2 + (seed + k) % (len(SNIPPETS) - 2)] for k in range(7))
    out = ""
    while len(out) < chars:
        out += next(words) + " "
    return out[:chars]


class _Serial:
    def __init__(self) -> None:
        self.n = 0

    def __call__(self) -> int:
        self.n += 1
        return self.n


def _round(draw: Any, serial: _Serial, in_flight: bool = False) -> list[BaseMessage]:
    """One tool round: an AIMessage with 1-3 parallel calls and its results, in a drawn order
    (for a call still in flight, only some of them)."""
    shape = draw(ints(0, len(_WIDTHS) * 6 - 1))
    width, order = _WIDTHS[shape % len(_WIDTHS)], shape // len(_WIDTHS)
    k = serial()
    calls = [
        {
            "name": TOOLS[(k + p) % len(TOOLS)],
            "args": {"path": f"src/part_{k}_{p}.py"},
            "id": f"call_{k}_{p}",
        }
        for p in range(width)
    ]
    content = _text(k, 40) if order % 3 == 0 else ""
    ai = AIMessage(content, tool_calls=calls, id=f"ai-{k}" if order % 2 else None)
    orders = list(itertools.permutations(calls))
    picked = orders[order % len(orders)]
    answered = draw(ints(0, width - 1)) if in_flight else width
    results: list[BaseMessage] = []
    for call in picked[:answered]:
        size = draw(ints(0, len(_SIZES) - 1))
        body = json.dumps({"file": call["args"]["path"], "text": _text(serial(), _SIZES[size])})
        results.append(
            ToolMessage(body, tool_call_id=call["id"], name=call["name"], id=f"t-{serial()}")
        )
    return [ai, *results]


@st.composite
def long_turns(draw: Any, max_rounds: int = 40) -> tuple[tuple[BaseMessage, ...], ...]:
    """The groups of messages between two model calls: ``[system?, request]``, then one group
    per round (its AIMessage and results; the assistant's answer and the next request are added
    to the last round's group), and optionally a trailing round still in flight. Every message
    is tagged ``mk<N>:`` with its index in the history."""
    serial = _Serial()
    groups: list[list[BaseMessage]] = []
    current: list[BaseMessage] = []
    if draw(_bools):
        current.append(SystemMessage("You are a coding agent. " + _text(0, 60), id="sys"))
    for r in range(draw(ints(1, 3))):
        if r:
            current.append(AIMessage(f"request {r - 1} done: " + _text(r, 80), id=f"answer-{r}"))
        words = draw(st.sampled_from((8, 20, 20, 60)))
        current.append(HumanMessage(f"request {r}: " + _text(r + 3, words * 5), id=f"req-{r}"))
        for _ in range(draw(ints(1, max_rounds))):
            groups.append(current)
            current = _round(draw, serial)
    groups.append(current)
    if draw(ints(0, 3)) == 0:  # a call still in flight (a view asked for mid-round)
        groups.append(_round(draw, serial, in_flight=True))
    count = 0
    out = []
    for group in groups:
        out.append(tuple(tagged(m, count + k) for k, m in enumerate(group)))
        count += len(group)
    return tuple(out)


@st.composite
def long_runs(
    draw: Any,
    failures: tuple[str, ...] = ("none",),
    overflows: tuple[str, ...] = (
        "truncate_summary",
        "truncate_summary",
        "truncate_oldest",
        "error",
    ),
) -> Case:
    """A property_harness :class:`Case` (strategy, budgets 300-2,000 approximate tokens,
    summarizer schedule) whose conversation is a long agent turn (:func:`long_turns`)."""
    base = draw(cases(failures=failures, overflows=overflows, max_turns=1))
    turns = draw(long_turns())
    return replace(base, turns=turns, deltas=tuple(draw(_DELTAS) for _ in turns))
