"""MemoryNode's state in real checkpointers: restarts in a second process, PostgreSQL (sync and
async), time travel, thread isolation, and a summarizer failure in the middle of a run.

The turns, the summarizer and the model live in ``tests/graph_worker.py``, which also runs as a
subprocess (a real restart: new interpreter, new connection, new graph). PostgreSQL tests use
``LANGMEM_EXT_TEST_PG`` (default ``host=127.0.0.1 port=5432 user=postgres dbname=test``) and a
schema of their own, dropped at the end; they skip when the server is unreachable, and fail
instead when ``CI=true``.
"""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
import uuid
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from _workers_common import covered, markers
from graph_worker import (
    build_graph,
    dump,
    make_strategy,
    question,
    run_threads,
)
from langchain_core.messages import BaseMessage
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.checkpoint.sqlite import SqliteSaver

from langmem_ext import MemoryNode, MemoryState

WORKER = Path(__file__).resolve().parents[1] / "graph_worker.py"
RUN = uuid.uuid4().hex[:10]  # thread ids and the PostgreSQL schema are unique per test run


def config(thread: str, checkpoint_id: str | None = None) -> dict[str, Any]:
    configurable = {"thread_id": thread}
    if checkpoint_id is not None:
        configurable["checkpoint_id"] = checkpoint_id
    return {"configurable": configurable}


def worker_args(
    backend: str,
    target: str,
    mode: str,
    start: int,
    stop: int,
    *threads: str,
    surface: str = "node",
) -> list[str]:
    args = [sys.executable, str(WORKER), "--backend", backend, "--target", target, "--mode", mode]
    args += ["--surface", surface]
    args += ["--start", str(start), "--stop", str(stop)]
    for thread in threads:
        args += ["--thread", thread]
    return args


def spawn(*args: Any, surface: str = "node") -> subprocess.Popen[str]:
    return subprocess.Popen(
        worker_args(*args, surface=surface),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def result(process: subprocess.Popen[str]) -> dict[str, Any]:
    out, err = process.communicate(timeout=120)
    assert process.returncode == 0, f"worker failed ({process.returncode}):\n{err}"
    return json.loads(out)  # type: ignore[no-any-return]


def reference(marker: str, turns: range, mode: str, surface: str = "node") -> dict[str, Any]:
    """The same conversation, uninterrupted, in this process on an InMemorySaver."""
    return run_threads(InMemorySaver(), [("ref", marker)], turns, mode, surface)["ref"]  # type: ignore[arg-type]


def assert_restart_is_exact(
    whole: dict[str, Any], first: dict[str, Any], resumed: dict[str, Any], split: int
) -> None:
    assert resumed["memory"] == whole["memory"]
    assert resumed["messages"] == whole["messages"]  # type, id and content
    assert first["views"] == whole["views"][:split]
    assert resumed["views"] == whole["views"][split:]
    assert first["memory"] != whole["memory"]  # the second process really had work to do


# --- PostgreSQL fixture ---------------------------------------------------------------------


@pytest.fixture(scope="module")
def pg_dsn(pg_schema_dsn: str) -> str:
    """The shared fresh schema (tests/conftest.py), with the checkpointer's tables set up once,
    so concurrent workers never race on the migrations."""
    from langgraph.checkpoint.postgres import PostgresSaver

    with PostgresSaver.from_conn_string(pg_schema_dsn) as saver:
        saver.setup()
    return pg_schema_dsn


# --- 1. restart in a real second process: SqliteSaver --------------------------------------


@pytest.mark.parametrize(
    ("backend", "mode", "surface"),
    [
        ("sqlite", "rewrite", "node"),
        ("sqlite", "view", "node"),
        ("asqlite", "rewrite", "node"),  # AsyncSqliteSaver, ainvoke
        ("sqlite", "rewrite", "middleware"),  # create_agent + MemoryMiddleware
        ("asqlite", "view", "middleware"),
    ],
)
def test_sqlite_restart_in_a_second_process_continues_exactly(
    tmp_path: Path, backend: str, mode: str, surface: str
) -> None:
    turns, split = 16, 7
    whole_db, split_db = str(tmp_path / "whole.sqlite"), str(tmp_path / "split.sqlite")
    whole_run = spawn(backend, whole_db, mode, 0, turns, "t=alpha", surface=surface)
    first = result(spawn(backend, split_db, mode, 0, split, "t=alpha", surface=surface))["t"]
    resumed = result(spawn(backend, split_db, mode, split, turns, "t=alpha", surface=surface))["t"]
    whole = result(whole_run)["t"]

    assert_restart_is_exact(whole, first, resumed, split)
    # and a subprocess, or the async saver, changes nothing
    assert whole == reference("alpha", range(turns), mode, surface)
    memory = MemoryState.from_dict(whole["memory"])
    assert memory.folds >= 2 and memory.health == "healthy"
    kept = {int(m[1].split("-q")[1]) for m in whole["messages"] if "-q" in m[1]}
    if mode == "rewrite":  # what left the state is exactly what the summary holds
        assert memory.folded == 0
        assert covered(memory.sections["conversation"]) == set(range(turns)) - kept
    else:  # view mode keeps the whole history; folded counts its summarized prefix
        assert kept == set(range(turns)) and memory.folded > 0
        assert covered(memory.sections["conversation"]) == set(range(memory.folded // 2))


# --- 2. the same on PostgreSQL, sync and async, across processes ---------------------------


@pytest.mark.parametrize(
    ("backend", "surface"),
    [("postgres", "node"), ("apostgres", "node"), ("apostgres", "middleware")],
)
def test_postgres_restart_in_a_second_process_continues_exactly(
    pg_dsn: str, backend: str, surface: str
) -> None:
    turns, split = 14, 6
    tag = f"{RUN}-{backend}-{surface}"
    whole_id, split_id = f"{tag}-whole=beta", f"{tag}-split=beta"
    whole_run = spawn(backend, pg_dsn, "rewrite", 0, turns, whole_id, surface=surface)
    first = result(spawn(backend, pg_dsn, "rewrite", 0, split, split_id, surface=surface))
    resumed = result(spawn(backend, pg_dsn, "rewrite", split, turns, split_id, surface=surface))
    whole = result(whole_run)
    name = split_id.split("=")[0]
    assert_restart_is_exact(whole[whole_id.split("=")[0]], first[name], resumed[name], split)
    expected = reference("beta", range(turns), "rewrite", surface)
    assert resumed[name] | {"views": []} == expected | {"views": []}
    assert MemoryState.from_dict(resumed[name]["memory"]).folds >= 2


# --- savers for the in-process tests ---------------------------------------------------------


@pytest.fixture(params=["memory", "sqlite", "postgres"])
def saver(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Any]:
    """InMemorySaver, SqliteSaver on a file, PostgresSaver on the test schema."""
    if request.param == "memory":
        yield InMemorySaver()
    elif request.param == "sqlite":
        conn = sqlite3.connect(str(tmp_path / "saver.sqlite"), check_same_thread=False)
        try:
            yield SqliteSaver(conn)
        finally:
            conn.close()
    else:
        from langgraph.checkpoint.postgres import PostgresSaver

        with PostgresSaver.from_conn_string(request.getfixturevalue("pg_dsn")) as pg:
            yield pg


# --- 3. time travel --------------------------------------------------------------------------


def test_time_travel_fork_uses_the_checkpoint_memory_and_leaves_the_thread_alone(
    saver: Any,
) -> None:
    thread = f"{RUN}-tt-{type(saver).__name__}"

    def config(thread_id: str) -> dict[str, Any]:  # this saver's own thread ids
        return {"configurable": {"thread_id": f"{thread}-{thread_id}"}}

    seen: list[list[BaseMessage]] = []
    graph = build_graph(MemoryNode(make_strategy(), mode="rewrite"), saver, seen)
    for i in range(12):
        graph.invoke({"messages": [question(i, "gamma")]}, config("tt"))
    head = graph.get_state(config("tt"))
    head_memory = MemoryState.from_dict(head.values["memory"])
    history = list(graph.get_state_history(config("tt")))

    # an end-of-turn checkpoint that already has a summary, but an older one than the head
    ends = [s for s in history if not s.next and s.values.get("memory")]
    earlier = [
        s for s in ends if 1 <= MemoryState.from_dict(s.values["memory"]).folds < head_memory.folds
    ]
    assert earlier, "12 turns should fold more than once"
    past = earlier[0]  # the newest of them (history is newest first)
    past_memory = MemoryState.from_dict(past.values["memory"])
    k = int(past.values["messages"][-1].id.split("-a")[1])  # the turn it ended
    assert k < 11

    seen.clear()
    graph.invoke({"messages": [question(100, "gamma")]}, past.config)
    fork_view = seen[-1]
    fork = graph.get_state(config("tt"))  # the fork is now the thread's newest checkpoint
    forked = fork.values
    assert fork.parent_config is not None
    parents = {s.config["configurable"]["checkpoint_id"]: s for s in history}
    assert fork.config["configurable"]["checkpoint_id"] not in parents
    ancestor = fork  # the fork's first ancestor in the original history is the past one
    while ancestor.config["configurable"]["checkpoint_id"] not in parents:
        assert ancestor.parent_config is not None
        ancestor = graph.get_state(ancestor.parent_config)
    assert (
        ancestor.config["configurable"]["checkpoint_id"]
        == (past.config["configurable"]["checkpoint_id"])
    )

    # the fork continued from the past checkpoint's memory: identical to a fresh thread that
    # only ever had turns 0..k and then question 100
    oracle_seen: list[list[BaseMessage]] = []
    oracle = build_graph(MemoryNode(make_strategy(), mode="rewrite"), InMemorySaver(), oracle_seen)
    for i in [*range(k + 1), 100]:
        oracle.invoke({"messages": [question(i, "gamma")]}, config("oracle"))
    expected = oracle.get_state(config("oracle")).values
    assert dump(forked, [fork_view]) == dump(expected, oracle_seen[-1:])
    fork_memory = MemoryState.from_dict(forked["memory"])
    assert fork_memory.folds in (past_memory.folds, past_memory.folds + 1)
    assert fork_memory.folds < head_memory.folds or fork_memory != head_memory
    later = set(range(k + 1, 12))  # nothing after the fork point leaks into the fork
    assert not covered(fork_memory.sections["conversation"]) & later
    assert not {f"gamma-q{i}" for i in later} & {m.id for m in forked["messages"]}
    assert covered(past_memory.sections["conversation"]) <= covered(
        fork_memory.sections["conversation"]
    )

    # the original head checkpoint is untouched and still resumable exactly
    again = graph.get_state(head.config)
    assert dump(again.values, []) == dump(head.values, [])
    assert (
        again.config["configurable"]["checkpoint_id"]
        == head.config["configurable"]["checkpoint_id"]
    )
    history_ids = {s.config["configurable"]["checkpoint_id"] for s in history}
    assert history_ids <= {
        s.config["configurable"]["checkpoint_id"] for s in graph.get_state_history(config("tt"))
    }
    seen.clear()
    graph.invoke({"messages": [question(12, "gamma")]}, head.config)
    continued = graph.get_state(config("tt")).values
    straight = reference("gamma", range(13), "rewrite")
    assert dump(continued, seen[-1:]) == straight | {"views": straight["views"][-1:]}


# --- 4. isolation ----------------------------------------------------------------------------

WORDS = (
    "apple banana cherry damson elder fig grape hazel iris juniper "
    "kiwi lemon mango nutmeg olive pear quince rowan sage thyme"
).split()


def assert_only(marker: str, state: dict[str, Any]) -> None:
    memory = MemoryState.from_dict(state["memory"])
    assert markers(memory.sections.get("conversation", "")) == {marker}
    assert {m[1].split("-")[0] for m in state["messages"]} == {marker}
    assert markers(" ".join(m[2] for m in state["messages"])) == {marker}
    for view in state["views"]:
        assert markers(" ".join(m[2] for m in view)) == {marker}


@pytest.mark.parametrize("surface", ["node", "middleware"])
def test_twenty_threads_on_one_checkpointer_never_share_memory(
    tmp_path: Path, surface: str
) -> None:
    conn = sqlite3.connect(str(tmp_path / "iso.sqlite"), check_same_thread=False)
    try:
        threads = [(f"{RUN}-{word}", word) for word in WORDS]
        states = run_threads(SqliteSaver(conn), threads, range(8), "rewrite", surface)
    finally:
        conn.close()
    for thread, word in threads:
        assert_only(word, states[thread])
        assert MemoryState.from_dict(states[thread]["memory"]).folds >= 1
        # exactly what the thread holds when it is alone on its own checkpointer
        assert states[thread] == reference(word, range(8), "rewrite", surface)


@pytest.mark.parametrize("surface", ["node", "middleware"])
def test_three_processes_writing_postgres_at_once_stay_isolated(pg_dsn: str, surface: str) -> None:
    from graph_worker import build
    from langgraph.checkpoint.postgres import PostgresSaver

    groups = [WORDS[0:2], WORDS[2:4], WORDS[4:6]]
    tag = f"{RUN}-pg-{surface}"
    processes = [
        spawn(
            "postgres",
            pg_dsn,
            "rewrite",
            0,
            12,
            *(f"{tag}-{w}={w}" for w in group),
            surface=surface,
        )
        for group in groups
    ]  # all three run at once, each with two threads round-robin
    outputs = [result(p) for p in processes]
    with PostgresSaver.from_conn_string(pg_dsn) as saver:
        graph = build(surface, "rewrite", saver, [])
        for group, output in zip(groups, outputs, strict=True):
            for word in group:
                stored = dump(graph.get_state(config(f"{tag}-{word}")).values, [])
                reported = output[f"{tag}-{word}"]
                assert stored == reported | {"views": []}  # what was committed is what it ran
                assert_only(word, reported)
                assert reported == reference(word, range(12), "rewrite", surface)


# --- 5. a summarizer failure in the middle of a run -----------------------------------------


def test_summarizer_failures_mid_run_lose_nothing_and_every_turn_answers(saver: Any) -> None:
    from graph_worker import summarizer

    calls: list[int] = []
    failing = {2, 3}  # the 2nd and 3rd fold attempts fail

    def flaky(prompt: list[BaseMessage]) -> str:
        calls.append(1)
        if len(calls) in failing:
            raise ValueError("provider down")
        return summarizer(prompt)

    now = [1_000.0]
    strategy = make_strategy(flaky, clock=lambda: now[0], retry_initial=5.0)
    thread = f"{RUN}-flaky-{type(saver).__name__}"
    seen: list[list[BaseMessage]] = []
    health = []
    produced: list[str] = []
    graph = build_graph(MemoryNode(strategy, mode="rewrite"), saver, seen)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for i in range(20):
            before = len(calls)
            out = graph.invoke({"messages": [question(i, "delta")]}, config(thread))
            now[0] += 10.0  # past any backoff, so the next turn retries
            produced += [f"delta-q{i}", f"delta-a{i}"]
            memory = MemoryState.from_dict(out["memory"])
            health.append(memory.health)
            ids = [m.id for m in out["messages"]]
            # the run answers every turn, from a view that ends with the question
            assert ids[-1] == f"delta-a{i}" and seen[-1][-1].id == f"delta-q{i}"
            # nothing is lost: every message is either still in state or in the summary
            summary = covered(memory.sections.get("conversation", ""))
            gone = set(produced) - set(ids)
            assert gone == {f"delta-{x}{n}" for n in summary for x in "qa"}
            assert ids == [p for p in produced if p not in gone]  # order kept too
            if len(calls) > before and set(range(before + 1, len(calls) + 1)) & failing:
                assert memory.health != "healthy" and memory.failures >= 1
                assert memory.folded == 0
    assert "retrying" in health and health[-1] == "healthy"
    assert covered(memory.sections["conversation"]) == set(range(20)) - {
        int(i.split("-q")[1]) for i in ids if "-q" in i
    }
    assert all(len(calls) > n for n in failing)  # the failures really happened


# --- regression: the memory dict is plain JSON ------------------------------------------------


def test_memory_returned_by_invoke_equals_the_memory_in_the_checkpoint() -> None:
    graph = build_graph(MemoryNode(make_strategy(), mode="rewrite"), InMemorySaver(), [])
    for i in range(8):
        out = graph.invoke({"messages": [question(i, "eta")]}, config("bug"))
    assert out["memory"]["summary"]  # a fold happened
    assert out["memory"] == graph.get_state(config("bug")).values["memory"]
