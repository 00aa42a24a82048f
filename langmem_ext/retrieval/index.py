"""The in-process indexes of stored turns: per namespace prefix (a thread, or a user's threads),
a BM25 index over the turns' text and a dense :class:`~langmem_ext.retrieval.vectors.VectorIndex`
over their vectors (:class:`Lexical`), the cache of them a Retrieval keeps
(:class:`IndexCache`), what the index flows share (:class:`IndexSetup`), the candidates a search
finds, and the store faults it works around (:class:`Faults`)."""

from __future__ import annotations

import logging
import threading
from collections import OrderedDict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, cast

import numpy as np
from langgraph.store.base import BaseStore, Item, PutOp

from langmem_ext.core.keys import MemoryKey
from langmem_ext.retrieval.bm25 import STR_BYTES, BM25Index
from langmem_ext.retrieval.codec import Block, stored_bytes, stored_vectors
from langmem_ext.retrieval.config import DEFAULT_INDEX_CACHE_BYTES, RetrievalConfig
from langmem_ext.retrieval.layout import TURNS, Mark, seq_of, text_of
from langmem_ext.retrieval.vectors import VectorIndex

logger = logging.getLogger("langmem_ext")


@dataclass(frozen=True, slots=True)
class Candidate:
    """One thing that may go into the context message."""

    uid: str  # unique across the memory index and the sources
    text: str
    kind: Literal["turn", "fact", "passage"]
    seq: int = 0
    prev: str = ""
    ids: Sequence[str] = ()
    source: str = ""
    #: the turn's messages, each rendered alone (compact packing chooses from them)
    parts: Sequence[str] = ()
    #: the dense similarity of the store's search (None: not from a dense ranking)
    score: float | None = None


def turn_candidate(
    uid: str, value: dict[str, Any], prev: bool, score: float | None = None
) -> Candidate:
    """A stored turn (its value) as a candidate; ``prev`` keeps the turn before (packing and
    neighbours use it)."""
    return Candidate(
        uid=uid,
        text=text_of(value),
        kind="turn",
        seq=seq_of(value) or 0,
        prev=str(value.get("prev", "")) if prev else "",
        ids=_strings(value.get("ids")),
        parts=_strings(value.get("parts")),
        score=None if score is None else float(score),
    )


def _strings(value: object) -> Sequence[str]:
    """A stored list of strings as a candidate holds it: the stored list itself (no copy: a
    held turn is then one new object, see ``Lexical.turns``; nothing changes it), else
    (a foreign or damaged value) its items as strings."""
    if not isinstance(value, list | tuple):
        return ()
    if isinstance(value, list) and all(type(v) is str for v in value):
        return value
    return tuple(str(v) for v in value)


def scored(turn: Candidate, score: float | None) -> Candidate:
    """A held turn with this search's score (the held one is shared: never changed)."""
    c = turn
    return Candidate(c.uid, c.text, c.kind, c.seq, c.prev, c.ids, c.source, c.parts, score)


class Faults:
    """What a Retrieval found damaged or foreign in its store and worked around, by kind
    (``Retrieval.store_faults``): counted, and logged once per kind (a warning), never raised.
    A damaged value costs the work of re-deriving it (re-embedding, re-tokenizing), not a
    turn."""

    def __init__(self) -> None:
        self._counts: dict[str, int] = {}
        self._lock = threading.Lock()

    def note(self, kind: str, count: int = 1) -> None:
        if count <= 0:
            return
        with self._lock:
            first = kind not in self._counts
            self._counts[kind] = self._counts.get(kind, 0) + count
        if first:
            logger.warning(
                "langmem_ext: Retrieval found %s in its store; skipped and re-derived from the "
                "turns' text (counted in Retrieval.store_faults, logged once)",
                kind,
            )

    def counts(self) -> dict[str, int]:
        with self._lock:
            return dict(self._counts)


#: the kinds of ``Faults``
BAD_VECTORS = "damaged or foreign turn vectors (re-embedded)"
BAD_NUMBER = "turns with an unreadable number"
BAD_BLOCK = "damaged or foreign index blocks (their turns read one by one)"
BAD_FILTER = "turn values the store could not filter on (scanned without the filter)"
BAD_EMBEDDING = "embeddings with NaN, infinity or another dimension (left out of the dense index)"
STALE_MARK = (
    "thread marks behind the caller's state (restored or lagging: the turns after the index "
    "blocks scanned for, and listed again by the next write)"
)


#: what ``Turns.nbytes`` counts a held turn besides its strings (the candidate object, its
#: dict entry, its lists), and ``Lexical.nbytes`` an empty index, an approximate uid
CANDIDATE_BYTES = 240
LEXICAL_BYTES = 12_288
APPROXIMATE_BYTES = 40


def _candidate_bytes(turn: Candidate) -> int:
    """What a held turn costs: the object, and its strings as if it held its own (true when the
    store deserializes each read, as PostgreSQL and SQLite do; an InMemoryStore shares them)."""
    strings = [turn.text, turn.prev, *turn.parts, *turn.ids]
    return CANDIDATE_BYTES + sum(len(t) for t in strings) + STR_BYTES * len(strings)


class Turns(dict[str, Candidate]):
    """``Lexical.turns``: a dict that keeps the estimate of what its turns hold (``nbytes``)
    as they are set and removed (set, ``del``, ``pop``, ``clear``; nothing else is used)."""

    def __init__(self) -> None:
        super().__init__()
        self.nbytes = 0

    def __setitem__(self, uid: str, turn: Candidate) -> None:
        old = self.get(uid)
        if old is not None:
            self.nbytes -= _candidate_bytes(old)
        super().__setitem__(uid, turn)
        self.nbytes += _candidate_bytes(turn)

    def __delitem__(self, uid: str) -> None:
        self.nbytes -= _candidate_bytes(self[uid])
        super().__delitem__(uid)

    def pop(self, uid: str, *default: Any) -> Any:
        if uid not in self:
            return super().pop(uid, *default)
        turn = super().pop(uid)
        self.nbytes -= _candidate_bytes(turn)
        return turn

    def clear(self) -> None:
        super().clear()
        self.nbytes = 0


class Lexical:
    """The in-process indexes of one namespace prefix: BM25 over the turns' text and (with a
    local dense index) their vectors, the values they were built from (without the vectors),
    and the marks they have caught up with (see :mod:`~langmem_ext.retrieval.layout`)."""

    def __init__(
        self,
        dense: bool,
        prev: bool = True,
        *,
        model: str | None = None,
        faults: Faults | None = None,
    ) -> None:
        self.index = BM25Index()
        self.vectors = VectorIndex() if dense else None
        #: the embedding model of this index: stored vectors of another are re-embedded
        self.model = model
        #: the dimensions of this index's vectors before it holds any (the query's)
        self.expect: int | None = None
        self.faults = faults if faults is not None else Faults()
        #: keep each turn's ``prev`` (the config packs or widens with the turn before)
        self.prev = prev
        #: uid -> the turn as a candidate (no score), built once from its stored value: the
        #: same turns come back call after call. Turns loaded from index blocks have none until
        #: a search finds them (then they are read from the store, see ``turns_io``). One small
        #: object a turn, not a copy of its value and a candidate: every object kept is one more
        #: for the garbage collector's next young pass, whose cost grows with the caller's own
        #: young objects (a fresh list of 200,000 messages a call: milliseconds a pass)
        self.turns = Turns()
        #: thread label -> the mark of that thread as last read (everything before it is in)
        self.marks: dict[str, Mark] = {}
        #: (scope="user") the user's mark as last read
        self.user_token: str | None = None
        #: uids whose rows in ``vectors`` are int8 codes from an index block, until a search
        #: finds them and reads their turns (then their stored rows replace the codes)
        self.approximate: set[str] = set()
        #: the length of the last uid indexed (the uids of a prefix differ little)
        self._uid_chars = 0

    @property
    def nbytes(self) -> int:
        """An estimate of the memory this index holds (O(1), kept as it changes): its BM25 and
        dense indexes' ``nbytes``, its held turns' (``Turns``), its uids' strings and a fixed
        ``LEXICAL_BYTES``. Checked against tracemalloc in tests/retrieval/test_index_cache.py."""
        held = LEXICAL_BYTES + self.index.nbytes + self.turns.nbytes
        held += len(self.index) * (STR_BYTES + self._uid_chars)
        held += APPROXIMATE_BYTES * len(self.approximate)
        return held + (0 if self.vectors is None else self.vectors.nbytes)

    @property
    def dims(self) -> int | None:
        """The dimensions every vector of this index must have (None: not known yet)."""
        held = self.vectors.dims if self.vectors is not None else None
        return held or self.expect

    def _rows(self, value: dict[str, Any]) -> np.ndarray[Any, Any] | None:
        """The stored vectors of a turn this index can hold; None (counted when the value had
        some: damaged or another model's) when it must be embedded again."""
        rows = stored_vectors(value.get("vectors"), dims=self.dims, model=self.model)
        if rows is None and value.get("vectors") is not None:
            self.faults.note(BAD_VECTORS)
        return rows

    def add(self, namespace: tuple[str, ...], key: str, value: dict[str, Any]) -> bool:
        """Index one stored turn; False when the dense index needs its vectors and the value
        carries none it can use (written before vectors were stored with it, damaged, or
        another model's)."""
        uid = "/".join((*namespace, key))
        self._uid_chars = len(uid)
        self.turns[uid] = turn_candidate(uid, value, self.prev)
        self.index.add(uid, text_of(value))
        if self.vectors is None:
            return True
        rows = self._rows(value)
        if rows is None:
            return False
        self.vectors.add(uid, rows)
        self.approximate.discard(uid)
        return True

    def add_many(self, items: Sequence[Item]) -> list[Item]:
        """``add`` for a page of stored turns at once (bulk BM25 and vector inserts); the items
        the dense index needs vectors for and that carry none."""
        known = self.turns
        fresh: list[tuple[str, Item, Candidate]] = []
        for it in items:  # a turn this process wrote (the mark's fetch brings it back) is in
            uid = "/".join((*it.namespace, it.key))
            turn = turn_candidate(uid, it.value, self.prev)
            old = known.get(uid)
            if old is None or old.text != turn.text or tuple(old.parts) != tuple(turn.parts):
                fresh.append((uid, it, turn))
        items = [it for _, it, _ in fresh]
        uids = [uid for uid, _, _ in fresh]
        for uid, _, turn in fresh:
            self.turns[uid] = turn
        if uids:
            self._uid_chars = len(uids[-1])
        pairs = list(zip(uids, items, strict=True))
        self.faults.note(BAD_NUMBER, sum(seq_of(it.value) is None for it in items))
        self.index.add_many((uid, text_of(it.value)) for uid, it in pairs)
        if self.vectors is None:
            return []
        rows = [(uid, self._rows(it.value)) for uid, it in pairs]
        self.vectors.add_many((uid, r) for uid, r in rows if r is not None)
        if self.approximate:
            self.approximate.difference_update(uid for uid, r in rows if r is not None)
        return [it for it, (_, r) in zip(items, rows, strict=True) if r is None]

    def add_blocks(self, namespace: tuple[str, ...], blocks: Sequence[Block]) -> None:
        """The turns of index blocks (of the thread at ``namespace``), in bulk: postings and
        vectors as stored, no tokenizing, no decoding per turn. Their values are read when a
        search finds them."""
        head = "/".join(namespace) + "/"
        uids = [head + k for block in blocks for k in block.keys]
        if uids:
            self._uid_chars = len(uids[-1])
        at = 0
        for block in blocks:  # one BM25 segment each: terms are gathered when first searched
            self.index.add_postings(uids[at : at + len(block.keys)], block.postings)
            at += len(block.keys)
        if self.vectors is not None:
            rows = [cast(np.ndarray, b.rows) for b in blocks]  # (room reserved by the caller)
            counts = [cast(np.ndarray, b.counts) for b in blocks]
            self.vectors.add_block(uids, rows, np.concatenate(counts))  # never joined
            at = 0
            for block in blocks:
                if block.approximate:
                    self.approximate.update(uids[at : at + len(block.keys)])
                at += len(block.keys)

    def forget(self, uid: str) -> None:
        """A turn that is no longer in the store (expired or deleted)."""
        self.turns.pop(uid, None)
        self.approximate.discard(uid)
        self.index.remove(uid)
        if self.vectors is not None:
            self.vectors.remove(uid)

    def refine(self, stored: Sequence[tuple[str, dict[str, Any]]]) -> None:
        """The stored rows of turns loaded as int8 codes (their values as read), written over
        the codes in place (or in their place, when their number differs); decoded together."""
        if self.vectors is None:
            return
        uids: list[str] = []
        raws: list[bytes] = []
        dims = self.vectors.dims
        if not dims:
            return
        for uid, value in stored:
            found = stored_bytes(value, dims=dims, model=self.model)
            if found is not None:  # (else the codes stay)
                uids.append(uid)
                raws.append(found[1])
        if not uids:
            return
        rows = np.frombuffer(b"".join(raws), dtype="<f2").reshape(-1, dims)
        counts = np.fromiter((len(r) // (2 * dims) for r in raws), np.int64, len(raws))
        left = self.vectors.refine(uids, rows, counts)
        if left:  # another number of rows than the codes: replaced
            by_uid = dict(stored)
            for uid in left:
                again = stored_vectors(by_uid[uid], dims=dims, model=self.model)
                self.vectors.add(uid, cast(np.ndarray, again))

    def add_vectors(self, uid: str, vectors: Sequence[Sequence[float]]) -> None:
        """Vectors just embedded for a turn; left out (counted: BM25 still finds the turn) when
        the model gave NaN, infinity or another number of dimensions than the index holds."""
        if self.vectors is None:
            return
        try:
            rows = np.asarray(vectors, dtype=np.float32)
        except (TypeError, ValueError):  # ragged, or not numbers
            rows = np.zeros(0, dtype=np.float32)
        dims = self.dims
        if rows.ndim != 2 or not np.isfinite(rows).all() or (dims and rows.shape[1] != dims):
            self.faults.note(BAD_EMBEDDING)
            return
        self.vectors.add(uid, rows)


#: namespace prefixes whose indexes a Retrieval keeps at most, whatever their bytes (an empty
#: index's own overhead is estimated, so the bytes bound nearly always decides first)
MAX_ENTRIES = 4_096


@dataclass(frozen=True, slots=True)
class IndexCacheStats:
    """What an :class:`IndexCache` did and holds: lookups that found an index (``hits``) or not
    (``misses``: the index was built from the store), indexes dropped to stay within the bound
    (``evictions``, counting one too large to keep at all), and the estimated ``bytes`` of the
    ``entries`` it holds, within ``max_bytes``."""

    hits: int
    misses: int
    evictions: int
    bytes: int
    entries: int
    max_bytes: int


class IndexCache:
    """A Retrieval's in-process indexes by namespace prefix, bounded by their estimated bytes
    (``Lexical.nbytes``; ``max_bytes``, 0: none kept beyond the call) and by ``max_entries``:
    the least recently used go first; the most recently used stays whatever its size (alone
    when it is larger than the bound: a long thread is not rebuilt on every call). An index
    dropped is rebuilt from the store (its index blocks and the turns
    after them) when its prefix is searched again. Also the last queries' vectors: an agent
    loop asks its one request again on every tool round, and a hosted embedding model would be
    paid (and waited for) each time. One lock guards both, and the indexes' turns while a
    search reads them in.

    An index's bytes are measured when it is installed, looked up, or written to: what a call
    adds to it after its lookup (turns caught up, turns a search read) counts from its next
    use, or at :meth:`stats`, which measures every entry again."""

    def __init__(self, max_bytes: int | None = None, max_entries: int = MAX_ENTRIES) -> None:
        self.lexicals: OrderedDict[tuple[str, ...], Lexical] = OrderedDict()
        self.query_vectors: OrderedDict[str, list[float]] = OrderedDict()
        self.lock = threading.Lock()
        #: None until ``IndexSetup`` gives it its config's ``index_cache_bytes``
        self.max_bytes = max_bytes
        self.max_entries = max_entries
        self._sizes: dict[tuple[str, ...], int] = {}  # bytes as last measured
        self._bytes = 0
        self._hits = self._misses = self._evictions = 0

    @property
    def bytes(self) -> int:
        """The bytes of the entries as last measured (within ``max_bytes``)."""
        return self._bytes

    @property
    def _bound(self) -> int:
        return DEFAULT_INDEX_CACHE_BYTES if self.max_bytes is None else self.max_bytes

    def get(self, prefix: tuple[str, ...]) -> Lexical | None:
        """The index of ``prefix`` when kept (now the most recently used), counted as a hit or
        a miss."""
        with self.lock:
            lexical = self.lexicals.get(prefix)
            if lexical is None:
                self._misses += 1
                return None
            self._hits += 1
            self.lexicals.move_to_end(prefix)
            self._measure(prefix, lexical)
            self._shrink(prefix)
            return lexical

    def peek(self, prefix: tuple[str, ...]) -> Lexical | None:
        """The index of ``prefix`` when kept, neither counted nor moved (measured again)."""
        with self.lock:
            lexical = self.lexicals.get(prefix)
            if lexical is not None:
                self._measure(prefix, lexical)
                self._shrink(prefix)
            return lexical

    def install(self, prefix: tuple[str, ...], lexical: Lexical) -> None:
        """Keep ``lexical`` (just built) as the most recently used, dropping the least recently
        used while over the bounds (the newest stays, alone if it is larger than the bound)."""
        with self.lock:
            old = self.lexicals.pop(prefix, None)
            if old is not None:
                self._bytes -= self._sizes.pop(prefix)
            self.lexicals[prefix] = lexical
            self._sizes[prefix] = 0
            self._measure(prefix, lexical)
            self._shrink(prefix)

    def remember(self, ops: Iterable[PutOp]) -> None:
        """Add this process's own writes to its BM25 indexes at once (the marks they left still
        make the next query check for other writers' turns)."""
        with self.lock:
            touched: dict[tuple[str, ...], Lexical] = {}
            for op in ops:
                for prefix, lexical in self.lexicals.items():
                    if op.namespace[: len(prefix)] == prefix and op.value is not None:
                        lexical.add(op.namespace, op.key, dict(op.value))
                        touched[prefix] = lexical
            for prefix, lexical in touched.items():
                self._measure(prefix, lexical)
            self._shrink()

    def stats(self) -> IndexCacheStats:
        """The counters, and the bytes held as measured now (every entry measured again, and
        the least recently used dropped while over the bound)."""
        with self.lock:
            for prefix, lexical in self.lexicals.items():
                self._measure(prefix, lexical)
            self._shrink()
            return IndexCacheStats(
                hits=self._hits,
                misses=self._misses,
                evictions=self._evictions,
                bytes=self._bytes,
                entries=len(self.lexicals),
                max_bytes=self._bound,
            )

    def _measure(self, prefix: tuple[str, ...], lexical: Lexical) -> None:
        """Account ``lexical``'s bytes now (the caller holds the lock)."""
        size = lexical.nbytes
        self._bytes += size - self._sizes[prefix]
        self._sizes[prefix] = size

    def _shrink(self, used: tuple[str, ...] | None = None) -> None:
        """Drop the least recently used entries while over a bound (the caller holds the
        lock). The most recently used one stays whatever its size (unless the bound is 0): it
        was just in memory for its call, and a thread larger than the bound would otherwise be
        rebuilt from the store on every call; then it is the only one kept."""
        bound = self._bound
        keep = 0 if bound == 0 else 1
        while len(self.lexicals) > keep and (
            self._bytes > bound or len(self.lexicals) > self.max_entries
        ):
            prefix, _ = self.lexicals.popitem(last=False)
            self._bytes -= self._sizes.pop(prefix)
            self._evictions += 1


@dataclass(frozen=True)
class IndexSetup:
    """What the index flows (writes, catch-up, search) of one Retrieval share: its checked
    ``config``, its ``store``, whether the dense ranking runs in process (``local``: vectors
    embedded here and kept with the turns) and with which embedding ``model``, whether reads
    refresh the store's TTL, the faults it counts, and its cache of indexes."""

    config: RetrievalConfig
    store: BaseStore
    local: bool
    model: str | None
    refresh_ttl: bool
    faults: Faults
    cache: IndexCache = field(default_factory=IndexCache)

    def __post_init__(self) -> None:
        if self.cache.max_bytes is None:  # (a cache given with its own bound keeps it)
            self.cache.max_bytes = self.config.index_cache_bytes

    @property
    def keeps_prev(self) -> bool:
        """Whether a turn's candidate keeps the turn before (packing and neighbours use it)."""
        return bool(self.config.neighbors) or self.config.compact

    def prefix(self, key: MemoryKey) -> tuple[str, ...]:
        """The namespace prefix a search of ``key`` covers (its thread, or its user's)."""
        return key.namespace(TURNS, scope="session" if self.config.scope == "thread" else "user")
