"""Fault doubles for the fault-injection tests: models that misbehave, clocks that jump, stored
values that were damaged, and one check of a call's result under a fault.

* Models (each a LangChain chat model, so the Summarizer binds ``max_tokens`` and runs it the way
  it runs a provider's model): :class:`HangingModel` (sync only: LangChain runs it in an executor
  under ``ainvoke``; blocks until released), :class:`CancelIgnoringModel` (async; swallows its
  cancellation and goes on), :class:`SlowModel` (answers, too late) and :class:`GarbageModel`
  (answers at once, with degenerate repetition to the token limit, echoed ``[transcript]``
  markup, a refusal or nothing). Every one of them answers like a healthy summarizer
  (:class:`~langmem_ext.testing.FakeSummaryModel`) once :meth:`FaultyModel.clear` was called,
  and ``clear`` also releases every call still blocked, so a test that fails leaves no thread
  behind that would starve the next one.
* :class:`JumpingClock`: a strategy's ``clock=`` that the test steps forward and back (NTP,
  a VM resumed from a snapshot).
* Damaged stored values: :func:`junk_json` (arbitrary JSON plus what JSON cannot say: NaN,
  infinities, huge ints, wrong types) and :func:`damages` (one field of a stored value replaced,
  deleted or given foreign vector dims), over the turn, index block, mark and tail items of
  :class:`~langmem_ext.retrieval.strategy.Retrieval`.
* :func:`assert_step_ok`: the package's per-call invariants (the conformance kit's own check,
  :func:`langmem_ext.testing.check_strategy`'s ``_check_call``) plus no text of another key in
  the view; :func:`run_bounded`: a watchdog, so a hang fails the test instead of blocking CI.

Why a module of its own: the scenarios (``test_fault_injection.py``) combine every fault with
every summarizing strategy, driver and mode; the doubles are the part other tests can reuse.
"""

from __future__ import annotations

import asyncio
import math
import resource
import threading
import time
from collections.abc import Callable, Collection, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
import pybase64
from hypothesis import strategies as st
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from property_checks import text_of
from pydantic import ConfigDict, Field, PrivateAttr

from langmem_ext.core.result import MemoryResult
from langmem_ext.strategies.engine import Strategy
from langmem_ext.testing import FakeSummaryModel, _check_call

__all__ = [
    "DELETE",
    "GARBAGE_KINDS",
    "CancelIgnoringModel",
    "Damage",
    "FaultyModel",
    "GarbageModel",
    "HangingModel",
    "JumpingClock",
    "SlowModel",
    "assert_step_ok",
    "damages",
    "foreign_vectors",
    "junk_json",
    "memory_cap",
    "run_bounded",
]

#: the longest any faulty call blocks when nobody releases it (a safety net: ``clear`` releases)
_MAX_HANG = 60.0


# --------------------------------------------------------------------------------------------
# models


class FaultyModel(BaseChatModel):
    """A summarizer model with a fault that :meth:`clear` switches off.

    While ``faulty``, :meth:`_fault` decides the answer (block, answer late, answer garbage);
    afterwards every call answers like :class:`~langmem_ext.testing.FakeSummaryModel` (an
    extractive summary within the bound ``max_tokens``). ``calls`` counts every call, faulty or
    not; ``faulty_calls`` those made while the fault was on."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    #: bound by the Summarizer to each section's budget (it binds it when the field exists)
    max_tokens: int | None = None
    faulty: bool = True
    calls: int = 0
    faulty_calls: int = 0
    #: cancellations swallowed (CancelIgnoringModel)
    cancels_ignored: int = 0
    #: set by ``clear``: every blocked call returns
    released: threading.Event = Field(default_factory=threading.Event)
    _healthy: FakeSummaryModel = PrivateAttr(default_factory=FakeSummaryModel)

    @property
    def _llm_type(self) -> str:
        return f"fault-{type(self).__name__}"

    def clear(self) -> None:
        """The fault is over: later calls answer well, blocked ones return."""
        self.faulty = False
        self.released.set()

    def _healthy_answer(self, messages: list[BaseMessage], max_tokens: int | None) -> str:
        return self._healthy.answer(messages, max_tokens)

    def _start(self) -> bool:
        """Count a call; whether it is faulty."""
        self.calls += 1
        if self.faulty:
            self.faulty_calls += 1
            return True
        return False

    def _result(self, text: str) -> ChatResult:
        return ChatResult(generations=[ChatGeneration(message=AIMessage(text))])

    async def _until_released(self, seconds: float, *, ignore_cancel: bool = False) -> None:
        """Wait on the event loop until :meth:`clear` (or ``seconds``); with ``ignore_cancel``
        a cancellation is counted (``cancels_ignored``) and swallowed."""
        deadline = time.monotonic() + seconds
        while not self.released.is_set() and time.monotonic() < deadline:
            try:
                await asyncio.sleep(0.02)
            except asyncio.CancelledError:
                if not ignore_cancel:
                    raise
                self.cancels_ignored += 1  # and on we go

    def _fault(self, messages: list[BaseMessage], max_tokens: int | None) -> str:
        raise NotImplementedError

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: Any = None,
        **kwargs: Any,
    ) -> ChatResult:
        limit = kwargs.get("max_tokens", self.max_tokens)
        if self._start():
            return self._result(self._fault(messages, limit))
        return self._result(self._healthy_answer(messages, limit))


class HangingModel(FaultyModel):
    """Sync only (no ``_agenerate``: under ``ainvoke`` LangChain runs it in the event loop's
    default executor, which ``asyncio.run`` waits for at its end). A faulty call blocks until
    :meth:`clear` (at most ``_MAX_HANG`` seconds), then answers a healthy summary."""

    def _fault(self, messages: list[BaseMessage], max_tokens: int | None) -> str:
        self.released.wait(_MAX_HANG)
        return self._healthy_answer(messages, max_tokens)


class _HoldingModel(FaultyModel):
    """A faulty call holds on until :meth:`clear` or ``_hold()`` seconds, then answers a healthy
    summary: sync in its thread, async on the loop (swallowing cancellations when
    ``ignores_cancel``)."""

    ignores_cancel: ClassVar[bool] = False

    def _hold(self) -> float:
        raise NotImplementedError

    def _fault(self, messages: list[BaseMessage], max_tokens: int | None) -> str:
        self.released.wait(self._hold())
        return self._healthy_answer(messages, max_tokens)

    async def _agenerate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: Any = None,
        **kwargs: Any,
    ) -> ChatResult:
        limit = kwargs.get("max_tokens", self.max_tokens)
        if self._start():
            await self._until_released(self._hold(), ignore_cancel=self.ignores_cancel)
        return self._result(self._healthy_answer(messages, limit))


class CancelIgnoringModel(_HoldingModel):
    """Async: a faulty call swallows every ``CancelledError`` and keeps going until
    :meth:`clear` (the model of a client that shields its request). Sync calls block like
    :class:`HangingModel` (a thread cannot be cancelled at all). ``cancels_ignored`` counts the
    cancellations it swallowed."""

    ignores_cancel: ClassVar[bool] = True

    def _hold(self) -> float:
        return _MAX_HANG


class SlowModel(_HoldingModel):
    """Answers a healthy summary, ``delay`` seconds late while faulty (sync: sleeps in its
    thread; async: sleeps on the loop, and honours cancellation). :meth:`clear` cuts a running
    delay short."""

    delay: float = 2.0

    def _hold(self) -> float:
        return self.delay


#: what :class:`GarbageModel` answers (as seen from small local models: Gemma 3 270M)
GARBAGE_KINDS = ("repetition", "echo", "instructions", "refusal", "empty")

_REFUSAL = "I'm sorry, but I can't help with that request. As an AI language model I cannot do it."


class GarbageModel(FaultyModel):
    """Answers at once, with garbage of ``kind`` while faulty:

    * ``"repetition"``: ``"[b] [b] [b] ..."`` to the bound token limit (degenerate repetition);
    * ``"echo"``: ``"[transcript]"`` and the prompt's transcript echoed back;
    * ``"instructions"``: the prompt's own instructions echoed back;
    * ``"refusal"``: a refusal;
    * ``"empty"``: nothing.

    ``answers`` holds every garbage answer given, so a test can check none became a summary."""

    kind: str = "repetition"
    answers: list[str] = Field(default_factory=list)

    def _fault(self, messages: list[BaseMessage], max_tokens: int | None) -> str:
        text = garbage(self.kind, messages, max_tokens)
        self.answers.append(text)
        return text


def garbage(kind: str, prompt: Sequence[BaseMessage], max_tokens: int | None = None) -> str:
    """One garbage answer of ``kind`` (see :class:`GarbageModel`) to ``prompt``."""
    body = text_of(prompt[-1]) if prompt else ""
    if kind == "repetition":
        return " ".join(["[b]"] * max(8, max_tokens or 200))
    if kind == "echo":
        start, end = body.find("<transcript>"), body.find("</transcript>")
        inner = body[start + len("<transcript>") : end] if 0 <= start < end else body
        return "[transcript]\n" + inner.strip() + "\n[/transcript]"
    if kind == "instructions":
        return "\n".join(text_of(m) for m in prompt if text_of(m).strip()) or body
    if kind == "refusal":
        return _REFUSAL
    if kind == "empty":
        return ""
    raise ValueError(f"garbage kind must be one of {GARBAGE_KINDS}, got {kind!r}")


def garbage_signatures(kind: str) -> tuple[str, ...]:
    """Substrings that give garbage of ``kind`` away when found in a committed summary."""
    return {
        "repetition": ("[b] [b] [b] [b]",),
        "echo": ("[transcript]", "<transcript>"),
        "instructions": ("<transcript>", "</transcript>"),
        "refusal": ("I'm sorry, but I can't help",),
        "empty": (),
    }[kind]


# --------------------------------------------------------------------------------------------
# clocks


class JumpingClock:
    """A clock for ``clock=``: reads ``now``; the test moves it with :meth:`tick` (forward, the
    normal passing of time) and :meth:`jump` (to any value: back, as NTP or a VM snapshot
    does, or far forward). ``reads`` counts the reads; ``history`` records every value set."""

    def __init__(self, start: float = 10_000.0) -> None:
        self.now = float(start)
        self.reads = 0
        self.history: list[float] = [self.now]

    def __call__(self) -> float:
        self.reads += 1
        return self.now

    def tick(self, seconds: float = 1.0) -> float:
        return self.jump(self.now + seconds)

    def jump(self, to: float) -> float:
        if not math.isfinite(to):
            raise ValueError(f"JumpingClock.jump: to must be finite, got {to!r}")
        self.now = float(to)
        self.history.append(self.now)
        return self.now


# --------------------------------------------------------------------------------------------
# damaged stored values

#: a damage that deletes the field instead of replacing it
DELETE: Any = type("Delete", (), {"__repr__": lambda self: "DELETE"})()

_HUGE = (10**12, 10**30, 2**63, -(2**63) - 1, -1, 0)


def junk_json(max_leaves: int = 6) -> st.SearchStrategy[Any]:
    """Any JSON value, plus what a JSON store may or may not keep: NaN, +-inf, huge and
    negative ints, booleans (which Python counts as ints), strings that look like numbers,
    base64-ish strings, nested lists and objects."""
    leaves = st.one_of(
        st.none(),
        st.booleans(),
        st.sampled_from(_HUGE),
        st.integers(),
        st.floats(allow_nan=True, allow_infinity=True),
        st.sampled_from((math.nan, math.inf, -math.inf, "x", "NaN", "12", "", "AAAA", "==")),
        st.text(max_size=20),
    )
    return st.recursive(
        leaves,
        lambda inner: st.one_of(
            st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=6), inner, max_size=4)
        ),
        max_leaves=max_leaves,
    )


def foreign_vectors(vectors: Any) -> st.SearchStrategy[Any]:
    """A turn's stored ``vectors`` replaced by ones of another embedding model: other dims over
    data of a fitting size (dims that still divide it), ``dims=True``, NaN/inf rows."""
    dims = vectors.get("dims") if isinstance(vectors, dict) else None
    data = vectors.get("f16") if isinstance(vectors, dict) else None
    size = len(pybase64.b64decode(data)) // 2 if isinstance(data, str) else 8

    def encoded(values: np.ndarray) -> str:
        return pybase64.b64encode(values.astype("<f2").tobytes()).decode("ascii")

    divisors = [d for d in range(1, size + 1) if size % d == 0 and d != dims] or [1]
    other = st.sampled_from((2, 3, 16, 384, 1536)).map(
        lambda d: {"dims": d, "f16": encoded(np.ones(d, dtype="f4"))}
    )
    return st.one_of(
        st.sampled_from(divisors).map(
            lambda d: {"dims": d, "f16": data or encoded(np.ones(size, dtype="f4"))}
        ),
        other,
        st.just({"dims": True, "f16": data}),
        st.sampled_from((math.nan, math.inf)).map(
            lambda bad: {"dims": dims or 8, "f16": encoded(np.full(size, bad, dtype="f4"))}
        ),
        st.just({"dims": dims, "f16": "not base64!"}),
    )


@dataclass(frozen=True, slots=True)
class Damage:
    """One field of one stored value replaced (``value``) or deleted (``DELETE``)."""

    field: str
    value: Any

    def apply(self, stored: dict[str, Any]) -> dict[str, Any]:
        out = dict(stored)
        if self.value is DELETE:
            out.pop(self.field, None)
        else:
            out[self.field] = self.value
        return out


def damages(stored: dict[str, Any]) -> st.SearchStrategy[Damage]:
    """Damage to one field of ``stored`` (one of its own fields, or a new one): arbitrary JSON
    (:func:`junk_json`), deletion, or, for a ``vectors`` field, another model's vectors."""
    fields = sorted(stored) or ["value"]
    replaced = st.builds(Damage, st.sampled_from(fields), st.one_of(junk_json(), st.just(DELETE)))
    options = [replaced, st.builds(Damage, st.just("unexpected"), junk_json())]
    if "vectors" in stored:
        options.append(st.builds(Damage, st.just("vectors"), foreign_vectors(stored["vectors"])))
    return st.one_of(options)


# --------------------------------------------------------------------------------------------
# checking a call


def assert_step_ok(
    result: MemoryResult,
    history: Sequence[BaseMessage],
    strategy: Strategy,
    *,
    where: str = "",
    max_tokens: int | None = None,
    foreign: Collection[str] = (),
) -> None:
    """One call's result is acceptable under a fault: the conformance kit's per-call check
    (``validate(view)`` has no error finding; the view costs at most ``report.budget`` (and
    ``max_tokens``) by ``strategy.counter``; the history's newest HumanMessage is in the view;
    nothing lost: every message not in the view is folded, dropped or reported not shown, and
    none is hidden while healthy) and no text of ``foreign`` (markers planted in another key's
    conversation) anywhere in the view."""
    _check_call(strategy, history, result, where or "a call under a fault", max_tokens)
    for message in result.messages:
        text = text_of(message)
        leaked = [marker for marker in foreign if marker in text]
        assert not leaked, (
            f"cross-key read: {where}: the view's {type(message).__name__} (id {message.id!r}) "
            f"holds {leaked!r} from another key"
        )


def assert_no_garbage(result: MemoryResult, kind: str, answers: Sequence[str]) -> None:
    """No garbage answer (nor its signature) became a section of the committed summary."""
    for section, text in result.state.sections.items():
        for answer in answers:
            assert not (answer.strip() and answer.strip() in text), (
                f"a garbage answer ({kind}) became summary section {section!r}: {text[:120]!r}"
            )
        for signature in garbage_signatures(kind):
            assert signature not in text, (
                f"summary section {section!r} holds {signature!r} ({kind} garbage): {text[:120]!r}"
            )


# --------------------------------------------------------------------------------------------
# bounding time


def run_bounded(
    fn: Callable[[], Any],
    bound: float,
    *,
    margin: float,
    on_timeout: Callable[[], Any] = list,
    memory: int | None = None,
) -> Any:
    """``fn()`` in a daemon thread; its value, or its exception re-raised. Fails the test when
    it has not finished within ``bound + margin`` seconds, after calling ``on_timeout`` (which
    should release what blocks it) and waiting ``margin`` more for the thread to end.

    ``memory``: the process may map at most this many more bytes while ``fn`` runs (see
    :func:`memory_cap`); a run that allocates without bound then ends with ``MemoryError``.
    When it overruns, the cap stays until the thread has ended (at most ``_MAX_HANG`` s), so it
    never goes on allocating without one."""
    box: dict[str, Any] = {}

    def work() -> None:
        try:
            box["value"] = fn()
        except BaseException as error:  # delivered to the test below
            box["error"] = error

    worker = threading.Thread(target=work, name="fault-scenario", daemon=True)
    with memory_cap(memory) if memory is not None else _nothing():
        worker.start()
        worker.join(bound + margin)
        overran = worker.is_alive()
        if overran:
            on_timeout()
            worker.join(margin if memory is None else _MAX_HANG)
    if overran:
        detail = f" then {type(box['error']).__name__}" if "error" in box else ""
        raise AssertionError(
            f"hang: still running after {bound + margin:g} s (stated bound {bound:g} s + margin "
            f"{margin:g} s){detail}"
        )
    if "error" in box:
        raise box["error"]
    return box.get("value")


@contextmanager
def _nothing() -> Iterator[None]:
    yield


@contextmanager
def memory_cap(extra_bytes: int = 2**30) -> Iterator[None]:
    """The process may map at most ``extra_bytes`` more address space while the block runs
    (``RLIMIT_AS``): a fault that makes the package allocate without bound (a stored number
    read as a count of things to build) fails the test with ``MemoryError`` instead of taking
    the machine down. The limit is restored afterwards."""
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    with open("/proc/self/statm") as statm:
        mapped = int(statm.read().split()[0]) * resource.getpagesize()
    limit = mapped + extra_bytes
    if hard != resource.RLIM_INFINITY:
        limit = min(limit, hard)
    resource.setrlimit(resource.RLIMIT_AS, (limit, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))


class Timer:
    """Times one call: ``with timer.bounded(bound, margin, what):`` fails when the block took
    longer than ``bound + margin`` seconds; ``timer.longest`` is the longest block seen."""

    def __init__(self) -> None:
        self.longest = 0.0

    def bounded(self, bound: float, margin: float, what: str) -> _Bounded:
        return _Bounded(self, bound, margin, what)


class _Bounded:
    def __init__(self, timer: Timer, bound: float, margin: float, what: str) -> None:
        self.timer, self.bound, self.margin, self.what = timer, bound, margin, what
        self.start = 0.0

    def __enter__(self) -> None:
        self.start = time.monotonic()

    def __exit__(self, *exc: object) -> None:
        took = time.monotonic() - self.start
        self.timer.longest = max(self.timer.longest, took)
        if exc[0] is None:
            assert took <= self.bound + self.margin, (
                f"{self.what} took {took:.2f} s, stated bound {self.bound:g} s "
                f"+ margin {self.margin:g} s"
            )
