"""Retrieval over a thread whose mark, tail and index blocks were all put back as they were
half-way through (a restored backup, a replica that lags, a writer that crashed between
writes), while the turns written since are still stored. The turns are the truth, the mark,
tail and blocks a cache: a process whose state says more turns were indexed than the mark
announces reads the turns after the blocks from the store (never from the stale tail), finds
the turns written since, and the next write lists them again, so later processes trust the
tail again and scan nothing."""

from __future__ import annotations

import tempfile
from collections.abc import AsyncIterator, Iterable, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any
from unittest import mock

import pytest
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage
from langgraph.store.base import BaseStore, Op, Result, SearchOp
from langgraph.store.memory import InMemoryStore
from retrieval_views import context
from stores import sqlite_file_store

from langmem_ext import MemoryKey, MemoryState, Retrieval, TokenBudget
from langmem_ext.retrieval import layout as module
from langmem_ext.retrieval.index import STALE_MARK

KEY = MemoryKey("acme", "sam", "stale-index")
TURNS = KEY.namespace("turns")
BLOCKS = KEY.namespace("turn_blocks")
MARKS = KEY.namespace("turn_marks", scope="user")
BLOCK = 4  # turns per index block here (512 by default): a short thread holds several
FILLER = "we talked about the weather, the sea and the boats in the harbour"
SECRET = "My locker code at the gym is 5531."
PLANTED = 30  # the turn holding the secret: written after the half-way snapshot
HALF, FULL = 16, 48  # turns in the history at the snapshot and at the end
QUESTION = HumanMessage("what was my locker code at the gym?", id="question")


def chat(last: int) -> list[BaseMessage]:
    out: list[BaseMessage] = []
    for i in range(last):
        text = SECRET if i == PLANTED else f"Topic {i}: {FILLER} {i % 7}"
        out += [HumanMessage(text, id=f"h{i}"), AIMessage(f"Noted ({i}). {FILLER}", id=f"a{i}")]
    return out


def make(store: BaseStore) -> Retrieval:
    strategy = Retrieval(TokenBudget(400), store=store, key=KEY, ranking="bm25", gate="always")
    strategy.clock = lambda: 1_700_000_000.0
    return strategy


class Recording(BaseStore):
    """A store's operations passed through and recorded (the scans of the thread's turns)."""

    def __init__(self, inner: BaseStore) -> None:
        self.inner = inner
        self.ops: list[Op] = []

    def batch(self, ops: Iterable[Op]) -> list[Result]:
        ops = list(ops)
        self.ops += ops
        return self.inner.batch(ops)

    async def abatch(self, ops: Iterable[Op]) -> list[Result]:
        ops = list(ops)
        self.ops += ops
        return await self.inner.abatch(ops)

    def scans(self) -> list[SearchOp]:
        return [o for o in self.ops if isinstance(o, SearchOp) and o.namespace_prefix == TURNS]


@contextmanager
def sync_store(backend: str) -> Iterator[BaseStore]:
    if backend == "memory":
        yield InMemoryStore()
        return
    with sqlite_file_store() as store:
        yield store


@asynccontextmanager
async def async_store(backend: str) -> AsyncIterator[BaseStore]:
    if backend == "memory":
        yield InMemoryStore()
        return
    from langgraph.store.sqlite.aio import AsyncSqliteStore

    with tempfile.TemporaryDirectory() as folder:
        async with AsyncSqliteStore.from_conn_string(str(Path(folder) / "store.sqlite")) as store:
            await store.setup()
            yield store


def snapshot(store: BaseStore) -> list[Any]:
    """The thread's caches as they are now: its mark (and the user's), its tail and blocks."""
    return [*store.search(MARKS, limit=1_000), *store.search(BLOCKS, limit=1_000)]


async def asnapshot(store: BaseStore) -> list[Any]:
    return [*(await store.asearch(MARKS, limit=1_000)), *(await store.asearch(BLOCKS, limit=1_000))]


def grow(
    strategy: Retrieval, first: int, last: int, state: MemoryState | None, step: int = 4
) -> MemoryState:
    """The conversation from ``first`` to ``last`` turns, a few turns evicted per call."""
    for end in range(first + step, last + 1, step):
        state = strategy.apply(chat(end), state).state
    assert state is not None
    return state


async def agrow(
    strategy: Retrieval, first: int, last: int, state: MemoryState | None, step: int = 4
) -> MemoryState:
    for end in range(first + step, last + 1, step):
        state = (await strategy.aapply(chat(end), state)).state
    assert state is not None
    return state


def stale_store(store: BaseStore) -> MemoryState:
    """The thread written to ``FULL`` turns, its caches then put back as they were at ``HALF``
    (the blocks closed since are gone); the writer's state (what a checkpoint holds)."""
    writer = make(store)
    state = grow(writer, 0, HALF, None)
    caches = snapshot(store)
    assert any(it.key == "tail" for it in caches) and any(it.key != "tail" for it in caches)
    state = grow(writer, HALF, FULL, state)
    assert state.indexed_turns > PLANTED
    kept = {(it.namespace, it.key) for it in caches}
    for it in snapshot(store):
        if (it.namespace, it.key) not in kept:
            store.delete(it.namespace, it.key)
    for it in caches:
        store.put(it.namespace, it.key, it.value, index=False)
    mark = store.get(MARKS, KEY.session)
    assert mark is not None and mark.value["next"] < PLANTED  # the stale mark is back
    return state


async def astale_store(store: BaseStore) -> MemoryState:
    writer = make(store)
    state = await agrow(writer, 0, HALF, None)
    caches = await asnapshot(store)
    state = await agrow(writer, HALF, FULL, state)
    kept = {(it.namespace, it.key) for it in caches}
    for it in await asnapshot(store):
        if (it.namespace, it.key) not in kept:
            await store.adelete(it.namespace, it.key)
    for it in caches:
        await store.aput(it.namespace, it.key, it.value, index=False)
    mark = await store.aget(MARKS, KEY.session)
    assert mark is not None and mark.value["next"] < PLANTED
    return state


def tail_lists_every_turn_after_the_blocks(store: BaseStore) -> None:
    mark, tail = store.get(MARKS, KEY.session), store.get(BLOCKS, "tail")
    assert mark is not None and tail is not None
    following = mark.value["next"]
    stored = sorted(it.value["seq"] for it in store.search(TURNS, limit=1_000))
    assert following == stored[-1] + 1
    assert tail.value["token"] == mark.value["token"]
    assert tail.value["seqs"] == [n for n in stored if n >= module.hoped(following)]


@pytest.fixture(autouse=True)
def small_blocks() -> Iterator[None]:
    with mock.patch.object(module, "BLOCK", BLOCK):
        yield


@pytest.mark.parametrize("backend", ["memory", "sqlite"])
def test_retrieval_stale_mark_tail_and_blocks_never_hide_a_stored_turn(backend: str) -> None:
    """A fresh process with the checkpointed state finds the turn written after the stale
    caches, by ``view`` (which writes nothing) and by ``apply``."""
    with sync_store(backend) as store:
        state = stale_store(store)
        question = [*chat(FULL), QUESTION]
        assert "5531" in context(make(store).view(question, state))
        assert "5531" in context(make(store).apply(question, state))


@pytest.mark.parametrize("backend", ["memory", "sqlite"])
async def test_retrieval_stale_caches_never_hide_a_stored_turn_async(backend: str) -> None:
    async with async_store(backend) as store:
        state = await astale_store(store)
        question = [*chat(FULL), QUESTION]
        assert "5531" in context(await make(store).aview(question, state))
        assert "5531" in context(await make(store).aapply(question, state))


@pytest.mark.parametrize("backend", ["memory", "sqlite"])
def test_retrieval_stale_caches_cost_one_scan_then_none(backend: str) -> None:
    """Over the stale caches: one scan of the turns after the blocks in a fresh process and
    none for its next query (the index holds them); the next write lists them in the tail
    again with a current mark, so a later fresh process scans nothing and still finds the
    turn."""
    with sync_store(backend) as store:
        state = stale_store(store)
        recording = Recording(store)
        reader = make(recording)
        question = [*chat(FULL), QUESTION]
        assert "5531" in context(reader.view(question, state))
        assert len(recording.scans()) == 1
        assert list(reader.store_faults) == [STALE_MARK]  # counted, and logged once
        recording.ops.clear()
        assert "5531" in context(reader.view(question, state))
        assert recording.scans() == []
        # the next write (one turn), by another process
        state = grow(make(store), FULL, FULL + 1, state, step=1)
        tail_lists_every_turn_after_the_blocks(store)
        recording.ops.clear()
        question = [*chat(FULL + 1), QUESTION]
        assert "5531" in context(make(recording).view(question, state))
        assert recording.scans() == []


@pytest.mark.parametrize("backend", ["memory", "sqlite"])
async def test_retrieval_stale_caches_are_relisted_by_the_next_write_async(backend: str) -> None:
    async with async_store(backend) as store:
        state = await astale_store(store)
        state = await agrow(make(store), FULL, FULL + 1, state, step=1)
        mark, tail = await store.aget(MARKS, KEY.session), await store.aget(BLOCKS, "tail")
        assert mark is not None and tail is not None
        following = mark.value["next"]
        assert following == state.indexed_turns or following == state.indexed_turns + 1
        assert tail.value["token"] == mark.value["token"]
        stored = sorted(it.value["seq"] for it in await store.asearch(TURNS, limit=1_000))
        assert tail.value["seqs"] == [n for n in stored if n >= module.hoped(following)]
        recording = Recording(store)
        question = [*chat(FULL + 1), QUESTION]
        assert "5531" in context(await make(recording).aview(question, state))
        assert recording.scans() == []


def test_retrieval_a_current_mark_is_trusted_without_a_scan() -> None:
    """Nothing stale: a fresh process reads the turns after the blocks by the tail's keys (the
    staleness check costs nothing when the mark is current)."""
    store = InMemoryStore()
    state = grow(make(store), 0, FULL, None)
    recording = Recording(store)
    reader = make(recording)
    assert "5531" in context(reader.view([*chat(FULL), QUESTION], state))
    assert recording.scans() == []
    assert reader.store_faults == {}
