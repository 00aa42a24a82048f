"""The summarizing-strategy properties, as checks over a simulated run (see
``property_harness.py`` for the runs and the fake summarizer model).

Each ``check_*`` function states its property in its docstring, precisely, as read off fold.py;
the tests in ``test_properties_summary.py`` call them on every turn or over a whole run. The
helpers before them read a view back: which history message each body message is, what leads the
view, and the oracles (``tier_clipped``, ``required_start``, ``leading_messages``) that recompute
what fold.py should have produced.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import Any

from hypothesis import event
from langchain_core.messages import (
    AIMessage,
    BaseMessage,
    ChatMessage,
    HumanMessage,
    SystemMessage,
    ToolMessage,
)
from property_harness import (
    NOT_SHOWN_NOTE,
    SUMMARY_CLIPPED,
    SUMMARY_ID,
    SUMMARY_SHORTENED,
    TAG,
    Run,
    Turn,
    digest,
    marker,
)

from langmem_ext import Unit, split_units, validate
from langmem_ext.core.digest import DIGEST_ID_PREFIX, digest_text, is_digest
from langmem_ext.core.fold_config import render_summary
from langmem_ext.core.identity import key_at
from langmem_ext.core.messages import clip_message

# --------------------------------------------------------------------------------------------
# reading a view


def text_of(message: BaseMessage) -> str:
    content = message.content
    if isinstance(content, str):
        return content
    return "\n".join(
        b if isinstance(b, str) else str(b.get("text", ""))
        for b in content
        if isinstance(b, str) or b.get("type") == "text"
    )


def leading_text(view: Sequence[BaseMessage]) -> str:
    """The text of what leads the view: the SystemMessage and the summary HumanMessage."""
    parts = [text_of(m) for m in view[:2] if isinstance(m, SystemMessage) or m.id == SUMMARY_ID]
    return "\n".join(parts)


def view_body(view: Sequence[BaseMessage]) -> list[BaseMessage]:
    return [m for m in view if not isinstance(m, SystemMessage) and m.id != SUMMARY_ID]


def tier_clipped(message: BaseMessage, limit: int) -> BaseMessage:
    """The TieredSummary form of an older message (fold.py ``_clip_chars``), as an oracle."""

    def clip(text: str) -> str:
        if len(text) <= limit:
            return text
        return text[:limit] + f"\n[... {len(text) - limit} characters clipped by langmem_ext]"

    content = message.content
    if isinstance(content, str):
        return message.model_copy(update={"content": clip(content)})
    blocks = [
        {**b, "text": clip(str(b.get("text", "")))}
        if isinstance(b, dict) and b.get("type") == "text"
        else b
        for b in content
    ]
    return message.model_copy(update={"content": blocks})


def is_marked_clipped(message: BaseMessage) -> bool:
    meta = message.response_metadata.get("langmem_ext")
    return isinstance(meta, dict) and "clipped_from_tokens" in meta


def shown_indices(run: Run, turn: Turn, *, equal_copies: bool = False) -> list[int]:
    """History indices of the view's body, checking each body message is the original message
    (or, with ``equal_copies``, an equal copy), a TieredSummary clipped form of it (older than
    the clip point), or a marked clipped copy."""
    assert turn.result is not None
    state = turn.result.state
    out = []
    for v in view_body(turn.result.messages):
        if is_digest(v):
            out.extend(digest_indices(run, turn, v))
            continue
        assert TAG in v.response_metadata, f"a message not from the history: {v!r}"
        i = marker(v)
        original = turn.history[i]
        out.append(i)
        if v is original or (equal_copies and v.model_dump() == original.model_dump()):
            continue
        if is_marked_clipped(v):
            assert run.case.get("overflow") != "error"
            event("a clipped copy of a required message")
            continue
        assert run.case.kind == "tiered", f"message {i} changed in the view"
        assert i < turn.bs + state.clipped, (i, turn.bs, state.clipped)
        expected = tier_clipped(original, run.case.get("truncate_chars"))
        assert v.model_dump() == expected.model_dump(), f"message {i} is not its clipped form"
        event("a TieredSummary clipped body")
    return out


def digest_indices(run: Run, turn: Turn, v: BaseMessage) -> list[int]:
    """The history indices a digest in the view stands for (TieredSummary's first tier): a
    completed tool round (every call answered, no human message in it) before the digest point,
    named by the key of its first message, whose digest is the one ``digest_text`` makes with the
    case's ``observation_tokens`` (deterministic: the stored text and a fresh one agree)."""
    assert turn.result is not None
    assert run.case.kind == "tiered" and run.case.get("keep_rounds") is not None, v
    history, state = turn.history, turn.result.state
    key = str(v.id)[len(DIGEST_ID_PREFIX) :]
    found = [u for u in split_units(history) if key_at(history, u.start) == key]
    assert len(found) == 1, f"digest {key} names no round of the history"
    unit = found[0]
    assert unit.kind == "tool" and not unit.in_flight, "a round not completed was digested"
    assert not any(isinstance(m, HumanMessage) for m in unit.messages), "a human was digested"
    assert unit.start < turn.bs + state.digested, ("digest after the digest point", unit.start)
    obs = run.case.get("observation_tokens")
    assert v.content == digest_text(unit, obs, run.strategy.counter.count_text)
    assert dict(state.digests).get(key) == v.content, "a digest shown is not kept in the state"
    event("a digested round")
    return list(range(unit.start, unit.stop))


def newest_human_index(history: Sequence[BaseMessage]) -> int:
    return max(i for i, m in enumerate(history) if isinstance(m, HumanMessage))


def required_start(run: Run, history: Sequence[BaseMessage], b: int) -> int:
    """Where the required run of ``history[b:]`` starts: the newest units holding
    ``min_messages`` messages and the newest HumanMessage, extended back to a unit that may
    lead a view (plan.py ``select_view``, contiguous case; fold.py ``_fold_boundary``)."""
    units = list(reversed(split_units(history[b:])))  # newest first
    start_on = run.case.get("start_on", "human")

    def leads(unit: Unit) -> bool:
        return unit.kind == "human" if start_on == "human" else unit.kind != "orphan"

    sizes = list(itertools.accumulate(len(u.messages) for u in units))
    t = 0
    while sizes[t] < run.case.get("min_messages") and t + 1 < len(units):
        t += 1
    h = next((p for p, u in enumerate(units) if u.has_human), None)
    if h is None:  # the turn's request is folded and pinned (long turn): the newest units only
        return b + units[t].start
    a = next((p for p in range(h, len(units)) if leads(units[p])), h)
    u = max(t, a)
    while not leads(units[u]) and u + 1 < len(units):
        u += 1
    if not leads(units[u]):
        u = max(t, a)
        while u > a and not leads(units[u]):
            u -= 1
    return b + units[u].start


def _is_request(message: BaseMessage) -> bool:
    return isinstance(message, HumanMessage) or (
        isinstance(message, ChatMessage) and message.role in ("user", "human")
    )


def pinned_index(run: Run, history: Sequence[BaseMessage], bs: int, b: int) -> int | None:
    """The folded human message a view may hold before the unfolded ones (long agent turns): the
    newest one before ``b`` when ``history[b:]`` does not start with a human message. The
    request of a long agent turn whose older rounds were folded stays in every view. With
    ``start_on="any"`` only while no human message is unfolded (then it is the newest turn's)."""
    if b < len(history) and _is_request(history[b]):
        return None
    if run.case.get("start_on", "human") == "any" and any(_is_request(m) for m in history[b:]):
        return None
    return next((i for i in range(b - 1, bs - 1, -1) if _is_request(history[i])), None)


def not_shown_note(count: int, health: str) -> str:
    """The note fold.py puts in the summary block when messages are not shown (its text)."""
    return (
        f"[langmem_ext: {count} earlier message(s) of this conversation are not shown and not yet "
        f"summarized; the summarizer is {health}.]"
    )


def leading_messages(
    run: Run, history: Sequence[BaseMessage], sections: dict[str, str], note: str = ""
) -> list[BaseMessage]:
    """What leads the view with ``sections`` as the summary and ``note`` (fold.py ``leading``),
    as an oracle: the system message with the summary block appended, or the block as its own
    SystemMessage or (placement="human") HumanMessage."""
    keep = run.case.get("keep_system", True)
    system = history[0] if isinstance(history[0], SystemMessage) and keep else None
    out: list[BaseMessage] = [system] if system is not None else []
    if not any(sections.values()) and not note:
        return out
    block = render_summary(sections, note)
    if run.case.get("placement") == "human":
        return [*out, HumanMessage(block, id=SUMMARY_ID)]
    if system is None:
        return [SystemMessage(block, id=SUMMARY_ID)]
    if isinstance(system.content, str):
        text = f"{system.content}\n\n{block}" if system.content else block
        return [system.model_copy(update={"content": text})]
    blocks = [*system.content, {"type": "text", "text": block}]
    return [system.model_copy(update={"content": blocks})]


# --------------------------------------------------------------------------------------------
# the properties, as checks over a run


def check_folded_exactly_once(run: Run) -> None:
    """Per summary section: the markers of the fold calls of committed folds, over the whole
    run, are exactly the markers of ``history[bs:B]`` of the final state, in order, each once;
    and each committed fold read exactly its batch ``history[B_before:B_after]``."""
    committed: dict[str, list[int]] = {s: [] for s in run.case.templates}
    last = None
    for turn in run.turns:
        if turn.after is None:
            if any(c.ok and c.kind == "fold" for c in turn.calls):
                # the fold succeeded, then the view raised and its state was lost with the
                # turn: these messages will be summarized again (see the bug tests below)
                event("fold discarded by MemoryBudgetExceeded")
            continue
        last = turn
        if turn.result is not None:
            assert turn.result.report.folded == turn.folded_now
        if not turn.folded_now:
            continue
        event("fold committed")
        b0 = turn.bs + turn.before.folded
        b1 = b0 + turn.folded_now
        batch = [marker(m) for m in turn.history[b0:b1]]
        assert batch == list(range(b0, b1))
        for section in run.case.templates:
            read = [
                n
                for c in turn.calls
                if c.ok and c.kind == "fold" and c.section == section
                for n in c.markers
            ]
            assert read == batch, (section, read, batch)
            committed[section].extend(read)
    if last is None:
        return
    assert last.after is not None
    folded = list(range(last.bs, last.bs + last.after.folded))
    for section, read in committed.items():
        assert len(read) == len(set(read)), f"{section}: a message was folded twice"
        assert read == folded, (section, read, folded)
    if folded:
        assert last.after.folded_key == key_at(last.history, folded[-1])


def check_nothing_lost(run: Run, turn: Turn) -> None:
    """fold.py: the view is the summary plus ``select_view`` of ``history[B:]``, and
    ``not_shown = (n - B) - kept``. So, exactly:

    * the view's body is distinct messages of ``history[B:]``, in history order (the originals,
      or clipped forms as documented);
    * ``B - bs`` folded + ``len(body)`` shown + ``report.not_shown`` == ``n - bs``;
    * the messages not shown are the oldest unfolded ones, unless ``report.gap`` (the newest
      human turn did not fit contiguously);
    * when ``not_shown > 0`` the view carries the note with exactly that number and the health;
      otherwise no note;
    * ``messages_dropped`` counts every input message not in the view.
    """
    assert turn.result is not None
    view, state, report = turn.result.messages, turn.result.state, turn.result.report
    n, bs = len(turn.history), turn.bs
    b = bs + state.folded
    every = shown_indices(run, turn)
    assert every == sorted(set(every)), ("duplicate or reordered", every)
    pin = pinned_index(run, turn.history, bs, b)
    shown = [i for i in every if i >= b]
    folded_shown = [i for i in every if i < b]
    assert folded_shown in ([], [pin]), ("a folded message is in the view", every, b, pin)
    if folded_shown:
        event("the request of a folded turn, pinned")
    assert state.folded + len(shown) + report.not_shown == n - bs, (
        state.folded,
        len(shown),
        report.not_shown,
        n - bs,
    )
    if report.not_shown and not report.gap:
        assert shown == list(range(n - len(shown), n)), "the view is not the newest messages"
    if report.gap:
        event("gap view")
    if report.not_shown and state.health == "healthy" and not report.gap:
        hidden = sorted(set(range(b, n)) - set(shown))
        first_human = next(i for i, m in enumerate(turn.history) if isinstance(m, HumanMessage))
        if hidden[-1] < first_human:
            event("healthy: an assistant greeting before the first question is not shown")
        else:
            # while healthy, a fold would have folded everything before the required run (the
            # newest human turn and min_messages, fold.py _fold_boundary); so messages are
            # hidden only if that run does not fit with the system message, the summary and
            # the note for what precedes it (an unfoldable greeting), and an overflow policy
            # applied
            event("healthy: the required run does not fit (overflow policy)")
            start = required_start(run, turn.history, b)
            note = not_shown_note(start - b, state.health) if start > b else ""
            leading = leading_messages(run, turn.history, state.sections, note)
            head = [turn.history[pin]] if pin is not None else []
            cost = run.strategy.counter.count_messages([*leading, *head, *turn.history[start:]])
            assert cost > report.budget, (
                f"{len(hidden)} message(s) hidden while healthy although the required run "
                f"from {start} costs {cost} <= {report.budget} with the summary"
            )
            assert run.case.get("overflow") != "error"
    notes = NOT_SHOWN_NOTE.findall(leading_text(view))
    if report.not_shown:
        event(f"not shown while {state.health}")
        assert notes == [(str(report.not_shown), state.health)], (notes, report.not_shown)
    else:
        assert notes == []
    kept_system = bs == 1 and run.case.get("keep_system", True)
    assert report.messages_dropped == n - len(every) - (1 if kept_system else 0)
    assert (report.messages_before, report.messages_after) == (n, len(view))
    assert not report.history_rewritten


def check_budget(run: Run, turn: Turn) -> None:
    """The view costs at most ``report.budget`` (max_tokens after margin and reserve) by the
    strategy's counter, and ``tokens_after`` says what it costs. Otherwise the documented
    overflow outcome: MemoryBudgetExceeded, with overflow="error", or (any policy) when even
    without the summary and with the newest human message clipped the view cannot fit."""
    counter = run.strategy.counter
    if turn.error is not None:
        error = turn.error
        assert error.needed > error.available, (error.needed, error.available)
        if run.case.get("overflow") == "error":
            event("MemoryBudgetExceeded (overflow='error')")
        else:
            event("MemoryBudgetExceeded (clipping gave up)")
            assert str(error).startswith("even without the summary"), str(error)
        return
    assert turn.result is not None
    view, report = turn.result.messages, turn.result.report
    cost = counter.count_messages(view)
    assert report.tokens_after == cost
    assert cost <= report.budget, f"view costs {cost}, budget {report.budget}"
    assert turn.result.state.view_tokens == cost
    if report.clipped:
        assert run.case.get("overflow") != "error"
        event("overflow: the newest human message clipped")


def check_valid_view(run: Run, turn: Turn) -> None:
    """No error finding from ``validate``; exactly one SystemMessage, first, when the history
    has a kept system message or (placement="system") a summary or note is shown, else none;
    with placement="human" the summary HumanMessage comes right after it; the first body
    message is a HumanMessage (start_on="human"); the newest HumanMessage is in the view."""
    assert turn.result is not None
    view, report = turn.result.messages, turn.result.report
    case = run.case
    errors = [str(f) for f in validate(view) if f.severity == "error"]
    if case.get("start_on", "human") == "any":
        errors = [e for e in errors if not e.startswith("first_not_human")]
    assert not errors, errors
    has_block = report.summary_tokens > 0 or report.not_shown > 0
    kept_system = turn.bs == 1 and case.get("keep_system", True)
    placement = case.get("placement")
    systems = [i for i, m in enumerate(view) if isinstance(m, SystemMessage)]
    want_system = kept_system or (placement == "system" and has_block)
    assert systems == ([0] if want_system else []), systems
    if kept_system:
        original = turn.history[0]
        if isinstance(original.content, str):
            assert text_of(view[0]).startswith(original.content)
        else:
            assert view[0].content[: len(original.content)] == original.content
        if not (placement == "system" and has_block):
            assert view[0] is original
    summaries = [i for i, m in enumerate(view) if m.id == SUMMARY_ID]
    if placement == "human" and has_block:
        assert summaries == [len(systems)], summaries
        assert isinstance(view[summaries[0]], HumanMessage)
    elif summaries:  # placement="system" and no system message of its own: the summary's
        assert summaries == [0] and has_block and not kept_system
    if has_block:
        assert "<conversation_summary>" in leading_text(view)
    body = view_body(view)
    assert body, "the newest human message is always in the view"
    if case.get("start_on", "human") == "human":
        assert isinstance(body[0], HumanMessage), type(body[0]).__name__
    newest = newest_human_index(turn.history)
    assert newest in [marker(m) for m in body], "the newest HumanMessage is not in the view"


def check_summary_block(run: Run, turn: Turn) -> None:
    """The summary in the view is the state's summary (all sections, verbatim), unless an
    overflow policy shortened it (marked) or left it out; and it changes only on a fold."""
    assert turn.result is not None
    state, report = turn.result.state, turn.result.report
    if not report.folded:
        assert state.summary == turn.before.summary
    sections = state.sections
    if not sections:
        assert report.summary_tokens == 0
        return
    text = leading_text(turn.result.messages)
    if report.summary_tokens == 0:
        event("summary left out of the view (overflow)")
        assert run.case.get("overflow") != "error"
        return
    if SUMMARY_SHORTENED in text:
        event("summary shortened in the view (overflow)")
        assert run.case.get("overflow") != "error"
        return
    for section_text in sections.values():
        assert section_text in text
    counter = run.strategy.counter
    assert report.summary_tokens == counter.count_text(render_summary(sections))


def check_chained(run: Run, turn: Turn) -> None:
    """Every fold call's ``<previous_summary>`` is the summary so far: the state's section on
    the turn's first call for that section (``(none yet)`` before the first fold), then what
    the previous successful call of the same fold answered. A compress call gets the summary
    the fold calls produced. A committed fold stores the last answer (clipped with the marker
    when it is still over the section budget), which echoes the digest of its own input."""
    summarizer = run.strategy.summarizer
    assert summarizer is not None
    budgets = summarizer.section_budgets
    counter = summarizer.counter
    section: str | None = None
    so_far: dict[str, str] = {}
    for call in turn.calls:
        if call.kind == "fold":
            assert call.section is not None
            section = call.section
            if section not in so_far:
                so_far[section] = turn.before.sections.get(section, "")
            expected = so_far[section] or "(none yet)"
            if so_far[section] and counter.count_text(so_far[section]) > budgets[section]:
                # still over budget after the compress call: clipped before it is carried on
                event("summary clipped before the next call of the chain")
                assert call.previous is not None and call.previous.endswith(SUMMARY_CLIPPED)
                kept = call.previous[: -len(SUMMARY_CLIPPED)].rstrip()
                assert expected.startswith(kept), (kept[:40], expected[:40])
                assert counter.count_text(call.previous) <= budgets[section]
                so_far[section] = call.previous
            else:
                assert call.previous == expected, (call.previous, expected)
            if turn.before.summary:
                event("chained onto a previous summary")
        else:
            assert section is not None
            assert call.given == so_far[section]
            event("compress call")
        if call.ok:
            assert call.answer is not None
            so_far[section] = call.answer
    if turn.after is None or not turn.folded_now:
        return
    stored = turn.after.sections
    assert set(stored) == set(run.case.templates)
    for name, text in stored.items():
        answer = so_far[name]
        if counter.count_text(answer) <= budgets[name]:
            assert text == answer
            last = [c for c in turn.calls if c.ok and c.answer == answer][-1]
            echo = f"S{last.index} prev={digest(last.previous or last.given or '')}"
            assert text.startswith(echo), (text[:40], echo)
        else:
            event("summary clipped to its budget")
            assert text.endswith(SUMMARY_CLIPPED) and counter.count_text(text) <= budgets[name]


def check_failure_rules(run: Run, turn: Turn) -> None:
    """fold.py's failure rules. A committed fold: ``folded`` grows by ``report.folded``, health
    is healthy, failures 0, no retry_at, no last_error. No fold: ``folded``, its key and the
    summary are unchanged. A failed attempt (failures + 1): health "retrying", or "degraded"
    from ``degrade_after`` failures on, ``retry_at = now + min(retry_initial * 2**(f-1),
    retry_max)``, last_error set; the markers it read were the oldest unfolded messages. While
    unhealthy and before ``retry_at``, the summarizer is not called."""
    case = run.case
    before = turn.before
    if turn.result is None:
        return
    state, report = turn.result.state, turn.result.report
    assert state.folded >= before.folded
    if before.health != "healthy" and before.retry_at is not None and turn.now < before.retry_at:
        event("backoff: no attempt before retry_at")
        assert turn.calls == []
        assert (state.failures, state.retry_at, state.health) == (
            before.failures,
            before.retry_at,
            before.health,
        )
    if report.folded:
        assert state.folded == before.folded + report.folded
        assert state.folds == before.folds + 1
        assert (state.health, state.failures, state.retry_at, state.last_error) == (
            "healthy",
            0,
            None,
            None,
        )
        if before.health != "healthy":
            event("recovered")
        return
    assert (state.folded, state.folded_key, state.folds) == (
        before.folded,
        before.folded_key,
        before.folds,
    )
    assert state.summary == before.summary
    if state.failures == before.failures:
        assert (state.health, state.retry_at, state.last_error) == (
            before.health,
            before.retry_at,
            before.last_error,
        )
        return
    event(f"failed fold -> {state.health}")
    assert state.failures == before.failures + 1
    degraded = state.failures >= case.get("degrade_after")
    assert state.health == ("degraded" if degraded else "retrying")
    wait = min(case.get("retry_initial") * 2 ** (state.failures - 1), case.get("retry_max"))
    assert state.retry_at == turn.now + wait
    assert state.last_error
    assert report.health == state.health
    b = turn.bs + before.folded
    for section in case.templates:
        read = [
            n
            for c in turn.calls
            if c.ok and c.kind == "fold" and c.section == section
            for n in c.markers
        ]
        assert read == list(range(b, b + len(read))), (section, read, b)


def check_failed_markers_folded_later(run: Run) -> None:
    """A message read by a failed fold is not folded by it; it is folded later by a successful
    fold (read again then), or is still unfolded at the end."""
    pending: set[int] = set()
    for turn in run.turns:
        if turn.after is None:
            continue
        if turn.folded_now:
            b0 = turn.bs + turn.before.folded
            pending -= set(range(b0, b0 + turn.folded_now))
        elif turn.after.failures > turn.before.failures:
            pending |= {n for c in turn.calls if c.ok for n in c.markers}
    last = next((t for t in reversed(run.turns) if t.after is not None), None)
    if last is None or last.after is None:
        return
    b = last.bs + last.after.folded
    assert all(n >= b for n in pending), "a message read by a failed fold was folded unread"
    if pending:
        event("failed fold's messages still unfolded at the end")


def check_prefix(run: Run, prev: Turn | None, turn: Turn) -> None:
    """Between two folds the view's prefix does not change. Precisely: the previous returned
    view is a prefix (same message dumps) of this one when neither turn folded or failed
    (health healthy, report.folded == 0, no rewrite), neither shows a note (not_shown == 0), the
    overflow policy changed nothing (no clipped message, the summary shown in full), and, for
    TieredSummary, the clip and digest points (state.clipped, state.digested) did not move: they
    move when the view crosses tier 1 and then re-render older messages in their clipped or
    digested form (fold.py, tier 1)."""
    if prev is None or prev.result is None or turn.result is None:
        return
    a, b = prev.result, turn.result
    old = [m.model_dump() for m in a.messages]
    new = [m.model_dump() for m in b.messages[: len(a.messages)]]
    quiet = (
        b.report.folded == 0
        and a.report.health == b.report.health == "healthy"
        and not b.report.history_rewritten
        and a.report.not_shown == b.report.not_shown == 0
        and not a.report.clipped
        and not b.report.clipped
        and a.report.summary_tokens == b.report.summary_tokens
        and SUMMARY_SHORTENED not in leading_text(a.messages)
        and SUMMARY_SHORTENED not in leading_text(b.messages)
    )
    if not quiet:
        return
    old_body = view_body(a.messages)
    if (
        run.case.get("start_on", "human") == "any"
        and old_body
        and marker(old_body[0]) < prev.bs + a.state.folded
        and newest_human_index(turn.history) > newest_human_index(prev.history)
    ):
        # start_on="any": the request of a turn folded inside is pinned while it is the newest;
        # once a newer human message comes, a view may start on any unit and it may leave
        event("start_on='any': the pinned request of a folded turn left for a newer one")
        return
    if run.case.kind == "tiered" and (
        a.state.clipped != b.state.clipped or a.state.digested != b.state.digested
    ):
        event("tiered: clip or digest point moved (prefix may change)")
        return
    assert len(a.messages) <= len(b.messages), "the view got shorter without a fold"
    assert old == new, "the view's prefix changed between folds"
    event("prefix kept")


def outcome(turn: Turn) -> Any:
    if turn.result is None:
        assert turn.error is not None
        error = turn.error
        return ("raised", str(error), error.needed, error.available, turn.after)
    r = turn.result
    return ([m.model_dump() for m in r.messages], r.state, r.report)


def call_log(turn: Turn) -> list[tuple[Any, ...]]:
    return [(c.index, c.kind, c.section, c.previous, c.markers, c.given) for c in turn.calls]


# --------------------------------------------------------------------------------------------
# long agent turns: one request followed by many tool rounds


def in_flight_index(history: Sequence[BaseMessage]) -> int | None:
    """The index of the trailing AIMessage whose tool calls are not all answered yet (a call in
    flight), or None."""
    last = max((i for i, m in enumerate(history) if isinstance(m, AIMessage)), default=None)
    if last is None:
        return None
    calls = history[last].tool_calls  # type: ignore[attr-defined]
    answered = {m.tool_call_id for m in history[last + 1 :] if isinstance(m, ToolMessage)}
    return last if any(c["id"] not in answered for c in calls) else None


def long_turn_shown(run: Run, turn: Turn) -> list[int]:
    """History indices of the view's body, as :func:`shown_indices`, except that an equal copy
    of a message counts as the message (the pinned request may be shown as a copy)."""
    return shown_indices(run, turn, equal_copies=True)


def long_turn_required(run: Run, history: Sequence[BaseMessage], b: int) -> list[BaseMessage]:
    """A lower bound of what a view must hold in a long turn, ``b`` being the first unfolded
    message: the newest request, and the newest whole units after it holding ``min_messages``
    messages (at least one unit). When the rest of the turn holds fewer and the request is not
    folded, the old rule: the newest human turn and ``min_messages`` (:func:`required_start`)."""
    r = newest_human_index(history)
    after = max(r + 1, b)
    need = run.case.get("min_messages")
    taken, start = 0, len(history)
    for unit in reversed(split_units(history[after:])):
        start = after + unit.start
        taken += unit.stop - unit.start
        if taken >= need:
            break
    if taken < need and r >= b:
        return list(history[required_start(run, history, b) :])
    return [history[r], *history[start:]]


def check_long_turn_coverage(run: Run, turn: Turn, *, healthy: bool) -> None:
    """Nothing lost inside a long turn. With ``F = history[bs:B]`` folded (read by the
    summarizer, see :func:`check_folded_exactly_once`) and ``S`` the view's body:

    * ``S`` is distinct messages in history order; the only folded message it may hold is the
      request of the turn the unfolded part starts in (folded once, shown first: the newest
      request in a long turn, or an older one while the rest of its turn is not folded yet);
    * the messages neither folded nor shown are exactly ``report.not_shown`` many, and the note
      says that number (no note when it is 0);
    * while the summarizer is healthy (``healthy=True`` says it must be), ``not_shown == 0``,
      unless the overflow policy applied because the summary, the note, the newest request and
      the newest ``min_messages`` alone do not fit (:func:`long_turn_required`)."""
    assert turn.result is not None
    view, state, report = turn.result.messages, turn.result.state, turn.result.report
    history, n, bs = turn.history, len(turn.history), turn.bs
    if healthy:
        assert state.health == "healthy", state.last_error
    b = bs + state.folded
    folded = set(range(bs, b))
    shown = long_turn_shown(run, turn)
    assert shown == sorted(set(shown)), ("duplicate or reordered", shown)
    # the one folded message a view may show: the request of the turn the unfolded part starts
    # in (pinned before it; the newest request, or an older one while that turn is unfolded)
    pinned = max((i for i in range(bs, b) if isinstance(history[i], HumanMessage)), default=None)
    if b < n and isinstance(history[b], HumanMessage):
        pinned = None  # the unfolded part starts with its own request
    both = set(shown) & folded
    assert both <= {pinned}, f"folded messages {sorted(both - {pinned})} are in the view"
    if both:
        assert shown[0] == pinned
        event(
            "the folded request is pinned"
            if pinned == newest_human_index(history)
            else "an older turn's folded request is pinned (its turn is partly unfolded)"
        )
    if b > newest_human_index(history) + 1:
        event("folded inside the newest turn")
    hidden = sorted(set(range(bs, n)) - folded - set(shown))
    assert len(hidden) == report.not_shown, (
        f"{len(hidden)} message(s) neither folded nor shown, report.not_shown="
        f"{report.not_shown}: {hidden[:20]}"
    )
    notes = NOT_SHOWN_NOTE.findall(leading_text(view))
    assert notes == ([(str(report.not_shown), state.health)] if report.not_shown else []), notes
    if not report.not_shown:
        return
    event(f"not shown while {state.health}")
    if state.health != "healthy":
        return
    note = not_shown_note(report.not_shown, state.health)
    needed = long_turn_required(run, history, b)
    leading = leading_messages(run, history, state.sections, note)
    cost = run.strategy.counter.count_messages([*leading, *needed])
    assert cost > report.budget, (
        f"{report.not_shown} message(s) hidden while the summarizer is healthy, although the "
        f"summary, the newest request and the newest min_messages cost {cost} <= "
        f"{report.budget}: they should have been folded"
    )
    assert run.case.get("overflow") != "error", "hidden instead of MemoryBudgetExceeded"
    event("healthy: hidden because the required messages do not fit (overflow policy)")


def check_request_pinned(run: Run, turn: Turn) -> None:
    """The request that opened the newest turn is in the view, verbatim, and right after the
    system message (and summary) once it has been folded. Only when it alone is over the budget
    (precisely: without the summary, with the newest unit after it clipped down to its markers,
    it still does not fit) is it a copy clipped with the marker (``report.clipped``)."""
    assert turn.result is not None
    view, state, report = turn.result.messages, turn.result.state, turn.result.report
    history = turn.history
    r = newest_human_index(history)
    body = view_body(view)
    at = [k for k, v in enumerate(body) if marker(v) == r]
    assert at, "the newest request is not in the view"
    shown, original = body[at[0]], history[r]
    if r < turn.bs + state.folded:
        assert at[0] == 0, "the folded request is not pinned right after the system message"
    if not is_marked_clipped(shown):
        assert isinstance(shown, HumanMessage)
        assert shown.content == original.content, "the newest request is not verbatim"
        return
    event("the newest request clipped (overflow)")
    assert report.clipped and "clipped by langmem_ext" in text_of(shown)
    counter = run.strategy.counter
    note = not_shown_note(report.not_shown, state.health) if report.not_shown else ""
    units = split_units(history[r + 1 :])
    newest = history[r + 1 + units[-1].start :] if units else []
    count = counter.count_message
    floor = sum(min(count(m), count(clip_message(m, 0, count) or m)) for m in newest)
    alone = counter.count_messages([*leading_messages(run, history, {}, note), original])
    assert alone + floor > report.budget, (
        f"the request was clipped although it fits: {alone} tokens with the system message, "
        f"{floor} for the newest unit clipped to its markers, budget {report.budget}"
    )


def check_in_flight_kept(run: Run, turn: Turn) -> None:
    """A trailing call still in flight (an AIMessage with unanswered tool calls) is in the view
    and was never folded."""
    assert turn.result is not None
    a = in_flight_index(turn.history)
    if a is None:
        return
    event("a call in flight")
    assert a >= turn.bs + turn.result.state.folded, "the call in flight was folded"
    assert a in [marker(v) for v in view_body(turn.result.messages)], "call in flight not shown"
