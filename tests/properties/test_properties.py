"""Property-based tests of the invariants in DESIGN.md section 2, for TokenBudget and SlidingWindow,
and of the message-level tools (split_units, validate, repair) and the token counters.

Generators live in ``tests/strategies_hyp.py``. Every property runs under the active hypothesis
profile (500 examples by default, see conftest.py; ``HYPOTHESIS_PROFILE=dev`` for 60).

Vocabulary used below:

* *body*: a list without its leading SystemMessage;
* *units*: :func:`langmem_ext.split_units` of the input body, the atoms every cut respects;
* *documented repairs* a view may contain compared with its input (messages.py, plan.py):
  tool results moved right after their call when other messages sat in between (interleaving),
  the pinned SystemMessage at index 0, and, with ``overflow="clip"``, clipped copies of messages
  (same type and id, one text shortened to a prefix followed by the clip marker). On the valid-ish
  histories used here no placeholder result is ever needed, except for the transient prefixes of
  an interleaved round in the multi-turn tests.
"""

from __future__ import annotations

import asyncio
import copy
import re
from collections.abc import Sequence
from itertools import accumulate, pairwise
from typing import Any

import pytest
from hypothesis import event, given, note
from hypothesis import strategies as st
from langchain_core.messages import (
    AIMessage,
    BaseMessage,
    HumanMessage,
    SystemMessage,
    ToolMessage,
)
from property_checks import is_marked_clipped
from strategies_hyp import (
    Spec,
    any_specs,
    histories,
    malformed_histories,
    sliding_window_specs,
    texts,
    token_budget_specs,
)

from langmem_ext import (
    ApproximateCounter,
    ContextOverflowError,
    MemoryState,
    SlidingWindow,
    TiktokenCounter,
    TokenBudget,
    Unit,
    repair,
    split_units,
    validate,
)
from langmem_ext.core.messages import CLIP_MARKER, clip_message

CLIP_TEXT = "clipped by langmem_ext"
#: the documented marker, with the number of removed characters captured
_MARKER = re.compile(re.escape(CLIP_MARKER).replace(re.escape("{removed}"), r"(\d+)") + r"\Z")

# --------------------------------------------------------------------------------------------
# helpers


def run(strategy: TokenBudget | SlidingWindow, messages: Sequence[BaseMessage], state: Any = None):
    """``strategy.apply``; returns the result or the ContextOverflowError it raised."""
    try:
        return strategy.apply(messages, state)
    except ContextOverflowError as exc:
        return exc


def arun(strategy: TokenBudget | SlidingWindow, messages: Sequence[BaseMessage], state: Any = None):
    """``strategy.aapply`` through ``asyncio.run``; same return convention as :func:`run`."""
    try:
        return asyncio.run(strategy.aapply(messages, state))
    except ContextOverflowError as exc:
        return exc


def body_of(messages: Sequence[BaseMessage]) -> list[BaseMessage]:
    start = 1 if messages and isinstance(messages[0], SystemMessage) else 0
    return list(messages[start:])


def view_body(view: Sequence[BaseMessage]) -> list[BaseMessage]:
    return [m for m in view if not isinstance(m, SystemMessage)]


def has_interleaving(messages: Sequence[BaseMessage]) -> bool:
    return any(u.reordered for u in split_units(messages))


def text_parts(message: BaseMessage) -> list[Any]:
    content = message.content
    return [content] if isinstance(content, str) else list(content)


def is_clipped_copy(clipped: BaseMessage, original: BaseMessage) -> bool:
    """``clipped`` is ``original`` with exactly one text shortened to a prefix plus the marker,
    and every other field (type, id, name, tool calls, tool_call_id) unchanged."""
    if type(clipped) is not type(original) or clipped.id != original.id:
        return False
    rest = {"content", "response_metadata"}
    if clipped.model_dump(exclude=rest) != original.model_dump(exclude=rest):
        return False
    a_parts, b_parts = text_parts(clipped), text_parts(original)
    if isinstance(clipped.content, str) != isinstance(original.content, str):
        return False
    if len(a_parts) != len(b_parts):
        return False
    differing = [(a, b) for a, b in zip(a_parts, b_parts, strict=True) if a != b]
    if len(differing) != 1:
        return False
    a, b = differing[0]
    if isinstance(a, dict) and isinstance(b, dict):
        if {k: v for k, v in a.items() if k != "text"} != {
            k: v for k, v in b.items() if k != "text"
        }:
            return False
        a, b = a.get("text"), b.get("text")
    if not isinstance(a, str) or not isinstance(b, str):
        return False
    found = _MARKER.search(a)
    if found is None:
        return False
    prefix = a[: found.start()]
    return b.startswith(prefix) and len(prefix) + int(found.group(1)) == len(b)


def smallest_clip(counter: Any, message: BaseMessage) -> int:
    """The fewest tokens clipping can bring ``message`` to (clip_message to 0 tokens)."""
    count = counter.count_message
    clipped = clip_message(message, 0, count)
    return count(message) if clipped is None else min(count(message), count(clipped))


def same_or_clipped(v: BaseMessage, m: BaseMessage) -> bool:
    return v is m or (is_marked_clipped(v) and is_clipped_copy(v, m))


def is_subsequence(view: Sequence[BaseMessage], source: Sequence[BaseMessage]) -> bool:
    """Greedy (leftmost) embedding; optimal for any per-pair match relation."""
    it = iter(source)
    return all(any(same_or_clipped(v, m) for m in it) for v in view)


def dump(messages: Sequence[BaseMessage]) -> list[dict[str, Any]]:
    return [m.model_dump() for m in messages]


def units_newest_first(messages: Sequence[BaseMessage]) -> list[Unit]:
    return list(reversed(split_units(body_of(messages))))


def required_positions(strategy: Any, messages: Sequence[BaseMessage]) -> list[int]:
    """Units (positions counted from the newest, 0) that must be in the view with
    ``start_on="human"``, read off plan.py:

    ``t`` is the fewest newest units holding ``min_messages`` messages (at least the newest unit);
    ``h`` the newest unit holding a HumanMessage; ``a`` the nearest human-led unit at or before
    ``h``. If ``h <= t + 1`` (head and tail touch) or the whole run from ``a`` to the end fits
    (``max_tokens`` and ``max_messages``), the required run is contiguous: from the nearest
    human-led unit at or before ``max(t, a)`` to the end (if there is none, back towards ``a``).
    Otherwise (a gap) it is the tail ``0..t`` plus the head ``h..a``.
    """
    units = units_newest_first(messages)
    cum = list(accumulate(len(u.messages) for u in units))
    count = strategy.counter.count_message
    cum_tokens = list(accumulate(sum(count(m) for m in u.messages) for u in units))
    t = 0
    while cum[t] < strategy.config.min_messages and t + 1 < len(units):
        t += 1
    h = next(p for p, u in enumerate(units) if u.has_human)
    a = next((p for p in range(h, len(units)) if units[p].kind == "human"), h)
    if h <= t + 1 or _fits(strategy, messages, cum_tokens[a], cum[a], level="max"):
        floor = a
        t = max(t, floor)
        u = t
        while units[u].kind != "human" and u + 1 < len(units):
            u += 1
        if units[u].kind != "human":
            u = t
            while u > floor and units[u].kind != "human":
                u -= 1
        return list(range(u + 1))
    return [*range(t + 1), *range(h, a + 1)]


def required_messages(strategy: Any, messages: Sequence[BaseMessage]) -> list[BaseMessage]:
    units = units_newest_first(messages)
    return [m for p in required_positions(strategy, messages) for m in units[p].messages]


def required_size(strategy: Any, messages: Sequence[BaseMessage]) -> int:
    return len(required_messages(strategy, messages))


def fixed_tokens(strategy: TokenBudget | SlidingWindow, messages: Sequence[BaseMessage]) -> int:
    """The request overhead plus the pinned system message, as the plan charges them."""
    counter = strategy.counter
    fixed = counter.count_messages([])
    if strategy.config.keep_system and messages and isinstance(messages[0], SystemMessage):
        fixed += counter.count_message(messages[0])
    return fixed


def newest_human(messages: Sequence[BaseMessage]) -> HumanMessage:
    found = [m for m in messages if isinstance(m, HumanMessage)]
    assert found, "generator invariant: at least one HumanMessage"
    return found[-1]  # type: ignore[return-value]


def strategy_specs(**kwargs: Any) -> st.SearchStrategy[Spec]:
    return any_specs(**kwargs)


# --------------------------------------------------------------------------------------------
# 1. budget


def check_budget(spec: Spec, strategy: Any, messages: Sequence[BaseMessage], out: Any) -> None:
    budget = strategy.config.ceiling(strategy.config.max_tokens)
    if isinstance(out, ContextOverflowError):
        event(f"overflow raised ({spec.get('overflow')})")
        assert budget is not None, "no token budget, nothing can overflow"
        assert out.needed > out.available, (out.needed, out.available)
        assert out.available == budget - fixed_tokens(strategy, messages)
        assert out.max_tokens == strategy.config.max_tokens
        assert out.reserve_tokens == strategy.config.reserve_tokens
        if strategy.config.start_on == "human":
            # ``needed`` is what the required messages cost (see required_positions)
            count = strategy.counter.count_message
            assert out.needed == sum(count(m) for m in required_messages(strategy, messages))
        if spec.get("overflow") == "clip":
            # clipping may only give up when even every required message clipped as far as it
            # goes (to the marker alone; images, framing and tool calls cannot shrink) is over
            event("clip gave up")
            if strategy.config.start_on == "human":
                smallest = sum(
                    smallest_clip(strategy.counter, m)
                    for m in required_messages(strategy, messages)
                )
                assert smallest > out.available, (smallest, out.available)
        return
    view = out.messages
    counted = strategy.counter.count_messages(view)
    assert out.report.tokens_after == counted
    assert out.report.budget == budget
    if budget is not None:
        assert counted <= budget, f"view costs {counted}, budget {budget}"
    clipped = [m for m in view if is_marked_clipped(m)]
    assert len(clipped) == len(out.report.clipped)
    if clipped:
        event("clipped view")
        assert spec.get("overflow") == "clip"
    for m in clipped:
        text = "".join(p if isinstance(p, str) else str(p.get("text", "")) for p in text_parts(m))
        assert CLIP_TEXT in text
        original = m.response_metadata["langmem_ext"]["clipped_from_tokens"]
        assert strategy.counter.count_message(m) < original


@given(messages=histories(), spec=token_budget_specs(start_on=None))
def test_token_budget_view_fits_the_budget_or_overflow_is_visible(messages, spec):
    strategy = spec.build()
    check_budget(spec, strategy, messages, run(strategy, messages))


@given(messages=histories(), spec=sliding_window_specs(with_tokens=True, start_on=None))
def test_sliding_window_view_fits_its_token_budget_or_overflow_is_visible(messages, spec):
    strategy = spec.build()
    check_budget(spec, strategy, messages, run(strategy, messages))


@given(messages=histories(), spec=token_budget_specs(counter="tiktoken"))
def test_aapply_with_tiktoken_fits_the_budget_and_agrees_with_apply(messages, spec):
    strategy = spec.build()
    out = arun(strategy, messages)
    check_budget(spec, strategy, messages, out)
    again = run(spec.build(), messages)
    assert type(again) is type(out)
    if isinstance(out, ContextOverflowError):
        assert (again.needed, again.available) == (out.needed, out.available)
    else:
        assert dump(again.messages) == dump(out.messages)
        assert again.state == out.state and again.report == out.report


@given(messages=histories(), long_question=st.none() | texts, data=st.data())
def test_clip_overflow_keeps_the_view_in_budget_with_marked_clipped_copies(
    messages, long_question, data
):
    # often a long newest question, and budgets around what the newest human turn costs, so that
    # clipping is often needed and often possible (the assertions do not depend on this choice)
    in_flight = any(f.kind == "in_flight_tool_call" for f in validate(messages))
    if long_question is not None and not in_flight:
        messages = [*messages, HumanMessage((long_question + " ") * 8)]
    start = max(i for i, m in enumerate(messages) if isinstance(m, HumanMessage))
    counter = ApproximateCounter()
    turn = counter.count_messages([*messages[:1], *messages[start:]])
    smallest = counter.count_messages([*messages[:1]]) + sum(
        smallest_clip(counter, m) for m in messages[start:]
    )
    budgets = st.integers(max(1, smallest), max(turn + 10, smallest))
    spec = data.draw(
        st.one_of(
            token_budget_specs(overflow="clip", max_tokens=budgets, reserve=False),
            sliding_window_specs(overflow="clip", with_tokens=True, max_tokens=budgets),
        ),
        label="spec",
    )
    strategy = spec.build()
    out = run(strategy, messages)
    check_budget(spec, strategy, messages, out)
    if isinstance(out, ContextOverflowError):
        return
    originals = {id(m) for m in messages}
    for v in out.messages:
        if id(v) not in originals:
            # every message that is not an input object is a marked, clipped copy of one
            assert is_marked_clipped(v), v
            assert any(is_clipped_copy(v, m) for m in messages), v
    # clip order: the newest human message first, then the largest required messages. So if
    # anything else was clipped, the newest human message was clipped too, or clipping could
    # not make it smaller.
    target_ = newest_human(messages)
    others = [v for v in out.messages if is_marked_clipped(v) and not is_clipped_copy(v, target_)]
    if others:
        event("clipped beyond the newest human message")
        counter = strategy.counter
        human_clipped = not any(v is target_ for v in out.messages)
        unclippable = smallest_clip(counter, target_) == counter.count_message(target_)
        assert human_clipped or unclippable


# --------------------------------------------------------------------------------------------
# 2. and 3. valid sequences


def check_valid_view(spec: Spec, view: Sequence[BaseMessage]) -> None:
    findings = validate(view)
    if spec.get("start_on", "human") == "any":
        # start_on="any" may start on an AI unit by design: only the tool rules apply
        findings = [f for f in findings if f.kind not in ("first_not_human", "no_human_message")]
    errors = [f for f in findings if f.severity == "error"]
    assert not errors, [str(f) for f in errors]
    for f in findings:
        assert f.kind == "in_flight_tool_call"
        event("view ends with a call in flight")


@given(messages=histories(), spec=strategy_specs(start_on=None))
def test_view_has_no_orphan_result_and_no_unanswered_call(messages, spec):
    out = run(spec.build(), messages)
    if not isinstance(out, ContextOverflowError):
        check_valid_view(spec, out.messages)


@given(messages=histories(), spec=strategy_specs())
def test_view_has_one_system_message_first_then_a_human_message(messages, spec):
    out = run(spec.build(), messages)
    if isinstance(out, ContextOverflowError):
        return
    view = out.messages
    systems = [i for i, m in enumerate(view) if isinstance(m, SystemMessage)]
    assert systems in ([], [0])
    if spec.get("keep_system", True) and isinstance(messages[0], SystemMessage):
        assert systems == [0] and view[0] is messages[0]
    else:
        assert systems == []
    body = view_body(view)
    assert body, "the newest human message is always in the view"
    assert isinstance(body[0], HumanMessage), type(body[0]).__name__


# --------------------------------------------------------------------------------------------
# 4. the newest human message


@given(messages=histories(), spec=strategy_specs(start_on=None))
def test_newest_human_message_is_in_the_view(messages, spec):
    out = run(spec.build(), messages)
    if isinstance(out, ContextOverflowError):
        return
    target_ = newest_human(messages)
    if any(m is target_ for m in out.messages):
        return
    # only a clipped copy may stand in for it; interleaving never reorders human messages, so it
    # is the last HumanMessage of the view
    assert spec.get("overflow") == "clip", "newest HumanMessage missing from the view"
    last = [m for m in out.messages if isinstance(m, HumanMessage)][-1]
    assert is_marked_clipped(last) and is_clipped_copy(last, target_)


# --------------------------------------------------------------------------------------------
# 5. subsequence up to documented repairs, and contiguity / maximality


@given(messages=histories(), spec=strategy_specs(start_on=None))
def test_view_is_a_subsequence_of_the_input_up_to_documented_repairs(messages, spec):
    out = run(spec.build(), messages)
    if isinstance(out, ContextOverflowError):
        return
    body = view_body(out.messages)
    if not has_interleaving(messages):
        event("no interleaving: plain subsequence")
        assert is_subsequence(body, body_of(messages))
    else:
        event("interleaving: subsequence of the units' messages")
        # results moved right after their call (the unit-local repair) is the only reordering
        # allowed; repair() itself is not the reference: it also drops an assistant greeting
        # before the first question, which start_on="any" may keep
        repaired = [m for u in split_units(body_of(messages)) for m in u.messages]
        assert is_subsequence(body, repaired)
    # nothing invented: every view message is an input object or a clipped copy of one
    originals = {id(m) for m in messages}
    assert all(id(v) in originals or is_marked_clipped(v) for v in out.messages)
    # so the report's message figures follow
    report = out.report
    assert (report.messages_before, report.messages_after) == (len(messages), len(out.messages))
    assert report.messages_dropped == len(messages) - len(out.messages)


def _fits(
    strategy: Any, messages: Sequence[BaseMessage], tokens: int, size: int, level: str = "target"
) -> bool:
    """Whether body units costing ``tokens`` and holding ``size`` messages fit the strategy's
    limits: ``max_messages`` and, for tokens, the target level (``target_tokens`` if set, else
    ``max_tokens``) or, with ``level="max"``, ``max_tokens``; after margin, reserve, overhead and
    the pinned system message."""
    config = strategy.config
    top = config.target_tokens if level == "target" else None
    ceiling = config.ceiling(top or config.max_tokens)
    fixed = fixed_tokens(strategy, messages)
    ok_tokens = ceiling is None or fixed + tokens <= ceiling
    ok_size = config.max_messages is None or size <= config.max_messages
    return ok_tokens and ok_size


@given(messages=histories(), spec=strategy_specs(overflow="error"))
def test_contiguous_view_is_the_longest_suffix_of_whole_units_that_fits(messages, spec):
    """plan.py: "Contiguous (the normal case): the view is the longest suffix of whole units
    that fits and starts on a valid unit". On a fresh state (no hysteresis hold) the level is
    ``target_tokens`` when set, else ``max_tokens``; ``max_messages`` for SlidingWindow."""
    strategy = spec.build()
    out = run(strategy, messages)
    if isinstance(out, ContextOverflowError) or out.report.gap:
        return
    units = units_newest_first(messages)
    body = view_body(out.messages)
    # the view body is exactly the messages of the newest k units, in unit order
    k, taken = 0, 0
    while taken < len(body):
        taken += len(units[k].messages)
        k += 1
    expected = [m for u in reversed(units[:k]) for m in u.messages]
    assert len(expected) == len(body) and all(a is b for a, b in zip(expected, body, strict=True))
    assert units[k - 1].kind == "human"
    # and no older human-led start fits
    older = next((p for p in range(k, len(units)) if units[p].kind == "human"), None)
    if older is None:
        return
    count = strategy.counter.count_message
    tokens = sum(count(m) for u in units[: older + 1] for m in u.messages)
    size = sum(len(u.messages) for u in units[: older + 1])
    note(f"view starts at unit {k - 1} (newest=0); older human-led unit {older} costs {tokens}")
    assert not _fits(strategy, messages, tokens, size), (
        f"the view dropped units {k}..{older} although starting at unit {older} fits"
    )


@given(messages=histories(), spec=strategy_specs(overflow="error"))
def test_view_is_everything_when_everything_fits(messages, spec):
    strategy = spec.build()
    repaired = repair(messages)
    keep = strategy.config.keep_system
    sized = repaired if keep else body_of(repaired)
    config = strategy.config
    level = config.ceiling(config.target_tokens or config.max_tokens)
    fits_tokens = level is None or strategy.counter.count_messages(sized) <= level
    fits_size = config.max_messages is None or len(body_of(repaired)) <= config.max_messages
    if not (fits_tokens and fits_size):
        return
    event("everything fits")
    out = strategy.apply(messages)
    assert [id(m) for m in out.messages] == [id(m) for m in sized]
    assert not out.report.gap


# --------------------------------------------------------------------------------------------
# 6. determinism, 7. no mutation


def growth(messages: Sequence[BaseMessage], steps: Sequence[int]) -> list[int]:
    """Lengths of the growing history: from the first HumanMessage on, in steps, ending at n."""
    first = next(i for i, m in enumerate(messages) if isinstance(m, HumanMessage)) + 1
    cuts, n = [first], first
    for step in steps:
        n = min(n + step, len(messages))
        if n > cuts[-1]:
            cuts.append(n)
    if cuts[-1] != len(messages):
        cuts.append(len(messages))
    return cuts


def outcome(out: Any) -> Any:
    if isinstance(out, ContextOverflowError):
        return ("overflow", out.needed, out.available)
    return (dump(out.messages), out.state, out.report)


@given(
    messages=histories(),
    spec=strategy_specs(start_on=None),
    steps=st.lists(st.integers(1, 4), max_size=12),
)
def test_same_input_state_and_config_give_the_same_view_and_state(messages, spec, steps):
    first, second, reused = spec.build(), spec.build(), spec.build()
    state_a: MemoryState | None = None
    state_b: dict[str, Any] | None = None  # carried as a checkpoint would: to_dict()
    for n in growth(messages, steps):
        history = messages[:n]
        a = run(first, history, state_a)
        b = run(second, list(history), state_b)
        assert outcome(a) == outcome(b)
        # the same instance again, warm cache, same state: same answer
        assert outcome(run(reused, history, state_a)) == outcome(a)
        assert outcome(run(reused, history, state_a)) == outcome(a)
        if not isinstance(a, ContextOverflowError):
            assert a.report.tokens_before == first.counter.count_messages(history)
            assert not a.report.history_rewritten
            state_a, state_b = a.state, a.state.to_dict()
            assert MemoryState.from_json(a.state.to_json()) == a.state


@given(messages=histories(), spec=strategy_specs(start_on=None), use_async=st.booleans())
def test_apply_never_mutates_the_input_list_or_its_messages(messages, spec, use_async):
    before = copy.deepcopy(dump(messages))
    identities = [id(m) for m in messages]
    frozen = tuple(messages)
    strategy = spec.build()
    out = arun(strategy, messages) if use_async else run(strategy, messages)
    if not isinstance(out, ContextOverflowError):
        run(strategy, messages, out.state)
        assert out.messages is not messages
    run(strategy, frozen)  # tuples are accepted as well
    assert [id(m) for m in messages] == identities
    assert dump(messages) == before


# --------------------------------------------------------------------------------------------
# 8. SlidingWindow message count


@given(messages=histories(), spec=sliding_window_specs(overflow="error", with_tokens=False))
def test_sliding_window_keeps_at_most_max_messages_unless_the_required_run_is_longer(
    messages, spec
):
    """The rule (plan.py): the non-system messages of the view number at most
    ``max(max_messages, R)``, where R is :func:`required_size` (the newest human turn from its
    human-led unit, the newest unit, ``min_messages`` whole units). When the view holds more than
    ``max_messages``, it is exactly the required run (size R), gap or not."""
    strategy = spec.build()
    out = strategy.apply(messages)
    size = len(view_body(out.messages))
    max_messages = strategy.config.max_messages
    r = required_size(strategy, messages)
    note(f"view {size} messages, max_messages {max_messages}, required {r}, gap {out.report.gap}")
    assert size <= max(max_messages, r)
    if size > max_messages:
        event("window exceeded: required run is longer")
        assert size == r
    if out.report.gap:
        event("gap")
        ids = [id(m) for m in view_body(out.messages)]
        unit_order = [m for u in split_units(body_of(messages)) for m in u.messages]
        positions = [i for i, m in enumerate(unit_order) if id(m) in ids]
        assert positions != list(range(positions[0], positions[0] + len(positions)))


# --------------------------------------------------------------------------------------------
# 9. hysteresis


def _hysteresis_run(messages, spec, target_fraction, steps):
    """Grow ``messages`` append-only in ``steps`` carrying the state; yield (strategy, history,
    result, previous view body) for every turn that did not overflow."""
    top = spec.get("max_tokens")
    kwargs = {**dict(spec.kwargs), "target_tokens": max(1, int(top * target_fraction))}
    strategy = TokenBudget(**kwargs, counter=ApproximateCounter())
    state: MemoryState | None = None
    previous: list[BaseMessage] | None = None
    for n in growth(messages, steps):
        history = messages[:n]
        out = run(strategy, history, state)
        if isinstance(out, ContextOverflowError):
            assert out.needed > out.available
            continue
        yield strategy, history, out, previous
        state, previous = out.state, view_body(out.messages)


hysteresis_args = {
    "messages": histories(interleave=False),
    "spec": token_budget_specs(overflow="error", target=False),
    "target_fraction": st.floats(0.1, 1.0),
    "steps": st.lists(st.integers(1, 3), max_size=25),
}


@given(**hysteresis_args)
def test_hysteresis_keeps_the_previous_view_as_prefix_and_stays_in_budget(
    messages, spec, target_fraction, steps
):
    """Append-only growth (no interleaving, so no transient placeholder results), state carried:
    whenever ``report.prefix_kept`` the previous view's body is a prefix of the new view's body,
    and every view is within ``max_tokens`` (after margin and reserve)."""
    for strategy, _history, out, previous in _hysteresis_run(
        messages, spec, target_fraction, steps
    ):
        config = strategy.config
        assert strategy.counter.count_messages(out.messages) <= config.ceiling(config.max_tokens)
        if out.report.prefix_kept:
            event("prefix kept")
            body = view_body(out.messages)
            assert previous is not None
            assert len(previous) <= len(body)
            assert all(a is b for a, b in zip(previous, body, strict=False)), "prefix changed"


@given(**hysteresis_args)
def test_hysteresis_fresh_cut_goes_down_to_target_tokens(messages, spec, target_fraction, steps):
    """plan.py: "when it would pass, the view is cut down to target_tokens". A contiguous view
    that did not keep the previous cut costs at most the target level, unless it is exactly the
    required run (see :func:`required_size`)."""
    for strategy, history, out, _previous in _hysteresis_run(
        messages, spec, target_fraction, steps
    ):
        if out.report.prefix_kept or out.report.gap:
            continue
        event("fresh cut")
        config = strategy.config
        low = config.ceiling(config.target_tokens)
        body = view_body(out.messages)
        within_target = out.report.tokens_after <= low
        is_required = len(body) == required_size(strategy, history)
        assert within_target or is_required, (out.report.tokens_after, low, len(body))


# --------------------------------------------------------------------------------------------
# 10. validate and repair on malformed histories


@given(messages=malformed_histories(), spec=strategy_specs(start_on=None))
def test_view_of_a_malformed_history_is_valid_and_in_budget(messages, spec):
    """The strategies apply the same unit-local repairs as :func:`repair`, so even a malformed
    history (with a HumanMessage) gives a view that validates and fits."""
    if not any(isinstance(m, HumanMessage) for m in messages):
        return
    strategy = spec.build()
    out = run(strategy, messages)
    if isinstance(out, ContextOverflowError):
        assert out.needed > out.available
        return
    budget = out.report.budget
    assert budget is None or strategy.counter.count_messages(out.messages) <= budget
    check_valid_view(spec, out.messages)
    assert any(m is newest_human(messages) for m in out.messages) or out.report.clipped


@given(messages=malformed_histories())
def test_validate_findings_point_into_the_list(messages):
    before = dump(messages)
    findings = validate(messages)
    assert dump(messages) == before
    assert [f.index for f in findings] == sorted(f.index for f in findings)
    for f in findings:
        assert 0 <= f.index < len(messages), str(f)
        if f.kind in ("orphan_tool_result", "duplicate_tool_result"):
            assert isinstance(messages[f.index], ToolMessage)
            assert messages[f.index].tool_call_id == f.tool_call_id
        if f.kind in ("unanswered_tool_call", "in_flight_tool_call"):
            assert isinstance(messages[f.index], AIMessage)
            assert f.tool_call_id in {c["id"] for c in messages[f.index].tool_calls}
        if f.kind == "system_not_first":
            assert isinstance(messages[f.index], SystemMessage)
    if any(f.kind == "orphan_tool_result" for f in findings):
        event("orphan")
    if any(f.kind == "unanswered_tool_call" for f in findings):
        event("unanswered")


@given(messages=malformed_histories())
def test_repair_never_mutates_its_input(messages):
    before = copy.deepcopy(dump(messages))
    identities = [id(m) for m in messages]
    repair(messages)
    assert [id(m) for m in messages] == identities
    assert dump(messages) == before


@given(messages=malformed_histories())
def test_repaired_history_validates_when_it_has_a_human_message(messages):
    repaired = repair(messages)
    if not any(isinstance(m, HumanMessage) for m in messages):
        event("no human message at all")
        return
    errors = [str(f) for f in validate(repaired) if f.severity == "error"]
    assert not errors, errors


@given(messages=malformed_histories())
def test_repair_keeps_the_first_result_of_every_call_it_keeps(messages):
    """repair's documented drops are orphans (no earlier call) and second results: for every
    call of an AIMessage that repair keeps, the first ToolMessage after it answering that call
    is kept too, and no placeholder is made for it."""
    repaired = repair(messages)
    kept = {id(m) for m in repaired}
    for i, m in enumerate(messages):
        if not isinstance(m, AIMessage) or id(m) not in kept:
            continue
        for call in m.tool_calls:
            first = next(
                (
                    r
                    for r in messages[i + 1 :]
                    if isinstance(r, ToolMessage) and r.tool_call_id == call["id"]
                ),
                None,
            )
            if first is not None:
                assert id(first) in kept, f"the result of {call['id']!r} was dropped"
                made = [
                    r
                    for r in repaired
                    if isinstance(r, ToolMessage)
                    and r.tool_call_id == call["id"]
                    and id(r) not in {id(x) for x in messages}
                ]
                assert not made, f"a placeholder replaced the result of {call['id']!r}"


def _key(m: BaseMessage) -> tuple[Any, ...]:
    return (m.type, m.content, getattr(m, "tool_call_id", None), m.id)


@given(messages=malformed_histories())
def test_repair_is_idempotent(messages):
    once = repair(messages)
    twice = repair(once)
    assert [_key(m) for m in twice] == [_key(m) for m in once]


# --------------------------------------------------------------------------------------------
# 11. split_units


@given(messages=st.one_of(histories(), malformed_histories()))
def test_split_units_tile_the_input_and_keep_results_with_their_call(messages):
    units = split_units(messages)
    assert [u.start for u in units[:1]] == ([0] if messages else [])
    assert (units[-1].stop if units else 0) == len(messages)
    for a, b in pairwise(units):
        assert a.stop == b.start
    assert all(u.stop > u.start for u in units)
    unit_of = {i: k for k, u in enumerate(units) for i in range(u.start, u.stop)}
    for i, m in enumerate(messages):
        if not isinstance(m, ToolMessage):
            continue
        callers = [
            j
            for j in range(i)
            if isinstance(messages[j], AIMessage)
            and m.tool_call_id in {c["id"] for c in messages[j].tool_calls}
        ]
        if callers:
            assert unit_of[i] == unit_of[callers[-1]], f"result {i} split from its call"
    for u in units:
        if not u.repaired:
            assert list(u.messages) == list(messages[u.start : u.stop])


# --------------------------------------------------------------------------------------------
# 12. token cache


@pytest.mark.parametrize("kind", ["approximate", "tiktoken"])
@given(messages=st.one_of(histories(), malformed_histories()))
def test_counting_twice_gives_the_same_numbers_from_the_cache(kind, messages):
    counter = ApproximateCounter() if kind == "approximate" else TiktokenCounter("gpt-4o")
    first = [counter.count_message(m) for m in messages]
    total = counter.count_messages(messages)
    info = counter.cache_info()
    second = [counter.count_message(m) for m in messages]
    assert second == first
    assert counter.count_messages(messages) == total == counter.count_messages([]) + sum(first)
    after = counter.cache_info()
    assert after.misses == info.misses, "second count recounted a message"
    assert after.hits == info.hits + 2 * len(messages)
    # and a cache never answers for a different message: fresh counters agree one by one
    for m, n in zip(messages, first, strict=True):
        fresh = ApproximateCounter() if kind == "approximate" else TiktokenCounter("gpt-4o")
        assert fresh.count_message(m) == n
