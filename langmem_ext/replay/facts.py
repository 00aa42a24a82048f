"""Which facts survived a replay: for each fact (a code, a number, a name said once), the call
at which it was said, whether the model still had it in its input at the final call, and the
share of the later calls whose input held it.

Facts are plain text, matched case-insensitively in the text of the view's messages (system
prompt and summary included: a fact folded into a summary survives if the summary kept it).
They come from a file (:func:`read_facts`: one a line) or are found in the transcript
(:func:`detect_facts`): numbers of three digits or more, codes mixing letters and digits
(``ZX-4471``, ``A7K2``) and capitalised names not opening a sentence, each said in exactly one
message (so it has one origin).

Example:
    >>> from langchain_core.messages import AIMessage, HumanMessage
    >>> chat = [
    ...     HumanMessage("My locker code is ZX-4471, ask Marta Kowalski for the key."),
    ...     AIMessage("Noted."),
    ...     HumanMessage("The order has 3 boxes and weighs 1250 grams."),
    ...     AIMessage("Thanks."),
    ... ]
    >>> detect_facts(chat)
    ['ZX-4471', 'Marta Kowalski', '1250']
"""

from __future__ import annotations

import bisect
import json
import os
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from langchain_core.messages import AIMessage, BaseMessage, SystemMessage

from langmem_ext.errors import LangmemExtError
from langmem_ext.replay.transcripts.limits import read_text_bounded

__all__ = ["FactError", "FactRecord", "FactTracker", "detect_facts", "message_text", "read_facts"]

#: the most facts a file or a detection may give (each is matched in every view)
MAX_FACTS = 5_000
_MAX_FACT_FILE = 1 << 20

#: a token: letters and digits, joined by single hyphens, underscores or dots
_TOKEN = re.compile(r"[A-Za-z0-9]+(?:[-_.][A-Za-z0-9]+)*")
#: a run of capitalised words (a name: "Marta Kowalski", "Lisbon")
_NAME = re.compile(r"\b[A-Z][a-z]+(?:[ \t]+[A-Z][a-z]+)*\b")
#: what may stand (spaces aside) before a word that opens a sentence or a list item
_OPENERS = frozenset(".!?:\n*#>\"'(-")
#: capitalised words that are not names
_NOT_NAMES = frozenset(
    "I Mr Mrs Ms Dr Monday Tuesday Wednesday Thursday Friday Saturday Sunday".split()
)


class FactError(LangmemExtError, ValueError):
    """A facts file that cannot be read."""


def message_text(message: BaseMessage) -> str:
    """The text of a message as the model reads it: its text content and, for an AI message,
    the arguments of its tool calls."""
    content = message.content
    if isinstance(content, str):
        parts = [content]
    else:
        parts = []
        for block in content:
            if isinstance(block, str):
                parts.append(block)
            elif isinstance(block, dict) and isinstance(block.get("text"), str):
                parts.append(block["text"])
    if isinstance(message, AIMessage):
        parts += [json.dumps(c.get("args", {}), ensure_ascii=False) for c in message.tool_calls]
    return "\n".join(parts)


def read_facts(path: str | os.PathLike[str]) -> list[str]:
    """The facts of a file: one a line, blank lines and lines starting with ``#`` left out,
    each once (first spelling kept). Raises :class:`FactError` naming the file."""
    source = os.fspath(path)
    text = read_text_bounded(
        source, _MAX_FACT_FILE, lambda problem: FactError(f"{source}: {problem}")
    )
    facts = _unique(
        line.strip() for line in text.splitlines() if line.strip() and not line.startswith("#")
    )
    if not facts:
        raise FactError(f"{source}: no facts (one a line)")
    if len(facts) > MAX_FACTS:
        raise FactError(f"{source}: {len(facts):,} facts, at most {MAX_FACTS:,}")
    return facts


def _unique(facts: Iterable[str]) -> list[str]:
    seen: set[str] = set()
    out = []
    for fact in facts:
        if fact.lower() not in seen:
            seen.add(fact.lower())
            out.append(fact)
    return out


def _opens_sentence(text: str, start: int) -> bool:
    i = start - 1
    while i >= 0 and text[i] in " \t":
        i -= 1
    return i < 0 or text[i] in _OPENERS


def _candidates(text: str) -> list[str]:
    """The numbers, codes and names of one message, in order of appearance."""
    found: list[tuple[int, str]] = []
    for m in _TOKEN.finditer(text):
        token = m.group()
        letters = any(c.isalpha() for c in token)
        digits = sum(c.isdigit() for c in token)
        if digits >= (1 if letters else 3):  # a code, or a number of 3+ digits
            found.append((m.start(), token))
    for m in _NAME.finditer(text):
        words = m.group().split()
        if _opens_sentence(text, m.start()):
            words = words[1:]  # the first word opens a sentence: capitalised anyway
        words = [w for w in words if w not in _NOT_NAMES]
        if words:
            found.append((m.start(), " ".join(words)))
    return [token for _, token in sorted(found, key=lambda item: item[0])]


class _Corpus:
    """The lowered texts of a transcript's messages joined in one string, so that which
    messages hold a text is one scan (``str.find``) instead of one test per message."""

    def __init__(self, messages: Sequence[BaseMessage]) -> None:
        self.lowered = [message_text(m).lower() for m in messages]
        self.starts: list[int] = []
        at = 0
        for text in self.lowered:
            self.starts.append(at)
            at += len(text) + 1
        self.joined = "\x00".join(self.lowered)

    def holders(self, needle: str, *, stop: int | None = None) -> list[int]:
        """The indices of the messages whose text holds ``needle`` (lowered), in order; at most
        ``stop`` of them."""
        found: list[int] = []
        at = self.joined.find(needle)
        while at >= 0 and (stop is None or len(found) < stop):
            index = bisect.bisect_right(self.starts, at) - 1
            found.append(index)
            # the next message: a needle has no NUL, so no match spans two messages
            following = index + 1
            if following >= len(self.starts):
                break
            at = self.joined.find(needle, self.starts[following])
        return found


def detect_facts(messages: Sequence[BaseMessage], *, limit: int = MAX_FACTS) -> list[str]:
    """The facts said in exactly one message of ``messages`` (the system prompt left out: it is
    in every view), in the order they were said: numbers of 3+ digits, codes mixing letters
    and digits, capitalised names that do not open a sentence. A candidate that any other
    message also contains (case-insensitively) is left out, as is one inside a longer one."""
    corpus = _Corpus(messages)
    facts: list[str] = []
    seen: set[str] = set()
    for i, message in enumerate(messages):
        if isinstance(message, SystemMessage):
            continue
        said = [
            fact
            for fact in _unique(_candidates(message_text(message)))
            if fact.lower() not in seen and corpus.holders(fact.lower(), stop=2) == [i]
        ]
        # a number inside a code or name of the same message ("4471" of "ZX-4471") is that
        # fact (a fact said once is inside no other message's)
        for fact in said:
            if not any(fact != g and fact.lower() in g.lower() for g in said):
                seen.add(fact.lower())
                facts.append(fact)
                if len(facts) >= limit:
                    return facts
    return facts


@dataclass(frozen=True, slots=True)
class FactRecord:
    """What became of one fact in one replay."""

    fact: str
    #: index in the transcript of the first message that holds it (None: no message does)
    said_at_message: int | None
    #: the first call (1-based) whose history holds it (None: said after the last call)
    said_at_call: int | None
    #: in the model's input at the replay's final call
    kept_at_end: bool
    #: calls after ``said_at_call``
    later_calls: int
    #: of those, the calls whose input held it
    later_calls_with_it: int

    @property
    def later_share(self) -> float | None:
        """The share of later calls whose input held the fact (None: no later call)."""
        return self.later_calls_with_it / self.later_calls if self.later_calls else None

    def to_dict(self) -> dict[str, object]:
        """The record as a row (``later_share`` included)."""
        return {
            "fact": self.fact,
            "said_at_message": self.said_at_message,
            "said_at_call": self.said_at_call,
            "kept_at_end": self.kept_at_end,
            "later_calls": self.later_calls,
            "later_calls_with_it": self.later_calls_with_it,
            "later_share": self.later_share,
        }


@dataclass
class FactTracker:
    """Follows facts through the views of one replay, call by call."""

    facts: Sequence[str]
    messages: Sequence[BaseMessage]
    said_at: list[int | None] = field(init=False)
    _first_call: list[int | None] = field(init=False)
    _with_it: list[int] = field(init=False)
    _later: list[int] = field(init=False)
    _last: list[bool] = field(init=False)
    _lowered: list[str] = field(init=False)
    _ids: dict[int, int] = field(init=False)
    _held: list[set[int]] = field(init=False)

    def __post_init__(self) -> None:
        corpus = _Corpus(self.messages)
        self._lowered = corpus.lowered
        self._ids = {id(m): i for i, m in enumerate(self.messages)}
        needles = [f.lower() for f in self.facts]
        # which facts each transcript message holds: a call's view of transcript messages is
        # then a union of sets, and only the messages a strategy made (summaries, digests,
        # retrieved context) are searched
        self._held: list[set[int]] = [set() for _ in self.messages]
        self.said_at = []
        for f, needle in enumerate(needles):
            holders = corpus.holders(needle)
            self.said_at.append(holders[0] if holders else None)
            for i in holders:
                self._held[i].add(f)
        n = len(self.facts)
        self._first_call = [None] * n
        self._with_it = [0] * n
        self._later = [0] * n
        self._last = [False] * n

    def _facts_in(self, view: Sequence[BaseMessage]) -> set[int]:
        present: set[int] = set()
        made: list[str] = []
        for message in view:
            i = self._ids.get(id(message))
            if i is not None and self.messages[i] is message:
                present |= self._held[i]
            else:
                made.append(message_text(message).lower())
        if made:
            text = "\n".join(made)
            present |= {f for f, fact in enumerate(self.facts) if fact.lower() in text}
        return present

    def observe(self, call: int, position: int, view: Sequence[BaseMessage]) -> int:
        """Record call ``call`` (1-based), made at transcript ``position`` with ``view`` as its
        input; returns how many of the facts that input holds."""
        held = self._facts_in(view)
        for i in range(len(self.facts)):
            present = i in held
            self._last[i] = present
            origin = self.said_at[i]
            if origin is None or origin >= position:
                continue
            if self._first_call[i] is None:
                self._first_call[i] = call
            else:
                self._later[i] += 1
                self._with_it[i] += present
        return len(held)

    def records(self) -> list[FactRecord]:
        """One record per fact, in the order given."""
        return [
            FactRecord(
                fact=fact,
                said_at_message=self.said_at[i],
                said_at_call=self._first_call[i],
                kept_at_end=self._last[i] and self._first_call[i] is not None,
                later_calls=self._later[i],
                later_calls_with_it=self._with_it[i],
            )
            for i, fact in enumerate(self.facts)
        ]
