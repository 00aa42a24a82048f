"""A checkpoint-aware LangGraph node: memory that lives in the graph's own state.

``MemoryNode(strategy)`` runs a strategy on the graph's messages before the model node. Its
:class:`~langmem_ext.core.state.MemoryState` is written to the graph state (``state_key``), so the
checkpointer persists it, a restart resumes it, time travel rewinds it and threads never share it.
It works as ``pre_model_hook`` of ``create_react_agent`` and as an explicit node in a
``StateGraph``; it is a Runnable with both ``invoke`` and ``ainvoke``.

Modes:

* ``"view"`` (default): the full history stays in state; the node writes the view to
  ``output_key`` (``llm_input_messages``, what ``create_react_agent`` sends to the model).
* ``"rewrite"``: messages that were folded into the summary (summarizing strategies), or trimmed
  (TokenBudget, SlidingWindow), are removed from state with ``RemoveMessage`` by id, so
  checkpoints stay bounded. Folded messages are removed only after their fold succeeded. With a
  strategy that does not summarize, rewrite mode *deletes* what it trims: use view mode when the
  history must be kept.

The view is never empty when the history is not, so the prebuilt agent's fallback to the full
history on an empty ``llm_input_messages`` cannot happen.

LangGraph silently drops a node's writes to keys that are not channels of the graph's state. A
``MemoryNode`` in a ``StateGraph(MessagesState)``, or in ``create_react_agent`` without
``state_schema=MemoryAgentState``, would therefore run, and the model would get the full history
or nothing would persist, with no error anywhere. So the node checks, when it runs inside a graph,
that the graph has its channels: a missing ``llm_input_messages`` channel (the view cannot reach
the model) or, in rewrite mode with a summarizer, a missing ``memory`` channel (messages removed,
their summary dropped) raises :class:`GraphSchemaError`; a missing ``memory`` channel otherwise
(only persistence is lost) warns once with :class:`GraphSchemaWarning`. Both name the schema to
use.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Mapping, Sequence
from typing import Annotated, Any, Literal

from langchain_core.messages import AnyMessage, BaseMessage, RemoveMessage
from langchain_core.runnables import RunnableConfig, RunnableLambda
from langgraph.channels.ephemeral_value import EphemeralValue
from langgraph.graph.message import add_messages
from langgraph.managed import RemainingSteps
from langgraph.store.base import BaseStore
from typing_extensions import NotRequired, TypedDict

from langmem_ext.core.keys import MemoryKey
from langmem_ext.core.result import MemoryResult
from langmem_ext.core.state import MemoryState
from langmem_ext.core.tokens import TokenCounter
from langmem_ext.core.transitions import removals_for_rewrite
from langmem_ext.errors import (
    GraphSchemaError,  # re-exported here
)
from langmem_ext.integrations.fold_sharing import StoreSharedFolds, graph_store, shared_folds_for
from langmem_ext.integrations.tracing import (
    ReportCallback,
    check_on_report,
    reported_key,
    tell_report,
    traced_aapply,
    traced_apply,
)
from langmem_ext.strategies.engine import Strategy
from langmem_ext.strategies.shared_folds import folds_shared_in

try:  # the key under which LangGraph gives a running node a reader of the graph's channels
    from langgraph._internal._constants import CONFIG_KEY_READ
except ImportError:  # pragma: no cover - older/newer layouts; the value has not changed
    CONFIG_KEY_READ = "__pregel_read"

__all__ = [
    "GraphSchemaError",
    "GraphSchemaWarning",
    "MemoryAgentState",
    "MemoryMessagesState",
    "MemoryNode",
    "Mode",
    "removals",
]

Mode = Literal["view", "rewrite"]

_SCHEMA_FIX = (
    "Build the graph on langmem_ext's state schema (or a subclass of it): "
    "StateGraph(MemoryMessagesState) for an explicit node, "
    "create_react_agent(model, tools, pre_model_hook=node, state_schema=MemoryAgentState) "
    "for the prebuilt agent"
)


class GraphSchemaWarning(UserWarning):
    """A :class:`MemoryNode` runs in a graph whose state has no memory channel: the view reaches
    the model, but the memory state is dropped, so every turn starts from scratch."""


def _last_value(_old: Any, new: Any) -> Any:
    """Reducer for the memory channel: the newest state replaces the old one."""
    return new


class MemoryMessagesState(TypedDict):
    """``MessagesState`` plus the memory channel (a JSON dict, so every checkpointer stores it),
    the latest call's report (``memory_report``, a JSON dict too) and the view for the model.
    Extend it like ``MessagesState``.

    ``llm_input_messages`` is an ``EphemeralValue`` channel: the view lives from the memory step
    to the model step and is then cleared, so it is stored only in the checkpoint taken between
    the two (where an interrupt before the model, or a replay from there, still finds it) and
    not in every later checkpoint. A plain ``list`` channel would store a copy of the view in
    every checkpoint of the thread. The model node must therefore run in the step right after
    the memory node (an edge ``memory -> model``, as ``pre_model_hook`` does).
    """

    messages: Annotated[list[AnyMessage], add_messages]
    memory: NotRequired[Annotated[dict[str, Any] | None, _last_value]]
    #: the latest call's MemoryReport as a dict (``MemoryReport.from_dict`` reads it back)
    memory_report: NotRequired[Annotated[dict[str, Any] | None, _last_value]]
    llm_input_messages: NotRequired[Annotated[list[AnyMessage], EphemeralValue(list)]]


class MemoryAgentState(MemoryMessagesState):
    """State schema for ``create_react_agent(..., state_schema=MemoryAgentState)``."""

    remaining_steps: NotRequired[RemainingSteps]


def _get(state: Any, key: str) -> Any:
    if isinstance(state, Mapping):
        return state.get(key)
    return getattr(state, key, None)


def check_surface_args(surface: str, strategy: object, mode: object) -> None:
    """What every graph surface checks first: a langmem_ext strategy and a known mode."""
    if not isinstance(strategy, Strategy):
        raise TypeError(
            f"{surface} needs a langmem_ext strategy (TokenBudget, SummaryBuffer, ...), "
            f"got {type(strategy).__name__}"
        )
    if mode not in ("view", "rewrite"):
        raise ValueError(f"mode must be 'view' or 'rewrite', got {mode!r}")


class MemoryNode(RunnableLambda[Any, dict[str, Any]]):
    """Run ``strategy`` on the graph's messages; write the view and the new memory state.

    Example:
        >>> from langmem_ext import MemoryNode, TokenBudget
        >>> node = MemoryNode(TokenBudget(max_tokens=4_000))
        >>> from langchain_core.messages import HumanMessage
        >>> update = node.invoke({"messages": [HumanMessage("hi", id="1")]})
        >>> [m.content for m in update["llm_input_messages"]], update["memory"]["seen"]
        (['hi'], 1)

    In a graph, the state must have the node's channels (``MemoryMessagesState`` /
    ``MemoryAgentState`` or a subclass): the node raises :class:`GraphSchemaError` when the view
    could not reach the model, and warns (:class:`GraphSchemaWarning`, once) when only the memory
    state would be dropped. ``check_schema=False`` turns the check off, for a node that another
    node calls itself and whose returned dict it uses.

    Workers: with a strategy that folds in the background (``prefetch_tokens``), a fold
    started by one worker process is adopted by the worker that serves the thread's next turn,
    not folded again there, through the graph's store (``share_folds=True``, the default), or
    the store passed as ``share_folds``; ``False`` turns it off. See
    :mod:`langmem_ext.integrations.fold_sharing`.

    What the memory did: each call writes its
    :class:`~langmem_ext.core.result.MemoryReport` as a dict to ``report_key``
    (``"memory_report"``, a channel of ``MemoryMessagesState``; ``None``: not written; a graph
    state without that channel drops it silently, nothing else depends on it), calls
    ``on_report(report, key)`` (an exception in it is logged and ignored), and, when the run
    has callback handlers (LangSmith, ``config={"callbacks": [...]}``), runs the strategy as a
    child run ``langmem_ext.memory`` whose outputs are the report (see
    :mod:`langmem_ext.integrations.tracing`).
    """

    def __init__(
        self,
        strategy: Strategy,
        *,
        mode: Mode = "view",
        messages_key: str = "messages",
        output_key: str = "llm_input_messages",
        state_key: str = "memory",
        name: str = "memory",
        require_explicit_key: bool = False,
        check_schema: bool = True,
        share_folds: bool | BaseStore = True,
        report_key: str | None = "memory_report",
        on_report: ReportCallback | None = None,
    ) -> None:
        check_surface_args("MemoryNode", strategy, mode)
        self.on_report = check_on_report(on_report)
        self.report_key = report_key
        self.share_folds = share_folds
        self.strategy = strategy
        self.mode: Mode = mode
        self.messages_key = messages_key
        self.output_key = output_key
        self.state_key = state_key
        self.require_explicit_key = require_explicit_key
        self.check_schema = check_schema
        self._warned = False
        super().__init__(self._run, afunc=self._arun, name=name)

    def __repr__(self) -> str:
        return f"MemoryNode({self.strategy!r}, mode={self.mode!r})"

    def _inputs(self, state: Any) -> tuple[Sequence[BaseMessage], MemoryState | None]:
        messages = _get(state, self.messages_key)
        if messages is None:
            raise KeyError(
                f"MemoryNode found no {self.messages_key!r} in the graph state; set "
                "messages_key= to the channel that holds the conversation"
            )
        previous = _get(state, self.state_key)
        return messages, MemoryState.coerce(previous) if previous is not None else None

    def _key(self, config: RunnableConfig | None) -> MemoryKey | None:
        """Whose memory this is, for strategies that keep memory outside the state (Retrieval):
        ``tenant_id`` / ``user_id`` / ``thread_id`` from the run's ``configurable``."""
        if not self.strategy.uses_key:
            return None
        return MemoryKey.from_config(config, require_explicit_key=self.require_explicit_key)

    def _check_channels(self, config: RunnableConfig | None) -> None:
        """Inside a graph, fail (or warn once) if the graph's state lacks our output channels.

        LangGraph hands a running node a reader of the graph's channels (``CONFIG_KEY_READ``);
        reading a key that is not a channel raises ``KeyError``. Only the graph the node runs in
        is checked: outside a graph (``node.invoke(state)`` in a script or a test) there is no
        reader, and a graph without the messages channel (the functional API, or a node that
        calls this one itself and uses the returned dict) is not the node's own graph.
        """
        if not self.check_schema or config is None:
            return
        read = (config.get("configurable") or {}).get(CONFIG_KEY_READ)
        if not callable(read) or not _has_channel(read, self.messages_key):
            return
        node = (config.get("metadata") or {}).get("langgraph_node")
        node = node if isinstance(node, str) else None
        where = "MemoryNode" if node is None else f"MemoryNode {node!r}"

        def refused(channel: str, problem: str, fix: str) -> GraphSchemaError:
            return GraphSchemaError(
                f"{where} {problem} {_SCHEMA_FIX}; or set {fix}. If you call the node yourself "
                "and use the returned dict, pass check_schema=False.",
                channel=channel,
                node=node,
            )

        if _has_channel(read, self.output_key) is False:
            lost = (
                "the model gets the full history instead"
                if self.mode == "view"
                else "the model never sees the summary or the clipped messages"
            )
            raise refused(
                self.output_key,
                f"writes the view for the model to {self.output_key!r}, but the graph's state "
                f"has no {self.output_key!r} channel: LangGraph drops the write and {lost}.",
                "output_key= to the channel your model node reads",
            )
        if _has_channel(read, self.state_key) is not False:
            return
        if self.mode == "rewrite" and self.strategy.summarizer is not None:
            raise refused(
                self.state_key,
                f"(mode='rewrite') removes summarized messages from {self.messages_key!r} and "
                f"keeps their summary in {self.state_key!r}, but the graph's state has no "
                f"{self.state_key!r} channel: LangGraph drops it, so the summary would be lost "
                "with the messages.",
                "state_key= to a channel of yours (a JSON dict, newest value wins)",
            )
        if not self._warned:
            self._warned = True
            warnings.warn(
                f"{where} writes its memory state to {self.state_key!r}, but the graph's state "
                f"has no {self.state_key!r} channel: LangGraph drops it, so nothing persists "
                "between turns and every turn starts from scratch (a summarizing strategy "
                f"summarizes the whole overflow again each turn). {_SCHEMA_FIX}.",
                GraphSchemaWarning,
                stacklevel=2,
            )

    def _run(self, state: Any, config: RunnableConfig) -> dict[str, Any]:
        self._check_channels(config)
        messages, previous = self._inputs(state)
        key = self._key(config)
        with folds_shared_in(self._shared(config)):
            result = traced_apply(self.strategy, messages, previous, config, key=key)
        self._report(result, key, config)
        return self._update(messages, result)

    async def _arun(self, state: Any, config: RunnableConfig) -> dict[str, Any]:
        self._check_channels(config)
        messages, previous = self._inputs(state)
        key = self._key(config)
        with folds_shared_in(self._shared(config)):
            result = await traced_aapply(self.strategy, messages, previous, config, key=key)
        self._report(result, key, config)
        return self._update(messages, result)

    def _report(self, result: MemoryResult, key: MemoryKey | None, config: RunnableConfig) -> None:
        """Hand the call's report to ``on_report`` (never raising into the graph)."""
        if self.on_report is not None:
            where = reported_key(self.strategy, key, config)
            tell_report(self.on_report, result.report, where, "MemoryNode")

    def _shared(self, config: RunnableConfig | None) -> StoreSharedFolds | None:
        """Where this run shares background folds with other workers: the graph's store, or
        the one passed as ``share_folds`` (see :mod:`langmem_ext.integrations.fold_sharing`)."""
        return shared_folds_for(self.share_folds, config, graph_store(config))

    def _update(self, messages: Sequence[BaseMessage], result: MemoryResult) -> dict[str, Any]:
        state = result.state
        update: dict[str, Any] = {self.output_key: result.messages}
        if self.mode == "rewrite":
            removed, state = removals(messages, state, self.strategy.counter)
            if removed:
                update[self.messages_key] = [RemoveMessage(id=i) for i in removed]
        update[self.state_key] = state.to_dict()
        if self.report_key is not None:
            update[self.report_key] = result.report.to_dict()
        return update


def _has_channel(read: Callable[..., Any], key: str) -> bool | None:
    """Whether the running graph has a channel ``key`` (``None``: cannot tell). The reader raises
    ``KeyError`` for a key that is not a channel, and reads an empty channel as ``None``."""
    try:
        read(key)
    except KeyError:
        return False
    except Exception:  # a reader of another shape (another LangGraph version): do not guess
        return None
    return True


def removals(
    messages: Sequence[BaseMessage], state: MemoryState, counter: TokenCounter
) -> tuple[list[str], MemoryState]:
    """Rewrite mode: the ids to remove from the graph state, and the memory state as it will be
    once they are gone. The rule lives with the other state rules
    (:func:`langmem_ext.core.transitions.removals_for_rewrite`); this name is kept for callers."""
    return removals_for_rewrite(messages, state, counter)
