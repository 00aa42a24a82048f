"""The Deploying block (docs/deploying.md, moved there from the README) runs against PostgreSQL
with pgvector and does what it says.

The block is fenced ```python deploying (tests/docs/test_docs_pages.py runs the plain
```python blocks alone, with no server): here its ``DB_URI``, ``MODEL`` and ``SUMMARIZER``
assignments are taken out and those names given instead: a fresh schema of the pgvector server
(tests/conftest.py ``pgvector_schema_dsn``), a recording fake chat model and a fake summarizer
model. Everything else (the pool, ``PostgresSaver``, ``PostgresStore(index=...)`` with the local
MiniLM model, the two ``setup()`` calls, ``Retrieval`` and ``MemoryMiddleware`` in
``create_agent``) runs as written. Two executions of the block are two workers sharing the one
database.
"""

from __future__ import annotations

import ast
import contextlib
import itertools
import re
import warnings
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fakes import RecordingChatModel
from langchain_core.messages import AIMessage, BaseMessage

from langmem_ext import MemoryKey

DEPLOYING = Path(__file__).resolve().parents[2] / "docs" / "deploying.md"
SUBSTITUTED = ("DB_URI", "MODEL", "SUMMARIZER")
HARBOUR = "the harbour was busy and the boats came in late with the tide "
LOCKER_FACT = "By the way, my locker code at the gym is 4471."
LOCKER_QUESTION = "What was the combination of my locker at the fitness club?"


def deploying_block() -> tuple[int, str]:
    """(line of its first code line, code) of docs/deploying.md's ```python deploying block."""
    text = DEPLOYING.read_text(encoding="utf-8")
    found = list(re.finditer(r"```python deploying\n(.*?)```", text, flags=re.S))
    assert len(found) == 1, "docs/deploying.md needs exactly one ```python deploying block"
    return text.count("\n", 0, found[0].start(1)) + 1, found[0].group(1)


def without_assignments(code: str, names: tuple[str, ...]) -> ast.Module:
    """``code`` with its top-level ``NAME = "..."`` assignment of each of ``names`` removed;
    each must be there exactly once, assigning a string (what a reader edits)."""
    tree = ast.parse(code)
    kept: list[ast.stmt] = []
    seen: list[str] = []
    for node in tree.body:
        target = node.targets[0] if isinstance(node, ast.Assign) else None
        if isinstance(target, ast.Name) and target.id in names:
            assert isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant)
            assert isinstance(node.value.value, str), f"{target.id} must be a string"
            seen.append(target.id)
            continue
        kept.append(node)
    assert sorted(seen) == sorted(names), f"the block assigns {seen}, expected {names}"
    tree.body = kept
    return tree


def summary(prompt: list[BaseMessage]) -> str:
    """A short summary the summary checks accept (it shares words with the transcript)."""
    return "The user kept a harbour log: busy days, boats late with the tide."


def run_block(dsn: str, model: RecordingChatModel) -> dict[str, Any]:
    """Execute the block as one worker would import it; its namespace."""
    line, code = deploying_block()
    tree = without_assignments(code, SUBSTITUTED)
    namespace: dict[str, Any] = {
        "__name__": "__main__",
        "DB_URI": dsn,
        "MODEL": model,
        "SUMMARIZER": RecordingChatModel(respond=summary),
    }
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        exec(compile(tree, f"{DEPLOYING}:{line}", "exec"), namespace)
    return namespace


@contextlib.contextmanager
def worker(dsn: str, model: RecordingChatModel) -> Iterator[dict[str, Any]]:
    namespace = run_block(dsn, model)
    try:
        yield namespace
    finally:
        namespace["pool"].close()


def answers() -> Iterator[AIMessage]:
    for i in itertools.count():
        yield AIMessage(f"Answer {i}: " + "noted, " + HARBOUR * 30)


def test_the_substituted_names_are_the_blocks_settings() -> None:
    """The harness itself: the three settings are plain string assignments, and nothing else of
    the block is taken out."""
    _, code = deploying_block()
    tree = without_assignments(code, SUBSTITUTED)
    assert len(ast.parse(code).body) - len(tree.body) == len(SUBSTITUTED)
    assert "checkpointer.setup()" in code and "store.setup()" in code
    with pytest.raises(AssertionError, match="expected"):
        without_assignments(code, (*SUBSTITUTED, "API_KEY"))


@pytest.mark.slow
def test_deploying_block_serves_a_thread_from_two_workers(
    pgvector_schema_dsn: str, minilm_embeddings: Any
) -> None:
    """Worker one answers 30 turns (a fact planted in the fourth); the evicted turns are in
    pgvector's ``store_vectors``, one 384-wide embedding per message; worker two, a second
    execution of the block on the same database, continues the thread and its model is sent
    the planted fact."""
    import psycopg

    first_model = RecordingChatModel(messages=answers())
    config = {"configurable": {"thread_id": "gym", "user_id": "ann"}}
    with worker(pgvector_schema_dsn, first_model) as one:
        for i in range(30):
            text = LOCKER_FACT if i == 3 else f"Day {i}: " + HARBOUR * 4
            assert one["reply"]("ann", "gym", text).startswith(f"Answer {i}: ")
        assert len(one["agent"].get_state(config).values["messages"]) == 60
        store = one["store"]
        turns = store.search(MemoryKey(user="ann", session="gym").namespace("turns"), limit=1_000)

    assert turns and all("vectors" not in item.value for item in turns)  # embedded by the store
    with psycopg.connect(pgvector_schema_dsn) as conn:
        rows = conn.execute(
            "SELECT prefix, key, vector_dims(embedding) FROM store_vectors"
        ).fetchall()
    per_turn = Counter((prefix, key) for prefix, key, _ in rows)
    # each message of a turn (a human message and its answer) has its own vector
    assert [per_turn[".".join(item.namespace), item.key] for item in turns] == [2] * len(turns)
    assert {dims for _, _, dims in rows} == {384}

    second_model = RecordingChatModel(messages=iter([AIMessage("It is 4471.")]))
    with worker(pgvector_schema_dsn, second_model) as two:
        assert two["reply"]("ann", "gym", LOCKER_QUESTION) == "It is 4471."
        assert len(two["agent"].get_state(config).values["messages"]) == 62
    sent = second_model.requests[-1]
    retrieved = [m for m in sent if m.id == "langmem_ext:retrieved"]
    assert len(retrieved) == 1 and "4471" in str(retrieved[0].content)
    assert not any("4471" in str(m.content) for m in sent if m.id != "langmem_ext:retrieved")
