"""Retrieval memory: bring evicted turns and knowledge back when the question needs them.

``Retrieval(inner, store=...)`` wraps any other strategy. Every turn:

1. the inner strategy builds its view with ``max_tokens`` of the request held back (so the whole
   request, retrieved context included, still fits the inner budget);
2. every turn of the conversation that left the inner view is written once to a LangGraph
   ``BaseStore`` (idempotent: the item key is the turn's first message id) under the memory key's
   namespace ``("langmem_ext", "turns", tenant, user, thread)``;
3. the newest human message (plus, with ``query_messages=n``, the ``n`` messages before it) is the
   query: the store's dense index, an in-process BM25 index, and any knowledge ``sources`` are
   searched (sources concurrently, each under ``source_timeout``), fused by reciprocal rank,
   deduplicated by content and capped;
4. the best results that are not already in the view go into ONE clearly marked context message,
   placed just before the newest human message (late, so the cached prompt prefix stays the
   same), within ``max_tokens``. Turns are stored as text: a tool call and its results come back
   together, as part of their turn, or not at all.

``scope="thread"`` searches the current thread only; ``scope="user"`` all of the user's threads.
Tenants never mix: their namespaces share no prefix beyond ``("langmem_ext", "turns")``.

Costs: one embedding per evicted turn (written once), one query embedding per turn, a store search
and a BM25 lookup (in process, O(postings of the query's terms)). The BM25 index is built from the
store on first use in a process and kept up to date by this process's writes.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import re
import threading
import time
from collections import OrderedDict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from typing import Any, Literal

from langchain_core.documents import Document
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage, ToolMessage
from langchain_core.retrievers import BaseRetriever
from langchain_core.vectorstores import VectorStore
from langgraph.store.base import BaseStore, PutOp, SearchItem

from langmem_ext._identity import stable_key
from langmem_ext.engine import Plan, StateLike, Strategy
from langmem_ext.keys import MemoryKey
from langmem_ext.ranking import BM25Index, reciprocal_rank_fusion
from langmem_ext.result import MemoryResult
from langmem_ext.state import MemoryState

__all__ = ["DENSE_WEIGHT", "RETRIEVED_ID", "RRF_K", "Ranking", "Retrieval", "Scope", "render_turn"]

#: the id of the context message Retrieval places in the view
RETRIEVED_ID = "langmem_ext:retrieved"
Ranking = Literal["dense", "bm25", "hybrid"]
Scope = Literal["thread", "user"]
Source = BaseRetriever | VectorStore
#: Retrieval's fusion defaults (see ``rrf_k`` / ``dense_weight``)
RRF_K = 5
DENSE_WEIGHT = 2.0

_KIND = "turns"
_OPEN, _CLOSE = "<retrieved_context>", "</retrieved_context>"
_HEADER = (
    "Retrieved for the latest message: earlier parts of this conversation that are no longer "
    "shown, and reference material. They may be incomplete or out of date."
)
_TAG = re.compile(r"</?\s*(retrieved_context|turn|passage)\b", re.I)
_SPACE = re.compile(r"\s+")


def _defang(text: str) -> str:
    """Retrieved text cannot close or open our own tags."""
    return _TAG.sub(lambda m: m.group(0).replace("<", "&lt;"), text)


def _text(message: BaseMessage) -> str:
    content = message.content
    if isinstance(content, str):
        return content
    parts = [
        str(block.get("text", "")) if isinstance(block, dict) else str(block) for block in content
    ]
    return " ".join(p for p in parts if p)


def render_turn(messages: Sequence[BaseMessage]) -> str:
    """A turn as plain text: ``user: ...``, ``assistant: ...``, tool calls and results."""
    lines: list[str] = []
    for m in messages:
        body = _text(m).strip()
        if isinstance(m, HumanMessage):
            lines.append(f"user: {body}")
        elif isinstance(m, AIMessage):
            if body:
                lines.append(f"assistant: {body}")
            for call in m.tool_calls:
                lines.append(f"assistant called {call['name']}({call['args']})")
        elif isinstance(m, ToolMessage):
            lines.append(f"tool {m.name or ''} result: {body}".replace("  ", " "))
        elif body:
            lines.append(f"{m.type}: {body}")
    return "\n".join(lines)


def _distinct_texts(ops: Sequence[PutOp]) -> list[list[PutOp]]:
    """The writes split so that no batch holds the same text twice: ``InMemoryStore.batch``
    fails when one batch embeds a text twice (langchain-ai/langgraph#8822)."""
    batches: list[list[PutOp]] = []
    texts: list[set[str]] = []
    for op in ops:
        text = str((op.value or {}).get("text", ""))
        for batch, seen in zip(batches, texts, strict=True):
            if text not in seen:
                batch.append(op)
                seen.add(text)
                break
        else:
            batches.append([op])
            texts.append({text})
    return batches


def _normal(text: str) -> str:
    return _SPACE.sub(" ", text).strip().lower()


@dataclass(frozen=True, slots=True)
class _Candidate:
    """One thing that may go into the context message."""

    uid: str  # unique across the memory index and the sources
    text: str
    kind: Literal["turn", "passage"]
    seq: int = 0
    prev: str = ""
    ids: tuple[str, ...] = ()
    source: str = ""


class _Lexical:
    """The BM25 index of one namespace prefix, and the values it was built from."""

    def __init__(self) -> None:
        self.index = BM25Index()
        self.values: dict[str, dict[str, Any]] = {}
        self.turns: dict[tuple[str, ...], int] = {}  # namespace -> highest seq seen + 1
        self.last_at = 0.0

    def add(self, namespace: tuple[str, ...], key: str, value: dict[str, Any]) -> None:
        uid = "/".join((*namespace, key))
        self.values[uid] = value
        self.index.add(uid, str(value.get("text", "")))
        seq = int(value.get("seq", 0))
        self.turns[namespace] = max(self.turns.get(namespace, 0), seq + 1)
        self.last_at = max(self.last_at, float(value.get("indexed_at", 0.0)))


class Retrieval(Strategy):
    """Wrap ``inner`` so that evicted turns (and knowledge ``sources``) come back when relevant.

    Args:
        inner: any other strategy (TokenBudget, SummaryBuffer, ...). Its budget is the budget of
            the whole request; ``max_tokens`` of it is held back for the retrieved context.
        store: a LangGraph ``BaseStore``. With an ``index`` (``{"dims", "embed"}``, any LangChain
            ``Embeddings``) dense and hybrid ranking are available; without one, BM25 only.
        k: at most this many evicted turns per view.
        max_tokens: what the context message may cost (counted with the inner counter).
        min_query_length: a newest human message with fewer words is not searched for.
        sources: knowledge sources: any ``BaseRetriever`` or ``VectorStore``, searched
            concurrently with the memory index; a failing or slow one is reported, never fatal.
        scope: ``"thread"`` (this conversation only) or ``"user"`` (all of the user's threads).
        ranking: ``"dense"``, ``"bm25"`` or ``"hybrid"`` (reciprocal rank fusion of both); the
            default is hybrid when the store has an index, else BM25.
        neighbors: 1 brings retrieved turns with the turn before each (clipped to
            ``neighbor_chars``), so an answer comes with what led to it; neighbours only use the
            budget the results leave, best result first, and never displace a result. 0: the
            turns alone.
        query_messages: how many messages before the newest human message join the query (for
            follow-ups like "and the second one?").
        key: the default memory key; the surfaces pass the key of each call instead.
        source_k: at most this many passages from the sources per view (default ``k``).
        source_timeout: seconds a source may take before it is reported and skipped.
        candidates: how many results each ranking contributes to the fusion (default ``4 * k``).
        neighbor_chars: a neighbouring turn is clipped to this many characters.
        rrf_k: the reciprocal-rank-fusion constant: ``score = sum(weight / (rrf_k + rank))``. The
            default 5 lets a confident first place win; the textbook 60 favours whatever appears
            in both rankings, so BM25 noise (a common word shared with the question) outvotes a
            strong dense match: hybrid then finds less than dense alone (``bench/retrieval.py``).
        dense_weight: the dense ranking's weight in hybrid fusion (BM25 and each source: 1). With
            the defaults, hybrid is dense-led, and BM25's first places (an exact name, code or
            number) still come through.
    """

    uses_key = True

    def __init__(
        self,
        inner: Strategy,
        *,
        store: BaseStore,
        k: int = 5,
        max_tokens: int = 600,
        min_query_length: int = 3,
        sources: Sequence[Source] = (),
        scope: Scope = "thread",
        ranking: Ranking | None = None,
        neighbors: int = 1,
        query_messages: int = 0,
        key: MemoryKey | None = None,
        source_k: int | None = None,
        source_timeout: float = 5.0,
        candidates: int | None = None,
        neighbor_chars: int = 600,
        rrf_k: int = RRF_K,
        dense_weight: float = DENSE_WEIGHT,
    ) -> None:
        if not isinstance(inner, Strategy) or isinstance(inner, Retrieval):
            raise TypeError(
                f"Retrieval wraps one langmem_ext strategy (TokenBudget, SummaryBuffer, ...), got "
                f"{type(inner).__name__}"
            )
        if not isinstance(store, BaseStore):
            raise TypeError(f"store must be a LangGraph BaseStore, got {type(store).__name__}")
        for name, value in (("k", k), ("max_tokens", max_tokens)):
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"{name} must be an integer >= 1, got {value!r}")
        for name, value in (
            ("min_query_length", min_query_length),
            ("neighbors", neighbors),
            ("query_messages", query_messages),
            ("neighbor_chars", neighbor_chars),
        ):
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise ValueError(f"{name} must be an integer >= 0, got {value!r}")
        if neighbors > 1:
            raise ValueError(f"neighbors must be 0 or 1, got {neighbors}")
        if scope not in ("thread", "user"):
            raise ValueError(f"scope must be 'thread' or 'user', got {scope!r}")
        dense = getattr(store, "index_config", None) is not None
        ranking = ranking or ("hybrid" if dense else "bm25")
        if ranking not in ("dense", "bm25", "hybrid"):
            raise ValueError(f"ranking must be 'dense', 'bm25' or 'hybrid', got {ranking!r}")
        if ranking != "bm25" and not dense:
            raise ValueError(
                f"ranking={ranking!r} needs a store with a vector index, e.g. "
                "InMemoryStore(index={'dims': 384, 'embed': embeddings}); this store has none "
                "(use ranking='bm25')"
            )
        if key is not None and not isinstance(key, MemoryKey):
            raise TypeError(f"key must be a MemoryKey, got {type(key).__name__}")
        for source in sources:
            if not isinstance(source, (BaseRetriever, VectorStore)):
                raise TypeError(
                    f"a source must be a BaseRetriever or a VectorStore, got "
                    f"{type(source).__name__}"
                )
        if not isinstance(rrf_k, int) or isinstance(rrf_k, bool) or rrf_k < 0:
            raise ValueError(f"rrf_k must be an integer >= 0, got {rrf_k!r}")
        if not dense_weight > 0:
            raise ValueError(f"dense_weight must be > 0, got {dense_weight!r}")
        if source_timeout <= 0:
            raise ValueError(f"source_timeout must be > 0 seconds, got {source_timeout}")
        self.inner = inner
        self.store = store
        self.k = k
        self.max_tokens = max_tokens
        self.min_query_length = min_query_length
        self.sources = tuple(sources)
        self.scope: Scope = scope
        self.ranking: Ranking = ranking
        self.neighbors = neighbors
        self.query_messages = query_messages
        self.key = key
        self.source_k = k if source_k is None else source_k
        self.source_timeout = source_timeout
        self.candidates = candidates or 4 * k
        self.neighbor_chars = neighbor_chars
        self.rrf_k = rrf_k
        self.dense_weight = float(dense_weight)
        self.counter = inner.counter
        self.summarizer = inner.summarizer
        self._lexicals: OrderedDict[tuple[str, ...], _Lexical] = OrderedDict()
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return (
            f"Retrieval({self.inner!r}, k={self.k}, max_tokens={self.max_tokens}, "
            f"ranking={self.ranking!r}, scope={self.scope!r}, sources={len(self.sources)})"
        )

    def _plan(
        self, messages: Sequence[BaseMessage], state: MemoryState, now: float, extra: int
    ) -> Plan:
        """The inner plan with the context budget held back (retrieval itself is I/O, done by
        :meth:`apply` / :meth:`aapply`)."""
        return self.inner._plan(messages, state, now, extra + self.max_tokens)

    # -- entry points -----------------------------------------------------------------------------

    def apply(
        self,
        messages: Sequence[BaseMessage],
        state: StateLike = None,
        *,
        extra_tokens: int = 0,
        key: MemoryKey | None = None,
    ) -> MemoryResult:
        return self._run(messages, state, extra_tokens, key, write=True)

    async def aapply(
        self,
        messages: Sequence[BaseMessage],
        state: StateLike = None,
        *,
        extra_tokens: int = 0,
        key: MemoryKey | None = None,
    ) -> MemoryResult:
        return await self._arun(messages, state, extra_tokens, key, write=True)

    def view(
        self,
        messages: Sequence[BaseMessage],
        state: StateLike = None,
        *,
        extra_tokens: int = 0,
        key: MemoryKey | None = None,
    ) -> MemoryResult:
        """Read-only: the inner view plus what is already indexed; writes nothing, no summarizer."""
        return self._run(messages, state, extra_tokens, key, write=False)

    async def aview(
        self,
        messages: Sequence[BaseMessage],
        state: StateLike = None,
        *,
        extra_tokens: int = 0,
        key: MemoryKey | None = None,
    ) -> MemoryResult:
        return await self._arun(messages, state, extra_tokens, key, write=False)

    # -- the two drivers: the same steps, sync and async I/O ------------------------------------

    def _run(
        self,
        messages: Sequence[BaseMessage],
        state: StateLike,
        extra: int,
        key: MemoryKey | None,
        *,
        write: bool,
    ) -> MemoryResult:
        who = self._key(key)
        step = self.inner.apply if write else self.inner.view
        inner = step(messages, state, extra_tokens=extra + self.max_tokens)
        ops, next_state, count = self._index_ops(messages, inner, who, write)
        for batch in _distinct_texts(ops):
            self.store.batch(batch)
        self._remember(ops)
        query = self._query(messages)
        if query is None:
            return self._compose(inner, next_state, [], (), count)
        turns = self._search_turns(query, who, next_state)
        passages, errors = self._search_sources(query)
        picked = self._fuse(turns, passages, inner.messages)
        return self._compose(inner, next_state, picked, errors, count)

    async def _arun(
        self,
        messages: Sequence[BaseMessage],
        state: StateLike,
        extra: int,
        key: MemoryKey | None,
        *,
        write: bool,
    ) -> MemoryResult:
        who = self._key(key)
        step = self.inner.aapply if write else self.inner.aview
        inner = await step(messages, state, extra_tokens=extra + self.max_tokens)
        ops, next_state, count = self._index_ops(messages, inner, who, write)
        for batch in _distinct_texts(ops):
            await self.store.abatch(batch)
        self._remember(ops)
        query = self._query(messages)
        if query is None:
            return self._compose(inner, next_state, [], (), count)
        turns, (passages, errors) = await asyncio.gather(
            self._asearch_turns(query, who, next_state), self._asearch_sources(query)
        )
        picked = self._fuse(turns, passages, inner.messages)
        return self._compose(inner, next_state, picked, errors, count)

    # -- indexing ---------------------------------------------------------------------------------

    def _key(self, key: MemoryKey | None) -> MemoryKey:
        if key is not None and not isinstance(key, MemoryKey):
            raise TypeError(f"key must be a MemoryKey, got {type(key).__name__}")
        return key or self.key or MemoryKey()

    def _index_ops(
        self, messages: Sequence[BaseMessage], result: MemoryResult, key: MemoryKey, write: bool
    ) -> tuple[list[PutOp], MemoryState, int]:
        """The store writes for the turns that left the view since the last call, and the state
        with the index watermark moved past them (none for a read-only view). Pure."""
        state = result.state
        if not write:
            return [], state, 0
        n = len(messages)
        body_start = 1 if n and isinstance(messages[0], SystemMessage) else 0
        start = state.indexed
        if start <= body_start or start > n or stable_key(messages[start - 1]) != state.indexed_key:
            start = body_start  # first call, or the history was rewritten: idempotent re-index
        shown = {stable_key(m) for m in result.messages if m.id != RETRIEVED_ID}
        first_kept = n
        for j in range(n - 1, start - 1, -1):  # O(view): stops at the watermark
            if stable_key(messages[j]) in shown:
                first_kept = j
        evicted = messages[start:first_kept]
        if not evicted:
            return [], state, 0
        groups: list[list[BaseMessage]] = []
        for m in evicted:
            if isinstance(m, HumanMessage) or not groups:
                groups.append([m])
            else:
                groups[-1].append(m)
        # the last group is unfinished when the view starts inside its turn: index what left,
        # and index it again (same key) once the rest of the turn has left too
        unfinished = first_kept < n and not isinstance(messages[first_kept], HumanMessage)
        prev = self._previous_turn(messages, start, body_start)
        namespace = key.namespace(_KIND)
        now = time.time()
        ops: list[PutOp] = []
        seq = state.indexed_turns
        for i, group in enumerate(groups):
            text = render_turn(group)
            value = {
                "text": text,
                "prev": prev[-self.neighbor_chars :] if prev else "",
                "ids": [stable_key(m) for m in group],
                "seq": seq,
                "thread": key.session,
                "indexed_at": now,
            }
            ops.append(PutOp(namespace, stable_key(group[0]), value, index=["text"]))
            prev = text
            if not (unfinished and i == len(groups) - 1):
                seq += 1
        watermark = first_kept - (len(groups[-1]) if unfinished else 0)
        complete = len(groups) - (1 if unfinished else 0)
        moved = replace(
            state,
            indexed=watermark if watermark > body_start else 0,
            indexed_key=stable_key(messages[watermark - 1]) if watermark > body_start else None,
            indexed_turns=seq,
        )
        return ops, moved, complete

    @staticmethod
    def _previous_turn(messages: Sequence[BaseMessage], start: int, body_start: int) -> str:
        j = start - 1
        while j >= body_start and not isinstance(messages[j], HumanMessage):
            j -= 1
        return render_turn(messages[j:start]) if j >= body_start else ""

    def _remember(self, ops: Iterable[PutOp]) -> None:
        """Keep this process's BM25 indexes current with its own writes."""
        with self._lock:
            for op in ops:
                for prefix, lexical in self._lexicals.items():
                    if op.namespace[: len(prefix)] == prefix and op.value is not None:
                        lexical.add(op.namespace, op.key, dict(op.value))

    # -- searching --------------------------------------------------------------------------------

    def _query(self, messages: Sequence[BaseMessage]) -> str | None:
        last = next(
            (i for i in range(len(messages) - 1, -1, -1) if isinstance(messages[i], HumanMessage)),
            None,
        )
        if last is None:
            return None
        text = _text(messages[last])
        if len(text.split()) < self.min_query_length:
            return None
        if self.query_messages:
            context = [_text(m) for m in messages[max(0, last - self.query_messages) : last]]
            text = "\n".join([*context, text])
        return text

    def _prefix(self, key: MemoryKey) -> tuple[str, ...]:
        return key.namespace(_KIND, scope="session" if self.scope == "thread" else "user")

    def _lexical_for(self, prefix: tuple[str, ...]) -> _Lexical | None:
        with self._lock:
            lexical = self._lexicals.get(prefix)
            if lexical is not None:
                self._lexicals.move_to_end(prefix)
            return lexical

    def _install(self, prefix: tuple[str, ...], lexical: _Lexical) -> None:
        with self._lock:
            self._lexicals[prefix] = lexical
            self._lexicals.move_to_end(prefix)
            while len(self._lexicals) > 256:  # bounded: the least recently searched goes
                self._lexicals.popitem(last=False)

    def _refresh_filter(
        self, lexical: _Lexical | None, key: MemoryKey, state: MemoryState
    ) -> dict[str, Any] | Literal["skip"] | None:
        """What to (re)load from the store into the BM25 index: everything (None), the items
        newer than what we have (a filter), or nothing ("skip")."""
        if lexical is None:
            return None
        if self.scope == "thread":
            have = lexical.turns.get(key.namespace(_KIND), 0)
            return "skip" if have >= state.indexed_turns else {"seq": {"$gte": have}}
        # other threads of the user may have written: look for items newer than ours (with a
        # margin for clock skew between processes)
        return {"indexed_at": {"$gte": lexical.last_at - 30.0}}

    def _lexical_sync(self, key: MemoryKey, state: MemoryState) -> _Lexical:
        prefix, lexical, wanted = self._lexical_need(key, state)
        if wanted == "skip":
            assert lexical is not None
            return lexical
        fresh, offset = lexical or _Lexical(), 0
        while self._fill(fresh, self.store.search(prefix, filter=wanted, limit=500, offset=offset)):
            offset += 500
        return self._keep(prefix, lexical, fresh)

    async def _alexical(self, key: MemoryKey, state: MemoryState) -> _Lexical:
        prefix, lexical, wanted = self._lexical_need(key, state)
        if wanted == "skip":
            assert lexical is not None
            return lexical
        fresh, offset = lexical or _Lexical(), 0
        while self._fill(
            fresh, await self.store.asearch(prefix, filter=wanted, limit=500, offset=offset)
        ):
            offset += 500
        return self._keep(prefix, lexical, fresh)

    def _lexical_need(
        self, key: MemoryKey, state: MemoryState
    ) -> tuple[tuple[str, ...], _Lexical | None, dict[str, Any] | Literal["skip"] | None]:
        prefix = self._prefix(key)
        lexical = self._lexical_for(prefix)
        return prefix, lexical, self._refresh_filter(lexical, key, state)

    @staticmethod
    def _fill(lexical: _Lexical, page: Sequence[SearchItem]) -> bool:
        """Add one page of store items; whether another page may follow."""
        for item in page:
            lexical.add(item.namespace, item.key, item.value)
        return len(page) == 500

    def _keep(self, prefix: tuple[str, ...], old: _Lexical | None, fresh: _Lexical) -> _Lexical:
        if old is None:
            self._install(prefix, fresh)
        return fresh

    def _turn(self, uid: str, value: dict[str, Any]) -> _Candidate:
        return _Candidate(
            uid=uid,
            text=str(value.get("text", "")),
            kind="turn",
            seq=int(value.get("seq", 0)),
            prev=str(value.get("prev", "")) if self.neighbors else "",
            ids=tuple(str(i) for i in value.get("ids", ())),
        )

    def _rank_turns(
        self, dense: Sequence[SearchItem] | None, lexical: _Lexical | None, query: str
    ) -> list[tuple[float, list[_Candidate]]]:
        """The memory index's rankings, each with its fusion weight."""
        rankings: list[tuple[float, list[_Candidate]]] = []
        if dense is not None:
            turns = [self._turn("/".join((*it.namespace, it.key)), it.value) for it in dense]
            rankings.append((self.dense_weight, turns))
        if lexical is not None:
            hits = lexical.index.search(query, self.candidates)
            rankings.append((1.0, [self._turn(uid, lexical.values[uid]) for uid, _ in hits]))
        return rankings

    def _search_turns(
        self, query: str, key: MemoryKey, state: MemoryState
    ) -> list[tuple[float, list[_Candidate]]]:
        dense: list[SearchItem] | None = None
        if self.ranking in ("dense", "hybrid"):
            dense = self.store.search(self._prefix(key), query=query, limit=self.candidates)
        lexical = self._lexical_sync(key, state) if self.ranking != "dense" else None
        return self._rank_turns(dense, lexical, query)

    async def _asearch_turns(
        self, query: str, key: MemoryKey, state: MemoryState
    ) -> list[tuple[float, list[_Candidate]]]:
        dense: list[SearchItem] | None = None
        if self.ranking in ("dense", "hybrid"):
            dense = await self.store.asearch(self._prefix(key), query=query, limit=self.candidates)
        lexical = await self._alexical(key, state) if self.ranking != "dense" else None
        return self._rank_turns(dense, lexical, query)

    # -- knowledge sources ------------------------------------------------------------------------

    def _source_name(self, index: int) -> str:
        source = self.sources[index]
        return getattr(source, "name", None) or f"{type(source).__name__}[{index}]"

    def _passages(self, index: int, documents: Sequence[Document]) -> list[_Candidate]:
        name = self._source_name(index)
        seen: set[str] = set()
        out: list[_Candidate] = []
        for document in documents:
            text = document.page_content
            norm = _normal(text)
            if not norm or norm in seen:
                continue
            seen.add(norm)
            out.append(
                _Candidate(uid=f"source:{index}:{len(out)}", text=text, kind="passage", source=name)
            )
        return out

    def _query_source(self, index: int, query: str) -> list[Document]:
        source = self.sources[index]
        if isinstance(source, VectorStore):
            return source.similarity_search(query, k=self.candidates)
        return source.invoke(query)

    async def _aquery_source(self, index: int, query: str) -> list[Document]:
        source = self.sources[index]
        if isinstance(source, VectorStore):
            return await source.asimilarity_search(query, k=self.candidates)
        return await source.ainvoke(query)

    def _search_sources(self, query: str) -> tuple[list[list[_Candidate]], tuple[str, ...]]:
        if not self.sources:
            return [], ()
        pool = concurrent.futures.ThreadPoolExecutor(
            max_workers=len(self.sources), thread_name_prefix="langmem_ext-source"
        )
        try:
            futures = [pool.submit(self._query_source, i, query) for i in range(len(self.sources))]
            done, _ = concurrent.futures.wait(futures, timeout=self.source_timeout)
            rankings: list[list[_Candidate]] = []
            errors: list[str] = []
            for i, future in enumerate(futures):
                if future not in done:
                    errors.append(f"{self._source_name(i)}: timed out after {self.source_timeout}s")
                elif future.exception() is not None:
                    error = future.exception()
                    errors.append(f"{self._source_name(i)}: {type(error).__name__}: {error}")
                else:
                    rankings.append(self._passages(i, future.result()))
            return rankings, tuple(errors)
        finally:
            pool.shutdown(wait=False, cancel_futures=True)  # a slow source never holds the turn

    async def _asearch_sources(self, query: str) -> tuple[list[list[_Candidate]], tuple[str, ...]]:
        if not self.sources:
            return [], ()

        async def one(i: int) -> list[Document]:
            return await asyncio.wait_for(self._aquery_source(i, query), self.source_timeout)

        outcomes = await asyncio.gather(
            *(one(i) for i in range(len(self.sources))), return_exceptions=True
        )
        rankings: list[list[_Candidate]] = []
        errors: list[str] = []
        for i, outcome in enumerate(outcomes):
            if isinstance(outcome, asyncio.TimeoutError):
                errors.append(f"{self._source_name(i)}: timed out after {self.source_timeout}s")
            elif isinstance(outcome, BaseException):
                if not isinstance(outcome, Exception):
                    raise outcome  # cancellation and the like are not a source's failure
                errors.append(f"{self._source_name(i)}: {type(outcome).__name__}: {outcome}")
            else:
                rankings.append(self._passages(i, outcome))
        return rankings, tuple(errors)

    # -- fusion and the context message -----------------------------------------------------------

    def _fuse(
        self,
        turns: list[tuple[float, list[_Candidate]]],
        passages: list[list[_Candidate]],
        view: Sequence[BaseMessage],
    ) -> list[_Candidate]:
        """Weighted reciprocal rank fusion of every ranking, over what the view does not show
        (ranks count only those); dedupe by content (the best-ranked copy is kept); cap turns at
        ``k`` and passages at ``source_k``."""
        shown = {stable_key(m) for m in view}
        by_uid: dict[str, _Candidate] = {}
        rankings: list[list[str]] = []
        weights: list[float] = []
        for weight, ranking in [*turns, *((1.0, p) for p in passages)]:
            kept = [c for c in ranking if not (c.kind == "turn" and shown.intersection(c.ids))]
            rankings.append([c.uid for c in kept])
            weights.append(weight)
            for c in kept:
                by_uid.setdefault(c.uid, c)
        picked: list[_Candidate] = []
        texts: set[str] = set()
        counts = {"turn": 0, "passage": 0}
        caps = {"turn": self.k, "passage": self.source_k}
        for uid, _ in reciprocal_rank_fusion(rankings, k=self.rrf_k, weights=weights):
            c = by_uid[uid]
            norm = _normal(c.text)
            if norm in texts or counts[c.kind] >= caps[c.kind]:
                continue
            texts.add(norm)
            counts[c.kind] += 1
            picked.append(c)
        return picked

    def _block(self, c: _Candidate, with_prev: bool) -> str:
        if c.kind == "passage":
            return f'<passage source="{_defang(c.source)}">\n{_defang(c.text)}\n</passage>'
        body = _defang(c.text)
        if with_prev and c.prev:
            body = f"(the turn before)\n{_defang(c.prev)}\n(the turn)\n{body}"
        return f"<turn n={c.seq}>\n{body}\n</turn>"

    def _message(self, blocks: Sequence[str]) -> HumanMessage:
        return HumanMessage("\n".join([_OPEN, _HEADER, *blocks, _CLOSE]), id=RETRIEVED_ID)

    def _compose(
        self,
        inner: MemoryResult,
        state: MemoryState,
        picked: Sequence[_Candidate],
        errors: tuple[str, ...],
        indexed: int,
    ) -> MemoryResult:
        chosen: list[tuple[_Candidate, str]] = []
        message: HumanMessage | None = None
        cost = 0

        def fits(trial: list[tuple[_Candidate, str]]) -> tuple[HumanMessage, int] | None:
            ordered = sorted(trial, key=lambda t: (t[0].kind != "turn", t[0].seq))
            candidate = self._message([b for _, b in ordered])
            tokens = self.counter.count_message(candidate)
            return (candidate, tokens) if tokens <= self.max_tokens else None

        # 1. the results, best first, each whole or not at all; 2. with what is left, each
        # chosen turn's neighbour, best first (a neighbour never displaces a result)
        for c in picked:
            trial = [*chosen, (c, self._block(c, False))]
            if (got := fits(trial)) is not None:
                chosen, (message, cost) = trial, got
        for i, (c, _) in enumerate(list(chosen)):
            if not c.prev:
                continue
            trial = [*chosen[:i], (c, self._block(c, True)), *chosen[i + 1 :]]
            if (got := fits(trial)) is not None:
                chosen, (message, cost) = trial, got
        report = replace(
            inner.report,
            indexed=indexed,
            source_errors=errors,
        )
        if message is None:
            return MemoryResult(list(inner.messages), state, report)
        view = list(inner.messages)
        at = next(
            (i for i in range(len(view) - 1, -1, -1) if isinstance(view[i], HumanMessage)),
            len(view),
        )
        view.insert(at, message)
        report = replace(
            report,
            tokens_after=report.tokens_after + cost,
            messages_after=report.messages_after + 1,
            retrieved=tuple(c.uid for c, _ in chosen),
            retrieved_tokens=cost,
        )
        return MemoryResult(view, state, report)
