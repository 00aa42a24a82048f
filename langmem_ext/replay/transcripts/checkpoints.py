"""Reading a LangGraph thread from its checkpointer: :func:`messages_from_checkpointer` for any
``BaseCheckpointSaver``, :func:`load_sqlite_thread` and :func:`load_postgres_thread` for the
saved ones (both read only: nothing is created or written, ``.setup()`` is never called)."""

from __future__ import annotations

import os
import re
from contextlib import ExitStack
from pathlib import Path
from typing import TYPE_CHECKING, Any

from langchain_core.messages import BaseMessage

from langmem_ext.replay.transcripts.reading import (
    Loc,
    Transcript,
    TranscriptError,
    check_tool_results,
    first_line,
    with_ids,
)

if TYPE_CHECKING:
    from langgraph.checkpoint.base import BaseCheckpointSaver

__all__ = ["load_postgres_thread", "load_sqlite_thread", "messages_from_checkpointer"]

_MAX_THREADS_LISTED = 10


def _thread_ids(checkpointer: BaseCheckpointSaver[Any]) -> tuple[list[str], bool]:
    """Up to 10 thread ids the checkpointer holds, and whether there are more."""
    seen: list[str] = []
    for saved in checkpointer.list(None):
        thread = saved.config.get("configurable", {}).get("thread_id")
        if thread is None or str(thread) in seen:
            continue
        if len(seen) == _MAX_THREADS_LISTED:
            return seen, True
        seen.append(str(thread))
    return seen, False


def _read_thread(
    checkpointer: BaseCheckpointSaver[Any], thread_id: str, channel: str, source: str, fmt: str
) -> Transcript:
    config: Any = {"configurable": {"thread_id": thread_id, "checkpoint_ns": ""}}
    saved = checkpointer.get_tuple(config)
    if saved is None:
        threads, more = _thread_ids(checkpointer)
        if not threads:
            raise TranscriptError(source, f"thread {thread_id!r} not found: there are no threads")
        listed = ", ".join(repr(t) for t in threads) + (" ..." if more else "")
        raise TranscriptError(source, f"thread {thread_id!r} not found; threads: {listed}")
    values = saved.checkpoint.get("channel_values", {})
    if channel not in values:
        present = sorted(k for k in values if not k.startswith(("__", "branch:")))
        raise TranscriptError(
            source,
            f"no channel {channel!r} in the thread's latest checkpoint; channels: "
            f"{', '.join(present) if present else '(none)'}",
        )
    value = values[channel]
    if not isinstance(value, list):
        raise TranscriptError(
            source, f"channel {channel!r} holds a {type(value).__name__}, not a list of messages"
        )
    if not value:
        raise TranscriptError(source, f"channel {channel!r} holds no messages")
    for number, message in enumerate(value, start=1):
        if not isinstance(message, BaseMessage):
            raise TranscriptError(
                source,
                f"item {number} of channel {channel!r} is a {type(message).__name__}, "
                "not a message",
            )
    located = [(m, Loc(item=i)) for i, m in enumerate(value, start=1)]
    checked = check_tool_results(located, source, fill_names=False)
    return Transcript(with_ids(checked, f"{thread_id}"), fmt, source)


def messages_from_checkpointer(
    checkpointer: BaseCheckpointSaver[Any],
    thread_id: str,
    *,
    channel: str = "messages",
    source: str | None = None,
) -> Transcript:
    """The messages in ``channel`` of the latest checkpoint of thread ``thread_id``.

    Works with any LangGraph checkpointer (in memory, SQLite, PostgreSQL ...); the root graph's
    checkpoint (``checkpoint_ns=""``) is read. Messages without an id get
    ``f"{thread_id}-{index}"``. The format is ``"langgraph-sqlite"`` or ``"langgraph-postgres"``
    for those savers, ``"langgraph"`` otherwise. Raises :class:`TranscriptError` when the thread
    is not there (listing up to 10 that are), the channel is not there (listing those that
    are), or the channel does not hold a list of messages.
    """
    kind = type(checkpointer).__name__
    fmt = {"SqliteSaver": "langgraph-sqlite", "PostgresSaver": "langgraph-postgres"}.get(
        kind, "langgraph"
    )
    return _read_thread(
        checkpointer, thread_id, channel, source or f"{kind} thread {thread_id}", fmt
    )


def load_sqlite_thread(
    path: str | os.PathLike[str], thread_id: str, *, channel: str = "messages"
) -> Transcript:
    """The messages of a thread saved by LangGraph's ``SqliteSaver`` in the file ``path``.

    The file is opened read only: a missing file is an error (no empty database is created),
    and a database without checkpoint tables is reported, never set up. Needs the ``sqlite``
    extra (``pip install 'langmem-ext[sqlite]'``).
    """
    name = os.fspath(path)
    source = f"sqlite {name} thread {thread_id}"
    try:
        import sqlite3

        from langgraph.checkpoint.sqlite import SqliteSaver
    except ImportError as error:
        raise TranscriptError(
            source,
            "reading a SQLite checkpoint needs langgraph-checkpoint-sqlite "
            f"({first_line(error)}): pip install 'langmem-ext[sqlite]'",
        ) from None
    file = Path(name)
    if not file.exists():
        raise TranscriptError(source, "no such file")
    if file.is_dir():
        raise TranscriptError(source, "is a directory, not a SQLite database")
    uri = file.resolve().as_uri() + "?mode=ro"
    try:
        conn = sqlite3.connect(uri, uri=True, check_same_thread=False)
    except sqlite3.Error as error:
        raise TranscriptError(source, f"cannot open it ({first_line(error)})") from None
    try:
        try:
            rows = conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'").fetchall()
        except sqlite3.DatabaseError as error:
            raise TranscriptError(source, f"not a SQLite database ({first_line(error)})") from None
        if not {"checkpoints", "writes"} <= {row[0] for row in rows}:
            raise TranscriptError(source, f"no LangGraph checkpoint tables in {name}")
        try:
            return _read_thread(SqliteSaver(conn), thread_id, channel, source, "langgraph-sqlite")
        except sqlite3.Error as error:
            raise TranscriptError(source, f"SQLite error: {first_line(error)}") from None
    finally:
        conn.close()


_URL_PASSWORD = re.compile(r"(://[^:/@\s]*:)[^@\s]*@")
_KEY_PASSWORD = re.compile(r"(password\s*=\s*)('(?:[^'\\]|\\.)*'|[^\s&]+)", re.IGNORECASE)


def _redact(dsn: str) -> str:
    """``dsn`` with any password replaced by ``***`` (it goes into error messages)."""
    return _KEY_PASSWORD.sub(r"\1***", _URL_PASSWORD.sub(r"\1***@", dsn))


def load_postgres_thread(dsn: str, thread_id: str, *, channel: str = "messages") -> Transcript:
    """The messages of a thread saved by LangGraph's ``PostgresSaver`` in the database ``dsn``.

    The session is read only and ``.setup()`` is never called: a database without the
    checkpoint tables is reported ("no LangGraph checkpoint tables at DSN"). A password in
    ``dsn`` is shown as ``***`` in errors. Needs the ``postgres`` extra
    (``pip install 'langmem-ext[postgres]'``).
    """
    shown = _redact(dsn)
    source = f"postgres {shown} thread {thread_id}"
    try:
        import psycopg
        from langgraph.checkpoint.postgres import PostgresSaver
    except ImportError as error:
        raise TranscriptError(
            source,
            f"reading a PostgreSQL checkpoint needs langgraph-checkpoint-postgres and psycopg "
            f"({first_line(error)}): pip install 'langmem-ext[postgres]'",
        ) from None
    with ExitStack() as stack:
        try:
            saver = stack.enter_context(PostgresSaver.from_conn_string(dsn))
        except psycopg.Error as error:
            raise TranscriptError(
                source, f"cannot connect to PostgreSQL ({first_line(error)})"
            ) from None
        conn = saver.conn  # from_conn_string gives a Connection, never a pool
        assert isinstance(conn, psycopg.Connection)
        try:
            conn.execute("SET SESSION CHARACTERISTICS AS TRANSACTION READ ONLY")
            row = conn.execute(
                "SELECT to_regclass('checkpoints') IS NOT NULL"
                " AND to_regclass('checkpoint_blobs') IS NOT NULL"
                " AND to_regclass('checkpoint_writes') IS NOT NULL AS present"
            ).fetchone()
            if not (row and row["present"]):
                raise TranscriptError(source, f"no LangGraph checkpoint tables at {shown}")
            return _read_thread(saver, thread_id, channel, source, "langgraph-postgres")
        except psycopg.Error as error:
            raise TranscriptError(source, f"PostgreSQL error: {first_line(error)}") from None
    raise AssertionError("unreachable")  # pragma: no cover - ExitStack does not swallow
