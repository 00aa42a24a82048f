"""Per-turn costs of retrieval: ``TiktokenCounter.tokens_at_least`` is a true lower bound of
``count_text``, and ``Retrieval`` skips by it only what could not fit (the context is the same,
with fewer texts encoded); an agent loop's request is embedded once for all its tool rounds."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from langchain_core.embeddings import DeterministicFakeEmbedding
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langgraph.store.memory import InMemoryStore
from pydantic import Field

from langmem_ext import MemoryKey, Retrieval, TiktokenCounter, TokenBudget
from langmem_ext.retrieval import RetrievalConfig

KEY = MemoryKey("acme", "ann", "packing")
ENCODINGS = ("cl100k_base", "o200k_base")

#: the characters the split patterns treat specially: whitespace of every kind (with the four
#: that Python's split calls whitespace and Unicode does not), line breaks, slashes (o200k joins
#: "!\n/" into one piece), punctuation, digits, letters of several scripts, apostrophes
_TRICKY = list(
    " \t\n\r\f\v\x1c\x1d\x1e\x1f\x85\xa0\u2028\u3000\u200b/!?.,:;'\"-_()<>[]{}#@aAzZé09日本ß"
)
_TEXTS = st.one_of(
    st.text(max_size=120),
    st.lists(st.sampled_from(_TRICKY), max_size=80).map("".join),
    st.lists(
        st.sampled_from(["user:", "it's", "I'll", " ", "\n", "/", "//", "…", "123456", "ok!"]),
        max_size=40,
    ).map("".join),
)


@pytest.fixture(scope="module")
def counters() -> list[TiktokenCounter]:
    return [TiktokenCounter(encoding=name) for name in ENCODINGS]


@settings(max_examples=600, deadline=None)
@given(text=_TEXTS)
@example(text="!\n/ x")  # o200k: "!\n/" is one piece across a line break
@example(text="!\n/\n/\n/ a b")
@example(text="!\x1c!")  # split() calls \x1c whitespace, the patterns do not: no bound
@example(text="a\u3000b c")
def test_tokens_at_least_never_exceeds_the_count(
    counters: list[TiktokenCounter], text: str
) -> None:
    for counter in counters:
        assert 0 <= counter.tokens_at_least(text) <= counter.count_text(text), counter.encoding_name


def test_the_bound_is_close_enough_on_prose_to_skip_blocks(counters: list[TiktokenCounter]) -> None:
    text = (
        "user: By the way, my locker code at the gym is 4471 and my sister Anna moved to Porto "
        "last spring.\nassistant: Noted! I'll remember the code, and say hello to Anna in Porto."
    )
    for counter in counters:
        bound, count = counter.tokens_at_least(text), counter.count_text(text)
        assert 0.6 * count <= bound <= count, (counter.encoding_name, bound, count)


def test_no_bound_where_the_pattern_was_not_checked_or_the_text_has_an_unsplit_space() -> None:
    counter = TiktokenCounter(encoding="cl100k_base")
    assert counter.tokens_at_least("one two three") == 3
    assert counter.tokens_at_least("one\x1ftwo three") == 0
    counter.encoding_name = "my_private_encoding"  # a plugin encoding: its pattern is unknown
    assert counter.tokens_at_least("one two three") == 0


class _Counting(TiktokenCounter):
    """Counts the texts it encodes; ``bound=False`` offers no lower bound."""

    def __init__(self, *, bound: bool) -> None:
        super().__init__(encoding="cl100k_base")
        self.bound = bound
        self.texts = 0

    def count_text(self, text: str) -> int:
        self.texts += 1
        return super().count_text(text)

    def tokens_at_least(self, text: str) -> int:
        return super().tokens_at_least(text) if self.bound else 0


def _conversation() -> tuple[list[BaseMessage], list[str]]:
    """A planted conversation of 250 turns and its questions."""
    from bench.retrieval_planted import PlantedSettings, planted_conversations

    (conversation,) = planted_conversations(PlantedSettings(lengths=(500,), seeds=(0,)))
    questions = [q.text for q in conversation.questions][:10]
    return list(conversation.messages), questions


@pytest.mark.parametrize("compact", [True, False])
def test_skipping_by_the_bound_packs_the_same_context_with_fewer_texts_counted(
    compact: bool,
) -> None:
    history, questions = _conversation()
    views: dict[bool, list[list[Any]]] = {}
    counted: dict[bool, int] = {}
    for bound in (True, False):
        counter = _Counting(bound=bound)
        strategy = Retrieval(
            TokenBudget(1_200, counter=counter),
            store=InMemoryStore(),
            ranking="bm25",
            max_retrieved_tokens=300,
            config=RetrievalConfig(compact=compact),
            key=KEY,
        )
        state = strategy.apply(history).state
        counter.texts = 0
        views[bound] = []
        for question in questions:
            result = strategy.apply([*history, HumanMessage(question, id="q")], state)
            views[bound].append([(m.id, m.content) for m in result.messages])
            assert result.report.retrieved_tokens <= 300
        counted[bound] = counter.texts
    assert views[True] == views[False]
    assert any(len(v) > 0 for v in views[True])
    assert 2 * counted[True] < counted[False], counted


class _CountingEmbeddings(DeterministicFakeEmbedding):
    """Counts the queries embedded (sync and async)."""

    queries: list[str] = Field(default_factory=list)

    def embed_query(self, text: str) -> list[float]:
        self.queries.append(text)
        return super().embed_query(text)

    async def aembed_query(self, text: str) -> list[float]:
        self.queries.append(text)
        return super().embed_query(text)


def _agent_loop(request: str, rounds: int) -> list[list[BaseMessage]]:
    """The message lists an agent loop sends: one request, then ``rounds`` tool rounds."""
    history: list[BaseMessage] = []
    for i in range(30):  # an earlier conversation, long enough to have evicted turns
        history += [
            HumanMessage(f"Earlier topic {i}: the harbour, the boats and the sea", id=f"h{i}"),
            AIMessage(f"Noted ({i}): boats, harbour, sea and weather " * 6, id=f"a{i}"),
        ]
    history.append(HumanMessage(request, id="request"))
    views = [list(history)]
    for r in range(rounds):
        call = {"name": "search", "args": {"q": f"step {r}"}, "id": f"c{r}"}
        history += [
            AIMessage("", tool_calls=[call], id=f"call{r}"),
            ToolMessage(f"result {r}: nothing about boats", tool_call_id=f"c{r}", id=f"t{r}"),
        ]
        views.append(list(history))
    return views


@pytest.mark.parametrize("run_async", [False, True])
def test_an_agent_loop_embeds_its_request_once_and_a_new_request_again(run_async: bool) -> None:
    embeddings = _CountingEmbeddings(size=16)
    strategy = Retrieval(
        TokenBudget(700, counter=TiktokenCounter(encoding="cl100k_base")),
        store=InMemoryStore(),
        embeddings=embeddings,
        max_retrieved_tokens=200,
        gate="always",
        key=KEY,
    )
    request = "What did we say about the boats in the harbour?"
    state = None
    searched = []
    for messages in _agent_loop(request, rounds=12):
        if run_async:
            result = asyncio.run(strategy.aapply(messages, state))
        else:
            result = strategy.apply(messages, state)
        state = result.state
        searched.append(result.report.retrieved)
    assert embeddings.queries == [request]  # 13 searches, one embedding
    assert any(searched)
    # a new request is embedded; the vectors of the last 32 are remembered, no more
    for i in range(40):
        strategy.apply([HumanMessage(f"question number {i} about boats", id="q")], state)
    assert len(embeddings.queries) == 41
    strategy.apply([HumanMessage("question number 39 about boats", id="q")], state)
    assert len(embeddings.queries) == 41
    strategy.apply([HumanMessage("question number 0 about boats", id="q")], state)
    assert len(embeddings.queries) == 42
    assert len(strategy._query_vectors) == 32
