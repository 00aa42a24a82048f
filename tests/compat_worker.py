"""Fakes and scripted conversations for ``tests/integrations/test_compat.py``; also runs
as a subprocess.

    python tests/compat_worker.py --history H.sqlite [--store S.sqlite --session s1] \
        --start 0 --stop 10 --limit 40 [--async] [--no-classic]

runs turns ``start..stop`` of the scripted conversation through
``langmem_ext.compat.ConversationSummaryBufferMemory`` and prints one JSON object: the memory's
string and message forms, its state, and whether langchain-classic was importable.
``--no-classic`` blocks ``import langchain_classic`` before anything is imported, to test the
class without the ``classic`` extra. Everything is deterministic: the summarizer's answer is a
function of its prompt, so two processes continuing one conversation agree exactly.
"""

from __future__ import annotations

import sys

if __name__ == "__main__" and "--no-classic" in sys.argv:
    sys.modules["langchain_classic"] = None  # type: ignore[assignment]  # import now fails

import argparse
import asyncio
import hashlib
import json
import random
import sqlite3
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # run as a script from anywhere
    sys.path.insert(0, str(ROOT))

from langchain_core.chat_history import BaseChatMessageHistory  # noqa: E402
from langchain_core.language_models import BaseLanguageModel  # noqa: E402
from langchain_core.language_models.fake import FakeListLLM  # noqa: E402
from langchain_core.language_models.fake_chat_models import FakeListChatModel  # noqa: E402
from langchain_core.messages import (  # noqa: E402
    AIMessage,
    BaseMessage,
    get_buffer_string,
    message_to_dict,
    messages_from_dict,
)
from langchain_core.outputs import ChatGeneration, ChatResult  # noqa: E402
from pydantic import Field  # noqa: E402

WORDS = "alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu nu xi omicron".split()


def split_tokens(text: str) -> list[int]:
    """Deterministic token ids: one per whitespace-separated word (no GPT-2 tokenizer here)."""
    return [len(word) for word in text.split()]


def script(seed: int, turns: int, lo: int = 1, hi: int = 12) -> list[tuple[str, str]]:
    """A conversation: ``turns`` (human, ai) pairs of ``lo..hi`` words, each line unique."""
    rng = random.Random(seed)

    def line(tag: str) -> str:
        return " ".join([tag, *(rng.choice(WORDS) for _ in range(rng.randint(lo, hi)))])

    return [(line(f"h{t:03d}"), line(f"a{t:03d}")) for t in range(turns)]


def new_lines_of(prompt: str) -> str:
    """The ``new_lines`` part of a summarizer prompt built from the legacy template."""
    return prompt.rsplit("New lines of conversation:\n", 1)[1].rsplit("\n\nNew summary:", 1)[0]


def summary_for(prompt: str) -> str:
    """What the fake summarizer answers: a function of the whole prompt (previous summary and new
    lines), so a summarizer fed different input gives a different summary."""
    digest = hashlib.blake2b(prompt.encode(), digest_size=4).hexdigest()
    lines = new_lines_of(prompt).splitlines() if "New summary:" in prompt else []
    tags = " ".join(line.split()[1] for line in lines if len(line.split()) > 1)
    return f"summary {digest} of {len(lines)} lines: {tags}".rstrip()


class RecordingModel(FakeListChatModel):
    """A chat model for summaries: answers :func:`summary_for` its prompt, records every prompt,
    every call to ``get_num_tokens_from_messages`` (how many, how many messages, which thread)."""

    responses: list[str] = Field(default_factory=lambda: ["unused"])
    prompts: list[str] = Field(default_factory=list)
    count_calls: int = 0
    counted_messages: int = 0
    count_threads: set[int] = Field(default_factory=set)
    overhead: int = 0  # added to every list count, like a provider's per-request framing
    fail_calls: int = 0  # the next this many generations raise (a provider outage)
    fail_at_call: int | None = None  # the generation with this index (0-based) raises, once

    def _call(self, messages: list[BaseMessage], *args: Any, **kwargs: Any) -> str:
        if self.fail_calls > 0:
            self.fail_calls -= 1
            raise RuntimeError("summarizer unavailable")
        if self.fail_at_call is not None and self.fail_at_call == len(self.prompts):
            self.fail_at_call = None
            raise RuntimeError("summarizer unavailable")
        prompt = get_buffer_string(messages)
        self.prompts.append(prompt)
        return summary_for(prompt)

    def get_num_tokens_from_messages(
        self, messages: list[BaseMessage], tools: Sequence[Any] | None = None
    ) -> int:
        self.count_calls += 1
        self.counted_messages += len(messages)
        self.count_threads.add(threading.get_ident())
        return super().get_num_tokens_from_messages(messages, tools) + self.overhead


class AsyncOnlyModel(RecordingModel):
    """Fails on any sync generation: proves the async path never calls the model synchronously."""

    def _generate(self, *args: Any, **kwargs: Any) -> ChatResult:
        raise AssertionError("sync generation called from the async path")

    async def _agenerate(
        self, messages: list[BaseMessage], *args: Any, **kwargs: Any
    ) -> ChatResult:
        prompt = get_buffer_string(messages)
        self.prompts.append(prompt)
        return ChatResult(generations=[ChatGeneration(message=AIMessage(summary_for(prompt)))])


def make_model(**kwargs: Any) -> RecordingModel:
    return RecordingModel(custom_get_token_ids=split_tokens, **kwargs)


class SqliteHistory(BaseChatMessageHistory):
    """A database-backed history like langchain-community's ``SQLChatMessageHistory``: every read
    of ``messages`` is a fresh list from the database (so popping from it deletes nothing)."""

    def __init__(self, path: str | Path, session_id: str = "s") -> None:
        self.conn = sqlite3.connect(str(path), isolation_level=None, check_same_thread=False)
        self.conn.execute(
            "CREATE TABLE IF NOT EXISTS messages "
            "(id INTEGER PRIMARY KEY AUTOINCREMENT, session TEXT, message TEXT)"
        )
        self.session_id = session_id
        self.reads = 0

    @property
    def messages(self) -> list[BaseMessage]:  # type: ignore[override]
        self.reads += 1
        rows = self.conn.execute(
            "SELECT message FROM messages WHERE session = ? ORDER BY id", (self.session_id,)
        ).fetchall()
        return messages_from_dict([json.loads(row[0]) for row in rows])

    def add_messages(self, messages: Sequence[BaseMessage]) -> None:
        self.conn.executemany(
            "INSERT INTO messages (session, message) VALUES (?, ?)",
            [(self.session_id, json.dumps(message_to_dict(m))) for m in messages],
        )

    def clear(self) -> None:
        self.conn.execute("DELETE FROM messages WHERE session = ?", (self.session_id,))


def views(memory: Any) -> tuple[Any, Any]:
    """(string form, message form) of what the memory gives the chain."""
    saved = memory.return_messages
    try:
        memory.return_messages = False
        string = memory.load_memory_variables({})[memory.memory_key]
        memory.return_messages = True
        messages = memory.load_memory_variables({})[memory.memory_key]
    finally:
        memory.return_messages = saved
    return string, messages


async def aviews(memory: Any) -> tuple[Any, Any]:
    """Async :func:`views`."""
    saved = memory.return_messages
    try:
        memory.return_messages = False
        string = (await memory.aload_memory_variables({}))[memory.memory_key]
        memory.return_messages = True
        messages = (await memory.aload_memory_variables({}))[memory.memory_key]
    finally:
        memory.return_messages = saved
    return string, messages


def tags_read(model: RecordingModel) -> list[list[str]]:
    """For each summarizer call, the tags (h003, a003 ...) of the messages it read."""
    return [
        [line.split()[1] for line in new_lines_of(prompt).splitlines()] for prompt in model.prompts
    ]


def transcript_tags(turns: list[tuple[str, str]]) -> list[str]:
    return [line.split()[0] for pair in turns for line in pair]


def summarizer(kind: str) -> BaseLanguageModel[Any]:
    """A fresh summarizer model of one kind (two instances of a kind behave identically)."""
    scripted = [f"scripted summary {i}: " + "word " * (i % 7) for i in range(200)]
    if kind == "recording":
        return make_model()
    if kind == "overhead":  # list count = sum + 5, like a provider's per-request framing
        return make_model(overhead=5)
    if kind == "fakelist":
        return FakeListChatModel(responses=scripted, custom_get_token_ids=split_tokens)
    if kind == "fakellm":
        return FakeListLLM(responses=scripted, custom_get_token_ids=split_tokens)
    raise AssertionError(kind)


def dump(memory: Any) -> dict[str, Any]:
    """Both forms of what the memory gives the chain, and its state, as plain JSON."""
    string, messages = views(memory)
    return {
        "string": string,
        "messages": [[m.type, m.content] for m in messages],
        "state": memory.state.to_dict(),
    }


def run(
    *,
    history: BaseChatMessageHistory,
    start: int,
    stop: int,
    limit: int,
    store: Any = None,
    session: str | None = None,
    use_async: bool = False,
    seed: int = 7,
) -> dict[str, Any]:
    """Turns ``start..stop`` of ``script(seed, stop)`` through a fresh memory object."""
    from langmem_ext.compat import HAS_CLASSIC, ConversationSummaryBufferMemory
    from langmem_ext.core.keys import MemoryKey

    key = MemoryKey("t", "u", session) if session else None
    memory = ConversationSummaryBufferMemory(
        llm=make_model(), max_token_limit=limit, chat_memory=history, store=store, key=key
    )
    turns = script(seed, stop)[start:stop]

    async def arun() -> None:
        for human, ai in turns:
            await memory.asave_context({"input": human}, {"output": ai})

    if use_async:
        asyncio.run(arun())
    else:
        for human, ai in turns:
            memory.save_context({"input": human}, {"output": ai})
    try:
        from langchain_classic.base_memory import BaseMemory

        is_base_memory = isinstance(memory, BaseMemory)
    except ImportError:
        is_base_memory = False
    return {**dump(memory), "has_classic": HAS_CLASSIC, "is_base_memory": is_base_memory}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--history")
    parser.add_argument("--store")
    parser.add_argument("--session")
    parser.add_argument("--start", type=int, default=0)
    parser.add_argument("--stop", type=int, required=True)
    parser.add_argument("--limit", type=int, default=40)
    parser.add_argument("--async", dest="use_async", action="store_true")
    parser.add_argument("--no-classic", action="store_true")
    args = parser.parse_args()
    history: BaseChatMessageHistory
    if args.history:
        history = SqliteHistory(args.history)
    else:
        from langchain_core.chat_history import InMemoryChatMessageHistory

        history = InMemoryChatMessageHistory()
    store = None
    if args.store:
        from langgraph.store.sqlite import SqliteStore

        conn = sqlite3.connect(args.store, check_same_thread=False, isolation_level=None)
        store = SqliteStore(conn)
        store.setup()
    result = run(
        history=history,
        start=args.start,
        stop=args.stop,
        limit=args.limit,
        store=store,
        session=args.session,
        use_async=args.use_async,
    )
    result["classic_imported"] = "langchain_classic.base_memory" in sys.modules
    print(json.dumps(result))


if __name__ == "__main__":
    main()
