"""``VectorIndex`` (langmem_ext/retrieval/vectors.py) against a brute-force float64 reference
(``vector_reference.py``), in its exact regime (same keys, same order, ties by key) and its
approximate one (recall of the exact neighbours on clustered data, exact cosines), through
compaction and from several threads."""

from __future__ import annotations

import math
import threading
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from vector_reference import (
    _clustered,
    _unit,
    assert_same_ranking,
    reference_scores,
    reference_search,
)

from langmem_ext.retrieval.vectors import VectorIndex

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
