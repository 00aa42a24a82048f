"""The checks of a setting's type and range, written once for every layer.

:func:`is_int` and :func:`is_number` say whether a value is an integer (or a real number) and
never take a ``bool`` for one (``True`` is an ``int`` to Python, never a count or a budget to
us). :func:`require_int`, :func:`require_number` and :func:`require_budget` refuse a bad
setting with a ``ValueError`` that names it, the value and, where the caller gives them, the
owner (``"Retrieval: k must be ..."``), why the bound exists and the fix. A caller keeps its
own message word for word by passing the parts that differ.
"""

from __future__ import annotations

import math
from typing import TypeGuard

__all__ = ["is_int", "is_number", "require_budget", "require_int", "require_number"]

#: what a strategy's ``max_tokens`` is, said when it is refused
BUDGET_WHY = "(the budget of the whole request)"


def is_int(value: object, minimum: int | None = None) -> TypeGuard[int]:
    """An ``int`` that is not a ``bool`` (and ``>= minimum`` when given).

    >>> is_int(3), is_int(True), is_int(3.0), is_int(0, minimum=1)
    (True, False, False, False)
    """
    if not isinstance(value, int) or isinstance(value, bool):
        return False
    return minimum is None or value >= minimum


def is_number(value: object, *, finite: bool = True) -> TypeGuard[int | float]:
    """An ``int`` or ``float`` that is not a ``bool`` (and not NaN or infinite with
    ``finite``).

    >>> is_number(2), is_number(0.5), is_number(False), is_number(float("nan"))
    (True, True, False, False)
    """
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        return False
    # an int is finite (and math.isfinite would overflow on a huge one)
    return not finite or isinstance(value, int) or math.isfinite(value)


def _refuse(name: str, value: object, bound: str, why: str, owner: str, fix: str) -> ValueError:
    return ValueError(
        (f"{owner}: " if owner else "")
        + f"{name} must be {bound}, got {value!r}"
        + (f" {why}" if why else "")
        + (f"; {fix}" if fix else "")
    )


def require_int(
    name: str, value: object, minimum: int, why: str = "", *, owner: str = "", fix: str = ""
) -> None:
    """Refuse a non-integer (``bool`` included) or too small setting, naming it, before any
    arithmetic on it. ``why`` (after a space) says what the minimum protects, ``fix`` (after
    ``"; "``) what to pass instead; ``owner`` opens the message.

    >>> require_int("k", 0, 1, owner="Retrieval", fix="or None for no limit")
    Traceback (most recent call last):
    ...
    ValueError: Retrieval: k must be an integer >= 1, got 0; or None for no limit
    """
    if type(value) is int and value >= minimum:  # the usual case, without a call
        return
    if not is_int(value, minimum):
        raise _refuse(name, value, f"an integer >= {minimum:,}", why, owner, fix)


def require_number(
    name: str,
    value: object,
    *,
    minimum: float | None = None,
    above: float | None = None,
    finite: bool = True,
    unit: str = "",
    or_none: bool = False,
    why: str = "",
    owner: str = "",
    fix: str = "",
) -> None:
    """Refuse a setting that is not a number (``bool`` included; NaN and infinity too with
    ``finite``) or is below ``minimum`` / not above ``above``, naming it. ``unit`` names what
    it counts (``"seconds"``); ``or_none`` lets ``None`` through (and says so); ``why``,
    ``owner`` and ``fix`` as for :func:`require_int`.

    >>> require_number("retry_max", 0, above=0, unit="seconds")
    Traceback (most recent call last):
    ...
    ValueError: retry_max must be a finite number of seconds > 0, got 0
    """
    if or_none and value is None:
        return
    fits = is_number(value, finite=finite) and (
        (minimum is None or value >= minimum) and (above is None or value > above)
    )
    if not fits:
        bound = " ".join(
            part
            for part in (
                "a finite number" if finite else "a number",
                f"of {unit}" if unit else "",
                f"> {above:g}" if above is not None else "",
                f">= {minimum:g}" if minimum is not None else "",
                "or None" if or_none else "",
            )
            if part
        )
        raise _refuse(name, value, bound, why, owner, fix)


def require_budget(max_tokens: object) -> None:
    """A strategy's ``max_tokens``: a positive integer (``None``, ``bool``, ``float`` and
    ``str`` refused, naming the value), so a strategy never runs without the budget it
    advertises.

    >>> require_budget(0)
    Traceback (most recent call last):
    ...
    ValueError: max_tokens must be an integer >= 1, got 0 (the budget of the whole request)
    """
    require_int("max_tokens", max_tokens, 1, BUDGET_WHY)
