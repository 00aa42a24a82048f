"""Helpers shared by the worker scripts of the chat-history surface, the legacy class and the
graph (``history_worker.py``, ``compat_worker.py``, ``graph_worker.py``) and the tests that import
them.

Importable both under pytest and when a worker runs as a script (its folder is then the first
entry of ``sys.path``).
"""

from __future__ import annotations

import asyncio
import os
import re
import time
from collections.abc import Iterable, Sequence
from typing import Any

from langchain_core.chat_history import BaseChatMessageHistory
from langchain_core.messages import BaseMessage
from langgraph.store.base import GetOp, Op, PutOp, Result
from langgraph.store.memory import InMemoryStore

#: what the workers' questions and summaries carry: ``question 3:``, ``q3`` (a question a summary
#: covers), ``marker=alpha`` (the thread's marker)
QUESTION = re.compile(r"question (\d+):")
COVERED = re.compile(r"\bq(\d+)\b")
MARKER = re.compile(r"marker=(\w+)")

#: how often a worker process looks for the start barrier (a file), in seconds
BARRIER_POLL = 0.01


def summarizer(prompt: list[BaseMessage]) -> str:
    """Deterministic and content-dependent: the summary lists every question number and marker
    it has read (in the transcript or the previous summary), so a summary that missed, repeated
    or mixed up messages is visible."""
    text = "\n".join(str(m.content) for m in prompt)
    numbers = {int(n) for n in QUESTION.findall(text)} | {int(n) for n in COVERED.findall(text)}
    found = sorted(set(MARKER.findall(text)))
    return f"covers {' '.join(f'q{n}' for n in sorted(numbers))}; " + " ".join(
        f"marker={m}" for m in found
    )


def covered(summary_text: str) -> set[int]:
    """The question numbers a summary written by :func:`summarizer` covers."""
    return {int(n) for n in COVERED.findall(summary_text)}


def markers(text: str) -> set[str]:
    return set(MARKER.findall(text))


def wait_for_barrier(path: str) -> None:
    """Block until the file ``path`` exists: the processes of a race start together."""
    while not os.path.exists(path):
        time.sleep(BARRIER_POLL)


async def await_barrier(path: str) -> None:
    """Async :func:`wait_for_barrier`."""
    while not os.path.exists(path):
        await asyncio.sleep(BARRIER_POLL)


class RecordingStore(InMemoryStore):
    """An ``InMemoryStore`` that records every operation it is asked to run, sync or async:
    ``ops`` as (``"sync"``/``"async"``, op type name), ``calls`` as (op type name, namespace,
    key, index) for the gets and puts (the same for both modes, so two runs compare)."""

    def __init__(self) -> None:
        super().__init__()
        self.ops: list[tuple[str, str]] = []
        self.calls: list[tuple[str, tuple[str, ...], str, Any]] = []

    def _record(self, mode: str, ops: Iterable[Op]) -> list[Op]:
        ops = list(ops)
        for op in ops:
            self.ops.append((mode, type(op).__name__))
            if isinstance(op, (GetOp, PutOp)):
                index = op.index if isinstance(op, PutOp) else None
                self.calls.append((type(op).__name__, op.namespace, op.key, index))
        return ops

    def batch(self, ops: Iterable[Op]) -> list[Result]:
        return super().batch(self._record("sync", ops))

    async def abatch(self, ops: Iterable[Op]) -> list[Result]:
        return await super().abatch(self._record("async", ops))

    @property
    def writes(self) -> int:
        return sum(1 for _, name in self.ops if name == PutOp.__name__)


class AsyncOnlyHistory(BaseChatMessageHistory):
    """A history that only works through its async methods (an async database driver): any
    sync call fails, which proves an async path never does sync I/O on it. Each async call
    takes a loop step, like a real driver."""

    def __init__(self) -> None:
        self.stored: list[BaseMessage] = []

    @property
    def messages(self) -> list[BaseMessage]:  # type: ignore[override]
        raise AssertionError("sync read of the history from the async path")

    def add_messages(self, messages: Sequence[BaseMessage]) -> None:
        raise AssertionError("sync write to the history from the async path")

    def clear(self) -> None:
        raise AssertionError("sync clear of the history from the async path")

    async def aget_messages(self) -> list[BaseMessage]:
        await asyncio.sleep(0)
        return list(self.stored)

    async def aadd_messages(self, messages: Sequence[BaseMessage]) -> None:
        await asyncio.sleep(0)
        self.stored.extend(messages)

    async def aclear(self) -> None:
        self.stored = []
