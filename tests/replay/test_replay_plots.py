"""replay.plots: the figure of ``Comparison.plot()`` is small multiples, one tokens panel per
replay, readable at a glance (linear scales, at most two lines a panel, no legend over lines)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import matplotlib
import pytest
from matplotlib.collections import PathCollection

from langmem_ext import SummaryBuffer, TokenBudget, ToolDigest
from langmem_ext.replay import Comparison, compare
from langmem_ext.replay.plots import plot_replays
from langmem_ext.testing import RecordingSummarizer, synthetic_history

matplotlib.use("Agg")  # a file, never a window (pyplot is imported on the first plot)

MESSAGES = synthetic_history(200, seed=5, words=(20, 120))


@pytest.fixture(scope="module")
def comparison() -> Comparison:
    return compare(
        MESSAGES,
        {
            "full": None,
            "budget": TokenBudget(1_500),
            "digest": ToolDigest(1_500),
            "summary": SummaryBuffer(2_500, summarizer=RecordingSummarizer()),
            "budget 2k": TokenBudget(2_000, target_tokens=1_200),
        },
        progress=False,
        source="synthetic",
    )


def _tokens_panels(figure: Any, names: list[str]) -> list[Any]:
    return [ax for ax in figure.axes if ax.get_title() in names]


def test_one_tokens_panel_per_replay_titled_with_its_name(comparison: Comparison) -> None:
    names = [r.name for r in comparison.replays]
    figure = comparison.plot()
    panels = _tokens_panels(figure, names)
    assert [ax.get_title() for ax in panels] == names
    # the summary row: cost and cache bars, one bar per replay and measure
    bars = [ax for ax in figure.axes if ax not in panels]
    assert len(bars) == 2
    for ax in bars:
        assert len(ax.patches) == 2 * len(names)
        assert [t.get_text() for t in ax.get_yticklabels()] == names


def test_small_panels_have_at_most_two_lines_linear_scales_and_no_legend(
    comparison: Comparison,
) -> None:
    names = [r.name for r in comparison.replays]
    figure = comparison.plot()
    for ax in _tokens_panels(figure, names):
        assert 1 <= len(ax.lines) <= 2, ax.get_title()
        assert ax.get_legend() is None
    for ax in figure.axes:
        assert ax.get_yscale() == ax.get_xscale() == "linear"


def test_budget_is_dotted_and_readable_next_to_the_whole_history(comparison: Comparison) -> None:
    figure = comparison.plot()
    by_name = {ax.get_title(): ax for ax in figure.axes}
    for replay in comparison.replays:
        ax = by_name[replay.name]
        peak_history = max(c.history_tokens for c in replay.calls)
        if replay.budget is None:
            assert len(ax.lines) == 1  # `full`: its own scale, no budget line
            continue
        dotted = [line for line in ax.lines if line.get_linestyle() == ":"]
        assert [line.get_ydata()[0] for line in dotted] == [replay.budget]
        # the panel is scaled to the budget, not to the whole history (which is clipped)
        low, high = ax.get_ylim()
        assert low == 0 and replay.budget < high < 1.5 * replay.budget < peak_history


def test_summary_events_are_marked(comparison: Comparison) -> None:
    figure = comparison.plot()
    ax = next(a for a in figure.axes if a.get_title() == "summary")
    folds = [c.call for c in comparison.replays[3].calls if c.folded]
    assert folds
    scatters = [c for c in ax.collections if isinstance(c, PathCollection)]
    offsets: list[Any] = [c.get_offsets() for c in scatters]
    marked = [int(x) for points in offsets for x, _ in points]
    assert sorted(marked) == folds


def test_a_baseline_that_dwarfs_the_rest_is_clipped_and_labelled(comparison: Comparison) -> None:
    figure = comparison.plot()
    cost = next(ax for ax in figure.axes if ax.get_title().startswith("Cost"))
    full = comparison.replays[0].totals()["cost"]
    others = max(r.totals()["cost"] for r in comparison.replays[1:])
    assert full > 3 * others
    assert cost.get_xlim()[1] < full
    assert any(t.get_text().startswith(f"${full:,.2f}") for t in cost.texts)


def test_the_figure_is_written_as_png_at_path(comparison: Comparison, tmp_path: Path) -> None:
    path = tmp_path / "plot.png"
    figure = plot_replays(comparison.replays, path, model="openai:gpt-4o-mini", title="t")
    assert path.read_bytes().startswith(b"\x89PNG\r\n\x1a\n")
    assert figure.get_suptitle().startswith("t\n")
