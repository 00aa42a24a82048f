"""Pseudo-relevance feedback on the dense side (``RetrievalConfig(feedback=True)``, opt-in): the
query's vector plus a share of its best results' first rows is searched again, as a ranking of
its own. It finds turns worded like the best results even when they are worded unlike the
question, and it never decides alone whether the memory is searched: the gate and ``min_score``
read the query's own similarities.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from langchain_core.embeddings import Embeddings
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage
from langgraph.store.memory import InMemoryStore
from retrieval_views import context

from langmem_ext import MemoryKey, Retrieval, TokenBudget
from langmem_ext.retrieval import RetrievalConfig
from langmem_ext.retrieval.search import FEEDBACK_TURNS, feedback_search
from langmem_ext.retrieval.vectors import VectorIndex

KEY = MemoryKey("acme", "ann", "chat")
DIMS = 6


def unit(*values: float) -> list[float]:
    norm = float(np.linalg.norm(values))
    return [value / norm for value in values]


def test_first_rows_are_each_keys_first_vector_in_the_order_asked() -> None:
    index = VectorIndex()
    index.add("a", [[2.0, 0.0, 0.0], [0.0, 1.0, 0.0]])
    index.add("b", [[0.0, 0.0, 3.0]])
    rows = index.first_rows(["b", "missing", "a"])
    assert rows.shape == (2, 3)
    np.testing.assert_allclose(rows, [[0.0, 0.0, 1.0], [1.0, 0.0, 0.0]], atol=1e-6)
    assert index.first_rows(["missing"]).shape[0] == 0


def test_feedback_search_finds_what_the_best_results_resemble() -> None:
    index = VectorIndex()
    query = unit(1, 0, 0)
    for n in range(FEEDBACK_TURNS):  # the best results: close to the query, and to "kin"
        index.add(f"hit{n}", [unit(0.8, 0.6, 0.01 * n)])
    index.add("kin", [unit(0.35, 0.94, 0)])  # worded like the hits, unlike the question
    index.add("other", [unit(0.5, 0, 0.87)])  # closer to the question, unlike the hits
    plain = [key for key, _ in index.search(query, 10)]
    assert plain.index("other") < plain.index("kin")
    near = index.search(query, 10)
    again = [key for key, _ in feedback_search(index, query, near, 10)]
    assert again.index("kin") < again.index("other")
    assert set(again[:FEEDBACK_TURNS]) == {f"hit{n}" for n in range(FEEDBACK_TURNS)}


def test_feedback_search_without_results_searches_nothing() -> None:
    index = VectorIndex()
    index.add("a", [unit(1, 0, 0)])
    assert feedback_search(index, unit(1, 0, 0), [], 5) == []
    assert feedback_search(index, [0.0, 0.0, 0.0], index.search(unit(1, 0, 0), 5), 5) == []


class Keywords(Embeddings):
    """Vectors by keyword: "alpha" turns near axis 0, the small-talk line between axis 0 and
    axis 4 (a similarity of 0.55 with them: under the gate's strong match), filler on axis 3."""

    def vector(self, text: str) -> list[float]:
        jitter = (sum(map(ord, text)) % 97) / 9_700.0
        if "alpha" in text:
            return unit(1, 0, jitter, 0, 0, 0)
        if "thanks" in text:
            return unit(0.55, 0, 0, 0, 0.835, 0)
        return unit(0, 0, jitter, 1, 0, 0.1)

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        return [self.vector(t) for t in texts]

    def embed_query(self, text: str) -> list[float]:
        return self.vector(text)


def history() -> list[BaseMessage]:
    messages: list[BaseMessage] = []
    for i in range(30):
        words = f"alpha project note number {i}" if i % 7 == 0 else f"weather chat {i}"
        filler = " and the sea and the boats" * 6
        messages += [
            HumanMessage(f"{words}{filler}", id=f"h{i}"),
            AIMessage(f"ok {i}{filler}", id=f"a{i}"),
        ]
    return messages


def retrieval(feedback: bool) -> Retrieval:
    store = InMemoryStore()
    return Retrieval(
        TokenBudget(600),
        store=store,
        key=KEY,
        embeddings=Keywords(),
        ranking="dense",
        config=RetrievalConfig(feedback=feedback),
    )


@pytest.mark.parametrize("feedback", [True, False])
def test_feedback_never_opens_the_gate_for_small_talk(feedback: bool) -> None:
    # the expanded vector is far closer to the "alpha" turns (0.8) than the line itself
    # (0.55): were its similarities read as the query's, the gate would search
    strategy = retrieval(feedback)
    messages = history()
    state = strategy.apply(messages).state
    result: Any = strategy.apply([*messages, HumanMessage("thanks a lot friend", id="q")], state)
    assert context(result) == ""
    asked = strategy.apply(
        [*messages, HumanMessage("what did I note about the alpha project?", id="q2")], state
    )
    assert "alpha project note" in context(asked)


def test_feedback_must_be_a_bool() -> None:
    with pytest.raises(TypeError, match="feedback must be a bool"):
        RetrievalConfig(feedback="yes")  # type: ignore[arg-type]


def test_feedback_never_takes_the_first_place_from_the_query_s_own_best() -> None:
    """At a context budget of one turn, the turn the query itself ranks first comes back with
    or without feedback: the feedback ranking (which favours what the best results resemble)
    decides the places after it."""
    messages = history()
    question = "what did I note about the alpha project number 14?"
    firsts = []
    for feedback in (False, True):
        strategy = Retrieval(
            TokenBudget(600),
            store=InMemoryStore(),
            key=KEY,
            embeddings=Keywords(),
            k=1,
            config=RetrievalConfig(feedback=feedback),
        )
        state = strategy.apply(messages).state
        result = strategy.apply([*messages, HumanMessage(question, id="q")], state)
        firsts.append(result.report.retrieved)
    assert firsts[0] == firsts[1] and len(firsts[0]) == 1


def test_feedback_is_on_by_default() -> None:
    assert RetrievalConfig().feedback is True
