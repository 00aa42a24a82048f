"""Fault injection: models that hang, ignore cancellation, answer late or answer garbage; stored
values that are damaged, foreign or stale on every store; clocks that jump both ways.

At every step: a valid view, within budget, nothing lost, no read across keys, and no hang past
a stated bound. Each scenario runs under a watchdog (:func:`faults.run_bounded`), so a hang fails
the test instead of blocking CI, and releases the faulty model when it fires, so the thread it
blocked ends and the next test starts clean. The doubles are in ``faults.py``.

Stated bounds (asserted with :data:`MARGIN` on top, for a loaded CI machine):

* a call whose fold meets a faulty model returns within :data:`CALL_BOUND` (the Summarizer's
  ``timeout`` plus the rest of the call), inline or waiting for a background fold with
  ``fold_wait=None``, sync or async;
* ``flush(timeout=t)`` returns within ``t``;
* a scenario of :data:`TURNS` calls within :data:`SCENARIO_BOUND`.
"""

from __future__ import annotations

import asyncio
import math
import uuid
from collections.abc import Awaitable, Callable, Coroutine, Iterator
from contextlib import contextmanager
from typing import Any
from unittest import mock

import numpy as np
import pybase64
import pytest
from fakes import ScriptedSummarizer
from faults import (
    GARBAGE_KINDS,
    CancelIgnoringModel,
    Damage,
    FaultyModel,
    GarbageModel,
    HangingModel,
    JumpingClock,
    SlowModel,
    Timer,
    assert_no_garbage,
    assert_step_ok,
    damages,
    run_bounded,
)
from hypothesis import HealthCheck, Phase, event, given, settings
from hypothesis import strategies as st
from langchain_core.embeddings import DeterministicFakeEmbedding
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage
from langgraph.store.base import BaseStore
from langgraph.store.memory import InMemoryStore
from stores import postgres_store, sqlite_file_store

from langmem_ext import (
    Compacting,
    MemoryKey,
    MissingKeyError,
    Retrieval,
    Summarizer,
    SummaryBuffer,
    TieredSummary,
    TokenBudget,
)
from langmem_ext.core.result import MemoryResult
from langmem_ext.core.state import MemoryState
from langmem_ext.retrieval import layout as retrieval_module
from langmem_ext.strategies.engine import Strategy
from langmem_ext.strategies.options import FoldPolicy
from langmem_ext.testing import agent_loop

#: the Summarizer's timeout in every model-fault scenario
TIMEOUT = 0.5
#: a call whose fold meets a faulty model returns within this (timeout + the call's own work)
CALL_BOUND = TIMEOUT + 1.0
#: added to every bound: CI machines are loaded (2 cores, other suites running)
MARGIN = 4.0
RETRY_MAX = 30.0
TURNS = 28
#: a scenario: at most a few calls meet the model's timeout (the failed fold, a retry), the
#: other calls take milliseconds
SCENARIO_BOUND = 5 * CALL_BOUND
#: every history an agent sees in a scenario (about 60 messages, folds from about call 8)
HISTORIES = [list(h) for h in agent_loop(60, words=(20, 60), seed=1)]
assert len(HISTORIES) == TURNS

STRATEGIES = ("summary_buffer", "compacting", "tiered", "retrieval")
DRIVERS = ("sync", "async")
MODES = ("inline", "background")


def summarizing(kind: str, model: Any, clock: JumpingClock, mode: str) -> Strategy:
    """A summarizing strategy of ``kind`` over ``model`` (Summarizer ``timeout=TIMEOUT``),
    folding inline or in the background (``prefetch_tokens``, ``fold_wait=None``: the crossing
    call waits for the running fold, which must still end at its deadline)."""
    summarizer = Summarizer(model, timeout=TIMEOUT, max_summary_tokens=150, max_input_tokens=4_000)
    policy: dict[str, Any] = {"clock": clock, "retry_initial": 2.0, "retry_max": RETRY_MAX}
    if mode == "background":
        policy.update(prefetch_tokens=1_000, fold_wait=None)
    options: dict[str, Any] = {"summarizer": summarizer, "policy": FoldPolicy(**policy)}
    if kind == "summary_buffer":
        return SummaryBuffer(1_500, **options)
    if kind == "compacting":
        return Compacting(1_500, **options)
    if kind == "tiered":
        return TieredSummary(1_500, **options)
    assert kind == "retrieval"
    return Retrieval(
        SummaryBuffer(1_500, **options),
        store=InMemoryStore(),
        key=MemoryKey("acme", "ann", "t1"),
        ranking="bm25",
    )


Call = Callable[[list[BaseMessage], MemoryState | None], Awaitable[MemoryResult]]


def caller(strategy: Strategy, driver: str) -> Call:
    """``apply`` or ``aapply`` as one awaitable (the scenario runs on one event loop, as a
    server's calls do)."""

    async def call(history: list[BaseMessage], state: MemoryState | None) -> MemoryResult:
        if driver == "sync":
            return strategy.apply(history, state)
        return await strategy.aapply(history, state)

    return call


def run_scenario(model: FaultyModel, scenario: Callable[[], Coroutine[Any, Any, None]]) -> None:
    """``scenario`` on its own event loop under the watchdog; the model is released at the end
    (and when the watchdog fires), so no thread it blocked outlives the test."""
    try:
        run_bounded(
            lambda: asyncio.run(scenario()),
            SCENARIO_BOUND,
            margin=MARGIN,
            on_timeout=model.clear,
        )
    finally:
        model.clear()


async def fault_then_recovery(
    strategy: Strategy,
    model: FaultyModel,
    clock: JumpingClock,
    driver: str,
    *,
    check: Callable[[MemoryResult], None] = lambda result: None,
) -> None:
    """Calls under the fault until a fold failed (and two more), then the fault clears and the
    clock passes ``retry_max``: every call is checked (:func:`faults.assert_step_ok`, and
    ``check``) and bounded, folds resume, and at the end the summary plus the view cover the
    whole history (nothing lost, health "healthy")."""
    call, timer = caller(strategy, driver), Timer()
    state: MemoryState | None = None
    failed_at: int | None = None
    i = 0
    for i, history in enumerate(HISTORIES):
        with timer.bounded(CALL_BOUND, MARGIN, f"call {i + 1} under the fault"):
            result = await call(history, state)
        assert_step_ok(result, history, strategy, where=f"call {i + 1} under the fault")
        check(result)
        state = result.state
        clock.tick(1.0)
        if failed_at is None and result.report.health != "healthy":
            failed_at = i
            assert result.state.last_error, "a failed fold must say why (state.last_error)"
        if failed_at is not None and i >= failed_at + 2:
            break
    assert model.faulty_calls, f"the model was never asked in {i + 1} calls"
    assert failed_at is not None, (
        f"no fold failed in {i + 1} calls although the model was faulty "
        f"({model.faulty_calls} faulty call(s)): health stayed 'healthy'"
    )
    if strategy.folds_in_background:
        with timer.bounded(1.0, MARGIN, "flush(timeout=1) while the model is faulty"):
            strategy.flush(timeout=1.0)
    model.clear()
    folds = state.folds if state else 0
    clock.tick(RETRY_MAX + 1)
    for j, history in enumerate(HISTORIES[i + 1 :], start=i + 1):
        with timer.bounded(CALL_BOUND, MARGIN, f"call {j + 1} after the fault"):
            result = await call(history, state)
        assert_step_ok(result, history, strategy, where=f"call {j + 1} after the fault")
        check(result)
        state = result.state
        clock.tick(5.0)
    if strategy.folds_in_background:
        assert strategy.flush(timeout=CALL_BOUND + MARGIN) == 0, "a background fold never ended"
        result = await call(HISTORIES[-1], state)
        assert_step_ok(result, HISTORIES[-1], strategy, where="the last call, after flush")
        state = result.state
    assert state is not None and state.folds > folds, "no fold succeeded after the fault cleared"
    assert result.report.health == "healthy" and result.report.not_shown == 0, (
        f"after the fault cleared: health {result.report.health!r}, "
        f"{result.report.not_shown} messages neither folded nor shown ({state.last_error!r})"
    )


# --------------------------------------------------------------------------------------------
# models that hang, ignore cancellation, answer late


def _hanging() -> FaultyModel:
    return HangingModel()


def _cancel_ignoring() -> FaultyModel:
    return CancelIgnoringModel()


def _slow() -> FaultyModel:
    return SlowModel(delay=4 * TIMEOUT)


SLOW_FAULTS = {"hanging": _hanging, "cancel_ignoring": _cancel_ignoring, "slow": _slow}


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("driver", DRIVERS)
@pytest.mark.parametrize("kind", STRATEGIES)
@pytest.mark.parametrize("fault", sorted(SLOW_FAULTS))
def test_faulty_model_every_call_bounded_and_folds_resume(
    fault: str, kind: str, driver: str, mode: str
) -> None:
    """A model that hangs, ignores its cancellation or answers after the timeout: every call
    returns a valid view within budget within CALL_BOUND (a background fold ends at its
    deadline whatever the model does, so the crossing call with ``fold_wait=None`` returns);
    once the model is well again, folds resume and nothing was lost."""
    model = SLOW_FAULTS[fault]()
    clock = JumpingClock()
    strategy = summarizing(kind, model, clock, mode)
    run_scenario(model, lambda: fault_then_recovery(strategy, model, clock, driver))


@pytest.mark.slow
@pytest.mark.parametrize("fault", ["hanging", "cancel_ignoring"])
def test_hung_background_folds_never_starve_another_strategys_folds(fault: str) -> None:
    """Five strategies whose models hang start background folds from ``aapply`` (more than the
    shared pool has workers); a healthy strategy in the same process still gets its background
    fold done within the stated bound."""
    hung = [SLOW_FAULTS[fault]() for _ in range(5)]
    healthy = HangingModel()
    healthy.clear()

    async def scenario() -> None:
        for model in hung:
            strategy = summarizing("summary_buffer", model, JumpingClock(), "background")
            state: MemoryState | None = None
            for history in HISTORIES[:12]:  # past prefetch_tokens: a fold starts
                state = (await strategy.aapply(history, state)).state
        await asyncio.sleep(TIMEOUT * 2)  # every hung job is past its deadline
        clock = JumpingClock()
        strategy = summarizing("summary_buffer", healthy, clock, "background")
        state = None
        timer = Timer()
        for i, history in enumerate(HISTORIES):
            with timer.bounded(CALL_BOUND, MARGIN, f"healthy strategy, call {i + 1}"):
                result = await strategy.aapply(history, state)
            assert_step_ok(result, history, strategy, where=f"healthy strategy, call {i + 1}")
            state = result.state
            clock.tick(1.0)
        assert state is not None and state.folds >= 1, "the healthy strategy never folded"

    def release() -> None:
        for model in hung:
            model.clear()

    try:
        run_bounded(  # each hung strategy: at most two calls meet the timeout, then the rest
            lambda: asyncio.run(scenario()),
            len(hung) * 2 * CALL_BOUND + SCENARIO_BOUND,
            margin=MARGIN,
            on_timeout=release,
        )
    finally:
        release()


# --------------------------------------------------------------------------------------------
# garbage answers


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("driver", DRIVERS)
@pytest.mark.parametrize("kind", STRATEGIES)
@pytest.mark.parametrize("garbage", GARBAGE_KINDS)
def test_garbage_answer_is_a_failed_fold_never_the_summary(
    garbage: str, kind: str, driver: str, mode: str
) -> None:
    """Degenerate repetition, echoed transcript markup or instructions, a refusal, an empty
    answer: each is rejected before it is committed (a failed fold, the reason in
    ``state.last_error``, health not "healthy"), never becomes a summary section, and folds
    resume once the model answers well; nothing lost throughout."""
    model = GarbageModel(kind=garbage)
    clock = JumpingClock()
    strategy = summarizing(kind, model, clock, mode)
    run_scenario(
        model,
        lambda: fault_then_recovery(
            strategy,
            model,
            clock,
            driver,
            check=lambda result: assert_no_garbage(result, garbage, model.answers),
        ),
    )


# --------------------------------------------------------------------------------------------
# clocks that jump


def _failing_once(strategy: Strategy) -> ScriptedSummarizer:
    """The strategy's summarizer replaced: the first fold fails, every later one succeeds."""
    scripted = ScriptedSummarizer([True] + [False] * 1_000)
    strategy.summarizer = scripted  # type: ignore[assignment]
    return scripted


def _until_failed(
    strategy: Strategy, clock: JumpingClock, scripted: ScriptedSummarizer
) -> tuple[int, MemoryState]:
    state: MemoryState | None = None
    for i, history in enumerate(HISTORIES):
        result = strategy.apply(history, state)
        assert_step_ok(result, history, strategy, where=f"call {i + 1}")
        state = result.state
        if scripted.calls:
            assert state.health == "retrying", state
            return i, state
        clock.tick(1.0)
    raise AssertionError("no fold was attempted")


@pytest.mark.parametrize("kind", STRATEGIES)
def test_clock_stepping_back_after_a_failed_fold_retries_within_retry_max(kind: str) -> None:
    """The clock steps back from 10,000 to 0 (NTP, a VM resumed) right after a failed fold: the
    fold is retried within ``retry_max`` seconds of the new clock, not when the old clock's
    ``retry_at`` comes round again; every call meanwhile is a valid view."""
    clock = JumpingClock(10_000.0)
    strategy = summarizing(kind, HangingModel(), clock, "inline")
    scripted = _failing_once(strategy)
    i, state = _until_failed(strategy, clock, scripted)
    clock.jump(0.0)
    tick = 5.0
    for j, history in enumerate(HISTORIES[i + 1 :], start=i + 1):
        clock.tick(tick)
        result = strategy.apply(history, state)
        assert_step_ok(result, history, strategy, where=f"call {j + 1}, clock {clock.now:g}")
        state = result.state
        if scripted.calls > 1:
            break
    assert scripted.calls > 1, (
        f"no retry by clock {clock.now:g} (retry_max {RETRY_MAX:g} s); retry_at is "
        f"{state.retry_at!r}"
    )
    assert clock.now <= RETRY_MAX + tick, f"retried only at clock {clock.now:g}"
    assert state.health == "healthy" and state.folds >= 1


@pytest.mark.parametrize("kind", STRATEGIES)
def test_clock_jumping_forward_after_a_failed_fold_retries_at_once(kind: str) -> None:
    """The clock jumps far forward after a failed fold: the next call retries (the backoff has
    passed), and the result is healthy and valid."""
    clock = JumpingClock(10_000.0)
    strategy = summarizing(kind, HangingModel(), clock, "inline")
    scripted = _failing_once(strategy)
    i, state = _until_failed(strategy, clock, scripted)
    clock.jump(10_000.0 + 86_400.0 * 365)
    history = HISTORIES[i + 1]
    result = strategy.apply(history, state)
    assert_step_ok(result, history, strategy, where="the call after the jump forward")
    assert scripted.calls == 2 and result.state.health == "healthy"


#: no shrinking: a failing run of 28 calls shrinks for minutes; the failure names the call
NO_SHRINK = (Phase.explicit, Phase.reuse, Phase.generate)


@settings(
    max_examples=15,
    deadline=None,
    phases=NO_SHRINK,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(
    jumps=st.lists(
        st.one_of(
            st.floats(-1e7, 1e7, allow_nan=False),
            st.sampled_from((-10_000.0, 0.0, 1.0, 60.0, 1e9)),
        ),
        min_size=TURNS,
        max_size=TURNS,
    ),
    failures=st.lists(st.booleans(), min_size=1, max_size=6),
)
def test_clock_jumping_both_ways_keeps_views_valid_and_retry_at_within_retry_max(
    jumps: list[float], failures: list[bool]
) -> None:
    """Whatever the clock does between calls (steps back, forward, stands still) and whichever
    folds fail: every call is a valid view within budget with nothing lost, and ``retry_at`` is
    never more than ``retry_max`` after the clock."""
    clock = JumpingClock(1_700_000_000.0)
    strategy = summarizing("summary_buffer", HangingModel(), clock, "inline")
    strategy.summarizer = ScriptedSummarizer(failures)  # type: ignore[assignment]
    state: MemoryState | None = None
    for i, (history, jump) in enumerate(zip(HISTORIES, jumps, strict=True)):
        clock.jump(max(0.0, clock.now + jump))
        result = strategy.apply(history, state)
        assert_step_ok(result, history, strategy, where=f"call {i + 1}, clock {clock.now:g}")
        state = result.state
        if state.retry_at is not None:
            event("a retry pending")
            assert state.retry_at - clock.now <= RETRY_MAX, (
                f"call {i + 1}: retry_at {state.retry_at:g} is {state.retry_at - clock.now:g} s "
                f"after the clock ({clock.now:g}); retry_max is {RETRY_MAX:g}"
            )


# --------------------------------------------------------------------------------------------
# stored values: damaged, foreign, stale; keys that must not leak

ALICE_SECRET = "alice locker code 5531"
BOB_SECRET = "bob locker code 8820"
#: index blocks every few turns, so a short conversation has some to damage
SMALL_BLOCK = 4
EMBEDDINGS = DeterministicFakeEmbedding(size=8)
#: the calls that read a damaged store (three Retrievals, a few store round trips each)
STORE_BOUND = 5.0
#: what reading a damaged store may allocate (a stored number read as a count of things to
#: build fails with MemoryError instead of taking the machine down)
MEMORY = 2**29


def conversation(secret: str, seed: int, at: int = 1) -> list[list[BaseMessage]]:
    """The histories of a short agent loop, the first human message from index ``at`` on
    holding ``secret``."""
    histories = [list(h) for h in agent_loop(36, words=(20, 60), seed=seed)]
    last = histories[-1]
    i = next(j for j in range(at, len(last)) if isinstance(last[j], HumanMessage))
    planted = HumanMessage(f"Remember: my {secret}. {last[i].content}", id=last[i].id)
    return [[*h[:i], planted, *h[i + 1 :]] if len(h) > i else h for h in histories]


def retrieval(
    store: BaseStore, key: MemoryKey, scope: str = "thread", retrieved: int = 250
) -> Retrieval:
    return Retrieval(
        TokenBudget(700),
        store=store,
        key=key,
        scope=scope,  # type: ignore[arg-type]
        embeddings=EMBEDDINGS,
        max_retrieved_tokens=retrieved,
    )


def write(strategy: Retrieval, histories: list[list[BaseMessage]]) -> MemoryState:
    state: MemoryState | None = None
    for i, history in enumerate(histories):
        result = strategy.apply(history, state)
        assert_step_ok(result, history, strategy, where=f"writing call {i + 1}")
        state = result.state
    assert state is not None
    return state


def asking(history: list[BaseMessage]) -> list[BaseMessage]:
    """The history plus a question that makes Retrieval search for the planted secret."""
    return [
        *history,
        AIMessage("Done.", id=f"done-{len(history)}"),
        HumanMessage("What was my locker code again?", id=f"ask-{len(history)}"),
    ]


def stored_items(store: BaseStore, prefix: tuple[str, ...]) -> list[Any]:
    out = []
    for namespace in store.list_namespaces(prefix=prefix, limit=1_000):
        out.extend(store.search(namespace, limit=10_000))
    return out


@contextmanager
def small_blocks() -> Iterator[None]:
    with mock.patch.object(retrieval_module, "BLOCK", SMALL_BLOCK):
        yield


@contextmanager
def memory_store() -> Iterator[BaseStore]:
    yield InMemoryStore()


def read_alice(
    store: BaseStore,
    key: MemoryKey,
    scope: str,
    question: list[BaseMessage],
    state: MemoryState,
    writer: Retrieval | None = None,
    embeddings: Any = None,
) -> None:
    """Alice's thread served after her store was tampered with: by a new process (a fresh
    Retrieval) with her checkpointed state, read-only first (``view`` writes nothing, so the
    damage is still there when it reads) then ``apply``; and by ``writer``, which has its
    in-process index. Each a valid view within budget, nothing lost, nothing of Bob's."""

    def fresh() -> Retrieval:
        made = retrieval(store, key, scope)
        if embeddings is not None:
            made = Retrieval(
                TokenBudget(700),
                store=store,
                key=key,
                scope=scope,  # type: ignore[arg-type]
                embeddings=embeddings,
                max_retrieved_tokens=250,
            )
        return made

    reader = fresh()
    result = reader.view(question, state)
    assert_step_ok(result, question, reader, where="a new process, view", foreign=[BOB_SECRET])
    reader = fresh()
    result = reader.apply(question, state)
    assert_step_ok(result, question, reader, where="a new process, apply", foreign=[BOB_SECRET])
    if writer is not None:
        result = writer.apply(question, state)
        assert_step_ok(result, question, writer, where="the writer", foreign=[BOB_SECRET])


def damage_one_stored_value(store: BaseStore, data: st.DataObject) -> None:
    """Alice and Bob (one tenant) each write a conversation; one field of one of Alice's stored
    values (a turn, an index block, the tail, a mark) is damaged; then a fresh Retrieval (a new
    process, no state) and the writer (with its state) continue Alice's thread, and a fresh
    Retrieval serves Bob: each call a valid view within budget, nothing lost (every stored turn
    is still there), and no text of the other user, all within the stated bound."""
    tenant = f"t{uuid.uuid4().hex[:10]}"
    alice, bob = MemoryKey(tenant, "alice", "t1"), MemoryKey(tenant, "bob", "t1")
    scope = data.draw(st.sampled_from(("thread", "user")), label="scope")
    alice_calls, bob_calls = conversation(ALICE_SECRET, 3), conversation(BOB_SECRET, 4)
    writer = retrieval(store, alice, scope)
    alice_state = write(writer, alice_calls)
    write(retrieval(store, bob, scope), bob_calls)
    items = stored_items(store, ("langmem_ext",))
    mine = [it for it in items if "alice" in it.namespace and tenant in it.namespace]
    kinds = sorted({it.namespace[1] for it in mine})
    assert "turn_blocks" in kinds and "turns" in kinds, kinds
    kind = data.draw(st.sampled_from(kinds), label="kind")
    target = data.draw(
        st.sampled_from([it for it in mine if it.namespace[1] == kind]), label="item"
    )
    damage: Damage = data.draw(damages(target.value), label="damage")
    turns_before = {(it.namespace, it.key) for it in mine if it.namespace[1] == "turns"}
    try:
        store.put(target.namespace, target.key, damage.apply(target.value), index=False)
    except Exception as error:  # the backend cannot hold this value at all (NaN in jsonb ...)
        event(f"the store refused the damaged value: {type(error).__name__}")
        return
    event(f"damaged a {kind} item")

    def serve() -> None:
        question = asking(alice_calls[-1])
        read_alice(store, alice, scope, question, alice_state, writer)
        question = asking(bob_calls[-1])
        strategy = retrieval(store, bob, scope)
        result = strategy.apply(question, None)
        assert_step_ok(result, question, strategy, where="Bob", foreign=[ALICE_SECRET])

    run_bounded(serve, STORE_BOUND, margin=MARGIN * 2, memory=MEMORY)
    after = stored_items(store, ("langmem_ext", "turns", tenant))
    missing = turns_before - {(it.namespace, it.key) for it in after}
    assert not missing, f"stored turns lost: {sorted(missing)[:3]}"


STORE_SETTINGS = settings(
    max_examples=12,
    deadline=None,
    phases=NO_SHRINK,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)


@STORE_SETTINGS
@given(data=st.data())
def test_damaged_value_on_in_memory_store_never_breaks_retrieval(data: st.DataObject) -> None:
    with small_blocks(), memory_store() as store:
        damage_one_stored_value(store, data)


@pytest.mark.slow
@STORE_SETTINGS
@given(data=st.data())
def test_damaged_value_on_sqlite_store_never_breaks_retrieval(data: st.DataObject) -> None:
    with small_blocks(), sqlite_file_store() as store:
        damage_one_stored_value(store, data)


@pytest.mark.slow
@STORE_SETTINGS
@given(data=st.data())
def test_damaged_value_on_postgres_store_never_breaks_retrieval(
    pg_schema_dsn: str, data: st.DataObject
) -> None:
    with small_blocks(), postgres_store(pg_schema_dsn) as store:
        damage_one_stored_value(store, data)


def _vectors_like(vectors: Any, values: float | None = None, dims: Any = None) -> dict[str, Any]:
    """A turn's stored vectors with the same data size: other ``dims``, or every value set."""
    data = pybase64.b64decode(vectors["f16"])
    if values is not None:
        data = np.full(len(data) // 2, values, dtype="<f2").tobytes()
    return {
        "dims": vectors["dims"] if dims is None else dims,
        "f16": pybase64.b64encode(data).decode("ascii"),
    }


#: the damaged turns seen in the field, each pinned (the property test above finds others)
KNOWN_DAMAGES: dict[str, Callable[[dict[str, Any]], Damage]] = {
    "seq 'x'": lambda value: Damage("seq", "x"),
    "seq NaN": lambda value: Damage("seq", math.nan),
    "seq huge": lambda value: Damage("seq", 10**12),
    "NaN vectors": lambda value: Damage("vectors", _vectors_like(value["vectors"], math.nan)),
    "inf vectors": lambda value: Damage("vectors", _vectors_like(value["vectors"], math.inf)),
    "dims that divide the data": lambda value: Damage(
        "vectors", _vectors_like(value["vectors"], dims=value["vectors"]["dims"] // 2)
    ),
    "dims=True": lambda value: Damage("vectors", _vectors_like(value["vectors"], dims=True)),
    "text not a string": lambda value: Damage("text", 12),
    "parts not a list": lambda value: Damage("parts", {"a": 1}),
}


@pytest.mark.parametrize("name", sorted(KNOWN_DAMAGES))
def test_retrieval_known_damaged_turn_never_breaks_a_new_process(name: str) -> None:
    """One stored turn of Alice's thread damaged as seen in the field: a new process (fresh
    Retrieval, her checkpointed state) and the writer each get a valid view within budget
    within the stated bound, and nothing of Bob's."""
    store = InMemoryStore()
    key = MemoryKey(f"t{uuid.uuid4().hex[:10]}", "alice", "t1")
    calls = conversation(ALICE_SECRET, 3)
    with small_blocks():
        writer = retrieval(store, key)
        state = write(writer, calls)
        namespace = ("langmem_ext", "turns", key.tenant, key.user, key.session)
        items = store.search(namespace, limit=100)
        target = items[len(items) // 2]
        damage = KNOWN_DAMAGES[name](target.value)
        store.put(namespace, target.key, damage.apply(target.value), index=False)
        question = asking(calls[-1])
        run_bounded(
            lambda: read_alice(store, key, "thread", question, state, writer),
            STORE_BOUND,
            margin=MARGIN * 2,
            memory=MEMORY,
        )
        assert {it.key for it in store.search(namespace, limit=100)} >= {it.key for it in items}


@pytest.mark.parametrize(
    "backend", ["memory", pytest.param("sqlite", marks=pytest.mark.slow), "postgres"]
)
def test_retrieval_stale_marks_tail_and_blocks_never_hide_a_newer_turn(
    backend: str, request: pytest.FixtureRequest
) -> None:
    """The thread's mark, tail and index blocks put back as they were half-way through (a
    restored backup, a replica that lags, a writer that crashed between writes): a new
    process with the checkpointed state still finds the turn written after them (nothing
    hidden), and every view is valid and within budget within the stated bound."""
    key = MemoryKey(f"t{uuid.uuid4().hex[:10]}", "alice", "t1")
    calls = conversation(ALICE_SECRET, 3, at=20)  # a turn written after the half-way point
    half = len(calls) // 2
    with small_blocks(), open_store(backend, request) as store:
        writer = retrieval(store, key, retrieved=350)  # room for the planted turn
        write(writer, calls[:half])
        caches = [
            it
            for it in stored_items(store, ("langmem_ext",))
            if key.tenant in it.namespace and it.namespace[1] in ("turn_marks", "turn_blocks")
        ]
        assert caches
        state = write(writer, calls)
        for it in caches:  # the stale copies back
            store.put(it.namespace, it.key, it.value, index=False)
        question = asking(calls[-1])
        reader = retrieval(store, key, retrieved=350)
        result = run_bounded(
            lambda: reader.view(question, state), STORE_BOUND, margin=MARGIN * 2, memory=MEMORY
        )
        assert_step_ok(result, question, reader, where="a new process over stale caches")
        shown = "\n".join(str(m.content) for m in result.messages)
        assert ALICE_SECRET in shown, "the turn written after the stale caches was not found"


STORES = {"memory": memory_store, "sqlite": sqlite_file_store}


def open_store(name: str, request: pytest.FixtureRequest) -> Any:
    if name == "postgres":
        return postgres_store(request.getfixturevalue("pg_schema_dsn"))
    return STORES[name]()


@pytest.mark.parametrize("backend", ["memory", "sqlite", "postgres"])
def test_retrieval_survives_a_changed_embedding_model(
    backend: str, request: pytest.FixtureRequest
) -> None:
    """Turns stored with another embedding model's vectors (other dims): a Retrieval with the
    new model gives a valid view within budget and loses nothing (it re-embeds or skips the
    foreign vectors, never crashes the turn)."""
    key = MemoryKey(f"t{uuid.uuid4().hex[:10]}", "alice", "t1")
    calls = conversation(ALICE_SECRET, 3)
    with small_blocks(), open_store(backend, request) as store:
        state = write(retrieval(store, key), calls)
        question = asking(calls[-1])
        run_bounded(
            lambda: read_alice(
                store,
                key,
                "thread",
                question,
                state,
                embeddings=DeterministicFakeEmbedding(size=16),
            ),
            STORE_BOUND,
            margin=MARGIN * 2,
        )


@pytest.mark.parametrize(
    "backend",
    [
        "memory",
        pytest.param("sqlite", marks=pytest.mark.slow),
        pytest.param("postgres", marks=pytest.mark.slow),
    ],
)
def test_retrieval_mark_with_a_huge_next_is_bounded(
    backend: str, request: pytest.FixtureRequest
) -> None:
    """A thread's mark saying ``next=10**12`` (damaged, or written by a stale numbering): a
    fresh Retrieval's work is bounded by the stored data, not by that number; the call returns a
    valid view within the stated bound."""
    key = MemoryKey(f"t{uuid.uuid4().hex[:10]}", "alice", "t1")
    calls = conversation(ALICE_SECRET, 3)
    with small_blocks(), open_store(backend, request) as store:
        state = write(retrieval(store, key), calls)
        namespace = ("langmem_ext", "turn_marks", key.tenant, key.user)
        mark = store.get(namespace, key.session)
        assert mark is not None
        store.put(namespace, key.session, {**mark.value, "next": 10**12}, index=False)
        question = asking(calls[-1])
        run_bounded(
            lambda: read_alice(store, key, "thread", question, state),
            STORE_BOUND,
            margin=MARGIN * 2,
            memory=MEMORY,
        )


def test_retrieval_user_scope_refuses_an_explicit_key_without_a_user() -> None:
    """``scope="user"`` with an explicit key that names only the session: refused (naming the
    part), never a shared default user whose memory every such caller reads."""
    store = InMemoryStore()
    with pytest.raises(MissingKeyError, match="user"):
        strategy = Retrieval(
            TokenBudget(700), store=store, key=MemoryKey(session="s1"), scope="user"
        )
        strategy.apply([HumanMessage("hello there, what is my locker code?", id="h1")])


def test_retrieval_explicit_session_keys_never_read_each_other() -> None:
    """Alice and Bob each with an explicit key naming only their session, ``scope="user"``:
    if the keys are accepted at all, Bob's view never holds Alice's text."""
    store = InMemoryStore()
    alice_calls, bob_calls = conversation(ALICE_SECRET, 3), conversation(BOB_SECRET, 4)
    try:
        alice = retrieval(store, MemoryKey(session="alice-session"), "user")
        write(alice, alice_calls)
        bob = retrieval(store, MemoryKey(session="bob-session"), "user")
        question = asking(bob_calls[-1])
        result = bob.apply(question, None)
    except MissingKeyError:
        return  # failing closed is the other acceptable answer
    assert_step_ok(result, question, bob, where="Bob", foreign=[ALICE_SECRET])


def test_fault_doubles_behave_as_documented() -> None:
    """The doubles themselves: garbage of each kind is what it says, a cleared model answers a
    healthy summary, the clock goes both ways."""
    prompt = [HumanMessage("Summarize.\n<transcript>\nuser: hi\n</transcript>")]
    model = GarbageModel(kind="repetition")
    assert model.invoke(prompt, max_tokens=50).content.count("[b]") == 50
    model.clear()
    assert "[b]" not in str(model.invoke(prompt).content)
    for garbage in GARBAGE_KINDS:
        text = str(GarbageModel(kind=garbage).invoke(prompt).content)
        assert (text == "") == (garbage == "empty")
    clock = JumpingClock(10.0)
    clock.tick(5)
    clock.jump(0)
    assert clock() == 0.0 and clock.history == [10.0, 15.0, 0.0]
    with pytest.raises(ValueError, match="finite"):
        clock.jump(math.inf)
    assert Damage("seq", 1).apply({"seq": 0, "text": "x"}) == {"seq": 1, "text": "x"}
