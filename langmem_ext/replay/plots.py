"""Plots of replays side by side (matplotlib, imported on use): the figure of
:meth:`~langmem_ext.replay.comparison.Comparison.plot`."""

from __future__ import annotations

import itertools
import os
from collections.abc import Sequence
from typing import Any

from langmem_ext.errors import LangmemExtError
from langmem_ext.replay.results import Replay

__all__ = ["plot_replays"]


def _pyplot() -> Any:
    try:
        import matplotlib.pyplot as plt
    except ImportError as exc:
        raise LangmemExtError(
            "plots need matplotlib: pip install 'langmem-ext[experiment]'"
        ) from exc
    return plt


def _cumulative(values: list[float]) -> list[float]:
    return list(itertools.accumulate(values))


def _draw(axes: Any, r: Replay, color: Any) -> None:
    """The lines of one replay on the four panels."""
    (tokens_ax, input_ax), (cost_ax, cache_ax) = axes
    calls = [c.call for c in r.calls]
    tokens_ax.plot(calls, [c.view_tokens for c in r.calls], color=color, lw=1, label=r.name)
    events = [c for c in r.calls if c.folded]
    if events:
        tokens_ax.scatter(
            [c.call for c in events],
            [c.view_tokens for c in events],
            color=color,
            marker="v",
            s=18,
            zorder=3,
        )
    if r.budget is not None:
        tokens_ax.axhline(r.budget, color=color, lw=0.8, ls=":")
    input_ax.plot(calls, _cumulative([c.view_tokens for c in r.calls]), color=color, label=r.name)
    cost_ax.plot(calls, _cumulative([c.cost for c in r.calls]), color=color, ls="--", lw=1)
    cost_ax.plot(calls, _cumulative([c.cost_cached for c in r.calls]), color=color, label=r.name)
    shares = [c.cached_tokens / c.view_tokens if c.view_tokens else 0.0 for c in r.calls]
    cache_ax.plot(calls, _rolling(shares, 10), color=color, label=r.name)


def _label(axes: Any, model: str) -> None:
    """Titles and axis labels of the four panels."""
    (tokens_ax, input_ax), (cost_ax, cache_ax) = axes
    tokens_ax.set(
        title="Tokens the model sees per call (▼ summary, ··· budget)",
        xlabel="model call",
        ylabel="tokens",
    )
    input_ax.set(title="Cumulative input tokens", xlabel="model call", ylabel="tokens")
    cost_ax.set(
        title=f"Cumulative cost, {model} (- - without prompt caching)",
        xlabel="model call",
        ylabel="US dollars",
    )
    cache_ax.set(
        title="Input served from the prompt cache (10-call mean)",
        xlabel="model call",
        ylabel="share of input",
        ylim=(0, 1.02),
    )


def plot_replays(
    replays: Sequence[Replay],
    path: str | os.PathLike[str] | None = None,
    *,
    model: str,
    title: str | None = None,
) -> Any:
    """The four panels of ``replays`` (costs at ``model``'s prices); saved as PNG at ``path``
    when given. Returns the matplotlib figure."""
    plt = _pyplot()
    fig, axes = plt.subplots(2, 2, figsize=(12, 7.5), constrained_layout=True)
    (tokens_ax, input_ax), (cost_ax, _) = axes
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for i, r in enumerate(replays):
        _draw(axes, r, colors[i % len(colors)])
    _label(axes, model)
    peaks = [max((c.view_tokens for c in r.calls), default=0) for r in replays]
    if peaks and min(peaks) > 0 and max(peaks) > 10 * min(peaks):
        # the whole history next to budgets: a log scale keeps the budgets readable
        for ax in (tokens_ax, input_ax, cost_ax):
            ax.set_yscale("log")
    from matplotlib.ticker import FuncFormatter

    thousands = FuncFormatter(lambda v, _: f"{v:,.0f}" if v >= 1 else f"{v:g}")
    for ax in (tokens_ax, input_ax):
        ax.yaxis.set_major_formatter(thousands)
    for ax in axes.flat:
        ax.grid(alpha=0.3)
    tokens_ax.legend(fontsize="small", loc="upper left")
    if title:
        fig.suptitle(title)
    if path is not None:
        fig.savefig(path, dpi=110, metadata={"Software": None})
    return fig


def _rolling(values: list[float], width: int) -> list[float]:
    out, total = [], 0.0
    for i, v in enumerate(values):
        total += v
        if i >= width:
            total -= values[i - width]
        out.append(total / min(i + 1, width))
    return out
