"""Provider-exact token counts from Anthropic's count-tokens endpoint: :class:`AnthropicCounter`.

It asks Anthropic how many tokens a message costs, one message at a time (the strategies cache
per message, see :class:`~langmem_ext.counting.cache.CachedCounter`). A message alone is often
not a valid request (an assistant turn with a ``tool_use`` needs its ``tool_result`` after it, a
``tool_result`` needs its ``tool_use`` before it, a system prompt needs a message), so each one is
counted inside a small *frame* of fixed filler turns, and what the frame costs
(:class:`FrameCosts`) is measured once and subtracted. The frames are chosen so that the
per-message counts of a tool-call unit add up to what the provider counts for the unit, and so
that any error left is an over-count.

Nothing is needed at import time: ``anthropic`` and ``langchain_anthropic`` (the ``anthropic``
extra) are imported when it first counts.
"""

from __future__ import annotations

import asyncio
import hashlib
import inspect
import math
import threading
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

from langchain_core.messages import (
    AIMessage,
    BaseMessage,
    ChatMessage,
    HumanMessage,
    SystemMessage,
)

from langmem_ext.core.checks import is_int
from langmem_ext.core.identity import fingerprint
from langmem_ext.counting.cache import CachedCounter, _CountCache
from langmem_ext.errors import TokenCountError

if TYPE_CHECKING:
    import anthropic

__all__ = ["AnthropicCounter", "FrameCosts", "TokenCountError"]


#: the filler turns of the frames: a user turn and an assistant turn holding "."
_USER: dict[str, Any] = {"role": "user", "content": "."}
_ASSISTANT: dict[str, Any] = {"role": "assistant", "content": "."}
#: the name of the synthetic tool of the tool frames, and the ids of the measured pair frames
_PROBE_TOOL = "t"


def _tool_uses(ids: Sequence[str]) -> dict[str, Any]:
    """An assistant turn calling the probe tool once per id (the frame before a tool result)."""
    blocks = [{"type": "tool_use", "id": i, "name": _PROBE_TOOL, "input": {}} for i in ids]
    return {"role": "assistant", "content": blocks}


def _tool_results(ids: Sequence[str]) -> dict[str, Any]:
    """A user turn answering each id with "." (the frame after a tool call)."""
    blocks = [{"type": "tool_result", "tool_use_id": i, "content": "."} for i in ids]
    return {"role": "user", "content": blocks}


def _pair_request(k: int) -> dict[str, Any]:
    """The frame of a message holding ``k`` tool results, with probe results in its place."""
    ids = [f"t{i}" for i in range(k)]
    return {"messages": [_USER, _tool_uses(ids), _tool_results(ids)]}


#: the three requests that measure the frame costs: [U], [U, A], [U, A, U]
_BASE_REQUESTS: tuple[dict[str, Any], ...] = (
    {"messages": [_USER]},
    {"messages": [_USER, _ASSISTANT]},
    {"messages": [_USER, _ASSISTANT, _USER]},
)


_Key = tuple[str | None, int]
#: how a batch of answers becomes the probes' counts
_Finish = Callable[[Sequence[int]], list[int]]


@dataclass(frozen=True)
class FrameCosts:
    """What the frames around a counted message cost, measured once per counter.

    From the counts of ``[U]``, ``[U, A]`` and ``[U, A, U]`` (``U`` a user turn holding ".",
    ``A`` an assistant turn holding "."): ``user`` and ``assistant`` are what one such turn adds,
    ``request`` what every request costs on top of its turns (the counter's
    ``request_overhead``), ``anchor`` the count of ``[U]`` alone.
    """

    request: int
    user: int
    assistant: int
    anchor: int

    @classmethod
    def from_counts(cls, one: int, two: int, three: int) -> FrameCosts:
        user = max(0, three - two)
        return cls(request=max(0, one - user), user=user, assistant=max(0, two - one), anchor=one)


@dataclass(frozen=True)
class _Probe:
    """How one message is counted: the request its frame makes (None: no request needed) and
    which subtraction turns the endpoint's answer into the message's tokens."""

    #: system | user | results | calls | assistant | text | empty_system | empty_user |
    #: empty_assistant
    kind: str
    request: dict[str, Any] | None = None
    #: the number of tool results of a "results" probe (its pair frame is measured per number)
    pair: int = 0


def _is_empty(content: Any) -> bool:
    if isinstance(content, str):
        return not content.strip()
    return not content


def _blocks(content: Any) -> list[dict[str, Any]]:
    if not isinstance(content, list):
        return []
    return [b for b in content if isinstance(b, dict)]


_FORMATTER: tuple[Callable[..., Any], bool] | None = None


def _formatter() -> tuple[Callable[..., Any], bool]:
    """langchain-anthropic's own message conversion (the wire format ChatAnthropic sends), and
    whether it takes ``model=`` (newer releases do, for warnings only)."""
    global _FORMATTER
    if _FORMATTER is None:
        try:
            from langchain_anthropic.chat_models import _format_messages
        except ImportError as exc:  # pragma: no cover - depends on the environment
            raise ImportError(
                "AnthropicCounter needs the 'anthropic' and 'langchain-anthropic' packages: "
                "pip install 'langmem-ext[anthropic]'"
            ) from exc
        takes_model = "model" in inspect.signature(_format_messages).parameters
        _FORMATTER = (_format_messages, takes_model)
    return _FORMATTER


def _as_anthropic_message(message: BaseMessage) -> BaseMessage:
    """A ChatMessage with a role Anthropic knows, as the matching message class."""
    if isinstance(message, ChatMessage):
        role = message.role
        kinds: dict[str, type[BaseMessage]] = {
            "user": HumanMessage,
            "human": HumanMessage,
            "assistant": AIMessage,
            "ai": AIMessage,
            "system": SystemMessage,
        }
        if role in kinds:
            return kinds[role](content=message.content, id=message.id)
        raise TypeError(f"AnthropicCounter cannot count a ChatMessage with role {role!r}")
    return message


def _value(probe: _Probe, answer: int, frame: FrameCosts, pairs: Mapping[int, int]) -> int:
    """The tokens of a probe's message, from the endpoint's count of its frame."""
    kind = probe.kind
    if kind == "empty_system":  # an empty system prompt is not sent
        return 0
    if kind == "empty_user":
        return frame.user
    if kind == "empty_assistant":
        return frame.assistant
    if kind == "user":  # [m]
        tokens = answer - frame.request
    elif kind == "results":  # [U, tool_uses(ids), m] minus [U, tool_uses(p), tool_results(p)]
        tokens = answer - pairs[probe.pair]
    elif kind == "assistant":  # [U, m, U]
        tokens = answer - frame.anchor - frame.user
    elif kind == "text":  # [user: text], the "." of U taken as one token
        tokens = answer - frame.anchor + 1
    else:  # "system" (system=m, [U]) and "calls" ([U, m, tool_results(ids)])
        tokens = answer - frame.anchor
    return max(0, tokens)


class AnthropicCounter(CachedCounter):
    """Exact token counts from Anthropic's count-tokens endpoint, cached per message.

    ``AnthropicCounter("claude-sonnet-4-5")`` builds an ``anthropic.Anthropic`` (and, for the
    ``acount_*`` methods, an ``AsyncAnthropic``) on first use from ``api_key`` / ``base_url``
    or the ``ANTHROPIC_API_KEY`` / ``ANTHROPIC_BASE_URL`` environment; pass ``client`` /
    ``async_client`` to use your own (e.g. with a proxy, or ``max_retries=0``). Messages are
    converted with langchain-anthropic's own conversion, so what is counted is what
    ``ChatAnthropic`` sends.

    **Frames.** Each message is counted inside a fixed frame that makes it a valid request, and
    the frame's cost is subtracted (``U``, ``A``: a user / assistant turn holding "."):

    * the frame costs (:class:`FrameCosts`) come from ``[U]``, ``[U, A]``, ``[U, A, U]``,
      measured once; ``request_overhead`` is what a request costs beyond its turns;
    * a user message: ``[m]`` minus ``request_overhead``; a system message: ``system=m`` with
      ``[U]``, minus ``[U]``; an assistant message: ``[U, m, U]`` minus ``[U, A, U]`` less ``A``;
    * an assistant message with tool calls: ``[U, m, R]`` minus ``[U]``, where ``R`` answers
      each call with "." — a trailing in-flight call is over-counted by those short results,
      never under-counted;
    * a tool result (a ToolMessage, or user content holding ``k`` ``tool_result`` blocks):
      ``[U, C, m]`` with ``C`` a call of a probe tool per id, minus the same frame with "."
      results (measured once per ``k``). The AI message and its tool messages then add up to
      exactly what the provider counts for the unit.

    Counting a message alone cannot see that Anthropic merges consecutive user turns (a tool
    result followed by a human message, two human messages in a row) into one turn, so such
    runs are over-counted by one turn's framing each: never under. (Parallel tool results,
    merged too, are exact: the frames allow for it.)

    **Batched.** :meth:`count_messages` counts all the uncached messages of the list (and the
    frame costs, when not measured yet) with concurrent requests, at most ``max_concurrency``
    at once on a small thread pool; :meth:`acount_messages` does the same with
    ``asyncio.gather`` on the async client. No list is counted one request after another.

    ``is_blocking`` is True: the async drivers count in a worker thread. A failed request
    raises :class:`TokenCountError` naming the model and the HTTP status.
    """

    is_blocking = True

    def __init__(
        self,
        model: str,
        *,
        client: anthropic.Anthropic | None = None,
        async_client: anthropic.AsyncAnthropic | None = None,
        api_key: str | None = None,
        base_url: str | None = None,
        max_retries: int | None = None,
        timeout: float | None = None,
        max_concurrency: int = 8,
        cache_size: int = 65_536,
    ) -> None:
        if not model:
            raise ValueError("AnthropicCounter needs a model name")
        if max_concurrency < 1:
            raise ValueError(f"max_concurrency must be >= 1, got {max_concurrency}")
        super().__init__(cache_size=cache_size)
        self.model = model
        self.max_concurrency = max_concurrency
        self._client = client
        self._async_client = async_client
        self._options: dict[str, Any] = {
            k: v
            for k, v in (
                ("api_key", api_key),
                ("base_url", base_url),
                ("max_retries", max_retries),
                ("timeout", timeout),
            )
            if v is not None
        }
        self._lock = threading.Lock()
        self._frame: FrameCosts | None = None
        self._pairs: dict[int, int] = {}
        self._texts = _CountCache(cache_size)

    def __repr__(self) -> str:
        return f"AnthropicCounter(model={self.model!r})"

    @property
    def frame_costs(self) -> FrameCosts | None:
        """The measured frame costs, or None before the first count."""
        return self._frame

    # -- clients ----------------------------------------------------------------------------------

    def _sync_client(self) -> anthropic.Anthropic:
        with self._lock:
            if self._client is None:
                import anthropic

                self._client = anthropic.Anthropic(**self._options)
            return self._client

    def _async(self) -> anthropic.AsyncAnthropic:
        with self._lock:
            if self._async_client is None:
                import anthropic

                self._async_client = anthropic.AsyncAnthropic(**self._options)
            return self._async_client

    def _error(self, exc: Exception) -> TokenCountError:
        status = getattr(exc, "status_code", None)
        body = getattr(exc, "body", None)
        error = body.get("error") if isinstance(body, dict) else None
        kind = error.get("type") if isinstance(error, dict) else None
        detail = error.get("message") if isinstance(error, dict) else None
        what = f"HTTP {status}" if isinstance(status, int) else "no answer"
        said = f" ({kind}: {detail})" if kind or detail else f" ({type(exc).__name__}: {exc})"
        return TokenCountError(
            f"Anthropic token counting failed for model {self.model!r}: {what}{said}",
            provider="anthropic",
            model=self.model,
            status_code=status if isinstance(status, int) else None,
            error_type=kind if isinstance(kind, str) else None,
        )

    def _tokens_of(self, response: Any) -> int:
        tokens = getattr(response, "input_tokens", None)
        if not is_int(tokens):
            raise TokenCountError(
                f"Anthropic token counting for model {self.model!r} answered without "
                f"input_tokens: {response!r}",
                provider="anthropic",
                model=self.model,
            )
        return tokens

    def _post(self, request: dict[str, Any]) -> int:
        import anthropic

        client = self._sync_client()
        try:
            response = client.messages.count_tokens(model=self.model, **request)
        except anthropic.APIError as exc:
            raise self._error(exc) from exc
        return self._tokens_of(response)

    async def _apost(self, request: dict[str, Any]) -> int:
        import anthropic

        client = self._async()
        try:
            response = await client.messages.count_tokens(model=self.model, **request)
        except anthropic.APIError as exc:
            raise self._error(exc) from exc
        return self._tokens_of(response)

    def _run(self, requests: Sequence[dict[str, Any]]) -> list[int]:
        """Every request's count, the requests issued concurrently on a small thread pool."""
        if len(requests) <= 1:
            return [self._post(r) for r in requests]
        workers = min(self.max_concurrency, len(requests))
        with ThreadPoolExecutor(workers, thread_name_prefix="anthropic-count") as pool:
            futures = [pool.submit(self._post, r) for r in requests]
            try:
                return [f.result() for f in futures]
            except BaseException:
                for future in futures:
                    future.cancel()
                raise

    async def _arun(self, requests: Sequence[dict[str, Any]]) -> list[int]:
        """:meth:`_run` with ``asyncio.gather``, at most ``max_concurrency`` in flight."""
        gate = asyncio.Semaphore(self.max_concurrency)

        async def one(request: dict[str, Any]) -> int:
            async with gate:
                return await self._apost(request)

        tasks = [asyncio.ensure_future(one(r)) for r in requests]
        try:
            return list(await asyncio.gather(*tasks))
        except BaseException:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            raise

    # -- frames -----------------------------------------------------------------------------------

    def _format(self, message: BaseMessage) -> tuple[Any, list[dict[str, Any]]]:
        format_messages, takes_model = _formatter()
        message = _as_anthropic_message(message)
        try:
            if takes_model:
                system, turns = format_messages([message], model=self.model)
            else:  # pragma: no cover - older langchain-anthropic
                system, turns = format_messages([message])
        except KeyError as exc:  # no Anthropic role for this message type
            raise TypeError(
                f"AnthropicCounter cannot count a {type(message).__name__} (type "
                f"{message.type!r}): Anthropic has no role for it"
            ) from exc
        return system, list(turns)

    def _probe(self, message: BaseMessage) -> _Probe:
        """The frame one message is counted in."""
        system, turns = self._format(message)
        if system is not None and not turns:
            if _is_empty(system):
                return _Probe("empty_system")
            return _Probe("system", {"system": system, "messages": [_USER]})
        if len(turns) != 1:
            raise TypeError(
                f"AnthropicCounter cannot count a {type(message).__name__} alone: it converts "
                f"to {len(turns)} turns"
            )
        turn = turns[0]
        user = turn.get("role") == "user"
        if _is_empty(turn.get("content")):
            return _Probe("empty_user" if user else "empty_assistant")
        blocks = _blocks(turn.get("content"))
        if user:
            ids = [str(b["tool_use_id"]) for b in blocks if b.get("type") == "tool_result"]
            if ids:
                request = {"messages": [_USER, _tool_uses(ids), turn]}
                return _Probe("results", request, pair=len(ids))
            return _Probe("user", {"messages": [turn]})
        ids = [str(b["id"]) for b in blocks if b.get("type") == "tool_use"]
        if ids:
            return _Probe("calls", {"messages": [_USER, turn, _tool_results(ids)]})
        return _Probe("assistant", {"messages": [_USER, turn, _USER]})

    def _requests_for(
        self, probes: Sequence[_Probe]
    ) -> tuple[list[dict[str, Any]], Callable[[Sequence[int]], list[int]]]:
        """The requests that count ``probes`` (with the frame costs still unknown), and how the
        answers become the probes' token counts. Shared by the sync and async paths."""
        with self._lock:
            frame = self._frame
            pairs = dict(self._pairs)
        requests: list[dict[str, Any]] = []
        base_at = -1
        if frame is None:
            base_at = len(requests)
            requests.extend(_BASE_REQUESTS)
        pair_at: dict[int, int] = {}
        for k in sorted({p.pair for p in probes if p.pair and p.pair not in pairs}):
            pair_at[k] = len(requests)
            requests.append(_pair_request(k))
        probe_at: list[int] = []
        for probe in probes:
            probe_at.append(len(requests) if probe.request is not None else -1)
            if probe.request is not None:
                requests.append(probe.request)

        def finish(answers: Sequence[int]) -> list[int]:
            measured = frame
            with self._lock:
                if measured is None:
                    measured = self._frame or FrameCosts.from_counts(
                        *answers[base_at : base_at + 3]
                    )
                    self._frame = measured
                    self.request_overhead = measured.request
                for k, at in pair_at.items():
                    self._pairs.setdefault(k, answers[at])
                known = dict(self._pairs)
            return [
                _value(probe, answers[at] if at >= 0 else 0, measured, known)
                for probe, at in zip(probes, probe_at, strict=True)
            ]

        return requests, finish

    def _measure(self, messages: Sequence[BaseMessage]) -> list[int]:
        requests, finish = self._requests_for([self._probe(m) for m in messages])
        return finish(self._run(requests))

    async def _ameasure(self, messages: Sequence[BaseMessage]) -> list[int]:
        requests, finish = self._requests_for([self._probe(m) for m in messages])
        return finish(await self._arun(requests))

    # -- the counter ------------------------------------------------------------------------------

    def count_uncached(self, message: BaseMessage) -> int:
        return self._measure([message])[0]

    def _lookup(self, messages: Sequence[BaseMessage]) -> tuple[list[_Key], dict[_Key, int]]:
        """Every message's cache key, and the cached counts by key (a miss: not in the map)."""
        keys = [(m.id, fingerprint(m)) for m in messages]
        known: dict[_Key, int] = {}
        for key in keys:
            if key not in known:
                value = self._cache.get(key)
                if value is not None:
                    known[key] = value
        return keys, known

    def _pending(
        self, messages: Sequence[BaseMessage], keys: Sequence[_Key], known: Mapping[_Key, int]
    ) -> dict[_Key, BaseMessage]:
        """The distinct messages that are not cached, by key."""
        pending: dict[_Key, BaseMessage] = {}
        for key, message in zip(keys, messages, strict=True):
            if key not in known:
                pending.setdefault(key, message)
        return pending

    def _total(
        self,
        keys: Sequence[_Key],
        known: dict[_Key, int],
        pending: Mapping[_Key, BaseMessage],
        counted: Sequence[int],
    ) -> int:
        for key, tokens in zip(pending, counted, strict=True):
            self._cache.put(key, tokens)
            known[key] = tokens
        return self.request_overhead + sum(known[key] for key in keys)

    def count_messages(self, messages: Sequence[BaseMessage]) -> int:
        """The tokens of a request: ``request_overhead`` plus every message's count; the
        uncached messages are counted with concurrent requests (see the class docs)."""
        messages = list(messages)
        keys, known = self._lookup(messages)
        pending = self._pending(messages, keys, known)
        counted: list[int] = []
        if pending or self._frame is None:
            counted = self._measure(list(pending.values()))
        return self._total(keys, known, pending, counted)

    async def acount_messages(self, messages: Sequence[BaseMessage]) -> int:
        """:meth:`count_messages` on the async client (concurrent with ``asyncio.gather``)."""
        messages = list(messages)
        keys, known = self._lookup(messages)
        pending = self._pending(messages, keys, known)
        counted: list[int] = []
        if pending or self._frame is None:
            counted = await self._ameasure(list(pending.values()))
        return self._total(keys, known, pending, counted)

    async def acount_message(self, message: BaseMessage) -> int:
        """:meth:`count_message` on the async client."""
        return await self.acount_messages([message]) - self.request_overhead

    @staticmethod
    def _text_key(text: str) -> tuple[str | None, int]:
        digest = hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=16).digest()
        return (None, int.from_bytes(digest, "big"))

    def _text_probe(self, text: str) -> _Probe:
        return _Probe("text", {"messages": [{"role": "user", "content": text}]})

    def _text_plan(
        self, text: str
    ) -> tuple[int, None] | tuple[None, tuple[_Key, list[dict[str, Any]], _Finish]]:
        """``count_text``'s work: (the count, None) when it needs no request (whitespace, or
        cached), else (None, (cache key, the requests, how their answers make the count))."""
        if not text.strip():
            return math.ceil(len(text) / 4), None
        key = self._text_key(text)
        cached = self._texts.get(key)
        if cached is not None:
            return cached, None
        requests, finish = self._requests_for([self._text_probe(text)])
        return None, (key, list(requests), finish)

    def _text_done(self, key: _Key, finish: _Finish, answers: Sequence[int]) -> int:
        value = finish(answers)[0]
        self._texts.put(key, value)
        return value

    def count_text(self, text: str) -> int:
        """The tokens of a bare string: a user turn holding it, less the turn's framing (cached
        by the text). Whitespace-only text, which the endpoint refuses, is estimated at four
        characters a token."""
        value, pending = self._text_plan(text)
        if pending is None:
            return cast(int, value)
        key, requests, finish = pending
        return self._text_done(key, finish, self._run(requests))

    async def acount_text(self, text: str) -> int:
        """:meth:`count_text` on the async client."""
        value, pending = self._text_plan(text)
        if pending is None:
            return cast(int, value)
        key, requests, finish = pending
        return self._text_done(key, finish, await self._arun(requests))

    def cache_clear(self) -> None:
        super().cache_clear()
        self._texts.clear()
