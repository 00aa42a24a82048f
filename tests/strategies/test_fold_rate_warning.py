"""strategies.engine: a strategy that folds on more than one call in three warns, once."""

from __future__ import annotations

import itertools
import warnings

import pytest
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage

from langmem_ext import ApproximateCounter, FoldRateWarning, SummaryBuffer
from langmem_ext.strategies.engine import FOLD_RATE_WINDOW


def _summarizer() -> GenericFakeChatModel:
    answers = (AIMessage(f"Summary {i}: orders, shipments and refunds.") for i in itertools.count())
    return GenericFakeChatModel(messages=answers)


def _chat(turns: int, words: int) -> list[BaseMessage]:
    history: list[BaseMessage] = []
    for i in range(turns):
        history.append(HumanMessage(f"question {i} " + "about the orders " * words, id=f"h{i}"))
        history.append(AIMessage(f"answer {i} " + "the order shipped " * words, id=f"a{i}"))
    return history


def _run(strategy: SummaryBuffer, history: list[BaseMessage]) -> list[warnings.WarningMessage]:
    state = None
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for end in range(1, len(history) + 1, 2):
            state = strategy.apply(history[:end], state).state
    return [w for w in caught if issubclass(w.category, FoldRateWarning)]


def test_a_budget_that_folds_on_most_calls_warns_once_with_the_count() -> None:
    # a turn (~230 tokens) is about half of what a fold frees (600 down to 300, the summary
    # taking 150 of that): a fold every other call
    strategy = SummaryBuffer(600, summarizer=_summarizer(), counter=ApproximateCounter())
    caught = _run(strategy, _chat(80, 25))
    assert len(caught) == 1
    message = str(caught[0].message)
    assert message.startswith("SummaryBuffer folded on ")
    assert f"of its last {FOLD_RATE_WINDOW} calls" in message
    folds = int(message.split("folded on ")[1].split(" ")[0])
    assert folds * 3 > FOLD_RATE_WINDOW
    assert caught[0].filename == __file__  # points at the caller's apply


def test_a_budget_with_room_between_folds_never_warns() -> None:
    strategy = SummaryBuffer(4_000, summarizer=_summarizer(), counter=ApproximateCounter())
    history = _chat(80, 25)
    assert not _run(strategy, history)
    assert strategy.apply(history).state.folds > 0  # it does fold, only rarely


def test_the_view_never_counts_towards_the_fold_rate() -> None:
    strategy = SummaryBuffer(800, summarizer=_summarizer(), counter=ApproximateCounter())
    history = _chat(80, 25)
    with warnings.catch_warnings():
        warnings.simplefilter("error", FoldRateWarning)
        for end in range(1, len(history) + 1, 2):
            strategy.view(history[:end])


@pytest.mark.filterwarnings("error::langmem_ext.FoldRateWarning")
def test_fewer_calls_than_the_window_never_warn() -> None:
    strategy = SummaryBuffer(800, summarizer=_summarizer(), counter=ApproximateCounter())
    history = _chat(FOLD_RATE_WINDOW - 1, 40)
    state = None
    for end in range(1, len(history) + 1, 2):
        state = strategy.apply(history[:end], state).state
    assert state is not None and state.folds > 0
