"""``langmem_ext.compat.ConversationSummaryBufferMemory`` against langchain-classic's own class.

Parity: the same scripted conversations and the same fake models through both classes give the
same ``load_memory_variables`` at every turn (string and message forms), the same summarizer
calls with the same prompts, sync and async, and the same prompts inside ``ConversationChain``.

Fixed legacy bugs, each pinned with legacy's behaviour next to ours:
(a) a database-backed history is re-summarized every turn (langchain#3072, #10078);
(b) the summary lives only in the Python object (#5053, #14822);
(c) the whole buffer is recounted once per popped message;
(d) the async path does sync I/O;
and a summarizer failure loses the popped messages of an in-memory history.

The fakes and scripts are in ``tests/compat_worker.py``, which also runs as a subprocess (a real
restart, and an interpreter where ``langchain_classic`` cannot be imported).
"""

from __future__ import annotations

import asyncio
import copy
import json
import pickle
import subprocess
import sys
import threading
import warnings
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from _workers_common import AsyncOnlyHistory
from compat_worker import (
    AsyncOnlyModel,
    RecordingModel,
    SqliteHistory,
    aviews,
    make_model,
    new_lines_of,
    run,
    script,
    split_tokens,
    summarizer,
    tags_read,
    transcript_tags,
    views,
)
from langchain_core.chat_history import BaseChatMessageHistory, InMemoryChatMessageHistory
from langchain_core.messages import BaseMessage, HumanMessage, SystemMessage
from langchain_core.prompts import PromptTemplate
from langgraph.store.base import BaseStore
from langgraph.store.memory import InMemoryStore
from pydantic import ValidationError

from langmem_ext.compat import (
    HAS_CLASSIC,
    SUMMARY_PROMPT,
    ConversationSummaryBufferMemory,
    HistoryRewrittenWarning,
    StoredStateError,
    SummaryBufferState,
    UnpersistedSummaryWarning,
)
from langmem_ext.core.keys import MemoryKey
from langmem_ext.counting.local import ApproximateCounter

classic = pytest.importorskip("langchain_classic")
from langchain_classic.base_memory import BaseMemory  # noqa: E402
from langchain_classic.chains import ConversationChain  # noqa: E402
from langchain_classic.memory import (  # noqa: E402
    ConversationSummaryBufferMemory as LegacyMemory,
)
from langchain_classic.memory.prompt import SUMMARY_PROMPT as LEGACY_PROMPT  # noqa: E402

pytestmark = [
    pytest.mark.filterwarnings(
        "ignore::langchain_core._api.deprecation.LangChainDeprecationWarning"
    ),
    # database histories without a store, on purpose (see test_a_db_history_without_store_warns)
    pytest.mark.filterwarnings("ignore::langmem_ext.compat.UnpersistedSummaryWarning"),
]

WORKER = Path(__file__).resolve().parents[1] / "compat_worker.py"
KEY = MemoryKey("acme", "u1", "chat-1")


def legacy(**kwargs: Any) -> Any:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return LegacyMemory(**kwargs)


def stored(store: BaseStore) -> dict[str, Any]:
    """The state the memory keeps in ``store`` for ``KEY``."""
    item = store.get(KEY.namespace("summary_buffer"), "history")
    assert item is not None
    return item.value


def recorder(memory: Any) -> RecordingModel:
    """The memory's summarizer, a RecordingModel."""
    model = memory.llm
    assert isinstance(model, RecordingModel)
    return model


# --------------------------------------------------------------------------------------------
# API parity

PARITY = [
    # (id, seed, turns, max_token_limit, model kind, extra fields)
    ("long-prunes-every-turn", 1, 60, 40, "recording", {}),
    ("long-larger-limit", 2, 80, 150, "recording", {}),
    ("small-limit", 3, 30, 8, "recording", {}),
    ("limit-1", 4, 25, 1, "recording", {}),
    ("no-pruning-default-limit", 5, 20, 2000, "recording", {}),
    ("fake-list-chat-model", 6, 40, 30, "fakelist", {}),
    ("fake-list-llm", 7, 40, 30, "fakellm", {}),
    ("per-request-overhead", 8, 40, 50, "overhead", {}),
    (
        "prefixes-and-summary-class",
        9,
        30,
        25,
        "recording",
        {"human_prefix": "User", "ai_prefix": "Bot", "summary_message_cls": HumanMessage},
    ),
    (
        "custom-prompt-and-keys",
        10,
        30,
        25,
        "recording",
        {
            "prompt": PromptTemplate.from_template(
                "Summary so far: {summary}\nNew lines of conversation:\n{new_lines}\n\nNew summary:"
            ),
            "memory_key": "chat_history",
            "input_key": "question",
            "output_key": "answer",
        },
    ),
]


def _io(fields: dict[str, Any], human: str, ai: str) -> tuple[dict[str, Any], dict[str, str]]:
    if fields.get("input_key"):
        return {"question": human, "stop": None}, {"answer": ai, "other": "x"}
    return {"input": human}, {"response": ai}


@pytest.mark.parametrize(
    ("seed", "turns", "limit", "kind", "fields"),
    [p[1:] for p in PARITY],
    ids=[p[0] for p in PARITY],
)
def test_same_memory_variables_as_legacy_at_every_turn(
    seed: int, turns: int, limit: int, kind: str, fields: dict[str, Any]
) -> None:
    old = legacy(llm=summarizer(kind), max_token_limit=limit, **fields)
    new = ConversationSummaryBufferMemory(llm=summarizer(kind), max_token_limit=limit, **fields)
    assert new.memory_variables == old.memory_variables
    for t, (human, ai) in enumerate(script(seed, turns)):
        inputs, outputs = _io(fields, human, ai)
        old.save_context(inputs, outputs)
        new.save_context(inputs, outputs)
        assert views(new) == views(old), f"turn {t}"
        assert new.buffer == old.buffer
        assert new.moving_summary_buffer == old.moving_summary_buffer
    if isinstance(old.llm, RecordingModel):
        # the same summarizer calls, with the same prompts
        assert recorder(new).prompts == recorder(old).prompts
        assert len(recorder(old).prompts) > 0 or limit == 2000


@pytest.mark.parametrize(
    ("seed", "turns", "limit", "kind"),
    [(1, 50, 40, "recording"), (3, 25, 8, "fakellm"), (8, 30, 50, "overhead")],
)
async def test_async_same_memory_variables_as_legacy(
    seed: int, turns: int, limit: int, kind: str
) -> None:
    old = legacy(llm=summarizer(kind), max_token_limit=limit)
    new = ConversationSummaryBufferMemory(llm=summarizer(kind), max_token_limit=limit)
    sync = ConversationSummaryBufferMemory(llm=summarizer(kind), max_token_limit=limit)
    for t, (human, ai) in enumerate(script(seed, turns)):
        await old.asave_context({"input": human}, {"output": ai})
        await new.asave_context({"input": human}, {"output": ai})
        sync.save_context({"input": human}, {"output": ai})
        assert await aviews(new) == await aviews(old) == views(sync), f"turn {t}"
        assert await new.abuffer() == await old.abuffer()


def test_delete_pruned_leaves_the_same_history_as_legacy() -> None:
    """``delete_pruned=True``, in-memory history: ``chat_memory.messages`` too is legacy's."""
    old = legacy(llm=make_model(), max_token_limit=35)
    new = ConversationSummaryBufferMemory(llm=make_model(), max_token_limit=35, delete_pruned=True)
    for human, ai in script(12, 40):
        old.save_context({"input": human}, {"output": ai})
        new.save_context({"input": human}, {"output": ai})
        assert new.chat_memory.messages == old.chat_memory.messages
        assert views(new) == views(old)
    assert new.state.pruned == 0 and len(new.chat_memory.messages) < 80


def test_by_default_the_in_memory_history_keeps_every_message() -> None:
    new = ConversationSummaryBufferMemory(llm=make_model(), max_token_limit=35)
    turns = script(12, 40)
    for human, ai in turns:
        new.save_context({"input": human}, {"output": ai})
    assert [str(m.content).split()[0] for m in new.chat_memory.messages] == transcript_tags(turns)
    assert new.state.pruned > 0
    assert views(new)[1][1:] == new.chat_memory.messages[new.state.pruned :]


@pytest.mark.parametrize("use_async", [False, True], ids=["invoke", "ainvoke"])
async def test_conversation_chain_sees_the_same_prompts(use_async: bool) -> None:
    outputs: dict[str, list[str]] = {}
    seen: dict[str, list[str]] = {}
    for name, cls in (("legacy", legacy), ("ours", ConversationSummaryBufferMemory)):
        chat = make_model()  # the conversation model; its reply is a function of its prompt
        memory = cls(llm=make_model(), max_token_limit=30)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            chain = ConversationChain(llm=chat, memory=memory)
        replies = []
        for human, _ in script(13, 12):
            if use_async:
                result = await chain.ainvoke({"input": human})
            else:
                result = chain.invoke({"input": human})
            replies.append(result["response"])
        outputs[name], seen[name] = replies, chat.prompts
        assert recorder(memory).prompts, "the memory summarized"
    assert seen["ours"] == seen["legacy"]
    assert outputs["ours"] == outputs["legacy"]


def test_fields_defaults_and_prompt_match_legacy() -> None:
    assert SUMMARY_PROMPT.template == LEGACY_PROMPT.template
    assert SUMMARY_PROMPT.input_variables == LEGACY_PROMPT.input_variables
    ours = ConversationSummaryBufferMemory.model_fields
    for name, field in LegacyMemory.model_fields.items():
        assert name in ours, name
        if field.default_factory is None and name != "prompt":
            assert ours[name].default == field.default, name
    memory = ConversationSummaryBufferMemory(llm=make_model())
    assert memory.max_token_limit == 2000 and memory.memory_key == "history"
    assert isinstance(memory.chat_memory, InMemoryChatMessageHistory)
    assert memory.summary_message_cls is SystemMessage


def test_is_a_classic_base_memory_and_warns_no_deprecation() -> None:
    assert HAS_CLASSIC
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        memory = ConversationSummaryBufferMemory(llm=make_model())
    assert isinstance(memory, BaseMemory)
    assert [w for w in caught if "deprecated" in str(w.message)] == []


def test_works_without_langchain_classic() -> None:
    """In an interpreter where ``import langchain_classic`` fails, the class is a plain pydantic
    model with the same behaviour."""
    proc = subprocess.run(
        [sys.executable, str(WORKER), "--no-classic", "--stop", "14", "--limit", "30"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["has_classic"] is False and out["is_base_memory"] is False
    assert out["classic_imported"] is False
    expected = run(history=InMemoryChatMessageHistory(), start=0, stop=14, limit=30)
    assert {k: out[k] for k in ("string", "messages", "state")} == {
        k: expected[k] for k in ("string", "messages", "state")
    }
    assert out["state"]["pruned"] > 0


# --------------------------------------------------------------------------------------------
# (a) database-backed histories: each message summarized once


def test_db_history_each_message_is_summarized_exactly_once(tmp_path: Path) -> None:
    turns = script(21, 20)
    old = legacy(llm=make_model(), chat_memory=SqliteHistory(tmp_path / "l.db"), max_token_limit=40)
    new = ConversationSummaryBufferMemory(
        llm=make_model(), chat_memory=SqliteHistory(tmp_path / "o.db"), max_token_limit=40
    )
    reference = legacy(llm=make_model(), max_token_limit=40)  # legacy on an in-memory history
    for human, ai in turns:
        for memory in (old, new, reference):
            memory.save_context({"input": human}, {"output": ai})
        assert views(new) == views(reference)  # on a database, ours is what legacy is in memory

    legacy_reads = tags_read(recorder(old))
    ours = [tag for call in tags_read(recorder(new)) for tag in call]
    # legacy: every summarizer call re-reads the conversation from its first message
    assert len(legacy_reads) >= 15 and all(call[0] == "h000" for call in legacy_reads)
    assert Counter(tag for call in legacy_reads for tag in call)["h000"] == len(legacy_reads)
    # ours: every message read once, in order, and only messages that left the buffer
    assert len(ours) == len(set(ours)) == new.state.pruned
    assert ours == transcript_tags(turns)[: new.state.pruned]
    # legacy's buffer is the whole history (all 40 messages, far over the limit); ours fits
    assert len(views(old)[1]) == 41
    buffer = views(new)[1][1:]
    assert sum(len(m.content.split()) for m in buffer) <= 40
    # the database keeps every message
    assert len(new.chat_memory.messages) == 40


def test_langchain_community_sql_history(tmp_path: Path) -> None:
    community = pytest.importorskip("langchain_community.chat_message_histories")

    def history(name: str) -> BaseChatMessageHistory:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            history: BaseChatMessageHistory = community.SQLChatMessageHistory(
                session_id="s1", connection=f"sqlite:///{tmp_path / name}"
            )
            return history

    old = legacy(llm=make_model(), chat_memory=history("l.db"), max_token_limit=30)
    new = ConversationSummaryBufferMemory(
        llm=make_model(), chat_memory=history("o.db"), max_token_limit=30
    )
    reference = legacy(llm=make_model(), max_token_limit=30)
    for human, ai in script(22, 10):
        for memory in (old, new, reference):
            memory.save_context({"input": human}, {"output": ai})
    assert views(new) == views(reference)
    ours = [tag for call in tags_read(recorder(new)) for tag in call]
    assert len(ours) == len(set(ours)) > 0
    legacy_reads = tags_read(recorder(old))
    assert all(call[0] == "h000" for call in legacy_reads) and len(legacy_reads) >= 5
    # a new object on the same database and no store has no summary: it would re-read
    fresh = ConversationSummaryBufferMemory(llm=make_model(), chat_memory=history("o.db"))
    assert fresh.moving_summary_buffer == "" and fresh.state.pruned == 0


def test_migrating_a_long_legacy_history_folds_it_in_batches(tmp_path: Path) -> None:
    """A database history that legacy never pruned (bug a): the first prune folds its backlog in
    chained calls of at most ``summarize_batch_tokens``; a failure keeps the batches done."""
    history = SqliteHistory(tmp_path / "h.db")
    old = legacy(llm=make_model(), chat_memory=history, max_token_limit=40)
    turns = script(23, 40)
    for human, ai in turns[:30]:
        old.save_context({"input": human}, {"output": ai})
    assert len(views(old)[1]) == 61  # the whole history and a summary that re-read it all
    model = make_model(fail_at_call=3)
    store = InMemoryStore()
    new = ConversationSummaryBufferMemory(
        llm=model,
        chat_memory=history,
        max_token_limit=40,
        summarize_batch_tokens=100,
        store=store,
        key=KEY,
    )
    with pytest.raises(RuntimeError, match="summarizer unavailable"):
        new.save_context({"input": turns[30][0]}, {"output": turns[30][1]})
    assert len(model.prompts) == 3 and 0 < new.state.pruned < 50  # three batches kept ...
    assert stored(store) == new.state.to_dict()  # ... and stored
    for human, ai in turns[31:]:
        new.save_context({"input": human}, {"output": ai})
    calls = tags_read(model)
    read = [tag for call in calls for tag in call]
    assert read == transcript_tags(turns)[: new.state.pruned]  # each message once, in order
    # each call read at most 100 tokens of messages (a line's words, "Human:" included)
    assert len(calls) > 5
    for prompt in model.prompts:
        assert sum(len(line.split()) for line in new_lines_of(prompt).splitlines()) <= 100
    assert sum(len(m.content.split()) for m in views(new)[1][1:]) <= 40


# --------------------------------------------------------------------------------------------
# (b) the summary and the watermark persist in a store


def test_store_a_new_object_continues_with_the_same_summary(tmp_path: Path) -> None:
    store = InMemoryStore()
    turns = script(31, 24)
    history = SqliteHistory(tmp_path / "h.db")

    def memory() -> ConversationSummaryBufferMemory:
        return ConversationSummaryBufferMemory(
            llm=make_model(), chat_memory=history, max_token_limit=40, store=store, key=KEY
        )

    first = memory()
    for human, ai in turns[:12]:
        first.save_context({"input": human}, {"output": ai})
    assert first.state.pruned > 0 and first.moving_summary_buffer
    second = memory()
    assert second.moving_summary_buffer == ""  # nothing read before the first operation
    assert views(second) == views(first)
    assert second.moving_summary_buffer == first.moving_summary_buffer
    assert second.state == first.state
    assert stored(store) == first.state.to_dict()
    for human, ai in turns[12:]:
        memory().save_context({"input": human}, {"output": ai})  # a new object per turn
    single = ConversationSummaryBufferMemory(
        llm=make_model(), chat_memory=SqliteHistory(tmp_path / "single.db"), max_token_limit=40
    )
    for human, ai in turns:
        single.save_context({"input": human}, {"output": ai})
    assert views(memory()) == views(single)

    # legacy: a new object on the same history starts from an empty summary and re-reads
    old = legacy(llm=make_model(), chat_memory=history, max_token_limit=40)
    assert old.moving_summary_buffer == ""
    assert views(old)[1][0].content.startswith("h000")


def test_restart_in_new_processes_sqlite_store(tmp_path: Path) -> None:
    """Three processes continue one conversation on SQLite (history and SqliteStore), the last
    one async; the result is a single uninterrupted run's."""
    common = ["--history", str(tmp_path / "h.db"), "--store", str(tmp_path / "s.db")]
    common += ["--session", "chat-9", "--limit", "40", "--stop"]
    out: dict[str, Any] = {}
    for start, stop, extra in ((0, 8, []), (8, 16, []), (16, 24, ["--async"])):
        proc = subprocess.run(
            [sys.executable, str(WORKER), *common, str(stop), "--start", str(start), *extra],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert proc.returncode == 0, proc.stderr
        out = json.loads(proc.stdout)
    single = run(history=SqliteHistory(tmp_path / "single.db"), start=0, stop=24, limit=40)
    assert {k: out[k] for k in ("string", "messages", "state")} == {
        k: single[k] for k in ("string", "messages", "state")
    }
    assert out["state"]["pruned"] > 16


async def test_async_with_a_sync_only_store(tmp_path: Path) -> None:
    """SqliteStore has no async API; the async path runs its calls in a thread."""
    import sqlite3

    from langgraph.store.sqlite import SqliteStore

    conn = sqlite3.connect(tmp_path / "s.db", check_same_thread=False, isolation_level=None)
    store = SqliteStore(conn)
    store.setup()
    memory = ConversationSummaryBufferMemory(
        llm=make_model(), max_token_limit=30, store=store, key=KEY
    )
    for human, ai in script(32, 10):
        await memory.asave_context({"input": human}, {"output": ai})
    assert stored(store)["summary"] == memory.moving_summary_buffer != ""
    await memory.aclear()
    assert stored(store)["summary"] == ""
    conn.close()


def test_keys_are_isolated() -> None:
    store = InMemoryStore()
    a = ConversationSummaryBufferMemory(
        llm=make_model(), max_token_limit=20, store=store, key=MemoryKey("t", "u", "a")
    )
    b = ConversationSummaryBufferMemory(
        llm=make_model(), max_token_limit=20, store=store, key=MemoryKey("t", "u", "b")
    )
    for human, ai in script(33, 6):
        a.save_context({"input": human}, {"output": ai})
    assert b.load_memory_variables({}) == {"history": ""}
    assert b.moving_summary_buffer == "" and a.moving_summary_buffer != ""


def test_an_assigned_summary_is_used_and_persisted() -> None:
    """Legacy users restore a summary by assigning ``moving_summary_buffer``; that still works,
    and with a store the assignment is written there."""
    store = InMemoryStore()
    memory = ConversationSummaryBufferMemory(
        llm=make_model(), max_token_limit=20, store=store, key=KEY
    )
    memory.moving_summary_buffer = "restored summary"
    again = ConversationSummaryBufferMemory(
        llm=make_model(), max_token_limit=20, store=store, key=KEY
    )
    assert views(memory)[0] == "System: restored summary"  # written at this first operation
    assert views(again)[0] == "System: restored summary"
    for human, ai in script(34, 4):
        memory.save_context({"input": human}, {"output": ai})
    assert "Current summary:\nrestored summary\n" in recorder(memory).prompts[0]
    # an explicit constructor value wins over the stored one, and is stored
    explicit = ConversationSummaryBufferMemory(
        llm=make_model(),
        chat_memory=memory.chat_memory,
        store=store,
        key=KEY,
        moving_summary_buffer="explicit",
    )
    assert views(explicit)[0].startswith("System: explicit")
    assert stored(store)["summary"] == "explicit"


# --------------------------------------------------------------------------------------------
# (c) each message counted once


def test_each_message_is_counted_once_over_50_turns() -> None:
    old_model, new_model = make_model(), make_model()
    old = legacy(llm=old_model, max_token_limit=60)
    new = ConversationSummaryBufferMemory(llm=new_model, max_token_limit=60)
    for human, ai in script(41, 50):
        old.save_context({"input": human}, {"output": ai})
        new.save_context({"input": human}, {"output": ai})
        assert views(new) == views(old)  # the same pruning decisions
    # ours: 100 messages, each counted once, + [m] and [m, m] once to measure the overhead
    assert new_model.count_calls == 100 + 2
    assert new_model.counted_messages == 100 + 3
    # legacy: one count of the whole buffer per turn plus one per popped message
    assert old_model.count_calls == 50 + (100 - len(old.chat_memory.messages))
    assert old_model.counted_messages > 5 * new_model.counted_messages


def test_db_history_new_object_per_request_counts_and_summarizes_once(tmp_path: Path) -> None:
    """The usual web-handler pattern: a memory object per request on a database history. The
    counts are shared by every memory on the same model object; the watermark is in the store."""
    model, old_model = make_model(), make_model()
    store = InMemoryStore()
    turns = script(42, 30)
    for human, ai in turns:
        ConversationSummaryBufferMemory(
            llm=model,
            chat_memory=SqliteHistory(tmp_path / "o.db"),
            max_token_limit=60,
            store=store,
            key=KEY,
        ).save_context({"input": human}, {"output": ai})
        legacy(
            llm=old_model, chat_memory=SqliteHistory(tmp_path / "l.db"), max_token_limit=60
        ).save_context({"input": human}, {"output": ai})
    assert model.count_calls == 60 + 2
    read = [tag for call in tags_read(model) for tag in call]
    assert read == transcript_tags(turns)[: len(read)] and len(read) > 40
    # legacy recounts the whole (never pruned) history once per popped message: quadratic
    assert old_model.counted_messages > 50 * model.counted_messages
    assert len(tags_read(old_model)[-1]) > 50  # and its last summary call re-read 50+ messages


def test_a_db_history_without_store_warns(tmp_path: Path) -> None:
    history = SqliteHistory(tmp_path / "h.db")
    with pytest.warns(UnpersistedSummaryWarning, match="Pass store=") as caught:
        ConversationSummaryBufferMemory(llm=make_model(), chat_memory=history)
    assert caught[0].filename == __file__  # points at the caller's line
    with warnings.catch_warnings():
        warnings.simplefilter("error", UnpersistedSummaryWarning)
        ConversationSummaryBufferMemory(llm=make_model())  # in memory: nothing outlives it
        ConversationSummaryBufferMemory(
            llm=make_model(), chat_memory=history, store=InMemoryStore(), key=KEY
        )


def test_a_token_counter_replaces_the_models_counting() -> None:
    model = make_model()
    memory = ConversationSummaryBufferMemory(
        llm=model, max_token_limit=40, token_counter=ApproximateCounter()
    )
    for human, ai in script(43, 15):
        memory.save_context({"input": human}, {"output": ai})
    assert model.count_calls == 0 and memory.state.pruned > 0


# --------------------------------------------------------------------------------------------
# (d) async throughout


async def test_async_path_never_does_sync_io() -> None:
    model = AsyncOnlyModel(custom_get_token_ids=split_tokens)
    memory = ConversationSummaryBufferMemory(
        llm=model, chat_memory=AsyncOnlyHistory(), max_token_limit=30
    )
    for human, ai in script(51, 12):
        await memory.asave_context({"input": human}, {"output": ai})
    assert model.prompts and memory.state.pruned > 0
    # counting (network I/O for some providers) ran in a worker thread, not on the loop
    assert model.count_threads and threading.get_ident() not in model.count_threads
    _, messages = await aviews(memory)
    assert messages[0].content == memory.moving_summary_buffer
    await memory.aclear()
    assert await aviews(memory) == ("", [])

    # legacy: asave_context -> aprune reads `chat_memory.messages` synchronously ...
    old = legacy(
        llm=AsyncOnlyModel(custom_get_token_ids=split_tokens),
        chat_memory=AsyncOnlyHistory(),
        max_token_limit=30,
    )
    with pytest.raises(AssertionError, match="sync read of the history"):
        await old.asave_context({"input": "hi"}, {"output": "hello"})
    # ... and counts on the event loop's thread
    counting = make_model()
    old = legacy(llm=counting, max_token_limit=30)
    await old.asave_context({"input": "hi"}, {"output": "hello"})
    assert counting.count_threads == {threading.get_ident()}


# --------------------------------------------------------------------------------------------
# failures and rewritten histories: nothing lost


def test_a_summarizer_failure_loses_nothing() -> None:
    turns = script(61, 12)
    old = legacy(llm=make_model(), max_token_limit=30)
    new = ConversationSummaryBufferMemory(llm=make_model(), max_token_limit=30)
    for memory in (old, new):
        for human, ai in turns[:6]:
            memory.save_context({"input": human}, {"output": ai})
        recorder(memory).fail_calls = 1
        with pytest.raises(RuntimeError, match="summarizer unavailable"):
            memory.save_context({"input": turns[6][0]}, {"output": turns[6][1]})
    # legacy popped the messages from the in-memory history before the summarizer failed: they
    # are in neither the summary nor the history
    before = views(new)[1][1:]
    popped = [m for m in before if m not in old.chat_memory.messages]
    assert popped and old.moving_summary_buffer == new.moving_summary_buffer
    # ours: the state did not move; the next turn folds the backlog once
    assert new.chat_memory.messages[-1].content == turns[6][1]
    for human, ai in turns[7:]:
        new.save_context({"input": human}, {"output": ai})
    read = [tag for call in tags_read(recorder(new)) for tag in call]
    assert read == transcript_tags(turns)[: new.state.pruned]
    assert [m.content.split()[0] for m in views(new)[1][1:]] == transcript_tags(turns)[
        new.state.pruned :
    ]


def test_a_history_cleared_underneath_keeps_the_summary(tmp_path: Path) -> None:
    history = SqliteHistory(tmp_path / "h.db")
    memory = ConversationSummaryBufferMemory(
        llm=make_model(), chat_memory=history, max_token_limit=30
    )
    turns = script(62, 12)
    for human, ai in turns[:8]:
        memory.save_context({"input": human}, {"output": ai})
    summary = memory.moving_summary_buffer
    history.clear()  # directly, not through the memory
    with pytest.warns(HistoryRewrittenWarning, match="gone"):
        memory.save_context({"input": turns[8][0]}, {"output": turns[8][1]})
    assert views(memory)[1] == [SystemMessage(content=summary), *history.messages]
    assert memory.state.pruned == 0


def test_messages_deleted_before_the_watermark_are_found_again(tmp_path: Path) -> None:
    history = SqliteHistory(tmp_path / "h.db")
    store = InMemoryStore()

    def memory() -> ConversationSummaryBufferMemory:
        return ConversationSummaryBufferMemory(
            llm=make_model(), chat_memory=history, max_token_limit=30, store=store, key=KEY
        )

    first = memory()
    for human, ai in script(63, 10):
        first.save_context({"input": human}, {"output": ai})
    before = views(first)
    pruned = first.state.pruned
    history.conn.execute("DELETE FROM messages WHERE id <= 4")  # an archiver removed 4 rows
    with pytest.warns(HistoryRewrittenWarning, match=f"now #{pruned - 4}"):
        assert views(first) == before
    assert first.state.pruned == pruned - 4
    # the moved watermark was stored: reported once, not on every turn of every object
    with warnings.catch_warnings():
        warnings.simplefilter("error", HistoryRewrittenWarning)
        assert views(memory()) == before
        assert memory().state.pruned == 0  # (no operation yet)


def test_clear_resets_history_summary_and_store() -> None:
    store = InMemoryStore()
    memory = ConversationSummaryBufferMemory(
        llm=make_model(), max_token_limit=20, store=store, key=KEY
    )
    for human, ai in script(64, 6):
        memory.save_context({"input": human}, {"output": ai})
    memory.clear()
    assert memory.chat_memory.messages == [] and memory.moving_summary_buffer == ""
    assert memory.state == SummaryBufferState()
    fresh = ConversationSummaryBufferMemory(llm=make_model(), store=store, key=KEY)
    assert fresh.load_memory_variables({}) == {"history": ""}


# --------------------------------------------------------------------------------------------
# bad input


def _message(error: pytest.ExceptionInfo[Exception]) -> str:
    assert isinstance(error.value, ValidationError)
    return str(error.value.errors()[0]["ctx"]["error"])


def test_prompt_with_wrong_variables_fails_like_legacy() -> None:
    prompt = PromptTemplate.from_template("{summary} {lines}")
    with pytest.raises(ValidationError, match="Got unexpected prompt input variables") as ours:
        ConversationSummaryBufferMemory(llm=make_model(), prompt=prompt)
    with pytest.raises(ValidationError) as theirs:
        legacy(llm=make_model(), prompt=prompt)
    assert _message(ours) == _message(theirs)


@pytest.mark.parametrize(
    ("fields", "match"),
    [
        ({"max_token_limit": 0}, "max_token_limit must be a positive"),
        ({"max_token_limit": -5}, "max_token_limit must be a positive"),
        ({"store": InMemoryStore()}, "store is set but key is not"),
        ({"key": KEY}, "key is set but store is not"),
        ({"max_tokens_limit": 100}, "Extra inputs are not permitted"),  # legacy ignores a typo
    ],
)
def test_bad_configuration_is_rejected(fields: dict[str, Any], match: str) -> None:
    with pytest.raises(ValidationError, match=match):
        ConversationSummaryBufferMemory(llm=make_model(), **fields)


def test_delete_pruned_needs_an_in_memory_history(tmp_path: Path) -> None:
    with pytest.raises(ValidationError, match="delete_pruned=True needs an InMemoryChat"):
        ConversationSummaryBufferMemory(
            llm=make_model(), chat_memory=SqliteHistory(tmp_path / "h.db"), delete_pruned=True
        )


def test_token_counter_must_be_a_counter() -> None:
    with pytest.raises(TypeError, match="cannot use int as a token counter"):
        ConversationSummaryBufferMemory(llm=make_model(), token_counter=42)


@pytest.mark.parametrize("value", [0, -1])
def test_summarize_batch_tokens_must_be_positive(value: int) -> None:
    with pytest.raises(ValidationError, match="summarize_batch_tokens must be a positive"):
        ConversationSummaryBufferMemory(llm=make_model(), summarize_batch_tokens=value)


@pytest.mark.parametrize(
    ("value", "match"),
    [
        ({"summary": "x"}, "not a ConversationSummaryBufferMemory state"),
        ({"version": 1, "summary": "x", "pruned": 3, "last_pruned_key": None}, "not a valid"),
        ({"version": 99, "summary": "x", "pruned": 0}, "newer langmem_ext"),
    ],
)
def test_a_foreign_stored_state_is_an_error(value: dict[str, Any], match: str) -> None:
    store = InMemoryStore()
    store.put(KEY.namespace("summary_buffer"), "history", value)
    memory = ConversationSummaryBufferMemory(llm=make_model(), store=store, key=KEY)
    with pytest.raises(StoredStateError, match=match):
        memory.load_memory_variables({})


@pytest.mark.parametrize(
    ("inputs", "outputs", "match"),
    [
        ({"a": "1", "b": "2"}, {"output": "x"}, "One input key expected"),
        ({"input": "1"}, {"x": "1", "y": "2"}, "Got multiple output keys"),
    ],
)
def test_ambiguous_inputs_fail_like_legacy(
    inputs: dict[str, Any], outputs: dict[str, str], match: str
) -> None:
    new = ConversationSummaryBufferMemory(llm=make_model())
    old = legacy(llm=make_model())
    with pytest.raises(ValueError, match=match) as ours:
        new.save_context(inputs, outputs)
    with pytest.raises(ValueError, match=match) as theirs:
        old.save_context(inputs, outputs)
    assert type(ours.value) is type(theirs.value)
    assert new.chat_memory.messages == old.chat_memory.messages == []


def test_copies_and_pickles_get_their_own_locks() -> None:
    memory = ConversationSummaryBufferMemory(llm=make_model(), max_token_limit=20)
    for human, ai in script(72, 5):
        memory.save_context({"input": human}, {"output": ai})
    for clone in (copy.deepcopy(memory), pickle.loads(pickle.dumps(memory))):
        assert views(clone) == views(memory)
        clone.save_context({"input": "h999 more"}, {"output": "a999 words"})
        assert views(clone) != views(memory)


def test_state_round_trips_through_json() -> None:
    state = SummaryBufferState(summary="s", pruned=4, last_pruned_key="fp:abc")
    assert SummaryBufferState.from_dict(json.loads(json.dumps(state.to_dict()))) == state


def test_messages_form_is_a_list_of_messages() -> None:
    memory = ConversationSummaryBufferMemory(
        llm=make_model(), max_token_limit=10, return_messages=True
    )
    for human, ai in script(71, 5):
        memory.save_context({"input": human}, {"output": ai})
    value = memory.buffer
    assert isinstance(value, list) and all(isinstance(m, BaseMessage) for m in value)
    assert isinstance(value[0], SystemMessage)
    calls = len(recorder(memory).prompts)
    memory.prune()  # within the limit: no summarizer call, and no recount
    asyncio.run(memory.aprune())
    assert len(recorder(memory).prompts) == calls
