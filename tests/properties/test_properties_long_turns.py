"""Long agent turns: property tests of the DESIGN.md section 2 invariants when one human
request is followed by many tool rounds, for SummaryBuffer, Compacting, TieredSummary (with
tool-round digests as its first tier) and ToolDigest.

A run (:func:`long_runs`, from ``long_turns_hyp.py``) is 1-3 human requests, each followed by many
tool rounds (an AIMessage with 1-3 parallel calls, answered by ToolMessages in any order, results
of varying size and now and then a huge one), the assistant's final answer between requests, and
optionally a trailing call still in flight. It is replayed the way an agent loop calls the model:
the strategy is applied before every AIMessage (after each request and after each round's results),
threading ``result.state`` from call to call. The configurations, the fake summarizer model that
logs which messages it read (every message carries a marker ``mk<N>:``, N its index in the history)
and the simulation are those of ``property_harness.py``; the checks are ``property_checks.py``'s,
with the long-turn ones (:func:`~property_checks.check_long_turn_coverage`,
:func:`~property_checks.check_request_pinned`, :func:`~property_checks.check_in_flight_kept`)
written for this file.

Runtime: under a minute for the 500 examples on one core (while the properties hold: a failure
is shrunk, which takes longer).
"""

from __future__ import annotations

import asyncio

from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from langchain_core.messages import BaseMessage, HumanMessage, SystemMessage
from long_turns_hyp import long_runs, long_turns
from property_checks import (
    call_log,
    check_budget,
    check_chained,
    check_failed_markers_folded_later,
    check_failure_rules,
    check_folded_exactly_once,
    check_in_flight_kept,
    check_long_turn_coverage,
    check_request_pinned,
    check_summary_block,
    check_valid_view,
    outcome,
)
from property_harness import (
    Case,
    Run,
    marker,
    property_run_environment,  # noqa: F401 (an autouse fixture: quiet logs, retries do not sleep)
    simulate,
)
from strategies_hyp import ints

from langmem_ext import (
    ApproximateCounter,
    MemoryResult,
    MemoryState,
    ToolDigest,
    split_units,
    validate,
)
from langmem_ext.core.digest import DIGEST_ID_PREFIX, digest_text, is_digest
from langmem_ext.core.identity import key_at

_SETTINGS = {
    "deadline": None,
    "derandomize": True,
    "database": None,
    "suppress_health_check": [HealthCheck.too_slow, HealthCheck.data_too_large],
}


def _every_call(run: Run, *, healthy: bool) -> None:
    for turn in run.turns:
        check_budget(run, turn)
        check_chained(run, turn)
        check_failure_rules(run, turn)
        if turn.result is None:
            continue
        check_valid_view(run, turn)
        check_summary_block(run, turn)
        check_long_turn_coverage(run, turn, healthy=healthy)
        check_request_pinned(run, turn)
        check_in_flight_kept(run, turn)


@settings(max_examples=250, **_SETTINGS)
@given(case=long_runs())
def test_healthy_summarizer_folds_whole_rounds_and_hides_nothing(case: Case) -> None:
    """With a healthy summarizer, at every model call of a long agent turn: every message so far
    is in the view or was read by the summarizer (``report.not_shown == 0``, unless the newest
    request and the newest ``min_messages`` alone do not fit: the overflow policy), each message
    was read at most once and the summaries chain, the newest request is in the view verbatim
    (right after the system message once it is folded; clipped with a marker only on overflow),
    a call in flight is in the view and never folded, the view fits the budget and is valid."""
    run = simulate(case)
    _every_call(run, healthy=True)
    check_folded_exactly_once(run)


@settings(max_examples=200, **_SETTINGS)
@given(case=long_runs(failures=("some", "many")))
def test_failing_summarizer_loses_nothing_and_folding_resumes(case: Case) -> None:
    """Random summarizer failures (errors, timeouts, empty and over-budget answers) inside long
    agent turns: at every call, folded + shown + ``report.not_shown`` cover the history exactly
    (a failure may hide messages behind the note, never drop them); failures fold nothing; what a
    failed fold read is folded later by a successful one; each message is folded at most once."""
    run = simulate(case)
    _every_call(run, healthy=False)
    check_failed_markers_folded_later(run)
    check_folded_exactly_once(run)


@settings(max_examples=50, **_SETTINGS)
@given(case=long_runs(failures=("none", "some")))
def test_apply_and_aapply_agree_call_by_call_in_long_turns(case: Case) -> None:
    """The sync and async drivers give the same views, states, reports and summarizer prompts at
    every call of a long agent turn."""
    sync, other = simulate(case, "apply"), simulate(case, "aapply")
    for a, b in zip(sync.turns, other.turns, strict=True):
        assert outcome(a) == outcome(b)
        assert call_log(a) == call_log(b)


# --------------------------------------------------------------------------------------------
# ToolDigest: digests with no summarizer


def _digest_round(history: list[BaseMessage], view_message: BaseMessage) -> tuple[int, int]:
    """The (start, stop) of the round a digest in the view stands for, found by its key."""
    key = str(view_message.id)[len(DIGEST_ID_PREFIX) :]
    found = [u for u in split_units(history) if key_at(history, u.start) == key]
    assert len(found) == 1, f"digest {key} names no round"
    return found[0].start, found[0].stop


def _check_tool_digest_call(
    strategy: ToolDigest, history: list[BaseMessage], result: MemoryResult
) -> None:
    view, state, report = result.messages, result.state, result.report
    assert not [f for f in validate(view) if f.severity == "error"], validate(view)
    cost = strategy.counter.count_messages(view)
    assert cost == report.tokens_after <= strategy.config.max_tokens
    bs = 1 if isinstance(history[0], SystemMessage) else 0
    shown: list[int] = []
    units = {u.start: u for u in split_units(history)}
    for v in view[bs:]:
        if is_digest(v):
            start, stop = _digest_round(history, v)
            unit = units[start]
            assert unit.kind == "tool" and not unit.in_flight and not unit.has_human
            assert start < bs + state.digested, "a round after the digest point was digested"
            assert dict(state.digests)[str(v.id)[len(DIGEST_ID_PREFIX) :]] == v.content
            assert v.content == digest_text(
                unit, strategy.config.digest.observation_tokens, strategy.counter.count_text
            )
            shown.extend(range(start, stop))
            event("ToolDigest: a digested round")
            continue
        i = marker(v)
        original = history[i]
        if v is not original:
            meta = v.response_metadata.get("langmem_ext")
            assert isinstance(meta, dict) and "clipped_from_tokens" in meta, "changed in view"
            event("ToolDigest: a clipped required message")
        shown.append(i)
    assert shown == sorted(set(shown)), ("duplicate or reordered", shown)
    assert len(state.digests) == report.digested
    # what is not shown was cut oldest first: everything hidden is older than the newest
    # contiguous run, and the newest request is shown (the head of a gap view)
    run_start = len(history)
    while run_start - 1 in shown:
        run_start -= 1
    hidden = sorted(set(range(bs, len(history))) - set(shown))
    assert all(i < run_start for i in hidden), (hidden, run_start)
    newest = max(i for i, m in enumerate(history) if isinstance(m, HumanMessage))
    assert newest in shown, "the newest request is not in the view"
    assert report.messages_dropped == len(hidden)


@settings(max_examples=150, **_SETTINGS)
@given(
    turns=long_turns(),
    top=ints(300, 2_000),
    keep=ints(1, 3),
    observation=st.sampled_from((4, 12, 48)),
    trigger=ints(50, 100),
    target=st.sampled_from((None, 60, 90)),
)
def test_tool_digest_is_valid_within_budget_and_cuts_only_the_oldest(
    turns: tuple[tuple[BaseMessage, ...], ...],
    top: int,
    keep: int,
    observation: int,
    trigger: int,
    target: int | None,
) -> None:
    """ToolDigest over random long agent turns, before every model call (state through JSON):
    the view is valid and within budget; every body message is an original (or, on overflow, a
    marked clipped copy) or the digest of a completed round before the digest point, the one
    ``digest_text`` makes and the state keeps; shown messages are in history order; what is not
    shown is older than the view's newest contiguous run; the newest request is always shown;
    and ``aapply`` gives the same result."""
    strategy = ToolDigest(
        top,
        keep_rounds=keep,
        observation_tokens=observation,
        trigger_tokens=top * trigger // 100,
        target_tokens=None if target is None else top * target // 100,
        counter=ApproximateCounter(),
        overflow="clip",
    )
    history: list[BaseMessage] = []
    state: MemoryState | None = None
    for group in turns:
        history.extend(group)
        result = strategy.apply(history, state)
        other = asyncio.run(strategy.aapply(history, state))
        assert [m.model_dump() for m in result.messages] == [m.model_dump() for m in other.messages]
        assert result.state == other.state and result.report == other.report
        _check_tool_digest_call(strategy, history, result)
        state = MemoryState.from_json(result.state.to_json())
        assert state == result.state
