"""Store batches under the stores' limits: a batch of a Retrieval flow is sent as several store
calls when one statement of it would bind more parameters than the database allows
(PostgreSQL: 65,535; SQLite: 32,766 by default), its results joined in order, and a local
dense index embeds in requests of ``EMBED_BATCH`` texts. A 50,000-turn eviction in one call
(a long thread migrated) is stored whole and searchable on PostgreSQL."""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Iterator
from typing import Any

import pytest
from langchain_core.embeddings import Embeddings
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage
from langgraph.store.base import BaseStore, GetOp, Item, Op, PutOp, Result
from retrieval_views import context
from stores import postgres_store, sqlite_memory_store

from langmem_ext import MemoryKey, Retrieval, TokenBudget
from langmem_ext.retrieval import flows
from langmem_ext.retrieval.flows import (
    EMBED_BATCH,
    MAX_BATCH_PARAMS,
    MAX_STORE_EMBEDS,
    Embed,
    Io,
    _Embedding,
    _StoreFlow,
)

KEY = MemoryKey("acme", "sam", "migrated")
NS = ("docs", "a")


class Recording(BaseStore):
    """Answers each get with its key and each put with None, and records every call."""

    def __init__(self, index: dict[str, Any] | None = None) -> None:
        self.calls: list[list[Op]] = []
        self.index_config = index

    def batch(self, ops: Iterable[Op]) -> list[Result]:
        ops = list(ops)
        self.calls.append(ops)
        return [op.key if isinstance(op, GetOp) else None for op in ops]  # type: ignore[misc]

    async def abatch(self, ops: Iterable[Op]) -> list[Result]:
        return self.batch(ops)


def params(store: BaseStore, call: list[Op]) -> tuple[int, int]:
    """(bind parameters, texts embedded by the store) of one call, as LangGraph's SQL stores
    bind them: 5 a put (plus 4 a text embedded), 1 a get."""
    total = texts = 0
    for op in call:
        if isinstance(op, PutOp):
            indexed = getattr(store, "index_config", None) and op.index and op.value
            embedded = len(op.value["parts"]) if indexed and op.value else 0
            total, texts = total + 5 + 4 * embedded, texts + embedded
        else:
            total += 1
    return total, texts


def mixed(count: int, parts: int = 1) -> list[Op]:
    """Gets and puts, interleaved: ``count`` of each."""
    ops: list[Op] = []
    for n in range(count):
        value = {"parts": [f"text {n} {p}" for p in range(parts)]}
        ops += [GetOp(NS, f"g{n}"), PutOp(NS, f"p{n}", value, index=["parts[*]"])]
    return ops


def one_batch(ops: list[Op]) -> Io[list[Any]]:
    """A flow that sends ``ops`` as one batch and returns what it got."""
    got = yield ops
    return list(got)


@pytest.mark.parametrize("index", [None, {"dims": 4, "fields": ["parts[*]"]}])
@pytest.mark.parametrize("sync", [True, False])
def test_flow_batch_over_the_limit_is_split_in_order(
    index: dict[str, Any] | None, sync: bool
) -> None:
    """A batch of 2 x 12,000 ops (over ``MAX_BATCH_PARAMS``) goes out as several calls, each
    within the limits, the ops in their order; the flow receives every result in order."""
    store = Recording(index)
    ops = mixed(12_000, parts=3)
    flow = _StoreFlow(store, one_batch(ops))
    got = flow.run() if sync else asyncio.run(flow.arun())
    assert len(store.calls) > 1
    assert [op for call in store.calls for op in call] == ops
    assert got == [op.key if isinstance(op, GetOp) else None for op in ops]
    for call in store.calls:
        total, texts = params(store, call)
        assert total <= MAX_BATCH_PARAMS
        assert texts <= MAX_STORE_EMBEDS
    if index is None:  # filled to the limit, not cut finer
        assert len(store.calls) == -(-params(store, ops)[0] // MAX_BATCH_PARAMS)


def test_batch_within_the_limits_is_one_call() -> None:
    store = Recording()
    ops = mixed(100)
    assert flows.batch_retrying(store, ops) == [
        op.key if isinstance(op, GetOp) else None for op in ops
    ]
    assert store.calls == [ops]
    assert flows.batch_retrying(store, []) == [] and store.calls[-1] == []


def test_put_alone_over_the_limit_is_a_call_of_its_own() -> None:
    store = Recording({"dims": 4, "fields": ["parts[*]"]})
    big = PutOp(NS, "big", {"parts": ["x"] * (MAX_STORE_EMBEDS + 1)}, index=["parts[*]"])
    ops: list[Op] = [GetOp(NS, "a"), big, GetOp(NS, "b")]
    assert flows.batch_retrying(store, ops) == ["a", None, "b"]
    assert store.calls == [[ops[0]], [big], [ops[2]]]


class Counter(Embeddings):
    """A deterministic embedder recording how many texts each request had."""

    def __init__(self) -> None:
        self.requests: list[int] = []

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        self.requests.append(len(texts))
        return [[float(len(t)), float(sum(map(ord, t)) % 97), 1.0] for t in texts]

    def embed_query(self, text: str) -> list[float]:
        return self.embed_documents([text])[0]


@pytest.mark.parametrize("sync", [True, False])
def test_embedding_of_many_texts_is_several_requests_in_order(sync: bool) -> None:
    texts = tuple(f"message number {n}" for n in range(2 * EMBED_BATCH + 17))
    model = Counter()
    step = _Embedding(model, Embed(texts))
    vectors = step.run() if sync else asyncio.run(step.arun())
    assert model.requests == [EMBED_BATCH, EMBED_BATCH, 17]
    assert vectors == Counter().embed_documents(list(texts))


@pytest.fixture
def sqlite_store() -> Iterator[BaseStore]:
    """A ``SqliteStore`` whose SQLite allows 32,766 parameters a statement (the default since
    SQLite 3.32; some builds allow more)."""
    with sqlite_memory_store(max_variables=32_766) as store:
        yield store


def test_large_get_batch_on_sqlite(sqlite_store: BaseStore) -> None:
    """40,000 gets of one namespace: one ``key IN (...)`` is over SQLite's limit; the batch
    goes out in calls under it."""
    flows.batch_retrying(sqlite_store, [PutOp(NS, f"k{n}", {"n": n}) for n in range(40_000)])
    gets = [GetOp(NS, f"k{n}") for n in range(40_000)]
    if hasattr(sqlite_store.conn, "setlimit"):
        with pytest.raises(Exception, match="too many SQL variables"):
            sqlite_store.batch(gets)  # what one call would do
    got = flows.batch_retrying(sqlite_store, gets)
    assert [it.value["n"] for it in got if isinstance(it, Item)] == list(range(40_000))


def test_large_get_batch_on_postgres(pg_schema_dsn: str) -> None:
    """60,000 puts and 60,000 gets in one batch each on PostgreSQL: the puts are over the limit
    in one statement; the gets (arrays) and the puts go out under it, in order."""
    with postgres_store(pg_schema_dsn) as store:
        puts = [PutOp(NS, f"k{n}", {"n": n}) for n in range(60_000)]
        with pytest.raises(Exception, match=r"(?i)too many|parameter|bind"):
            store.batch(puts)  # what one call would do
        flows.batch_retrying(store, puts)
        got = flows.batch_retrying(store, [GetOp(NS, f"k{n}") for n in range(60_000)])
        assert [it.value["n"] for it in got if isinstance(it, Item)] == list(range(60_000))


MIGRATED = 50_000
FACTS = {10: "item10 lives in the blue crate", 25_000: "item25000 ships to Oslo",
         49_900: "item49900 weighs nine kilos"}  # fmt: skip


def migrated_thread() -> list[BaseMessage]:
    out: list[BaseMessage] = []
    for i in range(MIGRATED):
        text = FACTS.get(i, f"Topic {i}: a note about the harbour and its boats {i % 13}")
        out += [HumanMessage(text, id=f"h{i}"), AIMessage(f"Noted ({i}).", id=f"a{i}")]
    return out


def test_fifty_thousand_turns_evicted_in_one_call_on_postgres(pg_schema_dsn: str) -> None:
    """A long thread migrated: 50,000 turns leave the view in ONE ``apply`` (about 17 s on 2
    shared cores, see the notes). Every turn is stored, once, under its number; a planted
    fact early, midway and late is retrieved, by this process and by a fresh one (from the
    index blocks)."""
    with postgres_store(pg_schema_dsn) as store:
        history = migrated_thread()

        def make() -> Retrieval:
            return Retrieval(TokenBudget(400), store=store, key=KEY, ranking="bm25", gate="always")

        strategy = make()
        first = strategy.apply([*history, HumanMessage("where does item10 live?", id="q0")], None)
        assert "blue crate" in context(first)
        indexed = first.state.indexed_turns
        assert indexed >= MIGRATED - 20
        stored = store.search(KEY.namespace("turns"), limit=2 * MIGRATED)
        assert sorted(it.value["seq"] for it in stored) == list(range(indexed))
        for n, (turn, question) in enumerate(
            [(25_000, "where does item25000 ship?"), (49_900, "how heavy is item49900?")]
        ):
            ask = [*history, HumanMessage(question, id=f"q{n + 1}")]
            for who in (strategy, make()):
                assert FACTS[turn] in context(who.view(ask, first.state))
