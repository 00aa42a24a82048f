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
import sys
import threading
from collections import Counter
from collections.abc import Collection, Hashable, Iterable, Sequence
from typing import Any, NamedTuple, TypeVar, cast

import numpy as np
from numpy.typing import NDArray

__all__ = ["BM25Index", "Postings", "encode_postings", "reciprocal_rank_fusion", "tokenize"]

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


class Postings(NamedTuple):
    """Documents as term counts, ready for :meth:`BM25Index.add_postings`: a vocabulary, and per
    document ``i`` the terms ``ids[ptr[i]:ptr[i + 1]]`` (indexes into ``vocab``) with their
    counts ``tfs[ptr[i]:ptr[i + 1]]``. What a persisted index keeps instead of the texts: a
    fresh process loads it without tokenizing again."""

    vocab: list[str]
    ptr: NDArray[np.int64]
    ids: NDArray[np.int32]
    tfs: NDArray[np.int32]


def encode_postings(texts: Iterable[str]) -> Postings:
    """The :class:`Postings` of ``texts`` (tokenized as :func:`tokenize` does)."""
    vocab: dict[str, int] = {}
    ptr = [0]
    ids: list[int] = []
    tfs: list[int] = []
    for text in texts:
        for term, tf in Counter(tokenize(text)).items():
            ids.append(vocab.setdefault(term, len(vocab)))
            tfs.append(tf)
        ptr.append(len(ids))
    return Postings(
        list(vocab),
        np.asarray(ptr, dtype=np.int64),
        np.asarray(ids, dtype=np.int32),
        np.asarray(tfs, dtype=np.int32),
    )


#: what ``BM25Index.nbytes`` counts besides numpy arrays' own ``nbytes`` (measured against
#: tracemalloc on CPython 3.11, see tests/retrieval/test_index_cache.py): a string's header (an
#: ASCII one; its characters are added), a document's slot (dict entry, int, list slots; plus
#: 8 bytes a term of a text's terms tuple: the terms are interned), a term's postings (dict
#: entry, object, two array headers), a term of a loaded vocabulary (list slot, dict entry,
#: int), a gathered term (dict entry; its postings: a tuple of two arrays)
STR_BYTES = 49
DOC_BYTES = 128
TERM_BYTES = 340
VOCAB_BYTES = 80
GATHERED_BYTES = 100
_BASE_BYTES = 4_096
_ARRAYS_BYTES = 290  # a tuple of two arrays (their headers)


def _doc_bytes(terms: Collection[str]) -> int:
    """What a document added as text holds: its slot, and its tuple of (interned) terms."""
    return DOC_BYTES + 56 + 8 * len(terms)


def _owned(array: NDArray[Any]) -> int:
    """An array's data when it owns it (a view's is its base's)."""
    return array.nbytes if array.base is None else 0


class _Postings:
    """One term's postings: growable arrays of (document slot, term frequency)."""

    __slots__ = ("n", "slots", "tfs")

    def __init__(self, slots: NDArray[Any] | None = None, tfs: NDArray[Any] | None = None) -> None:
        if slots is None or tfs is None:
            self.n = 0
            self.slots = np.empty(4, dtype=np.int32)
            self.tfs = np.empty(4, dtype=np.float64)
        else:  # views of a bulk load's arrays: a later extend copies before it writes
            self.n = len(slots)
            self.slots, self.tfs = slots, tfs

    @property
    def capacity_bytes(self) -> int:
        return len(self.slots) * 12

    def extend(self, slots: list[int] | NDArray[Any], tfs: list[int] | NDArray[Any]) -> None:
        end = self.n + len(slots)
        if end > len(self.slots):
            size = max(end, 2 * len(self.slots))
            grown_slots = np.empty(size, dtype=np.int32)
            grown_tfs = np.empty(size, dtype=np.float64)
            grown_slots[: self.n] = self.slots[: self.n]
            grown_tfs[: self.n] = self.tfs[: self.n]
            self.slots, self.tfs = grown_slots, grown_tfs
        self.slots[self.n : end] = slots
        self.tfs[self.n : end] = tfs
        self.n = end

    def remove(self, slot: int) -> None:
        keep = self.slots[: self.n] != slot
        count = int(keep.sum())
        self.slots[:count] = self.slots[: self.n][keep]
        self.tfs[:count] = self.tfs[: self.n][keep]
        self.n = count


_NO_POSTINGS: tuple[NDArray[np.int32], NDArray[np.float64]] = (
    np.zeros(0, dtype=np.int32),
    np.zeros(0, dtype=np.float64),
)


class _Segment(NamedTuple):
    """Documents added at once from :class:`Postings` (a fresh process loading a persisted
    index), kept as loaded, sorted by term: a term's postings are gathered from every segment
    only when a search first needs them."""

    base: int  #: the first document slot of the load
    #: slot - base -> the document's index in ``ptr`` (-1: not a document of this segment)
    docs: NDArray[np.int64]
    vocab: list[str]
    where: dict[str, int]  #: term -> its id in ``vocab``
    ptr: NDArray[np.int64]  #: document-major: the terms of document i (to forget it)
    ids: NDArray[np.int32]
    tptr: NDArray[np.int64]  #: term-major: the postings of term id t
    slots: NDArray[np.int32]
    tfs: NDArray[np.float64]

    @property
    def nbytes(self) -> int:
        """Its arrays, and its vocabulary's strings and look-up (not its documents' slots)."""
        arrays = (self.docs, self.ptr, self.ids, self.tptr, self.slots, self.tfs)
        words = sum(len(t) for t in self.vocab)
        return sum(a.nbytes for a in arrays) + words + (VOCAB_BYTES + STR_BYTES) * len(self.vocab)


def _merge_segments(segments: Sequence[_Segment]) -> _Segment:
    """One segment holding what ``segments`` hold (one vocabulary): the terms are renumbered
    in Python (one step per term of each load), the postings sorted by term in numpy."""
    vocab: dict[str, int] = {}
    add = vocab.setdefault
    remaps = [
        np.fromiter((add(term, len(vocab)) for term in seg.vocab), np.int64, len(seg.vocab))
        for seg in segments
    ]
    # term-major: each posting's new term id, then a stable sort by it
    terms = np.concatenate(
        [
            remap[np.repeat(np.arange(len(seg.vocab)), np.diff(seg.tptr))]
            for seg, remap in zip(segments, remaps, strict=True)
        ]
    )
    order = np.argsort(terms, kind="stable")
    slots = np.concatenate([seg.slots for seg in segments])[order]
    tfs = np.concatenate([seg.tfs for seg in segments])[order]
    tptr = np.zeros(len(vocab) + 1, dtype=np.int64)
    np.cumsum(np.bincount(terms, minlength=len(vocab)), out=tptr[1:])
    # document-major: each load's documents after the last, their slots mapped
    base = min(seg.base for seg in segments)
    top = max(seg.base + len(seg.docs) for seg in segments)
    docs = np.full(top - base, -1, dtype=np.int64)
    ptrs: list[NDArray[np.int64]] = [np.zeros(1, dtype=np.int64)]
    offset = documents = 0
    for seg in segments:
        held = seg.docs >= 0
        at = np.flatnonzero(held) + (seg.base - base)
        docs[at] = seg.docs[held] + documents
        ptrs.append(seg.ptr[1:] + offset)
        offset += int(seg.ptr[-1])
        documents += len(seg.ptr) - 1
    ids = np.concatenate(
        [remap[seg.ids] for seg, remap in zip(segments, remaps, strict=True)]
    ).astype(np.int32)
    words = list(vocab)
    return _Segment(
        base, docs, words, vocab, np.concatenate(ptrs), ids, tptr, slots.astype(np.int32), tfs
    )


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
        #: slot -> its distinct terms (None: loaded from postings; removal scans the postings)
        self._terms: list[tuple[str, ...] | None] = []
        self._lengths = np.zeros(16, dtype=np.float64)
        #: term -> the postings of the documents added as texts
        self._postings: dict[str, _Postings] = {}
        #: loads of postings (``add_postings``), as loaded; a term's live postings in them are
        #: gathered when a search first needs them, and kept (``_gathered``) until a load or
        #: a removal changes them
        self._segments: list[_Segment] = []
        self._gathered: dict[str, tuple[NDArray[np.int32], NDArray[np.float64]]] = {}
        self._live = np.zeros(16, dtype=bool)  # slot -> the document is in the index
        self._merging: threading.Event | None = None  # set when a merge of loads is done
        self._forgotten = 0  # documents loaded from postings and removed since
        self._total_length = 0.0
        #: ``nbytes`` less the document arrays (kept as the index changes)
        self._bytes = _BASE_BYTES

    @property
    def nbytes(self) -> int:
        """An estimate of the memory this index holds, kept as it changes (O(1) to read): the
        numpy arrays' ``nbytes`` at their allocated size, plus for the Python structures a
        size per document, per term of a text (its own string), per term's postings, per
        term of a loaded vocabulary and per gathered term (the ``*_BYTES`` constants). The
        keys' strings are the caller's and not counted; a non-ASCII term is counted as ASCII
        (up to 4x under)."""
        return self._bytes + self._lengths.nbytes + self._live.nbytes

    def __len__(self) -> int:
        return len(self._slot)

    def __contains__(self, key: object) -> bool:
        return key in self._slot

    def frequency(self, term: str) -> int:
        """How many documents hold ``term`` (a token as :func:`tokenize` makes them)."""
        with self._lock:
            postings = self._postings.get(term)
            return (0 if postings is None else postings.n) + len(self._gathered_of(term)[0])

    def add(self, key: str, text: str) -> None:
        self.add_many([(key, text)])

    def remove(self, key: str) -> None:
        """Forget ``key`` (nothing happens when it is absent)."""
        with self._lock:
            slot = self._slot.pop(key, None)
            if slot is not None:
                self._remove(slot)

    def add_many(self, documents: Iterable[tuple[str, str]]) -> None:
        """``add`` for many (key, text) pairs at once (a fresh process loading its index): each
        term's postings grow once per call, not once per document. A key given twice keeps its
        last text."""
        # terms interned: every document's terms tuple and the postings share one string a term
        # (not a copy a document: about 60 bytes a distinct term of each text)
        batch = {key: Counter(map(sys.intern, tokenize(text))) for key, text in documents}
        if not batch:
            return
        with self._lock:
            grown: dict[str, tuple[list[int], list[int]]] = {}
            self._room(len(self._keys) + len(batch))
            for key, terms in batch.items():
                old = self._slot.pop(key, None)
                if old is not None:
                    self._remove(old)
                slot = len(self._keys)
                self._slot[key] = slot
                self._keys.append(key)
                self._terms.append(tuple(terms))
                self._bytes += _doc_bytes(terms)
                length = sum(terms.values())
                self._lengths[slot] = length
                self._live[slot] = True
                self._total_length += length
                for term, tf in terms.items():
                    slots, tfs = grown.setdefault(term, ([], []))
                    slots.append(slot)
                    tfs.append(tf)
            added = 0
            for term, (slots, tfs) in grown.items():
                postings = self._postings.get(term)
                if postings is None:
                    postings = self._postings[term] = _Postings()
                    added += TERM_BYTES + STR_BYTES + len(term) + postings.capacity_bytes
                before = len(postings.slots)
                postings.extend(slots, tfs)
                added += (len(postings.slots) - before) * 12
            self._bytes += added

    def add_postings(self, keys: Sequence[str], postings: Postings) -> None:
        """Add documents given as term counts (:func:`encode_postings`, in the order of ``keys``)
        at once: what a fresh process does with a persisted index. The load is kept as one
        segment, sorted by term in numpy; a search gathers a term's postings from the segments
        the first time it needs them: no Python step per term or per token at load. Same
        result as ``add_many`` of the texts; a key already present is replaced (a key given
        twice keeps its last postings)."""
        _check_postings(keys, postings)
        vocab, ptr, ids, tfs = postings
        if not keys:
            return
        counts = np.diff(ptr)
        with self._lock:
            last = {key: i for i, key in enumerate(keys)}
            for key in last:
                old = self._slot.pop(key, None)
                if old is not None:
                    self._remove(old)
            take = np.fromiter(sorted(last.values()), dtype=np.int64, count=len(last))
            base = len(self._keys)
            need = base + len(take)
            self._room(need)
            self._live[base:need] = True
            slot_of = np.full(len(keys), -1, dtype=np.int64)
            slot_of[take] = np.arange(base, need)
            taken = [keys[i] for i in take.tolist()]
            self._slot.update(zip(taken, range(base, need), strict=True))
            self._keys.extend(taken)
            self._terms.extend([None] * len(taken))
            doc = np.repeat(np.arange(len(keys)), counts)
            keep = slot_of[doc] >= 0
            slots = slot_of[doc][keep].astype(np.int32)
            term_ids, term_tfs = ids[keep], tfs[keep].astype(np.float64)
            lengths = np.bincount(doc[keep], weights=term_tfs, minlength=len(keys))
            self._lengths[base:need] = lengths[take]
            self._total_length += float(lengths[take].sum())
            # a stable sort of small integers is a radix sort in numpy
            small = term_ids.astype(np.uint16) if len(vocab) <= 65_536 else term_ids
            order = np.argsort(small, kind="stable")
            term_ids, slots, term_tfs = term_ids[order], slots[order], term_tfs[order]
            tptr = np.zeros(len(vocab) + 1, dtype=np.int64)
            np.cumsum(np.bincount(term_ids, minlength=len(vocab)), out=tptr[1:])
            vocab = list(vocab)
            segment = _Segment(
                base,
                take,
                vocab,
                dict(zip(vocab, range(len(vocab)), strict=True)),
                np.asarray(ptr, dtype=np.int64),
                np.asarray(ids, dtype=np.int32),
                tptr,
                slots,
                term_tfs,
            )
            for term in segment.where.keys() & self._gathered.keys():
                self._ungather(term)
            self._segments.append(segment)
            self._bytes += segment.nbytes + DOC_BYTES * len(taken)

    def _room(self, slots: int) -> None:
        """Room for ``slots`` document slots (the caller holds the lock)."""
        if slots > len(self._lengths):
            size = max(slots, 2 * len(self._lengths))
            self._lengths = np.resize(self._lengths, size)
            live = np.zeros(size, dtype=bool)
            live[: len(self._live)] = self._live
            self._live = live

    def _gathered_of(self, term: str) -> tuple[NDArray[np.int32], NDArray[np.float64]]:
        """The live postings of ``term`` in the segments (slots, counts), gathered the first
        time (the caller holds the lock)."""
        got = self._gathered.get(term)
        if got is not None or not self._segments:
            return got if got is not None else _NO_POSTINGS
        slots: list[NDArray[Any]] = []
        tfs: list[NDArray[Any]] = []
        for segment in self._segments:
            t = segment.where.get(term)
            if t is not None and (a := int(segment.tptr[t])) < (b := int(segment.tptr[t + 1])):
                slots.append(segment.slots[a:b])
                tfs.append(segment.tfs[a:b])
        got = _NO_POSTINGS
        if len(slots) == 1 and not self._forgotten:  # views of the one segment: no copy
            got = (slots[0], tfs[0])
        elif slots:
            joined = np.concatenate(slots)
            live = self._live[joined]
            got = (joined[live], np.concatenate(tfs)[live])
        self._gathered[term] = got
        self._bytes += self._gathered_bytes(term, got)
        return got

    @staticmethod
    def _gathered_bytes(term: str, got: tuple[NDArray[np.int32], NDArray[np.float64]]) -> int:
        held = GATHERED_BYTES + STR_BYTES + len(term)
        if got is _NO_POSTINGS:
            return held
        return held + _ARRAYS_BYTES + _owned(got[0]) + _owned(got[1])

    def _ungather(self, term: str) -> None:
        """Drop the gathered postings of ``term`` (the caller holds the lock)."""
        got = self._gathered.pop(term, None)
        if got is not None:
            self._bytes -= self._gathered_bytes(term, got)

    def _terms_of(self, slot: int) -> tuple[str, ...]:
        """The distinct terms of the document in ``slot``, loaded from postings (the caller
        holds the lock)."""
        for segment in self._segments:
            at = slot - segment.base
            if 0 <= at < len(segment.docs) and (i := int(segment.docs[at])) >= 0:
                a, b = int(segment.ptr[i]), int(segment.ptr[i + 1])
                return tuple(segment.vocab[t] for t in segment.ids[a:b].tolist())
        return ()

    # -- merging loads ----------------------------------------------------------------------------

    def consolidate(self, *, background: bool = True) -> None:
        """Merge the loads of postings into one segment (one look-up per term instead of one
        per load when a search first needs a term), in a thread unless ``background`` is
        False: numpy does most of it, off the lock; the merge is swapped in under the lock.
        Searches answer the same before, during and after."""
        with self._lock:
            if self._merging is not None or len(self._segments) < 2:
                return
            self._merging = threading.Event()
        if background:
            threading.Thread(target=self._merge, name="BM25Index-merge", daemon=True).start()
        else:
            self._merge()

    def wait(self, timeout: float | None = None) -> bool:
        """Wait until no merge of loads is under way; False when ``timeout`` passed first."""
        merging = self._merging
        return merging is None or merging.wait(timeout)

    def _merge(self) -> None:
        merging = self._merging
        assert merging is not None
        try:
            while True:
                with self._lock:
                    segments = list(self._segments)
                if len(segments) < 2:
                    return
                merged = _merge_segments(segments)
                with self._lock:
                    now = self._segments[: len(segments)]
                    if all(a is b for a, b in zip(now, segments, strict=True)):  # loads append
                        self._segments = [merged, *self._segments[len(segments) :]]
                        self._bytes += merged.nbytes - sum(seg.nbytes for seg in segments)
        finally:
            with self._lock:
                self._merging = None
            merging.set()

    def _remove(self, slot: int) -> None:
        """Forget the document in ``slot`` (the caller holds the lock): ``add`` replaces."""
        terms = self._terms[slot]
        if terms is None:  # loaded from postings: its terms gather again without it
            self._forgotten += 1
            for term in self._terms_of(slot):
                self._ungather(term)
            self._bytes -= DOC_BYTES
        else:
            for term in terms:
                postings = self._postings[term]
                postings.remove(slot)
                if not postings.n:
                    del self._postings[term]
                    self._bytes -= TERM_BYTES + STR_BYTES + len(term) + postings.capacity_bytes
            self._bytes -= _doc_bytes(terms)
        self._live[slot] = False
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
            scores: Any = None
            for term, qtf in terms.items():
                postings = self._postings.get(term)
                parts = [self._gathered_of(term)]
                if postings is not None:
                    parts.append((postings.slots[: postings.n], postings.tfs[: postings.n]))
                holding = sum(len(where) for where, _ in parts)
                if not holding:
                    continue
                if scores is None:
                    scores = np.zeros(slots, dtype=np.float64)
                idf = math.log(1.0 + (n - holding + 0.5) / (holding + 0.5))
                for where, tf in parts:
                    if len(where):
                        # the length norm of the postings' documents only (not of every slot)
                        norm = self.k1 * (1 - self.b + self.b * self._lengths[where] / average)
                        # one posting per document and term: a plain fancy-index add is exact
                        scores[where] += qtf * idf * tf * (self.k1 + 1) / (tf + norm)
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


def _check_postings(keys: Sequence[str], postings: Postings) -> None:
    """Refuse postings that do not describe ``len(keys)`` documents over their vocabulary."""
    vocab, ptr, ids, tfs = postings
    if len(ptr) != len(keys) + 1 or int(ptr[-1]) != len(ids) or len(ids) != len(tfs):
        raise ValueError(
            f"postings of {len(ptr) - 1} documents ({len(ids)} terms, {len(tfs)} counts) "
            f"given for {len(keys)} keys"
        )
    if len(ids) and (int(ids.min()) < 0 or int(ids.max()) >= len(vocab)):
        raise ValueError(f"a term id outside the vocabulary of {len(vocab)} terms")
