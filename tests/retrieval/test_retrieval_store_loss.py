"""Retrieval over a store that lost a thread's turns (emptied, replaced by a new one, restored
from before the thread began) while the caller's state (restored from a checkpoint) says they
were indexed. The loss is found once per thread and process (one small read), the turns the
history still holds are indexed again under their numbers, and those it no longer holds are
reported once per thread with their count; a steady conversation pays no extra store call."""

from __future__ import annotations

import logging
from collections.abc import Iterable

import pytest
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage
from langgraph.store.base import BaseStore, GetOp, Op, Result
from langgraph.store.memory import InMemoryStore
from retrieval_views import context

from langmem_ext import MemoryKey, MemoryState, Retrieval, TokenBudget
from langmem_ext.core.transitions import rebase_after_removal
from langmem_ext.retrieval.strategy import LOST_STORE, LOST_TURNS

KEY = MemoryKey("acme", "sam", "store-loss")
MARKS = KEY.namespace("turn_marks", scope="user")
TURNS_NS = KEY.namespace("turns")
TURNS = 5_000
FILLER = "we talked about the weather, the sea and the boats in the harbour"
SECRET = "My locker code at the gym is 5531."
PLANTED = 3  # an early turn
QUESTION = HumanMessage("what was my locker code at the gym?", id="question")
LOST_MESSAGE = "the store lost"


def chat(last: int, first: int = 0) -> list[BaseMessage]:
    out: list[BaseMessage] = []
    for i in range(first, last):
        text = SECRET if i == PLANTED else f"Topic {i}: {FILLER} {i % 7}"
        out += [HumanMessage(text, id=f"h{i}"), AIMessage(f"Noted ({i}). {FILLER}", id=f"a{i}")]
    return out


class Counting(BaseStore):
    """A store's calls passed through and counted (with their operations)."""

    def __init__(self, inner: BaseStore) -> None:
        self.inner = inner
        self.calls: list[list[Op]] = []

    def batch(self, ops: Iterable[Op]) -> list[Result]:
        ops = list(ops)
        self.calls.append(ops)
        return self.inner.batch(ops)

    async def abatch(self, ops: Iterable[Op]) -> list[Result]:
        ops = list(ops)
        self.calls.append(ops)
        return await self.inner.abatch(ops)

    def mark_reads(self) -> int:
        """Calls that are one get of the thread's mark alone (the loss check)."""
        return sum(
            1
            for call in self.calls
            if len(call) == 1 and isinstance(call[0], GetOp) and call[0].namespace == MARKS
        )


def make(store: BaseStore) -> Retrieval:
    strategy = Retrieval(TokenBudget(400), store=store, key=KEY, ranking="bm25", gate="always")
    strategy.clock = lambda: 1_700_000_000.0
    return strategy


def written_thread() -> tuple[list[BaseMessage], MemoryState]:
    """A 5,000-turn thread indexed into a store then dropped, and the state a checkpointer
    kept."""
    history = [*chat(TURNS), QUESTION]
    result = make(InMemoryStore()).apply(history, None)
    assert "5531" in context(result)
    assert result.state.indexed_turns > TURNS - 10
    return history, result.state


@pytest.fixture(scope="module")
def thread() -> tuple[list[BaseMessage], MemoryState]:
    return written_thread()


def lost_warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if LOST_MESSAGE in r.getMessage()]


def test_retrieval_reindexes_a_lost_store_from_the_history(
    thread: tuple[list[BaseMessage], MemoryState], caplog: pytest.LogCaptureFixture
) -> None:
    """A new store with the restored state: the early fact is retrieved again, every turn is
    stored again under its number, and nothing is reported lost (the history holds it all)."""
    history, state = thread
    store = InMemoryStore()
    strategy = make(store)
    with caplog.at_level(logging.WARNING, logger="langmem_ext"):
        result = strategy.apply(history, state)
    assert "5531" in context(result)
    stored = store.search(TURNS_NS, limit=2 * TURNS)
    assert sorted(it.value["seq"] for it in stored) == list(range(state.indexed_turns))
    assert result.state.indexed_turns == state.indexed_turns
    assert strategy.store_faults == {LOST_STORE: 1}
    assert lost_warnings(caplog) == []


async def test_retrieval_reindexes_a_lost_store_from_the_history_async(
    thread: tuple[list[BaseMessage], MemoryState],
) -> None:
    history, state = thread
    store = InMemoryStore()
    strategy = make(store)
    result = await strategy.aapply(history, state)
    assert "5531" in context(result)
    stored = await store.asearch(TURNS_NS, limit=2 * TURNS)
    assert len(stored) == state.indexed_turns
    assert strategy.store_faults == {LOST_STORE: 1}


def test_retrieval_view_of_a_lost_store_reindexes_on_the_next_apply(
    thread: tuple[list[BaseMessage], MemoryState],
) -> None:
    """A read-only view writes nothing: the loss is checked again by the next apply."""
    history, state = thread
    store = Counting(InMemoryStore())
    strategy = make(store)
    strategy.view(history, state)
    assert store.inner.search(TURNS_NS) == []
    assert "5531" in context(strategy.apply(history, state))
    assert store.mark_reads() == 2


def rewritten(history: list[BaseMessage], state: MemoryState, gone: int) -> MemoryState:
    """``state`` once a surface removed the first ``gone`` turns from the graph state."""
    kept = history[2 * gone :]
    return rebase_after_removal(state, kept, removed_at=0, removed_count=2 * gone, removed_tokens=0)


@pytest.mark.parametrize("sync", [True, False])
async def test_retrieval_warns_once_per_thread_with_the_turns_the_history_lost(
    thread: tuple[list[BaseMessage], MemoryState],
    caplog: pytest.LogCaptureFixture,
    sync: bool,
) -> None:
    """The history no longer holds the thread's turns (a rewrite mode removed them from the
    graph state): the loss is warned once, with the count, over several calls; the store
    faults count the turns lost."""
    history, state = thread
    gone = TURNS - 40
    kept = history[2 * gone :]
    restored = rewritten(history, state, gone)
    assert restored.indexed_turns == state.indexed_turns and restored.indexed > 0
    strategy = make(InMemoryStore())
    with caplog.at_level(logging.WARNING, logger="langmem_ext"):
        for n in range(5):
            messages = [*kept[:-1], *chat(TURNS + n + 1, TURNS), QUESTION]
            if sync:
                restored = strategy.apply(messages, restored).state
            else:
                restored = (await strategy.aapply(messages, restored)).state
    warnings = lost_warnings(caplog)
    assert len(warnings) == 1
    assert f"lost {gone} turn(s)" in warnings[0]
    assert strategy.store_faults[LOST_TURNS] == gone
    assert strategy.store_faults[LOST_STORE] == 1


def test_retrieval_counts_only_the_turns_the_history_no_longer_holds(
    thread: tuple[list[BaseMessage], MemoryState], caplog: pytest.LogCaptureFixture
) -> None:
    """The watermark still in the history, its oldest turns gone: those are the turns lost;
    the rest are indexed again under their numbers."""
    history, state = thread
    gone = 1_000
    store = InMemoryStore()
    strategy = make(store)
    shorter = history[2 * gone :]
    restored = rewritten(history, state, gone)
    with caplog.at_level(logging.WARNING, logger="langmem_ext"):
        strategy.apply(shorter, restored)
    assert len(lost_warnings(caplog)) == 1 and f"lost {gone} turn(s)" in lost_warnings(caplog)[0]
    seqs = sorted(it.value["seq"] for it in store.search(TURNS_NS, limit=2 * TURNS))
    assert seqs == list(range(gone, state.indexed_turns))


@pytest.mark.parametrize("sync", [True, False])
async def test_retrieval_steady_state_pays_no_loss_check(sync: bool) -> None:
    """After the first call of a thread with indexed turns (one get of its mark), a steady
    conversation makes the same store calls as without the check: none extra."""
    store = Counting(InMemoryStore())
    strategy = make(store)
    state: MemoryState | None = None
    for end in range(40, 81, 4):
        messages = [*chat(end), QUESTION]
        result = strategy.apply(messages, state) if sync else await strategy.aapply(messages, state)
        state = result.state
    assert state is not None and state.indexed_turns > 30
    # this process wrote the thread's turns: it never checks them
    assert store.mark_reads() == 0
    # a new process (same store, restored state): one check, then none
    fresh = make(store)
    for end in range(84, 121, 4):
        messages = [*chat(end), QUESTION]
        result = fresh.apply(messages, state) if sync else await fresh.aapply(messages, state)
        state = result.state
    assert store.mark_reads() == 1
    assert fresh.store_faults == {}


def test_retrieval_finds_a_store_emptied_under_a_running_process() -> None:
    """The store emptied while the process runs: a call that writes nothing sees the thread's
    mark gone, and the next call indexes the thread again."""
    inner = InMemoryStore()
    strategy = make(inner)
    state = strategy.apply([*chat(60), QUESTION], None).state
    for item in inner.search(("langmem_ext",), limit=10_000):
        inner.delete(item.namespace, item.key)
    same = [*chat(60), QUESTION]
    strategy.apply(same, state)  # writes nothing: finds the thread's mark gone
    assert inner.search(TURNS_NS) == []
    result = strategy.apply(same, state)
    assert "5531" in context(result)
    assert len(inner.search(TURNS_NS, limit=100)) == state.indexed_turns
    assert strategy.store_faults == {LOST_STORE: 1}
