"""Turns as text: the query gate (``gate="auto"``: does a question need the past?), a turn
rendered as plain text and its messages one by one, the facts of a summary, compact packing of a
retrieved turn, and the comparisons of texts and messages Retrieval makes."""

from __future__ import annotations

import bisect
import functools
import hashlib
import re
from collections.abc import Callable, Sequence

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage

from langmem_ext.core.identity import fingerprint
from langmem_ext.core.state import MemoryState
from langmem_ext.retrieval.bm25 import STOP_WORDS, tokenize
from langmem_ext.retrieval.layout import FACT_SECTIONS

_SPACE = re.compile(r"\s+")
#: ``gate="auto"``: what makes a question one about the past (English): the speaker or the
#: conversation referred to (first person, "did you say", memory words)
_PERSONAL = re.compile(
    r"\b(?:i|me|my|mine|myself|we|us|our|ours|ourselves|i['’](?:m|ve|d|ll)"
    r"|remember|remind|recall|mention(?:ed)?|told|earlier|previously|again|last time"
    r"|(?:did|have|had) you|you (?:said|suggested|recommended|mentioned|told|gave|wrote))\b",
    re.IGNORECASE,
)
#: ``gate="auto"``: a question about what or which thing should be given or done ("which ID
#: should go on the claim?", "what should they type to get in?") asks for a particular value,
#: often the speaker's own, told earlier (planted facts: the gate's three misses; none of the
#: small talk). "How long / how much / when should ..." asks for advice: not a cue
_SITUATED = re.compile(r"\b(?:what|which)\b[^.!?]*\bshould\b", re.IGNORECASE)
#: a capitalised word that does not start a sentence: a name, to be looked up in the memory
_NAME = re.compile(r"(?<![.!?]\s)(?<!^)\b[A-Z][\w'’-]*")
#: a dense similarity this high is a match whatever the wording (bench/retrieval.py: small talk
#: after the CRI thread scores at most 0.58, planted facts' questions up to 0.86)
STRONG_MATCH = 0.6


def asks_about_the_past(query: str, known: Callable[[str], bool] | None = None) -> bool:
    """``gate="auto"``'s reading of a question (English): whether it may need the conversation's
    past. True when it refers to the speaker or the conversation (I, my, we, "did you say",
    "remember", "earlier", ...), asks what or which thing should be given ("which ID should go
    on the claim?"), or names something the memory holds (a capitalised word for
    which ``known(token)`` is true; every name counts without ``known``). A query with no
    English function word at all is not read (True: searched as always).

    >>> asks_about_the_past("what is the capital of Australia?", known=lambda w: False)
    False
    >>> asks_about_the_past("Where did I park the car?")
    True
    >>> asks_about_the_past("The courier is here: what should they type?", known=lambda w: False)
    True
    >>> asks_about_the_past("Who is Elena?", known=lambda w: w == "elena")
    True
    """
    words = re.findall(r"\w+", query.lower())
    if not any(w in STOP_WORDS for w in words):
        return True  # not English (or no sentence): no reading, no gate
    if _PERSONAL.search(query) or _SITUATED.search(query):
        return True
    names = [n.lower() for n in _NAME.findall(query.strip())]
    return any(known is None or any(known(t) for t in tokenize(n)) for n in names)


#: query decomposition: where a question that asks several things splits into clauses (a
#: semicolon, a question mark, "and" before a question word, an auxiliary or "my", a comma before
#: a question word): "What do I do for work, and where do I live?"
_CLAUSE = re.compile(
    r"\s*(?:[;?]"
    r"|,?\s+and\s+(?=(?:what|which|who|whom|whose|where|when|why|how|do|does|did|is|are|was"
    r"|were|can|could|my|tell)\b)"
    r"|,\s*(?=(?:what|which|who|whom|whose|where|when|why|how)\b))\s*",
    re.IGNORECASE,
)
#: query decomposition: at most this many clauses are searched (the first ones)
MAX_CLAUSES = 4


def clauses(question: str) -> list[str]:
    """The clauses of a question that asks several things, each of at least two words and one
    content word (at most :data:`MAX_CLAUSES`); none when it asks one thing.

    >>> clauses("What do I do for work, and where do I live?")
    ['What do I do for work', 'where do I live']
    >>> clauses("What are my hobbies?")
    []
    """
    parts = [p.strip(" ,.") for p in _CLAUSE.split(question)]
    kept = [p for p in parts if len(p.split()) >= 2 and tokenize(p)]
    return kept[:MAX_CLAUSES] if len(kept) > 1 else []


def message_text(message: BaseMessage) -> str:
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
        body = message_text(m).strip()
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


_BULLET = re.compile(r"^\s*(?:[-*•]|\d{1,3}[.)])\s+")


def fact_lines(text: str) -> list[str]:
    """The lines of a summary section worth remembering one by one: bullets stripped, at least
    three words, distinct."""
    lines = (_BULLET.sub("", line).strip() for line in text.splitlines())
    return list(dict.fromkeys(line for line in lines if len(line.split()) >= 3))


def fact_key(line: str) -> str:
    """The store key of a fact: a digest of its normalised text (writing it again is the same
    item)."""
    return hashlib.blake2b(normalized(line).encode(), digest_size=12).hexdigest()


def summary_facts(state: MemoryState) -> dict[str, tuple[str, str]]:
    """The facts of a state's summary: key -> (section, line)."""
    return {
        fact_key(line): (name, line)
        for name, text in state.summary
        if name in FACT_SECTIONS
        for line in fact_lines(text)
    }


def last_human(messages: Sequence[BaseMessage]) -> int | None:
    """The position of the newest HumanMessage, or None."""
    return next(
        (i for i in range(len(messages) - 1, -1, -1) if isinstance(messages[i], HumanMessage)),
        None,
    )


def turn_groups(messages: Sequence[BaseMessage], start: int, stop: int) -> list[list[int]]:
    """The positions ``start..stop-1`` grouped into turns (each from a HumanMessage; a first
    group may start inside a turn)."""
    groups: list[list[int]] = []
    for i in range(start, stop):
        if isinstance(messages[i], HumanMessage) or not groups:
            groups.append([i])
        else:
            groups[-1].append(i)
    return groups


def starts_piece(message: BaseMessage) -> bool:
    """Whether ``message`` opens a piece of a turn: a HumanMessage (the turn's head) or an
    AIMessage with tool calls (a tool round: the call, its results, and what the assistant
    said after them, up to the next call)."""
    return isinstance(message, HumanMessage) or (
        isinstance(message, AIMessage) and bool(message.tool_calls)
    )


def has_rounds(messages: Sequence[BaseMessage], group: Sequence[int]) -> bool:
    """Whether the positions ``group`` hold a tool round (an AIMessage with tool calls)."""
    return any(isinstance(m, AIMessage) and m.tool_calls for m in (messages[i] for i in group))


def turn_pieces(messages: Sequence[BaseMessage], group: Sequence[int]) -> list[list[int]]:
    """A turn's positions (``group``) split where a piece starts (:func:`starts_piece`): its
    head, then one piece per tool round. A long agent turn is indexed piece by piece as its
    rounds leave the view, so each round is one small document, written once."""
    pieces: list[list[int]] = []
    for i in group:
        if starts_piece(messages[i]) or not pieces:
            pieces.append([i])
        else:
            pieces[-1].append(i)
    return pieces


def turn_query(messages: Sequence[BaseMessage], last: int, limit: int = 2_000) -> str:
    """Inside an agent turn, what the agent is after now: the text and tool calls of the
    newest AIMessage after the newest human message (at ``last``), at most ``limit``
    characters; "" when the turn has none. The human request stays the same for hundreds of
    rounds, so it cannot tell round 300's question from round 12's; the agent's newest step
    ("now I need the build id from the earlier CI run", its call's arguments) can."""
    for i in range(len(messages) - 1, last, -1):
        message = messages[i]
        if isinstance(message, AIMessage):
            calls = (f"{call['name']} {call['args']}" for call in message.tool_calls)
            return "\n".join(p for p in (message_text(message).strip(), *calls) if p)[:limit]
    return ""


def message_parts(messages: Sequence[BaseMessage]) -> list[str]:
    """Each message of a turn rendered alone (distinct, non-empty): what the dense index embeds,
    one vector per message (a search scores a turn by its best message), and what compact
    packing chooses from."""
    return list(dict.fromkeys(p for p in (render_turn([m]) for m in messages) if p.strip()))


_SENTENCE = re.compile(r"(?<=[.!?])\s+")
#: a question about what the assistant said ("what did you suggest?"): replies come back whole
ASKS_ASSISTANT = re.compile(r"\b(?:you|your|yours|you['’](?:d|ve|ll|re))\b", re.IGNORECASE)


def user_words(parts: Sequence[str]) -> int:
    """How many words a turn's user message(s) have."""
    return sum(word_count(p) - 1 for p in parts if p.startswith("user: "))


@functools.lru_cache(maxsize=4_096)
def word_count(part: str) -> int:
    return len(part.split())


def compact_turn(parts: Sequence[str], min_words: int, terms: frozenset[str]) -> str | None:
    """A retrieved turn as packed: its user message(s) whole, and of each other message only
    the sentences that share a word with the query (``terms``), when the user messages say
    enough (at least ``min_words`` words) and the turn has no tool round (a call and its
    results come back together or not at all); None: the whole turn."""
    if not parts or any(p.startswith(("assistant called", "tool ")) for p in parts):
        return None
    users = [p for p in parts if p.startswith("user: ")]
    if user_words(parts) < min_words:
        return None
    kept: list[str] = []
    for p in parts:
        if p in users:
            kept.append(p)
            continue
        role, sentences = split_sentences(p)
        hits = [s for s, words in sentences if not terms.isdisjoint(words)]
        if len(hits) == len(sentences):
            kept.append(p)
        elif hits:
            kept.append(f"{role}: … " + " … ".join(hits))
    return None if kept == list(parts) else "\n".join(kept)


#: a retrieved tool round's result longer than this many characters comes back as excerpts
#: around the query's words (the round stays one block: its call, then its result)
ROUND_CHARS = 600
#: words kept on each side of a query word in an excerpt
_WINDOW = 12
#: a query word a result holds more often than this is not looked for in it (unless it holds
#: no other)
_REPEATED = 8


def is_round(parts: Sequence[str]) -> bool:
    """Whether a stored turn's ``parts`` are one piece of a long turn with a tool result and no
    user message (see :func:`turn_pieces`)."""
    return not any(p.startswith("user: ") for p in parts) and any(
        p.startswith("tool ") for p in parts
    )


def compact_round(parts: Sequence[str], terms: frozenset[str]) -> str | None:
    """A retrieved tool round as packed: its call (and what the assistant said) whole, and each
    result over ``ROUND_CHARS`` as the words around the query's ``terms`` (``excerpts``), so a
    fact inside a long result comes back without the rest of it, and more rounds fit. The
    round is text in the context message, so cutting its result breaks no tool-call pairing.
    None: not a round, or nothing to cut (the round whole)."""
    if not parts or not is_round(parts):
        return None
    out: list[str] = []
    for p in parts:
        head, sep, body = p.partition(" result: ")
        if p.startswith("tool ") and sep and len(p) > ROUND_CHARS:
            out.append(f"{head} result (excerpts): {excerpts(body, terms, ROUND_CHARS)}")
        else:
            out.append(p)
    return None if out == list(parts) else "\n".join(out)


def excerpts(text: str, terms: frozenset[str], chars: int) -> str:
    """The words of ``text`` around those among ``terms`` (``_WINDOW`` each side), richest
    windows first (most distinct terms) while they fit ``chars``, in text order, joined by
    "…"; the start of ``text`` when none of its words is a term."""
    words, where, ends = _text_index(text)
    present = [where[t] for t in sorted(terms) if t in where]
    if not present:
        return _clip_words(words, chars)
    # a word the text repeats everywhere locates nothing (and would cost a window per use)
    present = [ps for ps in present if len(ps) <= _REPEATED] or present
    scored = []
    for i in sorted({i for positions in present for i in positions}):
        low, high = max(0, i - _WINDOW), min(len(words), i + _WINDOW + 1)
        distinct = sum(bisect.bisect_left(ps, low) < bisect.bisect_left(ps, high) for ps in present)
        scored.append((-distinct, i, low, high))
    spans: list[tuple[int, int]] = []
    used = 0
    for _, _, low, high in sorted(scored):
        if any(a <= low and high <= b for a, b in spans):
            continue
        cost = ends[high] - ends[low]
        if spans and used + cost > chars:
            continue
        spans.append((low, high))
        used += cost
    merged: list[list[int]] = []
    for low, high in sorted(spans):
        if merged and low <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], high)
        else:
            merged.append([low, high])
    pieces = [" ".join(words[low:high]) for low, high in merged]
    lead = "… " if merged[0][0] > 0 else ""
    trail = " …" if merged[-1][1] < len(words) else ""
    return lead + " … ".join(pieces) + trail


@functools.lru_cache(maxsize=256)
def _text_index(text: str) -> tuple[tuple[str, ...], dict[str, list[int]], list[int]]:
    """A text's words, the positions of each term (``tokenize``) among them, and the
    characters before each word (``ends[i]``: words ``0..i-1`` and a space each). Cached: the
    rounds a long turn retrieves come back call after call, each time for another question."""
    words = tuple(text.split())
    where: dict[str, list[int]] = {}
    ends = [0]
    for i, word in enumerate(words):
        for term in tokenize(word):
            positions = where.setdefault(term, [])
            if not positions or positions[-1] != i:
                positions.append(i)
        ends.append(ends[-1] + len(word) + 1)
    return words, where, ends


#: where a message's first line starts in a rendered turn, a tool result excepted: a clip of the
#: turn before starts at one of these, so no line is cut and no result is shown without its call
_MESSAGE_START = re.compile(r"^(?:assistant called |\w+: )", re.MULTILINE)


def clip_turn_before(text: str, chars: int) -> str:
    """The end of a rendered turn (``text``) in about ``chars`` characters, as the turn before a
    retrieved one is stored: whole messages from the first one that starts within the last
    ``chars``; a tool result only with its call. When no message starts there (the last one is
    longer), the last message, or the last call and its result, from its start, cut at a word
    with "…". Nothing when no message starts in it (a tool result alone)."""
    if len(text) <= chars or chars <= 0:
        return text if chars > 0 else ""
    starts = [m.start() for m in _MESSAGE_START.finditer(text)]
    if not starts:
        return ""
    within = [s for s in starts if s >= len(text) - chars]
    start = within[0] if within else starts[-1]
    clipped = text[start:]
    if len(clipped) <= chars:
        return clipped
    cut = clipped[:chars]
    space = max(cut.rfind(" "), cut.rfind("\n"))
    cut = (cut[:space] if space > 0 else cut).rstrip()
    return f"{cut} …" if cut else ""


def _clip_words(words: Sequence[str], chars: int) -> str:
    kept: list[str] = []
    used = 0
    for word in words:
        if used + len(word) + 1 > chars:
            return " ".join(kept) + " …"
        kept.append(word)
        used += len(word) + 1
    return " ".join(kept)


@functools.lru_cache(maxsize=4_096)
def split_sentences(part: str) -> tuple[str, tuple[tuple[str, frozenset[str]], ...]]:
    """A message part's role and its sentences, each with its words (``tokenize``): what
    ``compact_turn`` matches against a query's terms. Cached: the turns a thread retrieves come
    back turn after turn, each query with other terms."""
    role, _, body = part.partition(": ")
    return role, tuple((s, frozenset(tokenize(s))) for s in _SENTENCE.split(body))


@functools.lru_cache(maxsize=8_192)
def normalized(text: str) -> str:
    """``text`` for comparing contents (the same turns come back call after call: cached)."""
    return _SPACE.sub(" ", text).strip().lower()


def same_message(original: BaseMessage, shown: BaseMessage) -> bool:
    """Whether ``shown`` (a view message) is ``original`` as the inner strategy showed it:
    the same object, the same id, or an id-less message of the same type with the same content
    or clipped to fit (the clip records ``clipped_from_tokens``)."""
    if original is shown:
        return True
    if original.id or shown.id:
        return bool(original.id) and original.id == shown.id
    if type(original) is not type(shown):
        return False
    meta = shown.response_metadata.get("langmem_ext")
    clipped = isinstance(meta, dict) and "clipped_from_tokens" in meta
    return clipped or fingerprint(original) == fingerprint(shown)
