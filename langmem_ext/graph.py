"""A checkpoint-aware LangGraph node: memory that lives in the graph's own state.

``MemoryNode(strategy)`` runs a strategy on the graph's messages before the model node. Its
:class:`~langmem_ext.state.MemoryState` is written to the graph state (``state_key``), so the
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
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Annotated, Any, Literal

from langchain_core.messages import AnyMessage, BaseMessage, RemoveMessage, SystemMessage
from langchain_core.runnables import RunnableConfig, RunnableLambda
from langgraph.channels.ephemeral_value import EphemeralValue
from langgraph.graph.message import add_messages
from langgraph.managed import RemainingSteps
from typing_extensions import NotRequired, TypedDict

from langmem_ext.engine import Strategy
from langmem_ext.keys import MemoryKey
from langmem_ext.result import MemoryResult
from langmem_ext.state import MemoryState
from langmem_ext.tokens import TokenCounter

__all__ = ["MemoryAgentState", "MemoryMessagesState", "MemoryNode", "Mode", "removals"]

Mode = Literal["view", "rewrite"]


def _last_value(_old: Any, new: Any) -> Any:
    """Reducer for the memory channel: the newest state replaces the old one."""
    return new


class MemoryMessagesState(TypedDict):
    """``MessagesState`` plus the memory channel (a JSON dict, so every checkpointer stores it)
    and the view for the model. Extend it like ``MessagesState``.

    ``llm_input_messages`` is an ``EphemeralValue`` channel: the view lives from the memory step
    to the model step and is then cleared, so it is stored only in the checkpoint taken between
    the two (where an interrupt before the model, or a replay from there, still finds it) and
    not in every later checkpoint. A plain ``list`` channel would store a copy of the view in
    every checkpoint of the thread. The model node must therefore run in the step right after
    the memory node (an edge ``memory -> model``, as ``pre_model_hook`` does).
    """

    messages: Annotated[list[AnyMessage], add_messages]
    memory: NotRequired[Annotated[dict[str, Any] | None, _last_value]]
    llm_input_messages: NotRequired[Annotated[list[AnyMessage], EphemeralValue(list)]]


class MemoryAgentState(MemoryMessagesState):
    """State schema for ``create_react_agent(..., state_schema=MemoryAgentState)``."""

    remaining_steps: NotRequired[RemainingSteps]


def _get(state: Any, key: str) -> Any:
    if isinstance(state, Mapping):
        return state.get(key)
    return getattr(state, key, None)


class MemoryNode(RunnableLambda[Any, dict[str, Any]]):
    """Run ``strategy`` on the graph's messages; write the view and the new memory state.

    Example:
        >>> from langmem_ext import MemoryNode, TokenBudget
        >>> node = MemoryNode(TokenBudget(max_tokens=4_000))
        >>> from langchain_core.messages import HumanMessage
        >>> update = node.invoke({"messages": [HumanMessage("hi", id="1")]})
        >>> [m.content for m in update["llm_input_messages"]], update["memory"]["seen"]
        (['hi'], 1)
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
    ) -> None:
        if not isinstance(strategy, Strategy):
            raise TypeError(
                f"MemoryNode needs a langmem_ext strategy (TokenBudget, SummaryBuffer, ...), "
                f"got {type(strategy).__name__}"
            )
        if mode not in ("view", "rewrite"):
            raise ValueError(f"mode must be 'view' or 'rewrite', got {mode!r}")
        self.strategy = strategy
        self.mode: Mode = mode
        self.messages_key = messages_key
        self.output_key = output_key
        self.state_key = state_key
        self.require_explicit_key = require_explicit_key
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

    def _run(self, state: Any, config: RunnableConfig) -> dict[str, Any]:
        messages, previous = self._inputs(state)
        result = self.strategy.apply(messages, previous, key=self._key(config))
        return self._update(messages, result)

    async def _arun(self, state: Any, config: RunnableConfig) -> dict[str, Any]:
        messages, previous = self._inputs(state)
        result = await self.strategy.aapply(messages, previous, key=self._key(config))
        return self._update(messages, result)

    def _update(self, messages: Sequence[BaseMessage], result: MemoryResult) -> dict[str, Any]:
        state = result.state
        update: dict[str, Any] = {self.output_key: result.messages}
        if self.mode == "rewrite":
            removed, state = removals(messages, state, self.strategy.counter)
            if removed:
                update[self.messages_key] = [RemoveMessage(id=i) for i in removed]
        update[self.state_key] = state.to_dict()
        return update


def removals(
    messages: Sequence[BaseMessage], state: MemoryState, counter: TokenCounter
) -> tuple[list[str], MemoryState]:
    """Rewrite mode: the ids to remove from the graph state, and the memory state as it will be
    once they are gone (so the next turn sees an append-only history, not a rewritten one).

    Removed: the messages folded into the summary (summarizing strategies), or the messages
    before the view's cut (trimming strategies). Nothing when a message to remove has no id.
    """
    body_start = 1 if messages and isinstance(messages[0], SystemMessage) else 0
    if state.folded:  # summarizing strategy: remove exactly what the summary now holds
        gone = list(messages[body_start : body_start + state.folded])
    elif state.cut_index is not None and state.cut_index > body_start:
        gone = list(messages[body_start : state.cut_index])  # trimming strategy
    else:
        return [], state
    if any(m.id is None for m in gone):  # cannot remove by id: keep everything this turn
        return [], state
    removed_tokens = sum(counter.count_message(m) for m in gone)
    # Retrieval indexes evicted messages before they can be removed: move its watermark with
    # them (0: nothing after the removed ones is indexed yet; the turn count carries on)
    indexed = state.indexed - len(gone) if state.indexed > body_start + len(gone) else 0
    return [str(m.id) for m in gone], replace(
        state,
        seen=state.seen - len(gone),
        seen_tokens=state.seen_tokens - removed_tokens,
        folded=0,
        folded_key=None,
        folded_tokens=0,
        cut_index=None if state.cut_index is None else state.cut_index - len(gone),
        clipped=max(state.clipped - len(gone), 0),
        indexed=indexed,
        indexed_key=state.indexed_key if indexed else None,
    )
