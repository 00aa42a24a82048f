"""``python -m bench.docs [--results DIR] [--out DIR]``: the benchmarks page from the results.

Reads the newest full-mode JSON of each benchmark in ``bench/results/`` (a quick run is used only
when a benchmark has no full one, and the page then says so) and writes ``docs/benchmarks.md``
and its plots ``docs/img/bench_*.png``. Nothing is measured here: the tables come from each
benchmark's own ``render_markdown`` run on its JSON (the key sections, picked by heading), and
the plots from the same numbers.

The page holds nothing that depends on when or where this command runs (no date, no absolute
path), so it is a pure function of the JSON files: ``tests/bench/test_bench_docs.py`` checks
that the committed page is what this command makes of the committed results.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench import (
    agent_turns,
    growth,
    long_turns,
    pgvector_scale,
    report,
    retrieval_config,
    retrieval_report,
    soak,
    summaries,
    worker_rss,
)
from bench.docs_plots import (
    _plot_style,
    plot_agent_turns,
    plot_growth,
    plot_long_turns,
    plot_pgvector_scale,
    plot_retrieval,
    plot_soak,
    plot_summaries,
    plot_token_budget,
    plot_worker_rss,
)
from bench.harness import ROOT, provenance_lines
from bench.retrieval_config import HEADLINE

__all__ = ["BENCHMARKS", "Benchmark", "Found", "build", "find_results", "main", "render_page"]


DEFAULT_RESULTS = ROOT / "bench" / "results"


DEFAULT_OUT = ROOT / "docs"


PAGE = "benchmarks.md"


IMG_DIR = "img"


@dataclass(frozen=True)
class Found:
    """One benchmark's chosen results file and its contents."""

    path: Path
    results: dict[str, Any]

    @property
    def meta(self) -> dict[str, Any]:
        return dict(self.results["meta"])

    @property
    def full(self) -> bool:
        return bool(self.meta.get("mode") == "full")


def _module_of(meta: dict[str, Any]) -> str | None:
    """The benchmark's module from the recorded command (``python -m bench.growth --quick``)."""
    words = shlex.split(str(meta.get("command", "")))
    if "-m" in words and words.index("-m") + 1 < len(words):
        return words[words.index("-m") + 1]
    return None


def find_results(results_dir: Path) -> dict[str, Found]:
    """Module name -> the newest full-mode results file for it in ``results_dir`` (the newest
    quick one when there is no full one). Newest by the run's recorded start time; on a tie the
    file named by the benchmark's full-mode stem wins, then the name."""
    stems = {b.module: b.stem for b in BENCHMARKS}
    candidates: dict[str, list[tuple[tuple[bool, str, bool, str], Found]]] = {}
    for path in sorted(results_dir.glob("*.json")):
        try:
            results = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        meta = results.get("meta") if isinstance(results, dict) else None
        module = _module_of(meta) if isinstance(meta, dict) else None
        if meta is None or module not in stems:
            continue
        found = Found(path, results)
        rank = (found.full, str(meta.get("started_utc", "")), path.stem == stems[module], path.name)
        candidates.setdefault(module, []).append((rank, found))
    return {m: max(c, key=lambda item: item[0])[1] for m, c in candidates.items()}


def _trimmed(lines: list[str]) -> list[str]:
    start, end = 0, len(lines)
    while start < end and not lines[start].strip():
        start += 1
    while end > start and not lines[end - 1].strip():
        end -= 1
    return lines[start:end]


def _sections(markdown: str) -> dict[str, list[str]]:
    """A report's level-2 sections: heading text -> its lines (blank edges trimmed). The title
    (``# ...``) and the footer rule (``---``) end a section."""
    sections: dict[str, list[str]] = {}
    current: list[str] | None = None
    for line in markdown.splitlines():
        if line.startswith("## "):
            current = sections.setdefault(line[3:].strip(), [])
        elif line.startswith("# ") or line.strip() == "---":
            current = None
        elif current is not None:
            current.append(line)
    return {title: _trimmed(lines) for title, lines in sections.items()}


def _until(marker: str) -> Callable[[list[str]], list[str]]:
    """Keep a section's lines before the first line that is exactly ``marker``."""

    def keep(lines: list[str]) -> list[str]:
        return _trimmed(lines[: lines.index(marker)] if marker in lines else lines)

    return keep


def _single_blanks(lines: list[str]) -> list[str]:
    """No two blank lines in a row."""
    return [line for i, line in enumerate(lines) if line.strip() or i == 0 or lines[i - 1].strip()]


def _first_table_per_subsection(lines: list[str]) -> list[str]:
    """Keep the text before the first ``###`` subsection, then each subsection's heading and
    its first table only."""
    out: list[str] = []
    state = "intro"  # intro -> heading (before the table) -> table -> skip (rest of it)
    for line in lines:
        if line.startswith("### "):
            out += ["", line, ""]
            state = "heading"
        elif state == "intro":
            out.append(line)
        elif state in ("heading", "table") and line.startswith("|"):
            out.append(line)
            state = "table"
        elif state == "table":
            state = "skip"
    return _single_blanks(_trimmed(out))


@dataclass(frozen=True)
class Pick:
    """A level-2 section of a benchmark's report to show: by its heading (or every heading that
    starts with ``title`` when ``prefix``), optionally cut down by ``keep``."""

    title: str
    prefix: bool = False
    keep: Callable[[list[str]], list[str]] | None = None


def _demoted(lines: list[str]) -> list[str]:
    return ["#" + line if line.startswith("#") else line for line in lines]


def picked_sections(markdown: str, picks: Sequence[Pick]) -> list[str]:
    """The picked sections of a rendered report, one heading level down (``##`` -> ``###``).
    A pick that matches nothing raises: the report changed and the page must follow."""
    sections = _sections(markdown)
    out: list[str] = []
    for pick in picks:
        titles = [
            t for t in sections if (t.startswith(pick.title) if pick.prefix else t == pick.title)
        ]
        if not titles:
            raise LookupError(f"no section {pick.title!r} in the report; have {list(sections)}")
        for title in titles:
            body = pick.keep(sections[title]) if pick.keep else sections[title]
            out += ["", f"### {title}", "", *_demoted(body)]
    return out


def _families_other_than(tools: dict[str, Any], ours: str) -> list[str]:
    labels: list[str] = []
    for t in tools.values():
        if t["family"] != ours and t["label"] not in labels:
            labels.append(t["label"])
    return labels


def _pct(value: float) -> str:
    return f"{value:.1%}"


def _status_token_budget(results: dict[str, Any]) -> str:
    targets = results["targets"]
    judged = [t for t in targets if t.get("headline") is not False]
    met = sum(bool(t["passed"]) for t in judged)
    out = f"{met} of {len(judged)} targets met"
    missed = [f"{t['id']} ({t['name']})" for t in judged if not t["passed"]]
    if missed:
        out += "; **not met**: " + "; ".join(missed)
    informational = [t for t in targets if t.get("headline") is False and not t["passed"]]
    for t in informational:
        out += (
            f"; informational, not met: {t['name']}: {_pct(t['value'])} (target {t['threshold']})"
        )
    return out


def _status_summaries(results: dict[str, Any]) -> str:
    targets = results["targets"]
    met = [t for t in targets if t["passed"]]
    out = f"{len(met)} of {len(targets)} langmem_ext strategy × budget runs meet every target"
    for t in targets:
        if not t["passed"]:
            failed = [f"{c['name']}: {c['value']}" for c in t["checks"] if not c["passed"]]
            out += f"; **not met**: {t['label']} @ {t['max_tokens']:,} ({'; '.join(failed)})"
    informational = sorted(
        {
            f"{t['label']} @ {t['max_tokens']:,}"
            for t in targets
            for c in t["checks"]
            if not c["passed"] and "informational" in str(c["value"])
        }
    )
    if informational:
        out += (
            "; informational (below the headline budget), prefix kept under 90% for: "
            + ", ".join(informational)
        )
    return out


def _status_agent_turns(results: dict[str, Any]) -> str:
    """Per tool: every goal met, or the goals missed, grouped by the budgets they missed at."""
    missed: dict[str, dict[str, list[str]]] = {}
    no_summarizer: set[str] = set()
    for t in results["tools"].values():
        by_goal = missed.setdefault(t["label"], {})
        if not t.get("summary_budget"):
            no_summarizer.add(t["label"])
        for goal, ok in t["total"]["goals"].items():
            if not ok:
                by_goal.setdefault(goal, []).append(f"{t['max_tokens']:,}")
    parts = []
    for label, by_goal in missed.items():
        if not by_goal:
            parts.append(f"{label}: every goal met")
            continue
        by_budgets: dict[str, list[str]] = {}
        for goal, budgets in by_goal.items():
            by_budgets.setdefault(" and ".join(budgets), []).append(goal)
        text = "; ".join(f"at {b}: {', '.join(goals)}" for b, goals in by_budgets.items())
        note = (
            " (no summarizer: what it cuts is unseen by design)" if label in no_summarizer else ""
        )
        parts.append(f"{label}{note}: **not met** {text}")
    return "goals, no judged targets: " + "; ".join(parts)


def _status_growth(results: dict[str, Any]) -> str:
    out = []
    for t in results["targets"]:
        failed = [c["name"] for c in t["checks"] if not c["passed"]]
        verdict = "met" if t["passed"] else "**not met** (" + "; ".join(failed) + ")"
        out.append(f"{t['target']}: {verdict}")
    configs = results["configs"]
    if "none" in configs and "view" in configs:
        none, view = configs["none"], configs["view"]
        out.append(
            f"{view['label']} keeps the whole history in state, so its checkpoints grow as "
            f"with no memory; its SQLite file ends at {growth._bytes(view['final']['file_bytes'])} "
            f"against {growth._bytes(none['final']['file_bytes'])} with no memory, and its median "
            f"time per turn is {view['timing']['median_turn_s'] * 1e3:.1f} ms against "
            f"{none['timing']['median_turn_s'] * 1e3:.1f} ms"
        )
    return "; ".join(out)


def _status_retrieval(results: dict[str, Any]) -> str:
    out = []
    for t in results["targets"]:
        title = retrieval_config.DATASET_TITLES.get(t["dataset"], t["dataset"])
        value = t["checks"][0]["value"]
        verdict = "met" if t["checks"][0]["passed"] else "**not met**"
        missed = [c["name"] for c in t["checks"][1:] if not c["passed"]]
        if missed:  # the dataset's other goals, named where they are not met
            verdict += "; not met: " + "; ".join(missed)
        out.append(f"{title}: {_pct(value)} ({verdict})")
    judged = {t["dataset"] for t in results["targets"]}
    unjudged = [
        retrieval_config.DATASET_TITLES.get(n, n) for n in results["evidence"] if n not in judged
    ]
    text = (
        f"evidence available > {retrieval_config.EVIDENCE_TARGET:.0%} with hybrid retrieval: "
        + "; ".join(out)
    )
    if unjudged:
        text += "; reported, not judged: " + ", ".join(
            f"{name} {_pct(results['evidence'][n][HEADLINE]['evidence_available'])}"
            for name, n in zip(
                unjudged, [n for n in results["evidence"] if n not in judged], strict=True
            )
        )
    issue = ", ".join(
        f"{retrieval_config.DATASET_TITLES.get(n, n).split('.')[0]} "
        f"{_pct(cells[retrieval_config.HEADLINE]['answer_turns_in_input'] or 0.0)}"
        for n, cells in results["evidence"].items()
    )
    return (
        f"{text}; answer turns in the input with hybrid retrieval: {issue}, against about "
        f"{retrieval_config.ANCHOR_HYBRID_SHARE:.0%} quoted in the issue (compared in kind only)"
    )


def _describe_token_budget(results: dict[str, Any]) -> str:
    static, loop = results["static"], results["loop"]
    sizes = ", ".join(f"{row['n']:,}" for row in static["rows"])
    return (
        "How long `TokenBudget` takes to cut a history down to a token budget, against "
        "langchain-core's `trim_messages` with the same counters: on static histories of "
        f"{sizes} messages, and over an agent loop of {loop['model_calls']:,} model calls whose "
        f"history grows to {loop['final_history_messages']:,} messages. On the same loop: how "
        "often a view keeps the previous view as a prefix (what a provider's prompt cache "
        "needs; `TokenBudget` with a target below max_tokens, i.e. hysteresis), and whether "
        "every view is within the budget and valid."
    )


def _describe_summaries(results: dict[str, Any]) -> str:
    conv = results["conversation"]
    budgets = " and ".join(f"{b:,}" for b in results["meta"]["config"]["budgets"])
    return (
        "The summarizing strategies (`SummaryBuffer`, `Compacting`, `TieredSummary`) against "
        "langmem's `summarize_messages` and LangChain's `SummarizationMiddleware`, on the same "
        f"agent loop ({conv['model_calls']:,} model calls, {conv['tokens']:,} conversation "
        f"tokens) at max_tokens {budgets}, every tool with the same deterministic fake "
        "summarizer. langmem's `SummarizationNode` wraps `summarize_messages`, so it is not run "
        "separately. Measured: summarizer calls and input, messages that left the view without "
        "being summarized, broken or over-budget model inputs, prefix stability, time in the "
        "tool (the fake's own time excluded)."
    )


def _describe_agent_turns(results: dict[str, Any]) -> str:
    cfg = results["meta"]["config"]
    requests = ", ".join(str(n) for n in cfg["requests"])
    budgets = " and ".join(f"{b:,}" for b in cfg["budgets"])
    return (
        f"Long agent turns: conversations of {requests} human requests, each followed by "
        f"{cfg['rounds'][0]}–{cfg['rounds'][1]} tool rounds (some parallel, a few huge "
        "results). Before every model call each tool gives the model's view: the langmem_ext "
        "strategies (`SummaryBuffer`, `Compacting`, `TieredSummary`, and `ToolDigest`, which "
        "has no summarizer) against langmem's `summarize_messages` and LangChain's "
        f"`SummarizationMiddleware`, at max_tokens {budgets}. Measured: messages left unseen "
        "(neither in the view nor read by a summarizer), the newest request kept verbatim, "
        "views over budget or invalid, summarizer input, prefix stability."
    )


def _describe_growth(results: dict[str, Any]) -> str:
    cfg = results["meta"]["config"]
    return (
        f"How big a LangGraph thread's checkpoints get over {cfg['turns']:,} turns with "
        "`SqliteSaver`: the same graph with no memory node (the baseline: the whole history is "
        f"kept in state and sent), with `MemoryNode(SummaryBuffer({cfg['max_tokens']:,}), "
        'mode="view")` and with `mode="rewrite"` (folded messages removed from state). No '
        "other library is run here; the baseline is LangGraph's default."
    )


def _describe_retrieval(results: dict[str, Any]) -> str:
    cfg = results["meta"]["config"]
    return (
        "Whether evidence that a budget evicted gets back into the model's input with "
        "`Retrieval` (dense, BM25 or hybrid ranking, "
        + ("results up to the context budget" if cfg["k"] is None else f"k={cfg['k']}")
        + f") around `TokenBudget`, at {cfg['budget']:,} tokens for the whole request, on CRI "
        "persona data (facts and key messages, in CRI's wording and in the first person) and "
        "on planted facts. No other library is run here: the comparison is `TokenBudget` alone "
        "(no retrieval) and the figures quoted in the issue (the *issue* column)."
    )


def _anchors_token_budget(results: dict[str, Any]) -> list[str]:
    return [m["label"] for m in results["loop"]["methods"].values() if m["family"] != "budget"]


def _anchors_tools(results: dict[str, Any]) -> list[str]:
    return _families_other_than(results["tools"], "langmem_ext")


def _anchors_growth(results: dict[str, Any]) -> list[str]:
    none = results["configs"].get("none")
    return [f"{none['label']} (baseline: no memory node)"] if none else []


# -------------------------------------------------------------------------------------------
# long turns, pgvector at scale, soak: their page parts (their plots are in docs_plots)


def _until_prefix(prefix: str) -> Callable[[list[str]], list[str]]:
    """Keep a section's lines before the first line that starts with ``prefix``."""

    def keep(lines: list[str]) -> list[str]:
        cut = next((i for i, line in enumerate(lines) if line.startswith(prefix)), len(lines))
        return _trimmed(lines[:cut])

    return keep


def _render_long_turns(results: dict[str, Any]) -> str:
    """``long_turns``' report with its bold table titles (``**This code**``) as level-2
    headings, so that its tables can be picked like the other reports' sections."""

    def heading(line: str) -> str:
        bold = len(line) > 4 and line.startswith("**") and line.endswith("**")
        return f"## {line[2:-2]}" if bold else line

    return "\n".join(map(heading, long_turns.render_markdown(results).splitlines()))


def _verdict_rows(markdown: str, section: str) -> list[tuple[str, str]]:
    """(first cell, last cell) of each body row of the table in a report's ``section``."""
    rows = [line for line in _sections(markdown)[section] if line.startswith("|")][2:]
    cells = [[c.strip() for c in row.strip("|").split("|")] for row in rows]
    return [(c[0], c[-1]) for c in cells]


def _status_verdicts(markdown: str, section: str, what: str) -> str:
    """``N of M <what> pass``, naming the ones that fail, from a report's PASS/FAIL table
    (rows with another verdict, e.g. ``measured``, are reported, not judged)."""
    rows = _verdict_rows(markdown, section)
    judged = [(name, v) for name, v in rows if v in ("PASS", "FAIL")]
    out = f"{sum(v == 'PASS' for _, v in judged)} of {len(judged)} {what} pass"
    failed = [name for name, v in judged if v == "FAIL"]
    if failed:
        out += "; **not met**: " + "; ".join(failed)
    return out


def _describe_long_turns(results: dict[str, Any]) -> str:
    cfg = results["meta"]["config"]
    rankings = " and ".join(cfg["rankings"])
    return (
        f"Whether `Retrieval(TokenBudget({cfg['budget']:,}))` brings facts from early tool "
        "results back into the model's input later in the same long agent turn, after the "
        f"budget evicted them. {cfg['turns']} turns of one request and {cfg['rounds']} tool "
        f"rounds each, {cfg['facts']} facts planted in rounds {cfg['plant_rounds'][0]}-"
        f"{cfg['plant_rounds'][1]} and asked for by the agent's own step from round "
        f"{cfg['ask_from']} on; {rankings} ranking, the query being the agent's newest step "
        "(the default) or the turn's request (the query before). Measured: recall of the "
        f"asked facts (goal ≥ {long_turns.RECALL_GOAL:.0%}), views over budget or invalid, "
        "turn items written per call, time per call."
    )


def _anchors_long_turns(results: dict[str, Any]) -> list[str]:
    anchors = ["the turn's request as the query (the query before)"]
    base = results.get("baseline")
    if base:
        anchors.append(f"the code before (`{base['meta']['command']}`)")
    return anchors


def _status_long_turns(results: dict[str, Any]) -> str:
    variants = results["variants"].items()
    met = [f"{n} ({_pct(v['recall'])})" for n, v in variants if v["goal_met"]]
    missed = [f"{n} ({_pct(v['recall'])})" for n, v in variants if not v["goal_met"]]
    out = f"recall ≥ {long_turns.RECALL_GOAL:.0%} met by " + (", ".join(met) or "none")
    if missed:
        out += "; **not met**: " + ", ".join(missed)
    base = results.get("baseline")
    if base:
        best = max(v["recall"] for v in base["variants"].values())
        out += f"; the code before: at most {_pct(best)}"
    return out


def _describe_pgvector_scale(results: dict[str, Any]) -> str:
    cfg = results["meta"]["config"]
    sizes = " and ".join(f"{n:,}" for n in sorted({c["turns"] for c in results["cells"]}))
    return (
        "`Retrieval` with dense ranking on a `PostgresStore` with pgvector's HNSW index holding "
        f"{sizes} turns, in one thread or spread over threads of {cfg['spread_turns']:,} turns, "
        "under each pgvector setting tried (`hnsw.ef_search` × `hnsw.iterative_scan`): "
        f"recall@{cfg['k']} of the store's search against brute force, time per `apply` (one "
        f"caller and {cfg['threads']} at once) and the first call of a fresh worker. The stored "
        "vectors come from a deterministic hashing embedder (not a real model); the cost of a "
        "MiniLM query embedding is measured apart and added for the latency goal."
    )


def _status_pgvector_scale(results: dict[str, Any]) -> str:
    goals = results["goals"]
    out = f"{sum(bool(g['met']) for g in goals)} of {len(goals)} goals met"
    missed = [f"{g['name']}: {g['value']}" for g in goals if not g["met"]]
    if missed:
        out += "; **not met**: " + "; ".join(missed)
    return out


def _describe_soak(results: dict[str, Any]) -> str:
    cfg = results["meta"]["config"]
    return (
        "Many agent conversations on PostgreSQL across worker processes, one worker killed "
        f"half way: {cfg['workers']} workers × {cfg['threads_per_worker']:,} threads × "
        f"{cfg['turns']} turns (`create_agent` with `MemoryMiddleware(SummaryBuffer(...))`, "
        "background compaction, `PostgresSaver` + `PostgresStore`, a fake summarizer that "
        f"sleeps {cfg['delay']} s). Checked: no turn or message lost or duplicated, nothing "
        "leaked between threads, no errors; measured: throughput, the time memory adds per "
        "model call, RSS per worker."
    )


# worker RSS: its page part


def _describe_worker_rss(results: dict[str, Any]) -> str:
    cfg = results["meta"]["config"]
    labels = ", ".join(s["label"] for s in results["settings"])
    return (
        "Resident memory of a long-lived worker against threads served, with the local MiniLM "
        f"embedding model loaded: one worker process per `index_cache_bytes` setting ({labels}), "
        f"each serving {cfg['threads']:,} threads of {cfg['turns']} chat turns one after another "
        f"through `Retrieval(TokenBudget({cfg['budget']:,}))` (dense index local) on "
        "`PostgresStore`. Measured after each checkpoint (after `gc.collect()`): VmRSS, the index "
        "cache's entries, bytes, hits and misses, and `apply`'s p50; at the end, early threads "
        "revisited (indexes rebuilt from the store) and their views checked against a fresh "
        "`Retrieval`'s."
    )


@dataclass(frozen=True)
class Benchmark:
    """One benchmark on the page: where its results are, how to show them."""

    module: str
    title: str
    render: Callable[[dict[str, Any]], str]
    picks: tuple[Pick, ...]
    describe: Callable[[dict[str, Any]], str]
    #: the anchors side by side: fixed, or read from the results
    anchors: tuple[str, ...] | Callable[[dict[str, Any]], list[str]]
    #: the targets' status: read from the results, or ``(section, what)``: the PASS / FAIL
    #: table of the report's ``section`` counted (``N of M <what> pass``)
    status: tuple[str, str] | Callable[[dict[str, Any]], str]
    plot: Callable[[dict[str, Any], Path], str]
    #: the full-mode results stem (``<stem>.json`` / ``<stem>.md``); default: the module's name
    stem: str = ""
    #: the plot's file name; default ``bench_<stem>.png``
    image: str = ""

    def __post_init__(self) -> None:
        if not self.stem:
            object.__setattr__(self, "stem", self.module.removeprefix("bench."))
        if not self.image:
            object.__setattr__(self, "image", f"bench_{self.stem}.png")

    def anchors_of(self, results: dict[str, Any]) -> list[str]:
        """The anchors of this run."""
        return list(self.anchors) if isinstance(self.anchors, tuple) else self.anchors(results)

    def status_of(self, results: dict[str, Any]) -> str:
        """Which targets this run met."""
        if isinstance(self.status, tuple):
            section, what = self.status
            return _status_verdicts(self.render(results), section, what)
        return self.status(results)


BENCHMARKS: tuple[Benchmark, ...] = (
    Benchmark(
        module="bench",
        stem="latest",
        title="TokenBudget vs trim_messages",
        render=report.render_markdown,
        picks=(
            Pick("Summary"),
            Pick("A. Static histories", prefix=True),
            Pick("B. Agent loop", prefix=True),
            Pick("C. Prefix stability", prefix=True),
            Pick("D. Validity", prefix=True),
        ),
        describe=_describe_token_budget,
        anchors=_anchors_token_budget,
        status=_status_token_budget,
        image="bench_turn_time.png",
        plot=plot_token_budget,
    ),
    Benchmark(
        module="bench.summaries",
        title="Summarizing memory: langmem_ext vs langmem vs SummarizationMiddleware",
        render=summaries.render_markdown,
        picks=(
            Pick("Verdicts", prefix=True),
            Pick("Summarizer work and lost messages"),
            Pick("Model inputs"),
            Pick("Time in the tool"),
            Pick("How each tool was called"),
        ),
        describe=_describe_summaries,
        anchors=_anchors_tools,
        status=_status_summaries,
        plot=plot_summaries,
    ),
    Benchmark(
        module="bench.agent_turns",
        title="Long agent turns: hundreds of tool rounds per request",
        render=agent_turns.render_markdown,
        picks=(
            Pick("Method"),
            Pick("Conversations"),
            Pick("Budget ", prefix=True, keep=_until("Per conversation:")),
        ),
        describe=_describe_agent_turns,
        anchors=_anchors_tools,
        status=_status_agent_turns,
        plot=plot_agent_turns,
    ),
    Benchmark(
        module="bench.growth",
        title="Checkpoint growth: MemoryNode vs no memory",
        render=growth.render_markdown,
        picks=(Pick("Verdict"), Pick("Summary"), Pick("Latest checkpoint")),
        describe=_describe_growth,
        anchors=_anchors_growth,
        status=_status_growth,
        plot=plot_growth,
    ),
    Benchmark(
        module="bench.retrieval",
        title="Retrieval memory: evicted evidence brought back",
        render=retrieval_report.render_markdown,
        picks=(
            Pick("Verdict"),
            Pick("Evidence available", prefix=True, keep=_first_table_per_subsection),
        ),
        describe=_describe_retrieval,
        anchors=(f"{retrieval_config.BASELINE} (baseline: no retrieval)", "the issue's figures"),
        status=_status_retrieval,
        plot=plot_retrieval,
    ),
    Benchmark(
        module="bench.long_turns",
        title="Long agent turns: tool results brought back later in the same turn",
        render=_render_long_turns,
        picks=(Pick("This code", keep=_until_prefix("Before (")), Pick("Before")),
        describe=_describe_long_turns,
        anchors=_anchors_long_turns,
        status=_status_long_turns,
        plot=plot_long_turns,
    ),
    Benchmark(
        module="bench.pgvector_scale",
        title="Retrieval on PostgreSQL + pgvector at scale",
        render=pgvector_scale.render_markdown,
        # every section: the report is organized by the settings it tries, and stays short
        picks=(Pick("", prefix=True),),
        describe=_describe_pgvector_scale,
        anchors=(
            '`dense_index="local"` (the in-process `VectorIndex` on the same turns and vectors)',
            "numpy brute force (the reference of recall)",
        ),
        status=_status_pgvector_scale,
        plot=plot_pgvector_scale,
    ),
    Benchmark(
        module="bench.soak",
        title="Soak: agents on PostgreSQL across worker processes",
        render=soak.render_markdown,
        picks=(
            Pick("Invariants"),
            Pick("Goals"),
            Pick("Throughput and latency"),
            Pick("RSS per worker", prefix=True),
        ),
        describe=_describe_soak,
        anchors=("none: the checks are absolute (each count must be 0)",),
        status=("Invariants", "invariants"),
        plot=plot_soak,
    ),
    Benchmark(
        module="bench.worker_rss",
        title="Worker RSS against threads served",
        render=worker_rss.render_markdown,
        picks=(
            Pick("Goals"),
            Pick("RSS (MB) by threads served"),
            Pick("Index cache", prefix=True),
            Pick("Revisits"),
        ),
        describe=_describe_worker_rss,
        anchors=("none: the goals are absolute (RSS flat within 10 %, under 400 MB)",),
        status=("Goals", "goals"),
        plot=plot_worker_rss,
    ),
)


def _link(base: str, name: str) -> str:
    return f"[`bench/results/{name}`]({base}/{name})"


def _source_line(meta: dict[str, Any]) -> str:
    source = meta.get("source")
    if not source:
        return "- Source commit: not recorded by this benchmark's JSON"
    dirty = " with uncommitted changes in langmem_ext" if source.get("langmem_ext_modified") else ""
    return f"- Source: commit {source['commit']}{dirty}"


def _machine(meta: dict[str, Any]) -> str:
    machine = meta["machine"]
    return f"{machine['cpu']}, {machine['usable_cores']} usable cores"


def _slug(number: int, title: str) -> str:
    text = f"{number}. {title}".lower()
    kept = "".join(c for c in text if c.isalnum() or c in " -_")
    return kept.replace(" ", "-")


# long: the page's fixed introduction (how to rerun, how to read it) is one block of text
def render_page(found: dict[str, Found], captions: dict[str, str], results_link: str) -> str:
    """The page's markdown: the intro, then per benchmark its tables, plot and provenance.
    ``results_link`` is the results directory relative to the page."""
    present = [b for b in BENCHMARKS if b.module in found]
    lines = [
        "# Benchmarks",
        "",
        "<!-- Generated by `python -m bench.docs` from the JSON results in bench/results/; "
        "do not edit by hand. -->",
        "",
        "These benchmarks measure langmem_ext's strategies side by side with *anchors*: the "
        "tools of other libraries that do the same job (langchain-core's `trim_messages`, "
        "langmem's `summarize_messages`, LangChain's `SummarizationMiddleware`), run in the "
        "same process on the same input with the same token counter; where no other library "
        "does the job, a baseline without the feature (no memory node, no retrieval) stands "
        "in. Every table and plot below shows the anchors next to our strategies.",
        "",
        "| benchmark | what it measures | anchors (side by side) | targets |",
        "| :--- | :--- | :--- | :--- |",
    ]
    for number, b in enumerate(present, 1):
        results = found[b.module].results
        what = b.describe(results).split(". ")[0].rstrip(".") + "."
        lines.append(
            f"| [{number}. {b.title}](#{_slug(number, b.title)}) (`python -m {b.module}`) | "
            f"{what} | {'; '.join(b.anchors_of(results))} | {b.status_of(results)} |"
        )
    missing = [b for b in BENCHMARKS if b.module not in found]
    if missing:
        lines += [
            "",
            "No results found for: " + ", ".join(f"`python -m {b.module}`" for b in missing),
        ]
    machines = sorted({_machine(found[b.module].meta) for b in present})
    runtime = sum(found[b.module].meta.get("runtime_s", 0.0) for b in present)
    lines += [
        "",
        "## How to rerun",
        "",
        f"`make bench` runs the benchmarks (the runs recorded here took {runtime / 60:.0f} "
        "minutes in all) and then `python -m bench.docs`, which rewrites this page and its "
        "plots from the newest full-mode JSON of each benchmark in `bench/results/`. After "
        "running one benchmark alone (`python -m bench.summaries`, ...), run "
        "`python -m bench.docs` to bring the page up to date. The command measures nothing; "
        "options: `--results DIR` (default `bench/results`), `--out DIR` (default `docs`).",
        "",
        "## Reading the numbers",
        "",
        "- The tables are each benchmark's own report, rendered from its JSON; the full report "
        "(with the sections left out here) is linked under each benchmark. The JSON stores "
        "floats to 4 significant digits, so a figure here can differ in its last digit from "
        "the full report, which was rendered before rounding.",
        "- Times are wall-clock on a shared virtual machine; each benchmark states whether a "
        "figure is a median (over repetitions, passes or turns) or a mean per call. Ratios "
        "are as the JSON gives them.",
        "- Verdicts (PASS/FAIL, ✓/✗) are the benchmarks' own, kept as they are; a target that "
        "is not met is reported as not met.",
    ]
    if len(machines) > 1:
        lines.append(
            f"- The runs were made on {len(machines)} different machines ("
            + "; ".join(machines)
            + ") with different package versions (see each benchmark's provenance): compare "
            "timings within one benchmark, not across benchmarks."
        )
    lines += _benchmark_sections(captions, found, results_link, present)
    lines.append("")
    return "\n".join(lines)


def _benchmark_sections(
    captions: dict[str, str], found: dict[str, Found], results_link: str, present: Any
) -> list[str]:
    """One section per benchmark: what it measures, its plot, its tables and its provenance."""
    lines: list[str] = []
    for number, b in enumerate(present, 1):
        found_b = found[b.module]
        results, meta = found_b.results, found_b.meta
        stem = found_b.path.stem
        md_name = f"{stem}.md"
        md_exists = found_b.path.with_suffix(".md").exists()
        lines += ["", f"## {number}. {b.title}", ""]
        if not found_b.full:
            lines += [
                f"> **{meta.get('mode')} run**: no full-mode results were found, so these are "
                "smoke-test numbers, not a measurement.",
                "",
            ]
        lines += [
            b.describe(results),
            "",
            "Anchors: " + "; ".join(b.anchors_of(results)) + ".",
            "",
            f"Result: {b.status_of(results)}.",
            "",
            f"![{b.title}]({IMG_DIR}/{b.image})",
            "",
            f"*{captions[b.module]}*",
        ]
        lines += picked_sections(b.render(results), b.picks)
        lines += [
            "",
            "### Provenance",
            "",
            *provenance_lines(meta),
            _source_line(meta),
            "- Full report: "
            + (_link(results_link, md_name) + "; numbers: " if md_exists else "")
            + _link(results_link, found_b.path.name),
        ]
    return lines


def build(results_dir: Path, out_dir: Path) -> tuple[Path, list[Path]]:
    """Write the page and its plots; returns the page's path and the plots' paths."""
    found = find_results(results_dir)
    if not found:
        raise FileNotFoundError(f"no benchmark results (*.json) in {results_dir}")
    captions: dict[str, str] = {}
    images: list[Path] = []
    with _plot_style():
        for b in BENCHMARKS:
            if b.module in found:
                image = out_dir / IMG_DIR / b.image
                captions[b.module] = b.plot(found[b.module].results, image)
                images.append(image)
    link = Path(os.path.relpath(results_dir.resolve(), out_dir.resolve())).as_posix()
    page = out_dir / PAGE
    page.parent.mkdir(parents=True, exist_ok=True)
    page.write_text(render_page(found, captions, link), encoding="utf-8")
    return page, images


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.docs",
        description="Write docs/benchmarks.md and its plots from the benchmark results.",
    )
    parser.add_argument(
        "--results",
        type=Path,
        default=DEFAULT_RESULTS,
        help="directory of the results JSON (default: bench/results)",
    )
    parser.add_argument(
        "--out", type=Path, default=DEFAULT_OUT, help="directory for the page (default: docs)"
    )
    args = parser.parse_args(argv)
    started = time.perf_counter()
    page, images = build(args.results, args.out)
    print(
        f"[docs] wrote {page} and {len(images)} plots in {args.out / IMG_DIR} "
        f"in {time.perf_counter() - started:.1f} s",
        file=sys.stderr,
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
