"""Checks a summary must pass before it is committed.

A small local model (a 270M-parameter Gemma through llama.cpp, say) answers a summarization
prompt with garbage surprisingly often: a short token repeated to the output limit
(``[b] [b] [b] ...``), the prompt's own markup or instructions echoed back, a refusal. Such an
answer is not empty, so without a check it became the summary, the memory stayed "healthy",
and the garbage was fed back as the previous summary of every later fold. The
:class:`~langmem_ext.summarize.summarizer.Summarizer` runs every answer of its model through
these checks; a rejected answer is a failed call (:class:`SummaryRejected`, with ``reason``):
retried, then the fallback, then a failed fold (nothing folded, nothing lost, the reason in
``state.last_error``).

A check is a callable ``(summary, context) -> str | None``: ``None`` accepts, a string is the
reason to reject. The built-in ones (:data:`DEFAULT_CHECKS`) are deliberately conservative, a
good summary wrongly refused costs a fold; each one looks at the answer *and at what it
summarizes* (:class:`SummaryContext`), so what the conversation itself contains (a user who
typed "ha ha ha ha", a transcript that quotes our tags) is never held against the summary:

* :func:`check_text`: the answer has no word at all (``"..."``, ``"-"``).
* :func:`check_repetition`: one unit of 1..128 words repeated back to back at least 4 times and
  filling at least half of the answer (answers of 8 words or more), or, for answers of 200
  words or more, fewer than 10% distinct words; unless the same repetition is in the input.
* :func:`check_echo`: the prompt's markup (its fence tags, in ``<x>``, ``</x>``, ``[x]`` or
  ``‹x›`` form), a run of 8 words of its instructions, or the whole answer equal to one line
  of its scaffolding (``(none yet)``); again, unless the input holds it.
* :func:`check_refusal`: the answer opens with a refusal ("I'm sorry, but I can't ...",
  "As an AI language model ...", "I cannot summarize ...", a few German and French forms),
  unless the input holds that opening sentence.
* :func:`check_overlap`: the answer shares not one content word with what it summarizes
  (content words: words of 4+ letters outside a stop list, compared on their first 5 letters
  without accents and case; numbers; pairs of CJK characters), when both sides have enough of
  them to judge (6 distinct in the answer, 8 in the input).
* :func:`check_length`: the answer is more than ``3 x input + 100`` words (the input: the
  previous summary and the transcript of the call).

Not checked on purpose: "too short" (a one-line summary of a long tool output can be right, and
a test's canned answer is short), and the language of the answer.
"""

from __future__ import annotations

import itertools
import re
import unicodedata
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Literal

from langchain_core.messages import BaseMessage

from langmem_ext.errors import SummaryRejected

# SummaryRejected is re-exported under its old name, so existing imports keep working (see
# langmem_ext.errors); the package itself imports it from langmem_ext.errors.
__all__ = [
    "DEFAULT_CHECKS",
    "SummaryCheck",
    "SummaryContext",
    "SummaryRejected",
    "check_echo",
    "check_length",
    "check_overlap",
    "check_refusal",
    "check_repetition",
    "check_text",
    "checks_of",
    "content_words",
    "first_rejection",
    "words",
]


@dataclass(frozen=True)
class SummaryContext:
    """What a summary answers: handed to every check with the answer.

    ``previous`` is the summary so far of this section (for a ``"compress"`` call: the
    over-budget summary being shortened), ``transcript`` the transcript lines of this call (empty
    for a compress call), ``instructions`` the section's instruction, ``prompt`` the messages
    sent, ``max_tokens`` the output limit.
    """

    section: str = "summary"
    kind: Literal["fold", "compress"] = "fold"
    previous: str = ""
    transcript: tuple[str, ...] = ()
    instructions: str = ""
    prompt: tuple[BaseMessage, ...] = ()
    max_tokens: int | None = None
    #: derived word lists, computed once per context (every check reads them)
    _cache: dict[str, object] = field(default_factory=dict, repr=False, compare=False)

    @property
    def input_text(self) -> str:
        """What the summary stands for: the previous summary and the transcript."""
        return "\n".join((self.previous, *self.transcript))

    def input_words(self) -> list[str]:
        """The words of :attr:`input_text` (see :func:`words`), case-folded."""
        found = self._cache.get("input_words")
        if found is None:
            found = [w.casefold() for w in words(self.input_text)]
            self._cache["input_words"] = found
        return found  # type: ignore[return-value]

    def input_joined(self) -> str:
        """The input words joined by a separator: a sequence of words is in the input when its
        joined form is a substring of this."""
        found = self._cache.get("input_joined")
        if found is None:
            found = _joined(self.input_words())
            self._cache["input_joined"] = found
        return found  # type: ignore[return-value]

    def prompt_lines(self) -> list[str]:
        """The lines of the prompt's text (system and human messages)."""
        text = "\n".join(_message_text(m) for m in self.prompt)
        return text.splitlines()


#: a check: None accepts the summary, a string is the reason to reject it
SummaryCheck = Callable[[str, SummaryContext], "str | None"]

_CJK = "\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff"
#: a word: one CJK character (those scripts write no spaces), or a run of other letters/digits
_WORD = re.compile(rf"[{_CJK}]|[^\W_{_CJK}]+")
_SEP = "\x1f"


def words(text: str) -> list[str]:
    """The words of ``text``: runs of letters and digits; each Chinese/Japanese character is a
    word of its own. Punctuation and markup characters are not words."""
    return _WORD.findall(text)


def _joined(items: Sequence[str]) -> str:
    return _SEP + _SEP.join(items) + _SEP


def _message_text(message: BaseMessage) -> str:
    return str(message.text)


def _show(items: Sequence[str], limit: int = 40) -> str:
    text = " ".join(items)
    return text if len(text) <= limit else text[: limit - 1] + "…"


# --------------------------------------------------------------------------------------------
# the checks


def check_text(summary: str, context: SummaryContext) -> str | None:
    """No word at all (only punctuation, markup or symbols): not a summary."""
    if words(summary):
        return None
    return f"no text: the answer has no word ({summary[:20]!r})"


#: a unit repeated back to back this many times ...
_MIN_REPEATS = 4
#: ... filling at least this share of the answer is degenerate repetition
_MIN_SHARE = 0.5
#: the longest unit looked for, in words
_MAX_UNIT = 128
#: answers shorter than this (in words) are not checked for repetition
_MIN_WORDS = 8
#: an answer of at least _LONG words with fewer than _MIN_DISTINCT distinct ones is degenerate
_LONG = 200
_MIN_DISTINCT = 0.1
#: the most words of an answer the checks read (a model that ignored its limit); the
#: repetition check reads fewer (its cost grows with the words times the longest unit)
_MAX_READ = 20_000
_MAX_READ_REPEAT = 4_000


def _degenerate_repeat(tokens: Sequence[str]) -> tuple[int, int, int] | None:
    """The first stretch of ``tokens`` (by unit length, the longest for that unit) made of one
    unit repeated back to back at least ``_MIN_REPEATS`` times and covering at least
    ``_MIN_SHARE`` of the tokens: (start, unit length, stretch length); None when there is
    none."""
    n = len(tokens)
    need = _MIN_SHARE * n
    for unit in range(1, min(_MAX_UNIT, n // _MIN_REPEATS) + 1):
        # matches in a row (tokens[i] == tokens[i + unit]) a stretch that counts needs; any
        # such run covers an index i with i % step == step - 1: probe those first (cheap)
        step = max(int(need + 0.5) - unit, (_MIN_REPEATS - 1) * unit, 1)
        probes = range(step - 1, n - unit, step)
        if not any(tokens[i] == tokens[i + unit] for i in probes):
            continue
        run, best = 0, (0, 0)
        for i, same in enumerate(map(str.__eq__, tokens, tokens[unit:])):
            run = run + 1 if same else 0
            if run > best[1]:
                best = (i - run + 1, run)
        start, stretch = best[0], best[1] + unit
        if stretch >= need and stretch // unit >= _MIN_REPEATS:
            return start, unit, stretch
    return None


def check_repetition(summary: str, context: SummaryContext) -> str | None:
    """Degenerate repetition: a unit of 1..128 words repeated back to back at least 4 times and
    filling at least half of an answer of 8+ words (``[b] [b] [b] ...``, or a sentence looped
    to the output limit), or an answer of 200+ words with fewer than 10% distinct words. A
    repetition the input holds too (four times in a row) is the conversation's, not the
    model's, and passes."""
    tokens = [w.casefold() for w in words(summary)[:_MAX_READ_REPEAT]]
    if len(tokens) < _MIN_WORDS:
        return None
    found = _degenerate_repeat(tokens)
    if found is not None:
        start, unit, stretch = found
        pattern = tokens[start : start + unit]
        if _joined(pattern * _MIN_REPEATS) not in context.input_joined():
            share = stretch / len(tokens)
            return (
                f"degenerate repetition: {_show(pattern)!r} repeated {stretch // unit} times "
                f"({share:.0%} of the summary)"
            )
    if len(tokens) >= _LONG:
        distinct = len(set(tokens)) / len(tokens)
        source = context.input_words()
        source_distinct = len(set(source)) / len(source) if len(source) >= _LONG else 1.0
        if distinct < _MIN_DISTINCT and source_distinct >= 2 * _MIN_DISTINCT:
            return (
                f"degenerate repetition: {len(set(tokens))} distinct words in {len(tokens)} "
                f"({distinct:.0%})"
            )
    return None


#: an echoed instruction: this many words in a row from the prompt's scaffolding
_ECHO_WORDS = 8
_TAG_NAME = re.compile(r"</?\s*([A-Za-z_][\w-]*)\s*>")


def _scaffold(context: SummaryContext) -> tuple[list[str], set[str]]:
    """The prompt's own lines (those that are not the input's data) and its tag names."""
    data = {line.strip() for line in context.input_text.splitlines()}
    lines = [line for line in context.prompt_lines() if line.strip() not in data]
    tags = {m.group(1).casefold() for line in lines for m in _TAG_NAME.finditer(line)}
    return lines, tags


def _norm_line(line: str) -> str:
    return "".join(w.casefold() for w in words(line))


def check_echo(summary: str, context: SummaryContext) -> str | None:
    """The prompt echoed back: one of its fence tags (``<transcript>``, ``[/transcript]``,
    ``‹previous_summary›`` ...), 8 words in a row of its instructions, or the whole answer equal
    to one line of its scaffolding (such as ``(none yet)``). What the input itself holds (a
    conversation that quotes a tag or discusses the prompt) passes."""
    lines, tags = _scaffold(context)
    for tag in sorted(tags):
        # in any bracket form: the transcript shows a user's "<transcript>" as "‹transcript›"
        form = re.compile(rf"[<\[‹＜«]\s*/?\s*{re.escape(tag)}\s*[>\]›＞»]", re.IGNORECASE)
        found = form.search(summary)
        if found and not form.search(context.input_text):
            return f"echoes the prompt's markup {found.group(0)!r}"
    answer = _norm_line(summary)
    if answer and any(answer == _norm_line(line) for line in lines):
        return f"echoes a line of the prompt ({summary.strip()[:40]!r})"
    prompt_words = [w.casefold() for line in lines for w in words(line)]
    if len(prompt_words) >= _ECHO_WORDS:
        runs = {
            _joined(prompt_words[i : i + _ECHO_WORDS])
            for i in range(len(prompt_words) - _ECHO_WORDS + 1)
        }
        tokens = [w.casefold() for w in words(summary)[:_MAX_READ]]
        source = context.input_joined()
        for i in range(len(tokens) - _ECHO_WORDS + 1):
            run = _joined(tokens[i : i + _ECHO_WORDS])
            if run in runs and run not in source:
                return f"echoes the prompt's instructions ({_show(tokens[i : i + _ECHO_WORDS])!r})"
    return None


_REFUSALS = re.compile(
    r"""^(?:
        (?:i'?m|i\ am)\ (?:so\ )?sorry|sorry|i\ apologi[sz]e|unfortunately
      )\b[^.!?\n]{0,80}?\b(?:can'?t|cannot|can\ not|unable|not\ able|won'?t|must\ decline)\b
    | ^(?:i|we)\ (?:can'?t|cannot|can\ not|am\ unable\ to|am\ not\ able\ to|won'?t|must\ decline)
      \ (?:help|assist|comply|provide|summari[sz]e|do\ that|fulfil|complete|continue|create
        |generate|write|process|answer)
    | ^as\ an?\ (?:ai|artificial\ intelligence|large\ language\ model|language\ model)\b
    | ^es\ tut\ mir\ leid\b | ^als\ (?:ki|künstliche\ intelligenz|sprachmodell)\b
    | ^ich\ kann\ (?:ihnen\ )?(?:dabei\ )?nicht\ (?:helfen|zusammenfassen)
    | ^(?:je\ suis\ )?désolée?\b | ^je\ ne\ peux\ pas\b | ^en\ tant\ qu'?ia\b
    """,
    re.IGNORECASE | re.VERBOSE,
)
_OPENING = re.compile(r"[^.!?\n]*[.!?]?")


def check_refusal(summary: str, context: SummaryContext) -> str | None:
    """A refusal instead of a summary: the answer opens with "I'm sorry, but I can't ...",
    "As an AI ...", "I cannot summarize ..." (and a few German and French forms). A summary that
    merely *reports* a refusal ("The assistant declined ...") passes, and so does an opening
    sentence the input holds (an extractive summary quoting the conversation)."""
    text = summary.strip().lstrip("*_#>\"'`“‘ -").replace("’", "'").replace("‘", "'")
    if not _REFUSALS.match(text):
        return None
    opening = _OPENING.match(text)
    sentence = (opening.group(0) if opening else text).strip()
    if sentence and sentence.casefold() in context.input_text.replace("’", "'").casefold():
        return None
    return f"a refusal, not a summary ({sentence[:60]!r})"


#: words of 4+ letters that carry no content (English, German, French, Spanish), and the
#: vocabulary of the prompt and the transcript's labels
_STOP = frozenset(
    """
    about above after again against also among another any anything around been before being
    below between both could does doing down during each even every from further have having
    here into just like made make many more most much must need only other over same shall
    should some such than that their them then there these they this those through under until
    upon very want well were what when where which while will with within without would your
    yours also that's it's
    user users assistant assistants tool tools result results called error errors system note
    summary summaries conversation transcript previous none continued section updated
    aber alle auch dass dein denn dies diese dieser doch eine einem einen einer eines habe haben
    hatte nach nicht noch oder ohne sein sind über unter wenn werden wird wurde zum
    avec dans elle elles être leur mais nous pour sans sont vous cette
    como para pero porque esta este esto sobre
    """.split()
)
_PREFIX = 5


def _fold_accents(word: str) -> str:
    if word.isascii():
        return word.lower()
    decomposed = unicodedata.normalize("NFKD", word.casefold())
    return "".join(c for c in decomposed if not unicodedata.combining(c))


_CJK_RUN = re.compile(rf"[{_CJK}]{{2,}}")
_NOT_CJK_WORD = re.compile(rf"[^\W_{_CJK}]+")


def content_words(text: str) -> set[str]:
    """The content words of ``text``, normalized for comparison: numbers as they are, words of
    4+ letters outside the stop list by their first 5 letters (case and accents folded: a
    plural, a verb form or "Zurich" for "Zürich" still match), and each pair of neighbouring
    CJK characters."""
    found: set[str] = set()
    for run in _CJK_RUN.findall(text):
        found.update(a + b for a, b in itertools.pairwise(run))
    for word in set(_NOT_CJK_WORD.findall(text)):
        if word.isdigit():
            found.add(word.lstrip("0") or "0")
            continue
        plain = _fold_accents(word)
        if len(plain) >= 4 and plain not in _STOP and not plain.isdigit():
            found.add(plain[:_PREFIX])
    return found


#: what each side needs (distinct content words) before a missing overlap means anything
_MIN_ANSWER_CONTENT = 6
_MIN_INPUT_CONTENT = 8


def check_overlap(summary: str, context: SummaryContext) -> str | None:
    """Not one content word (see :func:`content_words`) in common with the previous summary and
    the transcript: an answer about something else. Judged only when the answer has 6 distinct
    content words and the input 8, so short answers and short inputs always pass."""
    answer = content_words(summary[: 20 * _MAX_READ])
    if len(answer) < _MIN_ANSWER_CONTENT:
        return None
    source = content_words(context.input_text)
    if len(source) < _MIN_INPUT_CONTENT or answer & source:
        return None
    return (
        f"no overlap with what it summarizes: none of its {len(answer)} content words is in the "
        f"previous summary or the transcript"
    )


#: an answer longer than _LENGTH_FACTOR x input + _LENGTH_SLACK words is implausible
_LENGTH_FACTOR = 3
_LENGTH_SLACK = 100


def check_length(summary: str, context: SummaryContext) -> str | None:
    """Implausibly long: more than ``3 x (previous summary + transcript) + 100`` words. A
    summary can be longer than a tiny input ("hi" becomes "The user greeted the assistant"),
    not pages longer."""
    answer = len(words(summary))
    source = len(context.input_words())
    limit = _LENGTH_FACTOR * source + _LENGTH_SLACK
    if answer <= limit:
        return None
    return f"implausibly long: {answer:,} words for {source:,} words of input (limit {limit:,})"


#: the built-in checks, in the order they run (the first reason wins)
DEFAULT_CHECKS: tuple[SummaryCheck, ...] = (
    check_text,
    check_repetition,
    check_echo,
    check_refusal,
    check_overlap,
    check_length,
)


def checks_of(validate: SummaryCheck | Iterable[SummaryCheck] | None) -> tuple[SummaryCheck, ...]:
    """``validate=`` as a tuple of checks: None for none, one callable, or several."""
    if validate is None:
        return ()
    if callable(validate):
        return (validate,)
    if isinstance(validate, (str, bytes)) or not isinstance(validate, Iterable):
        raise TypeError(
            "validate must be a check (summary, context) -> str | None, a sequence of them, or "
            f"None, got {validate!r}"
        )
    checks = tuple(validate)
    for check in checks:
        if not callable(check):
            raise TypeError(
                f"validate must hold only callables (summary, context) -> str | None, got {check!r}"
            )
    return checks


def first_rejection(
    summary: str, context: SummaryContext, checks: Sequence[SummaryCheck] = DEFAULT_CHECKS
) -> str | None:
    """The reason of the first check that rejects ``summary``, or None when all accept. A check
    returning anything but None or a string is a bug in it (TypeError)."""
    for check in checks:
        reason = check(summary, context)
        if reason is None:
            continue
        if not isinstance(reason, str):
            name = getattr(check, "__name__", repr(check))
            raise TypeError(f"summary check {name} returned {reason!r}; expected None or a str")
        return reason or f"rejected by {getattr(check, '__name__', repr(check))}"
    return None
