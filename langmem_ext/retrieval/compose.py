"""Composing the view: the knowledge sources' answers as passages, the fusion of every ranking
into what may be retrieved, the blocks that fit the context budget (packed compactly), and the
one context message placed just before the newest human message (at the end of the view inside an
agent turn)."""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from dataclasses import replace

from langchain_core.documents import Document
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage

from langmem_ext.core.fences import neutralize
from langmem_ext.core.result import MemoryResult
from langmem_ext.core.shape import RETRIEVED_ID
from langmem_ext.core.state import MemoryState
from langmem_ext.core.tokens import TokenCounter
from langmem_ext.retrieval.bm25 import reciprocal_rank_fusion, tokenize
from langmem_ext.retrieval.config import RetrievalConfig, context_budget
from langmem_ext.retrieval.flows import SourceOutcome, TimedOut
from langmem_ext.retrieval.index import Candidate
from langmem_ext.retrieval.lending import Cut, lent_view
from langmem_ext.retrieval.search import Expanded
from langmem_ext.retrieval.text import (
    ASKS_ASSISTANT,
    compact_round,
    compact_turn,
    is_round,
    last_human,
    normalized,
    user_words,
)

#: compact packing: a retrieved turn whose user message has at least this many words comes back
#: as that message and the reply's sentences that share a word with the query (measured on CRI:
#: bench/retrieval.py)
_COMPACT_WORDS = 8


#: compact packing: a retrieved turn whose user message (under this many words) answers a
#: question the turn before ended with comes with that turn (measured on CRI and the planted
#: data: 12 to 20 words give the same figures, 30 loses CRI facts)
_ANSWER_WORDS = 16


_OPEN, _CLOSE = "<retrieved_context>", "</retrieved_context>"
_HEADER = (
    "Retrieved for the latest message: earlier parts of this conversation that are no longer "
    "shown, and reference material. They may be incomplete or out of date."
)


# -- knowledge sources ------------------------------------------------------------------------


def source_name(config: RetrievalConfig, index: int) -> str:
    source = config.sources[index]
    return getattr(source, "name", None) or f"{type(source).__name__}[{index}]"


def source_passages(
    config: RetrievalConfig, outcomes: Sequence[SourceOutcome]
) -> tuple[list[list[Candidate]], tuple[str, ...]]:
    """Each answering source's passages (deduplicated by content), and a line per source
    that failed or timed out ("name: error")."""
    rankings: list[list[Candidate]] = []
    errors: list[str] = []
    for index, outcome in enumerate(outcomes):
        name = source_name(config, index)
        if isinstance(outcome, TimedOut):
            errors.append(f"{name}: timed out after {config.source_timeout}s")
        elif isinstance(outcome, BaseException):
            errors.append(f"{name}: {type(outcome).__name__}: {outcome}")
        else:
            rankings.append(_passages_of(index, name, outcome))
    return rankings, tuple(errors)


# -- fusion and the context message -----------------------------------------------------------


def fuse(
    config: RetrievalConfig,
    turns: list[tuple[float, list[Candidate]]],
    passages: list[list[Candidate]],
    shown: Collection[str],
) -> list[Candidate]:
    """Weighted reciprocal rank fusion of every ranking, over what the view does not show
    (``shown``: the position-safe keys of the view's messages; ranks count only turns
    outside it); dedupe by content (the best-ranked copy is kept); cap turns at ``k`` and
    passages at ``source_k``."""
    by_uid: dict[str, Candidate] = {}
    rankings: list[list[str]] = []
    weights: list[float] = []
    for weight, ranking in [*turns, *((1.0, p) for p in passages)]:
        kept = [c for c in ranking if c.kind == "passage" or not any(i in shown for i in c.ids)]
        rankings.append([c.uid for c in kept])
        weights.append(weight)
        for c in kept:
            by_uid.setdefault(c.uid, c)
    floor = config.min_score
    if floor is not None and turns and config.ranking != "bm25":
        best = max((c.score for c in by_uid.values() if c.score is not None), default=None)
        if best is None or best < floor:  # nothing remembered is close enough: none of it
            by_uid = {u: c for u, c in by_uid.items() if c.kind == "passage"}
            rankings = [[u for u in r if u in by_uid] for r in rankings]
    picked: list[Candidate] = []
    texts: set[str] = set()
    counts = {"turn": 0, "fact": 0, "passage": 0}
    caps = {
        "turn": config.max_turns,
        "fact": config.max_turns,
        "passage": config.max_passages,
    }
    fused = reciprocal_rank_fusion(rankings, k=config.rrf_k, weights=weights)
    # each clause's best result first (query decomposition); and the feedback ranking never
    # decides the first place: the best of the question's own rankings follows them
    groups = list(getattr(turns, "clauses", ()))
    ranked = [*turns, *((1.0, p) for p in passages)]
    if any(isinstance(r, Expanded) for _, r in ranked):
        groups.append([(w, r) for w, r in ranked if not isinstance(r, Expanded)])
    firsts = _firsts(config, groups, by_uid)
    for uid in [*firsts, *(uid for uid, _ in fused if uid not in firsts)]:
        c = by_uid[uid]
        norm = normalized(c.text)
        if norm in texts or counts[c.kind] >= caps[c.kind]:
            continue
        texts.add(norm)
        counts[c.kind] += 1
        picked.append(c)
    return picked


#: query decomposition: each clause's best results this many go first, before the fused order
CLAUSE_QUOTA = 1


def _firsts(
    config: RetrievalConfig,
    groups: Sequence[Sequence[tuple[float, Sequence[Candidate]]]],
    kept: Collection[str],
) -> list[str]:
    """The best ``CLAUSE_QUOTA`` results of each group of rankings (a clause's, or the
    question's own without the feedback), fused within the group, group by group, among
    ``kept`` (what the view does not show and the floor let through)."""
    firsts: list[str] = []
    for group in groups:
        rankings = [[c.uid for c in ranking if c.uid in kept] for _, ranking in group]
        weights = [weight for weight, _ in group]
        order = reciprocal_rank_fusion(rankings, k=config.rrf_k, weights=weights)
        firsts += [uid for uid, _ in order if uid not in firsts][:CLAUSE_QUOTA]
    return firsts


def context_message(
    counter: TokenCounter, blocks: Sequence[tuple[Candidate, str]]
) -> tuple[HumanMessage, int]:
    """The context message of ``blocks`` (turns first, oldest first) and its tokens."""
    rank = {"turn": 0, "fact": 1, "passage": 2}
    ordered = sorted(blocks, key=lambda b: (rank[b[0].kind], b[0].seq))
    text = "\n".join([_OPEN, _HEADER, *(block for _, block in ordered), _CLOSE])
    message = HumanMessage(text, id=RETRIEVED_ID)
    return message, counter.count_message(message)


def pick_blocks(
    config: RetrievalConfig,
    counter: TokenCounter,
    picked: Sequence[Candidate],
    query: str = "",
    lend: int = 0,
) -> tuple[list[Candidate], tuple[HumanMessage, int] | None]:
    """What goes into the context message, and the message with its tokens (None when
    nothing fits): 1. the results, best first, each whole or not at all, while they fit
    ``max_retrieved_tokens`` (packed compactly for ``query``, see ``compact``; a question
    about what the assistant said gets whole turns); 2. with what is left, each chosen
    turn's neighbour, best first (a neighbour never displaces a result).

    Blocks are costed one by one (O(results), not a recount of the message per result);
    the message is then counted exactly, and while a tokenizer's joins make it cost more
    than the budget, the last result chosen leaves again. ``lend``: tokens the view's oldest
    turns may lend on top of ``max_retrieved_tokens`` (see :mod:`~.lending`)."""
    budget = context_budget(config) + lend
    used = context_message(counter, [])[1]
    if used > budget:
        return [], None
    compact = config.compact and not ASKS_ASSISTANT.search(query)
    terms = frozenset(tokenize(query)) if compact else None
    round_terms = frozenset(tokenize(query)) if config.compact else None  # (any question)
    # a counter's cheap lower bound (``TiktokenCounter.tokens_at_least``) skips a block that
    # cannot fit without counting it: most of the candidates come after the room is spent
    at_least: Callable[[str], int] = getattr(counter, "tokens_at_least", _no_bound)
    chosen: list[tuple[Candidate, str]] = []
    for c in picked:
        # a short follow-up ("it's my staff number"), or the answer to a question the turn
        # before ended with ("what is it for?"), comes with that turn
        follow = (
            compact
            and bool(c.prev)
            and not is_round(c.parts)  # a round's neighbour is the round before: no answer
            and (
                user_words(c.parts) < _COMPACT_WORDS
                or (c.prev.rstrip().endswith("?") and user_words(c.parts) < _ANSWER_WORDS)
            )
        )
        for with_prev in (True, False) if follow else (False,):
            # the turn before never costs the result its place: without it, if need be
            block = _block(c, with_prev=with_prev, terms=terms, round_terms=round_terms)
            if used + at_least(block) > budget:
                continue
            cost = counter.count_text(block + "\n")
            if used + cost <= budget:
                chosen.append((c, block))
                used += cost
                break
    if config.neighbors:
        _widen(counter, chosen, budget - used, terms, round_terms)
    while chosen:
        message, tokens = context_message(counter, chosen)
        if tokens <= budget:
            return [c for c, _ in chosen], (message, tokens)
        chosen.pop()
    return [], None


def _widen(
    counter: TokenCounter,
    chosen: list[tuple[Candidate, str]],
    room: int,
    terms: frozenset[str] | None,
    round_terms: frozenset[str] | None,
) -> None:
    """Each chosen turn with the turn before it (its neighbour), best first, while ``room``
    lasts (in place)."""
    for i, (c, block) in enumerate(list(chosen)):
        if not c.prev:
            continue
        wider = _block(c, with_prev=True, terms=terms, round_terms=round_terms)
        more = counter.count_text(wider + "\n") - counter.count_text(block + "\n")
        if more <= room:
            chosen[i] = (c, wider)
            room -= more


def compose(
    config: RetrievalConfig,
    counter: TokenCounter,
    inner: MemoryResult,
    state: MemoryState,
    picked: Sequence[Candidate],
    errors: tuple[str, ...],
    indexed: int,
    query: str = "",
    lend: int = 0,
    options: Sequence[Cut] = (),
) -> MemoryResult:
    """The inner view with the context message placed late (``context_position``), so the
    cached prompt prefix stays the same. With ``lend`` (a question about the past, see
    ``past_tokens``), the context may cost that much more, and the view then leaves out its
    oldest turns (one of ``options``, :func:`~.lending.cuts`) to pay what it spent beyond
    ``max_retrieved_tokens``, for this request only."""
    chosen, message = pick_blocks(config, counter, picked, query, lend)
    budget = inner.report.budget  # the inner's, with the context's share held back: add it
    report = replace(
        inner.report,
        indexed=indexed,
        source_errors=errors,
        budget=None if budget is None else budget + context_budget(config),
    )
    view = list(inner.messages)
    if message is None:
        return MemoryResult(view, state, report)
    context, cost = message
    view, cut = lent_view(view, options, cost - context_budget(config))
    if cut is not None:
        left_out = len(inner.messages) - len(view)
        report = replace(
            report,
            tokens_after=report.tokens_after - cut.tokens,
            messages_after=report.messages_after - left_out,
            messages_dropped=report.messages_dropped + left_out,
            prefix_kept=False,
            lent=left_out,
        )
    view.insert(context_position(view), context)
    report = replace(
        report,
        tokens_after=report.tokens_after + cost,
        messages_after=report.messages_after + 1,
        retrieved=tuple(c.uid for c in chosen),
        retrieved_tokens=cost,
    )
    return MemoryResult(view, state, report)


def context_position(view: Sequence[BaseMessage]) -> int:
    """Where the context message goes: just before the newest human message (late, so the
    cached prompt prefix stays the same), or, inside an agent turn (tool rounds after that
    message), at the end: the request a long turn pins sits near the top of the view, and a
    context that changes with the agent's steps must not change the prefix of every call."""
    at = last_human(view)
    if at is None:
        return len(view)
    if any(isinstance(m, AIMessage) and m.tool_calls for m in view[at + 1 :]):
        return len(view)
    return at


def _no_bound(text: str) -> int:
    return 0


def _passages_of(index: int, name: str, documents: Sequence[Document]) -> list[Candidate]:
    """Source ``index``'s documents as passages, without repeats of the same content."""
    seen: set[str] = set()
    out: list[Candidate] = []
    for document in documents:
        text = document.page_content
        norm = normalized(text)
        if not norm or norm in seen:
            continue
        seen.add(norm)
        out.append(
            Candidate(uid=f"source:{index}:{len(out)}", text=text, kind="passage", source=name)
        )
    return out


def _block(
    c: Candidate,
    *,
    with_prev: bool,
    terms: frozenset[str] | None = None,
    round_terms: frozenset[str] | None = None,
) -> str:
    """One fenced block. Everything retrieved is neutralised (no tag of ours inside it can
    open or close a fence), and a source's name cannot leave its attribute. A tool round of a
    long turn comes back as its call and excerpts of a long result (``round_terms``)."""
    if c.kind == "fact":
        return f"<fact>\n{neutralize(c.text)}\n</fact>"
    if c.kind == "passage":
        name = neutralize(c.source).replace('"', "'")
        return f'<passage source="{name}">\n{neutralize(c.text)}\n</passage>'
    packed = None if terms is None else compact_turn(c.parts, _COMPACT_WORDS, terms)
    if packed is None and round_terms is not None:
        packed = compact_round(c.parts, round_terms)
    body = neutralize(c.text if packed is None else packed)
    if with_prev and c.prev:
        body = f"(the turn before)\n{neutralize(c.prev)}\n(the turn)\n{body}"
    return f"<turn n={c.seq}>\n{body}\n</turn>"
