"""Store backends the tests open on real databases: a LangGraph ``SqliteStore`` in memory or in
a temporary file, and a ``PostgresStore`` on a conninfo (tests/conftest.py's ``pg_schema_dsn``),
each set up and closed by a context manager."""

from __future__ import annotations

import sqlite3
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from langgraph.store.base import BaseStore


@contextmanager
def sqlite_memory_store(max_variables: int | None = None) -> Iterator[BaseStore]:
    """A ``SqliteStore`` on an in-memory SQLite database; ``max_variables`` lowers the bound
    parameters a statement may take (Python 3.11+; elsewhere the build's limit stays)."""
    from langgraph.store.sqlite import SqliteStore

    conn = sqlite3.connect(":memory:", check_same_thread=False, isolation_level=None)
    setlimit = getattr(conn, "setlimit", None)
    if max_variables is not None and setlimit is not None:
        setlimit(getattr(sqlite3, "SQLITE_LIMIT_VARIABLE_NUMBER"), max_variables)  # noqa: B009
    try:
        store = SqliteStore(conn)
        store.setup()
        yield store
    finally:
        conn.close()


@contextmanager
def sqlite_file_store() -> Iterator[BaseStore]:
    """A ``SqliteStore`` in a file of a temporary folder (removed afterwards)."""
    from langgraph.store.sqlite import SqliteStore

    with tempfile.TemporaryDirectory() as folder:
        conn = sqlite3.connect(
            str(Path(folder) / "store.sqlite"), check_same_thread=False, isolation_level=None
        )
        try:
            store = SqliteStore(conn)
            store.setup()
            yield store
        finally:
            conn.close()


@contextmanager
def postgres_store(dsn: str) -> Iterator[BaseStore]:
    """A ``PostgresStore`` on ``dsn`` (autocommit, no prepared statements), its tables set up."""
    import psycopg
    from langgraph.store.postgres import PostgresStore
    from psycopg.rows import dict_row

    with psycopg.connect(dsn, autocommit=True, prepare_threshold=0, row_factory=dict_row) as conn:
        store = PostgresStore(conn)
        store.setup()
        yield store
