"""``BM25Index`` (numpy postings) against the pure-Python implementation it replaced, copied below
as the reference: the same ranking for any texts, query and parameters."""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from langmem_ext.retrieval.bm25 import BM25Index, tokenize

KEYS = [f"k{i:02}" for i in range(12)]


# -- BM25Index: the pure-Python implementation it replaced, as the reference ----------------------


class PurePythonBM25:
    """langmem_ext/retrieval/bm25.py's BM25Index before the numpy postings (minimal copy)."""

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
