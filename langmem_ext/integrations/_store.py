"""The surfaces' I/O: where a state is stored, and one flow run either sync or async.

**StateStore.** A surface that keeps its state outside LangGraph's graph state (the chat
history, the legacy memory) keeps it as one item of a LangGraph ``BaseStore``:
:class:`StateStore` is that item, a namespace, an item key and the state's serialization
(``to_dict`` / a ``decode`` function; :data:`memory_state` for a
:class:`~langmem_ext.core.state.MemoryState`). Items are written with ``index=False``: a state is
never a document to embed. A sync-only store (``SqliteStore`` has no async API) can be used from
async code: with ``sync_fallback=True`` the async methods run its sync ones in a worker thread,
so the event loop never blocks. A store that reports itself busy (SQLite's "database is locked"
while another process writes the same file) is asked again with a bounded backoff
(:func:`~langmem_ext.retrieval.flows.batch_retrying`), never failing the call at once.

**Flows.** An operation of a surface (append → apply → save → prune, or the legacy prune) is
written once, as a generator that yields I/O steps and receives their results, like httpx's
``auth_flow`` and :meth:`Summarizer.steps <langmem_ext.summarize.summarizer.Summarizer.steps>`.
The drivers are the package's one pair (:mod:`langmem_ext.core.steps`, re-exported here):
:func:`run` performs the steps with blocking calls, :func:`arun` by awaiting. A step that raises
has its exception thrown back into the flow at the ``yield``, so the flow handles errors with a
plain ``try``. The steps (each a :class:`~langmem_ext.core.steps.Step` with its own ``run`` and
``arun``):

* :class:`Io`: one call, given in both colours (a function and a coroutine function);
* :class:`Shielded`: a sub-flow of writes that must finish: :func:`arun` runs it to its end
  even when the caller is cancelled meanwhile, and raises the ``CancelledError`` after;
* :class:`Within`: a sub-flow run inside a context manager (a lock), sync or async.

Pure bookkeeping: nothing here knows a strategy, a history or a lock.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Awaitable, Callable, Mapping
from contextlib import AbstractAsyncContextManager, AbstractContextManager
from dataclasses import KW_ONLY, dataclass
from typing import Any, Generic, Protocol, TypeVar

from langgraph.store.base import BaseStore, GetOp, Op, PutOp

from langmem_ext.core.state import MemoryState
from langmem_ext.core.steps import Flow, Step, arun, run
from langmem_ext.retrieval.flows import abatch_retrying, batch_retrying

__all__ = [
    "Flow",
    "Io",
    "Shielded",
    "StateStore",
    "Within",
    "arun",
    "memory_state",
    "run",
    "shielded",
    "single",
    "uncancelled",
]

T = TypeVar("T")


class Serializable(Protocol):
    """A state the store can hold: a JSON-serializable ``to_dict()``."""

    def to_dict(self) -> dict[str, Any]: ...


S = TypeVar("S", bound=Serializable)


def memory_state(data: Mapping[str, Any]) -> MemoryState:
    """The ``decode`` of a :class:`~langmem_ext.core.state.MemoryState` (validated, versioned)."""
    return MemoryState.from_dict(data)


@dataclass(frozen=True, slots=True)
class StateStore(Generic[S]):
    """One state kept as the item ``item`` under ``namespace`` of a LangGraph ``store``.

    Args:
        store: any LangGraph ``BaseStore``.
        namespace: where the item lives, e.g. ``key.namespace("history")``.
        item: the item key.
        decode: reads a stored value back (``memory_state``, or a state class's
            ``from_dict``); it raises on a value it does not understand. States are written
            with their ``to_dict()``.
        sync_fallback: when the store has no async API (it raises ``NotImplementedError``),
            the async methods run the sync ones in a worker thread instead of failing.

    ``load`` / ``save`` / ``delete`` and their async twins are the whole API; ``loading`` /
    ``saving`` / ``deleting`` are the same calls as :class:`Io` steps for a flow.
    """

    store: BaseStore
    namespace: tuple[str, ...]
    item: str
    _: KW_ONLY
    decode: Callable[[Mapping[str, Any]], S]
    sync_fallback: bool = False

    def __repr__(self) -> str:
        return f"StateStore({type(self.store).__name__}, {self.namespace!r}, {self.item!r})"

    # -- sync -------------------------------------------------------------------------------------

    def load(self) -> S | None:
        """The stored state, or ``None`` when there is none."""
        (item,) = batch_retrying(self.store, [self._get()])
        return self._decoded(item)

    def save(self, state: S) -> None:
        batch_retrying(self.store, [self._put(state.to_dict())])

    def delete(self) -> None:
        batch_retrying(self.store, [self._put(None)])

    # -- async ------------------------------------------------------------------------------------

    async def aload(self) -> S | None:
        """Async :meth:`load`."""
        (item,) = await self._async([self._get()])
        return self._decoded(item)

    async def asave(self, state: S) -> None:
        """Async :meth:`save`."""
        await self._async([self._put(state.to_dict())])

    async def adelete(self) -> None:
        """Async :meth:`delete`."""
        await self._async([self._put(None)])

    # -- as flow steps ----------------------------------------------------------------------------

    def loading(self) -> Io[S | None]:
        return Io(self.load, self.aload)

    def saving(self, state: S) -> Io[None]:
        return Io.of(self.save, self.asave, state)

    def deleting(self) -> Io[None]:
        return Io(self.delete, self.adelete)

    # -- internals --------------------------------------------------------------------------------

    def _decoded(self, item: Any) -> S | None:
        return None if item is None else self.decode(item.value)

    def _get(self) -> GetOp:
        return GetOp(self.namespace, self.item)

    def _put(self, value: dict[str, Any] | None) -> PutOp:
        """The write of ``value`` (None: the delete)."""
        return PutOp(self.namespace, self.item, value, index=False)

    async def _async(self, ops: list[Op]) -> list[Any]:
        """``ops`` through the store's async API, asked again while the store is busy (see
        ``batch_retrying``); a sync-only store's in a worker thread with ``sync_fallback``."""
        if not self.sync_fallback:
            return await abatch_retrying(self.store, ops)
        try:
            return await abatch_retrying(self.store, ops)
        except NotImplementedError:  # a sync-only store: do not block the event loop
            return await asyncio.to_thread(batch_retrying, self.store, ops)


# --------------------------------------------------------------------------------------------
# flows: the steps (the drivers are core.steps' run / arun)


@dataclass(frozen=True, slots=True)
class Io(Step, Generic[T]):
    """A step: one call. ``run`` calls ``call()``, ``arun`` awaits ``acall()``."""

    call: Callable[[], T]
    acall: Callable[[], Awaitable[T]]

    def run(self) -> T:
        return self.call()

    async def arun(self) -> T:
        return await self.acall()

    @classmethod
    def of(
        cls, call: Callable[..., T], acall: Callable[..., Awaitable[T]], *args: Any, **kw: Any
    ) -> Io[T]:
        """The step that calls ``call(*args, **kw)`` / awaits ``acall(*args, **kw)``."""
        return cls(functools.partial(call, *args, **kw), functools.partial(acall, *args, **kw))

    @classmethod
    def inline(cls, call: Callable[..., T], *args: Any) -> Io[T]:
        """The step of a non-blocking call (a try-lock), made inline by both drivers."""
        bound = functools.partial(call, *args)

        async def acall() -> T:
            return bound()

        return cls(bound, acall)


@dataclass(frozen=True, slots=True)
class Shielded(Step, Generic[T]):
    """A step: the sub-flow ``flow``, which ``arun`` finishes even if cancelled meanwhile (the
    ``CancelledError`` is raised after it)."""

    flow: Flow[T]

    def run(self) -> T:
        return run(self.flow)

    async def arun(self) -> T:
        return await shielded(arun(self.flow))


@dataclass(frozen=True, slots=True)
class Within(Step, Generic[T]):
    """A step: the sub-flow ``flow``, inside ``context()`` (``run``) or ``acontext()``
    (``arun``): a lock held for exactly that sub-flow."""

    context: Callable[[], AbstractContextManager[Any]]
    acontext: Callable[[], AbstractAsyncContextManager[Any]]
    flow: Flow[T]

    def run(self) -> T:
        with self.context():
            return run(self.flow)

    async def arun(self) -> T:
        async with self.acontext():
            return await arun(self.flow)


def single(step: Step) -> Flow[Any]:
    """The flow of one step (to shield one call, or to take a lock for it)."""
    return (yield step)


async def uncancelled(awaitable: Awaitable[T]) -> tuple[T, bool]:
    """Await ``awaitable`` to its end even if the caller is cancelled meanwhile.

    Returns its result and whether a cancellation arrived (the caller re-raises it once its own
    bookkeeping is done). The work runs in its own task behind ``asyncio.shield``.
    """
    task = asyncio.ensure_future(awaitable)
    cancelled = False
    while True:
        try:
            return await asyncio.shield(task), cancelled
        except asyncio.CancelledError:
            if task.cancelled():  # the work itself was cancelled (the loop is shutting down)
                raise
            cancelled = True


async def shielded(awaitable: Awaitable[T]) -> T:
    """Await ``awaitable`` to its end; a cancellation that arrived meanwhile is raised after."""
    result, cancelled = await uncancelled(awaitable)
    if cancelled:
        raise asyncio.CancelledError
    return result
