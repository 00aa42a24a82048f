"""The tools the summaries and agent-turn benchmarks compare (langmem_ext's summarizing
strategies, langmem's ``summarize_messages``, langchain's ``SummarizationMiddleware``), each on
the fake summarizer, and the driver that runs one over a conversation's model calls.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any, Protocol

from langchain_core.messages import BaseMessage, SystemMessage
from langchain_core.messages.utils import count_tokens_approximately

from bench.fakes import (
    Conversation,
    FakeChatModel,
    MarkerTrackingSummarizer,
    _marker,
    _markers_shown,
)
from bench.harness import gc_paused

__all__ = ["ModelCall", "Tool", "ToolSettings", "ViewTracker", "drive", "tool_factories"]


class ToolSettings(Protocol):
    """What the tool builders read from a config: :class:`SummariesConfig`, or the config of
    another benchmark that drives the same tools (``bench.agent_turns``)."""

    @property
    def budgets(self) -> tuple[int, ...]: ...

    @property
    def max_summary_tokens(self) -> int: ...

    @property
    def summary_fill(self) -> float: ...


@dataclass
class Tool:
    """One configuration: ``step(history) -> view``, called at every model call."""

    key: str
    family: str
    label: str
    max_tokens: int
    summary_budget: int
    fake: MarkerTrackingSummarizer
    step: Callable[[list[BaseMessage]], list[BaseMessage]]
    #: langmem_ext only: the strategy (for its config, state and reports)
    strategy: Any = None
    extra: dict[str, Any] = field(default_factory=dict)


#: ``TokenBudget``'s target as a share of its budget in the benchmarks (numerator, denominator):
#: 10,000 at 16,000, as a prompt-caching user sets it
HYSTERESIS_TARGET = (5, 8)


def summary_budget(budget: int, config: ToolSettings) -> int:
    """Every tool's summary budget at ``budget``: ``config.max_summary_tokens``, at most a quarter
    of the budget (a 1,000-token summary leaves no room to fold into at 2,000)."""
    return min(config.max_summary_tokens, budget // 4)


def _langmem_ext_tool(kind: str, budget: int, config: ToolSettings) -> Tool:
    from langmem_ext import (
        ApproximateCounter,
        Compacting,
        SummaryBuffer,
        TieredSummary,
        TokenBudget,
        ToolDigest,
    )

    fake = MarkerTrackingSummarizer()
    strategy: SummaryBuffer | Compacting | TieredSummary | ToolDigest | TokenBudget
    if kind == "ToolDigest":  # no summarizer: the fake is never called
        strategy = ToolDigest(budget, counter=ApproximateCounter())
    elif kind == "TokenBudget":  # no summarizer; hysteresis down to 5/8; a huge result clipped
        target = budget * HYSTERESIS_TARGET[0] // HYSTERESIS_TARGET[1]
        strategy = TokenBudget(
            budget, target_tokens=target, overflow="clip", counter=ApproximateCounter()
        )
    elif kind == "SummaryBuffer":
        strategy = SummaryBuffer(
            budget,
            summarizer=fake,
            max_summary_tokens=summary_budget(budget, config),
            counter=ApproximateCounter(),
        )
    elif kind == "Compacting":
        strategy = Compacting(budget, summarizer=fake, counter=ApproximateCounter())
    else:
        strategy = TieredSummary(
            budget,
            summarizer=fake,
            max_summary_tokens=summary_budget(budget, config),
            counter=ApproximateCounter(),
        )
    summary_tokens = getattr(strategy.config, "max_summary_tokens", 0)
    fake.summary_tokens = int(summary_tokens * config.summary_fill)
    tool = Tool(
        key=f"langmem_ext_{kind}_{budget}",
        family="langmem_ext",
        label=f"langmem_ext {kind}" + (" (target 5/8)" if kind == "TokenBudget" else ""),
        max_tokens=budget,
        summary_budget=summary_tokens,
        fake=fake,
        step=lambda history: history,
        strategy=strategy,
    )
    state: list[Any] = [None]
    reports: list[Any] = []

    def step(history: list[BaseMessage]) -> list[BaseMessage]:
        result = strategy.apply(history, state[0])
        state[0] = result.state
        reports.append(result.report)
        return result.messages

    tool.step = step
    tool.extra = {"state": state, "reports": reports}
    return tool


def _other_library_fake(budget: int, config: ToolSettings) -> MarkerTrackingSummarizer:
    """The fake summarizer of the langmem and langchain tools: both get the same summary size,
    ``summary_fill`` of the summary budget."""
    return MarkerTrackingSummarizer(
        summary_tokens=int(summary_budget(budget, config) * config.summary_fill)
    )


def _langmem_tool(budget: int, config: ToolSettings) -> Tool:
    from langmem.short_term import RunningSummary, summarize_messages

    fake = _other_library_fake(budget, config)
    model = FakeChatModel(fake=fake)
    running: list[RunningSummary | None] = [None]

    def step(history: list[BaseMessage]) -> list[BaseMessage]:
        result = summarize_messages(
            history,
            running_summary=running[0],
            model=model,
            max_tokens=budget,
            max_summary_tokens=summary_budget(budget, config),
            token_counter=count_tokens_approximately,
        )
        if result.running_summary is not None:  # as the docs' example keeps it in state
            running[0] = result.running_summary
        return list(result.messages)

    return Tool(
        key=f"langmem_summarize_messages_{budget}",
        family="langmem",
        label="langmem summarize_messages",
        max_tokens=budget,
        summary_budget=summary_budget(budget, config),
        fake=fake,
        step=step,
    )


def _middleware_tool(budget: int, config: ToolSettings) -> Tool:
    from langchain.agents.middleware import SummarizationMiddleware
    from langgraph.graph.message import add_messages

    fake = _other_library_fake(budget, config)
    middleware: SummarizationMiddleware[Any, Any, Any] = SummarizationMiddleware(
        FakeChatModel(fake=fake), trigger=("tokens", budget)
    )
    state: list[BaseMessage] = []
    fed = [0]
    system: list[BaseMessage] = []

    def step(history: list[BaseMessage]) -> list[BaseMessage]:
        nonlocal state
        new = history[fed[0] :]
        fed[0] = len(history)
        for message in new:  # create_agent keeps the system prompt out of the state
            if isinstance(message, SystemMessage):
                system[:] = [message]
        state = add_messages(state, [m for m in new if not isinstance(m, SystemMessage)])
        update = middleware.before_model({"messages": state}, None)  # type: ignore[arg-type]
        if update is not None:
            state = add_messages(state, update["messages"])
        return [*system, *state]

    return Tool(
        key=f"langchain_summarization_middleware_{budget}",
        family="langchain",
        label="langchain SummarizationMiddleware",
        max_tokens=budget,
        summary_budget=summary_budget(budget, config),
        fake=fake,
        step=step,
        extra={
            "keep": list(middleware.keep),
            "trigger": ["tokens", budget],
            "trim_tokens_to_summarize": middleware.trim_tokens_to_summarize,
        },
    )


def tool_factories(config: ToolSettings) -> list[Callable[[], Tool]]:
    """One factory per configuration: each call builds a fresh tool (state, fake, counter)."""
    factories: list[Callable[[], Tool]] = []
    for budget in config.budgets:
        for kind in ("SummaryBuffer", "Compacting", "TieredSummary"):
            factories.append(partial(_langmem_ext_tool, kind, budget, config))
        factories.append(partial(_langmem_tool, budget, config))
        factories.append(partial(_middleware_tool, budget, config))
    return factories


@dataclass(frozen=True)
class ModelCall:
    """One model call of a drive: the history (the live list, grown before each call), the
    messages added since the previous call, the tool's view, the tool's time without the fake
    summarizer's, and whether the tool called the summarizer."""

    history: Sequence[BaseMessage]
    new: Sequence[BaseMessage]
    view: list[BaseMessage]
    seconds: float
    summarized: bool


def drive(tool: Tool, conversation: Conversation, check: Callable[[ModelCall], None]) -> str | None:
    """Call ``tool.step`` at every model call of ``conversation`` (cyclic GC paused, each call
    timed) and hand each call to ``check`` (not timed). Returns None, or the error of the call
    at which the tool gave up (a finding, not a crash: the drive stops there)."""
    history: list[BaseMessage] = []
    clock = time.perf_counter
    with gc_paused():
        for turn, length in enumerate(conversation.lengths):
            new = conversation.messages[len(history) : length]
            history.extend(new)
            fake_before, calls_before = tool.fake.seconds, tool.fake.calls
            start = clock()
            try:
                view = tool.step(history)
            except Exception as exc:
                return f"call {turn + 1}: {type(exc).__name__}: {exc}"[:500]
            seconds = clock() - start - (tool.fake.seconds - fake_before)
            check(ModelCall(history, new, view, seconds, tool.fake.calls > calls_before))
    return None


@dataclass
class ViewTracker:
    """Where each marked message is at each model call: in the view, read by the summarizer, or
    neither (*hidden*: out of the view and never read).

    ``add`` every message as it joins the history, then ``update`` after every call with the
    markers the summarizer read for the first time and the view.
    """

    #: in the history, unread, and in the view when last looked
    pending: set[int] = field(default_factory=set)
    #: out of the view and unread now (a message read later, or back in the view, leaves it)
    hidden: set[int] = field(default_factory=set)
    #: every message that was ever hidden: it left the view before the summarizer read it
    left_unseen: set[int] = field(default_factory=set)

    def add(self, message: BaseMessage) -> None:
        number = _marker(message)
        if number is not None:
            self.pending.add(number)

    def update(self, fresh: Iterable[int], view: Sequence[BaseMessage]) -> int:
        """Record one call; returns how many messages are hidden at it."""
        read = set(fresh)
        self.pending -= read
        self.hidden -= read
        in_view = {n for m in view for n in _markers_shown(m)}
        back = self.hidden & in_view
        if back:
            self.hidden -= back
            self.pending |= back
        gone = self.pending - in_view
        if gone:
            self.left_unseen |= gone
            self.hidden |= gone
            self.pending -= gone
        return len(self.hidden)
