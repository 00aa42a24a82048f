"""Ranking for retrieval memory: an incremental BM25 index and reciprocal rank fusion.

Evicted turns arrive one or a few per turn, and a search runs every turn, so the lexical index
must take additions in O(document length) and answer a query in O(postings of its terms). The
BM25 libraries on PyPI (``rank_bm25``, ``bm25s``) build a static index over a fixed corpus and
would be rebuilt on every turn; this one is incremental and small.

Scoring is Okapi BM25 (``k1=1.2``, ``b=0.75``) with the Lucene/Robertson-Sparck-Jones idf
``log(1 + (N - df + 0.5) / (df + 0.5))``, which is never negative. Tokens are lowercased word
characters (letters, digits, underscore) with a small English stop list removed.

Example:
    >>> index = BM25Index()
    >>> index.add("t1", "The shipment to Oslo left on Monday")
    >>> index.add("t2", "Invoices are due at the end of the month")
    >>> [key for key, _ in index.search("when did the Oslo shipment leave?", k=2)]
    ['t1']
    >>> reciprocal_rank_fusion([["a", "b"], ["b", "c"]])[:2]
    [('b', 0.03252247488101534), ('a', 0.01639344262295082)]
"""

from __future__ import annotations

import math
import re
import threading
from collections import Counter
from collections.abc import Hashable, Iterable, Sequence
from typing import Any, TypeVar, cast

import numpy as np

__all__ = ["BM25Index", "reciprocal_rank_fusion", "tokenize"]

K = TypeVar("K", bound=Hashable)

_WORD = re.compile(r"\w+", re.UNICODE)
#: very common English function words: they match everything and rank nothing
STOP_WORDS = frozenset(
    """a about above after again all am an and any are as at be been before being below between
    both but by can could did do does doing down during each few for from further had has have
    having he her here hers herself him himself his how i if in into is it its itself just me
    more most my myself no nor not now of off on once only or other our ours ourselves out over
    own same she should so some such than that the their theirs them themselves then there these
    they this those through to too under until up very was we were what when where which while
    who whom why will with would you your yours yourself yourselves""".split()
)


def tokenize(text: str) -> list[str]:
    """Lowercased word tokens without stop words."""
    return [t for t in _WORD.findall(text.lower()) if t not in STOP_WORDS]


class _Postings:
    """One term's postings: growable arrays of (document slot, term frequency)."""

    __slots__ = ("n", "slots", "tfs")

    def __init__(self) -> None:
        self.n = 0
        self.slots = np.empty(4, dtype=np.int32)
        self.tfs = np.empty(4, dtype=np.float64)

    def extend(self, slots: list[int], tfs: list[int]) -> None:
        end = self.n + len(slots)
        if end > len(self.slots):
            size = max(end, 2 * len(self.slots))
            self.slots = np.resize(self.slots, size)
            self.tfs = np.resize(self.tfs, size)
        self.slots[self.n : end] = slots
        self.tfs[self.n : end] = tfs
        self.n = end

    def remove(self, slot: int) -> None:
        keep = self.slots[: self.n] != slot
        count = int(keep.sum())
        self.slots[:count] = self.slots[: self.n][keep]
        self.tfs[:count] = self.tfs[: self.n][keep]
        self.n = count


class BM25Index:
    """An incremental Okapi BM25 index over string keys. Thread-safe.

    ``add`` with a key already present replaces that document (idempotent for the same text).
    Postings are numpy arrays: a query costs O(postings of its terms) in vectorised arithmetic
    plus one pass over the document lengths, and keeps only the ``k`` best scores
    (``argpartition``, not a sort of every score): flat enough for 100k documents.
    """

    def __init__(self, *, k1: float = 1.2, b: float = 0.75) -> None:
        if k1 < 0 or not 0 <= b <= 1:
            raise ValueError(f"BM25 needs k1 >= 0 and 0 <= b <= 1, got k1={k1}, b={b}")
        self.k1, self.b = k1, b
        self._lock = threading.Lock()
        self._slot: dict[str, int] = {}  # key -> document slot (slots are never reused)
        self._keys: list[str | None] = []  # slot -> key (None: replaced or removed)
        self._terms: list[tuple[str, ...]] = []  # slot -> its distinct terms
        self._lengths = np.zeros(16, dtype=np.float64)
        self._postings: dict[str, _Postings] = {}
        self._total_length = 0.0

    def __len__(self) -> int:
        return len(self._slot)

    def __contains__(self, key: object) -> bool:
        return key in self._slot

    def frequency(self, term: str) -> int:
        """How many documents hold ``term`` (a token as :func:`tokenize` makes them)."""
        postings = self._postings.get(term)
        return 0 if postings is None else postings.n

    def add(self, key: str, text: str) -> None:
        self.add_many([(key, text)])

    def add_many(self, documents: Iterable[tuple[str, str]]) -> None:
        """``add`` for many (key, text) pairs at once (a fresh process loading its index): each
        term's postings grow once per call, not once per document. A key given twice keeps its
        last text."""
        batch = {key: Counter(tokenize(text)) for key, text in documents}
        if not batch:
            return
        with self._lock:
            grown: dict[str, tuple[list[int], list[int]]] = {}
            need = len(self._keys) + len(batch)
            if need > len(self._lengths):
                self._lengths = np.resize(self._lengths, max(need, 2 * len(self._lengths)))
            for key, terms in batch.items():
                old = self._slot.pop(key, None)
                if old is not None:
                    self._remove(old)
                slot = len(self._keys)
                self._slot[key] = slot
                self._keys.append(key)
                self._terms.append(tuple(terms))
                length = sum(terms.values())
                self._lengths[slot] = length
                self._total_length += length
                for term, tf in terms.items():
                    slots, tfs = grown.setdefault(term, ([], []))
                    slots.append(slot)
                    tfs.append(tf)
            for term, (slots, tfs) in grown.items():
                postings = self._postings.get(term)
                if postings is None:
                    postings = self._postings[term] = _Postings()
                postings.extend(slots, tfs)

    def _remove(self, slot: int) -> None:
        """Forget the document in ``slot`` (the caller holds the lock): ``add`` replaces."""
        for term in self._terms[slot]:
            postings = self._postings[term]
            postings.remove(slot)
            if not postings.n:
                del self._postings[term]
        self._total_length -= float(self._lengths[slot])
        self._lengths[slot] = 0
        self._keys[slot] = None
        self._terms[slot] = ()

    def search(
        self, query: str, k: int = 10, *, exclude: Iterable[str] = ()
    ) -> list[tuple[str, float]]:
        """The ``k`` best (key, score) pairs with a positive score, best first; ties by key."""
        if k <= 0:
            return []
        terms = Counter(tokenize(query))
        with self._lock:
            n = len(self._slot)
            if n == 0:
                return []
            slots = len(self._keys)
            average = self._total_length / n or 1.0
            norm: Any = None
            scores: Any = None
            for term, qtf in terms.items():
                postings = self._postings.get(term)
                if postings is None:
                    continue
                if scores is None:
                    lengths = self._lengths[:slots]
                    norm = self.k1 * (1 - self.b + self.b * lengths / average)
                    scores = np.zeros(slots, dtype=np.float64)
                where = postings.slots[: postings.n]
                tf = postings.tfs[: postings.n]
                idf = math.log(1.0 + (n - postings.n + 0.5) / (postings.n + 0.5))
                # one posting per document and term: a plain fancy-index add is exact
                scores[where] += qtf * idf * tf * (self.k1 + 1) / (tf + norm[where])
            if scores is None:
                return []
            for key in exclude:
                slot = self._slot.get(key)
                if slot is not None:
                    scores[slot] = 0.0
            hits = np.flatnonzero(scores > 0)
            if len(hits) > k:
                # the k best, plus every document tied with the k-th (ties go by key)
                kth = np.partition(scores[hits], len(hits) - k)[len(hits) - k]
                hits = hits[scores[hits] >= kth]
            ranked = [(cast(str, self._keys[s]), float(scores[s])) for s in hits.tolist()]
        ranked.sort(key=lambda item: (-item[1], item[0]))
        return ranked[:k]


def reciprocal_rank_fusion(
    rankings: Sequence[Sequence[K]], *, k: int = 60, weights: Sequence[float] | None = None
) -> list[tuple[K, float]]:
    """Fuse ranked lists (best first) by RRF: ``sum(weight / (k + rank))``, rank from 1.

    Returns (item, score) best first; ties keep the order of first appearance.
    """
    if weights is not None and len(weights) != len(rankings):
        raise ValueError(f"{len(weights)} weights for {len(rankings)} rankings")
    scores: dict[K, float] = {}
    for i, ranking in enumerate(rankings):
        weight = 1.0 if weights is None else weights[i]
        for rank, item in enumerate(ranking, start=1):
            scores[item] = scores.get(item, 0.0) + weight / (k + rank)
    order = {item: n for n, item in enumerate(scores)}
    return sorted(scores.items(), key=lambda pair: (-pair[1], order[pair[0]]))
