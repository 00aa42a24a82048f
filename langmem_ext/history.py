"""A chat history whose ``messages`` are a strategy's view: the chat-history surface.

``ManagedChatMessageHistory(history, strategy)`` wraps any LangChain
``BaseChatMessageHistory`` (in memory, SQL, PostgreSQL, Redis ...), the *backing* history, and
is itself one, so it drops into ``RunnableWithMessageHistory`` and anything else that takes a
chat history:

* **Reading** (``messages``, ``aget_messages``) returns the strategy's view of the backing
  messages: the running summary plus the recent messages that fit. Reading is read-only: it
  uses :meth:`Strategy.view <langmem_ext.engine.Strategy.view>`, which never calls the summarizer
  and never writes anything; a fold that would be due is deferred to the next write.
* **Writing** (``add_messages``, ``aadd_messages``) appends to the backing history, then runs
  :meth:`Strategy.apply <langmem_ext.engine.Strategy.apply>` on the full backing history with
  the stored :class:`~langmem_ext.state.MemoryState` (folding into the summary when it is due)
  and stores the new state. This is where the summarizer runs, once per fold, not per read.

The state lives in a LangGraph ``BaseStore`` (``InMemoryStore`` by default; ``SqliteStore``,
``PostgresStore`` or their async variants to persist it) at ``key.namespace("history")``, item
``"state"``: the summary of a database-backed history survives restarts and is shared by every
process using the same store and key. The legacy ``ConversationSummaryBufferMemory`` kept its
summary in process memory only, so a restart lost it.

The backing history keeps every message, unless ``prune_backing=True``: then the messages that
were folded into the summary are removed from it after the fold succeeded (see
:meth:`ManagedChatMessageHistory.add_messages` for the order of the steps and what a crash in
between leaves behind).

Concurrency: there is no lock. Two writers adding to the same key at the same time can each
store a state computed without the other's messages; the next write notices (the history is not
the one the state was computed on) and recounts, but a fold of one of them may be lost. Serialize
writes per key (one conversation is normally one request at a time).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from langchain_core.chat_history import BaseChatMessageHistory
from langchain_core.messages import BaseMessage, SystemMessage
from langgraph.store.base import BaseStore
from langgraph.store.memory import InMemoryStore

from langmem_ext.engine import Strategy
from langmem_ext.errors import MemoryBudgetExceeded
from langmem_ext.graph import removals
from langmem_ext.keys import MemoryKey
from langmem_ext.state import MemoryState

__all__ = ["STATE_ITEM", "ManagedChatMessageHistory"]

#: the store item (under ``key.namespace("history")``) that holds the MemoryState
STATE_ITEM = "state"

IdFactory = Callable[[BaseMessage], str]


def _uuid_id(_message: BaseMessage) -> str:
    return str(uuid.uuid4())


class ManagedChatMessageHistory(BaseChatMessageHistory):
    """A ``BaseChatMessageHistory`` that shows the model a strategy's view of another one.

    Args:
        history: the backing ``BaseChatMessageHistory``; it receives every message added.
        strategy: any langmem_ext strategy. A summarizing one (``SummaryBuffer``,
            ``Compacting``, ``TieredSummary``) keeps a running summary; ``TokenBudget`` or
            ``SlidingWindow`` only trim the view (the backing history keeps everything).
        store: where the :class:`~langmem_ext.state.MemoryState` lives (a LangGraph
            ``BaseStore``); default: a new ``InMemoryStore``, which lasts as long as this
            process. Use a persistent store with a persistent backing history, or the summary is
            lost on restart while the messages are not. The async methods use the store's async
            API: ``SqliteStore`` has none (use ``AsyncSqliteStore`` there).
        key: the :class:`~langmem_ext.keys.MemoryKey` (tenant, user, session) that owns this
            memory. Different keys never share state, whatever their text.
        config: instead of ``key``: a runnable config whose ``configurable`` holds
            ``tenant_id``, ``user_id`` and ``session_id`` (or ``thread_id``), read with
            :meth:`MemoryKey.from_config <langmem_ext.keys.MemoryKey.from_config>`.
        require_explicit_key: with ``config`` (or with neither ``key`` nor ``config``), fail
            with :class:`~langmem_ext.keys.MissingKeyError` instead of falling back to
            ``"default"`` for a missing part: a multi-tenant service never reads a shared memory.
        prune_backing: remove the messages folded into the summary from the backing history,
            which then stays bounded. Needs a summarizing strategy (with a trimming one it would
            delete messages that nothing remembers).
        id_factory: gives an id to each added message that has none (default: a UUID4), so the
            state and the pruning can find it again. The caller's message is not changed: a copy
            with the id is appended.

    Example:
        >>> from langchain_core.chat_history import InMemoryChatMessageHistory
        >>> from langchain_core.messages import AIMessage, HumanMessage
        >>> from langmem_ext import SlidingWindow
        >>> from langmem_ext.keys import MemoryKey
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
        prune_backing: bool = False,
        id_factory: IdFactory | None = None,
    ) -> None:
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
        if key is not None and config is not None:
            raise ValueError("pass either key= or config=, not both")
        if key is None:
            key = MemoryKey.from_config(config, require_explicit_key=require_explicit_key)
        elif not isinstance(key, MemoryKey):
            raise TypeError(f"key must be a MemoryKey, got {type(key).__name__}")
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
        super().__init__()
        self.history = history
        self.strategy = strategy
        self.store: BaseStore = store if store is not None else InMemoryStore()
        self.key = key
        self.prune_backing = prune_backing
        self.id_factory: IdFactory = id_factory or _uuid_id

    @classmethod
    def from_config(
        cls,
        history: BaseChatMessageHistory,
        strategy: Strategy,
        config: Mapping[str, Any] | None,
        *,
        store: BaseStore | None = None,
        require_explicit_key: bool = False,
        prune_backing: bool = False,
        id_factory: IdFactory | None = None,
    ) -> ManagedChatMessageHistory:
        """The history for the key in ``config["configurable"]`` (``tenant_id``, ``user_id``,
        ``session_id`` or ``thread_id``); see :meth:`MemoryKey.from_config
        <langmem_ext.keys.MemoryKey.from_config>`."""
        return cls(
            history,
            strategy,
            store=store,
            config=config if config is not None else {},
            require_explicit_key=require_explicit_key,
            prune_backing=prune_backing,
            id_factory=id_factory,
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
        newest messages that fit and a note with the number not shown.
        """
        return self.strategy.view(self.history.messages, self._load(), key=self.key).messages

    @messages.setter
    def messages(self, value: list[BaseMessage]) -> None:
        raise AttributeError(
            "ManagedChatMessageHistory.messages is the strategy's view and cannot be assigned; "
            "use clear() and add_messages()"
        )

    async def aget_messages(self) -> list[BaseMessage]:
        """Async :attr:`messages`: the backing history and the store are read with their async
        API; nothing is written and the summarizer is never called."""
        messages = await self.history.aget_messages()
        return (await self.strategy.aview(messages, await self._aload(), key=self.key)).messages

    @property
    def state(self) -> MemoryState | None:
        """The stored :class:`~langmem_ext.state.MemoryState`, or ``None`` before the first
        write (or after :meth:`clear`)."""
        return self._load()

    async def aget_state(self) -> MemoryState | None:
        """Async :attr:`state`."""
        return await self._aload()

    @property
    def summary(self) -> dict[str, str]:
        """The running summary, section -> text (``{}`` until the first fold)."""
        state = self._load()
        return state.sections if state is not None else {}

    # -- writing: append, apply, store (and prune) ----------------------------------------------

    def add_messages(self, messages: Sequence[BaseMessage]) -> None:
        """Append ``messages`` to the backing history, then run the strategy and store its state.

        Steps, in this order: (1) append (messages without an id get one, on a copy); (2) read
        the backing history back and run ``strategy.apply`` with the stored state (the
        summarizer runs here when a fold is due); (3) store the new state. If ``apply`` raises
        :class:`~langmem_ext.errors.MemoryBudgetExceeded` after a fold succeeded, that fold's
        state (``error.state``) is stored before the error propagates, so it is not lost.

        With ``prune_backing=True`` and messages folded: (4) the backing history is cleared and
        the messages that are not folded are added back (``BaseChatMessageHistory`` has no
        delete), then (5) the state, rebased on the shorter history, is stored. This is **not
        atomic**. It only happens after the fold succeeded and step (3) stored a state that
        covers the folded messages, so a crash after (4) leaves a correct summary and history
        (the next turn finds the folded messages gone and recounts once). A crash *inside* (4),
        between the clear and the add, loses the unfolded messages of the backing history; use
        a backing history whose ``clear`` + ``add_messages`` you can make transactional if
        that matters.
        """
        new = self._with_ids(messages)
        if not new:  # nothing new: no write, the view is what a read shows
            return
        self.history.add_messages(new)
        full = self.history.messages
        previous = self._load()
        try:
            result = self.strategy.apply(full, previous, key=self.key)
        except MemoryBudgetExceeded as error:
            if error.state is not None:
                self._save(error.state)
            raise
        self._save(result.state)
        pruned = self._pruned(full, result.state)
        if pruned is not None:
            kept, rebased = pruned
            self.history.clear()
            self.history.add_messages(kept)
            self._save(rebased)

    async def aadd_messages(self, messages: Sequence[BaseMessage]) -> None:
        """Async :meth:`add_messages`: the same steps with the backing history's and the
        store's async API and ``strategy.aapply``."""
        new = self._with_ids(messages)
        if not new:  # nothing new: no write, the view is what a read shows
            return
        await self.history.aadd_messages(new)
        full = await self.history.aget_messages()
        previous = await self._aload()
        try:
            result = await self.strategy.aapply(full, previous, key=self.key)
        except MemoryBudgetExceeded as error:
            if error.state is not None:
                await self._asave(error.state)
            raise
        await self._asave(result.state)
        pruned = self._pruned(full, result.state)
        if pruned is not None:
            kept, rebased = pruned
            await self.history.aclear()
            await self.history.aadd_messages(kept)
            await self._asave(rebased)

    def clear(self) -> None:
        """Clear the backing history and delete the stored state (the summary with it)."""
        self.history.clear()
        self.store.delete(self.namespace, STATE_ITEM)

    async def aclear(self) -> None:
        """Async :meth:`clear`."""
        await self.history.aclear()
        await self.store.adelete(self.namespace, STATE_ITEM)

    # -- internals ------------------------------------------------------------------------------

    def _with_ids(self, messages: Sequence[BaseMessage]) -> list[BaseMessage]:
        """The messages to append: each one without an id is copied with a new id."""
        if isinstance(messages, (str, bytes, BaseMessage)) or not isinstance(messages, Sequence):
            raise TypeError(
                f"messages must be a sequence of BaseMessage, got {type(messages).__name__}"
            )
        for i, message in enumerate(messages):
            if not isinstance(message, BaseMessage):
                raise TypeError(
                    f"messages[{i}] must be a BaseMessage, got {type(message).__name__}"
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
        """With ``prune_backing``: the messages to keep and the rebased state, or ``None`` when
        nothing is to be removed."""
        if not self.prune_backing or not state.folded:
            return None
        body_start = 1 if full and isinstance(full[0], SystemMessage) else 0
        end = body_start + state.folded
        # removals() removes by id and skips a turn when a folded message has none (a backing
        # history written before this wrapper); this one rewrites the whole backing history,
        # so a placeholder id on those (removed anyway) messages is enough
        probe = [
            m.model_copy(update={"id": f"langmem-ext-pruned-{i}"})
            if body_start <= i < end and not m.id
            else m
            for i, m in enumerate(full)
        ]
        removed, rebased = removals(probe, state, self.strategy.counter)
        if not removed:
            return None
        kept = [*full[:body_start], *full[body_start + len(removed) :]]
        return kept, rebased

    def _load(self) -> MemoryState | None:
        return _state(self.store.get(self.namespace, STATE_ITEM))

    async def _aload(self) -> MemoryState | None:
        return _state(await self.store.aget(self.namespace, STATE_ITEM))

    def _save(self, state: MemoryState) -> None:
        self.store.put(self.namespace, STATE_ITEM, state.to_dict(), index=False)

    async def _asave(self, state: MemoryState) -> None:
        await self.store.aput(self.namespace, STATE_ITEM, state.to_dict(), index=False)


def _state(item: Any) -> MemoryState | None:
    if item is None:
        return None
    return MemoryState.from_dict(item.value)
