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
from typing import TypeVar

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


class BM25Index:
    """An incremental Okapi BM25 index over string keys. Thread-safe.

    ``add`` with a key already present replaces that document (idempotent for the same text).
    """

    def __init__(self, *, k1: float = 1.2, b: float = 0.75) -> None:
        if k1 < 0 or not 0 <= b <= 1:
            raise ValueError(f"BM25 needs k1 >= 0 and 0 <= b <= 1, got k1={k1}, b={b}")
        self.k1, self.b = k1, b
        self._lock = threading.Lock()
        self._docs: dict[str, Counter[str]] = {}
        self._lengths: dict[str, int] = {}
        self._postings: dict[str, dict[str, int]] = {}
        self._total_length = 0

    def __len__(self) -> int:
        return len(self._docs)

    def __contains__(self, key: object) -> bool:
        return key in self._docs

    def add(self, key: str, text: str) -> None:
        terms = Counter(tokenize(text))
        with self._lock:
            if key in self._docs:
                self._remove(key)
            self._docs[key] = terms
            length = sum(terms.values())
            self._lengths[key] = length
            self._total_length += length
            for term, tf in terms.items():
                self._postings.setdefault(term, {})[key] = tf

    def _remove(self, key: str) -> None:
        """Forget ``key``'s document (the caller holds the lock): ``add`` replaces with it."""
        for term in self._docs.pop(key):
            postings = self._postings[term]
            del postings[key]
            if not postings:
                del self._postings[term]
        self._total_length -= self._lengths.pop(key)

    def search(
        self, query: str, k: int = 10, *, exclude: Iterable[str] = ()
    ) -> list[tuple[str, float]]:
        """The ``k`` best (key, score) pairs with a positive score, best first; ties by key."""
        if k <= 0:
            return []
        skip = set(exclude)
        with self._lock:
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
                    scores[key] = scores.get(key, 0.0) + qtf * idf * tf * (self.k1 + 1) / (
                        tf + norm
                    )
        ranked = sorted(scores.items(), key=lambda item: (-item[1], item[0]))
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
