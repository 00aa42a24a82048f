"""The plots of the benchmarks page (``docs/img/bench_*.png``), one per benchmark, drawn from the
same JSON results as its tables (``bench/docs.py`` writes the page).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from bench import agent_turns, long_turns, retrieval_config, summaries, worker_rss
from bench.harness import format_seconds, pct
from bench.static import STATIC_METHODS

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


# long: one matplotlib figure, its axes, labels and legend set up in drawing order
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


# long: one matplotlib figure, its axes, labels and legend set up in drawing order
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


# long: one matplotlib figure, its axes, labels and legend set up in drawing order
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


# long: the left panel of one figure, set up in drawing order (the right one is a helper)
def plot_retrieval(results: dict[str, Any], path: Path) -> str:
    """Evidence in the input per configuration and data set, and answer turns in the input
    against the issue's figures."""
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    evidence = results["evidence"]
    datasets = list(evidence)
    configs = list(evidence[datasets[0]]) if datasets else []
    titles = [retrieval_config.DATASET_TITLES.get(n, n) for n in datasets]
    palette = ("#1f77b4", "#6baed6", "#ff7f0e", "#fdae6b", "#2ca02c")
    colors = [palette[i % len(palette)] for i in range(len(datasets))]
    fig, (left, right) = _new_figure(13.0, 6.2, 1, 2, width_ratios=[1.3, 1.0])
    step = 0.8 / max(len(datasets), 1)
    y = list(range(len(configs)))[::-1]
    for d, name in enumerate(datasets):
        for pos, config in zip(y, configs, strict=True):
            value = (evidence[name][config]["evidence_available"] or 0.0) * 100
            baseline = config == retrieval_config.BASELINE
            left.barh(
                pos + 0.4 - step * (d + 0.5),
                value,
                height=step,
                color=colors[d],
                hatch=ANCHOR_HATCH if baseline else None,
                edgecolor="black" if baseline else colors[d],
                linewidth=0.5,
            )
    target = retrieval_config.EVIDENCE_TARGET * 100
    left.axvline(target, color="black", linestyle=":", linewidth=1)
    left.set_yticks(
        y,
        [
            c + (" (baseline, no retrieval)" if c == retrieval_config.BASELINE else "")
            for c in configs
        ],
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
            label=f"issue's target > {retrieval_config.EVIDENCE_TARGET:.0%} (judged on A, A', B)",
        ),
    ]
    left.legend(
        handles=handles, loc="upper center", bbox_to_anchor=(0.5, -0.1), ncols=2, fontsize=7
    )

    _answer_turns_panel(datasets, evidence, right, titles)
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


def _answer_turns_panel(datasets: Any, evidence: Any, right: Any, titles: Any) -> None:
    """The right panel: answer turns in the input per data set, against the issue's figures."""
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    yd = list(range(len(datasets)))[::-1]
    for pos, name in zip(yd, datasets, strict=True):
        cells = evidence[name]
        for shift, config, color, hatch in (
            (0.2, retrieval_config.BASELINE, BASELINE_GREY, ANCHOR_HATCH),
            (-0.2, retrieval_config.HEADLINE, OURS, None),
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
        (retrieval_config.ANCHOR_TRIMMED_SHARE, ":", "issue, trimmed 4k view"),
        (retrieval_config.ANCHOR_HYBRID_SHARE, "--", "issue, hybrid top-5 (about)"),
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
                label="baseline: " + retrieval_config.BASELINE,
            ),
            Patch(facecolor=OURS, label=retrieval_config.HEADLINE.replace("TokenBudget + ", "")),
            *(
                Line2D([], [], color=ANCHOR, linestyle=style, label=f"{text}: {value:.1%}")
                for value, style, text in issue
            ),
        ],
        loc="upper center",
        bbox_to_anchor=(0.5, -0.1),
        fontsize=7,
    )


# long turns, pgvector at scale, soak, worker RSS


def _line_axes(ax: Any, title: str, xlabel: str, ylabel: str, legend_size: float = 7) -> None:
    """A line plot's title, axis labels, light grid and legend."""
    ax.set_title(title)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=legend_size)


def plot_long_turns(results: dict[str, Any], path: Path) -> str:
    """Recall per ranking / query, this code against the code before, and time per call."""
    fig, (left, right) = _new_figure(10, 3.6, 1, 2)
    ours = [
        _Bar(n, v["recall"], OURS, False, pct(v["recall"]), "this code")
        for n, v in results["variants"].items()
    ]
    before = [
        _Bar(f"before: {n}", v["recall"], BASELINE_GREY, True, pct(v["recall"]), "before")
        for n, v in (results.get("baseline") or {}).get("variants", {}).items()
    ]
    _hbars(
        left,
        ours + before,
        title="Recall of the asked facts",
        xlabel="share of asked facts in the retrieved context",
        ref=long_turns.RECALL_GOAL,
        ref_label="goal",
        xmax=1.25,
    )
    times = [
        _Bar(b.label, results["variants"][b.label]["ms_per_call_median"], OURS, False, "", "")
        for b in ours
    ]
    times = [replace(b, text=f"{b.value:.1f} ms") for b in times]
    _hbars(right, times, title="Time per model call (median)", xlabel="ms")
    _save(fig, path)
    return (
        "Left: recall of the facts asked for, per ranking / query (hatched: the code before); "
        "dotted: the goal. Right: median time per model call."
    )


def plot_pgvector_scale(results: dict[str, Any], path: Path) -> str:
    """Recall against ``hnsw.ef_search`` per cell and scan mode; p50 per apply at the
    recommended setting per cell, with the in-process anchor."""
    fig, (left, right) = _new_figure(10, 3.8, 1, 2)
    k = results["meta"]["config"]["k"]
    for cell in results["cells"]:
        name = f"{cell['turns']:,} {cell['layout']}"
        for scan, style in (("off", "--"), ("relaxed_order", "-")):
            points = sorted(
                (s["ef_search"], s["recall"]["recall"])
                for s in cell["settings"]
                if s["iterative_scan"] == scan
            )
            if points:
                xs, ys = zip(*points, strict=True)
                left.plot(xs, ys, style, marker="o", markersize=3, label=f"{name}, {scan}")
    left.axhline(0.95, color="black", linestyle=":", linewidth=1)
    left.set_xscale("log")
    left.set_ylim(0, 1.05)
    _line_axes(left, f"Recall@{k} of the store's search against brute force",
               "hnsw.ef_search (log)", "recall", legend_size=6)  # fmt: skip
    chosen = results["recommended"]
    bars: list[_Bar] = []
    for cell in results["cells"]:
        name = f"{cell['turns']:,} {cell['layout']}"
        at_chosen = [
            s["latency"]["single"]["p50"]
            for s in cell["settings"]
            if (s["ef_search"], s["iterative_scan"])
            == (chosen["ef_search"], chosen["iterative_scan"])
        ]
        for p50 in at_chosen:  # a cell not run at the recommended setting has no bar
            bars.append(_Bar(f"{name} store", p50, OURS, False, f"{p50:.1f}", name))
        if cell.get("local"):
            local = cell["local"]["single"]["p50"]
            bars.append(_Bar(f"{name} local", local, ANCHOR, True, f"{local:.1f}", name))
    _hbars(
        right,
        bars,
        title=f"Per apply, p50 (ef_search={chosen['ef_search']}, {chosen['iterative_scan']})",
        xlabel="ms",
    )
    _save(fig, path)
    return (
        "Left: recall of the store's search per size and layout against `hnsw.ef_search`, "
        "with `hnsw.iterative_scan` off (dashed) and `relaxed_order` (solid); dotted: the goal. "
        "Right: median time of one `Retrieval.apply` at the recommended setting, the store's "
        "search against the in-process index (hatched)."
    )


def plot_soak(results: dict[str, Any], path: Path) -> str:
    """RSS of each worker over its life, and the latency percentiles."""
    fig, (left, right) = _new_figure(10, 3.6, 1, 2)
    for r in results["rss"]:
        times = [t for t, _ in r["samples"]]
        mbs = [mb for _, mb in r["samples"]]
        label = f"worker {r['worker']}.{r['incarnation']}" + (" (killed)" if r["killed"] else "")
        left.plot(times, mbs, marker="o", markersize=3, linewidth=1, label=label)
    left.set_ylim(0, max(r["max_mb"] for r in results["rss"]) * 1.15)
    _line_axes(left, "RSS per worker", "s since the start", "MB")
    lat = results["latency_ms"]
    names = [
        ("added_p50", "added per call p50"),
        ("added_p99", "added per call p99"),
        ("turn_p50", "whole turn p50"),
        ("turn_p99", "whole turn p99"),
    ]
    bars = [_Bar(label, lat[key], OURS, False, f"{lat[key]:,.1f} ms") for key, label in names]
    _hbars(right, bars, title="Latency (ms)", xlabel="ms")
    _save(fig, path)
    return (
        "Left: resident memory of each worker process over its life (the killed worker and its "
        "restart are separate lines). Right: the time memory adds to a model call (summarizer "
        "excluded) and a whole agent turn, p50 and p99."
    )


def plot_worker_rss(results: dict[str, Any], path: Path) -> str:
    """RSS and the index cache's bytes against threads served, one line per setting."""
    fig, (left, right) = _new_figure(10, 3.6, 1, 2)
    for s in results["settings"]:
        threads = [p["threads"] for p in s["checkpoints"]]
        left.plot(threads, [p["VmRSS"] for p in s["checkpoints"]], marker="o", markersize=3,
                  linewidth=1, label=f"cache {s['label']}")  # fmt: skip
        right.plot(threads, [p["cache"]["bytes"] / worker_rss.MIB for p in s["checkpoints"]],
                   marker="o", markersize=3, linewidth=1, label=f"cache {s['label']}")  # fmt: skip
    left.axhline(worker_rss.MAX_RSS_MB, color=ANCHOR, linestyle="--", linewidth=1,
                 label=f"goal: {worker_rss.MAX_RSS_MB:.0f} MB")  # fmt: skip
    left.set_ylim(0, None)
    _line_axes(left, "Worker RSS", "threads served", "MB")
    _line_axes(right, "Index cache held", "threads served", "MiB")
    _save(fig, path)
    return (
        "Left: resident memory of each worker (one per `index_cache_bytes` setting) after "
        "`gc.collect()`, against the threads it has served; the dashed line is the 400 MB goal. "
        "Right: the bytes the in-process index cache holds (its own estimate)."
    )
