"""An offline, extractive summarizer: no model, no network, the same answer every time.

Why: a summarizing strategy needs *some* summarizer, and the LLM one can be down (an outage, a
revoked key, no network in a test or an air-gapped deployment). When it is, the strategy keeps
every message unfolded and retries, so the view fills with "not shown" notes until the model is
back. :class:`ExtractiveSummarizer` is the last resort that cannot fail: it keeps, verbatim, the
sentences of the transcript that carry what a continuation needs (numbers, names, decisions,
identifiers, tool calls and their results) and drops the rest, within the section's token
budget. It is a worse summary than a model's, but it loses far less than a note saying messages
were hidden, and it folds every message exactly once like any other summarizer.

How: it is a LangChain chat model, so it plugs in wherever a model does (``summarizer=`` of a
strategy, ``Summarizer(model)``, ``Summarizer(..., fallback=...)``) and goes through the
Summarizer's ordinary plan: chained calls under ``max_input_tokens``, one call per section
(template). It reads the prompt the Summarizer sends:

* ``<previous_summary>`` (the summary so far) and ``<transcript>`` (the lines to fold): the
  previous summary's sentences are re-selected under the budget together with the transcript's
  salient sentences (chaining); a ``<summary>`` block alone is a compress request;
* the section's instruction (one of :data:`~langmem_ext.summarize.prompts.TEMPLATES`), which
  picks the weights: ``facts`` favours numbers and names, ``profile`` the user's own statements,
  ``task`` tool calls, results, errors and paths;
* the budget: the ``max_tokens`` the Summarizer binds (this model has a ``max_tokens`` field for
  that), and "in at most N tokens" from the prompt; the smallest limit wins.

Each sentence gets a score from what it carries; the best are packed into the budget (half of it
first for the previous summary, the rest for the new sentences, then whatever is left), and are
written one per line, in their original order, as ``- role: sentence``. The result is measured
with the model's own ``counter`` as a whole and shrunk until it fits, so the budget holds by that
counter, always. Give it the counter of the strategy (``counter=``) when that is not the default
approximate one; otherwise the Summarizer's own check (compress, then clip) still holds the
budget by its counter.

Everything is pure string work with no randomness and no clock: the same prompt gives the same
answer, byte for byte, sync or async.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from langchain_core.callbacks import AsyncCallbackManagerForLLMRun, CallbackManagerForLLMRun
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, SystemMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from pydantic import PrivateAttr

from langmem_ext.core.checks import is_int
from langmem_ext.core.text import clip_text, longest_prefix_within
from langmem_ext.core.tokens import TokenCounter
from langmem_ext.core.transcript import content_text, render_transcript
from langmem_ext.counting.local import ApproximateCounter
from langmem_ext.counting.resolve import CounterLike, as_counter
from langmem_ext.summarize.prompts import TEMPLATES

__all__ = ["DEFAULT_MAX_TOKENS", "NOTHING", "ExtractiveSummarizer", "extract_summary"]

#: the budget when neither the caller, the prompt nor the model's ``max_tokens`` gives one
DEFAULT_MAX_TOKENS = 256

#: the answer when nothing in the input is worth keeping (never carried into the next summary)
NOTHING = "(nothing of note)"

_CLIP_MARK = " …"

# -- reading the Summarizer's prompt ---------------------------------------------------------

_PREVIOUS = re.compile(r"<previous_summary>\n(.*?)\n</previous_summary>", re.S)
_TRANSCRIPT = re.compile(r"<transcript>\n(.*?)\n</transcript>", re.S)
_COMPRESS = re.compile(r"<summary>\n(.*?)\n</summary>", re.S)
_AT_MOST = re.compile(r"\bat most (\d{1,9}) tokens\b")
_NO_PREVIOUS = "(none yet)"

# -- reading lines and sentences -------------------------------------------------------------

#: the role prefixes of the Summarizer's transcript lines (see core/_transcript.py), and ours
_ROLE = re.compile(
    r"(?P<prefix>(?P<user>user(?: \([^)\n]*\))?: )|(?P<assistant>assistant: )"
    r"|(?P<tool>tool \S+ (?P<outcome>result|error): )|(?P<system>system note: ))"
)
_CALL = re.compile(r"assistant called \S")
_BULLET = re.compile(r"^\s*(?:[-*•]|#{1,6}|\d{1,3}[.)])\s+")
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+|(?<=[。！？])")
_CONTINUED = "(continued) "
_WORD = re.compile(r"[^\W\d_][\w'’-]*")
_NOT_NAMES = frozenset({"I", "I'm", "I've", "I'll", "I'd", "I’m", "OK", "Ok"})

_NUMBER = re.compile(r"\d")
_DECISION = re.compile(
    r"\b(?:decid\w*|decision\w*|will|won't|agree\w*|must|shall|should|need(?:s|ed)? to"
    r"|going to|plan(?:s|ned)? to|chose|choose|chosen|confirm\w*|approv\w*|commit(?:s|ted)? to"
    r"|deadline|due|todo|action items?|next steps?|promis\w*|settled|resolved|final(?:ly)?"
    r"|always|never|instead)\b",
    re.IGNORECASE,
)
_IDENTIFIER = re.compile(
    r"https?://\S+|\b[\w.+-]+@[\w-]+\.[\w.]+|\b\w+[/\\]\w[\w./\\-]*"
    r"|\b\w+\.(?:py|js|ts|md|json|ya?ml|toml|txt|csv|sql|html|go|rs|java|cpp|c|h|sh|log)\b"
    r"|\b[A-Za-z]+_\w+\b|`[^`\n]+`|#\d+|\b[A-Z]{2,}-?\d+\b"
)
_PERSONAL = re.compile(
    r"\b(?:my|mine|I am|I'm|I’m|I prefer|I like|I love|I hate|I work|I live|I use|I want"
    r"|I need|call me|remember|prefer\w*)\b",
    re.IGNORECASE,
)


@dataclass(frozen=True, slots=True)
class _Weights:
    """How one section (template) scores a sentence: points per signal it carries, a bonus per
    kind of line (a kind missing from ``kinds`` is never kept), and the kinds kept for what
    they are even without any signal (tool calls and results, an earlier summary's text)."""

    number: int
    name: int
    decision: int
    identifier: int
    question: int
    personal: int
    kinds: Mapping[str, int]
    salient_kinds: frozenset[str]


_EVERY_KIND = {"user": 1, "assistant": 0, "call": 2, "result": 2, "error": 3, "system": 0}
#: tool calls and results, and an earlier summary's sentences: kept for what they are
_KEPT_AS_THEY_ARE = frozenset({"call", "result", "error", "summary"})

_WEIGHTS: dict[str, _Weights] = {
    "conversation": _Weights(
        number=3, name=2, decision=3, identifier=2, question=1, personal=1,
        kinds={**_EVERY_KIND, "summary": 1}, salient_kinds=_KEPT_AS_THEY_ARE,
    ),
    "facts": _Weights(
        number=4, name=3, decision=1, identifier=3, question=0, personal=1,
        kinds={**_EVERY_KIND, "call": 0, "summary": 1}, salient_kinds=frozenset({"summary"}),
    ),
    "profile": _Weights(  # the user's own statements only
        number=1, name=2, decision=1, identifier=1, question=0, personal=5,
        kinds={"user": 2, "summary": 1}, salient_kinds=frozenset({"summary"}),
    ),
    "task": _Weights(
        number=3, name=1, decision=3, identifier=4, question=1, personal=0,
        kinds={**_EVERY_KIND, "call": 4, "result": 3, "error": 5, "summary": 1},
        salient_kinds=_KEPT_AS_THEY_ARE,
    ),
}  # fmt: skip


@dataclass(frozen=True, slots=True)
class _Unit:
    """One candidate line of the summary: its text (role prefix included), how much it is worth,
    where it came from (``carried`` from the previous summary) and its place there."""

    text: str
    priority: int
    carried: bool
    position: int


def _weights_for(template: str) -> _Weights:
    return _WEIGHTS.get(template, _WEIGHTS["conversation"])


def _kind_of(line: str) -> tuple[str | None, str, str]:
    """(kind, role prefix, body) of a line; kind None when the line has no role prefix."""
    if _CALL.match(line):
        return "call", "", line
    found = _ROLE.match(line)
    if found is None:
        return None, "", line
    prefix = found.group("prefix")
    if found.group("tool"):
        kind = "error" if found.group("outcome") == "error" else "result"
    else:
        kind = next(k for k in ("user", "assistant", "system") if found.group(k))
    return kind, prefix, line[len(prefix) :]


def _sentences(body: str) -> list[str]:
    """The sentences of ``body``: split at line breaks and after . ! ? (a piece that starts in
    lower case stays with the one before: "e.g. this", "v2. and"), stripped, empty ones
    dropped."""
    found: list[str] = []
    for line in body.split("\n"):
        for index, raw in enumerate(_SENTENCE_END.split(line)):
            piece = raw.strip()
            if not piece:
                continue
            if index and found and piece[0].islower():
                found[-1] = f"{found[-1]} {piece}"
            else:
                found.append(piece)
    return found


def _messages_of(transcript: str) -> list[tuple[str, str, str]]:
    """(kind, prefix, body) per transcript message: a line with a role prefix starts one, a
    line without continues the one before (a message's own line breaks); a ``(continued)``
    piece of a long line is read as part of the line before."""
    messages: list[tuple[str, str, str]] = []
    for raw in transcript.split("\n"):
        line = raw.removeprefix(_CONTINUED)
        kind, prefix, body = _kind_of(line)
        if kind is None and messages:
            last_kind, last_prefix, last_body = messages[-1]
            messages[-1] = (last_kind, last_prefix, f"{last_body}\n{line}")
        else:
            messages.append((kind or "assistant", prefix, body))
    return messages


def _summary_lines(previous: str) -> list[tuple[str, str, str]]:
    """(kind, prefix, sentence) of a previous summary: ours (``- role: sentence`` lines) or a
    model's prose; bullets and headings are dropped, the placeholders are not carried."""
    lines: list[tuple[str, str, str]] = []
    for raw in previous.split("\n"):
        line = _BULLET.sub("", raw).strip()
        if not line or line in (NOTHING, _NO_PREVIOUS):
            continue
        kind, prefix, body = _kind_of(line)
        pieces = [body] if kind == "call" else _sentences(body)
        lines += [(kind or "summary", prefix, piece) for piece in pieces]
    return lines


def _names(sentence: str) -> int:
    """Capitalised words (or acronyms) that are not the sentence's first word: names."""
    words = [m.group(0) for m in _WORD.finditer(sentence)][1:]
    return len({w for w in words if w[0].isupper() and w not in _NOT_NAMES})


def _priority(kind: str, sentence: str, weights: _Weights) -> int | None:
    """What a sentence is worth in this section, or None when it is not worth keeping."""
    if kind not in weights.kinds or sentence in ("(no text)", ""):
        return None
    signal = (
        weights.number * (_NUMBER.search(sentence) is not None)
        + weights.name * min(_names(sentence), 2)
        + weights.decision * (_DECISION.search(sentence) is not None)
        + weights.identifier * (_IDENTIFIER.search(sentence) is not None)
        + weights.question * (kind == "user" and "?" in sentence)
        + weights.personal * (_PERSONAL.search(sentence) is not None)
    )
    if signal == 0 and kind not in weights.salient_kinds:
        return None
    return signal + weights.kinds[kind]


@dataclass(frozen=True, slots=True)
class _Packer:
    """Measures and packs lines for one budget with one counter."""

    budget: int
    count: Callable[[str], int]

    @property
    def cap(self) -> int:
        """The most one line may cost (a quarter of the budget, 12 to 100 tokens, never more
        than the budget), so that a long tool output cannot crowd out all the others."""
        return min(self.budget, max(min(self.budget // 4, 100), 12))

    def line(self, prefix: str, sentence: str) -> str:
        text = f"- {prefix}{sentence}"
        if self.count(text) > self.cap:
            text = clip_text(text, self.cap, self.count, _CLIP_MARK)
        return text

    def units(
        self, lines: Sequence[tuple[str, str, str]], weights: _Weights, *, carried: bool
    ) -> list[_Unit]:
        found: list[_Unit] = []
        for kind, prefix, sentence in lines:
            priority = _priority(kind, sentence, weights)
            if priority is not None:
                text = self.line(prefix, sentence)
                found.append(_Unit(text, priority, carried, len(found)))
        return found

    def select(self, carried: list[_Unit], fresh: list[_Unit]) -> list[_Unit]:
        """Best first: the previous summary's lines up to half the budget (all of it when there
        is nothing new), then the new lines, then the previous summary's again. Ties go to the
        older carried line (it has lasted) and to the newer fresh one (it is the latest)."""
        carried = sorted(carried, key=lambda u: (-u.priority, u.position))
        fresh = sorted(fresh, key=lambda u: (-u.priority, -u.position))
        chosen: list[_Unit] = []
        taken: set[_Unit] = set()
        used = 0
        share = self.budget // 2 if fresh else self.budget
        for pool, limit in ((carried, share), (fresh, self.budget), (carried, self.budget)):
            for unit in pool:
                cost = self.count(unit.text) + 1  # and its line break
                if unit not in taken and used + cost <= limit:
                    chosen.append(unit)
                    taken.add(unit)
                    used += cost
        return chosen

    def render(self, chosen: list[_Unit]) -> str:
        """The chosen lines in their original order, shrunk (last chosen first) until the whole
        text fits the budget by the counter: costs need not add up exactly."""
        chosen = list(chosen)
        while chosen:
            ordered = sorted(chosen, key=lambda u: (not u.carried, u.position))
            text = "\n".join(u.text for u in ordered)
            if self.count(text) <= self.budget:
                return text
            chosen.pop()
        if self.count(NOTHING) <= self.budget:
            return NOTHING
        return NOTHING[: longest_prefix_within(NOTHING, self.budget, self.count)]


def _dedupe(carried: list[_Unit], fresh: list[_Unit]) -> list[_Unit]:
    """``fresh`` without the lines already carried (or repeated earlier in ``fresh``)."""
    seen = {" ".join(u.text.casefold().split()) for u in carried}
    kept: list[_Unit] = []
    for unit in fresh:
        key = " ".join(unit.text.casefold().split())
        if key not in seen:
            seen.add(key)
            kept.append(unit)
    return kept


def extract_summary(
    previous: str,
    transcript: str | Sequence[str],
    max_tokens: int,
    *,
    counter: CounterLike | TokenCounter = None,
    template: str = "conversation",
) -> str:
    """The new summary: ``previous`` and the salient sentences of ``transcript`` re-selected
    under ``max_tokens`` (by ``counter``, default approximate), one ``- role: sentence`` per
    line. ``transcript`` is the Summarizer's transcript text, or its lines. ``template`` (a
    name in :data:`~langmem_ext.summarize.prompts.TEMPLATES`) sets what counts as salient.

    Never longer than ``max_tokens``; ``"(nothing of note)"`` when nothing is worth keeping, or
    as much of it as fits (``""`` only for a budget below one character).

    >>> print(extract_summary("- user: I am Ana.", ["user: thanks!", "assistant: Sure.",
    ...     "user: The invoice INV-7 is 412 EUR.", "tool pay result: paid"], 40))
    - user: I am Ana.
    - user: The invoice INV-7 is 412 EUR.
    - tool pay result: paid
    """
    count = as_counter(counter).count_text
    if max_tokens < 1:
        return ""
    text = transcript if isinstance(transcript, str) else "\n".join(transcript)
    weights = _weights_for(template)
    packer = _Packer(max_tokens, count)
    carried = packer.units(_summary_lines(previous), weights, carried=True)
    fresh = [
        (kind, prefix, piece)
        for kind, prefix, body in _messages_of(text)
        for piece in ([body] if kind == "call" else _sentences(body))
    ]
    new = _dedupe(carried, packer.units(fresh, weights, carried=False))
    return packer.render(packer.select(carried, new))


# -- the chat model --------------------------------------------------------------------------


def _template_of(body: str) -> str:
    """The section's template, read from its instruction in the prompt (default: the
    conversation's weights, e.g. for a custom ``prompt=``)."""
    return next((name for name, text in TEMPLATES.items() if text in body), "conversation")


def _stated_budget(body: str) -> int | None:
    """The "in at most N tokens" of the instructions, which follow the last fenced block (so a
    number quoted inside the transcript is never read as the budget)."""
    tail = body[max(body.rfind("</transcript>"), body.rfind("</summary>"), 0) :]
    found = _AT_MOST.findall(tail)
    return int(found[-1]) if found else None


def _read_prompt(messages: Sequence[BaseMessage]) -> tuple[str, str, str]:
    """(previous summary, transcript, whole request text) of a prompt. Without the
    Summarizer's fences, every non-system message is transcript."""
    body = "\n\n".join(content_text(m.content) for m in messages)
    transcript = _TRANSCRIPT.search(body)
    if transcript is not None:
        previous = _PREVIOUS.search(body)
        return (previous.group(1) if previous else "", transcript.group(1), body)
    compress = _COMPRESS.search(body)
    if compress is not None:
        return compress.group(1), "", body
    chat = [m for m in messages if not isinstance(m, SystemMessage)]
    return "", "\n".join(render_transcript(chat)), body


class ExtractiveSummarizer(BaseChatModel):
    """A summarizer "model" that needs no model: extractive, offline and deterministic.

    Use it as a strategy's ``summarizer=``, as ``Summarizer(ExtractiveSummarizer(), ...)`` with
    any of the templates, or as the last-resort ``fallback=`` of an LLM Summarizer (tried when
    the model fails after its retries; it never fails itself). It answers the Summarizer's
    prompts with the previous summary and the transcript's salient sentences (numbers, names,
    decisions, identifiers, tool calls and results), kept verbatim within the budget; see
    :func:`extract_summary`.

    Args:
        max_tokens: a budget of its own (the Summarizer binds each section's budget here);
            the smallest of this, the bound one and the prompt's "at most N tokens" is used,
            :data:`DEFAULT_MAX_TOKENS` when none is given.
        counter: how it measures its answer (default approximate). Give it the strategy's
            counter when that is another one, so its answers fit that counter's budget too.

    Example:
        >>> from langchain_core.messages import AIMessage, HumanMessage
        >>> from langmem_ext.summarize.summarizer import Summarizer
        >>> summarizer = Summarizer(ExtractiveSummarizer(), max_summary_tokens=60)
        >>> sections = summarizer.fold({}, [
        ...     HumanMessage("Hi there!"),
        ...     HumanMessage("My name is Ana and the budget is 4,200 EUR."),
        ...     AIMessage("Great, thanks. We agreed to ship on Friday."),
        ... ])
        >>> print(sections["conversation"])
        - user: My name is Ana and the budget is 4,200 EUR.
        - assistant: We agreed to ship on Friday.
        >>> llm_down = Summarizer(lambda prompt: 1 / 0, fallback=ExtractiveSummarizer(),
        ...                       max_summary_tokens=60, max_attempts=1)
        >>> llm_down.fold(sections, [HumanMessage("ok")]) == sections
        True
    """

    max_tokens: int | None = None
    _counter: TokenCounter = PrivateAttr(default_factory=ApproximateCounter)

    def __init__(self, *, counter: CounterLike | TokenCounter = None, **data: Any) -> None:
        super().__init__(**data)
        self._counter = as_counter(counter)

    @property
    def counter(self) -> TokenCounter:
        """The counter its answers are measured with."""
        return self._counter

    @property
    def _llm_type(self) -> str:
        return "langmem-ext-extractive"

    @property
    def _identifying_params(self) -> dict[str, Any]:
        return {"max_tokens": self.max_tokens, "counter": repr(self._counter)}

    def _budget(self, body: str, bound: Any) -> int:
        limits = [
            limit for limit in (bound, _stated_budget(body), self.max_tokens) if is_int(limit)
        ]
        return min(limits) if limits else DEFAULT_MAX_TOKENS

    def answer(self, messages: Sequence[BaseMessage], max_tokens: int | None = None) -> str:
        """The summary this model answers to ``messages`` (a Summarizer prompt, or any chat),
        within ``max_tokens`` (and the prompt's and the model's own limits)."""
        previous, transcript, body = _read_prompt(messages)
        return extract_summary(
            previous,
            transcript,
            self._budget(body, max_tokens),
            counter=self._counter,
            template=_template_of(body),
        )

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        text = self.answer(messages, kwargs.get("max_tokens"))
        return ChatResult(generations=[ChatGeneration(message=AIMessage(text))])

    async def _agenerate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: AsyncCallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        # pure CPU work of a few milliseconds: no executor thread needed
        return self._generate(messages, stop, None, **kwargs)
