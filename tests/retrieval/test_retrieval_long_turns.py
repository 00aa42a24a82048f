"""Retrieval inside one long agent turn (one request, many tool rounds): each round is indexed
as it leaves the view, once, under its own key, while the turn goes on; a later question in the
same turn brings round 12 back as text in the context message; every view stays valid and
within budget, sync and async."""

from __future__ import annotations

import asyncio
import random
from collections import Counter
from collections.abc import Iterator, Sequence
from typing import Any

import pytest
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage, ToolMessage
from langgraph.store.base import Op, PutOp, Result
from langgraph.store.memory import InMemoryStore

from langmem_ext import MemoryKey, MemoryResult, Retrieval, TokenBudget, validate
from langmem_ext.core.shape import RETRIEVED_ID
from langmem_ext.retrieval.compose import context_position
from langmem_ext.retrieval.text import (
    compact_round,
    excerpts,
    message_parts,
    turn_pieces,
    turn_query,
)
from langmem_ext.retrieval.writes import index_units

KEY = MemoryKey("acme", "ann", "long-turn")
TURNS = KEY.namespace("turns")
BUDGET = 3_000
FACT = "The nightly CI run finished; the build id is K7-19."
ASK = "Now I need the build id from the earlier CI run."
_WORDS = (
    "alpha bravo charlie delta echo foxtrot golf hotel india juliet kilo lima mike november "
    "oscar papa quebec romeo sierra tango uniform victor whiskey xray yankee zulu"
).split()


class CountingStore(InMemoryStore):
    """An InMemoryStore that records every turn write (its key)."""

    def __init__(self) -> None:
        super().__init__()
        self.turn_writes: list[str] = []

    def batch(self, ops: Any) -> list[Result]:
        ops = list(ops)
        self._record(ops)
        return super().batch(ops)

    async def abatch(self, ops: Any) -> list[Result]:
        ops = list(ops)
        self._record(ops)
        return await super().abatch(ops)

    def _record(self, ops: Sequence[Op]) -> None:
        self.turn_writes += [
            op.key for op in ops if isinstance(op, PutOp) and op.namespace == TURNS and op.value
        ]


def _filler(rng: random.Random, n: int) -> str:
    return " ".join(rng.choice(_WORDS) for _ in range(n)) + "."


def long_turn(rounds: int = 60, ask_at: int = 50) -> tuple[list[BaseMessage], list[int]]:
    """One request and ``rounds`` tool rounds; round 12's (long) result holds ``FACT``, round
    ``ask_at``'s step asks for it. Returns the messages and the history's length at each
    model call (after each round's result)."""
    rng = random.Random(12)
    messages: list[BaseMessage] = [
        SystemMessage("You are an operations agent.", id="sys"),
        HumanMessage("Investigate the failed nightly release and prepare a rollback.", id="req"),
    ]
    lengths: list[int] = []
    for r in range(rounds):
        say = ASK if r == ask_at else _filler(rng, 6)
        call = {"name": "grep_logs", "args": {"query": _filler(rng, 3)}, "id": f"call-{r}"}
        messages.append(AIMessage(say, tool_calls=[call], id=f"ai-{r}"))
        body = _filler(rng, rng.randint(40, 120))
        if r == 12:
            body = f"{_filler(rng, 200)} {FACT} {_filler(rng, 200)}"
        messages.append(ToolMessage(body, tool_call_id=f"call-{r}", name="grep_logs", id=f"t-{r}"))
        lengths.append(len(messages))
    return messages, lengths


def _play(
    strategy: Retrieval, messages: list[BaseMessage], lengths: list[int], driver: str
) -> Iterator[tuple[list[BaseMessage], MemoryResult]]:
    """Every model call of the turn; yields (history, result)."""
    state = None
    for length in lengths:
        history = messages[:length]
        if driver == "sync":
            result = strategy.apply(history, state)
        else:
            result = asyncio.run(strategy.aapply(history, state))
        state = result.state
        yield history, result


def _context(result: MemoryResult) -> str:
    return "\n".join(str(m.content) for m in result.messages if m.id == RETRIEVED_ID)


def _check_view(strategy: Retrieval, result: MemoryResult, request: str = "req") -> None:
    """Valid (tool pairs intact), within budget, the newest request shown."""
    view = result.messages
    errors = [str(f) for f in validate(view) if f.severity == "error"]
    assert not errors, errors
    assert strategy.counter.count_messages(view) <= BUDGET
    assert request in [m.id for m in view]


@pytest.mark.parametrize("driver", ["sync", "async"])
def test_rounds_are_indexed_as_they_leave_and_written_once(driver: str) -> None:
    messages, lengths = long_turn()
    store = CountingStore()
    strategy = Retrieval(TokenBudget(BUDGET), store=store, key=KEY, ranking="bm25")
    left_at = None
    for call, (_, result) in enumerate(_play(strategy, messages, lengths, driver)):
        _check_view(strategy, result)
        shown = {m.id for m in result.messages}
        if left_at is None and "ai-12" not in shown and call > 12:
            left_at = call
            # round 12 is in the store as soon as it left the view, the turn still going on
            item = store.get(TURNS, "ai-12")
            assert item is not None and FACT in item.value["text"]
            assert item.value["ids"] == ["ai-12", "t-12"]  # the round alone, not the turn
    assert left_at is not None and left_at < len(lengths) - 1
    counts = Counter(store.turn_writes)
    assert counts and max(counts.values()) == 1, counts.most_common(3)  # never rewritten
    # every message that left is in exactly one stored item
    items = store.search(TURNS, limit=1_000)
    ids = [i for it in items for i in it.value["ids"]]
    assert len(ids) == len(set(ids))
    last = strategy.apply(messages, None)
    kept = {m.id for m in last.messages}
    assert {m.id for m in messages[1:]} - kept <= set(ids)


@pytest.mark.parametrize("driver", ["sync", "async"])
def test_a_later_step_of_the_turn_brings_round_12_back(driver: str) -> None:
    messages, lengths = long_turn(ask_at=50)
    strategy = Retrieval(TokenBudget(BUDGET), store=InMemoryStore(), key=KEY, ranking="bm25",
                         gate="always")  # fmt: skip
    results = list(_play(strategy, messages, lengths, driver))
    for _, result in results:
        _check_view(strategy, result)
    asked = results[50][1]
    assert "ai-12" not in {m.id for m in asked.messages}  # it left the view long ago
    context = _context(asked)
    assert "K7-19" in context
    assert "grep_logs" in context  # the round comes back as its call and its result
    assert "(excerpts)" in context  # of a long result, the words around the question's
    # inside the turn, the context goes last: the request near the top is not pushed down
    assert asked.messages[-1].id == RETRIEVED_ID
    # a step that asks nothing of round 12 does not bring it
    assert "K7-19" not in _context(results[49][1])


def test_a_question_from_the_user_after_the_turn_brings_a_round_back() -> None:
    messages, _ = long_turn(ask_at=-1)
    history = [*messages, HumanMessage("What was the build id from the CI run earlier?", id="q")]
    strategy = Retrieval(TokenBudget(BUDGET), store=InMemoryStore(), key=KEY, ranking="bm25")
    state = None
    for length in range(3, len(messages) + 1, 2):  # the turn, call by call
        state = strategy.apply(messages[:length], state).state
    result = strategy.apply(history, state)
    _check_view(strategy, result, request="q")
    assert "K7-19" in _context(result)
    ids = [m.id for m in result.messages]
    assert ids[-2:] == [RETRIEVED_ID, "q"]  # a question from the user: just before it


def test_a_whole_turn_too_long_to_come_back_is_indexed_round_by_round() -> None:
    messages, _ = long_turn(rounds=20)
    body = messages[1:]
    after = [*body, HumanMessage("next", id="next")]
    units, _, unfinished = index_units(after, 0, len(body), whole_chars=2_000)
    assert not unfinished
    assert [after[u[0]].id for u in units][:3] == ["req", "ai-0", "ai-1"]
    assert sum(len(u) for u in units) == len(body)
    # a short agent turn that left whole stays one unit
    small = [*body[:5], HumanMessage("next", id="next")]
    units, _, _ = index_units(small, 0, 5, whole_chars=100_000)
    assert units == [[0, 1, 2, 3, 4]]


def test_a_turn_splits_into_its_head_and_one_piece_per_round() -> None:
    messages, _ = long_turn(rounds=3)
    pieces = turn_pieces(messages, range(1, len(messages)))
    assert pieces == [[1], [2, 3], [4, 5], [6, 7]]


def test_a_long_result_is_packed_as_excerpts_around_the_question_words() -> None:
    messages, _ = long_turn(rounds=13)
    parts = message_parts(messages[-2:])
    packed = compact_round(parts, frozenset({"build", "id", "ci"}))
    assert packed is not None and "K7-19" in packed and len(packed) < len("\n".join(parts)) / 2
    assert packed.startswith("assistant: ") and "assistant called grep_logs" in packed
    assert compact_round(["user: hi", "assistant: hello"], frozenset({"hi"})) is None
    assert excerpts("a b c", frozenset({"zzz"}), 100) == "a b c"
    assert excerpts("one two three four", frozenset({"zzz"}), 9).endswith("…")


def test_turn_query_is_the_agents_newest_step() -> None:
    messages, lengths = long_turn(rounds=52, ask_at=50)
    history = messages[: lengths[50]]
    query = turn_query(history, 1)
    assert query.startswith(ASK) and "grep_logs" in query
    assert turn_query(messages[:2], 1) == ""


def test_the_context_goes_last_only_inside_an_agent_turn() -> None:
    messages, lengths = long_turn(rounds=2)
    assert context_position(messages[: lengths[1]]) == lengths[1]
    chat = [HumanMessage("a", id="a"), AIMessage("b", id="b"), HumanMessage("c", id="c")]
    assert context_position(chat) == 2
    assert context_position([AIMessage("x")]) == 1
