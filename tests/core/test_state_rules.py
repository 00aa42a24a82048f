"""The pure core: state rules in one place (``langmem_ext/core/transitions.py``), the fold
outcome as a closed set, small named phases in ``plan.py`` / ``fold.py``, one ``leads``, shared
config fields, and the strategies' docstrings."""

from __future__ import annotations

import ast
import inspect
import random
from dataclasses import fields
from pathlib import Path
from typing import Any

import pytest
from fakes import words
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage

from langmem_ext import (
    CallableCounter,
    Compacting,
    FoldPolicy,
    MemoryState,
    SlidingWindow,
    SummaryBuffer,
    TieredSummary,
    TokenBudget,
)
from langmem_ext.core.fold_config import FoldConfig
from langmem_ext.core.limits import CutConfig, ViewLimits
from langmem_ext.core.transitions import (
    FoldDeferred,
    Folded,
    FoldFailed,
    RetryPolicy,
    health_after,
    may_try_fold,
    rebase_after_removal,
    removal_span,
    removals_for_rewrite,
)
from langmem_ext.integrations.graph import removals
from langmem_ext.strategies import presets as strategies_module
from langmem_ext.strategies.engine import Strategy

PACKAGE = Path(__file__).resolve().parents[2] / "langmem_ext"
CORE = (
    "core/plan.py",
    "core/fold.py",
    "core/transitions.py",
    "core/fold_turn.py",
    "core/fold_view.py",
    "core/walk.py",
    "core/overflow.py",
    "core/state.py",
    "strategies/engine.py",
    "strategies/presets.py",
    "core/result.py",
)


class ProviderBusy(RuntimeError):
    retry_after = 120.0


# -- the fold outcome: a closed set ---------------------------------------------------------------


def test_fold_outcome_is_a_closed_set() -> None:
    """Each outcome has its own type and transition; anything else is refused, not guessed at
    (a background fold adopted later would be one more case in ``health_after``)."""
    policy = RetryPolicy(degrade_after=2, retry_initial=2.0, retry_max=300.0)
    failing = MemoryState(health="retrying", failures=1, retry_at=5.0, last_error="E: x")
    assert health_after(failing, Folded({"summary": "s"}), 10.0, policy) == MemoryState()
    assert health_after(failing, FoldDeferred(), 10.0, policy) is failing
    after = health_after(failing, FoldFailed(ValueError("boom")), 10.0, policy)
    assert (after.health, after.failures, after.last_error) == ("degraded", 2, "ValueError: boom")
    # a success without a summary is the failure it is
    empty = health_after(MemoryState(), Folded({}), 0.0, policy)
    assert (empty.health, empty.last_error) == (
        "retrying",
        "RuntimeError: the summarizer returned no summary",
    )
    with pytest.raises(AssertionError):
        health_after(MemoryState(), object(), 0.0, policy)  # type: ignore[arg-type]


def test_the_drivers_answer_with_the_outcome_types() -> None:
    """apply answers Folded / FoldFailed, view answers FoldDeferred: the plan sees which."""
    seen: list[type] = []

    class Spy(SummaryBuffer):
        def _plan(self, messages: Any, state: Any, now: float, extra: int) -> Any:
            plan = super()._plan(messages, state, now, extra)
            outcome: Any = None
            try:
                while True:
                    request = plan.send(outcome)
                    outcome = yield request
                    seen.append(type(outcome))
            except StopIteration as done:
                return done.value

    calls = {"n": 0}

    def model(_: object) -> str:
        calls["n"] += 1
        if calls["n"] == 1:
            raise ProviderBusy("busy")
        return "the summary"

    strategy = Spy(
        max_tokens=120,
        summarizer=model,
        counter=CallableCounter(words),
        policy=FoldPolicy(clock=lambda: 0.0),
    )
    strategy.summarizer.max_retries = 0  # type: ignore[union-attr]
    history: list[BaseMessage] = []
    for i in range(12):
        history += [HumanMessage(f"q{i} " + "w " * 12, id=f"h{i}"), AIMessage(f"a{i}", id=f"a{i}")]
    strategy.view(history)
    failed = strategy.apply(history)
    strategy.clock = lambda: 10_000.0
    strategy.apply(history, failed.state)
    assert seen == [FoldDeferred, FoldFailed, Folded]


# -- health: one transition ------------------------------------------------------------------------


def test_health_transition_backs_off_and_honours_retry_after() -> None:
    policy = RetryPolicy(degrade_after=3, retry_initial=2.0, retry_max=10.0)
    state = MemoryState()
    waits = []
    for _ in range(5):
        state = health_after(state, FoldFailed(ValueError("x" * 500)), 100.0, policy)
        assert state.retry_at is not None
        waits.append(state.retry_at - 100.0)
    assert waits == [2.0, 4.0, 8.0, 10.0, 10.0]
    assert state.health == "degraded" and state.failures == 5
    assert state.last_error is not None and len(state.last_error) == 300
    busy = health_after(MemoryState(), FoldFailed(ProviderBusy("slow down")), 100.0, policy)
    assert busy.retry_at == 220.0  # never sooner than the provider asked
    assert not may_try_fold(busy, 219.0) and may_try_fold(busy, 220.0)
    assert may_try_fold(MemoryState(), 0.0)


def test_plan_fold_uses_the_health_transition() -> None:
    """The state a failing SummaryBuffer returns is the one ``health_after`` computes."""

    def model(_: object) -> str:
        raise ValueError("busy")

    strategy = SummaryBuffer(
        max_tokens=120,
        summarizer=model,
        counter=CallableCounter(words),
        policy=FoldPolicy(clock=lambda: 50.0),
    )
    strategy.summarizer.max_retries = 0  # type: ignore[union-attr]
    history: list[BaseMessage] = []
    for i in range(12):
        history += [HumanMessage(f"q{i} " + "w " * 12, id=f"h{i}"), AIMessage(f"a{i}", id=f"a{i}")]
    result = strategy.apply(history)
    expected = health_after(
        MemoryState(), FoldFailed(ValueError("busy")), 50.0, strategy.config.retry_policy
    )
    got = result.state
    assert (got.health, got.failures, got.retry_at) == (
        expected.health,
        expected.failures,
        expected.retry_at,
    )
    assert got.last_error is not None and "ValueError: busy" in got.last_error


# -- rebasing after a removal ----------------------------------------------------------------------


def _history(rng: random.Random, turns: int, with_ids: bool) -> list[BaseMessage]:
    out: list[BaseMessage] = [SystemMessage("sys", id="s" if with_ids else None)]
    for i in range(turns):
        hid, aid = (f"h{i}", f"a{i}") if with_ids else (None, None)
        out.append(HumanMessage(f"q{i} " + "w " * rng.randint(1, 20), id=hid))
        out.append(AIMessage(f"a{i} " + "w " * rng.randint(1, 20), id=aid))
    return out


def test_rebase_after_removal_matches_the_graph_rewrite() -> None:
    """``removals_for_rewrite`` (``removal_span`` + ``rebase_after_removal``) gives what
    ``graph.removals`` gives, for every strategy's state, so the surfaces can call the one
    rule."""
    counter = CallableCounter(words)
    rng = random.Random(12)
    made = {"compared": 0, "removing": 0}

    def build() -> list[Strategy]:
        return [
            TokenBudget(max_tokens=120, target_tokens=80, counter=counter),
            SlidingWindow(max_messages=6, counter=counter),
            SummaryBuffer(max_tokens=160, summarizer=lambda _: "s s s", counter=counter),
            TieredSummary(max_tokens=300, summarizer=lambda _: "s s s", counter=counter),
            Compacting(max_tokens=300, summarizer=lambda _: "s s s", counter=counter),
        ]

    for _ in range(30):
        with_ids = rng.random() < 0.8
        for strategy in build():
            state: MemoryState | None = None
            messages = _history(rng, rng.randint(1, 4), with_ids)
            for _turn in range(rng.randint(1, 8)):
                result = strategy.apply(messages, state)
                state = result.state
                expected = removals(messages, state, counter)
                assert removals_for_rewrite(messages, state, counter) == expected
                made["compared"] += 1
                ids, rebased = expected
                if ids:
                    made["removing"] += 1
                    messages = [m for m in messages if m.id not in set(ids)]
                    state = rebased
                messages = messages + _history(rng, rng.randint(1, 3), with_ids)[1:]
                if with_ids:  # unique ids after the append
                    messages = [
                        m.model_copy(update={"id": f"m{k}"}) if k else m
                        for k, m in enumerate(messages)
                    ]
                    state = None if ids else state
    assert made["compared"] > 200 and made["removing"] > 20


def test_rebase_moves_every_position_with_the_removed_messages() -> None:
    """The rule by itself: positions move down, the folded part is gone, keys are re-anchored on
    the kept history, an index watermark inside the removed part becomes 0."""
    kept: list[BaseMessage] = [SystemMessage("s", id="s"), HumanMessage("q", id="q")]
    before = MemoryState(
        seen=5,
        seen_tokens=50,
        seen_key="old",
        cut_index=4,
        cut_key="old-cut",
        folded=3,
        folded_key="f",
        folded_tokens=30,
        clipped=4,
        indexed=3,
        indexed_key="i",
    )
    after = rebase_after_removal(before, kept, removed_at=1, removed_count=3, removed_tokens=30)
    assert (after.seen, after.seen_tokens, after.seen_key) == (2, 20, "q")
    assert (after.folded, after.folded_key, after.folded_tokens) == (0, None, 0)
    assert (after.cut_index, after.cut_key) == (1, "q")
    assert (after.clipped, after.indexed, after.indexed_key) == (1, 0, None)
    assert removal_span(kept, MemoryState(cut_index=1)) == range(1, 1)


# -- small named phases, one of each helper, shared config -----------------------------------------


def _functions(path: Path) -> list[tuple[str, int]]:
    tree = ast.parse(path.read_text())
    return [
        (node.name, (node.end_lineno or node.lineno) - node.lineno + 1)
        for node in ast.walk(tree)
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
    ]


def test_no_function_in_the_core_over_80_lines() -> None:
    long = [
        (name, path, lines)
        for path in CORE
        for name, lines in _functions(PACKAGE / path)
        if lines > 80
    ]
    assert long == []


def test_leads_is_defined_once() -> None:
    defined = [path for path in CORE for name, _ in _functions(PACKAGE / path) if name == "leads"]
    assert defined == ["core/plan.py"]


def test_fold_config_shares_the_view_limits_with_cut_config() -> None:
    shared = {f.name for f in fields(ViewLimits)}
    assert shared == {"reserve_tokens", "safety_margin", "min_messages", "start_on", "keep_system"}
    assert issubclass(CutConfig, ViewLimits) and issubclass(FoldConfig, ViewLimits)
    for config in (CutConfig, FoldConfig):
        own = set(inspect.get_annotations(config))
        assert not own & shared, f"{config.__name__} re-declares {own & shared}"
    fold = FoldConfig(
        max_tokens=1_000,
        trigger_tokens=900,
        target_tokens=500,
        max_summary_tokens=100,
        reserve_tokens=7,
        safety_margin=0.1,
        min_messages=3,
        start_on="any",
        keep_system=False,
    )
    cut = fold.cut(min_messages=1)
    assert (cut.max_tokens, cut.reserve_tokens, cut.safety_margin, cut.min_messages) == (
        1_000,
        7,
        0.1,
        1,
    )
    assert (cut.start_on, cut.keep_system) == ("any", False)
    assert fold.level(1_000) == cut.ceiling(1_000) == 893
    with pytest.raises(ValueError, match="reserve_tokens"):
        FoldConfig(max_tokens=100, trigger_tokens=90, target_tokens=50, max_summary_tokens=20,
                   reserve_tokens=100)  # fmt: skip


#: the public constructors' keyword signatures, as they were before the refactor (background
#: compaction added prefetch_tokens, fold_wait and retry_in_call, at the end, to the summarizing
#: ones; the message-count trigger added max_messages / keep_messages, and on_turn_added; then
#: FoldPolicy took those and the other settings beyond the budget: ``policy=`` and ``**moved``)
SIGNATURES = {
    "TokenBudget": "(max_tokens: 'int', *, counter: 'CounterLike' = None, safety_margin: 'float' = 0.0, reserve_tokens: 'int' = 0, min_messages: 'int' = 1, target_tokens: 'int | None' = None, start_on: 'StartOn' = 'human', keep_system: 'bool' = True, overflow: 'Overflow' = 'error') -> 'None'",  # noqa: E501
    "SlidingWindow": "(max_messages: 'int' = 20, *, max_tokens: 'int | None' = None, counter: 'CounterLike' = None, min_messages: 'int' = 1, start_on: 'StartOn' = 'human', keep_system: 'bool' = True, overflow: 'Overflow' = 'error') -> 'None'",  # noqa: E501
    "SummaryBuffer": "(max_tokens: 'int', *, summarizer: 'SummarizerLike', max_summary_tokens: 'int | None' = None, target_tokens: 'int | None' = None, min_messages: 'int' = 2, counter: 'CounterLike' = None, reserve_tokens: 'int' = 0, safety_margin: 'float' = 0.0, start_on: 'StartOn' = 'human', keep_system: 'bool' = True, policy: 'FoldPolicy | None' = None, **moved: 'NoReturn') -> 'None'",  # noqa: E501
    "Compacting": "(max_tokens: 'int', *, summarizer: 'SummarizerLike', summary_ratio: 'float' = 0.1, safety_margin: 'float' = 0.15, min_messages: 'int' = 5, target_ratio: 'float' = 0.5, counter: 'CounterLike' = None, reserve_tokens: 'int' = 0, policy: 'FoldPolicy | None' = None, **moved: 'NoReturn') -> 'None'",  # noqa: E501
    "TieredSummary": "(max_tokens: 'int', *, summarizer: 'SummarizerLike', tier1_ratio: 'float' = 0.5, tier2_ratio: 'float' = 0.85, target_ratio: 'float' = 0.35, truncate_chars: 'int' = 2000, keep_rounds: 'int | None' = 3, observation_tokens: 'int' = 48, max_summary_tokens: 'int | None' = None, min_messages: 'int' = 5, counter: 'CounterLike' = None, reserve_tokens: 'int' = 0, safety_margin: 'float' = 0.0, policy: 'FoldPolicy | None' = None, **moved: 'NoReturn') -> 'None'",  # noqa: E501
    "ToolDigest": "(max_tokens: 'int', *, keep_rounds: 'int' = 3, observation_tokens: 'int' = 48, trigger_tokens: 'int | None' = None, counter: 'CounterLike' = None, safety_margin: 'float' = 0.0, reserve_tokens: 'int' = 0, min_messages: 'int' = 1, target_tokens: 'int | None' = None, start_on: 'StartOn' = 'human', keep_system: 'bool' = True, overflow: 'Overflow' = 'clip') -> 'None'",  # noqa: E501
}


@pytest.mark.parametrize("name", sorted(SIGNATURES))
def test_strategy_signatures_are_unchanged(name: str) -> None:
    cls = getattr(strategies_module, name)
    assert str(inspect.signature(cls.__init__)).replace("(self, ", "(") == SIGNATURES[name]


def test_strategies_docstrings_are_current_and_shared_args_documented_once() -> None:
    module_doc = strategies_module.__doc__ or ""
    assert "trimming strategies:" not in module_doc.lower()
    assert "SummaryBuffer" in module_doc and "TokenBudget" in module_doc
    for cls in (SummaryBuffer, Compacting, TieredSummary):
        doc = cls.__doc__ or ""
        assert doc.count("Shared arguments (every summarizing strategy):") == 1
        for parameter in inspect.signature(cls.__init__).parameters:
            if parameter != "self":
                assert parameter in doc, f"{cls.__name__}: {parameter} is not documented"
