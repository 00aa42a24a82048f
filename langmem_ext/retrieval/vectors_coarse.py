"""The coarse regime of :class:`~langmem_ext.retrieval.vectors.VectorIndex`: the structure a fit
builds (inverted lists over residual codes), what a fit works from, and the numeric helpers of
fitting and of the coarse pass (k-means, list bounds, capped top-k, pauses between chunks).

Measured (a script over ``bench.scale``'s data; end to end: ``bench/results/scale.md``) on a
2-core VM (AVX-512, numpy 2.4 with OpenBLAS 0.3.31), with
another session sharing the box, in process, one query vector at a time: bench.scale's rows
(MiniLM, 384 dimensions, 2 rows a turn, float16-rounded as Retrieval stores them; at 100k turns
each text recurs about 44 times) and the same rows jittered (N(0, 0.025) per dimension before
normalisation: no ties), the 108 bench.scale questions, tie-aware recall@10 of exact search:

=========  ==========  ============================  ====================  ===================
rows       regime      search p50 / p90              recall real / jitter  background fit
=========  ==========  ============================  ====================  ===================
20k        exact       1.1-1.3 / 1.2-1.7 ms          1 / 1                 -
100k       lists       1.0-1.1 / 1.1-1.3 ms          1.000 / 0.996         0.8-1.0 s
200k       lists       1.1-2.0 / 1.2-2.4 ms          1.000 / 0.994         1.4-1.7 s
=========  ==========  ============================  ====================  ===================

Every size measured from 35k to 200k rows recalled >= 0.99 on both. (The design before, a
projection of every row and 1% of them rescored: 8.2 ms at 200k rows, recall 0.972 / 0.992.)
While the first fit is pending, searches are exact and compete with it: 8-10 ms at 100k rows,
15-29 ms at 200k; during a refit of 200k rows, 1.3-1.6 ms p50 and 4-6 ms p90. ``add_block`` of
50k keys (100k float16 rows) takes 67-72 ms (float32: 40 ms; 200k rows: 140 ms), plus up to
0.4 s the first time a fresh process touches the memory on this VM. Memory: the codes add 25% to
the matrix (96 of 384 floats), and 8 bytes a row of ids.

Graph indexes (HNSW: usearch, faiss) answer in under a millisecond with similar recall, but building
one over 200k rows took 60-77 s on two cores here: a fresh process would either wait for that or
persist a second copy of every vector. The lists here are fitted in 1-2 s, off the caller's path,
from the rows alone, and need no dependency.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

KMEANS_ROUNDS = 8  # rounds of every k-means fit
CHUNK = 1_024  # rows per step of a fit


@dataclass(frozen=True)
class Coarse:
    """Inverted lists over the rows below ``covered``: each row is coded as its list's mean plus
    its residual projected on ``basis`` (the residuals' principal components; None: the residual
    itself). Immutable: a fit builds a new one off the lock and swaps it in."""

    heads: NDArray[np.float32]  # lists x dims: the unit direction of each list's mean
    norms: NDArray[np.float32]  # lists: the length of each list's mean
    basis: NDArray[np.float32] | None  # dims x reduced
    codes: NDArray[np.float32]  # entries x reduced, list by list
    ids: NDArray[np.int64]  # entry -> row
    bounds: NDArray[np.int64]  # list i holds entries bounds[i]:bounds[i + 1]
    covered: int  # rows from here on are the tail (scanned exactly)
    trained: int  # live rows when the lists were made


@dataclass(frozen=True)
class FitPlan:
    """What a fit works from, taken under the lock (the arrays are never written below ``n``,
    except rows marked dead in ``owner``)."""

    train: bool  # True: new lists; False: the tail assigned to the lists
    matrix: NDArray[np.float32]
    owner: NDArray[np.int64]
    n: int
    epoch: int
    base: Coarse | None


def touch_rows(region: NDArray[np.float32]) -> None:
    """Write zeros over ``region``, a few megabytes at a time (numpy releases the GIL)."""
    step = max(1, (4 << 20) // max(1, region.shape[1] * region.itemsize))
    for at in range(0, len(region), step):
        region[at : at + step].fill(0.0)


def best_lists(
    heads: NDArray[np.float32], sizes: NDArray[np.int64], target: int
) -> NDArray[np.intp]:
    """The lists of highest ``heads``, best first, until they hold ``target`` rows (or all of
    them): a partial sort of a guessed number, doubled when it falls short."""
    guess = min(len(heads), int(2 * target * len(heads) / max(1, int(sizes.sum()))) + 16)
    while True:
        best = np.argpartition(-heads, guess - 1)[:guess] if guess < len(heads) else None
        best = np.argsort(-heads) if best is None else best[np.argsort(-heads[best])]
        reach = np.cumsum(sizes[best])
        if reach[-1] >= target or guess == len(heads):
            return best[: int(np.searchsorted(reach, target)) + 1]
        guess = min(len(heads), 2 * guess)


def top_capped(scores: NDArray[np.float32], count: int, cap: int) -> NDArray[np.intp]:
    """The positions of the ``count`` best ``scores``, at most ``cap`` of any one value: copies of
    one vector score alike, and more than ``cap`` of them cannot change the top ``cap``, so they
    must not crowd out the rest."""
    if count >= len(scores):
        return np.arange(len(scores))
    wide = min(len(scores), 2 * count)
    top = np.argpartition(-scores, wide - 1)[:wide] if wide < len(scores) else np.arange(wide)
    top = top[np.argsort(-scores[top], kind="stable")]
    values = scores[top]
    place = np.arange(len(values))
    fresh = np.ones(len(values), dtype=bool)
    fresh[1:] = values[1:] != values[:-1]
    first = np.maximum.accumulate(np.where(fresh, place, 0))
    return top[place - first < cap][:count]


def top_with_ties(scores: NDArray[np.float32], count: int) -> NDArray[np.intp]:
    """The positions of the ``count`` best ``scores`` and of every score tied with the last."""
    if len(scores) <= count:
        return np.arange(len(scores))
    floor = scores[np.argpartition(-scores, count - 1)[count - 1]]
    return np.flatnonzero(scores >= floor)


def pause() -> None:
    """Let a waiting thread have the interpreter: a fit in the background steps in small chunks
    and yields between them, so a search does not wait for Python's 5 ms switch interval."""
    time.sleep(0)


def list_bounds(labels: NDArray[np.int64], lists: int) -> NDArray[np.int64]:
    """Where each list starts in entries sorted by ``labels`` (and where the last one ends)."""
    return np.concatenate([[0], np.cumsum(np.bincount(labels, minlength=lists))]).astype(np.int64)


def nearest_lists(rows: NDArray[np.float32], centroids: NDArray[np.float32]) -> NDArray[np.int64]:
    """Each row's list: the centroid of largest dot product (centroids are unit rows)."""
    labels = np.empty(len(rows), dtype=np.int64)
    for at in range(0, len(rows), 4 * CHUNK):
        pause()
        labels[at : at + 4 * CHUNK] = np.argmax(rows[at : at + 4 * CHUNK] @ centroids.T, axis=1)
    return labels


def spherical_kmeans(
    rows: NDArray[np.float32], lists: int, rng: np.random.Generator
) -> NDArray[np.float32]:
    """Spherical k-means: ``lists`` unit centroids. Sums per list by sort and ``reduceat``
    (``np.add.at`` is far slower); an empty list restarts from a random row."""
    centroids = np.ascontiguousarray(rows[rng.choice(len(rows), size=lists, replace=False)])
    normalize_rows(centroids)
    for _ in range(KMEANS_ROUNDS):
        pause()
        labels = nearest_lists(rows, centroids)
        sizes = np.bincount(labels, minlength=lists)
        full = sizes > 0
        starts = (np.cumsum(sizes) - sizes)[full]
        centroids[full] = np.add.reduceat(rows[np.argsort(labels, kind="stable")], starts, axis=0)
        empty = int((~full).sum())
        if empty:
            centroids[~full] = rows[rng.choice(len(rows), size=empty, replace=False)]
        normalize_rows(centroids)
    return centroids


def normalize_rows(rows: NDArray[np.float32]) -> None:
    norms = np.linalg.norm(rows, axis=1)
    rows /= np.where(norms > 0, norms, 1.0)[:, None].astype(np.float32)


def coded_lists(
    means: NDArray[np.float32],
    basis: NDArray[np.float32] | None,
    matrix: NDArray[np.float32],
    ids: NDArray[np.int64],
    labels: NDArray[np.int64],
    covered: int,
    trained: int,
) -> Coarse:
    """Lists of rows ``ids`` (``labels`` ascending) coded against ``means``."""
    width = basis.shape[1] if basis is not None else matrix.shape[1]
    codes = np.empty((len(ids), width), dtype=np.float32)
    for at in range(0, len(ids), CHUNK):
        pause()
        residual = matrix[ids[at : at + CHUNK]] - means[labels[at : at + CHUNK]]
        codes[at : at + len(residual)] = residual @ basis if basis is not None else residual
    norms = np.linalg.norm(means, axis=1).astype(np.float32)
    heads = np.ascontiguousarray(means / np.where(norms > 0, norms, 1)[:, None], np.float32)
    return Coarse(
        heads=heads,
        norms=norms,
        basis=basis,
        codes=codes,
        ids=ids,
        bounds=list_bounds(labels, len(means)),
        covered=covered,
        trained=trained,
    )
