"""A strategy of your own on the ``Strategy`` base class, checked with the conformance kit.

``KeepFirstAndLast`` keeps the system message, the first human message (the task as the user
first stated it) and as many of the newest whole units as fit a token budget. The script prints
the view of a short conversation at every model call, then runs
``langmem_ext.testing.check_strategy`` on the strategy. Offline, no API key.

    python examples/custom_strategy.py

``docs/custom_strategy.md`` walks through the same code.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage, ToolMessage

from langmem_ext import (
    ContextOverflowError,
    MemoryReport,
    MemoryResult,
    MemoryState,
    Strategy,
    Unit,
    split_units,
)
from langmem_ext.counting.resolve import CounterLike, as_counter
from langmem_ext.strategies.engine import Plan, finished
from langmem_ext.testing import check_strategy


class KeepFirstAndLast(Strategy):
    """The system message, the first human message, and the newest whole units that fit."""

    def __init__(self, max_tokens: int, *, counter: CounterLike = None) -> None:
        self.max_tokens = max_tokens
        self.counter = as_counter(counter)

    def _plan(
        self, messages: Sequence[BaseMessage], state: MemoryState, now: float, extra: int
    ) -> Plan:
        # pure and needs no summarizer: one step, no requests
        return finished(self._compute, messages, state, extra)

    def units(self, messages: Sequence[BaseMessage]) -> list[Unit]:
        # a tool call and all its results are one unit: kept or dropped together
        return split_units(messages)

    def cost(self, unit: Unit) -> int:
        return sum(self.counter.count_message(m) for m in unit.messages)

    def _compute(
        self, messages: Sequence[BaseMessage], state: MemoryState, extra: int
    ) -> MemoryResult:
        budget = self.max_tokens - extra  # tool schemas travel outside the messages
        rest = self.units(messages)
        pinned: list[Unit] = []
        if rest and rest[0].kind == "system":
            pinned, rest = [rest[0]], rest[1:]
        first = next((i for i, u in enumerate(rest) if u.kind == "human"), None)
        if first is not None:  # what comes before the first human message cannot lead a view
            pinned, rest = [*pinned, rest[first]], rest[first + 1 :]
        cost = self.counter.count_messages([m for u in pinned for m in u.messages])
        newest = max((i for i, u in enumerate(rest) if u.has_human), default=len(rest))
        needed = cost + sum(self.cost(u) for u in rest[newest:])  # the newest human turn
        if needed > budget:
            raise ContextOverflowError(
                f"KeepFirstAndLast needs {needed:,} tokens for the system message, the first "
                f"and the newest human turn, but the budget is {budget:,}",
                needed=needed,
                available=budget,
                max_tokens=self.max_tokens,
                reserve_tokens=extra,
            )
        kept: list[Unit] = []
        for unit in reversed(rest):  # newest first; stop at the first unit that does not fit
            if cost + self.cost(unit) > budget:
                break
            kept.insert(0, unit)
            cost += self.cost(unit)
        view = [m for u in (*pinned, *kept) for m in u.messages]
        shown = sum(u.size - len(u.dropped) for u in (*pinned, *kept))
        report = MemoryReport(
            tokens_before=self.counter.count_messages(messages),
            tokens_after=self.counter.count_messages(view),
            messages_before=len(messages),
            messages_after=len(view),
            messages_dropped=len(messages) - shown,
            budget=budget,
        )
        return MemoryResult(view, replace(state, seen=len(messages)), report)


def conversation() -> list[BaseMessage]:
    """A short trip-planning chat with one tool round."""
    call = {"name": "search_trains", "args": {"to": "Lisbon"}, "id": "call-1"}
    trains = '{"trains": ["Berlin-Paris 08:30", "Paris-Irun 14:10"]} ' * 5
    return [
        SystemMessage("You plan train trips.", id="sys"),
        HumanMessage("Plan a rail trip from Berlin to Lisbon in May, under 400 euros.", id="h1"),
        AIMessage("Happy to. Which dates, and do you mind night trains? " * 3, id="a1"),
        HumanMessage("May 3 to May 10. Night trains are fine.", id="h2"),
        AIMessage("", tool_calls=[call], id="a2"),
        ToolMessage(trains, tool_call_id="call-1", name="search_trains", id="t1"),
        AIMessage("Day 1 to Paris, day 2 to Irun, day 3 by night train to Lisbon. " * 6, id="a3"),
        HumanMessage("And the way back?", id="h3"),
    ]


def label(message: BaseMessage) -> str:
    return f"{type(message).__name__.removesuffix('Message')}({message.id})"


def replay(strategy: Strategy, history: Sequence[BaseMessage]) -> None:
    """Print the view at every model call: after each human message and each tool result."""
    state: MemoryState | None = None
    for end, message in enumerate(history, start=1):
        if not isinstance(message, (HumanMessage, ToolMessage)):
            continue
        result = strategy.apply(history[:end], state)
        state = result.state
        r = result.report
        print(f"{end} messages -> {r.tokens_after}/{r.budget} tokens, dropped {r.messages_dropped}")
        print("  [" + ", ".join(label(m) for m in result.messages) + "]")


def main() -> None:
    replay(KeepFirstAndLast(max_tokens=200), conversation())
    check_strategy(KeepFirstAndLast(max_tokens=1_500))
    print("conformance kit: passed")


if __name__ == "__main__":
    main()
