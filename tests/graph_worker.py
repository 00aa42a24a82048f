"""Run MemoryNode graph turns on a persistent checkpointer; used in-process by
``tests/integrations/test_graph_persistence.py`` and as a subprocess (a real restart) from it.

    python tests/graph_worker.py --backend sqlite --target run.sqlite --mode rewrite \
        --thread t1=alpha --start 0 --stop 8 [--surface node|middleware]

prints one JSON object to stdout: ``{thread: {"memory", "messages", "views"}}``. Threads given
together are run round-robin, one turn each. Everything is deterministic (message ids, the
summarizer, the model), so two runs of the same conversation can be compared exactly.

Surfaces: ``node`` is ``MemoryNode`` in an explicit ``StateGraph`` (memory -> model);
``middleware`` is ``MemoryMiddleware`` in langchain's ``create_agent`` with a fake chat model.
Backends: ``sqlite`` (SqliteSaver), ``asqlite`` (AsyncSqliteSaver), ``postgres``
(PostgresSaver), ``apostgres`` (AsyncPostgresSaver); the async ones run ``ainvoke``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sqlite3
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # run as a script from anywhere
    sys.path.insert(0, str(ROOT))

from _workers_common import MARKER, summarizer  # noqa: E402
from langchain_core.language_models import BaseChatModel  # noqa: E402
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage  # noqa: E402
from langchain_core.outputs import ChatGeneration, ChatResult  # noqa: E402
from memory_graphs import memory_graph  # noqa: E402

from langmem_ext import MemoryMessagesState, MemoryNode, SummaryBuffer  # noqa: E402
from langmem_ext.strategies.options import split_policy  # noqa: E402

MAX_TOKENS = 1_000
MAX_SUMMARY_TOKENS = 100


def question(i: int, marker: str) -> HumanMessage:
    return HumanMessage(
        f"question {i}: marker={marker} " + "tell me more about the shipment " * 12,
        id=f"{marker}-q{i}",
    )


def make_strategy(summarize: Callable[..., Any] = summarizer, **kwargs: Any) -> SummaryBuffer:
    policy, kwargs = split_policy(kwargs)
    return SummaryBuffer(
        MAX_TOKENS,
        summarizer=summarize,
        max_summary_tokens=MAX_SUMMARY_TOKENS,
        policy=policy,
        **kwargs,
    )


def build_graph(node: MemoryNode, checkpointer: Any, seen: list[list[BaseMessage]]) -> Any:
    """memory -> model, where the model records the view it was given and answers the last
    question, echoing its number and marker (read from the view only)."""

    def model(state: MemoryMessagesState) -> dict[str, Any]:
        view = list(state["llm_input_messages"])
        seen.append(view)
        return {"messages": [answer(view)]}

    return memory_graph(node, model, checkpointer)


def answer(view: Sequence[BaseMessage]) -> AIMessage:
    """The model's reply to the last question in the view, echoing its number and marker."""
    last = str(view[-1].content)
    number = last.split(":")[0].removeprefix("question ")
    marker = MARKER.findall(last)[0]
    return AIMessage(
        f"answer {number}: marker={marker} " + "details " * 40, id=f"{marker}-a{number}"
    )


class EchoModel(BaseChatModel):
    """A chat model for ``create_agent``: records each request in ``sink`` and answers it."""

    sink: Any = None

    @property
    def _llm_type(self) -> str:
        return "echo"

    def bind_tools(self, tools: Any, **kwargs: Any) -> EchoModel:
        return self

    def _generate(
        self, messages: Any, stop: Any = None, run_manager: Any = None, **kwargs: Any
    ) -> ChatResult:
        self.sink.append(list(messages))
        return ChatResult(generations=[ChatGeneration(message=answer(messages))])


def build_agent(
    strategy: SummaryBuffer, mode: str, checkpointer: Any, seen: list[list[BaseMessage]]
) -> Any:
    """``create_agent`` with ``MemoryMiddleware``; the model records what it was sent."""
    from langchain.agents import create_agent

    from langmem_ext import MemoryMiddleware

    middleware = MemoryMiddleware(strategy, mode=mode)  # type: ignore[arg-type]
    return create_agent(
        EchoModel(sink=seen), [], middleware=[middleware], checkpointer=checkpointer
    )


def build(surface: str, mode: str, checkpointer: Any, seen: list[list[BaseMessage]]) -> Any:
    if surface == "middleware":
        return build_agent(make_strategy(), mode, checkpointer, seen)
    return build_graph(MemoryNode(make_strategy(), mode=mode), checkpointer, seen)  # type: ignore[arg-type]


def dump_message(message: BaseMessage) -> list[Any]:
    return [message.type, message.id, str(message.content)]


def dump(values: dict[str, Any], views: list[list[BaseMessage]]) -> dict[str, Any]:
    return {
        "memory": values.get("memory"),
        "messages": [dump_message(m) for m in values.get("messages", [])],
        "views": [[dump_message(m) for m in view] for view in views],
    }


def run_threads(
    checkpointer: Any,
    threads: Sequence[tuple[str, str]],
    turns: range,
    mode: str,
    surface: str = "node",
) -> dict[str, Any]:
    """Run ``turns`` on every (thread_id, marker), round-robin; one shared graph."""
    seen: dict[str, list[list[BaseMessage]]] = {t: [] for t, _ in threads}
    current: list[list[BaseMessage]] = []
    graph = build(surface, mode, checkpointer, current)
    for i in turns:
        for thread, marker in threads:
            current.clear()
            graph.invoke({"messages": [question(i, marker)]}, _config(thread))
            seen[thread].extend(current)
    return {t: dump(dict(graph.get_state(_config(t)).values), seen[t]) for t, _ in threads}


async def arun_threads(
    checkpointer: Any,
    threads: Sequence[tuple[str, str]],
    turns: range,
    mode: str,
    surface: str = "node",
) -> dict[str, Any]:
    seen: dict[str, list[list[BaseMessage]]] = {t: [] for t, _ in threads}
    current: list[list[BaseMessage]] = []
    graph = build(surface, mode, checkpointer, current)
    for i in turns:
        for thread, marker in threads:
            current.clear()
            await graph.ainvoke({"messages": [question(i, marker)]}, _config(thread))
            seen[thread].extend(current)
    out = {}
    for t, _ in threads:
        out[t] = dump(dict((await graph.aget_state(_config(t))).values), seen[t])
    return out


def _config(thread: str) -> dict[str, Any]:
    return {"configurable": {"thread_id": thread}}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser()
    backends = ("sqlite", "asqlite", "postgres", "apostgres")
    parser.add_argument("--backend", choices=backends, required=True)
    parser.add_argument("--surface", choices=("node", "middleware"), default="node")
    parser.add_argument("--target", required=True, help="sqlite file or postgres conninfo")
    parser.add_argument("--mode", choices=("view", "rewrite"), default="rewrite")
    parser.add_argument("--thread", action="append", required=True, help="THREAD_ID=MARKER")
    parser.add_argument("--start", type=int, default=0)
    parser.add_argument("--stop", type=int, required=True)
    args = parser.parse_args(argv)
    threads = [tuple(t.split("=", 1)) for t in args.thread]
    turns = range(args.start, args.stop)

    if args.backend == "sqlite":
        from langgraph.checkpoint.sqlite import SqliteSaver

        conn = sqlite3.connect(args.target, check_same_thread=False)
        try:
            out = run_threads(SqliteSaver(conn), threads, turns, args.mode, args.surface)  # type: ignore[arg-type]
        finally:
            conn.close()
    elif args.backend == "postgres":
        from langgraph.checkpoint.postgres import PostgresSaver

        with PostgresSaver.from_conn_string(args.target) as saver:
            out = run_threads(saver, threads, turns, args.mode, args.surface)  # type: ignore[arg-type]
    elif args.backend == "asqlite":
        from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver

        async def go_sqlite() -> dict[str, Any]:
            async with AsyncSqliteSaver.from_conn_string(args.target) as saver:
                return await arun_threads(saver, threads, turns, args.mode, args.surface)  # type: ignore[arg-type]

        out = asyncio.run(go_sqlite())
    else:
        from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver

        async def go() -> dict[str, Any]:
            async with AsyncPostgresSaver.from_conn_string(args.target) as saver:
                return await arun_threads(saver, threads, turns, args.mode, args.surface)  # type: ignore[arg-type]

        out = asyncio.run(go())
    json.dump(out, sys.stdout)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
