"""The benchmark core runs end to end on tiny sizes and produces every table (no timing claims)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from bench_helpers import assert_results_written

from bench.run import QUICK, run_benchmark, write_results

TINY = replace(
    QUICK,
    mode="smoke",
    sizes=(20, 40),
    seconds_per_cell=0.0,
    min_reps=1,
    max_reps=1,
    warm_calls=2,
    loop_n=40,
    loop_reps=1,
    hysteresis=((2_000, 1_000), (4_000, 2_000)),
    headline_hysteresis=(4_000, 2_000),
    counter_check_messages=20,
)


def test_benchmark_core_produces_every_section_and_target(tmp_path: Path) -> None:
    results = run_benchmark(TINY, log=lambda _: None)

    assert {"meta", "static", "loop", "targets"} <= results.keys()
    assert [row["n"] for row in results["static"]["rows"]] == [20, 40]
    for row in results["static"]["rows"]:
        for key in (
            "trim_tiktoken",
            "trim_approx",
            "budget_tiktoken_cold",
            "budget_tiktoken_warm",
            "budget_approx_cold",
            "budget_approx_warm",
        ):
            assert row[key]["reps"] >= 1 and row[key]["median_s"] > 0
    methods = results["loop"]["methods"]
    assert {
        "trim_tiktoken",
        "trim_approx",
        "budget_tiktoken",
        "budget_approx",
        "budget_tiktoken_hysteresis_2000_1000",
        "budget_tiktoken_hysteresis_4000_2000",
    } == methods.keys()
    for method in methods.values():
        assert {"timing", "work", "prefix", "validity"} <= method.keys()
        assert method["validity"]["views"] == results["loop"]["model_calls"] > 0
    assert [t["id"] for t in results["targets"]] == ["A", "B", "C", "C", "D"]
    assert all(isinstance(t["passed"], bool) for t in results["targets"])

    headings = ("## Summary", "## A.", "## B.", "## C.", "## D.")
    assert_results_written(write_results, results, tmp_path, "smoke", headings)
