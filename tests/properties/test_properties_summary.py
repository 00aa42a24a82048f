"""Property-based tests of the DESIGN.md section 2 invariants for the summarizing strategies
(SummaryBuffer, Compacting, TieredSummary), over long random runs.

The runs, the fake summarizer model and the vocabulary (``bs``, ``B``, committed folds) are in
``property_harness.py``; the check of each property over a run is in ``property_checks.py``.
Regression tests for the library bugs these properties found are in
``test_properties_summary_regressions.py``.

Properties (each test's docstring, and the check functions it calls, state the precise form):

1. every message is folded exactly once (per summary section);
2. nothing is lost: ``history[bs:B]`` (folded) + the view's body + ``report.not_shown`` cover
   ``history[bs:]`` exactly, and messages are hidden while healthy only for documented reasons;
3. the previous summary is the ``<previous_summary>`` of every fold call;
4. the view fits the budget, or overflow is documented (MemoryBudgetExceeded);
5. the view is a valid sequence with one leading system message and the newest human message;
6. failures lose nothing and fold nothing; backoff and health follow the documented rules;
7. determinism (replay of a turn, and apply vs aapply);
8. the state survives JSON/dict round trips, and continuing from the copy gives the same run;
9. stable prefix between folds (TieredSummary's clip point, notes and overflow truncation are
   the documented exceptions).

Runtime: about two minutes for this file and the regressions file together, with 500 examples
per test on two cores.
"""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st
from property_checks import (
    call_log,
    check_budget,
    check_chained,
    check_failed_markers_folded_later,
    check_failure_rules,
    check_folded_exactly_once,
    check_nothing_lost,
    check_prefix,
    check_summary_block,
    check_valid_view,
    outcome,
)
from property_harness import (
    Clock,
    FakeModel,
    Turn,
    cases,
    property_run_environment,  # noqa: F401 (an autouse fixture: quiet logs, retries do not sleep)
    simulate,
)
from strategies_hyp import ints

from langmem_ext import MemoryBudgetExceeded, MemoryResult, MemoryState


@given(case=cases())
def test_every_message_is_folded_exactly_once_into_a_chained_summary(case):
    """Properties 1 and 3 (DESIGN 2.4): what the summarizer reads. Over the run,
    :func:`check_folded_exactly_once`; every turn, :func:`check_chained` (the previous summary
    is the input of every fold call) and :func:`check_summary_block` (the view shows the
    state's summary). With random summarizer failures, multi-section summaries, chained calls
    (small max_input_tokens), over-budget answers (compress call, clipping) and the fallback."""
    run = simulate(case)
    check_folded_exactly_once(run)
    for turn in run.turns:
        check_chained(run, turn)
        if turn.result is not None:
            check_summary_block(run, turn)


@given(case=cases(), driver=st.sampled_from(("apply", "aapply")))
def test_folded_plus_view_plus_not_shown_cover_the_history(case, driver):
    """Property 2 (DESIGN 2.3), every turn, sync and async: see :func:`check_nothing_lost`."""
    run = simulate(case, driver)
    for turn in run.turns:
        if turn.result is not None:
            check_nothing_lost(run, turn)


@given(case=cases())
def test_view_fits_the_budget_and_is_a_valid_sequence(case):
    """Properties 4 and 5 (DESIGN 2.1, 2.2), every turn: :func:`check_budget` (within budget,
    or MemoryBudgetExceeded as documented) and :func:`check_valid_view`."""
    run = simulate(case)
    for turn in run.turns:
        check_budget(run, turn)
        if turn.result is not None:
            check_valid_view(run, turn)


@given(case=cases(failures=("some", "many")), driver=st.sampled_from(("apply", "aapply")))
def test_failures_lose_nothing_and_fold_nothing(case, driver):
    """Property 6 (DESIGN 2.3): random failure injection (errors, timeouts retried by the
    Summarizer, empty answers, over-budget answers that leave no input room, the fallback
    model), sync and async. Every turn: :func:`check_failure_rules` and
    :func:`check_nothing_lost`; over the run: :func:`check_failed_markers_folded_later` and
    :func:`check_folded_exactly_once`."""
    run = simulate(case, driver)
    for turn in run.turns:
        check_failure_rules(run, turn)
        if turn.result is not None:
            check_nothing_lost(run, turn)
    check_failed_markers_folded_later(run)
    check_folded_exactly_once(run)


@given(case=cases(), driver=st.sampled_from(("apply", "aapply")), data=st.data())
def test_replay_gives_the_same_views_and_states(case, driver, data):
    """Property 7 (DESIGN 2.5). A fresh instance called with a turn's history, state and clock
    value, and a fake model at the same call number (so the same answers), gives the same
    view, state and report and sends the same prompts; checked on every turn that called the
    summarizer, the last turn and a few drawn ones. And a second whole run through ``driver``
    (apply or aapply) gives the same results and prompts turn by turn."""
    run = simulate(case)
    drawn = data.draw(st.sets(ints(0, len(run.turns) - 1), max_size=3), label="replayed")
    for turn in run.turns:
        if not (turn.calls or turn.number in drawn or turn is run.turns[-1]):
            continue
        model = FakeModel(case.actions, start=turn.call_start, transient=case.wrap is not None)
        strategy = case.build(model, Clock(turn.now))
        try:
            again: Any = strategy.apply(list(turn.history), turn.before)
        except MemoryBudgetExceeded as exc:
            again = exc
        replay = Turn(turn.number, turn.history, turn.before, turn.now, 0, None, None)
        replay.result = again if isinstance(again, MemoryResult) else None
        replay.error = again if isinstance(again, MemoryBudgetExceeded) else None
        replay.calls = model.log
        assert outcome(replay) == outcome(turn)
        assert call_log(replay) == call_log(turn)
    other = simulate(case, driver)
    for a, b in zip(run.turns, other.turns, strict=True):
        assert outcome(a) == outcome(b)
        assert call_log(a) == call_log(b)


@given(case=cases(), carry=st.sampled_from(("json", "dict")))
def test_state_survives_serialization_every_turn(case, carry):
    """Property 8: every turn ``MemoryState.from_json(state.to_json()) == state`` (and the same
    for ``to_dict``/``from_dict``), and a run that carries the serialized copies from turn to
    turn gives the same views, states and reports as the run carrying the live states."""
    live = simulate(case)
    for turn in live.turns:
        if turn.result is not None:
            state = turn.result.state
            assert MemoryState.from_json(state.to_json()) == state
            assert MemoryState.from_dict(state.to_dict()) == state
    copied = simulate(case, carry=carry)
    for a, b in zip(live.turns, copied.turns, strict=True):
        assert outcome(a) == outcome(b)


@given(case=cases())
def test_view_prefix_is_stable_between_folds(case):
    """Property 9 (DESIGN 2.6), every pair of consecutive returned turns: see
    :func:`check_prefix`."""
    run = simulate(case)
    prev: Turn | None = None
    for turn in run.turns:
        check_prefix(run, prev, turn)
        # a turn that raised (MemoryBudgetExceeded) may have committed a fold on the way (the
        # error carries the state): the next view is not compared with the one before it
        prev = turn if turn.result is not None else None
