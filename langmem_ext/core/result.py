"""What every strategy returns: the view, the next state, and a report of what happened."""

from __future__ import annotations

from dataclasses import dataclass

from langchain_core.messages import BaseMessage

from langmem_ext.core.state import MemoryState

__all__ = ["MemoryReport", "MemoryResult"]


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


@dataclass(frozen=True, slots=True)
class MemoryResult:
    """``messages`` is what the model should see; ``state`` goes into the next call."""

    messages: list[BaseMessage]
    state: MemoryState
    report: MemoryReport
