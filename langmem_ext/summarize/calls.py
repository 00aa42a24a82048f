"""One summarizer model call: what it asks, how its failures are classified, and how it runs.

* :class:`ModelCall`: one request of the fold's plan (the prompt and the output limit);
* the error classification the retries use: :func:`is_context_overflow`, :func:`is_transient`,
  :func:`retry_after` (the provider's ``Retry-After``) and :func:`retry_wait` (the backoff), and
  :func:`both_failed` (one error for a model and its fallback);
* the model as a runnable: :func:`as_runnable`, with its SDK's own retries switched off
  (:func:`without_sdk_retries`);
* running a call under a timeout and, for a model that is not thread-safe, a per-model lock
  (:func:`model_lock`): :func:`call_on_model` (sync, in a daemon thread), :func:`acall_on_model`
  and :func:`await_with_timeout` (async), and :func:`output_text` for the answer.

The flow of a fold's calls (retries, backoff, fallback) is in
:mod:`~langmem_ext.summarize.flow` and :class:`~langmem_ext.summarize.summarizer.Summarizer`.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import inspect
import json
import logging
import math
import re
import threading
import time
import weakref
from collections.abc import Awaitable, Callable
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass
from email.utils import parsedate_to_datetime
from typing import Any, Literal, TypeVar

from langchain_core.language_models import BaseChatModel, BaseLanguageModel
from langchain_core.messages import BaseMessage
from langchain_core.runnables import Runnable, RunnableBinding, RunnableLambda

from langmem_ext.errors import ModelBusyError, SummarizerError, SummaryRejected

__all__ = [
    "ContextOverflow",
    "ModelCall",
    "ModelLike",
    "acall_on_model",
    "as_runnable",
    "await_with_timeout",
    "both_failed",
    "call_on_model",
    "call_with_timeout",
    "is_context_overflow",
    "is_sync_only",
    "is_transient",
    "model_lock",
    "model_object",
    "output_text",
    "retry_after",
    "retry_wait",
    "without_sdk_retries",
]

logger = logging.getLogger("langmem_ext")


class ContextOverflow(SummarizerError):
    """A call was refused as longer than the model's context window (thrown into the plan)."""


class _EmptyAnswer(ValueError):
    """The model answered, but with no text: treated like a malformed answer (transient)."""


@dataclass(frozen=True, slots=True)
class ModelCall:
    """One request to the summarizer model: the prompt and the output limit; ``previous`` and
    ``transcript`` are what the prompt carries as data (the summary so far, or the summary to
    compress, and the transcript lines), for the checks of the answer."""

    prompt: tuple[BaseMessage, ...]
    max_tokens: int
    section: str
    kind: Literal["fold", "compress"]
    previous: str = ""
    transcript: tuple[str, ...] = ()


# --------------------------------------------------------------------------------------------
# errors


_TRANSIENT_NAMES = {
    "RateLimitError",
    "APIConnectionError",
    "APITimeoutError",
    "InternalServerError",
    "ServiceUnavailableError",
    "OverloadedError",
    "Timeout",
    "ReadTimeout",
    "ConnectTimeout",
    "ValidationError",  # pydantic: the SDK could not read the answer it got
}

#: what providers say when a prompt does not fit the model's context window
_OVERFLOW = re.compile(
    r"context_length_exceeded|maximum context length|context window|prompt is too long"
    r"|input is too long|too many (?:input )?tokens|reduce the length of the (?:messages|prompt)",
    re.IGNORECASE,
)

#: a TypeError/KeyError/... naming one of these is a missing setting, not a garbled answer
_CONFIG_WORDS = re.compile(r"auth|api[_ ]?key|credential|base_url", re.IGNORECASE)


def _status(error: BaseException) -> int | None:
    status = getattr(error, "status_code", None)
    if isinstance(status, int):
        return status
    status = getattr(getattr(error, "response", None), "status_code", None)
    return status if isinstance(status, int) else None


def is_context_overflow(error: BaseException) -> bool:
    """The provider refused the prompt as longer than the model's context window: LangChain's
    ``ContextOverflowError``, or a 400/413 whose code or message says so (OpenAI
    ``context_length_exceeded`` / "maximum context length", Anthropic "prompt is too long").
    Retrying the same prompt cannot succeed; a smaller one can."""
    if any(cls.__name__ == "ContextOverflowError" for cls in type(error).__mro__):
        return True
    if _status(error) not in (400, 413):
        return False
    words = f"{getattr(error, 'code', '')} {error} {getattr(error, 'body', '')}"
    return _OVERFLOW.search(words) is not None


def _malformed_answer(error: BaseException) -> bool:
    """The provider answered 200 but the answer could not be read: a body that is not JSON, a
    reply without text, an answer the SDK's validation refused (a 2xx status on the error), or
    JSON of the wrong shape, which the chat model's integration package (``langchain_openai``,
    ``langchain_anthropic`` ...) trips on with a TypeError/KeyError/AttributeError/IndexError
    while building its result (unless the message points at a missing setting)."""
    if isinstance(error, (json.JSONDecodeError, _EmptyAnswer)):
        return True
    status = _status(error)
    if status is not None and 200 <= status < 300:
        return True
    if not isinstance(error, (TypeError, KeyError, AttributeError, IndexError)):
        return False
    if _CONFIG_WORDS.search(str(error)):
        return False
    traceback = error.__traceback__
    module = ""
    while traceback is not None:  # the innermost frame: where the error was raised
        module = str(traceback.tb_frame.f_globals.get("__name__", ""))
        traceback = traceback.tb_next
    package = module.split(".", 1)[0]
    return package.startswith("langchain_") and package != "langchain_core"


def is_transient(error: BaseException) -> bool:
    """Worth retrying: rate limits, timeouts, connection failures, 5xx answers (529 included),
    errors LangChain marks ``is_retryable``, and malformed 200 answers (a body that is not JSON,
    or of the wrong shape, or without text), and an answer the summary checks rejected
    (:class:`SummaryRejected`: a model that samples often answers well the next time). A 400
    (e.g. a context-length error), an authentication error or a bug in a callable is not."""
    if isinstance(error, (TimeoutError, ConnectionError, asyncio.TimeoutError)):
        return True
    if isinstance(error, SummaryRejected):  # garbage from a sampling model: worth one more try
        return True
    if _malformed_answer(error):
        return True
    status = _status(error)
    if status is not None:
        return status in (408, 409, 425, 429) or status >= 500
    if getattr(error, "is_retryable", False) is True:  # langchain_core.exceptions.ModelError
        return True
    return any(cls.__name__ in _TRANSIENT_NAMES for cls in type(error).__mro__)


def retry_after(error: BaseException) -> float | None:
    """The wait (seconds, >= 0) the provider asked for in the answer that raised ``error``:
    ``retry-after-ms`` (OpenAI's finer hint) or ``retry-after`` (seconds or an HTTP date), read
    from ``error.response.headers`` (openai, anthropic and httpx errors carry it). None when the
    answer carries no usable hint."""
    found = getattr(getattr(error, "response", None), "headers", None)
    if found is None:
        found = getattr(error, "headers", None)
    get = getattr(found, "get", None)  # httpx.Headers (case-insensitive) or a plain mapping
    if not callable(get):
        return None

    def header(name: str) -> str | None:
        for key in (name, name.title()):
            value = get(key)
            if isinstance(value, str) and value.strip():
                return value.strip()
        return None

    if (ms := header("retry-after-ms")) is not None:
        try:
            seconds = float(ms) / 1000
        except ValueError:
            seconds = math.nan
        if math.isfinite(seconds) and seconds >= 0:
            return seconds
    if (value := header("retry-after")) is None:
        return None
    try:
        seconds = float(value)
    except ValueError:
        try:  # an HTTP date: the wait is until then (now if it is past)
            seconds = max(parsedate_to_datetime(value).timestamp() - time.time(), 0.0)
        except (TypeError, ValueError, IndexError):
            return None
    return seconds if math.isfinite(seconds) and seconds >= 0 else None


def retry_wait(
    attempt: int,
    error: BaseException,
    *,
    max_attempts: int,
    initial: float,
    largest: float,
    jitter: float,
) -> float | None:
    """Seconds to wait before retrying after attempt number ``attempt`` (1-based) failed with
    ``error``, or None to stop: the error is not transient, the attempts are spent, or the
    provider asked to wait longer than ``largest`` (waiting less would only earn another 429;
    giving up lets the strategy's own schedule, which never blocks a turn, take over).

    The wait is exponential backoff, ``initial * 2**(attempt-1)`` plus ``jitter * initial``
    (``jitter`` in [0, 1), random in the drivers), at most ``largest``; and never less than the
    provider's ``Retry-After``. Pure: the sync and async drivers share it.
    """
    if attempt >= max_attempts or not is_transient(error):
        return None
    wait: float = min(largest, initial * 2.0 ** min(attempt - 1, 60) + jitter * initial)
    asked = retry_after(error)
    if asked is not None:
        if asked > largest:
            return None
        wait = max(wait, asked)
    return wait


def both_failed(first: SummarizerError, second: SummarizerError) -> SummarizerError:
    """One error for a call the model and its fallback both failed. It is a context overflow
    when either was (a smaller input may let that one answer), a :class:`SummaryRejected` when
    both answered garbage (the reason: the fallback's)."""
    overflow = isinstance(first, ContextOverflow) or isinstance(second, ContextOverflow)
    message = f"{first}; the fallback failed too: {second}"
    section = second.section or first.section
    attempts = first.attempts + second.attempts
    if not overflow and isinstance(first, SummaryRejected) and isinstance(second, SummaryRejected):
        return SummaryRejected(message, reason=second.reason, section=section, attempts=attempts)
    kind = ContextOverflow if overflow else SummarizerError
    asked = [a for a in (first.retry_after, second.retry_after) if a is not None]
    return kind(
        message,
        section=section,
        attempts=attempts,
        retry_after=max(asked) if asked else None,
    )


# --------------------------------------------------------------------------------------------
# the model, and running one call on it


ModelLike = BaseLanguageModel[Any] | Runnable[Any, Any] | Callable[..., Any] | str


def as_runnable(model: ModelLike) -> Runnable[Any, Any]:
    if isinstance(model, str):
        try:
            from langchain.chat_models import init_chat_model
        except ImportError as exc:
            raise ImportError(
                f"a model given as a string ({model!r}) is resolved with langchain's "
                "init_chat_model; install the 'langchain' package (pip install "
                "'langmem-ext[agents]'), or pass a chat model object"
            ) from exc
        return init_chat_model(model)
    if isinstance(model, Runnable):
        return model
    if callable(model):  # sync or async; an async one serves the async API only
        return RunnableLambda(model)
    raise TypeError(
        f"cannot summarize with a {type(model).__name__}: pass a chat model, a "
        "'provider:model' string, or a callable (prompt messages) -> str"
    )


def _is_sdk_client(value: Any) -> bool:
    """An SDK client of the Stainless family (openai, anthropic, and the many SDKs built like
    them): it has ``max_retries`` and ``with_options(max_retries=...)``."""
    return isinstance(getattr(value, "max_retries", None), int) and callable(
        getattr(value, "with_options", None)
    )


def without_sdk_retries(runnable: Runnable[Any, Any]) -> Runnable[Any, Any]:
    """A copy of a chat model whose SDK does not retry (``max_retries=0``), so the Summarizer's
    own loop is the only one: ChatOpenAI / ChatAnthropic retry twice by default inside each
    call, which would turn ``max_attempts=3`` into 9 requests and ignore our backoff. Clients
    already built are copied with ``with_options(max_retries=0)`` (keeping any client the user
    passed), clients cached lazily (ChatAnthropic) are dropped to be rebuilt from the copy's
    ``max_retries``. A model without a ``max_retries`` field, or one that cannot be copied, is
    used as it is (logged)."""
    if isinstance(runnable, RunnableBinding):
        inner = without_sdk_retries(runnable.bound)
        return runnable if inner is runnable.bound else runnable.model_copy(update={"bound": inner})
    if not isinstance(runnable, BaseChatModel):
        return runnable
    fields = type(runnable).model_fields
    if "max_retries" not in fields or getattr(runnable, "max_retries", None) == 0:
        return runnable
    try:
        copy = runnable.model_copy(update={"max_retries": 0})
        values = copy.__dict__
        for name in list(values):
            value = values[name]
            if name not in fields:
                if isinstance(
                    inspect.getattr_static(type(copy), name, None), functools.cached_property
                ):
                    del values[name]  # built from the old max_retries; rebuilt on first use
            elif _is_sdk_client(value):
                values[name] = value.with_options(max_retries=0)
            elif _is_sdk_client(getattr(value, "_client", None)):  # a resource of a client
                values[name] = type(value)(value._client.with_options(max_retries=0))
    except Exception as error:  # pragma: no cover - an exotic model; retries may multiply
        logger.warning(
            "langmem_ext: could not switch off the SDK retries of %s (%s: %s); its own retries "
            "add to the Summarizer's max_attempts",
            type(runnable).__name__,
            type(error).__name__,
            error,
        )
        return runnable
    return copy


_T = TypeVar("_T")


def call_with_timeout(fn: Callable[[], _T], timeout: float | None) -> _T:
    """``fn()``, abandoned after ``timeout`` seconds (TimeoutError). A blocking call cannot be
    interrupted in Python, so it runs in a daemon thread (with the caller's context variables,
    so LangChain callbacks and tracing follow it); an abandoned call may still finish in the
    background, its answer discarded, until the model's own client gives up on it."""
    return call_on_model(fn, timeout, None)


# --- one call at a time on a model that is not thread-safe ----------------------------------

#: a lock per model object that must not run two calls at once (see :func:`model_lock`), by
#: ``id``; the entry goes with the object (a weakref callback), so ids are never confused
_LOCKS: dict[int, tuple[weakref.ref[Any], threading.Lock]] = {}
_LOCKS_GUARD = threading.Lock()


def model_object(runnable: Runnable[Any, Any]) -> Any:
    """What a call on ``runnable`` really runs on: under its bindings (``self._bound`` makes a
    fresh binding per call), the model's ``client`` when it has one (llama.cpp's ``Llama``,
    shared by a ChatLlamaCpp and its copies), the function of a RunnableLambda; else the model."""
    while isinstance(runnable, RunnableBinding):
        runnable = runnable.bound
    inner: Any = runnable
    if isinstance(runnable, RunnableLambda):
        inner = getattr(runnable, "func", None) or getattr(runnable, "afunc", None) or runnable
    else:
        client = getattr(runnable, "client", None)
        if client is not None and not isinstance(client, (str, bytes, int, float, bool)):
            inner = client
    try:
        weakref.ref(inner)
    except TypeError:
        return runnable
    return inner


def model_lock(model: Any) -> threading.Lock | None:
    """The lock of ``model`` (created on first use), None when it cannot be weakly referenced
    (such a model is called without one)."""
    key = id(model)
    with _LOCKS_GUARD:
        found = _LOCKS.get(key)
        if found is not None and found[0]() is model:
            return found[1]

        def forget(_: weakref.ref[Any], key: int = key) -> None:
            with _LOCKS_GUARD:
                entry = _LOCKS.get(key)
                if entry is not None and entry[0]() is None:
                    del _LOCKS[key]

        try:
            ref = weakref.ref(model, forget)
        except TypeError:
            return None
        lock = threading.Lock()
        _LOCKS[key] = (ref, lock)
        return lock


def is_sync_only(runnable: Runnable[Any, Any]) -> bool:
    """A chat model with no async implementation of its own: it only implements
    ``_generate``/``_stream`` (ChatLlamaCpp, a HuggingFace pipeline ... in-process models,
    which LangChain's ``ainvoke`` merely runs in an executor thread). Models with native async
    (the HTTP clients: ChatOpenAI, ChatAnthropic, ChatOllama ...) are not, and neither is a
    plain callable: what it calls is its author's to say (``exclusive=True``)."""
    while isinstance(runnable, RunnableBinding):
        runnable = runnable.bound
    if isinstance(runnable, BaseChatModel):
        kind = type(runnable)
        return kind._agenerate is BaseChatModel._agenerate and (
            kind._astream is BaseChatModel._astream
        )
    return False


def _busy(timeout: float) -> ModelBusyError:
    return ModelBusyError(
        f"the summarizer model is still busy with an earlier call (probably one abandoned at "
        f"its timeout that is still running) after waiting timeout={timeout:g} s; a second call "
        "is never started on the same model object meanwhile (in-process models such as "
        "llama.cpp are not thread-safe): give Summarizer a larger timeout= (or None) for a "
        "slow local model"
    )


class _Handoff:
    """Who gave up first, the caller or the worker waiting for the model's lock: decided under
    one lock, so a call either starts (and the caller's timeout says it was abandoned) or never
    does (and the caller says the model was busy)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._started = False
        self._abandoned = False

    def start(self) -> bool:
        """The worker got the model: may it call? (not when the caller already gave up)"""
        with self._lock:
            self._started = not self._abandoned
            return self._started

    def abandon(self) -> bool:
        """The caller gives up: had the call started?"""
        with self._lock:
            self._abandoned = True
            return self._started


def _start_call(
    fn: Callable[[], _T], timeout: float | None, lock: threading.Lock | None
) -> tuple[Future[_T], _Handoff]:
    """Run ``fn`` in a daemon thread (with the caller's context variables), holding ``lock``
    (waited for at most ``timeout``) for as long as ``fn`` runs, even after the caller gave up
    on it. Returns the future and the handoff the caller abandons when it gives up: a call
    still waiting for the lock then never starts."""
    future: Future[_T] = Future()
    handoff = _Handoff()

    def work() -> None:
        if not future.set_running_or_notify_cancel():  # pragma: no cover - never cancelled
            return
        if lock is not None and not lock.acquire(timeout=-1 if timeout is None else timeout):
            future.set_exception(_busy(timeout or 0.0))
            return
        try:
            if not handoff.start():  # the caller gave up while we waited for the model
                future.set_exception(_busy(timeout or 0.0))
                return
            future.set_result(fn())
        except BaseException as error:  # delivered to the caller by future.result()
            future.set_exception(error)
        finally:
            if lock is not None:
                lock.release()

    context = contextvars.copy_context()
    worker = threading.Thread(
        target=context.run, args=(work,), name="langmem_ext-summarizer", daemon=True
    )
    worker.start()
    return future, handoff


def _gave_up(future: Future[Any], handoff: _Handoff, timeout: float) -> BaseException:
    """The error of a caller whose ``timeout`` passed: the model was busy (the call never
    started, and never will) or the call was abandoned while running."""
    if not handoff.abandon():
        return _busy(timeout)
    return _timed_out(timeout)


def call_on_model(fn: Callable[[], _T], timeout: float | None, lock: threading.Lock | None) -> _T:
    """``fn()`` within ``timeout`` (TimeoutError after it; the call is abandoned in its daemon
    thread), holding ``lock`` when given: waiting for the lock counts in the timeout."""
    if timeout is None:
        if lock is None:
            return fn()
        with lock:
            return fn()
    future, handoff = _start_call(fn, timeout, lock)
    try:
        return future.result(timeout)
    except FutureTimeout:
        # since 3.11 FutureTimeout *is* TimeoutError: a call that raised one itself is done
        if future.done():
            raise
        raise _gave_up(future, handoff, timeout) from None


async def acall_on_model(
    fn: Callable[[], _T], timeout: float | None, lock: threading.Lock | None
) -> _T:
    """Async :func:`call_on_model`: the sync ``fn`` in a daemon thread of our own, awaited
    (not the event loop's default executor, which ``asyncio.run`` waits for at exit)."""
    future, handoff = _start_call(fn, timeout, lock)
    waiting = asyncio.wrap_future(future)
    try:
        done, _ = await asyncio.wait({waiting}, timeout=timeout)
    except BaseException:  # cancelled from outside: give the call up
        handoff.abandon()
        waiting.cancel()
        raise
    if not done:
        assert timeout is not None
        # detached from the worker: its late answer is dropped, even after the loop closed
        waiting.cancel()
        raise _gave_up(future, handoff, timeout)
    return waiting.result()


async def await_with_timeout(call: Awaitable[_T], timeout: float | None) -> _T:
    """``await call``, cancelled after ``timeout`` seconds (TimeoutError). Unlike
    ``asyncio.wait_for`` it tells our timeout from a TimeoutError raised by the call itself, and
    does not wait for a model that ignores its cancellation."""
    if timeout is None:
        return await call
    task = asyncio.ensure_future(call)
    try:
        done, _ = await asyncio.wait({task}, timeout=timeout)
    except BaseException:  # cancelled from outside: take the call down with us
        task.cancel()
        raise
    if not done:
        task.cancel()
        raise _timed_out(timeout)
    return task.result()


def _timed_out(timeout: float) -> TimeoutError:
    return TimeoutError(
        f"the summarizer model did not answer within timeout={timeout:g} s; the call was "
        "abandoned (give Summarizer a larger timeout= if the model is legitimately slow)"
    )


def output_text(output: Any) -> str:
    text: str
    if isinstance(output, BaseMessage):
        text = str(output.text)
    elif isinstance(output, str):
        text = output
    else:
        raise SummarizerError(f"the summarizer model returned a {type(output).__name__}")
    text = text.strip()
    match = re.fullmatch(r"<summary>\s*(.*?)\s*</summary>", text, flags=re.S | re.I)
    text = match.group(1).strip() if match else text
    if not text:
        raise _EmptyAnswer("the summarizer model returned an empty summary (no text)")
    return text
