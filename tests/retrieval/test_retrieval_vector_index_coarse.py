"""``VectorIndex``'s coarse regime and bulk loads.

Past ``exact_rows`` the index searches inverted lists (k-means over the rows, each row coded as its
list's mean plus a projected residual) fitted in a background thread; until a fit is ready the
search stays exact. Checked here against a brute-force float64 reference (from
``vector_reference.py``): scripts of adds, bulk blocks, replacements, removals and searches with a
small ``exact_rows`` and inline fits (every answer well-formed, every score the exact cosine of the
key's best row, and the very ranking of the reference whenever the coarse pass covers every row);
recall on clustered data; searches, writes and compaction while a fit is held back; a failing
fit; ``add_block`` (equivalent to ``add_many``, float16, duplicates, refusals); several threads.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from vector_reference import (
    _clustered,
    assert_same_ranking,
    reference_scores,
    reference_search,
)

from langmem_ext.retrieval.vectors import VectorIndex


def assert_well_formed(
    found: list[tuple[str, float]],
    keys: dict[str, Any],
    query: Any,
    k: int,
    exclude: Iterable[str] = (),
) -> None:
    """An approximate answer: as many keys as the reference (all of them when fewer than ``k``),
    distinct, known, not excluded, ordered by (-score, key), each scored by the exact cosine of
    its best row."""
    scores = reference_scores(keys, query, exclude)
    assert len(found) == min(k, len(scores)), (found, len(scores))
    assert len({key for key, _ in found}) == len(found), found
    assert found == sorted(found, key=lambda item: (-item[1], item[0]))
    for key, score in found:
        assert key in scores, f"{key!r} is excluded or unknown"
        assert abs(score - scores[key]) <= 1e-5, (key, score, scores[key])


def recall(found: list[tuple[str, float]], keys: dict[str, Any], query: Any, k: int) -> float:
    """Tie-aware recall@k: a found key counts when its score reaches the reference's k-th."""
    expected = reference_search(keys, query, k)
    floor = expected[-1][1] - 1e-6
    return min(len(expected), sum(1 for _, score in found if score >= floor)) / len(expected)


@contextmanager
def held_fits(index: VectorIndex, monkeypatch: pytest.MonkeyPatch) -> Iterator[threading.Event]:
    """Fits of ``index`` wait (in their background thread) until the yielded event is set."""
    gate = threading.Event()
    train, assign = index._train, index._assign

    def held_train(plan: Any) -> Any:
        assert gate.wait(30)
        return train(plan)

    def held_assign(plan: Any) -> Any:
        assert gate.wait(30)
        return assign(plan)

    monkeypatch.setattr(index, "_train", held_train)
    monkeypatch.setattr(index, "_assign", held_assign)
    try:
        yield gate
    finally:
        gate.set()


# -- the coarse regime against the reference ------------------------------------------------------


@st.composite
def coarse_scripts(draw: Any) -> tuple[int, int, list[tuple[Any, ...]]]:
    """A seed, a dimension and a script over 120 keys: a first bulk block (25-360 rows, around
    ``exact_rows=64``), then adds (1-4 rows, replacing), blocks, removals and searches: enough
    rows to pass ``exact_rows`` and come back under it."""
    seed = draw(st.integers(0, 2**32 - 1))
    dims = draw(st.sampled_from([3, 8, 24]))
    key = st.integers(0, 119).map(lambda i: f"k{i:03}")
    op = st.one_of(
        st.tuples(st.just("add"), key, st.integers(1, 4)),
        st.tuples(
            st.just("block"),
            st.lists(st.tuples(key, st.integers(0, 3)), min_size=1, max_size=40),
            st.booleans(),
        ),
        st.tuples(st.just("remove"), st.lists(key, min_size=1, max_size=30)),
        st.tuples(
            st.just("search"),
            st.integers(1, 15),
            st.frozensets(key, max_size=3),
        ),
    )
    size = draw(st.integers(25, 120))
    start = draw(st.lists(st.integers(1, 3), min_size=size, max_size=size))  # 25-360 rows
    load = ("block", [(f"k{i:03}", count) for i, count in enumerate(start)], draw(st.booleans()))
    first = ("search", draw(st.integers(1, 15)), frozenset())
    return seed, dims, [load, first, *draw(st.lists(op, min_size=1, max_size=25))]


def _run(index: VectorIndex, seed: int, dims: int, ops: list[tuple[Any, ...]], exact: bool) -> int:
    """Play ``ops`` on ``index`` and on the reference, checking every search; returns how many
    searches ran in the coarse regime. ``exact``: every answer must be the reference's."""
    rng = np.random.default_rng(seed)
    draw = _clustered(rng, dims=dims, latent=min(dims, 4))
    keys: dict[str, Any] = {}
    coarse = 0
    for op in ops:
        if op[0] == "add":
            keys[op[1]] = draw(op[2])
            index.add(op[1], keys[op[1]])
        elif op[0] == "block":
            names = [name for name, _ in op[1]]
            counts = [count for _, count in op[1]]
            rows = np.concatenate([draw(c) for c in counts]) if sum(counts) else np.zeros((0, dims))
            if op[2]:  # float16, as Retrieval stores them
                rows = rows.astype(np.float16)
            index.add_block(names, rows, counts)
            at = 0
            for name, count in op[1]:  # a key given twice keeps its last rows
                if count:
                    keys[name] = rows[at : at + count].astype(np.float64)
                else:
                    keys.pop(name, None)
                at += count
        elif op[0] == "remove":
            for name in op[1]:
                index.remove(name)
                keys.pop(name, None)
        else:
            _, k, exclude = op
            query = draw(1)[0]
            found = index.search(query, k, exclude=exclude)
            if index.approximate:
                coarse += 1
                assert_well_formed(found, keys, query, k, exclude)
            if exact or not index.approximate:
                assert_same_ranking(found, keys, query, k, exclude)
        assert len(index) == len(keys) and index.rows == sum(len(r) for r in keys.values())
        if not index.background:  # inline fits: ready at once
            assert index.approximate == (index.rows > 64)
    assert index.wait(30)
    return coarse


@settings(max_examples=200, deadline=None)
@given(script=coarse_scripts(), rescore=st.sampled_from([1, 3, 16]))
def test_coarse_search_answers_are_well_formed_with_exact_scores(
    script: tuple[int, int, list[tuple[Any, ...]]], rescore: int
) -> None:
    """``exact_rows=64``, fits inline, few rows rescored: after any adds, float16 blocks,
    replacements and removals, every coarse answer has the reference's length, distinct
    non-excluded keys in (-score, key) order, each with the exact cosine of its best row; under
    64 rows again, the search is exact."""
    seed, dims, ops = script
    index = VectorIndex(exact_rows=64, reduced_dims=2, rescore=rescore, background=False)
    _run(index, seed, dims, ops, exact=False)


@settings(max_examples=200, deadline=None)
@given(script=coarse_scripts())
def test_coarse_search_covering_every_row_is_the_reference_ranking(
    script: tuple[int, int, list[tuple[Any, ...]]],
) -> None:
    """With ``rescore`` above the row count the coarse pass scans every list and the tail and
    rescores every row: the answer is the reference's, in its order (ties by key) - which checks
    the lists, the tail, dead rows, exclusions and compaction's renumbering exactly."""
    seed, dims, ops = script
    index = VectorIndex(exact_rows=64, reduced_dims=2, rescore=10_000, background=False)
    _run(index, seed, dims, ops, exact=True)


@settings(max_examples=40, deadline=None)
@given(script=coarse_scripts())
def test_coarse_search_with_fits_in_the_background_is_right_at_every_moment(
    script: tuple[int, int, list[tuple[Any, ...]]],
) -> None:
    """The same scripts with fits in a background thread, racing the writes and searches: every
    answer is the reference's whether the search was exact (a fit pending) or coarse (covering
    every row), and the fits end."""
    seed, dims, ops = script
    index = VectorIndex(exact_rows=64, reduced_dims=2, rescore=10_000)
    _run(index, seed, dims, ops, exact=True)


def test_coarse_search_recalls_the_exact_neighbours_on_clustered_data() -> None:
    """3,000 keys of 1-3 clustered rows (32 dimensions of intrinsic dimension 6), ``exact_rows``
    512: tie-aware recall@10 of the reference >= 0.95 on average over 40 queries, before and after
    a fifth of the keys is replaced (the tail, then a reassignment) and a tenth removed."""
    rng = np.random.default_rng(16)
    draw = _clustered(rng, dims=32, latent=6, clusters=12)
    index = VectorIndex(exact_rows=512, reduced_dims=8, rescore=32, background=False)
    keys = {f"k{i:04}": draw(int(rng.integers(1, 4))) for i in range(3_000)}
    index.add_block(
        list(keys), np.concatenate(list(keys.values())), [len(r) for r in keys.values()]
    )
    assert index.approximate

    def mean_recall() -> float:
        queries = [draw(1)[0] for _ in range(40)]
        for query in queries[:5]:
            assert_well_formed(index.search(query, 10), keys, query, 10)
        return float(np.mean([recall(index.search(q, 10), keys, q, 10) for q in queries]))

    assert mean_recall() >= 0.95
    for i in rng.choice(3_000, size=600, replace=False):
        keys[f"k{i:04}"] = draw(int(rng.integers(1, 4)))
        index.add(f"k{i:04}", keys[f"k{i:04}"])
    for i in rng.choice(3_000, size=300, replace=False):
        keys.pop(f"k{i:04}", None)
        index.remove(f"k{i:04}")
    coarse = index._coarse
    assert coarse is not None and coarse.covered > 0
    assert mean_recall() >= 0.95


def test_tail_rows_are_found_at_once_and_a_small_index_is_exact_again() -> None:
    """Rows added after the lists were made (the tail) are scanned exactly: a key added last is
    the first answer to its own vector. Removing keys down to ``exact_rows`` makes the search
    exact again (``approximate`` False), with the reference's ranking."""
    rng = np.random.default_rng(3)
    draw = _clustered(rng, dims=16)
    index = VectorIndex(exact_rows=100, reduced_dims=4, rescore=8, background=False)
    keys = {f"k{i:03}": draw(2) for i in range(200)}
    index.add_many(keys.items())
    assert index.approximate
    fresh = draw(1)
    index.add("fresh", fresh)
    keys["fresh"] = fresh
    coarse = index._coarse
    assert coarse is not None and coarse.covered < index._n  # in the tail
    (key, score), *_ = index.search(fresh[0], 3)
    assert key == "fresh" and score == pytest.approx(1.0, abs=1e-5)
    for i in range(160):
        index.remove(f"k{i:03}")
        keys.pop(f"k{i:03}")
    assert index.rows <= 100 and not index.approximate
    query = draw(1)[0]
    assert_same_ranking(index.search(query, 10), keys, query, 10)


# -- fitting in the background --------------------------------------------------------------------


def test_search_is_exact_while_the_first_fit_is_pending(monkeypatch: pytest.MonkeyPatch) -> None:
    """Past ``exact_rows`` the fit runs in a background thread: the write returns at once,
    ``wait`` times out while the fit is held, searches meanwhile are the reference's (exact), and
    once it is done the index is approximate."""
    rng = np.random.default_rng(1)
    draw = _clustered(rng, dims=12)
    index = VectorIndex(exact_rows=64, reduced_dims=4, rescore=4)
    assert index.wait(0)  # nothing pending
    keys = {f"k{i:03}": draw(2) for i in range(60)}
    with held_fits(index, monkeypatch) as gate:
        index.add_many(keys.items())
        assert not index.wait(0.05)
        assert index.rows == 120 and not index.approximate
        for _ in range(5):
            query = draw(1)[0]
            assert_same_ranking(index.search(query, 7), keys, query, 7)
        gate.set()
        assert index.wait(30)
    assert index.approximate
    query = draw(1)[0]
    assert_well_formed(index.search(query, 7), keys, query, 7)


def test_writes_during_a_fit_are_searchable_at_once_and_after(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """While a (re)fit is held: keys added are found, removed keys are gone, replaced keys score
    by their new rows - before the fit is swapped in and after (the rows written meanwhile are
    its tail, the dead ones are masked)."""
    rng = np.random.default_rng(2)
    draw = _clustered(rng, dims=12)
    index = VectorIndex(exact_rows=64, reduced_dims=4, rescore=10_000, background=False)
    keys = {f"k{i:03}": draw(2) for i in range(60)}
    index.add_many(keys.items())
    assert index.approximate
    index.background = True

    def check() -> None:
        for _ in range(4):
            query = draw(1)[0]
            assert_same_ranking(index.search(query, 10), keys, query, 10)  # rescore covers all
        for name in ("new-0", "new-59"):
            if name in keys:
                (key, score), *_ = index.search(keys[name][0], 1)
                assert key == name and score == pytest.approx(1.0, abs=1e-5)

    with held_fits(index, monkeypatch) as gate:
        for i in range(60):  # doubles the rows: a new fit, held
            keys[f"new-{i}"] = draw(2)
            index.add(f"new-{i}", keys[f"new-{i}"])
        assert not index.wait(0.05)
        for i in range(0, 60, 3):
            index.remove(f"k{i:03}")
            keys.pop(f"k{i:03}")
        for i in range(1, 60, 3):
            keys[f"k{i:03}"] = draw(1)
            index.add(f"k{i:03}", keys[f"k{i:03}"])
        check()
        gate.set()
        assert index.wait(30)
    check()
    coarse = index._coarse
    assert coarse is not None and coarse.covered == index._n  # the tail was assigned


def test_compaction_during_a_fit_voids_it_and_the_next_one_is_right(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A compaction (rows renumbered) while a fit is held: the fit's result is dropped, the
    worker fits again on the compacted rows, and answers stay the reference's throughout."""
    rng = np.random.default_rng(4)
    draw = _clustered(rng, dims=8)
    index = VectorIndex(exact_rows=64, reduced_dims=3, rescore=10_000)
    keys: dict[str, Any] = {}
    with held_fits(index, monkeypatch) as gate:
        for _ in range(4):  # 4 x 400 rows replaced: > 1,024 dead rows, half of them
            for i in range(400):
                keys[f"k{i:03}"] = draw(1)
                index.add(f"k{i:03}", keys[f"k{i:03}"])
        assert index._epoch >= 1 and not index.approximate  # compacted, fit still held
        query = draw(1)[0]
        assert_same_ranking(index.search(query, 10), keys, query, 10)
        gate.set()
        assert index.wait(30)
    assert index.approximate and index._dead < 1_024
    coarse = index._coarse
    assert coarse is not None and int(coarse.ids.max()) < index._n
    for _ in range(5):
        query = draw(1)[0]
        assert_same_ranking(index.search(query, 10), keys, query, 10)


def test_a_failing_fit_warns_and_the_search_stays_exact(monkeypatch: pytest.MonkeyPatch) -> None:
    """A fit that raises is reported as a RuntimeWarning; the index stays exact and usable, and
    does not retry before it doubles."""
    rng = np.random.default_rng(5)
    draw = _clustered(rng, dims=8)
    index = VectorIndex(exact_rows=32, reduced_dims=3, background=False)
    calls: list[int] = []

    def broken(plan: Any) -> Any:
        calls.append(plan.n)
        raise MemoryError("no room")

    monkeypatch.setattr(index, "_train", broken)
    keys = {f"k{i:02}": draw(1) for i in range(40)}
    with pytest.warns(RuntimeWarning, match=r"fitting the coarse pass failed \(MemoryError"):
        index.add_many(keys.items())
    assert calls == [40] and not index.approximate and index.wait(0)
    keys["extra"] = draw(1)
    index.add("extra", keys["extra"])  # no retry until the rows double
    assert calls == [40]
    query = draw(1)[0]
    assert_same_ranking(index.search(query, 5), keys, query, 5)


def test_background_must_be_a_bool() -> None:
    with pytest.raises(ValueError, match=r"background must be True or False, got 1"):
        VectorIndex(background=1)  # type: ignore[arg-type]


# -- add_block ------------------------------------------------------------------------------------


@settings(max_examples=80, deadline=None)
@given(
    seed=st.integers(0, 2**32 - 1),
    first=st.lists(st.tuples(st.integers(0, 30), st.integers(0, 3)), max_size=30),
    second=st.lists(st.tuples(st.integers(0, 30), st.integers(0, 3)), max_size=30),
    half=st.booleans(),
)
def test_add_block_is_add_many(
    seed: int, first: list[tuple[int, int]], second: list[tuple[int, int]], half: bool
) -> None:
    """Two blocks (keys given twice, counts of 0, keys replaced by the second block) leave the
    index as ``add_many`` of the same rows does: same keys, rows, and answers."""
    rng = np.random.default_rng(seed)
    bulk, many = VectorIndex(), VectorIndex()
    keys: dict[str, Any] = {}
    for block in (first, second):
        names = [f"k{i}" for i, _ in block]
        counts = [count for _, count in block]
        rows = rng.normal(size=(sum(counts), 5))
        if half:
            rows = rows.astype(np.float16)
        bulk.add_block(names, rows, np.asarray(counts))
        starts = np.cumsum([0, *counts])
        pairs = [
            (name, rows[a:b].astype(np.float32))
            for name, a, b in zip(names, starts[:-1], starts[1:], strict=True)
        ]
        many.add_many(pairs)
        keys.update(pairs)
    keys = {name: rows for name, rows in keys.items() if len(rows)}
    assert len(bulk) == len(many) == len(keys)
    assert bulk.rows == many.rows == sum(len(rows) for rows in keys.values())
    assert {f"k{i}" for i in range(31) if f"k{i}" in bulk} == set(keys)
    for name in keys:  # the same unit rows (the order of keys in the matrix may differ)
        rows_of = [
            index._matrix[index._start[index._slot[name]] :][: index._count[index._slot[name]]]
            for index in (bulk, many)
        ]
        assert np.array_equal(*rows_of)
    for _ in range(3):
        query = rng.normal(size=5)
        assert_same_ranking(bulk.search(query, 40), keys, query, 40)
        assert_same_ranking(many.search(query, 40), keys, query, 40)


def test_add_block_float16_rows_equal_their_float32_values() -> None:
    """float16 rows (as Retrieval stores them, converted by table) index exactly like the same
    values given as float32; a float16 query works too."""
    rng = np.random.default_rng(6)
    rows = rng.normal(size=(50, 7)).astype(np.float16)
    rows[3] = 0.0  # a zero row scores 0
    rows[4, :3] = [np.float16(6e-8), np.float16(-65504), np.float16(1e-3)]  # subnormal, extreme
    counts = [5] * 10
    names = [f"k{i}" for i in range(10)]
    half, single = VectorIndex(), VectorIndex()
    half.add_block(names, rows, counts)
    single.add_block(names, rows.astype(np.float32), counts)
    assert np.array_equal(half._matrix[: half._n], single._matrix[: single._n])
    query = rng.normal(size=7)
    assert half.search(query.astype(np.float16), 10) == single.search(query.astype(np.float16), 10)
    keys = {name: rows[5 * i : 5 * i + 5].astype(np.float64) for i, name in enumerate(names)}
    assert_same_ranking(half.search(query, 10), keys, query, 10)


def test_add_block_refusals_change_nothing() -> None:
    """Counts that do not match the keys or the rows, negative or fractional counts, rows of
    another dimension, NaN or infinity (float16 too), rows that are not a matrix: ValueError
    naming the numbers, and the index is as it was."""
    index = VectorIndex()
    index.add_block(["a", "b"], np.eye(3, dtype=np.float32)[:2], [1, 1])
    before = index.search([1.0, 1.0, 0.0], 5)
    bad_rows = np.ones((2, 3), dtype=np.float16)
    bad_rows[1, 2] = np.inf
    cases: list[tuple[Any, Any, Any, str]] = [
        (["c"], np.ones((2, 3)), [1, 1], r"1 keys but counts of shape \(2,\)"),
        (["c", "d"], np.ones((2, 3)), [[1, 1]], r"2 keys but counts of shape \(1, 2\)"),
        (["c", "d"], np.ones((2, 3)), [3, -1], r"counts must be integers >= 0"),
        (["c", "d"], np.ones((2, 3)), [1.0, 1.0], r"counts must be integers >= 0"),
        (["c", "d"], np.ones((3, 3)), [1, 1], r"counts add up to 2 rows, but 3 given"),
        (["c"], np.ones((1, 4)), [1], r"vectors of 4 dimensions, but the index holds 3-dim"),
        (["c", "d"], bad_rows, [1, 1], r"NaN or infinity"),
        (["c"], np.full((1, 3), np.nan), [1], r"NaN or infinity"),
        (["c"], np.ones((1, 1, 3)), [1], r"expected rows of vectors, got shape \(1, 1, 3\)"),
        (["a", "c"], np.ones((2, 3)) * [[1, 1, 1], [np.nan, 0, 0]], [1, 1], r"NaN or inf"),
    ]
    for keys, rows, counts, message in cases:
        with pytest.raises(ValueError, match=message):
            index.add_block(keys, rows, counts)
        assert len(index) == 2 and index.rows == 2 and "c" not in index
        assert index.search([1.0, 1.0, 0.0], 5) == before
    index.add_block([], np.zeros((0, 3)), [])  # an empty block changes nothing
    index.add_block(["a", "b"], np.zeros((0, 3)), [0, 0])  # zero counts remove the keys
    assert len(index) == 0 and index.rows == 0 and index.search([1.0, 0.0, 0.0]) == []


def test_add_block_past_exact_rows_fits_in_the_background() -> None:
    """A block that takes the index past ``exact_rows`` returns before the fit is done;
    ``wait`` then finds it approximate, with exact scores."""
    rng = np.random.default_rng(7)
    draw = _clustered(rng, dims=24, latent=5, clusters=8)
    index = VectorIndex(exact_rows=1_000, reduced_dims=6, rescore=16)
    keys = {f"k{i:04}": draw(2) for i in range(2_000)}
    index.add_block(list(keys), np.concatenate(list(keys.values())).astype(np.float16), [2] * 2_000)
    assert index.wait(30) and index.approximate
    keys = {name: rows.astype(np.float16).astype(np.float64) for name, rows in keys.items()}
    for _ in range(5):
        query = draw(1)[0]
        found = index.search(query, 10)
        assert_well_formed(found, keys, query, 10)
        assert recall(found, keys, query, 10) >= 0.7


# -- threads --------------------------------------------------------------------------------------


def test_concurrent_writers_readers_and_background_fits() -> None:
    """Writers (add, add_block, remove) and readers at once, with background fits and
    reassignments under way (``exact_rows=128``): nothing raises, every answer is well-formed,
    and the final index is the reference (keys, rows, exact scores, recall)."""
    index = VectorIndex(exact_rows=128, reduced_dims=4, rescore=16)
    final: dict[str, Any] = {}
    errors: list[BaseException] = []
    lock = threading.Lock()
    start = threading.Barrier(5)

    def writer(w: int) -> None:
        rng = np.random.default_rng(w)
        try:
            start.wait()
            for round_ in range(12):
                names = [f"w{w}-{i:02}" for i in range(60)]
                counts = rng.integers(0, 4, size=60)
                rows = rng.normal(size=(int(counts.sum()), 8))
                if round_ % 3 == 0:
                    index.add_block(names, rows.astype(np.float16), counts)
                    rows = rows.astype(np.float16).astype(np.float64)
                else:
                    index.add_many(
                        (name, rows[a:b])
                        for name, a, b in zip(
                            names, np.cumsum(counts) - counts, np.cumsum(counts), strict=True
                        )
                    )
                with lock:
                    at = 0
                    for name, count in zip(names, counts.tolist(), strict=True):
                        if count:
                            final[name] = rows[at : at + count]
                        else:
                            final.pop(name, None)
                        at += count
                if round_ == 11:
                    for name in names[::5]:
                        index.remove(name)
                        with lock:
                            final.pop(name, None)
        except BaseException as error:  # pragma: no cover - reported below
            errors.append(error)

    def reader(r: int) -> None:
        rng = np.random.default_rng(100 + r)
        try:
            start.wait()
            for _ in range(150):
                found = index.search(rng.normal(size=8), k=10, exclude={"w0-00"})
                assert len(found) <= 10 and "w0-00" not in {key for key, _ in found}
                assert len({key for key, _ in found}) == len(found)
                assert all(-1.0 - 1e-5 <= score <= 1.0 + 1e-5 for _, score in found)
        except BaseException as error:  # pragma: no cover - reported below
            errors.append(error)

    threads = [threading.Thread(target=writer, args=(w,)) for w in range(3)]
    threads += [threading.Thread(target=reader, args=(r,)) for r in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert index.wait(30) and index.approximate
    assert len(index) == len(final) and index.rows == sum(len(r) for r in final.values())
    rng = np.random.default_rng(9)
    for _ in range(10):
        query = rng.normal(size=8)
        assert_well_formed(index.search(query, 10), final, query, 10)
