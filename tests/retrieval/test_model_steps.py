"""retrieval.model_steps: the optional rewrite and rerank calls, their parsing, cost and faults."""

from __future__ import annotations

import asyncio
import itertools
import time
from typing import Any

import pytest
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, BaseMessage

from langmem_ext import ApproximateCounter
from langmem_ext.core.steps import arun, run
from langmem_ext.retrieval.model_steps import (
    ModelSteps,
    parse_order,
    parse_queries,
    ready,
    rerank_flow,
    rerank_prompt,
    rewrite_flow,
)

COUNTER = ApproximateCounter()


def _answers(*texts: str | AIMessage) -> GenericFakeChatModel:
    messages = (t if isinstance(t, AIMessage) else AIMessage(t) for t in itertools.cycle(texts))
    return GenericFakeChatModel(messages=messages)


def test_settings_are_checked_with_the_setting_named() -> None:
    with pytest.raises(ValueError, match="candidates must be an integer >= 2"):
        ModelSteps(rerank=True, candidates=1)
    with pytest.raises(ValueError, match="at most 50"):
        ModelSteps(rerank=True, candidates=51)
    with pytest.raises(ValueError, match="timeout must be a finite number of seconds > 0"):
        ModelSteps(rewrite=True, timeout=0)
    with pytest.raises(TypeError, match="rewrite must be True or False"):
        ModelSteps(rewrite="yes")  # type: ignore[arg-type]
    assert not ModelSteps().enabled and ModelSteps(rerank=True).enabled


@pytest.mark.parametrize(
    "text,expected",
    [
        ("1. locker code\n2) gym locker\n- 'locker code'", ["locker code", "gym locker"]),
        ("what is my code?\nWHAT IS MY CODE?", []),  # the question itself, in any case
        ("", []),
        ("!!!\n???\n" + "x" * 500, []),  # no word, or too long to be a query
        ("a\nb\nc\nd\ne", ["a", "b", "c"]),
    ],
)
def test_a_rewrite_answer_gives_clean_distinct_queries(text: str, expected: list[str]) -> None:
    assert parse_queries(text, "What is my code?", 3) == expected


@pytest.mark.parametrize(
    "text,expected",
    [
        ("2, 3, 1", [1, 2, 0]),
        ("[3] is best, then [1]", [2, 0, 1]),
        ("3, 3, 9, 0, 1", [2, 0, 1]),  # repeats and numbers out of range ignored
        ("none of them help", None),
        ("", None),
    ],
)
def test_a_rerank_answer_gives_an_order_or_none(text: str, expected: list[int] | None) -> None:
    assert parse_order(text, 3) == expected


def test_the_rerank_prompt_numbers_the_passages_and_clips_long_ones() -> None:
    system, human = rerank_prompt("where is order 7?", ["short", "y" * 5_000])
    assert "numbers only" in str(system.content)
    assert "[1] short" in str(human.content) and "[2] " + "y" * 600 in str(human.content)
    assert "y" * 601 not in str(human.content)


def test_a_rewrite_runs_one_call_and_reports_its_counted_cost() -> None:
    model = _answers("gym locker number\nlocker combination")
    steps = ModelSteps(rewrite=True)
    queries, tokens = run(
        rewrite_flow(steps, ready(model), COUNTER, "what's my code?", ["I joined a gym"])
    )
    assert queries == ["gym locker number", "locker combination"]
    assert tokens > 20  # the prompt and the answer, counted


def test_the_providers_usage_is_the_cost_when_it_reports_one() -> None:
    answer = AIMessage(
        "2, 1", usage_metadata={"input_tokens": 90, "output_tokens": 4, "total_tokens": 94}
    )
    order, tokens = run(
        rerank_flow(ModelSteps(rerank=True), ready(_answers(answer)), COUNTER, "q", ["a", "b"])
    )
    assert (order, tokens) == ([1, 0], 94)


def test_the_async_driver_gives_the_same_answer() -> None:
    model = _answers("3, 1, 2")
    flow = rerank_flow(ModelSteps(rerank=True), ready(model), COUNTER, "q", ["a", "b", "c"])
    order, tokens = asyncio.run(arun(flow))
    assert order == [2, 0, 1] and tokens > 0


class _Failing:
    def invoke(self, messages: list[BaseMessage], **_: Any) -> AIMessage:
        raise RuntimeError("provider down")


def test_a_failing_model_changes_nothing_and_costs_nothing() -> None:
    failing = ready(lambda messages: _Failing().invoke(messages))
    steps = ModelSteps(rewrite=True, rerank=True)
    assert run(rewrite_flow(steps, failing, COUNTER, "q", [])) == ([], 0)
    assert run(rerank_flow(steps, failing, COUNTER, "q", ["a", "b"])) == (None, 0)


def test_a_hung_model_is_given_up_after_the_timeout() -> None:
    def hung(messages: list[BaseMessage]) -> str:
        time.sleep(3)
        return "1, 2"

    steps = ModelSteps(rerank=True, timeout=0.2)
    started = time.perf_counter()
    assert run(rerank_flow(steps, ready(hung), COUNTER, "q", ["a", "b"])) == (None, 0)
    assert asyncio.run(arun(rerank_flow(steps, ready(hung), COUNTER, "q", ["a", "b"]))) == (
        None,
        0,
    )
    assert time.perf_counter() - started < 2.5  # both given up, neither waited 3 s


def test_one_passage_needs_no_rerank_call() -> None:
    model = _answers("1")
    assert run(rerank_flow(ModelSteps(rerank=True), ready(model), COUNTER, "q", ["a"])) == (None, 0)
