"""Two processes writing one SqliteStore file: a writer that finds the database locked (SQLite
refuses a lock upgrade at once, whatever the busy timeout) asks again with a bounded backoff, so
neither process fails and every turn both wrote is stored; a busy error that outlasts the bound,
or any other error, is raised."""

from __future__ import annotations

import concurrent.futures
import sqlite3
import textwrap
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pytest
from langgraph.store.base import Op, Result
from langgraph.store.memory import InMemoryStore
from subprocesses import run_python

from langmem_ext.retrieval import flows as module

ROUNDS = 150
WRITER = textwrap.dedent(
    """
    import sys
    from langchain_core.messages import AIMessage, HumanMessage
    from langgraph.store.sqlite import SqliteStore
    from langmem_ext import MemoryKey, Retrieval, TokenBudget

    path, name, rounds = sys.argv[1], sys.argv[2], int(sys.argv[3])
    with SqliteStore.from_conn_string(path) as store:
        strategy = Retrieval(TokenBudget(300), store=store, key=MemoryKey("acme", name, "t"))
        history, state = [], None
        for i in range(rounds):
            history += [
                HumanMessage(f"{name} fact {i}: the code is {name}-{i}", id=f"h{i}"),
                AIMessage(f"Noted {i}", id=f"a{i}"),
            ]
            state = strategy.apply(history, state).state
    print(state.indexed_turns)
    """
)


def test_two_processes_writing_one_sqlite_store_both_finish_and_lose_nothing(
    tmp_path: Path,
) -> None:
    from langgraph.store.sqlite import SqliteStore

    path = str(tmp_path / "store.db")
    with SqliteStore.from_conn_string(path) as store:
        store.setup()  # (the tables exist before the writers race)
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        runs = list(
            pool.map(
                lambda name: run_python("-c", WRITER, path, name, str(ROUNDS), timeout=300),
                ["alice", "bob"],
            )
        )
    for run in runs:
        assert run.returncode == 0, run.stderr[-2_000:]
    written = [int(run.stdout.strip().splitlines()[-1]) for run in runs]
    with SqliteStore.from_conn_string(path) as store:
        for name, turns in zip(["alice", "bob"], written, strict=True):
            stored = store.search(("langmem_ext", "turns", "acme", name, "t"), limit=10_000)
            assert turns > 100 and len(stored) == turns
            assert {it.value["seq"] for it in stored} == set(range(turns))


class Busy(InMemoryStore):
    """An InMemoryStore that reports "database is locked" ``times`` times first."""

    def __init__(self, times: int, error: Exception | None = None) -> None:
        super().__init__()
        self.times, self.calls = times, 0
        self.error = error or sqlite3.OperationalError("database is locked")

    def batch(self, ops: Iterable[Op]) -> list[Result]:
        self.calls += 1
        if self.calls <= self.times:
            raise self.error
        return super().batch(ops)

    async def abatch(self, ops: Iterable[Op]) -> list[Result]:
        return self.batch(ops)


def test_a_busy_store_is_asked_again_until_it_answers() -> None:
    store = Busy(3)
    assert module.batch_retrying(store, [], limit=5.0) == []
    assert store.calls == 4


def test_a_wrapped_busy_error_is_recognised() -> None:
    wrapped = ValueError("Error executing TTL refresh")
    wrapped.__cause__ = sqlite3.OperationalError("database is locked")
    store = Busy(1, wrapped)
    assert module.batch_retrying(store, [], limit=5.0) == []


def test_a_busy_store_that_stays_busy_raises_after_the_bound() -> None:
    store = Busy(10**9)
    with pytest.raises(sqlite3.OperationalError, match="locked"):
        module.batch_retrying(store, [], limit=0.2)
    assert 2 < store.calls < 60


@pytest.mark.parametrize("error", [sqlite3.OperationalError("no such table"), KeyError("x")])
def test_other_store_errors_are_raised_at_once(error: Exception) -> None:
    store = Busy(1, error)
    with pytest.raises(type(error)):
        module.batch_retrying(store, [], limit=5.0)
    assert store.calls == 1


def test_the_async_driver_asks_a_busy_store_again() -> None:
    import asyncio

    store: Any = Busy(2)
    assert asyncio.run(module.abatch_retrying(store, [], limit=5.0)) == []
    assert store.calls == 3
