"""The call flow's steps: the only code that performs a model call or a sleep.

A flow is a generator (like httpx's ``auth_flow``) that yields :class:`Invoke` / :class:`Sleep`
steps and receives each step's outcome (a failed call has its exception thrown in). Each step
carries its own blocking and awaited fulfilment, and the package's one pair of drivers
(:func:`langmem_ext.core.steps.run` / :func:`~langmem_ext.core.steps.arun`) performs them, so the
retries, the backoff and the fallback of :class:`~langmem_ext.summarize.summarizer.Summarizer`
are written once for both APIs.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Generator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

from langchain_core.messages import BaseMessage
from langchain_core.runnables import Runnable

from langmem_ext.core.steps import Step
from langmem_ext.summarize.calls import acall_on_model, await_with_timeout, call_on_model

if TYPE_CHECKING:
    from langmem_ext.summarize.summarizer import Summarizer

__all__ = [
    "Flow",
    "Invoke",
    "Sleep",
]

_T = TypeVar("_T")


@dataclass(frozen=True, slots=True)
class Invoke(Step):
    """A step of the call flow: invoke ``runnable`` on ``prompt`` within ``timeout`` seconds;
    the flow receives the raw output, or has the call's exception thrown into it."""

    runnable: Runnable[Any, Any]
    prompt: list[BaseMessage]
    timeout: float | None
    #: held for the whole call, even once abandoned, when the model must run one call at a
    #: time (see ``Summarizer(exclusive=)``)
    lock: threading.Lock | None = None

    def run(self) -> Any:
        """The model's raw output, blocking (a call with a timeout runs in a worker thread)."""
        invoke = functools.partial(self.runnable.invoke, self.prompt)
        return call_on_model(invoke, self.timeout, self.lock)

    async def arun(self) -> Any:
        """The model's raw output with ``ainvoke``."""
        if self.lock is not None:  # a sync-only model: in a thread of ours, one call at a time
            invoke = functools.partial(self.runnable.invoke, self.prompt)
            return await acall_on_model(invoke, self.timeout, self.lock)
        return await await_with_timeout(self.runnable.ainvoke(self.prompt), self.timeout)


@dataclass(frozen=True, slots=True)
class Sleep(Step):
    """A step of the call flow: wait ``seconds`` with ``owner``'s ``sleep`` / ``asleep`` (the
    summarizer whose attempt failed: a fallback keeps its own); the flow receives None."""

    seconds: float
    owner: Summarizer

    def run(self) -> None:
        self.owner.sleep(self.seconds)

    async def arun(self) -> None:
        await self.owner.asleep(self.seconds)


#: a call flow: yields its I/O steps, receives the raw output of an Invoke (None after a
#: Sleep), returns its result
Flow = Generator[Invoke | Sleep, Any, _T]
