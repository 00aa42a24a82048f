"""Background folds shared across worker processes: the record, the claim, and how a surface
hands the fold machinery a place to share them.

Without sharing, a background fold lives in the process that started it (see
:mod:`langmem_ext.strategies.folding`): when the next turn of the thread lands on another
worker, that worker folds the same messages again. With sharing, every thread has ONE small
record (:class:`FoldRecord`) in a place all workers read (a LangGraph ``BaseStore``; the I/O is
:mod:`langmem_ext.integrations.fold_sharing`). It names the fold in flight by its *origin* (the
summary it folds into and the first message it folds, :func:`fold_origin`) and is either a lease
(``running``, until an expiry = the fold's deadline) or the published result (``done``: the
summary and which messages it covers; ``failed``; ``consumed``: a failure already adopted).

A worker asked for a fold by its plan, with no local job for it, *claims* it
(:meth:`FoldRecord.answer`):

* a ``done`` record of the same origin whose covered messages lead the request's: adopt it
  (``Folded(covers=n)``, exactly as a local job's result is adopted); one that covers more
  than a background request asks for defers it (see :meth:`FoldRecord.answer`);
* a ``failed`` one: adopt the failure once (health moves to retrying; the record becomes
  ``consumed``, so the next attempt after the backoff starts a fold again);
* a ``running`` lease that has not expired: the fold is running elsewhere, answered like a
  local running job (a background request is deferred; a fold due now waits, at most
  ``fold_wait``, for the record to be published);
* anything else (no record, another origin, an expired lease of a killed worker, a consumed
  failure): a background request takes the lease and starts the fold; a fold due now folds in
  the call, as without sharing.

Safety without compare-and-set. ``BaseStore`` has no conditional write, so two workers reading
"free" at the same moment would both take the lease. That cannot happen for ONE thread when its
turns run one after another (the LangGraph server runs one run per thread at a time), because
the lease is written before the turn that starts the fold returns: the next turn, wherever it
lands, reads it. Different threads never share a record. Where turns of one thread may overlap,
the PostgreSQL implementation also takes a short advisory lock around the read and the write.
The worst case of a lost race is today's behaviour (the fold made twice); nothing is
double-counted, since each worker adopts at most one result for its own state.

The surfaces set the place for one call with :func:`folds_shared_in` (a context variable, so
one strategy object can serve many threads at once); the fold machinery reads it with
:func:`shared_folds` and consults it only for a strategy that folds in the background.
"""

from __future__ import annotations

import contextvars
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from typing import Any, Literal, Protocol

from langchain_core.messages import BaseMessage

from langmem_ext.core.fold_config import FoldRequest
from langmem_ext.core.identity import digest, stable_key
from langmem_ext.core.transitions import FoldDeferred, Folded, FoldFailed, FoldOutcome

__all__ = [
    "Adopt",
    "Claim",
    "FoldRecord",
    "Held",
    "SharedFolds",
    "Take",
    "covered_digest",
    "fold_origin",
    "folds_shared_in",
    "shared_folds",
]

#: the record's format version (a record of another version is ignored: the fold is redone)
VERSION = 1
Status = Literal["running", "done", "failed", "consumed"]


def fold_origin(previous: Mapping[str, str], messages: Sequence[BaseMessage]) -> str:
    """Where a fold starts: the summary it folds into and its first message. Two requests of
    one thread with the same origin ask for the same fold (the later one may ask for more)."""
    first = _message_part(messages[0]) if messages else None
    return digest("origin", sorted(previous.items()), first)


def covered_digest(messages: Sequence[BaseMessage]) -> str:
    """What a fold covers, stable across processes: each message's key and content."""
    return digest("covered", [_message_part(m) for m in messages])


def _message_part(message: BaseMessage) -> list[Any]:
    calls = [[c.get("id"), c["name"], c["args"]] for c in getattr(message, "tool_calls", ())]
    return [message.type, stable_key(message), message.content, calls]


@dataclass(frozen=True, slots=True)
class Adopt:
    """The claim's answer: a result published by another worker, to adopt."""

    outcome: FoldOutcome


@dataclass(frozen=True, slots=True)
class Held:
    """The claim's answer: the fold runs in another worker, its lease ends at ``until`` (wall
    clock seconds)."""

    until: float


@dataclass(frozen=True, slots=True)
class Take:
    """The claim's answer: this worker took the lease (``record``, as written) and runs the
    fold; it publishes the outcome with :meth:`SharedFolds.publish`."""

    record: FoldRecord


#: a claim's answer; None: fold as without sharing (no record for it, or the store failed)
Claim = Adopt | Held | Take | None


@dataclass(frozen=True, slots=True)
class FoldRecord:
    """A thread's shared fold: a lease (``running`` until ``until``) or its published outcome.
    Small: the summary, what it covers (``covers`` messages whose :func:`covered_digest` is
    ``covered``), never the messages."""

    origin: str
    status: Status
    until: float = 0.0
    owner: str = ""
    covers: int = 0
    covered: str = ""
    sections: Mapping[str, str] | None = None
    error: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {
            "v": VERSION,
            "origin": self.origin,
            "status": self.status,
            "until": self.until,
            "owner": self.owner,
            "covers": self.covers,
            "covered": self.covered,
            "sections": dict(self.sections) if self.sections is not None else None,
            "error": self.error,
        }

    @classmethod
    def from_dict(cls, value: object) -> FoldRecord | None:
        """The record in a stored value; None for anything else (another version, damage)."""
        if not isinstance(value, Mapping) or value.get("v") != VERSION:
            return None
        try:
            sections = value.get("sections")
            if sections is not None and not (
                isinstance(sections, Mapping)
                and all(isinstance(k, str) and isinstance(v, str) for k, v in sections.items())
            ):
                return None
            status = value["status"]
            if status not in ("running", "done", "failed", "consumed"):
                return None
            record = cls(
                origin=str(value["origin"]),
                status=status,
                until=float(value["until"]),
                owner=str(value["owner"]),
                covers=int(value["covers"]),
                covered=str(value["covered"]),
                sections=dict(sections) if sections is not None else None,
                error=str(value["error"]),
            )
        except (KeyError, TypeError, ValueError):
            return None
        return record

    @classmethod
    def lease(cls, request: FoldRequest, until: float, owner: str) -> FoldRecord:
        """The lease a worker writes for the fold of ``request`` it starts."""
        messages = request.messages
        return cls(
            origin=fold_origin(request.previous, messages),
            status="running",
            until=until,
            owner=owner,
            covers=len(messages),
            covered=covered_digest(messages),
        )

    def settled(self, outcome: FoldOutcome) -> FoldRecord:
        """This lease, with the fold's outcome published (a deferral publishes nothing)."""
        if isinstance(outcome, Folded):
            return replace(self, status="done", sections=dict(outcome.sections))
        if isinstance(outcome, FoldFailed):
            error = f"{type(outcome.error).__name__}: {outcome.error}"
            return replace(self, status="failed", error=error)
        return replace(self, status="consumed")

    def answer(self, request: FoldRequest, now: float) -> Adopt | Held | None:
        """What this record says to ``request`` at ``now`` (None: it does not hold its fold)."""
        if self.origin != fold_origin(request.previous, request.messages):
            return None
        if self.status == "running":
            return Held(self.until) if now < self.until else None
        if self.status == "failed":
            error = RuntimeError(f"the fold failed in another worker: {self.error}")
            return Adopt(FoldFailed(error))
        if self.status != "done" or self.sections is None or not self.sections:
            return None
        n = self.covers
        if n > len(request.messages) and request.background:
            # the fold went further than this request (it was started inside a turn that has
            # ended since): folding the shorter part again would summarize it twice, so wait
            # for a request that reaches as far (the history grows) or for a fold due now
            return Adopt(FoldDeferred())
        if not 0 < n <= len(request.messages) or (not request.background and n < request.least):
            return None
        if covered_digest(request.messages[:n]) != self.covered:
            return None
        return Adopt(Folded(dict(self.sections), covers=n))


class SharedFolds(Protocol):
    """Where one thread's background folds are shared with other workers (one per call, from
    the surface). Every method is bounded in time and never raises: a failure answers None
    (fold as without sharing) and is logged."""

    def claim(self, request: FoldRequest, *, lease: float, take: bool) -> Claim:
        """Read the thread's record: adopt, wait, or (``take``) write a lease of ``lease``
        seconds and answer :class:`Take`."""
        ...

    async def aclaim(self, request: FoldRequest, *, lease: float, take: bool) -> Claim:
        """Async :meth:`claim`."""
        ...

    def publish(self, taken: Take, outcome: FoldOutcome) -> None:
        """Publish the outcome of the fold whose lease was ``taken`` (from the job's thread)."""
        ...


_SHARED: contextvars.ContextVar[SharedFolds | None] = contextvars.ContextVar(
    "langmem_ext_shared_folds", default=None
)


@contextmanager
def folds_shared_in(shared: SharedFolds | None) -> Iterator[None]:
    """Within the block, background folds are shared through ``shared`` (None: not shared)."""
    token = _SHARED.set(shared)
    try:
        yield
    finally:
        _SHARED.reset(token)


def shared_folds() -> SharedFolds | None:
    """Where the current call shares its background folds, if anywhere."""
    return _SHARED.get()
