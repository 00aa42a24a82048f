"""Replays of one transcript side by side: the :class:`Comparison` that
:func:`~langmem_ext.replay.compare` returns, as a table, CSV, JSON or plots."""

from __future__ import annotations

import csv
import io
import json
import os
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import IO, Any

from langmem_ext.replay.plots import plot_replays
from langmem_ext.replay.results import CallRecord, Replay

__all__ = ["COLUMNS", "FACT_COLUMNS", "FACT_FIELDS", "Comparison"]

#: the columns of :meth:`Comparison.table`: (key of ``Replay.totals()``, header, format)
COLUMNS: tuple[tuple[str, str, Callable[[Any], str]], ...] = (
    ("strategy", "strategy", str),
    ("calls", "calls", lambda v: f"{v:,}"),
    ("mean_view_tokens", "mean view", lambda v: f"{v:,.0f}"),
    ("max_view_tokens", "max view", lambda v: f"{v:,}"),
    ("input_vs_full", "input ÷ full", lambda v: f"{v:.2f}x"),
    ("prefix_kept", "prefix kept", lambda v: f"{v:.1%}"),
    ("cached_share", "cached input", lambda v: f"{v:.1%}"),
    ("summary_events", "summaries", lambda v: f"{v:,}"),
    ("summarizer_input_tokens", "summarizer read", lambda v: f"{v:,}"),
    ("cost", "cost", lambda v: f"${v:,.4f}"),
    ("cost_cached", "cost, cached", lambda v: f"${v:,.4f}"),
    ("invalid_views", "invalid", lambda v: f"{v:,}"),
    ("over_budget", "over budget", lambda v: f"{v:,}"),
)

#: the columns :meth:`Comparison.table` adds when facts were followed
FACT_COLUMNS: tuple[tuple[str, str, Callable[[Any], str]], ...] = (
    ("facts_kept_at_end", "facts kept at end", str),  # "k / n", made in rows()
    ("facts_later_share", "mean share of later calls", lambda v: "-" if v is None else f"{v:.1%}"),
    ("summarizer_cost", "summarizer $", lambda v: f"${v:,.4f}"),
)

#: the columns of :meth:`Comparison.facts_to_csv`
FACT_FIELDS = (
    "strategy",
    "fact",
    "said_at_message",
    "said_at_call",
    "kept_at_end",
    "later_calls",
    "later_calls_with_it",
    "later_share",
)


@dataclass
class Comparison:
    """Replays of one transcript side by side (see :func:`compare`)."""

    replays: list[Replay]
    model: str
    source: str = ""
    transcript_messages: int = 0

    def rows(self) -> list[dict[str, Any]]:
        """``Replay.totals()`` of each replay, in order."""
        return [r.totals() for r in self.replays]

    @property
    def follows_facts(self) -> bool:
        """Whether the replays followed facts (see :func:`~langmem_ext.replay.replay`)."""
        return any(r.facts is not None for r in self.replays)

    def table(self, *, markdown: bool = True) -> str:
        """The totals as a markdown table (or aligned plain text), one row per strategy, with
        a line under it per replay that stopped early. When facts were followed, three more
        columns: facts in the input at the final call (``k / n``), the mean share of the calls
        after a fact was said whose input held it, and the summarizer's cost."""
        columns = COLUMNS + (FACT_COLUMNS if self.follows_facts else ())
        header = [h for _, h, _ in columns]
        rows = self.rows()
        for row in rows:
            if row["facts"] is not None:
                row["facts_kept_at_end"] = f"{row['facts_kept_at_end']:,} / {row['facts']:,}"
            else:
                row["facts_kept_at_end"] = "-"
        body = [[fmt(row[key]) for key, _, fmt in columns] for row in rows]
        if markdown:
            lines = ["| " + " | ".join(header) + " |"]
            lines.append("|" + "|".join(["---"] + ["---:"] * (len(header) - 1)) + "|")
            lines += ["| " + " | ".join(r) + " |" for r in body]
        else:
            widths = [max(len(h), *(len(r[i]) for r in body)) for i, h in enumerate(header)]
            lines = [
                "  ".join(
                    c.ljust(w) if i == 0 else c.rjust(w)
                    for i, (c, w) in enumerate(zip(header, widths, strict=True))
                )
            ]
            lines += [
                "  ".join(
                    c.ljust(w) if i == 0 else c.rjust(w)
                    for i, (c, w) in enumerate(zip(r, widths, strict=True))
                )
                for r in body
            ]
        for r in self.replays:
            if r.error:
                lines.append(f"{r.name} stopped at {r.error}")
        return "\n".join(lines)

    def to_csv(self, target: str | os.PathLike[str] | IO[str] | None = None) -> str:
        """One row per strategy and model call (every :class:`CallRecord` field); written to
        ``target`` (a path or an open text file) when given, and returned."""
        buffer = io.StringIO()
        names = ["strategy", *CallRecord.__slots__]
        writer = csv.DictWriter(buffer, fieldnames=names, lineterminator="\n")
        writer.writeheader()
        for r in self.replays:
            for c in r.calls:
                writer.writerow({"strategy": r.name, **asdict(c)})
        return _write(buffer.getvalue(), target)

    def facts_to_csv(self, target: str | os.PathLike[str] | IO[str] | None = None) -> str:
        """One row per strategy and followed fact (:data:`FACT_FIELDS`); written to
        ``target`` when given, and returned (only the header when no facts were followed)."""
        buffer = io.StringIO()
        writer = csv.DictWriter(buffer, fieldnames=FACT_FIELDS, lineterminator="\n")
        writer.writeheader()
        for r in self.replays:
            for f in r.facts or ():
                writer.writerow({"strategy": r.name, **f.to_dict()})
        return _write(buffer.getvalue(), target)

    def to_json(self, target: str | os.PathLike[str] | IO[str] | None = None) -> str:
        """Everything: the transcript, the model, and per strategy its totals, calls and
        followed facts (``null`` when none were followed)."""
        data = {
            "source": self.source,
            "transcript_messages": self.transcript_messages,
            "model": self.model,
            "strategies": [
                {
                    "name": r.name,
                    "description": r.description,
                    "totals": r.totals(),
                    "cache_expiry": r.cache_expiry,
                    "facts": None if r.facts is None else [f.to_dict() for f in r.facts],
                    "calls": [asdict(c) for c in r.calls],
                }
                for r in self.replays
            ],
        }
        return _write(json.dumps(data, indent=1) + "\n", target)

    def plot(self, path: str | os.PathLike[str] | None = None, *, title: str | None = None) -> Any:
        """Small multiples: one panel per replay with the tokens the model sees per call (its
        budget dotted, the whole history in grey behind it, summary events marked), and a row of
        bars with each replay's cost with and without prompt caching, its prefix kept and its
        prompt-cache share. Saved as PNG at ``path`` when given; returns the matplotlib
        figure. Needs matplotlib (``pip install 'langmem-ext[experiment]'``)."""
        if title is None and self.source:
            title = f"{self.source}: {self.transcript_messages:,} messages"
        return plot_replays(self.replays, path, model=self.model, title=title)


def _write(text: str, target: str | os.PathLike[str] | IO[str] | None) -> str:
    if target is None:
        return text
    if isinstance(target, (str, os.PathLike)):
        with open(target, "w", encoding="utf-8", newline="") as handle:
            handle.write(text)
    else:
        target.write(text)
    return text
