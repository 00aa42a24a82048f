"""Issue 15: turns that need nothing from the past add nothing (``gate="auto"``), questions about
the past still retrieve, and the gate can be switched off or replaced."""

from __future__ import annotations

from typing import Any

import pytest
from langchain_core.documents import Document
from langchain_core.retrievers import BaseRetriever
from test_issue15_packing import KEY, BagOfWords, ask, chat, context, store

from langmem_ext import Retrieval, TokenBudget
from langmem_ext.strategies.retrieval import asks_about_the_past

LOCKER = ("My locker code is 4417, please remember it for me.", "Noted: locker 4417.")
SMALL_TALK = [
    "what is the capital of Australia?",
    "explain what a black hole is in simple terms",
    "sounds good, let's go with that",
    "who painted the Mona Lisa?",
    "convert 5 miles to kilometers",
]


def history() -> list[Any]:
    return chat(40, {3: LOCKER, 7: ("Elena from the Oslo office sent the visa papers.", "Ok.")})


@pytest.mark.parametrize("question", SMALL_TALK)
def test_small_talk_adds_no_tokens(question: str) -> None:
    strategy = Retrieval(TokenBudget(900), store=store(BagOfWords()), key=KEY)
    result = ask(strategy, history(), question)
    assert result.report.retrieved == () and result.report.retrieved_tokens == 0
    assert context(result) == ""


@pytest.mark.parametrize(
    "question",
    [
        "what was the code of my locker?",  # the speaker
        "remind me what we said about the harbour",  # the conversation
        "Who is Elena?",  # a name the memory holds
        "did you note the locker number?",  # what the assistant said
    ],
)
def test_questions_about_the_past_still_retrieve(question: str) -> None:
    strategy = Retrieval(TokenBudget(900), store=store(BagOfWords()), key=KEY)
    result = ask(strategy, history(), question)
    assert result.report.retrieved, question
    assert result.report.retrieved_tokens > 0


def test_a_name_the_memory_does_not_hold_is_small_talk() -> None:
    known = {"elena", "oslo"}
    assert asks_about_the_past("Who is Elena?", known.__contains__)
    assert not asks_about_the_past("Who is Beatrice?", known.__contains__)
    # the first word of a sentence is not a name
    assert not asks_about_the_past("Explain. Tell a story about trains", known.__contains__)


def test_a_strong_match_retrieves_without_any_cue() -> None:
    """A question worded like an evicted turn (dense similarity >= 0.6) is answered from it even
    without a personal word."""
    strategy = Retrieval(TokenBudget(900), store=store(BagOfWords()), key=KEY)
    result = ask(strategy, history(), "the locker code")
    assert result.report.retrieved


def test_gate_always_and_a_function() -> None:
    always = Retrieval(TokenBudget(900), store=store(BagOfWords()), key=KEY, gate="always")
    assert ask(always, history(), SMALL_TALK[0]).report.retrieved
    seen: list[str] = []

    def mine(query: str) -> bool:
        seen.append(query)
        return "capital" in query

    custom = Retrieval(TokenBudget(900), store=store(BagOfWords()), key=KEY, gate=mine)
    assert ask(custom, history(), SMALL_TALK[0]).report.retrieved
    assert not ask(custom, history(), SMALL_TALK[1]).report.retrieved
    assert SMALL_TALK[0] in seen and SMALL_TALK[1] in seen  # asked with the query's text
    with pytest.raises(ValueError, match="gate must be 'auto', 'always' or a function"):
        Retrieval(TokenBudget(900), store=store(), key=KEY, gate="never")  # type: ignore[arg-type]


def test_a_query_in_another_language_is_always_searched() -> None:
    assert asks_about_the_past("quel est le code du casier ?")  # no English function word
    assert asks_about_the_past("Schließfachcode 4417")


class _Docs(BaseRetriever):
    def _get_relevant_documents(self, query: str, *, run_manager: Any) -> list[Document]:
        return [Document(page_content="Canberra is the capital of Australia.", id="doc1")]


def test_knowledge_sources_are_searched_even_for_small_talk() -> None:
    strategy = Retrieval(TokenBudget(900), store=store(BagOfWords()), key=KEY, sources=[_Docs()])
    result = ask(strategy, history(), SMALL_TALK[0])
    assert "Canberra" in context(result)
    assert all("locker" not in r for r in result.report.retrieved)
    assert "4417" not in context(result)
