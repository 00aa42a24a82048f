"""The first turn of a fresh process. BM25 keeps what it loads from index blocks as
segments and gathers a term's postings only when a search or a write first touches it; blocks
carry their vectors as int8 codes (half the bytes of float16), and the rows a search finds are
read back exact from their turns before they are ranked; blocks are read by key."""

from __future__ import annotations

import asyncio
import re
import zlib
from typing import Any

import numpy as np
import pytest
from fakes import HideBlocks
from hypothesis import given, settings
from hypothesis import strategies as st
from langchain_core.embeddings import Embeddings
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage
from langgraph.store.base import BaseStore
from langgraph.store.memory import InMemoryStore

from langmem_ext import MemoryKey, Retrieval, TokenBudget
from langmem_ext.retrieval import codec as retrieval
from langmem_ext.retrieval.bm25 import BM25Index, encode_postings

KEY = MemoryKey("acme", "ann", "fresh")

WORDS = ["oslo", "ship", "boat", "harbour", "anna", "porto", "dog", "code", "gym", "the"]
_text = st.lists(st.sampled_from(WORDS), max_size=8).map(" ".join)
_key = st.integers(0, 25).map(lambda n: f"k{n}")
_op = st.one_of(
    st.tuples(st.just("load"), st.lists(st.tuples(_key, _text), max_size=12)),
    st.tuples(st.just("add"), st.tuples(_key, _text)),
    st.tuples(st.just("remove"), _key),
    st.tuples(st.just("search"), st.lists(st.sampled_from(WORDS), min_size=1, max_size=4)),
)


def _play(loaded: BM25Index, built: BM25Index, kind: str, arg: Any) -> None:
    """One step on both indexes: ``loaded`` takes loads as postings, ``built`` as texts; a
    search must rank alike."""
    if kind == "load":
        loaded.add_postings([k for k, _ in arg], encode_postings(t for _, t in arg))
        built.add_many(arg)
    elif kind == "add":
        loaded.add(*arg)
        built.add(*arg)
    elif kind == "remove":
        loaded.remove(arg)
        built.remove(arg)
    else:
        q = " ".join(arg)
        assert loaded.search(q, 30) == built.search(q, 30)


@settings(max_examples=300, deadline=None)
@given(ops=st.lists(_op, max_size=25), last=st.lists(st.sampled_from(WORDS), min_size=1))
def test_bm25_segments_rank_as_an_index_built_from_texts(
    ops: list[tuple[str, Any]], last: list[str]
) -> None:
    """Loads (segments), texts, removals and searches in any order: every search and every
    document frequency equals those of an index that was given the texts."""
    loaded, built = BM25Index(), BM25Index()
    for kind, arg in ops:
        _play(loaded, built, kind, arg)
    assert len(loaded) == len(built)
    for word in WORDS:
        assert loaded.frequency(word) == built.frequency(word), word
    q = " ".join(last)
    assert loaded.search(q, 30) == built.search(q, 30)


def test_bm25_segments_are_not_gathered_until_a_search_needs_a_term() -> None:
    index = BM25Index()
    index.add_postings(["a", "b"], encode_postings(["oslo ship", "ship boat"]))
    index.add_postings(["c"], encode_postings(["ship anna"]))
    index.add_many([("t", "ship dog"), ("u", "oslo porto")])  # texts: no term gathered
    assert index._gathered == {}  # nothing per term at load
    assert [k for k, _ in index.search("ship", 5)] == ["a", "b", "c", "t"]
    assert set(index._gathered) == {"ship"}
    index.add_postings(["d"], encode_postings(["ship dog"]))  # a load drops its terms' gathers
    assert "ship" not in index._gathered and index.frequency("ship") == 5
    index.remove("b")  # so does a removal
    assert index.frequency("ship") == 4 and index.frequency("boat") == 0
    assert index.search("boat", 5) == []


def _unit(rows: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    return rows / np.linalg.norm(rows, axis=1, keepdims=True)


class Fan(Embeddings):
    """Near ties: the turn "fan i" points almost where the query does (the best cosines about
    1e-3 apart: int8 codes alone rank them otherwise, float16 rows do not); every other text
    points elsewhere at random."""

    dims = 64

    def __init__(self) -> None:
        rng = np.random.default_rng(7)
        self.query = _unit(rng.normal(size=(1, self.dims)))[0]
        self.noise = _unit(rng.normal(size=(2_000, self.dims)))

    def vector(self, text: str) -> list[float]:
        fan = re.search(r"\bfan (\d+)$", text)  # a turn's message is stored as "user: fan i"
        if fan:
            v = self.query + 0.1 * self.noise[int(fan.group(1))]
        else:  # far from the query
            v = np.random.default_rng(zlib.crc32(text.encode())).normal(size=self.dims)
        return [float(x) for x in _unit(v[None, :])[0]]

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        return [self.vector(t) for t in texts]

    def embed_query(self, text: str) -> list[float]:
        return [float(x) for x in self.query]


def _fans(turns: int) -> list[BaseMessage]:
    out: list[BaseMessage] = []
    for i in range(turns):
        out += [HumanMessage(f"fan {i}", id=f"h{i}"), AIMessage(f"reply {i}", id=f"a{i}")]
    return out


@pytest.mark.parametrize("asynchronous", [False, True])
def test_rows_a_search_finds_as_int8_codes_are_read_back_before_they_are_ranked(
    asynchronous: bool,
) -> None:
    """Blocks carry int8 codes; a fresh process ranks by the stored float16 rows all the same:
    its dense ranking equals that of a process that read every turn, although the codes alone
    rank these near ties otherwise."""
    fan, store = Fan(), InMemoryStore()
    history = _fans(1_300)

    def make(on: BaseStore) -> Retrieval:
        return Retrieval(
            TokenBudget(4_000),
            store=on,
            key=KEY,
            ranking="dense",
            gate="always",
            embeddings=fan,
            k=8,
        )

    state = make(store).apply(history).state
    assert state.indexed_turns > 1_024
    ask = [*history, HumanMessage("which fan is the closest one", id="q")]
    blocks = store.search(KEY.namespace("turn_blocks"), limit=10)
    codes = [it.value["rows"] for it in blocks if it.key != "tail"]
    assert codes and all("i8" in c and "f16" not in c for c in codes)
    # the premise: by the codes alone, these near ties rank otherwise than by the stored rows
    stored = {
        it.key: retrieval.stored_vectors(it.value)
        for it in store.search(KEY.namespace("turns"), limit=2_000)
    }
    human = sorted(k for k in stored if k.startswith("h") and int(k[1:]) < 1_024)
    rows = np.stack([stored[k][0] for k in human])
    codes_rows = retrieval.int8_codes(rows).astype(np.float32)
    exact = np.argsort(-(_unit(rows) @ fan.query), kind="stable")[:8]
    rough = np.argsort(-(_unit(codes_rows) @ fan.query), kind="stable")[:8]
    assert set(exact) != set(rough)

    fresh, reference = make(store), make(HideBlocks(store))
    got = asyncio.run(fresh.aapply(ask, state)) if asynchronous else fresh.apply(ask, state)
    want = reference.apply(ask, state)
    assert [m.content for m in got.messages] == [m.content for m in want.messages]
    assert got.report.retrieved == want.report.retrieved
    assert len(got.report.retrieved) >= 8
    lexical = next(iter(fresh._lexicals.values()))
    assert lexical.approximate  # the other rows stay codes until a search finds them
    read_back = 1_024 - len(lexical.approximate)  # the blocks hold turns 0 to 1,023
    assert 0 < read_back <= 4 * fresh.config.per_ranking


@settings(max_examples=150, deadline=None)
@given(
    ops=st.lists(_op, max_size=25),
    merge_at=st.integers(0, 25),
    last=st.lists(st.sampled_from(WORDS), min_size=1),
)
def test_merging_loads_changes_no_search(
    ops: list[tuple[str, Any]], merge_at: int, last: list[str]
) -> None:
    """Loads merged into one segment at any point (inline here; a thread in use) rank as the
    index that was given the texts, before and after the merge, removals included."""
    loaded, built = BM25Index(), BM25Index()
    for n, (kind, arg) in enumerate(ops):
        if n == merge_at:
            loaded.consolidate(background=False)
            assert len(loaded._segments) <= 1
        _play(loaded, built, kind, arg)
    loaded.consolidate(background=False)
    for word in WORDS:
        assert loaded.frequency(word) == built.frequency(word), word
    for key in {f"k{n}" for n in range(26)}:  # every document still removable after the merge
        loaded.remove(key)
        built.remove(key)
        assert loaded.search(" ".join(last), 30) == built.search(" ".join(last), 30)
    assert len(loaded) == len(built) == 0


def test_a_merge_in_the_background_is_swapped_in_and_waited_for() -> None:
    index = BM25Index()
    texts = [f"oslo ship {n} harbour" if n % 3 else f"porto dog {n}" for n in range(3_000)]
    for at in range(0, 3_000, 500):
        keys = [f"k{n}" for n in range(at, at + 500)]
        index.add_postings(keys, encode_postings(texts[at : at + 500]))
    before = index.search("porto harbour", 20)
    index.consolidate()
    assert index.wait(30)
    assert len(index._segments) == 1
    assert index.search("porto harbour", 20) == before
    assert index.frequency("porto") == 1_000


def test_vector_index_takes_int8_codes_in_parts_and_refines_them_in_place() -> None:
    from langmem_ext.retrieval.vectors import VectorIndex

    rng = np.random.default_rng(3)
    exact = rng.normal(size=(40, 16)).astype(np.float16)
    codes = retrieval.int8_codes(exact.astype(np.float32))
    keys = [f"k{i}" for i in range(20)]
    whole, parts = VectorIndex(), VectorIndex()
    whole.add_block(keys, codes, [2] * 20)
    parts.add_block(keys, [codes[:10], codes[10:], codes[:0]], [2] * 20)  # never joined
    query = rng.normal(size=16)
    assert parts.search(query, 20) == whole.search(query, 20)
    # the stored rows replace the codes in place: as if the exact rows had been added
    reference = VectorIndex()
    reference.add_block(keys, exact, [2] * 20)
    assert parts.refine(["k3", "nope", "k5"], exact[[6, 7, 0, 10, 11]], [2, 1, 2]) == ["nope"]
    got = parts.score(query, ["k3", "k5"])
    want = reference.score(query, ["k3", "k5"])
    assert got == pytest.approx(want, abs=1e-6)
    assert parts.rows == 40  # no row added
    assert parts.refine(["k4"], exact[:1], [1]) == ["k4"]  # another number of rows: left
    with pytest.raises(ValueError, match="counts"):
        parts.refine(["k4"], exact[:2], [1])


def test_reserve_with_prefault_is_waited_for_by_the_next_write() -> None:
    from langmem_ext.retrieval.vectors import VectorIndex

    index = VectorIndex()
    index.reserve(50_000, 32, prefault=50_000)
    rows = np.ones((10, 32), dtype=np.float32)
    index.add_block([f"k{i}" for i in range(5)], rows, [2] * 5)
    assert index._toucher is None  # joined before writing
    assert index.search(np.ones(32), 1)[0][1] == pytest.approx(1.0)
    with pytest.raises(ValueError, match="prefaulting"):
        index.reserve(10, 32, prefault=11)
