"""The conformance kit passes for every strategy at every budget where the newest turn fits.

:func:`~langmem_ext.testing.check_strategy` (budget, valid view, nothing lost, nothing hidden
while healthy, sync == async, state round-trip) runs for each of the six strategies, and for
Retrieval around one of them, from the smallest budget at which the newest turn of its
conversations fits (:func:`~langmem_ext.testing.smallest_budget`) up to 32k tokens. Small budgets
are where folding, digesting and clipping all happen on almost every call; large ones are where
they never happen. The budgets from 4k up are marked slow (they still run in CI).
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
from langgraph.store.memory import InMemoryStore

from langmem_ext import (
    Compacting,
    MemoryKey,
    Retrieval,
    SlidingWindow,
    SummaryBuffer,
    TieredSummary,
    TokenBudget,
    ToolDigest,
)
from langmem_ext.errors import ContextOverflowError
from langmem_ext.strategies.engine import Strategy
from langmem_ext.testing import FakeSummaryModel, check_strategy, smallest_budget

SEEDS = 2
MESSAGES = 40
SMALLEST = smallest_budget(seeds=SEEDS, messages=MESSAGES)
KEY = MemoryKey("acme", "ann", "chat")

STRATEGIES: dict[str, Callable[[int], Strategy]] = {
    "TokenBudget": lambda b: TokenBudget(b),
    "SlidingWindow": lambda b: SlidingWindow(20, max_tokens=b),
    "ToolDigest": lambda b: ToolDigest(b),
    "SummaryBuffer": lambda b: SummaryBuffer(b, summarizer=FakeSummaryModel()),
    "Compacting": lambda b: Compacting(b, summarizer=FakeSummaryModel()),
    "TieredSummary": lambda b: TieredSummary(b, summarizer=FakeSummaryModel()),
    "Retrieval(SummaryBuffer)": lambda b: Retrieval(
        SummaryBuffer(b, summarizer=FakeSummaryModel()),
        store=InMemoryStore(),
        ranking="bm25",
        key=KEY,
    ),
}

SMALL = [SMALLEST, *(b for b in (300, 600, 1_000, 2_000) if b > SMALLEST)]
#: budget -> messages per conversation: enough for folds and digests at 4k and 8k; at 16k and
#: 32k a short conversation checks the calls where nothing needs to be done
LARGE = {4_000: 100, 8_000: 140, 16_000: 60, 32_000: 40}


def check(name: str, budget: int, messages: int = MESSAGES) -> None:
    make = STRATEGIES[name]
    check_strategy(lambda: make(budget), seeds=SEEDS, messages=messages)


def test_smallest_budget_is_where_the_newest_turn_starts_to_fit() -> None:
    assert 100 < SMALLEST < 2_000
    with pytest.raises(ContextOverflowError):  # one call's newest turn does not fit
        check_strategy(TokenBudget(SMALLEST - 1), seeds=SEEDS, messages=MESSAGES)
    check_strategy(TokenBudget(SMALLEST), seeds=SEEDS, messages=MESSAGES)


@pytest.mark.parametrize("budget", SMALL)
@pytest.mark.parametrize("name", list(STRATEGIES))
def test_check_strategy_passes_at_small_budgets(name: str, budget: int) -> None:
    check(name, budget)


@pytest.mark.slow
@pytest.mark.parametrize("budget", list(LARGE))
@pytest.mark.parametrize("name", list(STRATEGIES))
def test_check_strategy_passes_at_large_budgets(name: str, budget: int) -> None:
    check(name, budget, LARGE[budget])


@pytest.mark.parametrize("budget", [300, 600])
def test_summary_buffer_folds_what_it_cannot_show_instead_of_hiding_it(budget: int) -> None:
    """With the default ``min_messages=2``, the newest two messages and the summary may not fit
    together: the fold then goes down to the newest human turn, so no message is left neither
    folded nor shown while the summarizer is healthy (the kit's default conversations)."""
    check_strategy(SummaryBuffer(budget, summarizer=FakeSummaryModel()))
