"""One worker process of the soak benchmark (``bench/soak.py`` starts, feeds and kills them).

    python -m bench.soak_worker --dsn DSN --worker 0 [--pool 4]

Reads one JSON task a line on stdin (``{"thread": 7, "turn": 3, "retry": false}``, or
``{"quit": true}``) and runs it as one agent turn: langchain's ``create_agent`` with a fake chat
model (a tool call every other turn), ``MemoryMiddleware(SummaryBuffer(...))`` with background
compaction, on ``PostgresSaver`` and ``PostgresStore``. Writes one JSON line a finished turn,
one a summarizer call and one a second with its RSS, on stdout (flushed: a SIGKILL loses at
most the line being written).

Markers: every message opens with ``m<N>:`` where ``N = thread * 1000 + turn * 4 + slot`` (0 the
question, 1 the tool call, 2 the tool's answer, 3 the reply), and every summary with ``Summary
of t<thread>.``: a view or a summarizer input that shows another thread's marker or summary is a
leak; a marker shown to the summarizer twice is a double fold.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import threading
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
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
)
from langchain_core.outputs import ChatGeneration, ChatResult  # noqa: E402

from bench.fakes import _summary_body  # noqa: E402

__all__ = ["MARKER", "SUMMARY_TAG", "marker", "question", "thread_of"]

MARKER = re.compile(r"\bm(\d+):")
SUMMARY_TAG = re.compile(r"Summary of t(\d+)\.")
#: markers a thread may use: 40 turns x 4 slots fit in 1,000
PER_THREAD = 1_000

#: the strategy's settings (tokens, approximate counter)
#: the strategy's budget (approximate counter); its summary gets a fifth, and background
#: compaction starts at three quarters
MAX_TOKENS = 600
MAX_SUMMARY_TOKENS = MAX_TOKENS // 5


def marker(thread: int, turn: int, slot: int) -> int:
    return thread * PER_THREAD + turn * 4 + slot


def thread_of(number: int) -> int:
    return number // PER_THREAD


def _text(message: BaseMessage) -> str:
    return message.content if isinstance(message.content, str) else str(message.content)


def question(thread: int, turn: int) -> HumanMessage:
    n = marker(thread, turn, 0)
    body = f"question {turn} about order {n % 97} and the shipment to depot {n % 13}; " * 2
    return HumanMessage(f"m{n}: {body}", id=f"t{thread}-{turn}")


def _foreign(messages: Sequence[BaseMessage], thread: int) -> int:
    """How many markers or summaries of another thread ``messages`` show."""
    text = "\n".join(_text(m) for m in messages)
    found = [thread_of(int(n)) for n in MARKER.findall(text)]
    found += [int(t) for t in SUMMARY_TAG.findall(text)]
    return sum(1 for t in found if t != thread)


class SoakModel(BaseChatModel):
    """The agent's model: a tool call on even turns, then (or at once) a reply; it counts the
    views that show another thread's messages (``leaks``)."""

    leaks: int = 0
    calls: int = 0

    @property
    def _llm_type(self) -> str:
        return "soak"

    def bind_tools(self, tools: Any, **kwargs: Any) -> SoakModel:
        return self

    def _generate(
        self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None, **kw: Any
    ) -> ChatResult:
        self.calls += 1
        newest = next(m for m in reversed(messages) if isinstance(m, HumanMessage))
        n = int(MARKER.match(_text(newest)).group(1))  # type: ignore[union-attr]
        thread, turn = thread_of(n), (n % PER_THREAD) // 4
        self.leaks += _foreign(messages, thread)
        if isinstance(messages[-1], HumanMessage) and turn % 2 == 0:
            call = {"name": "lookup", "args": {"number": n + 2}, "id": f"call-{n}"}
            reply = AIMessage(f"m{n + 1}: let me look up order {n % 97}", tool_calls=[call])
        else:
            words = "the shipment left the depot on schedule and the order is confirmed " * 3
            reply = AIMessage(f"m{n + 3}: answer to question {turn}: {words}")
        reply.id = f"t{thread}-{turn}-{'a1' if reply.tool_calls else 'a3'}"
        return ChatResult(generations=[ChatGeneration(message=reply)])


class Emitter:
    """One JSON object a line on stdout, whole lines only (a lock), flushed."""

    def __init__(self) -> None:
        self.lock = threading.Lock()

    def __call__(self, **fields: Any) -> None:
        line = json.dumps(fields, separators=(",", ":"))
        with self.lock:
            sys.stdout.write(line + "\n")
            sys.stdout.flush()


class Summarizer:
    """The fake summarizing model: sleeps ``delay`` (a model's latency, no CPU), reports the
    markers it was shown, and answers a checkable summary tagged with the thread. It keeps when
    it ran for each thread, so the time a call spent on the summarizer (inline, or waiting for a
    background fold) can be taken out of memory's own time (:meth:`overlap`)."""

    def __init__(self, emit: Emitter, delay: float) -> None:
        self.emit = emit
        self.delay = delay
        self.calls = 0
        self.lock = threading.Lock()
        #: thread -> (start, end) of its recent calls; end None while running
        self.spans: dict[int, list[list[float | None]]] = {}

    def overlap(self, thread: int, start: float, end: float) -> float:
        """Seconds of ``[start, end]`` during which a summarizer call for ``thread`` ran."""
        with self.lock:
            spans = list(self.spans.get(thread, ()))
        total = 0.0
        for s, e in spans:
            assert s is not None
            total += max(0.0, min(end, e if e is not None else end) - max(start, s))
        return total

    def __call__(self, prompt: Any) -> str:
        wall, started = time.time(), time.perf_counter()
        messages = list(prompt) if not isinstance(prompt, str) else [HumanMessage(prompt)]
        found = sorted({int(x) for m in messages for x in MARKER.findall(_text(m))})
        threads = sorted({thread_of(n) for n in found} | set(self._tags(messages)))
        span: list[float | None] = [started, None]
        with self.lock:
            self.calls += 1
            calls = self.calls
            for t in threads:
                self.spans[t] = [*self.spans.get(t, [])[-7:], span]
        time.sleep(self.delay)
        head = f"Summary of t{threads[0] if threads else -1}. "
        text = head + _summary_body(messages, MAX_SUMMARY_TOKENS * 2, calls)
        ended = wall + time.perf_counter() - started
        self.emit(kind="fold", markers=found, threads=threads, start=wall, end=ended)
        span[1] = time.perf_counter()
        return text

    @staticmethod
    def _tags(messages: Sequence[BaseMessage]) -> list[int]:
        return [int(t) for m in messages for t in SUMMARY_TAG.findall(_text(m))]


def _rss_mb() -> float:
    with open("/proc/self/status", encoding="utf-8") as fh:
        for line in fh:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024.0
    return 0.0


class Worker:
    """The agent and its instruments, shared by the pool's threads."""

    def __init__(
        self,
        dsn: str,
        worker: int,
        pool: int,
        delay: float,
        budget: int = MAX_TOKENS,
        fold_wait: float | None = None,
    ) -> None:
        from langchain.agents import create_agent
        from langchain_core.tools import tool
        from langgraph.checkpoint.postgres import PostgresSaver
        from langgraph.store.postgres import PostgresStore
        from psycopg.rows import dict_row
        from psycopg_pool import ConnectionPool

        from langmem_ext import FoldPolicy, SummaryBuffer
        from langmem_ext.integrations.agents import MemoryMiddleware

        self.worker = worker
        self.emit = Emitter()
        kwargs = {"autocommit": True, "prepare_threshold": 0, "row_factory": dict_row}
        self.pool = ConnectionPool(dsn, min_size=1, max_size=pool + 2, kwargs=kwargs, open=True)
        self.saver = PostgresSaver(self.pool)  # type: ignore[arg-type]
        self.store = PostgresStore(self.pool)  # type: ignore[arg-type]
        store = self.store

        @tool
        def lookup(number: int) -> str:
            """Look an order up (writes a note to the store)."""
            store.put(("soak", str(thread_of(number))), str(number), {"number": number})
            return f"m{number}: order record found, status shipped, depot confirmed"

        self.summarizer = Summarizer(self.emit, delay)
        self.strategy = SummaryBuffer(
            budget,
            summarizer=self.summarizer,
            max_summary_tokens=budget // 5,
            policy=FoldPolicy(prefetch_tokens=budget * 3 // 4, fold_wait=fold_wait),
        )
        self.samples = threading.local()
        self._time_apply()
        self.model = SoakModel()
        self.agent: Any = create_agent(
            self.model,
            [lookup],
            middleware=[MemoryMiddleware(self.strategy)],
            checkpointer=self.saver,
            store=self.store,
        )

    def _time_apply(self) -> None:
        """Record each ``apply``: its seconds and the summarizer's time for its thread inside
        it (an inline fold, or the wait for a background one)."""
        inner = self.strategy.apply
        summarizer, samples = self.summarizer, self.samples

        def timed(messages: Sequence[BaseMessage], *args: Any, **kwargs: Any) -> Any:
            wall, started = time.time(), time.perf_counter()
            try:
                return inner(messages, *args, **kwargs)
            finally:
                end = time.perf_counter()
                newest = next(m for m in reversed(messages) if isinstance(m, HumanMessage))
                n = int(MARKER.match(_text(newest)).group(1))  # type: ignore[union-attr]
                spent = summarizer.overlap(thread_of(n), started, end)
                samples.rows.append((end - started, spent, wall, wall + end - started))

        self.strategy.apply = timed  # type: ignore[method-assign]

    def turn(self, thread: int, turn: int, retry: bool) -> None:
        config: dict[str, Any] = {"configurable": {"thread_id": f"t{thread}"}}
        self.samples.rows = []
        leaks = self.model.leaks
        started = time.perf_counter()
        try:
            done = "run"
            if retry:  # a turn a killed worker had: resume it, or find it finished
                done = self._recover(config, thread, turn)
            if done == "run":
                self.agent.invoke({"messages": [question(thread, turn)]}, config)
            error = None
        except Exception as exc:
            error, done = f"{type(exc).__name__}: {exc}"[:300], "error"
        self.emit(
            kind="turn",
            thread=thread,
            turn=turn,
            how=done,
            error=error,
            seconds=time.perf_counter() - started,
            applies=self.samples.rows,
            leaks=self.model.leaks - leaks,
        )

    def _recover(self, config: dict[str, Any], thread: int, turn: int) -> str:
        """A re-sent turn: ``"run"`` when its question never reached a checkpoint, else resumed
        from its checkpoint (``invoke(None)``: a step whose writes were saved but not yet
        checkpointed is applied and the run goes on; a finished run stays as it is)."""
        state = self.agent.get_state(config)
        ids = {m.id for m in state.values.get("messages", [])}
        if f"t{thread}-{turn}" not in ids:
            return "run"
        answered = f"t{thread}-{turn}-a3" in ids
        self.agent.invoke(None, config)
        ids = {m.id for m in self.agent.get_state(config).values.get("messages", [])}
        if f"t{thread}-{turn}-a3" not in ids:
            raise RuntimeError(f"turn t{thread}-{turn} still unanswered after the resume")
        return "found" if answered and not state.next else "resumed"

    def monitor(self, stop: threading.Event) -> None:
        while not stop.wait(1.0):
            self.emit(kind="rss", rss_mb=_rss_mb(), t=time.time())


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.soak_worker")
    parser.add_argument("--dsn", required=True)
    parser.add_argument("--worker", type=int, required=True)
    parser.add_argument("--pool", type=int, default=4)
    parser.add_argument("--delay", type=float, default=0.05)
    parser.add_argument("--budget", type=int, default=MAX_TOKENS)
    parser.add_argument("--fold-wait", type=float, default=None)
    args = parser.parse_args(argv)
    import faulthandler
    import signal

    faulthandler.register(signal.SIGUSR1)  # a stuck worker's threads, on demand
    worker = Worker(args.dsn, args.worker, args.pool, args.delay, args.budget, args.fold_wait)
    stop = threading.Event()
    threading.Thread(target=worker.monitor, args=(stop,), daemon=True).start()
    worker.emit(kind="ready", rss_mb=_rss_mb(), t=time.time())
    with ThreadPoolExecutor(args.pool) as pool:
        for line in sys.stdin:
            task = json.loads(line)
            if task.get("quit"):
                break
            pool.submit(worker.turn, task["thread"], task["turn"], bool(task.get("retry")))
    running = worker.strategy.flush(60.0)  # background folds finish (adopted by no one)
    stop.set()
    worker.emit(
        kind="bye",
        rss_mb=_rss_mb(),
        t=time.time(),
        running=running,
        summarizer_calls=worker.summarizer.calls,
        model_calls=worker.model.calls,
    )
    worker.pool.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
