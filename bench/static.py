"""Section A: per-call time on finished synthetic histories of n messages.

For each n the same history is handed to four configurations: ``trim_messages`` with an uncached
exact tiktoken counter and with ``count_tokens_approximately``, and ``TokenBudget`` with
``TiktokenCounter`` and with ``ApproximateCounter``. ``TokenBudget`` is timed twice: the first call
(fresh counter, ``state=None``: every message is counted once) and steady-state calls (the same
counter, passing back ``result.state``: only the walk over the view's units, from the cache).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from langchain_core.messages import BaseMessage, trim_messages
from langchain_core.messages.utils import count_tokens_approximately

from bench.counters import MODEL, ListCounter, make_tiktoken_list_counter
from bench.harness import Timing, auto_reps, time_calls
from langmem_ext import ApproximateCounter, MemoryResult, TiktokenCounter, TokenBudget
from langmem_ext.core.tokens import TokenCounter
from langmem_ext.testing import synthetic_history

__all__ = ["STATIC_METHODS", "StaticSettings", "run_static"]

#: column key -> label, in table order
STATIC_METHODS: dict[str, str] = {
    "trim_tiktoken": "trim_messages + tiktoken (uncached)",
    "trim_approx": "trim_messages + count_tokens_approximately",
    "budget_tiktoken_cold": "TokenBudget(TiktokenCounter) first call",
    "budget_tiktoken_warm": "TokenBudget(TiktokenCounter) steady state",
    "budget_approx_cold": "TokenBudget(ApproximateCounter) first call",
    "budget_approx_warm": "TokenBudget(ApproximateCounter) steady state",
}


@dataclass(frozen=True)
class StaticSettings:
    sizes: tuple[int, ...]
    budget: int
    seed: int
    #: seconds of repetitions per (method, n), and the bounds on the repetition count
    seconds_per_cell: float
    min_reps: int
    max_reps: int
    warm_calls: int


def _trim(history: list[BaseMessage], budget: int, counter: ListCounter) -> list[BaseMessage]:
    return trim_messages(
        history,
        max_tokens=budget,
        strategy="last",
        token_counter=counter,
        start_on="human",
        include_system=True,
        allow_partial=False,
    )


def _timed(
    settings: StaticSettings,
    call: Callable[[Any], object],
    setup: Callable[[], Any] = lambda: None,
) -> Timing:
    """One untimed warm-up (also the estimate), then as many repetitions as the budget allows."""
    arg = setup()
    start = time.perf_counter()
    call(arg)
    estimate = time.perf_counter() - start
    reps = auto_reps(estimate, settings.seconds_per_cell, settings.min_reps, settings.max_reps)
    return time_calls(call, reps, setup)


def _budget_timings(
    history: list[BaseMessage],
    settings: StaticSettings,
    make_counter: Callable[[], TokenCounter],
) -> tuple[Timing, Timing, MemoryResult]:
    def fresh() -> TokenBudget:
        return TokenBudget(settings.budget, counter=make_counter())

    cold = _timed(settings, lambda strategy: strategy.apply(history), fresh)
    strategy = fresh()
    result = strategy.apply(history)
    holder = [result]

    def warm_call(_: object) -> None:
        holder[0] = strategy.apply(history, holder[0].state)

    warm_call(None)  # warm-up
    warm = time_calls(warm_call, settings.warm_calls)
    return cold, warm, result


def _static_row(n: int, settings: StaticSettings, log: Callable[[str], None]) -> dict[str, Any]:
    history = synthetic_history(n, seed=settings.seed)
    exact, _ = make_tiktoken_list_counter(MODEL)
    timings: dict[str, Timing] = {}
    log(f"  A. n={n:,}: trim_messages + tiktoken")
    timings["trim_tiktoken"] = _timed(settings, lambda _: _trim(history, settings.budget, exact))
    log(f"  A. n={n:,}: trim_messages + count_tokens_approximately")
    timings["trim_approx"] = _timed(
        settings, lambda _: _trim(history, settings.budget, count_tokens_approximately)
    )
    log(f"  A. n={n:,}: TokenBudget")
    cold, warm, exact_result = _budget_timings(history, settings, lambda: TiktokenCounter(MODEL))
    timings["budget_tiktoken_cold"], timings["budget_tiktoken_warm"] = cold, warm
    cold, warm, _ = _budget_timings(history, settings, ApproximateCounter)
    timings["budget_approx_cold"], timings["budget_approx_warm"] = cold, warm

    probe, probe_stats = make_tiktoken_list_counter(MODEL)  # one instrumented, untimed call
    trim_view = _trim(history, settings.budget, probe)

    def ratio(slow: str, fast: str) -> float:
        return timings[slow].median / timings[fast].median

    return {
        "n": n,
        "view_messages_trim_tiktoken": len(trim_view),
        "view_messages_budget_tiktoken": len(exact_result.messages),
        "history_tokens_tiktoken": exact_result.report.tokens_before,
        "trim_tiktoken_per_call": {
            "counter_calls": probe_stats.calls,
            "messages_counted": probe_stats.messages,
            "encodes": probe_stats.encodes,
        },
        **{key: timing.to_dict() for key, timing in timings.items()},
        "ratios": {
            "trim_tiktoken_over_budget_tiktoken_warm": ratio(
                "trim_tiktoken", "budget_tiktoken_warm"
            ),
            "trim_tiktoken_over_budget_tiktoken_cold": ratio(
                "trim_tiktoken", "budget_tiktoken_cold"
            ),
            "trim_approx_over_budget_approx_warm": ratio("trim_approx", "budget_approx_warm"),
        },
    }


def run_static(settings: StaticSettings, log: Callable[[str], None] = print) -> dict[str, Any]:
    """Time every configuration at every size; returns the JSON-ready section."""
    rows = [_static_row(n, settings, log) for n in settings.sizes]
    scaling: dict[str, Any] = {}
    if len(rows) >= 2:
        small, large = rows[-2], rows[-1]
        for key in ("budget_tiktoken_warm", "budget_approx_warm", "trim_tiktoken", "trim_approx"):
            scaling[key] = {
                "n_small": small["n"],
                "n_large": large["n"],
                "ratio": large[key]["median_s"] / small[key]["median_s"],
            }
    return {
        "budget": settings.budget,
        "seed": settings.seed,
        "model": MODEL,
        "sizes": list(settings.sizes),
        "rows": rows,
        "scaling": scaling,
    }
