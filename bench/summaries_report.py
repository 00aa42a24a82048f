"""The summaries benchmark's markdown report (``bench/results/summaries.md``) from its results."""

from __future__ import annotations

from typing import Any

from bench.harness import format_seconds, load_span, md_table, provenance_lines, verdict


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
    lines += _verdict_lines(results, cfg, conv, meta)
    lines += _work_lines(conv, tools)
    lines += _inputs_lines(tools)
    lines += _hysteresis_lines(tools)
    lines += _timing_lines(cfg, tools)
    lines += _settings_lines(cfg, meta, tools)
    return "\n".join(lines)


def _verdict_lines(results: dict[str, Any], cfg: Any, conv: Any, meta: Any) -> list[str]:
    """Section: the verdicts of langmem_ext's targets."""
    lines: list[str] = []
    lines += [
        *provenance_lines(meta),
        f"- Source: commit {meta['source']['commit']}"
        + (
            " with uncommitted changes in langmem_ext"
            if meta["source"]["langmem_ext_modified"]
            else ""
        ),
        f"- Load average (1/5/15 min) at start {load_span(meta, ', at end ')}",
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
        "answers; below 4,000 tokens every summary budget is a quarter of max_tokens). It "
        "records every `m<N>:` marker in its input (each message's text starts with its marker).",
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
            f"- **{verdict(target['passed'])}** {target['label']} @ "
            f"{target['max_tokens']:,}: {detail}"
        )
    lines += ["", "Every check, per strategy and budget:", ""]
    names = [c["name"] for c in results["targets"][0]["checks"]] if results["targets"] else []
    rows = []
    for target in results["targets"]:
        rows.append(
            [f"{target['label']} @ {target['max_tokens']:,}"]
            + [f"{verdict(c['passed'])} ({c['value']})" for c in target["checks"]]
        )
    lines += md_table(["strategy @ max_tokens", *names], rows)
    return lines


def _work_lines(conv: Any, tools: Any) -> list[str]:
    """Section: summarizer work and lost messages."""
    lines: list[str] = []
    lines += [
        "",
        "## Summarizer work and lost messages",
        "",
        "*Never summarized*: messages that left the model's view and whose marker the summarizer "
        "never read. *Left before read*: left the view before the summarizer had read them (read "
        "later or never). *Read twice+*: messages whose marker was in the input of more than one "
        "summarizer call. *Per 100 model calls*: summarizer calls per 100 calls of the loop (a "
        "small budget folds often: `FoldRateWarning` speaks above 33).",
        "",
    ]
    rows = []
    for t in tools.values():
        s, d = t["summarizer"], t["dropped"]
        rows.append(
            [
                _name(t),
                f"{s['calls']:,}",
                f"{100 * s['calls'] / max(t['model_calls'], 1):.1f}",
                f"{s['input_tokens']:,}",
                f"{s['input_ratio']:.3f}x",
                f"{s['messages_read']:,} / {conv['messages']:,}",
                f"{s['messages_read_more_than_once']:,}",
                f"{d['never_summarized']:,}",
                f"{d['left_before_summarized']:,}",
            ]
        )
    lines += md_table(
        [
            "tool @ max_tokens",
            "summarizer calls",
            "per 100 model calls",
            "input tokens",
            "input ÷ conversation",
            "messages read",
            "read twice+",
            "never summarized",
            "left before read",
        ],
        rows,
    )
    return lines


def _inputs_lines(tools: Any) -> list[str]:
    """Section: what the model receives."""
    lines: list[str] = []
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
    lines += md_table(
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
    return lines


def _hysteresis_lines(tools: Any) -> list[str]:
    """Section: langmem_ext's hysteresis and expected summarizer calls."""
    lines: list[str] = []
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
    lines += md_table(
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
    return lines


def _timing_lines(cfg: Any, tools: Any) -> list[str]:
    """Section: time in the tool."""
    lines: list[str] = []
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
    lines += md_table(
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
    return lines


def _settings_lines(cfg: Any, meta: Any, tools: Any) -> list[str]:
    """Sections: errors (if any) and how each tool was called."""
    lines: list[str] = []
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
        f"{cfg['max_summary_tokens']:,})` (default target: half of max_tokens, at least a "
        "quarter of the way from the summary budget to max_tokens), "
        "`Compacting(max_tokens, summarizer=fake)` (defaults), "
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
    return lines
