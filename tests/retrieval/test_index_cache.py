"""Retrieval's in-process indexes are bounded by bytes: each index estimates what it holds
(``nbytes``, checked against tracemalloc here), and ``IndexCache`` keeps the most recently used
ones within ``RetrievalConfig.index_cache_bytes``. An index dropped is rebuilt from the store when
its thread is searched again, and ranks as before."""

from __future__ import annotations

import gc
import json
import random
import threading
import tracemalloc
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timezone
from typing import Any

import numpy as np
import pytest
from fakes import Concepts
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage
from langgraph.store.base import Item, Op, Result
from langgraph.store.memory import InMemoryStore
from retrieval_views import context

from langmem_ext import MemoryKey, Retrieval, TokenBudget
from langmem_ext.retrieval import codec
from langmem_ext.retrieval.bm25 import BM25Index, encode_postings
from langmem_ext.retrieval.config import DEFAULT_INDEX_CACHE_BYTES, RetrievalConfig
from langmem_ext.retrieval.index import IndexCache, IndexCacheStats, Lexical, turn_candidate
from langmem_ext.retrieval.vectors import VectorIndex

#: the estimates must be within this factor of what tracemalloc sees (they measured 0.95-1.3)
LOW, HIGH = 0.67, 1.5
NOW = datetime(2026, 1, 1, tzinfo=timezone.utc)
FILLER = "we talked about the weather, the sea and the boats in the harbour"


def retained(build: Callable[[], Any]) -> tuple[Any, int]:
    """What ``build`` returns, and the bytes it left allocated (its temporaries freed)."""
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        built = build()
        gc.collect()
        return built, tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()


def texts(count: int, seed: int = 1) -> list[str]:
    rng = random.Random(seed)
    letters = "abcdefghijklmnopqrstuvwxyz"
    words = ["".join(rng.choices(letters, k=rng.randint(3, 10))) for _ in range(4_000)]
    return [" ".join(rng.choices(words, k=rng.randint(20, 120))) for _ in range(count)]


def keys(count: int) -> list[str]:
    return [f"langmem_ext/turns/acme/ann/thread-1/turn-{i:08d}" for i in range(count)]


# -- the estimates ---------------------------------------------------------------------------------


@pytest.mark.parametrize("count", [300, 3_000])
def test_bm25_estimate_is_near_what_tracemalloc_sees(count: int) -> None:
    uids, docs = keys(count), texts(count)

    def from_texts() -> BM25Index:
        index = BM25Index()
        index.add_many(zip(uids, docs, strict=True))
        return index

    def from_postings() -> BM25Index:  # a fresh process loading index blocks
        index = BM25Index()
        for at in range(0, count, 512):
            index.add_postings(uids[at : at + 512], encode_postings(docs[at : at + 512]))
        return index

    for build in (from_texts, from_postings):
        index, used = retained(build)
        assert LOW <= index.nbytes / used <= HIGH, (build.__name__, index.nbytes, used)
    # searches gather the loads' postings: counted as they are kept
    before = index.nbytes
    _, used = retained(lambda: [index.search(doc[:60], 10) for doc in docs[:200]])
    assert index.nbytes > before
    assert LOW <= (index.nbytes - before) / used <= HIGH


def test_bm25_estimate_goes_back_down_when_documents_leave() -> None:
    uids, docs = keys(200), texts(200)
    index = BM25Index()
    empty = index.nbytes
    index.add_many(zip(uids, docs, strict=True))
    full = index.nbytes
    for uid in uids[:100]:
        index.remove(uid)
    assert empty < index.nbytes < full
    for uid, doc in zip(uids[:100], docs[:100], strict=True):
        index.add(uid, doc)  # the arrays grown before are reused
    assert abs(index.nbytes - full) < 0.05 * full


def test_vector_index_estimate_is_near_what_tracemalloc_sees() -> None:
    rows = np.random.default_rng(0).standard_normal((4_000, 384)).astype(np.float16)
    uids = keys(2_000)

    def build() -> VectorIndex:
        index = VectorIndex(background=False)
        index.add_many((uid, rows[2 * i : 2 * i + 2]) for i, uid in enumerate(uids))
        return index

    index, used = retained(build)
    assert LOW <= index.nbytes / used <= HIGH


def stored_turns(count: int, dims: int = 384) -> list[Item]:
    """Turn items as Retrieval stores them (text, parts, ids, prev, vectors), read as a database
    store reads them: fresh objects (a JSON round trip), nothing shared with the caller."""
    rng = np.random.default_rng(3)
    items = []
    for i, text in enumerate(texts(count, seed=2)):
        parts = [text[: len(text) // 2], text[len(text) // 2 :]]
        value = {
            "text": "\n".join(parts),
            "parts": parts,
            "ids": [f"h{i}", f"a{i}"],
            "prev": f"the turn before {i}" * 4,
            "order": f"{i:012d}",
            "vectors": codec.encode_vectors(rng.standard_normal((2, dims)).tolist(), "m"),
        }
        items.append(item(value, f"h{i}", TURNS))
    return items


def item(value: dict[str, Any], key: str = "", namespace: tuple[str, ...] = ()) -> Item:
    return Item(value=value, key=key, namespace=namespace, created_at=NOW, updated_at=NOW)


def fresh(items: list[Item]) -> list[Item]:
    return [item(json.loads(json.dumps(it.value)), it.key, it.namespace) for it in items]


TURNS = ("langmem_ext", "turns", "acme", "ann", "thread-1")


def test_lexical_estimate_is_near_what_tracemalloc_sees() -> None:
    items = stored_turns(1_024)
    copies = fresh(items)  # (their strings are what the turns keep; the values are dropped)

    def build() -> Lexical:
        lexical = Lexical(dense=True, model="m")
        assert lexical.add_many(copies) == []
        copies.clear()
        return lexical

    lexical, used = retained(build)
    assert LOW <= lexical.nbytes / used <= HIGH, (lexical.nbytes, used)


def test_lexical_estimate_from_index_blocks_and_the_turns_a_search_reads() -> None:
    items = stored_turns(1_024)
    stored = [
        json.dumps(codec.encode_block(items[at : at + 512], at, True, "m")) for at in (0, 512)
    ]

    def load() -> Lexical:  # (the blocks read as a database store reads them: fresh)
        lexical = Lexical(dense=True, model="m")
        read = [item(json.loads(v)) for v in stored]
        decoded = [codec.decode_block(b, True, dims=384, model="m") for b in read]
        lexical.add_blocks(TURNS, [b for b in decoded if b is not None])
        return lexical

    lexical, used = retained(load)
    assert len(lexical.index) == 1_024 and not lexical.turns
    assert LOW <= lexical.nbytes / used <= HIGH, (lexical.nbytes, used)
    before = lexical.nbytes

    def hold() -> None:  # what a search does with the turns it found and read (``held_io``)
        for it in fresh(items[:300]):
            uid = "/".join((*TURNS, it.key))
            lexical.turns[uid] = turn_candidate(uid, it.value, True)

    _, used = retained(hold)
    assert LOW <= (lexical.nbytes - before) / used <= HIGH
    lexical.forget("/".join((*TURNS, items[0].key)))
    assert lexical.nbytes < before + used


# -- the cache -------------------------------------------------------------------------------------


def lexical_of(count: int, seed: int) -> Lexical:
    lexical = Lexical(dense=False)
    for i, text in enumerate(texts(count, seed)):
        lexical.add(TURNS, f"t{i}", {"text": text})
    return lexical


def test_the_cache_evicts_the_least_recently_used_by_bytes_and_counts() -> None:
    a, b, c, d = (lexical_of(40, seed) for seed in range(4))
    bound = a.nbytes + b.nbytes + c.nbytes + min(x.nbytes for x in (a, b, c, d)) // 2
    cache = IndexCache(bound)
    for name, lexical in (("a", a), ("b", b), ("c", c)):
        assert cache.get((name,)) is None
        cache.install((name,), lexical)
    assert list(cache.lexicals) == [("a",), ("b",), ("c",)]
    assert cache.get(("a",)) is a  # now the most recently used: b goes first
    cache.install(("d",), d)
    assert list(cache.lexicals) == [("c",), ("a",), ("d",)]
    assert cache.get(("b",)) is None
    assert cache.stats() == IndexCacheStats(
        hits=1,
        misses=4,
        evictions=1,
        bytes=c.nbytes + a.nbytes + d.nbytes,
        entries=3,
        max_bytes=bound,
    )
    # an index that grows after its lookup counts at its next use
    c.add(TURNS, "late", {"text": " ".join(texts(50, 9))})
    assert cache.get(("c",)) is c
    assert cache.bytes <= bound and ("a",) not in cache.lexicals
    assert cache.stats().evictions >= 2


def test_an_index_larger_than_the_bound_is_kept_alone() -> None:
    """The newest index stays whatever its size (a long thread is not rebuilt on every call);
    everything else goes, and the next index pushes it out."""
    small, big, other = lexical_of(5, 1), lexical_of(400, 2), lexical_of(5, 3)
    cache = IndexCache(3 * small.nbytes)
    cache.install(("small",), small)
    cache.install(("big",), big)
    assert list(cache.lexicals) == [("big",)]
    assert cache.get(("big",)) is big
    assert cache.stats().evictions == 1
    cache.install(("other",), other)
    assert list(cache.lexicals) == [("other",)] and cache.bytes <= 3 * small.nbytes
    assert cache.stats().evictions == 2
    nothing = IndexCache(0)
    nothing.install(("small",), small)
    assert nothing.get(("small",)) is None and nothing.stats().entries == 0


def test_the_count_bound_still_holds() -> None:
    cache = IndexCache(DEFAULT_INDEX_CACHE_BYTES, max_entries=2)
    for n in range(3):
        cache.install((str(n),), Lexical(dense=False))
    assert list(cache.lexicals) == [("1",), ("2",)]


@pytest.mark.parametrize("bad", [-1, 1.5, "256MB", True, None])
def test_index_cache_bytes_is_checked(bad: object) -> None:
    with pytest.raises(ValueError, match="index_cache_bytes"):
        RetrievalConfig(index_cache_bytes=bad)  # type: ignore[arg-type]
    assert RetrievalConfig(index_cache_bytes=0).index_cache_bytes == 0
    assert RetrievalConfig().index_cache_bytes == DEFAULT_INDEX_CACHE_BYTES


# -- a Retrieval serving many threads --------------------------------------------------------------


def chat(thread: int, turns: int) -> list[BaseMessage]:
    out: list[BaseMessage] = []
    for i in range(turns):
        fact = f"In thread {thread} the locker code is {1000 + thread * 37 + i}."
        said = fact if i == 4 else f"Topic {i}: {FILLER} {(i + thread) % 7}"
        out += [
            HumanMessage(said, id=f"{thread}h{i}"),
            AIMessage(f"Noted ({thread}/{i}). {FILLER}", id=f"{thread}a{i}"),
        ]
    return out


def key_of(thread: int) -> MemoryKey:
    return MemoryKey("acme", "ann", f"cache-{thread}")


def serving(store: InMemoryStore, ranking: str, bound: int) -> Retrieval:
    extra: dict[str, Any] = {"embeddings": Concepts()} if ranking != "bm25" else {}
    return Retrieval(
        TokenBudget(900),
        store=store,
        ranking=ranking,  # type: ignore[arg-type]
        gate="always",
        config=RetrievalConfig(index_cache_bytes=bound),
        **extra,
    )


def question(thread: int) -> HumanMessage:
    return HumanMessage(f"what was the locker code in thread {thread}?", id="q")


def cache_of(strategy: Retrieval) -> IndexCache:
    cache: IndexCache = strategy._setup.cache
    return cache


THREADS = {n: 40 for n in range(10)} | {10: 600}  # (thread 10 closes an index block)


@pytest.mark.parametrize("ranking", ["bm25", "hybrid"])
def test_an_evicted_thread_is_reloaded_and_ranks_as_before(ranking: str) -> None:
    store = InMemoryStore()
    writer = serving(store, ranking, DEFAULT_INDEX_CACHE_BYTES)
    states = {n: writer.apply(chat(n, t), key=key_of(n)).state for n, t in THREADS.items()}
    sizes = [lexical.nbytes for lexical in cache_of(writer).lexicals.values()]
    # room for about three of the short threads: the long one is never kept
    bound = 3 * sorted(sizes)[len(sizes) // 2]
    assert max(sizes) > bound
    worker = serving(store, ranking, bound)

    def ask(n: int) -> str:
        history = [*chat(n, THREADS[n]), question(n)]
        return context(worker.apply(history, states[n], key=key_of(n)))

    first = {n: ask(n) for n in THREADS}
    assert all(f"locker code is {1000 + n * 37 + 4}" in first[n] for n in THREADS)
    cache = cache_of(worker)
    assert ("langmem_ext", "turns", "acme", "ann", "cache-0") not in cache.lexicals
    again = {n: ask(n) for n in THREADS}
    assert again == first
    stats = cache.stats()
    assert stats.misses == 2 * len(THREADS)  # every lookup came after its index was dropped
    assert stats.evictions == stats.misses - stats.entries and stats.hits == 0
    # within the bound, or the one newest index alone (larger than the bound: the 600-turn one)
    assert stats.bytes > 0 and (stats.bytes <= bound or stats.entries == 1) and stats.entries <= 3
    assert stats.bytes == sum(lexical.nbytes for lexical in cache.lexicals.values())
    # the last thread asked (the 600-turn one, larger than the bound) is kept alone: asked
    # once more, it is a hit
    assert list(cache.lexicals) == [("langmem_ext", "turns", "acme", "ann", "cache-10")]
    assert ask(10) == first[10] and cache.stats().hits == 1
    # and a reference that kept everything ranks the same
    reference = serving(store, ranking, DEFAULT_INDEX_CACHE_BYTES)
    for n in (0, 10):
        history = [*chat(n, THREADS[n]), question(n)]
        assert context(reference.apply(history, states[n], key=key_of(n))) == first[n]


def test_a_retrieval_that_keeps_no_index_still_answers() -> None:
    store = InMemoryStore()
    strategy = serving(store, "bm25", 0)
    state = strategy.apply(chat(1, 40), key=key_of(1)).state
    got = context(strategy.apply([*chat(1, 40), question(1)], state, key=key_of(1)))
    assert "locker code is 1041" in got
    assert cache_of(strategy).stats().entries == 0


class Slow(InMemoryStore):
    """An InMemoryStore whose reads let other threads in (a database's round trip)."""

    def batch(self, ops: Iterable[Op]) -> list[Result]:
        threading.Event().wait(0.001)
        return super().batch(ops)


def test_threads_searching_different_prefixes_keep_the_bytes_within_the_bound() -> None:
    store = Slow()
    writer = serving(store, "bm25", DEFAULT_INDEX_CACHE_BYTES)
    threads = range(16)
    states = {n: writer.apply(chat(n, 40), key=key_of(n)).state for n in threads}
    one = max(lexical.nbytes for lexical in cache_of(writer).lexicals.values())
    bound = 3 * one
    worker = serving(store, "bm25", bound)
    cache = cache_of(worker)
    seen: list[int] = []
    done = threading.Event()

    def sample() -> None:
        while not done.is_set():
            seen.append(cache.bytes)

    def ask(n: int) -> str:
        history = [*chat(n, 40), question(n)]
        return context(worker.apply(history, states[n], key=key_of(n)))

    sampler = threading.Thread(target=sample)
    sampler.start()
    try:
        with ThreadPoolExecutor(8) as pool:
            got = list(pool.map(ask, [*threads, *threads]))
    finally:
        done.set()
        sampler.join()
    assert seen and max(seen) <= bound
    assert all(f"locker code is {1000 + n * 37 + 4}" in got[n] for n in threads)
    assert got[: len(threads)] == got[len(threads) :]
    stats = cache.stats()
    assert stats.bytes <= bound
    assert stats.bytes == sum(lexical.nbytes for lexical in cache.lexicals.values())
    assert stats.hits + stats.misses == 2 * len(threads)
