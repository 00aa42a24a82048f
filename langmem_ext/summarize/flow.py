"""The call flow's steps and its two drivers: the only code that performs a call or a sleep.

A flow is a generator (like httpx's ``auth_flow``) that yields :class:`Invoke` / :class:`Sleep`
steps and receives each step's outcome; :func:`run_sync` performs the steps blocking and
:func:`run_async` by awaiting, so the retries, the backoff and the fallback of
:class:`~langmem_ext.summarize.summarizer.Summarizer` are written once for both APIs.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Generator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar, cast

from langchain_core.messages import BaseMessage
from langchain_core.runnables import Runnable

from langmem_ext.summarize.calls import acall_on_model, await_with_timeout, call_on_model

if TYPE_CHECKING:
    from langmem_ext.summarize.summarizer import Summarizer

__all__ = [
    "Flow",
    "Invoke",
    "Raised",
    "Sleep",
    "aperform",
    "perform",
    "resume",
    "run_async",
    "run_sync",
]

_T = TypeVar("_T")


@dataclass(frozen=True, slots=True)
class Invoke:
    """A step of the call flow: invoke ``runnable`` on ``prompt`` within ``timeout`` seconds;
    the flow receives the raw output, or has the call's exception thrown into it."""

    runnable: Runnable[Any, Any]
    prompt: list[BaseMessage]
    timeout: float | None
    #: held for the whole call, even once abandoned, when the model must run one call at a
    #: time (see ``Summarizer(exclusive=)``)
    lock: threading.Lock | None = None


@dataclass(frozen=True, slots=True)
class Sleep:
    """A step of the call flow: wait ``seconds`` with ``owner``'s ``sleep`` / ``asleep`` (the
    summarizer whose attempt failed: a fallback keeps its own)."""

    seconds: float
    owner: Summarizer


#: a call flow: yields its I/O steps, receives the raw output of an Invoke (None after a
#: Sleep), returns its result
Flow = Generator[Invoke | Sleep, Any, _T]


@dataclass(frozen=True, slots=True)
class Raised:
    """What a step ended with when it raised: thrown into the flow instead of sent."""

    error: Exception


_Y = TypeVar("_Y")


def resume(flow: Generator[_Y, Any, _T], reply: Any) -> tuple[_Y | None, _T | None]:
    """Hand ``reply`` to ``flow`` (thrown when it is a :class:`Raised`, sent otherwise): its
    next step and None, or None and its result once it is done."""
    try:
        if isinstance(reply, Raised):
            return flow.throw(reply.error), None
        return flow.send(reply), None
    except StopIteration as done:
        return None, done.value


def perform(step: Invoke | Sleep) -> Any:
    """One step, blocking: the model's raw output (a call with a timeout runs in a worker
    thread), None after a sleep, or the call's exception as a :class:`Raised`."""
    if isinstance(step, Sleep):
        step.owner.sleep(step.seconds)
        return None
    try:
        invoke = functools.partial(step.runnable.invoke, step.prompt)
        return call_on_model(invoke, step.timeout, step.lock)
    except Exception as error:
        return Raised(error)


async def aperform(step: Invoke | Sleep) -> Any:
    """Async :func:`perform`: ``ainvoke`` and ``asleep``."""
    if isinstance(step, Sleep):
        await step.owner.asleep(step.seconds)
        return None
    try:
        if step.lock is not None:  # a sync-only model: in a thread of ours, one call at a time
            invoke = functools.partial(step.runnable.invoke, step.prompt)
            return await acall_on_model(invoke, step.timeout, step.lock)
        return await await_with_timeout(step.runnable.ainvoke(step.prompt), step.timeout)
    except Exception as error:
        return Raised(error)


def run_sync(flow: Flow[_T]) -> _T:
    """Drive ``flow`` to its result, performing each step with :func:`perform`."""
    step, result = resume(flow, None)
    while step is not None:
        step, result = resume(flow, perform(step))
    return cast(_T, result)


async def run_async(flow: Flow[_T]) -> _T:
    """Drive ``flow`` to its result, performing each step with :func:`aperform`."""
    step, result = resume(flow, None)
    while step is not None:
        step, result = resume(flow, await aperform(step))
    return cast(_T, result)
