"""Section 3 of the scale benchmark: the first turn of a fresh process, with the vectors of an
earlier run loaded from memory or from a SQLite file (the latter in a child process that runs
:func:`restart_worker`).
"""

from __future__ import annotations

import json
import resource
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from langchain_core.embeddings import Embeddings
from langchain_core.messages import BaseMessage, HumanMessage
from langgraph.store.base import Op, Result

from bench.harness import ROOT, seed_tiktoken
from bench.retrieval_measure import CachedEmbeddings, _spread
from bench.scale_setup import (
    ScaleBenchConfig,
    _ask,
    _index_config,
    _load_targets,
    _longest,
    _Probe,
    _ProbedEmbeddings,
    _retrieval,
    _search_targets,
    _settle,
    _timed_batch,
    _TimedMemoryStore,
    _timing,
    build_thread,
    load_groups,
)


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


def _fresh_calls(
    reader: Any,
    thread: list[BaseMessage],
    queries: Sequence[str],
    state: Any,
    probe: _Probe,
    *,
    retrieved: bool,
) -> list[dict[str, Any]]:
    """One timed ``apply`` of a fresh ``reader`` per query (the thread, then the query), with
    what it indexed, what it embedded and (``retrieved``) how many turns it brought back."""
    calls: list[dict[str, Any]] = []
    for query in queries:
        messages = [*thread, _ask(query)]
        probe.reset()
        started = time.perf_counter()
        result = reader.apply(messages, state)
        seconds = time.perf_counter() - started
        call = {"seconds": seconds, "indexed": result.report.indexed}
        if retrieved:
            call["retrieved"] = len(result.report.retrieved)
        calls.append({**call, **_embed_counts(probe, query)})
    return calls


def _fresh_split(
    store: Any,
    reader: Any,
    thread: list[BaseMessage],
    query: str,
    state: Any,
    probe: _Probe,
    budget: int,
) -> dict[str, Any]:
    """Where a fresh Retrieval's first call on ``store`` spends its time: another fresh one,
    instrumented, once ``reader``'s background fit is done (then ``store`` is no longer
    probed), and the inner ``TokenBudget`` alone with a cold counter (``inner_cold_s``)."""
    from langmem_ext import TiktokenCounter, TokenBudget

    _settle(reader)
    messages = [*thread, _ask(query)]
    instrumented = _retrieval(store, budget, TiktokenCounter())
    probe.reset()
    with _timing(probe, [*_load_targets(), *_search_targets()]):
        started = time.perf_counter()
        instrumented.apply(messages, state)
        split = _first_call_split(probe, time.perf_counter() - started)
    store.probe = None
    started = time.perf_counter()
    TokenBudget(budget, counter=TiktokenCounter()).apply(messages, state)
    split["inner_cold_s"] = time.perf_counter() - started
    return split


def _restart_memory(
    thread: list[BaseMessage],
    queries: Sequence[str],
    config: ScaleBenchConfig,
    counter: Any,
    documents: CachedEmbeddings,
) -> dict[str, Any]:
    """(a) A new Retrieval (cold token counts) on the InMemoryStore another one filled."""
    from langmem_ext import TiktokenCounter

    probe = _Probe()
    store = _TimedMemoryStore(index=_index_config(_ProbedEmbeddings(documents, probe)))  # type: ignore[arg-type]
    writer = _retrieval(store, config.budget, counter)
    started = time.perf_counter()
    state = writer.apply(thread).state
    write_s = time.perf_counter() - started
    state = writer.apply([*thread, _ask(_longest(queries))], state).state
    _settle(writer)  # its background fit done: the reader has the machine to itself
    del writer
    reader = _retrieval(store, config.budget, TiktokenCounter())
    store.probe = probe  # a few batches a call: the timing costs nothing measurable
    calls = _fresh_calls(reader, thread, queries, state, probe, retrieved=False)
    split = _fresh_split(store, reader, thread, queries[0], state, probe, config.budget)
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
                "import sys; from bench.scale_restart import restart_worker; "
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


# long: the child process's whole job (load, open, first call), timed step by step in order
def restart_worker(spec_path: str) -> int:
    """The fresh process of section 3 (b): open the SQLite file, time the first apply of a new
    Retrieval and what it embeds; print the results as one JSON line."""
    spec = json.loads(Path(spec_path).read_text(encoding="utf-8"))
    seed_tiktoken()
    from langmem_ext import MemoryState, TiktokenCounter
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
        calls = _fresh_calls(reader, thread, spec["queries"], state, probe, retrieved=True)
        out["calls"] = calls
        out["first_apply_s"] = calls[0]["seconds"]
        out["later_apply_s"] = _spread([c["seconds"] for c in calls[1:]])
        first = spec["queries"][0]
        out["split"] = _fresh_split(store, reader, thread, first, state, probe, spec["budget"])
    out["max_rss_mb"] = _max_rss_mb()
    print(json.dumps(out), flush=True)
    return 0


def _max_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0
