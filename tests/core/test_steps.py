"""The step protocol's one pair of drivers (``langmem_ext.core.steps.run`` / ``arun``) on small
generator flows: results sent back, errors thrown in, a flow that catches, return values,
read-only calls, and the sync and async drivers agreeing."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest

from langmem_ext.core.steps import (
    DECLINED,
    Flow,
    Raised,
    Step,
    arun,
    mapped,
    resume,
    run,
)


class Value(Step):
    """A step that answers ``value`` (``arun`` answers the same, awaited), and records itself."""

    def __init__(self, value: Any, log: list[str] | None = None, *, writes: bool = False) -> None:
        self.value = value
        self.log = log
        self.writes = writes

    def run(self) -> Any:
        return self._answer("run")

    async def arun(self) -> Any:
        await asyncio.sleep(0)
        return self._answer("arun")

    def _answer(self, how: str) -> Any:
        if self.log is not None:
            self.log.append(f"{how} {self.value!r}")
        if isinstance(self.value, BaseException):
            raise self.value
        return self.value


class Deferred(Value):
    """A step that writes and says what a read-only driver answers instead."""

    def declined(self) -> Any:
        return "deferred"


def both(make: Callable[[], Flow[Any]], *, read_only: bool = False) -> tuple[Any, Any]:
    """The result of a fresh flow under each driver."""
    return run(make(), read_only=read_only), asyncio.run(arun(make(), read_only=read_only))


def test_each_result_is_sent_back_and_the_return_value_is_the_result() -> None:
    def flow() -> Flow[int]:
        a = yield Value(2)
        b = yield Value(3)
        return int(a) * int(b)

    assert both(flow) == (6, 6)


def test_a_flow_that_yields_nothing_returns_at_once() -> None:
    def flow() -> Flow[str]:
        return "done"
        yield Value(None)  # pragma: no cover - makes this function a generator

    assert both(flow) == ("done", "done")


def test_a_step_error_is_thrown_into_the_flow_which_may_catch_it() -> None:
    def flow() -> Flow[str]:
        try:
            yield Value(KeyError("boom"))
        except KeyError as error:
            caught = f"caught {error}"
        after = yield Value("next")
        return f"{caught}, then {after}"

    assert both(flow) == ("caught 'boom', then next",) * 2


def test_an_error_the_flow_does_not_catch_reaches_the_caller_unchanged() -> None:
    error = ValueError("bad")
    cleaned: list[str] = []

    def flow() -> Flow[None]:
        try:
            yield Value(error)
        finally:
            cleaned.append("finally")
        raise AssertionError("never reached")  # pragma: no cover

    with pytest.raises(ValueError) as sync:
        run(flow())
    with pytest.raises(ValueError) as async_:
        asyncio.run(arun(flow()))
    assert sync.value is error and async_.value is error
    assert cleaned == ["finally", "finally"]


def test_a_base_exception_is_not_thrown_in_it_propagates() -> None:
    seen: list[str] = []

    def flow() -> Flow[None]:
        try:
            yield Value(KeyboardInterrupt())
        except BaseException:  # pragma: no cover - must not be reached
            seen.append("thrown in")
            raise

    with pytest.raises(KeyboardInterrupt):
        run(flow())
    assert seen == []


def test_a_cancellation_propagates_from_the_async_driver() -> None:
    seen: list[str] = []

    class Forever(Step):
        def run(self) -> None:  # pragma: no cover - async only
            raise NotImplementedError

        async def arun(self) -> None:
            await asyncio.Event().wait()

    def flow() -> Flow[None]:
        try:
            yield Forever()
        except Exception:  # pragma: no cover - a cancellation is not a step's failure
            seen.append("thrown in")

    async def main() -> None:
        task = asyncio.ensure_future(arun(flow()))
        await asyncio.sleep(0)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(main())
    assert seen == []


def test_sync_runs_and_async_awaits_each_step_in_order() -> None:
    sync_log: list[str] = []
    async_log: list[str] = []

    def flow(log: list[str]) -> Flow[list[Any]]:
        got = []
        for value in (1, "two", None):
            got.append((yield Value(value, log)))
        return got

    assert run(flow(sync_log)) == asyncio.run(arun(flow(async_log))) == [1, "two", None]
    assert sync_log == ["run 1", "run 'two'", "run None"]
    assert async_log == ["arun 1", "arun 'two'", "arun None"]


def test_read_only_declines_the_steps_that_write_and_performs_the_others() -> None:
    log: list[str] = []

    def flow() -> Flow[tuple[Any, ...]]:
        read = yield Value("read", log)
        write = yield Value("write", log, writes=True)
        fold = yield Deferred("fold", log, writes=True)
        return read, write, fold

    assert both(flow, read_only=True) == (("read", DECLINED, "deferred"),) * 2
    assert log == ["run 'read'", "arun 'read'"]
    log.clear()
    assert both(flow) == (("read", "write", "fold"),) * 2
    assert repr(DECLINED) == "DECLINED"


def test_resume_sends_throws_and_reports_the_end() -> None:
    def flow() -> Flow[str]:
        try:
            yield Value(1)
        except KeyError:
            yield Value(2)
        return "end"

    gen = flow()
    first, result = resume(gen, None)
    assert isinstance(first, Value) and first.value == 1 and result is None
    second, _ = resume(gen, Raised(KeyError("k")))
    assert isinstance(second, Value) and second.value == 2
    assert resume(gen, "ignored") == (None, "end")


def test_mapped_turns_requests_into_steps_and_forwards_replies_and_errors() -> None:
    def plan() -> Any:
        a = yield "double 2"
        try:
            yield "fail"
        except LookupError as error:
            b = str(error)
        return a, b

    def to_step(request: str) -> Step:
        if request == "fail":
            return Value(LookupError("no such thing"))
        return Value(2 * int(request.split()[1]))

    assert both(lambda: mapped(plan(), to_step)) == ((4, "no such thing"),) * 2


def test_sync_and_async_drivers_agree_on_nested_flows() -> None:
    class Sub(Step):
        """A step whose work is a flow of its own, run by the same driver pair."""

        def __init__(self, flow: Callable[[], Flow[Any]]) -> None:
            self.flow = flow

        def run(self) -> Any:
            return run(self.flow())

        async def arun(self) -> Any:
            return await arun(self.flow())

    def inner() -> Flow[int]:
        x = yield Value(20)
        return int(x) + 1

    def failing() -> Any:
        yield KeyError("x")

    def outer() -> Flow[int]:
        y = yield Sub(inner)
        try:
            yield Sub(lambda: mapped(failing(), Value))
        except KeyError:
            y += 100
        return int(y)

    assert both(outer) == (121, 121)
