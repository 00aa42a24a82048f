"""The scale benchmark's settings, instruments and data: its configs and goals, the probes that
say where a call spends its time (embedding, the vector index, the store), and the long thread
built from the CRI persona's turns (``bench/scale.py`` runs the sections).
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from typing import Any

from langchain_core.embeddings import Embeddings
from langchain_core.messages import BaseMessage, HumanMessage
from langgraph.store.base import Op, PutOp, Result
from langgraph.store.memory import InMemoryStore

from bench.retrieval_data import load_cri
from bench.retrieval_measure import _spread, turn_groups, turns_of
from bench.retrieval_planted import PlantedSettings, planted_conversations
from langmem_ext.core.keys import MemoryKey

#: issue 16's goals
LATENCY_GOAL_MS = 15.0


LATENCY_GOAL_TURNS = 100_000


RECALL_GOAL = 0.95


RESTART_GOAL_S = 1.0


RESTART_GOAL_TURNS = 50_000


#: the memory key every Retrieval here runs under
KEY = MemoryKey("bench", "scale", "thread")


#: noise per dimension of the tie-free recall check (cosine about 0.9 to the original row)
JITTER_SIGMA = 0.025


#: the exact twin never switches to the coarse pass
EXACT_ROWS = 10**9


@dataclass(frozen=True)
class ScaleBenchConfig:
    mode: str
    #: indexed turns (before the view's own turns are subtracted) of the latency sections
    sizes: tuple[int, ...] = (1_000, 10_000, 100_000)
    #: timed queries per size, local index
    queries: int = 40
    #: timed queries of the anchor (``dense_index="store"``) below ``anchor_few_from`` turns
    anchor_queries: int = 40
    #: from this many turns on the anchor takes seconds per query: only ``anchor_few`` queries
    anchor_few_from: int = 50_000
    anchor_few: int = 3
    #: turns of the fresh-process section, and the queries its subprocess asks
    restart_turns: int = 50_000
    restart_queries: int = 5
    #: evicted turns measured in the indexing section
    index_turns: int = 100
    #: the whole request (inner view plus retrieved context)
    budget: int = 4_500
    recall_k: int = 10
    #: distinct real turns used (None: all of CRI and the planted conversations)
    max_groups: int | None = None
    jitter_sigma: float = JITTER_SIGMA
    seed: int = 0


FULL = ScaleBenchConfig(mode="full")


QUICK = replace(
    FULL,
    mode="quick",
    sizes=(300,),
    queries=5,
    anchor_queries=3,
    restart_turns=600,
    restart_queries=2,
    index_turns=4,
    max_groups=40,
)


class _Probe:
    """Seconds and calls per named part of one ``apply`` (reset before each). The store sets
    ``in_store`` while its batch runs, so an embedding made by the store is told apart from one
    made by ``Retrieval``."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}
        self.calls: dict[str, int] = {}
        #: (part name, text) of every text embedded as a document
        self.texts: list[tuple[str, str]] = []
        self.in_store = False
        self.query_vector: list[float] | None = None
        #: the last object each wrapped method ran on (the index Retrieval searched)
        self.seen: dict[str, Any] = {}

    def reset(self) -> None:
        self.seconds.clear()
        self.calls.clear()
        self.texts.clear()

    def add(self, name: str, seconds: float, calls: int = 1) -> None:
        self.seconds[name] = self.seconds.get(name, 0.0) + seconds
        self.calls[name] = self.calls.get(name, 0) + calls

    def get(self, *names: str) -> float:
        return sum(self.seconds.get(n, 0.0) for n in names)

    def count(self, *names: str) -> int:
        return sum(self.calls.get(n, 0) for n in names)


class _ProbedEmbeddings(Embeddings):
    """``inner`` with every call timed and counted into ``probe`` (documents: one call per text;
    the texts are kept). The vectors are ``inner``'s."""

    def __init__(self, inner: Embeddings, probe: _Probe) -> None:
        self.inner = inner
        self.probe = probe

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        started = time.perf_counter()
        try:
            return self.inner.embed_documents(texts)
        finally:
            name = "embed_documents_store" if self.probe.in_store else "embed_documents"
            self.probe.add(name, time.perf_counter() - started, len(texts))
            self.probe.texts.extend((name, t) for t in texts)

    def embed_query(self, text: str) -> list[float]:
        started = time.perf_counter()
        vector = self.inner.embed_query(text)
        where = "_store" if self.probe.in_store else ""
        self.probe.add(f"embed_query{where}", time.perf_counter() - started)
        self.probe.query_vector = vector
        return vector


def _timed_batch(probe: _Probe | None, ops: Iterable[Op], batch: Callable[[Any], Any]) -> Any:
    """Run one store batch, its time recorded as ``store_write`` (any put) or ``store_read``."""
    if probe is None:
        return batch(ops)
    ops = list(ops)
    name = "store_write" if any(isinstance(op, PutOp) for op in ops) else "store_read"
    probe.in_store = True
    started = time.perf_counter()
    try:
        return batch(ops)
    finally:
        probe.in_store = False
        probe.add(name, time.perf_counter() - started)


class _TimedMemoryStore(InMemoryStore):
    """``InMemoryStore`` whose batches are timed into ``probe`` (when one is set)."""

    probe: _Probe | None = None

    def batch(self, ops: Iterable[Op]) -> list[Result]:
        result: list[Result] = _timed_batch(self.probe, ops, super().batch)
        return result


def _timed(probe: _Probe, name: str, fn: Callable[..., Any], many: bool) -> Callable[..., Any]:
    """``fn`` timed into ``probe`` as ``name``: one call each, or with ``many`` (a bulk method
    taking an iterable after ``self``) one per item it was given."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        calls = 1
        if many:
            items = list(args[1])
            args, calls = (args[0], items, *args[2:]), len(items)
        started = time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            probe.add(name, time.perf_counter() - started, calls)
            if args:
                probe.seen[name] = args[0]

    return wrapper


#: what ``_timing`` times: (name, owner, attribute, bulk: counted per item given)
_Target = tuple[str, Any, str, bool]


@contextmanager
def _timing(probe: _Probe, targets: Sequence[_Target]) -> Iterator[None]:
    """Time ``owner.attr`` as ``name`` for each target while the block runs (the classes'
    methods, so the indexes ``Retrieval`` builds inside itself are timed too)."""
    saved: list[tuple[Any, str, Any]] = []
    try:
        for name, owner, attr, many in targets:
            original = owner.__dict__[attr]
            saved.append((owner, attr, original))
            setattr(owner, attr, _timed(probe, name, original, many))
        yield
    finally:
        for owner, attr, original in reversed(saved):
            setattr(owner, attr, original)


def _search_targets() -> list[_Target]:
    from langmem_ext.retrieval.bm25 import BM25Index
    from langmem_ext.retrieval.vectors import VectorIndex

    return [
        ("vector_search", VectorIndex, "search", False),
        ("bm25_search", BM25Index, "search", False),
    ]


def _load_targets() -> list[_Target]:
    """The inserts of a load or an indexing: ``add`` and (where the class has it) the bulk
    ``add_many``, counted per turn either way; and the decoding of stored vectors."""
    from langmem_ext.retrieval import codec
    from langmem_ext.retrieval.bm25 import BM25Index
    from langmem_ext.retrieval.vectors import VectorIndex

    targets: list[_Target] = [("decode_vectors", codec, "stored_vectors", False)]
    for name, owner in (("bm25_add", BM25Index), ("vector_add", VectorIndex)):
        targets.append((name, owner, "add", False))
        for bulk in ("add_many", "add_postings", "add_block"):
            if bulk in owner.__dict__:
                targets.append((name, owner, bulk, True))
    return targets


def load_groups(max_groups: int | None) -> list[list[BaseMessage]]:
    """The distinct real turns (their messages): CRI's thread, then the planted conversations."""
    seen: set[str] = set()
    groups: list[list[BaseMessage]] = []
    for conversation in [load_cri(), *planted_conversations(PlantedSettings())]:
        for group in turn_groups(conversation.messages):
            text = turns_of(group)[0].text
            if text not in seen:
                seen.add(text)
                groups.append(group)
    return groups[:max_groups] if max_groups else groups


def load_queries() -> list[str]:
    """The questions of CRI (both wordings) and of the planted conversations, distinct, at
    least 3 words (``Retrieval``'s ``min_query_length``: every one is searched)."""
    conversations = [load_cri(), load_cri(first_person=True), *planted_conversations()]
    texts = (q.text for c in conversations for q in c.questions)
    return [t for t in dict.fromkeys(texts) if len(t.split()) >= 3]


def _spaced(items: Sequence[str], n: int) -> list[str]:
    """``n`` items spread evenly over ``items`` (all of them when there are fewer)."""
    if n >= len(items):
        return list(items)
    return [items[i * len(items) // n] for i in range(n)]


def build_thread(
    groups: Sequence[Sequence[BaseMessage]], turns: int
) -> tuple[list[BaseMessage], list[int]]:
    """``turns`` turns: the real ones repeated, each message with a fresh id; and where each
    turn ends (``messages[: ends[n - 1]]`` is the thread of the first n turns)."""
    messages: list[BaseMessage] = []
    ends: list[int] = []
    for i in range(turns):
        for j, m in enumerate(groups[i % len(groups)]):
            messages.append(m.model_copy(update={"id": f"scale-{i}-{j}"}))
        ends.append(len(messages))
    return messages, ends


def _ask(text: str) -> HumanMessage:
    return HumanMessage(text, id="scale-question")


def _index_config(embeddings: Embeddings, *, sqlite: bool = False) -> dict[str, Any]:
    config: dict[str, Any] = {"dims": 384, "embed": embeddings, "fields": ["text"]}
    if sqlite:
        # langgraph-checkpoint-sqlite reads "text_fields", not the documented "fields"
        # (langgraph#8808); Retrieval writes its turns with index=False, so neither is used for
        # them, but a store set up like this one embeds what it is told to
        config["text_fields"] = ["text"]
    return config


def _retrieval(
    store: Any,
    budget: int,
    counter: Any,
    mode: str = "local",
    key: MemoryKey = KEY,
    prefetch: bool = False,
) -> Any:
    from langmem_ext import TokenBudget
    from langmem_ext.retrieval.config import RetrievalConfig
    from langmem_ext.retrieval.strategy import Retrieval

    return Retrieval(
        TokenBudget(budget, counter=counter),
        store=store,
        key=key,
        config=RetrievalConfig(dense_index=mode, prefetch_embeddings=prefetch),  # type: ignore[arg-type]
    )


def _longest(queries: Sequence[str]) -> str:
    """The longest query: asked once before the timed calls, so that none of them pushes
    another turn out of the view (the timed calls index nothing)."""
    return max(queries, key=len)


def _row(probe: _Probe, seconds: float, indexed: int) -> dict[str, Any]:
    """One timed apply, split into its parts (seconds): the query embeddings, the store's
    reads (without the query embedding the store made), its writes (with the embedding of the
    turns they index, by Retrieval or by the store), the two searches, and the rest."""
    embed = probe.get("embed_query", "embed_query_store")
    reads = probe.get("store_read") - probe.get("embed_query_store")
    writes = probe.get("store_write", "embed_documents")
    vector, bm25 = probe.get("vector_search"), probe.get("bm25_search")
    return {
        "total": seconds,
        "embed": embed,
        "embed_calls": probe.count("embed_query", "embed_query_store"),
        "vector": vector,
        "bm25": bm25,
        "store": reads,
        "writes": writes,
        "rest": seconds - embed - reads - writes - vector - bm25,
        "indexed": indexed,
    }


def _summarize(rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {
        name: _spread([r[name] for r in rows], 1_000.0)
        for name in ("total", "embed", "vector", "bm25", "store", "writes", "rest")
    }
    out["embed_calls"] = _spread([r["embed_calls"] for r in rows])
    out["indexed_per_call"] = _spread([r["indexed"] for r in rows])
    out["indexed_total"] = sum(r["indexed"] for r in rows)
    out["queries"] = len(rows)
    out["apply_ms"] = [round(r["total"] * 1_000.0, 2) for r in rows]
    return out


def _settle(strategy: Any) -> float:
    """Wait until the in-process indexes of ``strategy`` have no background work pending (past
    32,768 rows a VectorIndex fits its coarse lists in a thread, searching exactly until then;
    a BM25 index loaded from index blocks merges their postings): the latency measured is the
    steady state's. Returns the seconds waited."""
    started = time.perf_counter()
    for lexical in list(getattr(strategy, "_lexicals", {}).values()):
        for index in (getattr(lexical, "vectors", None), getattr(lexical, "index", None)):
            if index is not None and hasattr(index, "wait"):
                index.wait(600)
    return time.perf_counter() - started
