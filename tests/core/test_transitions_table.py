"""The state transitions are listed as data, and each one changes only the fields it lists."""

from __future__ import annotations

from dataclasses import fields

import pytest
from langchain_core.messages import AIMessage, HumanMessage

from langmem_ext.core import transitions
from langmem_ext.core.identity import KeyChain
from langmem_ext.core.state import MemoryState
from langmem_ext.core.transitions import (
    TRANSITIONS,
    Folded,
    FoldFailed,
    RetryPolicy,
    after_cut,
    after_fold_plan,
    fold_counted,
    health_after,
    indexed_through,
    with_view,
    without_stale_keys,
)

HISTORY = [HumanMessage("a", id="h1"), AIMessage("b", id="a1"), HumanMessage("c", id="h2")]


def _changed(before: MemoryState, after: MemoryState) -> set[str]:
    return {
        f.name for f in fields(MemoryState) if getattr(before, f.name) != getattr(after, f.name)
    }


def test_every_listed_transition_is_a_function_of_the_module() -> None:
    names = {f.name for f in fields(MemoryState)}
    for name, changes in TRANSITIONS.items():
        assert callable(getattr(transitions, name)), name
        assert name in transitions.__all__, name
        assert changes <= names, f"{name} lists unknown fields {sorted(changes - names)}"


def test_a_transition_may_not_change_a_field_its_entry_does_not_list() -> None:
    with pytest.raises(AssertionError, match="'fold_counted' may not change"):
        transitions._move(MemoryState(), "fold_counted", seen=3)


def test_each_transition_changes_only_its_fields() -> None:
    keys = KeyChain(HISTORY)
    start = MemoryState(seen=9, seen_key="stale", cut_index=7, cut_key="stale", folds=2)
    policy = RetryPolicy()
    results = {
        "after_cut": after_cut(start, keys, seen=3, seen_tokens=30, cut_index=2),
        "after_fold_plan": after_fold_plan(
            start,
            keys,
            seen=3,
            seen_tokens=30,
            sections={"summary": "s"},
            body_start=0,
            boundary=2,
            folded_tokens=20,
            clipped=0,
            digested=0,
        ),
        "fold_counted": fold_counted(start),
        "with_view": with_view(start, view_tokens=12, prefix_key="p", digests=(("k", "d"),)),
        "health_after": health_after(start, FoldFailed(RuntimeError("x")), 0.0, policy),
        "without_stale_keys": without_stale_keys(start, HISTORY[:1]),
        "indexed_through": indexed_through(start, HISTORY, watermark=2, body_start=0, turns=1),
    }
    for name, after in results.items():
        changed = _changed(start, after)
        assert changed and changed <= TRANSITIONS[name], (name, changed)
    healthy = health_after(results["health_after"], Folded({"summary": "s"}), 1.0, policy)
    assert healthy.health == "healthy" and healthy.failures == 0
    assert results["without_stale_keys"].seen_key is None  # seen=9 is past a 1-message history
    assert results["fold_counted"].folds == 3
