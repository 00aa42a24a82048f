"""Retrieval's parameters: their types, defaults and checks, and :class:`RetrievalConfig`, which
holds them checked (each error names the parameter, the value and the fix), and where the dense
ranking runs (in process or in the store)."""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Literal

from langchain_core.embeddings import Embeddings
from langchain_core.retrievers import BaseRetriever
from langchain_core.vectorstores import VectorStore
from langgraph.store.base import BaseStore

from langmem_ext.core.checks import is_int, is_number, require_int, require_number
from langmem_ext.core.keys import MemoryKey
from langmem_ext.retrieval.model_steps import ModelSteps
from langmem_ext.strategies.engine import Strategy

Ranking = Literal["dense", "bm25", "hybrid"]
#: when the memory index is searched: ``"auto"`` (the question refers to the past, see
#: :func:`asks_about_the_past`), ``"always"``, or a function of the query
Gate = Literal["auto", "always"] | Callable[[str], bool]
DenseIndex = Literal["local", "store"]
Scope = Literal["thread", "user"]
Source = BaseRetriever | VectorStore


#: Retrieval's fusion defaults (see ``rrf_k`` / ``dense_weight``)
RRF_K = 5
DENSE_WEIGHT = 2.0


#: how many results each ranking brings to the fusion when ``k`` is None (as many as fit)
_CANDIDATES = 60
#: the default context budget is the inner budget over this
_SHARE = 4
#: the default ``index_cache_bytes``: a few thousand turns of in-process indexes with local
#: 384-dimension vectors (some 10-45 KB a turn by ``Lexical.nbytes``, more for short turns),
#: so a worker's memory stays flat as it serves thousands of threads (``bench.worker_rss``:
#: +5.6% from 100 to 2,000 threads at 64 MiB, +33% at 256 MiB); one long thread's index stays
#: whatever its size
DEFAULT_INDEX_CACHE_BYTES = 64 << 20


#: the store classes whose own vector search scales (an ANN index in the database): their
#: dense ranking stays in the store by default (``dense_index="store"``)
_ANN_STORES = frozenset({"PostgresStore", "AsyncPostgresStore"})


def is_positive(value: object) -> bool:
    """A finite number > 0 (not a bool, not NaN)."""
    return is_number(value) and value > 0


def check_int(name: str, value: object, minimum: int, fix: str) -> None:
    require_int(name, value, minimum, owner="Retrieval", fix=fix)


def has_index(store: object) -> bool:
    """Whether ``store`` embeds what it stores (a dense ranking is possible)."""
    return getattr(store, "index_config", None) is not None


def check_store(store: object) -> None:
    if not isinstance(store, BaseStore):
        raise TypeError(
            f"Retrieval: store must be a LangGraph BaseStore (InMemoryStore, SqliteStore, "
            f"PostgresStore, ...), got {type(store).__name__}"
        )


def check_index(store: BaseStore, ranking: Ranking, embeddings: object) -> None:
    if ranking != "bm25" and not has_index(store) and embeddings is None:
        raise ValueError(
            f"ranking={ranking!r} needs embeddings: pass embeddings= (any LangChain "
            "Embeddings), or a store with a vector index, e.g. "
            "InMemoryStore(index={'dims': 384, 'embed': embeddings}); this store has none "
            "(or use ranking='bm25')"
        )
    if embeddings is not None and not isinstance(embeddings, Embeddings):
        raise TypeError(
            f"Retrieval: embeddings must be a LangChain Embeddings, got {type(embeddings).__name__}"
        )


def resolve_dense_index(
    store: BaseStore, ranking: Ranking, given: object, embeddings: Embeddings | None
) -> tuple[DenseIndex, Embeddings | None]:
    """Where the dense ranking runs, and the embeddings a local index uses: ``"store"`` keeps
    it in a store whose search scales (PostgreSQL with pgvector), ``"local"`` everywhere else
    (an in-process :class:`~.vectors.VectorIndex`, embedding with ``embeddings``
    or the store's own model)."""
    if given is None:
        ann = type(store).__name__ in _ANN_STORES and has_index(store) and embeddings is None
        given = "store" if ann else "local"
    if given not in ("local", "store"):
        raise ValueError(f"Retrieval: dense_index must be 'local' or 'store', got {given!r}")
    if given == "store":
        if embeddings is not None:
            raise ValueError(
                "Retrieval: dense_index='store' searches with the store's own embeddings; "
                "drop embeddings= or use dense_index='local'"
            )
        if ranking != "bm25" and not has_index(store):
            raise ValueError(
                "Retrieval: dense_index='store' needs a store with a vector index (index=...)"
            )
        return "store", None
    if ranking == "bm25":
        return "local", None
    local = embeddings if embeddings is not None else getattr(store, "embeddings", None)
    if not local:
        raise ValueError(
            "Retrieval: dense_index='local' needs embeddings: pass embeddings=, or a store "
            "whose index has an embedding model"
        )
    return "local", local


_BUDGET_WHY = "it is what the retrieved-context message may cost"


def _default_share(inner: object) -> int:
    """The context budget when none is given: a quarter of the inner strategy's ``max_tokens``
    (measured on CRI, bench/retrieval.py: at a 4,500-token request, 1,125 tokens of evidence
    find more than 600 of it, and more than the 4,500-token view alone), else 600."""
    limit = getattr(getattr(inner, "config", None), "max_tokens", None)
    return max(limit // _SHARE, 1) if isinstance(limit, int) else 600


def retrieved_budget(given: int | None, alias: int | None, inner: object = None) -> tuple[int, str]:
    """The context budget and the name it was given under: ``max_tokens`` is the deprecated
    alias of ``max_retrieved_tokens`` (the inner strategy's ``max_tokens`` is the budget of
    the whole request: one name for two budgets misled)."""
    if alias is None:
        return (_default_share(inner) if given is None else given), "max_retrieved_tokens"
    if given is not None:
        raise TypeError(
            "Retrieval: pass max_retrieved_tokens only (max_tokens is its deprecated "
            f"alias), got both: max_retrieved_tokens={given!r}, max_tokens={alias!r}"
        )
    warnings.warn(
        "Retrieval(max_tokens=...) is deprecated: it is the retrieved context's budget, "
        "not the request's; use max_retrieved_tokens=",
        DeprecationWarning,
        stacklevel=3,  # the caller of Retrieval(...)
    )
    check_int("max_tokens", alias, 1, _BUDGET_WHY)
    return alias, "max_tokens"


_PAST_WHY = (
    "it is what the context message may cost when the question is about the past, lent by "
    "the view's oldest turns (0 or None, the default: never more than max_retrieved_tokens)"
)


def past_budget(given: int | None, context: int, inner: object) -> int:
    """What the context message may cost when the question is about the past (``past_tokens``,
    resolved): ``context`` (no lending) when not given or 0."""
    if not given:
        return context
    limit = getattr(getattr(inner, "config", None), "max_tokens", None)
    if not isinstance(limit, int):
        raise ValueError(
            f"Retrieval: past_tokens ({given:,}) is lent by the view's oldest turns from "
            f"the inner budget, and {type(inner).__name__} has no max_tokens; drop "
            "past_tokens or use a strategy with a token budget (TokenBudget, SummaryBuffer)"
        )
    if given < context:
        raise ValueError(
            f"Retrieval: past_tokens ({given:,}) must be at least max_retrieved_tokens "
            f"({context:,}): it is what a question about the past may spend in all, the view's "
            "oldest turns lending the difference (0: no lending)"
        )
    return given


def check_room(inner: Strategy, name: str, tokens: int) -> None:
    """The retrieved context's budget is held back from the inner budget (like a reserve):
    refuse one that leaves the inner view nothing, naming *this* parameter (the inner strategy
    would otherwise blame its own ``reserve_tokens`` at the first ``apply``)."""
    config = getattr(inner, "config", None)
    limit = getattr(config, "max_tokens", None)
    if not isinstance(limit, int):
        return  # no token budget (SlidingWindow): nothing to hold back from
    margin = float(getattr(config, "safety_margin", 0.0))
    reserve = int(getattr(config, "reserve_tokens", 0))
    strategy = type(inner).__name__
    room = math.floor(limit * (1.0 - margin)) - reserve
    if tokens >= room:
        raise ValueError(
            f"Retrieval: {name} ({tokens:,}) is held back from the inner budget, and "
            f"{strategy}(max_tokens={limit:,}) leaves {room:,} tokens for the view after its "
            f"safety_margin and reserve_tokens: nothing would be left for the conversation. "
            f"Lower {name} (e.g. {max(room // 4, 1):,}) or raise {strategy}'s max_tokens"
        )


@dataclass(frozen=True, slots=True)
class RetrievalConfig:
    """Retrieval's parameters, checked once on construction: a bad value never waits for the
    first turn, and each error names the parameter, the value and the fix.

    The fields are documented with :class:`Retrieval`'s arguments. ``Retrieval`` takes its
    common settings as keywords (``key``, ``k``, ``max_retrieved_tokens``, ``scope``,
    ``sources``, ``ranking``, ``gate``, ``embeddings``) and every other one only through
    ``config=RetrievalConfig(...)``; a keyword it is given wins over the config's field.
    ``ranking`` and ``max_retrieved_tokens`` left None are resolved by ``Retrieval`` (hybrid or
    BM25 from its store; a quarter of the inner budget): ``Retrieval.config`` holds them
    resolved. ``source_k`` and ``candidates`` stay ``None`` when not given (see
    :attr:`max_passages` and :attr:`per_ranking` for what they resolve to). ``sources`` is kept
    as a tuple.

    ``index_cache_bytes`` bounds the estimated memory of the in-process indexes (BM25, local
    dense vectors, held turns) this Retrieval keeps across calls, least recently searched
    first out (see :class:`~langmem_ext.retrieval.index.IndexCache`); an index dropped is
    rebuilt from the store's index blocks when searched again. 0 keeps none beyond the call.
    """

    k: int | None = None
    max_retrieved_tokens: int | None = None
    min_query_length: int = 3
    gate: Gate = "auto"
    sources: Sequence[Source] = ()
    scope: Scope = "thread"
    ranking: Ranking | None = None
    neighbors: int = 0
    query_messages: int = 0
    key: MemoryKey | None = None
    shared_default: bool = False
    source_k: int | None = None
    source_timeout: float = 5.0
    candidates: int | None = None
    neighbor_chars: int = 600
    rrf_k: int = RRF_K
    dense_weight: float = DENSE_WEIGHT
    compact: bool = True
    feedback: bool = True
    model_steps: ModelSteps | None = None
    min_score: float | None = None
    dense_index: DenseIndex | None = None
    prefetch_embeddings: bool = False
    index_cache_bytes: int = DEFAULT_INDEX_CACHE_BYTES
    past_tokens: int | None = None
    decompose: bool = True

    def __post_init__(self) -> None:
        self._check_sizes()
        self._check_choices()
        self._check_owner()
        self._check_sources()
        self._check_fusion()
        self._check_placement()

    @property
    def max_turns(self) -> int:
        """At most this many evicted turns per view: ``k``, else as many as the fusion brings
        (the budget decides)."""
        return self.per_ranking if self.k is None else self.k

    @property
    def max_passages(self) -> int:
        """At most this many passages from the sources per view: ``source_k``, else ``k``
        (5 when ``k`` is None)."""
        if self.source_k is not None:
            return self.source_k
        return 5 if self.k is None else self.k

    @property
    def per_ranking(self) -> int:
        """How many results each ranking brings to the fusion: ``candidates``, else ``4 * k``
        (60 when ``k`` is None)."""
        if self.candidates is not None:
            return self.candidates
        return _CANDIDATES if self.k is None else 4 * self.k

    def _check_sizes(self) -> None:
        if self.k is not None:
            check_int(
                "k",
                self.k,
                1,
                "it is how many evicted turns a view may bring back (None: the budget decides)",
            )
        if self.max_retrieved_tokens is not None:
            check_int("max_retrieved_tokens", self.max_retrieved_tokens, 1, _BUDGET_WHY)
        if self.past_tokens is not None:
            check_int("past_tokens", self.past_tokens, 0, _PAST_WHY)
        for name in ("min_query_length", "neighbors", "query_messages", "neighbor_chars"):
            check_int(name, getattr(self, name), 0, "0 turns the feature off")
        if self.neighbors > 1:
            raise ValueError(
                f"Retrieval: neighbors must be 0 (the turns alone) or 1 (each with the turn "
                f"before it), got {self.neighbors}"
            )
        if self.source_k is not None:
            check_int("source_k", self.source_k, 0, "or None for k (0: no passages)")
        if self.candidates is not None:
            check_int("candidates", self.candidates, 1, "or None for 4 * k (60 when k is None)")
        if self.min_score is not None and not (
            is_number(self.min_score, finite=False) and -1.0 <= self.min_score <= 1.0
        ):
            raise ValueError(
                f"Retrieval: min_score must be a similarity between -1 and 1 or None, got "
                f"{self.min_score!r}"
            )
        check_int(
            "index_cache_bytes",
            self.index_cache_bytes,
            0,
            "it bounds the memory of the in-process indexes this Retrieval keeps "
            "(0: none kept beyond the call; default 64 MiB)",
        )
        if not isinstance(self.compact, bool):
            raise TypeError(f"Retrieval: compact must be a bool, got {type(self.compact).__name__}")
        if not isinstance(self.decompose, bool):
            raise TypeError(
                f"Retrieval: decompose must be a bool, got {type(self.decompose).__name__}"
            )
        if not isinstance(self.feedback, bool):
            raise TypeError(
                f"Retrieval: feedback must be a bool, got {type(self.feedback).__name__}"
            )
        if self.model_steps is not None and not isinstance(self.model_steps, ModelSteps):
            raise TypeError(
                "Retrieval: model_steps must be a ModelSteps(rewrite=..., rerank=...) or None, "
                f"got {type(self.model_steps).__name__}"
            )

    def _check_choices(self) -> None:
        if not callable(self.gate) and self.gate not in ("auto", "always"):
            raise ValueError(
                f"Retrieval: gate must be 'auto', 'always' or a function of the query, got "
                f"{self.gate!r}"
            )
        if self.scope not in ("thread", "user"):
            raise ValueError(f"Retrieval: scope must be 'thread' or 'user', got {self.scope!r}")
        if self.ranking is not None and self.ranking not in ("dense", "bm25", "hybrid"):
            raise ValueError(
                f"Retrieval: ranking must be 'dense', 'bm25' or 'hybrid', got {self.ranking!r}"
            )

    def _check_placement(self) -> None:
        if self.dense_index is not None and self.dense_index not in ("local", "store"):
            raise ValueError(
                f"Retrieval: dense_index must be 'local' or 'store', got {self.dense_index!r}"
            )
        if not isinstance(self.prefetch_embeddings, bool):
            raise TypeError(
                "Retrieval: prefetch_embeddings must be True or False, got "
                f"{self.prefetch_embeddings!r}"
            )

    def _check_owner(self) -> None:
        if self.key is not None and not isinstance(self.key, MemoryKey):
            raise TypeError(f"Retrieval: key must be a MemoryKey, got {type(self.key).__name__}")
        if not isinstance(self.shared_default, bool):
            raise TypeError(
                "Retrieval: shared_default must be a bool, got "
                f"{type(self.shared_default).__name__}"
            )

    def _check_sources(self) -> None:
        sources = self.sources
        if isinstance(sources, (BaseRetriever, VectorStore, str, bytes)) or not isinstance(
            sources, Iterable
        ):
            raise TypeError(
                f"Retrieval: sources must be a list of BaseRetriever / VectorStore, got "
                f"{type(sources).__name__}; wrap a single source in a list: sources=[source]"
            )
        object.__setattr__(self, "sources", tuple(sources))
        for source in self.sources:
            if not isinstance(source, (BaseRetriever, VectorStore)):
                raise TypeError(
                    f"a source must be a BaseRetriever or a VectorStore, got "
                    f"{type(source).__name__}"
                )
        require_number(
            "source_timeout",
            self.source_timeout,
            above=0,
            owner="Retrieval",
            fix="it is how many seconds a source may take",
        )
        object.__setattr__(self, "source_timeout", float(self.source_timeout))

    def _check_fusion(self) -> None:
        if not is_int(self.rrf_k, 0):
            raise ValueError(
                f"rrf_k must be an integer >= 0, got {self.rrf_k!r}; the default {RRF_K} lets a "
                "confident first place win"
            )
        if not is_positive(self.dense_weight):
            raise ValueError(
                f"dense_weight must be > 0, got {self.dense_weight!r}; it must be a finite number "
                f"(the default {DENSE_WEIGHT} makes hybrid dense-led)"
            )
        object.__setattr__(self, "dense_weight", float(self.dense_weight))


def check_prefetch(prefetch: object, embeddings: Embeddings | None) -> None:
    """``prefetch_embeddings`` is a bool, and True only where Retrieval embeds (a local dense
    index)."""
    if not isinstance(prefetch, bool):
        raise TypeError(f"Retrieval: prefetch_embeddings must be True or False, got {prefetch!r}")
    if prefetch and embeddings is None:
        raise ValueError(
            "Retrieval: prefetch_embeddings=True needs a local dense index (dense_index="
            "'local' with embeddings): with dense_index='store' or BM25-only ranking, "
            "Retrieval embeds nothing itself"
        )


def context_budget(config: RetrievalConfig) -> int:
    """What the context message may cost, as ``Retrieval`` resolved it."""
    assert config.max_retrieved_tokens is not None, "a Retrieval's config is resolved"
    return config.max_retrieved_tokens


def moved_keyword(name: str) -> TypeError:
    """The error for a keyword ``Retrieval`` does not take: a setting given through
    ``config=RetrievalConfig(...)`` says so (its name and the fix); any other is unknown."""
    if name in RetrievalConfig.__dataclass_fields__:
        return TypeError(f"Retrieval({name}=...) moved: pass config=RetrievalConfig({name}=...)")
    return TypeError(f"Retrieval() got an unexpected keyword argument {name!r}")
