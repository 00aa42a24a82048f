"""core.signatures: an entry point's twins take its parameters, written once."""

from __future__ import annotations

import asyncio
import inspect

import pytest
from langchain_core.messages import HumanMessage

from langmem_ext import TokenBudget
from langmem_ext.core.signatures import bind, same_parameters
from langmem_ext.strategies.engine import Strategy


def _parameters(function: object) -> list[tuple[str, object, object]]:
    signature = inspect.signature(function)  # type: ignore[arg-type]
    return [(p.name, p.kind, p.default) for p in signature.parameters.values()]


@pytest.mark.parametrize("twin", ["aapply", "view", "aview"])
def test_strategy_twins_show_the_parameters_of_apply(twin: str) -> None:
    assert _parameters(getattr(Strategy, twin)) == _parameters(Strategy.apply)
    assert "extra_tokens" in inspect.signature(getattr(TokenBudget(100), twin)).parameters


@pytest.mark.parametrize("twin", ["aapply", "aview"])
def test_async_twins_refuse_an_unknown_argument_by_their_own_name(twin: str) -> None:
    strategy = TokenBudget(100)
    with pytest.raises(TypeError, match=rf"^{twin}\(\): .*'bogus'"):
        asyncio.run(getattr(strategy, twin)([HumanMessage("hi")], bogus=1))


def test_view_refuses_a_missing_argument_by_its_own_name() -> None:
    with pytest.raises(TypeError, match=r"^view\(\): missing a required argument: 'messages'"):
        TokenBudget(100).view()


def test_twins_take_positional_and_keyword_arguments_as_apply_does() -> None:
    strategy = TokenBudget(100)
    history = [HumanMessage("hello there")]
    first = strategy.apply(history)
    # keyword-only stays keyword-only
    with pytest.raises(TypeError, match=r"^view\(\): too many positional arguments"):
        strategy.view(history, first.state, 0)
    viewed = strategy.view(history, first.state, extra_tokens=5)
    assert viewed.messages == first.messages
    awaited = asyncio.run(strategy.aapply(messages=history, state=first.state))
    assert awaited.messages == first.messages


def test_bind_fills_defaults_in_declared_order() -> None:
    def declared(a: int, b: int = 2, *, c: str = "c") -> None:
        """Parameters only."""

    @same_parameters(declared)
    def twin(*args: object, **kwargs: object) -> tuple[object, ...]:
        return bind(declared, args, kwargs, "twin")

    assert twin(1, c="x") == (1, 2, "x")
    assert _parameters(twin) == _parameters(declared)
    with pytest.raises(TypeError, match=r"^twin\(\): missing a required argument: 'a'"):
        twin(b=3)


def test_calibrated_counter_aobserve_shows_and_checks_the_parameters_of_observe() -> None:
    from langmem_ext import CalibratedCounter

    assert _parameters(CalibratedCounter.aobserve) == _parameters(CalibratedCounter.observe)
    counter = CalibratedCounter()
    with pytest.raises(TypeError, match=r"^aobserve\(\): .*'modle'"):
        asyncio.run(counter.aobserve([HumanMessage("hi")], 10, modle="x"))
