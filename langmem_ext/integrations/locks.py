"""The per-key write locks of :class:`~langmem_ext.integrations.history.ManagedChatMessageHistory`.

Every write of one key runs alone (see the module notes of
:mod:`~langmem_ext.integrations.history`):

* in process, :class:`KeyLock`: a ``threading.Lock`` (and an ``asyncio.Lock`` per event loop),
  one per (store, namespace) from :func:`key_lock`;
* across processes on PostgreSQL, a session advisory lock on a 64-bit hash of the namespace
  (:func:`advisory_key`), polled with ``pg_try_advisory_lock`` on the store's or the backing
  history's connection (:func:`pg_connection`): :func:`pg_lock` / :func:`apg_lock`;
* across processes on SQLite, a POSIX record lock on one byte (per key) of
  ``<store file>.langmem-ext.lock`` (:func:`sqlite_file`): :func:`file_lock` / :func:`afile_lock`.

Waiting is polled with backoff (:func:`polled`), so a waiting writer never blocks a connection or
the event loop.
"""

from __future__ import annotations

import asyncio
import errno
import hashlib
import os
import sqlite3
import sys
import threading
import time
import weakref
from collections.abc import AsyncIterator, Hashable, Iterator, Sequence
from contextlib import asynccontextmanager, contextmanager
from typing import Any

from langchain_core.chat_history import BaseChatMessageHistory
from langgraph.store.base import BaseStore

from langmem_ext.core.steps import Flow, arun, run
from langmem_ext.integrations._store import Io, uncancelled

__all__ = [
    "KeyLock",
    "advisory_key",
    "afile_lock",
    "apg_lock",
    "asqlite_file",
    "file_lock",
    "in_flight",
    "key_lock",
    "pg_connection",
    "pg_lock",
    "polled",
    "sqlite_file",
]


class KeyLock:
    """The in-process lock of one (store, namespace): a ``threading.Lock`` for every writer, and
    one ``asyncio.Lock`` per event loop so that tasks of one loop queue without polling."""

    __slots__ = ("__weakref__", "_loops", "holder", "thread")

    def __init__(self) -> None:
        self.thread = threading.Lock()
        #: the thread that holds ``thread`` (an async writer holds it across awaits)
        self.holder: int | None = None
        self._loops: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Lock] = (
            weakref.WeakKeyDictionary()
        )

    def for_running_loop(self) -> asyncio.Lock:
        loop = asyncio.get_running_loop()
        with _REGISTRY_LOCK:
            lock = self._loops.get(loop)
            if lock is None:
                lock = self._loops[loop] = asyncio.Lock()
            return lock


# Entries live while a writer holds them (weak values): a history that is being written keeps its
# store (and connection) alive, so the ``id()`` in the key is never reused while it is there.
_REGISTRY: weakref.WeakValueDictionary[tuple[Hashable, tuple[str, ...]], KeyLock] = (
    weakref.WeakValueDictionary()
)
_REGISTRY_LOCK = threading.Lock()
_POLL_FIRST, _POLL_MAX = 0.001, 0.05


def key_lock(owner: Hashable, namespace: tuple[str, ...]) -> KeyLock:
    with _REGISTRY_LOCK:
        entry = _REGISTRY.get((owner, namespace))
        if entry is None:
            entry = KeyLock()
            _REGISTRY[(owner, namespace)] = entry
        return entry


def advisory_key(namespace: tuple[str, ...]) -> int:
    """A signed 64-bit PostgreSQL advisory-lock key for ``namespace`` (stable across processes)."""
    text = "\x1f".join(("langmem_ext.history.write", *namespace)).encode()
    return int.from_bytes(hashlib.blake2b(text, digest_size=8).digest(), "big", signed=True)


def pg_connection(store: BaseStore, history: BaseChatMessageHistory, *, sync: bool) -> Any:
    """The PostgreSQL connection (or pool) whose session takes the cross-process lock, or None.

    The store's when it is a (sync or async) ``PostgresStore``, else the backing history's when
    it is langchain-postgres' ``PostgresChatMessageHistory``. Only a connection of the right kind
    for the caller (sync or async) is usable.
    """
    candidates: list[Any] = []
    module = type(store).__module__
    if module.startswith("langgraph.store.postgres"):
        candidates.append(getattr(store, "conn", None))
    if type(history).__module__.startswith("langchain_postgres"):
        candidates.append(getattr(history, "_connection" if sync else "_aconnection", None))
    for conn in candidates:
        if conn is None:
            continue
        if _is_async_pg(conn) != sync:
            return conn
    return None


def _is_async_pg(conn: Any) -> bool:
    import psycopg

    if isinstance(conn, psycopg.AsyncConnection):
        return True
    if isinstance(conn, psycopg.Connection):
        return False
    try:
        from psycopg_pool import AsyncConnectionPool
    except ImportError:  # pragma: no cover - psycopg_pool ships with langgraph's postgres store
        return False
    return isinstance(conn, AsyncConnectionPool)


def _is_sqlite_store(store: BaseStore) -> bool:
    return type(store).__module__.startswith("langgraph.store.sqlite")


def _main_file(rows: Sequence[Sequence[Any]]) -> str | None:
    """The file of the ``main`` database in ``PRAGMA database_list`` rows (None: in memory)."""
    for row in rows:
        if row[1] == "main" and row[2]:
            return os.path.realpath(str(row[2]))
    return None


def sqlite_file(store: BaseStore) -> str | None:
    """The database file of a ``SqliteStore`` (None: not one, or an in-memory database)."""
    conn = getattr(store, "conn", None)
    if not _is_sqlite_store(store) or not isinstance(conn, sqlite3.Connection):
        return None
    with store.lock:  # type: ignore[attr-defined]  # the store's own connection lock
        return _main_file(conn.execute("PRAGMA database_list").fetchall())


async def asqlite_file(store: BaseStore) -> str | None:
    """The database file of an ``AsyncSqliteStore`` (None: not one, or in memory)."""
    conn = getattr(store, "conn", None)
    if not _is_sqlite_store(store) or conn is None or isinstance(conn, sqlite3.Connection):
        return None
    async with store.lock, conn.execute("PRAGMA database_list") as cursor:  # type: ignore[attr-defined]
        return _main_file(list(await cursor.fetchall()))


# One descriptor per lock file, open for the life of the process: POSIX record locks belong to
# the process, and closing *any* descriptor of the file would release all of them.
_LOCK_FILES: dict[str, int] = {}


def _lock_file(database: str) -> int | None:
    if sys.platform == "win32":  # no fcntl: in-process lock only
        return None
    with _REGISTRY_LOCK:
        fd = _LOCK_FILES.get(database)
        if fd is None:
            fd = os.open(database + ".langmem-ext.lock", os.O_RDWR | os.O_CREAT, 0o666)
            _LOCK_FILES[database] = fd
        return fd


def _try_file_lock(fd: int, offset: int, *, unlock: bool = False) -> bool:
    """Lock (or unlock) one byte at ``offset`` of the lock file, without waiting."""
    if sys.platform == "win32":  # pragma: no cover - _lock_file gave no descriptor
        return True
    import fcntl

    if unlock:
        fcntl.lockf(fd, fcntl.LOCK_UN, 1, offset)
        return True
    try:
        fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB, 1, offset)
    except OSError as error:
        if error.errno in (errno.EACCES, errno.EAGAIN):
            return False
        raise
    return True


def _file_offset(namespace: tuple[str, ...]) -> int:
    return advisory_key(namespace) & 0x7FFF_FFFF


def polled(attempt: Io[bool]) -> Flow[None]:
    """Repeat ``attempt`` (a non-blocking try-lock) until it succeeds, sleeping between tries
    with exponential backoff: a waiting writer never blocks a connection or the event loop."""
    delay = _POLL_FIRST
    while not (yield attempt):
        yield Io.of(time.sleep, asyncio.sleep, delay)
        delay = min(delay * 2, _POLL_MAX)


def _file_lock_flow(database: str, namespace: tuple[str, ...]) -> Flow[tuple[int, int] | None]:
    """Take the record lock of ``namespace`` on ``database``'s lock file: (descriptor, offset)
    to release, or None where there are no record locks (Windows)."""
    fd = _lock_file(database)
    if fd is None:
        return None
    offset = _file_offset(namespace)
    yield from polled(Io.inline(_try_file_lock, fd, offset))
    return fd, offset


def _release_file_lock(held: tuple[int, int] | None) -> None:
    if held is not None:
        _try_file_lock(*held, unlock=True)


@contextmanager
def file_lock(database: str, namespace: tuple[str, ...]) -> Iterator[None]:
    """Across processes on one SQLite file: a POSIX record lock on a byte of a lock file next
    to it (one byte per key). Released by the kernel when the process dies."""
    held = run(_file_lock_flow(database, namespace))
    try:
        yield
    finally:
        _release_file_lock(held)


@asynccontextmanager
async def afile_lock(database: str, namespace: tuple[str, ...]) -> AsyncIterator[None]:
    held = await arun(_file_lock_flow(database, namespace))  # non-blocking tries: no shield
    try:
        yield
    finally:
        _release_file_lock(held)


_TRY_LOCK = "SELECT pg_try_advisory_lock(%s)"
_UNLOCK = "SELECT pg_advisory_unlock(%s)"


def _pg_query(conn: Any, sql: str, key: int) -> bool:
    """Run a one-value advisory-lock query without leaving a transaction open that was not."""
    from psycopg.pq import TransactionStatus
    from psycopg.rows import tuple_row

    idle = conn.info.transaction_status == TransactionStatus.IDLE
    with conn.cursor(row_factory=tuple_row) as cursor:
        cursor.execute(sql, (key,))
        row = cursor.fetchone()
    if idle and not conn.autocommit:
        conn.commit()
    return bool(row and row[0])


async def _apg_query(conn: Any, sql: str, key: int) -> bool:
    from psycopg.pq import TransactionStatus
    from psycopg.rows import tuple_row

    idle = conn.info.transaction_status == TransactionStatus.IDLE
    async with conn.cursor(row_factory=tuple_row) as cursor:
        await cursor.execute(sql, (key,))
        row = await cursor.fetchone()
    if idle and not conn.autocommit:
        await conn.commit()
    return bool(row and row[0])


@contextmanager
def pg_lock(conn: Any, key: int) -> Iterator[None]:
    """Hold the session advisory lock ``key`` on ``conn`` (a connection or a pool)."""
    import psycopg

    if not isinstance(conn, psycopg.Connection):  # a pool: hold one connection throughout
        with conn.connection() as held, pg_lock(held, key):
            yield
        return
    run(polled(Io.inline(_pg_query, conn, _TRY_LOCK, key)))  # (sync only)
    try:
        yield
    finally:
        _pg_query(conn, _UNLOCK, key)


def in_flight() -> bool:
    return sys.exc_info()[0] is not None


@asynccontextmanager
async def apg_lock(conn: Any, key: int) -> AsyncIterator[None]:
    """Async :func:`pg_lock`; cancellable while it waits, never leaks the lock."""
    import psycopg

    if not isinstance(conn, psycopg.AsyncConnection):  # a pool
        async with conn.connection() as held, apg_lock(held, key):
            yield
        return
    acquired = False
    try:
        delay = _POLL_FIRST
        while True:
            acquired, cancelled = await uncancelled(_apg_query(conn, _TRY_LOCK, key))
            if cancelled:
                raise asyncio.CancelledError
            if acquired:
                break
            await asyncio.sleep(delay)
            delay = min(delay * 2, _POLL_MAX)
        yield
    finally:
        if acquired:
            _, cancelled = await uncancelled(_apg_query(conn, _UNLOCK, key))
            if cancelled and not in_flight():
                raise asyncio.CancelledError
