"""Sections B, C and D: one agent loop, every strategy called at every model call.

``agent_loop(n, seed)`` yields the growing history at each model call (after each human message
and each batch of tool results). Every configuration sees the same calls:

* **B, time**: the sum of the per-call times of the strategy over the loop (the history generator
  is not timed). ``TokenBudget`` carries ``result.state`` from call to call, as an app would; a
  fresh counter (cold cache) starts every pass.
* **C, prefix stability**: the share of calls whose view begins with the previous call's view,
  message for message (object identity), which is what keeps provider prompt caches hitting.
* **D, validity** (untimed): every view is recounted independently (the benchmark's own tiktoken
  counter, or ``count_tokens_approximately``) against its budget and checked with
  ``langmem_ext.validate``; we also check that the newest HumanMessage is in the view.

Each configuration runs one instrumented pass (collecting views, counting tokenizer work; it is
also the warm-up) and then ``reps`` timed passes. ``trim_messages`` with the uncached tiktoken
counter is too slow to repeat within the time budget: its single pass is both the instrumented and
the timed one (its counter counts encode calls inline, an integer increment per encode).
"""

from __future__ import annotations

import statistics
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from langchain_core.messages import BaseMessage, trim_messages
from langchain_core.messages.utils import count_tokens_approximately

from bench.counters import (
    MODEL,
    CountingTiktokenCounter,
    ListCounter,
    TokenStats,
    make_approx_list_counter,
    make_tiktoken_list_counter,
)
from bench.harness import gc_paused, is_prefix, newest_human
from langmem_ext import (
    ApproximateCounter,
    MemoryReport,
    MemoryState,
    TiktokenCounter,
    TokenBudget,
    validate,
)
from langmem_ext.testing import agent_loop

__all__ = ["LoopMethod", "LoopSettings", "default_methods", "run_loop"]

Step = Callable[[list[BaseMessage]], tuple[list[BaseMessage], MemoryReport | None]]


@dataclass(frozen=True)
class LoopMethod:
    key: str
    label: str
    family: Literal["trim", "budget"]
    counter: Literal["tiktoken", "approx"]
    max_tokens: int
    target_tokens: int | None = None
    #: run once (instrumented and timed in the same pass) instead of ``reps`` times
    slow: bool = False


@dataclass(frozen=True)
class LoopSettings:
    n: int
    seed: int
    reps: int
    budget: int
    hysteresis: tuple[tuple[int, int], ...]
    headline_hysteresis: tuple[int, int]


def default_methods(settings: LoopSettings) -> list[LoopMethod]:
    b = settings.budget
    methods = [
        LoopMethod("trim_tiktoken", "trim_messages + tiktoken (uncached)", "trim", "tiktoken", b,
                   slow=True),
        LoopMethod("trim_approx", "trim_messages + count_tokens_approximately", "trim", "approx",
                   b),
        LoopMethod("budget_tiktoken", "TokenBudget(TiktokenCounter)", "budget", "tiktoken", b),
        LoopMethod("budget_approx", "TokenBudget(ApproximateCounter)", "budget", "approx", b),
    ]  # fmt: skip
    for hi, lo in settings.hysteresis:
        methods.append(
            LoopMethod(
                hysteresis_key(hi, lo),
                f"TokenBudget(TiktokenCounter, max {hi:,}, target {lo:,})",
                "budget",
                "tiktoken",
                hi,
                target_tokens=lo,
            )
        )
    return methods


def hysteresis_key(max_tokens: int, target_tokens: int) -> str:
    return f"budget_tiktoken_hysteresis_{max_tokens}_{target_tokens}"


# --------------------------------------------------------------------------------------------
# one pass


@dataclass
class _Pass:
    per_call: list[float] = field(default_factory=list)
    views: list[list[BaseMessage]] = field(default_factory=list)
    reports: list[MemoryReport | None] = field(default_factory=list)
    newest_human: list[BaseMessage | None] = field(default_factory=list)
    history_lengths: list[int] = field(default_factory=list)
    stats: TokenStats | None = None
    cache: dict[str, int] | None = None

    @property
    def total(self) -> float:
        return sum(self.per_call)


def _trim_step(method: LoopMethod, counter: ListCounter) -> Step:
    def step(history: list[BaseMessage]) -> tuple[list[BaseMessage], MemoryReport | None]:
        view = trim_messages(
            history,
            max_tokens=method.max_tokens,
            strategy="last",
            token_counter=counter,
            start_on="human",
            include_system=True,
            allow_partial=False,
        )
        return view, None

    return step


def _budget_step(strategy: TokenBudget) -> Step:
    state: list[MemoryState | None] = [None]

    def step(history: list[BaseMessage]) -> tuple[list[BaseMessage], MemoryReport | None]:
        result = strategy.apply(history, state[0])
        state[0] = result.state
        return result.messages, result.report

    return step


def _build(method: LoopMethod, instrument: bool) -> tuple[Step, Callable[[_Pass], None]]:
    """The step function for one pass, and what records its counters' work afterwards."""
    if method.family == "trim":
        if method.counter == "tiktoken":
            counter, stats = make_tiktoken_list_counter(MODEL)
        elif instrument:
            counter, stats = make_approx_list_counter()
        else:
            counter, stats = count_tokens_approximately, TokenStats()

        def record_trim(result: _Pass) -> None:
            result.stats = stats

        return _trim_step(method, counter), record_trim

    library: TiktokenCounter | ApproximateCounter
    if method.counter == "approx":
        library = ApproximateCounter()
    else:
        library = CountingTiktokenCounter(MODEL) if instrument else TiktokenCounter(MODEL)
    strategy = TokenBudget(method.max_tokens, counter=library, target_tokens=method.target_tokens)

    def record_budget(result: _Pass) -> None:
        if isinstance(library, CountingTiktokenCounter):
            result.stats = library.stats
        info = library.cache_info()
        result.cache = {"hits": info.hits, "misses": info.misses, "size": info.size}

    return _budget_step(strategy), record_budget


def _run_pass(method: LoopMethod, settings: LoopSettings, *, collect: bool) -> _Pass:
    step, record = _build(method, instrument=collect)
    out = _Pass()
    clock = time.perf_counter
    with gc_paused():
        for history in agent_loop(settings.n, seed=settings.seed):
            start = clock()
            view, report = step(history)
            out.per_call.append(clock() - start)
            if collect:
                out.views.append(view)
                out.reports.append(report)
                out.newest_human.append(newest_human(history))
                out.history_lengths.append(len(history))
    record(out)
    return out


# --------------------------------------------------------------------------------------------
# analysis (untimed)


class _Recounter:
    """Independent view costs: the benchmark's uncached tiktoken counter, memoized per message
    object for speed, or ``count_tokens_approximately``. The memo holds a reference to each
    message it keys by ``id()``, so an id cannot be reused by another message while it is used;
    one recounter per analysed pass."""

    def __init__(self) -> None:
        self._exact, _ = make_tiktoken_list_counter(MODEL)
        self._overhead = self._exact([])
        self._memo: dict[int, tuple[BaseMessage, int]] = {}

    def tiktoken(self, view: list[BaseMessage]) -> int:
        total = self._overhead
        for message in view:
            hit = self._memo.get(id(message))
            if hit is None:
                hit = self._memo[id(message)] = (message, self._exact([message]) - self._overhead)
            total += hit[1]
        return total

    def cost(self, method: LoopMethod, view: list[BaseMessage]) -> int:
        if method.counter == "tiktoken":
            return self.tiktoken(view)
        return count_tokens_approximately(view)


def _analyse(method: LoopMethod, run: _Pass) -> dict[str, Any]:
    recount = _Recounter()
    costs = [recount.cost(method, view) for view in run.views]
    over = sum(cost > method.max_tokens for cost in costs)
    invalid = 0
    kinds: Counter[str] = Counter()
    for view in run.views:
        errors = [f for f in validate(view) if f.severity == "error"]
        if errors:
            invalid += 1
            kinds.update(f.kind for f in errors)
    missing_human = sum(
        human is not None and not any(m is human for m in view)
        for view, human in zip(run.views, run.newest_human, strict=True)
    )
    turns = max(len(run.views) - 1, 0)
    kept = sum(is_prefix(a, b) for a, b in zip(run.views, run.views[1:], strict=False))
    reports = [r for r in run.reports if r is not None]
    validity: dict[str, Any] = {
        "views": len(run.views),
        "over_budget": over,
        "with_errors": invalid,
        "error_kinds": dict(sorted(kinds.items())),
        "newest_human_missing": missing_human,
        "max_view_tokens": max(costs, default=0),
        "mean_view_tokens": statistics.fmean(costs) if costs else 0.0,
    }
    prefix: dict[str, Any] = {
        "turns": turns,
        "kept": kept,
        "fraction": kept / turns if turns else 0.0,
    }
    if reports:
        validity["report_tokens_mismatch"] = sum(
            r.tokens_after != cost for r, cost in zip(reports, costs, strict=True)
        )
        validity["gap_views"] = sum(r.gap for r in reports)
        validity["clipped_views"] = sum(bool(r.clipped) for r in reports)
        reported = sum(r.prefix_kept for r in reports[1:])
        prefix["report_prefix_kept"] = reported
        prefix["report_fraction"] = reported / turns if turns else 0.0
    return {"validity": validity, "prefix": prefix}


def _work(run: _Pass) -> dict[str, Any]:
    calls = len(run.per_call)
    work: dict[str, Any] = {}
    if run.stats is not None and run.stats.messages:
        work["messages_counted"] = run.stats.messages
        work["messages_counted_per_call"] = run.stats.messages / calls if calls else 0.0
    if run.stats is not None and run.stats.encoding:  # a tiktoken counter
        work["encodes"] = run.stats.encodes
        work["encodes_per_call"] = run.stats.encodes / calls if calls else 0.0
    if run.cache is not None:
        work["cache"] = run.cache
        work.setdefault("messages_counted", run.cache["misses"])
        work.setdefault("messages_counted_per_call", run.cache["misses"] / calls if calls else 0)
    return work


def _timing(runs: list[_Pass]) -> dict[str, Any]:
    totals = [r.total for r in runs]
    median_total = statistics.median(totals)
    typical = min(runs, key=lambda r: abs(r.total - median_total))
    calls = len(typical.per_call)
    tail = typical.per_call[-max(calls // 10, 1) :] if calls else [0.0]
    return {
        "reps": len(runs),
        "total_median_s": median_total,
        "total_min_s": min(totals),
        "totals_s": totals,
        "per_call_mean_s": median_total / calls if calls else 0.0,
        "last_decile_per_call_mean_s": statistics.fmean(tail),
    }


def run_loop(settings: LoopSettings, log: Callable[[str], None] = print) -> dict[str, Any]:
    """Run every configuration over the same agent loop; returns the JSON-ready sections B-D."""
    methods = default_methods(settings)
    results: dict[str, dict[str, Any]] = {}
    lengths: list[int] = []
    for method in methods:
        log(f"  B. {method.label}: " + ("1 pass" if method.slow else f"1 + {settings.reps} passes"))
        started = time.perf_counter()
        instrumented = _run_pass(method, settings, collect=True)
        timed = (
            [instrumented]
            if method.slow
            else [_run_pass(method, settings, collect=False) for _ in range(settings.reps)]
        )
        lengths = instrumented.history_lengths  # the same for every method: same loop, same seed
        results[method.key] = {
            "label": method.label,
            "family": method.family,
            "counter": method.counter,
            "max_tokens": method.max_tokens,
            "target_tokens": method.target_tokens,
            "timing": _timing(timed),
            "timed_in_instrumented_pass": method.slow,
            "work": _work(instrumented),
            **_analyse(method, instrumented),
        }
        log(f"     {time.perf_counter() - started:.1f} s")
    return {
        "n": settings.n,
        "seed": settings.seed,
        "reps": settings.reps,
        "budget": settings.budget,
        "model_calls": len(lengths),
        "final_history_messages": lengths[-1] if lengths else 0,
        "mean_history_messages": statistics.fmean(lengths) if lengths else 0.0,
        "hysteresis": [list(pair) for pair in settings.hysteresis],
        "headline_hysteresis": list(settings.headline_hysteresis),
        "methods": results,
    }
