"""Edge cases of the drop-in ``ConversationSummaryBufferMemory`` (those of
``ManagedChatMessageHistory`` are in ``tests/integrations/test_history_edge_cases.py``):

* repeated id-less texts ("continue", "Sure.") are never mistaken for each other, and
  the stored watermark is position-safe (version 1 states are still read);
* the legacy class accepts the ``BaseMemory``/chain fields legacy users pass.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from history_worker import key_for
from langgraph.store.memory import InMemoryStore

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


def _compat_script(turns: int) -> list[tuple[str, str]]:
    """Mostly "continue" / "Sure.", with a numbered turn every fourth (legacy histories have no
    ids: ``save_context`` writes plain messages)."""
    return [
        (f"h{i:03d} tell me about step {i}", f"a{i:03d} step {i} is done")
        if i % 4 == 0
        else ("continue", "Sure.")
        for i in range(turns)
    ]


def _lines(turns: Sequence[tuple[str, str]]) -> list[str]:
    return [line for human, ai in turns for line in (f"Human: {human}", f"AI: {ai}")]


@pytest.mark.parametrize("with_store", [False, True], ids=["object", "store"])
def test_compat_repeated_texts_and_an_early_deletion_lose_and_repeat_nothing(
    with_store: bool, tmp_path: Path
) -> None:
    """An id-less database history of repeated "continue"/"Sure.": an archiver deletes the first
    pair (already summarized) underneath the memory. With content-only watermark keys, the
    message now at the old watermark position is another "Sure.", taken for the last pruned
    one: two unsummarized messages were skipped for good. Now every line is summarized exactly
    once, in order, or is still in the buffer."""
    from compat_worker import SqliteHistory, make_model, new_lines_of

    from langmem_ext.compat import ConversationSummaryBufferMemory, HistoryRewrittenWarning

    history = SqliteHistory(tmp_path / "h.db")
    model = make_model()
    options: dict[str, Any] = (
        {"store": InMemoryStore(), "key": key_for("compat")} if with_store else {}
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the "db history without a store" notice
        memory = ConversationSummaryBufferMemory(
            llm=model, chat_memory=history, max_token_limit=10, **options
        )
    turns = _compat_script(40)
    deleted: list[str] = []
    for human, ai in turns:
        memory.save_context({"input": human}, {"output": ai})
        n, current = memory.state.pruned, history.messages
        if (  # an archiver deletes the oldest pair (summarized by now) at the worst moment:
            len(deleted) < 4  # the message 2 after the watermark repeats the last pruned one
            and n >= 4
            and n + 1 < len(current)
            and current[n - 1].content == current[n + 1].content
        ):
            first_rows = history.conn.execute(
                "SELECT id FROM messages ORDER BY id LIMIT 2"
            ).fetchall()
            rows = history.messages[:2]
            deleted += [f"{'Human' if m.type == 'human' else 'AI'}: {m.content}" for m in rows]
            history.conn.execute(
                "DELETE FROM messages WHERE id IN (?, ?)", (first_rows[0][0], first_rows[1][0])
            )
            with pytest.warns(HistoryRewrittenWarning):
                memory.load_memory_variables({})
    summarized = [line for prompt in model.prompts for line in new_lines_of(prompt).splitlines()]
    memory.return_messages = False
    buffer = memory.load_memory_variables({})["history"].splitlines()
    if memory.moving_summary_buffer:
        buffer = buffer[1:]  # the summary line
    assert len(deleted) == 4 and len(summarized) > 20
    assert summarized + buffer == _lines(turns)


def test_compat_watermark_is_position_safe_and_reads_version_1_states() -> None:
    """The stored watermark key is ``key_at`` (chained), not the content key; a version-1 state
    (content key) is still read and upgraded at the next prune."""
    from compat_worker import make_model

    from langmem_ext.compat import ConversationSummaryBufferMemory
    from langmem_ext.core.identity import key_at, stable_key

    store, key = InMemoryStore(), key_for("compat-v1")
    memory = ConversationSummaryBufferMemory(
        llm=make_model(), max_token_limit=10, store=store, key=key
    )
    for human, ai in _compat_script(8):
        memory.save_context({"input": human}, {"output": ai})
    state = memory.state
    messages = memory.chat_memory.messages
    assert state.version == 2 and state.pruned > 0
    assert state.last_pruned_key == key_at(messages, state.pruned - 1)
    assert state.last_pruned_key != stable_key(messages[state.pruned - 1])
    assert state.last_pruned_window[-1] == stable_key(messages[state.pruned - 1])

    # what version 1 wrote: a content key, no window
    namespace = key.namespace("summary_buffer")
    v1 = {
        "version": 1,
        "summary": state.summary,
        "pruned": state.pruned,
        "last_pruned_key": stable_key(messages[state.pruned - 1]),
    }
    store.put(namespace, "history", v1)
    again = ConversationSummaryBufferMemory(
        llm=make_model(), max_token_limit=10, store=store, key=key, chat_memory=memory.chat_memory
    )
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # not reported as a rewritten history
        assert again.load_memory_variables({}) == memory.load_memory_variables({})
    for human, ai in _compat_script(12)[8:]:
        again.save_context({"input": human}, {"output": ai})
    item = store.get(namespace, "history")
    assert item is not None and item.value["version"] == 2


LEGACY_CHAIN_FIELDS: list[dict[str, Any]] = [
    {"verbose": True},
    {"verbose": False, "name": "summary-memory"},
    {"tags": ["memory"], "metadata": {"team": "support"}},
    {"callbacks": "handler"},
    {"callback_manager": "manager"},
]


@pytest.mark.parametrize("fields", LEGACY_CHAIN_FIELDS, ids=lambda f: "-".join(f))
def test_compat_accepts_the_chain_fields_legacy_accepts(fields: dict[str, Any]) -> None:
    """``ConversationSummaryBufferMemory(verbose=True)`` and the other chain fields legacy code
    passes to a memory: accepted (legacy ignores them), same outputs turn by turn; callbacks,
    tags and metadata reach the summarizer call (legacy drops them)."""
    pytest.importorskip("langchain_classic")
    from compat_worker import make_model
    from langchain_classic.memory import ConversationSummaryBufferMemory as Legacy
    from langchain_core.callbacks import BaseCallbackHandler, CallbackManager

    from langmem_ext.compat import ConversationSummaryBufferMemory

    class Seen(BaseCallbackHandler):
        def __init__(self) -> None:
            self.starts: list[tuple[list[str], dict[str, Any]]] = []

        def on_chat_model_start(self, serialized: Any, messages: Any, **kwargs: Any) -> None:
            self.starts.append((list(kwargs.get("tags") or []), dict(kwargs.get("metadata") or {})))

    def resolved(handler: Seen) -> dict[str, Any]:
        out = dict(fields)
        if out.get("callbacks") == "handler":
            out["callbacks"] = [handler]
        if out.get("callback_manager") == "manager":
            out["callback_manager"] = CallbackManager(handlers=[handler])
        return out

    ours_seen, legacy_seen = Seen(), Seen()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ours = ConversationSummaryBufferMemory(
            llm=make_model(), max_token_limit=20, **resolved(ours_seen)
        )
        legacy = Legacy(llm=make_model(), max_token_limit=20, **resolved(legacy_seen))
    for human, ai in _compat_script(16):
        for memory in (ours, legacy):
            memory.save_context({"input": human}, {"output": ai})
        assert ours.load_memory_variables({}) == legacy.load_memory_variables({})
    assert ours.moving_summary_buffer == legacy.moving_summary_buffer != ""
    if "callbacks" in fields or "callback_manager" in fields:
        assert ours_seen.starts and not legacy_seen.starts
    if "tags" in fields:
        # the tags and metadata ride on the summarizer's run (seen by any tracer)
        traced = Seen()
        ours.callbacks = [traced]
        ours.save_context({"input": "continue"}, {"output": "Sure. " * 10})
        assert traced.starts and all(
            "memory" in tags and meta.get("team") == "support" for tags, meta in traced.starts
        )


def test_compat_still_refuses_a_typo() -> None:
    from compat_worker import make_model
    from pydantic import ValidationError

    from langmem_ext.compat import ConversationSummaryBufferMemory

    with pytest.raises(ValidationError, match="Extra inputs are not permitted"):
        ConversationSummaryBufferMemory(llm=make_model(), verbos=True)
