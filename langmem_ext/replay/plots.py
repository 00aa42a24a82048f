"""Plots of replays side by side (matplotlib, imported on use): the figure of
:meth:`~langmem_ext.replay.comparison.Comparison.plot`.

Small multiples, so that eight strategies stay readable: one small panel per replay with the
tokens the model sees per call (the whole history as a faint grey area behind it, clipped to the
panel's scale so the budget stays readable; ▼ a summary event; dotted, the budget), then a
summary row of horizontal bars: the cost of the whole conversation with and without prompt
caching, and the share of calls that kept the prefix next to the share of input a prompt cache
would serve. Linear scales everywhere, no legend over a line, at most two lines a panel.
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from typing import Any

from langmem_ext.errors import LangmemExtError
from langmem_ext.replay.results import Replay

__all__ = ["plot_replays"]

#: small panels per row of the grid
_COLUMNS = 4
_VIEW = "tab:blue"
_HISTORY = "0.9"
_UNCACHED, _CACHED = "tab:gray", "tab:blue"
_PREFIX, _CACHE_SHARE = "tab:green", "tab:orange"


def _pyplot() -> Any:
    try:
        import matplotlib.pyplot as plt
    except ImportError as exc:
        raise LangmemExtError(
            "plots need matplotlib: pip install 'langmem-ext[experiment]'"
        ) from exc
    return plt


def _thousands() -> Any:
    from matplotlib.ticker import FuncFormatter

    return FuncFormatter(lambda v, _: f"{v / 1000:,.0f}k" if v >= 1000 else f"{v:,.0f}")


def _tokens_panel(ax: Any, r: Replay) -> None:
    """One replay: view tokens per call (one line), the budget (dotted, the second line), the
    whole history behind them as a grey area clipped to the panel, summary events marked."""
    calls = [c.call for c in r.calls]
    view = [c.view_tokens for c in r.calls]
    history = [c.history_tokens for c in r.calls]
    peak = max(view, default=0)
    if history != view:
        ax.fill_between(calls, history, color=_HISTORY, lw=0)
    ax.plot(calls, view, color=_VIEW, lw=0.9)
    events = [c for c in r.calls if c.folded]
    if events:
        ax.scatter(
            [c.call for c in events],
            [c.view_tokens for c in events],
            color="black",
            marker="v",
            s=10,
            zorder=3,
            lw=0,
        )
    if r.budget is not None:
        ax.axhline(r.budget, color="black", lw=0.8, ls=":")
        top = max(r.budget, peak)
    else:
        top = peak
    ax.set_ylim(0, max(top, 1) * 1.15)
    ax.set_xlim(left=0)
    ax.set_title(r.name, fontsize="medium")
    ax.yaxis.set_major_formatter(_thousands())
    ax.tick_params(labelsize="small")
    ax.grid(alpha=0.3)
    if r.error:
        ax.text(0.02, 0.92, "stopped early", transform=ax.transAxes, color="red", fontsize="small")


def _clip_at(values: Sequence[float]) -> float:
    """Where a bar axis ends (``values``: each strategy's longest bar): past every bar, unless
    one dwarfs the rest (the whole history next to budgets), then past the others; the longer
    bars are clipped and labelled with their value."""
    ordered = sorted(values)
    if len(ordered) >= 2 and ordered[-2] > 0 and ordered[-1] > 3 * ordered[-2]:
        return ordered[-2] * 1.3
    return max(ordered[-1], 1e-9) * 1.1


def _cost_panel(ax: Any, replays: Sequence[Replay], model: str) -> None:
    """Cost of the whole conversation per strategy: without and with prompt caching."""
    totals = [r.totals() for r in replays]
    ys = list(range(len(replays)))
    uncached = [t["cost"] for t in totals]
    cached = [t["cost_cached"] for t in totals]
    end = _clip_at([max(u, c) for u, c in zip(uncached, cached, strict=True)])
    h = 0.38
    ax.barh([y - h / 2 for y in ys], uncached, h, color=_UNCACHED, label="no prompt caching")
    ax.barh([y + h / 2 for y in ys], cached, h, color=_CACHED, label="prompt caching")
    for y, value in [(y - h / 2, v) for y, v in zip(ys, uncached, strict=True)] + [
        (y + h / 2, v) for y, v in zip(ys, cached, strict=True)
    ]:
        if value > end:
            ax.text(end, y, f"${value:,.2f} →", ha="right", va="center", fontsize="x-small")
    ax.set_xlim(0, end)
    ax.set(title=f"Cost of the conversation, {model}", xlabel="US dollars")
    _strategy_axis(ax, replays)
    ax.legend(fontsize="small", loc="upper center", bbox_to_anchor=(0.5, -0.22), ncol=2)


def _cache_panel(ax: Any, replays: Sequence[Replay]) -> None:
    """Per strategy: calls whose previous request stayed a prefix, input served from cache."""
    totals = [r.totals() for r in replays]
    ys = list(range(len(replays)))
    h = 0.38
    ax.barh(
        [y - h / 2 for y in ys],
        [t["prefix_kept"] for t in totals],
        h,
        color=_PREFIX,
        label="calls that kept the prefix",
    )
    ax.barh(
        [y + h / 2 for y in ys],
        [t["cached_share"] for t in totals],
        h,
        color=_CACHE_SHARE,
        label="input served from the prompt cache",
    )
    from matplotlib.ticker import PercentFormatter

    ax.set_xlim(0, 1)
    ax.xaxis.set_major_formatter(PercentFormatter(1.0, decimals=0))
    ax.set(title="Prefix kept and prompt-cache share", xlabel="share")
    _strategy_axis(ax, replays)
    ax.legend(fontsize="small", loc="upper center", bbox_to_anchor=(0.5, -0.22), ncol=2)


def _strategy_axis(ax: Any, replays: Sequence[Replay]) -> None:
    ax.set_yticks(range(len(replays)), [r.name for r in replays], fontsize="small")
    ax.set_ylim(len(replays) - 0.5, -0.5)  # the first strategy on top
    ax.tick_params(axis="x", labelsize="small")
    ax.grid(axis="x", alpha=0.3)


def plot_replays(
    replays: Sequence[Replay],
    path: str | os.PathLike[str] | None = None,
    *,
    model: str,
    title: str | None = None,
) -> Any:
    """Small multiples of ``replays``: one panel per replay with the tokens the model sees per
    call, and a row of bars with each replay's cost (at ``model``'s prices, with and without
    prompt caching), prefix kept and prompt-cache share. Saved as PNG at ``path`` when given.
    Returns the matplotlib figure."""
    plt = _pyplot()
    n = max(len(replays), 1)
    columns = min(n, _COLUMNS)
    rows = math.ceil(n / columns)
    bars_height = max(2.0, 0.34 * n) + 0.9
    fig = plt.figure(
        figsize=(max(3.3 * columns, 10), 2.3 * rows + bars_height + 0.8), constrained_layout=True
    )
    outer = fig.add_gridspec(2, 1, height_ratios=[2.3 * rows, bars_height])
    grid = outer[0].subgridspec(rows, columns)
    first = None
    for i, r in enumerate(replays):
        ax = fig.add_subplot(grid[i // columns, i % columns], sharex=first)
        first = first or ax
        _tokens_panel(ax, r)
        if i // columns == rows - 1 or i + columns >= len(replays):
            ax.set_xlabel("model call", fontsize="small")
        if i % columns == 0:
            ax.set_ylabel("tokens per call", fontsize="small")
    bars = outer[1].subgridspec(1, 2)
    _cost_panel(fig.add_subplot(bars[0, 0]), replays, model)
    _cache_panel(fig.add_subplot(bars[0, 1]), replays)
    key = "tokens the model sees per call; grey: the whole history; ▼ summary; ··· budget"
    fig.suptitle(f"{title}\n{key}" if title else key, fontsize="medium")
    if path is not None:
        fig.savefig(path, dpi=110, metadata={"Software": None})
    return fig
