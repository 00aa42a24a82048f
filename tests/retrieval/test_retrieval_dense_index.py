"""``Retrieval``'s local dense index: a restart embeds only the query, turns carry their float16
vectors and are written with ``index=False``, turns written without vectors are embedded once on
load, ``embeddings=`` works without a store index, ``aapply`` matches ``apply``, the local ranking
equals the store-side one, a second worker catches up through the marks, SqliteStore survives a
reopen, and ``PostgresStore(index=...)`` keeps the dense ranking in the store.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Iterable
from typing import Any

import numpy as np
import pytest
from fakes import DIMS, Concepts
from langchain_core.embeddings import Embeddings
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage
from langgraph.store.base import PutOp
from langgraph.store.memory import InMemoryStore
from retrieval_views import context

from langmem_ext import MemoryKey, MemoryState, Retrieval, TokenBudget
from langmem_ext.retrieval import RetrievalConfig
from langmem_ext.retrieval.codec import stored_vectors
from langmem_ext.retrieval.flows import _StoreFlow

KEY = MemoryKey("acme", "ann", "chat")
TURNS = KEY.namespace("turns")
FILLER = "we talked about the weather, the sea and the boats in the harbour " * 4
FACTS = {
    4: "By the way, my locker code at the gym is 4471.",
    11: "My sister Anna moved to Porto last spring.",
}
LOCKER = "what is the combination of my cabinet at the fitness club?"  # no word of FACTS[4]
SISTER = "where has my sibling relocated to?"  # no word of FACTS[11]
CLOCK = 1_700_000_000.0


def conversation(turns: int, facts: dict[int, str] = FACTS) -> list[BaseMessage]:
    history: list[BaseMessage] = []
    for i in range(turns):
        history += [
            HumanMessage(facts.get(i, f"Topic {i}: {FILLER}"), id=f"h{i}"),
            AIMessage(f"Noted ({i}). {FILLER}", id=f"a{i}"),
        ]
    return history


def run(strategy: Retrieval, history: list[BaseMessage], state: Any = None) -> Any:
    """Apply at every human message from the start (or from ``state``'s history), as an agent
    would; the last result."""
    result = None
    for end in range(1, len(history) + 1):
        if isinstance(history[end - 1], HumanMessage):
            result = strategy.apply(history[:end], state)
            state = result.state
    assert result is not None
    return result


def ask(question: str) -> HumanMessage:
    return HumanMessage(question, id="q")


def indexed_store(embed: Embeddings) -> InMemoryStore:
    return InMemoryStore(index={"dims": DIMS, "embed": embed, "fields": ["text"]})


def retrieval(store: Any, **kw: Any) -> Retrieval:
    strategy = Retrieval(TokenBudget(900), store=store, key=KEY, **kw)
    strategy.clock = lambda: CLOCK
    return strategy


def copy(state: MemoryState) -> MemoryState:
    return MemoryState.from_dict(state.to_dict())


def short(uid: str) -> str:
    return uid.rsplit("/", 1)[1]


def test_a_new_retrieval_on_the_same_store_embeds_only_the_query() -> None:
    """(a) A restart (a new Retrieval on the store) loads the turns' stored vectors: its first
    apply calls ``embed_documents`` zero times, and it retrieves what the first object does."""
    embed = Concepts()
    store = indexed_store(embed)
    first = retrieval(store, ranking="dense")
    assert first.dense_index == "local"  # the default for InMemoryStore(index=...)
    history = conversation(30)
    state = first.apply([*history, ask(LOCKER)], run(first, history).state).state
    written = len(store.search(TURNS, limit=1_000))
    assert written == state.indexed_turns > 20
    # every text was embedded once, when its turn was written
    assert len(embed.embedded) == len(set(embed.embedded))
    before = first.apply([*history, ask(LOCKER)], copy(state))
    embed.reset()

    second = retrieval(store, ranking="dense")
    after = second.apply([*history, ask(LOCKER)], copy(state))
    assert embed.documents == []  # no turn embedded again
    assert set(embed.queries) == {LOCKER}  # only the question
    assert after.report.retrieved == before.report.retrieved
    assert short(after.report.retrieved[0]) == "h4" and "4471" in context(after)
    assert [m.content for m in after.messages] == [m.content for m in before.messages]
    assert after.report.indexed == 0 and len(store.search(TURNS, limit=1_000)) == written


def test_a_turn_embeds_its_query_once() -> None:
    embed = Concepts()
    strategy = retrieval(indexed_store(embed), ranking="dense")
    history = conversation(30)
    state = run(strategy, history).state
    embed.reset()
    strategy.apply([*history, ask(LOCKER)], state)
    assert embed.queries == [LOCKER]


class RecordingStore(InMemoryStore):
    """Records every PutOp of a turn (white-box: to see the ``index`` each was written with)."""

    def __init__(self, **kw: Any) -> None:
        super().__init__(**kw)
        self.turn_puts: list[PutOp] = []

    def batch(self, ops: Iterable[Any]) -> Any:
        ops = list(ops)
        self.turn_puts += [op for op in ops if isinstance(op, PutOp) and op.namespace[1] == "turns"]
        return super().batch(ops)


def test_turns_carry_float16_vectors_and_the_store_embeds_none_of_them() -> None:
    """(b) Each stored turn carries ``vectors`` ({"dims", "f16", "model"}: one float16 row per
    message, the embedder's vector within float16 rounding), was written with ``index=False``,
    and the store's own vector table holds nothing for the turns' namespace (white-box:
    InMemoryStore keeps its embeddings in ``_vectors``, filled here for the store-side path)."""
    embed = Concepts()
    store = RecordingStore(index={"dims": DIMS, "embed": embed, "fields": ["text"]})
    run(retrieval(store, ranking="dense"), conversation(30))
    items = store.search(TURNS, limit=1_000)
    assert len(items) > 20 and store.turn_puts
    assert all(op.index is False for op in store.turn_puts)
    assert not store._vectors.get(TURNS)
    for item in items:
        stored = item.value["vectors"]
        assert set(stored) == {"dims", "f16", "model"} and stored["dims"] == DIMS
        rows = stored_vectors(stored)
        assert rows is not None and rows.shape == (len(item.value["parts"]), DIMS)
        exact = np.array([embed.vector(part) for part in item.value["parts"]])
        np.testing.assert_allclose(rows, exact, atol=1e-3)
    # the store-side path (dense_index="store") does fill it: the check above means something
    other = indexed_store(Concepts())
    run(
        retrieval(other, ranking="dense", config=RetrievalConfig(dense_index="store")),
        conversation(30),
    )
    assert other._vectors.get(TURNS)
    assert all("vectors" not in item.value for item in other.search(TURNS, limit=1_000))


def test_turns_stored_without_vectors_are_embedded_once_on_load() -> None:
    """(c) Turns written by an older writer (``dense_index="store"``: no ``vectors`` in the value)
    are embedded once, together, when a local Retrieval loads the namespace, and are found by
    the dense ranking; the next queries embed no document."""
    store = indexed_store(Concepts())
    old = retrieval(store, ranking="dense", config=RetrievalConfig(dense_index="store"))
    history = conversation(30)
    state = old.apply([*history, ask(LOCKER)], run(old, history).state).state
    stored = store.search(TURNS, limit=1_000)
    assert stored and all("vectors" not in item.value for item in stored)

    embed = Concepts()
    new = retrieval(store, ranking="dense", embeddings=embed)
    assert new.dense_index == "local"
    result = new.apply([*history, ask(LOCKER)], copy(state))
    parts = {part for item in stored for part in item.value["parts"]}
    assert len(embed.documents) == 1 and sorted(embed.embedded) == sorted(parts)
    assert short(result.report.retrieved[0]) == "h4" and "4471" in context(result)
    embed.reset()
    again = new.apply([*history, ask(SISTER)], copy(state))
    assert embed.documents == [] and embed.queries == [SISTER]
    assert short(again.report.retrieved[0]) == "h11" and "Porto" in context(again)


def test_embeddings_give_dense_ranking_without_a_store_index() -> None:
    """(d) ``embeddings=`` with a store that has no index: hybrid by default, and the dense
    ranking finds a paraphrase BM25 cannot (no word in common)."""
    history = conversation(30)
    hybrid = retrieval(InMemoryStore(), embeddings=Concepts())
    assert (hybrid.config.ranking, hybrid.dense_index) == ("hybrid", "local")
    assert "ranking='hybrid'" in repr(hybrid) and "dense_index='local'" in repr(hybrid)
    dense = retrieval(InMemoryStore(), embeddings=Concepts(), ranking="dense")
    lexical = retrieval(InMemoryStore())
    assert lexical.config.ranking == "bm25"
    for strategy in (hybrid, dense):
        result = strategy.apply([*history, ask(LOCKER)], run(strategy, history).state)
        assert "4471" in context(result), strategy
    missed = lexical.apply([*history, ask(LOCKER)], run(lexical, history).state)
    assert "4471" not in context(missed)


def test_dense_index_configuration_errors_name_the_fix() -> None:
    """(d) Dense ranking with nothing to embed, an unknown ``dense_index``, and ``embeddings=``
    with the store-side index are refused when Retrieval is built."""
    with pytest.raises(ValueError, match=r"ranking='dense' needs embeddings: pass embeddings="):
        Retrieval(TokenBudget(900), store=InMemoryStore(), ranking="dense", key=KEY)
    with pytest.raises(ValueError, match=r"ranking='hybrid' needs embeddings: pass embeddings="):
        Retrieval(TokenBudget(900), store=InMemoryStore(), ranking="hybrid", key=KEY)
    with pytest.raises(ValueError, match=r"dense_index must be 'local' or 'store', got 'bogus'"):
        Retrieval(
            TokenBudget(900),
            store=InMemoryStore(),
            embeddings=Concepts(),
            config=RetrievalConfig(dense_index="bogus"),  # type: ignore[arg-type]
            key=KEY,
        )
    with pytest.raises(ValueError, match=r"dense_index='store' searches with the store's own"):
        Retrieval(
            TokenBudget(900),
            store=indexed_store(Concepts()),
            embeddings=Concepts(),
            config=RetrievalConfig(dense_index="store"),
            key=KEY,
        )
    with pytest.raises(TypeError, match=r"embeddings must be a LangChain Embeddings, got str"):
        Retrieval(TokenBudget(900), store=InMemoryStore(), embeddings="minilm", key=KEY)  # type: ignore[arg-type]


def test_aapply_gives_what_apply_gives_with_a_local_dense_index() -> None:
    """(e) Fresh strategies on fresh stores: ``aapply`` at every human message gives the view,
    the report and the state ``apply`` gives, and stores the same turns with the same vectors."""
    history = [*conversation(30), HumanMessage(LOCKER, id="q1"), AIMessage("4471.", id="qa")]
    history.append(HumanMessage(SISTER, id="q2"))
    sync_store, async_store = indexed_store(Concepts()), indexed_store(Concepts())
    sync, concurrent = retrieval(sync_store), retrieval(async_store)
    assert sync.config.ranking == "hybrid" and sync.dense_index == "local"

    async def drive() -> list[Any]:
        state = None
        results = []
        for end in range(1, len(history) + 1):
            if isinstance(history[end - 1], HumanMessage):
                result = await concurrent.aapply(history[:end], state)
                results.append(result)
                state = result.state
        return results

    sync_results = []
    state = None
    for end in range(1, len(history) + 1):
        if isinstance(history[end - 1], HumanMessage):
            result = sync.apply(history[:end], state)
            sync_results.append(result)
            state = result.state
    async_results = asyncio.run(drive())
    assert len(sync_results) == len(async_results) == 32
    for a, b in zip(sync_results, async_results, strict=True):
        assert [(type(m), m.id, m.content) for m in a.messages] == [
            (type(m), m.id, m.content) for m in b.messages
        ]
        assert a.report == b.report and a.state == b.state
    assert {short(uid) for uid in sync_results[-1].report.retrieved} >= {"h11"}
    assert {short(uid) for uid in sync_results[-2].report.retrieved} >= {"h4"}
    stored = [
        {(i.key, i.value["vectors"]["f16"]) for i in s.search(TURNS, limit=1_000)}
        for s in (sync_store, async_store)
    ]
    assert stored[0] == stored[1] and stored[0]


QUESTIONS = [LOCKER, SISTER, "tell me about the boats in the harbour", "Topic 7: the weather"]


def test_the_local_dense_ranking_is_the_store_side_one() -> None:
    """(f) On the same conversation, the in-process VectorIndex ranks the turns as the store's
    own search does (``dense_index="store"``): same retrieved turns per question (the planted
    facts first; whatever the retrieval gate makes of small talk), and the same dense ranking
    (white-box, through ``_turns_io``): same turns, cosines within float16 rounding, and an
    order the store's scores agree with."""
    history = conversation(40)
    # the store-side search has no feedback: the local one without it
    local = retrieval(
        indexed_store(Concepts()), ranking="dense", config=RetrievalConfig(feedback=False)
    )
    remote = retrieval(
        indexed_store(Concepts()), ranking="dense", config=RetrievalConfig(dense_index="store")
    )
    assert (local.dense_index, remote.dense_index) == ("local", "store")
    local_state, remote_state = run(local, history).state, run(remote, history).state
    for question in QUESTIONS:
        a = local.apply([*history, ask(question)], copy(local_state))
        b = remote.apply([*history, ask(question)], copy(remote_state))
        assert a.report.retrieved == b.report.retrieved, question
        if question in (LOCKER, SISTER):
            assert short(a.report.retrieved[0]) == ("h4" if question == LOCKER else "h11")
        near = _StoreFlow(local.store, local._turns_io(question, KEY), embeddings=Concepts())
        far = _StoreFlow(remote.store, remote._turns_io(question, KEY))
        (_, mine), (_, theirs) = near.run()[-1], far.run()[-1]
        assert len(mine) == len(theirs) > 20
        store_score = {c.uid: c.score for c in theirs}
        assert {c.uid for c in mine} == set(store_score)
        for c in mine:
            assert c.score == pytest.approx(store_score[c.uid], abs=5e-4)
        order = [store_score[c.uid] for c in mine]
        assert all(x >= y - 5e-4 for x, y in itertools.pairwise(order))
        # the few best are well apart: exactly the same turns lead
        assert [c.uid for c in mine[:3]] == [c.uid for c in theirs[:3]]


def test_a_second_worker_finds_another_workers_turns_through_the_marks() -> None:
    """(g) Two Retrieval objects on one store and thread: B has built its index; A writes newer
    turns; B's next query sees A's mark, catches up with only those turns (their stored vectors
    included, nothing embedded) and finds a fact only the dense ranking can match."""
    store = InMemoryStore()
    embed_a, embed_b = Concepts(), Concepts()
    worker_a = retrieval(store, ranking="dense", embeddings=embed_a)
    worker_b = retrieval(store, ranking="dense", embeddings=embed_b)
    facts = {32: FACTS[11]}  # told after B's last turn
    early, late = conversation(24, facts), conversation(40, facts)
    state_b = run(worker_b, early).state
    prefix = worker_b._prefix(KEY)
    index_b = worker_b._lexicals[prefix]
    rows_before = index_b.vectors.rows if index_b.vectors is not None else -1
    state_a = copy(state_b)
    for end in range(len(early) + 1, len(late) + 1):
        if isinstance(late[end - 1], HumanMessage):
            state_a = worker_a.apply(late[:end], state_a).state
    state_a = worker_a.apply([*late, ask(SISTER)], state_a).state
    assert store.get(TURNS, "h32") is not None
    embed_b.reset()
    result = worker_b.apply([*late, ask(SISTER)], copy(state_a))
    assert result.report.indexed == 0  # A wrote everything: B only searched
    assert embed_b.documents == [] and embed_b.queries == [SISTER]
    assert short(result.report.retrieved[0]) == "h32" and "Porto" in context(result)
    # white-box: the same index caught up (no reload) and holds A's turns' vectors
    assert worker_b._lexicals[prefix] is index_b and index_b.vectors is not None
    assert "/".join((*TURNS, "h32")) in index_b.vectors
    assert index_b.vectors.rows > rows_before > 0
    assert len(index_b.vectors) == len(store.search(TURNS, limit=1_000))


def test_sqlite_store_reopened_needs_no_document_embedding(tmp_path: Any) -> None:
    """(h) SqliteStore without an index (``embeddings=`` gives the dense ranking): close and
    reopen the file, a new Retrieval embeds no document and retrieves what the first did."""
    from langgraph.store.sqlite import SqliteStore

    path = str(tmp_path / "turns.sqlite")
    history = conversation(30)
    with SqliteStore.from_conn_string(path) as store:
        store.setup()
        first = retrieval(store, embeddings=Concepts(), ranking="dense")
        state = first.apply([*history, ask(SISTER)], run(first, history).state).state
        before = first.apply([*history, ask(SISTER)], copy(state))
        assert all("vectors" in item.value for item in store.search(TURNS, limit=1_000))
    embed = Concepts()
    with SqliteStore.from_conn_string(path) as store:  # a new connection, a new strategy
        second = retrieval(store, embeddings=embed, ranking="dense")
        after = second.apply([*history, ask(SISTER)], copy(state))
        assert embed.documents == [] and embed.queries == [SISTER]
        assert after.report.retrieved == before.report.retrieved
        assert short(after.report.retrieved[0]) == "h11" and "Porto" in context(after)
        assert [m.content for m in after.messages] == [m.content for m in before.messages]


def test_postgres_store_with_an_index_keeps_the_dense_ranking_in_the_store(
    pg_schema_dsn: str,
) -> None:
    """(i) ``PostgresStore(index=...)`` defaults to ``dense_index="store"`` (its pgvector HNSW
    index scales past one process); ``embeddings=`` or no index means ``"local"``. Building the
    strategy touches no table, so this runs against a server without pgvector too."""
    import psycopg
    from langgraph.store.postgres import PostgresStore

    with psycopg.connect(pg_schema_dsn, autocommit=True) as conn:
        indexed = PostgresStore(conn, index={"dims": DIMS, "embed": Concepts(), "fields": ["text"]})
        strategy = Retrieval(TokenBudget(900), store=indexed, key=KEY)
        assert (strategy.dense_index, strategy.config.ranking) == ("store", "hybrid")
        assert "dense_index='store'" in repr(strategy)
        assert not strategy._local  # nothing embedded in process
        mine = Retrieval(TokenBudget(900), store=indexed, key=KEY, embeddings=Concepts())
        assert mine.dense_index == "local" and "dense_index='local'" in repr(mine)
        pinned = Retrieval(
            TokenBudget(900), store=indexed, key=KEY, config=RetrievalConfig(dense_index="local")
        )
        assert pinned.dense_index == "local" and pinned._local
        plain = Retrieval(TokenBudget(900), store=PostgresStore(conn), key=KEY)
        assert (plain.dense_index, plain.config.ranking) == ("local", "bm25")
        with_model = Retrieval(
            TokenBudget(900), store=PostgresStore(conn), key=KEY, embeddings=Concepts()
        )
        assert (with_model.dense_index, with_model.config.ranking) == ("local", "hybrid")


def test_postgres_store_side_dense_retrieval_end_to_end(pgvector_schema_dsn: str) -> None:
    """(i) With pgvector in the server (tests/pgvector_server.py: always there, in CI too): the
    store-side dense ranking finds the paraphrased fact and the turns carry no ``vectors`` (the
    store embedded them)."""
    import psycopg
    from langgraph.store.postgres import PostgresStore
    from psycopg.rows import dict_row

    with psycopg.connect(
        pgvector_schema_dsn, autocommit=True, prepare_threshold=0, row_factory=dict_row
    ) as conn:
        store = PostgresStore(conn, index={"dims": DIMS, "embed": Concepts(), "fields": ["text"]})
        store.setup()
        strategy = retrieval(store, ranking="dense")
        assert strategy.dense_index == "store"
        history = conversation(30)
        result = strategy.apply([*history, ask(LOCKER)], run(strategy, history).state)
        assert "4471" in context(result)
        assert all("vectors" not in item.value for item in store.search(TURNS, limit=1_000))


@pytest.mark.filterwarnings("ignore:overflow encountered in cast:RuntimeWarning")
def test_embeddings_of_any_scale_are_stored_and_ranked() -> None:
    strategy = retrieval(InMemoryStore(), embeddings=Concepts(scale=1e6), ranking="dense")
    history = conversation(30)
    result = strategy.apply([*history, ask(LOCKER)], run(strategy, history).state)
    assert "4471" in context(result)
