"""The step protocol: flows that yield I/O steps, and the one sync and one async driver.

A *flow* is a generator (like httpx's ``auth_flow``) that yields :class:`Step` objects and
receives each step's result; its return value is the flow's result. A step carries its own I/O
in both colours, :meth:`Step.run` (blocking) and :meth:`Step.arun` (awaited), so the drivers
know nothing of models, stores or locks: :func:`run` performs every step with ``run()``,
:func:`arun` with ``await arun()``. Every flow of the package is driven by these two: a
strategy's plan (``langmem_ext.strategies.engine``), the summarizer's call flow
(``langmem_ext.summarize.flow``), the surfaces' store flows (``langmem_ext.integrations._store``)
and Retrieval's index flows (``langmem_ext.retrieval.flows``).

Errors. A step that raises an ``Exception`` has it thrown into the flow at its ``yield``, so a
flow handles a failure with a plain ``try`` (the store flows rely on it: a failed batch makes
them scan otherwise, a failed write is reported). A flow that does not catch it ends with it,
and the driver raises it to its caller unchanged: a plan that never catches behaves as if the
step had raised in the caller. Anything else (``BaseException``: a cancellation, an interrupt)
is never thrown in: it propagates from the driver at once.

Read-only calls. A step that changes something outside the call says so (``writes``); a
driver asked to be ``read_only`` performs none of them and sends back the step's
:meth:`~Step.declined` answer instead (:data:`DECLINED` unless the step says otherwise: a fold
is deferred).

Pure: no threads, no event loop, no I/O here; the steps that do them live with their package.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Generator
from dataclasses import dataclass
from typing import Any, TypeVar, cast

__all__ = [
    "DECLINED",
    "Flow",
    "Raised",
    "Step",
    "arun",
    "mapped",
    "resume",
    "run",
]

_T = TypeVar("_T")
_Y = TypeVar("_Y")


class _Declined:
    def __repr__(self) -> str:
        return "DECLINED"


#: what a read-only driver sends back for a step that ``writes`` (unless the step says otherwise)
DECLINED = _Declined()


class Step(ABC):
    """One piece of I/O a flow asks for, with its own blocking and awaited fulfilment."""

    __slots__ = ()

    #: performing it changes something outside the call: a read-only driver declines it
    writes: bool = False

    @abstractmethod
    def run(self) -> Any:
        """Perform the step, blocking; its result is sent back into the flow."""

    @abstractmethod
    async def arun(self) -> Any:
        """Perform the step on the event loop."""

    def declined(self) -> Any:
        """What a read-only driver sends back instead of performing a step that ``writes``."""
        return DECLINED


#: a flow: yields steps, receives each one's result (or has its exception thrown in), returns T
Flow = Generator[Step, Any, _T]


@dataclass(frozen=True, slots=True)
class Raised:
    """A reply that is thrown into the flow instead of sent: what a step ended with when it
    raised."""

    error: Exception


def resume(flow: Generator[_Y, Any, _T], reply: Any) -> tuple[_Y | None, _T | None]:
    """Hand ``reply`` to ``flow`` (thrown when it is a :class:`Raised`, sent otherwise; ``None``
    starts a fresh flow): its next step and None, or None and its result once it returns. An
    exception the flow does not handle propagates."""
    try:
        if isinstance(reply, Raised):
            return flow.throw(reply.error), None
        return flow.send(reply), None
    except StopIteration as done:
        return None, done.value


def run(flow: Generator[Step, Any, _T], *, read_only: bool = False) -> _T:
    """Drive ``flow`` to its result, performing each step with ``step.run()``; a step's
    ``Exception`` is thrown into the flow. ``read_only``: steps that write are declined."""
    step, result = resume(flow, None)
    while step is not None:
        step, result = resume(flow, _performed(step, read_only))
    return cast(_T, result)


async def arun(flow: Generator[Step, Any, _T], *, read_only: bool = False) -> _T:
    """Async :func:`run`: each step is performed with ``await step.arun()``. A cancellation is
    not a step's failure: it propagates at once."""
    step, result = resume(flow, None)
    while step is not None:
        step, result = resume(flow, await _aperformed(step, read_only))
    return cast(_T, result)


def _performed(step: Step, read_only: bool) -> Any:
    """``step.run()``, its error as :class:`Raised`, or its declined answer."""
    if read_only and step.writes:
        return step.declined()
    try:
        return step.run()
    except Exception as error:
        return Raised(error)


async def _aperformed(step: Step, read_only: bool) -> Any:
    """Async :func:`_performed`: ``await step.arun()``."""
    if read_only and step.writes:
        return step.declined()
    try:
        return await step.arun()
    except Exception as error:
        return Raised(error)


def mapped(flow: Generator[_Y, Any, _T], to_step: Callable[[_Y], Step]) -> Flow[_T]:
    """``flow``, whose requests are not steps themselves (a plan's ``FoldRequest``), as a flow
    of steps: each request it yields is yielded as ``to_step(request)``; the reply is sent back
    and an error thrown in goes on into ``flow``."""
    request, result = resume(flow, None)
    while request is not None:
        reply: Any
        try:
            reply = yield to_step(request)
        except Exception as error:
            reply = Raised(error)
        request, result = resume(flow, reply)
    return cast(_T, result)
