"""Middleware for langchain v1 ``create_agent``: the same strategies around every model call.

``MemoryMiddleware(strategy)`` wraps the model call (``wrap_model_call`` / ``awrap_model_call``):
the agent's system prompt and its messages go through the strategy; the tool schemas bound for
the call are counted and held back from the budget; the model gets the view, with the system
prompt and the summary in one system message, first. The strategy's
:class:`~langmem_ext.core.state.MemoryState` is kept in the agent state (``memory``) through the
response's state update, so checkpointers persist it like any other channel.

Requires the ``langchain`` package (``pip install "langmem-ext[agents]"``).
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Annotated, Any

from langchain.agents.middleware.types import (
    AgentMiddleware,
    AgentState,
    ExtendedModelResponse,
    ModelRequest,
    ModelResponse,
    OmitFromInput,
)
from langchain_core.messages import AIMessage, BaseMessage, RemoveMessage, SystemMessage
from langchain_core.utils.function_calling import convert_to_openai_tool
from langgraph.config import get_config
from langgraph.types import Command
from typing_extensions import NotRequired

from langmem_ext.core._state import removals_for_rewrite as removals
from langmem_ext.core.keys import MemoryKey
from langmem_ext.core.result import MemoryResult
from langmem_ext.core.state import MemoryState
from langmem_ext.integrations.graph import Mode, check_surface_args
from langmem_ext.strategies.engine import Strategy

__all__ = ["MemoryMiddleware", "MemoryMiddlewareState"]


class MemoryMiddlewareState(AgentState[Any]):
    """The agent state plus the memory channel (a JSON dict)."""

    memory: NotRequired[Annotated[dict[str, Any] | None, OmitFromInput]]


class MemoryMiddleware(AgentMiddleware[MemoryMiddlewareState, Any, Any]):
    """Context management for ``create_agent``, sync and async.

    Example::

        from langchain.agents import create_agent
        from langmem_ext import MemoryMiddleware, SummaryBuffer

        agent = create_agent(
            model,
            tools,
            system_prompt="You track orders.",
            middleware=[MemoryMiddleware(SummaryBuffer(8_000, summarizer=cheap_model))],
            checkpointer=checkpointer,
        )

    ``mode="rewrite"`` also removes folded (or trimmed) messages from the agent state with
    ``RemoveMessage``, after their fold succeeded, so checkpoints stay bounded.
    """

    state_schema = MemoryMiddlewareState

    def __init__(
        self, strategy: Strategy, *, mode: Mode = "view", require_explicit_key: bool = False
    ) -> None:
        super().__init__()
        check_surface_args("MemoryMiddleware", strategy, mode)
        self.strategy = strategy
        self.mode: Mode = mode
        self.require_explicit_key = require_explicit_key

    @property
    def name(self) -> str:
        return "MemoryMiddleware"

    # -- shared -----------------------------------------------------------------------------------

    def _history(self, request: ModelRequest[Any]) -> list[BaseMessage]:
        system = request.system_message
        return ([system] if system is not None else []) + list(request.messages)

    def _tool_tokens(self, request: ModelRequest[Any]) -> int:
        """What the tool schemas bound for this call cost, by the strategy's counter."""
        total = 0
        for tool in request.tools or []:
            schema = tool if isinstance(tool, dict) else convert_to_openai_tool(tool)
            total += self.strategy.counter.count_text(json.dumps(schema, ensure_ascii=False))
        return total

    def _key(self) -> MemoryKey | None:
        """Whose memory this is (for Retrieval): from the run's ``configurable``."""
        if not self.strategy.uses_key:
            return None
        try:
            config = get_config()
        except RuntimeError:  # called outside a runnable context
            config = None
        return MemoryKey.from_config(config, require_explicit_key=self.require_explicit_key)

    def _previous(self, request: ModelRequest[Any]) -> MemoryState | None:
        state: Any = request.state or {}
        value = state.get("memory") if isinstance(state, dict) else getattr(state, "memory", None)
        return MemoryState.coerce(value) if value is not None else None

    def _request(self, request: ModelRequest[Any], result: MemoryResult) -> ModelRequest[Any]:
        view: list[Any] = result.messages  # AnyMessage members, as they came in
        if view and isinstance(view[0], SystemMessage):
            return request.override(system_message=view[0], messages=list(view[1:]))
        return request.override(system_message=None, messages=list(view))

    def _respond(
        self,
        history: list[BaseMessage],
        result: MemoryResult,
        response: ModelResponse[Any] | AIMessage | ExtendedModelResponse[Any],
    ) -> ExtendedModelResponse[Any]:
        state = result.state
        update: dict[str, Any] = {}
        if self.mode == "rewrite":
            removed, state = removals(history, state, self.strategy.counter)
            if removed:
                update["messages"] = [RemoveMessage(id=i) for i in removed]
        update["memory"] = state.to_dict()
        if isinstance(response, ExtendedModelResponse):  # an inner middleware's command
            if response.command is not None and isinstance(response.command.update, dict):
                update = {**response.command.update, **update}
            response = response.model_response
        if isinstance(response, AIMessage):
            response = ModelResponse(result=[response])
        return ExtendedModelResponse(model_response=response, command=Command(update=update))

    # -- hooks ------------------------------------------------------------------------------------

    def wrap_model_call(
        self,
        request: ModelRequest[Any],
        handler: Callable[[ModelRequest[Any]], ModelResponse[Any]],
    ) -> ExtendedModelResponse[Any]:
        history = self._history(request)
        result = self.strategy.apply(
            history,
            self._previous(request),
            extra_tokens=self._tool_tokens(request),
            key=self._key(),
        )
        return self._respond(history, result, handler(self._request(request, result)))

    async def awrap_model_call(
        self,
        request: ModelRequest[Any],
        handler: Callable[[ModelRequest[Any]], Awaitable[ModelResponse[Any]]],
    ) -> ExtendedModelResponse[Any]:
        history = self._history(request)
        result = await self.strategy.aapply(
            history,
            self._previous(request),
            extra_tokens=self._tool_tokens(request),
            key=self._key(),
        )
        return self._respond(history, result, await handler(self._request(request, result)))
