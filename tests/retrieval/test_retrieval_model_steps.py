"""Retrieval with ``RetrievalConfig(model_steps=ModelSteps(...))``: the rewrite widens the search,
the rerank orders what comes back, their cost is reported, and a failing model changes nothing."""

from __future__ import annotations

import asyncio
import itertools
from typing import Any

import pytest
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage
from langgraph.store.memory import InMemoryStore

from langmem_ext import MemoryKey, ModelSteps, Retrieval, SummaryBuffer, TokenBudget
from langmem_ext.retrieval import RetrievalConfig
from langmem_ext.testing import FakeSummaryModel

KEY = MemoryKey("acme", "ann", "chat")
FILLER = "we chatted about the weather and the harbour boats for a while"


def _history(question: str) -> list[BaseMessage]:
    turns = [
        ("My gym locker code is 4471.", "Noted: locker 4471."),
        ("The bike shed combination at work is 9013.", "Noted: shed 9013."),
        *[(f"{FILLER} {i}.", f"Yes, {FILLER} {i}.") for i in range(30)],
    ]
    history: list[BaseMessage] = []
    for i, (human, ai) in enumerate(turns):
        history += [HumanMessage(human, id=f"h{i}"), AIMessage(ai, id=f"a{i}")]
    return [*history, HumanMessage(question, id="q")]


def _answers(*texts: str) -> GenericFakeChatModel:
    return GenericFakeChatModel(messages=(AIMessage(t) for t in itertools.cycle(texts)))


def _retrieval(steps: ModelSteps | None) -> Retrieval:
    return Retrieval(
        TokenBudget(400),
        store=InMemoryStore(),
        key=KEY,
        gate="always",
        config=RetrievalConfig(model_steps=steps, max_retrieved_tokens=120),
    )


def _texts(result: Any) -> str:
    return " ".join(str(m.content) for m in result.messages)


def test_no_model_steps_no_model_call_and_no_cost() -> None:
    result = _retrieval(None).apply(_history("what was the combination for the code at work?"))
    assert result.report.model_step_tokens == 0


def test_a_rewrite_finds_a_turn_the_question_shares_no_word_with() -> None:
    question = "which digits open my cabinet at the fitness place?"
    plain = _retrieval(None).apply(_history(question))
    assert "4471" not in _texts(plain)
    model = _answers("gym locker code\nlocker combination")
    steps = ModelSteps(rewrite=True, model=model)
    rewritten = _retrieval(steps).apply(_history(question))
    assert "4471" in _texts(rewritten)
    assert rewritten.report.model_step_tokens > 0


def test_a_rerank_decides_which_turn_the_small_budget_holds() -> None:
    question = "what code or combination did I give you?"
    first = _retrieval(ModelSteps(rerank=True, model=_answers("1, 2"))).apply(_history(question))
    second = _retrieval(ModelSteps(rerank=True, model=_answers("2, 1"))).apply(_history(question))
    assert first.report.retrieved and second.report.retrieved
    assert first.report.retrieved[0] != second.report.retrieved[0]
    assert second.report.model_step_tokens > 0


class _Down:
    calls = 0

    def __call__(self, messages: list[BaseMessage]) -> str:
        _Down.calls += 1
        raise RuntimeError("provider down")


def test_a_failing_model_gives_the_view_without_model_steps() -> None:
    question = "what code or combination did I give you?"
    plain = _retrieval(None).apply(_history(question))
    down = _Down()
    failed = _retrieval(ModelSteps(rewrite=True, rerank=True, model=down)).apply(_history(question))
    assert _Down.calls == 2  # both steps tried, neither broke the turn
    assert [m.content for m in failed.messages] == [m.content for m in plain.messages]
    assert failed.report.model_step_tokens == 0


def test_aapply_runs_the_steps_too() -> None:
    question = "which digits open my cabinet at the fitness place?"
    steps = ModelSteps(rewrite=True, model=_answers("gym locker code"))
    result = asyncio.run(_retrieval(steps).aapply(_history(question)))
    assert "4471" in _texts(result) and result.report.model_step_tokens > 0


def test_the_model_defaults_to_the_inner_summarizer_and_is_required() -> None:
    inner = SummaryBuffer(2_000, summarizer=FakeSummaryModel())
    Retrieval(
        inner,
        store=InMemoryStore(),
        key=KEY,
        config=RetrievalConfig(model_steps=ModelSteps(rerank=True)),
    )
    with pytest.raises(ValueError, match="model_steps needs a model"):
        _retrieval(ModelSteps(rerank=True))
    with pytest.raises(TypeError, match="model_steps must be a ModelSteps"):
        RetrievalConfig(model_steps={"rerank": True})  # type: ignore[arg-type]
