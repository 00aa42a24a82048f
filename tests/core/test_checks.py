"""The shared argument checks: what they accept, what they refuse, and the exact messages the
callers rely on (each caller passes the parts of its message that differ)."""

from __future__ import annotations

import math

import pytest

from langmem_ext.core.checks import (
    is_int,
    is_number,
    require_budget,
    require_int,
    require_number,
)


@pytest.mark.parametrize("value", [0, 1, -5, 10**40])
def test_is_int_accepts_an_int(value: int) -> None:
    assert is_int(value)


@pytest.mark.parametrize("value", [True, False, 1.0, "1", None, [1]])
def test_is_int_refuses_a_bool_and_every_other_type(value: object) -> None:
    assert not is_int(value)


def test_is_int_with_a_minimum() -> None:
    assert is_int(3, 3) and not is_int(2, 3) and not is_int(True, 0)


@pytest.mark.parametrize("value", [0, -1, 0.5, 10**400, 1e308])
def test_is_number_accepts_a_finite_int_or_float(value: float) -> None:
    assert is_number(value)


@pytest.mark.parametrize("value", [True, "1", None, 1j, math.nan, math.inf, -math.inf])
def test_is_number_refuses_a_bool_a_non_number_and_a_non_finite_float(value: object) -> None:
    assert not is_number(value)


def test_is_number_takes_nan_and_infinity_when_not_asked_for_finite() -> None:
    assert is_number(math.nan, finite=False) and is_number(math.inf, finite=False)
    assert not is_number(True, finite=False)


@pytest.mark.parametrize("value", [1, 2, 10**30])
def test_require_int_accepts_an_int_at_or_over_the_minimum(value: int) -> None:
    require_int("k", value, 1)


@pytest.mark.parametrize(
    ("value", "shown"), [(0, "0"), (True, "True"), (1.5, "1.5"), ("3", "'3'"), (None, "None")]
)
def test_require_int_names_the_setting_the_bound_and_the_value(value: object, shown: str) -> None:
    with pytest.raises(ValueError) as caught:
        require_int("k", value, 1)
    assert str(caught.value) == f"k must be an integer >= 1, got {shown}"


def test_require_int_adds_why_owner_and_fix_where_given() -> None:
    with pytest.raises(ValueError) as caught:
        require_int("keep_rounds", 0, 1, "(the round the model is about to read stays)")
    assert str(caught.value) == (
        "keep_rounds must be an integer >= 1, got 0 (the round the model is about to read stays)"
    )
    with pytest.raises(ValueError) as caught:
        require_int("k", -1, 0, owner="Retrieval", fix="0 turns the feature off")
    assert str(caught.value) == (
        "Retrieval: k must be an integer >= 0, got -1; 0 turns the feature off"
    )
    with pytest.raises(ValueError, match=r"^x must be an integer >= 1,000, got 999$"):
        require_int("x", 999, 1_000)


def test_require_number_bounds_and_message() -> None:
    require_number("retry_max", 0.5, above=0, unit="seconds")
    require_number("fold_wait", 0, minimum=0, unit="seconds")
    for bad in (0, -1.0, math.nan, math.inf, True, "2"):
        with pytest.raises(ValueError) as caught:
            require_number("retry_max", bad, above=0, unit="seconds", why="(why)")
        assert str(caught.value) == (
            f"retry_max must be a finite number of seconds > 0, got {bad!r} (why)"
        )
    with pytest.raises(ValueError) as caught:
        require_number("fold_wait", -1, minimum=0, unit="seconds", or_none=True)
    assert str(caught.value) == "fold_wait must be a finite number of seconds >= 0 or None, got -1"
    with pytest.raises(ValueError) as caught:
        require_number("source_timeout", 0, above=0, owner="Retrieval", fix="it is seconds")
    assert str(caught.value) == (
        "Retrieval: source_timeout must be a finite number > 0, got 0; it is seconds"
    )


def test_require_number_lets_none_through_only_with_or_none() -> None:
    require_number("fold_wait", None, minimum=0, or_none=True)
    with pytest.raises(ValueError, match="got None"):
        require_number("fold_wait", None, minimum=0)


def test_require_number_without_finite_takes_infinity() -> None:
    require_number("limit", math.inf, minimum=0, finite=False)
    with pytest.raises(ValueError, match=r"^limit must be a number >= 0, got nan$"):
        require_number("limit", math.nan, minimum=0, finite=False)


@pytest.mark.parametrize("value", [0, -3, None, True, 1.0, "100"])
def test_require_budget_refuses_what_is_not_a_positive_int(value: object) -> None:
    with pytest.raises(ValueError) as caught:
        require_budget(value)
    assert str(caught.value) == (
        f"max_tokens must be an integer >= 1, got {value!r} (the budget of the whole request)"
    )


def test_require_budget_accepts_a_positive_int() -> None:
    require_budget(1)
    require_budget(200_000)
