"""What a memory call did, told to the caller: the ``on_report`` callback and LangChain tracing.

Every surface call runs the strategy once and gets a :class:`~langmem_ext.core.result.MemoryReport`
(view tokens, budget, messages folded, health, retrieved items ...). Besides writing it to the
graph state (``memory_report``), the graph surfaces hand it out in two ways, both here:

* ``on_report(report, key)``: a plain callback, called after every call. An exception in it is
  logged and ignored, like the strategies' ``on_summary_updated`` / ``on_health_changed``.
* LangChain's callback system, from inside the run that called the surface (the config the node
  or the agent's model step runs with): the strategy runs as a **child run** named
  ``langmem_ext.memory`` (``on_chain_start`` with the input counts, ``on_chain_end`` with the
  report as a dict, ``on_chain_error`` if it raised), and inside that run a **custom event**
  ``langmem_ext.memory_report`` carries the same dict.

Why a child run first: LangSmith's tracer records runs, not custom events (``LangChainTracer``
has no ``on_custom_event``), so only a run shows up in a LangSmith trace, with its inputs,
outputs, timing and errors, nested under the model step; the summarizer's model calls made
during the fold nest under it, so a trace shows which summary call belonged to which memory
step. ``astream_events`` and any ``BaseCallbackHandler`` see the run too. The custom event is
for handlers that only want the report (``on_custom_event``, ``astream_events`` consumers
filtering on ``on_custom_event``), without matching run names.

Cost: the child run is only made when the run has callback handlers (LangSmith tracing enabled,
``config={"callbacks": [...]}``, ``astream_events``); without any, the strategy is called
directly and nothing is built (the check is one callback-manager lookup).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from langchain_core.callbacks.manager import adispatch_custom_event, dispatch_custom_event
from langchain_core.messages import BaseMessage
from langchain_core.runnables import RunnableConfig, RunnableLambda
from langchain_core.runnables.config import get_callback_manager_for_config

from langmem_ext.core.keys import MemoryKey
from langmem_ext.core.result import MemoryReport, MemoryResult
from langmem_ext.core.signatures import bind, same_parameters
from langmem_ext.core.state import MemoryState
from langmem_ext.strategies.engine import Strategy

__all__ = [
    "REPORT_EVENT",
    "REPORT_RUN",
    "ReportCallback",
    "check_on_report",
    "reported_key",
    "tell_report",
    "traced_aapply",
    "traced_apply",
]

logger = logging.getLogger("langmem_ext")

#: the name of the child run each memory call makes in LangChain's callbacks (and LangSmith)
REPORT_RUN = "langmem_ext.memory"
#: the name of the custom event that carries the report dict inside that run
REPORT_EVENT = "langmem_ext.memory_report"

#: ``on_report(report, key)``: the call's report, and whose memory it was (``None`` when the
#: run names no thread)
ReportCallback = Callable[[MemoryReport, MemoryKey | None], Any]


def check_on_report(on_report: object) -> ReportCallback | None:
    """``on_report`` as given, or a ``TypeError`` when it is neither callable nor ``None``."""
    if on_report is not None and not callable(on_report):
        raise TypeError(f"on_report must be callable or None, got {on_report!r}")
    return on_report


def reported_key(
    strategy: Strategy, key: MemoryKey | None, config: Mapping[str, Any] | None
) -> MemoryKey | None:
    """The key ``on_report`` is given: the one the strategy ran with, else the run's thread
    (``MemoryKey.from_config``, parts it lacks defaulted), else ``None`` (no thread named)."""
    if key is not None or strategy.uses_key:
        return key
    configurable = (config or {}).get("configurable")
    if not isinstance(configurable, Mapping):
        return None
    found = MemoryKey.from_config(config)
    return None if "session" in found.defaulted else found


def tell_report(
    on_report: ReportCallback | None, report: MemoryReport, key: MemoryKey | None, surface: str
) -> None:
    """Call ``on_report``; an exception in it is logged and never breaks the call."""
    if on_report is None:
        return
    try:
        on_report(report, key)
    except Exception:
        logger.exception("langmem_ext: the on_report callback of a %s raised; ignored", surface)


def _traced(config: RunnableConfig | None) -> bool:
    """Whether the run has callback handlers to tell (tracing, ``callbacks=``, event streams)."""
    if not config:
        return False
    return bool(get_callback_manager_for_config(config).handlers)


def _run_config(config: RunnableConfig, strategy: Strategy) -> RunnableConfig:
    """The child run's config: the caller's, renamed, with the strategy in its metadata."""
    child: dict[str, Any] = {k: v for k, v in config.items() if k != "run_id"}
    child["run_name"] = REPORT_RUN
    child["metadata"] = {
        **(config.get("metadata") or {}),
        "langmem_ext_strategy": type(strategy).__name__,
    }
    return child  # type: ignore[return-value]


def _inputs(messages: Sequence[BaseMessage], previous: MemoryState | None, extra: int) -> Any:
    """What the child run shows as its inputs: counts, never the messages themselves (the
    model step's own run shows those)."""
    return {
        "messages": len(messages),
        "extra_tokens": extra,
        "summarized_before": previous.folded if previous is not None else 0,
        "seen_before": previous.seen if previous is not None else 0,
    }


def traced_apply(
    strategy: Strategy,
    messages: Sequence[BaseMessage],
    previous: MemoryState | None,
    config: RunnableConfig | None,
    *,
    extra_tokens: int = 0,
    key: MemoryKey | None = None,
) -> MemoryResult:
    """``strategy.apply(...)``, as a child run of ``config``'s run when it has handlers."""
    if config is None or not _traced(config):
        return strategy.apply(messages, previous, extra_tokens=extra_tokens, key=key)
    results: list[MemoryResult] = []

    def memory(_inputs: Any, config: RunnableConfig) -> dict[str, Any]:
        result = strategy.apply(messages, previous, extra_tokens=extra_tokens, key=key)
        results.append(result)
        report = result.report.to_dict()
        dispatch_custom_event(REPORT_EVENT, report, config=config)
        return report

    run = RunnableLambda(memory, name=REPORT_RUN)
    run.invoke(_inputs(messages, previous, extra_tokens), _run_config(config, strategy))
    return results[0]


@same_parameters(traced_apply)
async def traced_aapply(*args: Any, **kwargs: Any) -> MemoryResult:
    """Async :func:`traced_apply`, over ``strategy.aapply``."""
    bound = bind(traced_apply, args, kwargs, "traced_aapply")
    strategy: Strategy = bound[0]
    messages, previous, config, extra_tokens, key = bound[1:]
    if config is None or not _traced(config):
        return await strategy.aapply(messages, previous, extra_tokens=extra_tokens, key=key)
    results: list[MemoryResult] = []

    async def memory(_inputs: Any, config: RunnableConfig) -> dict[str, Any]:
        result = await strategy.aapply(messages, previous, extra_tokens=extra_tokens, key=key)
        results.append(result)
        report = result.report.to_dict()
        await adispatch_custom_event(REPORT_EVENT, report, config=config)
        return report

    run = RunnableLambda(memory, name=REPORT_RUN)
    await run.ainvoke(_inputs(messages, previous, extra_tokens), _run_config(config, strategy))
    return results[0]
