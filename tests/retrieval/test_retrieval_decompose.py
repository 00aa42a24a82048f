"""Retrieval's query decomposition (``decompose``): a question that asks several things is
searched whole and clause by clause, so each clause's evidence comes back, not only the turns
that match the whole question best."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from langchain_core.embeddings import Embeddings
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage
from langgraph.store.memory import InMemoryStore

from langmem_ext import MemoryKey, Retrieval, TokenBudget
from langmem_ext.retrieval import RetrievalConfig
from langmem_ext.retrieval.text import MAX_CLAUSES, clauses


@pytest.mark.parametrize(
    ("question", "expected"),
    [
        ("What do I do for work, and where do I live?", "What do I do for work|where do I live"),
        (
            "what is my locker code and what is my invoice number?",
            "what is my locker code|what is my invoice number",
        ),
        ("Where is the piano; when is the train?", "Where is the piano|when is the train"),
        ("Tell me my visa number, who is my teacher?", "Tell me my visa number|who is my teacher"),
        ("What are my hobbies?", ""),  # one thing
        ("Bread and butter, please", ""),  # "and" inside a clause
        ("What are my locker and my bike codes?", "What are my locker|my bike codes"),
        ("ok? and?", ""),  # nothing of two words with a content word
    ],
)
def test_a_question_splits_into_its_clauses(question: str, expected: str) -> None:
    assert clauses(question) == (expected.split("|") if expected else [])


def test_at_most_max_clauses_are_searched() -> None:
    question = "; ".join(f"where is my {w} note" for w in ("a", "b", "c", "d", "e", "f"))
    assert len(clauses(question)) == MAX_CLAUSES


KEY = MemoryKey("acme", "ann", "t1")
WORDS = ("locker", "invoice", "weather")


class Recording(Embeddings):
    """Deterministic embeddings: one dimension per word of ``WORDS`` (how often the text says
    it) and one for none of them, so the cosine of two texts is how much of that vocabulary
    they share; the queries embedded are recorded."""

    def __init__(self) -> None:
        self.queries: list[str] = []

    @staticmethod
    def _one(text: str) -> list[float]:
        low = text.lower()
        vector = [float(low.count(w)) for w in WORDS]
        vector.append(0.0 if any(vector) else 1.0)
        norm = sum(v * v for v in vector) ** 0.5
        return [v / norm for v in vector]

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        return [self._one(t) for t in texts]

    def embed_query(self, text: str) -> list[float]:
        self.queries.append(text)
        return self._one(text)


def history() -> list[BaseMessage]:
    """Noise that matches a two-part question as a whole (it names both things), and one turn
    with each answer."""
    out: list[BaseMessage] = []
    for i in range(24):
        if i == 3:
            user, reply = "My locker code is 4417.", "Noted."
        elif i == 7:
            user, reply = "The invoice number is 5531.", "Noted."
        elif i % 2:
            user, reply = f"A locker and an invoice came up in meeting {i}.", "Right."
        else:
            user, reply = f"We spoke of the weather on day {i}.", "Yes."
        out += [HumanMessage(user, id=f"h{i}"), AIMessage(reply, id=f"a{i}")]
    return out


def ask(decompose: bool, question: str, embed: Recording | None = None) -> Any:
    strategy = Retrieval(
        TokenBudget(400),
        store=InMemoryStore(
            index={"dims": len(WORDS) + 1, "embed": embed or Recording(), "fields": ["text"]}
        ),
        ranking="dense",
        max_retrieved_tokens=110,
        config=RetrievalConfig(decompose=decompose, compact=False),
        key=KEY,
    )
    messages = history()
    state = strategy.apply(messages).state
    return strategy.apply([*messages, HumanMessage(question, id="q")], state)


QUESTION = "what is my locker code, and what is the invoice number?"


def test_each_clause_of_a_question_brings_its_evidence() -> None:
    embed = Recording()
    with_clauses = ask(True, QUESTION, embed)
    assert embed.queries[-3:] == [QUESTION, "what is my locker code", "what is the invoice number"]
    found = {uid.rsplit("/", 1)[1] for uid in with_clauses.report.retrieved}
    assert {"h3", "h7"} <= found
    # searched whole only, the turns that name both things come first and fill the budget
    whole = {uid.rsplit("/", 1)[1] for uid in ask(False, QUESTION).report.retrieved}
    assert not {"h3", "h7"} <= whole


@settings(max_examples=30, deadline=None)
@given(
    words=st.lists(
        st.sampled_from(["locker", "invoice", "code", "number", "meeting", "weather", "my"]),
        min_size=2,
        max_size=8,
    )
)
def test_a_one_clause_question_is_searched_as_before(words: list[str]) -> None:
    question = "what is " + " ".join(words) + "?"
    assert clauses(question) == []
    assert ask(True, question).report.retrieved == ask(False, question).report.retrieved


def test_decompose_is_checked() -> None:
    with pytest.raises(TypeError, match="decompose must be a bool"):
        RetrievalConfig(decompose="yes")  # type: ignore[arg-type]
