"""ManagedChatMessageHistory: the chat-history surface.

Reading is the strategy's view and never calls the summarizer or writes; writing appends, folds
and stores the state in a LangGraph store under the MemoryKey's namespace; ``prune_backing``
removes exactly the folded messages. Run through ``RunnableWithMessageHistory`` over in-memory,
SQLite (langchain-community) and PostgreSQL (langchain-postgres) histories and stores, and across
a real second process (``tests/history_worker.py``). PostgreSQL tests use the ``pg_schema_dsn``
fixture (tests/conftest.py): they skip when the server is unreachable, and fail under ``CI=true``.
"""

from __future__ import annotations

import asyncio
import doctest
import json
import sqlite3
import subprocess
import sys
import uuid
import warnings
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from _workers_common import AsyncOnlyHistory, RecordingStore, covered, markers
from history_worker import (
    PG_TABLE,
    SYSTEM_PROMPT,
    RecordingSummarizer,
    Run,
    arun_sessions,
    dump_message,
    key_for,
    make_strategy,
    message_id,
    pg_session,
    question_text,
    recording_chat,
    run_backend,
    run_sessions,
    summarizer,
    turn,
)
from hypothesis import given, settings
from hypothesis import strategies as st
from langchain_core.chat_history import BaseChatMessageHistory, InMemoryChatMessageHistory
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage
from langchain_core.runnables.history import RunnableWithMessageHistory
from langgraph.store.base import Op, PutOp, Result
from langgraph.store.memory import InMemoryStore

import langmem_ext.integrations.history
from langmem_ext import (
    FoldPolicy,
    LangmemExtError,
    MemoryBudgetExceeded,
    MemoryState,
    SummaryBuffer,
    TokenBudget,
    is_valid,
)
from langmem_ext.core.keys import MemoryKey
from langmem_ext.errors import MissingKeyError
from langmem_ext.integrations.history import STATE_ITEM, ManagedChatMessageHistory

WORKER = Path(__file__).resolve().parents[1] / "history_worker.py"
RUN = uuid.uuid4().hex[:10]  # session names are unique per test run (shared PostgreSQL schema)

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


# --- helpers ----------------------------------------------------------------------------------


def managed(
    backing: BaseChatMessageHistory | None = None, **kwargs: Any
) -> ManagedChatMessageHistory:
    options: dict[str, Any] = {"id_factory": message_id, **kwargs}
    if options.get("store") is not None and "key" not in options and "config" not in options:
        options["key"] = key_for("managed")  # a store needs a session (keys fail closed)
    strategy = options.pop("strategy", None) or make_strategy()
    return ManagedChatMessageHistory(backing or InMemoryChatMessageHistory(), strategy, **options)


def ids(messages: Sequence[BaseMessage]) -> list[str | None]:
    return [m.id for m in messages]


def questions_in(messages: Sequence[BaseMessage]) -> set[int]:
    """Question numbers of the question messages (not the summary) in ``messages``."""
    return {int(str(m.id).split("-q")[1]) for m in messages if m.id and "-q" in str(m.id)}


def summary_text(history: ManagedChatMessageHistory) -> str:
    return history.summary.get("conversation", "")


# --- 1. reading: summary + recent, never a model call, never a write ------------------------


def test_view_is_the_summary_then_the_newest_messages_of_the_backing_history() -> None:
    history = managed()
    for i in range(12):
        history.add_messages(turn(i))
    state = history.state
    assert state is not None and state.folds >= 2 and state.folded > 0

    view = history.messages
    backing = history.history.messages
    assert view[0].id == "langmem-ext-summary"  # placement="human": a marked HumanMessage
    assert f"covers {' '.join(f'q{n}' for n in range(state.folded // 2))};" in view[0].content
    assert ids(view[1:]) == ids(backing[-(len(view) - 1) :])  # then a suffix, verbatim
    assert view[1:] == backing[-(len(view) - 1) :]
    assert is_valid(view) and isinstance(view[1], HumanMessage)
    # the summary covers exactly the folded messages, the view starts right after them
    assert covered(summary_text(history)) == set(range(state.folded // 2))
    assert questions_in(view) == set(range(state.folded // 2, 12))


def test_reading_never_calls_the_summarizer_and_never_writes_the_store() -> None:
    summarize = RecordingSummarizer()
    store = RecordingStore()
    backing = InMemoryChatMessageHistory()
    for i in range(12):  # written past the wrapper: a fold is long overdue
        backing.add_messages([m.model_copy(update={"id": m.id or message_id(m)}) for m in turn(i)])
    history = managed(backing, store=store, strategy=make_strategy(summarize))

    for _ in range(3):
        view = history.messages
        assert asyncio.run(history.aget_messages()) == view
    assert summarize.calls == 0 and store.writes == 0
    assert history.state is None
    assert "not shown and not yet summarized" in str(view[0].content)  # the fold is deferred
    assert is_valid(view) and view[-1].id == "alpha-a11"

    history.add_messages(turn(12))  # a write folds the backlog: one call, state stored
    assert summarize.calls == 1 and store.writes == 1
    calls, writes = summarize.calls, store.writes
    before = store.search(history.namespace)
    for _ in range(3):
        view = history.messages
        asyncio.run(history.aget_messages())
        assert history.state is not None and history.summary
    assert (summarize.calls, store.writes) == (calls, writes)
    after = store.search(history.namespace)
    assert [(i.key, i.value, i.updated_at) for i in after] == [
        (i.key, i.value, i.updated_at) for i in before
    ]
    state = history.state
    assert state is not None and "not shown" not in str(view[0].content)
    assert covered(str(view[0].content)) == set(range(state.folded // 2))


def test_a_history_ending_with_an_ai_message_still_gives_a_valid_view() -> None:
    """What RunnableWithMessageHistory reads: the history up to the last answer (the new
    question is not in it yet). The view must still start on a human message and keep the
    newest human message."""
    for strategy in (
        make_strategy(),
        TokenBudget(300),
        SummaryBuffer(400, summarizer=summarizer, max_summary_tokens=60),
    ):
        history = managed(strategy=strategy)
        for i in range(8):
            history.add_messages(turn(i))
            view = history.messages
            assert is_valid(view), (strategy, i)
            assert view[-1].id == f"alpha-a{i}" and f"alpha-q{i}" in ids(view)
            body = [m for m in view if not isinstance(m, SystemMessage)]
            assert isinstance(body[0], HumanMessage)


# --- 2. writing: the backing history, ids, pruning -------------------------------------------


def test_the_backing_history_keeps_every_message_by_default() -> None:
    history = managed()
    for i in range(15):
        history.add_messages(turn(i))
    assert history.state is not None and history.state.folds >= 3
    assert ids(history.history.messages) == [
        f"alpha-{kind}{i}" for i in range(15) for kind in ("q", "a")
    ]


def test_messages_without_ids_get_one_on_a_copy_and_keep_it() -> None:
    history = ManagedChatMessageHistory(InMemoryChatMessageHistory(), TokenBudget(1_000))
    question, answer = HumanMessage("hello"), AIMessage("hi", id="mine")
    history.add_messages([question, answer])
    history.add_user_message("and a string")
    assert question.id is None  # the caller's object is not changed
    stored = history.history.messages
    assert stored[0] is not question and stored[0].content == "hello"
    assert stored[1] is answer  # a message with an id is appended as it is
    assert uuid.UUID(str(stored[0].id)) and uuid.UUID(str(stored[2].id))
    assert stored[0].id != stored[2].id
    assert ids(history.messages) == ids(stored)  # and the view shows the same ids
    assert history.state is not None and history.state.seen_key == stored[2].id


@pytest.mark.parametrize("use_async", [False, True], ids=["sync", "async"])
def test_prune_backing_removes_exactly_the_folded_messages(use_async: bool) -> None:
    summarize = RecordingSummarizer()
    pruned = managed(prune_backing=True, strategy=make_strategy(summarize))
    whole = managed()
    folds_seen = 0
    for i in range(30):
        if use_async:
            asyncio.run(pruned.aadd_messages(turn(i)))
        else:
            pruned.add_messages(turn(i))
        whole.add_messages(turn(i))
        state, reference = pruned.state, whole.state
        assert state is not None and reference is not None
        backing = pruned.history.messages
        # the backing history is the unfolded suffix of the conversation, in order
        assert ids(backing) == ids(whole.history.messages)[reference.folded :]
        assert state.folded == 0 and state.seen == len(backing)
        # what left it is exactly what the summary covers, each question once
        kept, summarized = questions_in(backing), covered(summary_text(pruned))
        assert kept | summarized == set(range(i + 1)) and not kept & summarized
        assert pruned.summary == whole.summary
        assert pruned.messages == whole.messages  # pruning changes nothing the model sees
        folds_seen = state.folds
    assert folds_seen >= 5 and summarize.calls == folds_seen
    assert len(pruned.history.messages) < 12


class Crash(Exception):
    pass


class CrashingHistory(InMemoryChatMessageHistory):
    """Fails on ``clear`` when asked to: a crash at the start of the prune."""

    crash_on_clear: bool = False

    def clear(self) -> None:
        if self.crash_on_clear:
            raise Crash("clear")
        super().clear()


class CrashingStore(InMemoryStore):
    """Fails on the n-th put from now when asked to: a crash before the rebased state is
    stored."""

    def __init__(self) -> None:
        super().__init__()
        self.puts_left: int | None = None

    def batch(self, ops: Iterable[Op]) -> list[Result]:
        ops = list(ops)
        if self.puts_left is not None and any(isinstance(op, PutOp) for op in ops):
            self.puts_left -= 1
            if self.puts_left == 0:
                self.puts_left = None
                raise Crash("put")
        return super().batch(ops)


def assert_each_question_once(history: ManagedChatMessageHistory, asked: int) -> None:
    state = history.state
    assert state is not None
    backing = history.history.messages
    start = min(state.folded, len(backing))
    unfolded = questions_in(backing[start:]) if state.folded_key in ids(backing) else None
    if unfolded is None:  # the folded messages are gone: the summary stands for all before
        unfolded = questions_in(backing)
    summarized = covered(summary_text(history))
    assert unfolded | summarized == set(range(asked)) and not unfolded & summarized


@pytest.mark.parametrize("crash", ["clear", "rebased-put"])
def test_a_crash_while_pruning_loses_no_fold_and_the_next_turn_recovers(crash: str) -> None:
    backing, store = CrashingHistory(), CrashingStore()
    history = managed(backing, store=store, prune_backing=True)
    reference = managed()
    asked = 0
    while (history.state.folds if history.state else 0) < 1:
        history.add_messages(turn(asked))
        reference.add_messages(turn(asked))
        asked += 1
    folds = history.state.folds  # type: ignore[union-attr]
    # the turn that folds next crashes in the middle of its prune
    for i in range(asked, asked + 20):
        backing.crash_on_clear = crash == "clear"
        store.puts_left = 2 if crash == "rebased-put" else None  # 1: the state, 2: rebased
        try:
            history.add_messages(turn(i))
        except Crash:
            break
        finally:
            backing.crash_on_clear, store.puts_left = False, None
        reference.add_messages(turn(i))
    else:
        pytest.fail("no fold happened")
    reference.add_messages(turn(i))
    asked = i + 1
    state = history.state
    assert state is not None and state.folds == folds + 1  # the fold was stored first
    assert history.summary == reference.summary
    assert_each_question_once(history, asked)
    assert history.messages == reference.messages
    for i in range(asked, asked + 12):  # and the conversation goes on as if nothing happened
        history.add_messages(turn(i))
        reference.add_messages(turn(i))
        assert_each_question_once(history, i + 1)
        assert history.summary == reference.summary
        assert history.messages == reference.messages
    assert history.state is not None and history.state.folded == 0


def test_prune_backing_also_prunes_messages_written_without_ids() -> None:
    """A backing history written before the wrapper (no ids): the folded ones still go."""
    backing = InMemoryChatMessageHistory()
    for i in range(10):
        backing.add_messages([HumanMessage(question_text(i, "old")), AIMessage(f"answer {i}")])
    history = managed(backing, prune_backing=True)
    history.add_messages(turn(10, "new"))
    state = history.state
    assert state is not None and state.folds == 1 and state.folded == 0
    left = history.history.messages
    summarized = covered(summary_text(history))
    kept = {int(str(m.content).split(":")[0].split()[1]) for m in left if m.type == "human"}
    assert kept | summarized == set(range(11)) and not kept & summarized
    assert [m.id for m in left[:-2]] == [None] * (len(left) - 2)  # survivors keep no id


def test_memory_budget_exceeded_stores_the_fold_before_raising() -> None:
    strategy = SummaryBuffer(
        400,
        summarizer=summarizer,
        max_summary_tokens=60,
        min_messages=1,
        policy=FoldPolicy(overflow="error"),
    )
    history = managed(strategy=strategy)
    for i in range(4):
        history.add_messages(turn(i, "a"))
    before = history.state
    assert before is not None and before.folds == 1
    huge = HumanMessage("question 9: marker=a " + "huge " * 300)
    with pytest.raises(MemoryBudgetExceeded) as raised:
        history.add_messages([huge])
    after = history.state
    assert after is not None and raised.value.state == after
    assert after.folds == 2 and covered(summary_text(history)) == {0, 1, 2, 3}
    assert history.history.messages[-1].content == huge.content  # and the message is kept


def test_clear_removes_the_backing_messages_and_the_state_of_this_key_only() -> None:
    store = InMemoryStore()
    one = managed(store=store, key=key_for("one"))
    two = managed(store=store, key=key_for("two"))
    for i in range(10):
        one.add_messages(turn(i, "one"))
        two.add_messages(turn(i, "two"))
    one.clear()
    assert one.history.messages == [] and one.state is None and one.messages == []
    assert two.state is not None and two.summary and len(two.history.messages) == 20
    asyncio.run(two.aclear())
    assert two.history.messages == [] and two.state is None
    assert store.search(("langmem_ext",)) == []


# --- 3. sync and async --------------------------------------------------------------------


@pytest.mark.parametrize("prune", [False, True], ids=["keep", "prune"])
def test_sync_and_async_paths_give_identical_results(prune: bool) -> None:
    def sync_run() -> list[Any]:
        history = managed(prune_backing=prune)
        out = []
        for i in range(20):
            history.add_messages(turn(i))
            out.append(([dump_message(m) for m in history.messages], history.state))
        return [*out, [dump_message(m) for m in history.history.messages]]

    async def async_run() -> list[Any]:
        history = managed(prune_backing=prune)
        out = []
        for i in range(20):
            await history.aadd_messages(turn(i))
            view = await history.aget_messages()
            out.append(([dump_message(m) for m in view], await history.aget_state()))
        return [*out, [dump_message(m) for m in await history.history.aget_messages()]]

    expected = sync_run()
    assert asyncio.run(async_run()) == expected
    assert expected[-2][1].folds >= 3


async def test_the_async_path_is_async_throughout() -> None:
    calls: list[int] = []

    async def summarize(prompt: list[BaseMessage]) -> str:  # serves the async API only
        calls.append(1)
        return summarizer(prompt)

    store = RecordingStore()
    history = managed(
        AsyncOnlyHistory(), store=store, strategy=make_strategy(summarize), prune_backing=True
    )
    for i in range(12):
        await history.aadd_messages(turn(i))
        assert is_valid(await history.aget_messages())
    assert calls and (await history.aget_state()) is not None
    await history.aclear()
    assert {mode for mode, _ in store.ops} == {"async"}


# --- 4. identity: keys, isolation ---------------------------------------------------------


@pytest.mark.parametrize(
    ("one", "two"),
    [
        (MemoryKey("a:b", "c", "s"), MemoryKey("a", "b:c", "s")),  # collide under naive ":" joining
        (MemoryKey("t", "a/b", "c"), MemoryKey("t", "a", "b/c")),
        (MemoryKey("t", "u", "a.b"), MemoryKey("t", "u.a", "b")),
        (MemoryKey("acme", "u1", "s1"), MemoryKey("acme", "u1", "s2")),  # sessions
        (MemoryKey("acme", "u1", "s1"), MemoryKey("acme", "u2", "s1")),  # users
        (MemoryKey("acme", "u1", "s1"), MemoryKey("other", "u1", "s1")),  # tenants
    ],
    ids=["colon", "slash", "dot", "session", "user", "tenant"],
)
def test_different_keys_on_one_store_never_read_each_others_summary(
    one: MemoryKey, two: MemoryKey
) -> None:
    store = InMemoryStore()
    first = managed(store=store, key=one)
    second = managed(store=store, key=two)
    for i in range(12):
        first.add_messages(turn(i, "alpha"))
    assert first.summary and markers(summary_text(first)) == {"alpha"}
    assert second.state is None and second.summary == {}
    assert "alpha" not in str(second.messages)
    for i in range(8):
        second.add_messages(turn(i, "beta"))
    assert markers(summary_text(second)) == {"beta"}
    assert markers(summary_text(first)) == {"alpha"}
    assert markers(str(first.messages)) == {"alpha"} and markers(str(second.messages)) == {"beta"}
    assert first.namespace != second.namespace
    assert {item.namespace for item in store.search(("langmem_ext",))} == {
        first.namespace,
        second.namespace,
    }


_part = st.text(min_size=1, max_size=8, alphabet=st.sampled_from("ab:/.%-_ é"))
_keys = st.builds(MemoryKey, _part, _part, _part)


@given(_keys, _keys)
def test_distinct_keys_have_distinct_namespaces_and_encodings(
    one: MemoryKey, two: MemoryKey
) -> None:
    assert MemoryKey.decode(one.encode()) == one
    assert (one.namespace("history") == two.namespace("history")) == (one == two)
    assert (one.encode() == two.encode()) == (one == two)
    assert all(label and "." not in label for label in one.namespace("history"))


def test_from_config_reads_the_key_and_require_explicit_key_fails_closed() -> None:
    backing, strategy = InMemoryChatMessageHistory(), make_strategy()
    config = {"configurable": {"tenant_id": "acme", "user_id": 42, "session_id": "s1"}}
    history = ManagedChatMessageHistory.from_config(
        backing, strategy, config, require_explicit_key=True
    )
    assert history.key == MemoryKey("acme", "42", "s1")
    assert history.namespace == ("langmem_ext", "history", "acme", "42", "s1")
    by_thread = {"configurable": {"tenant_id": "acme", "user_id": "u", "thread_id": "t"}}
    assert ManagedChatMessageHistory(backing, strategy, config=by_thread).key.session == "t"

    partial = {"configurable": {"session_id": "s1"}}
    assert ManagedChatMessageHistory.from_config(backing, strategy, partial).key == MemoryKey(
        session="s1"
    )
    with pytest.raises(MissingKeyError, match=r"tenant, user not given") as raised:
        ManagedChatMessageHistory.from_config(backing, strategy, partial, require_explicit_key=True)
    assert raised.value.missing == ("tenant", "user")
    assert isinstance(raised.value, LangmemExtError)
    with pytest.raises(MissingKeyError):  # no key, no config: nothing explicit at all
        ManagedChatMessageHistory(backing, strategy, require_explicit_key=True)
    with pytest.raises(MissingKeyError):
        ManagedChatMessageHistory.from_config(backing, strategy, None, require_explicit_key=True)
    assert ManagedChatMessageHistory(backing, strategy).key == MemoryKey()


# --- 5. bad input --------------------------------------------------------------------------


def test_bad_input_fails_with_a_clear_exception() -> None:
    backing, strategy = InMemoryChatMessageHistory(), make_strategy()
    with pytest.raises(TypeError, match=r"BaseChatMessageHistory.*got list"):
        ManagedChatMessageHistory([], strategy)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="already a ManagedChatMessageHistory"):
        ManagedChatMessageHistory(ManagedChatMessageHistory(backing, strategy), strategy)
    with pytest.raises(TypeError, match=r"langmem_ext strategy.*got function"):
        ManagedChatMessageHistory(backing, summarizer)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"BaseStore.*got dict"):
        ManagedChatMessageHistory(backing, strategy, store={})  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="MemoryKey, got tuple"):
        ManagedChatMessageHistory(backing, strategy, key=("a", "b", "c"))  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="either key= or config="):
        ManagedChatMessageHistory(backing, strategy, key=MemoryKey(), config={})
    with pytest.raises(ValueError, match="TokenBudget does not summarize"):
        ManagedChatMessageHistory(backing, TokenBudget(100), prune_backing=True)
    with pytest.raises(TypeError, match="prune_backing must be a bool"):
        ManagedChatMessageHistory(backing, strategy, prune_backing="yes")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="id_factory must be callable"):
        ManagedChatMessageHistory(backing, strategy, id_factory="x")  # type: ignore[arg-type]

    history = ManagedChatMessageHistory(backing, strategy, id_factory=lambda m: "")
    with pytest.raises(TypeError, match="sequence of BaseMessage, got str"):
        history.add_messages("hello")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"messages\[1\] must be a BaseMessage, got dict"):
        history.add_messages([HumanMessage("a"), {"role": "user"}])  # type: ignore[list-item]
    with pytest.raises(TypeError, match="non-empty str"):
        history.add_messages([HumanMessage("a")])
    history.add_messages([])  # nothing to add: nothing runs, nothing is written
    assert history.state is None
    with pytest.raises(AttributeError, match="cannot be assigned"):
        history.messages = []
    assert backing.messages == []  # nothing was appended by the failed calls


def test_a_state_written_by_a_newer_version_is_refused_not_misread() -> None:
    store = InMemoryStore()
    history = managed(store=store)
    store.put(history.namespace, STATE_ITEM, {**MemoryState().to_dict(), "version": 99})
    with pytest.raises(ValueError, match="newer than this langmem_ext"):
        history.messages  # noqa: B018
    with pytest.raises(ValueError, match="newer"):
        history.add_messages(turn(0))


def test_the_module_examples_run() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        result = doctest.testmod(langmem_ext.integrations.history)
    assert result.attempted > 0 and result.failed == 0


# --- 6. RunnableWithMessageHistory over real backing histories and stores -------------------


@pytest.fixture(scope="module")
def pg_dsn(pg_schema_dsn: str) -> str:
    """The shared fresh schema with the store's and the chat history's tables set up once, so
    concurrent workers never race on the migrations."""
    import psycopg
    from langchain_postgres import PostgresChatMessageHistory
    from langgraph.store.postgres import PostgresStore

    with PostgresStore.from_conn_string(pg_schema_dsn) as store:
        store.setup()
    with psycopg.connect(pg_schema_dsn) as conn:
        PostgresChatMessageHistory.create_tables(conn, PG_TABLE)
    return pg_schema_dsn


def reference(sessions: Sequence[tuple[str, str]], turns: range, prune: bool) -> dict[str, Any]:
    """The same conversation in this process on an InMemoryStore and in-memory histories."""
    backings: dict[str, InMemoryChatMessageHistory] = {}
    run = Run(
        InMemoryStore(), lambda s: backings.setdefault(s, InMemoryChatMessageHistory()), prune=prune
    )
    return run_sessions(run, sessions, turns)


def test_runnable_with_message_history_sends_the_view_to_the_model() -> None:
    backings: dict[str, InMemoryChatMessageHistory] = {}
    summarize = RecordingSummarizer()
    run = Run(
        InMemoryStore(),
        lambda s: backings.setdefault(s, InMemoryChatMessageHistory()),
        prune=False,
        strategy=make_strategy(summarize),
    )
    for i in range(14):
        before = run.history("s").messages
        run.turn(i, "s", "alpha")
        sent = run.views["s"][-1]
        assert sent[0] == ["system", None, SYSTEM_PROMPT]
        assert sent[1:-1] == [dump_message(m) for m in before]  # exactly the view
        assert sent[-1] == ["human", None, question_text(i, "alpha")]
        assert is_valid([*before, HumanMessage(question_text(i, "alpha"))])
    backing = backings["s"].messages
    assert ids(backing) == [f"alpha-{k}{i}" for i in range(14) for k in ("q", "a")]
    state = run.history("s").state
    assert state is not None and state.folds == summarize.calls >= 3
    assert run.views["s"][-1][1][1] == "langmem-ext-summary"
    # reserve_tokens keeps each whole request (view + the new question) within max_tokens
    counter, budget = run.strategy.counter, run.strategy.config.max_tokens
    assert max(counter.count_messages(sent) for sent in run.requests["s"]) <= budget


@pytest.mark.parametrize("as_list", [False, True], ids=["str", "messages"])
def test_runnable_with_message_history_without_a_history_key_stores_only_the_new_turn(
    as_list: bool,
) -> None:
    """Without ``history_messages_key`` the chain's input is the view plus the new messages,
    and RunnableWithMessageHistory works out the new ones by the view's length: the summary
    must never be written back into the backing history."""
    backing, store, model = InMemoryChatMessageHistory(), InMemoryStore(), recording_chat()
    strategy = make_strategy()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        chain = RunnableWithMessageHistory(
            model,
            lambda session: ManagedChatMessageHistory(
                backing, strategy, store=store, key=key_for(session), id_factory=message_id
            ),
        )
    config = {"configurable": {"session_id": "s"}}
    for i in range(14):
        text = question_text(i, "alpha")
        before = ManagedChatMessageHistory(
            backing, strategy, store=store, key=key_for("s")
        ).messages
        chain.invoke([HumanMessage(text)] if as_list else text, config)  # type: ignore[arg-type]
        assert model.requests[-1] == [*before, HumanMessage(text)]
    assert ids(backing.messages) == [f"alpha-{k}{i}" for i in range(14) for k in ("q", "a")]
    state = ManagedChatMessageHistory(backing, strategy, store=store, key=key_for("s")).state
    assert state is not None and state.folds >= 3
    assert model.requests[-1][0].id == "langmem-ext-summary"


@pytest.fixture
def backing_for(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Any]:
    kind = request.param
    if kind == "memory":
        backings: dict[str, InMemoryChatMessageHistory] = {}
        yield lambda s: backings.setdefault(s, InMemoryChatMessageHistory())
    elif kind == "sql":
        from langchain_community.chat_message_histories import SQLChatMessageHistory
        from sqlalchemy import create_engine

        engine = create_engine(f"sqlite:///{tmp_path / 'history.sqlite'}")
        yield lambda s: SQLChatMessageHistory(session_id=s, connection=engine)
        engine.dispose()
    else:
        import psycopg
        from langchain_postgres import PostgresChatMessageHistory

        dsn = request.getfixturevalue("pg_dsn")
        with psycopg.connect(dsn) as conn:
            yield lambda s: PostgresChatMessageHistory(
                PG_TABLE, pg_session(s), sync_connection=conn
            )


@pytest.fixture
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Any]:
    kind = request.param
    if kind == "memory":
        yield InMemoryStore()
    elif kind == "sqlite":
        from langgraph.store.sqlite import SqliteStore

        conn = sqlite3.connect(
            str(tmp_path / "store.sqlite"), check_same_thread=False, isolation_level=None
        )
        sqlite_store = SqliteStore(conn)
        sqlite_store.setup()
        yield sqlite_store
        conn.close()
    else:
        from langgraph.store.postgres import PostgresStore

        with PostgresStore.from_conn_string(request.getfixturevalue("pg_dsn")) as pg_store:
            yield pg_store


@pytest.mark.parametrize("store", ["memory", "sqlite", "postgres"], indirect=True)
@pytest.mark.parametrize("backing_for", ["memory", "sql", "postgres"], indirect=True)
def test_chain_over_every_backing_history_and_store_matches_the_in_memory_run(
    backing_for: Any, store: Any, request: pytest.FixtureRequest
) -> None:
    suffix = request.node.callspec.id
    sessions = [(f"{RUN}-{suffix}-1", "alpha"), (f"{RUN}-{suffix}-2", "beta")]
    turns = range(10)
    got = run_sessions(Run(store, backing_for, prune=True), sessions, turns)
    expected = reference(sessions, turns, prune=True)
    assert got == expected
    for session, marker in sessions:  # each session saw only its own conversation
        assert MemoryState.from_dict(got[session]["state"]).folds >= 2
        assert markers(json.dumps(got[session])) == {marker}


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
def test_async_chain_on_async_stores_matches_the_sync_run(
    backend: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """ainvoke: AsyncSqliteStore + an aiosqlite SQLChatMessageHistory, or AsyncPostgresStore +
    an async PostgresChatMessageHistory (run in the worker's own event loop)."""
    target = str(tmp_path) if backend == "sqlite" else request.getfixturevalue("pg_dsn")
    sessions = [(f"{RUN}-async-{backend}", "gamma")]
    out = run_backend(backend, target, sessions, range(10), prune=True, use_async=True)
    assert out == reference(sessions, range(10), prune=True)


async def test_async_chain_on_memory_matches_the_sync_run() -> None:
    backings: dict[str, InMemoryChatMessageHistory] = {}
    run = Run(
        InMemoryStore(), lambda s: backings.setdefault(s, InMemoryChatMessageHistory()), prune=True
    )
    sessions = [("a", "alpha"), ("b", "beta")]
    assert await arun_sessions(run, sessions, range(10)) == reference(sessions, range(10), True)


# --- 7. a real second process continues with the same summary -------------------------------


def worker_args(backend: str, target: str, start: int, stop: int, *sessions: str) -> list[str]:
    args = [sys.executable, str(WORKER), "--backend", backend, "--target", target]
    args += ["--start", str(start), "--stop", str(stop)]
    for session in sessions:
        args += ["--session", session]
    return args


def spawn(args: list[str]) -> subprocess.Popen[str]:
    return subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def result(process: subprocess.Popen[str]) -> dict[str, Any]:
    out, err = process.communicate(timeout=120)
    assert process.returncode == 0, f"worker failed ({process.returncode}):\n{err}"
    return json.loads(out)  # type: ignore[no-any-return]


@pytest.mark.parametrize(
    ("backend", "resume"),
    [("sqlite", ""), ("sqlite", "--async"), ("postgres", "")],
    ids=["sqlite", "sqlite-resumed-async", "postgres"],
)
def test_a_second_process_continues_with_the_same_summary(
    backend: str, resume: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    turns, split = 16, 7
    session = f"{RUN}-restart-{backend}{resume}"
    if backend == "sqlite":
        whole_target, split_target = str(tmp_path / "whole"), str(tmp_path / "split")
        whole_session = split_session = session
    else:  # one schema: two session names, compared by content
        whole_target = split_target = request.getfixturevalue("pg_dsn")
        whole_session, split_session = f"{session}-whole", f"{session}-split"

    def args(target: str, name: str, start: int, stop: int, *extra: str) -> list[str]:
        return [*worker_args(backend, target, start, stop, f"{name}=alpha"), "--prune", *extra]

    whole_run = spawn(args(whole_target, whole_session, 0, turns))
    first = result(spawn(args(split_target, split_session, 0, split)))[split_session]
    resumed_args = args(split_target, split_session, split, turns, *([resume] if resume else []))
    resumed = result(spawn(resumed_args))[split_session]
    whole = result(whole_run)[whole_session]

    assert resumed["state"] == whole["state"]
    assert resumed["backing"] == whole["backing"]  # type, id and content
    assert first["views"] + resumed["views"] == whole["views"]
    assert whole == reference([(whole_session, "alpha")], range(turns), prune=True)[whole_session]
    # the second process really continued a summary made by the first one
    before, after = MemoryState.from_dict(first["state"]), MemoryState.from_dict(whole["state"])
    assert before.folds >= 1 and after.folds > before.folds
    first_summary, last_summary = before.sections["conversation"], after.sections["conversation"]
    assert covered(first_summary) < covered(last_summary)
    # and its first request already carried the first process's summary, read from the store
    assert resumed["views"][0][1][:2] == ["human", "langmem-ext-summary"]
    assert covered(resumed["views"][0][1][2]) == covered(first_summary)
    kept = {int(m[1].split("-q")[1]) for m in whole["backing"] if "-q" in m[1]}
    assert covered(last_summary) == set(range(turns)) - kept


# --- 8. invariants over random batches -------------------------------------------------------


@settings(max_examples=25)
@given(
    batches=st.lists(st.integers(1, 3), min_size=1, max_size=12),
    prune=st.booleans(),
)
def test_any_sequence_of_writes_keeps_every_question_exactly_once(
    batches: list[int], prune: bool
) -> None:
    store = RecordingStore()
    history = managed(store=store, prune_backing=prune)
    asked = 0
    for size in batches:
        messages = [m for i in range(asked, asked + size) for m in turn(i)]
        history.add_messages(messages)
        asked += size
        writes = store.writes
        view = history.messages
        assert store.writes == writes
        assert is_valid(view) and view[-1].id == f"alpha-a{asked - 1}"
        state = history.state
        assert state is not None
        backing = history.history.messages
        unfolded = backing[state.folded :]
        summarized = covered(summary_text(history))
        assert questions_in(unfolded) | summarized == set(range(asked))
        assert not questions_in(unfolded) & summarized
        if prune:
            assert state.folded == 0
        else:
            assert len(backing) == 2 * asked
