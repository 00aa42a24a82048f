"""Bad input is refused where it enters, naming what was wrong: every strategy's ``max_tokens``,
a token counter's answers, and ``MemoryState`` text or dicts nested too deeply to be a state."""

from __future__ import annotations

import math
from typing import Any

import pytest
from langchain_core.messages import BaseMessage, HumanMessage

from langmem_ext import (
    Compacting,
    InvalidStateError,
    SlidingWindow,
    SummaryBuffer,
    TieredSummary,
    TokenBudget,
    ToolDigest,
)
from langmem_ext.core.state import MemoryState
from langmem_ext.core.tokens import checked_count
from langmem_ext.counting.chat_model import ChatModelCounter
from langmem_ext.counting.resolve import CallableCounter
from langmem_ext.testing import FakeSummaryModel

# --- max_tokens --------------------------------------------------------------------------------


def _build(name: str, max_tokens: Any) -> object:
    summarizer = FakeSummaryModel()
    builders = {
        "TokenBudget": lambda: TokenBudget(max_tokens),
        "ToolDigest": lambda: ToolDigest(max_tokens),
        "SummaryBuffer": lambda: SummaryBuffer(max_tokens, summarizer=summarizer),
        "Compacting": lambda: Compacting(max_tokens, summarizer=summarizer),
        "TieredSummary": lambda: TieredSummary(max_tokens, summarizer=summarizer),
        "SlidingWindow": lambda: SlidingWindow(4, max_tokens=max_tokens),
    }
    return builders[name]()


STRATEGIES = ["TokenBudget", "ToolDigest", "SummaryBuffer", "Compacting", "TieredSummary"]


@pytest.mark.parametrize("name", STRATEGIES)
@pytest.mark.parametrize("bad", [None, 0, -5, True, 1.5, "600"])
def test_every_strategy_refuses_a_bad_max_tokens_with_one_message(name: str, bad: Any) -> None:
    with pytest.raises(ValueError, match=rf"max_tokens must be an integer >= 1, got {bad!r}"):
        _build(name, bad)


@pytest.mark.parametrize("bad", [0, -5, True, 1.5, "600"])
def test_sliding_window_refuses_a_bad_max_tokens_with_the_same_message(bad: Any) -> None:
    with pytest.raises(ValueError, match=rf"max_tokens must be an integer >= 1, got {bad!r}"):
        _build("SlidingWindow", bad)


def test_sliding_window_refuses_to_run_without_any_limit() -> None:
    with pytest.raises(ValueError, match=r"max_messages.*max_tokens.*got max_messages=None"):
        SlidingWindow(None)  # type: ignore[arg-type]
    # either limit alone is a window
    assert SlidingWindow(None, max_tokens=500).config.max_tokens == 500  # type: ignore[arg-type]
    assert SlidingWindow(6).config.max_messages == 6


# --- token counters ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("answer", "error", "shown"),
    [
        (math.nan, ValueError, "nan"),
        (math.inf, ValueError, "inf"),
        (-math.inf, ValueError, "-inf"),
        (None, TypeError, "None"),
        (True, TypeError, "True"),
        ("12", TypeError, "'12'"),
        (-3, ValueError, "-3"),
        (-0.5, ValueError, "-0.5"),
    ],
)
def test_callable_counter_refuses_a_bad_answer_naming_counter_and_value(
    answer: Any, error: type[Exception], shown: str
) -> None:
    def broken(message: BaseMessage) -> Any:
        return answer

    counter = CallableCounter(broken)
    for count in (
        lambda: counter.count_message(HumanMessage("x")),
        lambda: counter.count_text("x"),
    ):
        with pytest.raises(error, match=rf"CallableCounter\('broken'\) counted {shown} tokens"):
            count()


def test_callable_counter_refuses_a_bad_text_fn_answer() -> None:
    counter = CallableCounter(lambda m: 1, text_fn=lambda t: "7")
    with pytest.raises(TypeError, match="counted '7' tokens for a text"):
        counter.count_text("x")


def test_counter_rounds_a_fractional_count_up_and_keeps_integers() -> None:
    assert CallableCounter(lambda m: 2.25).count_message(HumanMessage("x")) == 3
    assert CallableCounter(lambda m: 7).count_message(HumanMessage("x")) == 7
    assert checked_count(4.0, "c", "a text") == 4


class _Model:
    """A duck-typed model whose token counts are whatever the test says."""

    def __init__(self, answer: Any) -> None:
        self.answer = answer

    def get_num_tokens_from_messages(self, messages: list[BaseMessage]) -> Any:
        return self.answer

    def get_num_tokens(self, text: str) -> Any:
        return self.answer


@pytest.mark.parametrize(
    ("answer", "error"),
    [(math.nan, ValueError), (None, TypeError), (True, TypeError), ("12", TypeError)],
)
def test_chat_model_counter_refuses_a_bad_model_answer(answer: Any, error: type[Exception]) -> None:
    counter = ChatModelCounter(_Model(answer))
    with pytest.raises(error, match=r"ChatModelCounter\(_Model\) counted"):
        counter.count_message(HumanMessage("x"))
    with pytest.raises(error, match=r"get_num_tokens"):
        counter.count_text("x")


def test_strategy_with_a_nan_counter_fails_with_the_counter_error() -> None:
    strategy = TokenBudget(100, counter=lambda m: math.nan)
    with pytest.raises(ValueError, match="counted nan tokens"):
        strategy.apply([HumanMessage("hello")])


# --- MemoryState nesting -----------------------------------------------------------------------


def _nested(depth: int) -> list[Any]:
    value: list[Any] = []
    for _ in range(depth):
        value = [value]
    return value


@pytest.mark.parametrize(
    "text",
    [
        "[" * 100_000 + "]" * 100_000,
        '{"summary": ' + "[" * 5_000 + "]" * 5_000 + "}",
        '{"last_error": ' + '{"a": ' * 5_000 + "1" + "}" * 5_000 + "}",
    ],
    ids=["bare", "in-summary", "in-object"],
)
def test_state_from_json_refuses_deep_nesting_with_a_clear_error(text: str) -> None:
    with pytest.raises(InvalidStateError, match="nested deeper than"):
        MemoryState.from_json(text)


def test_state_from_json_refuses_text_that_is_not_json() -> None:
    with pytest.raises(InvalidStateError, match="invalid MemoryState JSON"):
        MemoryState.from_json("{not json")
    with pytest.raises(InvalidStateError, match="invalid MemoryState JSON"):
        MemoryState.from_json('{"folds": ' + "9" * 5_000 + "}")


def test_state_from_json_reads_brackets_inside_strings() -> None:
    state = MemoryState(
        summary=(("conversation", 'he typed "[[[{{\\" and left'),), last_error="]]}"
    )
    assert MemoryState.from_json(state.to_json()) == state


@pytest.mark.parametrize("field", ["last_error", "summary", "folds", "digests"])
def test_state_from_dict_refuses_deep_nesting_naming_the_field(field: str) -> None:
    with pytest.raises(InvalidStateError, match=field):
        MemoryState.from_dict({field: _nested(5_000)})
