"""Many worker processes on one PostgreSQL: no lost message, no fold made twice, no cross-thread
read.

Each worker (``tests/pg_fold_worker.py``, a process of its own) runs ``create_agent`` with
``MemoryMiddleware(SummaryBuffer(..., prefetch_tokens=...))`` on a ``PostgresSaver`` and a
``PostgresStore``; its summarizer records every call in the table ``fold_calls``. The test is
the load balancer: the turns of ONE thread run one after another (as the LangGraph server runs
one run per thread at a time) but land on different workers; different threads run at the same
time. The summarizer takes a moment, so a fold started on one turn is still running when the
next turn of its thread lands on another worker.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langchain_core.messages.tool import tool_call
from pg_fold_worker import CREATE_CALLS, covered, markers

from langmem_ext.core.fold_config import FoldRequest
from langmem_ext.core.transitions import Folded, FoldFailed
from langmem_ext.integrations.fold_sharing import ITEM_KEY, StoreSharedFolds
from langmem_ext.strategies.shared_folds import Adopt, FoldRecord, Held, Take

WORKER = Path(__file__).resolve().parents[1] / "pg_fold_worker.py"


@pytest.fixture
def pg_dsn(pg_schema_dsn: str) -> Iterator[str]:
    """The shared test schema with the saver's and the store's tables and ``fold_calls`` (set
    up before the workers start, so they never race on migrations); ``fold_calls`` empty. The
    schema lives for the session: each test uses thread names of its own."""
    import psycopg
    from langgraph.checkpoint.postgres import PostgresSaver
    from langgraph.store.postgres import PostgresStore

    with PostgresSaver.from_conn_string(pg_schema_dsn) as saver:
        saver.setup()
    with PostgresStore.from_conn_string(pg_schema_dsn) as store:
        store.setup()
    with psycopg.connect(pg_schema_dsn, autocommit=True) as conn:
        conn.execute(CREATE_CALLS)
        conn.execute("TRUNCATE fold_calls")
    yield pg_schema_dsn


class Workers:
    """Worker processes driven line by line (a command out, an answer back)."""

    def __init__(self, dsn: str, count: int, *args: str) -> None:
        command = [sys.executable, str(WORKER), "--dsn", dsn, *args]
        self.processes = [
            subprocess.Popen(
                [*command, "--name", f"w{k}"],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            for k in range(count)
        ]

    def send(self, worker: int, command: dict[str, Any]) -> None:
        stdin = self.processes[worker].stdin
        assert stdin is not None
        stdin.write(json.dumps(command) + "\n")
        stdin.flush()

    def receive(self, worker: int) -> Any:
        process = self.processes[worker]
        assert process.stdout is not None
        line = process.stdout.readline()
        if not line:
            _, err = process.communicate(timeout=30)
            raise AssertionError(f"worker w{worker} died ({process.returncode}):\n{err}")
        return json.loads(line)

    def round(self, turns: Sequence[tuple[int, str, int]]) -> list[Any]:
        """Run (worker, thread, turn) at once, at most one turn of a thread per round; the
        answers in the same order. A worker runs the turns sent to it one after another."""
        for worker, thread, turn in turns:
            self.send(worker, {"turn": turn, "thread": thread, "marker": thread})
        return [self.receive(worker) for worker, _, _ in turns]

    def dump(self, thread: str) -> dict[str, Any]:
        self.send(0, {"dump": thread})
        return self.receive(0)  # type: ignore[no-any-return]

    def close(self) -> None:
        """Quit every worker once its background folds have ended."""
        for k in range(len(self.processes)):
            self.send(k, {"quit": True})
        for k, process in enumerate(self.processes):
            assert self.receive(k) == {"running": 0}
            _, err = process.communicate(timeout=60)
            print(f"--- w{k} stderr:\n{err}")  # shown when the test fails
            assert process.returncode == 0

    def kill(self) -> None:
        for process in self.processes:
            if process.poll() is None:
                process.kill()
                process.communicate()


def fold_calls(dsn: str) -> dict[str, list[tuple[str, list[int]]]]:
    """marker -> [(worker, questions folded)] in the order the calls were made."""
    import psycopg

    calls: dict[str, list[tuple[str, list[int]]]] = {}
    with psycopg.connect(dsn) as conn:
        rows = conn.execute("SELECT worker, marker, questions FROM fold_calls ORDER BY id")
        for worker, marker, questions in rows:
            calls.setdefault(marker, []).append((worker, list(questions)))
    return calls


def run(
    dsn: str, workers: int, threads: Sequence[str], turns: int, *args: str
) -> tuple[dict[str, dict[str, Any]], dict[str, list[list[str]]]]:
    """Turn ``i`` of thread ``j`` goes to worker ``(i + j) % workers``: every thread's turns
    alternate between workers, and each round's turns run at once. Returns each thread's final
    state and the markers of every view its model was given."""
    pool = Workers(dsn, workers, *args)
    views: dict[str, list[list[str]]] = {t: [] for t in threads}
    try:
        for i in range(turns):
            plan = [((i + j) % workers, t, i) for j, t in enumerate(threads)]
            for (_, thread, _), answer in zip(plan, pool.round(plan), strict=True):
                views[thread].extend(answer["views"])
        final = {t: pool.dump(t) for t in threads}
        pool.close()
    finally:
        pool.kill()
    return final, views


def questions_in(messages: Sequence[Sequence[str]], marker: str) -> list[int]:
    ids = [m[1] for m in messages if m[0] == "human"]
    assert all(i.startswith(f"{marker}-q") for i in ids)
    return [int(i.removeprefix(f"{marker}-q")) for i in ids]


def summary_text(memory: dict[str, Any]) -> str:
    return " ".join(text for _, text in memory.get("summary") or [])


def assert_folded_once(calls: Sequence[tuple[str, list[int]]]) -> None:
    folded = [q for _, questions in calls for q in questions]
    assert len(folded) == len(set(folded)), f"a fold was made twice: {calls}"


def assert_thread(final: dict[str, Any], views: list[list[str]], thread: str, turns: int) -> None:
    """Nothing lost, in order; nothing of another thread seen or summarized."""
    kept = questions_in(final["messages"], thread)
    summary = summary_text(final["memory"])
    assert kept == sorted(kept)  # in order
    folded_away = set(range(turns)) - set(kept)
    assert folded_away <= covered(summary)  # what left the state is in the summary
    assert kept[-1] == turns - 1 and set(kept) | covered(summary) == set(range(turns))
    assert markers(summary) == {thread}
    assert views and all(seen == [thread] for seen in views)


def test_one_thread_alternating_between_two_workers_folds_each_range_once(pg_dsn: str) -> None:
    turns = 14
    final, views = run(pg_dsn, 2, ["one"], turns)
    state = final["one"]
    # view mode: the state holds every turn, each a question, a tool round and an answer
    assert questions_in(state["messages"], "one") == list(range(turns))
    assert len(state["messages"]) == 4 * turns
    assert_thread(state, views["one"], "one", turns)
    calls = fold_calls(pg_dsn)["one"]
    assert_folded_once(calls)
    assert state["memory"]["folds"] >= 3 and state["memory"]["health"] == "healthy"
    # every question the summary holds was folded by exactly one call, in some worker
    assert covered(summary_text(state["memory"])) <= {q for _, qs in calls for q in qs}


def test_four_workers_serving_several_threads_fold_each_range_once(pg_dsn: str) -> None:
    threads, turns = ["alpha", "bravo", "charlie", "delta", "echo"], 10
    final, views = run(pg_dsn, 4, threads, turns, "--mode", "rewrite")
    calls = fold_calls(pg_dsn)
    for thread in threads:
        assert_thread(final[thread], views[thread], thread, turns)
        assert_folded_once(calls[thread])
        assert final[thread]["memory"]["folds"] >= 2
    # rewrite mode: folded messages left the state, and no tool result lost its call
    for thread in threads:
        kinds = [m[0] for m in final[thread]["messages"]]
        assert len(kinds) < 4 * turns and kinds[0] == "human"
        assert all(k > 0 and kinds[k - 1] == "ai" for k, kind in enumerate(kinds) if kind == "tool")
    assert len({worker for c in calls.values() for worker, _ in c}) > 1


def test_without_sharing_a_second_worker_folds_the_same_messages_again(pg_dsn: str) -> None:
    """The baseline the sharing fixes (and proof that the double-fold check can fail)."""
    final, _ = run(pg_dsn, 2, ["unshared"], 8, "--share", "off")
    folded = [q for _, qs in fold_calls(pg_dsn)["unshared"] for q in qs]
    assert len(folded) > len(set(folded))
    assert questions_in(final["unshared"]["messages"], "unshared") == list(range(8))


# --- the lease and the record on a PostgresStore, in this process ----------------------------


def request(*numbers: int, background: bool = True) -> FoldRequest:
    messages = []
    for n in numbers:
        call = tool_call(name="lookup", args={"number": n}, id=f"c{n}")
        messages += [
            HumanMessage(f"question {n}", id=f"q{n}"),
            AIMessage("", tool_calls=[call], id=f"a{n}"),
            ToolMessage(f"result {n}", tool_call_id=f"c{n}", id=f"t{n}"),
        ]
    return FoldRequest({"conversation": "earlier"}, tuple(messages), background=background)


@pytest.fixture
def store(pg_dsn: str) -> Iterator[Any]:
    from langgraph.store.postgres import PostgresStore

    with PostgresStore.from_conn_string(pg_dsn, pool_config={"max_size": 2}) as pg_store:
        yield pg_store


def test_a_lease_is_held_then_its_published_result_is_adopted_by_another_worker(
    store: Any,
) -> None:
    first = StoreSharedFolds(store, ("langmem_ext", "folds", "t", "u", "s1"))
    second = StoreSharedFolds(store, ("langmem_ext", "folds", "t", "u", "s1"))
    second.owner = "another worker"
    taken = first.claim(request(1, 2), lease=30, take=True)
    assert isinstance(taken, Take)
    # the next turn (more messages, same start) lands on the other worker: the fold runs there
    later = request(1, 2, 3)
    assert isinstance(second.claim(later, lease=30, take=True), Held)
    first.publish(taken, Folded({"conversation": "q1 q2"}))
    adopted = second.claim(later, lease=30, take=True)
    assert adopted == Adopt(Folded({"conversation": "q1 q2"}, covers=6))
    # a fold due now that needs more than the published fold covers is not answered by it
    due = FoldRequest(later.previous, later.messages, background=False, least=9)
    assert second.claim(due, lease=30, take=False) is None
    # another thread never sees it
    other = StoreSharedFolds(store, ("langmem_ext", "folds", "t", "u", "s2"))
    assert isinstance(other.claim(later, lease=30, take=True), Take)


def test_an_expired_lease_of_a_killed_worker_is_taken_over(store: Any) -> None:
    namespace = ("langmem_ext", "folds", "t", "u", "killed")
    dead = FoldRecord.lease(request(1, 2), until=time.time() - 1, owner="killed worker")
    store.put(namespace, ITEM_KEY, dead.to_dict(), index=False)
    shared = StoreSharedFolds(store, namespace)
    taken = shared.claim(request(1, 2), lease=30, take=True)
    assert isinstance(taken, Take) and taken.record.owner == shared.owner
    assert store.get(namespace, ITEM_KEY).value["owner"] == shared.owner


def test_a_live_lease_of_a_worker_that_ended_on_this_host_is_taken_over_at_once(
    store: Any,
) -> None:
    """A worker killed mid-fold leaves a lease running for the fold's whole deadline; on the
    same host its pid is gone, so the next claim takes it over at once. A live owner, or one
    on another host, still holds it."""
    ended = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        capture_output=True,
        text=True,
        check=True,
    )
    gone = f"{socket.gethostname()}:{int(ended.stdout)}:dead1234"
    alive = f"{socket.gethostname()}:{os.getppid()}:live1234"
    elsewhere = f"another-host-{uuid.uuid4().hex[:6]}:{int(ended.stdout)}:far12345"
    for owner, expected in ((gone, Take), (alive, Held), (elsewhere, Held)):
        namespace = ("langmem_ext", "folds", "t", "u", f"host-{uuid.uuid4().hex[:8]}")
        lease = FoldRecord.lease(request(1, 2), until=time.time() + 600, owner=owner)
        store.put(namespace, ITEM_KEY, lease.to_dict(), index=False)
        shared = StoreSharedFolds(store, namespace)
        claim = shared.claim(request(1, 2, 3), lease=30, take=True)
        assert isinstance(claim, expected), (owner, claim)


def test_a_hung_store_call_is_abandoned_at_the_bound_and_the_next_call_still_runs(
    store: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """Claims run their store calls on reused daemon threads, bounded by ``timeout``: a store
    call that hangs is abandoned (the claim answers None: fold in this worker), and the next
    claim gets another thread instead of waiting behind it."""
    release = threading.Event()

    class Hanging:
        def get(self, *args: Any, **kwargs: Any) -> Any:
            release.wait(30)
            raise ConnectionError("hung")

    namespace = ("langmem_ext", "folds", "t", "u", f"hung-{uuid.uuid4().hex[:8]}")
    hung = StoreSharedFolds(store, namespace, timeout=0.2)
    hung.store = Hanging()  # type: ignore[assignment]
    try:
        started = time.monotonic()
        with caplog.at_level("WARNING", logger="langmem_ext"):
            assert hung.claim(request(1), lease=30, take=True) is None
        assert time.monotonic() - started < 5.0
        assert "TimeoutError" in caplog.text
        healthy = StoreSharedFolds(store, namespace, timeout=5.0)
        for _ in range(3):  # each one after a thread is left hanging
            assert isinstance(healthy.claim(request(1), lease=30, take=True), (Take, Held))
    finally:
        release.set()


def test_a_failure_published_by_another_worker_is_adopted_once(store: Any) -> None:
    shared = StoreSharedFolds(store, ("langmem_ext", "folds", "t", "u", "failed"))
    taken = shared.claim(request(1), lease=30, take=True)
    assert isinstance(taken, Take)
    shared.publish(taken, FoldFailed(TimeoutError("model hung")))
    failed = shared.claim(request(1, 2), lease=30, take=True)
    assert isinstance(failed, Adopt) and isinstance(failed.outcome, FoldFailed)
    assert "model hung" in str(failed.outcome.error)
    # the next attempt (after the backoff) starts a fold again
    assert isinstance(shared.claim(request(1, 2), lease=30, take=True), Take)


def test_a_damaged_record_or_a_failing_store_degrades_to_a_local_fold(
    store: Any, caplog: pytest.LogCaptureFixture
) -> None:
    namespace = ("langmem_ext", "folds", "t", "u", "damaged")
    store.put(namespace, ITEM_KEY, {"v": 1, "status": "done", "sections": "not a map"})
    shared = StoreSharedFolds(store, namespace)
    assert isinstance(shared.claim(request(1), lease=30, take=True), Take)  # overwritten

    class Broken:
        def get(self, *args: Any, **kwargs: Any) -> Any:
            raise ConnectionError("store down")

    broken = StoreSharedFolds(store, namespace)
    broken.store = Broken()  # type: ignore[assignment]
    with caplog.at_level("WARNING", logger="langmem_ext"):
        assert broken.claim(request(1), lease=30, take=True) is None
    assert "store down" in caplog.text and "folding in this worker" in caplog.text


def test_async_claims_share_the_same_record(store: Any) -> None:
    import asyncio

    namespace = ("langmem_ext", "folds", "t", "u", "async")
    first, second = StoreSharedFolds(store, namespace), StoreSharedFolds(store, namespace)
    second.owner = "another worker"

    async def claims() -> tuple[Any, Any]:
        taken = await first.aclaim(request(1), lease=30, take=True)
        return taken, await second.aclaim(request(1, 2), lease=30, take=True)

    taken, held = asyncio.run(claims())
    assert isinstance(taken, Take) and isinstance(held, Held)
    first.publish(taken, Folded({"conversation": "q1"}))
    adopted = asyncio.run(second.aclaim(request(1, 2), lease=30, take=True))
    assert adopted == Adopt(Folded({"conversation": "q1"}, covers=3))
