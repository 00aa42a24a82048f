"""Issue 16: an in-process dense index for Retrieval.

``VectorIndex`` (langmem_ext/core/vectors.py) against a brute-force float64 reference, in its exact
regime (same keys, same order, ties by key) and its approximate one (recall of the exact
neighbours on clustered data, exact cosines), through compaction and from several threads.
``BM25Index`` (now numpy postings) against the pure-Python implementation it replaced, copied
below as the reference. ``Retrieval``'s local dense index: a restart embeds only the query, turns
carry their float16 vectors and are written with ``index=False``, turns written without vectors
are embedded once on load, ``embeddings=`` works without a store index, ``aapply`` matches
``apply``, the local ranking equals the store-side one, a second worker catches up through the
marks, SqliteStore survives a reopen, and ``PostgresStore(index=...)`` keeps the dense ranking in
the store.
"""

from __future__ import annotations

import asyncio
import itertools
import math
import os
import re
import threading
import zlib
from collections import Counter
from collections.abc import Iterable
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from langchain_core.embeddings import Embeddings
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage
from langgraph.store.base import PutOp
from langgraph.store.memory import InMemoryStore

from langmem_ext import MemoryKey, MemoryState, Retrieval, TokenBudget
from langmem_ext.core.ranking import BM25Index, tokenize
from langmem_ext.core.vectors import VectorIndex
from langmem_ext.strategies.retrieval import RETRIEVED_ID, _StoreFlow, stored_vectors

# -- VectorIndex: the brute-force reference --------------------------------------------------------


def _unit(rows: Any) -> np.ndarray:
    """Rows scaled to length 1 in float64 (a zero row stays zero: it scores 0 against anything)."""
    array = np.asarray(rows, dtype=np.float64)
    norms = np.linalg.norm(array, axis=-1, keepdims=True)
    return np.divide(array, norms, out=np.zeros_like(array), where=norms > 0)


def reference_scores(
    keys: dict[str, Any], query: Any, exclude: Iterable[str] = ()
) -> dict[str, float]:
    """Each key's score: the best cosine of its rows with ``query``."""
    q = _unit(query)
    skip = set(exclude)
    return {key: float((_unit(rows) @ q).max()) for key, rows in keys.items() if key not in skip}


def reference_search(
    keys: dict[str, Any], query: Any, k: int, exclude: Iterable[str] = ()
) -> list[tuple[str, float]]:
    scores = reference_scores(keys, query, exclude)
    return sorted(scores.items(), key=lambda item: (-item[1], item[0]))[: max(k, 0)]


def assert_same_ranking(
    found: list[tuple[str, float]],
    keys: dict[str, Any],
    query: Any,
    k: int,
    exclude: Iterable[str] = (),
    tol: float = 1e-5,
) -> None:
    """``found`` is the reference's ranking: same length, each key's score within ``tol`` of its
    reference score and of the reference score at its rank, ordered by (-score, key) on its own
    scores, and the same key at every rank whose reference score has no rival within ``2 * tol``
    (float32 may order keys whose cosines agree to 1e-7 either way; equal scores go by key)."""
    scores = reference_scores(keys, query, exclude)
    expected = reference_search(keys, query, k, exclude)
    assert len(found) == len(expected), (found, expected)
    assert len({key for key, _ in found}) == len(found), found
    assert found == sorted(found, key=lambda item: (-item[1], item[0]))
    everything = sorted(scores.values())
    for (key, score), (want_key, want_score) in zip(found, expected, strict=True):
        assert key in scores, f"{key!r} is excluded or unknown"
        assert abs(score - scores[key]) <= tol, (key, score, scores[key])
        assert abs(score - want_score) <= tol, (key, score, want_key, want_score)
        rivals = sum(1 for s in everything if abs(s - want_score) <= 2 * tol)
        if rivals == 1:
            assert key == want_key, (found, expected)


KEYS = [f"k{i:02}" for i in range(12)]


def _component() -> st.SearchStrategy[float]:
    # small integers give exact ties (identical and opposite rows); rounded floats give the rest.
    # No subnormal-sized components: a float32 norm of 1e-25 underflows, float64's does not.
    return st.one_of(
        st.integers(-3, 3).map(float),
        st.floats(-1, 1, allow_nan=False).map(lambda x: round(x, 3)),
    )


@st.composite
def index_scripts(draw: Any) -> tuple[int, list[tuple[Any, ...]]]:
    """A dimension and a script of adds (1-4 rows, replacing), removals and searches."""
    dims = draw(st.integers(1, 6))
    vector = st.lists(_component(), min_size=dims, max_size=dims)
    key = st.sampled_from(KEYS)
    op = st.one_of(
        st.tuples(st.just("add"), key, st.lists(vector, min_size=1, max_size=4)),
        st.tuples(st.just("remove"), key),
        st.tuples(
            st.just("search"),
            vector,
            st.integers(0, 20),
            st.frozensets(st.sampled_from([*KEYS, "absent"]), max_size=4),
        ),
    )
    return dims, draw(st.lists(op, min_size=1, max_size=40))


@settings(max_examples=150, deadline=None)
@given(index_scripts())
def test_vector_index_exact_search_is_the_brute_force_ranking(
    script: tuple[int, list[tuple[Any, ...]]],
) -> None:
    """Exact regime: after any adds, replacements and removals, ``search`` returns the reference's
    best keys by max cosine, in its order (ties by key), with its scores (within 1e-5)."""
    dims, ops = script
    index = VectorIndex()
    keys: dict[str, Any] = {}
    for op in ops:
        if op[0] == "add":
            index.add(op[1], op[2])
            keys[op[1]] = op[2]
        elif op[0] == "remove":
            index.remove(op[1])
            keys.pop(op[1], None)
        else:
            _, query, k, exclude = op
            found = index.search(query, k, exclude=exclude)
            assert_same_ranking(found, keys, query, k, exclude)
        assert len(index) == len(keys) and set(keys) == {key for key in KEYS if key in index}
        assert index.rows == sum(len(rows) for rows in keys.values())
        assert not index.approximate
    everything = index.search([1.0] * dims, k=len(KEYS))
    assert {key for key, _ in everything} == set(keys)


def _clustered(rng: np.random.Generator, dims: int = 32, latent: int = 6, clusters: int = 5) -> Any:
    """Clustered vectors of low intrinsic dimension (as sentence embeddings are): cluster centres
    and spread in a ``latent``-dimensional subspace, a little noise in every dimension."""
    basis = np.linalg.qr(rng.normal(size=(dims, latent)))[0]
    centres = rng.normal(size=(clusters, latent)) * 3

    def draw(count: int) -> Any:
        centre = centres[rng.integers(clusters)]
        spread = centre + rng.normal(size=(count, latent))
        return spread @ basis.T + 0.15 * rng.normal(size=(count, dims))

    return draw


@settings(max_examples=25, deadline=None)
@given(
    seed=st.integers(0, 2**32 - 1),
    count=st.integers(60, 160),
    queries=st.lists(st.tuples(st.integers(1, 20), st.integers(0, 3)), min_size=1, max_size=5),
)
def test_vector_index_approximate_search_recalls_the_exact_neighbours(
    seed: int, count: int, queries: list[tuple[int, int]]
) -> None:
    """Approximate regime (``exact_rows=50``, 8 of 32 dimensions in the coarse pass, 20 rows
    rescored): on clustered data, recall@k of the exact ranking is >= 0.9 for every query, the
    order is by the returned scores, and every returned score is an exact cosine (of one of the
    key's rows, never above the key's best) - not a coarse, projected score."""
    rng = np.random.default_rng(seed)
    draw = _clustered(rng)
    index = VectorIndex(exact_rows=50, reduced_dims=8, rescore=20, background=False)
    keys: dict[str, Any] = {}
    for i in range(count):
        keys[f"k{i:03}"] = draw(int(rng.integers(1, 5)))
        index.add(f"k{i:03}", keys[f"k{i:03}"])
    for i in rng.choice(count, size=count // 5, replace=False):  # replacements after the fit
        keys[f"k{i:03}"] = draw(int(rng.integers(1, 5)))
        index.add(f"k{i:03}", keys[f"k{i:03}"])
    for i in rng.choice(count, size=count // 10, replace=False):
        keys.pop(f"k{i:03}", None)
        index.remove(f"k{i:03}")
    assert index.approximate and index.rows == sum(len(rows) for rows in keys.values())
    names = sorted(keys)
    for k, excluded in queries:
        query = draw(1)[0]
        exclude = {names[int(j)] for j in rng.choice(len(names), size=excluded, replace=False)}
        found = index.search(query, k, exclude=exclude)
        expected = reference_search(keys, query, k, exclude)
        assert len(found) == len(expected) == k
        recall = len({key for key, _ in found} & {key for key, _ in expected}) / k
        assert recall >= 0.9, (recall, found, expected)
        assert found == sorted(found, key=lambda item: (-item[1], item[0]))
        q = _unit(query)
        for key, score in found:
            assert key in keys and key not in exclude
            cosines = _unit(keys[key]) @ q
            assert np.min(np.abs(cosines - score)) <= 1e-5, (key, score, cosines)
            assert score <= cosines.max() + 1e-5


def test_vector_index_approximate_scores_are_each_keys_best_row() -> None:
    rows = {
        "a": [[0.0, 2.0, 2.0], [2.0, -2.0, 1.0]],
        "f0": [[2.0, 2.0, 1.0]],
        "f1": [[-1.0, -2.0, -1.0]],
        "f2": [[1.0, 1.0, -1.0]],
        "f3": [[0.0, 1.0, -2.0]],
    }
    index = VectorIndex(exact_rows=4, reduced_dims=1, rescore=1, background=False)
    for key, vectors in rows.items():
        index.add(key, vectors)
    assert index.approximate
    query = [-1.0, -1.0, 2.0]
    (key, score), *_ = index.search(query, k=1)
    assert key == "a"  # found: "a"'s second row (cosine 0.272) was rescored, its first was not
    assert score == pytest.approx(reference_scores(rows, query)["a"], abs=1e-5)  # 0.2887


def test_vector_index_refuses_other_dimensions_and_non_finite_values() -> None:
    index = VectorIndex()
    index.add("a", [[1.0, 0.0, 0.0]])
    with pytest.raises(ValueError, match=r"vectors of 4 dimensions, but the index holds 3-dim"):
        index.add("b", [[1.0, 0.0, 0.0, 0.0]])
    with pytest.raises(ValueError, match=r"vectors of 2 dimensions, but the index holds 3-dim"):
        index.search([1.0, 0.0], k=1)
    for bad in (math.nan, math.inf, -math.inf):
        with pytest.raises(ValueError, match=r"NaN or infinity"):
            index.add("c", [[1.0, bad, 0.0]])
        with pytest.raises(ValueError, match=r"NaN or infinity"):
            index.search([bad, 0.0, 0.0], k=1)
    with pytest.raises(ValueError, match=r"expected rows of vectors, got shape \(1, 1, 3\)"):
        index.add("d", [[[1.0, 0.0, 0.0]]])
    with pytest.raises(ValueError, match=r"exact_rows must be an integer >= 1, got 0"):
        VectorIndex(exact_rows=0)
    # a refused write changes nothing
    assert len(index) == 1 and "b" not in index and "c" not in index and index.rows == 1
    assert index.search([0.0, 1.0, 0.0], k=5) == [("a", 0.0)]
    index.add("a", [])  # no rows: the key goes
    assert len(index) == 0 and index.search([1.0, 0.0, 0.0]) == []


@pytest.mark.parametrize("approximate", [False, True], ids=["exact", "approximate"])
def test_vector_index_compaction_after_many_replacements_keeps_results_right(
    approximate: bool,
) -> None:
    """3,600 dead rows (300 keys replaced 12 times, some removed) trigger compaction, which
    rewrites the rows and renumbers the keys: searches made all along (so right after each
    compaction too) and at the end still match the reference."""
    rng = np.random.default_rng(16)
    draw = _clustered(rng, dims=16, latent=4)
    options = (
        {"exact_rows": 100, "reduced_dims": 6, "rescore": 64, "background": False}
        if approximate
        else {}
    )
    index = VectorIndex(**options)
    keys: dict[str, Any] = {}
    exclude = {"k000", "k001"}

    def check() -> None:
        query = draw(1)[0]
        found = index.search(query, 10, exclude=exclude)
        if not approximate:
            assert_same_ranking(found, keys, query, 10, exclude)
            return
        expected = reference_search(keys, query, 10, exclude)
        assert len(found) == len(expected)
        assert len({key for key, _ in found} & {key for key, _ in expected}) >= 0.9 * len(found)
        q = _unit(query)
        for key, score in found:  # an exact cosine of one of the key's rows
            assert key not in exclude and np.min(np.abs(_unit(keys[key]) @ q - score)) <= 1e-5

    added = 0
    for round_ in range(13):
        for i in range(300 if round_ < 12 else 150):  # the last round replaces half the keys
            keys[f"k{i:03}"] = draw(int(rng.integers(1, 3)))
            index.add(f"k{i:03}", keys[f"k{i:03}"])
            added += len(keys[f"k{i:03}"])
            if i % 60 == 59:
                check()
        for i in rng.choice(300, size=20, replace=False):
            keys.pop(f"k{i:03}", None)
            index.remove(f"k{i:03}")
        check()
    live = sum(len(rows) for rows in keys.values())
    assert index.rows == live and len(index) == len(keys)
    assert set(keys) == {f"k{i:03}" for i in range(300) if f"k{i:03}" in index}
    # white-box: the row store was rewritten (it never held all the rows ever added)
    assert index._n < added / 2 and index._dead < 1_024
    assert index.approximate is approximate
    for _ in range(10):
        check()


@pytest.mark.parametrize("approximate", [False, True], ids=["exact", "approximate"])
def test_vector_index_concurrent_adds_and_searches(approximate: bool) -> None:
    """Thread-safety smoke test: writers replacing their own keys and readers searching at the
    same time raise nothing, every answer is well-formed, and the final index is the reference
    (approximate: from 100 rows on, so the coarse basis is fitted and refitted under load)."""
    index = VectorIndex(exact_rows=100, reduced_dims=4) if approximate else VectorIndex()
    final: dict[str, Any] = {}
    errors: list[BaseException] = []
    lock = threading.Lock()
    start = threading.Barrier(6)

    def writer(w: int) -> None:
        rng = np.random.default_rng(w)
        try:
            start.wait()
            for round_ in range(15):
                for i in range(40):
                    key = f"w{w}-{i:02}"
                    rows = rng.normal(size=(int(rng.integers(1, 4)), 8))
                    if round_ == 14 and i % 7 == 0:
                        index.remove(key)
                        with lock:
                            final.pop(key, None)
                    else:
                        index.add(key, rows)
                        with lock:
                            final[key] = rows
        except BaseException as error:  # pragma: no cover - reported below
            errors.append(error)

    def reader(r: int) -> None:
        rng = np.random.default_rng(100 + r)
        try:
            start.wait()
            for _ in range(300):
                found = index.search(rng.normal(size=8), k=10, exclude={"w0-00"})
                assert len(found) <= 10 and "w0-00" not in {key for key, _ in found}
                assert all(-1.0 - 1e-5 <= score <= 1.0 + 1e-5 for _, score in found)
        except BaseException as error:  # pragma: no cover - reported below
            errors.append(error)

    threads = [threading.Thread(target=writer, args=(w,)) for w in range(4)]
    threads += [threading.Thread(target=reader, args=(r,)) for r in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert index.wait(timeout=30)  # the fit runs in the background
    assert len(index) == len(final) and index.rows == sum(len(r) for r in final.values())
    rng = np.random.default_rng(7)
    for _ in range(5):
        query = rng.normal(size=8)
        found = index.search(query, 10)
        assert index.approximate is approximate
        if approximate:  # exact cosines of the keys' rows (recall is not the point here)
            q = _unit(query)
            for key, score in found:
                assert np.min(np.abs(_unit(final[key]) @ q - score)) <= 1e-5
        else:
            assert_same_ranking(found, final, query, 10)


# -- BM25Index: the pure-Python implementation it replaced (git HEAD), as the reference ------------


class PurePythonBM25:
    """langmem_ext/core/ranking.py's BM25Index before the numpy postings (minimal copy)."""

    def __init__(self, *, k1: float = 1.2, b: float = 0.75) -> None:
        self.k1, self.b = k1, b
        self._docs: dict[str, Counter[str]] = {}
        self._lengths: dict[str, int] = {}
        self._postings: dict[str, dict[str, int]] = {}
        self._total_length = 0

    def add(self, key: str, text: str) -> None:
        terms = Counter(tokenize(text))
        if key in self._docs:
            for term in self._docs.pop(key):
                postings = self._postings[term]
                del postings[key]
                if not postings:
                    del self._postings[term]
            self._total_length -= self._lengths.pop(key)
        self._docs[key] = terms
        length = sum(terms.values())
        self._lengths[key] = length
        self._total_length += length
        for term, tf in terms.items():
            self._postings.setdefault(term, {})[key] = tf

    def search(
        self, query: str, k: int = 10, *, exclude: Iterable[str] = ()
    ) -> list[tuple[str, float]]:
        if k <= 0:
            return []
        skip = set(exclude)
        n = len(self._docs)
        if n == 0:
            return []
        average = self._total_length / n or 1.0
        scores: dict[str, float] = {}
        for term, qtf in Counter(tokenize(query)).items():
            postings = self._postings.get(term)
            if not postings:
                continue
            df = len(postings)
            idf = math.log(1.0 + (n - df + 0.5) / (df + 0.5))
            for key, tf in postings.items():
                if key in skip:
                    continue
                norm = self.k1 * (1 - self.b + self.b * self._lengths[key] / average)
                scores[key] = scores.get(key, 0.0) + qtf * idf * tf * (self.k1 + 1) / (tf + norm)
        ranked = sorted(scores.items(), key=lambda item: (-item[1], item[0]))
        return ranked[:k]


VOCABULARY = [
    "Oslo", "oslo", "shipment", "shipments", "invoice", "due", "month", "monday", "left",
    "naïve", "Ωmega", "x1", "_under", "42", "the", "and", "of", "to", "was", "a",
]  # fmt: skip


def _text() -> st.SearchStrategy[str]:
    return st.lists(
        st.tuples(st.sampled_from(VOCABULARY), st.sampled_from([" ", ", ", ".", "\n", "-", "'"])),
        max_size=25,
    ).map(lambda words: "".join(word + sep for word, sep in words))


@settings(max_examples=200, deadline=None)
@given(
    k1=st.sampled_from([0.0, 0.5, 1.2, 2.0]),
    b=st.sampled_from([0.0, 0.3, 0.75, 1.0]),
    script=st.lists(
        st.one_of(
            st.tuples(st.just("add"), st.sampled_from(KEYS), _text()),
            st.tuples(
                st.just("search"),
                _text(),
                st.integers(0, 14),
                st.frozensets(st.sampled_from([*KEYS, "absent"]), max_size=4),
            ),
        ),
        min_size=1,
        max_size=50,
    ),
)
def test_bm25_numpy_postings_rank_like_the_pure_python_index(
    k1: float, b: float, script: list[tuple[Any, ...]]
) -> None:
    """Same keys in the same order, scores within 1e-9, for random corpora with replacements
    (``add`` of a present key), empty documents, stop words, exclusions and any ``k``."""
    index, reference = BM25Index(k1=k1, b=b), PurePythonBM25(k1=k1, b=b)
    searched = False
    for op in script:
        if op[0] == "add":
            index.add(op[1], op[2])
            reference.add(op[1], op[2])
            continue
        _, query, k, exclude = op
        found = index.search(query, k, exclude=exclude)
        expected = reference.search(query, k, exclude=exclude)
        assert [key for key, _ in found] == [key for key, _ in expected]
        assert all(abs(a - e) <= 1e-9 for (_, a), (_, e) in zip(found, expected, strict=True)), (
            found,
            expected,
        )
        searched = True
    if not searched:  # every corpus is searched at least once, with every vocabulary word
        query = " ".join(VOCABULARY)
        found, expected = index.search(query, 20), reference.search(query, 20)
        assert [key for key, _ in found] == [key for key, _ in expected]
        assert all(abs(a - e) <= 1e-9 for (_, a), (_, e) in zip(found, expected, strict=True))
    assert len(index) == len(reference._docs)


# -- Retrieval with a local dense index ------------------------------------------------------------

#: synonyms share a dimension, so a paraphrase with no word in common still matches (BM25 misses it)
CONCEPTS = {
    "storage": ("locker", "cabinet"),
    "secret": ("code", "combination", "pin"),
    "sport": ("gym", "fitness"),
    "family": ("sister", "sibling"),
    "move": ("moved", "relocated"),
    "city": ("porto", "oporto"),
}
JITTER = 24
DIMS = len(CONCEPTS) + JITTER


class Concepts(Embeddings):
    """Deterministic embeddings that record what they embed: one dimension per concept (a count
    of its synonyms) plus a small pseudo-random part seeded by the text, so distinct texts never
    tie. ``documents``: the texts of each ``embed_documents`` call; ``queries``: each query."""

    def __init__(self, scale: float = 1.0) -> None:
        self.scale = scale
        self.documents: list[list[str]] = []
        self.queries: list[str] = []
        self._lock = threading.Lock()

    def vector(self, text: str) -> list[float]:
        words = re.findall(r"\w+", text.lower())
        v = np.zeros(DIMS)
        for i, synonyms in enumerate(CONCEPTS.values()):
            v[i] = sum(word in synonyms for word in words)
        v[len(CONCEPTS) :] = np.random.default_rng(zlib.crc32(text.encode())).normal(size=JITTER)
        v[len(CONCEPTS) :] *= 0.15
        return (self.scale * v / np.linalg.norm(v)).tolist()

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        with self._lock:
            self.documents.append(list(texts))
        return [self.vector(t) for t in texts]

    def embed_query(self, text: str) -> list[float]:
        with self._lock:
            self.queries.append(text)
        return self.vector(text)

    @property
    def embedded(self) -> list[str]:
        return [text for call in self.documents for text in call]

    def reset(self) -> None:
        self.documents.clear()
        self.queries.clear()


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


def context(result: Any) -> str:
    return next((str(m.content) for m in result.messages if m.id == RETRIEVED_ID), "")


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
    run(retrieval(other, ranking="dense", dense_index="store"), conversation(30))
    assert other._vectors.get(TURNS)
    assert all("vectors" not in item.value for item in other.search(TURNS, limit=1_000))


def test_turns_stored_without_vectors_are_embedded_once_on_load() -> None:
    """(c) Turns written by an older writer (``dense_index="store"``: no ``vectors`` in the value)
    are embedded once, together, when a local Retrieval loads the namespace, and are found by
    the dense ranking; the next queries embed no document."""
    store = indexed_store(Concepts())
    old = retrieval(store, ranking="dense", dense_index="store")
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
            dense_index="bogus",  # type: ignore[arg-type]
            key=KEY,
        )
    with pytest.raises(ValueError, match=r"dense_index='store' searches with the store's own"):
        Retrieval(
            TokenBudget(900),
            store=indexed_store(Concepts()),
            embeddings=Concepts(),
            dense_index="store",
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
    local = retrieval(indexed_store(Concepts()), ranking="dense")
    remote = retrieval(indexed_store(Concepts()), ranking="dense", dense_index="store")
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


def _pgvector(conn: Any) -> bool:
    return (
        conn.execute("SELECT 1 FROM pg_available_extensions WHERE name = 'vector'").fetchone()
        is not None
    )


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
        pinned = Retrieval(TokenBudget(900), store=indexed, key=KEY, dense_index="local")
        assert pinned.dense_index == "local" and pinned._local
        plain = Retrieval(TokenBudget(900), store=PostgresStore(conn), key=KEY)
        assert (plain.dense_index, plain.config.ranking) == ("local", "bm25")
        with_model = Retrieval(
            TokenBudget(900), store=PostgresStore(conn), key=KEY, embeddings=Concepts()
        )
        assert (with_model.dense_index, with_model.config.ranking) == ("local", "hybrid")


def test_postgres_store_side_dense_retrieval_end_to_end(pg_schema_dsn: str) -> None:
    """(i) With pgvector in the server: the store-side dense ranking finds the paraphrased fact
    and the turns carry no ``vectors`` (the store embedded them). Skipped, with the reason, on a
    server without the ``vector`` extension (``PostgresStore(index=...).setup()`` cannot run)."""
    import psycopg
    from langgraph.store.postgres import PostgresStore
    from psycopg.rows import dict_row

    with psycopg.connect(
        pg_schema_dsn, autocommit=True, prepare_threshold=0, row_factory=dict_row
    ) as conn:
        if not _pgvector(conn):
            where = os.environ.get("LANGMEM_EXT_TEST_PG", "127.0.0.1:5432")
            pytest.skip(
                f"the PostgreSQL server at {where!r} has no 'vector' extension "
                "(pg_available_extensions): PostgresStore(index=...).setup() needs pgvector"
            )
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
