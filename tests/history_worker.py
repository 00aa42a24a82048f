"""Run chat turns through ``RunnableWithMessageHistory`` + ``ManagedChatMessageHistory`` on a
persistent store and backing history; used in-process by
``tests/integrations/test_history.py`` and as a subprocess (a real second process) from it.

    python tests/history_worker.py --backend sqlite --target DIR --session s1=alpha \
        --start 0 --stop 8 [--prune] [--async]

``--backend sqlite``: ``SqliteStore`` (``DIR/store.sqlite``) and langchain-community's
``SQLChatMessageHistory`` (``DIR/history.sqlite``; with ``--async``: ``AsyncSqliteStore`` and an
aiosqlite engine). ``--backend postgres``: ``PostgresStore`` and langchain-postgres's
``PostgresChatMessageHistory`` on the conninfo ``--target`` (with ``--async``:
``AsyncPostgresStore`` and an async psycopg connection).

Prints one JSON object: ``{session: {"state", "backing", "views"}}``. Sessions given together
run round-robin, one turn each. Everything is deterministic (message ids, the summarizer, the
model), so two runs of the same conversation can be compared exactly.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import itertools
import json
import re
import sqlite3
import sys
import threading
import time
import uuid
import warnings
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # run as a script from anywhere
    sys.path.insert(0, str(ROOT))

from _workers_common import (  # noqa: E402
    MARKER,
    QUESTION,
    await_barrier,
    summarizer,
    wait_for_barrier,
)
from fakes import RecordingChatModel  # noqa: E402
from langchain_core.chat_history import (  # noqa: E402
    BaseChatMessageHistory,
    InMemoryChatMessageHistory,
)
from langchain_core.language_models.chat_models import BaseChatModel  # noqa: E402
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage  # noqa: E402
from langchain_core.prompts import ChatPromptTemplate, MessagesPlaceholder  # noqa: E402
from langchain_core.runnables import RunnableConfig  # noqa: E402
from langchain_core.runnables.history import RunnableWithMessageHistory  # noqa: E402
from langgraph.store.base import BaseStore  # noqa: E402

from langmem_ext import SummaryBuffer  # noqa: E402
from langmem_ext.core.keys import MemoryKey  # noqa: E402
from langmem_ext.integrations.history import ManagedChatMessageHistory  # noqa: E402
from langmem_ext.strategies.options import split_policy  # noqa: E402

MAX_TOKENS = 700
MAX_SUMMARY_TOKENS = 100
#: the new question is not in the history when RunnableWithMessageHistory reads it: hold back
#: room for it (and the system prompt of the template)
RESERVE_TOKENS = 150
SYSTEM_PROMPT = "You are a shipping assistant."
PG_TABLE = "langmem_ext_chat_history"


def question_text(i: int, marker: str) -> str:
    return f"question {i}: marker={marker} " + "tell me more about the shipment " * 8


def message_id(message: BaseMessage) -> str:
    """A deterministic id for an added message without one (``alpha-q3`` for question 3 of
    marker alpha), so runs in different processes can be compared exactly."""
    text = str(message.content)
    number, marker = QUESTION.search(text), MARKER.search(text)
    if number and marker:
        return f"{marker.group(1)}-q{number.group(1)}"
    return "h-" + hashlib.blake2b(text.encode(), digest_size=8).hexdigest()


def answer_question(request: list[BaseMessage]) -> AIMessage:
    """The chat model's answer to the newest question of ``request``, echoing its number and
    marker (read from the request only), with a deterministic id."""
    last = str(request[-1].content)
    number = QUESTION.findall(last)[0]
    marker = MARKER.findall(last)[0]
    return AIMessage(
        f"answer {number}: marker={marker} " + "details " * 30, id=f"{marker}-a{number}"
    )


def recording_chat() -> RecordingChatModel:
    """The chat model of the chain: records every request (``requests``) and answers with
    :func:`answer_question`."""
    return RecordingChatModel(respond=answer_question)


class RecordingSummarizer:
    """The deterministic summarizer of history_worker, counting its calls."""

    def __init__(self) -> None:
        self.calls = 0

    def __call__(self, prompt: list[BaseMessage]) -> str:
        self.calls += 1
        return summarizer(prompt)


def turn(i: int, marker: str = "alpha") -> list[BaseMessage]:
    """One question and its answer; the question has no id (the history gives it one)."""
    answer = f"answer {i}: marker={marker} " + "details " * 30
    return [HumanMessage(question_text(i, marker)), AIMessage(answer, id=f"{marker}-a{i}")]


def make_strategy(summarize: Callable[..., Any] = summarizer, **kwargs: Any) -> SummaryBuffer:
    options: dict[str, Any] = {
        "max_summary_tokens": MAX_SUMMARY_TOKENS,
        "reserve_tokens": RESERVE_TOKENS,
        "placement": "human",  # the template has its own system message
        **kwargs,
    }
    policy, options = split_policy(options)
    return SummaryBuffer(MAX_TOKENS, summarizer=summarize, policy=policy, **options)


def key_for(session: str) -> MemoryKey:
    return MemoryKey("acme", "u1", session)


def make_chain(
    model: BaseChatModel, get_history: Callable[[str], BaseChatMessageHistory]
) -> RunnableWithMessageHistory:
    prompt = ChatPromptTemplate.from_messages(
        [("system", SYSTEM_PROMPT), MessagesPlaceholder("history"), ("human", "{question}")]
    )
    with warnings.catch_warnings():  # RunnableWithMessageHistory is deprecated in 1.x
        warnings.simplefilter("ignore")
        return RunnableWithMessageHistory(
            prompt | model,
            get_history,
            input_messages_key="question",
            history_messages_key="history",
        )


def dump_message(message: BaseMessage) -> list[Any]:
    return [message.type, message.id, str(message.content)]


def _config(session: str) -> RunnableConfig:
    return {"configurable": {"session_id": session}}


class Run:
    """One chain over a store and a backing-history factory; ``turn`` / ``aturn`` add one
    question per session, ``dump`` / ``adump`` read everything back."""

    def __init__(
        self,
        store: BaseStore,
        backing_for: Callable[[str], BaseChatMessageHistory],
        *,
        prune: bool,
        strategy: SummaryBuffer | None = None,
    ) -> None:
        self.store = store
        self.backing_for = backing_for
        self.prune = prune
        self.strategy = strategy or make_strategy()
        self.model = recording_chat()
        self.views: dict[str, list[list[Any]]] = {}
        self.requests: dict[str, list[list[BaseMessage]]] = {}
        self.chain = make_chain(self.model, self.history)

    def history(self, session: str) -> ManagedChatMessageHistory:
        return ManagedChatMessageHistory(
            self.backing_for(session),
            self.strategy,
            store=self.store,
            key=key_for(session),
            prune_backing=self.prune,
            id_factory=message_id,
        )

    def _record(self, session: str) -> None:
        self.requests.setdefault(session, []).extend(self.model.requests)
        self.views.setdefault(session, []).extend(
            [dump_message(m) for m in view] for view in self.model.requests
        )
        self.model.requests.clear()

    def turn(self, i: int, session: str, marker: str) -> None:
        self.chain.invoke({"question": question_text(i, marker)}, _config(session))
        self._record(session)

    async def aturn(self, i: int, session: str, marker: str) -> None:
        await self.chain.ainvoke({"question": question_text(i, marker)}, _config(session))
        self._record(session)

    def dump(self, session: str) -> dict[str, Any]:
        history = self.history(session)
        state = history.state
        return {
            "state": state.to_dict() if state is not None else None,
            "backing": [dump_message(m) for m in history.history.messages],
            "views": self.views.get(session, []),
        }

    async def adump(self, session: str) -> dict[str, Any]:
        history = self.history(session)
        state = await history.aget_state()
        return {
            "state": state.to_dict() if state is not None else None,
            "backing": [dump_message(m) for m in await history.history.aget_messages()],
            "views": self.views.get(session, []),
        }


def run_sessions(
    run: Run, sessions: Sequence[tuple[str, str]], turns: Sequence[int]
) -> dict[str, Any]:
    for i in turns:
        for session, marker in sessions:
            run.turn(i, session, marker)
    return {session: run.dump(session) for session, _ in sessions}


async def arun_sessions(
    run: Run, sessions: Sequence[tuple[str, str]], turns: Sequence[int]
) -> dict[str, Any]:
    for i in turns:
        for session, marker in sessions:
            await run.aturn(i, session, marker)
    return {session: await run.adump(session) for session, _ in sessions}


def pg_session(session: str) -> str:
    """PostgresChatMessageHistory wants a UUID session id: a stable one per session name."""
    return str(uuid.uuid5(uuid.NAMESPACE_URL, f"langmem-ext-test:{session}"))


Sessions = Sequence[tuple[str, str]]


def _sqlite(
    target: Path, sessions: Sessions, turns: Sequence[int], prune: bool, use_async: bool
) -> dict[str, Any]:
    from langchain_community.chat_message_histories import SQLChatMessageHistory
    from sqlalchemy import create_engine

    target.mkdir(parents=True, exist_ok=True)
    if use_async:
        from langgraph.store.sqlite.aio import AsyncSqliteStore
        from sqlalchemy.ext.asyncio import create_async_engine

        async def go() -> dict[str, Any]:
            engine = create_async_engine(f"sqlite+aiosqlite:///{target / 'history.sqlite'}")
            try:
                async with AsyncSqliteStore.from_conn_string(str(target / "store.sqlite")) as store:
                    await store.setup()
                    run = Run(
                        store,
                        lambda s: SQLChatMessageHistory(session_id=s, connection=engine),
                        prune=prune,
                    )
                    return await arun_sessions(run, sessions, turns)
            finally:
                await engine.dispose()

        return asyncio.run(go())

    from langgraph.store.sqlite import SqliteStore

    engine = create_engine(f"sqlite:///{target / 'history.sqlite'}")
    conn = sqlite3.connect(
        str(target / "store.sqlite"), check_same_thread=False, isolation_level=None
    )
    try:
        store = SqliteStore(conn)
        store.setup()
        run = Run(
            store,
            lambda s: SQLChatMessageHistory(session_id=s, connection=engine),
            prune=prune,
        )
        return run_sessions(run, sessions, turns)
    finally:
        conn.close()
        engine.dispose()


def _postgres(
    dsn: str, sessions: Sessions, turns: Sequence[int], prune: bool, use_async: bool
) -> dict[str, Any]:
    import psycopg
    from langchain_postgres import PostgresChatMessageHistory

    if use_async:
        from langgraph.store.postgres.aio import AsyncPostgresStore

        async def go() -> dict[str, Any]:
            aconn = await psycopg.AsyncConnection.connect(dsn)
            try:
                await PostgresChatMessageHistory.acreate_tables(aconn, PG_TABLE)
                async with AsyncPostgresStore.from_conn_string(dsn) as store:
                    await store.setup()
                    run = Run(
                        store,
                        lambda s: PostgresChatMessageHistory(
                            PG_TABLE, pg_session(s), async_connection=aconn
                        ),
                        prune=prune,
                    )
                    return await arun_sessions(run, sessions, turns)
            finally:
                await aconn.close()

        return asyncio.run(go())

    from langgraph.store.postgres import PostgresStore

    with psycopg.connect(dsn) as conn, PostgresStore.from_conn_string(dsn) as store:
        PostgresChatMessageHistory.create_tables(conn, PG_TABLE)
        store.setup()
        run = Run(
            store,
            lambda s: PostgresChatMessageHistory(PG_TABLE, pg_session(s), sync_connection=conn),
            prune=prune,
        )
        return run_sessions(run, sessions, turns)


def run_backend(
    backend: str,
    target: str,
    sessions: Sessions,
    turns: Sequence[int],
    *,
    prune: bool,
    use_async: bool = False,
) -> dict[str, Any]:
    """Run ``turns`` of ``sessions`` on a persistent backend (see the module docstring)."""
    if backend == "sqlite":
        return _sqlite(Path(target), sessions, turns, prune, use_async)
    if backend == "postgres":
        return _postgres(target, sessions, turns, prune, use_async)
    raise ValueError(f"unknown backend {backend!r}")


# --- contention: several writers on one key with prune_backing ---------------------------------

_FOLDED = re.compile(r"\b(question|answer) (\d+): marker=(\w+)")
_FOLD_ID = re.compile(r"\bfold ([\w.-]+)")


def contention_turn(i: int, marker: str) -> list[BaseMessage]:
    """Question ``i`` of writer ``marker`` and its answer, with ids (``p0-q3``, ``p0-a3``)."""
    return [
        HumanMessage(question_text(i, marker), id=f"{marker}-q{i}"),
        AIMessage(f"answer {i}: marker={marker} " + "details " * 30, id=f"{marker}-a{i}"),
    ]


class FoldLog:
    """A summarizer that records what each call folds, so loss and double summarization across
    writers (threads or processes) can be counted exactly.

    Its summary is only ``fold <id>``; the log maps that id to the id of the summary it
    extended (read from the previous summary in the prompt) and to the ids of the messages in
    the transcript. Following the chain back from the final summary gives, as a multiset, the
    messages the stored summary really stands for; a fold outside the chain was thrown away
    (a concurrent writer overwrote its state). ``pause`` widens the race window (a summarizer
    is a network call, never instantaneous).
    """

    def __init__(self, name: str, pause: float = 0.002) -> None:
        self.name = name
        self.pause = pause
        self.folds: dict[str, dict[str, Any]] = {}
        self._lock = threading.Lock()
        self._counter = itertools.count()

    def __call__(self, prompt: list[BaseMessage]) -> str:
        text = "\n".join(str(m.content) for m in prompt)
        start = text.rfind("<transcript>")
        before, transcript = text[:start], text[start:]
        folded = [
            f"{marker}-{'q' if kind == 'question' else 'a'}{n}"
            for kind, n, marker in _FOLDED.findall(transcript)
        ]
        texts = [
            line.split(": ", 1)[1]
            for line in transcript.splitlines()
            if line.startswith(("user: ", "assistant: "))
        ]
        previous = _FOLD_ID.findall(before)
        if self.pause:
            time.sleep(self.pause)
        with self._lock:
            fold = f"{self.name}.{next(self._counter)}"
            self.folds[fold] = {
                "prev": previous[-1] if previous else None,
                "ids": folded,
                "texts": texts,
            }
        return f"fold {fold}"

    def chain(self, summary_text: str) -> list[dict[str, Any]]:
        """The folds the summary ``fold <id>`` stands for, oldest first."""
        found = _FOLD_ID.findall(summary_text)
        out: list[dict[str, Any]] = []
        fold = found[-1] if found else None
        while fold is not None:
            out.append(self.folds[fold])
            fold = self.folds[fold]["prev"]
        return out[::-1]


def fold_chain(
    summary_text: str, folds: dict[str, dict[str, Any]]
) -> tuple[Counter[str], set[str]]:
    """The message ids (with multiplicity) the summary ``fold <id>`` stands for, and the folds
    on its chain."""
    found = _FOLD_ID.findall(summary_text)
    covered_ids: Counter[str] = Counter()
    reached: set[str] = set()
    fold = found[-1] if found else None
    while fold is not None:
        reached.add(fold)
        covered_ids.update(folds[fold]["ids"])
        fold = folds[fold]["prev"]
    return covered_ids, reached


def account(
    expected: Sequence[str],
    backing: Sequence[BaseMessage],
    state: Any,
    folds: dict[str, dict[str, Any]],
) -> dict[str, int]:
    """Lost, duplicated and double-summarized messages of a contended run.

    Every expected message must be exactly once in the unfolded part of the backing history
    or in the summary's fold chain. ``wasted_folds``: summarizer calls whose result the stored
    summary does not include (work thrown away; their messages may still be summarized
    elsewhere)."""
    folded = state.folded if state is not None else 0
    live = Counter(str(m.id) for m in backing[folded:])
    summary = state.sections.get("conversation", "") if state is not None else ""
    chain, reached = fold_chain(summary, folds)
    known = set(expected)
    return {
        "messages": len(expected),
        "lost": sum(1 for i in expected if live[i] + chain[i] == 0),
        "duplicated": sum(1 for i in expected if live[i] > 1 or (live[i] and chain[i])),
        "double_summarized": sum(1 for i in expected if chain[i] > 1),
        "foreign": sum(1 for i in (live + chain) if i not in known),
        "wasted_folds": len(set(folds) - reached),
        "folds": len(reached),
    }


def contend_threads(
    workers: int,
    turns: int,
    *,
    store: BaseStore | None = None,
    backing: BaseChatMessageHistory | None = None,
    session: str = "contended",
    use_async: bool = False,
) -> dict[str, int]:
    """``workers`` threads add ``turns`` turns each to ONE key with ``prune_backing=True``,
    at the same time; returns :func:`account` of the outcome."""
    from langgraph.store.memory import InMemoryStore

    store = store if store is not None else InMemoryStore()
    backing = backing if backing is not None else InMemoryChatMessageHistory()
    log = FoldLog("t")
    strategy = make_strategy(log)
    barrier = threading.Barrier(workers)
    errors: list[BaseException] = []

    def history() -> ManagedChatMessageHistory:
        return ManagedChatMessageHistory(
            backing, strategy, store=store, key=key_for(session), prune_backing=True
        )

    def work(w: int) -> None:
        try:
            barrier.wait()
            for i in range(turns):
                if use_async:
                    asyncio.run(history().aadd_messages(contention_turn(i, f"w{w}")))
                else:
                    history().add_messages(contention_turn(i, f"w{w}"))
        except BaseException as error:  # reported by the caller
            errors.append(error)

    threads = [threading.Thread(target=work, args=(w,)) for w in range(workers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if errors:
        raise errors[0]
    expected = [
        m.id or ""
        for w in range(workers)
        for i in range(turns)
        for m in contention_turn(i, f"w{w}")
    ]
    final = history()
    return account(expected, final.history.messages, final.state, log.folds)


def _contender(
    session: str, marker: str
) -> tuple[FoldLog, Callable[[BaseStore, BaseChatMessageHistory], ManagedChatMessageHistory]]:
    """One racing process's fold log, and how it wraps a store and a backing history for each
    turn (one key, ``prune_backing=True``)."""
    log = FoldLog(marker)
    strategy = make_strategy(log)

    def history(store: BaseStore, backing: BaseChatMessageHistory) -> ManagedChatMessageHistory:
        return ManagedChatMessageHistory(
            backing, strategy, store=store, key=key_for(session), prune_backing=True
        )

    return log, history


def contend_process(
    dsn: str, session: str, marker: str, turns: int, barrier: str, *, use_async: bool = False
) -> dict[str, Any]:
    """One of several processes adding ``turns`` turns to one key on PostgreSQL with
    ``prune_backing=True``; waits for the file ``barrier`` to exist so all start together.
    ``use_async``: ``AsyncPostgresStore``, an async connection and ``aadd_messages``.
    Returns this process's fold log."""
    import psycopg
    from langchain_postgres import PostgresChatMessageHistory

    log, history = _contender(session, marker)

    if use_async:
        from langgraph.store.postgres.aio import AsyncPostgresStore

        async def go() -> None:
            aconn = await psycopg.AsyncConnection.connect(dsn, autocommit=True)
            try:
                async with AsyncPostgresStore.from_conn_string(dsn) as store:
                    await await_barrier(barrier)
                    for i in range(turns):
                        backing = PostgresChatMessageHistory(
                            PG_TABLE, pg_session(session), async_connection=aconn
                        )
                        await history(store, backing).aadd_messages(contention_turn(i, marker))
            finally:
                await aconn.close()

        asyncio.run(go())
        return {"folds": log.folds}

    from langgraph.store.postgres import PostgresStore

    with (
        psycopg.connect(dsn, autocommit=True) as conn,
        PostgresStore.from_conn_string(dsn) as sync_store,
    ):
        wait_for_barrier(barrier)  # (the tables were set up by the caller)
        for i in range(turns):
            backing = PostgresChatMessageHistory(
                PG_TABLE, pg_session(session), sync_connection=conn
            )
            history(sync_store, backing).add_messages(contention_turn(i, marker))
    return {"folds": log.folds}


def contend_sqlite_process(
    target: Path, session: str, marker: str, turns: int, barrier: str, *, use_async: bool = False
) -> dict[str, Any]:
    """:func:`contend_process` on SQLite files in ``target`` (``SqliteStore`` or
    ``AsyncSqliteStore``, and langchain-community's ``SQLChatMessageHistory``)."""
    from langchain_community.chat_message_histories import SQLChatMessageHistory
    from sqlalchemy import create_engine

    log, history = _contender(session, marker)

    if use_async:
        from langgraph.store.sqlite.aio import AsyncSqliteStore
        from sqlalchemy.ext.asyncio import create_async_engine

        async def go() -> None:
            engine = create_async_engine(f"sqlite+aiosqlite:///{target / 'history.sqlite'}")
            try:
                async with AsyncSqliteStore.from_conn_string(str(target / "store.sqlite")) as st:
                    await await_barrier(barrier)
                    for i in range(turns):
                        backing = SQLChatMessageHistory(session_id=session, connection=engine)
                        await history(st, backing).aadd_messages(contention_turn(i, marker))
            finally:
                await engine.dispose()

        asyncio.run(go())
        return {"folds": log.folds}

    from langgraph.store.sqlite import SqliteStore

    engine = create_engine(f"sqlite:///{target / 'history.sqlite'}")
    conn = sqlite3.connect(
        str(target / "store.sqlite"), check_same_thread=False, isolation_level=None, timeout=30
    )
    try:
        store = SqliteStore(conn)
        wait_for_barrier(barrier)
        for i in range(turns):
            backing = SQLChatMessageHistory(session_id=session, connection=engine)
            history(store, backing).add_messages(contention_turn(i, marker))
    finally:
        conn.close()
        engine.dispose()
    return {"folds": log.folds}


def setup_sqlite(target: Path, session: str) -> None:
    """Create the SQLite store's and history's tables once, before workers race on them."""
    from langchain_community.chat_message_histories import SQLChatMessageHistory
    from langgraph.store.sqlite import SqliteStore
    from sqlalchemy import create_engine

    target.mkdir(parents=True, exist_ok=True)
    with SqliteStore.from_conn_string(str(target / "store.sqlite")) as store:
        store.setup()
    engine = create_engine(f"sqlite:///{target / 'history.sqlite'}")
    SQLChatMessageHistory(session_id=session, connection=engine)
    engine.dispose()


def _stored_outcome(
    backing: BaseChatMessageHistory,
    store: BaseStore,
    session: str,
    markers_: Sequence[str],
    turns: int,
    folds: dict[str, Any],
) -> dict[str, int]:
    """:func:`account` of a contended run of ``markers_`` racing processes, read back from the
    backing history and the store they wrote."""
    history = ManagedChatMessageHistory(backing, make_strategy(), store=store, key=key_for(session))
    expected = [
        m.id or "" for marker in markers_ for i in range(turns) for m in contention_turn(i, marker)
    ]
    return account(expected, history.history.messages, history.state, folds)


def sqlite_contention_outcome(
    target: Path, session: str, markers_: Sequence[str], turns: int, folds: dict[str, Any]
) -> dict[str, int]:
    """:func:`account` of a contended SQLite run, read back from the files."""
    from langchain_community.chat_message_histories import SQLChatMessageHistory
    from langgraph.store.sqlite import SqliteStore
    from sqlalchemy import create_engine

    engine = create_engine(f"sqlite:///{target / 'history.sqlite'}")
    try:
        with SqliteStore.from_conn_string(str(target / "store.sqlite")) as store:
            backing = SQLChatMessageHistory(session_id=session, connection=engine)
            return _stored_outcome(backing, store, session, markers_, turns, folds)
    finally:
        engine.dispose()


def contention_outcome(
    dsn: str, session: str, markers_: Sequence[str], turns: int, folds: dict[str, Any]
) -> dict[str, int]:
    """:func:`account` of a contended PostgreSQL run, read back from the database."""
    import psycopg
    from langchain_postgres import PostgresChatMessageHistory
    from langgraph.store.postgres import PostgresStore

    with (
        psycopg.connect(dsn, autocommit=True) as conn,
        PostgresStore.from_conn_string(dsn) as store,
    ):
        backing = PostgresChatMessageHistory(PG_TABLE, pg_session(session), sync_connection=conn)
        return _stored_outcome(backing, store, session, markers_, turns, folds)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--backend", choices=("sqlite", "postgres"), required=True)
    parser.add_argument("--target", required=True, help="a directory (sqlite) or a conninfo")
    parser.add_argument("--session", action="append", required=True, help="SESSION=MARKER")
    parser.add_argument(
        "--contend", metavar="BARRIER", help="contention mode: start when this file exists"
    )
    parser.add_argument("--start", type=int, default=0)
    parser.add_argument("--stop", type=int, required=True)
    parser.add_argument("--prune", action="store_true")
    parser.add_argument("--async", dest="use_async", action="store_true")
    args = parser.parse_args(argv)
    sessions = [(s.split("=", 1)[0], s.split("=", 1)[1]) for s in args.session]
    warnings.simplefilter("ignore")  # deprecation notices of the chat-history classes
    if args.contend:
        session, marker = sessions[0]
        contend = contend_process if args.backend == "postgres" else contend_sqlite_process
        json.dump(
            contend(
                args.target if args.backend == "postgres" else Path(args.target),  # type: ignore[arg-type]
                session,
                marker,
                args.stop - args.start,
                args.contend,
                use_async=args.use_async,
            ),
            sys.stdout,
        )
        return 0
    out = run_backend(
        args.backend,
        args.target,
        sessions,
        range(args.start, args.stop),
        prune=args.prune,
        use_async=args.use_async,
    )
    json.dump(out, sys.stdout)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
