"""Strategy: one sync and one async entry point around the same pure plan, and the fold machinery.

A strategy's plan is a generator (:mod:`langmem_ext.core.fold`): it yields a
:class:`~langmem_ext.core.fold_config.FoldRequest` when it needs the summarizer, receives one of
the closed set of outcomes (:class:`~langmem_ext.core.transitions.Folded`,
:class:`~langmem_ext.core.transitions.FoldFailed`,
:class:`~langmem_ext.core.transitions.FoldDeferred`) and returns the
:class:`~langmem_ext.core.result.MemoryResult`. A plan may also yield a
:class:`~langmem_ext.core.steps.Step` (``IoRequest``: Retrieval's store batches and retriever
calls). The drivers are those of :mod:`langmem_ext.core.steps` (``run`` / ``arun``); a fold is
one more step: the strategy turns each fold request into a :class:`Fold` step bound to its
fold machinery (:class:`Folding`: the summarizer, the fold settings, the background jobs), so
``apply`` folds with ``Summarizer.fold``, ``aapply`` with ``Summarizer.afold``, and ``view``
(read-only: no step that writes is performed) defers it and declines writes. A plan that needs
no summarizer (TokenBudget, SlidingWindow) simply never yields. A step's exception is thrown
into the plan; none of the package's plans catches one, so it reaches the caller.

Planning is CPU-only for every local counter, so ``aapply`` runs it inline; when the counter may
do network I/O (``is_blocking``, e.g. a chat model's provider-side token counting), ``aapply``
runs the plan's own work between its requests in a worker thread so the event loop never blocks.

The state passed in is never changed (it is frozen): a failed or cancelled call leaves the
caller's state exactly as it was.

The fold machinery (the summarizer's settings, background folds, one attempt per call) is in
:mod:`langmem_ext.strategies.folding`.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import math
import time
import warnings
from abc import ABC, abstractmethod
from collections import deque
from collections.abc import Callable, Generator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar, cast

from langchain_core.messages import BaseMessage

from langmem_ext.core.fold_config import FoldRequest
from langmem_ext.core.keys import MemoryKey
from langmem_ext.core.result import MemoryResult
from langmem_ext.core.signatures import bind, same_parameters
from langmem_ext.core.state import Health, MemoryState
from langmem_ext.core.steps import DECLINED, Flow, Raised, Step, arun, mapped, resume, run
from langmem_ext.core.tokens import TokenCounter
from langmem_ext.strategies.folding import Fold, Folding, _jobs_of, _watched, default_folding
from langmem_ext.summarize.summarizer import Summarizer

__all__ = [
    "DECLINED",
    "FOLD_RATE_WINDOW",
    "FoldRateWarning",
    "IoRequest",
    "Plan",
    "Request",
    "StateLike",
    "Strategy",
    "TurnCallback",
    "finished",
]

logger = logging.getLogger("langmem_ext")

_T = TypeVar("_T")

StateLike = MemoryState | dict[str, Any] | None
SummaryCallback = Callable[[Mapping[str, str], Mapping[str, str]], Any]
HealthCallback = Callable[[Health, Health], Any]
#: called with the messages a call saw for the first time (oldest first)
TurnCallback = Callable[[Sequence[BaseMessage]], Any]


#: a request for I/O besides the summarizer (store batches, retriever calls): a
#: :class:`~langmem_ext.core.steps.Step`, which carries its own sync and async fulfilment
IoRequest = Step

Request = FoldRequest | Step
#: a strategy's plan: it yields requests, receives their answers, returns the result
Plan = Generator[Request, Any, MemoryResult]


def finished(compute: Callable[..., MemoryResult], *args: Any) -> Plan:
    """A plan that needs no summarizer: ``compute(*args)``, run when the driver first steps the
    plan (so in the worker thread when counting blocks), returned without yielding."""
    return compute(*args)
    yield  # pragma: no cover - makes this function a generator


class Strategy(ABC):
    """Base of every strategy: ``apply`` / ``aapply`` / ``view`` / ``aview`` over one pure
    ``_plan``, run by the one sync and one async driver of :mod:`langmem_ext.core.steps`."""

    counter: TokenCounter
    summarizer: Summarizer | None = None
    on_summary_updated: SummaryCallback | None = None
    on_health_changed: HealthCallback | None = None
    on_turn_added: TurnCallback | None = None
    #: where ``now`` comes from (the plan reads no clock itself); replace it in tests
    clock: Callable[[], float] = staticmethod(time.time)
    #: the strategy keeps memory outside its state: its ``_plan`` takes ``key=`` (``Retrieval``)
    uses_key: bool = False

    @abstractmethod
    def _plan(
        self, messages: Sequence[BaseMessage], state: MemoryState, now: float, extra: int
    ) -> Plan:
        """Pure: the view, next state and report, yielding fold (and I/O) requests. Never
        mutates. ``extra`` tokens of the request travel outside the messages (tool schemas). A
        strategy with ``uses_key = True`` also takes ``key: MemoryKey | None`` by keyword."""

    # -- what a strategy wrapping this one uses ---------------------------------------------------

    def plan(
        self,
        messages: Sequence[BaseMessage],
        state: MemoryState,
        now: float,
        extra: int = 0,
        *,
        key: MemoryKey | None = None,
    ) -> Plan:
        """This strategy's plan for one call, not started: pure, it yields a
        :class:`~langmem_ext.core.fold_config.FoldRequest` for each fold and a
        :class:`~langmem_ext.core.steps.Step` for other I/O, and returns the
        :class:`~langmem_ext.core.result.MemoryResult`. ``key`` reaches only a strategy that
        ``uses_key``. A strategy that wraps this one runs it with ``yield from``; its driver
        answers the fold requests."""
        if self.uses_key:
            return self._plan(messages, state, now, extra, key=key)  # type: ignore[call-arg]
        return self._plan(messages, state, now, extra)

    def notify(
        self, before: MemoryState, result: MemoryResult, messages: Sequence[BaseMessage]
    ) -> None:
        """Tell the callbacks what changed from ``before`` to ``result`` (``apply`` / ``aapply``
        do, after the plan has finished); an exception in a callback never breaks the turn.
        The messages added are those after the ones ``before`` saw (all of them when the
        history was rewritten underneath)."""
        after = result.state
        calls: list[tuple[Callable[..., Any], tuple[Any, ...]]] = []
        if self.on_turn_added is not None:
            seen = 0 if result.report.history_rewritten else min(before.seen, len(messages))
            if len(messages) > seen:
                calls.append((self.on_turn_added, (tuple(messages[seen:]),)))
        if self.on_summary_updated is not None and before.summary != after.summary:
            calls.append((self.on_summary_updated, (before.sections, after.sections)))
        if self.on_health_changed is not None and before.health != after.health:
            calls.append((self.on_health_changed, (before.health, after.health)))
        for callback, args in calls:
            try:
                callback(*args)
            except Exception:
                logger.exception("langmem_ext: a %s callback raised; ignored", type(self).__name__)

    # -- the entry points: each one line over a driver ---------------------------------------------

    def apply(
        self,
        messages: Sequence[BaseMessage],
        state: StateLike = None,
        *,
        extra_tokens: int = 0,
        key: MemoryKey | None = None,
    ) -> MemoryResult:
        """The view the model should see for ``messages``, the state for the next call, a report.

        ``state`` is the ``result.state`` of the previous call (or its ``to_dict()``, as stored in
        a checkpoint), or ``None`` on the first call. Passing it back is what makes a turn cost
        O(new messages), keeps a hysteresis cut in place and carries the running summary.
        ``extra_tokens`` is what this request carries besides the messages (tool schemas, as
        the agents middleware counts them): it is held back like ``reserve_tokens``. ``key`` says
        whose memory this is (strategies with memory outside the state, like ``Retrieval``, use
        it; the others ignore it). The surfaces pass it from their config.
        """
        before, flow = self._begin(messages, state, extra_tokens, key)
        return self._notified(before, run(flow), messages)

    @same_parameters(apply)
    async def aapply(self, *args: Any, **kwargs: Any) -> MemoryResult:
        """Async :meth:`apply`: the same plan; the summarizer and I/O are awaited, and counting
        runs off the event loop when the counter does I/O. Cancelling it leaves ``state``
        untouched."""
        messages, *call = self._bound("aapply", args, kwargs)
        before, flow = self._begin(messages, *call, awaited=True)
        return self._notified(before, await arun(flow), messages)

    @same_parameters(apply)
    def view(self, *args: Any, **kwargs: Any) -> MemoryResult:
        """Read-only :meth:`apply`: the view for ``messages`` under ``state`` without ever
        calling the summarizer, writing anything or notifying callbacks. A fold the plan would
        ask for is deferred (not counted as a failure): the view then shows the summary so far,
        the newest messages that fit and a note with the number of messages not shown. The
        returned ``state`` is informational; readers should not store it."""
        return run(self._begin(*self._bound("view", args, kwargs))[1], read_only=True)

    @same_parameters(apply)
    async def aview(self, *args: Any, **kwargs: Any) -> MemoryResult:
        """Async :meth:`view`; counting runs off the event loop when the counter does I/O."""
        _, flow = self._begin(*self._bound("aview", args, kwargs), awaited=True)
        return await arun(flow, read_only=True)

    # -- the drivers ------------------------------------------------------------------------------

    def _bound(self, name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[Any, ...]:
        """A twin's arguments as :meth:`apply` takes them: messages, state, extra_tokens, key."""
        return bind(Strategy.apply, (self, *args), kwargs, name)[1:]

    def _begin(
        self,
        messages: Sequence[BaseMessage],
        state: StateLike,
        extra_tokens: int,
        key: MemoryKey | None,
        *,
        awaited: bool = False,
    ) -> tuple[MemoryState, Flow[MemoryResult]]:
        """The caller's state, read, and this turn's plan as a flow of steps for the drivers of
        :mod:`langmem_ext.core.steps` (not started yet): each fold request becomes a
        :class:`~langmem_ext.strategies.folding.Fold` step of this strategy's fold machinery. A
        read-only driver performs no step that writes (a fold is deferred, a write declined).
        ``awaited`` (``arun``) with a counter that does I/O: the plan's own work between its
        requests runs in a worker thread, so the event loop never blocks."""
        before = MemoryState.coerce(state)
        args = (_as_sequence(messages), before, self._now(), _extra(extra_tokens))
        flow = mapped(self.plan(*args, key=key), self._step)
        if awaited and getattr(self.counter, "is_blocking", False):
            flow = _off_the_loop(flow)
        return before, flow

    def _step(self, request: Request) -> Step:
        """The step that answers one request of the plan: a fold request is folded by this
        strategy's fold machinery; any other request is a step already."""
        return Fold(self._folding(), request) if isinstance(request, FoldRequest) else request

    def _notified(
        self, before: MemoryState, result: MemoryResult, messages: Sequence[BaseMessage]
    ) -> MemoryResult:
        """``result``, once the callbacks were told (``apply`` / ``aapply``; a view never)."""
        self.notify(before, result, messages)
        rate = self.__dict__.get("_fold_rate")
        if rate is None:
            rate = self.__dict__["_fold_rate"] = _FoldRate()
        rate.add(self, result.report.folded > 0)
        return result

    # -- background folds -------------------------------------------------------------------------

    def _now(self) -> float:
        """The strategy's clock, read once and checked: a clock that answers something other
        than a finite number of seconds is an error naming it, not a failure deep in a plan."""
        return _checked_now(self.clock)

    def _folding(self) -> Folding:
        """What answers this strategy's fold requests: the strategy itself when it is
        :class:`Folding` (the summarizing strategies, ``Retrieval``); for any other strategy
        whose plan asks for folds (a wrapper of your own), the default fold machinery kept with
        it (its summarizer, the default settings)."""
        return self if isinstance(self, Folding) else default_folding(self)

    def flush(self, timeout: float | None = None) -> int:
        """Wait until every background fold of this strategy has finished (at most ``timeout``
        seconds); their results are adopted by the next call of their conversation. Returns how
        many are still running (0 when all finished).

        The default ``timeout=None`` waits until each job has finished or met its deadline
        (:func:`~langmem_ext.strategies.folding.job_deadline`), whatever its model does; only a
        summarizer built with ``timeout=None`` has no deadline. A hung model never makes this
        wait past ``timeout``."""
        _, pending = concurrent.futures.wait(self._background_work(), timeout=timeout)
        return len(pending)

    async def aflush(self, timeout: float | None = None) -> int:
        """Async :meth:`flush`: awaits the background folds without blocking the event loop
        (bounded the same way)."""
        running = [_watched(future) for future in self._background_work()]
        if not running:
            return 0
        _, pending = await asyncio.wait(running, timeout=timeout)
        return len(pending)

    def background_running(self) -> int:
        """How many background fold threads of this strategy are alive (a job abandoned at its
        deadline counts until its model returns); at most ``background_limit``."""
        return _jobs_of(self._folding()).live

    def _background_work(self) -> list[concurrent.futures.Future[Any]]:
        """What ``flush`` waits for: the running background folds (a strategy that starts other
        work of its own adds it)."""
        return [job.future for job in _jobs_of(self._folding()).all()]


@dataclass(frozen=True, slots=True)
class _Advance(Step):
    """A step: ``flow`` resumed with ``reply`` (the plan's own work up to its next request),
    in a worker thread under ``arun``: counting with a counter that does I/O never blocks the
    event loop."""

    flow: Flow[Any]
    reply: Any

    def run(self) -> tuple[Step | None, Any]:
        return resume(self.flow, self.reply)

    async def arun(self) -> tuple[Step | None, Any]:
        return await asyncio.to_thread(resume, self.flow, self.reply)


def _off_the_loop(flow: Flow[_T]) -> Flow[_T]:
    """``flow`` with its own work between steps made as :class:`_Advance` steps (so in a
    worker thread under ``arun``); its steps and their replies pass through unchanged."""
    step, result = yield _Advance(flow, None)
    while step is not None:
        reply: Any
        try:
            reply = yield step
        except Exception as error:
            reply = Raised(error)
        step, result = yield _Advance(flow, reply)
    return cast(_T, result)


def _checked_now(clock: Callable[[], float]) -> float:
    """``clock()``, which must be a finite number of seconds (a bool is not a number here)."""
    now = clock()
    if isinstance(now, bool) or not isinstance(now, (int, float)):
        raise TypeError(
            f"clock must return the current time as a number of seconds (like time.time), "
            f"got {now!r} ({type(now).__name__}) from {clock!r}"
        )
    if not math.isfinite(now):
        raise ValueError(
            f"clock must return a finite number of seconds (like time.time), got {now!r} "
            f"from {clock!r}"
        )
    return float(now)


def _extra(tokens: int) -> int:
    if not isinstance(tokens, int) or isinstance(tokens, bool) or tokens < 0:
        raise ValueError(f"extra_tokens must be an integer >= 0, got {tokens!r}")
    return tokens


def _as_sequence(messages: Sequence[BaseMessage]) -> Sequence[BaseMessage]:
    if isinstance(messages, (list, tuple)):
        return messages
    if isinstance(messages, (str, bytes, BaseMessage)) or not hasattr(messages, "__iter__"):
        raise TypeError(
            f"messages must be a sequence of BaseMessage, got {type(messages).__name__}"
        )
    return list(messages)


class FoldRateWarning(UserWarning):
    """A strategy folded (called its summarizer) on more than one call in three of its last
    :data:`FOLD_RATE_WINDOW`: its budget leaves too little room between folds, so nearly every
    turn pays a summarizer call. Shown once per strategy object."""


#: calls the fold-rate check looks back over (it speaks only once this many calls were made)
FOLD_RATE_WINDOW = 30


class _FoldRate:
    """Which of a strategy's recent calls folded; warns once when more than a third did."""

    __slots__ = ("folds", "recent", "warned")

    def __init__(self) -> None:
        self.recent: deque[bool] = deque(maxlen=FOLD_RATE_WINDOW)
        self.folds = 0  # how many of ``recent`` folded
        self.warned = False

    def add(self, strategy: Strategy, folded: bool) -> None:
        if len(self.recent) == FOLD_RATE_WINDOW:
            self.folds -= self.recent[0]  # the call that leaves the window
        self.recent.append(folded)
        self.folds += folded
        if self.warned or len(self.recent) < FOLD_RATE_WINDOW or self.folds * 3 <= FOLD_RATE_WINDOW:
            return
        self.warned = True
        message = (
            f"{type(strategy).__name__} folded on {self.folds} of its last {FOLD_RATE_WINDOW} "
            "calls, a summarizer call each: each fold frees too little of the budget. Raise "
            "max_tokens, or fold deeper (a lower target_tokens / target_ratio, a smaller summary "
            "share), or use a trimming strategy. Shown once per strategy."
        )
        warnings.warn(message, FoldRateWarning, stacklevel=4)
