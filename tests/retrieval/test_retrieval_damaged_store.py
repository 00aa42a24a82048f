"""Retrieval over a store holding damaged, foreign or stale values: one field of a stored turn,
index block, tail or mark replaced by arbitrary JSON (or removed), on InMemoryStore, SqliteStore
and PostgresStore. A fresh Retrieval (a new process) must still return a valid view within
budget, find every planted fact, and change nothing in the store on a read-only view; a write
over the damage and a second fresh process too. Vectors of another embedding model are
re-embedded, never compared; a mark announcing 10**12 turns costs work bounded by the data."""

from __future__ import annotations

import contextlib
import json
import math
import uuid
from collections.abc import Iterable, Iterator
from typing import Any

import numpy as np
import pybase64
import pytest
from fakes import Concepts
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from langchain_core.embeddings import Embeddings
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage
from langgraph.store.base import BaseStore, GetOp, Op, Result
from langgraph.store.memory import InMemoryStore
from retrieval_views import context
from stores import postgres_store, sqlite_memory_store

from langmem_ext import MemoryKey, Retrieval, TokenBudget
from langmem_ext.core.messages import is_valid
from langmem_ext.retrieval import layout as module

#: index blocks of 8 turns (the module's 512 would need thousands of turns per example)
BLOCK = 8
TURNS_WRITTEN = 40
FACTS = {
    3: "My locker code at the gym is 4471.",  # inside the first index block
    26: "The invoice number for the kitchen is K-2291.",  # after the blocks (the tail)
}
QUESTIONS = {
    "4471": "what was my locker code at the gym again?",
    "K-2291": "which invoice number did I give you for the kitchen?",
}
BUDGET = 700
#: the fields of a planted turn that may be damaged without losing its words (its text is the
#: memory itself: a store that lost it lost the fact)
PLANTED_FIELDS = ("seq", "order", "vectors", "prev", "ids", "thread", "indexed_at")
FILLER = "we talked about the weather, the sea and the boats in the harbour"


def chat(first: int, last: int) -> list[BaseMessage]:
    out: list[BaseMessage] = []
    for i in range(first, last):
        out += [
            HumanMessage(FACTS.get(i, f"Topic {i}: {FILLER} {i % 7}"), id=f"h{i}"),
            AIMessage(f"Noted ({i}). {FILLER}", id=f"a{i}"),
        ]
    return out


def make(store: BaseStore, key: MemoryKey, embed: Any = None) -> Retrieval:
    strategy = Retrieval(
        TokenBudget(BUDGET),
        store=store,
        key=key,
        ranking="hybrid",
        gate="always",
        max_retrieved_tokens=160,
        embeddings=embed if embed is not None else Concepts(),
    )
    strategy.clock = lambda: 1_700_000_000.0
    return strategy


# -- stores -----------------------------------------------------------------------------------


def snapshot(store: BaseStore, key: MemoryKey) -> dict[tuple[tuple[str, ...], str], str]:
    """Every item of the key's user (turns, blocks, tail, marks), as JSON text."""
    prefix = key.namespace("turns", scope="user")[:1]
    items = store.search(prefix, limit=100_000)
    mine = [it for it in items if it.namespace[2:4] == key.labels()[:2]]
    return {(it.namespace, it.key): json.dumps(it.value, sort_keys=True) for it in mine}


# -- damage -----------------------------------------------------------------------------------

json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.sampled_from([10**12, -1, 0, 1, 2, 3, 30, 10**30])
    | st.floats()
    | st.text(max_size=12)
    | st.sampled_from(["x", "", "AAAA", "000000000005", "0" * 13]),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=3)
    ),
    max_leaves=6,
)
#: what a damage replaces a field with: arbitrary JSON, or (None) the field removed
replacements = st.one_of(st.just(None), json_values.map(lambda v: ("set", v)))


def _paths(value: Any, at: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    """Every dict key path in ``value`` (the nested ``vectors``, ``rows``, ``bm25`` ... too)."""
    if not isinstance(value, dict):
        return []
    out: list[tuple[str, ...]] = []
    for name, inner in value.items():
        out.append((*at, name))
        out += _paths(inner, (*at, name))
    return out


def _damaged(value: dict[str, Any], path: tuple[str, ...], change: Any) -> dict[str, Any]:
    copy = json.loads(json.dumps(value))
    holder = copy
    for name in path[:-1]:
        holder = holder[name]
    if change is None:
        holder.pop(path[-1], None)
    else:
        holder[path[-1]] = change[1]
    return copy


def targets(key: MemoryKey) -> list[tuple[tuple[str, ...], str]]:
    turns, blocks = key.namespace("turns"), key.namespace("turn_blocks")
    marks = key.namespace("turn_marks", scope="user")
    return [
        (turns, "h5"),  # inside a block
        (turns, "h28"),  # after the blocks
        (turns, "h3"),  # planted, inside a block
        (turns, "h26"),  # planted, after the blocks
        (blocks, module.seq_order(0)),
        (blocks, module.seq_order(BLOCK)),
        (blocks, "tail"),
        (marks, key.labels()[2]),
        (marks, "*"),
    ]


def check_fresh_process(
    store: BaseStore, key: MemoryKey, history: list[BaseMessage], state: Any, *, read_only: bool
) -> None:
    """A fresh Retrieval answers each planted question with its fact, in a valid view within
    budget; a read-only view changes nothing in the store."""
    for fact, question in QUESTIONS.items():
        strategy = make(store, key)
        before = snapshot(store, key) if read_only else None
        call = strategy.view if read_only else strategy.apply
        result = call([*history, HumanMessage(question, id=f"q-{fact}")], state)
        assert is_valid(result.messages)
        assert strategy.counter.count_messages(result.messages) <= BUDGET
        assert result.report.budget is not None and result.report.tokens_after <= BUDGET
        assert fact in context(result), (fact, context(result), strategy.store_faults)
        if before is not None:
            assert snapshot(store, key) == before  # nothing stored was changed or dropped


def run_damage_case(
    store: BaseStore, where: int, path_pick: int | tuple[str, ...], change: Any
) -> None:
    key = MemoryKey("acme", "ann", f"dmg-{uuid.uuid4().hex[:10]}")
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(module, "BLOCK", BLOCK)
        history = chat(0, TURNS_WRITTEN)
        state = make(store, key).apply(history).state
        assert state.indexed_turns > 3 * BLOCK
        namespace, item_key = targets(key)[where % len(targets(key))]
        item = store.get(namespace, item_key)
        assert item is not None, (namespace, item_key)
        paths = _paths(item.value)
        if item_key in ("h3", "h26"):
            paths = [p for p in paths if p[0] in PLANTED_FIELDS]
        path = path_pick if isinstance(path_pick, tuple) else paths[path_pick % len(paths)]
        try:
            store.put(namespace, item_key, _damaged(item.value, path, change), index=False)
        except Exception:  # the store refuses the value (PostgreSQL: NaN in JSON): no damage
            return
        check_fresh_process(store, key, history, state, read_only=True)
        # a write over the damage (reaching the next blocks), then fresh processes again
        longer = chat(0, TURNS_WRITTEN + 2 * BLOCK)
        state = make(store, key).apply(longer, state).state
        check_fresh_process(store, key, longer, state, read_only=False)


DAMAGE = given(
    where=st.integers(0, 8),
    path_pick=st.integers(0, 40),
    change=replacements,
)


def limits(examples: int) -> settings:
    return settings(
        max_examples=examples,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
    )


_NAN_F16 = pybase64.b64encode(np.full((2, 30), np.nan, "<f2").tobytes()).decode()
_INF_F16 = pybase64.b64encode(np.full((2, 30), np.inf, "<f2").tobytes()).decode()
#: the damages seen in the field, by target and path (each backend runs every one)
KNOWN = [
    (1, ("seq",), ("set", "x")),
    (1, ("seq",), ("set", math.nan)),
    (1, ("seq",), ("set", [1])),
    (0, ("seq",), ("set", "x")),  # inside a block: read when a search finds it
    (1, ("vectors", "dims"), ("set", True)),
    (1, ("vectors", "dims"), ("set", 1)),  # dims that still divide the data
    (1, ("vectors", "dims"), ("set", 15)),
    (1, ("vectors", "f16"), ("set", _NAN_F16)),
    (1, ("vectors", "f16"), ("set", _INF_F16)),
    (3, ("order",), ("set", "")),  # a planted turn after the blocks
    (4, ("rows", "dims"), ("set", 1)),
    (4, ("rows", "dims"), ("set", True)),
    (7, ("next",), ("set", 10**12)),  # the thread mark
    (6, ("high",), ("set", 10**12)),  # the tail
]


@pytest.mark.parametrize(("where", "path", "change"), KNOWN)
@pytest.mark.parametrize("backend", ["memory", "sqlite", "postgres"])
def test_a_known_damage_never_crashes_a_fresh_retrieval(
    backend: str, where: int, path: tuple[str, ...], change: Any, request: pytest.FixtureRequest
) -> None:
    with backend_store(backend, request) as store:
        run_damage_case(store, where, path, change)


@contextlib.contextmanager
def backend_store(backend: str, request: pytest.FixtureRequest) -> Iterator[BaseStore]:
    if backend == "memory":
        yield InMemoryStore()
    elif backend == "sqlite":
        with sqlite_memory_store() as store:
            yield store
    else:
        with postgres_store(request.getfixturevalue("pg_schema_dsn")) as store:
            yield store


@limits(80)
@DAMAGE
def test_a_damaged_stored_value_never_crashes_a_fresh_retrieval_in_memory(
    where: int, path_pick: int, change: Any
) -> None:
    run_damage_case(InMemoryStore(), where, path_pick, change)


@limits(25)
@DAMAGE
def test_a_damaged_stored_value_never_crashes_a_fresh_retrieval_on_sqlite(
    where: int, path_pick: int, change: Any
) -> None:
    with sqlite_memory_store() as store:
        run_damage_case(store, where, path_pick, change)


@limits(10)
@DAMAGE
def test_a_damaged_stored_value_never_crashes_a_fresh_retrieval_on_postgres(
    pg_schema_dsn: str, where: int, path_pick: int, change: Any
) -> None:
    with postgres_store(pg_schema_dsn) as store:
        run_damage_case(store, where, path_pick, change)


# -- another embedding model --------------------------------------------------------------------


class Wider(Concepts):
    """Another embedding model: 10 more dimensions (zero, so it ranks as the first one)."""

    def vector(self, text: str) -> list[float]:
        return [*super().vector(text), *[0.0] * 10]


class Rotated(Concepts):
    """Another embedding model of the same dimensions (another space: its vectors must never
    be compared with the first model's)."""

    def vector(self, text: str) -> list[float]:
        return super().vector(text)[::-1]


@pytest.mark.parametrize("other", [Wider, Rotated])
def test_a_changed_embedding_model_re_embeds_the_stored_turns_instead_of_crashing(
    other: type[Concepts],
) -> None:
    key = MemoryKey("acme", "ann", "model-change")
    store = InMemoryStore()
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(module, "BLOCK", BLOCK)
        history = chat(0, TURNS_WRITTEN)
        state = make(store, key).apply(history).state
        stored = store.get(key.namespace("turns"), "h28")
        assert stored is not None and stored.value["vectors"]["model"].endswith("Concepts")
        embed = other()
        for fact, question in QUESTIONS.items():
            strategy = make(store, key, embed)
            result = strategy.apply([*history, HumanMessage(question)], state)
            assert is_valid(result.messages) and fact in context(result)
            assert strategy.store_faults  # counted (and logged once), not raised
        # the turns were embedded again by the new model (each distinct text once per process)
        embedded = set(embed.embedded)
        assert any("4471" in text for text in embedded)
        assert any("K-2291" in text for text in embedded)


class Timed(Embeddings):
    """A wrapper that only observes (as a tracing or caching wrapper does): the same vectors as
    the model it wraps, kept in ``inner``."""

    def __init__(self, inner: Concepts) -> None:
        self.inner = inner

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        return self.inner.embed_documents(texts)

    def embed_query(self, text: str) -> list[float]:
        return self.inner.embed_query(text)


def test_a_wrapper_of_the_same_embedding_model_keeps_the_stored_vectors() -> None:
    """Wrapping the model that wrote the vectors (timing, caching, retries) is not a model
    change: a fresh process with the wrapper embeds only its queries, never a stored turn."""
    key = MemoryKey("acme", "ann", "wrapped-model")
    store = InMemoryStore()
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(module, "BLOCK", BLOCK)
        history = chat(0, TURNS_WRITTEN)
        state = make(store, key).apply(history).state
        inner = Concepts()
        strategy = make(store, key, Timed(inner))
        for fact, question in QUESTIONS.items():
            result = strategy.view([*history, HumanMessage(question)], state)
            assert is_valid(result.messages) and fact in context(result)
        assert inner.documents == []  # no stored turn embedded again
        assert not strategy.store_faults


# -- a mark read from the store bounds no work -------------------------------------------------


class CountingGets(InMemoryStore):
    def __init__(self) -> None:
        super().__init__()
        self.gets = 0

    def batch(self, ops: Iterable[Op]) -> list[Result]:
        ops = list(ops)
        self.gets += sum(isinstance(op, GetOp) for op in ops)
        return super().batch(ops)

    async def abatch(self, ops: Iterable[Op]) -> list[Result]:
        return self.batch(ops)


@pytest.mark.parametrize("following", [10**12, 10**7])
def test_a_mark_announcing_more_turns_than_exist_costs_work_bounded_by_the_data(
    following: int,
) -> None:
    """A fresh process reads a thread mark whose ``next`` says 10**12: it gets the index blocks
    that exist (a few batches), not one per block that number could hold."""
    key = MemoryKey("acme", "ann", "huge-mark")
    store = CountingGets()
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(module, "BLOCK", BLOCK)
        history = chat(0, TURNS_WRITTEN)
        state = make(store, key).apply(history).state
        marks = key.namespace("turn_marks", scope="user")
        mark = store.get(marks, key.labels()[2])
        assert mark is not None
        store.put(marks, key.labels()[2], {**mark.value, "next": following}, index=False)
        store.gets = 0
        strategy = make(store, key)
        question = QUESTIONS["4471"]
        result = strategy.view([*history, HumanMessage(question)], state)
        assert "4471" in context(result) and is_valid(result.messages)
        assert store.gets < 200, store.gets
