"""Retrieval memory: bring evicted turns and knowledge back when the question needs them.

``Retrieval(inner, store=...)`` wraps any other strategy. Every turn:

1. the inner strategy builds its view with ``max_retrieved_tokens`` of the request held back (so
   the whole request, retrieved context included, still fits the inner budget);
2. every turn of the conversation that left the inner view is written once to a LangGraph
   ``BaseStore`` under the memory key's namespace ``("langmem_ext", "turns", tenant, user,
   thread)``. The item key is the position-safe key of the turn's first message
   (:func:`~langmem_ext.core.identity.key_at`: its id, or for a message without one a digest
   chained over the history before it), so two turns that both say "continue" are two items, and
   writing the same turn again is idempotent;
3. the newest human message (plus, with ``query_messages=n``, the ``n`` messages before it) is the
   query, when it may need the past (``gate``): an in-process vector index
   (:class:`~langmem_ext.retrieval.vectors.VectorIndex`, over the vectors stored with each turn; or
   the store's own dense search with ``dense_index="store"``), an in-process BM25 index, and any
   knowledge ``sources`` (searched for every query, concurrently, each under
   ``source_timeout``) are fused by reciprocal rank, deduplicated by content and capped;
4. the best results that are not already in the view go into ONE clearly marked context message,
   placed just before the newest human message (late, so the cached prompt prefix stays the
   same), within ``max_retrieved_tokens``. Turns are stored as text: a tool call and its results
   come back together, as part of their turn, or not at all. Retrieved text is fenced and
   neutralised (:func:`~langmem_ext.core.fences.neutralize`): it cannot close the context message
   or a ``<turn>`` / ``<passage>`` block, whatever its spacing or attributes.

``scope="thread"`` searches the current thread only; ``scope="user"`` all of the user's threads.
Tenants never mix: their namespaces share no prefix beyond ``("langmem_ext", "turns")``. Memory
kept in a store outlives the graph state and is shared by whoever presents the same key, so
Retrieval fails closed: it refuses to run when the part of the key its scope needs (the thread,
or the user) was not given and fell back to ``"default"``, unless ``shared_default=True`` says a
shared memory is intended (:class:`~langmem_ext.core.keys.MissingKeyError`).

Workers. Several processes (or several ``Retrieval`` objects) may serve one thread or one user.
The BM25 index lives in each process, so every indexing write also leaves a *mark* in the store
(``("langmem_ext", "turn_marks", tenant, user)``): per thread, a fresh token and the next turn
number, and per user a token that changes on every write in any of the user's threads. Each
query reads one mark (one ``GetOp``, batched with the dense search); when it differs from what
the index last saw, the index catches up with only the turns it lacks (per changed thread, the
turns from the last number it saw), or reloads a thread whose numbering went back. Marks are
written after the turns they announce and never read-modified-written, so concurrent writers
cannot hide each other's turns; an index that saw a mark has seen everything written before it.

A mark lists the keys of the turns its write made (up to 64): a reader whose index reaches back
to that write's first turn fetches exactly those (O(turns written)) instead of scanning the
thread; otherwise it scans from the last number it saw.

Index blocks. A fresh process builds its in-process indexes from the store. Reading and
tokenizing every turn costs seconds at 50k turns, so each thread's turns are also kept as index
blocks (``("langmem_ext", "turn_blocks", tenant, user, thread)``): every 512 turns, one item
with their BM25 postings and stored vectors. A fresh process (``scope="thread"``) loads the
blocks and reads only the turns after them one by one, by the keys the thread's tail lists (an
item beside the blocks, rewritten by every write with the thread's mark and checked against it,
so no scan of the thread's values is needed). Values of block turns are read when a search
finds them (one batched ``GetOp``). A turn that is gone from the store (expired, deleted) then
leaves the indexes. Blocks and tail are a cache and the turns stay the source of truth:
- a block is rewritten, from every stored turn in its number range, each time a write reaches
  the turn after it;
- a block counts only when the thread's mark says that turn was written under the current
  numbering;
- the tail counts only when it is the one the last write (the thread's mark) left, when no
  numbering announced more turns than the current one, and when the turns it lists account for
  every number after the blocks; else the turns after the blocks are scanned for, and the next
  write lists them again from a scan;
- a mark that announces fewer turns than the caller's state says were indexed
  (``indexed_turns``: the mark, tail and blocks put back by a restored backup or read from a
  replica that lags) still says which blocks count, but the turns after them are scanned for,
  never taken from its tail; the next write then lists them in the tail again and seals the
  blocks that mark did not count, once;
- so a numbering reset (a new state on the same thread), a fork, a damaged block, a lost tail
  or stale caches never hide a turn. A fresh process with the blocks ranks exactly as one
  reading every turn (a property test). One limit: two processes writing the same thread at the
  same moment under different numberings can each rewrite the tail from the same one, so a
  fresh process may miss the other's turns after the blocks until the block that holds them is
  written.

Damaged and foreign values. Everything read from the store is checked, never trusted: a turn
whose number, text, parts or vectors are damaged (``seq`` ``'x'`` or NaN, NaN or infinite
vectors, ``dims`` that is not an integer or not the index's) is indexed from what is left (its
number from ``order``, its text from ``parts``) and its vectors embedded again; a block, tail or
mark that does not check out is ignored (its turns read one by one); a mark's numbers bound no
work (blocks are fetched while they exist). Vectors and blocks carry the embedding model's
identity (``"model"``) with their ``dims``: another model's are re-embedded, never compared.
What was worked around is counted (``Retrieval.store_faults``) and logged once per kind. A
store that reports itself busy (SQLite's "database is locked" while another process writes the
file) is asked again with a bounded backoff (:func:`batch_retrying`).

Costs: one embedding per message of an evicted turn (written once, stored with the turn, so a
fresh process loads it instead of embedding again), one query embedding per searched turn, a
vector search and a BM25 lookup (in process: about 2 ms at 200k vectors, and O(postings of the
query's terms)), one mark read per query, and per call that evicts something two small mark
writes and (``scope="thread"``) a read and a write of the thread's tail (the keys of at most
about 1,000 turns).

One flow. ``Retrieval`` is a strategy like the others: its plan runs the inner strategy's plan
(whose fold requests pass through it unchanged), then asks for its I/O as requests the drivers
fulfil: the turn writes (a read-only view declines them, as it defers a fold), then the index
search and the knowledge sources together (concurrently under ``aapply``). The store I/O inside
a request is itself a sans-I/O generator of ``BaseStore`` operations, driven by ``batch`` or by
``abatch``. ``apply`` / ``aapply`` / ``view`` / ``aview`` are the engine's own: its sync and async
drivers run this plan like any other (:class:`~langmem_ext.strategies.engine.IoRequest`).
"""

from __future__ import annotations

import asyncio
import binascii
import concurrent.futures
import contextlib
import functools
import hashlib
import logging
import math
import random
import re
import sqlite3
import threading
import time
import uuid
import warnings
from collections import OrderedDict
from collections.abc import Callable, Collection, Generator, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Generic, Literal, NamedTuple, TypeVar, cast

import numpy as np
import pybase64
from langchain_core.documents import Document
from langchain_core.embeddings import Embeddings
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langchain_core.retrievers import BaseRetriever
from langchain_core.vectorstores import VectorStore
from langgraph.store.base import BaseStore, GetOp, Item, Op, PutOp, SearchOp

from langmem_ext.core.fences import neutralize
from langmem_ext.core.identity import fingerprint, key_at, keys_between
from langmem_ext.core.keys import DEFAULT, MemoryKey
from langmem_ext.core.messages import is_system
from langmem_ext.core.result import MemoryResult
from langmem_ext.core.state import MemoryState
from langmem_ext.retrieval.bm25 import (
    STOP_WORDS,
    BM25Index,
    Postings,
    encode_postings,
    reciprocal_rank_fusion,
    tokenize,
)
from langmem_ext.retrieval.vectors import VectorIndex
from langmem_ext.strategies.engine import DECLINED, IoRequest, Plan, Request, Strategy

__all__ = [
    "DENSE_WEIGHT",
    "FACT_SECTIONS",
    "RETRIEVED_ID",
    "RRF_K",
    "DenseIndex",
    "Gate",
    "Ranking",
    "Retrieval",
    "RetrievalConfig",
    "Scope",
    "asks_about_the_past",
    "render_turn",
    "stored_vectors",
]

#: the id of the context message Retrieval places in the view
RETRIEVED_ID = "langmem_ext:retrieved"
Ranking = Literal["dense", "bm25", "hybrid"]
#: when the memory index is searched: ``"auto"`` (the question refers to the past, see
#: :func:`asks_about_the_past`), ``"always"``, or a function of the query
Gate = Literal["auto", "always"] | Callable[[str], bool]
DenseIndex = Literal["local", "store"]
Scope = Literal["thread", "user"]
Source = BaseRetriever | VectorStore
logger = logging.getLogger("langmem_ext")

#: Retrieval's fusion defaults (see ``rrf_k`` / ``dense_weight``)
RRF_K = 5
DENSE_WEIGHT = 2.0
#: compact packing: a retrieved turn whose user message has at least this many words comes back
#: as that message and the reply's sentences that share a word with the query (measured on CRI:
#: bench/retrieval.py)
_COMPACT_WORDS = 8
#: query vectors a Retrieval remembers (``Retrieval._query_vector``)
_QUERY_VECTORS = 32
#: ``prefetch_embeddings``: the view's oldest messages embedded ahead after a call, at most
_PREFETCH_MESSAGES = 8
#: ``prefetch_embeddings``: texts whose vectors wait for their turn to leave the view, at most
_PREFETCHED = 1_024
#: compact packing: a retrieved turn whose user message (under this many words) answers a
#: question the turn before ended with comes with that turn (measured on CRI and the planted
#: data: 12 to 20 words give the same figures, 30 loses CRI facts)
_ANSWER_WORDS = 16
#: how many results each ranking brings to the fusion when ``k`` is None (as many as fit)
_CANDIDATES = 60
#: the default context budget is the inner budget over this
_SHARE = 4

_KIND = "turns"
#: the namespace kind of the facts remembered from summaries (see ``FACT_SECTIONS``)
_FACTS = "facts"
#: summary sections whose lines are remembered as facts when a fold writes them
FACT_SECTIONS: tuple[str, ...] = ("facts", "profile")
#: the namespace kind of the change marks (see the module notes)
_MARKS = "turn_marks"
#: the key of the user's mark among the thread marks: "*" is percent-encoded in every label, so
#: it can never be a thread's key
_USER_MARK = "*"
_PAGE = 500
#: the page size of a whole-index load (few pages: a store pages by OFFSET, so small pages
#: make loading quadratic)
_LOAD_PAGE = 10_000
#: the namespace kind of the index blocks: the in-process indexes of a thread's turns, persisted
#: by turn-number range, so a fresh process loads a few large items instead of every turn
_BLOCKS = "turn_blocks"
#: turns per index block (a fresh process reads at most this many turns one by one)
_BLOCK = 512
#: index blocks asked for in the first batch of gets of a fresh load (then twice as many per
#: batch while all are there)
_BLOCK_GETS = 16
#: the key, among a thread's index blocks, of its tail: the keys of the turns after the blocks
#: (a block's key is a turn number: digits only)
_TAIL = "tail"
#: searches of one query at most: again while a result turns out gone from the store
_SEARCH_ROUNDS = 4
#: the store classes whose own vector search scales (an ANN index in the database): their
#: dense ranking stays in the store by default (``dense_index="store"``)
_ANN_STORES = frozenset({"PostgresStore", "AsyncPostgresStore"})
_OPEN, _CLOSE = "<retrieved_context>", "</retrieved_context>"
_HEADER = (
    "Retrieved for the latest message: earlier parts of this conversation that are no longer "
    "shown, and reference material. They may be incomplete or out of date."
)
_SPACE = re.compile(r"\s+")
#: ``gate="auto"``: what makes a question one about the past (English): the speaker or the
#: conversation referred to (first person, "did you say", memory words)
_PERSONAL = re.compile(
    r"\b(?:i|me|my|mine|myself|we|us|our|ours|ourselves|i['’](?:m|ve|d|ll)"
    r"|remember|remind|recall|mention(?:ed)?|told|earlier|previously|again|last time"
    r"|(?:did|have|had) you|you (?:said|suggested|recommended|mentioned|told|gave|wrote))\b",
    re.IGNORECASE,
)
#: a capitalised word that does not start a sentence: a name, to be looked up in the memory
_NAME = re.compile(r"(?<![.!?]\s)(?<!^)\b[A-Z][\w'’-]*")
#: a dense similarity this high is a match whatever the wording (bench/retrieval.py: small talk
#: after the CRI thread scores at most 0.58, planted facts' questions up to 0.86)
_STRONG = 0.6

_T = TypeVar("_T")
_Y = TypeVar("_Y")
_S = TypeVar("_S")
#: a sans-I/O flow of the index: yields batches of store operations (receiving their results)
#: and embedding steps (receiving the vectors)
_Io = Generator[Any, Any, _T]
#: what a write's mark names besides: (the first turn number it wrote, the keys it wrote), when
#: it wrote few enough turns to list them (a reader then fetches exactly those)
_Written = tuple[int, tuple[str, ...]]
#: what a thread mark says: (token of the last write, the next turn number, what it wrote)
_Mark = tuple[str, int, _Written | None]
#: a write lists its turns' keys in its mark up to this many
_LISTED = 64
#: how the token of a mark read from the store that is not one we wrote starts (ours are hex)
_FOREIGN = "foreign:"


#: Retrieval's plan: the inner plan's fold requests and its own I/O requests
_Flow = Plan


def _send(flow: Generator[_Y, _S, _T], value: _S | None) -> tuple[_Y | None, _T | None]:
    """One step of ``flow``: its next request (None once it is done) and, once done, its result.
    ``None`` starts a fresh flow."""
    try:
        return flow.send(value), None  # type: ignore[arg-type]
    except StopIteration as done:
        return None, done.value


# -- a busy store ---------------------------------------------------------------------------------

#: a store reporting itself busy (SQLite's "database is locked": another process writes the same
#: file) is asked again after 10 ms, then twice as long each time up to 0.5 s (with jitter),
#: for at most this many seconds in all; then its error is raised
BUSY_RETRY_SECONDS = 30.0
_BUSY_FIRST, _BUSY_MOST = 0.01, 0.5


def _is_busy(error: BaseException) -> bool:
    """Whether ``error`` (or what caused it: stores wrap the driver's errors) says the database
    is busy or locked by another connection: worth asking again."""
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if type(current).__name__ == "OperationalError":  # sqlite3's, and psycopg's for locks
            text = str(current).lower()
            if "locked" in text or "busy" in text:
                return True
        current = current.__cause__ or current.__context__
    return False


def _end_transaction(store: BaseStore) -> None:
    """After a busy error, the transaction ``SqliteStore`` left open (its ``COMMIT`` failed)
    rolled back, so the next attempt (or another thread's) can begin one."""
    conn = getattr(store, "conn", None)
    if isinstance(conn, sqlite3.Connection) and conn.in_transaction:
        lock = getattr(store, "lock", None)
        with lock if lock is not None else contextlib.nullcontext():
            if conn.in_transaction:
                with contextlib.suppress(sqlite3.Error):
                    conn.rollback()


class _BusyRetry:
    """What :func:`batch_retrying` and :func:`abatch_retrying` share: after a failed batch,
    the wait before the next attempt, or the error raised again (not a busy store, or the
    ``limit`` seconds spent)."""

    def __init__(self, store: BaseStore, limit: float | None) -> None:
        self.store = store
        self.delays = iter(_busy_delays(BUSY_RETRY_SECONDS if limit is None else limit))

    def wait_after(self, error: Exception) -> float:
        if not _is_busy(error):
            raise error
        _end_transaction(self.store)
        wait = next(self.delays, None)
        if wait is None:
            raise error
        logger.debug("langmem_ext: store busy (%s); again in %.3f s", error, wait)
        return wait


def _busy_delays(limit: float) -> Iterable[float]:
    """The waits between attempts: 10 ms doubling to 0.5 s, jittered, ``limit`` seconds in
    all."""
    spent, delay = 0.0, _BUSY_FIRST
    while spent < limit:
        wait = min(delay * (0.5 + random.random()), limit - spent)
        yield wait
        spent += wait
        delay = min(2 * delay, _BUSY_MOST)


def batch_retrying(store: BaseStore, ops: Sequence[Op], limit: float | None = None) -> list[Any]:
    """``store.batch(ops)``, asked again with a bounded backoff while the store reports itself
    busy (``BUSY_RETRY_SECONDS`` in all, then the error is raised). Safe for the batches
    Retrieval and the surfaces make: reads, and puts that write the same values again."""
    retry = _BusyRetry(store, limit)
    while True:
        try:
            return store.batch(ops)
        except Exception as error:
            time.sleep(retry.wait_after(error))


async def abatch_retrying(
    store: BaseStore, ops: Sequence[Op], limit: float | None = None
) -> list[Any]:
    """Async :func:`batch_retrying` (the waits do not block the event loop)."""
    retry = _BusyRetry(store, limit)
    while True:
        try:
            return await store.abatch(ops)
        except Exception as error:
            await asyncio.sleep(retry.wait_after(error))


def _throw(flow: Generator[_Y, _S, _T], error: Exception) -> tuple[_Y | None, _T | None]:
    """``error`` raised in ``flow`` at its ``yield``: its next request (it handled the error),
    or, once done, its result; an error it does not handle propagates."""
    try:
        return flow.throw(error), None
    except StopIteration as done:
        return None, done.value


# -- the requests Retrieval's plan makes ---------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Embed:
    """A step of an index flow: embed ``texts`` (documents, or one ``query``)."""

    texts: tuple[str, ...]
    query: bool = False


@dataclass(frozen=True)
class _StoreFlow(IoRequest, Generic[_T]):
    """Run ``flow`` (a sans-I/O generator of store operations, and of :class:`_Embed` steps
    answered by ``embeddings``) with ``batch`` / ``abatch``."""

    store: BaseStore
    flow: _Io[_T]
    writes: bool = False
    embeddings: Embeddings | None = None

    def run(self) -> _T:
        step, result = _send(self.flow, None)
        while step is not None:
            if isinstance(step, _Embed):
                answer: Any = (
                    self._embedder().embed_query(step.texts[0])
                    if step.query
                    else (self._embedder().embed_documents(list(step.texts)))
                )
            else:
                try:
                    answer = batch_retrying(self.store, step)
                except Exception as error:  # thrown into the flow (which may scan otherwise)
                    step, result = _throw(self.flow, error)
                    continue
            step, result = _send(self.flow, answer)
        return cast(_T, result)

    async def arun(self) -> _T:
        step, result = _send(self.flow, None)
        while step is not None:
            if isinstance(step, _Embed):
                embedder = self._embedder()
                answer: Any = (
                    await embedder.aembed_query(step.texts[0])
                    if step.query
                    else await embedder.aembed_documents(list(step.texts))
                )
            else:
                try:
                    answer = await abatch_retrying(self.store, step)
                except Exception as error:  # thrown into the flow (which may scan otherwise)
                    step, result = _throw(self.flow, error)
                    continue
            step, result = _send(self.flow, answer)
        return cast(_T, result)

    def _embedder(self) -> Embeddings:
        assert self.embeddings is not None, "an index flow asked to embed without embeddings"
        return self.embeddings


class _TimedOut:
    """A source's outcome when it did not answer within ``source_timeout``."""


_TIMED_OUT = _TimedOut()
#: what one knowledge source gave: its documents, the exception it raised, or _TIMED_OUT
_SourceOutcome = list[Document] | BaseException | _TimedOut


def _search(source: Source, query: str, k: int) -> list[Document]:
    if isinstance(source, VectorStore):
        return source.similarity_search(query, k=k)
    return source.invoke(query)


async def _asearch(source: Source, query: str, k: int) -> list[Document]:
    if isinstance(source, VectorStore):
        return await source.asimilarity_search(query, k=k)
    return await source.ainvoke(query)


@dataclass(frozen=True)
class _SourceSearch(IoRequest):
    """Ask every knowledge source for ``query`` at once, each within ``timeout`` seconds; the
    answer is each source's outcome, in order. A slow source never holds the turn."""

    sources: Sequence[Source]
    query: str
    k: int
    timeout: float

    def run(self) -> list[_SourceOutcome]:
        if not self.sources:
            return []
        pool = concurrent.futures.ThreadPoolExecutor(
            max_workers=len(self.sources), thread_name_prefix="langmem_ext-source"
        )
        try:
            futures = [pool.submit(_search, s, self.query, self.k) for s in self.sources]
            done, _ = concurrent.futures.wait(futures, timeout=self.timeout)
            return [(f.exception() or f.result()) if f in done else _TIMED_OUT for f in futures]
        finally:
            pool.shutdown(wait=False, cancel_futures=True)

    async def arun(self) -> list[_SourceOutcome]:
        searches = (
            asyncio.wait_for(_asearch(s, self.query, self.k), self.timeout) for s in self.sources
        )
        outcomes = await asyncio.gather(*searches, return_exceptions=True)
        for outcome in outcomes:
            if isinstance(outcome, BaseException) and not isinstance(outcome, Exception):
                raise outcome  # cancellation and the like are not a source's failure
        return [_TIMED_OUT if isinstance(o, asyncio.TimeoutError) else o for o in outcomes]


@dataclass(frozen=True)
class _Together(IoRequest):
    """Two reads at once (concurrently under ``arun``); the answer is both answers."""

    first: IoRequest
    second: IoRequest

    def run(self) -> tuple[Any, Any]:
        return self.first.run(), self.second.run()

    async def arun(self) -> tuple[Any, Any]:
        first, second = await asyncio.gather(self.first.arun(), self.second.arun())
        return first, second


# -- turns as text ---------------------------------------------------------------------------------


def asks_about_the_past(query: str, known: Callable[[str], bool] | None = None) -> bool:
    """``gate="auto"``'s reading of a question (English): whether it may need the conversation's
    past. True when it refers to the speaker or the conversation (I, my, we, "did you say",
    "remember", "earlier", ...), or names something the memory holds (a capitalised word for
    which ``known(token)`` is true; every name counts without ``known``). A query with no
    English function word at all is not read (True: searched as always).

    >>> asks_about_the_past("what is the capital of Australia?", known=lambda w: False)
    False
    >>> asks_about_the_past("Where did I park the car?")
    True
    >>> asks_about_the_past("Who is Elena?", known=lambda w: w == "elena")
    True
    """
    words = re.findall(r"\w+", query.lower())
    if not any(w in STOP_WORDS for w in words):
        return True  # not English (or no sentence): no reading, no gate
    if _PERSONAL.search(query):
        return True
    names = [n.lower() for n in _NAME.findall(query.strip())]
    return any(known is None or any(known(t) for t in tokenize(n)) for n in names)


def _text(message: BaseMessage) -> str:
    content = message.content
    if isinstance(content, str):
        return content
    parts = [
        str(block.get("text", "")) if isinstance(block, dict) else str(block) for block in content
    ]
    return " ".join(p for p in parts if p)


def render_turn(messages: Sequence[BaseMessage]) -> str:
    """A turn as plain text: ``user: ...``, ``assistant: ...``, tool calls and results."""
    lines: list[str] = []
    for m in messages:
        body = _text(m).strip()
        if isinstance(m, HumanMessage):
            lines.append(f"user: {body}")
        elif isinstance(m, AIMessage):
            if body:
                lines.append(f"assistant: {body}")
            for call in m.tool_calls:
                lines.append(f"assistant called {call['name']}({call['args']})")
        elif isinstance(m, ToolMessage):
            lines.append(f"tool {m.name or ''} result: {body}".replace("  ", " "))
        elif body:
            lines.append(f"{m.type}: {body}")
    return "\n".join(lines)


_BULLET = re.compile(r"^\s*(?:[-*•]|\d{1,3}[.)])\s+")


def _fact_lines(text: str) -> list[str]:
    """The lines of a summary section worth remembering one by one: bullets stripped, at least
    three words, distinct."""
    lines = (_BULLET.sub("", line).strip() for line in text.splitlines())
    return list(dict.fromkeys(line for line in lines if len(line.split()) >= 3))


def _fact_key(line: str) -> str:
    """The store key of a fact: a digest of its normalised text (writing it again is the same
    item)."""
    return hashlib.blake2b(_normal(line).encode(), digest_size=12).hexdigest()


def _summary_facts(state: MemoryState) -> dict[str, tuple[str, str]]:
    """The facts of a state's summary: key -> (section, line)."""
    return {
        _fact_key(line): (name, line)
        for name, text in state.summary
        if name in FACT_SECTIONS
        for line in _fact_lines(text)
    }


def _last_human(messages: Sequence[BaseMessage]) -> int | None:
    """The position of the newest HumanMessage, or None."""
    return next(
        (i for i in range(len(messages) - 1, -1, -1) if isinstance(messages[i], HumanMessage)),
        None,
    )


def _turn_groups(messages: Sequence[BaseMessage], start: int, stop: int) -> list[list[int]]:
    """The positions ``start..stop-1`` grouped into turns (each from a HumanMessage; a first
    group may start inside a turn)."""
    groups: list[list[int]] = []
    for i in range(start, stop):
        if isinstance(messages[i], HumanMessage) or not groups:
            groups.append([i])
        else:
            groups[-1].append(i)
    return groups


def _parts_of(op: PutOp) -> list[str]:
    """The texts a turn write embeds, one vector each: its messages (``parts``), or its text
    (older writes, or ``parts`` that are not a list of strings: a damaged value is re-derived
    from the text, never iterated character by character)."""
    value = op.value or {}
    parts = value.get("parts")
    if isinstance(parts, list) and parts and all(type(p) is str for p in parts):
        return list(parts)
    return [_text_of(value)]


def _text_of(value: Mapping[str, Any]) -> str:
    """A stored turn's text as BM25 reads it: ``text``, or (a damaged or foreign value) its
    ``parts`` joined, or nothing."""
    text = value.get("text")
    if isinstance(text, str):
        return text
    parts = value.get("parts")
    if isinstance(parts, list) and all(type(p) is str for p in parts):
        return "\n".join(parts)
    return ""


def _seq_of(value: Mapping[str, Any]) -> int | None:
    """A stored turn's number: ``seq``, else (damaged: a string, NaN, a list ...) the one its
    ``order`` spells; None when neither is readable (the turn is indexed all the same, shown
    as turn 0)."""
    seq = value.get("seq")
    if _is_int(seq, 0):
        return cast(int, seq)
    order = value.get("order")
    if isinstance(order, str) and len(order) == 12 and order.isascii() and order.isdigit():
        return int(order)
    return None


def _with_vectors(ops: Sequence[PutOp], model: str | None = None) -> _Io[list[PutOp]]:
    """``ops`` with the vectors of their messages stored in their values (each distinct text
    embedded once, in one step), marked with the embedding ``model`` that made them."""
    texts = tuple(dict.fromkeys(p for op in ops for p in _parts_of(op)))
    vectors = dict(zip(texts, (yield _Embed(texts)), strict=True))
    return [
        op._replace(
            value={
                **(op.value or {}),
                "vectors": _encode_vectors([vectors[p] for p in _parts_of(op)], model),
            }
        )
        for op in ops
    ]


def _embedded(op: PutOp) -> set[str]:
    return set(_parts_of(op))


def _distinct_texts(ops: Sequence[PutOp]) -> list[list[PutOp]]:
    """The writes split so that no batch embeds the same text twice: ``InMemoryStore.batch``
    fails when one batch embeds a text twice (langchain-ai/langgraph#8822)."""
    batches: list[list[PutOp]] = []
    texts: list[set[str]] = []
    for op in ops:
        mine = _embedded(op)
        for batch, seen in zip(batches, texts, strict=True):
            if seen.isdisjoint(mine):
                batch.append(op)
                seen.update(mine)
                break
        else:
            batches.append([op])
            texts.append(set(mine))
    return batches


def _parts(messages: Sequence[BaseMessage]) -> list[str]:
    """Each message of a turn rendered alone (distinct, non-empty): what the dense index embeds,
    one vector per message (a search scores a turn by its best message), and what compact
    packing chooses from."""
    return list(dict.fromkeys(p for p in (render_turn([m]) for m in messages) if p.strip()))


_SENTENCE = re.compile(r"(?<=[.!?])\s+")
#: a question about what the assistant said ("what did you suggest?"): replies come back whole
_ASKS_ASSISTANT = re.compile(r"\b(?:you|your|yours|you['’](?:d|ve|ll|re))\b", re.IGNORECASE)


def _user_words(parts: Sequence[str]) -> int:
    """How many words a turn's user message(s) have."""
    return sum(_words(p) - 1 for p in parts if p.startswith("user: "))


@functools.lru_cache(maxsize=4_096)
def _words(part: str) -> int:
    return len(part.split())


def _compact(parts: Sequence[str], min_words: int, terms: frozenset[str]) -> str | None:
    """A retrieved turn as packed: its user message(s) whole, and of each other message only
    the sentences that share a word with the query (``terms``), when the user messages say
    enough (at least ``min_words`` words) and the turn has no tool round (a call and its
    results come back together or not at all); None: the whole turn."""
    if not parts or any(p.startswith(("assistant called", "tool ")) for p in parts):
        return None
    users = [p for p in parts if p.startswith("user: ")]
    if _user_words(parts) < min_words:
        return None
    kept: list[str] = []
    for p in parts:
        if p in users:
            kept.append(p)
            continue
        role, sentences = _sentences(p)
        hits = [s for s, words in sentences if not terms.isdisjoint(words)]
        if len(hits) == len(sentences):
            kept.append(p)
        elif hits:
            kept.append(f"{role}: … " + " … ".join(hits))
    return None if kept == list(parts) else "\n".join(kept)


@functools.lru_cache(maxsize=4_096)
def _sentences(part: str) -> tuple[str, tuple[tuple[str, frozenset[str]], ...]]:
    """A message part's role and its sentences, each with its words (``tokenize``): what
    ``_compact`` matches against a query's terms. Cached: the turns a thread retrieves come
    back turn after turn, each query with other terms."""
    role, _, body = part.partition(": ")
    return role, tuple((s, frozenset(tokenize(s))) for s in _SENTENCE.split(body))


@functools.lru_cache(maxsize=8_192)
def _normal(text: str) -> str:
    """``text`` for comparing contents (the same turns come back call after call: cached)."""
    return _SPACE.sub(" ", text).strip().lower()


def _same(original: BaseMessage, shown: BaseMessage) -> bool:
    """Whether ``shown`` (a view message) is ``original`` as the inner strategy showed it:
    the same object, the same id, or an id-less message of the same type with the same content
    or clipped to fit (the clip records ``clipped_from_tokens``)."""
    if original is shown:
        return True
    if original.id or shown.id:
        return bool(original.id) and original.id == shown.id
    if type(original) is not type(shown):
        return False
    meta = shown.response_metadata.get("langmem_ext")
    clipped = isinstance(meta, dict) and "clipped_from_tokens" in meta
    return clipped or fingerprint(original) == fingerprint(shown)


# -- the change marks ------------------------------------------------------------------------------


def _token_of(item: Item | None) -> str | None:
    """A mark's token as read from the store; a foreign value reads as a token that matches
    nothing we wrote."""
    if item is None:
        return None
    token = item.value.get("token")
    return token if isinstance(token, str) else f"{_FOREIGN}{item.value!r}"


def _mark_of(item: Item | None) -> _Mark | None:
    """A thread mark as read from the store; a foreign value reads as a mark that matches
    nothing and starts at turn 0 (so the thread is reloaded, never skipped)."""
    if item is None:
        return None
    token, following = item.value.get("token"), item.value.get("next")
    if not isinstance(token, str) or not isinstance(following, int) or following < 0:
        return (f"{_FOREIGN}{item.value!r}", 0, None)
    first, keys = item.value.get("first"), item.value.get("keys")
    written: _Written | None = None
    if isinstance(first, int) and isinstance(keys, list) and all(isinstance(k, str) for k in keys):
        written = (first, tuple(keys))
    return (token, following, written)


def _is_stale(mark: _Mark | None, known: int) -> bool:
    """Whether a thread's ``mark`` announces fewer turns than ``known``, the turns the caller's
    state says were indexed (``MemoryState.indexed_turns``): the mark, and the tail and blocks
    written with it, were put back as they were before those turns (a restored backup, a
    replica that lags) or another numbering wrote last (a fork). The turns are stored all the
    same: the tail is not trusted to list them, they are scanned for. A foreign mark is not
    stale (it already counts for nothing: see ``_mark_of``)."""
    return mark is not None and not mark[0].startswith(_FOREIGN) and mark[1] < known


def _order(seq: int) -> str:
    """A turn number as a string that sorts like the number. The catch-up filters on it with
    ``$gte``, and ``PostgresStore`` compares ``$gte`` as text (``value->>'seq' >= '9'``, so 10
    sorts before 9): zero-padded strings compare the same as text and as values everywhere."""
    return f"{seq:012d}"


# -- the parameters --------------------------------------------------------------------------------


def _is_int(value: object, minimum: int) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= minimum


def _is_positive(value: object) -> bool:
    """A finite number > 0 (not a bool, not NaN)."""
    return (
        isinstance(value, (int, float))
        and not isinstance(value, bool)
        and math.isfinite(value)
        and value > 0
    )


def _check_int(name: str, value: object, minimum: int, fix: str) -> None:
    if not _is_int(value, minimum):
        raise ValueError(f"Retrieval: {name} must be an integer >= {minimum}, got {value!r}; {fix}")


def _check_inner(inner: object) -> None:
    if not isinstance(inner, Strategy) or isinstance(inner, Retrieval):
        raise TypeError(
            f"Retrieval wraps one langmem_ext strategy (TokenBudget, SummaryBuffer, ...), got "
            f"{type(inner).__name__}"
        )


def _has_index(store: object) -> bool:
    """Whether ``store`` embeds what it stores (a dense ranking is possible)."""
    return getattr(store, "index_config", None) is not None


def _check_store(store: object) -> None:
    if not isinstance(store, BaseStore):
        raise TypeError(
            f"Retrieval: store must be a LangGraph BaseStore (InMemoryStore, SqliteStore, "
            f"PostgresStore, ...), got {type(store).__name__}"
        )


def _check_index(store: BaseStore, ranking: Ranking, embeddings: object) -> None:
    if ranking != "bm25" and not _has_index(store) and embeddings is None:
        raise ValueError(
            f"ranking={ranking!r} needs embeddings: pass embeddings= (any LangChain "
            "Embeddings), or a store with a vector index, e.g. "
            "InMemoryStore(index={'dims': 384, 'embed': embeddings}); this store has none "
            "(or use ranking='bm25')"
        )
    if embeddings is not None and not isinstance(embeddings, Embeddings):
        raise TypeError(
            f"Retrieval: embeddings must be a LangChain Embeddings, got {type(embeddings).__name__}"
        )


def _dense_index(
    store: BaseStore, ranking: Ranking, given: object, embeddings: Embeddings | None
) -> tuple[DenseIndex, Embeddings | None]:
    """Where the dense ranking runs, and the embeddings a local index uses: ``"store"`` keeps
    it in a store whose search scales (PostgreSQL with pgvector), ``"local"`` everywhere else
    (an in-process :class:`~.vectors.VectorIndex`, embedding with ``embeddings``
    or the store's own model)."""
    if given is None:
        ann = type(store).__name__ in _ANN_STORES and _has_index(store) and embeddings is None
        given = "store" if ann else "local"
    if given not in ("local", "store"):
        raise ValueError(f"Retrieval: dense_index must be 'local' or 'store', got {given!r}")
    if given == "store":
        if embeddings is not None:
            raise ValueError(
                "Retrieval: dense_index='store' searches with the store's own embeddings; "
                "drop embeddings= or use dense_index='local'"
            )
        if ranking != "bm25" and not _has_index(store):
            raise ValueError(
                "Retrieval: dense_index='store' needs a store with a vector index (index=...)"
            )
        return "store", None
    if ranking == "bm25":
        return "local", None
    return "local", embeddings if embeddings is not None else getattr(store, "embeddings", None)


_BUDGET_WHY = "it is what the retrieved-context message may cost"


def _default_share(inner: object) -> int:
    """The context budget when none is given: a quarter of the inner strategy's ``max_tokens``
    (measured on CRI, bench/retrieval.py: at a 4,500-token request, 1,125 tokens of evidence
    find more than 600 of it, and more than the 4,500-token view alone), else 600."""
    limit = getattr(getattr(inner, "config", None), "max_tokens", None)
    return max(limit // _SHARE, 1) if isinstance(limit, int) else 600


def _retrieved_budget(
    given: int | None, alias: int | None, inner: object = None
) -> tuple[int, str]:
    """The context budget and the name it was given under: ``max_tokens`` is the deprecated
    alias of ``max_retrieved_tokens`` (the inner strategy's ``max_tokens`` is the budget of
    the whole request: one name for two budgets misled)."""
    if alias is None:
        return (_default_share(inner) if given is None else given), "max_retrieved_tokens"
    if given is not None:
        raise TypeError(
            "Retrieval: pass max_retrieved_tokens only (max_tokens is its deprecated "
            f"alias), got both: max_retrieved_tokens={given!r}, max_tokens={alias!r}"
        )
    warnings.warn(
        "Retrieval(max_tokens=...) is deprecated: it is the retrieved context's budget, "
        "not the request's; use max_retrieved_tokens=",
        DeprecationWarning,
        stacklevel=3,  # the caller of Retrieval(...)
    )
    _check_int("max_tokens", alias, 1, _BUDGET_WHY)
    return alias, "max_tokens"


def _check_room(inner: Strategy, name: str, tokens: int) -> None:
    """The retrieved context's budget is held back from the inner budget (like a reserve):
    refuse one that leaves the inner view nothing, naming *this* parameter (the inner strategy
    would otherwise blame its own ``reserve_tokens`` at the first ``apply``)."""
    config = getattr(inner, "config", None)
    limit = getattr(config, "max_tokens", None)
    if not isinstance(limit, int):
        return  # no token budget (SlidingWindow): nothing to hold back from
    margin = float(getattr(config, "safety_margin", 0.0))
    reserve = int(getattr(config, "reserve_tokens", 0))
    strategy = type(inner).__name__
    room = math.floor(limit * (1.0 - margin)) - reserve
    if tokens >= room:
        raise ValueError(
            f"Retrieval: {name} ({tokens:,}) is held back from the inner budget, and "
            f"{strategy}(max_tokens={limit:,}) leaves {room:,} tokens for the view after its "
            f"safety_margin and reserve_tokens: nothing would be left for the conversation. "
            f"Lower {name} (e.g. {max(room // 4, 1):,}) or raise {strategy}'s max_tokens"
        )


@dataclass(frozen=True, slots=True)
class RetrievalConfig:
    """Retrieval's parameters, checked once on construction: a bad value never waits for the
    first turn, and each error names the parameter, the value and the fix.

    The fields mean what :class:`Retrieval`'s keywords of the same names mean. ``ranking`` is
    the resolved ranking (``Retrieval`` picks hybrid or BM25 from its store); ``source_k`` and
    ``candidates`` stay ``None`` when not given (see :attr:`max_passages` and
    :attr:`per_ranking` for what they resolve to). ``sources`` is kept as a tuple.
    """

    k: int | None = None
    max_retrieved_tokens: int = 600
    min_query_length: int = 3
    gate: Gate = "auto"
    sources: Sequence[Source] = ()
    scope: Scope = "thread"
    ranking: Ranking = "bm25"
    neighbors: int = 0
    query_messages: int = 0
    key: MemoryKey | None = None
    shared_default: bool = False
    source_k: int | None = None
    source_timeout: float = 5.0
    candidates: int | None = None
    neighbor_chars: int = 600
    rrf_k: int = RRF_K
    dense_weight: float = DENSE_WEIGHT
    compact: bool = True
    min_score: float | None = None

    def __post_init__(self) -> None:
        self._check_sizes()
        self._check_choices()
        self._check_owner()
        self._check_sources()
        self._check_fusion()

    @property
    def max_turns(self) -> int:
        """At most this many evicted turns per view: ``k``, else as many as the fusion brings
        (the budget decides)."""
        return self.per_ranking if self.k is None else self.k

    @property
    def max_passages(self) -> int:
        """At most this many passages from the sources per view: ``source_k``, else ``k``
        (5 when ``k`` is None)."""
        if self.source_k is not None:
            return self.source_k
        return 5 if self.k is None else self.k

    @property
    def per_ranking(self) -> int:
        """How many results each ranking brings to the fusion: ``candidates``, else ``4 * k``
        (60 when ``k`` is None)."""
        if self.candidates is not None:
            return self.candidates
        return _CANDIDATES if self.k is None else 4 * self.k

    def _check_sizes(self) -> None:
        if self.k is not None:
            _check_int(
                "k",
                self.k,
                1,
                "it is how many evicted turns a view may bring back (None: the budget decides)",
            )
        _check_int("max_retrieved_tokens", self.max_retrieved_tokens, 1, _BUDGET_WHY)
        for name in ("min_query_length", "neighbors", "query_messages", "neighbor_chars"):
            _check_int(name, getattr(self, name), 0, "0 turns the feature off")
        if self.neighbors > 1:
            raise ValueError(
                f"Retrieval: neighbors must be 0 (the turns alone) or 1 (each with the turn "
                f"before it), got {self.neighbors}"
            )
        if self.source_k is not None:
            _check_int("source_k", self.source_k, 0, "or None for k (0: no passages)")
        if self.candidates is not None:
            _check_int("candidates", self.candidates, 1, "or None for 4 * k (60 when k is None)")
        if self.min_score is not None and not (
            isinstance(self.min_score, (int, float))
            and not isinstance(self.min_score, bool)
            and -1.0 <= self.min_score <= 1.0
        ):
            raise ValueError(
                f"Retrieval: min_score must be a similarity between -1 and 1 or None, got "
                f"{self.min_score!r}"
            )
        if not isinstance(self.compact, bool):
            raise TypeError(f"Retrieval: compact must be a bool, got {type(self.compact).__name__}")

    def _check_choices(self) -> None:
        if not callable(self.gate) and self.gate not in ("auto", "always"):
            raise ValueError(
                f"Retrieval: gate must be 'auto', 'always' or a function of the query, got "
                f"{self.gate!r}"
            )
        if self.scope not in ("thread", "user"):
            raise ValueError(f"Retrieval: scope must be 'thread' or 'user', got {self.scope!r}")
        if self.ranking not in ("dense", "bm25", "hybrid"):
            raise ValueError(
                f"Retrieval: ranking must be 'dense', 'bm25' or 'hybrid', got {self.ranking!r}"
            )

    def _check_owner(self) -> None:
        if self.key is not None and not isinstance(self.key, MemoryKey):
            raise TypeError(f"Retrieval: key must be a MemoryKey, got {type(self.key).__name__}")
        if not isinstance(self.shared_default, bool):
            raise TypeError(
                "Retrieval: shared_default must be a bool, got "
                f"{type(self.shared_default).__name__}"
            )

    def _check_sources(self) -> None:
        sources = self.sources
        if isinstance(sources, (BaseRetriever, VectorStore, str, bytes)) or not isinstance(
            sources, Iterable
        ):
            raise TypeError(
                f"Retrieval: sources must be a list of BaseRetriever / VectorStore, got "
                f"{type(sources).__name__}; wrap a single source in a list: sources=[source]"
            )
        object.__setattr__(self, "sources", tuple(sources))
        for source in self.sources:
            if not isinstance(source, (BaseRetriever, VectorStore)):
                raise TypeError(
                    f"a source must be a BaseRetriever or a VectorStore, got "
                    f"{type(source).__name__}"
                )
        if not _is_positive(self.source_timeout):
            raise ValueError(
                "Retrieval: source_timeout must be a finite number > 0, got "
                f"{self.source_timeout!r}; it is how many seconds a source may take"
            )
        object.__setattr__(self, "source_timeout", float(self.source_timeout))

    def _check_fusion(self) -> None:
        if not _is_int(self.rrf_k, 0):
            raise ValueError(
                f"rrf_k must be an integer >= 0, got {self.rrf_k!r}; the default {RRF_K} lets a "
                "confident first place win"
            )
        if not _is_positive(self.dense_weight):
            raise ValueError(
                f"dense_weight must be > 0, got {self.dense_weight!r}; it must be a finite number "
                f"(the default {DENSE_WEIGHT} makes hybrid dense-led)"
            )
        object.__setattr__(self, "dense_weight", float(self.dense_weight))


@dataclass(frozen=True, slots=True)
class _Candidate:
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


def _turn_candidate(
    uid: str, value: dict[str, Any], prev: bool, score: float | None = None
) -> _Candidate:
    """A stored turn (its value) as a candidate; ``prev`` keeps the turn before (packing and
    neighbours use it)."""
    return _Candidate(
        uid=uid,
        text=_text_of(value),
        kind="turn",
        seq=_seq_of(value) or 0,
        prev=str(value.get("prev", "")) if prev else "",
        ids=_strings(value.get("ids")),
        parts=_strings(value.get("parts")),
        score=None if score is None else float(score),
    )


def _strings(value: object) -> Sequence[str]:
    """A stored list of strings as a candidate holds it: the stored list itself (no copy: a
    held turn is then one new object, see ``_Lexical.turns``; nothing changes it), else
    (a foreign or damaged value) its items as strings."""
    if not isinstance(value, list | tuple):
        return ()
    if isinstance(value, list) and all(type(v) is str for v in value):
        return value
    return tuple(str(v) for v in value)


def _scored(turn: _Candidate, score: float | None) -> _Candidate:
    """A held turn with this search's score (the held one is shared: never changed)."""
    c = turn
    return _Candidate(c.uid, c.text, c.kind, c.seq, c.prev, c.ids, c.source, c.parts, score)


def _encode_vectors(vectors: Sequence[Sequence[float]], model: str | None = None) -> dict[str, Any]:
    """A turn's vectors as stored with it: normalised (cosine is all that is used, and a unit
    vector fits float16 whatever the model's scale), float16, base64 (2 bytes a dimension;
    cosine ranking does not notice the rounding), so a fresh process loads them instead of
    embedding again. ``model`` (the embedding model's identity, see ``_model_id``) is stored
    beside them: vectors of another model are re-embedded, never compared with this one's."""
    rows = np.asarray(vectors, dtype=np.float64)
    norms = np.linalg.norm(rows, axis=1, keepdims=True)
    unit = np.divide(rows, norms, out=np.zeros_like(rows), where=norms > 0).astype("<f2")
    value: dict[str, Any] = {
        "dims": int(unit.shape[1]),
        "f16": pybase64.b64encode(unit.tobytes()).decode("ascii"),
    }
    if model is not None:
        value["model"] = model
    return value


def _model_id(embeddings: Embeddings | None) -> str | None:
    """The identity of an embedding model as stored with its vectors: its class and the model
    name it reports (``model`` / ``model_name`` / ``model_id``), e.g.
    ``"langchain_openai.embeddings.base.OpenAIEmbeddings:text-embedding-3-small"``. Two models
    of the same dimensions are still two spaces: vectors are compared within one only."""
    if embeddings is None:
        return None
    embeddings = _unwrapped(embeddings)
    kind = type(embeddings)
    name = next(
        (
            value
            for attr in ("model", "model_name", "model_id")
            if isinstance(value := getattr(embeddings, attr, None), str) and value
        ),
        "",
    )
    return f"{kind.__module__}.{kind.__qualname__}" + (f":{name}" if name else "")


#: where a wrapper of an embedding model keeps the model it wraps (LangChain's
#: ``CacheBackedEmbeddings.underlying_embeddings``, and the usual names of one's own wrappers)
_WRAPPED_ATTRS = ("underlying_embeddings", "inner", "_inner", "wrapped", "embeddings")


def _unwrapped(embeddings: Embeddings) -> Embeddings:
    """The model under wrappers that only add caching, timing or retries: a wrapper gives the
    same vectors as the model it wraps, so it must not make stored vectors look foreign (every
    turn would be embedded again). At most 8 levels."""
    for _ in range(8):
        inner = next(
            (
                value
                for attr in _WRAPPED_ATTRS
                if (value := getattr(embeddings, attr, None)) is not None
                and value is not embeddings
                and callable(getattr(value, "embed_query", None))
            ),
            None,
        )
        if inner is None:
            break
        embeddings = inner
    return embeddings


def stored_vectors(
    stored: object, *, dims: int | None = None, model: str | None = None
) -> np.ndarray[Any, Any] | None:
    """The vectors stored with a turn (``item.value["vectors"]``: one row per message, float16
    in the store), as float32 rows; None when absent or unreadable: damaged (not base64, a
    length ``dims`` does not divide, ``dims`` not an integer, NaN or infinity) or foreign (not
    ``dims`` dimensions, or stored by another ``model`` than the one given). What the local
    dense index searches, for recomputing its scores. Takes the item's value or its
    ``"vectors"``."""
    found = _stored_bytes(stored, dims=dims, model=model)
    if found is None:
        return None
    width, raw = found
    return np.frombuffer(raw, dtype="<f2").reshape(-1, width).astype(np.float32)


def _stored_bytes(
    stored: object, *, dims: int | None = None, model: str | None = None
) -> tuple[int, bytes] | None:
    """The dimensions and the float16 bytes of the vectors stored with a turn (its value or its
    ``"vectors"``), checked (see ``stored_vectors``); None when absent, unreadable or
    foreign."""
    if isinstance(stored, dict) and "vectors" in stored:
        stored = stored["vectors"]
    if not isinstance(stored, dict):
        return None
    width, data = stored.get("dims"), stored.get("f16")
    if not isinstance(width, int) or not _is_int(width, 1) or not isinstance(data, str):
        return None
    if dims is not None and width != dims:
        return None  # another model's (or a damaged count that still divides the data)
    if model is not None and "model" in stored and stored["model"] != model:
        return None
    raw = _b64decode(data)
    if not raw or len(raw) % (2 * width):
        return None
    if not np.isfinite(np.frombuffer(raw, dtype="<f2")).all():
        return None
    return width, raw


def _b64(array: np.ndarray[Any, Any]) -> str:
    return pybase64.b64encode(np.ascontiguousarray(array).tobytes()).decode("ascii")


def _b64decode(text: str) -> bytes | None:
    """Strict base64, None for anything else: pybase64's SIMD decoder, 6x faster than the
    standard library's on the megabytes of index blocks a fresh process reads (41 vs 247 ms
    for 74 MB here). The length check stays as a second guard (a skipped character shortens
    the output)."""
    if len(text) % 4:
        return None
    try:
        raw = pybase64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        return None
    padding = 2 if text.endswith("==") else 1 if text.endswith("=") else 0
    return raw if len(raw) == len(text) // 4 * 3 - padding else None


def _unb64(value: object, dtype: str) -> np.ndarray[Any, Any] | None:
    if not isinstance(value, str) or (raw := _b64decode(value)) is None:
        return None
    size = np.dtype(dtype).itemsize
    return np.frombuffer(raw, dtype=dtype) if len(raw) % size == 0 else None


def _encode_block(
    items: Sequence[Item], first: int, dense: bool, model: str | None = None
) -> dict[str, Any] | None:
    """An index block: the turns numbered ``first`` to ``first + _BLOCK - 1`` (``items``, every
    item stored with those numbers) as BM25 postings and (``dense``) their stored vectors, by
    key, marked with the embedding ``model``. None when a turn has no vectors of that model to
    copy (written before they were kept, damaged, or another model's)."""
    items = sorted(items, key=lambda it: (_seq_of(it.value) or 0, it.key))
    postings = encode_postings(_text_of(it.value) for it in items)
    value: dict[str, Any] = {
        "v": 1,
        "first": first,
        "size": _BLOCK,
        "keys": [it.key for it in items],
        "bm25": {
            "vocab": postings.vocab,
            "ptr": _b64(postings.ptr.astype("<i4")),
            "ids": _b64(postings.ids.astype("<i4")),
            "tfs": _b64(postings.tfs.astype("<i4")),
        },
    }
    if dense:
        rows = [stored_vectors(it.value, model=model) for it in items]
        if any(r is None for r in rows):
            return None
        blocks = [cast(np.ndarray, r) for r in rows]
        dims = {b.shape[1] for b in blocks}
        if len(dims) > 1:
            return None
        # "rows", not "vectors": a block must never read as a turn's stored vectors
        value["rows"] = {
            "dims": dims.pop() if dims else 0,
            "counts": _b64(np.asarray([len(b) for b in blocks], dtype="<i4")),
            "i8": _b64(_int8_codes(np.concatenate(blocks)) if blocks else np.zeros(0, "i1")),
        }
        if model is not None:
            value["rows"]["model"] = model
    return value


def _int8_codes(rows: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    """Each row as int8 codes, scaled so that its largest value is 127: half the bytes of
    float16, and the scale is not kept (the dense index compares directions only). The codes
    are close (about 0.001 of a cosine), not exact: a search reads the rows it finds back from
    their turns before ranking them (see ``Retrieval._held_io``)."""
    rows = rows.astype(np.float32)
    peak = np.abs(rows).max(axis=1, keepdims=True)
    scale = np.divide(127.0, peak, out=np.zeros_like(peak), where=peak > 0)
    codes: np.ndarray[Any, Any] = np.rint(rows * scale).astype("i1")
    return codes


def _block_rows(item: Item | None) -> tuple[int, int]:
    """How many vector rows an index block holds, and of how many dimensions, from the length
    of its text (nothing decoded); (0, 0) when it holds none that could be read."""
    rows = item.value.get("rows") if isinstance(item, Item) else None
    if not isinstance(rows, dict) or not _is_int(rows.get("dims"), 1):
        return 0, 0
    data, dims = rows.get("i8"), int(rows["dims"])
    size = 1
    if not isinstance(data, str):
        data, size = rows.get("f16"), 2
    if not isinstance(data, str):
        return 0, 0
    return len(data) // 4 * 3 // (size * dims), dims


def _kept_by(where: Mapping[str, Any], value: Mapping[str, Any]) -> bool:
    """Whether a stored turn passes a scan's filter on its ``order`` (``$gte`` / ``$lt``), as
    applied here when the store could not; a turn whose number cannot be read passes."""
    seq = _seq_of(value)
    if seq is None:
        return True
    order, bounds = _order(seq), where.get("order", {})
    low, high = bounds.get("$gte"), bounds.get("$lt")
    return (low is None or order >= low) and (high is None or order < high)


def _hoped(following: int) -> int:
    """The first turn number that the index blocks of a thread whose next turn is ``following``
    leave out when every block that can count does (see ``Retrieval._load_blocks``)."""
    return len(range(0, max(following - _BLOCK, 0), _BLOCK)) * _BLOCK


class _Tail(NamedTuple):
    """A thread's tail as read back (see ``_tail_value``)."""

    #: the highest next turn number any write of the thread announced (every numbering)
    high: int
    #: (turn number, key) of the turns after the blocks
    pairs: list[tuple[int, str]]


def _read_tail(item: Item | None, mark: _Mark | None) -> _Tail | None:
    """A thread's tail, when it is the one the write that left ``mark`` (the thread's mark)
    wrote; None when it is absent, not one this version wrote, or another write's (a write
    since that left none: an older version's; a lost update)."""
    value = item.value if isinstance(item, Item) else None
    if not isinstance(value, dict) or value.get("v") != 1 or not _is_int(value.get("high"), 0):
        return None
    if mark is None or value.get("token") != mark[0]:
        return None
    seqs, keys = value.get("seqs"), value.get("keys")
    if not isinstance(seqs, list) or not isinstance(keys, list) or len(seqs) != len(keys):
        return None
    if not all(_is_int(n, 0) for n in seqs) or not all(isinstance(k, str) for k in keys):
        return None
    return _Tail(int(value["high"]), list(zip(seqs, keys, strict=True)))


def _tail_value(
    before: _Tail, written: Iterable[tuple[int, str]], following: int, token: str
) -> dict[str, Any]:
    """A thread's tail after a write (``token``) of ``written`` (turn number, key) whose next
    turn is ``following``, from the tail ``before`` it: every pair listed before or now whose
    number the blocks do not cover (``_hoped``), once, by number, and the highest next turn
    number announced (``high``: a reader whose mark announces less, after a numbering went
    back, scans instead: the other numbering's turns that its blocks covered are listed
    nowhere). A pair whose turn was rewritten with another number stays until the blocks cover
    it (a reader checks each turn's number as stored)."""
    keep = _hoped(following)
    pairs = dict.fromkeys(p for p in [*before.pairs, *written] if p[0] >= keep)
    ordered = sorted(pairs)
    return {
        "v": 1,
        "token": token,
        "high": max(following, before.high),
        "seqs": [n for n, _ in ordered],
        "keys": [k for _, k in ordered],
    }


class _Block(NamedTuple):
    """An index block as read back (see ``_encode_block``)."""

    first: int
    keys: list[str]
    postings: Postings
    counts: np.ndarray[Any, Any] | None
    rows: np.ndarray[Any, Any] | None
    #: the rows are int8 codes (close, not exact: see ``_int8_codes``)
    approximate: bool = False


def _decode_block(
    item: Item, dense: bool, *, dims: int | None = None, model: str | None = None
) -> _Block | None:
    """An index block read from the store; None when it is not one this version wrote whole
    (a foreign or damaged value is ignored: the turns it would cover are read one by one), or
    (``dense``) when its rows are not ``dims``-dimensional, were stored by another ``model``,
    or hold NaN or infinity (its turns are then read, and re-embedded, one by one)."""
    value = item.value
    keys, bm25 = value.get("keys"), value.get("bm25")
    if value.get("v") != 1 or value.get("size") != _BLOCK or not _is_int(value.get("first"), 0):
        return None
    if not isinstance(keys, list) or not all(isinstance(k, str) for k in keys):
        return None
    if not isinstance(bm25, dict) or not isinstance(bm25.get("vocab"), list):
        return None
    vocab: list[str] = bm25["vocab"]
    try:  # every term a string (checked at C speed)
        "".join(vocab)
    except TypeError:
        return None
    ptr, ids, tfs = (_unb64(bm25.get(name), "<i4") for name in ("ptr", "ids", "tfs"))
    if ptr is None or ids is None or tfs is None or len(ptr) != len(keys) + 1:
        return None
    if len(ids) != len(tfs) or (len(ptr) and int(ptr[-1]) != len(ids)):
        return None
    if len(ids) and (int(ids.min()) < 0 or int(ids.max()) >= len(vocab)):
        return None
    postings = Postings(vocab, ptr.astype(np.int64), ids.astype(np.int32), tfs.astype(np.int32))
    counts = rows = None
    approximate = False
    if dense:
        vectors = value.get("rows")
        if not isinstance(vectors, dict) or not _is_int(vectors.get("dims"), 0):
            return None
        counts = _unb64(vectors.get("counts"), "<i4")
        codes = "i8" in vectors  # else float16 rows, as the first blocks were written
        flat = _unb64(vectors.get("i8"), "i1") if codes else _unb64(vectors.get("f16"), "<f2")
        width = int(vectors["dims"])
        if counts is None or flat is None or len(counts) != len(keys) or (counts < 1).any():
            return None
        if width == 0 or len(flat) != int(counts.sum()) * width:
            return None
        if dims is not None and width != dims:
            return None
        if model is not None and "model" in vectors and vectors["model"] != model:
            return None
        if not codes and not np.isfinite(flat).all():
            return None
        rows = flat.reshape(-1, width)
        approximate = codes
    return _Block(int(value["first"]), keys, postings, counts, rows, approximate)


class _Faults:
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


#: the kinds of ``_Faults``
_BAD_VECTORS = "damaged or foreign turn vectors (re-embedded)"
_BAD_NUMBER = "turns with an unreadable number"
_BAD_BLOCK = "damaged or foreign index blocks (their turns read one by one)"
_BAD_FILTER = "turn values the store could not filter on (scanned without the filter)"
_BAD_EMBEDDING = "embeddings with NaN, infinity or another dimension (left out of the dense index)"
_STALE_MARK = (
    "thread marks behind the caller's state (restored or lagging: the turns after the index "
    "blocks scanned for, and listed again by the next write)"
)


class _Lexical:
    """The in-process indexes of one namespace prefix: BM25 over the turns' text and (with a
    local dense index) their vectors, the values they were built from (without the vectors),
    and the marks they have caught up with (see the module notes)."""

    def __init__(
        self,
        dense: bool,
        prev: bool = True,
        *,
        model: str | None = None,
        faults: _Faults | None = None,
    ) -> None:
        self.index = BM25Index()
        self.vectors = VectorIndex() if dense else None
        #: the embedding model of this index: stored vectors of another are re-embedded
        self.model = model
        #: the dimensions of this index's vectors before it holds any (the query's)
        self.expect: int | None = None
        self.faults = faults if faults is not None else _Faults()
        #: keep each turn's ``prev`` (the config packs or widens with the turn before)
        self.prev = prev
        #: uid -> the turn as a candidate (no score), built once from its stored value: the
        #: same turns come back call after call. Turns loaded from index blocks have none until
        #: a search finds them (then they are read from the store, see ``_turns_io``). One small
        #: object a turn, not a copy of its value and a candidate: every object kept is one more
        #: for the garbage collector's next young pass, whose cost grows with the caller's own
        #: young objects (a fresh list of 200,000 messages a call: milliseconds a pass)
        self.turns: dict[str, _Candidate] = {}
        #: thread label -> the mark of that thread as last read (everything before it is in)
        self.marks: dict[str, _Mark] = {}
        #: (scope="user") the user's mark as last read
        self.user_token: str | None = None
        #: uids whose rows in ``vectors`` are int8 codes from an index block, until a search
        #: finds them and reads their turns (then their stored rows replace the codes)
        self.approximate: set[str] = set()

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
            self.faults.note(_BAD_VECTORS)
        return rows

    def add(self, namespace: tuple[str, ...], key: str, value: dict[str, Any]) -> bool:
        """Index one stored turn; False when the dense index needs its vectors and the value
        carries none it can use (written before vectors were stored with it, damaged, or
        another model's)."""
        uid = "/".join((*namespace, key))
        self.turns[uid] = _turn_candidate(uid, value, self.prev)
        self.index.add(uid, _text_of(value))
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
        fresh: list[tuple[str, Item, _Candidate]] = []
        for it in items:  # a turn this process wrote (the mark's fetch brings it back) is in
            uid = "/".join((*it.namespace, it.key))
            turn = _turn_candidate(uid, it.value, self.prev)
            old = known.get(uid)
            if old is None or old.text != turn.text or tuple(old.parts) != tuple(turn.parts):
                fresh.append((uid, it, turn))
        items = [it for _, it, _ in fresh]
        uids = [uid for uid, _, _ in fresh]
        for uid, _, turn in fresh:
            self.turns[uid] = turn
        pairs = list(zip(uids, items, strict=True))
        self.faults.note(_BAD_NUMBER, sum(_seq_of(it.value) is None for it in items))
        self.index.add_many((uid, _text_of(it.value)) for uid, it in pairs)
        if self.vectors is None:
            return []
        rows = [(uid, self._rows(it.value)) for uid, it in pairs]
        self.vectors.add_many((uid, r) for uid, r in rows if r is not None)
        if self.approximate:
            self.approximate.difference_update(uid for uid, r in rows if r is not None)
        return [it for it, (_, r) in zip(items, rows, strict=True) if r is None]

    def add_blocks(self, namespace: tuple[str, ...], blocks: Sequence[_Block]) -> None:
        """The turns of index blocks (of the thread at ``namespace``), in bulk: postings and
        vectors as stored, no tokenizing, no decoding per turn. Their values are read when a
        search finds them."""
        head = "/".join(namespace) + "/"
        uids = [head + k for block in blocks for k in block.keys]
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
            found = _stored_bytes(value, dims=dims, model=self.model)
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
            self.faults.note(_BAD_EMBEDDING)
            return
        self.vectors.add(uid, rows)


class _Indexing(NamedTuple):
    """What indexing this call would do: the turn writes, the state with the index watermark
    moved past them, how many whole turns they ``complete``, the keys of the messages the view
    shows."""

    ops: list[PutOp]
    state: MemoryState
    complete: int
    shown: set[str]
    #: the oldest position the view shows (``len(messages)`` when none)
    kept_from: int


_PARTS = ("tenant", "user", "session")


def _not_given(key: MemoryKey) -> frozenset[str]:
    """The parts of ``key`` that name no one: left out of a config (``defaulted``) or given as
    the shared ``"default"`` (``MemoryKey(session="s")`` names no user)."""
    return key.defaulted | {p for p in _PARTS if getattr(key, p) == DEFAULT}


#: the key of a call that gave none: every part fell back to the shared default
_DEFAULTED = MemoryKey(defaulted=frozenset(_PARTS))


class Retrieval(Strategy):
    """Wrap ``inner`` so that evicted turns (and knowledge ``sources``) come back when relevant.

    Args:
        inner: any other strategy (TokenBudget, SummaryBuffer, ...). Its budget is the budget of
            the whole request; ``max_retrieved_tokens`` of it is held back for the retrieved
            context.
        store: a LangGraph ``BaseStore``: where the turns are kept (the source of truth). With
            an ``index`` (``{"dims", "embed"}``, any LangChain ``Embeddings``) or
            ``embeddings=``, dense and hybrid ranking are available; without either, BM25 only.
        k: at most this many evicted turns per view; None (the default): as many as fit
            ``max_retrieved_tokens``, best first.
        max_retrieved_tokens: what the context message may cost (counted with the inner
            counter). It is held back from the inner budget, so it must leave room there.
            Default: a quarter of the inner strategy's ``max_tokens`` (600 for one without a
            token budget).
        max_tokens: deprecated alias of ``max_retrieved_tokens`` (the inner strategy's
            ``max_tokens`` is the budget of the whole request: one name for two budgets misled).
        min_query_length: a newest human message with fewer words is not searched for.
        gate: when the memory (evicted turns and facts) is searched. ``"auto"`` (default):
            when the question may need the past: it refers to the speaker or the conversation
            ("my", "I", "we", "did you say", "remember", "again", ...), names something the
            memory holds, or an evicted turn matches it strongly (dense similarity >= 0.6);
            small talk and general-knowledge requests ("what is the capital of Australia?")
            add 0 tokens
            (:func:`asks_about_the_past`; a query with no English function word is always
            searched). ``"always"``: every query. A function ``(query) -> bool``: yours.
            Knowledge ``sources`` are searched regardless.
        sources: knowledge sources: any ``BaseRetriever`` or ``VectorStore``, searched
            concurrently with the memory index; a failing or slow one is reported, never fatal.
        scope: ``"thread"`` (this conversation only) or ``"user"`` (all of the user's threads).
        ranking: ``"dense"``, ``"bm25"`` or ``"hybrid"`` (reciprocal rank fusion of both); the
            default is hybrid when the store has an index, else BM25.
        neighbors: 1 brings retrieved turns with the turn before each (clipped to
            ``neighbor_chars``), so an answer comes with what led to it; neighbours only use the
            budget the results leave, best result first, and never displace a result. 0 (the
            default): the turns alone; a neighbour that scores is a result of its own.
        query_messages: how many messages before the newest human message join the query (for
            follow-ups like "and the second one?").
        key: the default memory key: used when a call passes none, and for the parts a call's
            key did not give (a key from ``MemoryKey.from_config`` records which parts fell back
            to ``"default"``).
        shared_default: allow running when the part of the key the scope needs (the thread for
            ``scope="thread"``, the user for ``scope="user"``) was not given. Off by default:
            every caller without a ``user_id`` would otherwise read and write one shared memory,
            so one user could be shown another's turns.
        source_k: at most this many passages from the sources per view (default ``k``).
        source_timeout: seconds a source may take before it is reported and skipped.
        candidates: how many results each ranking contributes to the fusion (default ``4 * k``,
            60 when ``k`` is None).
        neighbor_chars: a neighbouring turn is clipped to this many characters.
        rrf_k: the reciprocal-rank-fusion constant: ``score = sum(weight / (rrf_k + rank))``. The
            default 5 lets a confident first place win; the textbook 60 favours whatever appears
            in both rankings, so BM25 noise (a common word shared with the question) outvotes a
            strong dense match: hybrid then finds less than dense alone (``bench/retrieval.py``).
        dense_weight: the dense ranking's weight in hybrid fusion (BM25 and each source: 1). With
            the defaults, hybrid is dense-led, and BM25's first places (an exact name, code or
            number) still come through.
        compact: pack evidence, not padding. A retrieved turn whose user message says enough
            (8 words or more) comes back as that message and only those sentences of the reply
            that share a word with the query; a short follow-up ("it's my staff number"), or a
            short answer to a question the turn before ended with, comes with that turn (clipped to
            ``neighbor_chars``); a turn with a tool round,
            and every turn when the question is about what the assistant said ("what did you
            suggest?"), come back whole.
            The dense index embeds each message of a turn, so a turn is found by its best
            message. False: whole turns.
        min_score: a floor on the dense similarity (the store's ``score``): when no evicted
            turn reaches it, no turn is retrieved (0 tokens; sources still are). None (the
            default): no floor. Set it only after measuring on your embedder and data: with the
            bundled MiniLM, paraphrased questions about planted facts score as low as 0.22 and
            small talk up to 0.58 (bench/retrieval.py), so no single value separates them. No
            effect with BM25-only ranking.

        embeddings: the embedding model of the dense ranking (default: the store index's).
        dense_index: where the dense ranking runs. ``"local"`` (the default, except for
            ``PostgresStore``): Retrieval embeds each turn once, stores its vectors with it
            (float16, so a restart never embeds again) and searches an in-process
            :class:`~langmem_ext.retrieval.vectors.VectorIndex` (about 1-2 ms a search at 100k
            turns, where ``InMemoryStore``'s own search takes 344 ms at 10k); a fresh process
            loads it from the thread's index blocks (see the module notes). ``"store"``: the
            store embeds and searches (``PostgresStore`` with pgvector: its HNSW index scales
            past one process's memory). The store stays the source of truth either way.
        prefetch_embeddings: embed turns before they leave the view, off the caller's path
            (local dense index only). After each call, the view's oldest messages (at most
            8) are embedded in a worker thread, while the caller talks to its model; the call
            whose view they leave then finds their vectors ready instead of embedding them
            (about 25 ms a turn with the bundled MiniLM on 2 cores, ``bench/results/scale.md``).
            Vectors are the same either way: a text missing from the cache (or whose
            embedding failed in the background) is embedded in the call, as without it.
            ``flush()`` / ``aflush()`` also wait for these embeddings. Off by default.

    Every parameter is checked here (:class:`RetrievalConfig`, kept as ``config``), with an
    error that names it: a bad value never waits for the first turn.
    """

    uses_key = True

    def __init__(
        self,
        inner: Strategy,
        *,
        store: BaseStore,
        k: int | None = None,
        max_retrieved_tokens: int | None = None,
        min_query_length: int = 3,
        gate: Gate = "auto",
        sources: Sequence[Source] = (),
        scope: Scope = "thread",
        ranking: Ranking | None = None,
        neighbors: int = 0,
        query_messages: int = 0,
        key: MemoryKey | None = None,
        shared_default: bool = False,
        source_k: int | None = None,
        source_timeout: float = 5.0,
        candidates: int | None = None,
        neighbor_chars: int = 600,
        rrf_k: int = RRF_K,
        dense_weight: float = DENSE_WEIGHT,
        compact: bool = True,
        min_score: float | None = None,
        embeddings: Embeddings | None = None,
        dense_index: DenseIndex | None = None,
        max_tokens: int | None = None,
        prefetch_embeddings: bool = False,
    ) -> None:
        _check_inner(inner)
        _check_store(store)
        can_embed = _has_index(store) or embeddings is not None
        budget, budget_name = _retrieved_budget(max_retrieved_tokens, max_tokens, inner)
        self.config = RetrievalConfig(
            k=k,
            max_retrieved_tokens=budget,
            min_query_length=min_query_length,
            gate=gate,
            sources=sources,
            scope=scope,
            ranking=ranking or ("hybrid" if can_embed else "bm25"),
            neighbors=neighbors,
            query_messages=query_messages,
            key=key,
            shared_default=shared_default,
            source_k=source_k,
            source_timeout=source_timeout,
            candidates=candidates,
            neighbor_chars=neighbor_chars,
            rrf_k=rrf_k,
            dense_weight=dense_weight,
            compact=compact,
            min_score=min_score,
        )
        _check_index(store, self.config.ranking, embeddings)
        #: where the dense ranking runs (``"local"`` or ``"store"``, see ``dense_index``)
        self.dense_index, self._embeddings = _dense_index(
            store, self.config.ranking, dense_index, embeddings
        )
        if self.dense_index == "local" and self.config.ranking != "bm25" and not self._embeddings:
            raise ValueError(
                "Retrieval: dense_index='local' needs embeddings: pass embeddings=, or a store "
                "whose index has an embedding model"
            )
        _check_room(inner, budget_name, budget)
        if not isinstance(prefetch_embeddings, bool):
            raise TypeError(
                f"Retrieval: prefetch_embeddings must be True or False, got {prefetch_embeddings!r}"
            )
        if prefetch_embeddings and self._embeddings is None:
            raise ValueError(
                "Retrieval: prefetch_embeddings=True needs a local dense index (dense_index="
                "'local' with embeddings): with dense_index='store' or BM25-only ranking, "
                "Retrieval embeds nothing itself"
            )
        #: the view's oldest messages embedded ahead, off the caller's path (None: off)
        self._prefetch = (
            _Prefetch(self._embeddings)
            if prefetch_embeddings and self._embeddings is not None
            else None
        )
        #: the identity of the local dense index's embedding model, stored with its vectors
        self._model = _model_id(self._embeddings)
        self._faults = _Faults()
        self.inner = inner
        self.store = store
        self.counter = inner.counter
        self.summarizer = inner.summarizer
        # the inner plan's folds are run by this strategy's driver: its background settings
        self.folds_in_background = inner.folds_in_background
        self.fold_wait = inner.fold_wait
        self.retry_in_call = inner.retry_in_call
        self._clock: Callable[[], float] | None = None
        ttl = store.ttl_config
        self._refresh_ttl = bool(ttl.get("refresh_on_read", True)) if ttl else True
        self._lexicals: OrderedDict[tuple[str, ...], _Lexical] = OrderedDict()
        #: the last queries' vectors: an agent loop asks its one request again on every tool
        #: round, and a hosted embedding model would be paid (and waited for) each time
        self._query_vectors: OrderedDict[str, list[float]] = OrderedDict()
        self._lock = threading.Lock()

    @property
    def store_faults(self) -> dict[str, int]:
        """What this Retrieval found damaged or foreign in its store and worked around, by kind
        (vectors re-embedded, index blocks skipped, unreadable turn numbers, ...): never raised,
        each kind logged once."""
        return self._faults.counts()

    @property
    def _local(self) -> bool:
        """Whether the dense ranking runs in process (vectors embedded here, kept with turns)."""
        return self._embeddings is not None

    @property
    def _keeps_prev(self) -> bool:
        """Whether a turn's candidate keeps the turn before (packing and neighbours use it)."""
        return bool(self.config.neighbors) or self.config.compact

    @property
    def max_retrieved_tokens(self) -> int:
        """What the context message may cost (``config.max_retrieved_tokens``)."""
        return self.config.max_retrieved_tokens

    @property
    def max_tokens(self) -> int:
        """Deprecated alias of :attr:`max_retrieved_tokens`."""
        return self.config.max_retrieved_tokens

    @property
    def clock(self) -> Callable[[], float]:
        """Where ``now`` comes from: the inner strategy's clock unless one is set here. One
        ``now`` per call serves the inner plan (retry timing) and the index (``indexed_at``)."""
        return self._clock or self.inner.clock

    @clock.setter
    def clock(self, clock: Callable[[], float]) -> None:
        self._clock = clock

    @clock.deleter
    def clock(self) -> None:
        self._clock = None  # the inner strategy's clock again

    def __repr__(self) -> str:
        c = self.config
        return (
            f"Retrieval({self.inner!r}, k={c.k}, "
            f"max_retrieved_tokens={c.max_retrieved_tokens}, ranking={c.ranking!r}, "
            f"scope={c.scope!r}, dense_index={self.dense_index!r}, sources={len(c.sources)})"
        )

    # -- the plan ---------------------------------------------------------------------------------

    def _plan(  # takes key= (uses_key = True): the engine passes it
        self,
        messages: Sequence[BaseMessage],
        state: MemoryState,
        now: float,
        extra: int,
        *,
        key: MemoryKey | None = None,
    ) -> _Flow:
        """The inner plan with the context budget held back (its fold requests pass through),
        then the writes of the turns that left the view (a view declines them), then the index
        search and the knowledge sources together, fused into one context message."""
        who = self._key(key)
        budget = extra + self.config.max_retrieved_tokens
        inner = yield from self.inner._plan(messages, state, now, budget)
        indexing = self._indexing(messages, inner, who, now)
        written = yield from self._write(indexing.ops, who)
        after, count = (indexing.state, indexing.complete) if written else (inner.state, 0)
        # the view's oldest messages, embedded ahead once this call is done (not declined)
        upcoming = _upcoming(messages, indexing.kept_from) if written and self._prefetch else []
        in_summary = _summary_facts(inner.state)
        if in_summary and inner.state.summary != state.summary:  # a fold: new facts, maybe
            facts = self._fact_writes(_summary_facts(state), in_summary, who, now)
            if facts:  # remember each (a read-only view declines)
                yield _StoreFlow(self.store, self._facts_io(facts), True, self._embeddings)
        query = self._query(messages)
        if query is None:
            return self._prefetched(self._compose(inner, after, [], (), count), upcoming)
        c = self.config
        turns, outcomes = yield _Together(
            _StoreFlow(
                self.store,
                self._turns_io(query, who, after.indexed_turns),
                embeddings=self._embeddings,
            ),
            _SourceSearch(c.sources, query, c.per_ranking, c.source_timeout),
        )
        if not self._searches(query, turns, who):
            turns = []  # small talk: nothing from the past (sources still count)
        passages, errors = self._passages(outcomes)
        # a fact the view's summary still shows is not retrieved again
        picked = self._fuse(turns, passages, indexing.shown | set(in_summary))
        return self._prefetched(self._compose(inner, after, picked, errors, count, query), upcoming)

    def _prefetched(self, result: MemoryResult, upcoming: list[str]) -> MemoryResult:
        """``result``, once the embedding of ``upcoming`` (``prefetch_embeddings``) started: last,
        so that it runs while the caller talks to its model, not during this call's search."""
        if upcoming and self._prefetch is not None:
            self._prefetch.start(upcoming)
        return result

    def _background_work(self) -> list[concurrent.futures.Future[Any]]:
        """The background folds and, with ``prefetch_embeddings``, the embeddings started ahead
        (``flush`` / ``aflush`` wait for both)."""
        ahead = self._prefetch.running() if self._prefetch is not None else []
        return [*super()._background_work(), *ahead]

    def _notify(
        self, before: MemoryState, result: MemoryResult, messages: Sequence[BaseMessage]
    ) -> None:
        """The callbacks are the inner strategy's (Retrieval adds none of its own)."""
        self.inner._notify(before, result, messages)

    # -- whose memory -----------------------------------------------------------------------------

    def _key(self, key: MemoryKey | None) -> MemoryKey:
        """The key of this call: the call's key, its defaulted parts filled from the default
        ``key`` (a fully defaulted key when there is neither). Fails closed when the part the
        scope needs is still a default, unless ``shared_default=True``."""
        if key is not None and not isinstance(key, MemoryKey):
            raise TypeError(f"key must be a MemoryKey, got {type(key).__name__}")
        base, scope = self.config.key, self.config.scope
        if key is None:
            who = base if base is not None else _DEFAULTED
        elif base is None or not (left := _not_given(key)):
            who = key
        else:  # a part the call's key left out (or gave as "default") is the default key's
            tenant, user, session = (str(getattr(base if p in left else key, p)) for p in _PARTS)
            who = MemoryKey(tenant, user, session, defaulted=left & _not_given(base))
        # every key, explicit or from a config: a part the scope needs that is the shared
        # default fails closed (``MemoryKey.require``), unless sharing was asked for
        if not self.config.shared_default:
            who.require(
                "session" if scope == "thread" else "user",
                owner=f"Retrieval(scope={scope!r})",
                opt_out="shared_default",
            )
        return who

    # -- indexing ---------------------------------------------------------------------------------

    def _indexing(
        self, messages: Sequence[BaseMessage], result: MemoryResult, key: MemoryKey, now: float
    ) -> _Indexing:
        """The store writes for the turns that left the view since the last call (stamped
        ``now``), the state with the index watermark moved past them, and the keys of the
        messages the view shows. Pure: ``now`` comes from the driver's clock.

        Everything is anchored to positions: the keys are :func:`key_at` keys, and what the view
        shows is found by walking the view and the history back from their ends together, so a
        repeated text ("continue") in the view never stands for an older copy of itself."""
        state = result.state
        n = len(messages)
        body_start = 1 if n and is_system(messages[0]) else 0
        start, keys = self._watermark(messages, state, body_start)
        first_kept, shown = self._shown(messages, result.messages, start, keys)
        groups = _turn_groups(messages, start, first_kept)
        if not groups:
            return _Indexing([], state, 0, shown, first_kept)
        # the last group is unfinished when the view starts inside its turn: index what left,
        # and index it again (same key) once the rest of the turn has left too
        unfinished = first_kept < n and not isinstance(messages[first_kept], HumanMessage)
        texts = [render_turn([messages[i] for i in group]) for group in groups]
        before = [self._previous_turn(messages, start, body_start), *texts[:-1]]
        first_seq = state.indexed_turns
        ops = [
            self._turn_write(
                key,
                first_seq + g,
                text,
                prev,
                [keys[i - start] for i in group],
                now,
                _parts([messages[i] for i in group]),
            )
            for g, (group, text, prev) in enumerate(zip(groups, texts, before, strict=True))
        ]
        complete = len(groups) - (1 if unfinished else 0)
        watermark = first_kept - (len(groups[-1]) if unfinished else 0)
        moved = replace(
            state,
            indexed=watermark if watermark > body_start else 0,
            indexed_key=key_at(messages, watermark - 1) if watermark > body_start else None,
            indexed_turns=first_seq + complete,
        )
        return _Indexing(ops, moved, complete, shown, first_kept)

    def _turn_write(
        self,
        key: MemoryKey,
        seq: int,
        text: str,
        prev: str,
        ids: list[str],
        now: float,
        parts: list[str],
    ) -> PutOp:
        """The write of one turn, under the key of its first message: the dense index embeds
        each message (``parts``), BM25 reads the whole ``text``."""
        value = {
            "text": text,
            "parts": parts,
            "prev": prev[-self.config.neighbor_chars :] if prev else "",
            "ids": ids,
            "seq": seq,
            "order": _order(seq),
            "thread": key.session,
            "indexed_at": now,
        }
        # a local dense index embeds the parts itself (``_write_io``): the store must not
        index: list[str] | Literal[False] = False if self._local else ["parts[*]"]
        return PutOp(key.namespace(_KIND), ids[0], value, index=index)

    @staticmethod
    def _watermark(
        messages: Sequence[BaseMessage], state: MemoryState, body_start: int
    ) -> tuple[int, list[str]]:
        """Where indexing resumes, and the position-safe keys of ``messages[start:]``: the
        state's watermark when the message before it is still the same one (same key at the
        same position), else the start of the body (first call, or the history was rewritten:
        re-indexing is idempotent)."""
        n = len(messages)
        start = state.indexed
        if body_start < start <= n and state.indexed_key is not None:
            keys = keys_between(messages, start - 1, n)
            if keys[0] == state.indexed_key:
                return start, keys[1:]
        return body_start, keys_between(messages, body_start, n)

    @staticmethod
    def _shown(
        messages: Sequence[BaseMessage], view: Sequence[BaseMessage], start: int, keys: list[str]
    ) -> tuple[int, set[str]]:
        """The oldest position at or after ``start`` that the view shows (``len(messages)`` when
        none), and the keys of the messages it shows. O(view + messages since ``start``)."""
        n = len(messages)
        shown = {str(m.id) for m in view if m.id and m.id != RETRIEVED_ID}
        first = n
        j = n - 1
        for v in reversed(view):
            if v.id == RETRIEVED_ID:
                continue
            q = j
            while q >= start and not _same(messages[q], v):
                q -= 1
            if q < start:  # a summary, a placeholder, the system message, or older
                continue
            shown.add(keys[q - start])
            first, j = q, q - 1
        return first, shown

    @staticmethod
    def _previous_turn(messages: Sequence[BaseMessage], start: int, body_start: int) -> str:
        j = start - 1
        while j >= body_start and not isinstance(messages[j], HumanMessage):
            j -= 1
        return render_turn(messages[j:start]) if j >= body_start else ""

    def _fact_writes(
        self,
        before: dict[str, tuple[str, str]],
        after: dict[str, tuple[str, str]],
        key: MemoryKey,
        now: float,
    ) -> list[PutOp]:
        """The writes of the facts a fold added to the summary's ``FACT_SECTIONS`` (one item
        per line, keyed by its text: a fact is indexed once however often it is restated)."""
        return [
            PutOp(
                key.namespace(_FACTS),
                fact,
                {
                    "text": line,
                    "parts": [line],
                    "section": section,
                    "thread": key.session,
                    "indexed_at": now,
                },
                index=False if self._local else ["parts[*]"],
            )
            for fact, (section, line) in after.items()
            if fact not in before
        ]

    def _facts_io(self, ops: Sequence[PutOp]) -> _Io[None]:
        if self._local:  # embedded here, once, and stored with the fact (like turns)
            yield (yield from _with_vectors(ops, self._model))
            return
        for batch in _distinct_texts(ops):
            yield list(batch)

    def _write(self, ops: list[PutOp], key: MemoryKey) -> Generator[Request, Any, bool]:
        """Ask for the writes of ``ops`` and their marks; whether they were written (a
        read-only call declines them). Written turns join this process's BM25 indexes."""
        if not ops:
            return True
        embeddings = self._embeddings
        if self._prefetch is not None and embeddings is not None:
            embeddings = _Prefetched(embeddings, self._prefetch)
        flow = _StoreFlow(self.store, self._write_io(ops, key), True, embeddings)
        written = yield flow
        if written is DECLINED:
            return False
        self._remember(cast(list[PutOp], written))
        return True

    def _write_io(self, ops: Sequence[PutOp], key: MemoryKey) -> _Io[list[PutOp]]:
        """Embed the turns' messages (a local dense index: each distinct text once, stored with
        its turn), write the turns, then the thread's mark, then the user's mark, each after the
        last (a reader that sees a mark sees what it announces). Marks are blind writes of a
        fresh token: no read-modify-write, so concurrent writers never undo each other. Returns
        the writes as made (with their vectors)."""
        ops = list(ops)
        if self._local:
            ops = yield from _with_vectors(ops, self._model)
        marks = key.namespace(_MARKS, scope="user")
        # the thread's tail and mark are read with the first turns written (none of them)
        tail_ns = key.namespace(_BLOCKS) if self.config.scope == "thread" else None
        before: _Tail | None = None
        numbers = [int((op.value or {}).get("seq", 0)) for op in ops]
        # the blocks a stale mark counts end here (``_is_stale``); -1: the mark is not stale
        stale_from = -1
        batches = [list(b) for b in (_distinct_texts(ops) if not self._local else [ops])]
        for n, batch in enumerate(batches):
            if n == 0 and tail_ns is not None:
                got = yield [
                    GetOp(tail_ns, _TAIL, False),
                    GetOp(marks, key.labels()[2], False),
                    *batch,
                ]
                last = _mark_of(got[1])
                before = _read_tail(got[0], last)
                # this write goes on from turns a restored (or lagging) mark does not announce:
                # its tail lists none of them (listed again, from the turns) and the blocks it
                # does not count may be gone or older (sealed again, from the turns)
                if last is not None and _is_stale(last, min(numbers)):
                    before, stale_from = None, _hoped(last[1])
                    self._faults.note(_STALE_MARK)
            else:
                yield batch
        token = uuid.uuid4().hex
        following = max(numbers) + 1
        # a write that reaches a multiple of _BLOCK closes the block before it: every turn
        # numbered below is final (only the last turn of a write can be completed later)
        boundary = -(-min(numbers) // _BLOCK) * _BLOCK or _BLOCK
        stop = following - following % _BLOCK
        start = boundary - _BLOCK if boundary < following else stop
        if stale_from >= 0:
            start = min(start, stale_from)
        if start < stop:
            listed = before.pairs if before is not None else []
            yield from self._seal_io(key, start, stop, listed)
        thread_mark: dict[str, Any] = {"token": token, "next": following, "thread": key.session}
        if len(ops) <= _LISTED:  # a reader fetches these by key instead of scanning the thread
            thread_mark |= {"first": min(numbers), "keys": [op.key for op in ops]}
        mark_ops = [PutOp(marks, key.labels()[2], thread_mark, index=False)]
        if tail_ns is not None:  # (in either order: a reader checks the tail against the mark)
            pairs = list(zip(numbers, [op.key for op in ops], strict=True))
            if before is None:  # none, or not the last write's: listed again, from the turns
                pairs += yield from self._listed_io(key, _hoped(following))
                before = _Tail(max((n + 1 for n, _ in pairs), default=0), [])
            tail = _tail_value(before, pairs, following, token)
            mark_ops.insert(0, PutOp(tail_ns, _TAIL, tail, index=False))
        yield mark_ops
        yield [PutOp(marks, _USER_MARK, {"token": token}, index=False)]
        return ops

    def _listed_io(self, key: MemoryKey, start: int) -> _Io[list[tuple[int, str]]]:
        """(turn number, key) of every stored turn of the thread numbered ``start`` or more
        (every numbering), scanned for: what a thread's tail lists when the last write left
        none to go on from (a scan once, then each write reads the tail and rewrites it)."""
        where = {"order": {"$gte": _order(start)}}
        stored = yield from self._pages_io(key.namespace(_KIND), where, refresh=False)
        return [(it.value["seq"], it.key) for it in stored if _is_int(it.value.get("seq"), 0)]

    def _seal_io(
        self, key: MemoryKey, start: int, stop: int, listed: Sequence[tuple[int, str]] = ()
    ) -> _Io[None]:
        """Write the index blocks of the thread's turns numbered ``start`` to ``stop - 1``
        (whole blocks): every stored turn with those numbers (after a reset of the numbering,
        the turns of both numberings), read back in one scan, a few large pages, and the
        turns the tail ``listed`` (number, key) in that range that the scan did not bring (a
        damaged ``order`` the store's filter drops: a block must never leave a turn out). A
        block is rewritten whenever a write reaches the next one, so it is never older than
        the numbering that makes it count (see ``_load_blocks``)."""
        namespace = key.namespace(_KIND)
        where = {"order": {"$gte": _order(start), "$lt": _order(stop)}}
        items = yield from self._pages_io(namespace, where, refresh=False)
        found = {it.key for it in items}
        lost = [k for n, k in listed if start <= n < stop and k not in found]
        if lost:
            got = yield [GetOp(namespace, k, False) for k in dict.fromkeys(lost)]
            items += [it for it in got if isinstance(it, Item)]
        groups: dict[int, list[Item]] = {first: [] for first in range(start, stop, _BLOCK)}
        for item in items:
            seq = _seq_of(item.value)
            first = seq // _BLOCK * _BLOCK if seq is not None else -1
            if first in groups:
                groups[first].append(item)
        writes = [
            PutOp(key.namespace(_BLOCKS), _order(first), block, index=False)
            for first, group in groups.items()
            if (block := _encode_block(group, first, self._local, self._model)) is not None
        ]
        if writes:
            yield writes

    def _remember(self, ops: Iterable[PutOp]) -> None:
        """Add this process's own writes to its BM25 indexes at once (the marks they left still
        make the next query check for other writers' turns)."""
        with self._lock:
            for op in ops:
                for prefix, lexical in self._lexicals.items():
                    if op.namespace[: len(prefix)] == prefix and op.value is not None:
                        lexical.add(op.namespace, op.key, dict(op.value))

    # -- searching --------------------------------------------------------------------------------

    def _query(self, messages: Sequence[BaseMessage]) -> str | None:
        last = _last_human(messages)
        if last is None:
            return None
        text = _text(messages[last])
        if len(text.split()) < self.config.min_query_length:
            return None
        if self.config.query_messages:
            before = messages[max(0, last - self.config.query_messages) : last]
            text = "\n".join([*(_text(m) for m in before), text])
        return text

    def _searches(
        self, query: str, rankings: Sequence[tuple[float, Sequence[_Candidate]]], key: MemoryKey
    ) -> bool:
        """Whether this query's memory results are used (``gate``)."""
        gate = self.config.gate
        if gate == "always":
            return True
        if callable(gate):
            return bool(gate(query))
        best = max(
            (c.score for _, ranking in rankings for c in ranking if c.score is not None),
            default=None,
        )
        if best is not None and best >= _STRONG:
            return True
        lexical = self._lexical_for(self._prefix(key))
        known = None if lexical is None else (lambda term: lexical.index.frequency(term) > 0)
        return asks_about_the_past(query, known)

    def _prefix(self, key: MemoryKey) -> tuple[str, ...]:
        return key.namespace(_KIND, scope="session" if self.config.scope == "thread" else "user")

    def _lexical_for(self, prefix: tuple[str, ...]) -> _Lexical | None:
        with self._lock:
            lexical = self._lexicals.get(prefix)
            if lexical is not None:
                self._lexicals.move_to_end(prefix)
            return lexical

    def _install(self, prefix: tuple[str, ...], lexical: _Lexical) -> None:
        with self._lock:
            self._lexicals[prefix] = lexical
            self._lexicals.move_to_end(prefix)
            while len(self._lexicals) > 256:  # bounded: the least recently searched goes
                self._lexicals.popitem(last=False)

    def _turns_io(
        self, query: str, key: MemoryKey, known: int = 0
    ) -> _Io[list[tuple[float, list[_Candidate]]]]:
        """The memory index's rankings, each with its fusion weight. The dense search and the
        mark read go in one batch; a stale BM25 index then catches up. ``known``: the turns
        the caller's state says were indexed (a thread mark announcing fewer is stale)."""
        c = self.config
        prefix = self._prefix(key)
        marks = key.namespace(_MARKS, scope="user")
        thread = key.labels()[2]
        dense = c.ranking != "bm25"
        local = dense and self._local  # the dense ranking runs in process
        query_vector = (yield from self._query_vector(query)) if local else None
        facts_prefix = key.namespace(_FACTS, scope="session" if c.scope == "thread" else "user")
        # the facts: few (lines of summaries); ranked by the store (dense), or here: by their
        # stored vectors (a local dense index: the query is embedded once) or by BM25
        facts_dense = dense and not local and _has_index(self.store)
        first: list[Op] = [
            SearchOp(
                facts_prefix,
                None,
                c.per_ranking if facts_dense else _PAGE,
                0,
                query if facts_dense else None,
                self._refresh_ttl,
            )
        ]
        if dense and not local:
            first.append(SearchOp(prefix, None, c.per_ranking, 0, query, self._refresh_ttl))
        in_process = local or c.ranking != "dense"  # an index here, caught up by the marks
        if in_process:
            mark_key = thread if c.scope == "thread" else _USER_MARK
            first.append(GetOp(marks, mark_key, self._refresh_ttl))
        results = yield first
        rankings: list[tuple[float, list[_Candidate]]] = []
        found = results[0]
        assert isinstance(found, list)
        facts = [self._fact(it) for it in found if isinstance(it, Item)]
        if local and facts:
            assert query_vector is not None
            facts = yield from self._facts_by_vector(
                [it for it in found if isinstance(it, Item)], query_vector, c.per_ranking
            )
        elif not facts_dense and facts:
            index = BM25Index()
            for fact in facts:
                index.add(fact.uid, fact.text)
            order = {uid: n for n, (uid, _) in enumerate(index.search(query, c.per_ranking))}
            facts = sorted((f for f in facts if f.uid in order), key=lambda f: order[f.uid])
        if facts:
            rankings.append((c.dense_weight if facts_dense or local else 1.0, facts))
        results = results[1:]
        if dense and not local:
            searched = results[0]
            assert isinstance(searched, list)
            items = [it for it in searched if isinstance(it, Item)]
            turns = [
                _turn_candidate(
                    "/".join((*it.namespace, it.key)),
                    it.value,
                    self._keeps_prev,
                    getattr(it, "score", None),
                )
                for it in items
            ]
            rankings.append((c.dense_weight, turns))
        if in_process:
            mark = results[-1]
            assert mark is None or isinstance(mark, Item)
            dims = None if query_vector is None else len(query_vector)
            lexical = yield from self._lexical_io(prefix, marks, thread, mark, dims, known)
            for _ in range(_SEARCH_ROUNDS):
                ranked_uids, held = yield from self._ranked_io(lexical, query, query_vector)
                if all(u in held for _, ranked, _ in ranked_uids for u, _ in ranked):
                    break
                # a result was gone from the store (deleted, expired: it left the indexes); a
                # search without it, whose statistics do not count it, ranks the rest
            for weight, ranked, dense_scores in ranked_uids:
                turns = [
                    _scored(held[u], s) if dense_scores else held[u]  # (BM25: as held)
                    for u, s in ranked
                    if u in held
                ]
                rankings.append((weight, turns))
        return rankings

    def _query_vector(self, query: str) -> _Io[list[float]]:
        """The query's embedding: remembered for the last ``_QUERY_VECTORS`` queries (the same
        text, the same model: the same vector)."""
        with self._lock:
            vector = self._query_vectors.get(query)
            if vector is not None:
                self._query_vectors.move_to_end(query)
                return vector
        vector = cast("list[float]", (yield _Embed((query,), query=True)))
        with self._lock:
            self._query_vectors[query] = vector
            while len(self._query_vectors) > _QUERY_VECTORS:
                self._query_vectors.popitem(last=False)
        return vector

    def _ranked_io(
        self, lexical: _Lexical, query: str, query_vector: list[float] | None
    ) -> _Io[tuple[list[tuple[float, Sequence[tuple[str, float]], bool]], dict[str, _Candidate]]]:
        """The in-process rankings of ``query`` (dense and BM25, each with its fusion weight and
        whether its scores are dense similarities) and the turns they found (``_held_io``)."""
        c = self.config
        #: (fusion weight, (uid, score) best first, whether the scores are dense similarities)
        ranked_uids: list[tuple[float, Sequence[tuple[str, float]], bool]] = []
        near: list[tuple[str, float]] = []
        if query_vector is not None:
            assert lexical.vectors is not None
            near = lexical.vectors.search(query_vector, c.per_ranking)
            ranked_uids.append((c.dense_weight, near, True))
        rough = any(uid in lexical.approximate for uid, _ in near)
        if c.ranking != "dense":
            hits = lexical.index.search(query, c.per_ranking)
            ranked_uids.append((1.0, hits, False))
        # the postings of index blocks are merged in the background once this first search
        # from them is done (searches answer the same meanwhile)
        lexical.index.consolidate()
        uids = {u for _, ranked, _ in ranked_uids for u, _ in ranked}
        held = yield from self._held_io(lexical, uids)
        if rough:
            # results found by a block's int8 codes: their stored rows came with their values
            # (``_held_io``), and rank them again
            assert lexical.vectors is not None and query_vector is not None
            exact = lexical.vectors.score(query_vector, [uid for uid, _ in near])
            again = sorted(exact.items(), key=lambda item: (-item[1], item[0]))
            ranked_uids[0] = (c.dense_weight, again, True)
        return ranked_uids, held

    def _held_io(self, lexical: _Lexical, uids: Collection[str]) -> _Io[dict[str, _Candidate]]:
        """The turns of ``uids``: held since they were indexed, or (turns loaded from an index
        block) read now, in one batch, and kept; their stored rows replace the block's int8
        codes in the dense index. A turn no longer in the store (expired, deleted) leaves the
        indexes and the results."""
        turns = lexical.turns
        missing = [uid for uid in uids if uid not in turns]
        if missing:
            # a turn's namespace has 5 parts ("langmem_ext", "turns", tenant, user, thread);
            # labels are percent-encoded, so "/" only separates (a key may hold one)
            where = [uid.split("/", 5) for uid in missing]
            got = yield [GetOp(tuple(w[:5]), w[5], self._refresh_ttl) for w in where]
            with self._lock:
                exact: list[tuple[str, dict[str, Any]]] = []
                for uid, item in zip(missing, got, strict=True):
                    if not isinstance(item, Item):
                        lexical.forget(uid)
                        continue
                    turns[uid] = _turn_candidate(uid, item.value, lexical.prev)
                    if uid in lexical.approximate:  # the block's codes give way to the rows
                        lexical.approximate.discard(uid)
                        exact.append((uid, item.value))
                if exact:
                    lexical.refine(exact)
        return {uid: turns[uid] for uid in uids if uid in turns}

    def _lexical_io(
        self,
        prefix: tuple[str, ...],
        marks_ns: tuple[str, ...],
        thread: str,
        mark: Item | None,
        dims: int | None = None,
        known: int = 0,
    ) -> _Io[_Lexical]:
        """The BM25 index of ``prefix``, current with the store as of ``mark`` (read just
        before): built from every stored turn on first use, else caught up with the turns of
        each thread whose mark changed since the index last saw it. ``dims``: the dimensions
        of the query's vector (stored vectors of others are re-embedded). ``known``: the turns
        the caller's state says were indexed in this thread (``_is_stale``)."""
        lexical = self._lexical_for(prefix)
        if lexical is not None and lexical.expect is None:
            lexical.expect = dims
        token: str | None = None
        if self.config.scope == "thread":
            thread_mark = _mark_of(mark)
            if lexical is not None and lexical.marks.get(thread) == thread_mark:
                return lexical
            seen = {thread: thread_mark} if thread_mark is not None else {}
        else:
            token = _token_of(mark)
            if lexical is not None and lexical.user_token == token:
                return lexical
            seen = yield from self._read_marks(marks_ns)
        if lexical is None:  # first use in this process: everything (older items too)
            fresh = _Lexical(self._local, self._keeps_prev, model=self._model, faults=self._faults)
            fresh.expect = dims
            covered = 0
            if self.config.scope == "thread" and thread_mark is not None:
                stale = _is_stale(thread_mark, known)
                if stale:
                    self._faults.note(_STALE_MARK)
                covered = yield from self._load_blocks(fresh, prefix, thread_mark, stale)
            if not covered:  # (else the blocks' load read the turns after them)
                yield from self._load(fresh, [(prefix, None)])
            fresh.marks, fresh.user_token = seen, token
            self._install(prefix, fresh)
            return fresh
        scans, fetches = self._catch_up(prefix, lexical, seen)
        yield from self._load(lexical, scans, fetches)
        with self._lock:
            lexical.marks.update(seen)
            lexical.user_token = token
        return lexical

    def _load_blocks(
        self, lexical: _Lexical, prefix: tuple[str, ...], mark: _Mark, stale: bool = False
    ) -> _Io[int]:
        """Load the thread's index blocks into ``lexical``, and the turns after them: the blocks
        that chain from turn 0 and count under the thread's numbering (the next turn number of
        its ``mark``: a block counts when the turn after it was written, which rewrote it).
        Returns the first turn number the blocks do not cover (0: none counts, and nothing was
        loaded). A ``stale`` mark (``_is_stale``) still says which blocks count, but the turns
        after them are scanned for: the tail written with it lists none of those since."""
        blocks_ns = ("langmem_ext", _BLOCKS, *prefix[2:])
        # every block that could count, by key: a get each (no scan, no sort of megabytes of
        # values by the store), in batches that double while every block asked for is there:
        # the mark's number is read from the store, and the gets stop at the first block that
        # is not, so the work is bounded by the blocks that exist, never by that number
        firsts = range(0, max(mark[1] - _BLOCK, 0), _BLOCK)
        if not firsts:
            return 0
        ttl = self._refresh_ttl
        got: list[Any] = []
        tail: Any = None
        size = _BLOCK_GETS
        while len(got) < len(firsts):
            asked = firsts[len(got) : len(got) + size]
            ops: list[Op] = [GetOp(blocks_ns, _order(first), ttl) for first in asked]
            if not got:
                ops.append(GetOp(blocks_ns, _TAIL, ttl))
            answers = yield ops
            if not got:
                tail = answers.pop()
            got += answers
            if not all(isinstance(item, Item) for item in answers):
                break
            size *= 2
        if not isinstance(got[0], Item):  # no block (turns written before they were kept)
            return 0
        if lexical.vectors is not None:  # the matrix's memory is touched while the turns after
            sizes = [_block_rows(item) for item in got]  # the blocks are read and they decode
            if lexical.dims is not None:  # (blocks of another model are read turn by turn)
                sizes = [(rows, d) for rows, d in sizes if d == lexical.dims]
            total = sum(rows for rows, _ in sizes)
            if total:
                dims = next(d for rows, d in sizes if rows)
                # room for the turns read after the blocks, and for a while after
                room = total + total // 4 + 8 * _BLOCK
                lexical.vectors.reserve(room, dims, prefault=min(total + 2 * _BLOCK, room))
        hoped = len(firsts) * _BLOCK  # if every block counts
        after = yield from self._after_io(prefix, None if stale else tail, hoped, mark)
        chain: list[_Block] = []
        for first, item in zip(firsts, got, strict=False):
            block = (
                _decode_block(item, self._local, dims=lexical.dims, model=self._model)
                if isinstance(item, Item)
                else None
            )
            if block is None or block.first != first:
                if isinstance(item, Item):
                    self._faults.note(_BAD_BLOCK)
                break
            chain.append(block)
        del got
        if not chain:
            return 0
        lexical.add_blocks(prefix, chain)
        covered = len(chain) * _BLOCK
        if covered < hoped:  # a block missing or damaged: its turns are read one by one
            where = {"order": {"$gte": _order(covered), "$lt": _order(hoped)}}
            after = [*(yield from self._pages_io(prefix, where)), *after]
        yield from self._add_io(lexical, after)
        return covered

    def _after_io(
        self, prefix: tuple[str, ...], tail: Item | None, hoped: int, mark: _Mark
    ) -> _Io[list[Item]]:
        """The stored turns of the thread numbered ``hoped`` or more (those after its index
        blocks): fetched by the keys its tail lists (one batch of gets) when what they fetch
        accounts for every number from ``hoped`` to the one before the next the thread's
        ``mark`` announces; else (no tail, or not the one the mark's write left; a turn gone,
        or a numbering that went back) scanned for. A scan filters on every stored turn's value
        (SqliteStore: ``json_extract`` over megabytes, 0.2 s at 50k turns); the gets read only
        the tail's turns."""
        listed, following = _read_tail(tail, mark), mark[1]
        if listed is not None and listed.high <= following:  # (else a reset: see _tail_value)
            keys = list(dict.fromkeys(k for n, k in listed.pairs if n >= hoped))
            got = (yield [GetOp(prefix, k, self._refresh_ttl) for k in keys]) if keys else []
            # what the scan's filter keeps, by the turn's number (its ``order``, damaged, may
            # not sort: the turn is still the tail's)
            items = [it for it in got if isinstance(it, Item) and (_seq_of(it.value) or 0) >= hoped]
            numbers = {_seq_of(it.value) for it in items}
            if all(n in numbers for n in range(hoped, following)):
                return items
        return (yield from self._pages_io(prefix, {"order": {"$gte": _order(hoped)}}))

    def _pages_io(
        self, namespace: tuple[str, ...], where: dict[str, Any] | None, *, refresh: bool = True
    ) -> _Io[list[Item]]:
        """Every stored item under ``namespace`` that ``where`` keeps, in large pages (stores
        page by OFFSET). A store that cannot apply the filter to a damaged value
        (``InMemoryStore`` compares ``$gte`` as floats: a damaged ``order`` raises) is scanned
        without it, and the filter applied here (a turn whose number cannot be read is kept:
        indexed, never lost)."""
        ttl = self._refresh_ttl if refresh else False
        if where is None:
            return (yield from self._scan_io(namespace, None, ttl))
        try:
            return (yield from self._scan_io(namespace, where, ttl))
        except Exception:  # (a store failing for good fails the scan below too)
            self._faults.note(_BAD_FILTER)
            items = yield from self._scan_io(namespace, None, ttl)
            return [it for it in items if _kept_by(where, it.value)]

    def _scan_io(
        self, namespace: tuple[str, ...], where: dict[str, Any] | None, ttl: bool
    ) -> _Io[list[Item]]:
        items: list[Item] = []
        while True:
            (page,) = yield [SearchOp(namespace, where, _LOAD_PAGE, len(items), None, ttl)]
            assert isinstance(page, list)
            items += [it for it in page if isinstance(it, Item)]
            if len(page) < _LOAD_PAGE:
                return items

    def _catch_up(
        self, prefix: tuple[str, ...], lexical: _Lexical, seen: dict[str, _Mark]
    ) -> tuple[
        list[tuple[tuple[str, ...], dict[str, Any] | None]], list[tuple[tuple[str, ...], str]]
    ]:
        """What ``lexical`` lacks given the marks just ``seen``, per thread whose mark changed:
        the keys the last write listed, when its turns reach back to what the index had seen
        (then they are all it lacks: turn numbers are the same for every writer of a thread);
        else (its namespace, a filter on the turn numbers it has not seen), a scan."""
        scans: list[tuple[tuple[str, ...], dict[str, Any] | None]] = []
        fetches: list[tuple[tuple[str, ...], str]] = []
        for label, now in seen.items():
            before = lexical.marks.get(label)
            if before == now:
                continue
            # the last turn seen may have been written unfinished and completed since (same
            # number); a numbering that went back (state reset) reloads the thread
            since = 0 if before is None or now[1] < before[1] else max(before[1] - 1, 0)
            namespace = prefix if self.config.scope == "thread" else (*prefix, label)
            written = now[2]
            # the write starts at or before the first number the index never saw: the turns it
            # lists are all the index lacks (a completed unfinished turn is rewritten, listed)
            if before is not None and since and written is not None and written[0] <= before[1]:
                fetches += [(namespace, k) for k in written[1]]
                continue
            scans.append((namespace, {"order": {"$gte": _order(since)}} if since else None))
        return scans, fetches

    def _read_marks(self, marks_ns: tuple[str, ...]) -> _Io[dict[str, _Mark]]:
        """Every thread mark of the user (one page per 500 threads)."""
        found: dict[str, _Mark] = {}
        offset = 0
        while True:
            (page,) = yield [SearchOp(marks_ns, None, _PAGE, offset, None, self._refresh_ttl)]
            assert isinstance(page, list)
            for item in page:
                if isinstance(item, Item) and item.key != _USER_MARK:
                    mark = _mark_of(item)
                    assert mark is not None
                    found[item.key] = mark
            if len(page) < _PAGE:
                return found
            offset += _PAGE

    def _load(
        self,
        lexical: _Lexical,
        loads: Sequence[tuple[tuple[str, ...], dict[str, Any] | None]],
        fetches: Sequence[tuple[tuple[str, ...], str]] = (),
    ) -> _Io[None]:
        """Add the stored turns under each (namespace prefix, filter) to ``lexical``, every
        prefix's pages in one batch per round (large pages: stores page by OFFSET), and those
        of ``fetches`` (see ``_add_io``)."""
        pending = [(namespace, where, 0) for namespace, where in loads]
        loaded: list[Item] = []
        if fetches:  # the turns a mark listed: one get each, in one batch
            got = yield [GetOp(ns, k, self._refresh_ttl) for ns, k in fetches]
            loaded += [it for it in got if isinstance(it, Item)]
        try:
            loaded += yield from self._pages_together(pending)
        except Exception:  # a filter the store could not apply (see _pages_io)
            for namespace, where in loads:
                loaded += yield from self._pages_io(namespace, where)
        yield from self._add_io(lexical, loaded)

    def _pages_together(
        self, pending: list[tuple[tuple[str, ...], dict[str, Any] | None, int]]
    ) -> _Io[list[Item]]:
        """The pages of several scans, one batch per round."""
        loaded: list[Item] = []
        while pending:
            ops: list[Op] = [
                SearchOp(namespace, where, _LOAD_PAGE, offset, None, self._refresh_ttl)
                for namespace, where, offset in pending
            ]
            pages = yield ops
            more = []
            for (namespace, where, offset), page in zip(pending, pages, strict=True):
                assert isinstance(page, list)
                loaded += [it for it in page if isinstance(it, Item)]
                if len(page) == _LOAD_PAGE:
                    more.append((namespace, where, offset + _LOAD_PAGE))
            pending = more
        return loaded

    def _add_io(self, lexical: _Lexical, items: Sequence[Item]) -> _Io[None]:
        """Add stored turns to ``lexical``. Turns stored without vectors (written before they
        were kept, or by a store-side index) are embedded once, together, for a local dense
        index."""
        unembedded = lexical.add_many(items) if items else []
        if unembedded:
            parts = [_parts_of(PutOp(it.namespace, it.key, it.value)) for it in unembedded]
            texts = tuple(dict.fromkeys(p for group in parts for p in group))
            vectors = dict(zip(texts, (yield _Embed(texts)), strict=True))
            for item, group in zip(unembedded, parts, strict=True):
                uid = "/".join((*item.namespace, item.key))
                lexical.add_vectors(uid, [vectors[p] for p in group])

    def _facts_by_vector(
        self, items: Sequence[Item], query: Sequence[float], k: int
    ) -> _Io[list[_Candidate]]:
        """The facts ranked by the cosine of their stored vectors with ``query`` (a fact stored
        without vectors, by an older writer, is embedded here), best ``k`` first."""
        rows = {
            it.key: stored_vectors(it.value, dims=len(query), model=self._model) for it in items
        }
        missing = tuple(dict.fromkeys(str(it.value.get("text", "")) for it in items
                                      if rows[it.key] is None))  # fmt: skip
        if missing:
            fresh = dict(zip(missing, (yield _Embed(missing)), strict=True))
            for it in items:
                if rows[it.key] is None:
                    rows[it.key] = np.asarray([fresh[str(it.value.get("text", ""))]], np.float32)
        index = VectorIndex()
        for it in items:
            index.add("/".join((*it.namespace, it.key)), cast(Any, rows[it.key]))
        by_uid = {"/".join((*it.namespace, it.key)): it for it in items}
        return [
            replace(self._fact(by_uid[uid]), score=score) for uid, score in index.search(query, k)
        ]

    @staticmethod
    def _fact(item: Item) -> _Candidate:
        return _Candidate(
            uid="/".join((*item.namespace, item.key)),
            text=str(item.value.get("text", "")),
            kind="fact",
            ids=(item.key,),
            score=getattr(item, "score", None),
        )

    # -- knowledge sources ------------------------------------------------------------------------

    def _source_name(self, index: int) -> str:
        source = self.config.sources[index]
        return getattr(source, "name", None) or f"{type(source).__name__}[{index}]"

    def _passages(
        self, outcomes: Sequence[_SourceOutcome]
    ) -> tuple[list[list[_Candidate]], tuple[str, ...]]:
        """Each answering source's passages (deduplicated by content), and a line per source
        that failed or timed out ("name: error")."""
        rankings: list[list[_Candidate]] = []
        errors: list[str] = []
        for index, outcome in enumerate(outcomes):
            name = self._source_name(index)
            if isinstance(outcome, _TimedOut):
                errors.append(f"{name}: timed out after {self.config.source_timeout}s")
            elif isinstance(outcome, BaseException):
                errors.append(f"{name}: {type(outcome).__name__}: {outcome}")
            else:
                rankings.append(_passages_of(index, name, outcome))
        return rankings, tuple(errors)

    # -- fusion and the context message -----------------------------------------------------------

    def _fuse(
        self,
        turns: list[tuple[float, list[_Candidate]]],
        passages: list[list[_Candidate]],
        shown: Collection[str],
    ) -> list[_Candidate]:
        """Weighted reciprocal rank fusion of every ranking, over what the view does not show
        (``shown``: the position-safe keys of the view's messages; ranks count only turns
        outside it); dedupe by content (the best-ranked copy is kept); cap turns at ``k`` and
        passages at ``source_k``."""
        by_uid: dict[str, _Candidate] = {}
        rankings: list[list[str]] = []
        weights: list[float] = []
        for weight, ranking in [*turns, *((1.0, p) for p in passages)]:
            kept = [c for c in ranking if c.kind == "passage" or not any(i in shown for i in c.ids)]
            rankings.append([c.uid for c in kept])
            weights.append(weight)
            for c in kept:
                by_uid.setdefault(c.uid, c)
        floor = self.config.min_score
        if floor is not None and turns and self.config.ranking != "bm25":
            best = max((c.score for c in by_uid.values() if c.score is not None), default=None)
            if best is None or best < floor:  # nothing remembered is close enough: none of it
                by_uid = {u: c for u, c in by_uid.items() if c.kind == "passage"}
                rankings = [[u for u in r if u in by_uid] for r in rankings]
        picked: list[_Candidate] = []
        texts: set[str] = set()
        counts = {"turn": 0, "fact": 0, "passage": 0}
        caps = {
            "turn": self.config.max_turns,
            "fact": self.config.max_turns,
            "passage": self.config.max_passages,
        }
        fused = reciprocal_rank_fusion(rankings, k=self.config.rrf_k, weights=weights)
        for uid, _ in fused:
            c = by_uid[uid]
            norm = _normal(c.text)
            if norm in texts or counts[c.kind] >= caps[c.kind]:
                continue
            texts.add(norm)
            counts[c.kind] += 1
            picked.append(c)
        return picked

    def _message(self, blocks: Sequence[tuple[_Candidate, str]]) -> tuple[HumanMessage, int]:
        """The context message of ``blocks`` (turns first, oldest first) and its tokens."""
        rank = {"turn": 0, "fact": 1, "passage": 2}
        ordered = sorted(blocks, key=lambda b: (rank[b[0].kind], b[0].seq))
        text = "\n".join([_OPEN, _HEADER, *(block for _, block in ordered), _CLOSE])
        message = HumanMessage(text, id=RETRIEVED_ID)
        return message, self.counter.count_message(message)

    def _context(
        self, picked: Sequence[_Candidate], query: str = ""
    ) -> tuple[list[_Candidate], tuple[HumanMessage, int] | None]:
        """What goes into the context message, and the message with its tokens (None when
        nothing fits): 1. the results, best first, each whole or not at all, while they fit
        ``max_retrieved_tokens`` (packed compactly for ``query``, see ``compact``; a question
        about what the assistant said gets whole turns); 2. with what is left, each chosen
        turn's neighbour, best first (a neighbour never displaces a result).

        Blocks are costed one by one (O(results), not a recount of the message per result);
        the message is then counted exactly, and while a tokenizer's joins make it cost more
        than the budget, the last result chosen leaves again."""
        budget = self.config.max_retrieved_tokens
        used = self._message([])[1]
        if used > budget:
            return [], None
        compact = self.config.compact and not _ASKS_ASSISTANT.search(query)
        terms = frozenset(tokenize(query)) if compact else None
        # a counter's cheap lower bound (``TiktokenCounter.tokens_at_least``) skips a block that
        # cannot fit without counting it: most of the candidates come after the room is spent
        at_least: Callable[[str], int] = getattr(self.counter, "tokens_at_least", _no_bound)
        chosen: list[tuple[_Candidate, str]] = []
        for c in picked:
            # a short follow-up ("it's my staff number"), or the answer to a question the turn
            # before ended with ("what is it for?"), comes with that turn
            follow = (
                compact
                and bool(c.prev)
                and (
                    _user_words(c.parts) < _COMPACT_WORDS
                    or (c.prev.rstrip().endswith("?") and _user_words(c.parts) < _ANSWER_WORDS)
                )
            )
            for with_prev in (True, False) if follow else (False,):
                # the turn before never costs the result its place: without it, if need be
                block = _block(c, with_prev=with_prev, terms=terms)
                if used + at_least(block) > budget:
                    continue
                cost = self.counter.count_text(block + "\n")
                if used + cost <= budget:
                    chosen.append((c, block))
                    used += cost
                    break
        if self.config.neighbors:
            for i, (c, block) in enumerate(list(chosen)):
                if not c.prev:
                    continue
                wider = _block(c, with_prev=True, terms=terms)
                more = self.counter.count_text(wider + "\n") - self.counter.count_text(block + "\n")
                if used + more <= budget:
                    chosen[i] = (c, wider)
                    used += more
        while chosen:
            message, tokens = self._message(chosen)
            if tokens <= budget:
                return [c for c, _ in chosen], (message, tokens)
            chosen.pop()
        return [], None

    def _compose(
        self,
        inner: MemoryResult,
        state: MemoryState,
        picked: Sequence[_Candidate],
        errors: tuple[str, ...],
        indexed: int,
        query: str = "",
    ) -> MemoryResult:
        """The inner view with the context message placed just before the newest human
        message (late, so the cached prompt prefix stays the same)."""
        chosen, message = self._context(picked, query)
        budget = inner.report.budget  # the inner's, with the context's share held back: add it
        report = replace(
            inner.report,
            indexed=indexed,
            source_errors=errors,
            budget=None if budget is None else budget + self.config.max_retrieved_tokens,
        )
        view = list(inner.messages)
        if message is None:
            return MemoryResult(view, state, report)
        context, cost = message
        at = _last_human(view)
        view.insert(len(view) if at is None else at, context)
        report = replace(
            report,
            tokens_after=report.tokens_after + cost,
            messages_after=report.messages_after + 1,
            retrieved=tuple(c.uid for c in chosen),
            retrieved_tokens=cost,
        )
        return MemoryResult(view, state, report)


def _upcoming(messages: Sequence[BaseMessage], kept_from: int) -> list[str]:
    """The texts the next calls are likeliest to index: the parts (``_parts``) of the view's
    oldest messages (not system messages), at most ``_PREFETCH_MESSAGES``, never the newest two
    (the request and what answers it stay in view longest)."""
    end = min(kept_from + _PREFETCH_MESSAGES, len(messages) - 2)
    return _parts([m for m in messages[kept_from:end] if not is_system(m)])


class _Prefetch:
    """Vectors embedded ahead (``prefetch_embeddings``) by one worker thread, kept until the
    call that indexes their turn takes them (at most ``_PREFETCHED`` texts, oldest dropped).
    A failure is only logged: the call embeds the text itself, as without prefetching."""

    def __init__(self, embeddings: Embeddings) -> None:
        self.embeddings = embeddings
        self._vectors: OrderedDict[str, list[float]] = OrderedDict()
        self._pending: set[str] = set()
        self._futures: set[concurrent.futures.Future[None]] = set()
        self._lock = threading.Lock()
        self._executor: concurrent.futures.ThreadPoolExecutor | None = None
        #: texts embedded ahead / taken by a call / embeddings that failed (for tests, benches)
        self.embedded = self.taken = self.failures = 0

    def start(self, texts: Sequence[str]) -> None:
        with self._lock:
            missing = tuple(
                t for t in dict.fromkeys(texts) if t not in self._vectors and t not in self._pending
            )
            if not missing:
                return
            if self._executor is None:
                self._executor = concurrent.futures.ThreadPoolExecutor(
                    max_workers=1, thread_name_prefix="langmem_ext-prefetch"
                )
            self._pending.update(missing)
            future = self._executor.submit(self._embed, missing)
            self._futures.add(future)
        future.add_done_callback(self._done)

    def _done(self, future: concurrent.futures.Future[None]) -> None:
        with self._lock:
            self._futures.discard(future)

    def _embed(self, texts: tuple[str, ...]) -> None:
        try:
            vectors = self.embeddings.embed_documents(list(texts))
            if len(vectors) != len(texts):
                raise ValueError(f"{len(vectors)} vectors for {len(texts)} texts")
        except Exception as exc:  # the call that needs them embeds them itself
            logger.debug("langmem_ext: embedding ahead failed: %r", exc)
            with self._lock:
                self._pending.difference_update(texts)
                self.failures += 1
            return
        with self._lock:
            self._pending.difference_update(texts)
            self._vectors.update(zip(texts, (list(v) for v in vectors), strict=True))
            self.embedded += len(texts)
            while len(self._vectors) > _PREFETCHED:
                self._vectors.popitem(last=False)

    def take(self, texts: Sequence[str]) -> dict[str, list[float]]:
        """The vectors ready for ``texts`` (each handed out once: its turn is being indexed)."""
        with self._lock:
            found = {t: v for t in texts if (v := self._vectors.pop(t, None)) is not None}
            self.taken += len(found)
            return found

    def running(self) -> list[concurrent.futures.Future[None]]:
        with self._lock:
            return list(self._futures)


class _Prefetched(Embeddings):
    """``inner``, answering documents from the vectors embedded ahead where it can."""

    def __init__(self, inner: Embeddings, prefetch: _Prefetch) -> None:
        self.inner = inner
        self.prefetch = prefetch

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        ready, missing = self._split(texts)
        return _joined(
            texts, ready, missing, self.inner.embed_documents(missing) if missing else []
        )

    async def aembed_documents(self, texts: list[str]) -> list[list[float]]:
        ready, missing = self._split(texts)
        fresh = await self.inner.aembed_documents(missing) if missing else []
        return _joined(texts, ready, missing, fresh)

    def _split(self, texts: list[str]) -> tuple[dict[str, list[float]], list[str]]:
        """The vectors ready for ``texts``, and the texts still to embed."""
        ready = self.prefetch.take(texts)
        return ready, [t for t in texts if t not in ready]

    def embed_query(self, text: str) -> list[float]:
        return self.inner.embed_query(text)

    async def aembed_query(self, text: str) -> list[float]:
        return await self.inner.aembed_query(text)


def _joined(
    texts: Sequence[str],
    ready: dict[str, list[float]],
    missing: Sequence[str],
    fresh: Sequence[list[float]],
) -> list[list[float]]:
    """The vectors of ``texts``, in order: ``ready`` ones and those just made for ``missing``."""
    made = dict(zip(missing, fresh, strict=True))
    return [ready[t] if t in ready else made[t] for t in texts]


def _no_bound(text: str) -> int:
    return 0


def _passages_of(index: int, name: str, documents: Sequence[Document]) -> list[_Candidate]:
    """Source ``index``'s documents as passages, without repeats of the same content."""
    seen: set[str] = set()
    out: list[_Candidate] = []
    for document in documents:
        text = document.page_content
        norm = _normal(text)
        if not norm or norm in seen:
            continue
        seen.add(norm)
        out.append(
            _Candidate(uid=f"source:{index}:{len(out)}", text=text, kind="passage", source=name)
        )
    return out


def _block(c: _Candidate, *, with_prev: bool, terms: frozenset[str] | None = None) -> str:
    """One fenced block. Everything retrieved is neutralised (no tag of ours inside it can
    open or close a fence), and a source's name cannot leave its attribute."""
    if c.kind == "fact":
        return f"<fact>\n{neutralize(c.text)}\n</fact>"
    if c.kind == "passage":
        name = neutralize(c.source).replace('"', "'")
        return f'<passage source="{name}">\n{neutralize(c.text)}\n</passage>'
    packed = None if terms is None else _compact(c.parts, _COMPACT_WORDS, terms)
    body = neutralize(c.text if packed is None else packed)
    if with_prev and c.prev:
        body = f"(the turn before)\n{neutralize(c.prev)}\n(the turn)\n{body}"
    return f"<turn n={c.seq}>\n{body}\n</turn>"
