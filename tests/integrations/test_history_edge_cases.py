"""Edge cases of the stored-history parts: ``ManagedChatMessageHistory`` and the
drop-in ``ConversationSummaryBufferMemory`` (its tests:
``tests/integrations/test_compat_edge_cases.py``).

* ``prune_backing=True`` with concurrent writers of one key (4 threads; 3 processes on
  PostgreSQL) loses, duplicates and double-summarizes nothing;
* cancelling ``aadd_messages`` at every point of its run loses nothing;
* a key-less history over a store is refused unless ``shared_default=True``;
* a ``RemoveMessage`` is refused before anything is written;
* repeated id-less texts ("continue", "Sure.") are never mistaken for each other;

The figures (lost, duplicated, double-summarized) are counted exactly by
``history_worker.FoldLog``: each summary names the fold that wrote it, and the log knows which
messages each fold read and which summary it extended.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import uuid
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import pytest
from history_worker import (
    PG_TABLE,
    FoldLog,
    account,
    contend_threads,
    contention_outcome,
    contention_turn,
    key_for,
    make_strategy,
    pg_session,
    setup_sqlite,
    sqlite_contention_outcome,
)
from langchain_core.chat_history import InMemoryChatMessageHistory
from langchain_core.messages import (
    AIMessage,
    BaseMessage,
    HumanMessage,
    RemoveMessage,
)
from langgraph.graph.message import REMOVE_ALL_MESSAGES
from langgraph.store.base import Op, Result
from langgraph.store.memory import InMemoryStore

from langmem_ext import InvalidHistoryError, SummaryBuffer
from langmem_ext.core.keys import MemoryKey
from langmem_ext.errors import MissingKeyError
from langmem_ext.integrations.history import ManagedChatMessageHistory

WORKER = Path(__file__).resolve().parents[1] / "history_worker.py"
RUN = uuid.uuid4().hex[:10]

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


def report(name: str, figures: dict[str, Any]) -> None:
    """Print the measured figures (shown with ``-s``; the assertions are what CI checks)."""
    print(f"\n{name}: {json.dumps(figures, sort_keys=True)}")


# --- concurrent writers with prune_backing -------------------------------------------------


@pytest.mark.parametrize("use_async", [False, True], ids=["sync", "async"])
def test_prune_backing_with_4_concurrent_threads_loses_nothing(use_async: bool) -> None:
    """4 threads x 20 turns = 160 messages on one key (async: one event loop per thread).
    Before the per-key lock: 108 of 160 lost (sync), 30-46 lost (async)."""
    figures = contend_threads(4, 20, use_async=use_async)
    report(f"concurrent writers, threads {'async' if use_async else 'sync'}", figures)
    assert figures["messages"] == 160
    assert figures["folds"] >= 10  # the run really folded (and pruned) many times
    assert figures["lost"] == 0
    assert figures["duplicated"] == 0
    assert figures["double_summarized"] == 0
    assert figures["wasted_folds"] == 0  # no fold's work was overwritten by another writer
    assert figures["foreign"] == 0


def test_one_event_loop_with_many_tasks_loses_nothing() -> None:
    """Tasks of one loop queue on the key's asyncio lock."""
    log = FoldLog("loop")
    store, backing = InMemoryStore(), InMemoryChatMessageHistory()
    strategy = make_strategy(log)

    async def writer(w: int) -> None:
        for i in range(10):
            history = ManagedChatMessageHistory(
                backing, strategy, store=store, key=key_for("loop"), prune_backing=True
            )
            await history.aadd_messages(contention_turn(i, f"w{w}"))
            await asyncio.sleep(0)

    async def main() -> None:
        await asyncio.gather(*(writer(w) for w in range(4)))

    asyncio.run(main())
    final = ManagedChatMessageHistory(backing, strategy, store=store, key=key_for("loop"))
    expected = [str(m.id) for w in range(4) for i in range(10) for m in contention_turn(i, f"w{w}")]
    figures = account(expected, final.history.messages, final.state, log.folds)
    report("concurrent writers, one loop, 4 tasks", figures)
    assert figures["folds"] >= 5
    assert (figures["lost"], figures["duplicated"], figures["double_summarized"]) == (0, 0, 0)


@pytest.fixture(scope="module")
def pg_tables(pg_schema_dsn: str) -> str:
    """The schema with the store's and the chat history's tables, set up once (workers must
    not race on the migrations)."""
    import psycopg
    from langchain_postgres import PostgresChatMessageHistory
    from langgraph.store.postgres import PostgresStore

    with PostgresStore.from_conn_string(pg_schema_dsn) as store:
        store.setup()
    with psycopg.connect(pg_schema_dsn) as conn:
        PostgresChatMessageHistory.create_tables(conn, PG_TABLE)
    return pg_schema_dsn


def _contend(
    backend: str, target: str, session: str, barrier: Path, use_async: bool
) -> dict[str, Any]:
    """Start 3 contention workers on one key, release them together, merge their fold logs."""
    processes = [
        subprocess.Popen(
            [
                sys.executable,
                str(WORKER),
                "--backend",
                backend,
                "--target",
                target,
                "--session",
                f"{session}={marker}",
                "--stop",
                str(CONTENDED_TURNS),
                "--contend",
                str(barrier),
                *(["--async"] if use_async else []),
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for marker in MARKERS
    ]
    barrier.touch()
    folds: dict[str, Any] = {}
    for process in processes:
        out, err = process.communicate(timeout=300)
        assert process.returncode == 0, f"worker failed ({process.returncode}):\n{err}"
        folds.update(json.loads(out)["folds"])
    return folds


CONTENDED_TURNS, MARKERS = 20, ["p0", "p1", "p2"]


def _assert_nothing_lost(figures: dict[str, int]) -> None:
    assert figures["messages"] == 120
    assert figures["folds"] >= 8  # the run really folded (and pruned) many times
    assert figures["lost"] == 0
    assert figures["duplicated"] == 0
    assert figures["double_summarized"] == 0
    assert figures["wasted_folds"] == 0
    assert figures["foreign"] == 0


@pytest.mark.parametrize("use_async", [False, True], ids=["sync", "async"])
def test_prune_backing_with_3_processes_on_postgresql(
    pg_tables: str, tmp_path: Path, use_async: bool
) -> None:
    """3 processes x 20 turns = 120 messages on one key, ``PostgresStore`` +
    ``PostgresChatMessageHistory`` (async: ``AsyncPostgresStore`` and an async connection), all
    started together. Before the advisory lock: 2-18 of 120 lost and 2-24 summarized twice
    (sync), 12-24 lost and 2-9 summarized twice (async)."""
    session = f"{RUN}-contended-{use_async}"
    folds = _contend("postgres", pg_tables, session, tmp_path / "go", use_async)
    figures = contention_outcome(pg_tables, session, MARKERS, CONTENDED_TURNS, folds)
    report(f"concurrent writers, processes, postgres {'async' if use_async else 'sync'}", figures)
    _assert_nothing_lost(figures)


@pytest.mark.parametrize("use_async", [False, True], ids=["sync", "async"])
def test_prune_backing_with_3_processes_on_sqlite(tmp_path: Path, use_async: bool) -> None:
    """The same on ``SqliteStore`` / ``AsyncSqliteStore`` + ``SQLChatMessageHistory`` files:
    a record lock on a lock file next to the store's database serializes the key."""
    session, target = "contended", tmp_path / "db"
    setup_sqlite(target, session)
    folds = _contend("sqlite", str(target), session, tmp_path / "go", use_async)
    figures = sqlite_contention_outcome(target, session, MARKERS, CONTENDED_TURNS, folds)
    report(f"concurrent writers, processes, sqlite {'async' if use_async else 'sync'}", figures)
    _assert_nothing_lost(figures)


def test_the_advisory_lock_is_released_and_taken_on_the_stores_connection(
    pg_tables: str,
) -> None:
    """After a write (and after a failing one) no advisory lock of ours is left held."""
    import psycopg
    from langchain_postgres import PostgresChatMessageHistory
    from langgraph.store.postgres import PostgresStore

    def held(conn: psycopg.Connection[Any]) -> int:
        row = conn.execute("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory'").fetchone()
        assert row is not None
        return int(row[0])

    session = f"{RUN}-released"
    with (
        psycopg.connect(pg_tables, autocommit=True) as conn,
        psycopg.connect(pg_tables, autocommit=True) as observer,
        PostgresStore.from_conn_string(pg_tables) as store,
    ):
        calls = 0

        def failing(prompt: list[BaseMessage]) -> str:
            nonlocal calls
            calls += 1
            raise RuntimeError("summarizer down")

        for summarize in (FoldLog("ok"), failing):
            history = ManagedChatMessageHistory(
                PostgresChatMessageHistory(PG_TABLE, pg_session(session), sync_connection=conn),
                make_strategy(summarize),
                store=store,
                key=key_for(session),
                prune_backing=True,
            )
            for i in range(8):
                history.add_messages(contention_turn(i, f"m{calls}"))
                assert held(observer) == 0
        assert calls >= 1


# --- cancellation --------------------------------------------------------------------------


async def steps(n: int = 2) -> None:
    for _ in range(n):
        await asyncio.sleep(0)


class SteppingHistory(InMemoryChatMessageHistory):
    """An in-memory history whose async methods take several event-loop steps, like network
    I/O, so a cancellation can land inside each of them (and between two re-added messages)."""

    async def aget_messages(self) -> list[BaseMessage]:
        await steps()
        return list(self.messages)

    async def aadd_messages(self, messages: Sequence[BaseMessage]) -> None:
        for message in messages:
            await steps()
            self.messages.append(message)

    async def aclear(self) -> None:
        await steps()
        self.messages = []
        await steps()


class SteppingStore(InMemoryStore):
    async def abatch(self, ops: Iterable[Op]) -> list[Result]:
        await steps()
        result = self.batch(ops)
        await steps()
        return result


class AsyncFoldLog(FoldLog):
    """FoldLog as an async summarizer that takes a few loop steps."""

    async def __call__(self, prompt: list[BaseMessage]) -> str:  # type: ignore[override]
        for _ in range(3):
            await asyncio.sleep(0)
        return super().__call__(prompt)


def _stepping_history(summarize: Any, session: str) -> ManagedChatMessageHistory:
    """A pruning history whose backing history and store take loop steps (see above)."""
    return ManagedChatMessageHistory(
        SteppingHistory(),
        make_strategy(summarize),
        store=SteppingStore(),
        key=key_for(session),
        prune_backing=True,
    )


def _cancel_run(point: int, prefill: int) -> tuple[bool, dict[str, int]]:
    """Fill a history with ``prefill`` turns, start the turn that folds and prunes, cancel it
    after ``point`` loop steps, then write 4 more turns; return (cancelled?, figures)."""
    log = AsyncFoldLog("c", pause=0)
    history = _stepping_history(log, "cancel")

    async def main() -> bool:
        for i in range(prefill):
            await history.aadd_messages(contention_turn(i, "x"))
        task = asyncio.create_task(history.aadd_messages(contention_turn(prefill, "x")))
        for _ in range(point):
            await asyncio.sleep(0)
        cancelled = not task.done()
        task.cancel()
        try:
            await task
        except asyncio.CancelledError:
            assert cancelled
        for i in range(prefill + 1, prefill + 5):
            await history.aadd_messages(contention_turn(i, "x"))
        return cancelled

    cancelled = asyncio.run(main())
    expected = [str(m.id) for i in range(prefill + 5) for m in contention_turn(i, "x")]
    figures = account(expected, history.history.messages, history.state, log.folds)
    # a call cancelled before it appended anything wrote nothing, which is not a loss; a call
    # that appended only part of its messages would be (the append is shielded: all or none)
    the_turn = [str(m.id) for m in contention_turn(prefill, "x")]
    absent = [
        i
        for i in the_turn
        if account([i], history.history.messages, history.state, log.folds)["lost"]
    ]
    if cancelled and absent == the_turn:
        figures = {**figures, "lost": figures["lost"] - len(the_turn), "not_written": 1}
    return cancelled, figures


def _folding_turns(count: int, limit: int = 60) -> list[int]:
    """The turns that fold (and so prune): how many turns to add before each of them."""
    history = ManagedChatMessageHistory(
        InMemoryChatMessageHistory(), make_strategy(FoldLog("p", pause=0)), prune_backing=True
    )
    found: list[int] = []
    folds = 0
    for i in range(limit):
        history.add_messages(contention_turn(i, "x"))
        state = history.state
        if state is not None and state.folds > folds:
            folds = state.folds
            found.append(i)
            if len(found) == count:
                return found
    raise AssertionError(f"only {len(found)} folds in {limit} turns")


def test_cancelling_aadd_messages_with_prune_backing_loses_nothing() -> None:
    """Cancel the folding-and-pruning turn after 0, 1, 2 ... loop steps, until it completes
    first: every step of its run is a cancellation point. Before the fix, a cancellation
    between the clear and the re-add lost the unfolded messages."""
    points, lost, duplicated, double, not_written = 0, 0, 0, 0, 0
    for prefill in _folding_turns(3):  # the first three folding turns, every step of each
        point = 0
        while True:
            cancelled, figures = _cancel_run(point, prefill)
            if not cancelled:
                break
            points += 1
            lost += figures["lost"]
            duplicated += figures["duplicated"]
            double += figures["double_summarized"]
            not_written += figures.get("not_written", 0)
            point += 1
    report(
        "cancelled aadd_messages",
        {
            "points": points,
            "lost": lost,
            "duplicated": duplicated,
            "double_summarized": double,
            "cancelled_before_writing": not_written,
        },
    )
    assert points >= 80
    assert (lost, duplicated, double) == (0, 0, 0)
    assert not_written < points  # most cancellations landed after the append


def test_wait_for_timeout_is_still_honoured_while_summarizing() -> None:
    """The shield covers the writes only: a hanging summarizer is still cut by a timeout, and
    the appended messages are folded by the next write."""
    hang = asyncio.Event()
    log = FoldLog("w", pause=0)

    async def summarize(prompt: list[BaseMessage]) -> str:
        if not hang.is_set():
            await asyncio.Event().wait()  # hangs until cancelled
        return log(prompt)

    history = _stepping_history(summarize, "wait-for")
    prefill = _folding_turns(1)[0]

    async def main() -> None:
        for i in range(prefill):
            await history.aadd_messages(contention_turn(i, "y"))
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(history.aadd_messages(contention_turn(prefill, "y")), 0.05)
        hang.set()
        await history.aadd_messages(contention_turn(prefill + 1, "y"))

    asyncio.run(main())
    expected = [str(m.id) for i in range(prefill + 2) for m in contention_turn(i, "y")]
    figures = account(expected, history.history.messages, history.state, log.folds)
    assert figures["folds"] >= 1
    assert (figures["lost"], figures["duplicated"], figures["double_summarized"]) == (0, 0, 0)


# --- fail-closed default key ---------------------------------------------------------------


def test_keyless_histories_over_one_store_are_refused() -> None:
    store, strategy = InMemoryStore(), make_strategy()
    backing = InMemoryChatMessageHistory()
    with pytest.raises(MissingKeyError, match="shared_default=True") as raised:
        ManagedChatMessageHistory(backing, strategy, store=store)
    assert raised.value.missing == ("session",)
    assert "ManagedChatMessageHistory" in str(raised.value)
    for config in ({}, {"configurable": {"user_id": "u1"}}, {"configurable": {"session_id": ""}}):
        with pytest.raises(MissingKeyError, match="session"):
            ManagedChatMessageHistory(backing, strategy, store=store, config=config)
        with pytest.raises(MissingKeyError, match="session"):
            ManagedChatMessageHistory.from_config(backing, strategy, config, store=store)
    assert backing.messages == [] and store.search(()) == []


def test_key_less_histories_no_longer_share_a_summary() -> None:
    """The defect: two key-less histories over one store (two users' conversations) read and
    wrote one summary. Now each needs its session, and different sessions never share."""
    store = InMemoryStore()
    first = ManagedChatMessageHistory(
        InMemoryChatMessageHistory(), make_strategy(), store=store, config=_session("s-1")
    )
    second = ManagedChatMessageHistory(
        InMemoryChatMessageHistory(), make_strategy(), store=store, config=_session("s-2")
    )
    for i in range(10):
        first.add_messages(contention_turn(i, "alpha"))
    assert first.summary and second.summary == {} and second.state is None


def _session(session: str) -> dict[str, Any]:
    return {"configurable": {"session_id": session}}


def test_shared_default_is_accepted_and_default_keys_are_refused() -> None:
    store, strategy, backing = InMemoryStore(), make_strategy(), InMemoryChatMessageHistory()
    shared = ManagedChatMessageHistory(backing, strategy, store=store, shared_default=True)
    assert shared.key == MemoryKey()
    # a key built by hand fails closed too: its session is the shared default
    with pytest.raises(MissingKeyError, match="session"):
        ManagedChatMessageHistory(backing, strategy, store=store, key=MemoryKey())
    # a session is enough: tenant and user may default (require_explicit_key asks for them)
    by_session = ManagedChatMessageHistory(backing, strategy, store=store, config=_session("s"))
    assert by_session.key == MemoryKey(session="s")
    # without a store the state is private to the object: nothing can be shared
    assert ManagedChatMessageHistory(backing, strategy).key == MemoryKey()
    with pytest.raises(TypeError, match="shared_default must be a bool"):
        ManagedChatMessageHistory(backing, strategy, store=store, shared_default=1)  # type: ignore[arg-type]


# --- RemoveMessage ----------------------------------------------------------------------------


@pytest.mark.parametrize("use_async", [False, True], ids=["sync", "async"])
@pytest.mark.parametrize("removal", ["by-id", "remove-all"])
def test_remove_message_is_refused_before_anything_is_written(
    use_async: bool, removal: str
) -> None:
    store = InMemoryStore()
    history = ManagedChatMessageHistory(
        InMemoryChatMessageHistory(),
        make_strategy(),
        store=store,
        key=key_for("remove"),
        prune_backing=True,
    )
    for i in range(6):
        history.add_messages(contention_turn(i, "r"))
    before_backing = list(history.history.messages)
    before_state = history.state
    target = REMOVE_ALL_MESSAGES if removal == "remove-all" else str(before_backing[0].id)
    batch = [HumanMessage("new question", id="new-q"), RemoveMessage(id=target)]
    with pytest.raises(InvalidHistoryError, match=r"messages\[1\] is a RemoveMessage") as raised:
        if use_async:
            asyncio.run(history.aadd_messages(batch))
        else:
            history.add_messages(batch)
    assert "nothing was written" in str(raised.value)
    assert isinstance(raised.value, ValueError)
    assert (raised.value.index, raised.value.message_id) == (1, target)
    assert history.history.messages == before_backing  # never stored, nothing lost
    assert history.state == before_state
    assert not any(isinstance(m, RemoveMessage) for m in history.messages)


# --- repeated id-less texts -------------------------------------------------------------------


def _repeated_script(turns: int) -> list[BaseMessage]:
    """A conversation of repeated short texts without ids: "continue" / "Sure." with a
    numbered detail every third turn."""
    out: list[BaseMessage] = []
    for i in range(turns):
        out.append(HumanMessage("continue" if i % 3 else f"question {i}: marker=z start"))
        out.append(AIMessage("Sure." if i % 3 else f"answer {i}: marker=z " + "details " * 20))
    return out


@pytest.mark.parametrize("use_async", [False, True], ids=["sync", "async"])
def test_history_prunes_repeated_id_less_texts_without_loss(use_async: bool) -> None:
    """An id-less backing history (written before the wrapper) full of "continue"/"Sure.":
    pruning rebases the state on keys recomputed for the shorter history, and every message
    is either still in the backing history or in exactly one fold."""
    log = FoldLog("id-less", pause=0)
    backing = InMemoryChatMessageHistory()
    script = _repeated_script(45)
    backing.add_messages(script[:30])
    history = ManagedChatMessageHistory(
        backing,
        SummaryBuffer(300, summarizer=log, max_summary_tokens=60),
        key=key_for("id-less"),
        prune_backing=True,
    )
    for i in range(30, 90, 2):
        if use_async:
            asyncio.run(history.aadd_messages(script[i : i + 2]))
        else:
            history.add_messages(script[i : i + 2])
    state = history.state
    assert state is not None and state.folds >= 2 and state.folded == 0
    left = history.history.messages
    # the backing history is a suffix of the conversation, in order; the summary's folds cover
    # exactly the prefix before it, in order: each repeated text once, none skipped
    gone = len(script) - len(left)
    assert [m.content for m in left] == [m.content for m in script[gone:]]
    chain = log.chain(history.summary["conversation"])
    assert len(chain) == state.folds == len(log.folds)  # no fold wasted
    folded = [text for fold in chain for text in fold["texts"]]
    assert folded == [str(m.content).strip() for m in script[:gone]]
    assert state.seen == len(left)


def test_rebased_state_is_anchored_to_the_shorter_history() -> None:
    """After pruning an id-less history, the stored ``seen_key``/``cut_key`` are the keys of
    the pruned history, so the next write extends it instead of recounting it as rewritten."""
    from langmem_ext.core.identity import key_at

    backing = InMemoryChatMessageHistory()
    backing.add_messages(_repeated_script(30))
    history = ManagedChatMessageHistory(
        backing,
        SummaryBuffer(300, summarizer=FoldLog("k", pause=0), max_summary_tokens=60),
        key=key_for("rebased"),
        prune_backing=True,
    )
    history.add_messages([HumanMessage("continue"), AIMessage("Sure.")])
    state = history.state
    left = history.history.messages
    assert state is not None and state.folds >= 1 and state.seen == len(left)
    assert state.seen_key == key_at(left, len(left) - 1)
    if state.cut_index is not None and state.cut_key is not None:
        assert state.cut_key == key_at(left, state.cut_index)


# --- locks and keys together: a fresh object per request, as RunnableWithMessageHistory does --


def test_lock_is_shared_by_objects_on_the_same_store_and_key() -> None:
    from langmem_ext.integrations import locks as module

    store = InMemoryStore()
    one = ManagedChatMessageHistory(
        InMemoryChatMessageHistory(), make_strategy(), store=store, key=key_for("a")
    )
    two = ManagedChatMessageHistory(
        InMemoryChatMessageHistory(), make_strategy(), store=store, key=key_for("a")
    )
    other = ManagedChatMessageHistory(
        InMemoryChatMessageHistory(), make_strategy(), store=store, key=key_for("b")
    )
    a = module.key_lock(one._lock_owner(None), one.namespace)
    assert module.key_lock(two._lock_owner(None), two.namespace) is a
    assert module.key_lock(other._lock_owner(None), other.namespace) is not a


# --- reads and the lock -----------------------------------------------------------------------


def test_a_read_never_sees_another_writers_prune_half_done() -> None:
    """A read that arrives between a writer's clear and its re-add waits for the re-add: it
    never shows the model a history with the unfolded messages missing."""
    log = FoldLog("r", pause=0)
    backing = SteppingHistory()
    history = ManagedChatMessageHistory(
        backing, make_strategy(log), store=SteppingStore(), key=key_for("read"), prune_backing=True
    )
    prefill = _folding_turns(1)[0]

    async def main() -> tuple[int, list[BaseMessage]]:
        for i in range(prefill):
            await history.aadd_messages(contention_turn(i, "v"))
        writer = asyncio.create_task(history.aadd_messages(contention_turn(prefill, "v")))
        steps_taken = 0
        while backing.messages:  # until the writer has cleared the backing history
            await asyncio.sleep(0)
            steps_taken += 1
            assert not writer.done()
        view = await history.aget_messages()
        await writer
        return steps_taken, view

    steps_taken, view = asyncio.run(main())
    assert steps_taken > 0
    assert view == asyncio.run(history.aget_messages())  # the view after the whole write
    assert view[-1].id == f"v-a{prefill}"


async def test_a_sync_call_inside_an_async_write_of_the_key_fails_instead_of_hanging() -> None:
    history = ManagedChatMessageHistory(
        InMemoryChatMessageHistory(), make_strategy(), store=InMemoryStore(), key=key_for("dl")
    )
    async with history._alocked():
        with pytest.raises(RuntimeError, match="would deadlock; await the async method"):
            history.add_messages(contention_turn(0, "d"))
    history.add_messages(contention_turn(0, "d"))  # and the lock was released
    assert len(history.history.messages) == 2
