"""An in-process vector index for retrieval memory: cosine search over float32 rows, flat in
history length far past LangGraph's in-memory search.

Several rows belong to one key (Retrieval embeds each message of a turn): a key scores by its best
row, and ``search`` returns the best keys, each with the exact cosine of its best row (ties by
key). Rows are L2-normalised on the way in and kept in one float32 matrix in insertion order (a
key's rows consecutive), so cosine is a dot product (numpy), not a Python loop over lists.

Two regimes, picked by size:

* up to ``exact_rows`` live rows (default 32,768): exact search, one matrix-vector product;
* past it, inverted lists over a separate compact copy of the rows: about ``8 * sqrt(rows)``
  lists (two-level spherical k-means on a sample, in its first ``reduced_dims`` principal
  components), each row coded as its list's mean plus its residual projected on the residuals'
  first ``reduced_dims`` (96) principal components, the codes stored list by list. A search
  ranks the lists by the cosine of their mean with the query and scores the codes of the best
  ones (one gather of contiguous slices) until they hold 1/16 of the rows (at least
  ``24 * rescore``), plus the rows added since the lists were made (the tail) exactly; the best
  ``rescore`` (500) of those rows, with at most ``k`` copies of any one score (repeated texts
  must not crowd out the rest), are rescored exactly, then every row of the ``4 * k`` best keys
  among them. Residual coding is what makes this work for question-like queries: 43% of a
  query's energy lies outside the documents' 96 principal components, and coding raw rows
  there left the true best text behind up to 120 others. Scores are exact; which of several
  keys tied on the ``k``-th score are returned follows key order only among those rescored.

The lists are fitted in a background thread (``background=False``: inline), never under the
lock: when the index first passes ``exact_rows`` (searches stay exact until the fit is in), again
each time its live rows double, and the tail is assigned to the lists once it outgrows 4,096 rows
(or 1/64 of the lists' rows); a finished fit is swapped in in O(1), and one that a compaction
(dead rows rewritten away) overtook is dropped and redone. ``wait`` waits for pending fits.
While one runs, searches compute their products on one core (a multi-threaded BLAS call waits
for its slowest thread, and the fit holds the other core).

Measurements of both regimes, and why inverted lists rather than a graph index:
:mod:`~langmem_ext.retrieval.vectors_coarse`.

Example:
    >>> index = VectorIndex()
    >>> index.add("oslo", [[1.0, 0.0, 0.0], [0.0, 1.0, 0.0]])
    >>> index.add("rome", [[0.0, 0.0, 1.0]])
    >>> [(key, round(score, 3)) for key, score in index.search([0.9, 0.1, 0.0], k=2)]
    [('oslo', 0.994), ('rome', 0.0)]
"""

from __future__ import annotations

import math
import threading
import warnings
from collections.abc import Iterable, Sequence
from dataclasses import replace
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

from langmem_ext.core.checks import require_int
from langmem_ext.retrieval.vectors_coarse import (
    CHUNK,
    Coarse,
    FitPlan,
    best_lists,
    coded_lists,
    list_bounds,
    nearest_lists,
    pause,
    spherical_kmeans,
    top_capped,
    top_with_ties,
    touch_rows,
)

__all__ = ["VectorIndex"]

_PCA_SAMPLE = 4_096  # rows a basis is fitted on
_LISTS_PER_ROOT = 8  # about 8 * sqrt(rows) inverted lists ...
_ROWS_PER_LIST = 8  # ... of 8 rows or more on average
_KMEANS_PER_LIST = 16  # k-means trains on this many sampled rows per list
_PROBE_SHARE = 16  # the coarse pass scans the rows of the best lists: 1/16 of the rows ...
_PROBE_RESCORE = 24  # ... and at least 24 x ``rescore``
_TAIL_ROWS = 4_096  # rows added since the lists were made, scanned exactly, before a reassignment
_TAIL_SHARE = 64  # ... (or 1/64 of the rows in the lists)
_BLAS_VALUES = 1 << 22  # a product this large (values) or larger goes to BLAS (see ``_dot``)
_CONVERT = 1_024  # rows per step of a float16 conversion (they stay in cache to be scaled)
#: what ``nbytes`` counts a key (a dict entry, a list slot, an int) and an empty index
KEY_BYTES = 112
_BASE_BYTES = 2_048
#: float16 -> float32 by table (numpy's own float16 cast is about 2 ns a value here)
_F16: NDArray[np.float32] = (
    np.arange(1 << 16, dtype=np.uint32).astype(np.uint16).view(np.float16).astype(np.float32)
)


class VectorIndex:
    """Cosine search over keys that own one or more vectors each. Thread-safe.

    Args:
        exact_rows: up to this many live rows, every search is exact.
        reduced_dims: past ``exact_rows``, the coarse pass codes each row's residual from its
            list's mean on this many principal components (the residual itself when the vectors
            have no more dimensions than this).
        rescore: past ``exact_rows``, how many rows of the coarse pass are rescored exactly (at
            least ``4 * k`` per search), with every other row of their keys.
        background: past ``exact_rows``, fit the coarse structure in a background thread
            (searches stay exact until it is ready); False fits it inline, in the call that
            added the rows (deterministic, for tests).

    ``add`` with a key already present replaces its rows; ``remove`` forgets a key. Vectors of a
    different dimension than the first ones raise ``ValueError`` naming both.
    """

    def __init__(
        self,
        *,
        exact_rows: int = 32_768,
        reduced_dims: int = 96,
        rescore: int = 500,
        background: bool = True,
    ) -> None:
        for name, value in (
            ("exact_rows", exact_rows),
            ("reduced_dims", reduced_dims),
            ("rescore", rescore),
        ):
            require_int(name, value, 1, owner="VectorIndex")
        if not isinstance(background, bool):
            raise ValueError(f"VectorIndex: background must be True or False, got {background!r}")
        self.exact_rows, self.reduced_dims, self.rescore = exact_rows, reduced_dims, rescore
        self.background = background
        self.dims: int | None = None
        self._lock = threading.Lock()
        self._idle = threading.Condition(self._lock)
        # rows in insertion order: a key's rows are consecutive, and key slots ascend with them
        self._matrix: NDArray[np.float32] = np.zeros((0, 0), dtype=np.float32)
        self._owner: NDArray[np.int64] = np.zeros(0, dtype=np.int64)  # row -> key slot, -1 dead
        self._n = 0  # rows used (alive or dead)
        self._dead = 0
        self._slot: dict[str, int] = {}
        self._keys: list[str | None] = []  # key slot -> key (None: replaced or removed)
        self._start: NDArray[np.int64] = np.zeros(0, dtype=np.int64)  # key slot -> first row
        self._count: NDArray[np.int64] = np.zeros(0, dtype=np.int64)  # key slot -> its rows
        self._coarse: Coarse | None = None
        self._epoch = 0  # bumped by compaction (rows renumbered): a fit started before is void
        self._busy = False  # a fit is pending or running
        self._failed_at = 0  # live rows when a fit failed (no retry before they double)
        #: touching the memory of reserved rows (``reserve``): writes wait for it
        self._toucher: threading.Thread | None = None

    def __len__(self) -> int:
        return len(self._slot)

    def __contains__(self, key: object) -> bool:
        return key in self._slot

    @property
    def rows(self) -> int:
        """How many live rows the index holds."""
        return self._n - self._dead

    @property
    def approximate(self) -> bool:
        """Whether searches use the coarse structure now: past ``exact_rows`` once it is
        fitted."""
        return self._coarse is not None and self.rows > self.exact_rows

    @property
    def nbytes(self) -> int:
        """An estimate of the memory this index holds, in O(1): its arrays' ``nbytes`` (the
        matrix and its bookkeeping at their allocated size, the coarse lists' codes) plus
        ``KEY_BYTES`` a key ever added (its slot in the dict and the list). The keys' own
        strings are the caller's and not counted."""
        held = self._matrix.nbytes + self._owner.nbytes + self._start.nbytes + self._count.nbytes
        coarse = self._coarse
        if coarse is not None:
            held += sum(
                a.nbytes
                for a in (coarse.heads, coarse.norms, coarse.codes, coarse.ids, coarse.bounds)
            )
            held += 0 if coarse.basis is None else coarse.basis.nbytes
        return _BASE_BYTES + held + KEY_BYTES * len(self._keys)

    def wait(self, timeout: float | None = None) -> bool:
        """Wait until no fit of the coarse structure is pending; False when ``timeout`` seconds
        passed first."""
        with self._idle:
            return self._idle.wait_for(lambda: not self._busy, timeout)

    # -- writes -----------------------------------------------------------------------------------

    def add(self, key: str, vectors: Sequence[Sequence[float]] | NDArray[Any]) -> None:
        """Index ``vectors`` (rows) under ``key``, replacing what ``key`` had. No rows: the key
        is removed."""
        rows = self._source(vectors)
        self._write([key], rows, np.array([len(rows)], dtype=np.int64))

    def add_many(
        self, items: Iterable[tuple[str, Sequence[Sequence[float]] | NDArray[Any]]]
    ) -> None:
        """``add`` for many keys at once (one normalisation and one copy into the matrix for
        all their rows). A key given twice keeps its last rows."""
        batch = dict(items)
        if not batch:
            return
        blocks = [self._source(vectors) for vectors in batch.values()]
        filled = [block for block in blocks if len(block)]
        for block in filled[1:]:
            self._check_dims(block.shape[1], filled[0].shape[1])
        rows = np.concatenate(filled) if filled else self._source([])
        self._write(list(batch), rows, np.array([len(b) for b in blocks], dtype=np.int64))

    def add_block(
        self,
        keys: Sequence[str],
        rows: ArrayLike,
        counts: Sequence[int] | NDArray[np.integer[Any]],
    ) -> None:
        """Bulk load: ``keys[i]`` owns the next ``counts[i]`` rows of ``rows`` (``n_rows x
        dims``; float16, or int8 codes: a vector's own scale does not matter, rows are scaled to
        length 1; or a list of such matrices, read as one, never joined), replacing what it
        had; a count of 0 removes the key. The block
        is converted and normalised straight into the index's matrix, a thousand rows at a time
        (no other copy). A key given twice keeps its last rows (as in ``add_many``). Refused
        (``ValueError``, nothing changed) when the counts do not match the keys or add up to
        another number of rows, or as ``add`` refuses vectors."""
        keys = list(keys)
        parts = list(rows) if isinstance(rows, (list, tuple)) else [rows]
        sizes = np.asarray(counts)
        if sizes.ndim != 1 or len(sizes) != len(keys):
            raise ValueError(
                f"VectorIndex: {len(keys)} keys but counts of shape {sizes.shape} (one per key)"
            )
        if len(sizes) and (sizes.dtype.kind not in "iu" or int(sizes.min()) < 0):
            raise ValueError("VectorIndex: counts must be integers >= 0")
        sizes = sizes.astype(np.int64)
        sources = [self._source(part) for part in parts]
        filled = [source for source in sources if len(source)]
        for source in filled[1:]:
            self._check_dims(source.shape[1], filled[0].shape[1])
        given = sum(len(source) for source in sources)
        if int(sizes.sum()) != given:
            raise ValueError(
                f"VectorIndex: counts add up to {int(sizes.sum())} rows, but {given} given"
            )
        self._write(keys, filled, sizes)

    def reserve(self, rows: int, dims: int, *, prefault: int = 0) -> None:
        """Make room for ``rows`` more rows of ``dims`` dimensions at once (before a bulk load
        and what follows it), so the matrix is not grown, and copied, on the way. ``prefault``:
        touch the memory of that many of them in a background thread now (the first write to
        fresh memory costs about 2 ms a megabyte on a virtual machine), while the caller
        prepares the rows; the next write waits for it."""
        if rows < 0 or dims < 1 or not 0 <= prefault <= rows:
            raise ValueError(
                f"VectorIndex: cannot reserve {rows} rows of {dims} dimensions "
                f"(prefaulting {prefault})"
            )
        with self._lock:
            self._check_dims(dims, self.dims)
            if self._n + rows > len(self._matrix) or self._matrix.shape[1] != dims:
                self._settle()
                self._grow(self._n + rows, dims)
            if prefault and self._toucher is None:
                region = self._matrix[self._n : self._n + prefault]
                self._toucher = threading.Thread(
                    target=touch_rows, args=(region,), name="VectorIndex-prefault", daemon=True
                )
                self._toucher.start()

    def refine(
        self,
        keys: Sequence[str],
        rows: ArrayLike,
        counts: Sequence[int] | NDArray[np.integer[Any]],
    ) -> list[str]:
        """Overwrite the rows of ``keys`` in place with closer values of the same vectors (the
        stored rows of what was loaded as int8 codes; ``keys[i]`` owns the next ``counts[i]``
        rows, as in ``add_block``): no new rows, nothing to fit again. The coarse lists keep the
        codes they were fitted on, near enough to choose candidates; searches score with these
        rows. Returns the keys left as they were: absent, or holding another number of rows
        (``add`` replaces those)."""
        source = self._source(rows)
        sizes = np.asarray(counts, dtype=np.int64)
        if sizes.ndim != 1 or len(sizes) != len(keys) or int(sizes.sum()) != len(source):
            raise ValueError(
                f"VectorIndex: {len(keys)} keys, counts of shape {sizes.shape}, {len(source)} rows"
            )
        with self._lock:
            self._settle()
            slots = np.fromiter((self._slot.get(key, -1) for key in keys), np.int64, len(keys))
            held = slots >= 0
            held[held] &= self._count[slots[held]] == sizes[held]
            left = [key for key, ok in zip(keys, held.tolist(), strict=True) if not ok]
            if held.any() and len(source):
                self._check_dims(source.shape[1], self.dims)
                taken = np.repeat(held, sizes)
                fresh = np.empty((int(taken.sum()), source.shape[1]), dtype=np.float32)
                self._into(fresh, source[taken])
                kept = sizes[held]
                ends = np.cumsum(kept)
                at = np.repeat(self._start[slots[held]] - (ends - kept), kept)
                self._matrix[at + np.arange(len(at))] = fresh
        return left

    def remove(self, key: str) -> None:
        """Forget ``key`` (nothing happens when it is absent)."""
        with self._lock:
            self._drop(key)
            self._maybe_compact()

    # -- search -----------------------------------------------------------------------------------

    def search(
        self, query: Sequence[float] | NDArray[Any], k: int = 10, *, exclude: Iterable[str] = ()
    ) -> list[tuple[str, float]]:
        """The ``k`` best keys and their scores (the cosine of their best row), best first;
        ties by key."""
        if k <= 0:
            return []
        q = np.empty((1, np.size(query)), dtype=np.float32)
        self._into(q, self._source(np.asarray(query, dtype=np.float32)[None, :]))
        skip = set(exclude)
        with self._lock:
            if self.rows == 0:
                return []
            self._check_dims(q.shape[1], self.dims)
            if self.approximate:
                return self._search_coarse(q[0], k, skip)
            want = k + len(skip & self._slot.keys())
            return self._best(q[0], want, skip)[:k]

    def score(self, query: Sequence[float] | NDArray[Any], keys: Iterable[str]) -> dict[str, float]:
        """The exact score (the cosine of its best row, as ``search`` gives it) of each of
        ``keys`` the index holds, whatever regime searches use: what a caller re-ranks with
        after it replaced rows it knew to be approximate."""
        q = np.empty((1, np.size(query)), dtype=np.float32)
        self._into(q, self._source(np.asarray(query, dtype=np.float32)[None, :]))
        with self._lock:
            if self.dims is not None:
                self._check_dims(q.shape[1], self.dims)
            held = [(key, slot) for key in keys if (slot := self._slot.get(key)) is not None]
            if not held:
                return {}
            slots = np.fromiter((slot for _, slot in held), dtype=np.int64, count=len(held))
            best = self._best_of(q[0], slots)
        return {key: score for (key, _), score in zip(held, best.tolist(), strict=True)}

    def first_rows(self, keys: Iterable[str]) -> NDArray[np.float32]:
        """The first row of each of ``keys`` the index holds (a turn's first message: its
        user's), unit length, in the order given (a block's int8 codes: their approximation)."""
        with self._lock:
            slots = [s for k in keys if (s := self._slot.get(k)) is not None and self._count[s]]
            rows: NDArray[np.float32] = self._matrix[self._start[slots]].copy()
        return rows

    # -- input ------------------------------------------------------------------------------------

    def _source(self, vectors: ArrayLike) -> NDArray[Any]:
        """``vectors`` as a float16, float32 or int8 matrix, its shape checked (an array of
        one of these types as given: it is read, never written). int8 rows are codes of a
        vector up to a scale, which normalising removes (see ``add_block``)."""
        if isinstance(vectors, np.ndarray) and vectors.dtype in (np.float16, np.float32, np.int8):
            rows: NDArray[Any] = vectors
        else:
            rows = np.asarray(vectors, dtype=np.float32)
        if rows.ndim == 1 and rows.size == 0:
            rows = rows.reshape(0, self.dims or 0)
        if rows.ndim != 2:
            raise ValueError(f"VectorIndex: expected rows of vectors, got shape {rows.shape}")
        if len(rows):
            self._check_dims(rows.shape[1], self.dims)
        return rows

    @classmethod
    def _into(cls, out: NDArray[np.float32], rows: NDArray[Any]) -> None:
        """``rows`` converted to float32 into ``out``, each scaled to length 1, a thousand at a
        time (float16 by table: numpy's own cast takes about 2 ns a value here)."""
        half = rows.dtype == np.float16
        bits = np.ascontiguousarray(rows).view(np.uint16) if half else rows
        for at in range(0, len(rows), _CONVERT):
            chunk = out[at : at + _CONVERT]
            if half:
                np.take(_F16, bits[at : at + _CONVERT], out=chunk, mode="clip")
            else:
                chunk[...] = rows[at : at + _CONVERT]
            cls._unit(chunk)

    @staticmethod
    def _check_dims(got: int, holds: int | None) -> None:
        if holds is not None and got != holds:
            raise ValueError(
                f"VectorIndex: vectors of {got} dimensions, but the index holds "
                f"{holds}-dimensional ones (one embedding model per index)"
            )

    @staticmethod
    def _unit(rows: NDArray[np.float32]) -> None:
        """``rows`` scaled to length 1 in place (a zero row stays zero); refuses NaN and
        infinity."""
        squares = np.einsum("ij,ij->i", rows, rows)
        if not math.isfinite(squares.sum()):
            bad = ~np.isfinite(squares)
            if not np.isfinite(rows[bad]).all():
                raise ValueError("VectorIndex: a vector holds NaN or infinity")
            big = rows[bad].astype(np.float64)  # finite, but its float32 square is not
            rows[bad] = big / np.linalg.norm(big, axis=1, keepdims=True)
            squares[bad] = 1.0
        norms = np.sqrt(squares)
        if norms.all():
            rows /= norms[:, None]
        else:  # a zero row stays zero (as does one whose float32 norm underflows)
            rows *= np.divide(1.0, norms, out=np.zeros_like(norms), where=norms > 0)[:, None]

    # -- writes (internals) -----------------------------------------------------------------------

    def _write(
        self, keys: list[str], rows: NDArray[Any] | list[NDArray[Any]], counts: NDArray[np.int64]
    ) -> None:
        """Replace ``keys`` by the consecutive ``rows`` (``counts[i]`` for key i; 0 removes it;
        the last of a key given twice wins; a list of matrices reads as their concatenation):
        the rows are normalised into the matrix under the lock, and nothing changes when they
        are refused."""
        parts = [part for part in (rows if isinstance(rows, list) else [rows]) if len(part)]
        unique = set(keys)
        keep = counts > 0
        if len(unique) != len(keys):  # the last of each key only
            last = np.fromiter({key: i for i, key in enumerate(keys)}.values(), dtype=np.int64)
            keep &= np.isin(np.arange(len(keys)), last)
        kept = keys
        if not keep.all():
            joined = np.concatenate(parts) if len(parts) > 1 else parts[0] if parts else None
            parts = [] if joined is None else [joined[np.repeat(keep, counts)]]
            kept = [key for key, k in zip(keys, keep.tolist(), strict=True) if k]
            counts = counts[keep]
        total = sum(len(part) for part in parts)
        with self._lock:
            self._settle()
            if total:
                dims = int(parts[0].shape[1])
                self._check_dims(dims, self.dims)
                self._reserve(total, len(kept), dims)
                at = self._n
                for part in parts:
                    self._into(self._matrix[at : at + len(part)], part)
                    at += len(part)
                self.dims = dims
            for key in unique & self._slot.keys() if self._slot else ():
                self._drop(key)
            if total:
                self._append(kept, counts)
            self._maybe_compact()
            start = not self._busy and self._plan() is not None
            self._busy = self._busy or start
        if start:
            self._launch()

    def _append(self, keys: list[str], counts: NDArray[np.int64]) -> None:
        """The rows written past ``_n`` become ``keys``' (``counts[i]`` each)."""
        n, first, total = self._n, len(self._keys), int(counts.sum())
        slots = np.arange(first, first + len(keys), dtype=np.int64)
        self._owner[n : n + total] = np.repeat(slots, counts)
        self._start[first : first + len(keys)] = n + np.cumsum(counts) - counts
        self._count[first : first + len(keys)] = counts
        self._keys.extend(keys)
        self._slot.update(zip(keys, range(first, first + len(keys)), strict=True))
        self._n = n + total

    def _drop(self, key: str) -> None:
        slot = self._slot.pop(key, None)
        if slot is None:
            return
        self._keys[slot] = None
        start, count = int(self._start[slot]), int(self._count[slot])
        self._owner[start : start + count] = -1
        self._dead += count

    def _reserve(self, rows: int, keys: int, dims: int) -> None:
        need = self._n + rows
        if need > len(self._matrix) or self._matrix.shape[1] != dims:
            self._grow(max(need, 2 * len(self._matrix), 64), dims)
        need = len(self._keys) + keys
        if need > len(self._start):
            grow = max(need, 2 * len(self._start), 64) - len(self._start)
            self._start = np.concatenate([self._start, np.zeros(grow, dtype=np.int64)])
            self._count = np.concatenate([self._count, np.zeros(grow, dtype=np.int64)])

    def _settle(self) -> None:
        """Wait for a prefault of reserved rows (the caller holds the lock; the thread never
        takes it): nothing writes rows it is still zeroing."""
        if self._toucher is not None:
            self._toucher.join()
            self._toucher = None

    def _grow(self, size: int, dims: int) -> None:
        """Room for ``size`` rows of ``dims`` dimensions, the rows held copied over (the caller
        holds the lock)."""
        matrix = np.empty((size, dims), dtype=np.float32)
        owner = np.full(size, -1, dtype=np.int64)
        if self._n:
            matrix[: self._n] = self._matrix[: self._n]
            owner[: self._n] = self._owner[: self._n]
        self._matrix, self._owner = matrix, owner

    def _maybe_compact(self) -> None:
        """Rewrite the rows without the dead ones once they are half of them (the lists follow;
        a fit under way is void and starts over)."""
        if self._dead < 1_024 or 2 * self._dead < self._n:
            return
        n = self._n
        alive = self._owner[:n] >= 0
        live = np.flatnonzero(alive)
        slots, first, counts = np.unique(self._owner[live], return_index=True, return_counts=True)
        self._keys = [self._keys[s] for s in slots.tolist()]
        self._slot = {key: slot for slot, key in enumerate(self._keys) if key is not None}
        self._matrix = np.ascontiguousarray(self._matrix[live])
        self._owner = np.repeat(np.arange(len(slots), dtype=np.int64), counts)
        self._start, self._count = first.astype(np.int64), counts.astype(np.int64)
        coarse = self._coarse
        if coarse is not None:
            renumber = np.cumsum(alive) - 1  # old row -> new row (when alive)
            kept = alive[coarse.ids]
            lists = np.repeat(np.arange(len(coarse.heads)), np.diff(coarse.bounds))[kept]
            self._coarse = replace(
                coarse,
                codes=np.ascontiguousarray(coarse.codes[kept]),
                ids=renumber[coarse.ids[kept]],
                bounds=list_bounds(lists, len(coarse.heads)),
                covered=int(np.count_nonzero(alive[: coarse.covered])),
            )
        self._n, self._dead = len(live), 0
        self._epoch += 1

    # -- search (internals; the caller holds the lock) --------------------------------------------

    def _best(self, q: NDArray[np.float32], want: int, skip: set[str]) -> list[tuple[str, float]]:
        """Exact: the best ``want`` keys, each scored by its best row: the top rows are picked in
        numpy, and widened while they hold fewer than ``want`` keys."""
        scores = self._dot(self._matrix[: self._n], q)
        owners = self._owner[: self._n]
        if self._dead:
            scores[owners < 0] = -np.inf
        live = self.rows
        take = min(live, max(4 * want, 64))
        while True:
            if take < len(scores):
                top = np.argpartition(-scores, take - 1)[:take]
            else:
                top = np.arange(len(scores))
            top = top[np.argsort(-scores[top], kind="stable")]
            best: dict[str, float] = {}
            for score, owner in zip(scores[top].tolist(), owners[top].tolist(), strict=True):
                key = self._keys[owner] if owner >= 0 else None
                if key is not None and key not in skip and key not in best:
                    best[key] = score  # rows come best first: the key's best row
            if len(best) >= want or take >= live:
                ranked = sorted(best.items(), key=lambda item: (-item[1], item[0]))
                return ranked[:want]
            take = min(live, 4 * take)

    def _search_coarse(
        self, q: NDArray[np.float32], k: int, skip: set[str]
    ) -> list[tuple[str, float]]:
        """Approximate: rank the lists by the cosine of their mean with the query, score the
        entries of the best ones (list mean + coded residual; one gather) until they hold
        enough rows, and the tail exactly; rescore the best of those rows exactly, with every
        row of their keys. Widens (to everything) while it finds fewer than ``k`` keys."""
        coarse = self._coarse
        assert coarse is not None
        skipped = [self._slot[key] for key in skip if key in self._slot]
        heads = self._dot(coarse.heads, q)
        offsets = coarse.norms * heads  # the query's dot product with each list's mean
        # (numpy's own loop: BLAS would wake its threads for this small product, see _dot)
        qr = np.einsum("i,ij->j", q, coarse.basis) if coarse.basis is not None else q
        sizes = np.diff(coarse.bounds)
        tail_scores = self._dot(self._matrix[coarse.covered : self._n], q)
        target = max(_PROBE_RESCORE * self.rescore, self.rows // _PROBE_SHARE)
        count = max(self.rescore, 4 * k)
        while True:
            lists = best_lists(heads, sizes, target)
            lengths = sizes[lists]
            ends = np.cumsum(lengths)
            at = np.repeat(coarse.bounds[lists] - (ends - lengths), lengths)
            at += np.arange(len(at))
            listed = self._dot(np.take(coarse.codes, at, axis=0), qr)
            listed += np.repeat(offsets[lists], lengths)
            scores: NDArray[np.float32] = np.concatenate([listed, tail_scores])

            if self._dead:  # dead rows must not crowd the rescored ones
                everything = self._rows_at(coarse, at, np.arange(len(scores)))
                scores[self._owner[everything] < 0] = -np.inf
            top = top_capped(scores, count, len(skipped) + k)
            found = self._rank(q, self._rows_at(coarse, at, top), k, skipped)
            if len(found) >= k or (len(lists) == len(heads) and count >= len(scores)):
                return found
            target, count = 4 * target, 4 * count

    @staticmethod
    def _rows_at(
        coarse: Coarse, at: NDArray[np.int64], where: NDArray[np.intp]
    ) -> NDArray[np.int64]:
        """The rows of the scanned positions ``where`` (list entries ``at``, then the tail)."""
        rows = coarse.covered + where - len(at)
        listed = where < len(at)
        rows[listed] = coarse.ids[at[where[listed]]]
        return rows

    def _rank(
        self, q: NDArray[np.float32], rows: NDArray[np.int64], k: int, skipped: list[int]
    ) -> list[tuple[str, float]]:
        """The best ``k`` keys owning some of ``rows``: the rows scored exactly, then every row
        of the keys that may make the top ``k`` (the best ``4 * k`` by those scores), each key
        by its best row."""
        owners = self._owner[rows]
        keep = owners >= 0
        if skipped:
            keep &= ~np.isin(owners, skipped)
        rows, owners = rows[keep], owners[keep]
        if not len(rows):
            return []
        scores = self._dot(np.take(self._matrix, rows, axis=0), q)
        order = np.argsort(owners, kind="stable")
        owners, scores = owners[order], scores[order]
        starts = np.flatnonzero(np.diff(owners, prepend=-1))
        slots = owners[starts]
        slots = slots[top_with_ties(np.maximum.reduceat(scores, starts), max(4 * k, 16))]
        best = self._best_of(q, slots)
        pick = top_with_ties(best, k)  # the k best and every key tied with the k-th (ties by key)
        ranked = [
            (key, score)
            for slot, score in zip(slots[pick].tolist(), best[pick].tolist(), strict=True)
            if (key := self._keys[slot]) is not None
        ]
        ranked.sort(key=lambda item: (-item[1], item[0]))
        return ranked[:k]

    def _best_of(self, q: NDArray[np.float32], slots: NDArray[np.int64]) -> NDArray[np.float32]:
        """The score of each key slot (not empty): its best row's, all rows in one product."""
        counts = self._count[slots]
        ends = np.cumsum(counts)
        begins = ends - counts
        every = np.repeat(self._start[slots] - begins, counts) + np.arange(int(ends[-1]))
        best: NDArray[np.float32] = np.maximum.reduceat(
            self._dot(np.take(self._matrix, every, axis=0), q), begins
        )
        return best

    def _dot(self, rows: NDArray[np.float32], vector: NDArray[np.float32]) -> NDArray[np.float32]:
        """``rows @ vector``: by BLAS (on both cores) for a large scan, else by numpy's own
        loop on one core: as fast for the products of a coarse search (a few megabytes at
        most), and it leaves the second core alone - OpenBLAS's threads spin after each call,
        taking the core an embedding model or the caller's other work needs. On one core too
        while a fit runs in the background (a multi-threaded BLAS call waits for its slowest
        thread, and the fit holds a core: 5-15 ms instead of 1-2 ms here)."""
        if rows.size < _BLAS_VALUES or (self._busy and self.background):
            out: NDArray[np.float32] = np.einsum("ij,j->i", rows, vector)
            return out
        product: NDArray[np.float32] = rows @ vector
        return product

    # -- fitting ----------------------------------------------------------------------------------

    def _plan(self) -> FitPlan | None:
        """The fit the index needs now, if any (the caller holds the lock; O(1)): new lists when
        it passes ``exact_rows`` and each time its live rows double; else the tail assigned to
        the lists once it outgrows its share."""
        live, coarse = self.rows, self._coarse
        if live <= self.exact_rows or live < 2 * self._failed_at:
            return None
        if coarse is None or live >= 2 * coarse.trained:
            train = True
        else:
            limit = max(min(_TAIL_ROWS, self.exact_rows // 8), coarse.covered // _TAIL_SHARE)
            if self._n - coarse.covered <= limit:
                return None
            train = False
        return FitPlan(train, self._matrix, self._owner, self._n, self._epoch, coarse)

    def _launch(self) -> None:
        if self.background:
            try:
                threading.Thread(target=self._work, name="VectorIndex-fit", daemon=True).start()
                return
            except RuntimeError:  # no thread to be had (interpreter shutting down): inline
                pass
        self._work()

    def _work(self) -> None:
        """Run the fits the index needs, one after the other, each computed off the lock and
        swapped in under it (void when a compaction renumbered the rows meanwhile)."""
        try:
            while True:
                with self._lock:
                    plan = self._plan()
                    if plan is None:
                        self._busy = False
                        self._idle.notify_all()
                        return
                built = self._train(plan) if plan.train else self._assign(plan)
                with self._lock:
                    if self._epoch == plan.epoch:
                        self._coarse = built
        except Exception as error:  # searches stay exact (or on the lists they had)
            with self._lock:
                self._failed_at = max(1, self.rows)
                self._busy = False
                self._idle.notify_all()
            warnings.warn(
                f"VectorIndex: fitting the coarse pass failed ({error!r}); searches stay as "
                "they were until the index doubles",
                RuntimeWarning,
                stacklevel=1,
            )

    def _train(self, plan: FitPlan) -> Coarse:
        """New lists: about ``8 * sqrt(rows)`` of them, by two-level k-means (sqrt(lists)
        groups, each split in proportion to its size) on a sample projected on its principal
        components; every live row assigned to one, its residual coded."""
        live = np.flatnonzero(plan.owner[: plan.n] >= 0)
        matrix = plan.matrix
        rng = np.random.default_rng(len(live))
        basis = self._fit_basis(matrix[live[:: max(1, len(live) // _PCA_SAMPLE)]])
        width = basis.shape[1] if basis is not None else matrix.shape[1]
        projected = np.empty((len(live), width), dtype=np.float32)
        for at in range(0, len(live), CHUNK):
            pause()
            chunk = matrix[live[at : at + CHUNK]]
            projected[at : at + len(chunk)] = chunk @ basis if basis is not None else chunk
        lists = max(
            1, min(round(_LISTS_PER_ROOT * math.sqrt(len(live))), len(live) // _ROWS_PER_LIST)
        )
        size = min(len(live), _KMEANS_PER_LIST * lists)
        sample = projected[np.sort(rng.choice(len(live), size=size, replace=False))]
        groups = spherical_kmeans(sample, max(1, round(math.sqrt(lists))), rng)
        in_group = nearest_lists(sample, groups)
        parts = []
        for group in range(len(groups)):
            pause()
            members = sample[in_group == group]
            split = min(len(members), max(1, round(lists * len(members) / size)))
            parts.append(
                spherical_kmeans(members, split, rng) if split else groups[group : group + 1]
            )
        first = np.cumsum([0, *(len(part) for part in parts)])
        labels = nearest_lists(projected, groups)
        by_group = np.argsort(labels, kind="stable")
        edges = np.searchsorted(labels[by_group], np.arange(len(groups) + 1))
        for group, part in enumerate(parts):
            pause()
            rows = by_group[edges[group] : edges[group + 1]]
            labels[rows] = first[group] + nearest_lists(projected[rows], part)
        del projected, sample
        order = np.argsort(labels, kind="stable")
        ids, labels = live[order], labels[order]
        total = int(first[-1])
        # each list's mean in full dimensions
        means = np.zeros((total, matrix.shape[1]), dtype=np.float32)
        for at in range(0, len(ids), CHUNK):
            pause()
            run = labels[at : at + CHUNK]
            starts = np.flatnonzero(np.diff(run, prepend=-1))
            means[run[starts]] += np.add.reduceat(matrix[ids[at : at + CHUNK]], starts, axis=0)
        means /= np.maximum(np.bincount(labels, minlength=total), 1)[:, None].astype(np.float32)
        pick = np.sort(rng.choice(len(ids), size=min(len(ids), _PCA_SAMPLE), replace=False))
        basis = self._fit_basis(matrix[ids[pick]] - means[labels[pick]])
        return coded_lists(means, basis, matrix, ids, labels, plan.n, len(live))

    def _assign(self, plan: FitPlan) -> Coarse:
        """The lists with the tail's live rows assigned to them (to the list whose mean is
        nearest in angle), without the entries of rows that died since."""
        base = plan.base
        assert base is not None
        lists = len(base.heads)
        alive = plan.owner[base.ids] >= 0
        tail = base.covered + np.flatnonzero(plan.owner[base.covered : plan.n] >= 0)
        labels = np.empty(len(tail), dtype=np.int64)
        for at in range(0, len(tail), CHUNK):
            pause()
            chunk = plan.matrix[tail[at : at + CHUNK]]
            labels[at : at + CHUNK] = np.argmax(chunk @ base.heads.T, axis=1)
        means = base.heads * base.norms[:, None]
        fresh = coded_lists(means, base.basis, plan.matrix, tail, labels, plan.n, base.trained)
        old = np.repeat(np.arange(lists), np.diff(base.bounds))[alive]
        merged = np.concatenate([old, labels])
        order = np.argsort(merged, kind="stable")
        return replace(
            base,
            codes=np.concatenate([base.codes[alive], fresh.codes])[order],
            ids=np.concatenate([base.ids[alive], fresh.ids])[order],
            bounds=list_bounds(merged, lists),
            covered=plan.n,
        )

    def _fit_basis(self, sample: NDArray[np.float32]) -> NDArray[np.float32] | None:
        """The ``reduced_dims`` principal components of ``sample`` (None: the vectors have no
        more dimensions than that)."""
        if sample.shape[1] <= self.reduced_dims:
            return None
        centred = sample.astype(np.float64)
        centred -= centred.mean(axis=0)
        _, vectors = np.linalg.eigh(centred.T @ centred)  # ascending eigenvalues
        return np.ascontiguousarray(vectors[:, ::-1][:, : self.reduced_dims], dtype=np.float32)
