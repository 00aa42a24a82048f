"""Run chat turns through ``RunnableWithMessageHistory`` + ``ManagedChatMessageHistory`` on a
persistent store and backing history; used in-process by ``tests/test_history.py`` and as a
subprocess (a real second process) from it.

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
import json
import re
import sqlite3
import sys
import uuid
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # run as a script from anywhere
    sys.path.insert(0, str(ROOT))

from langchain_core.chat_history import BaseChatMessageHistory  # noqa: E402
from langchain_core.language_models.chat_models import BaseChatModel  # noqa: E402
from langchain_core.messages import AIMessage, BaseMessage  # noqa: E402
from langchain_core.outputs import ChatGeneration, ChatResult  # noqa: E402
from langchain_core.prompts import ChatPromptTemplate, MessagesPlaceholder  # noqa: E402
from langchain_core.runnables import RunnableConfig  # noqa: E402
from langchain_core.runnables.history import RunnableWithMessageHistory  # noqa: E402
from langgraph.store.base import BaseStore  # noqa: E402
from pydantic import Field  # noqa: E402

from langmem_ext import SummaryBuffer  # noqa: E402
from langmem_ext.history import ManagedChatMessageHistory  # noqa: E402
from langmem_ext.keys import MemoryKey  # noqa: E402

MAX_TOKENS = 700
MAX_SUMMARY_TOKENS = 100
#: the new question is not in the history when RunnableWithMessageHistory reads it: hold back
#: room for it (and the system prompt of the template)
RESERVE_TOKENS = 150
SYSTEM_PROMPT = "You are a shipping assistant."
PG_TABLE = "langmem_ext_chat_history"

_QUESTION = re.compile(r"question (\d+):")
_COVERED = re.compile(r"\bq(\d+)\b")
_MARKER = re.compile(r"marker=(\w+)")


def question_text(i: int, marker: str) -> str:
    return f"question {i}: marker={marker} " + "tell me more about the shipment " * 8


def summarizer(prompt: list[BaseMessage]) -> str:
    """Deterministic and content-dependent: the summary lists every question number and marker
    it has read (in the transcript or the previous summary), so a summary that missed, repeated
    or mixed up messages is visible."""
    text = "\n".join(str(m.content) for m in prompt)
    numbers = {int(n) for n in _QUESTION.findall(text)} | {int(n) for n in _COVERED.findall(text)}
    found = sorted(set(_MARKER.findall(text)))
    return f"covers {' '.join(f'q{n}' for n in sorted(numbers))}; " + " ".join(
        f"marker={m}" for m in found
    )


def covered(summary_text: str) -> set[int]:
    """The question numbers a summary written by :func:`summarizer` covers."""
    return {int(n) for n in _COVERED.findall(summary_text)}


def markers(text: str) -> set[str]:
    return set(_MARKER.findall(text))


def message_id(message: BaseMessage) -> str:
    """A deterministic id for an added message without one (``alpha-q3`` for question 3 of
    marker alpha), so runs in different processes can be compared exactly."""
    text = str(message.content)
    number, marker = _QUESTION.search(text), _MARKER.search(text)
    if number and marker:
        return f"{marker.group(1)}-q{number.group(1)}"
    return "h-" + hashlib.blake2b(text.encode(), digest_size=8).hexdigest()


class RecordingChat(BaseChatModel):
    """A chat model that records every request and answers the newest question, echoing its
    number and marker (read from the request only), with a deterministic id."""

    seen: list[list[BaseMessage]] = Field(default_factory=list)

    @property
    def _llm_type(self) -> str:
        return "recording-chat"

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: Any = None,
        **kwargs: Any,
    ) -> ChatResult:
        self.seen.append(list(messages))
        last = str(messages[-1].content)
        number = _QUESTION.findall(last)[0]
        marker = _MARKER.findall(last)[0]
        answer = AIMessage(
            f"answer {number}: marker={marker} " + "details " * 30, id=f"{marker}-a{number}"
        )
        return ChatResult(generations=[ChatGeneration(message=answer)])


def make_strategy(summarize: Callable[..., Any] = summarizer, **kwargs: Any) -> SummaryBuffer:
    options: dict[str, Any] = {
        "max_summary_tokens": MAX_SUMMARY_TOKENS,
        "reserve_tokens": RESERVE_TOKENS,
        "placement": "human",  # the template has its own system message
        **kwargs,
    }
    return SummaryBuffer(MAX_TOKENS, summarizer=summarize, **options)


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
        self.model = RecordingChat()
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
        self.requests.setdefault(session, []).extend(self.model.seen)
        self.views.setdefault(session, []).extend(
            [dump_message(m) for m in view] for view in self.model.seen
        )
        self.model.seen.clear()

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


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--backend", choices=("sqlite", "postgres"), required=True)
    parser.add_argument("--target", required=True, help="a directory (sqlite) or a conninfo")
    parser.add_argument("--session", action="append", required=True, help="SESSION=MARKER")
    parser.add_argument("--start", type=int, default=0)
    parser.add_argument("--stop", type=int, required=True)
    parser.add_argument("--prune", action="store_true")
    parser.add_argument("--async", dest="use_async", action="store_true")
    args = parser.parse_args(argv)
    sessions = [(s.split("=", 1)[0], s.split("=", 1)[1]) for s in args.session]
    warnings.simplefilter("ignore")  # deprecation notices of the chat-history classes
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
