"""Summarizing memory side by side: langmem_ext, langmem and langchain's SummarizationMiddleware.

Run ``python -m bench.summaries`` from the repository root (``--quick`` for a smoke run, ``--out
DIR`` to write the results elsewhere). It writes ``bench/results/summaries.md`` and
``summaries.json`` (``summaries_quick.*`` for ``--quick``).

Every tool sees the same agent loop, ``agent_loop(n, seed)``, and is called at every model call,
carrying its own state from call to call as an application would:

* **langmem_ext** ``SummaryBuffer``, ``Compacting`` and ``TieredSummary``: ``strategy.apply``
  with the previous ``result.state``; the view is ``result.messages``.
* **langmem** ``summarize_messages`` (``langmem.short_term``): the whole history and the running
  summary of the previous call, as its docs do; the view is ``result.messages``.
  ``SummarizationNode`` wraps the same function, so it is not run separately.
* **langchain** ``SummarizationMiddleware``: its ``before_model`` hook is driven directly on an
  agent state of our own. Its update (``RemoveMessage(REMOVE_ALL_MESSAGES)``, the summary, the
  kept messages) is applied with langgraph's ``add_messages`` reducer, as the graph would, and the
  next messages of the loop are appended to that state. As in ``create_agent(system_prompt=...)``,
  the system prompt is not part of the state: the view is the system message plus the state.

They share one deterministic **fake summarizer**. Every conversation message is copied once with
a unique marker ``m<N>:`` at the start of its text, so the fake can record which messages it was
shown (every ``m<N>:`` in its input, however the tool rendered it). It counts its calls and its
input tokens, and answers with a summary of ``summary_fill`` (80%) of the tool's summary budget
that contains no marker. All token figures use langchain-core's ``count_tokens_approximately``
(``langmem_ext.ApproximateCounter`` counts the same).

Per tool and budget: summarizer calls, summarizer input / conversation tokens, messages that left
the view without the summarizer ever reading them, broken model inputs (``langmem_ext.validate``
error findings: no HumanMessage, first non-system message not a HumanMessage, a second or
misplaced SystemMessage, orphaned or unanswered tool calls), views over ``max_tokens``, the share
of calls whose view starts with the previous view, and the time spent in the tool (the fake's own
time subtracted).
"""

from __future__ import annotations

import datetime as dt
import re
import statistics
import time
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, field, replace
from functools import partial
from pathlib import Path
from typing import Any, Protocol

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import (
    AIMessage,
    BaseMessage,
    HumanMessage,
    SystemMessage,
)
from langchain_core.messages.utils import count_tokens_approximately
from langchain_core.outputs import ChatGeneration, ChatResult
from pydantic import ConfigDict

from bench import run
from bench.common import bench_main, is_prefix, log_progress
from bench.env import ROOT, load_average, machine_info, package_version
from bench.report import format_load, format_seconds, provenance_lines
from bench.timing import gc_paused

__all__ = [
    "FULL",
    "QUICK",
    "MarkerTrackingSummarizer",
    "ModelCall",
    "SummariesConfig",
    "ToolSettings",
    "ViewTracker",
    "drive",
    "main",
    "render_markdown",
    "run_summaries",
    "tool_factories",
    "write_results",
]

DEFAULT_OUT = ROOT / "bench" / "results"

#: targets for the langmem_ext strategies
INPUT_RATIO_LIMIT = 1.3
CALLS_TOLERANCE = 0.10
PREFIX_TARGET = 0.90
#: the budget whose prefix stability is the target (as in the TokenBudget benchmark)
HEADLINE_MAX_TOKENS = 16_000


@dataclass(frozen=True)
class SummariesConfig:
    mode: str
    loop_n: int
    seed: int
    budgets: tuple[int, ...]
    #: summary budget for SummaryBuffer and TieredSummary, langmem's max_summary_tokens, and
    #: the basis of the middleware's summary size (Compacting's is 10% of max_tokens, its default)
    max_summary_tokens: int
    #: the fake summary's size as a share of the tool's summary budget
    summary_fill: float
    #: passes per tool; the checks come from the first (they are deterministic), the time is the
    #: median of the passes' totals
    timing_reps: int


FULL = SummariesConfig(
    mode="full",
    loop_n=2_000,
    seed=0,
    budgets=(8_000, 16_000),
    max_summary_tokens=1_000,
    summary_fill=0.8,
    timing_reps=3,
)
QUICK = replace(FULL, mode="quick", loop_n=300, timing_reps=1)


class ToolSettings(Protocol):
    """What the tool builders read from a config: :class:`SummariesConfig`, or the config of
    another benchmark that drives the same tools (``bench.agent_turns``)."""

    @property
    def budgets(self) -> tuple[int, ...]: ...

    @property
    def max_summary_tokens(self) -> int: ...

    @property
    def summary_fill(self) -> float: ...


# --------------------------------------------------------------------------------------------
# the marked conversation

_MARKER = re.compile(r"\bm(\d+):")
_CLIP_NOTE = "characters clipped by langmem_ext"
_LEADING_MARKER = re.compile(r"m(\d+):")


def _text(message: BaseMessage) -> str:
    content = message.content
    if isinstance(content, str):
        return content
    parts = []
    for block in content:
        if isinstance(block, str):
            parts.append(block)
        elif isinstance(block, dict) and block.get("type") == "text":
            parts.append(str(block.get("text", "")))
    return " ".join(parts)


def _mark(message: BaseMessage, number: int) -> BaseMessage:
    text = _text(message)
    marked = f"m{number}: {text}" if text else f"m{number}:"
    return message.model_copy(update={"content": marked})


def _marker(message: BaseMessage) -> int | None:
    """The marker at the start of a message's text (clipped copies keep it), else None."""
    match = _LEADING_MARKER.match(_text(message))
    return int(match.group(1)) if match else None


def _markers_shown(message: BaseMessage) -> list[int]:
    """The markers of the history messages ``message`` shows: its own, or, for a tool-round
    digest (langmem_ext ``ToolDigest`` / ``TieredSummary``), every message of the round (each
    text in a digest starts with its message's marker)."""
    from langmem_ext.core.digest import is_digest

    if is_digest(message):
        return [int(n) for n in _LEADING_MARKER.findall(_text(message))]
    number = _marker(message)
    return [] if number is None else [number]


@dataclass(frozen=True)
class Conversation:
    """The loop, marked once: ``messages[:length]`` is the history at each model call."""

    messages: tuple[BaseMessage, ...]
    lengths: tuple[int, ...]

    @property
    def final(self) -> tuple[BaseMessage, ...]:
        return self.messages[: self.lengths[-1]]

    @property
    def body(self) -> tuple[BaseMessage, ...]:
        """The conversation messages (not the system message) of the last model call."""
        return tuple(m for m in self.final if not isinstance(m, SystemMessage))


def marked_loop(n: int, seed: int) -> Conversation:
    """``agent_loop(n, seed)`` with each conversation message copied once with its marker."""
    from langmem_ext.testing import agent_loop

    messages: list[BaseMessage] = []
    lengths: list[int] = []
    number = 0
    for history in agent_loop(n, seed=seed):
        for message in history[len(messages) :]:
            if isinstance(message, SystemMessage):
                messages.append(message)
            else:
                number += 1
                messages.append(_mark(message, number))
        lengths.append(len(messages))
    return Conversation(tuple(messages), tuple(lengths))


# --------------------------------------------------------------------------------------------
# the fake summarizer

_FILLER = (
    "The user and the assistant discussed the order pipeline, the shipment schedule, the "
    "refund queue, database latency and the quarterly budget; decisions were recorded with "
    "their reasons, open questions were listed with owners, and tool results were kept with "
    "their exact figures and identifiers. "
)


def _as_messages(prompt: Any) -> list[BaseMessage]:
    if isinstance(prompt, str):
        return [HumanMessage(prompt)]
    if isinstance(prompt, BaseMessage):
        return [prompt]
    if hasattr(prompt, "to_messages"):  # a PromptValue
        return list(prompt.to_messages())
    return list(prompt)


@dataclass
class MarkerTrackingSummarizer:
    """Deterministic stand-in for a summarizing model that records what it was shown.

    Call it with the prompt (a list of messages, a string or a prompt value). It counts the call,
    its input tokens (``count_tokens_approximately`` of the prompt as messages), collects every
    ``m<N>:`` marker in the input, and returns ``summary_tokens`` tokens of marker-free text.
    ``seconds`` is the time spent inside it, which the benchmark subtracts from the tool's time.
    """

    summary_tokens: int = 800
    calls: int = 0
    input_tokens: int = 0
    seconds: float = 0.0
    seen: Counter[int] = field(default_factory=Counter)
    fresh: list[int] = field(default_factory=list)

    def __call__(self, prompt: Any) -> str:
        start = time.perf_counter()
        messages = _as_messages(prompt)
        self.calls += 1
        self.input_tokens += count_tokens_approximately(messages)
        found = {int(x) for m in messages for x in _MARKER.findall(_text(m))}
        for number in found:
            if number not in self.seen:
                self.fresh.append(number)
            self.seen[number] += 1
        head = f"Summary #{self.calls} of {len(found)} new messages. "
        chars = max(self.summary_tokens * 4 - len(head), 0)
        body = (_FILLER * (chars // len(_FILLER) + 1))[:chars]
        text = head + body.rstrip()
        self.seconds += time.perf_counter() - start
        return text

    def take_fresh(self) -> list[int]:
        """Markers seen for the first time since the last call of this method."""
        out, self.fresh = self.fresh, []
        return out


class FakeChatModel(BaseChatModel):
    """A LangChain chat model whose answer comes from a :class:`MarkerTrackingSummarizer`."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    fake: Any

    @property
    def _llm_type(self) -> str:
        return "fake-summarizer"

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: Any = None,
        **kwargs: Any,
    ) -> ChatResult:
        text = self.fake(messages)
        return ChatResult(generations=[ChatGeneration(message=AIMessage(text))])


# --------------------------------------------------------------------------------------------
# the tools


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


def _langmem_ext_tool(kind: str, budget: int, config: ToolSettings) -> Tool:
    from langmem_ext import (
        ApproximateCounter,
        Compacting,
        SummaryBuffer,
        TieredSummary,
        ToolDigest,
    )

    fake = MarkerTrackingSummarizer()
    strategy: SummaryBuffer | Compacting | TieredSummary | ToolDigest
    if kind == "ToolDigest":  # no summarizer: the fake is never called
        strategy = ToolDigest(budget, counter=ApproximateCounter())
    elif kind == "SummaryBuffer":
        strategy = SummaryBuffer(
            budget,
            summarizer=fake,
            max_summary_tokens=config.max_summary_tokens,
            counter=ApproximateCounter(),
        )
    elif kind == "Compacting":
        strategy = Compacting(budget, summarizer=fake, counter=ApproximateCounter())
    else:
        strategy = TieredSummary(
            budget,
            summarizer=fake,
            max_summary_tokens=config.max_summary_tokens,
            counter=ApproximateCounter(),
        )
    summary_budget = getattr(strategy.config, "max_summary_tokens", 0)
    fake.summary_tokens = int(summary_budget * config.summary_fill)
    tool = Tool(
        key=f"langmem_ext_{kind}_{budget}",
        family="langmem_ext",
        label=f"langmem_ext {kind}",
        max_tokens=budget,
        summary_budget=summary_budget,
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


def _other_library_fake(config: ToolSettings) -> MarkerTrackingSummarizer:
    """The fake summarizer of the langmem and langchain tools: both get the same summary size,
    ``summary_fill`` of ``config.max_summary_tokens``."""
    return MarkerTrackingSummarizer(
        summary_tokens=int(config.max_summary_tokens * config.summary_fill)
    )


def _langmem_tool(budget: int, config: ToolSettings) -> Tool:
    from langmem.short_term import RunningSummary, summarize_messages

    fake = _other_library_fake(config)
    model = FakeChatModel(fake=fake)
    running: list[RunningSummary | None] = [None]

    def step(history: list[BaseMessage]) -> list[BaseMessage]:
        result = summarize_messages(
            history,
            running_summary=running[0],
            model=model,
            max_tokens=budget,
            max_summary_tokens=config.max_summary_tokens,
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
        summary_budget=config.max_summary_tokens,
        fake=fake,
        step=step,
    )


def _middleware_tool(budget: int, config: ToolSettings) -> Tool:
    from langchain.agents.middleware import SummarizationMiddleware
    from langgraph.graph.message import add_messages

    fake = _other_library_fake(config)
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
        summary_budget=config.max_summary_tokens,
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


# --------------------------------------------------------------------------------------------
# one run of one tool over the loop


def _newest_human(history: Sequence[BaseMessage]) -> BaseMessage | None:
    return next((m for m in reversed(history) if isinstance(m, HumanMessage)), None)


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


def run_tool(tool: Tool, conversation: Conversation) -> dict[str, Any]:
    """Drive ``tool`` over the loop; time it; check every view (the checks are not timed)."""
    from langmem_ext import validate

    per_call: list[float] = []
    view_tokens: list[int] = []
    over: list[int] = []
    broken = 0
    kinds: Counter[str] = Counter()
    newest_missing = 0
    prefix_kept = 0
    breaks = {"summarizing": 0, "other": 0}
    summarizing: list[bool] = []
    clipped_views = 0
    previous: list[BaseMessage] | None = None
    tracker = ViewTracker()

    def check(call: ModelCall) -> None:
        nonlocal broken, newest_missing, prefix_kept, clipped_views, previous
        view = call.view
        for message in call.new:
            tracker.add(message)
        per_call.append(call.seconds)
        summarizing.append(call.summarized)
        tokens = count_tokens_approximately(view)
        view_tokens.append(tokens)
        if tokens > tool.max_tokens:
            over.append(tokens - tool.max_tokens)
        errors = [f for f in validate(view) if f.severity == "error"]
        if errors:
            broken += 1
            kinds.update({f.kind for f in errors})
        human = _newest_human(call.history)
        if human is not None and not any(m is human or m == human for m in view):
            newest_missing += 1
        if previous is not None:
            if is_prefix(previous, view):
                prefix_kept += 1
            else:
                breaks["summarizing" if call.summarized else "other"] += 1
        previous = view
        if tool.family == "langmem_ext" and any(_CLIP_NOTE in _text(m) for m in view):
            clipped_views += 1
        tracker.update(tool.fake.take_fresh(), view)

    error = drive(tool, conversation, check)
    left_unseen = tracker.left_unseen
    seen = tool.fake.seen
    body = conversation.body
    conversation_tokens = count_tokens_approximately(list(body))
    turns = max(len(view_tokens) - 1, 0)
    strategy_s = sum(per_call)
    result: dict[str, Any] = {
        "key": tool.key,
        "label": tool.label,
        "family": tool.family,
        "max_tokens": tool.max_tokens,
        "summary_budget": tool.summary_budget,
        "fake_summary_tokens": tool.fake.summary_tokens,
        "model_calls": len(view_tokens),
        "error": error,
        "summarizer": {
            "calls": tool.fake.calls,
            "input_tokens": tool.fake.input_tokens,
            "input_ratio": tool.fake.input_tokens / conversation_tokens,
            "messages_read": len(seen),
            "messages_read_more_than_once": sum(1 for c in seen.values() if c > 1),
            "seconds": tool.fake.seconds,
        },
        "dropped": {
            "never_summarized": len(left_unseen - set(seen)),
            "left_before_summarized": len(left_unseen),
        },
        "validity": {
            "views": len(view_tokens),
            "broken": broken,
            "broken_kinds": dict(sorted(kinds.items())),
            "newest_human_missing": newest_missing,
            "over_budget": len(over),
            "max_overshoot": max(over, default=0),
            "max_view_tokens": max(view_tokens, default=0),
            "mean_view_tokens": statistics.fmean(view_tokens) if view_tokens else 0.0,
        },
        "prefix": {
            "turns": turns,
            "kept": prefix_kept,
            "fraction": prefix_kept / turns if turns else 0.0,
            "broken_on_summarizing_calls": breaks["summarizing"],
            "broken_on_other_calls": breaks["other"],
            "calls_with_summarizing": sum(summarizing[1:]),
            "bound_if_only_summarizing_breaks": 1 - sum(summarizing[1:]) / turns if turns else 0.0,
        },
        "timing": {
            "strategy_s": strategy_s,
            "per_call_mean_s": strategy_s / len(per_call) if per_call else 0.0,
            "per_call_max_s": max(per_call, default=0.0),
            **_split_times(per_call, summarizing),
            "excludes_fake_summarizer": True,
        },
        **({"settings": tool.extra} if tool.family == "langchain" else {}),
    }
    if tool.strategy is not None:
        result["langmem_ext"] = _langmem_ext_figures(tool, conversation_tokens, turns)
        result["langmem_ext"]["clipped_body_views"] = clipped_views
    return result


def _mean(values: Sequence[float]) -> float:
    return statistics.fmean(values) if values else 0.0


def _split_times(per_call: list[float], summarizing: list[bool]) -> dict[str, float]:
    """Mean per-call time on calls with and without a summarizer call, first and last 10%."""
    tenth = max(len(per_call) // 10, 1)
    return {
        "per_call_summarizing_mean_s": _mean(
            [t for t, s in zip(per_call, summarizing, strict=True) if s]
        ),
        "per_call_other_mean_s": _mean(
            [t for t, s in zip(per_call, summarizing, strict=True) if not s]
        ),
        "first_decile_per_call_mean_s": _mean(per_call[:tenth]),
        "last_decile_per_call_mean_s": _mean(per_call[-tenth:]),
    }


def _langmem_ext_figures(tool: Tool, conversation_tokens: int, turns: int) -> dict[str, Any]:
    config = tool.strategy.config
    trigger = config.level(config.trigger_tokens)
    target = config.level(config.target_tokens)
    expected = conversation_tokens / (trigger - target)
    state = tool.extra["state"][0]
    reports = tool.extra["reports"]
    folds = state.folds if state is not None else 0
    after_fold = [r.tokens_after for r in reports if r.folded]
    return {
        "repr": repr(tool.strategy),
        "trigger_tokens": config.trigger_tokens,
        "target_tokens": config.target_tokens,
        "effective_trigger": trigger,
        "effective_target": target,
        "safety_margin": config.safety_margin,
        "expected_calls": expected,
        "calls_over_expected": tool.fake.calls / expected,
        "folds": folds,
        "mean_tokens_per_fold": state.folded_tokens / folds if folds else 0.0,
        "mean_view_tokens_after_fold": _mean(after_fold),
        "report_prefix_kept": sum(r.prefix_kept for r in reports[1:]),
        "report_prefix_fraction": (
            sum(r.prefix_kept for r in reports[1:]) / turns if turns else 0.0
        ),
        "not_shown_views": sum(r.not_shown > 0 for r in reports),
        "overflow_clipped_views": sum(bool(r.clipped) for r in reports),
        "final_health": state.health if state is not None else "healthy",
    }


# --------------------------------------------------------------------------------------------
# targets


def evaluate_targets(tools: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """PASS/FAIL for each langmem_ext strategy and budget, one check per target."""
    out: list[dict[str, Any]] = []
    for key, t in tools.items():
        if t["family"] != "langmem_ext":
            continue
        ext = t["langmem_ext"]
        v, s = t["validity"], t["summarizer"]
        ratio = ext["calls_over_expected"]
        checks = [
            (
                "no error",
                t["error"] is None,
                t["error"] or "ran every call",
            ),
            (
                "0 dropped unseen",
                t["dropped"]["never_summarized"] == 0,
                f"{t['dropped']['never_summarized']} never summarized "
                f"({t['dropped']['left_before_summarized']} left before being read)",
            ),
            (
                "0 broken inputs",
                v["broken"] == 0,
                f"{v['broken']} broken"
                + (
                    f" ({', '.join(f'{k} {n}' for k, n in v['broken_kinds'].items())})"
                    if v["broken_kinds"]
                    else ""
                ),
            ),
            (
                "0 overshoot",
                v["over_budget"] == 0,
                f"{v['over_budget']} views over, max +{v['max_overshoot']:,}",
            ),
            (
                f"summarizer input <= {INPUT_RATIO_LIMIT:g}x conversation",
                s["input_ratio"] <= INPUT_RATIO_LIMIT,
                f"{s['input_ratio']:.3f}x",
            ),
            (
                # a bound on cost: the number of calls is set by the hysteresis gap, not by the
                # number of turns. Folds land at a human-turn boundary below the target and
                # reserve the full summary budget, so they come somewhat less often than the
                # formula says; fewer calls pass, more than 10% over fails.
                f"calls at most {1 + CALLS_TOLERANCE:g}x conversation / (trigger - target)",
                ratio <= 1 + CALLS_TOLERANCE,
                f"{s['calls']} calls vs {ext['expected_calls']:.1f} expected = {ratio:.2f}x"
                + (" (fewer)" if ratio < 1 - CALLS_TOLERANCE else "")
                + (" (more)" if ratio > 1 + CALLS_TOLERANCE else ""),
            ),
            (
                f"prefix kept >= {PREFIX_TARGET:.0%}",
                t["prefix"]["fraction"] >= PREFIX_TARGET,
                f"{t['prefix']['fraction']:.2%} (bound if only folds break it: "
                f"{t['prefix']['bound_if_only_summarizing_breaks']:.2%})",
            ),
        ]
        out.append(
            {
                "tool": key,
                "label": t["label"],
                "max_tokens": t["max_tokens"],
                # the prefix target is judged at the headline budget; at a smaller budget the
                # gap between the marks is only a few turns of this loop, which caps the share
                "passed": all(
                    ok
                    for name, ok, _ in checks
                    if t["max_tokens"] == HEADLINE_MAX_TOKENS or not name.startswith("prefix")
                ),
                "checks": [
                    {
                        "name": n,
                        "passed": ok,
                        "value": d
                        + (
                            " (informational below the headline budget)"
                            if n.startswith("prefix") and t["max_tokens"] != HEADLINE_MAX_TOKENS
                            else ""
                        ),
                    }
                    for n, ok, d in checks
                ],
            }
        )
    return out


# --------------------------------------------------------------------------------------------
# the run


def _source() -> dict[str, Any]:
    """The commit measured, and whether langmem_ext had uncommitted changes."""
    import subprocess

    def git(*args: str) -> str:
        try:
            done = subprocess.run(
                ["git", *args], cwd=ROOT, capture_output=True, text=True, timeout=10
            )
        except (OSError, subprocess.SubprocessError):
            return ""
        return done.stdout.strip() if done.returncode == 0 else ""

    return {
        "commit": git("rev-parse", "--short", "HEAD") or "unknown",
        "langmem_ext_modified": bool(git("status", "--porcelain", "--", "langmem_ext")),
    }


def _versions() -> dict[str, str]:
    names = ("langmem-ext", "langmem", "langchain", "langchain-core", "langgraph")
    return {name: package_version(name) for name in names}


def run_summaries(
    config: SummariesConfig, log: Callable[[str], None] = log_progress, command: str = ""
) -> dict[str, Any]:
    """Run every tool over the same marked loop; returns the JSON-ready results with targets."""
    started = time.perf_counter()
    started_utc = dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M")
    load_at_start = load_average()
    conversation = marked_loop(config.loop_n, config.seed)
    body = conversation.body
    conversation_tokens = count_tokens_approximately(list(body))
    log(
        f"[summaries] {config.mode}: agent_loop({config.loop_n}, seed={config.seed}): "
        f"{len(conversation.lengths)} model calls, {len(body)} messages, "
        f"{conversation_tokens:,} tokens"
    )
    tools: dict[str, dict[str, Any]] = {}
    for factory in tool_factories(config):
        begun = time.perf_counter()
        passes = [run_tool(factory(), conversation) for _ in range(max(config.timing_reps, 1))]
        first = passes[0]
        if any(p["summarizer"]["calls"] != first["summarizer"]["calls"] for p in passes):
            raise AssertionError(f"{first['label']}: passes differ; the run is not deterministic")
        totals = [p["timing"]["strategy_s"] for p in passes]
        median = statistics.median(totals)
        typical = min(passes, key=lambda p: abs(p["timing"]["strategy_s"] - median))
        first["timing"] = {**typical["timing"], "strategy_s": median, "totals_s": totals}
        tools[first["key"]] = first
        log(
            f"  {first['label']} @ {first['max_tokens']:,}: {len(passes)} pass(es), "
            f"{time.perf_counter() - begun:.1f} s"
        )
    machine = machine_info()
    machine["packages"] = _versions()
    results: dict[str, Any] = {
        "meta": {
            "mode": config.mode,
            "started_utc": started_utc,
            "command": command or "python -m bench.summaries",
            "config": asdict(config),
            "machine": machine,
            "source": _source(),
            "load_average_start": load_at_start,
            "json_name": "",
        },
        "conversation": {
            "loop_n": config.loop_n,
            "seed": config.seed,
            "model_calls": len(conversation.lengths),
            "messages": len(body),
            "tokens": conversation_tokens,
            "system_tokens": count_tokens_approximately(
                [m for m in conversation.final if isinstance(m, SystemMessage)]
            ),
        },
        "tools": tools,
    }
    results["targets"] = evaluate_targets(tools)
    results["meta"]["runtime_s"] = time.perf_counter() - started
    results["meta"]["load_average_end"] = load_average()
    return results


# --------------------------------------------------------------------------------------------
# output


def _verdict(passed: bool) -> str:
    return "PASS" if passed else "FAIL"


def _table(header: list[str], rows: list[list[str]]) -> list[str]:
    rule = [":---"] + ["---:"] * (len(header) - 1)
    out = ["| " + " | ".join(header) + " |", "| " + " | ".join(rule) + " |"]
    out.extend("| " + " | ".join(row) + " |" for row in rows)
    return out


def _name(t: dict[str, Any]) -> str:
    return f"{t['label']} @ {t['max_tokens']:,}"


def render_markdown(results: dict[str, Any]) -> str:
    meta, conv, tools = results["meta"], results["conversation"], results["tools"]
    cfg = meta["config"]
    lines = ["# Summarizing memory: langmem_ext vs langmem vs SummarizationMiddleware", ""]
    if meta["mode"] != "full":
        lines += [
            f"> **{meta['mode']} run** (shorter loop): a smoke test, not a measurement. Run "
            "`python -m bench.summaries` for the real numbers.",
            "",
        ]
    lines += [
        *provenance_lines(meta),
        f"- Source: commit {meta['source']['commit']}"
        + (
            " with uncommitted changes in langmem_ext"
            if meta["source"]["langmem_ext_modified"]
            else ""
        ),
        "- Load average (1/5/15 min) at start "
        f"{format_load(meta.get('load_average_start'))}, at end "
        f"{format_load(meta.get('load_average_end'))}",
        f"- Loop: `agent_loop({conv['loop_n']:,}, seed={conv['seed']})`: "
        f"{conv['model_calls']:,} model calls; at the last one the history holds "
        f"{conv['messages']:,} conversation messages of **{conv['tokens']:,} tokens** (the "
        f"*conversation tokens*; system message {conv['system_tokens']} more).",
        "- Counter: langchain-core `count_tokens_approximately` everywhere (views, summarizer "
        "input, conversation); langmem_ext uses `ApproximateCounter()`, which counts the same.",
        f"- Fake summarizer: deterministic, answers with {cfg['summary_fill']:.0%} of the "
        f"tool's summary budget (langmem_ext: `config.max_summary_tokens`; langmem "
        f"`max_summary_tokens={cfg['max_summary_tokens']:,}`; the middleware has no summary "
        f"budget and gets the same {int(cfg['max_summary_tokens'] * cfg['summary_fill'])}-token "
        "answers). It records every `m<N>:` marker in its input (each message's text starts "
        "with its marker).",
        "",
        "## Verdicts (langmem_ext targets)",
        "",
    ]
    for target in results["targets"]:
        failed = [
            c for c in target["checks"] if not c["passed"] and "informational" not in c["value"]
        ]
        detail = (
            "; ".join(f"{c['name']}: {c['value']}" for c in failed) if failed else "all targets"
        )
        lines.append(
            f"- **{_verdict(target['passed'])}** {target['label']} @ "
            f"{target['max_tokens']:,}: {detail}"
        )
    lines += ["", "Every check, per strategy and budget:", ""]
    names = [c["name"] for c in results["targets"][0]["checks"]] if results["targets"] else []
    rows = []
    for target in results["targets"]:
        rows.append(
            [f"{target['label']} @ {target['max_tokens']:,}"]
            + [f"{_verdict(c['passed'])} ({c['value']})" for c in target["checks"]]
        )
    lines += _table(["strategy @ max_tokens", *names], rows)
    lines += [
        "",
        "## Summarizer work and lost messages",
        "",
        "*Never summarized*: messages that left the model's view and whose marker the summarizer "
        "never read. *Left before read*: left the view before the summarizer had read them (read "
        "later or never). *Read twice+*: messages whose marker was in the input of more than one "
        "summarizer call.",
        "",
    ]
    rows = []
    for t in tools.values():
        s, d = t["summarizer"], t["dropped"]
        rows.append(
            [
                _name(t),
                f"{s['calls']:,}",
                f"{s['input_tokens']:,}",
                f"{s['input_ratio']:.3f}x",
                f"{s['messages_read']:,} / {conv['messages']:,}",
                f"{s['messages_read_more_than_once']:,}",
                f"{d['never_summarized']:,}",
                f"{d['left_before_summarized']:,}",
            ]
        )
    lines += _table(
        [
            "tool @ max_tokens",
            "summarizer calls",
            "input tokens",
            "input ÷ conversation",
            "messages read",
            "read twice+",
            "never summarized",
            "left before read",
        ],
        rows,
    )
    lines += [
        "",
        "## Model inputs",
        "",
        "*Broken*: views with an error-severity `langmem_ext.validate` finding (kinds counted "
        "once per view). *Newest human missing*: the history's newest HumanMessage is not in the "
        "view (informational). *Over*: views whose `count_tokens_approximately` exceeds "
        "max_tokens. *Prefix kept*: the previous call's view is a prefix of this one, message "
        "for message (equality); *prefix bound*: the share a tool would reach if only the calls "
        "on which it summarized broke the prefix (each summary changes the prefix once).",
        "",
    ]
    rows = []
    for t in tools.values():
        v, p = t["validity"], t["prefix"]
        kinds = ", ".join(f"{k} {n}" for k, n in v["broken_kinds"].items())
        rows.append(
            [
                _name(t),
                f"{v['views']:,}",
                f"{v['broken']:,}" + (f" ({kinds})" if kinds else ""),
                f"{v['newest_human_missing']:,}",
                f"{v['over_budget']:,}",
                f"+{v['max_overshoot']:,}" if v["over_budget"] else "–",
                f"{v['max_view_tokens']:,}",
                f"{v['mean_view_tokens']:,.0f}",
                f"{p['kept']:,} / {p['turns']:,} ({p['fraction']:.2%})",
                f"{p['broken_on_summarizing_calls']:,} / {p['broken_on_other_calls']:,}",
                f"{p['bound_if_only_summarizing_breaks']:.1%}",
            ]
        )
    lines += _table(
        [
            "tool @ max_tokens",
            "views",
            "broken",
            "newest human missing",
            "over",
            "max overshoot",
            "max view tokens",
            "mean view tokens",
            "prefix kept",
            "prefix broken: summarizing / other calls",
            "prefix bound (1 − summarizing calls ÷ turns)",
        ],
        rows,
    )
    lines += [
        "",
        "## langmem_ext: hysteresis and expected calls",
        "",
        "Effective trigger and target are `config.level(config.trigger_tokens)` and "
        "`config.level(config.target_tokens)` (after the safety margin). Expected calls = "
        "conversation tokens ÷ (effective trigger − effective target). *Tokens folded per "
        "fold* (`state.folded_tokens ÷ state.folds`) larger than that gap means each fold went "
        "below the target (it stops at a human-turn boundary and reserves the full summary "
        "budget, of which the fake uses 80%), so fewer calls are needed than the formula "
        "predicts. *Views with clipped bodies*: views holding a TieredSummary tier-1 clip "
        "marker.",
        "",
    ]
    rows = []
    for t in tools.values():
        if t["family"] != "langmem_ext":
            continue
        e = t["langmem_ext"]
        rows.append(
            [
                _name(t),
                f"{e['trigger_tokens']:,} / {e['target_tokens']:,}",
                f"{e['safety_margin']:g}",
                f"{e['effective_trigger']:,} / {e['effective_target']:,}",
                f"{t['summary_budget']:,}",
                f"{e['folds']:,}",
                f"{t['summarizer']['calls']:,}",
                f"{e['expected_calls']:.1f}",
                f"{e['calls_over_expected']:.2f}x",
                f"{e['mean_tokens_per_fold']:,.0f}",
                f"{e['mean_view_tokens_after_fold']:,.0f}",
                f"{e['report_prefix_fraction']:.1%}",
                f"{e['clipped_body_views']:,}",
            ]
        )
    lines += _table(
        [
            "strategy @ max_tokens",
            "trigger / target",
            "safety margin",
            "effective trigger / target",
            "summary budget",
            "folds",
            "summarizer calls",
            "expected calls",
            "calls ÷ expected",
            "tokens folded per fold",
            "view tokens after a fold",
            "report.prefix_kept",
            "views with clipped bodies",
        ],
        rows,
    )
    lines += [
        "",
        "## Time in the tool",
        "",
        f"Sum of the per-call wall times of the tool over the loop (median of "
        f"{cfg['timing_reps']} pass(es), each with a fresh tool; the per-call columns come from "
        "the pass closest to that median; cyclic GC paused), "
        "**excluding the fake summarizer's own time** (measured inside it and subtracted); "
        "the LangChain call machinery around it (`RunnableLambda` / `BaseChatModel.invoke`, "
        "`with_retry`) is counted as the tool's. For the middleware: `before_model` plus "
        "applying its update with `add_messages`.",
        "",
    ]
    rows = []
    for t in tools.values():
        timing = t["timing"]
        rows.append(
            [
                _name(t),
                format_seconds(timing["strategy_s"]),
                format_seconds(timing["per_call_mean_s"]),
                format_seconds(timing["per_call_other_mean_s"]),
                format_seconds(timing["per_call_summarizing_mean_s"]),
                format_seconds(timing["first_decile_per_call_mean_s"]),
                format_seconds(timing["last_decile_per_call_mean_s"]),
                format_seconds(timing["per_call_max_s"]),
                format_seconds(t["summarizer"]["seconds"]),
            ]
        )
    lines += _table(
        [
            "tool @ max_tokens",
            "total",
            "per call",
            "calls without summarizing",
            "calls with summarizing",
            "first 10% of calls",
            "last 10% of calls",
            "slowest call",
            "fake summarizer (excluded)",
        ],
        rows,
    )
    errors = [(k, t["error"]) for k, t in tools.items() if t["error"]]
    if errors:
        lines += ["", "## Errors", ""]
        lines += [f"- `{k}`: {e}" for k, e in errors]
    settings = next((t["settings"] for t in tools.values() if t["family"] == "langchain"), None)
    lines += [
        "",
        "## How each tool was called",
        "",
        "- langmem_ext: `SummaryBuffer(max_tokens, summarizer=fake, max_summary_tokens="
        f"{cfg['max_summary_tokens']:,})` (default target half-way between the summary budget "
        "and max_tokens), `Compacting(max_tokens, summarizer=fake)` (defaults), "
        f"`TieredSummary(max_tokens, summarizer=fake, max_summary_tokens="
        f"{cfg['max_summary_tokens']:,})` (defaults), all with `counter=ApproximateCounter()`; "
        "`apply(history, previous_state)` at every call.",
        "- langmem: `summarize_messages(history, running_summary=previous, model=FakeChatModel, "
        f"max_tokens=max_tokens, max_summary_tokens={cfg['max_summary_tokens']:,}, "
        "token_counter=count_tokens_approximately)`; the returned running summary is kept when "
        "not None.",
        "- langchain: `SummarizationMiddleware(FakeChatModel, trigger=('tokens', max_tokens))`"
        + (
            f" with the defaults keep={tuple(settings['keep'])} and trim_tokens_to_summarize="
            f"{settings['trim_tokens_to_summarize']}"
            if settings
            else ""
        )
        + "; `before_model` on our own state, the system prompt kept outside it as "
        "`create_agent(system_prompt=...)` does, updates applied with `add_messages`.",
        "",
        "---",
        "",
        f"Machine-readable results: `{meta['json_name']}`.",
        "",
    ]
    return "\n".join(lines)


def write_results(results: dict[str, Any], out_dir: Path, stem: str) -> tuple[Path, Path]:
    """Write ``<stem>.md`` and ``<stem>.json`` (the shared writer, with this report)."""
    return run.write_results(results, out_dir, stem, render=render_markdown)


def main(argv: Sequence[str] | None = None) -> int:
    return bench_main(
        argv,
        module="bench.summaries",
        description=(
            "Benchmark langmem_ext's summarizing strategies against langmem's "
            "summarize_messages and langchain's SummarizationMiddleware."
        ),
        quick_help="smoke run: a 300-message loop (~20 s)",
        seed_help="seed of the agent loop (0)",
        configs=(FULL, QUICK),
        run=run_summaries,
        write=write_results,
        stem=lambda mode: "summaries" if mode == "full" else f"summaries_{mode}",
        default_out=DEFAULT_OUT,
    )


if __name__ == "__main__":
    raise SystemExit(main())
