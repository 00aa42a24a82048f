"""The call that crosses the summary trigger: how long it waits for the summarizer.

Run ``python -m bench.crossing`` from the repository root (``--quick`` for a smoke run, ``--out
DIR`` to write elsewhere). It writes ``bench/results/crossing.md`` and ``crossing.json``.

Every tool summarizes with the same slow model: a LangChain chat model that answers after
``delay`` seconds (2 s, as a real summarizer of a long input does) with a fixed-size summary. The
same chat (human/assistant turns of about 60 tokens each) is fed to each tool one model call at
a time, and each call is timed:

* **langmem_ext** ``SummaryBuffer(max_tokens)``: folds inline (today's default), and with
  ``prefetch_tokens`` (background compaction: the fold starts in a worker thread when the view
  passes the mark, and a later call adopts it);
* **langmem** ``summarize_messages`` (what ``SummarizationNode`` runs), with the running summary
  kept between calls as its docs do;
* **langchain** ``SummarizationMiddleware.before_model``, its update applied with the
  ``add_messages`` reducer as the graph would.

Two rhythms: **spaced**, turns at least ``gap`` (3 s) apart, the chat case (a call waits
``gap`` only while a background fold is running: nothing else happens between calls, so the
wait changes nothing for the others and the run stays short); and **tight**, calls back to back
(an agent loop), where the crossing call may have to wait for the background fold. A third run
uses a summarizer that always times out after ``delay``: how long the crossing call takes folding
inline (one attempt per call, the default), with the Summarizer's retries in the call
(``retry_in_call=True``, ``Summarizer(max_attempts=3)``), and in background mode.

Figures: per call, the latency (ms); the crossing calls are those whose view was over the trigger
(the anchors: a call that called the model; langmem_ext: a call that folded or adopted a fold, or
would have had to). Reported: p50 / p99 / max of the crossing calls and of all calls.
"""

from __future__ import annotations

import statistics
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from langchain_core.callbacks import CallbackManagerForLLMRun
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage
from langchain_core.messages.utils import count_tokens_approximately
from langchain_core.outputs import ChatGeneration, ChatResult

from bench.harness import RunClock, bench_main, log_progress, results_writer
from langmem_ext import ApproximateCounter, FoldPolicy, SummaryBuffer
from langmem_ext.summarize.summarizer import Summarizer


@dataclass(frozen=True)
class CrossingConfig:
    mode: str = "full"
    budget: int = 4_000
    max_summary_tokens: int = 400
    #: the summarizer's answer time (s)
    delay: float = 2.0
    #: the spaced rhythm: seconds between calls (waited only while a background fold runs)
    gap: float = 3.0
    #: model calls per run
    calls: int = 400
    #: background compaction mark, as a share of the budget
    prefetch_ratio: float = 0.8
    #: the failing-summarizer run: calls after the first crossing
    failing_calls: int = 3


FULL = CrossingConfig()
QUICK = replace(FULL, mode="quick", budget=1_200, max_summary_tokens=150, delay=0.05, gap=0.08,
                calls=60)  # fmt: skip


class SlowChat(BaseChatModel):
    """Answers after ``delay`` seconds with ``summary`` (or raises TimeoutError with
    ``fail=True``, after the same delay). Counts its calls."""

    delay: float = 2.0
    summary: str = "summary"
    fail: bool = False
    calls: int = 0

    @property
    def _llm_type(self) -> str:
        return "slow-fake"

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        self.calls += 1
        time.sleep(self.delay)
        if self.fail:
            raise TimeoutError(f"the model did not answer within {self.delay:g} s")
        return ChatResult(generations=[ChatGeneration(message=AIMessage(self.summary))])


def _summary_text(tokens: int) -> str:
    """A summary of about ``tokens`` words that passes the summary checks: it names what the chat
    is about ("questions", a content word the overlap check finds in the transcript), then tokens
    of the chat's shape (``w0`` ...), none repeated (one word repeated to fill it would be
    rejected as degenerate)."""
    return "The user asked questions: " + " ".join(f"w{j}" for j in range(max(tokens - 4, 1)))


def chat(calls: int) -> list[list[BaseMessage]]:
    """The messages added before each model call: a human turn (and the previous answer)."""
    added: list[list[BaseMessage]] = [[SystemMessage("You are a helpful assistant.", id="sys")]]
    for i in range(calls):
        words = " ".join(f"w{(i * 7 + j) % 97}" for j in range(40))
        turn: list[BaseMessage] = [HumanMessage(f"question {i}: {words}?", id=f"h{i}")]
        if i:
            answer = " ".join(f"a{(i * 5 + j) % 89}" for j in range(40))
            turn.insert(0, AIMessage(f"answer {i - 1}: {answer}.", id=f"a{i - 1}"))
        added.append(turn)
    added[1] = added[0] + added[1]
    return added[1:]


@dataclass
class Tool:
    label: str
    model: SlowChat
    step: Callable[[list[BaseMessage]], None]
    #: whether the last step was a crossing call
    crossed: Callable[[], bool]
    #: whether background work is running (the spaced rhythm waits only then)
    busy: Callable[[], bool] = lambda: False


def _langmem_ext(
    config: CrossingConfig, *, background: bool, fail: bool = False, retry_in_call: bool = False
) -> Tool:
    model = SlowChat(delay=config.delay, summary=_summary_text(config.max_summary_tokens // 2),
                     fail=fail)  # fmt: skip
    summarizer = Summarizer(model, max_summary_tokens=config.max_summary_tokens, timeout=None,
                            retry_initial_wait=0.5, retry_max_wait=2.0)  # fmt: skip
    strategy = SummaryBuffer(
        config.budget,
        summarizer=summarizer,
        counter=ApproximateCounter(),
        policy=FoldPolicy(
            prefetch_tokens=int(config.budget * config.prefetch_ratio) if background else None,
            retry_in_call=retry_in_call,
        ),
    )
    state: list[Any] = [None]
    crossed = [False]

    def step(history: list[BaseMessage]) -> None:
        before = model.calls
        result = strategy.apply(history, state[0])
        state[0] = result.state
        report = result.report
        crossed[0] = (
            report.trigger is not None
            or report.folded > 0
            or (not background and model.calls > before)
        )

    def busy() -> bool:
        return strategy.flush(timeout=0) > 0

    label = "langmem_ext SummaryBuffer" + (" + prefetch (background)" if background else "")
    if retry_in_call:
        label += " (retry_in_call=True)"
    return Tool(label, model, step, lambda: crossed[0], busy)


def _langmem(config: CrossingConfig) -> Tool:
    from langmem.short_term import RunningSummary, summarize_messages

    model = SlowChat(delay=config.delay, summary=_summary_text(config.max_summary_tokens // 2))
    running: list[RunningSummary | None] = [None]
    crossed = [False]

    def step(history: list[BaseMessage]) -> None:
        before = model.calls
        result = summarize_messages(
            history,
            running_summary=running[0],
            model=model,
            max_tokens=config.budget,
            max_summary_tokens=config.max_summary_tokens,
            token_counter=count_tokens_approximately,
        )
        if result.running_summary is not None:
            running[0] = result.running_summary
        crossed[0] = model.calls > before

    return Tool("langmem summarize_messages (SummarizationNode)", model, step,
                lambda: crossed[0])  # fmt: skip


def _middleware(config: CrossingConfig) -> Tool:
    from langchain.agents.middleware import SummarizationMiddleware
    from langgraph.graph.message import add_messages

    model = SlowChat(delay=config.delay, summary=_summary_text(config.max_summary_tokens // 2))
    middleware: Any = SummarizationMiddleware(model, trigger=("tokens", config.budget))
    state: Any = []
    fed = [0]
    crossed = [False]

    def step(history: list[BaseMessage]) -> None:
        nonlocal state
        new = [m for m in history[fed[0] :] if not isinstance(m, SystemMessage)]
        fed[0] = len(history)
        state = add_messages(state, new)
        before = model.calls
        update = middleware.before_model({"messages": state}, None)
        if update is not None:
            state = add_messages(state, update["messages"])
        crossed[0] = model.calls > before

    return Tool("langchain SummarizationMiddleware", model, step, lambda: crossed[0])


def _spread(values: Sequence[float]) -> dict[str, Any]:
    if not values:
        return {"n": 0}
    ordered = sorted(values)
    p99 = ordered[min(len(ordered) - 1, round(0.99 * (len(ordered) - 1)))]
    return {
        "n": len(values),
        "p50": round(statistics.median(values), 2),
        "p99": round(p99, 2),
        "max": round(ordered[-1], 2),
    }


def run_tool(tool: Tool, added: list[list[BaseMessage]], gap: float | None) -> dict[str, Any]:
    history: list[BaseMessage] = []
    every: list[float] = []
    crossing: list[float] = []
    for messages in added:
        history.extend(messages)
        started = time.perf_counter()
        tool.step(list(history))
        ms = (time.perf_counter() - started) * 1_000
        every.append(ms)
        if tool.crossed():
            crossing.append(ms)
        if gap is not None and tool.busy():
            time.sleep(gap)  # the user is typing: the background fold has time to finish
    return {
        "tool": tool.label,
        "summarizer_calls": tool.model.calls,
        "crossing_ms": _spread(crossing),
        "all_ms": _spread(every),
    }


def _failing(config: CrossingConfig) -> list[dict[str, Any]]:
    """A summarizer that always times out: the crossing call's time folding inline (one attempt
    per call, the default), with the Summarizer's retries in the call (``retry_in_call``), and in
    background mode (at most one attempt waited for; later attempts on later calls)."""
    rows = []
    for background, retry_in_call in ((False, False), (False, True), (True, False)):
        tool = _langmem_ext(config, background=background, fail=True, retry_in_call=retry_in_call)
        history: list[BaseMessage] = []
        seconds: list[float] = []
        attempts: list[int] = []
        for messages in chat(config.calls):
            history.extend(messages)
            before = tool.model.calls
            started = time.perf_counter()
            tool.step(list(history))
            if tool.model.calls > before or tool.crossed():
                seconds.append(time.perf_counter() - started)
                attempts.append(tool.model.calls - before)
                if len(seconds) >= config.failing_calls:
                    break
        rows.append(
            {
                "tool": tool.label,
                "crossing_s": [round(s, 2) for s in seconds],
                #: model calls started during each of those calls (a background job started
                #: by an earlier call is not counted here)
                "attempts": attempts,
                "max_attempt_s": config.delay,
            }
        )
    return rows


def run(config: CrossingConfig, command: str = "") -> dict[str, Any]:
    """Every tool in both rhythms, then the failing summarizer; the JSON-ready results."""
    clock = RunClock()
    added = chat(config.calls)
    factories: list[Callable[[], Tool]] = [
        lambda: _langmem_ext(config, background=False),
        lambda: _langmem_ext(config, background=True),
        lambda: _langmem(config),
        lambda: _middleware(config),
    ]
    rhythms: dict[str, list[dict[str, Any]]] = {}
    for rhythm, gap in (("spaced", config.gap), ("tight", None)):
        rows = []
        for factory in factories:
            tool = factory()
            log_progress(f"  {rhythm}: {tool.label}")
            rows.append(run_tool(tool, added, gap))
        rhythms[rhythm] = rows
    results = {
        "meta": clock.meta(
            config,
            command or "python -m bench.crossing",
            load_average=clock.load_at_start,
            threads=threading.active_count(),
        ),
        "rhythms": rhythms,
        "failing": _failing(config),
    }
    return clock.finish(results)


def _cell(spread: dict[str, Any], key: str) -> str:
    return "—" if not spread.get("n") else f"{spread[key]:,.1f}"


def render_markdown(results: dict[str, Any]) -> str:
    c = results["meta"]["config"]
    lines = [
        "# The crossing call: how long it waits for a 2-second summarizer",
        "",
        f"`python -m bench.crossing`: a chat of {c['calls']} model calls (turns of about 60 "
        f"tokens), budget {c['budget']:,} tokens, a summarizer that answers after "
        f"{c['delay']:g} s. langmem_ext's background mode: `prefetch_tokens = "
        f"{c['prefetch_ratio']:g} x max_tokens`. Latency in ms; crossing calls = calls whose "
        "view was over the trigger.",
        "",
        "Goal (issue 16): with turns >= 3 s apart, p50 < 5 ms and p99 < 50 ms added to the "
        "crossing call; back to back, never worse than folding inline.",
        "",
    ]
    for rhythm, title in (
        ("spaced", f"Turns {c['gap']:g} s apart"),
        ("tight", "Back to back (agent loop)"),
    ):
        lines += [f"## {title}", ""]
        lines += [
            "| tool | summarizer calls | crossing calls | crossing p50 | p99 | max "
            "| all calls p50 |",
            "|---|---:|---:|---:|---:|---:|---:|",
        ]
        for row in results["rhythms"][rhythm]:
            x, a = row["crossing_ms"], row["all_ms"]
            lines.append(
                f"| {row['tool']} | {row['summarizer_calls']} | {x.get('n', 0)} | "
                f"{_cell(x, 'p50')} | {_cell(x, 'p99')} | {_cell(x, 'max')} | {_cell(a, 'p50')} |"
            )
        lines.append("")
    lines += [
        "## A summarizer that always times out",
        "",
        f"Each attempt takes {c['delay']:g} s. Seconds spent by each call that tried to fold:",
        "",
        "| tool | crossing calls (s) |",
        "|---|---|",
    ]
    for row in results["failing"]:
        lines.append(f"| {row['tool']} | {', '.join(f'{s:g}' for s in row['crossing_s'])} |")
    lines.append("")
    return "\n".join(lines)


#: ``write_results(results, out_dir, stem)``: ``<stem>.md`` and ``<stem>.json`` of this benchmark
write_results = results_writer(render_markdown)


def main(argv: Sequence[str] | None = None) -> int:
    return bench_main(
        argv,
        module="bench.crossing",
        description=__doc__ or "",
        quick_help="a small smoke run",
        configs=(FULL, QUICK),
        run=run,
        write=write_results,
    )


if __name__ == "__main__":
    raise SystemExit(main())
