"""Flows of the chat-history surface and the legacy class: each operation is
one flow of I/O steps run by a sync and an async driver (``langmem_ext.integrations._store.run`` /
``arun``), and their state lives behind one ``StateStore`` adapter (namespace, serialization,
sync-only store fallback)."""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from typing import Any

import pytest
from _workers_common import RecordingStore
from compat_worker import make_model, script
from history_worker import key_for, make_strategy, message_id, turn
from langchain_core.chat_history import InMemoryChatMessageHistory
from langgraph.store.memory import InMemoryStore

from langmem_ext.compat import ConversationSummaryBufferMemory, SummaryBufferState
from langmem_ext.core.keys import MemoryKey
from langmem_ext.core.state import MemoryState
from langmem_ext.integrations import _store
from langmem_ext.integrations.history import ManagedChatMessageHistory

NAMESPACE = ("t", "u", "s", "kind")

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


# --- the StateStore adapter ---------------------------------------------------------------


def test_state_store_round_trips_a_memory_state_under_its_namespace() -> None:
    store = RecordingStore()
    states = _store.StateStore(store, NAMESPACE, "state", decode=_store.memory_state)
    assert states.load() is None
    state = MemoryState(summary=(("conversation", "so far"),), seen=3)
    states.save(state)
    item = store.get(NAMESPACE, "state")
    assert item is not None and item.value == state.to_dict()
    assert states.load() == state
    assert asyncio.run(states.aload()) == state
    # a state is never a document to embed
    assert [call[3] for call in store.calls if call[0] == "PutOp"] == [False]
    states.delete()
    assert states.load() is None and "StateStore(RecordingStore" in repr(states)


def test_state_store_async_falls_back_to_sync_for_a_sync_only_store() -> None:
    from langgraph.store.sqlite import SqliteStore

    conn = sqlite3.connect(":memory:", check_same_thread=False, isolation_level=None)
    store = SqliteStore(conn)
    store.setup()
    strict = _store.StateStore(store, NAMESPACE, "state", decode=_store.memory_state)
    with pytest.raises(NotImplementedError):
        asyncio.run(strict.aload())  # SqliteStore has no async API
    states = _store.StateStore(
        store, NAMESPACE, "state", decode=_store.memory_state, sync_fallback=True
    )

    async def go() -> MemoryState | None:
        await states.asave(MemoryState(seen=2))
        loaded = await states.aload()
        await states.adelete()
        assert await states.aload() is None
        return loaded

    assert asyncio.run(go()) == MemoryState(seen=2)


def test_state_store_decodes_with_the_given_function() -> None:
    store = InMemoryStore()
    store.put(NAMESPACE, "history", {"version": 99})
    states = _store.StateStore(store, NAMESPACE, "history", decode=SummaryBufferState.from_dict)
    with pytest.raises(ValueError, match="newer langmem_ext"):
        states.load()


# --- the drivers --------------------------------------------------------------------------


def _recovering_flow(calls: list[str]) -> _store.Flow[str]:
    """Yields a failing step, handles its error, then a working one."""
    try:
        yield _store.Io(_fail, _afail)
    except KeyError as error:
        calls.append(f"caught {error}")
    value = yield _store.Io.of(str.upper, _aupper, "done")
    return str(value)


def _fail() -> None:
    raise KeyError("boom")


async def _afail() -> None:
    raise KeyError("boom")


async def _aupper(text: str) -> str:
    return text.upper()


def test_a_failing_step_is_thrown_back_into_the_flow_by_both_drivers() -> None:
    sync_calls: list[str] = []
    async_calls: list[str] = []
    assert _store.run(_recovering_flow(sync_calls)) == "DONE"
    assert asyncio.run(_store.arun(_recovering_flow(async_calls))) == "DONE"
    assert sync_calls == async_calls == ["caught 'boom'"]


def test_within_holds_its_context_for_exactly_the_sub_flow() -> None:
    events: list[str] = []

    @contextmanager
    def lock() -> Iterator[None]:
        events.append("enter")
        yield
        events.append("exit")

    @asynccontextmanager
    async def alock() -> AsyncIterator[None]:
        events.append("enter")
        yield
        events.append("exit")

    def inner() -> _store.Flow[int]:
        events.append("inner")
        return (yield _store.Io(lambda: 1, _aone))

    def outer() -> _store.Flow[int]:
        value = yield _store.Within(lock, alock, inner())
        events.append("after")
        return int(value) + 1

    assert _store.run(outer()) == 2
    assert asyncio.run(_store.arun(outer())) == 2
    assert events == ["enter", "inner", "exit", "after"] * 2


async def _aone() -> int:
    return 1


def test_a_shielded_step_finishes_when_cancelled_then_the_cancellation_propagates() -> None:
    done: list[str] = []

    async def slow_write() -> None:
        for _ in range(5):
            await asyncio.sleep(0)
        done.append("written")

    def flow() -> _store.Flow[None]:
        yield _store.Shielded(_store.single(_store.Io(lambda: None, slow_write)))
        done.append("after")  # never: the cancellation is raised after the shielded step

    async def main() -> None:
        task = asyncio.ensure_future(_store.arun(flow()))
        await asyncio.sleep(0)
        await asyncio.sleep(0)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(main())
    assert done == ["written"]


# --- the surfaces run one flow: sync and async do the same I/O -----------------------------


def _history_run(use_async: bool) -> tuple[RecordingStore, list[Any]]:
    store = RecordingStore()
    options: dict[str, Any] = {"prune_backing": True, "id_factory": message_id}
    backing = InMemoryChatMessageHistory()
    history = ManagedChatMessageHistory(
        backing, make_strategy(), store=store, key=key_for("flows"), **options
    )

    async def go() -> list[Any]:
        out: list[Any] = []
        for i in range(10):
            if use_async:
                await history.aadd_messages(turn(i, "f"))
                out.append([m.content for m in await history.aget_messages()])
            else:
                history.add_messages(turn(i, "f"))
                out.append([m.content for m in history.messages])
        if use_async:
            await history.aclear()
        else:
            history.clear()
        return out

    return store, asyncio.run(go())


def test_history_sync_and_async_drivers_run_the_same_flow() -> None:
    sync_store, sync_views = _history_run(use_async=False)
    async_store, async_views = _history_run(use_async=True)
    assert sync_views == async_views
    assert sync_store.calls == async_store.calls
    assert {op[0] for op in sync_store.ops} == {"sync"}
    assert {op[0] for op in async_store.ops} == {"async"}
    kinds = [call[0] for call in sync_store.calls]
    assert kinds.count("PutOp") > 10 and kinds[-1] == "PutOp"  # the clear deletes the item
    assert sync_store.search(key_for("flows").namespace("history")) == []


def _compat_run(use_async: bool) -> tuple[RecordingStore, Any, SummaryBufferState]:
    store = RecordingStore()
    memory = ConversationSummaryBufferMemory(
        llm=make_model(),
        max_token_limit=40,
        store=store,
        key=MemoryKey("t", "u", "flows"),
        summarize_batch_tokens=30,
    )

    async def go() -> Any:
        for human, ai in script(3, 14):
            if use_async:
                await memory.asave_context({"input": human}, {"output": ai})
            else:
                memory.save_context({"input": human}, {"output": ai})
        if use_async:
            return (await memory.aload_memory_variables({}))["history"]
        return memory.load_memory_variables({})["history"]

    return store, asyncio.run(go()), memory.state


def test_compat_sync_and_async_drivers_run_the_same_flow() -> None:
    sync_store, sync_view, sync_state = _compat_run(use_async=False)
    async_store, async_view, async_state = _compat_run(use_async=True)
    assert sync_view == async_view and sync_state == async_state and sync_state.pruned > 0
    assert sync_store.calls == async_store.calls
    # the legacy state is written like the history's: never indexed for search
    puts = [call for call in sync_store.calls if call[0] == "PutOp"]
    assert puts and {op[3] for op in puts} == {False}
