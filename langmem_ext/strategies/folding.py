"""The fold machinery: how a strategy answers its plan's fold requests, inline or in the background.

A strategy's plan yields a :class:`~langmem_ext.core.fold_config.FoldRequest`; the strategy turns
it into a :class:`Fold` step bound to its :class:`Folding` (the summarizer, the fold settings
``folds_in_background`` / ``retry_in_call`` / ``fold_wait`` / ``background_limit``, and the
background jobs), which the drivers of :mod:`langmem_ext.core.steps` perform like any other step:
``run`` folds with ``Summarizer.fold``, ``arun`` with ``Summarizer.afold``, a read-only call
defers it. The summarizing strategies and ``Retrieval`` are :class:`Folding`; any other strategy
whose plan asks for folds is answered by a default one kept with it.

Background compaction. A plan whose view passed ``prefetch_tokens`` (below the fold trigger)
asks for its fold as a *background* request. The driver owns the work, the plan stays pure: it
starts the fold in a worker thread (``Summarizer.fold``, off the critical path) and answers
``FoldDeferred`` at once; a later call whose fold request begins with the same messages under
the same summary adopts the finished fold (``Folded(covers=...)``: exactly those messages are
marked folded, once), or, when it must fold now (the trigger is crossed), waits for the running
one, at most ``fold_wait`` seconds, and otherwise shows the degraded view with its note (nothing
lost; the fold is adopted on a later call). Jobs live in the strategy object (its
:class:`Folding`), so a fold finished after a checkpoint is adopted by the next turn of the same
thread in this process. Another process adopts it too when the surface shares folds through a
store (:mod:`langmem_ext.strategies.shared_folds`: a lease while the fold runs, its result
published when it ends; a worker that finds the lease held answers like a local running job);
without one, another process simply folds again. ``flush()`` / ``aflush()`` wait for the
running jobs.

A job never waits on its model. Each job runs in a daemon thread of its own (an ``aapply`` job
on an event loop of its own in that thread, whose executor threads are daemons too), and its
future is settled by the summarizer's result, or by its deadline (:func:`job_deadline`: the
summarizer's timeout times the calls the fold may make), whichever comes first: a timed-out job
is a failed fold (``FoldFailed`` with a ``TimeoutError``), adopted like any failure (nothing
folded, nothing lost; health moves to retrying / degraded). The job's loop is never shut down
the blocking way (``asyncio.run`` waits for cancelled tasks and for its executor, which a hung
sync-only chat model or a coroutine ignoring cancellation never lets end): leftover tasks get
:data:`_GRACE` seconds after a cancel, then are abandoned with the loop. Nothing is shared
between strategies: a strategy runs at most ``background_limit`` jobs at once (threads still
alive, abandoned ones included), so one hung model can only hold its own strategy's slots.

One attempt per call. Every fold, in the background or inline, makes ONE summarizer attempt (of
the model, then of its fallback): a failing provider costs a call at most one attempt, and later
attempts follow the strategy's backoff (``retry_initial`` ...) on later calls. Only an inline
fold of a strategy built with ``retry_in_call=True`` runs the Summarizer's retries in the call.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextvars
import copy
import functools
import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, ParamSpec, TypeVar

from langchain_core.messages import BaseMessage

from langmem_ext.core.fold_config import FoldRequest
from langmem_ext.core.steps import Step
from langmem_ext.core.transcript import render_transcript
from langmem_ext.core.transitions import FoldDeferred, Folded, FoldFailed, FoldOutcome
from langmem_ext.strategies.shared_folds import Adopt, Claim, Held, SharedFolds, Take, shared_folds
from langmem_ext.summarize.summarizer import Summarizer

if TYPE_CHECKING:
    from langmem_ext.strategies.engine import Strategy

__all__ = ["Fold", "Folding", "default_folding", "job_deadline"]

logger = logging.getLogger("langmem_ext")

_T = TypeVar("_T")
_P = ParamSpec("_P")


class Folding:
    """The fold machinery of a strategy: it answers the plan's fold requests (a :class:`Fold`
    step runs :meth:`_fold`, awaits :meth:`_afold`) with the strategy's summarizer, and holds
    the fold settings and the background jobs. Mixed into the summarizing strategies (after
    ``Strategy``: ``class _Summarizing(Strategy, Folding)``, settings from their ``FoldPolicy``)
    and into ``Retrieval`` (its inner strategy's settings, :meth:`_fold_like`)."""

    summarizer: Summarizer | None
    #: background compaction is on (``prefetch_tokens``)
    folds_in_background: bool = False
    #: an inline fold runs the Summarizer's retries inside the call (``retry_in_call=True``);
    #: otherwise (the default, and always in background mode) every fold makes one attempt
    retry_in_call: bool = False
    #: how long a call that must fold waits for a running background fold (None: until done,
    #: which is at most the job's deadline, :func:`job_deadline`)
    fold_wait: float | None = None
    #: background folds this strategy runs at once (threads still alive, one abandoned at its
    #: deadline included). A background fold asked for beyond it is not started: the request is
    #: deferred (the view shows the note, nothing is lost) and asked again by a later call; a
    #: fold due now is then made inside the call. The bound is per strategy, so a hung model
    #: never holds another strategy's folds.
    background_limit: int = 4

    if TYPE_CHECKING:

        def _now(self) -> float: ...

    def _fold_like(self, other: Strategy) -> None:
        """Fold as ``other`` does: its summarizer and fold settings (its defaults when it has
        none). ``Retrieval`` runs its inner strategy's folds this way, with jobs of its own."""
        self.summarizer = other.summarizer
        settings = other._folding()
        self.folds_in_background = settings.folds_in_background
        self.fold_wait = settings.fold_wait
        self.retry_in_call = settings.retry_in_call

    def _summarizer(self) -> Summarizer:
        if self.summarizer is None:  # pragma: no cover - a plan only asks when it has one
            raise RuntimeError(f"{type(self).__name__} asked to fold without a summarizer")
        return self.summarizer

    def _inline_summarizer(self) -> Summarizer:
        """The summarizer of a fold: it makes one attempt (a call that waits for a fold, inline
        or running in the background, waits for one attempt at most; later attempts follow the
        strategy's backoff, on later calls), unless inline folds were asked to retry in the
        call (``retry_in_call=True``, which construction refuses in background mode)."""
        summarizer = self._summarizer()
        return summarizer if self.retry_in_call else _one_attempt(summarizer)

    def _background(self, request: FoldRequest, asynchronous: bool = False) -> FoldOutcome | _Job:
        """A background request's answer (start the fold, or adopt it once finished), or, for
        a fold due now, the running job to wait for. ``asynchronous``: ``afold`` on an event
        loop of the job's own (``aapply``), else ``fold``. At ``background_limit`` running jobs
        none is started (deferred: a later call asks again)."""
        jobs = _jobs_of(self)
        job = jobs.find(request)
        if request.background:
            if job is None:
                summarizer = self._inline_summarizer()
                jobs.start(summarizer, request, asynchronous, self.background_limit)
                return FoldDeferred()
            return jobs.take(job) if job.future.done() else FoldDeferred()
        assert job is not None
        return job

    def _shared(self, request: FoldRequest) -> SharedFolds | None:
        """Where this call shares its background folds with other workers (see
        :mod:`~langmem_ext.strategies.shared_folds`): only a strategy that folds in the
        background has folds to share (an inline fold ends within its turn), and a fold this
        process already runs is answered by its local job."""
        if not self.folds_in_background or _jobs_of(self).find(request) is not None:
            return None
        return shared_folds()

    def _lease(self, request: FoldRequest) -> float:
        """Seconds a shared fold's lease lasts: the job's deadline (a fold with none gets
        :data:`_LEASE_CAP`), plus slack for publishing; past it another worker takes over."""
        deadline = job_deadline(self._inline_summarizer(), request.previous, request.messages)
        return (_LEASE_CAP if deadline is None else deadline) + _DEADLINE_SLACK

    def _claimed(
        self, request: FoldRequest, claim: Claim, shared: SharedFolds, asynchronous: bool
    ) -> FoldOutcome | None:
        """The answer of the other workers to ``request`` (None: fold as without sharing).
        A fold running elsewhere is answered like a local running job; a lease taken here
        starts the job, which publishes its outcome when it ends."""
        logger.debug("langmem_ext: shared fold claim %s: %s", shared, type(claim).__name__)
        if isinstance(claim, Adopt):
            return claim.outcome
        if isinstance(claim, Held):
            return FoldDeferred()
        if isinstance(claim, Take):
            publish = functools.partial(shared.publish, claim)
            summarizer = self._inline_summarizer()
            jobs = _jobs_of(self)
            if (
                jobs.start(summarizer, request, asynchronous, self.background_limit, publish)
                is None
            ):
                shared.publish(claim, FoldDeferred())  # not started: the lease is released
            return FoldDeferred()
        return None

    def _fold_shared(self, request: FoldRequest, shared: SharedFolds) -> FoldOutcome | None:
        lease = self._lease(request)
        claim = shared.claim(request, lease=lease, take=request.background)
        if isinstance(claim, Held) and not request.background:  # due now: wait, bounded
            limit = _wait_limit(claim, self.fold_wait)
            delay, waited = _POLL_FIRST, time.monotonic()
            while isinstance(claim, Held) and (left := limit - (time.monotonic() - waited)) > 0:
                time.sleep(min(delay, left))
                delay = min(delay * 2, _POLL_MAX)
                claim = shared.claim(request, lease=lease, take=False)
        return self._claimed(request, claim, shared, asynchronous=False)

    async def _afold_shared(self, request: FoldRequest, shared: SharedFolds) -> FoldOutcome | None:
        lease = self._lease(request)
        claim = await shared.aclaim(request, lease=lease, take=request.background)
        if isinstance(claim, Held) and not request.background:  # due now: wait, bounded
            limit = _wait_limit(claim, self.fold_wait)
            delay, waited = _POLL_FIRST, time.monotonic()
            while isinstance(claim, Held) and (left := limit - (time.monotonic() - waited)) > 0:
                await asyncio.sleep(min(delay, left))
                delay = min(delay * 2, _POLL_MAX)
                claim = await shared.aclaim(request, lease=lease, take=False)
        return self._claimed(request, claim, shared, asynchronous=True)

    def _fold(self, request: FoldRequest) -> FoldOutcome:
        shared = self._shared(request)
        if shared is not None:
            outcome = self._fold_shared(request, shared)
            if outcome is not None:
                return outcome
        if request.background or _jobs_of(self).find(request) is not None:
            answer = self._background(request)
            if not isinstance(answer, _Job):
                return answer
            done, _ = concurrent.futures.wait([answer.future], timeout=self.fold_wait)
            return _jobs_of(self).take(answer) if done else FoldDeferred()
        try:
            return Folded(self._inline_summarizer().fold(request.previous, request.messages))
        except Exception as error:  # any failure: the plan keeps everything unfolded
            return _failed(error, at=self._now())

    async def _afold(self, request: FoldRequest) -> FoldOutcome:
        shared = self._shared(request)
        if shared is not None:
            outcome = await self._afold_shared(request, shared)
            if outcome is not None:
                return outcome
        if request.background or _jobs_of(self).find(request) is not None:
            answer = self._background(request, asynchronous=True)
            if not isinstance(answer, _Job):
                return answer
            # asyncio.wait never cancels what it waits for: the job goes on after a timeout
            waited = _watched(answer.future)
            done, _ = await asyncio.wait([waited], timeout=self.fold_wait)
            return _jobs_of(self).take(answer) if done else FoldDeferred()
        try:
            summarizer = self._inline_summarizer()
            return Folded(await summarizer.afold(request.previous, request.messages))
        except Exception as error:  # any failure: the plan keeps everything unfolded
            return _failed(error, at=self._now())


def default_folding(strategy: Strategy) -> Folding:
    """The fold machinery kept with ``strategy``, which is not :class:`Folding` itself but whose
    plan asks for folds (a wrapper of your own): made on first use, one per strategy."""
    folding: _DefaultFolding | None = strategy.__dict__.get("_langmem_folding")
    if folding is None:
        with _JOBS_LOCK:
            folding = strategy.__dict__.setdefault("_langmem_folding", _DefaultFolding(strategy))
    return folding


class _DefaultFolding(Folding):
    """The fold machinery of a strategy that is not :class:`Folding` but whose plan asks for
    folds: the strategy's summarizer and clock, the default settings, jobs of its own."""

    def __init__(self, strategy: Strategy) -> None:
        self._strategy = strategy

    def _summarizer(self) -> Summarizer:
        summarizer = self._strategy.summarizer
        if summarizer is None:
            kind = type(self._strategy).__name__
            raise RuntimeError(f"{kind} asked to fold without a summarizer")
        return summarizer

    def _now(self) -> float:
        return self._strategy._now()


@dataclass(frozen=True, slots=True)
class Fold(Step):
    """A step: the plan's fold request, answered by ``folding`` (``run`` is its ``_fold``,
    ``arun`` its ``_afold``): ``Folded``, ``FoldFailed`` or ``FoldDeferred``, never an
    exception. A read-only call performs no fold: it is deferred."""

    folding: Folding
    request: FoldRequest

    writes = True

    def run(self) -> FoldOutcome:
        return self.folding._fold(self.request)

    async def arun(self) -> FoldOutcome:
        return await self.folding._afold(self.request)

    def declined(self) -> FoldOutcome:
        return FoldDeferred()


@dataclass(frozen=True, slots=True)
class _Job:
    """A fold running (or finished) in the background: its input, its future, and its deadline
    (seconds after it started; None: none, see :func:`job_deadline`)."""

    previous: dict[str, str]
    messages: tuple[BaseMessage, ...]
    future: concurrent.futures.Future[dict[str, str]]
    deadline: float | None = None
    #: told the outcome before the future is settled (a shared fold publishes it, so whoever
    #: sees the job done, ``flush`` included, finds it published)
    ended: Callable[[FoldOutcome], None] | None = None
    #: taken by the first of the result and the deadline: only it publishes and settles
    settling: threading.Lock = field(default_factory=threading.Lock)

    def begins(self, request: FoldRequest) -> bool:
        """Whether this fold's input is the start of ``request``'s: the same summary, and its
        messages the oldest of the request's (so adopting it folds exactly those), and, for a
        fold due now, enough of them (``least``: adopting fewer would leave messages hidden)."""
        n = len(self.messages)
        return (
            0 < n <= len(request.messages)
            and (request.background or n >= request.least)
            and self.previous == dict(request.previous)
            and all(a == b for a, b in zip(self.messages, request.messages[:n], strict=True))
        )


#: jobs kept per strategy: a conversation that moved on leaves its job unmatched; the oldest go
_MAX_JOBS = 64
#: the name of a background fold's thread (and its event loop's executor threads)
_THREAD_NAME = "langmem_ext-fold"
#: seconds the tasks left on a job's event loop get to end after a cancel, before the loop is
#: abandoned with them (a model that ignores cancellation is never waited for longer)
_GRACE = 0.5
#: seconds a job's deadline allows beyond its model calls (starting the thread, counting)
_DEADLINE_SLACK = 1.0
#: seconds a shared fold's lease lasts when its summarizer has no timeout (no deadline)
_LEASE_CAP = 600.0
#: seconds a fold due now waits at most for a lease held by another worker (``fold_wait=None``)
_REMOTE_WAIT = 10.0
#: first and longest pause between two reads of a shared fold's record while waiting for it
_POLL_FIRST, _POLL_MAX = 0.02, 0.25


class _Jobs:
    """A strategy's background folds, and how many of their threads are alive. Thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._jobs: list[_Job] = []
        self._live = 0

    @property
    def live(self) -> int:
        with self._lock:
            return self._live

    def all(self) -> list[_Job]:
        with self._lock:
            return list(self._jobs)

    def find(self, request: FoldRequest) -> _Job | None:
        """The job whose input leads ``request``'s (the newest such)."""
        with self._lock:
            jobs = list(self._jobs)
        return next((job for job in reversed(jobs) if job.begins(request)), None)

    def start(
        self,
        summarizer: Summarizer,
        request: FoldRequest,
        asynchronous: bool = False,
        limit: int = 4,
        ended: Callable[[FoldOutcome], None] | None = None,
    ) -> _Job | None:
        """Run the fold in a daemon thread of its own: ``fold``, or for ``aapply`` ``afold`` on
        an event loop of the thread's own (a summarizer model that is only async works, and the
        fold outlives the caller's loop, e.g. one ``asyncio.run`` per call). None, and nothing
        started, when ``limit`` threads of this strategy are still alive. ``ended`` is told
        the outcome when the job settles (a shared fold publishes it)."""
        previous, messages = dict(request.previous), tuple(request.messages)
        with self._lock:
            if self._live >= limit:
                return None
            self._live += 1
        try:
            job = _Job(
                previous,
                messages,
                concurrent.futures.Future(),
                job_deadline(summarizer, previous, messages),
                ended,
            )
            with self._lock:
                self._jobs.append(job)
                del self._jobs[:-_MAX_JOBS]
            _launch(job, summarizer, asynchronous, self._ended)
        except BaseException:
            self._ended()
            raise
        return job

    def _ended(self) -> None:
        with self._lock:
            self._live -= 1

    def take(self, job: _Job) -> FoldOutcome:
        """A finished job's outcome, for adoption (the job is forgotten: adopted once)."""
        with self._lock:
            if job in self._jobs:
                self._jobs.remove(job)
        error = job.future.exception()
        if error is not None:
            return _failed(error) if isinstance(error, Exception) else FoldFailed(error)
        return Folded(job.future.result(), covers=len(job.messages))


def _finish(
    job: _Job, value: dict[str, str] | None = None, error: BaseException | None = None
) -> None:
    """Settle ``job`` with its result or error, once (the result and the deadline race): a
    shared fold's outcome is published first (not logged here: the worker that adopts a
    failure logs it)."""
    if not job.settling.acquire(blocking=False):
        return
    if job.ended is not None:
        outcome: FoldOutcome = FoldFailed(error) if error is not None else Folded(value or {})
        try:
            job.ended(outcome)
        except Exception:  # publishing never raises; this is only a guard
            logger.exception("langmem_ext: publishing a shared fold raised; ignored")
    _settle(job.future, value, error)


def _wait_limit(held: Held, fold_wait: float | None) -> float:
    """Seconds a fold due now waits for one running in another worker: until its lease ends
    (then it is taken over), at most ``fold_wait``, and at most :data:`_REMOTE_WAIT` when
    ``fold_wait`` is None: the holder may be a killed worker whose lease runs for the fold's
    whole deadline, so the call shows the degraded view (nothing lost) and a later call takes
    the lease over once it has expired."""
    left = max(held.until - time.time(), 0.0) + _POLL_MAX
    return min(left, _REMOTE_WAIT if fold_wait is None else fold_wait)


_JOBS_LOCK = threading.Lock()


def _jobs_of(folding: Folding) -> _Jobs:
    """The background folds of ``folding`` (kept in the object: a strategy's own)."""
    jobs: _Jobs | None = folding.__dict__.get("_langmem_jobs")
    if jobs is None:
        with _JOBS_LOCK:
            jobs = folding.__dict__.setdefault("_langmem_jobs", _Jobs())
    return jobs


def job_deadline(
    summarizer: Summarizer, previous: Mapping[str, str], messages: Sequence[BaseMessage]
) -> float | None:
    """Seconds a background fold of ``messages`` into ``previous`` may run before it is
    abandoned as a failed fold (``TimeoutError``); None: no deadline.

    The bound is every model call the fold can make, each at its longest: per section of the
    summary, one call per chunk of transcript (a chunk is at most half of ``max_input_tokens``,
    the rest being instructions and the previous summary; the transcript's UTF-8 bytes stand in
    for its tokens, which they never undercount) and one compress call after each; each call
    takes at most ``max_attempts x timeout`` plus the waits between attempts, of the model and
    then of its fallback. One second of slack is added. A model that refuses prompts as too
    long makes more, smaller calls than this bound counts: such a fold may end at the bound.
    No deadline when a model of the chain has ``timeout=None`` (the caller chose to wait), or
    for an object that folds but is not a :class:`~langmem_ext.summarize.summarizer.Summarizer`.
    """
    per_call = _call_bound(summarizer)
    if per_call is None:
        return None
    transcript = sum(
        len(line.encode("utf-8", "replace")) + 1 for line in render_transcript(messages)
    )
    room = max(int(getattr(summarizer, "max_input_tokens", 0)) // 2, 1)
    chunks = 1 + (transcript - 1) // room if transcript > 0 else 1
    sections = max(len(getattr(summarizer, "templates", ())), 1)
    return sections * chunks * 2 * per_call + _DEADLINE_SLACK


def _call_bound(summarizer: object) -> float | None:
    """The longest one model call of ``summarizer`` can take: its attempts, the waits between
    them, then its fallback's (None: unbounded)."""
    total = 0.0
    link: object = summarizer
    while link is not None:
        if not isinstance(link, Summarizer) or link.timeout is None:
            return None
        attempts = link.max_attempts
        total += attempts * link.timeout + (attempts - 1) * link.retry_max_wait
        link = link.fallback
    return total


def _timed_out(deadline: float) -> TimeoutError:
    return TimeoutError(
        f"the background fold did not end within its deadline of {deadline:g} s (the "
        "summarizer's timeout times the calls the fold may make); it was abandoned, its model "
        "call left to end on its own"
    )


def _settle(
    future: concurrent.futures.Future[_T],
    value: _T | None = None,
    error: BaseException | None = None,
) -> None:
    """Resolve ``future`` unless it already is (the result and the deadline race)."""
    try:
        if error is not None:
            future.set_exception(error)
        else:
            future.set_result(value)  # type: ignore[arg-type]
    except concurrent.futures.InvalidStateError:
        pass


def _launch(
    job: _Job, summarizer: Summarizer, asynchronous: bool, ended: Callable[[], None]
) -> None:
    """Start ``job``'s thread (with the caller's context variables, so tracing follows it) and
    its deadline timer; ``ended`` is called when the thread ends, however late."""
    future = job.future
    future.set_running_or_notify_cancel()
    on_deadline: list[Callable[[], None]] = []  # the job's loop, once running, cancels its fold

    def expire() -> None:
        assert job.deadline is not None
        _finish(job, error=_timed_out(job.deadline))
        for cancel in on_deadline:
            cancel()

    timer: threading.Timer | None = None
    if job.deadline is not None:
        timer = threading.Timer(job.deadline, expire)
        timer.daemon = True

    def work() -> None:
        try:
            if asynchronous:
                _afold_on_own_loop(summarizer, job, on_deadline)
            else:
                _finish(job, summarizer.fold(job.previous, job.messages))
        except BaseException as error:  # delivered to whoever adopts the job
            _finish(job, error=error)
        finally:
            if timer is not None:
                timer.cancel()
            ended()

    thread = threading.Thread(
        target=contextvars.copy_context().run, args=(work,), name=_THREAD_NAME, daemon=True
    )
    if timer is not None:
        timer.start()
    thread.start()


def _afold_on_own_loop(
    summarizer: Summarizer, job: _Job, on_deadline: list[Callable[[], None]]
) -> None:
    """``afold`` on a new event loop in this thread, settling the job's future the moment it
    returns. The loop is wound down without waiting on its model: leftover tasks (a coroutine
    ignoring its cancellation) get :data:`_GRACE` seconds, the executor (where LangChain runs a
    sync-only chat model's ``_generate``) is made of daemon threads and is never joined."""
    loop = asyncio.new_event_loop()
    loop.set_default_executor(_DaemonExecutor())
    try:

        async def fold() -> None:
            try:
                _finish(job, await summarizer.afold(job.previous, job.messages))
            except BaseException as error:  # a cancel at the deadline ends up here too
                _finish(job, error=error)

        task = loop.create_task(fold())

        def cancel() -> None:
            loop.call_soon_threadsafe(task.cancel)

        on_deadline.append(cancel)
        if job.future.done():  # the deadline passed before the loop ran
            task.cancel()
        loop.run_until_complete(task)
        loop.run_until_complete(_wind_down(loop))
    except RuntimeError:  # pragma: no cover - the loop was closed under a late cancel
        pass
    finally:
        on_deadline.clear()
        loop.close()  # shuts its executor down without waiting (daemon threads)


async def _wind_down(loop: asyncio.AbstractEventLoop) -> None:
    """Cancel what the fold left on ``loop`` and give it :data:`_GRACE` seconds to end; close
    async generators within the same grace. Whatever is still pending is abandoned."""
    current = asyncio.current_task()
    left = [task for task in asyncio.all_tasks(loop) if task is not current]
    for task in left:
        task.cancel()
    if left:
        await asyncio.wait(left, timeout=_GRACE)
    closing = asyncio.ensure_future(loop.shutdown_asyncgens())
    await asyncio.wait([closing], timeout=_GRACE)


class _DaemonExecutor(concurrent.futures.ThreadPoolExecutor):
    """The default executor of a job's event loop: each call in a new daemon thread, and
    ``shutdown`` never waits, so a sync-only chat model hung in ``_generate`` neither blocks
    closing the loop nor the interpreter's exit. (A ThreadPoolExecutor only because
    ``loop.set_default_executor`` asks for one; its pool is never used.)"""

    def submit(
        self, fn: Callable[_P, _T], /, *args: _P.args, **kwargs: _P.kwargs
    ) -> concurrent.futures.Future[_T]:
        future: concurrent.futures.Future[_T] = concurrent.futures.Future()

        def work() -> None:
            if not future.set_running_or_notify_cancel():
                return
            try:
                future.set_result(fn(*args, **kwargs))
            except BaseException as error:
                future.set_exception(error)

        threading.Thread(target=work, name=_THREAD_NAME, daemon=True).start()
        return future

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        """Nothing to wait for: abandoned calls end on their own."""


def _watched(future: concurrent.futures.Future[_T]) -> asyncio.Future[_T]:
    """``future`` to await on the running loop. Its outcome is read where the job is adopted,
    so the wrapper's own (a failed fold finishing after the wait gave up) is marked read: no
    "exception was never retrieved" log for a failure the plan reports anyway."""
    wrapped = asyncio.wrap_future(future)
    wrapped.add_done_callback(lambda done: None if done.cancelled() else done.exception())
    return wrapped


def _one_attempt(summarizer: Summarizer) -> Summarizer:
    """``summarizer`` (and its fallback) making one attempt per model call. Another object
    that folds (not a :class:`Summarizer`) has no attempts to set and is used as it is."""
    if not isinstance(summarizer, Summarizer):
        return summarizer
    if summarizer.max_attempts == 1 and (
        summarizer.fallback is None or summarizer.fallback.max_attempts == 1
    ):
        return summarizer
    copied = copy.copy(summarizer)
    copied.max_attempts = 1
    if summarizer.fallback is not None:
        copied.fallback = _one_attempt(summarizer.fallback)
    return copied


def _failed(error: Exception, at: float | None = None) -> FoldFailed:
    """The outcome of a failed fold; ``at``: when the call saw it fail (an inline fold), so the
    backoff counts from the end of the attempt, not from the start of the call."""
    logger.warning("langmem_ext: fold failed: %s: %s", type(error).__name__, error)
    return FoldFailed(error, at)
