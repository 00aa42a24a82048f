"""Searching the memory: a query's rankings over the stored turns and facts (dense and BM25, in
process or in the store), each with its fusion weight, and the turns they found, read from the
store when only their index block was loaded."""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from dataclasses import replace
from typing import Any, TypeVar, cast

import numpy as np
from langgraph.store.base import GetOp, Item, Op, SearchOp
from numpy.typing import NDArray

from langmem_ext.core.keys import MemoryKey
from langmem_ext.retrieval.bm25 import BM25Index
from langmem_ext.retrieval.catchup import lexical_io
from langmem_ext.retrieval.codec import stored_vectors
from langmem_ext.retrieval.config import has_index
from langmem_ext.retrieval.flows import Embed, Io
from langmem_ext.retrieval.index import Candidate, IndexSetup, Lexical, scored, turn_candidate
from langmem_ext.retrieval.layout import FACTS, MARKS, PAGE, USER_MARK
from langmem_ext.retrieval.vectors import VectorIndex

#: query vectors a Retrieval remembers (``query_vector_io``)
_QUERY_VECTORS = 32


#: searches of one query at most: again while a result turns out gone from the store
SEARCH_ROUNDS = 4


#: pseudo-relevance feedback (``RetrievalConfig.feedback``): the query's vector plus this share of
#: the mean of its best dense results' first rows is searched again, a ranking of its own
#: (measured on CRI first person and the planted data, bench/retrieval.py: 0.5 to 0.8 give the
#: same gains; 1.0 and more drift from the question)
FEEDBACK_WEIGHT = 0.7


#: pseudo-relevance feedback: how many of the best dense results feed the second search (3
#: measured best; 2, 4 and 5 gain nothing on CRI)
FEEDBACK_TURNS = 3


_T = TypeVar("_T")


class Expanded(list[_T]):
    """A ranking of the expanded query (``feedback``), marked so that the fusion can tell it
    from the query's own (``compose.fuse``: it never decides the first place)."""


#: query decomposition: a clause's rankings weigh this much against the whole question's
#: (measured on conjoined CRI first-person questions, bench/retrieval.py: 0.5, 1 and 2; 2 best)
CLAUSE_WEIGHT = 2.0


class Searched(list[tuple[float, list[Candidate]]]):
    """A question's rankings, each with its fusion weight (a list, like any search's), and
    ``clauses``: the rankings of each of its clauses (query decomposition), which the fusion
    gives a place each (``compose.fuse``)."""

    def __init__(
        self,
        rankings: Sequence[tuple[float, list[Candidate]]],
        clauses: Sequence[Sequence[tuple[float, list[Candidate]]]] = (),
    ) -> None:
        super().__init__(rankings)
        self.clauses = [list(clause) for clause in clauses]


def clauses_io(
    whole: Io[list[tuple[float, list[Candidate]]]],
    parts: Sequence[Io[list[tuple[float, list[Candidate]]]]],
) -> Io[list[tuple[float, list[Candidate]]]]:
    """The whole question's rankings, then each clause's (query decomposition), the clauses'
    weighed ``CLAUSE_WEIGHT`` times theirs, and kept apart too (:class:`Searched`): the fusion
    then places each clause's best result first, so a question that asks two things brings
    back the evidence of both, not only turns that match it as a whole."""
    rankings = yield from whole
    found = []
    for part in parts:
        found.append((yield from part))
    weighed = [(weight * CLAUSE_WEIGHT, ranking) for clause in found for weight, ranking in clause]
    return Searched([*rankings, *weighed], found)


def turns_io(
    setup: IndexSetup,
    query: str,
    key: MemoryKey,
    known: int = 0,
    lost: Callable[[], None] | None = None,
) -> Io[list[tuple[float, list[Candidate]]]]:
    """The memory index's rankings, each with its fusion weight. The dense search and the
    mark read go in one batch; a stale BM25 index then catches up. ``known``: the turns
    the caller's state says were indexed (a thread mark announcing fewer is stale); none
    of the thread's mark while there are some calls ``lost`` (the store lost the thread)."""
    c = setup.config
    prefix = setup.prefix(key)
    marks = key.namespace(MARKS, scope="user")
    thread = key.labels()[2]
    dense = c.ranking != "bm25"
    local = dense and setup.local  # the dense ranking runs in process
    query_vector = (yield from query_vector_io(setup, query)) if local else None
    facts_prefix = key.namespace(FACTS, scope="session" if c.scope == "thread" else "user")
    # the facts are ranked by the store's dense search, or here (``ranked_facts_io``)
    facts_dense = dense and not local and has_index(setup.store)
    first: list[Op] = [
        SearchOp(
            facts_prefix,
            None,
            c.per_ranking if facts_dense else PAGE,
            0,
            query if facts_dense else None,
            setup.refresh_ttl,
        )
    ]
    if dense and not local:
        first.append(SearchOp(prefix, None, c.per_ranking, 0, query, setup.refresh_ttl))
    in_process = local or c.ranking != "dense"  # an index here, caught up by the marks
    if in_process:
        mark_key = thread if c.scope == "thread" else USER_MARK
        first.append(GetOp(marks, mark_key, setup.refresh_ttl))
    results = yield first
    rankings: list[tuple[float, list[Candidate]]] = []
    found = results[0]
    facts = yield from ranked_facts_io(setup, found, query, query_vector, facts_dense)
    if facts:
        rankings.append((c.dense_weight if facts_dense or local else 1.0, facts))
    results = results[1:]
    if dense and not local:
        rankings.append((c.dense_weight, store_ranking(setup, results[0])))
    if in_process:
        mark = results[-1]
        assert mark is None or isinstance(mark, Item)
        if mark is None and known > 0 and lost is not None and c.scope == "thread":
            lost()
        dims = None if query_vector is None else len(query_vector)
        lexical = yield from lexical_io(setup, prefix, marks, thread, mark, dims, known)
        rankings += yield from in_process_io(setup, lexical, query, query_vector)
    return rankings


def store_ranking(setup: IndexSetup, searched: object) -> list[Candidate]:
    """The turns the store's own dense search found, as it ranked them."""
    assert isinstance(searched, list)
    return [
        turn_candidate(
            "/".join((*it.namespace, it.key)),
            it.value,
            setup.keeps_prev,
            getattr(it, "score", None),
        )
        for it in searched
        if isinstance(it, Item)
    ]


def ranked_facts_io(
    setup: IndexSetup,
    found: object,
    query: str,
    query_vector: list[float] | None,
    facts_dense: bool,
) -> Io[list[Candidate]]:
    """The facts ``found`` (one page of them: few, lines of summaries) ranked: by the store
    (``facts_dense``: as found), or here, by their stored vectors (a local dense index: the
    query is embedded once) or by BM25."""
    c = setup.config
    assert isinstance(found, list)
    facts = [fact_candidate(it) for it in found if isinstance(it, Item)]
    if query_vector is not None and facts:
        facts = yield from facts_by_vector(
            setup, [it for it in found if isinstance(it, Item)], query_vector, c.per_ranking
        )
    elif not facts_dense and facts:
        index = BM25Index()
        for fact in facts:
            index.add(fact.uid, fact.text)
        order = {uid: n for n, (uid, _) in enumerate(index.search(query, c.per_ranking))}
        facts = sorted((f for f in facts if f.uid in order), key=lambda f: order[f.uid])
    return facts


def in_process_io(
    setup: IndexSetup, lexical: Lexical, query: str, query_vector: list[float] | None
) -> Io[list[tuple[float, list[Candidate]]]]:
    """The in-process rankings of ``query`` over ``lexical`` (caught up), searched again while
    a result turns out gone from the store."""
    for _ in range(SEARCH_ROUNDS):
        ranked_uids, held = yield from ranked_io(setup, lexical, query, query_vector)
        if all(u in held for _, ranked, _ in ranked_uids for u, _ in ranked):
            break
        # a result was gone from the store (deleted, expired: it left the indexes); a
        # search without it, whose statistics do not count it, ranks the rest
    rankings: list[tuple[float, list[Candidate]]] = []
    for weight, ranked, dense_scores in ranked_uids:
        found = [
            scored(held[u], s) if dense_scores else held[u]  # (BM25: as held)
            for u, s in ranked
            if u in held
        ]
        rankings.append((weight, Expanded(found) if isinstance(ranked, Expanded) else found))
    return rankings


def query_vector_io(setup: IndexSetup, query: str) -> Io[list[float]]:
    """The query's embedding: remembered for the last ``_QUERY_VECTORS`` queries (the same
    text, the same model: the same vector)."""
    with setup.cache.lock:
        vector = setup.cache.query_vectors.get(query)
        if vector is not None:
            setup.cache.query_vectors.move_to_end(query)
            return vector
    vector = cast("list[float]", (yield Embed((query,), query=True)))
    with setup.cache.lock:
        setup.cache.query_vectors[query] = vector
        while len(setup.cache.query_vectors) > _QUERY_VECTORS:
            setup.cache.query_vectors.popitem(last=False)
    return vector


def ranked_io(
    setup: IndexSetup, lexical: Lexical, query: str, query_vector: list[float] | None
) -> Io[tuple[list[tuple[float, Sequence[tuple[str, float]], bool]], dict[str, Candidate]]]:
    """The in-process rankings of ``query`` (dense and BM25, each with its fusion weight and
    whether its scores are dense similarities) and the turns they found (``held_io``)."""
    c = setup.config
    #: (fusion weight, (uid, score) best first, whether the scores are dense similarities)
    ranked_uids: list[tuple[float, Sequence[tuple[str, float]], bool]] = []
    near: list[tuple[str, float]] = []
    if query_vector is not None:
        assert lexical.vectors is not None
        # with codes in the index, twice as many are searched and ranked again by their rows
        # below: the best by rows are then among them, as a process that read every turn
        # finds them (what fusion with another ranking reads, down to the last)
        wide = 2 * c.per_ranking if lexical.approximate else c.per_ranking
        near = lexical.vectors.search(query_vector, wide)
        ranked_uids.append((c.dense_weight, near, True))
    rough = any(uid in lexical.approximate for uid, _ in near)
    if c.ranking != "dense":
        hits = lexical.index.search(query, c.per_ranking)
        ranked_uids.append((1.0, hits, False))
    # the postings of index blocks are merged in the background once this first search
    # from them is done (searches answer the same meanwhile)
    lexical.index.consolidate()
    uids = {u for _, ranked, _ in ranked_uids for u, _ in ranked}
    held = yield from held_io(setup, lexical, uids)
    if rough:
        # results found by a block's int8 codes: their stored rows came with their values
        # (``held_io``), and rank them again
        assert lexical.vectors is not None and query_vector is not None
        exact = lexical.vectors.score(query_vector, [uid for uid, _ in near])
        near = sorted(exact.items(), key=lambda item: (-item[1], item[0]))
    if near:
        near = near[: c.per_ranking]
        ranked_uids[0] = (c.dense_weight, near, True)
    if c.feedback and query_vector is not None:
        assert lexical.vectors is not None
        # after the exact re-ranking: the feedback reads the best results' stored rows. Its
        # scores are similarities to the expanded vector, not to the query: not dense scores
        # (the gate and ``min_score`` read the query's own)
        again = yield from feedback_io(setup, lexical, query_vector, near, held)
        if again:
            ranked_uids.insert(1, (c.dense_weight, Expanded(again), False))
    return ranked_uids, held


def feedback_io(
    setup: IndexSetup,
    lexical: Lexical,
    query: Sequence[float],
    near: Sequence[tuple[str, float]],
    held: dict[str, Candidate],
) -> Io[list[tuple[str, float]]]:
    """The feedback search (:func:`feedback_search`) of ``query`` over ``lexical``'s vectors,
    its new results added to ``held``; results found by a block's int8 codes are ranked again
    by their stored rows once read, as the dense ranking's are, so a fresh process ranks as
    one that read every turn."""
    assert lexical.vectors is not None
    vectors = lexical.vectors
    expanded = feedback_vector(vectors, query, near)
    if expanded is None:
        return []
    k = setup.config.per_ranking
    # with codes in the index, twice as many are searched and ranked again by their rows:
    # the k best by rows are then among them, as a process that read every turn finds them
    found = vectors.search(expanded, 2 * k if lexical.approximate else k)
    rough = any(uid in lexical.approximate for uid, _ in found)
    missing = [uid for uid, _ in found if uid not in held]
    if missing:
        held.update((yield from held_io(setup, lexical, missing)))
    if rough:
        exact = vectors.score(expanded, [uid for uid, _ in found])
        found = sorted(exact.items(), key=lambda item: (-item[1], item[0]))
    return found[:k]


def feedback_vector(
    vectors: VectorIndex, query: Sequence[float], near: Sequence[tuple[str, float]]
) -> NDArray[np.float32] | None:
    """The query's vector (unit length) plus ``FEEDBACK_WEIGHT`` times the mean first row of
    its ``FEEDBACK_TURNS`` best results ``near``; None when there is none, or no query."""
    rows = vectors.first_rows(uid for uid, _ in near[:FEEDBACK_TURNS])
    if not len(rows):
        return None
    q = np.asarray(query, dtype=np.float32)
    norm = float(np.linalg.norm(q))
    if not norm:
        return None
    expanded: NDArray[np.float32] = q / norm + FEEDBACK_WEIGHT * rows.mean(axis=0)
    return expanded


def feedback_search(
    vectors: VectorIndex,
    query: Sequence[float],
    near: Sequence[tuple[str, float]],
    k: int,
) -> list[tuple[str, float]]:
    """Pseudo-relevance feedback on the dense side: the ``k`` best keys for the query's vector
    (unit length) plus ``FEEDBACK_WEIGHT`` times the mean first row of its ``FEEDBACK_TURNS``
    best results ``near`` (none: no second search). A question worded unlike its answers
    ("What are my hobbies?") finds turns worded like the ones it found first."""
    expanded = feedback_vector(vectors, query, near)
    return [] if expanded is None else vectors.search(expanded, k)


def held_io(setup: IndexSetup, lexical: Lexical, uids: Collection[str]) -> Io[dict[str, Candidate]]:
    """The turns of ``uids``: held since they were indexed, or (turns loaded from an index
    block) read now, in one batch, and kept; their stored rows replace the block's int8
    codes in the dense index. A turn no longer in the store (expired, deleted) leaves the
    indexes and the results."""
    turns = lexical.turns
    missing = [uid for uid in uids if uid not in turns]
    if missing:
        # a turn's namespace has 5 parts ("langmem_ext", "turns", tenant, user, thread);
        # labels are percent-encoded, so "/" only separates (a key may hold one)
        where = [uid.split("/", 5) for uid in missing]
        got = yield [GetOp(tuple(w[:5]), w[5], setup.refresh_ttl) for w in where]
        with setup.cache.lock:
            exact: list[tuple[str, dict[str, Any]]] = []
            for uid, item in zip(missing, got, strict=True):
                if not isinstance(item, Item):
                    lexical.forget(uid)
                    continue
                turns[uid] = turn_candidate(uid, item.value, lexical.prev)
                if uid in lexical.approximate:  # the block's codes give way to the rows
                    lexical.approximate.discard(uid)
                    exact.append((uid, item.value))
            if exact:
                lexical.refine(exact)
    return {uid: turns[uid] for uid in uids if uid in turns}


def facts_by_vector(
    setup: IndexSetup, items: Sequence[Item], query: Sequence[float], k: int
) -> Io[list[Candidate]]:
    """The facts ranked by the cosine of their stored vectors with ``query`` (a fact stored
    without vectors, by an older writer, is embedded here), best ``k`` first."""
    rows = {it.key: stored_vectors(it.value, dims=len(query), model=setup.model) for it in items}
    missing = tuple(dict.fromkeys(str(it.value.get("text", "")) for it in items
                                  if rows[it.key] is None))  # fmt: skip
    if missing:
        fresh = dict(zip(missing, (yield Embed(missing)), strict=True))
        for it in items:
            if rows[it.key] is None:
                rows[it.key] = np.asarray([fresh[str(it.value.get("text", ""))]], np.float32)
    index = VectorIndex()
    for it in items:
        index.add("/".join((*it.namespace, it.key)), cast(Any, rows[it.key]))
    by_uid = {"/".join((*it.namespace, it.key)): it for it in items}
    return [
        replace(fact_candidate(by_uid[uid]), score=score) for uid, score in index.search(query, k)
    ]


def fact_candidate(item: Item) -> Candidate:
    return Candidate(
        uid="/".join((*item.namespace, item.key)),
        text=str(item.value.get("text", "")),
        kind="fact",
        ids=(item.key,),
        score=getattr(item, "score", None),
    )
