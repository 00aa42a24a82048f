"""strategies.presets / core.fold_turn: each fold frees a fixed share of the budget.

A fold goes down to the strategy's target (half the budget by default). ``min_messages`` is kept
verbatim while it fits that target; when the newest ``min_messages`` are larger (a small budget,
long messages) the turns before the newest one are folded instead of the fold freeing almost
nothing and a summarizer call coming on nearly every turn. The newest human turn is never folded.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

import pytest
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage

from langmem_ext import (
    Compacting,
    SummaryBuffer,
    TieredSummary,
)
from langmem_ext.testing import FakeSummaryModel, random_words

Make = Callable[[int, int], Any]

STRATEGIES: dict[str, Make] = {
    "SummaryBuffer": lambda budget, keep: SummaryBuffer(
        budget, summarizer=FakeSummaryModel(), min_messages=keep
    ),
    "Compacting": lambda budget, keep: Compacting(
        budget, summarizer=FakeSummaryModel(), min_messages=keep
    ),
    "TieredSummary": lambda budget, keep: TieredSummary(
        budget, summarizer=FakeSummaryModel(), min_messages=keep
    ),
}


def _chat(turns: int, words: tuple[int, int], seed: int = 0) -> list[BaseMessage]:
    rng = random.Random(seed)
    history: list[BaseMessage] = [SystemMessage("You are a helpful assistant.", id="sys")]
    for i in range(turns):
        history.append(HumanMessage(f"q{i}: " + random_words(rng, *words), id=f"h{i}"))
        history.append(AIMessage(f"a{i}: " + random_words(rng, *words), id=f"a{i}"))
    return history


def _replay(strategy: Any, history: list[BaseMessage]) -> list[Any]:
    """One apply per human turn (the history up to and with each human message)."""
    results, state = [], None
    for end in range(2, len(history) + 1, 2):
        result = strategy.apply(history[:end], state)
        results.append(result)
        state = result.state
    return results


@pytest.mark.filterwarnings("ignore::langmem_ext.FoldRateWarning")
@pytest.mark.parametrize("name", list(STRATEGIES))
def test_long_messages_at_a_small_budget_fold_on_fewer_than_half_the_calls(name: str) -> None:
    # ~230-token messages: a turn is ~460 tokens, a quarter of a 2,000-token budget. Holding 5
    # recent messages (~1,150 tokens) through every fold left Compacting ~350 tokens to fill
    # and folding on 70% of the calls (TieredSummary on 85%)
    strategy = STRATEGIES[name](2_000, 5)
    results = _replay(strategy, _chat(120, (60, 300)))
    folds = sum(1 for r in results if r.report.folded)
    assert 0 < folds < 0.45 * len(results), (folds, len(results))
    assert all(r.report.tokens_after <= 2_000 for r in results)


@pytest.mark.filterwarnings("ignore::langmem_ext.FoldRateWarning")
@pytest.mark.parametrize("name", list(STRATEGIES))
def test_min_messages_that_do_not_fit_the_target_are_folded_but_not_the_newest_turn(
    name: str,
) -> None:
    strategy = STRATEGIES[name](2_000, 5)
    fewer = 0
    for result in _replay(strategy, _chat(60, (60, 300), seed=1)):
        if not result.report.folded:
            continue
        # the newest human turn (here: the request) is always verbatim at the end of the view
        assert isinstance(result.messages[-1], HumanMessage)
        assert result.messages[-1].id == f"h{result.state.seen // 2 - 1}"
        shown = [m for m in result.messages if not isinstance(m, SystemMessage)]
        fewer += len(shown) < 5
    # the 5 newest messages (~1,150 tokens) did not fit the target: folds went past them
    assert fewer > 0


@pytest.mark.parametrize("name", list(STRATEGIES))
def test_min_messages_that_fit_the_target_stay_verbatim_after_a_fold(name: str) -> None:
    # short messages (~10 tokens): 5 of them fit any of the targets at 2,000 tokens
    strategy = STRATEGIES[name](2_000, 5)
    results = _replay(strategy, _chat(400, (5, 12), seed=2))
    folded = [r for r in results if r.report.folded]
    assert folded
    for result in folded:
        shown = [m for m in result.messages if not isinstance(m, SystemMessage)]
        assert len(shown) >= 5
