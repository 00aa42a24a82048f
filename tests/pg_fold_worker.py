"""One worker process of an agent behind a load balancer, on one PostgreSQL: ``create_agent``
with ``MemoryMiddleware(SummaryBuffer(...))`` in background mode (``prefetch_tokens``), a
``PostgresSaver`` for the threads and a ``PostgresStore`` (over a connection pool) for the
shared folds. Driven by ``tests/integrations/test_workers_postgres.py``.

    python tests/pg_fold_worker.py --dsn CONNINFO --name w0 [--mode view|rewrite]
        [--share on|off] [--fold-seconds 0.3]

Reads one JSON command per line on stdin and answers one JSON line on stdout:

* ``{"turn": i, "thread": t, "marker": m}``: run turn ``i`` of thread ``t``; answers the markers
  of every view the model was given in that turn;
* ``{"dump": t}``: the thread's final state (messages as [type, id, content], memory);
* ``{"quit": true}``: wait for the running background folds, answer, exit.

The model is deterministic and calls a tool once per turn (question -> tool call -> tool result
-> answer). The summarizer is deterministic too (the summary lists the question numbers and
markers it has read); it takes ``--fold-seconds`` (so a fold started on one turn is still
running when the next turn lands on another worker) and records each call in the table
``fold_calls`` (worker, the marker and question numbers of the messages it folds).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import re
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # run as a script from anywhere
    sys.path.insert(0, str(ROOT))

from langchain_core.language_models import BaseChatModel  # noqa: E402
from langchain_core.messages import (  # noqa: E402
    AIMessage,
    BaseMessage,
    HumanMessage,
    ToolMessage,
)
from langchain_core.messages.tool import tool_call  # noqa: E402
from langchain_core.outputs import ChatGeneration, ChatResult  # noqa: E402
from langchain_core.runnables import RunnableConfig  # noqa: E402
from langchain_core.tools import tool  # noqa: E402

from langmem_ext import SummaryBuffer  # noqa: E402
from langmem_ext.integrations.agents import MemoryMiddleware  # noqa: E402
from langmem_ext.strategies.options import split_policy  # noqa: E402

MAX_TOKENS = 1_000
MAX_SUMMARY_TOKENS = 100
PREFETCH_TOKENS = 650
FOLD_WAIT = 10.0

_QUESTION = re.compile(r"question (\d+): marker=(\w+)")
_COVERED = re.compile(r"\bq(\d+)\b")
_MARKER = re.compile(r"marker=(\w+)")

CREATE_CALLS = (
    "CREATE TABLE IF NOT EXISTS fold_calls (id serial PRIMARY KEY, worker text, marker text, "
    "questions int[])"
)


def question(i: int, marker: str) -> HumanMessage:
    return HumanMessage(
        f"question {i}: marker={marker} " + "where is the shipment now " * 10,
        id=f"{marker}-q{i}",
    )


def markers(text: str) -> set[str]:
    return set(_MARKER.findall(text))


def covered(summary_text: str) -> set[int]:
    """The question numbers a summary written by :class:`Summarizer` covers."""
    return {int(n) for n in _COVERED.findall(summary_text)}


class Summarizer:
    """Deterministic, slow on purpose, and recording: each call with questions to fold is a row
    of ``fold_calls``; the summary lists every question number and marker it has read."""

    def __init__(self, dsn: str, worker: str, seconds: float) -> None:
        import psycopg

        self.conn = psycopg.connect(dsn, autocommit=True)
        self.worker = worker
        self.seconds = seconds

    def __call__(self, prompt: list[BaseMessage]) -> str:
        text = "\n".join(str(m.content) for m in prompt)
        folded = _QUESTION.findall(text)  # the transcript's questions (a summary says "qN")
        if folded:
            for marker in sorted({m for _, m in folded}):
                mine = sorted({int(n) for n, m in folded if m == marker})
                self.conn.execute(
                    "INSERT INTO fold_calls (worker, marker, questions) VALUES (%s, %s, %s)",
                    (self.worker, marker, mine),
                )
            time.sleep(self.seconds)
        numbers = {int(n) for n, _ in folded} | covered(text)
        found = " ".join(f"marker={m}" for m in sorted(markers(text)))
        return f"covers {' '.join(f'q{n}' for n in sorted(numbers))}; {found}"


@tool
def lookup(number: int, marker: str) -> str:
    """Look up the shipment of a question."""
    return f"shipment {number} for marker={marker} is on time " + "status ok " * 5


class ToolCallingModel(BaseChatModel):
    """Asks the tool once per question, then answers; records the markers of each view."""

    sink: Any = None

    @property
    def _llm_type(self) -> str:
        return "tool-calling-fake"

    def bind_tools(self, tools: Any, **kwargs: Any) -> ToolCallingModel:
        return self

    def _generate(
        self, messages: Any, stop: Any = None, run_manager: Any = None, **kwargs: Any
    ) -> ChatResult:
        self.sink.append(sorted(markers("\n".join(str(m.content) for m in messages))))
        return ChatResult(generations=[ChatGeneration(message=reply(messages))])


def reply(view: Sequence[BaseMessage]) -> AIMessage:
    """A tool call for the newest question, or the answer once the tool has answered."""
    last = view[-1]
    asked = [m for m in view if isinstance(m, HumanMessage)][-1]
    number, marker = _QUESTION.findall(str(asked.content))[0]
    if isinstance(last, ToolMessage):
        text = f"answer {number}: marker={marker} " + "details " * 30
        return AIMessage(text, id=f"{marker}-a{number}")
    call = tool_call(
        name="lookup", args={"number": int(number), "marker": marker}, id=f"{marker}-call{number}"
    )
    return AIMessage("", tool_calls=[call], id=f"{marker}-c{number}")


def make_strategy(summarizer: Summarizer) -> SummaryBuffer:
    policy, _ = split_policy({"prefetch_tokens": PREFETCH_TOKENS, "fold_wait": FOLD_WAIT})
    return SummaryBuffer(
        MAX_TOKENS, summarizer=summarizer, max_summary_tokens=MAX_SUMMARY_TOKENS, policy=policy
    )


def serve(args: argparse.Namespace) -> None:
    from langchain.agents import create_agent
    from langgraph.checkpoint.postgres import PostgresSaver
    from langgraph.store.postgres import PostgresStore

    strategy = make_strategy(Summarizer(args.dsn, args.name, args.fold_seconds))
    middleware = MemoryMiddleware(strategy, mode=args.mode, share_folds=args.share == "on")
    views: list[list[str]] = []
    pool = {"min_size": 1, "max_size": 4}
    with (
        PostgresSaver.from_conn_string(args.dsn) as saver,
        PostgresStore.from_conn_string(args.dsn, pool_config=pool) as store,  # type: ignore[arg-type]
    ):
        agent = create_agent(
            ToolCallingModel(sink=views),
            [lookup],
            middleware=[middleware],
            checkpointer=saver,
            store=store,
        )
        for line in sys.stdin:
            command = json.loads(line)
            if "quit" in command:
                answer({"running": strategy.flush(timeout=30)})
                return
            thread = command.get("thread") or command["dump"]
            config: RunnableConfig = {"configurable": {"thread_id": thread}}
            if "dump" in command:
                values = dict(agent.get_state(config).values)
                messages = [[m.type, m.id, str(m.content)] for m in values.get("messages", [])]
                answer({"messages": messages, "memory": values.get("memory")})
                continue
            views.clear()
            message = question(command["turn"], command["marker"])
            agent.invoke({"messages": [message]}, config)
            answer({"views": list(views)})


def answer(value: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(value) + "\n")
    sys.stdout.flush()


def main(argv: Sequence[str] | None = None) -> int:
    debug = os.environ.get("LANGMEM_EXT_WORKER_DEBUG") == "1"  # each claim's answer, on stderr
    logging.basicConfig(format="%(asctime)s %(message)s")
    logging.getLogger("langmem_ext").setLevel(logging.DEBUG if debug else logging.WARNING)
    parser = argparse.ArgumentParser()
    parser.add_argument("--dsn", required=True)
    parser.add_argument("--name", required=True)
    parser.add_argument("--mode", choices=("view", "rewrite"), default="view")
    parser.add_argument("--share", choices=("on", "off"), default="on")
    parser.add_argument("--fold-seconds", type=float, default=0.3)
    serve(parser.parse_args(argv))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
