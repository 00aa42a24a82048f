"""The summarizer: folds messages into a running summary with any LangChain chat model.

Folding is incremental and chained: the input is the previous summary plus the messages to fold,
the output is the new summary. A backlog larger than the summarizer's own input budget
(``max_input_tokens``) is folded in several chained calls, each one carrying the summary so far,
so every message is read exactly once and nothing is cut off unseen.

The fold is a plan of model calls (:meth:`Summarizer.steps`, a generator with no I/O). Around
it, one flow (a generator of :class:`~langmem_ext.summarize.flow.Invoke` /
:class:`~langmem_ext.summarize.flow.Sleep` steps, like httpx's
``auth_flow``) holds the retries, the backoff and the fallback; :meth:`Summarizer.fold` (sync)
and :meth:`Summarizer.afold` (async) run it with the package's one pair of drivers
(:mod:`langmem_ext.core.steps`), which only perform those two kinds of I/O, so both share one
logic:

* every model call has a ``timeout`` (60 s by default: use ``None`` or a much larger one for a
  slow local model); a call that does not answer in time is abandoned and counts as a transient
  failure, and no other call starts on a model that is not thread-safe while it still runs
  (``exclusive``);
* every answer is checked before it becomes the summary (``validate``, see
  :mod:`~langmem_ext.summarize.checks`): a rejected one is a transient failure;
* transient failures (timeouts, connection errors, 408/409/425/429/5xx/529, a malformed 200 body,
  an answer without text) are retried up to ``max_attempts`` with exponential backoff and jitter,
  waiting at least what the provider asked in ``Retry-After`` / ``retry-after-ms``
  (:func:`retry_wait`); the model's own SDK retries are switched off (``max_retries=0``) so
  attempts do not multiply;
* a context-length 400 is not retried as it is: the plan halves its input for the rest of the
  fold and sends smaller chained chunks, down to a floor, then fails with a clear error.

A fold that still fails raises :class:`SummarizerError`: nothing was folded, and the strategy
keeps every message unfolded (its own retry schedule takes over, see ``fold.py``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import random
import time
from collections.abc import Awaitable, Callable, Generator, Mapping, Sequence
from typing import Any, cast

from langchain_core.language_models import BaseChatModel, BaseLanguageModel
from langchain_core.messages import BaseMessage, HumanMessage, SystemMessage
from langchain_core.runnables import Runnable

from langmem_ext.core.checks import is_int, is_number
from langmem_ext.core.fences import neutralize
from langmem_ext.core.steps import Raised, arun, resume, run
from langmem_ext.core.text import clip_text, longest_prefix_within
from langmem_ext.core.tokens import TokenCounter

# render_message is not used here: it stays bound because
# tests/summarize/test_summarizer_edges.py::test_one_transcript_renderer checks that this module's
# renderers are the core ones (drop it together with that assertion)
from langmem_ext.core.transcript import render_message, render_transcript  # noqa: F401
from langmem_ext.counting.resolve import CounterLike, as_counter
from langmem_ext.errors import ModelBusyError, SummarizerError, SummaryRejected
from langmem_ext.summarize.calls import (
    ContextOverflow,
    ModelCall,
    ModelLike,
    as_runnable,
    both_failed,
    is_context_overflow,
    is_sync_only,
    is_transient,
    model_lock,
    model_object,
    output_text,
    retry_after,
    retry_wait,
    without_sdk_retries,
)
from langmem_ext.summarize.checks import (
    DEFAULT_CHECKS,
    SummaryCheck,
    SummaryContext,
    checks_of,
    first_rejection,
)
from langmem_ext.summarize.flow import Flow, Invoke, Sleep
from langmem_ext.summarize.prompts import (
    CLIPPED,
    CONTINUED,
    SYSTEM,
    section_budgets,
    section_instructions,
)

# The errors are re-exported under their old names, so existing imports keep working (see
# langmem_ext.errors); the package itself imports them from langmem_ext.errors.
__all__ = [
    "DEFAULT_TIMEOUT",
    "ModelBusyError",
    "Summarizer",
    "SummarizerError",
    "SummarizerLike",
    "SummaryRejected",
]

logger = logging.getLogger("langmem_ext")

#: the default ``timeout`` of one summarizer call, in seconds: a summary of a full input budget
#: takes a few seconds to a few tens of seconds on current models; a call still silent after a
#: minute is treated as lost (and retried) rather than left to block the turn
DEFAULT_TIMEOUT = 60.0


def _seconds(name: str, value: Any, *, positive: bool = False) -> float:
    """``value`` as a finite number of seconds (>= 0, or > 0 with ``positive``), or an error
    naming the parameter, the value and what is accepted."""
    accepted = "> 0" if positive else ">= 0"
    if not is_number(value, finite=False):
        raise TypeError(f"{name} must be a number of seconds {accepted}, got {value!r}")
    if not math.isfinite(value) or value < 0 or (positive and value == 0):
        extra = " (or None for no limit)" if name == "timeout" else ""
        raise ValueError(
            f"{name} must be a finite number of seconds {accepted}{extra}, got {value!r}"
        )
    return float(value)


class Summarizer:
    """Folds messages into a running summary, with retries, a fallback and token budgets.

    Args:
        model: a LangChain chat model (ChatOpenAI, ChatAnthropic, any ``BaseChatModel``), a
            ``"provider:model"`` string (needs the ``langchain`` package), or a callable taking
            the prompt messages and returning text (sync, or async for the async API).
        templates: built-in section templates (``"conversation"``, ``"facts"``, ``"profile"``,
            ``"task"`` for long agent turns),
            one or several; each is its own section of the summary with its own budget.
        max_summary_tokens: the budget of the whole summary, shared evenly by the sections (or a
            mapping section -> tokens). Passed to the model as its output limit where it has one,
            and enforced: a section over budget is compressed once more, then clipped with a
            visible marker.
        max_input_tokens: the most one summarizer call may read (prompt, previous summary and
            transcript). A larger backlog is folded in several chained calls.
        prompt: a custom instruction for a single custom section (``templates`` is then
            ``("custom",)`` unless given). ``{max_tokens}`` in it is replaced by the section's
            budget; any other braces are left alone.
        fallback: another model (or Summarizer) tried when this one fails after its retries
            (for a context-length error too, before the fold shrinks its input).
        counter: how the summarizer measures text (default: approximate).
        max_attempts: requests per call for transient errors (timeouts, connection errors, 429,
            5xx/529, malformed 200 answers, answers without text), with exponential backoff and
            jitter. This is the only retry layer: a chat model with a ``max_retries`` field
            (ChatOpenAI, ChatAnthropic ...) is used through a copy with ``max_retries=0``, so a
            persistent 429 costs ``max_attempts`` requests, not ``max_attempts x 3``.
        retry_initial_wait, retry_max_wait: the backoff's first and largest wait, in seconds.
            A provider's ``Retry-After`` / ``retry-after-ms`` is honoured: the next attempt
            waits at least that long. ``retry_max_wait`` caps every wait: when the provider asks
            for more, the call gives up at once (SummarizerError with ``retry_after``), since
            the strategy's own retry schedule can wait without blocking a turn.
        timeout: seconds one model call may take (sync and async), default
            :data:`DEFAULT_TIMEOUT` (60 s); ``None`` waits forever. A call still silent after it
            is abandoned and counts as a transient failure (retried, then SummarizerError;
            nothing is folded or lost). A sync call runs in a daemon thread so it can be
            abandoned: that thread may finish in the background (its answer is discarded)
            until the model's own client times out. One fold can take up to about
            ``max_attempts x (timeout + retry_max_wait)`` per chained call.
            **Local models** (llama.cpp, a HuggingFace pipeline on a CPU): 60 s suits hosted
            APIs, not a model that writes a 1,000-token summary at a few tokens per second (one
            fold of a small model on a loaded CPU took 386 s); with the default most calls are
            abandoned, retried and abandoned again, and nothing is ever folded. Give such a
            model ``timeout=None`` (a background fold, ``fold_wait=``, keeps the turn from
            waiting on it) or a timeout well above its slowest summary, e.g.
            ``timeout=600``.
        validate: the checks an answer must pass before it becomes the summary (see
            :mod:`~langmem_ext.summarize.checks` and ``docs/summary_validation.md``): a
            callable ``(summary, context) -> str | None`` (None accepts, a string is the reason
            to reject), a sequence of them, or None for no checks. Default: the built-in
            :data:`~langmem_ext.summarize.checks.DEFAULT_CHECKS` (degenerate
            repetition, echoed prompt markup or instructions, a refusal, no content in common
            with the input, implausible length). A rejected answer is a transient failure (a
            model that samples usually answers better the next time): retried within
            ``max_attempts``, then the fallback, then :class:`SummaryRejected` (``.reason``): a
            failed fold, nothing folded, the reason in ``state.last_error``. A rejected
            *compress* answer is not a failure: the summary it was to shorten is clipped.
        exclusive: never run two calls on the model object at once, even when one was
            abandoned at its timeout and may still be running (its thread cannot be stopped).
            Default (None): on for chat models without an async implementation of their own
            (in-process models such as ChatLlamaCpp, whose ``Llama`` object is not
            thread-safe), off for models with native async (HTTP clients, which serve
            concurrent calls: an abandoned request only holds a connection) and for plain
            callables (pass ``exclusive=True`` when yours runs a local model). The lock
            belongs to the model object under any binding (its ``client`` when it has one),
            so every Summarizer on that object shares it. A new call *waits* for the running
            one, within its own ``timeout``, rather than failing at once: a slow local model
            often finishes its abandoned call soon after, and the next call can then run at
            once instead of spending an attempt; a call still waiting when its timeout ends
            fails with ``ModelBusyError`` (a TimeoutError: retried, then a failed fold and the
            strategy's backoff), and never starts later. In the async API such a model runs
            in a daemon thread of ours, not in the event loop's executor (which
            ``asyncio.run`` would wait for).

    Context-length errors: a call refused as longer than the model's window (a 400 saying so) is
    not retried as it is; the fold halves its input for the rest of the fold (smaller chained
    chunks, every transcript line still read exactly once), down to a floor (the instructions, a
    full-size summary and some transcript), then raises a SummarizerError saying so.
    """

    #: how the sync driver sleeps between attempts (replace on an instance in tests)
    sleep: Callable[[float], None] = staticmethod(time.sleep)
    #: how the async driver sleeps between attempts
    asleep: Callable[[float], Awaitable[None]] = staticmethod(asyncio.sleep)

    def __init__(
        self,
        model: ModelLike,
        *,
        templates: Sequence[str] | None = None,
        max_summary_tokens: int | Mapping[str, int] = 1_000,
        max_input_tokens: int = 16_000,
        prompt: str | None = None,
        fallback: ModelLike | Summarizer | None = None,
        counter: CounterLike = None,
        max_attempts: int = 3,
        retry_initial_wait: float = 1.0,
        retry_max_wait: float = 20.0,
        timeout: float | None = DEFAULT_TIMEOUT,
        validate: SummaryCheck | Sequence[SummaryCheck] | None = DEFAULT_CHECKS,
        exclusive: bool | None = None,
    ) -> None:
        self.validate: tuple[SummaryCheck, ...] = checks_of(validate)
        self.templates, self.instructions = section_instructions(templates, prompt)
        budgets = section_budgets(self.templates, max_summary_tokens)
        self.section_budgets = budgets
        self.max_summary_tokens = sum(budgets.values())
        if max_input_tokens < 4 * max(budgets.values()):
            raise ValueError(
                f"max_input_tokens ({max_input_tokens:,}) must be at least 4x the largest "
                f"section budget ({max(budgets.values()):,}): a call reads the previous summary, "
                "the instructions and some transcript"
            )
        self.max_input_tokens = max_input_tokens
        if not is_int(max_attempts, 1):
            raise ValueError(f"max_attempts must be an int >= 1, got {max_attempts!r}")
        self.retry_initial_wait = _seconds("retry_initial_wait", retry_initial_wait)
        self.retry_max_wait = _seconds("retry_max_wait", retry_max_wait)
        self.timeout = None if timeout is None else _seconds("timeout", timeout, positive=True)
        self.model = model
        self._runnable = without_sdk_retries(as_runnable(model))
        if exclusive is not None and not isinstance(exclusive, bool):
            raise TypeError(f"exclusive must be True, False or None (auto), got {exclusive!r}")
        self.exclusive = is_sync_only(self._runnable) if exclusive is None else exclusive
        self.counter: TokenCounter = as_counter(counter)
        self.max_attempts = max_attempts
        self.fallback: Summarizer | None
        if fallback is None or isinstance(fallback, Summarizer):
            self.fallback = fallback
        else:  # the same settings, another model
            self.fallback = Summarizer(
                fallback,
                templates=self.templates,
                max_summary_tokens=dict(budgets),
                max_input_tokens=max_input_tokens,
                prompt=prompt,
                counter=self.counter,
                max_attempts=max_attempts,
                retry_initial_wait=retry_initial_wait,
                retry_max_wait=retry_max_wait,
                timeout=timeout,
                validate=self.validate,
            )

    def __repr__(self) -> str:
        name = getattr(self.model, "model_name", None) or getattr(self.model, "model", None)
        label = name if isinstance(name, str) else type(self.model).__name__
        return (
            f"Summarizer({label!r}, templates={self.templates}, "
            f"max_summary_tokens={self.max_summary_tokens}, timeout={self.timeout})"
        )

    # -- the plan (pure) --------------------------------------------------------------------------

    def _prompt(self, section: str, previous: str, lines: Sequence[str]) -> tuple[BaseMessage, ...]:
        budget = self.section_budgets[section]
        instruction = self.instructions[section].replace("{max_tokens}", str(budget))
        body = (
            f"<previous_summary>\n{neutralize(previous) or '(none yet)'}\n</previous_summary>\n\n"
            f"<transcript>\n" + "\n".join(lines) + "\n</transcript>\n\n"
            f"{instruction}\n\nWrite the updated summary in at most {budget} tokens."
        )
        return (SystemMessage(SYSTEM), HumanMessage(body))

    def _compress_prompt(self, section: str, text: str) -> tuple[BaseMessage, ...]:
        budget = self.section_budgets[section]
        body = (
            f"<summary>\n{neutralize(text)}\n</summary>\n\nThis summary is over its budget. "
            f"Rewrite it in at most {budget} tokens, keeping decisions, open items, exact "
            "numbers and names; drop detail that matters least."
        )
        return (SystemMessage(SYSTEM), HumanMessage(body))

    def _cost(self, prompt: Sequence[BaseMessage]) -> int:
        return self.counter.count_messages(list(prompt))

    def _split_line(self, line: str, room: int) -> list[str]:
        """Pieces of one over-long line, each costing at most ``room`` tokens with its
        ``(continued)`` label. Joined without the labels, they are the line."""
        room = max(room - self.counter.count_text(CONTINUED), 1)
        pieces: list[str] = []
        rest = line
        while rest:
            if self.counter.count_text(rest) <= room:
                pieces.append(rest)
                break
            # at least one character, so the loop always advances
            keep = longest_prefix_within(rest, room, self.counter.count_text, at_least=1)
            space = rest.rfind(" ", keep // 2, keep)  # prefer to cut between words
            if space > 0:
                keep = space + 1
            pieces.append(rest[:keep])
            rest = rest[keep:]
        return [p if i == 0 else CONTINUED + p for i, p in enumerate(pieces)]

    def _next_chunk(self, pending: list[str], room: int, budget: int) -> list[str]:
        """Take from the front of ``pending`` the lines of the next call (one token each for
        the line break), at most ``room`` tokens. A first line too long on its own is split in
        place across calls, leaving room for the summary to grow to its ``budget`` meanwhile."""
        chunk: list[str] = []
        used = 0
        while pending:
            cost = self.counter.count_text(pending[0]) + 1
            if used + cost <= room:
                chunk.append(pending.pop(0))
                used += cost
            elif not chunk:
                pending[:0] = self._split_line(pending.pop(0), max(room - budget - 1, 1))
            else:
                break
        return chunk

    def _no_room(self, section: str, limit: int) -> SummarizerError:
        shrunk = "" if limit == self.max_input_tokens else f", shrunk to {limit:,}"
        return SummarizerError(
            f"the previous {section!r} summary leaves no room in max_input_tokens "
            f"({self.max_input_tokens:,}{shrunk}) for transcript",
            section=section,
        )

    def _shrunk_limit(
        self,
        section: str,
        refused: ContextOverflow,
        prompt: Sequence[BaseMessage],
        limit: int,
        floor: int,
    ) -> int:
        """The input limit after ``prompt`` was refused as too long: half the refused prompt, at
        least ``floor``; a SummarizerError when the prompt was already at the floor."""
        size = self._cost(prompt)
        smaller = max(floor, size // 2)
        if smaller >= size:
            raise SummarizerError(
                f"the summarizer model refused a {size:,}-token prompt for the "
                f"{section!r} section as longer than its context window ({refused}); "
                f"this fold already shrank its input from max_input_tokens="
                f"{self.max_input_tokens:,} to {limit:,} tokens and cannot go below "
                f"{floor:,} (the instructions, a full-size summary and some "
                "transcript): use a summarizer model with a larger context window, "
                "or a smaller max_summary_tokens",
                section=section,
                attempts=refused.attempts,
            ) from refused
        return min(limit, smaller)

    def _within_budget(self, section: str, summary: str) -> Generator[ModelCall, str, str]:
        """``summary`` within its section budget before it is carried into the next call (or
        returned), so a model that overran its limit cannot starve the rest of the chain of
        input room: compressed once, then clipped with a visible marker. A compress call
        refused as too long (only the summary was sent) or rejected by the checks leaves
        clipping."""
        budget = self.section_budgets[section]
        if self.counter.count_text(summary) <= budget:
            return summary
        # a compress answer refused as too long or rejected by the checks: the summary (which
        # passed them) is clipped instead
        with contextlib.suppress(ContextOverflow, SummaryRejected):
            summary = yield ModelCall(
                self._compress_prompt(section, summary), budget, section, "compress", summary
            )
        if self.counter.count_text(summary) > budget:
            summary = clip_text(summary, budget, self.counter.count_text, CLIPPED)
        return summary

    def _section_steps(
        self, section: str, summary: str, lines: Sequence[str], limit: int
    ) -> Generator[ModelCall, str, tuple[str, int]]:
        """One section of :meth:`steps`: the new summary, and the input limit as it now is."""
        budget = self.section_budgets[section]
        floor = self._cost(self._prompt(section, "", [])) + 2 * budget + 64
        pending = list(lines)
        while pending:
            room = limit - self._cost(self._prompt(section, summary, []))
            if room < 8:
                raise self._no_room(section, limit)
            chunk = self._next_chunk(pending, room, budget)
            prompt = self._prompt(section, summary, chunk)
            try:
                summary = yield ModelCall(prompt, budget, section, "fold", summary, tuple(chunk))
            except ContextOverflow as refused:
                limit = self._shrunk_limit(section, refused, prompt, limit, floor)
                pending[:0] = chunk  # read again, in smaller calls: never skipped
                continue
            summary = yield from self._within_budget(section, summary)
        return summary, limit

    def steps(
        self, previous: Mapping[str, str], messages: Sequence[BaseMessage]
    ) -> Generator[ModelCall, str, dict[str, str]]:
        """The fold as a plan: yields each :class:`ModelCall`, receives the model's text, and
        returns the new sections. Every transcript line goes into exactly one answered call per
        section.

        A driver whose call was refused as too long for the model's context window throws that
        failure (a ``SummarizerError`` the drivers build when :func:`is_context_overflow`) into
        the plan instead of sending text: the plan then halves its input budget for the rest of
        this fold (half the refused prompt, at least the floor: the instructions, a full-size
        summary and some transcript), puts the refused chunk back and carries on with smaller
        chunks; a refused prompt already at the floor ends the fold with a SummarizerError. A
        refused compress call leaves the summary to be clipped.
        """
        lines = render_transcript(messages)
        limit = self.max_input_tokens  # shrinks when the model refuses a prompt as too long
        result: dict[str, str] = {}
        for section in self.templates:
            summary = previous.get(section, "")
            result[section], limit = yield from self._section_steps(section, summary, lines, limit)
        return result

    # -- the call flow (pure) and its two drivers -------------------------------------------------

    def _bound(self, max_tokens: int) -> Runnable[Any, Any]:
        runnable = self._runnable
        if isinstance(runnable, BaseChatModel) and "max_tokens" in type(runnable).model_fields:
            runnable = runnable.bind(max_tokens=max_tokens)
        return runnable

    def _wait(self, attempt: int, error: BaseException) -> float | None:
        return retry_wait(
            attempt,
            error,
            max_attempts=self.max_attempts,
            initial=self.retry_initial_wait,
            largest=self.retry_max_wait,
            jitter=random.random(),
        )

    def _failed(self, call: ModelCall, error: BaseException, attempts: int) -> SummarizerError:
        asked = retry_after(error)
        note = ""
        if (
            asked is not None
            and asked > self.retry_max_wait
            and attempts < self.max_attempts
            and is_transient(error)
        ):
            note = (
                f" (the provider asked to retry after {asked:g} s, more than "
                f"retry_max_wait={self.retry_max_wait:g} s)"
            )
        if isinstance(error, SummaryRejected):  # the reason first: last_error keeps 300 chars
            return SummaryRejected(
                f"the {call.section!r} summary was rejected after {attempts} attempt(s): "
                f"{error.reason}",
                reason=error.reason,
                section=call.section,
                attempts=attempts,
            )
        kind = ContextOverflow if is_context_overflow(error) else SummarizerError
        return kind(
            f"summarizing the {call.section!r} section failed after {attempts} "
            f"attempt(s){note}: {type(error).__name__}: {error}",
            section=call.section,
            attempts=attempts,
            retry_after=asked,
        )

    def _context(self, call: ModelCall) -> SummaryContext:
        return SummaryContext(
            section=call.section,
            kind=call.kind,
            previous=call.previous,
            transcript=call.transcript,
            instructions=self.instructions[call.section],
            prompt=call.prompt,
            max_tokens=call.max_tokens,
        )

    def _checked(self, text: str, call: ModelCall) -> str:
        """``text`` when every check accepts it; a :class:`SummaryRejected` otherwise."""
        reason = first_rejection(text, self._context(call), self.validate)
        if reason is None:
            return text
        logger.info("langmem_ext: summary rejected (%s): %s", call.section, reason)
        raise SummaryRejected(f"the summary was rejected: {reason}", reason=reason)

    def _attempts_flow(self, call: ModelCall) -> Flow[str]:
        """This model alone (no fallback), with retries; the failure as a SummarizerError. An
        answer the checks (``validate``) reject is a transient failure like an empty one."""
        # looked up per call (a lock is not copyable, a Summarizer is)
        lock = model_lock(model_object(self._runnable)) if self.exclusive else None
        request = Invoke(self._bound(call.max_tokens), list(call.prompt), self.timeout, lock)
        attempt = 0
        while True:
            attempt += 1
            try:
                return self._checked(output_text((yield request)), call)
            except Exception as error:
                wait = self._wait(attempt, error)
                if wait is None:
                    raise self._failed(call, error, attempt) from error
            yield Sleep(wait, self)

    def _call_flow(self, call: ModelCall) -> Flow[str]:
        """One model call: this model with its retries, then the fallback with its own."""
        try:
            return (yield from self._attempts_flow(call))
        except SummarizerError as failure:
            if self.fallback is None:
                raise
            try:
                return (yield from self.fallback._call_flow(call))
            except SummarizerError as second:
                raise both_failed(failure, second) from second

    def _fold_flow(
        self, previous: Mapping[str, str], messages: Sequence[BaseMessage]
    ) -> Flow[dict[str, str]]:
        """The whole fold: the plan of :meth:`steps`, each of its calls made by
        :meth:`_call_flow`; a context overflow is thrown back into the plan (which shrinks)."""
        plan = self.steps(previous, messages)
        call, result = resume(plan, None)
        while call is not None:
            try:
                reply: str | Raised = yield from self._call_flow(call)
            except ContextOverflow as refused:
                reply = Raised(refused)
            except SummaryRejected as rejected:
                if call.kind != "compress":
                    raise
                reply = Raised(rejected)  # the plan clips the summary instead
            call, result = resume(plan, reply)
        return cast("dict[str, str]", result)

    def fold(self, previous: Mapping[str, str], messages: Sequence[BaseMessage]) -> dict[str, str]:
        """The new summary sections after folding ``messages`` into ``previous``.

        Raises :class:`SummarizerError` when a call fails after its retries and the fallback,
        or when the model's context window is too small even for the smallest input.
        """
        return run(self._fold_flow(previous, messages))

    async def afold(
        self, previous: Mapping[str, str], messages: Sequence[BaseMessage]
    ) -> dict[str, str]:
        """Async :meth:`fold`: the same flow, driven with ``ainvoke``."""
        return await arun(self._fold_flow(previous, messages))


SummarizerLike = Summarizer | BaseLanguageModel[Any] | Callable[..., Any] | str
