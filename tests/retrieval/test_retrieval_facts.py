"""The facts a summarizing strategy writes into its ``facts`` / ``profile``
sections are remembered as memory items beside the turns: indexed once, isolated by key, and
retrieved (as one line) when a later question needs them and the summary no longer shows them."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage
from langgraph.store.memory import InMemoryStore

from langmem_ext import MemoryKey, Retrieval, SummaryBuffer
from langmem_ext.core.shape import RETRIEVED_ID
from langmem_ext.summarize.summarizer import Summarizer

ANN = MemoryKey("acme", "ann", "t1")
BOB = MemoryKey("acme", "bob", "t1")
FILLER = "we talked about the weather, the sea and the boats in the harbour " * 3
LOCKER = "The user's gym locker combination is 4417."


class Scripted(Summarizer):
    """A summarizer whose folds return the next facts section of ``script`` (the last one
    repeats), and that counts its folds."""

    def __init__(self, script: Sequence[str]) -> None:
        super().__init__(lambda prompt: "unused", templates=["facts"])
        self.script = list(script)
        self.count = [0]  # shared with the copy the strategy makes (its own counter)

    @property
    def folds(self) -> int:
        return self.count[0]

    def _next(self) -> dict[str, str]:
        text = self.script[min(self.folds, len(self.script) - 1)]
        self.count[0] += 1
        return {"facts": text}

    def fold(self, previous: Mapping[str, str], messages: Sequence[BaseMessage]) -> dict[str, str]:
        return self._next()

    async def afold(
        self, previous: Mapping[str, str], messages: Sequence[BaseMessage]
    ) -> dict[str, str]:
        return self._next()


def histories(turns: int) -> Iterator[list[BaseMessage]]:
    history: list[BaseMessage] = []
    for i in range(turns):
        history = [*history, HumanMessage(f"Topic {i}: {FILLER}", id=f"h{i}")]
        yield history
        history = [*history, AIMessage(f"Noted {i}. {FILLER}", id=f"a{i}")]


def run(strategy: Retrieval, turns: int, key: MemoryKey) -> tuple[list[BaseMessage], Any]:
    state = None
    history: list[BaseMessage] = []
    for history in histories(turns):
        state = strategy.apply(history, state, key=key).state
    return history, state


def facts_of(store: InMemoryStore, key: MemoryKey) -> list[str]:
    return sorted(i.value["text"] for i in store.search(key.namespace("facts"), limit=100))


def strategy(store: InMemoryStore, script: Sequence[str]) -> tuple[Retrieval, Scripted]:
    summarizer = Scripted(script)
    inner = SummaryBuffer(1_200, summarizer=summarizer, max_summary_tokens=200)
    return Retrieval(inner, store=store, key=ANN, max_retrieved_tokens=300), summarizer


def test_facts_of_a_fold_are_indexed_once_each() -> None:
    store = InMemoryStore()
    same = f"- {LOCKER}\n- The user prefers tea over coffee."
    retrieval, summarizer = strategy(store, [same])
    run(retrieval, 40, ANN)
    assert summarizer.folds >= 3  # the same two facts were restated by every fold
    assert facts_of(store, ANN) == sorted([LOCKER, "The user prefers tea over coffee."])
    updated = [same, f"{same}\n- The user moved to Lyon in May."]
    store2 = InMemoryStore()
    retrieval2, _ = strategy(store2, updated)
    run(retrieval2, 40, ANN)
    assert len(facts_of(store2, ANN)) == 3


def test_facts_are_isolated_by_key() -> None:
    store = InMemoryStore()
    retrieval, _ = strategy(store, [f"- {LOCKER}"])
    run(retrieval, 40, ANN)
    assert facts_of(store, ANN) == [LOCKER]
    assert facts_of(store, BOB) == []
    other, _ = strategy(store, ["- Bob likes sailing on weekends."])
    history, state = run(other, 40, BOB)
    asked = other.apply(
        [*history, HumanMessage("what is my gym locker combination?", id="q")], state, key=BOB
    )
    assert "4417" not in "".join(str(m.content) for m in asked.messages)


def test_a_fact_the_summary_dropped_comes_back_for_a_paraphrased_question(
    minilm_embeddings: Any,
) -> None:
    store = InMemoryStore(index={"dims": 384, "embed": minilm_embeddings, "fields": ["text"]})
    # the first folds remember the locker; later ones have forgotten it (summaries drift)
    script = [f"- {LOCKER}"] * 2 + ["- The user is planning a trip to Portugal."]
    retrieval, summarizer = strategy(store, script)
    history, state = run(retrieval, 60, ANN)
    assert summarizer.folds > 2 and "4417" not in str(state.summary)
    question = HumanMessage("Remind me, what numbers open my locker at the gym?", id="q")
    result = retrieval.apply([*history, question], state, key=ANN)
    context = next(str(m.content) for m in result.messages if m.id == RETRIEVED_ID)
    assert f"<fact>\n{LOCKER}\n</fact>" in context
    assert result.report.retrieved_tokens <= 300
    fact_uids = [u for u in result.report.retrieved if "/facts/" in u]
    assert len(fact_uids) == 1


def test_a_fact_the_view_still_shows_is_not_retrieved_again() -> None:
    store = InMemoryStore()
    retrieval, _ = strategy(store, [f"- {LOCKER}"])
    history, state = run(retrieval, 40, ANN)
    assert "4417" in str(state.summary)
    question = HumanMessage("what is my gym locker combination again?", id="q")
    result = retrieval.apply([*history, question], state, key=ANN)
    assert not [u for u in result.report.retrieved if "/facts/" in u]


def test_a_read_only_view_writes_no_facts_and_async_writes_the_same() -> None:
    store = InMemoryStore()
    retrieval, _ = strategy(store, [f"- {LOCKER}"])
    state = None
    for history in histories(40):
        state = retrieval.view(history, state, key=ANN).state
    assert facts_of(store, ANN) == []

    async def drive() -> None:
        astate = None
        for history in histories(40):
            astate = (await retrieval.aapply(history, astate, key=ANN)).state

    asyncio.run(drive())
    assert facts_of(store, ANN) == [LOCKER]
