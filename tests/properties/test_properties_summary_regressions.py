"""Regression tests for library bugs that the summarizing-strategy properties
(``test_properties_summary.py``) found, since fixed.

Each test carries the bug's smallest reproduction as an explicit ``@example``, so that a
regression fails at once (no search, no shrinking), then searches random runs as usual (the
harness is ``property_harness.py``).
"""

from __future__ import annotations

from typing import Any

from hypothesis import example, given
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage
from property_checks import leading_text
from property_harness import (
    NOT_SHOWN_NOTE,
    Case,
    Turn,
    cases,
    property_run_environment,  # noqa: F401 (an autouse fixture: quiet logs, retries do not sleep)
    simulate,
    tagged,
)

from langmem_ext import ApproximateCounter
from langmem_ext.core.fold_config import render_summary


def _sized(kind: type[BaseMessage], n: int, tokens: int) -> BaseMessage:
    """Message number ``n`` (marker included) costing exactly ``tokens`` approximate tokens."""
    counter = ApproximateCounter()
    k = 0
    while counter.count_message(tagged(kind(content="x" * k), n)) < tokens:
        k += 1
    message = tagged(kind(content="x" * k), n)
    assert counter.count_message(message) == tokens
    return message


def _example(
    kind: str,
    kwargs: dict[str, Any],
    *turns: list[tuple[type, int]],
    actions: tuple[str, ...] = (),
) -> Case:
    """A hand-made case: each turn a list of (message class, approximate tokens)."""
    built: list[tuple[BaseMessage, ...]] = []
    n = 0
    for group in turns:
        built.append(tuple(_sized(cls, n + k, tokens) for k, (cls, tokens) in enumerate(group)))
        n += len(group)
    kinds = tuple(sorted(kwargs.items()))
    return Case(kind, kinds, None, tuple(built), (0.0,) * len(built), actions)


#: the summary block of the fake's first answer ("S0 prev=<6 hex>"), in tokens
_BLOCK = ApproximateCounter().count_text(render_summary({"conversation": "S0 prev=000000"}))
_SMALL = {"max_tokens": 300, "max_summary_tokens": 40, "min_messages": 1}

#: (turns count from 0) turn 2 folds messages 0-3, then the summary and the 278-token question
#: cannot fit: raise; turn 3 (an answer arrives, the question is still the newest) folded 0-3
#: again, paying the summarizer again, when the raise lost the state
_REFOLD = _example(
    "buffer",
    {**_SMALL, "overflow": "error"},
    [(HumanMessage, 48), (AIMessage, 48)],
    [(HumanMessage, 18), (AIMessage, 18)],
    [(HumanMessage, 278)],
    [(AIMessage, 8)],
)
#: turn 1 folds messages 0-1; the summary (its block plus 3 tokens of message framing) and the
#: question are 1 token over the budget; the question was clipped while the whole summary stayed
_CLIP_FIRST = _example(
    "buffer",
    {**_SMALL, "overflow": "truncate_summary"},
    [(HumanMessage, 80), (AIMessage, 80)],
    [(HumanMessage, 300 - (_BLOCK + 3) + 1)],
)
#: turn 1 folds 0-1 and shows summary + question; turn 2 adds a long answer to the same human
#: turn: nothing to fold, the summary is dropped to fit (not_shown 0, no fold, healthy), and
#: report.prefix_kept said the prefix held although the summary left the view's first message
_PREFIX_CLAIM = _example(
    "buffer",
    {**_SMALL, "overflow": "truncate_summary"},
    [(HumanMessage, 80), (AIMessage, 80)],
    [(HumanMessage, 150)],
    [(AIMessage, 135)],
)
#: one turn, the summarizer fails: 12 questions of 19 tokens under a 137-token budget. The note
#: is sized for "12 not shown", 3 fit; re-rendered as "9 not shown" it is one token shorter,
#: which let a fourth question in: 8 were not shown, the note said 9
_NOTE_COUNT = _example(
    "buffer",
    {"max_tokens": 137, "max_summary_tokens": 16, "min_messages": 1},
    [(SystemMessage, 6)] + [(HumanMessage, 19)] * 12,
    actions=("raise",),
)


@example(case=_REFOLD)
@given(case=cases(failures=("none",), overflows=("error",), max_turns=20))
def test_a_fold_is_not_thrown_away_when_the_view_then_overflows(case):
    """DESIGN 2.4, each message is summarized at most once, also across a turn that raises.

    With ``overflow="error"`` a turn may fold (the summarizer is called and succeeds) and then
    raise MemoryBudgetExceeded from the view stage (fold.py ``_view``): unless the exception
    hands the caller the new state (the harness carries ``error.state`` when there is one), the
    summary is lost with the turn and the next call folds the same messages again, and again on
    every retry. Here the summarizer never fails, so every message must be read by fold calls
    at most once per section over the whole run."""
    run = simulate(case)
    for section in case.templates:
        read = [
            n
            for turn in run.turns
            for c in turn.calls
            if c.ok and c.kind == "fold" and c.section == section
            for n in c.markers
        ]
        twice = sorted({n for n in read if read.count(n) > 1})
        assert not twice, f"{section}: messages {twice} were summarized more than once"


@example(case=_CLIP_FIRST)
@given(case=cases(overflows=("truncate_summary",), max_turns=20))
def test_truncate_summary_gives_up_the_summary_before_clipping_the_newest_human_message(case):
    """fold.py: ``"truncate_summary"`` shortens the summary in the view, then clips the newest
    human message. So a view whose newest human message was clipped shows no summary: had any
    shortened summary fitted, a shorter one would have left the human message whole."""
    run = simulate(case)
    for turn in run.turns:
        if turn.result is None or not turn.result.report.clipped:
            continue
        report = turn.result.report
        assert report.summary_tokens == 0, (
            f"turn {turn.number}: {report.clipped} clipped while a summary of "
            f"{report.summary_tokens} tokens was shown"
        )


@example(case=_PREFIX_CLAIM)
@given(case=cases(max_turns=20))
def test_report_prefix_kept_only_when_the_previous_view_is_a_prefix(case):
    """``report.prefix_kept`` (result.py: "the view starts where the previous turn's view
    started") is what a caller reads to know the provider's prompt cache will hit: when it is
    true, the previous view (the result for the state passed in) is a prefix of this one."""
    run = simulate(case)
    prev: Turn | None = None
    for turn in run.turns:
        if turn.result is not None:
            if prev is not None and prev.result is not None and turn.result.report.prefix_kept:
                a, b = prev.result.messages, turn.result.messages
                old = [m.model_dump() for m in a]
                new = [m.model_dump() for m in b[: len(a)]]
                assert len(a) <= len(b) and old == new, (
                    f"turn {turn.number}: report.prefix_kept, but the previous view (summary "
                    f"{prev.result.report.summary_tokens} tokens, {prev.result.report.not_shown} "
                    f"not shown) is not a prefix of this one (summary "
                    f"{turn.result.report.summary_tokens} tokens, "
                    f"{turn.result.report.not_shown} not shown)"
                )
            prev = turn


@example(case=_NOTE_COUNT)
@given(case=cases(failures=("some", "many"), max_turns=20))
def test_not_shown_note_gives_the_number_of_messages_not_shown(case):
    """fold.py: the view carries "a visible note with how many earlier messages are not shown".
    ``_view.attempt`` sizes the note for a first count, selects, then re-renders it with the
    new count and selects again; a shorter note can let more messages in, so the count it
    states must be the final one: ``report.not_shown``."""
    run = simulate(case)
    for turn in run.turns:
        if turn.result is not None and turn.result.report.not_shown:
            notes = NOT_SHOWN_NOTE.findall(leading_text(turn.result.messages))
            assert [int(n) for n, _ in notes] == [turn.result.report.not_shown], (
                f"turn {turn.number}: the note says {notes[0][0]} earlier messages are not "
                f"shown; {turn.result.report.not_shown} are not"
            )
