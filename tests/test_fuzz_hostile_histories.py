"""Fuzz test of hostile histories: the invariants checked at every call.

Histories are grown turn by turn by an application that does what real ones do and what broke
content-keyed identity before: messages with and without ids, the same short texts over and over
("continue", "Sure."), an early pair deleted by the app, custom ``ChatMessage`` roles, tool rounds
(some answering ``tool_call_id=""``), and now and then a ``RemoveMessage`` handed to the strategy
as if it were a message. A summarizer that fails on a schedule is part of the run.

Every generated message carries a hidden marker in ``response_metadata`` (which no key or counter
looks at), so a message is traced even when its text repeats another's. At every call:

* **nothing lost**: every message of the history (after the system message) is in the view, or
  was read by a committed fold, or is counted in ``report.not_shown``. A message without an id is
  what its content after the same contents is (``path_of``): when an app deletes one "continue /
  Sure." exchange from a run of them, the history before the fold point reads exactly as before,
  and the summary of it is a summary of the messages now there;
* **valid**: ``validate(view)`` finds no error, at most one system message and it is first, the
  first other message is a human message, and the newest human message of the history is there;
* **within budget**: the view, recounted with the strategy's counter, is within ``report.budget``;
* a ``RemoveMessage`` is refused with a clear error and the state is left as it was; the app then
  applies it with LangGraph's reducer (as a graph would) and carries on.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import pytest
from fakes import ScriptedSummarizer
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from langchain_core.messages import (
    AIMessage,
    BaseMessage,
    ChatMessage,
    HumanMessage,
    RemoveMessage,
    SystemMessage,
    ToolMessage,
)
from langgraph.graph.message import add_messages

from langmem_ext import (
    Compacting,
    ContextOverflowError,
    MemoryBudgetExceeded,
    MemoryState,
    SummaryBuffer,
    TieredSummary,
    TokenBudget,
    Unit,
    split_units,
    validate,
)
from langmem_ext.core.digest import DIGEST_ID_PREFIX, is_digest
from langmem_ext.core.identity import key_at
from langmem_ext.strategies.engine import Strategy

REPEATED = ("continue", "Sure.", "ok", "go on", "Sure.")


def is_human(message: BaseMessage) -> bool:
    """A human turn: a HumanMessage, or a ChatMessage whose role is the user's."""
    if isinstance(message, ChatMessage):
        return message.role in ("user", "human")
    return isinstance(message, HumanMessage)


def path_of(history: Sequence[BaseMessage], index: int) -> tuple[Any, ...]:
    """What identifies ``history[index]`` when it has no id: its content after the same
    contents, back to the nearest message with an id (or the start, a leading system message
    left out). Two id-less messages with the same path are the same message: nothing can tell
    them apart, and a summary of one is a summary of the other."""
    parts: list[Any] = []
    j = index
    while j >= 0:
        m = history[j]
        if m.id and j < index:
            parts.append(("id", m.id))
            break
        if j == 0 and isinstance(m, SystemMessage) and j < index:
            break
        calls = tuple((c["id"], c["name"], repr(c["args"])) for c in getattr(m, "tool_calls", []))
        parts.append(
            (
                type(m).__name__,
                getattr(m, "role", None),
                repr(m.content),
                getattr(m, "tool_call_id", None),
                calls,
                m.id,
            )
        )
        j -= 1
    return tuple(parts)


def marker(message: BaseMessage) -> int | None:
    value = message.response_metadata.get("lmx")
    return value if isinstance(value, int) else None


class RecordingSummarizer(ScriptedSummarizer):
    """The shared scripted Summarizer, also recording the markers of every message it folds and
    their paths in the history of the call being made (set ``history`` before each call)."""

    def __init__(self, failures: Sequence[bool]) -> None:
        super().__init__(failures)
        self.read: list[int] = []
        self.history: Sequence[BaseMessage] = ()  # the history of the call being made
        self.read_paths: set[tuple[Any, ...]] = set()

    def on_fold(self, messages: Sequence[BaseMessage]) -> None:
        self.read.extend(m for m in (marker(x) for x in messages) if m is not None)
        where = {id(m): i for i, m in enumerate(self.history)}
        self.read_paths.update(path_of(self.history, where[id(m)]) for m in messages)


@dataclass
class App:
    """The application's side: the history it keeps and the state it carries."""

    ids: bool
    history: list[BaseMessage] = field(default_factory=list)
    counter: itertools.count[int] = field(default_factory=itertools.count)

    def add(self, message: BaseMessage, with_id: bool) -> BaseMessage:
        n = next(self.counter)
        update: dict[str, Any] = {"response_metadata": {"lmx": n}}
        if with_id:
            update["id"] = f"m{n}"
        message = message.model_copy(update=update)
        self.history.append(message)
        return message


def is_orphan(history: Sequence[BaseMessage], index: int) -> bool:
    """A tool result whose call is not in the history before it (the app removed the call), or
    a duplicate result: no provider accepts it, so the view drops it, a documented repair
    (``report.repaired``)."""
    message = history[index]
    if not isinstance(message, ToolMessage):
        return False
    made = {c["id"] for m in history[:index] if isinstance(m, AIMessage) for c in m.tool_calls}
    return message.tool_call_id not in made or is_duplicate(history, index)


def is_duplicate(history: Sequence[BaseMessage], index: int) -> bool:
    """A second tool result for a call already answered since the call was made: the view keeps
    the first one and drops this one, the other documented repair (``report.repaired``)."""
    call_id = getattr(history[index], "tool_call_id", None)
    for m in reversed(history[:index]):
        if isinstance(m, ToolMessage) and m.tool_call_id == call_id:
            return True
        if isinstance(m, AIMessage) and any(c["id"] == call_id for c in m.tool_calls):
            return False
    return False


def shown_markers(view: Sequence[BaseMessage], history: Sequence[BaseMessage]) -> set[int | None]:
    """The markers of the history messages the view shows; a tool-round digest (TieredSummary's
    first tier) shows every message of its round, named by the key of its first message."""
    out: set[int | None] = set()
    rounds: dict[str, Unit] | None = None
    for m in view:
        if not is_digest(m):
            out.add(marker(m))
            continue
        if rounds is None:
            rounds = {key_at(history, u.start): u for u in split_units(history)}
        unit = rounds[str(m.id)[len(DIGEST_ID_PREFIX) :]]
        out.update(marker(history[i]) for i in range(unit.start, unit.stop))
    return out


def build_strategy(kind: str, budget: int, summarizer: RecordingSummarizer) -> Strategy:
    fake = "unused"  # replaced by the recorder below, after construction
    strategy: Strategy
    if kind == "buffer":
        strategy = SummaryBuffer(
            budget, summarizer=lambda _: fake, max_summary_tokens=60, min_messages=1
        )
    elif kind == "compacting":
        strategy = Compacting(budget, summarizer=lambda _: fake, min_messages=1)
    elif kind == "tiered":
        strategy = TieredSummary(
            budget, summarizer=lambda _: fake, max_summary_tokens=60, min_messages=1
        )
    else:
        strategy = TokenBudget(budget)
        return strategy
    strategy.summarizer = summarizer  # type: ignore[assignment]
    ticks = itertools.count(0, 7)  # seconds: a failed fold is retried a few turns later
    strategy.clock = lambda: float(next(ticks))  # type: ignore[method-assign]
    return strategy


actions = st.lists(
    st.tuples(
        st.sampled_from(
            [
                "human",
                "human",
                "human_repeat",
                "repeat_burst",
                "ai",
                "ai_repeat",
                "tools",
                "tools_empty_id",
                "custom_role",
                "delete_early_pair",
                "remove_message",
            ]
        ),
        st.booleans(),  # this message has an id (when the run mixes ids)
        st.integers(0, 10_000),  # a number for texts and choices
    ),
    min_size=8,
    max_size=60,
)


@settings(suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(
    kind=st.sampled_from(["buffer", "compacting", "tiered", "budget"]),
    ids=st.sampled_from(["none", "all", "mixed"]),
    system=st.booleans(),
    budget=st.sampled_from([200, 320, 600]),
    failures=st.lists(st.booleans(), min_size=1, max_size=5),
    steps=actions,
)
def test_acceptance_fuzz_nothing_lost_valid_within_budget(
    kind: str,
    ids: str,
    system: bool,
    budget: int,
    failures: list[bool],
    steps: list[tuple[str, bool, int]],
) -> None:
    recorder = RecordingSummarizer(failures)
    strategy = build_strategy(kind, budget, recorder)
    app = App(ids=ids != "none")
    if system:
        app.add(SystemMessage("You are terse."), with_id=ids != "none")
    state: MemoryState | None = None
    calls = 0

    def with_id(flag: bool) -> bool:
        return ids == "all" or (ids == "mixed" and flag)

    for action, flag, number in steps:
        # -- the application changes the history ----------------------------------------------
        if action == "human":
            app.add(HumanMessage(f"question {number} " + "word " * (number % 40)), with_id(flag))
        elif action == "human_repeat":
            app.add(HumanMessage(REPEATED[number % len(REPEATED)]), with_id(flag))
        elif action == "repeat_burst":  # "continue" / "Sure." over and over, as users do
            for _ in range(6):
                app.add(HumanMessage(REPEATED[number % len(REPEATED)]), with_id(flag))
                app.add(AIMessage(REPEATED[(number + 1) % len(REPEATED)]), with_id(flag))
        elif action == "ai":
            app.add(AIMessage(f"answer {number} " + "text " * (number % 60)), with_id(flag))
        elif action == "ai_repeat":
            app.add(AIMessage(REPEATED[number % len(REPEATED)]), with_id(flag))
        elif action in ("tools", "tools_empty_id"):
            if not any(isinstance(m, HumanMessage) for m in app.history):
                app.add(HumanMessage("continue"), with_id(flag))
            call_ids = (
                [""]
                if action == "tools_empty_id"
                else [f"c{number}-{k}" for k in range(number % 3 + 1)]
            )
            calls_ = [{"name": "lookup", "args": {"q": number}, "id": c} for c in call_ids]
            app.add(AIMessage("", tool_calls=calls_), with_id(flag))
            for c in call_ids:
                app.add(ToolMessage("result " * (number % 50), tool_call_id=c), with_id(flag))
        elif action == "custom_role":
            role = ("critic", "user", "assistant", "observer")[number % 4]
            app.add(ChatMessage(f"{role} says {number}", role=role), with_id(flag))
        elif action == "delete_early_pair":
            body = 1 if system else 0
            if len(app.history) - body > 6:
                # drop an early human message and what follows it up to the next human message
                humans = [
                    i for i, m in enumerate(app.history[body:], body) if isinstance(m, HumanMessage)
                ]
                if len(humans) >= 3:
                    start, end = humans[0], humans[1]
                    del app.history[start:end]
        elif action == "remove_message":
            targets = [m for m in app.history if m.id and not isinstance(m, SystemMessage)]
            if targets:
                target = targets[number % len(targets)]
                with pytest.raises((ValueError, TypeError)) as refused:
                    strategy.apply([*app.history, RemoveMessage(id=str(target.id))], state)
                assert "RemoveMessage" in str(refused.value)
                # the app applies it as a graph would, and goes on
                app.history = list(add_messages(app.history, [RemoveMessage(id=str(target.id))]))
        if not any(isinstance(m, HumanMessage) for m in app.history):
            continue

        # -- the strategy's turn ------------------------------------------------------------------
        history = list(app.history)
        recorder.history = history
        snapshot = [m.model_copy() for m in history]
        try:
            result = strategy.apply(history, state)
        except (ContextOverflowError, MemoryBudgetExceeded) as error:
            # an over-budget newest message: the documented outcome, with the numbers; a fold
            # that succeeded on the way is carried in the error, so it is not thrown away
            assert error.needed > error.available
            kept = getattr(error, "state", None)
            if kept is not None:
                state = kept
            continue
        calls += 1
        assert history == snapshot, "the input was mutated"
        view = result.messages
        report = result.report

        # valid
        errors = [f for f in validate(view) if f.severity == "error"]
        assert not errors, errors
        systems = [i for i, m in enumerate(view) if isinstance(m, SystemMessage)]
        assert systems in ([], [0])
        rest = [m for m in view if not isinstance(m, SystemMessage)]
        assert rest and is_human(rest[0]), [type(m).__name__ for m in view]
        newest_human = next(m for m in reversed(history) if is_human(m))
        assert marker(newest_human) in {marker(m) for m in view}

        # within budget, by an independent recount
        assert strategy.counter.count_messages(view) <= report.budget + 0, (
            strategy.counter.count_messages(view),
            report.budget,
        )
        assert all(not isinstance(m, RemoveMessage) for m in view)

        # nothing lost
        if kind != "budget":
            shown = shown_markers(view, history)
            body = history[1:] if history and isinstance(history[0], SystemMessage) else history
            offset = len(history) - len(body)
            unaccounted = [
                m
                for i, m in enumerate(body, offset)
                if marker(m) not in shown
                and marker(m) not in recorder.read
                and path_of(history, i) not in recorder.read_paths
                and not (isinstance(m, ChatMessage) and m.role == "system")
                and not is_orphan(history, i)  # dropped by the documented repair
            ]
            assert len(unaccounted) <= report.not_shown, (
                [(type(m).__name__, m.content, marker(m)) for m in unaccounted],
                report.not_shown,
            )
        state = result.state
        if report.folded:
            event("fold committed")
        if report.not_shown:
            event("messages not shown")
    event(f"calls: {min(calls, 10) // 5 * 5}+")
