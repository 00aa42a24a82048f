"""Retrieval memory: bring evicted turns and knowledge back when the question needs them.

``Retrieval(inner, store=...)`` wraps any other strategy. Every turn:

1. the inner strategy builds its view with ``max_retrieved_tokens`` of the request held back (so
   the whole request, retrieved context included, still fits the inner budget);
2. every turn of the conversation that left the inner view is written once to a LangGraph
   ``BaseStore`` under the memory key's namespace ``("langmem_ext", "turns", tenant, user,
   thread)``. The item key is the position-safe key of the turn's first message
   (:func:`~langmem_ext.core.identity.key_at`: its id, or for a message without one a digest
   chained over the history before it), so two turns that both say "continue" are two items, and
   writing the same turn again is idempotent;
3. the newest human message (plus, with ``query_messages=n``, the ``n`` messages before it) is the
   query, when it may need the past (``gate``): an in-process vector index
   (:class:`~langmem_ext.retrieval.vectors.VectorIndex`, over the vectors stored with each turn; or
   the store's own dense search with ``dense_index="store"``), an in-process BM25 index, and any
   knowledge ``sources`` (searched for every query, concurrently, each under
   ``source_timeout``) are fused by reciprocal rank, deduplicated by content and capped;
4. the best results that are not already in the view go into ONE clearly marked context message,
   placed just before the newest human message (late, so the cached prompt prefix stays the
   same), within ``max_retrieved_tokens``. Turns are stored as text: a tool call and its results
   come back together, as part of their turn, or not at all. Retrieved text is fenced and
   neutralised (:func:`~langmem_ext.core.fences.neutralize`): it cannot close the context message
   or a ``<turn>`` / ``<passage>`` block, whatever its spacing or attributes.

``scope="thread"`` searches the current thread only; ``scope="user"`` all of the user's threads.
Tenants never mix: their namespaces share no prefix beyond ``("langmem_ext", "turns")``. Memory
kept in a store outlives the graph state and is shared by whoever presents the same key, so
Retrieval fails closed: it refuses to run when the part of the key its scope needs (the thread,
or the user) was not given and fell back to ``"default"``, unless ``shared_default=True`` says a
shared memory is intended (:class:`~langmem_ext.core.keys.MissingKeyError`).


How turns, facts, marks and index blocks are kept in the store, how several workers share
them, and what a damaged value costs: :mod:`~langmem_ext.retrieval.layout`. The
modules beside this one hold the rest: :mod:`~langmem_ext.retrieval.config` (the parameters),
:mod:`~langmem_ext.retrieval.writes` (what is written), :mod:`~langmem_ext.retrieval.catchup` and
:mod:`~langmem_ext.retrieval.search` (the in-process indexes and their search),
:mod:`~langmem_ext.retrieval.compose` (the context message),
:mod:`~langmem_ext.retrieval.prefetch` (embedding ahead).


One flow. ``Retrieval`` is a strategy like the others: its plan runs the inner strategy's plan
(``inner.plan(...)``, whose fold requests pass through it unchanged and are folded by this
strategy's own fold machinery, with the inner strategy's settings), then asks for its I/O as
steps the drivers perform: the turn writes (a read-only view declines them, as it defers a
fold), then the index search and the knowledge sources together (concurrently under
``aapply``). The store I/O inside a step is itself a sans-I/O generator of ``BaseStore``
operations, driven by ``batch`` or by ``abatch``. ``apply`` / ``aapply`` / ``view`` / ``aview``
are the engine's own: the drivers of :mod:`langmem_ext.core.steps` run this plan like any other
(each request a :class:`~langmem_ext.core.steps.Step`). The callbacks are the inner strategy's
(``inner.notify(...)``).
"""

from __future__ import annotations

import concurrent.futures
import logging
import threading
from collections import OrderedDict
from collections.abc import Callable, Collection, Generator, Sequence
from dataclasses import replace
from typing import Any, cast

from langchain_core.embeddings import Embeddings
from langchain_core.messages import BaseMessage
from langgraph.store.base import BaseStore, GetOp, Item, PutOp

from langmem_ext.core.keys import DEFAULT, MemoryKey
from langmem_ext.core.messages import is_system
from langmem_ext.core.result import MemoryResult
from langmem_ext.core.state import MemoryState
from langmem_ext.core.steps import DECLINED, Flow
from langmem_ext.core.transitions import indexed_through
from langmem_ext.retrieval.codec import model_id
from langmem_ext.retrieval.compose import compose, fuse, source_passages
from langmem_ext.retrieval.config import (
    Gate,
    Ranking,
    RetrievalConfig,
    Scope,
    Source,
    check_index,
    check_prefetch,
    check_room,
    check_store,
    context_budget,
    has_index,
    moved_keyword,
    past_budget,
    resolve_dense_index,
    retrieved_budget,
)
from langmem_ext.retrieval.flows import Io, _SourceSearch, _StoreFlow, _Together
from langmem_ext.retrieval.index import Candidate, Faults, IndexCacheStats, IndexSetup
from langmem_ext.retrieval.layout import MARKS, TURNS
from langmem_ext.retrieval.lending import Cut, cuts
from langmem_ext.retrieval.model_steps import model_for, rerank_flow, rewrite_flow
from langmem_ext.retrieval.prefetch import Prefetch, Prefetched, upcoming
from langmem_ext.retrieval.search import clauses_io, turns_io
from langmem_ext.retrieval.text import (
    STRONG_MATCH,
    asks_about_the_past,
    clauses,
    last_human,
    message_text,
    summary_facts,
    turn_groups,
    turn_query,
)
from langmem_ext.retrieval.writes import (
    fact_writes,
    facts_io,
    resume_point,
    turns_to_index,
    write_io,
)
from langmem_ext.strategies.engine import Plan, Request, Strategy
from langmem_ext.strategies.folding import Folding

__all__ = ["Retrieval"]

logger = logging.getLogger("langmem_ext")

#: the threads a Retrieval checked its store still holds (their mark is there), remembered per
#: process up to this many (a thread forgotten is checked again: one small get)
CHECKED_THREADS = 4096
#: the ``store_faults`` kinds of a store that lost a thread's turns (emptied, replaced, restored
#: from before the thread began) while the caller's state says they were indexed
LOST_STORE = "threads whose turns were gone (re-indexed from the history the call passed)"
LOST_TURNS = "turns gone from the store that the history no longer holds (cannot be retrieved)"


#: Retrieval's plan: the inner plan's fold requests and its own I/O requests
_Flow = Plan


_PARTS = ("tenant", "user", "session")


def _not_given(key: MemoryKey) -> frozenset[str]:
    """The parts of ``key`` that name no one: left out of a config (``defaulted``) or given as
    the shared ``"default"`` (``MemoryKey(session="s")`` names no user)."""
    return key.defaulted | {p for p in _PARTS if getattr(key, p) == DEFAULT}


#: the key of a call that gave none: every part fell back to the shared default
_DEFAULTED = MemoryKey(defaulted=frozenset(_PARTS))


def _check_inner(inner: object) -> None:
    if not isinstance(inner, Strategy) or isinstance(inner, Retrieval):
        raise TypeError(
            f"Retrieval wraps one langmem_ext strategy (TokenBudget, SummaryBuffer, ...), got "
            f"{type(inner).__name__}"
        )


class Retrieval(Strategy, Folding):
    """Wrap ``inner`` so that evicted turns (and knowledge ``sources``) come back when relevant.

    Args:
        inner: any other strategy (TokenBudget, SummaryBuffer, ...). Its budget is the budget of
            the whole request; ``max_retrieved_tokens`` of it is held back for the retrieved
            context.
        store: a LangGraph ``BaseStore``: where the turns are kept (the source of truth). With
            an ``index`` (``{"dims", "embed"}``, any LangChain ``Embeddings``) or
            ``embeddings=``, dense and hybrid ranking are available; without either, BM25 only.
        key: the default memory key: used when a call passes none, and for the parts a call's
            key did not give (a key from ``MemoryKey.from_config`` records which parts fell back
            to ``"default"``).
        k: at most this many evicted turns per view; None (the default): as many as fit
            ``max_retrieved_tokens``, best first.
        max_retrieved_tokens: what the context message may cost (counted with the inner
            counter). It is held back from the inner budget, so it must leave room there.
            Default: a quarter of the inner strategy's ``max_tokens`` (600 for one without a
            token budget).
        scope: ``"thread"`` (this conversation only) or ``"user"`` (all of the user's threads).
        sources: knowledge sources: any ``BaseRetriever`` or ``VectorStore``, searched
            concurrently with the memory index; a failing or slow one is reported, never fatal.
        ranking: ``"dense"``, ``"bm25"`` or ``"hybrid"`` (reciprocal rank fusion of both); the
            default is hybrid when the store has an index, else BM25.
        gate: when the memory (evicted turns and facts) is searched. ``"auto"`` (default):
            when the question may need the past: it refers to the speaker or the conversation
            ("my", "I", "we", "did you say", "remember", "again", ...), asks what or which
            thing should be given or done ("which ID should go on the claim?"), names something
            the memory holds, or an evicted turn matches it strongly (dense similarity >= 0.6);
            small talk and general-knowledge requests ("what is the capital of Australia?")
            add 0 tokens
            (:func:`asks_about_the_past`; a query with no English function word is always
            searched). ``"always"``: every query. A function ``(query) -> bool``: yours.
            Knowledge ``sources`` are searched regardless.
        embeddings: the embedding model of the dense ranking (default: the store index's).
        config: a :class:`RetrievalConfig` with any of the settings below (and of those above:
            a keyword given here wins over the config's field).
        max_tokens: deprecated alias of ``max_retrieved_tokens`` (the inner strategy's
            ``max_tokens`` is the budget of the whole request: one name for two budgets misled).

    Given only through ``config=RetrievalConfig(...)`` (``Retrieval(rrf_k=...)`` raises a
    ``TypeError`` that says so):

        min_query_length: a newest human message with fewer words is not searched for.
        neighbors: 1 brings retrieved turns with the turn before each (clipped to
            ``neighbor_chars``), so an answer comes with what led to it; neighbours only use the
            budget the results leave, best result first, and never displace a result. 0 (the
            default): the turns alone; a neighbour that scores is a result of its own.
        query_messages: how many messages before the newest human message join the query (for
            follow-ups like "and the second one?").
        shared_default: allow running when the part of the key the scope needs (the thread for
            ``scope="thread"``, the user for ``scope="user"``) was not given. Off by default:
            every caller without a ``user_id`` would otherwise read and write one shared memory,
            so one user could be shown another's turns.
        source_k: at most this many passages from the sources per view (default ``k``).
        source_timeout: seconds a source may take before it is reported and skipped.
        candidates: how many results each ranking contributes to the fusion (default ``4 * k``,
            60 when ``k`` is None).
        neighbor_chars: a neighbouring turn is clipped to this many characters.
        rrf_k: the reciprocal-rank-fusion constant: ``score = sum(weight / (rrf_k + rank))``. The
            default 5 lets a confident first place win; the textbook 60 favours whatever appears
            in both rankings, so BM25 noise (a common word shared with the question) outvotes a
            strong dense match: hybrid then finds less than dense alone (``bench/retrieval.py``).
        dense_weight: the dense ranking's weight in hybrid fusion (BM25 and each source: 1). With
            the defaults, hybrid is dense-led, and BM25's first places (an exact name, code or
            number) still come through.
        compact: pack evidence, not padding. A retrieved turn whose user message says enough
            (8 words or more) comes back as that message and only those sentences of the reply
            that share a word with the query; a short follow-up ("it's my staff number"), or a
            short answer to a question the turn before ended with, comes with that turn (clipped to
            ``neighbor_chars``); a turn with a tool round,
            and every turn when the question is about what the assistant said ("what did you
            suggest?"), come back whole.
            The dense index embeds each message of a turn, so a turn is found by its best
            message. False: whole turns.
        feedback: pseudo-relevance feedback on the dense side (in-process dense index only): the
            query's vector plus 0.7 of the mean first row of its 3 best results is searched
            again, as one more ranking in the fusion, so a question worded unlike its answers
            also finds turns worded like the ones it found first (CRI first person: every fact
            of a question 76.7% against 71.2% without it; planted facts 96.4% either way,
            bench/retrieval.py). It never decides the first place: the query's own best result
            keeps it, so at a budget of one turn the distinctive turn the question names still
            comes back. Its similarities are not the query's: the gate and ``min_score`` never
            read them. On by default; False: one dense search (with ``dense_index="store"``
            there is none to repeat: the store searches).
        past_tokens: a budget that follows the question. When the question is about the past
            (what ``gate="auto"`` searches for: a cue word, a name the memory holds, or a strong
            dense match; never an agent's step), the context message may cost up to this much,
            the view's oldest verbatim turns lending what it spends beyond
            ``max_retrieved_tokens``, for that request only: the request stays within the inner
            budget, the system message, the summary and the newest two turns are never lent, the
            view is cut only in front of a human message, and the next request shows the lent
            turns again (``report.lent``: how many messages were lent). None or 0 (the
            default): no lending. Opt-in because, on a request it lends on, the lent turns are
            neither folded nor retrievable and the prompt's prefix changes (a cache miss);
            measured at 4,500-token requests, ``past_tokens=2_250`` finds every fact of both
            parts of a two-part CRI question for 47.8% of them against 34.8%, but planted facts
            told a few dozen messages earlier (in the lent turns) fall from 96.4% to 89.3%
            (bench/retrieval.py).
        decompose: query decomposition, without a model. A question that asks several things
            ("What do I do for work, and where do I live?": split at a semicolon, a question
            mark, "and" or a comma before a question word) is searched whole and clause by
            clause (at most 4), each clause's rankings weighing twice the whole question's in
            the fusion and its best result packed first, so the evidence of each clause comes
            back, not only turns that match the whole question. A one-clause question is
            searched as it is. True by default (conjoined CRI first-person questions: every
            fact of both 34.8% against 26.1%, bench/retrieval.py).
        model_steps: a :class:`~langmem_ext.retrieval.model_steps.ModelSteps`: an optional
            query rewrite and rerank through a chat model (default: the inner strategy's
            summarizer model), each within its timeout, a failure changing nothing; their tokens
            are the report's ``model_step_tokens``. None (the default): no model call.
        min_score: a floor on the dense similarity (the store's ``score``): when no evicted
            turn reaches it, no turn is retrieved (0 tokens; sources still are). None (the
            default): no floor. Set it only after measuring on your embedder and data: with the
            bundled MiniLM, paraphrased questions about planted facts score as low as 0.22 and
            small talk up to 0.58 (bench/retrieval.py), so no single value separates them. No
            effect with BM25-only ranking.
        dense_index: where the dense ranking runs. ``"local"`` (the default, except for
            ``PostgresStore``): Retrieval embeds each turn once, stores its vectors with it
            (float16, so a restart never embeds again) and searches an in-process
            :class:`~langmem_ext.retrieval.vectors.VectorIndex` (about 1-2 ms a search at 100k
            turns, where ``InMemoryStore``'s own search takes 344 ms at 10k); a fresh process
            loads it from the thread's index blocks (see ``layout``). ``"store"``: the
            store embeds and searches (``PostgresStore`` with pgvector: its HNSW index scales
            past one process's memory). The store stays the source of truth either way.
        prefetch_embeddings: embed turns before they leave the view, off the caller's path
            (local dense index only). After each call, the view's oldest messages (at most
            8) are embedded in a worker thread, while the caller talks to its model; the call
            whose view they leave then finds their vectors ready instead of embedding them
            (about 25 ms a turn with the bundled MiniLM on 2 cores, ``bench/results/scale.md``).
            Vectors are the same either way: a text missing from the cache (or whose
            embedding failed in the background) is embedded in the call, as without it.
            ``flush()`` / ``aflush()`` also wait for these embeddings. Off by default.

    Settings a newcomer rarely needs live in :class:`RetrievalConfig` (``config=``), among them
    ``index_cache_bytes``: the bound on the estimated memory of the in-process indexes kept
    across calls (default 64 MiB, least recently searched out first; 0 keeps none beyond the
    call; :attr:`index_cache_stats` shows what it did).

    Every parameter is checked here (:class:`RetrievalConfig`, kept as ``config``), with an
    error that names it: a bad value never waits for the first turn.
    """

    uses_key = True

    def __init__(
        self,
        inner: Strategy,
        *,
        store: BaseStore,
        key: MemoryKey | None = None,
        k: int | None = None,
        max_retrieved_tokens: int | None = None,
        scope: Scope | None = None,
        sources: Sequence[Source] | None = None,
        ranking: Ranking | None = None,
        gate: Gate | None = None,
        embeddings: Embeddings | None = None,
        config: RetrievalConfig | None = None,
        max_tokens: int | None = None,
        **moved: object,
    ) -> None:
        if moved:  # a setting of RetrievalConfig's only (fusion, candidates, neighbours, ...)
            raise moved_keyword(next(iter(moved)))
        _check_inner(inner)
        check_store(store)
        if config is not None and not isinstance(config, RetrievalConfig):
            kind = type(config).__name__
            raise TypeError(f"Retrieval: config must be a RetrievalConfig, got {kind}")
        given = config if config is not None else RetrievalConfig()
        can_embed = has_index(store) or embeddings is not None
        if max_retrieved_tokens is None and max_tokens is None:
            max_retrieved_tokens = given.max_retrieved_tokens
        budget, budget_name = retrieved_budget(max_retrieved_tokens, max_tokens, inner)
        resolved: Ranking = ranking or given.ranking or ("hybrid" if can_embed else "bm25")
        self.config = replace(
            given,
            key=given.key if key is None else key,
            k=given.k if k is None else k,
            scope=given.scope if scope is None else scope,
            sources=given.sources if sources is None else sources,
            gate=given.gate if gate is None else gate,
            max_retrieved_tokens=budget,
            ranking=resolved,
            past_tokens=past_budget(given.past_tokens, budget, inner),
        )
        dense_index = self.config.dense_index
        prefetch_embeddings = self.config.prefetch_embeddings
        check_index(store, resolved, embeddings)
        #: where the dense ranking runs (``"local"`` or ``"store"``, see ``dense_index``)
        self.dense_index, self._embeddings = resolve_dense_index(
            store, resolved, dense_index, embeddings
        )
        check_room(inner, budget_name, budget)
        check_prefetch(prefetch_embeddings, self._embeddings)
        #: the view's oldest messages embedded ahead, off the caller's path (None: off)
        self._prefetch = (
            Prefetch(self._embeddings)
            if prefetch_embeddings and self._embeddings is not None
            else None
        )
        #: the model of the optional rewrite and rerank steps (None: no model call)
        self._model = model_for(self.config.model_steps, inner)
        self._adopt(inner, store)

    def _adopt(self, inner: Strategy, store: BaseStore) -> None:
        """Take the inner strategy's counter, and fold as it does (the inner plan's folds are
        run by this strategy's driver, with its own jobs), and set up the index flows over
        ``store``."""
        self._faults = Faults()
        #: threads whose store was checked against the state (``_recover``), and those
        #: whose lost turns were reported (once each)
        self._checked: OrderedDict[tuple[str, ...], None] = OrderedDict()
        self._reported: OrderedDict[tuple[str, ...], None] = OrderedDict()
        self._checked_lock = threading.Lock()
        self.inner = inner
        self.store = store
        self.counter = inner.counter
        self._fold_like(inner)
        self._clock: Callable[[], float] | None = None
        ttl = store.ttl_config
        #: what the writes, catch-up and search flows share (checked config, store, caches)
        self._setup = IndexSetup(
            config=self.config,
            store=store,
            local=self._embeddings is not None,
            # the identity of the local dense index's embedding model, stored with its vectors
            model=model_id(self._embeddings),
            refresh_ttl=bool(ttl.get("refresh_on_read", True)) if ttl else True,
            faults=self._faults,
        )
        # the caches, by the names tests and benches read them under
        self._lexicals = self._setup.cache.lexicals
        self._query_vectors = self._setup.cache.query_vectors

    @property
    def store_faults(self) -> dict[str, int]:
        """What this Retrieval found damaged or foreign in its store and worked around, by kind
        (vectors re-embedded, index blocks skipped, unreadable turn numbers, ...): never raised,
        each kind logged once."""
        return self._faults.counts()

    @property
    def index_cache_stats(self) -> IndexCacheStats:
        """What the in-process index cache did and holds: hits, misses, evictions, estimated
        bytes and entries, and its bound (``RetrievalConfig.index_cache_bytes``)."""
        return self._setup.cache.stats()

    @property
    def _local(self) -> bool:
        """Whether the dense ranking runs in process (vectors embedded here, kept with turns)."""
        return self._embeddings is not None

    @property
    def max_retrieved_tokens(self) -> int:
        """What the context message may cost (``config.max_retrieved_tokens``)."""
        return context_budget(self.config)

    @property
    def max_tokens(self) -> int:
        """Deprecated alias of :attr:`max_retrieved_tokens`."""
        return context_budget(self.config)

    @property
    def clock(self) -> Callable[[], float]:
        """Where ``now`` comes from: the inner strategy's clock unless one is set here. One
        ``now`` per call serves the inner plan (retry timing) and the index (``indexed_at``)."""
        return self._clock or self.inner.clock

    @clock.setter
    def clock(self, clock: Callable[[], float]) -> None:
        self._clock = clock

    @clock.deleter
    def clock(self) -> None:
        self._clock = None  # the inner strategy's clock again

    def __repr__(self) -> str:
        c = self.config
        return (
            f"Retrieval({self.inner!r}, k={c.k}, "
            f"max_retrieved_tokens={c.max_retrieved_tokens}, ranking={c.ranking!r}, "
            f"scope={c.scope!r}, dense_index={self.dense_index!r}, sources={len(c.sources)})"
        )

    # -- the plan ---------------------------------------------------------------------------------

    def _plan(  # takes key= (uses_key = True): the engine passes it
        self,
        messages: Sequence[BaseMessage],
        state: MemoryState,
        now: float,
        extra: int,
        *,
        key: MemoryKey | None = None,
    ) -> _Flow:
        """The inner plan with the context budget held back (its fold requests pass through),
        then the writes of the turns that left the view (a view declines them), then the index
        search and the knowledge sources together, fused into one context message."""
        who = self._key(key)
        budget = extra + self.max_retrieved_tokens
        inner = yield from self.inner.plan(messages, state, now, budget)
        recovered = yield from self._recover(messages, inner, who)
        indexing = turns_to_index(self._setup, messages, recovered, who, now)
        written = yield from self._write(indexing.ops, who)
        if written and indexing.ops:
            self._remember_checked(who)
        after, count = (indexing.state, indexing.complete) if written else (inner.state, 0)
        # the view's oldest messages, embedded ahead once this call is done (not declined)
        ahead = upcoming(messages, indexing.kept_from) if written and self._prefetch else []
        in_summary = summary_facts(inner.state)
        if in_summary and inner.state.summary != state.summary:  # a fold: new facts, maybe
            facts = fact_writes(self._setup, summary_facts(state), in_summary, who, now)
            if facts:  # remember each (a read-only view declines)
                flow = facts_io(self._setup, facts)
                yield _StoreFlow(self.store, flow, True, self._embeddings)
        query, step = self._query(messages, indexing.kept_from)
        if query is None:
            empty = compose(self.config, self.counter, inner, after, [], (), count)
            return self._prefetched(empty, ahead)
        c = self.config
        search, spent = yield from self._rewritten(query, messages)
        turns, outcomes = yield _Together(
            _StoreFlow(
                self.store,
                self._searched_io(search, messages, who, after.indexed_turns, step),
                embeddings=self._embeddings,
            ),
            _SourceSearch(c.sources, search, c.per_ranking, c.source_timeout),
        )
        if not step and not self._searches(query, turns, who):
            turns = []  # small talk: nothing from the past (sources still count)
        passages, errors = source_passages(c, outcomes)
        # a fact the view's summary still shows is not retrieved again
        picked = self._fuse(turns, passages, indexing.shown | set(in_summary))
        picked, cost = yield from self._reranked(query, picked)
        lend, options = self._lend(inner.messages, query, turns, who, step)
        composed = compose(
            self.config, self.counter, inner, after, picked, errors, count, query, lend, options
        )
        if spent + cost:
            report = replace(composed.report, model_step_tokens=spent + cost)
            composed = replace(composed, report=report)
        return self._prefetched(composed, ahead)

    def _rewritten(self, query: str, messages: Sequence[BaseMessage]) -> Flow[tuple[str, int]]:
        """The text searched for: ``query``, with the model's rewrites when ``model_steps``
        asks for them; and what the call cost."""
        steps = self.config.model_steps
        if self._model is None or steps is None or not steps.rewrite:
            return query, 0
        recent = [message_text(m) for m in messages[-7:-1]]
        extra, cost = yield from rewrite_flow(steps, self._model, self.counter, query, recent)
        return "\n".join([query, *extra]), cost

    def _reranked(self, query: str, picked: list[Candidate]) -> Flow[tuple[list[Candidate], int]]:
        """``picked`` with its best ``candidates`` in the model's order when ``model_steps``
        asks for a rerank; and what the call cost."""
        steps = self.config.model_steps
        if self._model is None or steps is None or not steps.rerank:
            return picked, 0
        head = picked[: steps.candidates]
        texts = [c.text for c in head]
        order, cost = yield from rerank_flow(steps, self._model, self.counter, query, texts)
        if order is None:
            return picked, cost
        return [head[i] for i in order] + picked[len(head) :], cost

    def _prefetched(self, result: MemoryResult, ahead: list[str]) -> MemoryResult:
        """``result``, once the embedding of ``ahead`` (``prefetch_embeddings``) started: last,
        so that it runs while the caller talks to its model, not during this call's search."""
        if ahead and self._prefetch is not None:
            self._prefetch.start(ahead)
        return result

    def _background_work(self) -> list[concurrent.futures.Future[Any]]:
        """The background folds and, with ``prefetch_embeddings``, the embeddings started ahead
        (``flush`` / ``aflush`` wait for both)."""
        ahead = self._prefetch.running() if self._prefetch is not None else []
        return [*super()._background_work(), *ahead]

    def notify(
        self, before: MemoryState, result: MemoryResult, messages: Sequence[BaseMessage]
    ) -> None:
        """The callbacks are the inner strategy's (Retrieval adds none of its own)."""
        self.inner.notify(before, result, messages)

    # -- whose memory -----------------------------------------------------------------------------

    def _key(self, key: MemoryKey | None) -> MemoryKey:
        """The key of this call: the call's key, its defaulted parts filled from the default
        ``key`` (a fully defaulted key when there is neither). Fails closed when the part the
        scope needs is still a default, unless ``shared_default=True``."""
        if key is not None and not isinstance(key, MemoryKey):
            raise TypeError(f"key must be a MemoryKey, got {type(key).__name__}")
        base, scope = self.config.key, self.config.scope
        if key is None:
            who = base if base is not None else _DEFAULTED
        elif base is None or not (left := _not_given(key)):
            who = key
        else:  # a part the call's key left out (or gave as "default") is the default key's
            tenant, user, session = (str(getattr(base if p in left else key, p)) for p in _PARTS)
            who = MemoryKey(tenant, user, session, defaulted=left & _not_given(base))
        # every key, explicit or from a config: a part the scope needs that is the shared
        # default fails closed (``MemoryKey.require``), unless sharing was asked for
        if not self.config.shared_default:
            who.require(
                "session" if scope == "thread" else "user",
                owner=f"Retrieval(scope={scope!r})",
                opt_out="shared_default",
            )
        return who

    def _write(self, ops: list[PutOp], key: MemoryKey) -> Generator[Request, Any, bool]:
        """Ask for the writes of ``ops`` and their marks; whether they were written (a
        read-only call declines them). Written turns join this process's BM25 indexes."""
        if not ops:
            return True
        embeddings = self._embeddings
        if self._prefetch is not None and embeddings is not None:
            embeddings = Prefetched(embeddings, self._prefetch)
        flow = _StoreFlow(self.store, write_io(self._setup, ops, key), True, embeddings)
        written = yield flow
        if written is DECLINED:
            return False
        self._setup.cache.remember(cast(list[PutOp], written))
        return True

    # -- a store that lost the thread ------------------------------------------------------------

    def _recover(
        self, messages: Sequence[BaseMessage], inner: MemoryResult, key: MemoryKey
    ) -> Generator[Request, Any, MemoryResult]:
        """``inner``, or (the store lost the thread) ``inner`` with its index watermark moved
        back so that this call indexes again every turn the history still holds, under the
        numbers they had. A thread is checked once per process, the first time a state says it
        has indexed turns: its mark is read (one small get); in the steady state, nothing.
        The mark is written after the turns of every write, so a store that holds none while
        the state says turns were indexed lost them (emptied, replaced, restored from before
        the thread began). Turns that the history no longer holds are counted, and reported
        once per thread (a warning and ``store_faults``). A store whose items expire
        (``default_ttl``) is not checked: gone turns there are expired, not lost."""
        state = inner.state
        thread = key.namespace(TURNS)
        ttl = self.store.ttl_config or {}
        if state.indexed_turns <= 0 or ttl.get("default_ttl") is not None:
            return inner
        with self._checked_lock:
            if thread in self._checked:
                self._checked.move_to_end(thread)
                return inner
        mark_ns, label = key.namespace(MARKS, scope="user"), key.labels()[2]
        mark = yield _StoreFlow(self.store, _get_io(GetOp(mark_ns, label, False)))
        if mark is not None:
            self._remember_checked(key)
            return inner
        body_start = 1 if messages and is_system(messages[0]) else 0
        start, _ = resume_point(messages, state, body_start)
        held = len(turn_groups(messages, body_start, start))
        first = max(state.indexed_turns - held, 0)  # the number of the oldest turn held
        self._faults.note(LOST_STORE)
        if first and self._first_report(thread):
            self._faults.note(LOST_TURNS, first)
            logger.warning(
                "langmem_ext: the store lost %d turn(s) of thread %r that the state says were "
                "indexed and the history passed no longer holds: they cannot be retrieved "
                "(the %d turn(s) it holds are indexed again)",
                first,
                key.session,
                held,
            )
        again = indexed_through(state, messages, watermark=0, body_start=body_start, turns=first)
        return replace(inner, state=again)

    def _remember_checked(self, key: MemoryKey) -> None:
        """The thread's store holds what the state says (checked, or just written)."""
        _remember(self._checked, key.namespace(TURNS), self._checked_lock)

    def _forget_checked(self, key: MemoryKey) -> None:
        with self._checked_lock:
            self._checked.pop(key.namespace(TURNS), None)

    def _first_report(self, thread: tuple[str, ...]) -> bool:
        """Whether the lost turns of ``thread`` are reported now (once per thread)."""
        return _remember(self._reported, thread, self._checked_lock)

    def _query(self, messages: Sequence[BaseMessage], kept_from: int) -> tuple[str | None, bool]:
        """What the index is searched for, and whether it is an agent's step. Inside an agent
        turn some of whose rounds already left the view (``kept_from``, the oldest position the
        view shows, is past the request), the agent's newest step (:func:`turn_query`): the
        request is the same for hundreds of rounds and cannot tell round 300's need from round
        12's; such a step is always searched (the gate reads a user's question; a step is about
        the turn's own past, paid from the context's reserve). Otherwise the newest human
        message (with ``query_messages`` before it), gated."""
        last = last_human(messages)
        if last is None:
            return None, False
        if kept_from > last + 1 and (step := turn_query(messages, last)):
            return step, True
        text = message_text(messages[last])
        if len(text.split()) < self.config.min_query_length:
            return None, False
        if self.config.query_messages:
            before = messages[max(0, last - self.config.query_messages) : last]
            text = "\n".join([*(message_text(m) for m in before), text])
        return text, False

    def _searches(
        self, query: str, rankings: Sequence[tuple[float, Sequence[Candidate]]], key: MemoryKey
    ) -> bool:
        """Whether this query's memory results are used (``gate``)."""
        gate = self.config.gate
        if gate == "always":
            return True
        if callable(gate):
            return bool(gate(query))
        return self._about_the_past(query, rankings, key)

    def _lend(
        self,
        view: Sequence[BaseMessage],
        query: str,
        rankings: Sequence[tuple[float, Sequence[Candidate]]],
        key: MemoryKey,
        step: bool,
    ) -> tuple[int, list[Cut]]:
        """What the view's oldest turns may lend the context (``past_tokens``), and where the
        view may be cut to pay it: only to a user's question about the past (whatever the
        gate), never to an agent's step (a step pays from the context's own budget)."""
        c = self.config
        extra = (c.past_tokens or 0) - context_budget(c)
        if extra <= 0 or step or not rankings or not self._about_the_past(query, rankings, key):
            return 0, []
        options = cuts(view, self.counter)
        return (min(extra, options[-1].tokens), options) if options else (0, [])

    def _about_the_past(
        self, query: str, rankings: Sequence[tuple[float, Sequence[Candidate]]], key: MemoryKey
    ) -> bool:
        """Whether the question is about the past (what ``gate="auto"`` searches for): an
        evicted turn matches it strongly, or :func:`asks_about_the_past` says so."""
        best = max(
            (c.score for _, ranking in rankings for c in ranking if c.score is not None),
            default=None,
        )
        if best is not None and best >= STRONG_MATCH:
            return True
        lexical = self._setup.cache.peek(self._prefix(key))
        known = None if lexical is None else (lambda term: lexical.index.frequency(term) > 0)
        return asks_about_the_past(query, known)

    # -- the flows, as one Retrieval runs them ---------------------------------------------------

    def _prefix(self, key: MemoryKey) -> tuple[str, ...]:
        """The namespace prefix a search of ``key`` covers (its thread, or its user's)."""
        return self._setup.prefix(key)

    def _turns_io(
        self, query: str, key: MemoryKey, known: int = 0
    ) -> Io[list[tuple[float, list[Candidate]]]]:
        """The memory index's rankings of ``query`` (see :func:`~.search.turns_io`); a store
        found to have lost the thread is checked again by the next call (``_recover``)."""
        return turns_io(self._setup, query, key, known, lambda: self._forget_checked(key))

    def _searched_io(
        self,
        search: str,
        messages: Sequence[BaseMessage],
        key: MemoryKey,
        known: int,
        step: bool,
    ) -> Io[list[tuple[float, list[Candidate]]]]:
        """The rankings of ``search``, and of each clause of a question that asks several
        things (``decompose``; never an agent's step)."""
        whole = self._turns_io(search, key, known)
        last = last_human(messages)
        if step or not self.config.decompose or last is None:
            return whole
        parts = clauses(message_text(messages[last]))
        if not parts:
            return whole
        return clauses_io(whole, [self._turns_io(part, key, known) for part in parts])

    def _fuse(
        self,
        turns: list[tuple[float, list[Candidate]]],
        passages: list[list[Candidate]],
        shown: Collection[str],
    ) -> list[Candidate]:
        """Every ranking fused (see :func:`~.compose.fuse`)."""
        return fuse(self.config, turns, passages, shown)


def _get_io(op: GetOp) -> Io[Item | None]:
    """One get, as a store flow."""
    (got,) = yield [op]
    return cast("Item | None", got)


def _remember(
    seen: OrderedDict[tuple[str, ...], None], thread: tuple[str, ...], lock: threading.Lock
) -> bool:
    """Add ``thread`` to ``seen`` (the newest of at most ``CHECKED_THREADS``); whether it was
    not there yet."""
    with lock:
        new = thread not in seen
        seen[thread] = None
        seen.move_to_end(thread)
        while len(seen) > CHECKED_THREADS:
            seen.popitem(last=False)
    return new
