"""Middleware for langchain v1 ``create_agent``: the same strategies around every model call.

``MemoryMiddleware(strategy)`` wraps the model call (``wrap_model_call`` / ``awrap_model_call``):
the agent's system prompt and its messages go through the strategy; the tool schemas bound for
the call are counted and held back from the budget; the model gets the view, with the system
prompt and the summary in one system message, first. The strategy's
:class:`~langmem_ext.core.state.MemoryState` is kept in the agent state (``memory``) through the
response's state update, so checkpointers persist it like any other channel.

When the strategy's counter learns from real usage (it has an ``observe`` method, e.g.
:class:`~langmem_ext.CalibratedCounter`), every response is fed back to it:
the messages actually sent (system prompt and view), the response's ``usage_metadata`` and the
tool-schema tokens that were held back. A failure there is logged as a warning, never raised into
the agent.

Requires the ``langchain`` package (``pip install "langmem-ext[agents]"``).
"""

from __future__ import annotations

import asyncio
import json
import logging
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
from langgraph.store.base import BaseStore
from langgraph.types import Command
from typing_extensions import NotRequired

from langmem_ext.core.keys import MemoryKey
from langmem_ext.core.result import MemoryResult
from langmem_ext.core.state import MemoryState
from langmem_ext.core.transitions import removals_for_rewrite as removals
from langmem_ext.integrations import tracing
from langmem_ext.integrations.fold_sharing import StoreSharedFolds, shared_folds_for
from langmem_ext.integrations.graph import Mode, check_surface_args
from langmem_ext.integrations.tracing import ReportCallback
from langmem_ext.strategies.engine import Strategy
from langmem_ext.strategies.shared_folds import folds_shared_in

__all__ = ["MemoryMiddleware", "MemoryMiddlewareState"]

logger = logging.getLogger(__name__)


class MemoryMiddlewareState(AgentState[Any]):
    """The agent state plus the memory channel and the latest call's report (JSON dicts)."""

    memory: NotRequired[Annotated[dict[str, Any] | None, OmitFromInput]]
    #: the latest model call's MemoryReport as a dict (``MemoryReport.from_dict`` reads it back)
    memory_report: NotRequired[Annotated[dict[str, Any] | None, OmitFromInput]]


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

    Workers: with a strategy that folds in the background (``prefetch_tokens``), a fold
    started by one worker process is adopted by the worker that serves the thread's next turn
    through the agent's store (``share_folds=True``, the default) or the store passed as
    ``share_folds``; ``False`` turns it off. See :mod:`langmem_ext.integrations.fold_sharing`.

    What the memory did: after every model call the agent state's ``memory_report`` holds that
    call's :class:`~langmem_ext.core.result.MemoryReport` as a dict (per thread, checkpointed
    with the state; ``out["memory_report"]["folded"]``), ``on_report(report, key)`` is called
    (an exception in it is logged and ignored), and, when the run has callback handlers
    (LangSmith, ``config={"callbacks": [...]}``), the strategy runs as a child run
    ``langmem_ext.memory`` of the model step, whose outputs are the report (see
    :mod:`langmem_ext.integrations.tracing`).
    """

    state_schema = MemoryMiddlewareState

    def __init__(
        self,
        strategy: Strategy,
        *,
        mode: Mode = "view",
        require_explicit_key: bool = False,
        share_folds: bool | BaseStore = True,
        on_report: ReportCallback | None = None,
    ) -> None:
        super().__init__()
        check_surface_args("MemoryMiddleware", strategy, mode)
        self.on_report = tracing.check_on_report(on_report)
        self.share_folds = share_folds
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
        return MemoryKey.from_config(_config(), require_explicit_key=self.require_explicit_key)

    def _shared(self, request: ModelRequest[Any]) -> StoreSharedFolds | None:
        """Where this call shares background folds with other workers: the agent's store
        (``runtime.store``) or the one passed as ``share_folds``, under the run's thread."""
        if self.share_folds is False:
            return None
        store = getattr(getattr(request, "runtime", None), "store", None)
        return shared_folds_for(self.share_folds, _config(), store)

    def _previous(self, request: ModelRequest[Any]) -> MemoryState | None:
        state: Any = request.state or {}
        value = state.get("memory") if isinstance(state, dict) else getattr(state, "memory", None)
        return MemoryState.coerce(value) if value is not None else None

    def _report(self, result: MemoryResult, key: MemoryKey | None, config: Any) -> None:
        """Hand the call's report to ``on_report`` (never raising into the agent)."""
        if self.on_report is not None:
            where = tracing.reported_key(self.strategy, key, config)
            tracing.tell_report(self.on_report, result.report, where, "MemoryMiddleware")

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
        update["memory_report"] = result.report.to_dict()
        if isinstance(response, ExtendedModelResponse):  # an inner middleware's command
            if response.command is not None and isinstance(response.command.update, dict):
                update = {**response.command.update, **update}
            response = response.model_response
        if isinstance(response, AIMessage):
            response = ModelResponse(result=[response])
        return ExtendedModelResponse(model_response=response, command=Command(update=update))

    def _answer(
        self, response: ModelResponse[Any] | AIMessage | ExtendedModelResponse[Any]
    ) -> AIMessage | None:
        """The model's answer in a handler's response (the last AIMessage of its result)."""
        if isinstance(response, ExtendedModelResponse):
            response = response.model_response
        if isinstance(response, AIMessage):
            return response
        for message in reversed(response.result):
            if isinstance(message, AIMessage):
                return message
        return None

    def _calibrate(
        self,
        sent: ModelRequest[Any],
        response: ModelResponse[Any] | AIMessage | ExtendedModelResponse[Any],
        extra: int,
    ) -> None:
        """Feed a response's usage to a counter that learns from it (``observe``)."""
        observe = getattr(self.strategy.counter, "observe", None)
        if not callable(observe):
            return
        try:
            answer = self._answer(response)
            if answer is not None:
                observe(self._history(sent), answer, extra_tokens=extra)
        except Exception as exc:  # calibration must never break the agent
            logger.warning(
                "MemoryMiddleware: the counter could not learn from the response (%s: %s)",
                type(exc).__name__,
                exc,
            )

    async def _acalibrate(
        self,
        sent: ModelRequest[Any],
        response: ModelResponse[Any] | AIMessage | ExtendedModelResponse[Any],
        extra: int,
    ) -> None:
        """:meth:`_calibrate` for the async hook: ``aobserve`` when the counter has it, else
        ``observe`` (in a worker thread when counting blocks)."""
        counter = self.strategy.counter
        aobserve = getattr(counter, "aobserve", None)
        if not callable(aobserve):
            if getattr(counter, "is_blocking", False):
                await asyncio.to_thread(self._calibrate, sent, response, extra)
            else:
                self._calibrate(sent, response, extra)
            return
        try:
            answer = self._answer(response)
            if answer is not None:
                await aobserve(self._history(sent), answer, extra_tokens=extra)
        except Exception as exc:  # calibration must never break the agent
            logger.warning(
                "MemoryMiddleware: the counter could not learn from the response (%s: %s)",
                type(exc).__name__,
                exc,
            )

    # -- hooks ------------------------------------------------------------------------------------

    def wrap_model_call(
        self,
        request: ModelRequest[Any],
        handler: Callable[[ModelRequest[Any]], ModelResponse[Any]],
    ) -> ExtendedModelResponse[Any]:
        history = self._history(request)
        extra = self._tool_tokens(request)
        config, key = _config(), self._key()
        with folds_shared_in(self._shared(request)):
            result = tracing.traced_apply(
                self.strategy, history, self._previous(request), config, extra_tokens=extra, key=key
            )
        self._report(result, key, config)
        sent = self._request(request, result)
        response = handler(sent)
        self._calibrate(sent, response, extra)
        return self._respond(history, result, response)

    async def awrap_model_call(
        self,
        request: ModelRequest[Any],
        handler: Callable[[ModelRequest[Any]], Awaitable[ModelResponse[Any]]],
    ) -> ExtendedModelResponse[Any]:
        history = self._history(request)
        extra = self._tool_tokens(request)
        config, key = _config(), self._key()
        with folds_shared_in(self._shared(request)):
            result = await tracing.traced_aapply(
                self.strategy, history, self._previous(request), config, extra_tokens=extra, key=key
            )
        self._report(result, key, config)
        sent = self._request(request, result)
        response = await handler(sent)
        await self._acalibrate(sent, response, extra)
        return self._respond(history, result, response)


def _config() -> Any:
    """The run's config (None outside a runnable context)."""
    try:
        return get_config()
    except RuntimeError:
        return None
