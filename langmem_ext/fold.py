"""The fold stage: a running summary plus the recent messages verbatim, as a pure plan.

``plan_fold(messages, state, config, counter, now)`` is a generator. It yields at most one
:class:`FoldRequest` (the previous summary and the oldest messages to fold) and receives a
:class:`FoldOutcome`; it returns the :class:`~langmem_ext.result.MemoryResult`. The drivers in
:mod:`langmem_ext.engine` fulfil the request with the summarizer, sync or async. The plan itself
does no I/O and reads no clock: ``now`` is passed in.

The rules it keeps:

* **Hysteresis.** Nothing is folded while the view fits under the high-water mark
  (``trigger_tokens``). When it would not, the oldest whole units are folded until the view,
  with a full-size summary, fits ``target_tokens``. So folds are rare and the view's prefix (the
  system message with the summary) stays the same between them.
* **Each message is folded exactly once**, and the previous summary is part of every fold's
  input: the folded boundary only moves forward, and only after the summarizer succeeded.
* **Failure loses nothing.** If the summarizer fails, nothing is marked folded; the view is the
  last good summary plus the newest messages that fit, with a visible note saying how many earlier
  messages are not shown; health goes to ``retrying`` (then ``degraded`` after
  ``degrade_after`` failures) and the fold is tried again once ``retry_at`` has passed.
* **Overflow terminates.** When the summary, ``min_messages`` and the newest human message cannot
  fit, ``overflow`` decides in a fixed number of steps: ``"truncate_summary"`` clips the summary
  in the view (then the newest human message), ``"truncate_oldest"`` keeps fewer old messages
  (then clips), ``"error"`` raises :class:`~langmem_ext.errors.MemoryBudgetExceeded`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Generator, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Literal

from langchain_core.messages import BaseMessage, HumanMessage, SystemMessage

from langmem_ext._fences import neutralize
from langmem_ext._identity import KeyChain, digest
from langmem_ext.errors import ContextOverflowError, MemoryBudgetExceeded
from langmem_ext.messages import Unit, as_standard, ensure_message, is_system, iter_units_reverse
from langmem_ext.plan import CutConfig, Selection, StartOn, _Walk, running_total, select_view
from langmem_ext.result import MemoryReport, MemoryResult
from langmem_ext.state import Health, MemoryState
from langmem_ext.tokens import TokenCounter

__all__ = [
    "FoldConfig",
    "FoldOutcome",
    "FoldRequest",
    "Placement",
    "SummaryOverflow",
    "plan_fold",
    "render_summary",
]

SummaryOverflow = Literal["truncate_summary", "truncate_oldest", "error"]
Placement = Literal["system", "human"]

_OPEN = "<conversation_summary>"
_CLOSE = "</conversation_summary>"
_SUMMARY_ID = "langmem-ext-summary"
_TRUNCATED = "\n[... summary shortened by langmem_ext to fit the context budget]"


@dataclass(frozen=True, slots=True)
class FoldRequest:
    """Fold ``messages`` (originals, oldest first) into ``previous`` (section -> text)."""

    previous: Mapping[str, str]
    messages: tuple[BaseMessage, ...]


@dataclass(frozen=True, slots=True)
class FoldOutcome:
    """The driver's answer: the new sections, or the error that stopped the fold, or
    ``deferred`` (a read-only call: the fold is not attempted, nothing counts as a failure)."""

    sections: Mapping[str, str] | None = None
    error: BaseException | None = None
    deferred: bool = False


@dataclass(frozen=True, slots=True)
class FoldConfig:
    """The knobs of the fold stage (the strategies fill them in; see strategies.py)."""

    max_tokens: int
    trigger_tokens: int
    target_tokens: int
    max_summary_tokens: int
    reserve_tokens: int = 0
    safety_margin: float = 0.0
    min_messages: int = 1
    start_on: StartOn = "human"
    keep_system: bool = True
    overflow: SummaryOverflow = "truncate_summary"
    placement: Placement = "system"
    #: TieredSummary: clip large bodies of older messages once the view passes this
    clip_tokens: int | None = None
    truncate_chars: int = 2_000
    degrade_after: int = 3
    retry_initial: float = 2.0
    retry_max: float = 300.0

    def __post_init__(self) -> None:
        for name in ("max_tokens", "trigger_tokens", "target_tokens", "max_summary_tokens"):
            _check_int(name, getattr(self, name), 1)
        for name in ("degrade_after", "truncate_chars"):
            _check_int(name, getattr(self, name), 1)
        if self.clip_tokens is not None:
            _check_int("clip_tokens", self.clip_tokens, 1)
        for name in ("retry_initial", "retry_max"):
            value = getattr(self, name)
            if (
                not isinstance(value, (int, float))
                or isinstance(value, bool)
                or not math.isfinite(value)
                or value <= 0
            ):
                raise ValueError(
                    f"{name} must be a finite number of seconds > 0, got {value!r} (it sets when "
                    "a failed summarizer is tried again)"
                )
        self.cut()  # validates reserve_tokens, safety_margin, min_messages, start_on now
        if not 0 < self.target_tokens <= self.trigger_tokens <= self.max_tokens:
            raise ValueError(
                f"need 0 < target_tokens ({self.target_tokens:,}) <= trigger ("
                f"{self.trigger_tokens:,}) <= max_tokens ({self.max_tokens:,})"
            )
        if self.max_summary_tokens >= self.target_tokens:
            raise ValueError(
                f"max_summary_tokens ({self.max_summary_tokens:,}) must be below the level a "
                f"fold goes down to ({self.target_tokens:,}), or a fold could never make room"
            )
        if self.overflow not in ("truncate_summary", "truncate_oldest", "error"):
            raise ValueError(
                "overflow must be 'truncate_summary', 'truncate_oldest' or 'error', "
                f"got {self.overflow!r}"
            )
        if self.placement not in ("system", "human"):
            raise ValueError(f"placement must be 'system' or 'human', got {self.placement!r}")

    def cut(self, **changes: object) -> CutConfig:
        """The cutting stage's config for the view under ``max_tokens``."""
        base = CutConfig(
            max_tokens=self.max_tokens,
            reserve_tokens=self.reserve_tokens,
            safety_margin=self.safety_margin,
            min_messages=self.min_messages,
            start_on=self.start_on,
            keep_system=self.keep_system,
        )
        return replace(base, **changes)  # type: ignore[arg-type]

    def level(self, tokens: int) -> int:
        """A token level after the safety margin and the reserve (like CutConfig.ceiling)."""
        ceiling = self.cut().ceiling(tokens)
        assert ceiling is not None
        return ceiling


def _check_int(name: str, value: object, minimum: int) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}, got {value!r}")


def render_summary(sections: Mapping[str, str], note: str = "") -> str:
    """The summary block as it is placed in the view: fenced, labelled, one part per section."""
    # a summary is model output about untrusted text: it must not be able to close the fence
    # (a "</conversation_summary>" in it would put what follows outside, as an instruction)
    parts = [neutralize(text) for text in sections.values() if text]
    if len(sections) > 1:
        parts = [
            f"## {neutralize(name)}\n{neutralize(text)}" for name, text in sections.items() if text
        ]
    body = "\n\n".join(parts)
    lines = [_OPEN, "Summary of the earlier part of this conversation:"]
    if body:
        lines.append(body)
    if note:
        lines.append(note)
    lines.append(_CLOSE)
    return "\n".join(lines)


def _not_shown_note(count: int, health: Health, error: str | None) -> str:
    # the error itself stays in the state and the report: provider error text is not something
    # to put in front of the main model
    return (
        f"[langmem_ext: {count} earlier message(s) of this conversation are not shown and not yet "
        f"summarized; the summarizer is {health}.]"
    )


def _boundary(
    messages: Sequence[BaseMessage], body_start: int, state: MemoryState, keys: KeyChain
) -> tuple[int, bool]:
    """Index of the first unfolded message, and whether it had to be searched for.

    Keys are position-safe (:func:`~langmem_ext._identity.key_at`): an id-less "Sure." is found
    again only after the same history, never as another "Sure." further on."""
    if state.folded <= 0 or state.folded_key is None:
        return body_start, False
    last = body_start + state.folded - 1
    if last < len(messages) and keys(last) == state.folded_key:
        return last + 1, False
    for j in range(len(messages) - 1, body_start - 1, -1):  # rewritten: O(history), once
        if keys(j) == state.folded_key:
            return j + 1, True
    return body_start, True  # the folded messages were removed: the summary stands for them


def _unfolded_kept(chosen: Selection, b: int, n: int) -> int:
    """How many of the view's input messages are unfolded (at or after ``b``). Only differs from
    ``chosen.kept`` when the view re-shows a folded human turn (see :func:`_view_start`): a
    contiguous view is a suffix of the history, a gap view its head message plus a suffix."""
    first = chosen.first
    if first is None or first >= b:
        return chosen.kept
    suffix = chosen.kept - (1 if chosen.gap else 0)
    return min(suffix, n - b)


def _view_start(
    messages: Sequence[BaseMessage], body_start: int, b: int, config: FoldConfig
) -> int:
    """Where the view is selected from: the first unfolded message, unless the unfolded part
    holds no turn a view may start on. That happens only when the app removed the newest turns
    after a fold (an "undo"): then the newest folded turn that may lead a view is shown again,
    verbatim as well as in the summary, so the view still holds the newest human message."""
    if config.start_on == "any" and b < len(messages):
        return b
    for unit in iter_units_reverse(messages, b):
        if unit.kind == "human":
            return b
    for unit in iter_units_reverse(messages, body_start):
        if unit.start < b and unit.kind == "human":
            return unit.start
    return b


def _fold_boundary(
    messages: Sequence[BaseMessage],
    start: int,
    count: Callable[[BaseMessage], int],
    room: int,
    config: FoldConfig,
    shown: Callable[[Unit], Unit] | None,
) -> int:
    """Where the unfolded part should start after a fold: the oldest human-led unit such that
    everything from it costs at most ``room``, but never inside the newest human turn or the
    newest ``min_messages`` messages. Returns ``start`` when there is nothing to fold."""
    units = iter_units_reverse(messages, start)
    walk = _Walk(units if shown is None else map(shown, units), count)

    def leads(unit: Unit) -> bool:
        if config.start_on == "any":
            return unit.kind in ("human", "ai", "tool")  # a custom role never leads a view
        return unit.kind == "human"

    p = 0
    seen_human = False
    required: int | None = None
    while walk.has(p):
        unit = walk.units[p].unit
        seen_human = seen_human or unit.has_human
        if seen_human and walk.cum_size[p] >= config.min_messages and leads(unit):
            required = p
            break
        p += 1
    if required is None:
        return start
    best = required
    p = required + 1
    while walk.has(p) and walk.cum_tokens[p] <= room:
        if leads(walk.units[p].unit):
            best = p
        p += 1
    return walk.units[best].unit.start


def _clip_chars(message: BaseMessage, limit: int) -> BaseMessage:
    content = message.content
    if isinstance(content, str):
        if len(content) <= limit:
            return message
        marker = f"\n[... {len(content) - limit} characters clipped by langmem_ext]"
        return message.model_copy(update={"content": content[:limit] + marker})
    blocks = list(content)
    changed = False
    for i, block in enumerate(blocks):
        if isinstance(block, dict) and block.get("type") == "text":
            text = str(block.get("text", ""))
            if len(text) > limit:
                marker = f"\n[... {len(text) - limit} characters clipped by langmem_ext]"
                blocks[i] = {**block, "text": text[:limit] + marker}
                changed = True
    return message.model_copy(update={"content": blocks}) if changed else message


def plan_fold(
    messages: Sequence[BaseMessage],
    state: MemoryState,
    config: FoldConfig,
    counter: TokenCounter,
    now: float,
) -> Generator[FoldRequest, FoldOutcome, MemoryResult]:
    """The view for this turn, folding into the summary when over the high-water mark. Pure."""
    n = len(messages)
    count = counter.count_message
    overhead = counter.count_messages(())
    keys = KeyChain(messages)
    all_tokens, rewritten = running_total(messages, state, count, keys)
    has_system = n > 0 and is_system(ensure_message(messages[0], 0))
    body_start = 1 if has_system else 0
    system = as_standard(messages[0]) if has_system and config.keep_system else None
    assert system is None or isinstance(system, SystemMessage)
    b, searched = _boundary(messages, body_start, state, keys)
    rewritten = rewritten or searched
    folded_tokens = state.folded_tokens
    if searched:
        folded_tokens = sum(count(messages[i]) for i in range(body_start, b))
    sections = dict(state.summary)
    health: Health = state.health
    failures, retry_at, last_error = state.failures, state.retry_at, state.last_error
    folds, folded_now = state.folds, 0

    # TieredSummary: older messages (before clip_at) show large bodies clipped, no LLM call
    clip_at = body_start + state.clipped if config.clip_tokens is not None else 0
    clip_at = min(max(clip_at, b), n)
    clip_moved = False

    def shown_for(limit_index: int) -> Callable[[Unit], Unit] | None:
        if config.clip_tokens is None or limit_index <= b:
            return None

        def shown(unit: Unit) -> Unit:
            if unit.start >= limit_index:
                return unit
            clipped = tuple(_clip_chars(m, config.truncate_chars) for m in unit.messages)
            if all(a is c for a, c in zip(clipped, unit.messages, strict=True)):
                return unit
            return replace(unit, messages=clipped)

        return shown

    def leading(
        note: str = "", summary: Mapping[str, str] | None = None
    ) -> tuple[SystemMessage | None, HumanMessage | None]:
        parts = sections if summary is None else summary
        if not any(parts.values()) and not note:
            return system, None
        block = render_summary(parts, note)
        if config.placement == "human":
            return system, HumanMessage(block, id=_SUMMARY_ID)
        if system is None:
            return SystemMessage(block, id=_SUMMARY_ID), None
        text = system.content if isinstance(system.content, str) else None
        if text is None:
            blocks = [*system.content, {"type": "text", "text": block}]
            return system.model_copy(update={"content": blocks}), None
        return system.model_copy(update={"content": f"{text}\n\n{block}" if text else block}), None

    memo: dict[tuple[object, ...], tuple[Selection, HumanMessage | None] | Exception] = {}

    def select(
        start: int, note: str = "", summary: Mapping[str, str] | None = None, **cut: object
    ) -> tuple[Selection, HumanMessage | None]:
        """The cutting stage under the summary; memoized, since a turn asks the same twice."""
        parts = sections if summary is None else summary
        key = (start, note, tuple(parts.items()), tuple(sorted(cut.items())), clip_at)
        if key not in memo:
            sys_msg, human_summary = leading(note, parts)
            extra = count(human_summary) if human_summary is not None else 0
            cfg = config.cut(reserve_tokens=config.reserve_tokens + extra, **cut)
            try:
                chosen = select_view(
                    messages, start, sys_msg, cfg, counter, shown=shown_for(clip_at)
                )
                memo[key] = (chosen, human_summary)
            except ContextOverflowError as error:
                memo[key] = error
        found = memo[key]
        if isinstance(found, Exception):
            raise found
        return found

    # -- 1. the view as it stands: does everything unfolded fit under the high-water mark? -----
    def fits_all(sel: Selection, start: int) -> bool:
        return sel.kept == n - start and sel.tokens <= config.level(config.trigger_tokens)

    try:
        current, _ = select(b)
        over = not fits_all(current, b)
    except ContextOverflowError:
        over = True

    # TieredSummary tier 1: when the view crosses clip_tokens (it was below on the last turn),
    # clip the large bodies of everything older than the newest turn. The clip point then holds
    # until the next crossing, so the prompt prefix does not change on every turn.
    if config.clip_tokens is not None and n > b:
        tier1 = config.level(config.clip_tokens)
        try:
            sel, _ = select(b)
            past_tier1 = sel.tokens > tier1 or sel.kept < n - b
        except ContextOverflowError:
            past_tier1 = True
        if past_tier1 and (state.view_tokens <= tier1 or over):
            keep_from = _fold_boundary(messages, b, count, 0, config, None)
            if keep_from > clip_at:
                # the prefix only changes if a newly covered message is actually clipped
                clip_moved = any(
                    _clip_chars(m, config.truncate_chars) is not m
                    for m in messages[clip_at:keep_from]
                )
                clip_at = keep_from
                try:
                    current, _ = select(b)
                    over = not fits_all(current, b)
                except ContextOverflowError:
                    over = True

    # -- 2. fold when over, if the summarizer is healthy or its backoff has passed -------------
    may_try = health == "healthy" or retry_at is None or now >= retry_at
    if over and may_try:
        allowance = config.max_summary_tokens + counter.count_text(render_summary({}, ""))
        sys_cost = count(system) if system is not None else 0
        room = config.level(config.target_tokens) - overhead - sys_cost - allowance
        new_b = _fold_boundary(messages, b, count, room, config, shown_for(clip_at))
        if new_b > b:
            batch = tuple(ensure_message(messages[i], i) for i in range(b, new_b))
            outcome = yield FoldRequest(dict(sections), batch)
            if outcome.error is None and outcome.sections:
                sections = {k: str(v) for k, v in outcome.sections.items()}
                folded_tokens += sum(count(m) for m in batch)
                folded_now, folds = len(batch), folds + 1
                b = new_b
                health, failures, retry_at, last_error = "healthy", 0, None, None
            elif not outcome.deferred:
                error = outcome.error or RuntimeError("the summarizer returned no summary")
                failures += 1
                health = "degraded" if failures >= config.degrade_after else "retrying"
                wait = min(config.retry_initial * 2 ** (failures - 1), config.retry_max)
                # never sooner than the provider asked (a Retry-After the Summarizer gave up on)
                asked = getattr(error, "retry_after", None)
                if isinstance(asked, (int, float)) and math.isfinite(asked):
                    wait = max(wait, float(asked))
                retry_at = now + wait
                last_error = f"{type(error).__name__}: {error}"[:300]
    clip_at = max(clip_at, b)

    # -- 3. the view: summary + the unfolded messages that fit (+ a note if some do not) --------
    next_state = replace(
        state,
        seen=n,
        seen_tokens=all_tokens,
        seen_key=keys(n - 1) if n else None,
        cut_index=None,
        cut_key=None,
        summary=tuple(sections.items()),
        folded=b - body_start,
        folded_key=keys(b - 1) if b > body_start else None,
        folded_tokens=folded_tokens,
        folds=folds,
        health=health,
        failures=failures,
        retry_at=retry_at,
        last_error=last_error,
        clipped=max(clip_at - body_start, 0) if config.clip_tokens is not None else 0,
    )
    sys_cost = count(system) if system is not None else 0
    view_from = _view_start(messages, body_start, b, config)
    try:
        chosen, human_summary, shown_sections = _view(
            select,
            b,
            view_from,
            n,
            sections,
            health,
            last_error,
            config,
            counter,
            overhead + sys_cost,
        )
    except MemoryBudgetExceeded as error:
        # a fold that just succeeded must not be lost with the turn: the caller stores this
        error.state = next_state
        raise
    view = list(chosen.view)
    if human_summary is not None:
        view.insert(1 if view and isinstance(view[0], SystemMessage) else 0, human_summary)
    not_shown = (n - b) - _unfolded_kept(chosen, b, n)
    summary_tokens = (
        counter.count_text(render_summary(shown_sections)) if any(shown_sections.values()) else 0
    )
    tokens_after = counter.count_messages(view) if human_summary is not None else chosen.tokens
    # what the view's prefix is made of: if it is the same as on the last turn and nothing was
    # folded, the last view is a prefix of this one (the history only grew at the end)
    first = chosen.first if chosen.first is not None else n
    prefix_key = digest(
        view[0].content if view else "",
        str(human_summary.content) if human_summary is not None else "",
        keys(first) if first < n else "",
        not_shown,
        chosen.clipped,
    )
    next_state = replace(next_state, view_tokens=tokens_after, prefix_key=prefix_key)
    report = MemoryReport(
        tokens_before=overhead + all_tokens,
        tokens_after=tokens_after,
        messages_before=n,
        messages_after=len(view),
        messages_dropped=n - chosen.kept - (1 if system is not None else 0),
        budget=config.level(config.max_tokens),
        clipped=chosen.clipped,
        repaired=chosen.repaired,
        prefix_kept=(
            state.seen > 0
            and folded_now == 0
            and not rewritten
            and not chosen.clipped
            and not clip_moved
            and not_shown == 0
            and prefix_key == state.prefix_key
        ),
        gap=chosen.gap,
        history_rewritten=rewritten,
        folded=folded_now,
        not_shown=not_shown,
        summary_tokens=summary_tokens,
        health=health,
    )
    return MemoryResult(view, next_state, report)


def _view(
    select: Callable[..., tuple[Selection, HumanMessage | None]],
    b: int,
    start: int,
    n: int,
    sections: dict[str, str],
    health: Health,
    last_error: str | None,
    config: FoldConfig,
    counter: TokenCounter,
    fixed: int,
) -> tuple[Selection, HumanMessage | None, dict[str, str]]:
    """The final view, with the not-shown note when needed and the overflow policy applied.
    ``fixed`` is what the view costs before the summary: request overhead and system message.
    The view is selected from ``start`` (``b``, or the newest human turn when nothing unfolded
    holds one); only unfolded messages (from ``b``) count as not shown."""

    def attempt(summary: dict[str, str], **cut: object) -> tuple[Selection, HumanMessage | None]:
        chosen, human = select(start, "", summary, **cut)
        missing = (n - b) - _unfolded_kept(chosen, b, n)
        if missing <= 0:
            return chosen, human
        # some unfolded messages do not fit: say so, visibly. The note costs tokens, which can
        # change how many fit: start from the most that could be missing and step down to the
        # count the note states exactly (a few passes at most: only the digits change)
        claimed = n - b
        for _ in range(8):
            note = _not_shown_note(claimed, health, last_error)
            chosen, human = select(start, note, summary, **cut)
            missing = (n - b) - _unfolded_kept(chosen, b, n)
            if missing == claimed:
                break
            claimed = missing
        return chosen, human

    try:
        chosen, human = attempt(sections)
        return chosen, human, sections
    except ContextOverflowError as error:
        first_error = error
    if config.overflow == "error":
        summary_tokens = counter.count_text(render_summary(sections)) if sections else 0
        raise MemoryBudgetExceeded(
            f"the summary ({summary_tokens:,} tokens), min_messages={config.min_messages} and "
            f"the newest human message do not fit together: {first_error}",
            summary_tokens=summary_tokens,
            needed=first_error.needed,
            available=first_error.available,
            max_tokens=first_error.max_tokens,
            reserve_tokens=first_error.reserve_tokens,
            system_tokens=first_error.system_tokens,
        ) from first_error
    # fixed, finite fallbacks: each step either fits or moves on; the last one raises. The
    # newest human message is clipped only once dropping the summary from the view was not enough
    shorter = dict(sections)
    steps: list[tuple[dict[str, str], dict[str, object]]] = []
    if config.overflow == "truncate_summary" and any(sections.values()):
        room = max(config.level(config.max_tokens) - fixed - first_error.needed, 0)
        shorter = _truncate_sections(sections, room, counter)
        steps.append((shorter, {}))
    if config.overflow == "truncate_oldest" and config.min_messages > 1:
        steps.append((dict(sections), {"min_messages": 1}))
    steps += [({}, {"min_messages": 1}), ({}, {"min_messages": 1, "overflow": "clip"})]
    last = first_error
    for summary, cut in steps:
        try:
            chosen, human = attempt(summary, **cut)
            return chosen, human, summary
        except ContextOverflowError as error:
            last = error
    raise MemoryBudgetExceeded(
        f"even without the summary and with the newest human message clipped, the view does "
        f"not fit: {last}",
        needed=last.needed,
        available=last.available,
        max_tokens=last.max_tokens,
        reserve_tokens=last.reserve_tokens,
        system_tokens=last.system_tokens,
    ) from last


def _truncate_sections(
    sections: Mapping[str, str], room: int, counter: TokenCounter
) -> dict[str, str]:
    """Shorten the sections (in the view only) so the summary block costs about ``room``."""
    frame = counter.count_text(render_summary({k: "" for k in sections}))
    per = max((room - frame) // max(len(sections), 1), 0)
    out: dict[str, str] = {}
    for name, text in sections.items():
        if counter.count_text(text) <= per:
            out[name] = text
            continue
        keep = per - counter.count_text(_TRUNCATED)
        lo, hi = 0, len(text)
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if counter.count_text(text[:mid]) <= keep:
                lo = mid
            else:
                hi = mid - 1
        out[name] = (text[:lo].rstrip() + _TRUNCATED) if lo > 0 else ""
    return out
