"""One worker process of ``bench.worker_rss``: serves threads one after another through one
``Retrieval`` and reports its own RSS (``/proc/self/status``) as JSON lines on stdout.

``python -m bench.worker_rss_worker --dsn DSN --cache-bytes N --threads N --turns N
--checkpoints 100,250,... --pool FILE [--revisit N] [--tracemalloc]``

The worker: a ``Retrieval(TokenBudget(budget), store=PostgresStore(dsn),
embeddings=<the bundled MiniLM>, config=RetrievalConfig(index_cache_bytes=N))`` (dense index
local, the default for a store without a vector index). Thread ``i`` is a window of ``2 * turns``
consecutive messages of the CRI persona thread (a seeded offset into the pool); each of its
turns is one ``apply`` (the user's message added), then the assistant's reply is appended. After
each checkpoint's thread: ``gc.collect()``, then VmRSS, the index cache's stats and the p50 of
``apply`` since the previous checkpoint. At the end the first ``revisit`` threads get one more
question each; the view is compared with the one a fresh ``Retrieval`` on the same store gives.

Embeddings: the pool's messages were embedded by the parent with the same model (a ``.npy``
beside the pool file, read here once: constant memory); any other text (none expected: every
query is a pool message) goes to the model loaded in this process, which stays loaded, so its
memory is in the RSS.
``--tracemalloc``: a diagnostic run: snapshots at the checkpoint nearest 500 threads and at the
end, and the largest growth between them by file and line (on stdout, as a ``diagnosis`` line).
"""

from __future__ import annotations

import argparse
import gc
import json
import random
import statistics
import sys
import time
import tracemalloc
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from langchain_core.embeddings import Embeddings
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage

__all__ = ["PoolEmbeddings", "rss_mb", "thread_messages"]


def rss_mb() -> dict[str, float]:
    """This process's VmRSS and VmHWM (peak) from ``/proc/self/status``, in MB (10^6 bytes)."""
    out: dict[str, float] = {}
    for line in Path("/proc/self/status").read_text().splitlines():
        name, _, rest = line.partition(":")
        if name in ("VmRSS", "VmHWM"):
            out[name] = int(rest.split()[0]) * 1024 / 1e6
    return out


class PoolEmbeddings(Embeddings):
    """The model's vectors of the pool's texts, read from a ``.npy`` (one float32 row per text);
    any other text is embedded by ``model`` (counted in ``model_texts``)."""

    model_id = "all-MiniLM-L6-v2-onnx-int8"

    def __init__(self, texts: Sequence[str], vectors: Any, model: Embeddings) -> None:
        self.row = {text: i for i, text in enumerate(texts)}
        self.vectors = vectors
        self.model = model
        self.model_texts = 0

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        missing = [t for t in texts if t not in self.row]
        fresh = dict(zip(missing, self.model.embed_documents(missing), strict=True))
        self.model_texts += len(missing)
        return [fresh[t] if t in fresh else self.vectors[self.row[t]].tolist() for t in texts]

    def embed_query(self, text: str) -> list[float]:
        return self.embed_documents([text])[0]


def thread_messages(pool: Sequence[dict[str, str]], thread: int, turns: int) -> list[BaseMessage]:
    """Thread ``thread``: ``2 * turns`` consecutive pool messages (user first) from a seeded
    offset, with ids of its own."""
    rng = random.Random(f"worker-rss:{thread}")
    starts = [i for i in range(0, len(pool) - 2 * turns + 1) if pool[i]["role"] == "user"]
    start = rng.choice(starts)
    out: list[BaseMessage] = []
    for i, row in enumerate(pool[start : start + 2 * turns]):
        cls = HumanMessage if i % 2 == 0 else AIMessage
        out.append(cls(row["content"], id=f"t{thread}-m{i}"))
    return out


def _view_key(view: Sequence[BaseMessage]) -> list[tuple[str, str | None, str]]:
    return [(m.type, m.id, str(m.content)) for m in view]


class _Worker:
    def __init__(self, args: argparse.Namespace) -> None:
        import numpy as np
        from langgraph.store.postgres import PostgresStore

        from langmem_ext import MemoryKey, TokenBudget
        from langmem_ext.retrieval.config import RetrievalConfig
        from langmem_ext.retrieval.embeddings import LocalMiniLMEmbeddings
        from langmem_ext.retrieval.strategy import Retrieval

        self.args = args
        self.MemoryKey = MemoryKey
        pool_file = Path(args.pool)
        pool = json.loads(pool_file.read_text(encoding="utf-8"))
        self.pool: list[dict[str, str]] = pool["rows"]
        vectors = np.load(pool_file.with_suffix(".npy"))
        model = LocalMiniLMEmbeddings()
        model.load()
        self.loaded = rss_mb()
        model.embed_documents([row["content"] for row in self.pool[:32]])  # its working set
        self.embeddings = PoolEmbeddings(pool["texts"], vectors, model)
        self._store_cm = PostgresStore.from_conn_string(args.dsn)
        self.store = self._store_cm.__enter__()

        def make() -> Retrieval:
            return Retrieval(
                TokenBudget(args.budget),
                store=self.store,
                embeddings=self.embeddings,
                config=RetrievalConfig(index_cache_bytes=args.cache_bytes),
            )

        self.make = make
        self.retrieval = make()
        self.kept: dict[int, tuple[list[BaseMessage], Any]] = {}
        #: turns indexed (left the view) per thread since the last checkpoint
        self.indexed: list[int] = []

    def key(self, thread: int) -> Any:
        return self.MemoryKey("bench", f"worker-rss-{self.args.cache_bytes}", f"thread-{thread}")

    def serve(self, thread: int) -> list[float]:
        """Every turn of ``thread`` through ``apply``; the seconds of each call."""
        messages = thread_messages(self.pool, thread, self.args.turns)
        history: list[BaseMessage] = []
        state: Any = None
        times: list[float] = []
        for i in range(0, len(messages), 2):
            history.append(messages[i])
            started = time.perf_counter()
            result = self.retrieval.apply(history, state, key=self.key(thread))
            times.append(time.perf_counter() - started)
            state = result.state
            history.append(messages[i + 1])
        self.indexed.append(int(state.indexed_turns))
        if thread < self.args.revisit:
            self.kept[thread] = (history, state)
        return times

    def revisit(self) -> dict[str, Any]:
        """Each kept thread asked one more question: its view by the long-lived Retrieval
        (whose index was evicted, unless the cache kept it) and by a fresh one, compared."""
        before = self.retrieval.index_cache_stats
        equal = with_context = 0
        mismatches: list[int] = []
        from langmem_ext.core.shape import RETRIEVED_ID

        for thread, (history, state) in sorted(self.kept.items()):
            first = str(history[0].content).split()[:8]
            ask = HumanMessage(
                f"Do you remember what I told you earlier about {' '.join(first)}?",
                id=f"t{thread}-revisit",
            )
            messages = [*history, ask]
            ours = self.retrieval.apply(messages, state, key=self.key(thread)).messages
            fresh = self.make().apply(messages, state, key=self.key(thread)).messages
            if _view_key(ours) == _view_key(fresh):
                equal += 1
            else:
                mismatches.append(thread)
            with_context += any(m.id == RETRIEVED_ID for m in ours)
        after = self.retrieval.index_cache_stats
        return {
            "threads": len(self.kept),
            "equal": equal,
            "with_retrieved_context": with_context,
            "mismatched_threads": mismatches[:20],
            "hits": after.hits - before.hits,
            "misses": after.misses - before.misses,
        }

    def checkpoint(self, served: int, times: list[float]) -> dict[str, Any]:
        gc.collect()
        stats = self.retrieval.index_cache_stats
        r = self.retrieval
        return {
            "kind": "checkpoint",
            "threads": served,
            **rss_mb(),
            "cache": {
                "entries": stats.entries,
                "bytes": stats.bytes,
                "hits": stats.hits,
                "misses": stats.misses,
                "evictions": stats.evictions,
            },
            "apply_p50_ms": statistics.median(times) * 1e3 if times else None,
            "applies": len(times),
            "indexed_turns_mean": statistics.fmean(self.indexed) if self.indexed else None,
            # per-thread structures outside the index cache, by their sizes
            "sizes": {
                "checked_threads": len(r._checked),
                "reported_threads": len(r._reported),
                "query_vectors": len(r._setup.cache.query_vectors),
                "model_texts": self.embeddings.model_texts,
            },
            "time": time.time(),
        }


def _emit(**fields: Any) -> None:
    print(json.dumps(fields), flush=True)


def _top_growth(first: Any, last: Any, limit: int = 15) -> list[dict[str, Any]]:
    stats = last.compare_to(first, "lineno")
    return [
        {
            "where": f"{s.traceback[0].filename}:{s.traceback[0].lineno}",
            "size_diff_kb": s.size_diff / 1e3,
            "count_diff": s.count_diff,
        }
        for s in stats[:limit]
    ]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.worker_rss_worker")
    parser.add_argument("--dsn", required=True)
    parser.add_argument("--cache-bytes", type=int, required=True)
    parser.add_argument("--threads", type=int, required=True)
    parser.add_argument("--turns", type=int, required=True)
    parser.add_argument("--budget", type=int, default=1_000)
    parser.add_argument("--checkpoints", required=True)
    parser.add_argument("--pool", required=True)
    parser.add_argument("--revisit", type=int, default=0)
    parser.add_argument("--tracemalloc", action="store_true")
    args = parser.parse_args(argv)
    checkpoints = sorted({int(c) for c in args.checkpoints.split(",")})
    started = time.perf_counter()
    worker = _Worker(args)
    _emit(kind="ready", seconds=time.perf_counter() - started, loaded=worker.loaded, **rss_mb())
    snap_at = min(checkpoints, key=lambda c: abs(c - 500)) if args.tracemalloc else None
    first_snap = None
    times: list[float] = []
    for thread in range(args.threads):
        times += worker.serve(thread)
        served = thread + 1
        if served in checkpoints:
            _emit(**worker.checkpoint(served, times))
            times, worker.indexed = [], []
            if snap_at is not None and served == snap_at:
                tracemalloc.start(1)
                first_snap = tracemalloc.take_snapshot()
    if first_snap is not None:
        gc.collect()
        growth = _top_growth(first_snap, tracemalloc.take_snapshot())
        _emit(kind="diagnosis", since_threads=snap_at, top=growth)
        tracemalloc.stop()
    revisit = worker.revisit() if args.revisit else None
    gc.collect()
    _emit(kind="done", revisit=revisit, **rss_mb())
    worker._store_cm.__exit__(None, None, None)
    return 0


if __name__ == "__main__":
    sys.exit(main())
