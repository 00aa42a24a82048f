"""A drop-in ``ConversationSummaryBufferMemory``, with the legacy class's bugs fixed.

``langchain_classic.memory.ConversationSummaryBufferMemory`` is deprecated but still runs many
chains. This class has the same fields, methods and outputs (same model, same conversation, same
``load_memory_variables`` at every turn, string and message forms), and fixes four bugs:

* **Database-backed histories re-summarized every turn** (langchain#3072, #10078). Legacy
  ``prune`` pops from ``chat_memory.messages``; for a history whose ``messages`` is a fresh list
  per read (``SQLChatMessageHistory``, Redis, Postgres ...) that pops from a copy: nothing leaves
  the buffer, the same old messages are summarized again on every turn and the buffer grows
  without bound. Here the pruned prefix is tracked by a *watermark*: the number of pruned
  messages plus the position-safe key of the last one (its id, or for the id-less messages
  ``save_context`` writes, a digest chained over its content and everything before it, so a
  repeated "continue" or "Sure." is never taken for an earlier one). The backing history
  keeps every message (nothing is deleted, which a crash between "clear" and "re-add" could
  otherwise lose); the buffer is what comes after the watermark; the watermark moves only after
  the summarizer succeeded, so each message is summarized exactly once. Without a ``store`` the
  watermark lives in the object (an :class:`UnpersistedSummaryWarning` says so for a persistent
  history). ``delete_pruned=True`` removes the pruned messages from an in-memory history
  instead, as legacy does.
* **Summary lost with the Python object** (#5053, #14822). With ``store`` (a LangGraph
  ``BaseStore``) and ``key`` (a :class:`~langmem_ext.core.keys.MemoryKey`), the summary and the
  watermark live in the store, and a new object (or process) with the same store, key and history
  continues where the last one stopped. The store is read at the start of every operation.
* **Whole buffer recounted once per popped message** (one API call per count with Anthropic).
  Each message is counted once (a cache by message id and content, shared by every memory built
  on the same model object, so a memory created per request does not recount); the per-request
  overhead of models whose list count is not a plain sum is measured once, as
  :class:`~langmem_ext.core.tokens.ChatModelCounter` does. Pruning decisions are the legacy ones.
* **Sync I/O in the async path.** ``asave_context``/``aprune``/``aclear``/``aload_memory_variables``
  use ``aget_messages``/``aadd_messages``/``aclear``, ``ainvoke`` and the store's async API;
  counting, which may do network I/O, runs in a worker thread.

Also: a summarizer failure loses nothing (legacy has already popped the messages from an
in-memory history when the summarizer raises), a summary that is empty or fails the summary
checks (``validate_summary``, see :mod:`~langmem_ext.summarize.checks`: degenerate
repetition, an echoed prompt, a refusal ...) is a failure too (legacy prunes the messages and
keeps the empty or garbage summary), and a typo'd constructor argument is an error (legacy
ignores unknown arguments).

With ``langchain-classic`` installed (the ``classic`` extra) the class is a
``langchain_classic.base_memory.BaseMemory`` and works in ``ConversationChain`` and the other
legacy chains; without it, it is a plain pydantic model with the same API.
"""

from __future__ import annotations

import asyncio
import functools
import sys
import threading
import warnings
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from langchain_core.callbacks import BaseCallbackManager, Callbacks
from langchain_core.chat_history import BaseChatMessageHistory, InMemoryChatMessageHistory
from langchain_core.language_models import BaseLanguageModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage
from langchain_core.messages import get_buffer_string as _get_buffer_string
from langchain_core.output_parsers import StrOutputParser
from langchain_core.prompts import BasePromptTemplate, PromptTemplate
from langchain_core.runnables import Runnable, RunnableConfig
from langgraph.store.base import BaseStore
from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, model_validator

from langmem_ext.core.keys import MemoryKey
from langmem_ext.core.steps import Flow, arun, run
from langmem_ext.core.tokens import TokenCounter
from langmem_ext.counting.chat_model import ChatModelCounter
from langmem_ext.counting.resolve import as_counter
from langmem_ext.errors import (
    StoredStateError,  # re-exported here
    SummaryRejected,
)
from langmem_ext.integrations._store import Io, StateStore, Within, single
from langmem_ext.integrations.legacy_state import (
    SummaryBufferState,
    batches,
    plan_prune,
    resolve_start,
    watermark,
)
from langmem_ext.summarize.checks import (
    DEFAULT_CHECKS,
    SummaryContext,
    checks_of,
    first_rejection,
)

if TYPE_CHECKING:
    from langchain_classic.base_memory import BaseMemory as _MemoryBase

    HAS_CLASSIC = True
else:
    try:
        from langchain_classic.base_memory import BaseMemory as _MemoryBase

        HAS_CLASSIC = True
    except ImportError:  # the `classic` extra is not installed: same API, plain pydantic model

        class _MemoryBase(BaseModel):
            """Stands in for ``langchain_classic.base_memory.BaseMemory``."""

            model_config = ConfigDict(arbitrary_types_allowed=True)

        HAS_CLASSIC = False

__all__ = [
    "HAS_CLASSIC",
    "SUMMARY_PROMPT",
    "ConversationSummaryBufferMemory",
    "HistoryRewrittenWarning",
    "StoredStateError",
    "SummaryBufferState",
    "UnpersistedSummaryWarning",
]

# The legacy summarizer prompt (langchain_classic.memory.prompt.SUMMARY_PROMPT), verbatim, so
# that the same model gives the same summaries with or without langchain-classic installed.
_SUMMARIZER_TEMPLATE = """Progressively summarize the lines of conversation provided, adding onto the previous summary returning a new summary.

EXAMPLE
Current summary:
The human asks what the AI thinks of artificial intelligence. The AI thinks artificial intelligence is a force for good.

New lines of conversation:
Human: Why do you think artificial intelligence is a force for good?
AI: Because artificial intelligence will help humans reach their full potential.

New summary:
The human asks what the AI thinks of artificial intelligence. The AI thinks artificial intelligence is a force for good because it will help humans reach their full potential.
END OF EXAMPLE

Current summary:
{summary}

New lines of conversation:
{new_lines}

New summary:"""  # noqa: E501

SUMMARY_PROMPT = PromptTemplate(
    input_variables=["summary", "new_lines"], template=_SUMMARIZER_TEMPLATE
)

#: where the state lives in the store: ``key.namespace(STORE_KIND)``, item key ``memory_key``
STORE_KIND = "summary_buffer"


class UnpersistedSummaryWarning(UserWarning):
    """A persistent chat history without a ``store``: the summary and the watermark live only in
    this object, so a new object on the same history (a new request, a restart) starts over and
    summarizes the old messages again. Pass ``store=`` and ``key=``."""


class HistoryRewrittenWarning(UserWarning):
    """The chat history no longer holds the last pruned message where the watermark says.

    Someone cleared or edited the history directly. The summary is kept and stands for everything
    before the first message that is still there (or before the last pruned message, if it was
    found at another position).
    """


# --------------------------------------------------------------------------------------------
# counters shared by every memory built on the same model object

_COUNTERS: OrderedDict[int, ChatModelCounter] = OrderedDict()
_COUNTERS_LOCK = threading.Lock()
_COUNTERS_MAX = 32


def _shared_counter(llm: BaseLanguageModel[Any]) -> ChatModelCounter:
    """The cached counter of ``llm``: a memory object per request keeps the counts of the last.

    Keyed by the model object's identity; the registry holds the model, so an id is never reused
    while its entry exists (bounded LRU, a few dozen models).
    """
    with _COUNTERS_LOCK:
        counter = _COUNTERS.get(id(llm))
        if counter is not None and counter.model is llm:
            _COUNTERS.move_to_end(id(llm))
            return counter
        counter = ChatModelCounter(llm)
        _COUNTERS[id(llm)] = counter
        while len(_COUNTERS) > _COUNTERS_MAX:
            _COUNTERS.popitem(last=False)
        return counter


class _Runtime:
    """A memory object's locks and token counter: process-local, not part of its value.

    Operations on one memory object run one at a time (``sync``, ``async_lock()``). A deep copy
    gets fresh locks and shares the counter (a thread-safe cache); a pickle gets neither, and the
    counter is resolved again on first use. The asyncio lock is created on first use.
    """

    __slots__ = ("_async", "counter", "sync")

    def __init__(self, counter: TokenCounter | None = None) -> None:
        self.sync = threading.RLock()
        self._async: asyncio.Lock | None = None
        self.counter = counter

    def async_lock(self) -> asyncio.Lock:
        if self._async is None:
            self._async = asyncio.Lock()
        return self._async

    def __deepcopy__(self, memo: dict[int, Any]) -> _Runtime:
        return _Runtime(self.counter)

    def __reduce__(self) -> tuple[type[_Runtime], tuple[()]]:
        return (_Runtime, ())


class _DefaultHistory(InMemoryChatMessageHistory):
    """The default ``chat_memory``: an ``InMemoryChatMessageHistory``.

    A subclass only so that the user, who did not pick it, does not get langchain-core's
    deprecation warning for it (legacy shows it); it behaves the same in every respect.
    """


def _caller_stacklevel() -> int:
    """The ``stacklevel`` of the first frame outside this module, pydantic and langchain's
    model base classes: the line that built the memory, whichever base class is in use."""
    internal = (
        "pydantic",
        "langchain_core",
        "langchain_classic.base_memory",
        __name__,
        "langmem_ext.integrations._store",
    )
    frame = sys._getframe(1)
    level = 1
    while frame is not None and str(frame.f_globals.get("__name__", "")).startswith(internal):
        frame = frame.f_back  # type: ignore[assignment]
        level += 1
    return level


def _get_prompt_input_key(inputs: dict[str, Any], memory_variables: list[str]) -> str:
    # langchain_classic.memory.utils.get_prompt_input_key: "stop" is not a prompt input
    prompt_input_keys = list(set(inputs).difference([*memory_variables, "stop"]))
    if len(prompt_input_keys) != 1:
        raise ValueError(f"One input key expected got {prompt_input_keys}")
    return prompt_input_keys[0]


class ConversationSummaryBufferMemory(_MemoryBase):
    """A running summary of the old turns plus the newest messages within ``max_token_limit``.

    Same API and outputs as ``langchain_classic.memory.ConversationSummaryBufferMemory``; see
    the module docstring for the fixes. New, optional fields:

    * ``store`` and ``key``: persist the summary and the watermark in a LangGraph ``BaseStore``
      under ``key.namespace("summary_buffer")`` (item key: ``memory_key``);
    * ``token_counter``: count with this counter instead of ``llm`` (anything
      :func:`~langmem_ext.core.tokens.as_counter` takes: a ``TokenCounter``, ``"gpt-4o"``,
      ``"approximate"`` ...), e.g. to count offline for a model that counts over the network;
    * ``summarize_batch_tokens``: the most tokens of messages one summarizer call reads; a larger
      backlog (say, the first prune of a long history a legacy memory never pruned) is folded in
      several chained calls, the watermark moving after each (None: one call, as legacy);
    * ``delete_pruned``: remove pruned messages from an ``InMemoryChatMessageHistory``, as legacy
      does, instead of keeping them behind the watermark;
    * ``validate_summary``: the checks a new summary must pass (a check ``(summary, context) ->
      str | None``, a sequence of them, or None; default: the built-in
      :data:`~langmem_ext.summarize.checks.DEFAULT_CHECKS`). An empty summary, or one
      a check rejects, is not committed: ``save_context``/``prune`` raise
      :class:`~langmem_ext.errors.SummaryRejected` (with ``reason``), as
      they raise any summarizer failure, and no message is pruned (the buffer keeps them; the
      next ``save_context`` tries again).

    Chain fields that legacy code often passes to the memory as well (``verbose``, ``callbacks``,
    ``callback_manager``, ``tags``, ``metadata``, ``name``) are accepted, as legacy accepts them
    (it ignores every unknown argument). ``callbacks`` (or the deprecated ``callback_manager``),
    ``tags`` and ``metadata`` are passed to the summarizer call, so a tracer sees it; legacy
    drops them. ``verbose`` and ``name`` change nothing, as in legacy. Any other unknown argument
    is an error (a typo such as ``max_tokens_limit`` would otherwise silently use the default).

    Example:
        >>> from langchain_core.language_models.fake_chat_models import FakeListChatModel
        >>> llm = FakeListChatModel(responses=["They said hi."], custom_get_token_ids=str.split)
        >>> memory = ConversationSummaryBufferMemory(llm=llm, max_token_limit=3)
        >>> memory.save_context({"input": "hi there"}, {"output": "hello you"})
        >>> memory.load_memory_variables({})
        {'history': 'System: They said hi.\\nAI: hello you'}
    """

    model_config = ConfigDict(arbitrary_types_allowed=True, extra="forbid")

    # legacy fields (ConversationSummaryBufferMemory, BaseChatMemory, SummarizerMixin)
    llm: BaseLanguageModel  # type: ignore[type-arg]  # BaseLanguageModel[Any] breaks pydantic
    max_token_limit: int = 2000
    moving_summary_buffer: str = ""
    memory_key: str = "history"
    chat_memory: BaseChatMessageHistory = Field(default_factory=_DefaultHistory)
    output_key: str | None = None
    input_key: str | None = None
    return_messages: bool = False
    human_prefix: str = "Human"
    ai_prefix: str = "AI"
    prompt: BasePromptTemplate = SUMMARY_PROMPT  # type: ignore[type-arg]
    summary_message_cls: type[BaseMessage] = SystemMessage
    # new
    store: BaseStore | None = None
    key: MemoryKey | None = None
    token_counter: Any = None
    """A ``CounterLike`` (langmem_ext.core.tokens.as_counter): None counts with ``llm``."""
    summarize_batch_tokens: int | None = None
    delete_pruned: bool = False
    validate_summary: Any = Field(default=DEFAULT_CHECKS, exclude=True)
    """Summary checks (``Summarizer(validate=)``'s argument): a check, a sequence, or None."""
    # chain fields legacy users pass to the memory too (legacy ignores them; see the docstring)
    name: str | None = None
    verbose: bool = False
    callbacks: Callbacks = Field(default=None, exclude=True)
    callback_manager: BaseCallbackManager | None = Field(default=None, exclude=True)
    tags: list[str] | None = None
    metadata: dict[str, Any] | None = None

    _state: SummaryBufferState = PrivateAttr(default_factory=SummaryBufferState)
    _edited: bool = PrivateAttr(default=False)
    _moved: bool = PrivateAttr(default=False)
    _runtime: _Runtime = PrivateAttr(default_factory=lambda: _Runtime())

    @model_validator(mode="after")
    def _validate(self) -> ConversationSummaryBufferMemory:
        prompt_variables = self.prompt.input_variables
        expected_keys = {"summary", "new_lines"}
        if expected_keys != set(prompt_variables):
            # the legacy message, word for word
            raise ValueError(
                "Got unexpected prompt input variables. The prompt expects "
                f"{prompt_variables}, but it should have {expected_keys}."
            )
        if self.max_token_limit <= 0:
            raise ValueError(
                f"max_token_limit must be a positive number of tokens, got {self.max_token_limit!r}"
            )
        if self.store is not None and self.key is None:
            raise ValueError(
                "store is set but key is not: pass key=MemoryKey(tenant, user, session) so that "
                "different conversations never share a summary"
            )
        if self.key is not None and self.store is None:
            raise ValueError(
                "key is set but store is not: the key only names where the summary is persisted "
                "(pass store=..., e.g. langgraph.store.memory.InMemoryStore())"
            )
        if self.delete_pruned and not isinstance(self.chat_memory, InMemoryChatMessageHistory):
            raise ValueError(
                "delete_pruned=True needs an InMemoryChatMessageHistory; with "
                f"{type(self.chat_memory).__name__} the pruned messages stay in the history and "
                "the watermark keeps them out of the buffer (deleting them would need clear() "
                "and re-adding the rest, which loses messages if the process dies in between)"
            )
        if self.summarize_batch_tokens is not None and self.summarize_batch_tokens <= 0:
            raise ValueError(
                "summarize_batch_tokens must be a positive number of tokens or None, got "
                f"{self.summarize_batch_tokens!r}"
            )
        self._runtime.counter = self._resolve_counter()  # fails here on a bad token_counter
        checks_of(self.validate_summary)  # TypeError here on a bad validate_summary
        if self.store is None and not isinstance(self.chat_memory, InMemoryChatMessageHistory):
            warnings.warn(
                f"{type(self.chat_memory).__name__} outlives this memory object, but without "
                "store= the summary and the prune watermark do not: a new memory object on the "
                "same history starts with no summary and summarizes the old messages again. "
                "Pass store= (a LangGraph BaseStore) and key=MemoryKey(...) to persist them.",
                UnpersistedSummaryWarning,
                stacklevel=_caller_stacklevel(),
            )
        self._state = SummaryBufferState(summary=self.moving_summary_buffer)
        # an explicit summary is a local edit: it wins over the store's at the first operation
        self._edited = "moving_summary_buffer" in self.model_fields_set
        return self

    # ---------------------------------------------------------------------------------------
    # read-only API

    @property
    def memory_variables(self) -> list[str]:
        """Will always return list of memory variables."""
        return [self.memory_key]

    @property
    def state(self) -> SummaryBufferState:
        """The summary and the watermark as of the last operation (no I/O)."""
        return self._state

    @property
    def buffer(self) -> str | list[BaseMessage]:
        """String buffer of memory."""
        value: str | list[BaseMessage] = self.load_memory_variables({})[self.memory_key]
        return value

    async def abuffer(self) -> str | list[BaseMessage]:
        """Async memory buffer."""
        value: str | list[BaseMessage] = (await self.aload_memory_variables({}))[self.memory_key]
        return value

    def load_memory_variables(self, inputs: dict[str, Any]) -> dict[str, Any]:
        """Return history buffer."""
        return run(self._load_flow())

    async def aload_memory_variables(self, inputs: dict[str, Any]) -> dict[str, Any]:
        """Asynchronously return key-value pairs given the text input to the chain."""
        return await arun(self._load_flow())

    # ---------------------------------------------------------------------------------------
    # writing

    def save_context(self, inputs: dict[str, Any], outputs: dict[str, str]) -> None:
        """Save context from this conversation to buffer."""
        input_str, output_str = self._get_input_output(inputs, outputs)
        run(self._exclusive(self._save_flow(input_str, output_str)))

    async def asave_context(self, inputs: dict[str, Any], outputs: dict[str, str]) -> None:
        """Asynchronously save context from this conversation to buffer."""
        input_str, output_str = self._get_input_output(inputs, outputs)
        await arun(self._exclusive(self._save_flow(input_str, output_str)))

    def prune(self) -> None:
        """Prune buffer if it exceeds max token limit."""
        run(self._exclusive(self._prune_flow()))

    async def aprune(self) -> None:
        """Asynchronously prune buffer if it exceeds max token limit."""
        await arun(self._exclusive(self._prune_flow()))

    def clear(self) -> None:
        """Clear memory contents: the history, the summary and the watermark."""
        run(self._exclusive(self._clear_flow()))

    async def aclear(self) -> None:
        """Asynchronously clear memory contents."""
        await arun(self._exclusive(self._clear_flow()))

    def predict_new_summary(self, messages: list[BaseMessage], existing_summary: str) -> str:
        """Predict a new summary based on the messages and existing summary."""
        chain, inputs = self._summary_call(messages, existing_summary)
        return chain.invoke(inputs, self._run_config())

    async def apredict_new_summary(self, messages: list[BaseMessage], existing_summary: str) -> str:
        """Predict a new summary based on the messages and existing summary."""
        chain, inputs = self._summary_call(messages, existing_summary)
        return await chain.ainvoke(inputs, self._run_config())

    def _summary_call(
        self, messages: list[BaseMessage], existing_summary: str
    ) -> tuple[Runnable[dict[str, str], str], dict[str, str]]:
        """The legacy summarizer chain (prompt | llm | text) and its input."""
        new_lines = _get_buffer_string(
            messages, human_prefix=self.human_prefix, ai_prefix=self.ai_prefix
        )
        chain = self.prompt | self.llm | StrOutputParser()
        return chain, {"summary": existing_summary, "new_lines": new_lines}

    def _run_config(self) -> RunnableConfig | None:
        """The summarizer call's config: the memory's callbacks, tags and metadata, if any."""
        config: RunnableConfig = {}
        callbacks = self.callbacks
        if callbacks is None and self.callback_manager is not None:
            # its own handlers (a manager passed as callbacks only hands on inheritable ones)
            callbacks = list(self.callback_manager.handlers)
        if callbacks is not None:
            config["callbacks"] = callbacks
        if self.tags:
            config["tags"] = list(self.tags)
        if self.metadata:
            config["metadata"] = dict(self.metadata)
        return config or None

    # ---------------------------------------------------------------------------------------
    # the flows: each operation written once, run by ``_store.run`` (sync) or ``_store.arun``

    def _exclusive(self, flow: Flow[None]) -> Flow[None]:
        """``flow`` under this object's lock: its operations run one at a time."""
        return single(Within(lambda: self._runtime.sync, self._runtime.async_lock, flow))

    def _load_flow(self) -> Flow[dict[str, Any]]:
        """``load_memory_variables``: the summary and the buffer after the watermark."""
        yield from self._refresh_flow()
        messages = yield self._reading_history()
        start = self._start(messages)
        yield from self._save_moved_watermark_flow()
        return {self.memory_key: self._render(messages[start:])}

    def _save_flow(self, input_str: str, output_str: str) -> Flow[None]:
        turn = [HumanMessage(content=input_str), AIMessage(content=output_str)]
        yield Io.of(self.chat_memory.add_messages, self.chat_memory.aadd_messages, turn)
        yield from self._prune_flow()

    def _prune_flow(self) -> Flow[None]:
        """The legacy prune: fold the oldest buffer messages while the buffer is over
        ``max_token_limit``, in batches; the watermark moves after each summarizer call."""
        yield from self._refresh_flow()
        # a copy: an in-memory history returns its live list, which delete_pruned shortens
        messages = list((yield self._reading_history()))
        start = self._start(messages)
        buffer = messages[start:]
        counts, overhead = yield self._counting(buffer)
        k = plan_prune(counts, overhead, self.max_token_limit)
        if k == 0:
            yield from self._save_moved_watermark_flow()
            return
        predict = self.predict_new_summary, self.apredict_new_summary
        done = 0
        for size in batches(counts[:k], self.summarize_batch_tokens):
            batch = buffer[done : done + size]
            summary = yield Io.of(*predict, batch, self._state.summary)
            self._check_summary(summary, batch, self._state.summary)  # before anything moves
            done += size
            yield from self._commit_flow(self._folded_state(messages, start + done, size, summary))

    def _check_summary(
        self, summary: Any, batch: Sequence[BaseMessage], existing_summary: str
    ) -> None:
        """Raise :class:`SummaryRejected` when ``summary`` (the summarizer's answer for
        ``batch``) is empty or fails a check: it is not committed and nothing is pruned."""
        reason: str | None
        if not isinstance(summary, str) or not summary.strip():
            reason = f"the summarizer returned an empty summary ({summary!r})"
        else:
            new_lines = _get_buffer_string(
                batch, human_prefix=self.human_prefix, ai_prefix=self.ai_prefix
            )
            try:
                prompt: tuple[BaseMessage, ...] = (
                    HumanMessage(self.prompt.format(summary=existing_summary, new_lines=new_lines)),
                )
            except Exception:  # a custom prompt that does not format to text: checks without it
                prompt = ()
            context = SummaryContext(
                section="summary",
                previous=existing_summary,
                transcript=tuple(new_lines.splitlines()),
                prompt=prompt,
            )
            reason = first_rejection(summary, context, checks_of(self.validate_summary))
        if reason is None:
            return
        raise SummaryRejected(
            f"the new summary was rejected: {reason}; no message was pruned (the buffer keeps "
            f"the {len(batch)} message(s), the next save_context tries again)",
            reason=reason,
            section="summary",
            attempts=1,
        )

    def _clear_flow(self) -> Flow[None]:
        yield Io(self.chat_memory.clear, self.chat_memory.aclear)
        yield from self._commit_flow(SummaryBufferState())

    def _commit_flow(self, state: SummaryBufferState) -> Flow[None]:
        """Store ``state`` (its watermark at 0 with ``delete_pruned``), then adopt it."""
        stored = watermark(state, (), 0) if self.delete_pruned else state
        yield from self._put_flow(stored)
        self._set_state(self._apply_delete(state))

    def _put_flow(self, state: SummaryBufferState) -> Flow[None]:
        states = self._states()
        if states is not None:
            yield states.saving(state)

    def _refresh_flow(self) -> Flow[None]:
        """Adopt the stored state (the store is read at the start of every operation); a
        summary the user assigned since the last operation wins, and is stored."""
        states = self._states()
        stored = None if states is None else (yield states.loading())
        write = self._reconcile(stored)
        if write is not None:
            yield from self._put_flow(write)

    def _save_moved_watermark_flow(self) -> Flow[None]:
        # a rewritten history moved the watermark: store it, so the rewrite is reported once
        if self._moved:
            yield from self._put_flow(self._state)
            self._moved = False

    def _reading_history(self) -> Io[list[BaseMessage]]:
        return Io(lambda: self.chat_memory.messages, self.chat_memory.aget_messages)

    def _counting(self, buffer: Sequence[BaseMessage]) -> Io[tuple[list[int], int]]:
        """Count ``buffer``: in a worker thread from async code when the counter does I/O."""
        count = functools.partial(self._count, buffer)

        async def acount() -> tuple[list[int], int]:
            if getattr(self._counter, "is_blocking", False):
                return await asyncio.to_thread(count)
            return count()

        return Io(count, acount)

    def _resolve_counter(self) -> TokenCounter:
        if self.token_counter is None:
            return _shared_counter(self.llm)
        return as_counter(self.token_counter)  # TypeError (not wrapped by pydantic) if unusable

    @property
    def _counter(self) -> TokenCounter:
        if self._runtime.counter is None:  # unpickled
            self._runtime.counter = self._resolve_counter()
        return self._runtime.counter

    def _count(self, buffer: Sequence[BaseMessage]) -> tuple[list[int], int]:
        counter = self._counter
        counts = [counter.count_message(m) for m in buffer]
        # the per-request overhead (0 for a plain sum); ChatModelCounter measures it on its first
        # message, so it is read after counting
        return counts, counter.count_messages(())

    def _folded_state(
        self, messages: Sequence[BaseMessage], end: int, size: int, summary: str
    ) -> SummaryBufferState:
        """The state once ``messages[:end]`` are folded, the last ``size`` of them just now."""
        if self.delete_pruned:
            # the watermark is always 0 here: the history starts with the ``size`` messages just
            # folded, deleted in place once the state is written (see _apply_delete)
            return SummaryBufferState(summary=summary, pruned=size, last_pruned_key=None)
        return watermark(SummaryBufferState(summary=summary), messages, end)

    def _apply_delete(self, state: SummaryBufferState) -> SummaryBufferState:
        if not self.delete_pruned or state.pruned == 0:
            return state
        history = self.chat_memory
        assert isinstance(history, InMemoryChatMessageHistory)
        del history.messages[: state.pruned]
        return replace(state, pruned=0, last_pruned_key=None, last_pruned_window=())

    def _set_state(self, state: SummaryBufferState) -> None:
        self._state = state
        self.moving_summary_buffer = state.summary
        self._edited = False
        self._moved = False

    # ---------------------------------------------------------------------------------------
    # the store and the watermark

    def _namespace(self) -> tuple[str, ...]:
        assert self.key is not None
        return self.key.namespace(STORE_KIND)

    def _states(self) -> StateStore[SummaryBufferState] | None:
        """Where the state is persisted (``None``: no ``store``, it lives in this object)."""
        if self.store is None:
            return None
        namespace = self._namespace()
        where = f"store item {namespace!r}/{self.memory_key!r}"
        decode = functools.partial(SummaryBufferState.from_dict, where=where)
        return StateStore(self.store, namespace, self.memory_key, decode=decode, sync_fallback=True)

    def _local_edit(self) -> str | None:
        """The summary the user assigned (or passed) since the last operation, if any."""
        if self._edited or self.moving_summary_buffer != self._state.summary:
            return self.moving_summary_buffer
        return None

    def _reconcile(self, stored: SummaryBufferState | None) -> SummaryBufferState | None:
        """Adopt the stored state; returns the state to write back when there is a local edit."""
        edit = self._local_edit()
        state = self._state if stored is None else stored
        if edit is not None:
            state = replace(state, summary=edit)
        self._set_state(state)
        return state if edit is not None and self.store is not None else None

    def _start(self, messages: Sequence[BaseMessage]) -> int:
        start, rewritten = resolve_start(messages, self._state)
        if rewritten:
            warnings.warn(
                f"the chat history was changed underneath the memory: the last pruned message "
                f"(#{self._state.pruned}, {self._state.last_pruned_key}) is "
                + (f"now #{start}" if start else "gone")
                + "; the summary stands for the messages before it",
                HistoryRewrittenWarning,
                stacklevel=_caller_stacklevel(),
            )
            self._state = watermark(self._state, messages, start)
            self._moved = True
        return start

    # ---------------------------------------------------------------------------------------
    # formatting (legacy semantics)

    def _render(self, messages: Sequence[BaseMessage]) -> str | list[BaseMessage]:
        buffer = list(messages)
        if self._state.summary != "":
            buffer = [self.summary_message_cls(content=self._state.summary), *buffer]
        if self.return_messages:
            return buffer
        return _get_buffer_string(buffer, human_prefix=self.human_prefix, ai_prefix=self.ai_prefix)

    def _get_input_output(self, inputs: dict[str, Any], outputs: dict[str, str]) -> tuple[str, str]:
        if self.input_key is None:
            prompt_input_key = _get_prompt_input_key(inputs, self.memory_variables)
        else:
            prompt_input_key = self.input_key
        if self.output_key is None:
            if len(outputs) == 1:
                output_key = next(iter(outputs.keys()))
            elif "output" in outputs:
                output_key = "output"
                warnings.warn(
                    f"'{self.__class__.__name__}' got multiple output keys:"
                    f" {outputs.keys()}. The default 'output' key is being used."
                    f" If this is not desired, please manually set 'output_key'.",
                    stacklevel=3,
                )
            else:
                raise ValueError(
                    f"Got multiple output keys: {outputs.keys()}, cannot "
                    f"determine which to store in memory. Please set the "
                    f"'output_key' explicitly."
                )
        else:
            output_key = self.output_key
        return inputs[prompt_input_key], outputs[output_key]
