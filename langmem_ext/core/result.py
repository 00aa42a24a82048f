"""What every strategy returns: the view, the next state, and a report of what happened."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any

from langchain_core.messages import BaseMessage

from langmem_ext.core.state import MemoryState

__all__ = ["REPORT_VERSION", "MemoryReport", "MemoryResult"]

#: the format of :meth:`MemoryReport.to_dict`
REPORT_VERSION = 1


@dataclass(frozen=True, slots=True)
class MemoryReport:
    """Figures for one turn. Token figures are by the strategy's counter and include the counter's
    per-request overhead; ``budget`` is the most the view may cost (``max_tokens`` after the
    safety margin and the reserve), ``None`` for a strategy without a token limit."""

    tokens_before: int
    tokens_after: int
    messages_before: int
    messages_after: int
    #: input messages that are not in the view (trimmed, or removed by a repair)
    messages_dropped: int
    budget: int | None = None
    #: ids (or stable keys) of messages whose text was clipped to fit
    clipped: tuple[str, ...] = ()
    #: the view needed a documented repair (orphan dropped, placeholder added, results moved ...)
    repaired: bool = False
    #: the view starts where the previous turn's view started (hysteresis held the cut)
    prefix_kept: bool = False
    #: the newest human turn did not fit contiguously: older parts of it were left out
    gap: bool = False
    #: the history was not an extension of the one the state was computed on
    history_rewritten: bool = False
    #: messages folded into the summary on this turn
    folded: int = 0
    #: messages neither folded nor shown (only while the summarizer is failing)
    not_shown: int = 0
    #: tokens of the running summary as placed in the view
    summary_tokens: int = 0
    #: which high-water mark sent this turn into a fold: ``"tokens"`` or ``"messages"``
    #: (``max_messages=``); None when neither was passed
    trigger: str | None = None
    #: completed tool rounds shown as one digest message each (ToolDigest, TieredSummary); the
    #: messages they stand for count as shown
    digested: int = 0
    #: the summarizer's health after this turn
    health: str = "healthy"
    #: (Retrieval) keys of the evicted turns and knowledge passages placed in the view
    retrieved: tuple[str, ...] = ()
    #: (Retrieval) tokens of the retrieved-context message
    retrieved_tokens: int = 0
    #: (Retrieval) turns written to the index on this turn
    indexed: int = 0
    #: (Retrieval) knowledge sources that failed or timed out, as "name: error"
    source_errors: tuple[str, ...] = ()
    #: (Retrieval with ``model_steps``) tokens the query rewrite and rerank calls cost
    model_step_tokens: int = 0
    #: (Retrieval with ``past_tokens``) messages of the view's oldest turns left out of this
    #: request so that a question about the past got a larger retrieved context (the state
    #: keeps them: the next request shows them again)
    lent: int = 0

    def to_dict(self) -> dict[str, Any]:
        """A plain JSON dict (tuples as lists, plus ``"version"``), what the surfaces write to
        the graph state's ``memory_report`` channel and send to LangChain callbacks.

        Example:
            >>> report = MemoryReport(120, 80, 6, 4, 2, budget=100, clipped=("m1",))
            >>> data = report.to_dict()
            >>> data["tokens_after"], data["clipped"], MemoryReport.from_dict(data) == report
            (80, ['m1'], True)
        """
        data: dict[str, Any] = {"version": REPORT_VERSION}
        for field in fields(self):
            value = getattr(self, field.name)
            data[field.name] = list(value) if isinstance(value, tuple) else value
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> MemoryReport:
        """Read a dict written by :meth:`to_dict`. Fields it lacks take their defaults and keys
        this version does not know are ignored (a report is a record of what happened, not
        state anything depends on); a figure of the wrong type raises ``TypeError``."""
        if not isinstance(data, Mapping):
            raise TypeError(f"a MemoryReport dict must be a mapping, got {type(data).__name__}")
        values: dict[str, Any] = {}
        for field in fields(cls):
            if field.name not in data:
                continue
            value = data[field.name]
            if isinstance(field.default, tuple):
                if not isinstance(value, (list, tuple)) or not all(
                    isinstance(item, str) for item in value
                ):
                    raise TypeError(
                        f"MemoryReport.{field.name} must be a list of str, got {value!r}"
                    )
                value = tuple(value)
            elif not _fits(field.type, value):
                raise TypeError(f"MemoryReport.{field.name} has the wrong type: {value!r}")
            values[field.name] = value
        return cls(**values)


def _fits(annotation: Any, value: Any) -> bool:
    """Whether ``value`` fits a scalar field's annotation (a string, under
    ``from __future__ import annotations``)."""
    text = str(annotation)
    if value is None:
        return "None" in text
    if isinstance(value, bool):
        return text.startswith("bool")
    if isinstance(value, int):
        return text.startswith("int")
    return isinstance(value, str) and text.startswith("str")


@dataclass(frozen=True, slots=True)
class MemoryResult:
    """``messages`` is what the model should see; ``state`` goes into the next call."""

    messages: list[BaseMessage]
    state: MemoryState
    report: MemoryReport
