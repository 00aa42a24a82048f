"""Entry point: ``python -m bench [--quick] [--out DIR] [--seed N]``.

:func:`run_benchmark` is the core (a config in, a JSON-ready dict out); :func:`render_markdown`
and :func:`write_results` turn it into ``<out>/latest.md`` and ``<out>/latest.json`` (``quick.*``
for ``--quick``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from bench.harness import RunClock, bench_main, log_progress, results_writer, seed_tiktoken
from bench.report import render_markdown

__all__ = ["FULL", "QUICK", "BenchConfig", "main", "run_benchmark", "write_results"]


@dataclass(frozen=True)
class BenchConfig:
    mode: str
    sizes: tuple[int, ...]
    budget: int
    seed: int
    seconds_per_cell: float
    min_reps: int
    max_reps: int
    warm_calls: int
    loop_n: int
    loop_reps: int
    hysteresis: tuple[tuple[int, int], ...]
    headline_hysteresis: tuple[int, int]
    counter_check_messages: int


FULL = BenchConfig(
    mode="full",
    sizes=(100, 1_000, 10_000),
    budget=8_000,
    seed=0,
    seconds_per_cell=2.5,
    min_reps=7,
    max_reps=51,
    warm_calls=51,
    loop_n=2_000,
    loop_reps=5,
    hysteresis=((8_000, 4_000), (16_000, 8_000), (32_000, 16_000)),
    headline_hysteresis=(16_000, 8_000),
    counter_check_messages=1_000,
)

QUICK = replace(
    FULL,
    mode="quick",
    sizes=(100, 1_000),
    seconds_per_cell=0.1,
    min_reps=1,
    max_reps=3,
    warm_calls=5,
    loop_n=300,
    loop_reps=1,
    counter_check_messages=200,
)


def run_benchmark(
    config: BenchConfig, log: Callable[[str], None] = log_progress, command: str = ""
) -> dict[str, Any]:
    """Run sections A-D under ``config``; returns the results (JSON-ready, targets evaluated)."""
    seed_tiktoken()  # before anything loads a tiktoken encoding
    from bench.counters import check_equivalence
    from bench.loop import LoopSettings, run_loop
    from bench.report import evaluate_targets
    from bench.static import StaticSettings, run_static
    from langmem_ext.testing import synthetic_history

    clock = RunClock()
    checked = check_equivalence(synthetic_history(config.counter_check_messages, seed=config.seed))
    log(f"[bench] {config.mode} run; exact counter matches TiktokenCounter on {checked} messages")
    log("[bench] A. static histories")
    static = run_static(
        StaticSettings(
            sizes=config.sizes,
            budget=config.budget,
            seed=config.seed,
            seconds_per_cell=config.seconds_per_cell,
            min_reps=config.min_reps,
            max_reps=config.max_reps,
            warm_calls=config.warm_calls,
        ),
        log,
    )
    log("[bench] B-D. agent loop")
    loop = run_loop(
        LoopSettings(
            n=config.loop_n,
            seed=config.seed,
            reps=config.loop_reps,
            budget=config.budget,
            hysteresis=config.hysteresis,
            headline_hysteresis=config.headline_hysteresis,
        ),
        log,
    )
    results: dict[str, Any] = {
        "meta": clock.meta(config, command or "python -m bench", counter_check_messages=checked),
        "static": static,
        "loop": loop,
    }
    results["targets"] = evaluate_targets(results)
    return clock.finish(results)


#: ``write_results(results, out_dir, stem)``: ``<stem>.md`` and ``<stem>.json`` of this benchmark
write_results = results_writer(render_markdown)


def main(argv: Sequence[str] | None = None) -> int:
    return bench_main(
        argv,
        module="bench",
        description="Benchmark langmem_ext's TokenBudget against langchain-core's trim_messages.",
        quick_help="smoke run: n = 100 and 1,000, a 300-message loop, 1 repetition (~30 s)",
        seed_help="seed for every history (0)",
        configs=(FULL, QUICK),
        run=run_benchmark,
        write=write_results,
        stem=lambda mode: "latest" if mode == "full" else "quick",
    )
