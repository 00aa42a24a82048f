"""``FoldPolicy``: the summarizing strategies' settings beyond the budget, as one checked object.

Its checks (one test each, with the messages the constructors used to give), the ``TypeError``
for every keyword that moved off the constructors, and a strategy built with a policy giving the
views, states and callbacks the keyword form gave (explicit expectations, recorded from the
keyword form before the move).
"""

from __future__ import annotations

import dataclasses
import inspect
import math
from typing import Any

import pytest
from fakes import words
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage

from langmem_ext import (
    CallableCounter,
    Compacting,
    FoldPolicy,
    SummaryBuffer,
    TieredSummary,
)
from langmem_ext import strategies as strategies_package
from langmem_ext.replay.specs import SpecError, parse_strategy
from langmem_ext.strategies.options import POLICY_FIELDS, split_policy

CLASSES = {"SummaryBuffer": SummaryBuffer, "Compacting": Compacting, "TieredSummary": TieredSummary}


def summarize(_: object) -> str:
    return "a summary"


def build(name: str, **kwargs: Any) -> Any:
    sizing = {} if name == "Compacting" else {"max_summary_tokens": 40}
    return CLASSES[name](400, summarizer=summarize, **{**sizing, **kwargs})


# --------------------------------------------------------------------------------------------
# the policy's own checks


def test_defaults_are_the_former_keyword_defaults() -> None:
    policy = FoldPolicy()
    assert (policy.placement, policy.overflow) == ("system", "truncate_summary")
    assert (policy.degrade_after, policy.retry_initial, policy.retry_max) == (3, 2.0, 300.0)
    assert policy.max_messages is policy.keep_messages is policy.prefetch_tokens is None
    assert policy.fold_wait is None and policy.clock is None and policy.retry_in_call is False
    assert policy.on_summary_updated is None and policy.on_health_changed is None
    assert policy.on_turn_added is None


def test_policy_is_frozen_and_keyword_only() -> None:
    policy = FoldPolicy(placement="human")
    with pytest.raises(dataclasses.FrozenInstanceError):
        policy.placement = "system"  # type: ignore[misc]
    with pytest.raises(TypeError):
        FoldPolicy("human")  # type: ignore[call-arg]
    assert dataclasses.replace(policy, retry_max=60.0).placement == "human"


def test_placement_is_checked() -> None:
    with pytest.raises(ValueError, match="placement must be 'system' or 'human', got 'user'"):
        FoldPolicy(placement="user")  # type: ignore[arg-type]


def test_overflow_is_checked() -> None:
    with pytest.raises(ValueError, match=r"overflow must be 'truncate_summary'.*got 'drop'"):
        FoldPolicy(overflow="drop")  # type: ignore[arg-type]


def test_keep_messages_needs_max_messages() -> None:
    with pytest.raises(ValueError, match="keep_messages needs max_messages"):
        FoldPolicy(keep_messages=3)


@pytest.mark.parametrize("bad", [1, 0, 2.5, True, "10"])
def test_max_messages_is_an_integer_of_at_least_2(bad: Any) -> None:
    with pytest.raises(ValueError, match=r"max_messages must be an integer >= 2"):
        FoldPolicy(max_messages=bad)


@pytest.mark.parametrize("bad", [0, -1, 1.5])
def test_keep_messages_is_a_positive_integer(bad: Any) -> None:
    with pytest.raises(ValueError, match=r"keep_messages must be an integer >= 1"):
        FoldPolicy(max_messages=10, keep_messages=bad)


def test_keep_messages_is_below_max_messages() -> None:
    with pytest.raises(ValueError, match=r"keep_messages \(10\) < max_messages \(10\)"):
        FoldPolicy(max_messages=10, keep_messages=10)


@pytest.mark.parametrize("bad", [0, -2, 1.5, True])
def test_degrade_after_is_a_positive_integer(bad: Any) -> None:
    with pytest.raises(ValueError, match=r"degrade_after must be an integer >= 1"):
        FoldPolicy(degrade_after=bad)


@pytest.mark.parametrize("name", ["retry_initial", "retry_max"])
@pytest.mark.parametrize("bad", [0, -1.0, math.nan, math.inf, True, "2"])
def test_retry_waits_are_finite_positive_seconds(name: str, bad: Any) -> None:
    with pytest.raises(ValueError, match=f"{name} must be a finite number of seconds > 0"):
        FoldPolicy(**{name: bad})


@pytest.mark.parametrize("bad", [0, -5, 2.5, True])
def test_prefetch_tokens_is_a_positive_integer(bad: Any) -> None:
    with pytest.raises(ValueError, match=r"prefetch_tokens must be an integer >= 1"):
        FoldPolicy(prefetch_tokens=bad)


@pytest.mark.parametrize("bad", [-1.0, math.nan, math.inf, True, "1"])
def test_fold_wait_is_finite_seconds_or_none(bad: Any) -> None:
    with pytest.raises(ValueError, match="fold_wait must be a finite number of seconds") as raised:
        FoldPolicy(prefetch_tokens=700, fold_wait=bad)
    assert repr(bad) in str(raised.value)


@pytest.mark.parametrize("bad", [1, "yes", None])
def test_retry_in_call_is_a_bool(bad: Any) -> None:
    with pytest.raises(TypeError, match=f"retry_in_call must be True or False, got {bad!r}"):
        FoldPolicy(retry_in_call=bad)


def test_retry_in_call_excludes_background_folds() -> None:
    with pytest.raises(ValueError, match=r"retry_in_call=True cannot be combined with prefetch"):
        FoldPolicy(retry_in_call=True, prefetch_tokens=700)


@pytest.mark.parametrize(
    "name", ["on_summary_updated", "on_health_changed", "on_turn_added", "clock"]
)
def test_callbacks_and_clock_are_callable(name: str) -> None:
    with pytest.raises(TypeError, match=f"{name} must be callable or None, got 42"):
        settings: dict[str, Any] = {name: 42}
        FoldPolicy(**settings)


# -- the checks that need the strategy's numbers, at construction


@pytest.mark.parametrize("name", list(CLASSES))
def test_keep_messages_is_at_least_min_messages(name: str) -> None:
    policy = FoldPolicy(max_messages=10, keep_messages=1)
    with pytest.raises(ValueError, match=r"need min_messages \(2\) <= keep_messages \(1\)"):
        build(name, min_messages=2, policy=policy)


def test_keep_messages_default_is_half_of_max_messages_at_least_min_messages() -> None:
    policy = FoldPolicy(max_messages=20)
    memory = build("SummaryBuffer", min_messages=2, policy=policy)
    assert (memory.config.trigger_messages, memory.config.target_messages) == (20, 10)
    memory = build("SummaryBuffer", min_messages=12, policy=policy)
    assert memory.config.target_messages == 12
    with pytest.raises(ValueError, match=r"min_messages \(25\) <= keep_messages \(25\)"):
        build("SummaryBuffer", min_messages=25, policy=policy)


@pytest.mark.parametrize("name", list(CLASSES))
def test_prefetch_tokens_must_lie_between_target_and_trigger(name: str) -> None:
    config = build(name).config
    with pytest.raises(ValueError, match=r"prefetch_tokens \(1\) must be between target_tokens"):
        build(name, policy=FoldPolicy(prefetch_tokens=1))
    middle = (config.target_tokens + config.trigger_tokens) // 2
    assert build(name, policy=FoldPolicy(prefetch_tokens=middle)).folds_in_background


@pytest.mark.parametrize("name", list(CLASSES))
def test_policy_must_be_a_fold_policy(name: str) -> None:
    with pytest.raises(TypeError, match="policy must be a FoldPolicy"):
        build(name, policy={"placement": "human"})


# --------------------------------------------------------------------------------------------
# moved keywords


SAMPLE: dict[str, Any] = {
    "placement": "human",
    "overflow": "error",
    "max_messages": 10,
    "keep_messages": 4,
    "degrade_after": 2,
    "retry_initial": 1.0,
    "retry_max": 4.0,
    "retry_in_call": True,
    "prefetch_tokens": 300,
    "fold_wait": 0.0,
    "on_summary_updated": print,
    "on_health_changed": print,
    "on_turn_added": print,
    "clock": lambda: 0.0,
}


def test_every_policy_field_has_a_sample() -> None:
    assert set(SAMPLE) == set(POLICY_FIELDS)


@pytest.mark.parametrize("field", POLICY_FIELDS)
@pytest.mark.parametrize("name", list(CLASSES))
def test_a_moved_keyword_names_its_new_home(name: str, field: str) -> None:
    with pytest.raises(TypeError) as raised:
        build(name, **{field: SAMPLE[field]})
    assert str(raised.value) == (f"{name}({field}=...) moved: pass policy=FoldPolicy({field}=...)")


def test_several_moved_keywords_are_named_together_before_any_other_check() -> None:
    with pytest.raises(TypeError) as raised:
        SummaryBuffer(0, summarizer=summarize, clock=time_zero, fold_wait=1.0)  # type: ignore[arg-type]
    assert str(raised.value) == (
        "SummaryBuffer(clock=..., fold_wait=...) moved: pass policy=FoldPolicy(clock=..., "
        "fold_wait=...)"
    )


def time_zero() -> float:
    return 0.0


@pytest.mark.parametrize("name", list(CLASSES))
def test_an_unknown_keyword_is_refused_as_python_refuses_it(name: str) -> None:
    with pytest.raises(
        TypeError, match=rf"{name}.__init__\(\) got an unexpected keyword .*'colour'"
    ):
        build(name, colour="blue", placement="human")


@pytest.mark.parametrize("name", list(CLASSES))
def test_constructors_keep_the_budget_and_a_policy(name: str) -> None:
    parameters = inspect.signature(CLASSES[name]).parameters
    assert "policy" in parameters and not set(POLICY_FIELDS) & set(parameters)
    assert {"max_tokens", "summarizer", "min_messages", "counter"} <= set(parameters)
    assert {"reserve_tokens", "safety_margin"} <= set(parameters)
    keywords = [p for p in parameters.values() if p.kind is p.KEYWORD_ONLY]
    assert len(keywords) <= 14, [p.name for p in keywords]


def test_exported_from_the_package_and_the_strategies() -> None:
    import langmem_ext

    assert langmem_ext.FoldPolicy is strategies_package.FoldPolicy is FoldPolicy


# --------------------------------------------------------------------------------------------
# a strategy built with a policy behaves as the keyword form did


def chat(n: int) -> list[BaseMessage]:
    out: list[BaseMessage] = [SystemMessage("you are terse", id="sys")]
    for i in range(n):
        out.append(HumanMessage(f"question {i} " + "word " * 8, id=f"h{i}"))
        out.append(AIMessage(f"answer {i} " + "text " * 8, id=f"a{i}"))
    return out


#: per turn (1..10): the view's ids, state.folded, the summary, health, failures, retry_at and
#: report.trigger, as the keyword form (placement="human", overflow="truncate_oldest",
#: max_messages=10, keep_messages=4, degrade_after=2, retry_initial=1.0, retry_max=4.0, a clock
#: and three callbacks) gave them, for all three strategies alike
_GROWING = [["sys", *(f"{k}{j}" for j in range(i) for k in "ha")] for i in range(1, 7)]
_KEPT = ["sys", "langmem-ext-summary"]
EXPECTED_TURNS: list[tuple[list[str], int, str, str, int, float | None, str | None]] = [
    *((ids, 0, "", "healthy", 0, None, None) for ids in _GROWING[:5]),
    (_GROWING[5], 0, "", "retrying", 1, 108.5, "messages"),
    ([*_KEPT, "h5", "a5", "h6", "a6"], 10, "summary number 2", "healthy", 0, None, "messages"),
    *(
        (
            [*_KEPT, *(f"{k}{j}" for j in range(5, last + 1) for k in "ha")],
            10,
            "summary number 2",
            "healthy",
            0,
            None,
            None,
        )
        for last in (7, 8, 9)
    ),
]

EXPECTED_CONFIG = {
    # (target_tokens, trigger_tokens, max_summary_tokens, safety_margin, clip_tokens)
    "SummaryBuffer": (200, 400, 40, 0.0, None),
    "Compacting": (200, 400, 40, 0.15, None),
    "TieredSummary": (140, 340, 40, 0.0, 200),
}


@pytest.mark.parametrize("name", list(CLASSES))
def test_a_policy_gives_the_views_states_and_callbacks_of_the_keyword_form(name: str) -> None:
    now = [100.0]
    log: list[tuple[Any, ...]] = []
    calls = [0]

    def model(_: object) -> str:
        calls[0] += 1
        if calls[0] == 1:
            raise RuntimeError("provider down")
        return f"summary number {calls[0]}"

    policy = FoldPolicy(
        placement="human",
        overflow="truncate_oldest",
        max_messages=10,
        keep_messages=4,
        degrade_after=2,
        retry_initial=1.0,
        retry_max=4.0,
        clock=lambda: now[0],
        on_summary_updated=lambda old, new: log.append(("summary", dict(new))),
        on_health_changed=lambda old, new: log.append(("health", old, new)),
        on_turn_added=lambda added: log.append(("turn", added[0].id, added[-1].id)),
    )
    sizing = {} if name == "Compacting" else {"max_summary_tokens": 40}
    strategy = CLASSES[name](
        400,
        summarizer=model,
        counter=CallableCounter(words),
        min_messages=1,
        reserve_tokens=5,
        policy=policy,
        **sizing,
    )
    assert strategy.policy is policy
    config = strategy.config
    assert (config.placement, config.overflow) == ("human", "truncate_oldest")
    assert (config.trigger_messages, config.target_messages) == (10, 4)
    assert (config.degrade_after, config.retry_initial, config.retry_max) == (2, 1.0, 4.0)
    assert config.prefetch_tokens is None and config.reserve_tokens == 5
    assert (
        config.target_tokens,
        config.trigger_tokens,
        config.max_summary_tokens,
        config.safety_margin,
        config.clip_tokens,
    ) == EXPECTED_CONFIG[name]
    assert not strategy.folds_in_background and strategy.fold_wait is None
    assert strategy.retry_in_call is False

    state = None
    for turn, expected in enumerate(EXPECTED_TURNS, 1):
        result = strategy.apply(chat(turn), state)
        state = result.state
        got = (
            [m.id for m in result.messages],
            state.folded,
            state.sections.get("conversation", ""),
            state.health,
            state.failures,
            state.retry_at,
            result.report.trigger,
        )
        assert got == expected, f"turn {turn}"
        now[0] += 1.5
        if turn == 7:  # the summary goes into a marked human message, not a second system one
            assert isinstance(result.messages[1], HumanMessage)
            assert "summary number 2" in str(result.messages[1].content)
    assert log == [
        ("turn", "sys", "a0"),
        *(("turn", f"h{i}", f"a{i}") for i in range(1, 6)),
        ("health", "healthy", "retrying"),
        ("turn", "h6", "a6"),
        ("summary", {"conversation": "summary number 2"}),
        ("health", "retrying", "healthy"),
        *(("turn", f"h{i}", f"a{i}") for i in range(7, 10)),
    ]


def test_one_policy_can_be_shared_by_several_strategies() -> None:
    policy = FoldPolicy(placement="human", retry_max=60.0)
    built = [build(name, policy=policy) for name in CLASSES]
    assert all(s.policy is policy and s.config.placement == "human" for s in built)
    assert {s.config.retry_max for s in built} == {60.0}


def test_without_a_policy_the_defaults_apply() -> None:
    strategy = build("SummaryBuffer")
    assert strategy.policy == FoldPolicy()
    assert (strategy.config.placement, strategy.config.overflow) == ("system", "truncate_summary")
    assert strategy.config.trigger_messages is None and strategy.config.degrade_after == 3


# --------------------------------------------------------------------------------------------
# flat settings: split_policy and command-line specs


def test_split_policy_takes_the_policy_fields_out() -> None:
    policy, rest = split_policy({"max_tokens": 4_000, "placement": "human", "max_messages": 40})
    assert policy == FoldPolicy(placement="human", max_messages=40)
    assert rest == {"max_tokens": 4_000}
    assert split_policy({"max_tokens": 4_000}) == (None, {"max_tokens": 4_000})


def test_a_spec_takes_policy_fields_flat() -> None:
    _, strategy = parse_strategy(
        "summary_buffer:8k,placement=human,max_messages=40", summarizer=summarize
    )
    assert isinstance(strategy, SummaryBuffer)
    assert strategy.policy == FoldPolicy(placement="human", max_messages=40)
    with pytest.raises(SpecError, match="placement must be 'system' or 'human'"):
        parse_strategy("compacting:8k,placement=user", summarizer=summarize)
