"""A worker catches up with another worker's new turns by fetching the keys the mark
lists (O(turns written)), not by scanning the thread (O(turns stored)); a mark that lists nothing
(an older writer, or a write of many turns) still makes it scan."""

from __future__ import annotations

from collections.abc import Iterable

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage
from langgraph.store.base import GetOp, Op, PutOp, Result, SearchOp
from langgraph.store.memory import InMemoryStore
from retrieval_views import context

from langmem_ext import MemoryKey, Retrieval, TokenBudget

ANN = MemoryKey("acme", "ann", "t1")
FILLER = "we talked about the weather, the sea and the boats in the harbour " * 4


class Recording(InMemoryStore):
    """An InMemoryStore that records every operation of every batch."""

    def __init__(self) -> None:
        super().__init__()
        self.ops: list[Op] = []

    def batch(self, ops: Iterable[Op]) -> list[Result]:
        ops = list(ops)
        self.ops += ops
        return super().batch(ops)


def chat(first: int, last: int, facts: dict[int, str]) -> list[BaseMessage]:
    out: list[BaseMessage] = []
    for i in range(first, last):
        out += [
            HumanMessage(facts.get(i, f"Question {i}: {FILLER}"), id=f"h{i}"),
            AIMessage(f"Answer {i}. {FILLER}", id=f"a{i}"),
        ]
    return out


def scans(ops: list[Op]) -> list[SearchOp]:
    """Searches of the turns namespace (the catch-up's scans and whole loads)."""
    turns = ANN.namespace("turns")
    return [o for o in ops if isinstance(o, SearchOp) and o.namespace_prefix[: len(turns)] == turns]


def test_a_second_worker_fetches_the_listed_turns_instead_of_scanning() -> None:
    store = Recording()
    a = Retrieval(TokenBudget(900), store=store, ranking="bm25", key=ANN)
    b = Retrieval(TokenBudget(900), store=store, ranking="bm25", key=ANN)
    history = chat(0, 30, {})
    state = a.apply(history).state  # A indexes the evicted turns
    question = HumanMessage("what about the boats? my question again", id="q1")
    b.apply([*history, question], state)  # B loads its index once (a whole load)
    history += chat(30, 33, {30: "My locker code is 4417, please remember the locker."})
    history += chat(33, 40, {})
    state = a.apply(history, state).state  # A evicts the locker turn and a few more
    store.ops.clear()
    asked = HumanMessage("what was my locker code again?", id="q2")
    result = b.apply([*history, asked], state)
    assert "4417" in context(result)  # B found A's new turn ...
    assert scans(store.ops) == []  # ... without scanning the thread
    fetched = [
        o for o in store.ops if isinstance(o, GetOp) and o.namespace == ANN.namespace("turns")
    ]
    assert fetched and len(fetched) <= 64


def test_a_mark_without_keys_makes_the_reader_scan() -> None:
    """A mark written by an older version (no "first"/"keys") is read as before: a scan from
    the last turn number seen."""
    store = Recording()
    a = Retrieval(TokenBudget(900), store=store, ranking="bm25", key=ANN)
    b = Retrieval(TokenBudget(900), store=store, ranking="bm25", key=ANN)
    history = chat(0, 30, {})
    state = a.apply(history).state
    b.apply([*history, HumanMessage("my boats again?", id="q1")], state)
    history += chat(30, 33, {30: "My locker code is 4417, please remember the locker."})
    history += chat(33, 40, {})
    state = a.apply(history, state).state
    marks = ANN.namespace("turn_marks", scope="user")
    mark = store.get(marks, ANN.labels()[2])
    assert mark is not None and "keys" in mark.value
    old = {k: v for k, v in mark.value.items() if k not in ("first", "keys")}
    store.batch([PutOp(marks, ANN.labels()[2], {**old, "token": "older-writer"}, index=False)])
    store.ops.clear()
    result = b.apply([*history, HumanMessage("what was my locker code again?", id="q2")], state)
    assert "4417" in context(result)
    assert scans(store.ops), "an unlisted write is caught up by a scan"
