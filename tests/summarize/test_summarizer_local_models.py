"""A slow in-process model (llama.cpp and the like) is never run twice at once: a call abandoned
at its timeout keeps running in its thread, and the next call on the same model object waits for
it within its own timeout (then fails: a failed fold) instead of entering the model beside it."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

import pytest
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from pydantic import ConfigDict

from langmem_ext import Summarizer, SummarizerError
from langmem_ext.strategies import SummaryBuffer
from langmem_ext.summarize.extractive import ExtractiveSummarizer
from langmem_ext.summarize.summarizer import DEFAULT_TIMEOUT

SUMMARY = "The user asked about the Berlin invoice 4711; it is paid."
MESSAGES: list[BaseMessage] = [
    HumanMessage("Is the Berlin invoice 4711 paid?", id="h1"),
    AIMessage("Yes, invoice 4711 was paid on Monday.", id="a1"),
]


class Probe:
    """Counts who is inside the model, and the most at once; ``gate`` holds calls inside."""

    def __init__(self) -> None:
        self.gate = threading.Event()
        self.lock = threading.Lock()
        self.inside = 0
        self.most_inside = 0
        self.entries = 0

    def enter(self) -> None:
        with self.lock:
            self.inside += 1
            self.entries += 1
            self.most_inside = max(self.most_inside, self.inside)

    def leave(self) -> None:
        with self.lock:
            self.inside -= 1

    def wait_until_idle(self, seconds: float = 10.0) -> None:
        deadline = time.monotonic() + seconds
        while self.inside and time.monotonic() < deadline:
            time.sleep(0.01)
        assert self.inside == 0, "the abandoned call never finished"


class LocalChatModel(BaseChatModel):
    """A sync-only chat model like ChatLlamaCpp: ``_generate`` only, a ``client`` that must not
    run two calls at once; each call blocks until ``probe.gate`` is set."""

    model_config = ConfigDict(arbitrary_types_allowed=True)
    probe: Any
    client: Any = None
    max_tokens: int = 256

    @property
    def _llm_type(self) -> str:
        return "local-fake"

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: Any = None,
        **kwargs: Any,
    ) -> ChatResult:
        self.probe.enter()
        try:
            self.probe.gate.wait(30)
            return ChatResult(generations=[ChatGeneration(message=AIMessage(SUMMARY))])
        finally:
            self.probe.leave()


class Client:
    """Stands for a llama.cpp ``Llama`` object."""


def local(probe: Probe, **kwargs: Any) -> LocalChatModel:
    return LocalChatModel(probe=probe, **kwargs)


def summarizer(model: Any, **kwargs: Any) -> Summarizer:
    kwargs.setdefault("timeout", 0.2)
    kwargs.setdefault("max_attempts", 1)
    made = Summarizer(model, max_summary_tokens=100, retry_initial_wait=0.0, **kwargs)
    made.sleep = lambda seconds: None  # type: ignore[method-assign]
    return made


@pytest.mark.parametrize("mode", ["sync", "async"])
async def test_summarizer_never_enters_a_local_model_beside_an_abandoned_call(mode: str) -> None:
    probe = Probe()
    folding = summarizer(local(probe))

    async def fold() -> dict[str, str]:
        if mode == "sync":
            return folding.fold({}, MESSAGES)
        return await folding.afold({}, MESSAGES)

    with pytest.raises(SummarizerError, match="TimeoutError"):
        await fold()
    assert probe.inside == 1  # abandoned, still running

    with pytest.raises(SummarizerError, match="ModelBusyError: the summarizer model is still busy"):
        await fold()
    assert probe.entries == 1  # the second call never entered the model

    probe.gate.set()
    probe.wait_until_idle()
    assert await fold() == {"conversation": SUMMARY}
    assert probe.most_inside == 1 and probe.entries == 2


def test_a_separate_model_object_is_not_held_by_an_abandoned_call() -> None:
    probe = Probe()
    with pytest.raises(SummarizerError, match="TimeoutError"):
        summarizer(local(probe)).fold({}, MESSAGES)
    patient = summarizer(local(probe), timeout=20)  # another Summarizer, another model object...
    # ... but not the same client: a separate model object is not locked by the first's call
    threading.Timer(0.3, probe.gate.set).start()
    assert patient.fold({}, MESSAGES) == {"conversation": SUMMARY}
    probe.wait_until_idle()


def test_summarizer_waits_for_the_abandoned_call_then_runs() -> None:
    probe = Probe()
    model = local(probe)
    with pytest.raises(SummarizerError, match="TimeoutError"):
        summarizer(model).fold({}, MESSAGES)
    threading.Timer(0.3, probe.gate.set).start()
    assert summarizer(model, timeout=20).fold({}, MESSAGES) == {"conversation": SUMMARY}
    assert probe.most_inside == 1 and probe.entries == 2


def test_summarizer_locks_the_shared_client_of_model_copies() -> None:
    probe = Probe()
    client = Client()
    first, copy = local(probe, client=client), local(probe, client=client)
    with pytest.raises(SummarizerError, match="TimeoutError"):
        summarizer(first).fold({}, MESSAGES)
    with pytest.raises(SummarizerError, match="ModelBusyError"):
        summarizer(copy).fold({}, MESSAGES)
    assert probe.entries == 1
    probe.gate.set()
    probe.wait_until_idle()
    assert summarizer(copy).fold({}, MESSAGES) == {"conversation": SUMMARY}


def test_a_call_that_gave_up_waiting_never_starts_later() -> None:
    probe = Probe()
    model = local(probe)
    with pytest.raises(SummarizerError, match="TimeoutError"):
        summarizer(model).fold({}, MESSAGES)
    with pytest.raises(SummarizerError, match="ModelBusyError"):
        summarizer(model, max_attempts=3).fold({}, MESSAGES)
    probe.gate.set()
    probe.wait_until_idle()
    time.sleep(0.3)  # room for a queued call to (wrongly) start: none may
    assert probe.entries == 1


def test_strategy_with_a_busy_local_model_fails_the_fold_and_loses_nothing() -> None:
    probe = Probe()
    model = local(probe)
    with pytest.raises(SummarizerError):
        summarizer(model).fold({}, MESSAGES)
    strategy = SummaryBuffer(600, summarizer=summarizer(model))
    history: list[BaseMessage] = []
    for i in range(30):
        history.append(
            HumanMessage(f"question {i} about invoice {4000 + i} in Berlin?", id=f"h{i}")
        )
        history.append(
            AIMessage(f"answer {i}: invoice {4000 + i} is paid, {'ok ' * 20}", id=f"a{i}")
        )
    history.append(HumanMessage("and the total?", id="last"))
    result = strategy.apply(history)
    assert result.state.health != "healthy" and result.state.folded == 0
    assert result.state.last_error is not None and "ModelBusyError" in result.state.last_error
    assert probe.entries == 1
    probe.gate.set()
    probe.wait_until_idle()


def test_exclusive_is_on_for_sync_only_chat_models_only() -> None:
    assert Summarizer(local(Probe())).exclusive is True
    assert Summarizer(ExtractiveSummarizer()).exclusive is False  # has its own async
    assert Summarizer(lambda prompt: "x").exclusive is False  # a callable: its author says
    assert Summarizer(lambda prompt: "x", exclusive=True).exclusive is True
    assert Summarizer(local(Probe()), exclusive=False).exclusive is False
    with pytest.raises(TypeError, match="exclusive must be True, False or None"):
        Summarizer(lambda prompt: "x", exclusive="yes")  # type: ignore[arg-type]


def test_an_exclusive_callable_is_not_entered_twice() -> None:
    probe = Probe()

    def model(prompt: list[BaseMessage]) -> str:
        probe.enter()
        try:
            probe.gate.wait(30)
            return SUMMARY
        finally:
            probe.leave()

    with pytest.raises(SummarizerError, match="TimeoutError"):
        summarizer(model, exclusive=True).fold({}, MESSAGES)
    with pytest.raises(SummarizerError, match="ModelBusyError"):
        summarizer(model, exclusive=True).fold({}, MESSAGES)
    probe.gate.set()
    probe.wait_until_idle()
    assert probe.entries == 1


def test_exclusive_calls_without_timeout_run_one_at_a_time() -> None:
    probe = Probe()
    model = local(probe)
    folding = summarizer(model, timeout=None)
    results: list[dict[str, str]] = []
    threads = [
        threading.Thread(target=lambda: results.append(folding.fold({}, MESSAGES)))
        for _ in range(3)
    ]
    for thread in threads:
        thread.start()
    threading.Timer(0.2, probe.gate.set).start()
    for thread in threads:
        thread.join(10)
    assert results == [{"conversation": SUMMARY}] * 3
    assert probe.most_inside == 1


def test_summarizer_docs_tell_local_models_to_raise_the_timeout() -> None:
    doc = Summarizer.__doc__ or ""
    assert DEFAULT_TIMEOUT == 60.0
    assert "Local models" in doc and "timeout=None" in doc and "386 s" in doc


async def test_async_fold_of_a_sync_only_model_does_not_use_the_loops_executor() -> None:
    # asyncio.run waits for the default executor at exit: a hung sync-only model must not be in it
    probe = Probe()
    folding = summarizer(local(probe))
    loop = asyncio.get_running_loop()
    with pytest.raises(SummarizerError, match="TimeoutError"):
        await folding.afold({}, MESSAGES)
    executor = getattr(loop, "_default_executor", None)
    assert executor is None or not executor._threads
    probe.gate.set()
    probe.wait_until_idle()
