"""The retrieval benchmark's measurements, one function per section: recall@k over the evicted
turns, the evidence each end-to-end configuration makes available, small talk, the replay's
tokens added per turn, and latency (``bench/retrieval.py`` runs them in order).
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from langchain_core.embeddings import Embeddings
from langchain_core.messages import BaseMessage, HumanMessage

from bench.harness import mean
from bench.retrieval_config import (
    _E2E,
    BENCH_KEY,
    MULTI_FACTS,
    REF_RANKINGS,
    SMALL_TALK,
    RetrievalBenchConfig,
    _e2e_configs,
    _min_score_spec,
)
from bench.retrieval_data import Conversation, Question
from langmem_ext.retrieval.config import RetrievalConfig
from langmem_ext.retrieval.strategy import Retrieval


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
    from langmem_ext.retrieval.text import render_turn

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
    from langmem_ext.retrieval.text import render_turn

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


# long: one conversation's evictions and searches; the rows it records are read together
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
                    "recall": mean([p["recall"] for p in picks]),
                    "hit": mean([1.0 if p["hit"] else 0.0 for p in picks]),
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
    from bench.retrieval_ideas import idea_class

    return idea_class(spec.idea)(
        inner,
        store=_store(None if spec.ranking == "bm25" else embeddings),
        ranking=spec.ranking,  # type: ignore[arg-type]
        gate=spec.gate,  # type: ignore[arg-type]
        config=RetrievalConfig(
            neighbors=spec.neighbors,
            compact=spec.compact,
            **({} if spec.feedback is None else {"feedback": spec.feedback}),
            past_tokens=spec.past_tokens,
            decompose=spec.decompose,
            query_messages=spec.query_messages,
            min_score=spec.min_score,
            rrf_k=config.rrf_k,
            dense_weight=config.dense_weight,
        ),
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
    from langmem_ext.core.shape import RETRIEVED_ID

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
    multi = [r for r in with_facts if r["facts"] >= MULTI_FACTS]
    para = [r for r in rows if not r.get("facts") and r["overlap"] == 0]  # no content word shared
    return {
        "fact_recall": mean([r["facts_available"] / r["facts"] for r in with_facts]),
        "all_facts_available": mean(
            [1.0 if r["facts_available"] == r["facts"] else 0.0 for r in with_facts]
        ),
        "half_facts_available": mean(
            [1.0 if 2 * r["facts_available"] >= r["facts"] else 0.0 for r in with_facts]
        ),
        "questions": len(rows),
        "evidence_available": mean([1.0 if r["available"] else 0.0 for r in rows]),
        "evidence_in_view": mean([1.0 if r["in_view"] else 0.0 for r in rows]),
        "answer_turns_in_input": (
            sum(r["in_view"] + r["retrieved"] for r in rows) / relevant if relevant else None
        ),
        "answer_turns_in_view": sum(r["in_view"] for r in rows) / relevant if relevant else None,
        "retrieved_tokens": _spread([r["retrieved_tokens"] for r in rows]),
        "retrieved_turns_median": _median([r["retrieved_turns"] for r in rows]),
        "max_tokens_after": max((r["tokens_after"] for r in rows), default=0),
        "within_budget": all(r["tokens_after"] <= budget for r in rows),
        "multi_fact": {
            "questions": len(multi),
            "fact_recall": mean([r["facts_available"] / r["facts"] for r in multi]),
            "all_facts_available": mean(
                [1.0 if r["facts_available"] == r["facts"] else 0.0 for r in multi]
            ),
        },
        "paraphrased": {
            "questions": len(para),
            "evidence_available": mean([1.0 if r["available"] else 0.0 for r in para]),
        },
    }


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
        "tokens_added_mean": mean(tokens),
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
        "tokens_added_mean": mean(tokens),
        "tokens_added_when_retrieving": _spread(with_context),
        "turns_with_context": len(with_context),
        "retrieved_turns_median": _median(turns),
        "apply_ms": _spread(seconds, 1_000.0),
        "over_budget": over,
        "note": "embeddings cached (query embedding not included in apply_ms)",
    }


# long: one measurement: build the indexes, then the timed loop, kept together
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
        namespace: tuple[str, ...] = ("bench", "latency", str(size))
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
        applied, anchor, indexed = _apply_latency(groups, size, queries, config, counter, timed)
        cells["apply"] = applied
        cells["apply_first_round"] = anchor
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
        "vectors_per_turn": mean([len(t.parts) for t in turns[: config.index_turns]]),
    }
    return out


def _apply_latency(
    groups: Sequence[Sequence[BaseMessage]],
    size: int,
    queries: Sequence[str],
    config: RetrievalBenchConfig,
    counter: Any,
    timed: CachedEmbeddings,
) -> tuple[list[float], list[float], int]:
    """One ``Retrieval.apply`` per query (the default hybrid, fresh query embeddings) after a
    thread of ``size`` turns (real turns repeated, fresh ids) was indexed, and side by side
    (each query timed on both, one after the other) the same with the first round's defaults
    (no dense feedback, no query decomposition: the anchor); and how many turns the index
    holds."""
    messages: list[BaseMessage] = []
    for i in range(size):
        for j, m in enumerate(groups[i % len(groups)]):
            messages.append(m.model_copy(update={"id": f"latency-{i}-{j}"}))
    spec = _min_score_spec(None)
    first_round = replace(spec, feedback=False, decompose=False)
    strategies = [_strategy(s, config, counter, timed) for s in (spec, first_round)]
    states = [s.apply(messages).state for s in strategies]
    question = HumanMessage("", id="latency-question")
    for strategy, state in zip(strategies, states, strict=True):
        strategy.apply([*messages, question.model_copy(update={"content": queries[0]})], state)
    seconds: tuple[list[float], list[float]] = ([], [])
    for query in queries:
        asked = question.model_copy(update={"content": query})
        for strategy, state, out in zip(strategies, states, seconds, strict=True):
            started = time.perf_counter()
            strategy.apply([*messages, asked], state)
            out.append(time.perf_counter() - started)
    return seconds[0], seconds[1], states[0].indexed_turns


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
