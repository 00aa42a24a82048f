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
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench import agent_turns, growth, report, retrieval, summaries
from bench.env import ROOT
from bench.report import format_seconds, provenance_lines
from bench.static import STATIC_METHODS

__all__ = ["BENCHMARKS", "Benchmark", "Found", "build", "find_results", "main", "render_page"]

DEFAULT_RESULTS = ROOT / "bench" / "results"
DEFAULT_OUT = ROOT / "docs"
PAGE = "benchmarks.md"
IMG_DIR = "img"

#: plot settings: fixed pixel sizes (inches x DPI), no version or date in the PNG
DPI = 110
SAVE_METADATA: dict[str, Any] = {"Software": None}

#: colours: langmem_ext in blues and greens, the other libraries in orange and red (hatched)
OURS = "#1f77b4"
ANCHOR = "#d62728"
BASELINE_GREY = "#7f7f7f"
TOOL_COLORS = {
    "SummaryBuffer": "#1f77b4",
    "Compacting": "#2ca02c",
    "TieredSummary": "#9467bd",
    "ToolDigest": "#17becf",
    "summarize_messages": "#ff7f0e",
    "SummarizationMiddleware": "#d62728",
}
ANCHOR_HATCH = "//"


# --------------------------------------------------------------------------------------------
# finding the results


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


# --------------------------------------------------------------------------------------------
# the tables: sections of each benchmark's own report


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


# --------------------------------------------------------------------------------------------
# plots


def _pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


@contextmanager
def _plot_style() -> Iterator[None]:
    """matplotlib's defaults (whatever a matplotlibrc says), small fonts."""
    plt = _pyplot()
    with plt.style.context("default"), plt.rc_context({"font.size": 8, "axes.titlesize": 9}):
        yield


def _new_figure(width: float, height: float, rows: int = 1, cols: int = 1, **kw: Any) -> Any:
    return _pyplot().subplots(rows, cols, figsize=(width, height), layout="constrained", **kw)


def _save(fig: Any, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=DPI, metadata=SAVE_METADATA)
    _pyplot().close(fig)


def _tool_color(label: str) -> str:
    return next((c for name, c in TOOL_COLORS.items() if name in label), OURS)


def _legend_handles(anchor_text: str, ours_text: str = "langmem_ext (solid)") -> list[Any]:
    from matplotlib.patches import Patch

    return [
        Patch(facecolor="white", edgecolor="black", label=ours_text),
        Patch(facecolor="white", edgecolor="black", hatch=ANCHOR_HATCH, label=anchor_text),
    ]


@dataclass(frozen=True)
class _Bar:
    label: str
    value: float
    color: str
    anchor: bool
    text: str
    #: bars of one group (one budget) stand together; a thin rule separates the groups
    group: str = ""


def _hbars(
    ax: Any,
    bars: Sequence[_Bar],
    *,
    title: str,
    xlabel: str,
    ref: float | None = None,
    ref_label: str = "",
    labels: bool = True,
    xmax: float | None = None,
) -> None:
    """Horizontal bars, first on top; anchors hatched and their labels marked "(anchor)"."""
    y = list(range(len(bars)))[::-1]
    for pos, bar in zip(y, bars, strict=True):
        ax.barh(
            pos,
            bar.value,
            color=bar.color,
            hatch=ANCHOR_HATCH if bar.anchor else None,
            edgecolor="black" if bar.anchor else bar.color,
            linewidth=0.6,
            alpha=0.9,
        )
        ax.text(bar.value, pos, " " + bar.text, va="center", ha="left", fontsize=7)
    for i in range(1, len(bars)):
        if bars[i].group != bars[i - 1].group:
            ax.axhline(y[i] + 0.5, color="grey", linewidth=0.6)
    top = xmax if xmax is not None else max([b.value for b in bars] + [ref or 0.0, 1e-9]) * 1.3
    ax.set_xlim(0, top)
    ax.set_yticks(y)
    if labels:
        ax.set_yticklabels([b.label + (" (anchor)" if b.anchor else "") for b in bars])
    else:
        ax.tick_params(axis="y", labelleft=False)
    if ref is not None:
        ax.axvline(ref, color="black", linestyle=":", linewidth=1)
        ax.text(ref, len(bars) - 0.45, f"{ref_label} ", fontsize=7, va="bottom", ha="right")
    ax.set_ylim(-0.6, len(bars) - 0.1)
    ax.set_title(title)
    ax.set_xlabel(xlabel)
    ax.grid(axis="x", alpha=0.3)


def plot_token_budget(results: dict[str, Any], path: Path) -> str:
    """Per-call time against history length (static histories), and the agent loop's mean time
    per call over all calls and over the last 10% (the longest histories)."""
    static, loop = results["static"], results["loop"]
    fig, (left, right) = _new_figure(11.0, 4.6, 1, 2, width_ratios=[1.0, 1.25])
    sizes = [row["n"] for row in static["rows"]]
    styles = {
        "trim_tiktoken": ("#d62728", "--", "s", True),
        "trim_approx": ("#ff7f0e", "--", "s", True),
        "budget_tiktoken_cold": ("#9ecae1", "-", "o", False),
        "budget_tiktoken_warm": ("#1f77b4", "-", "o", False),
        "budget_approx_cold": ("#a1d99b", "-", "^", False),
        "budget_approx_warm": ("#2ca02c", "-", "^", False),
    }
    for key, label in STATIC_METHODS.items():
        color, style, marker, anchor = styles[key]
        times_ms = [row[key]["median_s"] * 1e3 for row in static["rows"]]
        left.plot(
            sizes,
            times_ms,
            linestyle=style,
            marker=marker,
            color=color,
            label=label + (" (anchor)" if anchor else ""),
        )
    left.set_xscale("log")
    left.set_yscale("log")
    left.set_xticks(sizes, [f"{n:,}" for n in sizes])
    left.set_ylim(0.1, 3e4)  # room for the legend above the lines
    left.set_xlabel("history length n (messages)")
    left.set_ylabel("median time per call (ms, log scale)")
    left.set_title(f"A. Static histories, budget {static['budget']:,} tokens")
    left.grid(alpha=0.3, which="both")
    left.legend(fontsize=6.5, loc="upper left")

    methods = list(loop["methods"].values())
    y = list(range(len(methods)))[::-1]
    height = 0.38
    for pos, m in zip(y, methods, strict=True):
        anchor = m["family"] != "budget"
        color = ANCHOR if anchor else OURS
        for shift, value, alpha in (
            (height / 2, m["timing"]["per_call_mean_s"], 0.95),
            (-height / 2, m["timing"]["last_decile_per_call_mean_s"], 0.45),
        ):
            right.barh(
                pos + shift,
                value * 1e3,
                height=height,
                color=color,
                alpha=alpha,
                hatch=ANCHOR_HATCH if anchor else None,
                edgecolor="black" if anchor else color,
                linewidth=0.6,
            )
            right.text(value * 1e3, pos + shift, " " + format_seconds(value), va="center")
    right.set_xscale("log")
    right.set_xlim(0.05, 2_000)
    right.set_yticks(
        y, [m["label"] + (" (anchor)" if m["family"] != "budget" else "") for m in methods]
    )
    right.set_xlabel("mean time per call (ms, log scale)")
    right.set_title(
        f"B. Agent loop: {loop['model_calls']:,} calls, history grows to "
        f"{loop['final_history_messages']:,} messages\n"
        f"dark: all calls (mean history {loop['mean_history_messages']:,.0f}); "
        "light: last 10% of calls"
    )
    right.grid(axis="x", alpha=0.3)
    right.legend(
        handles=_legend_handles("anchor: trim_messages (hatched)", "langmem_ext TokenBudget"),
        loc="lower right",
        fontsize=7,
    )
    fig.suptitle("TokenBudget vs trim_messages: time per call as the history grows")
    _save(fig, path)
    return (
        "Left: median time per call against history length on static histories (log-log); "
        "right: the agent loop's mean time per call, over all calls and over the last 10% of "
        "calls. Dashed lines and hatched bars are the anchors (trim_messages)."
    )


def _tool_panels(
    fig: Any, axes: Any, tools: Any, panels: Any, *, cols: int, percent_max: float
) -> None:
    """One bar panel per (value, format, title, x label, reference, reference label) of
    ``panels``, ``cols`` to a row (tool names on the first column), and the anchors' legend."""
    for i, (value, fmt, title, xlabel, ref, ref_label) in enumerate(panels):
        _hbars(
            axes[i // cols][i % cols],
            _tool_bars(tools, value, fmt),
            title=title,
            xlabel=xlabel,
            ref=ref,
            ref_label=ref_label,
            labels=i % cols == 0,
            xmax=percent_max if "%" in xlabel else None,
        )
    fig.legend(
        handles=_legend_handles("anchor: langmem / langchain (hatched)"),
        loc="outside lower center",
        ncols=2,
    )


def _tool_bars(
    tools: Sequence[dict[str, Any]], value: Callable[[dict[str, Any]], float], text: str
) -> list[_Bar]:
    return [
        _Bar(
            label=f"{t['label']} @ {t['max_tokens']:,}",
            value=value(t),
            color=_tool_color(t["label"]),
            anchor=t["family"] != "langmem_ext",
            text=text.format(value(t)),
            group=str(t["max_tokens"]),
        )
        for t in tools
    ]


def plot_summaries(results: dict[str, Any], path: Path) -> str:
    """Per tool and budget: summarizer input ÷ conversation, prefix kept, messages never
    summarized, and broken model inputs."""
    tools = sorted(results["tools"].values(), key=lambda t: t["max_tokens"])
    conv = results["conversation"]
    fig, axes = _new_figure(12.0, 7.6, 2, 2)
    panels = (
        (
            lambda t: t["summarizer"]["input_ratio"],
            "{:.2f}x",
            "Summarizer input ÷ conversation tokens",
            "ratio (x)",
            summaries.INPUT_RATIO_LIMIT,
            f"goal ≤ {summaries.INPUT_RATIO_LIMIT:g}x",
        ),
        (
            lambda t: t["prefix"]["fraction"] * 100,
            "{:.1f}%",
            "Prefix kept (previous view is a prefix of the next)",
            "share of model calls (%)",
            summaries.PREFIX_TARGET * 100,
            f"goal ≥ {summaries.PREFIX_TARGET:.0%} at {summaries.HEADLINE_MAX_TOKENS:,}",
        ),
        (
            lambda t: float(t["dropped"]["never_summarized"]),
            "{:,.0f}",
            f"Messages that left the view unread (of {conv['messages']:,})",
            "messages never summarized",
            None,
            "",
        ),
        (
            lambda t: float(t["validity"]["broken"]),
            "{:,.0f}",
            f"Broken model inputs (of {conv['model_calls']:,} views)",
            "views with a validate() error",
            None,
            "",
        ),
    )
    _tool_panels(fig, axes, tools, panels, cols=2, percent_max=112.0)
    fig.suptitle(
        f"Summarizing memory on agent_loop({conv['loop_n']:,}): {conv['model_calls']:,} model "
        f"calls, {conv['tokens']:,} conversation tokens, one fake summarizer for all"
    )
    _save(fig, path)
    return (
        "Per tool and max_tokens: summarizer input over conversation tokens, share of calls "
        "whose view keeps the previous one as a prefix, messages that left the view without "
        "being summarized, and views with a `langmem_ext.validate` error. Hatched bars are the "
        "anchors (langmem, LangChain)."
    )


def plot_agent_turns(results: dict[str, Any], path: Path) -> str:
    """Per tool and budget, all conversations together: the goals' figures."""
    tools = sorted(results["tools"].values(), key=lambda t: t["max_tokens"])
    calls = tools[0]["total"]["model_calls"] if tools else 0
    fig, axes = _new_figure(13.0, 8.4, 2, 3)
    panels = (
        (
            lambda t: t["total"]["input_ratio"],
            "{:.2f}x",
            "Summarizer input ÷ conversation tokens",
            "ratio (x)",
            agent_turns.INPUT_RATIO_GOAL,
            f"goal ≤ {agent_turns.INPUT_RATIO_GOAL:g}x",
        ),
        (
            lambda t: float(t["total"]["left_unseen"]),
            "{:,.0f}",
            "Messages left unseen (goal 0)",
            "messages",
            None,
            "",
        ),
        (
            lambda t: t["total"]["request_kept_share"] * 100,
            "{:.1f}%",
            "Newest request verbatim in the view (goal 100%)",
            "share of model calls (%)",
            None,
            "",
        ),
        (
            lambda t: float(t["total"]["over_budget"]),
            "{:,.0f}",
            "Views over max_tokens (goal 0)",
            f"views (of {calls:,})",
            None,
            "",
        ),
        (
            lambda t: float(t["total"]["invalid"]),
            "{:,.0f}",
            "Views with a validate() error (goal 0)",
            f"views (of {calls:,})",
            None,
            "",
        ),
        (
            lambda t: t["total"]["prefix_share"] * 100,
            "{:.1f}%",
            "Prefix kept (informational)",
            "share of consecutive calls (%)",
            None,
            "",
        ),
    )
    _tool_panels(fig, axes, tools, panels, cols=3, percent_max=118.0)
    shapes = results["conversations"]
    fig.suptitle(
        f"Long agent turns: {len(shapes)} conversations, {calls:,} model calls, "
        f"{sum(s['tool_rounds'] for s in shapes.values()):,} tool rounds; per tool @ max_tokens"
    )
    _save(fig, path)
    return (
        "All conversations together, per tool and max_tokens: summarizer input, messages left "
        "unseen, calls whose view holds the newest request verbatim, views over budget, views "
        "with a `langmem_ext.validate` error, and prefix stability. Hatched bars are the anchors "
        "(langmem, LangChain)."
    )


def plot_growth(results: dict[str, Any], path: Path) -> str:
    """Latest checkpoint size after every turn, and the median time per turn."""
    configs = results["configs"]
    fig, (left, right) = _new_figure(11.0, 4.4, 1, 2, width_ratios=[1.4, 1.0])
    styles = {
        "none": (BASELINE_GREY, "--"),
        "view": ("#9467bd", "-"),
        "rewrite": (OURS, "-"),
    }
    for key, cfg in configs.items():
        color, style = styles.get(key, (OURS, "-"))
        sizes = [b / 1e3 for b in cfg["latest_checkpoint_bytes"]]
        label = cfg["label"] + (" (baseline)" if key == "none" else "")
        left.plot(
            range(1, len(sizes) + 1),
            sizes,
            linestyle=style,
            color=color,
            linewidth=2.2 if key == "none" else 1.2,
            label=label,
        )
    left.set_xlabel("turn (one human message and one AI answer)")
    left.set_ylabel("latest checkpoint (kB)")
    left.set_title("Latest checkpoint size after each turn (SqliteSaver)")
    left.grid(alpha=0.3)
    left.legend(loc="upper left")

    keys = list(configs)
    y = list(range(len(keys)))[::-1]
    height = 0.38
    for pos, key in zip(y, keys, strict=True):
        timing = configs[key]["timing"]
        baseline = key == "none"
        color = styles.get(key, (OURS, "-"))[0]
        for shift, value, alpha in (
            (height / 2, timing["median_turn_s"], 0.95),
            (-height / 2, timing["median_last_tenth_s"], 0.45),
        ):
            right.barh(
                pos + shift,
                value * 1e3,
                height=height,
                color=color,
                alpha=alpha,
                hatch=ANCHOR_HATCH if baseline else None,
                edgecolor="black" if baseline else color,
                linewidth=0.6,
            )
            right.text(value * 1e3, pos + shift, f" {value * 1e3:.1f} ms", va="center")
    right.set_yticks(
        y, [configs[k]["label"] + (" (baseline)" if k == "none" else "") for k in keys]
    )
    top = max(c["timing"]["median_last_tenth_s"] for c in configs.values()) * 1e3
    right.set_xlim(0, top * 1.3)
    right.set_xlabel("median time per turn (ms), graph.invoke")
    right.set_title("Time per turn; dark: all turns, light: last 10% of turns")
    right.grid(axis="x", alpha=0.3)
    fig.suptitle(
        f"Checkpoint growth over {results['conversation']['turns']:,} turns: MemoryNode vs no "
        "memory (hatched/dashed: baseline without memory)"
    )
    _save(fig, path)
    return (
        "Left: size of the newest checkpoint row after every turn; right: median time per "
        "turn over the whole run and over its last 10%. The dashed line and hatched bars are "
        "the baseline: the same graph with no memory node."
    )


def plot_retrieval(results: dict[str, Any], path: Path) -> str:
    """Evidence in the input per configuration and data set, and answer turns in the input
    against the issue's figures."""
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    evidence = results["evidence"]
    datasets = list(evidence)
    configs = list(evidence[datasets[0]]) if datasets else []
    titles = [retrieval.DATASET_TITLES.get(n, n) for n in datasets]
    palette = ("#1f77b4", "#6baed6", "#ff7f0e", "#fdae6b", "#2ca02c")
    colors = [palette[i % len(palette)] for i in range(len(datasets))]
    fig, (left, right) = _new_figure(13.0, 6.2, 1, 2, width_ratios=[1.3, 1.0])
    step = 0.8 / max(len(datasets), 1)
    y = list(range(len(configs)))[::-1]
    for d, name in enumerate(datasets):
        for pos, config in zip(y, configs, strict=True):
            value = (evidence[name][config]["evidence_available"] or 0.0) * 100
            baseline = config == retrieval.BASELINE
            left.barh(
                pos + 0.4 - step * (d + 0.5),
                value,
                height=step,
                color=colors[d],
                hatch=ANCHOR_HATCH if baseline else None,
                edgecolor="black" if baseline else colors[d],
                linewidth=0.5,
            )
    target = retrieval.EVIDENCE_TARGET * 100
    left.axvline(target, color="black", linestyle=":", linewidth=1)
    left.set_yticks(
        y, [c + (" (baseline, no retrieval)" if c == retrieval.BASELINE else "") for c in configs]
    )
    left.set_ylim(-0.6, len(configs) - 0.4)
    left.set_xlim(0, 105)
    left.set_xlabel("questions with evidence in the model's input (%)")
    left.set_title(
        f"Evidence available, {results['meta']['config']['budget']:,} tokens for the request"
    )
    left.grid(axis="x", alpha=0.3)
    handles: list[Any] = [Patch(facecolor=c, label=t) for c, t in zip(colors, titles, strict=True)]
    handles += [
        Patch(facecolor="white", edgecolor="black", hatch=ANCHOR_HATCH, label="baseline"),
        Line2D(
            [],
            [],
            color="black",
            linestyle=":",
            label=f"issue's target > {retrieval.EVIDENCE_TARGET:.0%} (judged on A, A', B)",
        ),
    ]
    left.legend(
        handles=handles, loc="upper center", bbox_to_anchor=(0.5, -0.1), ncols=2, fontsize=7
    )

    yd = list(range(len(datasets)))[::-1]
    for pos, name in zip(yd, datasets, strict=True):
        cells = evidence[name]
        for shift, config, color, hatch in (
            (0.2, retrieval.BASELINE, BASELINE_GREY, ANCHOR_HATCH),
            (-0.2, retrieval.HEADLINE, OURS, None),
        ):
            value = (cells[config]["answer_turns_in_input"] or 0.0) * 100
            right.barh(
                pos + shift,
                value,
                height=0.38,
                color=color,
                hatch=hatch,
                edgecolor="black" if hatch else color,
                linewidth=0.5,
            )
            right.text(value, pos + shift, f" {value:.1f}%", va="center", fontsize=7)
    issue: tuple[tuple[float, Any, str], ...] = (
        (retrieval.ANCHOR_TRIMMED_SHARE, ":", "issue, trimmed 4k view"),
        (retrieval.ANCHOR_HYBRID_SHARE, "--", "issue, hybrid top-5 (about)"),
    )
    for value, style, _ in issue:
        right.axvline(value * 100, color=ANCHOR, linestyle=style, linewidth=1.2)
    right.set_yticks(yd, titles)
    right.set_ylim(-0.6, len(datasets) - 0.4)
    right.set_xlim(0, 115)
    right.set_xlabel("evidence messages in the model's input (% of all)")
    right.set_title("Answer turns in the input (red: the issue's figures)")
    right.grid(axis="x", alpha=0.3)
    right.legend(
        handles=[
            Patch(
                facecolor=BASELINE_GREY,
                edgecolor="black",
                hatch=ANCHOR_HATCH,
                label="baseline: " + retrieval.BASELINE,
            ),
            Patch(facecolor=OURS, label=retrieval.HEADLINE.replace("TokenBudget + ", "")),
            *(
                Line2D([], [], color=ANCHOR, linestyle=style, label=f"{text}: {value:.1%}")
                for value, style, text in issue
            ),
        ],
        loc="upper center",
        bbox_to_anchor=(0.5, -0.1),
        fontsize=7,
    )
    fig.suptitle(
        "Retrieval memory: evicted evidence brought back (no other library is run here; "
        "the baseline is TokenBudget alone)"
    )
    _save(fig, path)
    return (
        "Left: share of questions with evidence in the model's input, per configuration and "
        "data set, against the issue's 70% target; right: share of evidence messages in the "
        "input, TokenBudget alone (hatched baseline) and with hybrid retrieval, against the "
        "figures quoted in the issue (red lines)."
    )


# --------------------------------------------------------------------------------------------
# per benchmark: what it measures, its anchors, its verdict


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
        title = retrieval.DATASET_TITLES.get(t["dataset"], t["dataset"])
        value = t["checks"][0]["value"]
        verdict = "met" if t["checks"][0]["passed"] else "**not met**"
        missed = [c["name"] for c in t["checks"][1:] if not c["passed"]]
        if missed:  # the dataset's other goals, named where they are not met
            verdict += "; not met: " + "; ".join(missed)
        out.append(f"{title}: {_pct(value)} ({verdict})")
    judged = {t["dataset"] for t in results["targets"]}
    unjudged = [retrieval.DATASET_TITLES.get(n, n) for n in results["evidence"] if n not in judged]
    text = (
        f"evidence available > {retrieval.EVIDENCE_TARGET:.0%} with hybrid retrieval: "
        + "; ".join(out)
    )
    if unjudged:
        text += "; reported, not judged: " + ", ".join(
            f"{name} {_pct(results['evidence'][n][retrieval.HEADLINE]['evidence_available'])}"
            for name, n in zip(
                unjudged, [n for n in results["evidence"] if n not in judged], strict=True
            )
        )
    issue = ", ".join(
        f"{retrieval.DATASET_TITLES.get(n, n).split('.')[0]} "
        f"{_pct(cells[retrieval.HEADLINE]['answer_turns_in_input'] or 0.0)}"
        for n, cells in results["evidence"].items()
    )
    return (
        f"{text}; answer turns in the input with hybrid retrieval: {issue}, against about "
        f"{retrieval.ANCHOR_HYBRID_SHARE:.0%} quoted in the issue (compared in kind only)"
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


def _anchors_retrieval(results: dict[str, Any]) -> list[str]:
    return [f"{retrieval.BASELINE} (baseline: no retrieval)", "the issue's figures"]


@dataclass(frozen=True)
class Benchmark:
    """One benchmark on the page: where its results are, how to show them."""

    module: str
    #: the full-mode results stem (``<stem>.json`` / ``<stem>.md``)
    stem: str
    title: str
    render: Callable[[dict[str, Any]], str]
    picks: tuple[Pick, ...]
    describe: Callable[[dict[str, Any]], str]
    anchors: Callable[[dict[str, Any]], list[str]]
    status: Callable[[dict[str, Any]], str]
    image: str
    plot: Callable[[dict[str, Any], Path], str]


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
        stem="summaries",
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
        image="bench_summaries.png",
        plot=plot_summaries,
    ),
    Benchmark(
        module="bench.agent_turns",
        stem="agent_turns",
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
        image="bench_agent_turns.png",
        plot=plot_agent_turns,
    ),
    Benchmark(
        module="bench.growth",
        stem="growth",
        title="Checkpoint growth: MemoryNode vs no memory",
        render=growth.render_markdown,
        picks=(Pick("Verdict"), Pick("Summary"), Pick("Latest checkpoint")),
        describe=_describe_growth,
        anchors=_anchors_growth,
        status=_status_growth,
        image="bench_growth.png",
        plot=plot_growth,
    ),
    Benchmark(
        module="bench.retrieval",
        stem="retrieval",
        title="Retrieval memory: evicted evidence brought back",
        render=retrieval.render_markdown,
        picks=(
            Pick("Verdict"),
            Pick("Evidence available", prefix=True, keep=_first_table_per_subsection),
        ),
        describe=_describe_retrieval,
        anchors=_anchors_retrieval,
        status=_status_retrieval,
        image="bench_retrieval.png",
        plot=plot_retrieval,
    ),
)


# --------------------------------------------------------------------------------------------
# the page


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
            f"{what} | {'; '.join(b.anchors(results))} | {b.status(results)} |"
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
            "Anchors: " + "; ".join(b.anchors(results)) + ".",
            "",
            f"Result: {b.status(results)}.",
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
    lines.append("")
    return "\n".join(lines)


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
