"""Targets (PASS/FAIL) and the markdown rendering of a results dict."""

from __future__ import annotations

from typing import Any

from bench.harness import format_seconds, load_span, md_table, provenance_lines, verdict
from bench.loop import hysteresis_key
from bench.static import STATIC_METHODS

__all__ = ["evaluate_targets", "render_markdown"]

WARM_SCALING_LIMIT = 2.0
LOOP_SPEEDUP_TARGET = 100.0
PREFIX_TARGET = 0.90


# long: one entry per target (A to D) in the report's order, each with value and threshold
def evaluate_targets(results: dict[str, Any]) -> list[dict[str, Any]]:
    """The benchmark's targets, each with its measured value and verdict."""
    targets: list[dict[str, Any]] = []
    scaling = results["static"]["scaling"]
    if scaling:
        exact = scaling["budget_tiktoken_warm"]
        approx = scaling["budget_approx_warm"]
        worst = max(exact["ratio"], approx["ratio"])
        targets.append(
            {
                "id": "A",
                "name": (
                    f"TokenBudget steady-state per-call time at n={exact['n_large']:,} within "
                    f"{WARM_SCALING_LIMIT:g}x of n={exact['n_small']:,}"
                ),
                "value": worst,
                "threshold": f"<= {WARM_SCALING_LIMIT:g}",
                "passed": worst <= WARM_SCALING_LIMIT,
                "detail": (
                    f"TiktokenCounter {exact['ratio']:.2f}x, ApproximateCounter "
                    f"{approx['ratio']:.2f}x (for contrast, trim_messages + tiktoken "
                    f"{scaling['trim_tiktoken']['ratio']:.1f}x)"
                ),
            }
        )
    methods = results["loop"]["methods"]
    trim_total = methods["trim_tiktoken"]["timing"]["total_median_s"]
    budget_total = methods["budget_tiktoken"]["timing"]["total_median_s"]
    speedup = trim_total / budget_total
    targets.append(
        {
            "id": "B",
            "name": (
                f"agent loop: TokenBudget(TiktokenCounter) at least {LOOP_SPEEDUP_TARGET:g}x "
                "faster than trim_messages + tiktoken"
            ),
            "value": speedup,
            "threshold": f">= {LOOP_SPEEDUP_TARGET:g}",
            "passed": speedup >= LOOP_SPEEDUP_TARGET,
            "detail": f"{format_seconds(trim_total)} vs {format_seconds(budget_total)}",
        }
    )
    headline = tuple(results["loop"]["headline_hysteresis"])
    for hi, lo in results["loop"]["hysteresis"]:
        prefix = methods[hysteresis_key(hi, lo)]["prefix"]
        tag = " (headline)" if (hi, lo) == headline else ""
        targets.append(
            {
                "id": "C",
                "name": (
                    f"prefix kept on >= {PREFIX_TARGET:.0%} of turns, TokenBudget max "
                    f"{hi:,} / target {lo:,}{tag}"
                ),
                "value": prefix["fraction"],
                "threshold": f">= {PREFIX_TARGET:g}",
                "passed": prefix["fraction"] >= PREFIX_TARGET,
                "headline": bool(tag),
                "detail": (
                    f"{prefix['kept']}/{prefix['turns']} turns; trim_messages + tiktoken "
                    f"{methods['trim_tiktoken']['prefix']['fraction']:.1%}"
                ),
            }
        )
    budget_methods = [m for m in methods.values() if m["family"] == "budget"]
    bad = {
        "over budget": sum(m["validity"]["over_budget"] for m in budget_methods),
        "with error findings": sum(m["validity"]["with_errors"] for m in budget_methods),
        "without the newest human message": sum(
            m["validity"]["newest_human_missing"] for m in budget_methods
        ),
    }
    views = sum(m["validity"]["views"] for m in budget_methods)
    targets.append(
        {
            "id": "D",
            "name": "every TokenBudget view in the loop is within budget and valid",
            "value": sum(bad.values()),
            "threshold": "== 0",
            "passed": not any(bad.values()),
            "detail": f"{views:,} views checked; "
            + ", ".join(f"{count} {what}" for what, count in bad.items()),
        }
    )
    return targets


# --------------------------------------------------------------------------------------------
# markdown


def _x(value: float) -> str:
    return f"{value:,.0f}x" if value >= 100 else f"{value:.1f}x" if value >= 10 else f"{value:.2f}x"


# long: one report section: its prose, then its table, in reading order
def _static_section(static: dict[str, Any]) -> list[str]:
    short = {
        "trim_tiktoken": "trim + tiktoken",
        "trim_approx": "trim + approx",
        "budget_tiktoken_cold": "TB tiktoken, 1st call",
        "budget_tiktoken_warm": "TB tiktoken, steady",
        "budget_approx_cold": "TB approx, 1st call",
        "budget_approx_warm": "TB approx, steady",
    }
    lines = [
        "## A. Static histories: time per call",
        "",
        f"`synthetic_history(n, seed={static['seed']})` (system message + n messages), budget "
        f"B = {static['budget']:,} tokens, `{static['model']}` encoding for the exact counters. "
        "Median per-call wall time (repetitions in the JSON). TB = `TokenBudget`; *1st call* is a "
        "fresh counter with `state=None` (every message counted once), *steady* passes back "
        "`result.state` to the same strategy (warm cache).",
        "",
    ]
    rows = []
    for row in static["rows"]:
        rows.append([f"{row['n']:,}"] + [format_seconds(row[k]["median_s"]) for k in short])
    lines += md_table(["n", *short.values()], rows)
    lines += ["", "Ratios and work per call:", ""]
    rows = []
    for row in static["rows"]:
        ratios = row["ratios"]
        work = row["trim_tiktoken_per_call"]
        rows.append(
            [
                f"{row['n']:,}",
                _x(ratios["trim_tiktoken_over_budget_tiktoken_warm"]),
                _x(ratios["trim_tiktoken_over_budget_tiktoken_cold"]),
                _x(ratios["trim_approx_over_budget_approx_warm"]),
                f"{work['messages_counted']:,} ({work['messages_counted'] / row['n']:.2f} n)",
                f"{work['encodes']:,}",
                f"{row['view_messages_trim_tiktoken']} / {row['view_messages_budget_tiktoken']}",
            ]
        )
    lines += md_table(
        [
            "n",
            "trim+tiktoken ÷ TB tiktoken steady",
            "trim+tiktoken ÷ TB tiktoken 1st call",
            "trim+approx ÷ TB approx steady",
            "trim+tiktoken messages counted / call",
            "tiktoken encodes / call",
            "view messages trim / TB",
        ],
        rows,
    )
    scaling = static["scaling"]
    if scaling:
        parts = [
            f"{name} {scaling[key]['ratio']:.2f}x"
            for key, name in (
                ("budget_tiktoken_warm", "TB tiktoken steady"),
                ("budget_approx_warm", "TB approx steady"),
                ("trim_tiktoken", "trim + tiktoken"),
                ("trim_approx", "trim + approx"),
            )
        ]
        first = scaling["budget_tiktoken_warm"]
        lines += [
            "",
            f"Scaling, time at n={first['n_large']:,} ÷ time at n={first['n_small']:,}: "
            + ", ".join(parts)
            + ".",
        ]
    return lines


def _loop_sections(loop: dict[str, Any]) -> list[str]:
    methods = loop["methods"]
    trim_total = methods["trim_tiktoken"]["timing"]["total_median_s"]
    mean_n = loop["mean_history_messages"]
    lines = [
        "## B. Agent loop: total strategy time",
        "",
        f"`agent_loop({loop['n']:,}, seed={loop['seed']})`: {loop['model_calls']:,} model calls, "
        f"the history grows to {loop['final_history_messages']:,} messages (mean "
        f"{mean_n:,.0f} per call). The strategy runs at every call; the time is the sum of its "
        f"per-call times (generator not timed). Budget {loop['budget']:,} unless stated. Totals "
        f"are medians of {loop['reps']} timed passes after one untimed instrumented pass, except "
        "trim_messages + tiktoken, which runs **once** (that pass is timed and instrumented).",
        "",
    ]
    rows = []
    for key, m in methods.items():
        timing, work = m["timing"], m["work"]
        counted = work.get("messages_counted")
        per_call = work.get("messages_counted_per_call", 0.0)
        encodes = work.get("encodes")
        rows.append(
            [
                m["label"],
                str(timing["reps"]),
                format_seconds(timing["total_median_s"]),
                format_seconds(timing["per_call_mean_s"]),
                format_seconds(timing["last_decile_per_call_mean_s"]),
                "–" if counted is None else f"{counted:,}",
                "–" if counted is None else f"{per_call:,.1f} ({per_call / mean_n:.2f} n)",
                "–" if encodes is None else f"{encodes:,}",
                "1x" if key == "trim_tiktoken" else _x(trim_total / timing["total_median_s"]),
            ]
        )
    lines += md_table(
        [
            "configuration",
            "passes",
            "total",
            "per call",
            "per call, last 10% of calls",
            "messages counted (uncached)",
            "per call (÷ mean history)",
            "tiktoken encodes",
            "trim+tiktoken ÷ this",
        ],
        rows,
    )
    lines += _prefix_lines(loop, methods)
    lines += _validity_lines(methods)
    return lines


def _prefix_lines(loop: dict[str, Any], methods: Any) -> list[str]:
    """Section C: prefix stability over the same loop."""
    lines: list[str] = []
    lines += [
        "",
        "*Messages counted*: full per-message counts (for trim_messages, every message its counter "
        "was handed; for TokenBudget, counter cache misses). Encode counts come from the "
        "instrumented pass.",
        "",
        "## C. Prefix stability over the same loop",
        "",
        "Share of model calls (after the first) whose view starts with the previous call's view, "
        "message for message (object identity). `report.prefix_kept` is the library's own flag "
        "(the cut did not move). Mean view tokens by the configuration's own counter.",
        "",
    ]
    rows = []
    for m in methods.values():
        prefix = m["prefix"]
        levels = f"{m['max_tokens']:,}" + (
            f" / {m['target_tokens']:,}" if m["target_tokens"] else ""
        )
        reported = prefix.get("report_fraction")
        target = ""
        if m["target_tokens"]:
            target = verdict(prefix["fraction"] >= PREFIX_TARGET)
            if [m["max_tokens"], m["target_tokens"]] == loop["headline_hysteresis"]:
                target += " (headline)"
        rows.append(
            [
                m["label"],
                levels,
                f"{prefix['kept']:,} / {prefix['turns']:,}",
                f"{prefix['fraction']:.1%}",
                "–" if reported is None else f"{reported:.1%}",
                f"{m['validity']['mean_view_tokens']:,.0f}",
                target or "–",
            ]
        )
    lines += md_table(
        [
            "configuration",
            "max / target",
            "prefix kept",
            "share",
            "report.prefix_kept",
            "mean view tokens",
            "≥ 90%",
        ],
        rows,
    )
    return lines


def _validity_lines(methods: Any) -> list[str]:
    """Section D: the validity of every view in the loop."""
    lines: list[str] = []
    lines += [
        "",
        "## D. Validity of every view in the loop (untimed)",
        "",
        "Each view recounted independently (the benchmark's uncached tiktoken counter, or "
        "`count_tokens_approximately`) against its max_tokens, checked with "
        "`langmem_ext.validate` (error-severity findings), and checked to contain the newest "
        "HumanMessage. For trim_messages these are comparison columns, not failures.",
        "",
    ]
    rows = []
    for m in methods.values():
        v = m["validity"]
        kinds = ", ".join(f"{k} {n}" for k, n in v["error_kinds"].items())
        rows.append(
            [
                m["label"],
                f"{v['views']:,}",
                str(v["over_budget"]),
                str(v["with_errors"]) + (f" ({kinds})" if kinds else ""),
                str(v["newest_human_missing"]),
                f"{v['max_view_tokens']:,} / {m['max_tokens']:,}",
                str(v.get("report_tokens_mismatch", "–")),
            ]
        )
    lines += md_table(
        [
            "configuration",
            "views",
            "over budget",
            "with error findings",
            "newest human missing",
            "max view tokens / max",
            "report ≠ recount",
        ],
        rows,
    )
    return lines


def render_markdown(results: dict[str, Any]) -> str:
    meta = results["meta"]
    lines = [
        "# langmem_ext benchmark: TokenBudget vs trim_messages",
        "",
    ]
    if meta["mode"] != "full":
        lines += [
            f"> **{meta['mode']} run** (smaller sizes, 1 repetition): a smoke test, not a "
            "measurement. Run `python -m bench` for the real numbers.",
            "",
        ]
    lines += [
        *provenance_lines(meta),
        f"- Load average (1/5/15 min) at start {load_span(meta, ', at end ')}: "
        "other work on the machine skews the timings",
        f"- Seeds: static histories seed={results['static']['seed']}, agent loop "
        f"seed={results['loop']['seed']}",
        f"- Exact counter check: the benchmark's uncached tiktoken counter equals "
        f"`TiktokenCounter('{results['static']['model']}')` on "
        f"{meta['counter_check_messages']:,} messages (per message and in total).",
        "- Timing: `time.perf_counter`, cyclic GC paused during timed blocks (as `timeit` "
        "does), single process.",
        "",
        "## Summary",
        "",
    ]
    for t in results["targets"]:
        value = t["value"]
        shown = f"{value:.1%}" if t["id"] == "C" else _x(value) if t["id"] in "AB" else str(value)
        if t.get("headline") is False:
            # other hysteresis gaps: shown against the same bar, but the target is the headline's
            lines.append(
                f"- {t['id']} (informational, {verdict(t['passed'])} at this gap): {t['name']}: "
                f"{shown} ({t['detail']})"
            )
            continue
        lines.append(
            f"- **{t['id']}: {verdict(t['passed'])}**: {t['name']}: {shown} "
            f"(target {t['threshold']}; {t['detail']})"
        )
    lines.append("")
    lines += _static_section(results["static"])
    lines.append("")
    lines += _loop_sections(results["loop"])
    lines.append("")
    labels = "; ".join(f"`{k}`: {v}" for k, v in STATIC_METHODS.items())
    lines += [
        "---",
        "",
        f"Machine-readable results: `{meta['json_name']}`. Section A keys: {labels}.",
        "",
    ]
    return "\n".join(lines)
