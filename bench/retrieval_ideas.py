"""The ideas tried to bring more of a question's facts back (second round of the retrieval bench):
each is run on A' and B with every other default unchanged, kept in ``Retrieval`` only when it
helps. The ideas not kept live here, as subclasses of the bench's probed ``Retrieval`` (what the
table "Ideas tried" in ``bench/results/retrieval.md`` measures), so the figures can be re-run.
"""

from __future__ import annotations

import heapq
from collections.abc import Collection, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from langchain_core.embeddings import Embeddings

from bench.retrieval_config import _E2E, HEADLINE, LENDING
from bench.retrieval_measure import ProbedRetrieval
from langmem_ext.core.keys import MemoryKey
from langmem_ext.retrieval.bm25 import tokenize
from langmem_ext.retrieval.index import Candidate

__all__ = ["IDEAS", "Idea", "by_coverage", "by_mmr", "idea_class"]


#: coverage-aware order: the share of a candidate's words already covered costs this much of its
#: weight (measured 0.3, 0.6, 0.9: the less, the less it loses on A')
REDUNDANCY = 0.3


#: coverage-aware order: a candidate's weight before redundancy is ``1 / (RANK_K + rank)``
RANK_K = 10


#: dense MMR: the weight of relevance against redundancy (measured 0.5, 0.7, 0.85)
MMR_LAMBDA = 0.85


#: the shared-words gate: a query also searches when one of the top results of a ranking holds
#: this many of its content words
SHARED_WORDS = 2


#: the shared-words gate looks at this many results of each ranking
SHARED_TOP = 5


@dataclass(frozen=True)
class Idea:
    """One idea tried: its row (the default hybrid row with one thing changed), whether
    ``Retrieval`` kept it, and what it is, in a sentence."""

    spec: _E2E
    kept: bool
    what: str


def by_coverage(picked: Sequence[Candidate], weight: float = REDUNDANCY) -> Iterator[Candidate]:
    """``picked`` (best first) reordered coverage-aware: the next is the best by
    ``(1 - weight * redundancy) / (RANK_K + rank)``, its redundancy the share of its words (a
    turn's user message) that the candidates before it already hold. Lazy greedy: a gain only
    falls as the covered words grow, so it is recomputed when it reaches the top of the heap."""
    words = [frozenset(tokenize(c.parts[0] if c.kind == "turn" and c.parts else c.text))
             for c in picked]  # fmt: skip
    covered: set[str] = set()

    def gain(i: int) -> float:
        shared = len(words[i] & covered) / len(words[i]) if words[i] else 0.0
        return (1.0 - weight * shared) / (RANK_K + i)

    heap = [(-1.0 / (RANK_K + i), i, 0) for i in range(len(picked))]
    while heap:
        _, i, at = heapq.heappop(heap)
        if at != len(covered):
            fresh = gain(i)
            if heap and fresh < -heap[0][0]:
                heapq.heappush(heap, (-fresh, i, len(covered)))
                continue
        covered.update(words[i])
        yield picked[i]


class CoverageRetrieval(ProbedRetrieval):
    """Coverage-aware packing: the fused results tried in :func:`by_coverage` order."""

    def _fuse(self, turns: Any, passages: Any, shown: Collection[str]) -> Any:
        return list(by_coverage(super()._fuse(turns, passages, shown)))


class SharedWordsGate(ProbedRetrieval):
    """A gate that errs towards searching: ``gate="auto"``, and also every query one of whose
    rankings' top results holds ``SHARED_WORDS`` of its content words."""

    def _searches(
        self, query: str, rankings: Sequence[tuple[float, Sequence[Candidate]]], key: MemoryKey
    ) -> bool:
        if super()._searches(query, rankings, key):
            return True
        terms = set(tokenize(query))
        tops = [c for _, ranking in rankings for c in ranking[:SHARED_TOP]]
        most = max((len(terms.intersection(tokenize(c.text))) for c in tops), default=0)
        return most >= SHARED_WORDS


def by_mmr(
    picked: Sequence[Candidate], embeddings: Embeddings, weight: float = MMR_LAMBDA
) -> list[Candidate]:
    """``picked`` (best first) in maximal-marginal-relevance order: the next is the best by
    ``weight * relevance - (1 - weight) * max cosine to those chosen``, relevance
    ``RANK_K / (RANK_K + rank)`` (1 for the first); a turn's vector is the normalised mean of
    its messages' embeddings."""
    vectors = []
    for c in picked:
        rows = np.asarray(embeddings.embed_documents(list(c.parts) or [c.text]), dtype=float)
        mean = rows.mean(axis=0)
        vectors.append(mean / (np.linalg.norm(mean) or 1.0))
    relevance = [RANK_K / (RANK_K + i) for i in range(len(picked))]
    chosen: list[int] = []
    closest = np.zeros(len(picked))  # max cosine to a chosen one
    left = set(range(len(picked)))
    while left:
        best = max(left, key=lambda i: (weight * relevance[i] - (1 - weight) * closest[i], -i))
        chosen.append(best)
        left.discard(best)
        for i in left:
            closest[i] = max(closest[i], float(vectors[i] @ vectors[best]))
    return [picked[i] for i in chosen]


class DenseMMR(ProbedRetrieval):
    """Dense MMR: the fused results tried in :func:`by_mmr` order."""

    def _fuse(self, turns: Any, passages: Any, shown: Collection[str]) -> Any:
        picked = super()._fuse(turns, passages, shown)
        return picked if self._embeddings is None else by_mmr(picked, self._embeddings)


_CLASSES: dict[str, type[ProbedRetrieval]] = {
    "mmr": DenseMMR,
    "coverage": CoverageRetrieval,
    "shared_words": SharedWordsGate,
}


def idea_class(idea: str) -> type[ProbedRetrieval]:
    """The probed ``Retrieval`` an idea runs as ("": the defaults)."""
    return _CLASSES.get(idea, ProbedRetrieval)


IDEAS: tuple[Idea, ...] = (
    Idea(
        _E2E(HEADLINE, "hybrid"),
        True,
        "the defaults (the reference)",
    ),
    Idea(
        _E2E(f"{HEADLINE}, feedback=False", "hybrid", feedback=False),
        True,
        "pseudo-relevance feedback on the dense side (`RetrievalConfig.feedback`, now a "
        "default): the query's vector plus 0.7 of the mean first row of its 3 best dense "
        "results, searched again as a ranking of its own that never decides the first place "
        "(without that rule, 48 of the tests in tests/retrieval failed: at a budget of a turn "
        "or two a distinctive turn lost its place to generic ones); this row switches it off "
        "(`feedback=False`) to show what it adds",
    ),
    Idea(
        _E2E(f"{HEADLINE}, coverage-aware packing", "hybrid", idea="coverage"),
        False,
        f"coverage-aware packing: a result whose user message repeats words already packed "
        f"loses {REDUNDANCY:g} of its weight per share repeated (also measured at 0.6 and 0.9: "
        "worse)",
    ),
    Idea(
        _E2E(f"{HEADLINE}, gate on shared words", "hybrid", idea="shared_words"),
        False,
        f"a gate that errs towards searching: also search when a top-{SHARED_TOP} result holds "
        f"{SHARED_WORDS} of the query's content words",
    ),
    Idea(
        _E2E(f"{HEADLINE}, decompose=False", "hybrid", decompose=False),
        True,
        "query decomposition without a model (`RetrievalConfig.decompose`, now a default): a "
        "question that asks several things is searched whole and clause by clause, each "
        "clause's rankings weighing twice the whole question's (also measured at 0.5 and 1: "
        "worse on every fact), and each clause's best result placed first (1 per clause; 0 and "
        "2 measured the same here, 1 kept because a clause's answer can otherwise lose its "
        "place to turns that match both clauses, tests/retrieval); this row switches it off "
        "(`decompose=False`) to show what it adds",
    ),
    Idea(
        _E2E(LENDING, "hybrid", past_tokens=2_250),
        False,
        "budget that follows the question (`RetrievalConfig(past_tokens=2_250)`, opt-in): a "
        "question about the past may spend twice the context budget, lent by the view's oldest "
        "turns for that request only (not a default: on the requests it lends, the lent turns "
        "are neither folded nor retrievable, and the prompt's prefix changes)",
    ),
    Idea(
        _E2E(f"{HEADLINE}, 2,000 tokens", "hybrid", context_tokens=2_000),
        False,
        "the same split done by the inner strategy instead (2,000 context tokens held back on "
        "every request, no lending): the turns it gives up are evicted and indexed, so they can "
        "come back, which lending cannot offer; but every request pays, small talk included",
    ),
    Idea(
        _E2E(f"{HEADLINE}, 2,500 tokens", "hybrid", context_tokens=2_500),
        False,
        "the same at 2,500 context tokens",
    ),
    Idea(
        _E2E(f"{HEADLINE}, query_messages=1", "hybrid", query_messages=1),
        False,
        "query expansion from the conversation: the message before the question joins its "
        "query (`RetrievalConfig(query_messages=1)`; 2 measured too: worse). The recent turns "
        "pull the search towards what was just said, and every query then names something the "
        "memory holds, so small talk is searched too",
    ),
    Idea(
        _E2E(f"{HEADLINE}, dense MMR", "hybrid", idea="mmr"),
        False,
        f"maximal marginal relevance on the dense side: the fused results reordered by "
        f"{MMR_LAMBDA:g} x relevance (by rank) minus {1 - MMR_LAMBDA:g} x the cosine to the "
        "closest result already chosen (turn vector: the mean of its messages'; also measured "
        "at 0.5 and 0.7: worse)",
    ),
)
