"""Background folds shared by the workers of one store: :class:`StoreSharedFolds`.

N worker processes serve one agent behind a load balancer, on one PostgreSQL (``PostgresSaver``
for the threads, ``PostgresStore`` for long-term memory). A background fold started by one
worker (``prefetch_tokens``) is adopted by whichever worker serves the thread's next turn,
instead of being folded again there: the thread's record (a lease while the fold runs, its
result when it ends; :mod:`langmem_ext.strategies.shared_folds` says what it holds and why this
is safe when one thread's turns run one after another) is one item of the store, under
``("langmem_ext", "folds", tenant, user, thread)``, key ``"fold"``.

``MemoryNode`` and ``MemoryMiddleware`` share through the graph's store (``compile(store=...)``,
``create_agent(store=...)``) by default, or a store passed as ``share_folds=``; only a strategy
that folds in the background reads or writes it, and only when its plan asks for a fold. A
call without a ``thread_id`` shares nothing (no shared default).

Bounded. Every read and write is bounded by ``timeout`` seconds (a sync store call runs in a
daemon thread, reused from call to call, and is abandoned at the bound: a hung call keeps its
thread and the next call gets another; an async one is cancelled); a store error, a
timeout or a damaged record degrades to folding in this worker, with a logged warning, never a
failed call. No lock is taken around a claim: the turns of one thread run one after another
(the LangGraph server runs them so), and a claim's lease is written before the turn that starts
the fold returns, so the next turn sees it; two overlapping turns of one thread can at worst
fold twice, never count twice. (An advisory lock held on a pooled connection while the store
takes another from the same pool starved the pool under load: 2 PoolTimeouts in the soak.) A
lease ends at the fold's deadline (:func:`~langmem_ext.strategies.folding.
job_deadline`, plus slack): a killed worker's lease is taken over once it has expired, or at
once when its owner was a process of this host that no longer runs (the owner is written as
host, pid and a random part). Leases compare the workers' wall clocks: clock skew between
machines shortens or lengthens a lease by the skew.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import os
import queue
import socket
import threading
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any, TypeVar

from langgraph.store.base import BaseStore

from langmem_ext.core.fold_config import FoldRequest
from langmem_ext.core.keys import MemoryKey
from langmem_ext.core.transitions import FoldFailed, FoldOutcome
from langmem_ext.strategies.shared_folds import Adopt, Claim, FoldRecord, Take

try:  # where LangGraph gives a running node its runtime (and the graph's store)
    from langgraph._internal._constants import CONFIG_KEY_RUNTIME
except ImportError:  # pragma: no cover - older/newer layouts; the value has not changed
    CONFIG_KEY_RUNTIME = "__pregel_runtime"

__all__ = ["ITEM_KEY", "KIND", "StoreSharedFolds", "graph_store", "shared_folds_for"]

logger = logging.getLogger("langmem_ext")

_T = TypeVar("_T")

#: the namespace kind and item key of a thread's shared fold record
KIND, ITEM_KEY = "folds", "fold"
#: seconds one claim or publish may take (its store calls together)
DEFAULT_TIMEOUT = 5.0
_LOCK_PURPOSE = "langmem_ext.fold.share"
#: this process, as a lease's owner (host, pid, a random part: a reused pid is another owner)
_HOST = socket.gethostname()
_OWNER = f"{_HOST}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


def _forked() -> None:
    """In a forked child (a pre-forking server's worker): an owner of its own."""
    global _OWNER
    _OWNER = f"{_HOST}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


class StoreSharedFolds:
    """A thread's shared background folds, as one item of ``store`` under ``namespace``
    (:class:`~langmem_ext.strategies.shared_folds.SharedFolds`). Cheap to make: one per call."""

    def __init__(
        self, store: BaseStore, namespace: tuple[str, ...], *, timeout: float = DEFAULT_TIMEOUT
    ) -> None:
        self.store = store
        self.namespace = namespace
        self.timeout = timeout
        self.owner = _OWNER

    def __repr__(self) -> str:
        return f"StoreSharedFolds({type(self.store).__name__}, {self.namespace!r})"

    # -- the protocol -----------------------------------------------------------------------------

    def claim(self, request: FoldRequest, *, lease: float, take: bool) -> Claim:
        try:
            return _bounded(self.timeout, self._claim, request, lease, take)
        except Exception as error:
            self._degraded("claim", error)
            return None

    async def aclaim(self, request: FoldRequest, *, lease: float, take: bool) -> Claim:
        try:
            return await asyncio.wait_for(self._aclaim(request, lease, take), self.timeout)
        except Exception as error:  # TimeoutError included
            self._degraded("claim", error)
            return None

    def publish(self, taken: Take, outcome: FoldOutcome) -> None:
        try:
            _bounded(self.timeout, self._publish, taken.record.settled(outcome))
        except Exception as error:
            self._degraded("publish", error)

    # -- sync -------------------------------------------------------------------------------------

    def _claim(self, request: FoldRequest, lease: float, take: bool) -> Claim:
        record = self._read(self.store.get(self.namespace, ITEM_KEY))
        now = time.time()
        answer = record.answer(request, now) if record is not None else None
        write = _written(record, answer, request, take, now + lease, self.owner)
        if write is not None:
            self.store.put(self.namespace, ITEM_KEY, write.to_dict(), index=False)
        return Take(write) if answer is None and take and write is not None else answer

    def _publish(self, settled: FoldRecord) -> None:
        current = self._read(self.store.get(self.namespace, ITEM_KEY))
        if current is None or current.origin == settled.origin:  # not moved on meanwhile
            self.store.put(self.namespace, ITEM_KEY, settled.to_dict(), index=False)

    # -- async ------------------------------------------------------------------------------------

    async def _aclaim(self, request: FoldRequest, lease: float, take: bool) -> Claim:
        record = self._read(await self.store.aget(self.namespace, ITEM_KEY))
        now = time.time()
        answer = record.answer(request, now) if record is not None else None
        write = _written(record, answer, request, take, now + lease, self.owner)
        if write is not None:
            await self.store.aput(self.namespace, ITEM_KEY, write.to_dict(), index=False)
        return Take(write) if answer is None and take and write is not None else answer

    # -- shared -----------------------------------------------------------------------------------

    def _read(self, item: Any) -> FoldRecord | None:
        if item is None:
            return None
        record = FoldRecord.from_dict(item.value)
        if record is None:
            logger.warning("langmem_ext: ignored a damaged shared fold record in %s", self)
        elif record.status == "running" and _owner_gone(record.owner):
            logger.info("langmem_ext: took over the lease of a worker that ended (%s)", self)
            return replace(record, until=0.0)  # expired: the claim takes it over
        return record

    def _degraded(self, what: str, error: BaseException) -> None:
        logger.warning(
            "langmem_ext: shared fold %s failed in %s (%s: %s); folding in this worker",
            what,
            self,
            type(error).__name__,
            error,
        )


def _owner_gone(owner: str) -> bool:
    """Whether the lease's owner was a process of this host that no longer runs (a worker
    killed mid-fold): its lease is taken over at once instead of when it expires. Another
    host's owner, or a live pid (possibly reused), is never judged gone."""
    host, _, rest = owner.partition(":")
    pid = rest.partition(":")[0]
    if host != _HOST or not pid.isdigit() or int(pid) == os.getpid():
        return False
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return True
    except OSError:  # exists, another user's: alive
        return False
    return False


def _written(
    record: FoldRecord | None,
    answer: Adopt | Any,
    request: FoldRequest,
    take: bool,
    until: float,
    owner: str,
) -> FoldRecord | None:
    """What a claim writes: a failure adopted once becomes ``consumed`` (the next attempt,
    after the backoff, starts a fold again); a free fold is leased when ``take``."""
    if isinstance(answer, Adopt) and isinstance(answer.outcome, FoldFailed):
        assert record is not None
        return replace(record, status="consumed")
    if answer is None and take:
        return FoldRecord.lease(request, until, owner)
    return None


#: daemon threads that run sync store calls at most (beyond, a call waits for a free one)
_MAX_RUNNERS = 8


class _Runners:
    """Daemon threads for bounded sync store calls, reused: starting a thread per call cost a
    millisecond or more under load (the caller waits for the new thread to be scheduled). An
    idle thread takes the next call; when none is idle (one may hang in a store call) another
    starts, up to :data:`_MAX_RUNNERS`."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._tasks: queue.SimpleQueue[tuple[concurrent.futures.Future[Any], Callable[[], Any]]]
        self._tasks = queue.SimpleQueue()
        self._idle = 0
        self._threads = 0

    def run(self, timeout: float, fn: Callable[[], _T]) -> _T:
        """``fn()`` in one of the threads, waited for at most ``timeout`` seconds."""
        future: concurrent.futures.Future[_T] = concurrent.futures.Future()
        with self._lock:
            if self._idle:  # an idle thread will take it
                self._idle -= 1
                start = False
            else:
                start = self._threads < _MAX_RUNNERS
                self._threads += start
        self._tasks.put((future, fn))
        if start:
            threading.Thread(target=self._serve, name="langmem_ext-fold-share", daemon=True).start()
        try:
            return future.result(timeout=timeout)
        except concurrent.futures.TimeoutError:
            future.cancel()  # not started yet: never run
            raise

    def _serve(self) -> None:
        while True:
            future, fn = self._tasks.get()
            if future.set_running_or_notify_cancel():
                try:
                    future.set_result(fn())
                except BaseException as error:
                    future.set_exception(error)
            with self._lock:
                self._idle += 1

    def forked(self) -> None:
        """In a forked child: the parent's threads are gone."""
        self.__init__()  # type: ignore[misc]


_RUNNERS = _Runners()
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_RUNNERS.forked)
    os.register_at_fork(after_in_child=_forked)


def _bounded(timeout: float, fn: Callable[..., _T], *args: Any) -> _T:
    """``fn(*args)`` in a daemon thread, waited for at most ``timeout`` seconds: a hung store
    call is abandoned (it ends on its own), never waited for."""
    return _RUNNERS.run(timeout, lambda: fn(*args))


def graph_store(config: Mapping[str, Any] | None) -> BaseStore | None:
    """The store of the graph a node runs in (``compile(store=...)``), or None."""
    configurable = (config or {}).get("configurable") or {}
    runtime = configurable.get(CONFIG_KEY_RUNTIME) if isinstance(configurable, Mapping) else None
    store = getattr(runtime, "store", None)
    return store if isinstance(store, BaseStore) else None


def shared_folds_for(
    share: bool | BaseStore, config: Mapping[str, Any] | None, store: BaseStore | None
) -> StoreSharedFolds | None:
    """Where a surface's call shares background folds: the store passed as ``share`` (True:
    ``store``, the graph's), under the run's thread; None when sharing is off, there is no
    store, or the run names no thread (no shared default)."""
    if share is False:
        return None
    chosen = share if isinstance(share, BaseStore) else store
    if chosen is None:
        return None
    try:
        key = MemoryKey.from_config(config)
    except (TypeError, ValueError):  # a config the surface's own key check reports
        return None
    if "session" in key.defaulted:
        return None
    return StoreSharedFolds(chosen, key.namespace(KIND))
