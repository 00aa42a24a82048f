"""``Retrieval(prefetch_embeddings=True)`` (embed evicted turns off the critical path):
after each call the view's oldest messages are embedded in a worker thread; the call whose view
they leave takes their vectors instead of embedding them. Views, states and stored vectors are
the same as without it; a failing background embedding only costs the call its own embedding."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from langchain_core.embeddings import DeterministicFakeEmbedding
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langgraph.store.memory import InMemoryStore
from pydantic import Field

from langmem_ext import MemoryKey, Retrieval, TiktokenCounter, TokenBudget
from langmem_ext.retrieval import RetrievalConfig
from langmem_ext.retrieval.codec import stored_vectors

KEY = MemoryKey("acme", "ann", "prefetch")
WORDS = "harbour boats lanterns ferry captain Porto locker tide anchor gull rope sail".split()


class _Recording(DeterministicFakeEmbedding):
    """Deterministic vectors; records which thread embedded which documents, and can fail."""

    calls: list[tuple[str, tuple[str, ...]]] = Field(default_factory=list)
    fail_in_background: bool = False

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        name = threading.current_thread().name
        self.calls.append((name, tuple(texts)))
        if self.fail_in_background and name.startswith("langmem_ext-prefetch"):
            raise ConnectionError("embedding service unreachable")
        return super().embed_documents(texts)

    def on_caller(self) -> list[str]:
        """Documents embedded by the calls themselves (not ahead)."""
        return [
            t for name, texts in self.calls if not name.startswith("langmem_ext-prefetch")
            for t in texts
        ]  # fmt: skip


def _chat(turns: int, seed: int = 0) -> list[BaseMessage]:
    rng = np.random.default_rng(seed)
    out: list[BaseMessage] = []
    for i in range(turns):
        words = " ".join(rng.choice(WORDS, size=8))
        out.append(HumanMessage(f"turn {i}: tell me about {words}?", id=f"h{i}"))
        out.append(AIMessage(f"Answer {i}: the {words} are fine.", id=f"a{i}"))
    return out


def _agent(requests: int, rounds: int) -> list[BaseMessage]:
    """Agent turns: a request, then tool rounds (a turn is indexed once all of it left)."""
    out: list[BaseMessage] = []
    for r in range(requests):
        out.append(HumanMessage(f"Request {r}: survey the harbour boats and report.", id=f"q{r}"))
        for i in range(rounds):
            call = {"name": "look", "args": {"boat": i}, "id": f"c{r}-{i}", "type": "tool_call"}
            out.append(AIMessage("", tool_calls=[call], id=f"ai{r}-{i}"))
            text = f"boat {r}-{i}: {WORDS[(r + i) % len(WORDS)]} " * 6
            out.append(ToolMessage(text, tool_call_id=f"c{r}-{i}", id=f"t{r}-{i}"))
        out.append(AIMessage(f"Report {r}: all boats seen.", id=f"rep{r}"))
    return out


def _retrieval(embeddings: Any, prefetch: bool, store: Any = None) -> Retrieval:
    return Retrieval(
        TokenBudget(400, counter=TiktokenCounter(encoding="cl100k_base")),
        store=store if store is not None else InMemoryStore(),
        embeddings=embeddings,
        max_retrieved_tokens=120,
        gate="always",
        key=KEY,
        config=RetrievalConfig(prefetch_embeddings=prefetch),
    )


def _replay(
    strategy: Retrieval, history: list[BaseMessage], step: int, run_async: bool
) -> list[tuple[list[BaseMessage], Any]]:
    """Apply ``history`` growing ``step`` messages a call; flush between calls (a model's
    answer takes longer than the embeddings ahead)."""
    out = []
    state = None
    for end in range(step, len(history) + 1, step):
        messages = history[:end]
        if run_async:
            result = asyncio.run(_acall(strategy, messages, state))
        else:
            result = strategy.apply(messages, state)
            assert strategy.flush(10) == 0
        state = result.state
        out.append((result.messages, result.state))
    return out


async def _acall(strategy: Retrieval, messages: list[BaseMessage], state: Any) -> Any:
    result = await strategy.aapply(messages, state)
    assert await strategy.aflush(10) == 0
    return result


def _stored(store: InMemoryStore) -> dict[str, Any]:
    items = store.search(KEY.namespace("turns"), limit=10_000)
    return {it.key: stored_vectors(it.value).tolist() for it in items}


@pytest.mark.parametrize("run_async", [False, True])
@pytest.mark.parametrize("shape", ["chat", "agent"])
def test_turns_leave_the_view_with_vectors_embedded_ahead(shape: str, run_async: bool) -> None:
    history = _chat(30) if shape == "chat" else _agent(8, 4)
    runs = {}
    for prefetch in (False, True):
        embeddings = _Recording(size=16)
        store = InMemoryStore()
        strategy = _retrieval(embeddings, prefetch, store)
        runs[prefetch] = (_replay(strategy, history, 2, run_async), embeddings, strategy, store)
    (plain, plain_emb, _, plain_store), (ahead, ahead_emb, strategy, ahead_store) = (
        runs[False],
        runs[True],
    )
    assert ahead == plain  # the same views and states, call after call
    stored = _stored(ahead_store)
    assert stored and stored == _stored(plain_store)  # the same vectors stored
    indexed = len(plain_emb.on_caller())
    assert indexed > 20
    # ahead: the calls embed only what left a view before it was embedded (the first calls)
    assert len(ahead_emb.on_caller()) <= indexed // 5, (len(ahead_emb.on_caller()), indexed)
    assert strategy._prefetch is not None and strategy._prefetch.taken >= indexed * 4 // 5


def test_a_failing_background_embedding_costs_the_call_its_own_embedding() -> None:
    history = _chat(20)
    embeddings = _Recording(size=16, fail_in_background=True)
    strategy = _retrieval(embeddings, True)
    reference = _replay(_retrieval(_Recording(size=16), False), history, 2, False)
    assert _replay(strategy, history, 2, False) == reference
    assert strategy._prefetch is not None
    assert strategy._prefetch.failures > 0 and strategy._prefetch.taken == 0


def test_a_read_only_view_embeds_nothing_ahead() -> None:
    embeddings = _Recording(size=16)
    strategy = _retrieval(embeddings, True)
    strategy.view(_chat(20))
    assert strategy.flush(10) == 0
    assert not [c for c in embeddings.calls if c[0].startswith("langmem_ext-prefetch")]


def test_flush_waits_for_the_embeddings_ahead() -> None:
    release = threading.Event()

    class Slow(_Recording):
        def embed_documents(self, texts: list[str]) -> list[list[float]]:
            if threading.current_thread().name.startswith("langmem_ext-prefetch"):
                release.wait(10)
            return super().embed_documents(texts)

    strategy = _retrieval(Slow(size=16), True)
    strategy.apply(_chat(20))
    assert strategy.flush(0.05) == 1  # still embedding
    release.set()
    assert strategy.flush(10) == 0
    assert asyncio.run(strategy.aflush(1)) == 0


def test_prefetch_needs_a_local_dense_index_and_a_bool() -> None:
    with pytest.raises(ValueError, match="prefetch_embeddings=True needs a local dense index"):
        Retrieval(
            TokenBudget(400),
            store=InMemoryStore(),
            key=KEY,
            config=RetrievalConfig(prefetch_embeddings=True),
        )
    with pytest.raises(TypeError, match="prefetch_embeddings must be True or False"):
        _retrieval(_Recording(size=16), "yes")  # type: ignore[arg-type]


@settings(max_examples=25, deadline=None)
@given(
    turns=st.integers(min_value=4, max_value=24),
    steps=st.lists(st.integers(min_value=1, max_value=5), min_size=1, max_size=12),
    flush_every=st.integers(min_value=1, max_value=4),
)
def test_prefetching_never_changes_what_is_shown_or_stored(
    turns: int, steps: list[int], flush_every: int
) -> None:
    """Calls growing the history by random steps, the embeddings ahead finishing at random
    points (flushed every few calls, else racing the next call): the views, states and stored
    vectors are those of a Retrieval without prefetching."""
    history = _chat(turns, seed=turns)
    plain_store, ahead_store = InMemoryStore(), InMemoryStore()
    plain = _retrieval(_Recording(size=16), False, plain_store)
    ahead = _retrieval(_Recording(size=16), True, ahead_store)
    plain_state = ahead_state = None
    end, i = 0, 0
    while end < len(history):
        end = min(len(history), end + steps[i % len(steps)])
        i += 1
        a = plain.apply(history[:end], plain_state)
        b = ahead.apply(history[:end], ahead_state)
        assert b.messages == a.messages
        assert b.state == a.state
        plain_state, ahead_state = a.state, b.state
        if i % flush_every == 0:
            ahead.flush(10)
    ahead.flush(10)
    assert _stored(ahead_store) == _stored(plain_store)
