"""How Retrieval's I/O runs: the steps its plan yields to the drivers, and the steps of the
sans-I/O store flows inside them (all run by the drivers of :mod:`langmem_ext.core.steps`).

* :class:`_StoreFlow` runs a generator of ``BaseStore`` operation batches (and :class:`Embed`
  requests) with ``batch`` / ``abatch``, asking a busy store again (:func:`batch_retrying`): each
  batch becomes a :class:`_Batch` step and each embedding an :class:`_Embedding` step;
* :class:`_SourceSearch` asks every knowledge source at once, each under a timeout (threads under
  ``run``, tasks under ``arun``);
* :class:`_Together` runs two requests at once.

The three request types keep their leading underscore: drivers and tests tell the requests of a
plan apart by their type names.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import logging
import random
import sqlite3
import time
from collections.abc import Generator, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar, cast

from langchain_core.documents import Document
from langchain_core.embeddings import Embeddings
from langchain_core.vectorstores import VectorStore
from langgraph.store.base import BaseStore, GetOp, Op, PutOp, get_text_at_path, tokenize_path

from langmem_ext.core.steps import Flow, Raised, Step, arun, resume, run
from langmem_ext.retrieval.config import Source

logger = logging.getLogger("langmem_ext")

_T = TypeVar("_T")
#: a sans-I/O flow of the index: yields batches of store operations (receiving their results)
#: and embedding steps (receiving the vectors)
Io = Generator[Any, Any, _T]


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


# -- a large batch ---------------------------------------------------------------------------------

#: bind parameters one store call may need at most. LangGraph's SQL stores make one statement of
#: all the puts of a call (``INSERT ... VALUES``: 5 parameters a put, and one more statement with
#: 4 for each text the store embeds) and, in ``SqliteStore``, one of all the gets of a namespace
#: (``key IN (...)``: 1 a get; ``PostgresStore`` passes arrays). PostgreSQL refuses a statement
#: with more than 65,535 parameters and SQLite (by default since 3.32) more than 32,766: one call
#: that evicts ~13k turns would fail. A batch is cut into calls under this, in order.
MAX_BATCH_PARAMS = 30_000
#: texts a store with its own index embeds in one call at most (it embeds a call's puts in one
#: request: a 50k-turn eviction must not be one giant embedding request)
MAX_STORE_EMBEDS = 512
#: texts per embedding request of a local dense index (the same reason)
EMBED_BATCH = 512


def _embedded_by_store(store: BaseStore, op: PutOp) -> int:
    """How many texts ``store`` embeds for ``op`` (0: a store without an index, a delete, a
    write that opts out)."""
    config = getattr(store, "index_config", None)
    if op.value is None or op.index is False or not config:
        return 0
    paths = op.index if op.index is not None else (config.get("fields") or ["$"])
    return sum(len(get_text_at_path(op.value, tokenize_path(p))) for p in paths)


def _cost(store: BaseStore, op: Op) -> tuple[int, int]:
    """(bind parameters, texts the store embeds) of ``op`` at most, in any store's SQL."""
    if isinstance(op, PutOp):
        texts = _embedded_by_store(store, op)
        return (5 if op.value is not None else 1) + 4 * texts, texts
    if isinstance(op, GetOp):
        return 1, 0
    return 8, 0  # a search or a listing: a statement of its own, with a few parameters


def store_calls(store: BaseStore, ops: Sequence[Op]) -> list[Sequence[Op]]:
    """``ops`` cut, in order, into the calls ``store`` is sent: each within
    ``MAX_BATCH_PARAMS`` and ``MAX_STORE_EMBEDS`` (an op over either alone is a call of its
    own). A batch within both (every batch of a steady conversation) is one call, as given."""
    if len(ops) * 8 <= MAX_BATCH_PARAMS and getattr(store, "index_config", None) is None:
        return [ops]
    calls: list[Sequence[Op]] = []
    start = params = texts = 0
    for n, op in enumerate(ops):
        more, embeds = _cost(store, op)
        if n > start and (params + more > MAX_BATCH_PARAMS or texts + embeds > MAX_STORE_EMBEDS):
            calls.append(ops[start:n])
            start, params, texts = n, 0, 0
        params, texts = params + more, texts + embeds
    calls.append(ops[start:])
    return calls


def batch_retrying(store: BaseStore, ops: Sequence[Op], limit: float | None = None) -> list[Any]:
    """``store.batch(ops)``, asked again with a bounded backoff while the store reports itself
    busy (``BUSY_RETRY_SECONDS`` in all, then the error is raised). Safe for the batches
    Retrieval and the surfaces make: reads, and puts that write the same values again. A large
    batch is sent as several calls (:func:`store_calls`), its results joined in order."""
    retry = _BusyRetry(store, limit)
    results: list[Any] = []
    for call in store_calls(store, ops):
        while True:
            try:
                results += store.batch(call)
                break
            except Exception as error:
                time.sleep(retry.wait_after(error))
    return results


async def abatch_retrying(
    store: BaseStore, ops: Sequence[Op], limit: float | None = None
) -> list[Any]:
    """Async :func:`batch_retrying` (the waits do not block the event loop)."""
    retry = _BusyRetry(store, limit)
    results: list[Any] = []
    for call in store_calls(store, ops):
        while True:
            try:
                results += await store.abatch(call)
                break
            except Exception as error:
                await asyncio.sleep(retry.wait_after(error))
    return results


# -- the requests Retrieval's plan makes ---------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Embed:
    """A step of an index flow: embed ``texts`` (documents, or one ``query``)."""

    texts: tuple[str, ...]
    query: bool = False


@dataclass(frozen=True)
class _StoreFlow(Step, Generic[_T]):
    """Run ``flow`` (a sans-I/O generator of store operations, and of :class:`Embed` requests
    answered by ``embeddings``) with ``batch`` / ``abatch``."""

    store: BaseStore
    flow: Io[_T]
    writes: bool = False
    embeddings: Embeddings | None = None

    def run(self) -> _T:
        return run(self._steps())

    async def arun(self) -> _T:
        return await arun(self._steps())

    def _steps(self) -> Flow[_T]:
        """``flow`` as a flow of steps. A failed batch is thrown into it (it may scan
        otherwise); a failed embedding ends it (never thrown in: nothing there handles one)."""
        request, result = resume(self.flow, None)
        while request is not None:
            reply: Any
            if isinstance(request, Embed):
                reply = yield _Embedding(self._embedder(), request)
            else:
                try:
                    reply = yield _Batch(self.store, request)
                except Exception as error:
                    reply = Raised(error)
            request, result = resume(self.flow, reply)
        return cast(_T, result)

    def _embedder(self) -> Embeddings:
        assert self.embeddings is not None, "an index flow asked to embed without embeddings"
        return self.embeddings


@dataclass(frozen=True, slots=True)
class _Batch(Step):
    """A step of an index flow: one batch of store operations (asked again while busy)."""

    store: BaseStore
    ops: Sequence[Op]

    def run(self) -> list[Any]:
        return batch_retrying(self.store, self.ops)

    async def arun(self) -> list[Any]:
        return await abatch_retrying(self.store, self.ops)


@dataclass(frozen=True, slots=True)
class _Embedding(Step):
    """A step of an index flow: ``embed``'s texts embedded (documents, or one query)."""

    embeddings: Embeddings
    embed: Embed

    def run(self) -> Any:
        texts = self.embed.texts
        if self.embed.query:
            return self.embeddings.embed_query(texts[0])
        vectors: list[list[float]] = []
        for chunk in _chunks(texts):
            vectors += self.embeddings.embed_documents(chunk)
        return vectors

    async def arun(self) -> Any:
        texts = self.embed.texts
        if self.embed.query:
            return await self.embeddings.aembed_query(texts[0])
        vectors: list[list[float]] = []
        for chunk in _chunks(texts):
            vectors += await self.embeddings.aembed_documents(chunk)
        return vectors


def _chunks(texts: Sequence[str]) -> list[list[str]]:
    """``texts`` in requests of ``EMBED_BATCH`` (a model's request has limits of its own);
    one empty request for none, as before."""
    return [list(texts[i : i + EMBED_BATCH]) for i in range(0, len(texts), EMBED_BATCH)] or [[]]


class TimedOut:
    """A source's outcome when it did not answer within ``source_timeout``."""


TIMED_OUT = TimedOut()
#: what one knowledge source gave: its documents, the exception it raised, or TIMED_OUT
SourceOutcome = list[Document] | BaseException | TimedOut


def _search(source: Source, query: str, k: int) -> list[Document]:
    if isinstance(source, VectorStore):
        return source.similarity_search(query, k=k)
    return source.invoke(query)


async def _asearch(source: Source, query: str, k: int) -> list[Document]:
    if isinstance(source, VectorStore):
        return await source.asimilarity_search(query, k=k)
    return await source.ainvoke(query)


@dataclass(frozen=True)
class _SourceSearch(Step):
    """Ask every knowledge source for ``query`` at once, each within ``timeout`` seconds; the
    answer is each source's outcome, in order. A slow source never holds the turn."""

    sources: Sequence[Source]
    query: str
    k: int
    timeout: float

    def run(self) -> list[SourceOutcome]:
        if not self.sources:
            return []
        pool = concurrent.futures.ThreadPoolExecutor(
            max_workers=len(self.sources), thread_name_prefix="langmem_ext-source"
        )
        try:
            futures = [pool.submit(_search, s, self.query, self.k) for s in self.sources]
            done, _ = concurrent.futures.wait(futures, timeout=self.timeout)
            return [(f.exception() or f.result()) if f in done else TIMED_OUT for f in futures]
        finally:
            pool.shutdown(wait=False, cancel_futures=True)

    async def arun(self) -> list[SourceOutcome]:
        searches = (
            asyncio.wait_for(_asearch(s, self.query, self.k), self.timeout) for s in self.sources
        )
        outcomes = await asyncio.gather(*searches, return_exceptions=True)
        for outcome in outcomes:
            if isinstance(outcome, BaseException) and not isinstance(outcome, Exception):
                raise outcome  # cancellation and the like are not a source's failure
        return [TIMED_OUT if isinstance(o, asyncio.TimeoutError) else o for o in outcomes]


@dataclass(frozen=True)
class _Together(Step):
    """Two reads at once (concurrently under ``arun``); the answer is both answers."""

    first: Step
    second: Step

    def run(self) -> tuple[Any, Any]:
        return self.first.run(), self.second.run()

    async def arun(self) -> tuple[Any, Any]:
        first, second = await asyncio.gather(self.first.arun(), self.second.arun())
        return first, second
