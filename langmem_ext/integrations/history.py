"""A chat history whose ``messages`` are a strategy's view: the chat-history surface.

``ManagedChatMessageHistory(history, strategy)`` wraps any LangChain
``BaseChatMessageHistory`` (in memory, SQL, PostgreSQL, Redis ...), the *backing* history, and
is itself one, so it drops into ``RunnableWithMessageHistory`` and anything else that takes a
chat history:

* **Reading** (``messages``, ``aget_messages``) returns the strategy's view of the backing
  messages: the running summary plus the recent messages that fit. Reading is read-only: it
  uses :meth:`Strategy.view <langmem_ext.strategies.engine.Strategy.view>`, which never calls the
  summarizer and never writes anything; a fold that would be due is deferred to the next write.
* **Writing** (``add_messages``, ``aadd_messages``) appends to the backing history, then runs
  :meth:`Strategy.apply <langmem_ext.strategies.engine.Strategy.apply>` on the full backing history
  with the stored :class:`~langmem_ext.core.state.MemoryState` (folding into the summary when it is
  due) and stores the new state. This is where the summarizer runs, once per fold, not per read.

The state lives in a LangGraph ``BaseStore`` (``InMemoryStore`` by default; ``SqliteStore``,
``PostgresStore`` or their async variants to persist it) at ``key.namespace("history")``, item
``"state"``: the summary of a database-backed history survives restarts and is shared by every
process using the same store and key. The legacy ``ConversationSummaryBufferMemory`` kept its
summary in process memory only, so a restart lost it.

The backing history keeps every message, unless ``prune_backing=True``: then the messages that
were folded into the summary are removed from it after the fold succeeded (see
:meth:`ManagedChatMessageHistory.add_messages` for the order of the steps and what a crash in
between leaves behind).

Keys: the state of a history is keyed by its :class:`~langmem_ext.core.keys.MemoryKey`. With a
``store``, a history whose session is the shared ``"default"`` is refused with
:class:`~langmem_ext.core.keys.MissingKeyError` unless ``shared_default=True``, however the key
was made: no ``key=`` and no ``session_id``/``thread_id`` in ``config``, or an explicit key that
names no session (``key=MemoryKey(tenant="acme")``, ``key=MemoryKey()``). Such histories over
one store would all read and write one summary: one user's conversation summarized into
another's.

``add_messages`` refuses a ``RemoveMessage`` (:class:`~langmem_ext.errors.InvalidHistoryError`,
a ``ValueError``, before anything is written): a chat history stores messages, and a stored
removal would reach the model as a message.

Concurrency: every write of one key runs alone. ``add_messages`` / ``aadd_messages`` / ``clear``
take a per-key lock (:mod:`~langmem_ext.integrations.locks`) for the whole
append-apply-store-prune sequence (and reads take it to read the backing history and the state
together, so they never see a prune half done):

* in process, a ``threading.Lock`` (and an ``asyncio.Lock`` per event loop) keyed by the
  key's namespace and the store (its SQLite file or PostgreSQL connection when it has one);
* across processes on PostgreSQL, when the store is a ``PostgresStore`` /
  ``AsyncPostgresStore`` (or, with another store, the backing history is langchain-postgres'
  ``PostgresChatMessageHistory``): a session advisory lock on a 64-bit hash of the namespace,
  taken on that connection with ``pg_try_advisory_lock`` (polled, so a waiting writer never
  blocks the connection for others) and released at the end, or by the server when the
  process dies;
* across processes on SQLite, when the store is a ``SqliteStore`` / ``AsyncSqliteStore`` on a
  file: a POSIX record lock on one byte (per key) of ``<store file>.langmem-ext.lock``, released
  by the kernel when the process dies (not on Windows).

Other stores (``InMemoryStore`` is per process anyway; Redis ...) get the in-process lock only:
serialize writers of one key across processes yourself there. Holding the lock spans the
summarizer call, so a second writer of the *same* key waits for it; different keys never wait
for each other.

Cancellation: ``aadd_messages`` can be cancelled (``asyncio.wait_for`` timing out) while it
waits for the lock or for the summarizer, and nothing is lost (the appended messages are
folded by the next write). Once it writes (appending, storing the state, pruning) the writing
is shielded and runs to the end before the ``CancelledError`` propagates: a cancellation never
leaves a backing history cleared and not re-filled.

Sync and async: each operation (read, write, clear) is written once, as a flow of I/O steps
(:mod:`langmem_ext.integrations._store`), which the sync methods run with blocking calls and the
async methods by awaiting; only the locks have a sync and an async form.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import (
    AsyncIterator,
    Callable,
    Hashable,
    Iterator,
    Mapping,
    Sequence,
)
from contextlib import asynccontextmanager, contextmanager
from typing import Any, TypeVar

from langchain_core.chat_history import BaseChatMessageHistory
from langchain_core.messages import BaseMessage, RemoveMessage
from langgraph.store.base import BaseStore
from langgraph.store.memory import InMemoryStore

from langmem_ext.core.keys import MemoryKey
from langmem_ext.core.result import MemoryReport, MemoryResult
from langmem_ext.core.state import MemoryState
from langmem_ext.core.steps import Flow, arun, run
from langmem_ext.core.transitions import (
    rebase_after_removal,
    removed_messages,
    without_stale_keys,
)
from langmem_ext.errors import InvalidHistoryError, MemoryBudgetExceeded
from langmem_ext.integrations._store import (
    Io,
    Shielded,
    StateStore,
    Within,
    memory_state,
    single,
)
from langmem_ext.integrations.locks import (
    advisory_key,
    afile_lock,
    apg_lock,
    asqlite_file,
    file_lock,
    key_lock,
    pg_connection,
    pg_lock,
    polled,
    sqlite_file,
)
from langmem_ext.integrations.tracing import ReportCallback, check_on_report, tell_report
from langmem_ext.strategies.engine import Strategy

__all__ = ["STATE_ITEM", "ManagedChatMessageHistory"]

#: the store item (under ``key.namespace("history")``) that holds the MemoryState
STATE_ITEM = "state"

IdFactory = Callable[[BaseMessage], str]
T = TypeVar("T")


def _uuid_id(_message: BaseMessage) -> str:
    return str(uuid.uuid4())


class ManagedChatMessageHistory(BaseChatMessageHistory):
    """A ``BaseChatMessageHistory`` that shows the model a strategy's view of another one.

    Args:
        history: the backing ``BaseChatMessageHistory``; it receives every message added.
        strategy: any langmem_ext strategy. A summarizing one (``SummaryBuffer``,
            ``Compacting``, ``TieredSummary``) keeps a running summary; ``TokenBudget`` or
            ``SlidingWindow`` only trim the view (the backing history keeps everything).
        store: where the :class:`~langmem_ext.core.state.MemoryState` lives (a LangGraph
            ``BaseStore``); default: a new ``InMemoryStore``, which lasts as long as this
            process. Use a persistent store with a persistent backing history, or the summary is
            lost on restart while the messages are not. The async methods use the store's async
            API: ``SqliteStore`` has none (use ``AsyncSqliteStore`` there).
        key: the :class:`~langmem_ext.core.keys.MemoryKey` (tenant, user, session) that owns this
            memory. Different keys never share state, whatever their text. With a ``store``
            the key must name a session (a session left out or given as ``"default"`` is
            refused unless ``shared_default=True``, as for ``config``).
        config: instead of ``key``: a runnable config whose ``configurable`` holds
            ``tenant_id``, ``user_id`` and ``session_id`` (or ``thread_id``), read with
            :meth:`MemoryKey.from_config <langmem_ext.core.keys.MemoryKey.from_config>`.
        require_explicit_key: with ``config`` (or with neither ``key`` nor ``config``), fail
            with :class:`~langmem_ext.core.keys.MissingKeyError` instead of falling back to
            ``"default"`` for any missing part (tenant and user included).
        shared_default: with a ``store`` and no session in ``key``/``config`` (neither given,
            a config without ``session_id``/``thread_id``, or a ``key`` whose session is
            ``"default"``), use the shared ``"default"`` session anyway. Without it such a
            history raises :class:`~langmem_ext.core.keys.MissingKeyError`: every such history
            over one store would otherwise read and write the same summary (one user's
            conversation summarized into another's). Without a ``store`` the state is private
            to this object, so nothing can be shared and no session is needed.
        prune_backing: remove the messages folded into the summary from the backing history,
            which then stays bounded. Needs a summarizing strategy (with a trimming one it would
            delete messages that nothing remembers). Writers of one key are serialized (see
            the module notes), so concurrent writers neither lose nor re-summarize messages.
        id_factory: gives an id to each added message that has none (default: a UUID4), so the
            state and the pruning can find it again. The caller's message is not changed: a copy
            with the id is appended.
        on_report: called as ``on_report(report, key)`` with the
            :class:`~langmem_ext.core.result.MemoryReport` of every read and write (see
            :attr:`last_report`); an exception in it is logged and ignored.

    Example:
        >>> from langchain_core.chat_history import InMemoryChatMessageHistory
        >>> from langchain_core.messages import AIMessage, HumanMessage
        >>> from langmem_ext import SlidingWindow
        >>> from langmem_ext.core.keys import MemoryKey
        >>> backing = InMemoryChatMessageHistory()
        >>> history = ManagedChatMessageHistory(
        ...     backing, SlidingWindow(max_messages=2), key=MemoryKey("acme", "u1", "chat-1")
        ... )
        >>> history.add_messages([HumanMessage("hi"), AIMessage("hello"), HumanMessage("bye")])
        >>> [m.content for m in history.messages], len(backing.messages)
        (['bye'], 3)
    """

    def __init__(
        self,
        history: BaseChatMessageHistory,
        strategy: Strategy,
        *,
        store: BaseStore | None = None,
        key: MemoryKey | None = None,
        config: Mapping[str, Any] | None = None,
        require_explicit_key: bool = False,
        shared_default: bool = False,
        prune_backing: bool = False,
        id_factory: IdFactory | None = None,
        on_report: ReportCallback | None = None,
    ) -> None:
        _check_parts(history, strategy, store)
        key = _resolved_key(key, config, store, require_explicit_key, shared_default)
        _check_options(strategy, prune_backing, id_factory)
        super().__init__()
        self.history = history
        self.strategy = strategy
        self.store: BaseStore = store if store is not None else InMemoryStore()
        self.key = key
        self.prune_backing = prune_backing
        self.id_factory: IdFactory = id_factory or _uuid_id
        self.on_report = check_on_report(on_report)
        self._last_report: MemoryReport | None = None

    @classmethod
    def from_config(
        cls,
        history: BaseChatMessageHistory,
        strategy: Strategy,
        config: Mapping[str, Any] | None,
        *,
        store: BaseStore | None = None,
        require_explicit_key: bool = False,
        shared_default: bool = False,
        prune_backing: bool = False,
        id_factory: IdFactory | None = None,
        on_report: ReportCallback | None = None,
    ) -> ManagedChatMessageHistory:
        """The history for the key in ``config["configurable"]`` (``tenant_id``, ``user_id``,
        ``session_id`` or ``thread_id``); see :meth:`MemoryKey.from_config
        <langmem_ext.core.keys.MemoryKey.from_config>`."""
        return cls(
            history,
            strategy,
            store=store,
            config=config if config is not None else {},
            require_explicit_key=require_explicit_key,
            shared_default=shared_default,
            prune_backing=prune_backing,
            id_factory=id_factory,
            on_report=on_report,
        )

    def __repr__(self) -> str:
        return (
            f"ManagedChatMessageHistory({type(self.history).__name__}, {self.strategy!r}, "
            f"key={self.key!r}, prune_backing={self.prune_backing})"
        )

    @property
    def namespace(self) -> tuple[str, ...]:
        """Where the state lives in the store: ``key.namespace("history")``."""
        return self.key.namespace("history")

    # -- reading: the view, never a model call, never a write -----------------------------------

    @property
    def messages(self) -> list[BaseMessage]:
        """The strategy's view of the backing history (summary + recent messages).

        Read-only: the summarizer is never called and nothing is written. A fold that is due is
        deferred to the next ``add_messages``; until then the view shows the summary so far, the
        newest messages that fit and a note with the number not shown. The backing history and
        the state are read under the key's lock, so a read never sees another writer's prune
        half done (a cleared history, or a state not yet rebased).
        """
        return run(self._read_flow())

    @messages.setter
    def messages(self, value: list[BaseMessage]) -> None:
        raise AttributeError(
            "ManagedChatMessageHistory.messages is the strategy's view and cannot be assigned; "
            "use clear() and add_messages()"
        )

    async def aget_messages(self) -> list[BaseMessage]:
        """Async :attr:`messages`: the backing history and the store are read with their async
        API; nothing is written and the summarizer is never called."""
        return await arun(self._read_flow())

    @property
    def state(self) -> MemoryState | None:
        """The stored :class:`~langmem_ext.core.state.MemoryState`, or ``None`` before the first
        write (or after :meth:`clear`)."""
        return self._states.load()

    async def aget_state(self) -> MemoryState | None:
        """Async :attr:`state`."""
        return await self._states.aload()

    @property
    def last_report(self) -> MemoryReport | None:
        """What the memory did on this object's latest read or write (``None`` before the first).

        After a read (:attr:`messages`, :meth:`aget_messages`) it describes the view just
        returned (``tokens_after``, ``budget``, ``not_shown`` while a fold waits for the next
        write); after a write (:meth:`add_messages`) it describes the apply that ran there
        (``folded`` on the write that folded). It belongs to this object, not to the key:
        another process (or another object over the same store) has its own.
        """
        return self._last_report

    def _reported(self, result: MemoryResult) -> MemoryResult:
        """Keep ``result``'s report as :attr:`last_report` and tell ``on_report``."""
        self._last_report = result.report
        tell_report(self.on_report, result.report, self.key, "ManagedChatMessageHistory")
        return result

    @property
    def summary(self) -> dict[str, str]:
        """The running summary, section -> text (``{}`` until the first fold)."""
        state = self._states.load()
        return state.sections if state is not None else {}

    # -- writing: append, apply, store (and prune) ----------------------------------------------

    def add_messages(self, messages: Sequence[BaseMessage]) -> None:
        """Append ``messages`` to the backing history, then run the strategy and store its state.

        Steps, in this order, all under the key's write lock (see the module notes): (1) append
        (messages without an id get one, on a copy); (2) read the backing history back and run
        ``strategy.apply`` with the stored state (the summarizer runs here when a fold is due);
        (3) store the new state. If ``apply`` raises
        :class:`~langmem_ext.errors.MemoryBudgetExceeded` after a fold succeeded, that fold's
        state (``error.state``) is stored before the error propagates, so it is not lost.

        With ``prune_backing=True`` and messages folded: (4) the backing history is cleared and
        the messages that are not folded are added back (``BaseChatMessageHistory`` has no
        delete), then (5) the state, rebased on the shorter history, is stored. The lock makes
        (1)-(5) one step for every other writer of the key. It is **not atomic** against a
        crash: it only happens after the fold succeeded and step (3) stored a state that covers
        the folded messages, so a crash after (4) leaves a correct summary and history (the next
        turn finds the folded messages gone and recounts once). A crash *inside* (4), between
        the clear and the add, loses the unfolded messages of the backing history; use a backing
        history whose ``clear`` + ``add_messages`` you can make transactional if that matters.

        Raises:
            InvalidHistoryError: a ``RemoveMessage`` is among ``messages`` (a ``ValueError``;
                nothing is written).
        """
        run(self._add_flow(messages))

    async def aadd_messages(self, messages: Sequence[BaseMessage]) -> None:
        """Async :meth:`add_messages`: the same steps with the backing history's and the
        store's async API and ``strategy.aapply``.

        Cancellation (``asyncio.wait_for`` timing out, ``task.cancel()``) is honoured at once
        while waiting for the lock, reading, or summarizing: nothing is stored then, and the
        appended messages are folded by the next write. The writes, (1) and (3)-(5), are
        shielded: once started they run to the end, and the ``CancelledError`` is raised after,
        so a cancellation never leaves the backing history cleared and not re-filled.
        """
        await arun(self._add_flow(messages))

    def clear(self) -> None:
        """Clear the backing history and delete the stored state (the summary with it)."""
        run(self._clear_flow())

    async def aclear(self) -> None:
        """Async :meth:`clear` (shielded like the writes of :meth:`aadd_messages`)."""
        await arun(self._clear_flow())

    # -- the flows: each operation once, run by ``_store.run`` (sync) or ``_store.arun`` --------

    def _under_lock(self, flow: Flow[T]) -> Within[T]:
        """The step that runs ``flow`` under the key's write lock (see :meth:`_locked`)."""
        return Within(self._locked, self._alocked, flow)

    def _read_flow(self) -> Flow[list[BaseMessage]]:
        """Read the backing history and the state under the lock (never half-way through
        another writer's prune), then compute the view without the lock."""
        messages, state = yield self._under_lock(self._snapshot_flow())
        view = self.strategy.view, self.strategy.aview
        result: MemoryResult = yield Io.of(*view, messages, state, key=self.key)
        return self._reported(result).messages

    def _snapshot_flow(self) -> Flow[tuple[list[BaseMessage], MemoryState | None]]:
        messages = yield self._reading_history()
        state = yield self._states.loading()
        return messages, state

    def _add_flow(self, messages: Sequence[BaseMessage]) -> Flow[None]:
        new = self._prepared(messages)
        if new:  # nothing new: no write, the view is what a read shows
            yield self._under_lock(self._write_flow(new))

    def _write_flow(self, new: list[BaseMessage]) -> Flow[None]:
        """Steps (1)-(5) of :meth:`add_messages`; the writes are :class:`Shielded`."""
        yield Shielded(single(self._appending(new)))
        full = yield self._reading_history()
        previous = yield self._states.loading()
        apply = self.strategy.apply, self.strategy.aapply
        try:
            result = yield Io.of(*apply, full, previous, key=self.key)
        except MemoryBudgetExceeded as error:
            if error.state is not None:  # a fold that succeeded is kept
                yield Shielded(single(self._states.saving(error.state)))
            raise
        yield Shielded(self._commit_flow(full, self._reported(result).state))

    def _commit_flow(self, full: list[BaseMessage], state: MemoryState) -> Flow[None]:
        """Steps (3)-(5) of :meth:`add_messages`: store the state, then prune."""
        yield self._states.saving(state)
        pruned = self._pruned(full, state)
        if pruned is not None:
            kept, rebased = pruned
            yield Io(self.history.clear, self.history.aclear)
            yield self._appending(kept)
            yield self._states.saving(rebased)

    def _clear_flow(self) -> Flow[None]:
        yield self._under_lock(single(Shielded(self._erasing_flow())))

    def _erasing_flow(self) -> Flow[None]:
        yield Io(self.history.clear, self.history.aclear)
        yield self._states.deleting()

    def _appending(self, messages: list[BaseMessage]) -> Io[None]:
        return Io.of(self.history.add_messages, self.history.aadd_messages, messages)

    def _reading_history(self) -> Io[list[BaseMessage]]:
        return Io(lambda: self.history.messages, self.history.aget_messages)

    @property
    def _states(self) -> StateStore[MemoryState]:
        """The stored state: ``STATE_ITEM`` under :attr:`namespace` of :attr:`store`."""
        return StateStore(self.store, self.namespace, STATE_ITEM, decode=memory_state)

    # -- internals ------------------------------------------------------------------------------

    def _lock_owner(self, database: str | None) -> Hashable:
        """What the in-process lock is keyed by: the SQLite file, or the PostgreSQL connection
        (or pool) when the store has one, else the store. Two store objects on one file or one
        connection must share it: record locks belong to the process and advisory locks to the
        session, so neither tells two writers of one process apart."""
        if database is not None:
            return ("sqlite", database)
        conn = getattr(self.store, "conn", None)
        if conn is not None and type(self.store).__module__.startswith("langgraph.store.postgres"):
            return ("postgres", id(conn))
        return ("store", id(self.store))

    @contextmanager
    def _locked(self) -> Iterator[None]:
        """The key's write lock: in process, and across processes on PostgreSQL (an advisory
        lock) or on a SQLite file (a record lock on a lock file next to it)."""
        database = sqlite_file(self.store)
        entry = key_lock(self._lock_owner(database), self.namespace)
        if entry.holder == threading.get_ident():
            raise RuntimeError(
                f"a sync call on {self!r} while an async write of the same key is in progress "
                f"on this thread's event loop would deadlock; await the async method instead "
                f"(aadd_messages, aget_messages, aclear)"
            )
        with entry.thread:
            entry.holder = threading.get_ident()
            try:
                conn = pg_connection(self.store, self.history, sync=True)
                if database is not None:
                    with file_lock(database, self.namespace):
                        yield
                elif conn is not None:
                    with pg_lock(conn, advisory_key(self.namespace)):
                        yield
                else:
                    yield
            finally:
                entry.holder = None

    @asynccontextmanager
    async def _alocked(self) -> AsyncIterator[None]:
        """Async :meth:`_locked`: cancellable while waiting, and never leaks a lock."""
        database = await asqlite_file(self.store)
        entry = key_lock(self._lock_owner(database), self.namespace)
        async with entry.for_running_loop():
            # the thread lock too (sync writers, other event loops), polled: never blocks the loop
            await arun(polled(Io.inline(entry.thread.acquire, False)))
            entry.holder = threading.get_ident()
            try:
                conn = pg_connection(self.store, self.history, sync=False)
                if database is not None:
                    async with afile_lock(database, self.namespace):
                        yield
                elif conn is not None:
                    async with apg_lock(conn, advisory_key(self.namespace)):
                        yield
                else:
                    yield
            finally:
                entry.holder = None
                entry.thread.release()

    def _prepared(self, messages: Sequence[BaseMessage]) -> list[BaseMessage]:
        """The messages to append: each one without an id is copied with a new id.

        A ``RemoveMessage`` is refused before anything is written: a chat history stores
        messages, and a stored removal would reach the model as a message of its own.
        """
        if isinstance(messages, (str, bytes, BaseMessage)) or not isinstance(messages, Sequence):
            raise TypeError(
                f"messages must be a sequence of BaseMessage, got {type(messages).__name__}"
            )
        for i, message in enumerate(messages):
            if not isinstance(message, BaseMessage):
                raise TypeError(
                    f"messages[{i}] must be a BaseMessage, got {type(message).__name__}"
                )
            if isinstance(message, RemoveMessage):
                raise InvalidHistoryError(
                    f"messages[{i}] is a RemoveMessage(id={message.id!r}): a chat history stores "
                    f"messages and cannot apply a removal (LangGraph's add_messages reducer "
                    f"does that for graph state); nothing was written. To delete messages, "
                    f"remove them from the backing history directly (the next write notices "
                    f"the rewrite and recounts), or clear() and add back the ones to keep",
                    index=i,
                    message_id=message.id,
                )
        out: list[BaseMessage] = []
        for message in messages:
            if not message.id:
                new_id = self.id_factory(message)
                if not isinstance(new_id, str) or not new_id:
                    raise TypeError(f"id_factory must return a non-empty str, got {new_id!r}")
                message = message.model_copy(update={"id": new_id})
            out.append(message)
        return out

    def _pruned(
        self, full: Sequence[BaseMessage], state: MemoryState
    ) -> tuple[list[BaseMessage], MemoryState] | None:
        """With ``prune_backing``: the messages to keep and the state rebased on them (the rules
        are :func:`~.transitions.rebase_after_removal`'s), or ``None`` when nothing is
        to be removed. The whole backing history is rewritten, so messages without an id are
        removed as well as the others."""
        if not self.prune_backing or not state.folded:
            return None
        gone, kept, pinned, removed_at = removed_messages(full, state)
        if not gone:
            return None
        count = self.strategy.counter.count_message
        rebased = rebase_after_removal(
            state,
            kept,
            removed_at=removed_at,
            removed_count=len(gone),
            removed_tokens=sum(count(m) for m in gone),
            kept_folded_tokens=count(pinned) if pinned is not None else None,
        )
        # a key that points past the shorter history is dropped rather than kept stale
        return kept, without_stale_keys(rebased, kept)


def _check_parts(history: Any, strategy: Any, store: Any) -> None:
    """The wrapped objects are of the right kinds (a clear ``TypeError`` naming the argument)."""
    if isinstance(history, ManagedChatMessageHistory):
        raise TypeError(
            "history is already a ManagedChatMessageHistory (its messages are a view, not "
            "the conversation); pass its backing history instead"
        )
    if not isinstance(history, BaseChatMessageHistory):
        raise TypeError(
            f"history must be a langchain_core BaseChatMessageHistory "
            f"(InMemoryChatMessageHistory, SQLChatMessageHistory, ...), "
            f"got {type(history).__name__}"
        )
    if not isinstance(strategy, Strategy):
        raise TypeError(
            f"strategy must be a langmem_ext strategy (TokenBudget, SummaryBuffer, ...), "
            f"got {type(strategy).__name__}"
        )
    if store is not None and not isinstance(store, BaseStore):
        raise TypeError(
            f"store must be a langgraph BaseStore (InMemoryStore, SqliteStore, "
            f"PostgresStore, ...), got {type(store).__name__}"
        )


def _resolved_key(
    key: MemoryKey | None,
    config: Mapping[str, Any] | None,
    store: BaseStore | None,
    require_explicit_key: bool,
    shared_default: bool,
) -> MemoryKey:
    """The history's key: ``key`` as given, or read from ``config``; over a store, a key whose
    session is the shared default (however it was made) is refused unless ``shared_default``
    (see the module notes)."""
    if key is not None and config is not None:
        raise ValueError("pass either key= or config=, not both")
    if not isinstance(shared_default, bool):
        raise TypeError(f"shared_default must be a bool, got {type(shared_default).__name__}")
    if key is None:
        key = MemoryKey.from_config(config, require_explicit_key=require_explicit_key)
    elif not isinstance(key, MemoryKey):
        raise TypeError(f"key must be a MemoryKey, got {type(key).__name__}")
    if store is not None and not shared_default:
        key.require("session", owner="ManagedChatMessageHistory", opt_out="shared_default")
    return key


def _check_options(strategy: Strategy, prune_backing: Any, id_factory: Any) -> None:
    """``prune_backing`` is a bool and has a summary to stand for what it deletes; ``id_factory``
    is callable."""
    if not isinstance(prune_backing, bool):
        raise TypeError(f"prune_backing must be a bool, got {type(prune_backing).__name__}")
    if prune_backing and strategy.summarizer is None:
        raise ValueError(
            f"prune_backing=True needs a summarizing strategy (SummaryBuffer, Compacting, "
            f"TieredSummary): {type(strategy).__name__} does not summarize, so pruning "
            f"would delete messages that nothing remembers"
        )
    if id_factory is not None and not callable(id_factory):
        raise TypeError(f"id_factory must be callable, got {type(id_factory).__name__}")
