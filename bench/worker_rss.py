"""Worker RSS against threads served: is a long-lived worker's memory flat, with the local
embedding model, whatever the in-process index cache's bound?

Run ``python -m bench.worker_rss`` from the repository root (``--quick``: 40 threads of 8 turns;
``--out DIR``). It writes ``bench/results/worker_rss.md`` and ``worker_rss.json``
(``worker_rss_quick.*`` for ``--quick``). The database is the machine's PostgreSQL
(``LANGMEM_EXT_TEST_PG``, default 127.0.0.1:5432, db ``test``), in a fresh schema dropped at the
end (each worker's threads under keys of their own).

**Set-up.** One worker process per setting of ``RetrievalConfig.index_cache_bytes`` (default
256 MiB, 64 MiB, 16 MiB, 0), all started together (RSS is each process's own;
``bench/worker_rss_worker.py``): ``Retrieval(TokenBudget(500), store=PostgresStore,
embeddings=LocalMiniLMEmbeddings())``, dense index local (the default without a vector index in
the store), defaults otherwise. Each serves ``threads`` threads one after another; a thread is
``turns`` chat turns (a window of consecutive messages of the CRI persona thread,
``bench/retrieval_data.py``, at a seeded offset: real chat lengths, about 30 words a message),
one ``apply`` per turn. Most turns leave the 500-token view and are indexed (BM25 and MiniLM
vectors, kept in the store, and in process while the cache keeps the thread).

**Embeddings.** The pool's messages are embedded once, by the parent, with the same model, and
handed to the workers as a table (constant memory: it is there from the start). Each worker
still loads the model and runs one batch through it, so the model's memory is in its RSS; a text
outside the table would be embedded by it (the report counts them). Embedding every message in
every worker would take hours on this 2-core machine and adds nothing that grows.

**Measured**, after ``checkpoints`` threads: ``gc.collect()``, then VmRSS (``/proc/self/
status``), the index cache's stats (entries, bytes, hits, misses), the p50 of ``apply`` since
the previous checkpoint and the turns indexed per thread. *Max RSS* is the largest of those
VmRSS samples and the one at the end; VmHWM (the kernel's peak) is shown beside it with its
value once the model was loaded (loading the ONNX model peaks above where it settles; the
worker's batch of 32 texts peaks higher, for the length of the call). Then the
first ``revisit`` threads each
get one more question ("Do you remember ...?"): their indexes were evicted (except where the
cache still holds them), so each is rebuilt from the store; its view must equal the view a fresh
``Retrieval`` on the same store gives.

**Goals** (issue 31), per setting: RSS at the last checkpoint / RSS at the first <= 1.10, and
max RSS < 400 MB.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from bench import harness
from bench.pgserver import fresh_schema, setup_langgraph

__all__ = ["FULL", "QUICK", "WorkerRssConfig", "main", "render_markdown", "run_worker_rss"]

#: the goals: RSS flat within 10 % from the first checkpoint to the last, and under 400 MB
FLAT_RATIO = 1.10
MAX_RSS_MB = 400.0

MIB = 1 << 20


@dataclass(frozen=True)
class WorkerRssConfig:
    mode: str
    threads: int = 2_000
    #: chat turns per thread (one ``apply`` each)
    #: chat turns per thread (one ``apply`` each): 8, so that 2,000 threads x 4 settings fit
    #: in about 15 minutes on this 2-core machine (an apply takes about 8 ms in a worker alone,
    #: 25-75 ms with the four side by side on a machine loaded by other work: the recorded run
    #: took 30 minutes at a load average of 20)
    turns: int = 8
    #: TokenBudget's max_tokens (a quarter held back for the retrieved context): CRI's turns
    #: are some 80 tokens, so about 4 of them stay in the view and the rest are indexed
    budget: int = 500
    checkpoints: tuple[int, ...] = (100, 250, 500, 1_000, 1_500, 2_000)
    #: early threads asked again at the end (their views checked against a fresh Retrieval)
    revisit: int = 50
    #: the settings compared: ``RetrievalConfig.index_cache_bytes``
    cache_bytes: tuple[int, ...] = (256 * MIB, 64 * MIB, 16 * MIB, 0)
    #: CRI messages the threads are drawn from (embedded once by the parent)
    pool_messages: int = 600
    #: a worker not done by then is stopped (the report says so)
    time_limit_s: float = 1_800.0


FULL = WorkerRssConfig(mode="full")
QUICK = replace(
    FULL,
    mode="quick",
    threads=40,
    checkpoints=(10, 20, 40),
    revisit=5,
    pool_messages=120,
    time_limit_s=600.0,
)


def _label(cache_bytes: int) -> str:
    return "0" if cache_bytes == 0 else f"{cache_bytes // MIB} MiB"


# --------------------------------------------------------------------------------------------
# the pool and its vectors


def _pool(config: WorkerRssConfig, folder: Path) -> tuple[Path, dict[str, Any]]:
    """The pool's messages (JSON) and their MiniLM vectors (``.npy`` beside it), cached in
    ``folder`` by content."""
    import numpy as np

    from bench.retrieval_data import load_cri
    from langmem_ext.retrieval.text import clauses

    messages = load_cri().messages[: config.pool_messages]
    rows = [
        {"role": "user" if m.type == "human" else "assistant", "content": str(m.content)}
        for m in messages
    ]
    # what gets embedded: each message as a query (and each of its clauses: query
    # decomposition searches them too), and as a part of a turn (``render_turn``:
    # ``user: ...`` / ``assistant: ...``, the body stripped)
    texts = list(
        dict.fromkeys(
            [r["content"] for r in rows]
            + [part for r in rows for part in clauses(r["content"])]
            + [f"{'user' if r['role'] == 'user' else 'assistant'}: {r['content'].strip()}"
               for r in rows]
        )
    )  # fmt: skip
    text = json.dumps({"rows": rows, "texts": texts}, ensure_ascii=False)
    digest = hashlib.sha256(text.encode()).hexdigest()[:16]
    path = folder / f"worker-rss-pool-{digest}.json"
    info = {
        "messages": len(rows),
        "words": sum(len(r["content"].split()) for r in rows),
        "texts_embedded": len(texts),
    }
    if path.exists() and path.with_suffix(".npy").exists():
        return path, {**info, "embedded_s": 0.0, "cached": True}
    from langmem_ext.retrieval.embeddings import LocalMiniLMEmbeddings

    clock = harness.RunClock()
    model = LocalMiniLMEmbeddings()
    vectors = np.asarray(model.embed_documents(texts), dtype=np.float32)
    np.save(path.with_suffix(".npy"), vectors)
    path.write_text(text, encoding="utf-8")
    return path, {**info, "embedded_s": clock.elapsed, "cached": False}


def _cache_dir() -> Path:
    folder = Path(tempfile.gettempdir()) / "langmem-bench-worker-rss"
    folder.mkdir(exist_ok=True)
    return folder


# --------------------------------------------------------------------------------------------
# the workers


@contextlib.contextmanager
def _schema(dsn: str | None) -> Iterator[str]:
    """A fresh schema of the machine's PostgreSQL, set up for PostgresStore and dropped at the
    end (``dsn`` given, a test's schema: that one). The workers share it: each one's threads
    are keyed by its setting."""
    with contextlib.ExitStack() as stack:
        one = dsn or stack.enter_context(fresh_schema())
        setup_langgraph(one, saver=False)
        yield one


def _worker_cmd(config: WorkerRssConfig, dsn: str, cache_bytes: int, pool: Path) -> list[str]:
    return [
        sys.executable, "-m", "bench.worker_rss_worker",
        "--dsn", dsn,
        "--cache-bytes", str(cache_bytes),
        "--threads", str(config.threads),
        "--turns", str(config.turns),
        "--budget", str(config.budget),
        "--checkpoints", ",".join(map(str, config.checkpoints)),
        "--pool", str(pool),
        "--revisit", str(config.revisit),
    ]  # fmt: skip


def _read(proc: subprocess.Popen[str], label: str, into: list[dict[str, Any]]) -> None:
    assert proc.stdout is not None
    for line in proc.stdout:
        try:
            item = json.loads(line)
        except ValueError:
            continue
        into.append(item)
        if item.get("kind") == "checkpoint":
            harness.log_progress(
                f"[worker_rss] {label}: {item['threads']:,} threads, "
                f"RSS {item['VmRSS']:.0f} MB, cache {item['cache']['entries']} entries "
                f"{item['cache']['bytes'] / MIB:.1f} MiB, apply p50 {item['apply_p50_ms']:.1f} ms"
            )


def run_worker_rss(
    config: WorkerRssConfig, command: str = "", dsn: str | None = None
) -> dict[str, Any]:
    """Every setting's worker, all at once; the results, JSON-ready. ``dsn``: a schema to use
    (default: a fresh one of the machine's PostgreSQL, dropped at the end)."""
    clock = harness.RunClock()
    pool, pool_info = _pool(config, _cache_dir())
    how = "cached" if pool_info["cached"] else f"embedded in {pool_info['embedded_s']:.0f} s"
    harness.log_progress(
        f"[worker_rss] {config.mode}: pool of {pool_info['messages']} CRI messages ({how})"
    )
    settings: list[dict[str, Any]] = []
    with _schema(dsn) as one:
        procs: list[tuple[int, subprocess.Popen[str], list[dict[str, Any]], threading.Thread]] = []
        for cache_bytes in config.cache_bytes:
            proc = subprocess.Popen(
                _worker_cmd(config, one, cache_bytes, pool),
                cwd=harness.ROOT,
                stdout=subprocess.PIPE,
                text=True,
            )
            lines: list[dict[str, Any]] = []
            reader = threading.Thread(
                target=_read, args=(proc, _label(cache_bytes), lines), daemon=True
            )
            reader.start()
            procs.append((cache_bytes, proc, lines, reader))
        for cache_bytes, proc, lines, reader in procs:
            left = max(1.0, config.time_limit_s - clock.elapsed)
            try:
                code = proc.wait(timeout=left)
            except subprocess.TimeoutExpired:
                proc.kill()
                code = proc.wait()
            reader.join(timeout=10)
            settings.append(_setting(config, cache_bytes, code, lines))
    results: dict[str, Any] = {
        "meta": clock.meta(config, command or "python -m bench.worker_rss", pool=pool_info),
        "settings": settings,
    }
    return clock.finish(results)


def _setting(
    config: WorkerRssConfig, cache_bytes: int, code: int, lines: list[dict[str, Any]]
) -> dict[str, Any]:
    points = [x for x in lines if x.get("kind") == "checkpoint"]
    ready = next((x for x in lines if x.get("kind") == "ready"), None)
    done = next((x for x in lines if x.get("kind") == "done"), None)
    complete = done is not None and len(points) == len(config.checkpoints)
    first, last = (points[0], points[-1]) if points else (None, None)
    ratio = last["VmRSS"] / first["VmRSS"] if first and last else None
    samples = [p["VmRSS"] for p in points] + ([done["VmRSS"]] if done else [])
    peak = max(samples, default=None)
    revisit = done.get("revisit") if done else None
    return {
        "cache_bytes": cache_bytes,
        "label": _label(cache_bytes),
        "exit_code": code,
        "complete": complete,
        "ready": ready,
        "checkpoints": points,
        "end": {k: done[k] for k in ("VmRSS", "VmHWM")} if done else None,
        "revisit": revisit,
        "rss_ratio": ratio,
        "peak_mb": peak,
        "hwm_mb": done["VmHWM"] if done else None,
        "hwm_loaded_mb": ready["loaded"]["VmHWM"] if ready else None,
        "flat_met": bool(complete and ratio is not None and ratio <= FLAT_RATIO),
        "peak_met": bool(complete and peak is not None and peak < MAX_RSS_MB),
        "revisit_met": bool(revisit and revisit["equal"] == revisit["threads"]),
    }


# --------------------------------------------------------------------------------------------
# the report


def render_markdown(results: dict[str, Any]) -> str:
    meta, cfg = results["meta"], results["meta"]["config"]
    settings = results["settings"]
    labels = [s["label"] for s in settings]
    first, last = cfg["checkpoints"][0], cfg["checkpoints"][-1]
    pool = meta["pool"]
    lines = [
        "# Worker RSS against threads served",
        "",
        *harness.provenance_lines(meta),
        f"- Load average: {harness.load_span(meta, ' at the start, ')} at the end",
        "",
        f"One worker process per `RetrievalConfig.index_cache_bytes` setting, run side by side: "
        f"`Retrieval(TokenBudget({cfg['budget']:,}), store=PostgresStore, "
        "embeddings=LocalMiniLMEmbeddings())` (dense index local), on the machine's PostgreSQL "
        "(one fresh schema, each worker's threads under keys of their own). Each serves "
        f"{cfg['threads']:,} threads one after another, {cfg['turns']} chat turns each "
        "(one `apply` per turn): windows of the CRI "
        f"persona thread ({pool['messages']} messages, {pool['words'] / pool['messages']:.0f} "
        "words a message on average, at seeded offsets). The pool's vectors were computed once "
        "by the parent with the same model; each worker loads the model and runs a batch "
        "through it (its memory is in the RSS). After each checkpoint: `gc.collect()`, then "
        "VmRSS; *max RSS*: the largest of those samples and the one at the end (after the "
        "revisits). VmHWM, the kernel's peak, is shown below it, and its value once the model "
        "was loaded, before the worker's one batch of 32 texts: loading the ONNX model peaks "
        "above where it settles, and a batch of 32 (the model's default `batch_size`) peaks "
        "higher still, for the length of the call (`memory_arena='off'` gives it back).",
        "",
        "## Goals",
        "",
    ]
    rows = []
    for s in settings:
        ratio = "n/a" if s["rss_ratio"] is None else f"{s['rss_ratio']:.3f}"
        peak = "n/a" if s["peak_mb"] is None else f"{s['peak_mb']:.0f} MB"
        rows.append([f"RSS({last:,}) / RSS({first:,}) ≤ {FLAT_RATIO:.2f}, cache {s['label']}",
                     ratio, harness.verdict(s["flat_met"])])  # fmt: skip
        rows.append([f"max RSS < {MAX_RSS_MB:.0f} MB, cache {s['label']}", peak,
                     harness.verdict(s["peak_met"])])  # fmt: skip
        rv = s["revisit"]
        seen = "n/a" if not rv else f"{rv['equal']} / {rv['threads']}"
        rows.append([f"revisited views equal a fresh Retrieval's, cache {s['label']}", seen,
                     harness.verdict(s["revisit_met"])])  # fmt: skip
    lines += harness.md_table(["goal", "value", "verdict"], rows)
    incomplete = [s["label"] for s in settings if not s["complete"]]
    if incomplete:
        lines += ["", f"Not complete (time limit or error): {', '.join(incomplete)}."]
    lines += ["", "## RSS (MB) by threads served", ""]
    lines += harness.md_table(["threads", *labels], _by_checkpoint(settings, cfg, _rss_cell))
    lines += ["", "## Index cache: entries / MiB held, hits / misses", ""]
    lines += harness.md_table(["threads", *labels], _by_checkpoint(settings, cfg, _cache_cell))
    lines += ["", "## apply p50 (ms) since the previous checkpoint, and turns indexed a thread", ""]
    lines += harness.md_table(["threads", *labels], _by_checkpoint(settings, cfg, _p50_cell))
    lines += ["", "## Revisits", ""]
    lines += [
        f'The first {cfg["revisit"]} threads asked once more at the end ("Do you remember '
        'what I told you earlier about ...?"); their views compared with a fresh '
        "`Retrieval` on the same store. *Hits / misses*: the index cache during the "
        "revisits (a miss rebuilds the thread's index from the store).",
        "",
    ]
    rows = []
    for s in settings:
        rv = s["revisit"] or {}
        rows.append([
            s["label"],
            f"{rv.get('equal', 'n/a')} / {rv.get('threads', 'n/a')}",
            str(rv.get("with_retrieved_context", "n/a")),
            f"{rv.get('hits', 'n/a')} / {rv.get('misses', 'n/a')}",
        ])  # fmt: skip
    lines += harness.md_table(
        ["cache", "equal views", "with retrieved context", "hits / misses"], rows
    )
    lines += ["", "## Per-thread structures outside the index cache (at the last checkpoint)", ""]
    rows = []
    for s in settings:
        sizes = s["checkpoints"][-1]["sizes"] if s["checkpoints"] else {}
        rows.append([s["label"], *(str(sizes.get(k, "n/a")) for k in _SIZES)])
    lines += harness.md_table(["cache", *_SIZES], rows)
    lines += ["", "---", "", f"Machine-readable results: `{meta['json_name']}`.", ""]
    return "\n".join(lines)


_SIZES = ("checked_threads", "reported_threads", "query_vectors", "model_texts")


def _by_checkpoint(
    settings: Sequence[dict[str, Any]], cfg: dict[str, Any], cell: Any
) -> list[list[str]]:
    rows = []
    for at in cfg["checkpoints"]:
        row = [f"{at:,}"]
        for s in settings:
            point = next((p for p in s["checkpoints"] if p["threads"] == at), None)
            row.append("n/a" if point is None else cell(point))
        rows.append(row)
    if cell is not _rss_cell:
        return rows
    rows.append(
        ["end (after the revisits)", *(_mb(s["end"] and s["end"]["VmRSS"]) for s in settings)]
    )
    rows.append(["max RSS", *(_mb(s["peak_mb"]) for s in settings)])
    rows.append(["VmHWM at the end", *(_mb(s["hwm_mb"]) for s in settings)])
    rows.append(["VmHWM once the model was loaded", *(_mb(s["hwm_loaded_mb"]) for s in settings)])
    return rows


def _mb(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.0f}"


def _rss_cell(point: dict[str, Any]) -> str:
    return f"{point['VmRSS']:.0f}"


def _cache_cell(point: dict[str, Any]) -> str:
    c = point["cache"]
    return f"{c['entries']:,} / {c['bytes'] / MIB:.1f}, {c['hits']:,} / {c['misses']:,}"


def _p50_cell(point: dict[str, Any]) -> str:
    p50 = "n/a" if point["apply_p50_ms"] is None else f"{point['apply_p50_ms']:.1f}"
    indexed = point.get("indexed_turns_mean")
    return p50 if indexed is None else f"{p50} ({indexed:.1f})"


write_results = harness.results_writer(render_markdown)


def main(argv: Sequence[str] | None = None) -> int:
    return harness.bench_main(
        argv,
        module="bench.worker_rss",
        description="Worker RSS against threads served, per index cache bound.",
        quick_help="smoke run: 40 threads of 8 turns",
        configs=(FULL, QUICK),
        run=run_worker_rss,
        write=write_results,
    )


if __name__ == "__main__":
    raise SystemExit(main())
