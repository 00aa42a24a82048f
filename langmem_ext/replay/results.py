"""What a replay records: one :class:`CallRecord` per model call, and the :class:`Replay` of
one strategy over one transcript with its totals. Plain data, shared by the replay loop
(``engine``), the plots and the comparison table."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from langmem_ext.replay.facts import FactRecord

__all__ = ["CallRecord", "Replay"]


@dataclass(frozen=True, slots=True)
class CallRecord:
    """One model call of a replay. Tokens are by the replay's counter."""

    #: 1-based number of the call
    call: int
    #: index in the transcript of the AI message this call produced
    position: int
    history_messages: int
    #: what sending the whole history would have cost
    history_tokens: int
    view_messages: int
    view_tokens: int
    #: tokens of the view read from the provider's prompt cache: the prefix it repeats of the
    #: last request that wrote or read the cache, at the provider's rules (minimum size,
    #: steps, expiry); 0 for a request under the minimum
    cached_tokens: int
    #: tokens of the answer (the transcript's AI message)
    output_tokens: int
    #: the previous view is a prefix of this one
    prefix_kept: bool
    #: messages folded into the summary at this call (a summary event when > 0)
    folded: int
    summarizer_calls: int
    summarizer_input_tokens: int
    summarizer_output_tokens: int
    summary_tokens: int
    digested: int
    retrieved_tokens: int
    #: history messages not in the view (trimmed, folded or digested)
    dropped: int
    #: no error-severity finding of ``validate`` on the view (what a provider would reject)
    valid: bool
    newest_human_shown: bool
    over_budget: bool
    #: dollars of the call (and of its summarizer calls) with every input token billed in full
    cost: float
    #: the same with the repeated prefix billed as prompt-cache reads
    cost_cached: float
    #: time in the strategy, without the summarizer's
    seconds: float
    #: tokens of the view written to the prompt cache (billed at ``cache_write`` where the
    #: provider charges one); 0 for a request under the provider's minimum
    cache_write_tokens: int = 0
    #: the prefix was in the cache, but longer ago than ``cache_ttl`` (from timestamps)
    cache_expired: bool = False
    #: dollars of this call's summarizer calls (part of ``cost`` and ``cost_cached``)
    summarizer_cost: float = 0.0
    #: how many of the followed facts the view holds
    facts_in_view: int = 0


@dataclass
class Replay:
    """The calls of one strategy over one transcript (see :func:`replay`)."""

    name: str
    model: str
    calls: list[CallRecord] = field(default_factory=list)
    #: the most a view may cost, from the strategy's reports (None: no token limit)
    budget: int | None = None
    #: the error the strategy raised, if it gave up at a call (the replay stops there)
    error: str | None = None
    description: str = ""
    #: what became of each followed fact (None: no facts were followed)
    facts: list[FactRecord] | None = None
    #: whether prompt-cache expiry was modelled, and how
    cache_expiry: str = ""

    def fact_totals(self) -> dict[str, Any]:
        """``facts`` (n), ``facts_kept_at_end`` (k) and ``facts_later_share`` (the mean, over
        the facts with later calls, of the share of those calls whose input held the fact);
        all None when no facts were followed."""
        if self.facts is None:
            return {"facts": None, "facts_kept_at_end": None, "facts_later_share": None}
        shares = [s for f in self.facts if (s := f.later_share) is not None]
        return {
            "facts": len(self.facts),
            "facts_kept_at_end": sum(f.kept_at_end for f in self.facts),
            "facts_later_share": sum(shares) / len(shares) if shares else None,
        }

    def totals(self) -> dict[str, Any]:
        """The figures of the whole replay, as in the comparison table."""
        calls = self.calls
        n = len(calls)
        history = sum(c.history_tokens for c in calls)
        view = sum(c.view_tokens for c in calls)
        cached = sum(c.cached_tokens for c in calls)
        return {
            "strategy": self.name,
            "calls": n,
            "mean_view_tokens": view / n if n else 0.0,
            "max_view_tokens": max((c.view_tokens for c in calls), default=0),
            "budget": self.budget,
            "input_tokens": view,
            "input_vs_full": view / history if history else 0.0,
            "cached_share": cached / view if view else 0.0,
            "prefix_kept": sum(c.prefix_kept for c in calls[1:]) / (n - 1) if n > 1 else 0.0,
            "summary_events": sum(1 for c in calls if c.folded),
            "summarizer_calls": sum(c.summarizer_calls for c in calls),
            "summarizer_input_tokens": sum(c.summarizer_input_tokens for c in calls),
            "summarizer_cost": sum(c.summarizer_cost for c in calls),
            "output_tokens": sum(c.output_tokens for c in calls),
            "cost": sum(c.cost for c in calls),
            "cost_cached": sum(c.cost_cached for c in calls),
            "invalid_views": sum(not c.valid for c in calls),
            "newest_human_missing": sum(not c.newest_human_shown for c in calls),
            "over_budget": sum(c.over_budget for c in calls),
            "ms_per_call": 1000 * sum(c.seconds for c in calls) / n if n else 0.0,
            "cache_writes": sum(c.cache_write_tokens for c in calls),
            "cache_expired": sum(c.cache_expired for c in calls),
            **self.fact_totals(),
            "error": self.error,
        }
