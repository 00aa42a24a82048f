"""The summarizer's edges: one call flow with two thin drivers, one of each text
helper (prefix search, clipper, transcript renderer), one exception hierarchy, a public counter
base, and no dead code."""

from __future__ import annotations

import ast
import asyncio
import inspect
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage

import langmem_ext
from langmem_ext import errors
from langmem_ext.core import keys, messages
from langmem_ext.core import text as _text
from langmem_ext.core import transcript as _transcript
from langmem_ext.core.keys import MemoryKey
from langmem_ext.core.messages import CLIP_MARKER, clip_chars, clip_marker, clip_message
from langmem_ext.core.text import clip_text, last_fitting, longest_prefix_within
from langmem_ext.core.tokens import TokenCounter
from langmem_ext.counting import cache as tokens
from langmem_ext.counting.cache import CachedCounter
from langmem_ext.counting.local import ApproximateCounter
from langmem_ext.counting.resolve import as_counter
from langmem_ext.errors import SummarizerError
from langmem_ext.summarize import summarizer as summarize
from langmem_ext.summarize.flow import Sleep
from langmem_ext.summarize.summarizer import Summarizer

PACKAGE = Path(langmem_ext.__file__).parent


def _module_path(name: str) -> Path:
    """The file of the package module called ``name``, in whichever layer it lives (the core's
    modules lost their leading underscore when they moved into ``core/``)."""
    found = list(PACKAGE.rglob(f"{name}.py"))
    if not found and name.startswith("_"):
        found = [PACKAGE / "core" / f"{name[1:]}.py"]
    (path,) = found
    return path


MODULES = (
    *("summarizer", "calls", "flow", "prompts"),
    *("messages", "tokens", "errors", "_fences", "_identity", "keys", "_text"),
)


class Scripted:
    """A summarizer model as a callable: answers (or raises) from a script, in order."""

    def __init__(self, *script: str | Exception) -> None:
        self.script = list(script)
        self.calls = 0

    def __call__(self, prompt: Sequence[BaseMessage]) -> str:
        self.calls += 1
        step = self.script.pop(0) if self.script else "summary"
        if isinstance(step, Exception):
            raise step
        return step


def _summarizer(model: Any, **kwargs: Any) -> Summarizer:
    kwargs.setdefault("max_attempts", 2)
    summarizer = Summarizer(model, timeout=None, **kwargs)
    summarizer.sleep = lambda seconds: None

    async def no_wait(seconds: float) -> None:
        return None

    summarizer.asleep = no_wait
    return summarizer


# --------------------------------------------------------------------------------------------
# one flow, two drivers


def test_summarizer_call_is_one_flow_with_two_thin_drivers() -> None:
    # the retries, the backoff and the fallback are written once, as a flow of I/O steps; the
    # drivers only perform them (before: _call/_acall and _attempts/_aattempts, twice each)
    for twin in ("_call", "_acall", "_attempts", "_aattempts"):
        assert not hasattr(Summarizer, twin)
    backup = _summarizer(Scripted("from the backup"))
    primary = _summarizer(Scripted(TimeoutError("slow"), TimeoutError("slow")), fallback=backup)
    flow = primary._fold_flow({}, [HumanMessage("hello")])
    kinds: list[tuple[str, Summarizer]] = []
    reply: Any = None
    try:
        while True:
            step = flow.throw(reply) if isinstance(reply, Exception) else flow.send(reply)
            if isinstance(step, Sleep):
                kinds.append(("sleep", step.owner))
                reply = None
                continue
            kinds.append(("invoke", primary if step.runnable is primary._runnable else backup))
            try:
                reply = step.runnable.invoke(step.prompt)
            except Exception as error:
                reply = error
    except StopIteration as done:
        result = done.value
    assert result == {"conversation": "from the backup"}
    # the primary's two attempts with its own backoff between them, then the fallback
    assert kinds == [
        ("invoke", primary),
        ("sleep", primary),
        ("invoke", primary),
        ("invoke", backup),
    ]


def test_sync_and_async_drivers_run_the_same_flow() -> None:
    def run(mode: str) -> tuple[Any, list[float]]:
        waits: list[float] = []
        model = Scripted(TimeoutError("slow"), "the summary")
        summarizer = _summarizer(model, max_attempts=3, retry_initial_wait=0.5, retry_max_wait=0.5)
        summarizer.sleep = waits.append

        async def record(seconds: float) -> None:
            waits.append(seconds)

        summarizer.asleep = record
        history = [HumanMessage("a"), AIMessage("b")]
        if mode == "sync":
            return summarizer.fold({}, history), waits
        return asyncio.run(summarizer.afold({}, history)), waits

    assert run("sync") == run("async") == ({"conversation": "the summary"}, [0.5])


def test_a_failed_flow_raises_the_same_error_in_both_drivers() -> None:
    def failure(mode: str) -> str:
        summarizer = _summarizer(Scripted(*[ValueError("bug")] * 4))
        with pytest.raises(SummarizerError) as caught:
            if mode == "sync":
                summarizer.fold({}, [HumanMessage("x")])
            else:
                asyncio.run(summarizer.afold({}, [HumanMessage("x")]))
        assert caught.value.attempts == 1  # not transient: never retried
        return str(caught.value)

    assert failure("sync") == failure("async")


# --------------------------------------------------------------------------------------------
# one prefix search, one clipper, one renderer


@given(st.text(alphabet="ab ", max_size=60), st.integers(min_value=-2, max_value=20))
def test_longest_prefix_within_is_the_longest_fitting_prefix(text: str, budget: int) -> None:
    count = ApproximateCounter(chars_per_token=3).count_text
    keep = longest_prefix_within(text, budget, count)
    fitting = [k for k in range(len(text) + 1) if count(text[:k]) <= budget]
    assert keep == (max(fitting) if fitting else 0)
    assert last_fitting(3, 2, lambda k: False) == 3  # an empty range is its floor


def test_the_prefix_search_is_written_once() -> None:
    # before: a binary search in messages.clip_message, Summarizer._split_line and
    # Summarizer._clip, each its own copy
    for name in MODULES:
        source = _module_path(name).read_text(encoding="utf-8")
        copies = source.count("(lo + hi + 1) // 2") + source.count("(low + high + 1) // 2")
        assert copies == (1 if name == "_text" else 0), name


def test_one_clipper_one_marker_family() -> None:
    assert CLIP_MARKER.format(removed=7) == clip_marker(7)
    assert clip_marker(7, "").endswith("7 characters clipped by langmem_ext]")
    tool = ToolMessage("x" * 50, tool_call_id="c1", id="t1")
    clipped = clip_chars(tool, 10)
    assert clipped.content == "x" * 10 + clip_marker(40, "")
    assert clipped.id == "t1" and clip_chars(tool, 50) is tool
    blocks = HumanMessage(
        [{"type": "text", "text": "y" * 30}, "z" * 40, {"type": "text", "text": "w"}]
    )
    assert clip_chars(blocks, 10).content == [
        {"type": "text", "text": "y" * 10 + clip_marker(20, "")},
        "z" * 40,  # string blocks are left alone, as before
        {"type": "text", "text": "w"},
    ]
    by_tokens = clip_message(HumanMessage("word " * 200), 30, ApproximateCounter().count_message)
    assert by_tokens is not None
    assert "characters clipped by langmem_ext to fit the context budget]" in str(by_tokens.content)
    words = lambda s: len(s.split())  # noqa: E731
    assert clip_text("one two three four", 3, words, " [cut]") == "one two [cut]"


def test_one_transcript_renderer() -> None:
    assert summarize.render_transcript is _transcript.render_transcript
    assert summarize.render_message is _transcript.render_message
    call = AIMessage("", tool_calls=[{"name": "f", "args": {"b": 1, "a": "é"}, "id": "c"}])
    # tool arguments as JSON (sorted keys, unicode kept), never a Python repr
    assert _transcript.render_transcript([call]) == ['assistant called f({"a": "é", "b": 1})']
    assert not hasattr(summarize, "_text") and not hasattr(summarize, "_defang")


# --------------------------------------------------------------------------------------------
# exceptions, counters, dead code


def test_exceptions_form_one_hierarchy_in_errors() -> None:
    for name in errors.__all__:
        cls = getattr(errors, name)
        assert cls.__module__ == "langmem_ext.errors", name
        assert issubclass(cls, errors.LangmemExtError), name
        assert name in (errors.__doc__ or ""), f"{name} is missing from the documented tree"
    # the old homes re-export the same classes, so old imports keep working
    assert summarize.SummarizerError is errors.SummarizerError is langmem_ext.SummarizerError
    assert keys.MissingKeyError is errors.MissingKeyError is langmem_ext.MissingKeyError
    with pytest.raises(errors.MissingKeyError) as caught:
        MemoryKey.from_config({}, require_explicit_key=True)
    assert isinstance(caught.value, KeyError) and "memory key incomplete" in str(caught.value)


def test_is_blocking_is_part_of_the_token_counter_protocol() -> None:
    assert "is_blocking" in TokenCounter.__annotations__
    assert as_counter(None).is_blocking is False

    class Legacy:  # a duck-typed counter written before is_blocking: still accepted as is
        def count_message(self, message: BaseMessage) -> int:
            return 1

        def count_messages(self, messages: Sequence[BaseMessage]) -> int:
            return len(messages)

        def count_text(self, text: str) -> int:
            return 1

    legacy = Legacy()
    assert as_counter(legacy) is legacy  # type: ignore[arg-type,comparison-overlap]


def test_cached_counter_is_a_public_base_for_provider_counters() -> None:
    assert "CachedCounter" in tokens.__all__
    calls: list[str] = []

    class ProviderCounter(CachedCounter):
        is_blocking = True  # a provider's count-tokens endpoint

        def count_text(self, text: str) -> int:
            return len(text.split())

        def count_uncached(self, message: BaseMessage) -> int:
            calls.append(str(message.content))
            return 3 + self.count_text(str(message.content))

    counter = ProviderCounter()
    assert isinstance(counter, TokenCounter) and as_counter(counter) is counter
    hello = HumanMessage("hello there", id="h1")
    assert counter.count_messages([hello, hello]) == 10 and calls == ["hello there"]

    class Unfinished(CachedCounter):
        pass

    with pytest.raises(NotImplementedError, match="must implement count_uncached"):
        Unfinished().count_message(hello)


def test_dead_code_is_gone() -> None:
    assert not hasattr(summarize, "as_summarizer") and "as_summarizer" not in summarize.__all__
    assert not hasattr(MemoryKey, "parts")


def test_no_function_over_80_lines_in_the_summarizer_modules() -> None:
    for name in (*MODULES, "_transcript"):
        tree = ast.parse(_module_path(name).read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                length = (node.end_lineno or node.lineno) - node.lineno + 1
                assert length <= 80, f"{name}.{node.name} is {length} lines"
    assert inspect.getmodule(_text.clip_text) is _text
    assert messages.clip_chars.__module__ == "langmem_ext.core.messages"
