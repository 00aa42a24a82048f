"""A fake LLM server for wire-path tests: OpenAI chat completions and Anthropic messages.

The real SDKs (``openai`` / ``anthropic``, through ``ChatOpenAI`` / ``ChatAnthropic``) talk HTTP
to it on 127.0.0.1. It records every request, answers with a pluggable function of the request
(default: a deterministic summary echoing the ``msg-N`` markers found in the transcript), and
injects faults on demand from a queue consumed one per request::

    server = FakeLLMServer().start()
    server.push("429", "500")          # the next two requests fail, the third succeeds
    server.push(Fault.timeout(0.6))    # then one request that answers too late
    ...
    server.stop()

Fault kinds:

* ``"ok"``: a normal answer (a placeholder, to fail a later request of the same call);
* ``"429"``: a rate limit; ``Fault.rate_limit(retry_after=2, retry_after_ms=None)`` sets the
  ``retry-after`` / ``retry-after-ms`` headers (a header is sent only when its value is not None);
* ``"500"``: a server error (``Fault.server_error(503, retry_after=1)``, ``529`` for Anthropic's
  overloaded), with the same optional headers;
* ``"timeout"``: the handler sleeps longer than the client's timeout (``Fault.timeout(0.6)``);
* ``"hang"``: the handler never answers (until the server stops): ``Fault.hang()``;
* ``"malformed"``: a 200 answer whose body is not valid JSON;
* ``"malformed_shape"``: a 200 answer that is valid JSON but not a completion (no choices/content);
* ``"empty"``: a well-formed 200 answer whose text is empty;
* ``"context_length"``: a 400 context-length error in each provider's error format;
* ``"delay"``: a normal answer, late (``Fault.delay(0.8)``), e.g. to cancel a call meanwhile.

Besides the queue, ``server.context_limit = N`` answers every request whose prompt is over about N
tokens (4 characters a token) with the context-length 400, like a model with a small window.
``server.count(...)`` counts the requests that reached the server (by provider or fault).

Anthropic's token counting, ``POST /v1/messages/count_tokens``, answers ``{"input_tokens": N}``
with the deterministic, additive count of :func:`anthropic_token_count` (four characters a token,
rounded up, per text or tool block, plus a fixed overhead per message, per request, for a system
prompt and for tools). It validates the request like the real API (an empty ``messages``, a
``tool_result`` without its ``tool_use`` in the previous turn, a ``tool_use`` not answered in the
next turn, an empty turn ... get a 400 in Anthropic's error format), is recorded with
``endpoint == "count_tokens"`` (``server.count_requests()``) and takes faults from the same queue.
``server.usage_bias = (1.3, 5)`` makes the ``usage.input_tokens`` of normal ``/v1/messages``
answers ``round(1.3 * count + 5)`` (count: the same arithmetic on the request) instead of the
rough prompt estimate, so that a calibration can be tested. ``server.max_in_flight`` is the
largest number of requests the server was handling at once.

Each provider gets its own error format (OpenAI ``{"error": {...}}``, Anthropic ``{"type": "error",
"error": {...}}``); the fixtures ``llm_server`` and ``llm_server_b`` give a fresh server per test.
"""

from __future__ import annotations

import json
import math
import re
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, TypeVar

import pytest

__all__ = [
    "MARKER",
    "MODES",
    "PROVIDERS",
    "FakeLLMServer",
    "Fault",
    "RecordedRequest",
    "anthropic_message_tokens",
    "anthropic_request_error",
    "anthropic_token_count",
    "echo_markers",
    "llm_server",
    "llm_server_b",
    "over_the_wire",
]

#: the chat-model integrations the fake server speaks for, and the two drivers
PROVIDERS = ("openai", "anthropic")
MODES = ("sync", "async")

_F = TypeVar("_F", bound=Callable[..., Any])


def over_the_wire(test: _F) -> _F:
    """Run ``test(..., provider, mode)`` for every provider and both drivers (sync, async)."""
    by_provider = pytest.mark.parametrize("provider", PROVIDERS)(test)
    return pytest.mark.parametrize("mode", MODES)(by_provider)  # type: ignore[no-any-return]


#: the markers the default reply echoes: one per test message
MARKER = re.compile(r"\bmsg-\d+\b")

_TRANSCRIPT = re.compile(r"<transcript>\n?(.*?)\n?</transcript>", re.S)
_PREVIOUS = re.compile(r"<previous_summary>\n?(.*?)\n?</previous_summary>", re.S)


@dataclass(frozen=True)
class Fault:
    """One injected fault, consumed by one request."""

    kind: str
    #: seconds the handler waits before answering ("timeout", "delay")
    seconds: float = 0.0
    #: the retry-after header (seconds) of a "429" / "500"-kind answer; None: no header
    retry_after: float | None = None
    #: the retry-after-ms header (milliseconds, OpenAI's finer hint); None: no header
    retry_after_ms: float | None = None
    #: the status of a "500"-kind fault (500, 502, 503, 529 ...)
    status: int = 500

    KINDS = (
        "ok",
        "429",
        "500",
        "timeout",
        "hang",
        "malformed",
        "malformed_shape",
        "empty",
        "context_length",
        "delay",
    )

    def __post_init__(self) -> None:
        if self.kind not in self.KINDS:
            raise ValueError(f"unknown fault {self.kind!r}; use one of {self.KINDS}")

    @classmethod
    def rate_limit(
        cls, retry_after: float | None = 0, retry_after_ms: float | None = None
    ) -> Fault:
        return cls("429", retry_after=retry_after, retry_after_ms=retry_after_ms)

    @classmethod
    def server_error(
        cls,
        status: int = 500,
        retry_after: float | None = None,
        retry_after_ms: float | None = None,
    ) -> Fault:
        return cls("500", status=status, retry_after=retry_after, retry_after_ms=retry_after_ms)

    @classmethod
    def timeout(cls, seconds: float = 0.6) -> Fault:
        return cls("timeout", seconds=seconds)

    @classmethod
    def hang(cls) -> Fault:
        """No answer at all until the server stops (the client must give up on its own)."""
        return cls("hang", seconds=3_600)

    @property
    def headers(self) -> dict[str, str]:
        """The retry hint headers this fault's answer carries."""
        headers: dict[str, str] = {}
        if self.retry_after is not None:
            headers["retry-after"] = f"{self.retry_after:g}"
        if self.retry_after_ms is not None:
            headers["retry-after-ms"] = f"{self.retry_after_ms:g}"
        return headers

    @classmethod
    def delay(cls, seconds: float) -> Fault:
        return cls("delay", seconds=seconds)


def _text_of(content: Any) -> str:
    """The text of an OpenAI / Anthropic message content (a string or a list of blocks)."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for block in content:
            if isinstance(block, str):
                parts.append(block)
            elif isinstance(block, dict) and isinstance(block.get("text"), str):
                parts.append(block["text"])
        return "\n".join(parts)
    return ""


@dataclass
class RecordedRequest:
    """One request as the server received it (recorded before any fault is applied)."""

    provider: str  # "openai" | "anthropic"
    path: str
    headers: dict[str, str]
    raw: bytes
    body: dict[str, Any] | None
    #: the fault this request got, or None for a normal answer ("invalid_request": a 400 the
    #: server's own validation answered, see ``error``)
    fault: str | None = None
    #: "chat" (a completion) or "count_tokens" (Anthropic's token counting)
    endpoint: str = "chat"
    #: the message of the 400 the validation answered
    error: str | None = None
    #: the reply text sent (None when a fault replaced the answer)
    reply: str | None = None
    received_at: float = field(default_factory=time.monotonic)

    @property
    def messages(self) -> list[dict[str, Any]]:
        return list((self.body or {}).get("messages") or [])

    @property
    def system(self) -> str:
        """The system prompt: Anthropic's top-level ``system``, OpenAI's system/developer turns."""
        if self.provider == "anthropic":
            return _text_of((self.body or {}).get("system", ""))
        return "\n".join(
            _text_of(m.get("content"))
            for m in self.messages
            if m.get("role") in ("system", "developer")
        )

    @property
    def user_text(self) -> str:
        """The text of the user turns (the summarizer puts everything it sends there)."""
        return "\n".join(
            _text_of(m.get("content")) for m in self.messages if m.get("role") == "user"
        )

    @property
    def prompt(self) -> str:
        return f"{self.system}\n{self.user_text}"

    @property
    def transcript(self) -> str | None:
        """The text inside <transcript>...</transcript>, or None (e.g. a compress call)."""
        match = _TRANSCRIPT.search(self.user_text)
        return match.group(1) if match else None

    @property
    def previous_summary(self) -> str | None:
        match = _PREVIOUS.search(self.user_text)
        return match.group(1) if match else None

    @property
    def markers(self) -> list[str]:
        """The msg-N markers in the transcript (not in the previous summary), in order."""
        return MARKER.findall(self.transcript or "")

    @property
    def max_tokens(self) -> int | None:
        """The output limit sent: ``max_completion_tokens`` / ``max_tokens`` (OpenAI) or
        ``max_tokens`` (Anthropic)."""
        body = self.body or {}
        for key in ("max_completion_tokens", "max_tokens"):
            if isinstance(body.get(key), int):
                return int(body[key])
        return None


ReplyFn = Callable[[RecordedRequest], str]


def echo_markers(request: RecordedRequest) -> str:
    """The default reply: a deterministic summary naming every msg-N seen in the transcript."""
    transcript = request.transcript
    if transcript is None:  # a compress call: answer something short
        return "Compressed summary."
    markers = request.markers
    return "Summary: saw " + (" ".join(markers) if markers else "no markers") + "."


def _rough_tokens(text: str) -> int:
    return max(1, len(text) // 4)


# -- Anthropic's token counting, faked -------------------------------------------------------------

#: the fixed parts of the fake count: every request, every message (its role markers), a
#: non-empty system prompt, a request with tools (the tool-use preamble)
COUNT_PER_REQUEST = 7
COUNT_PER_MESSAGE = 4
COUNT_PER_SYSTEM = 3
COUNT_PER_TOOLS = 20
#: what an image block costs
COUNT_PER_IMAGE = 100


def _quarter(text: str) -> int:
    """Four characters a token, rounded up."""
    return math.ceil(len(text) / 4)


def _content_tokens(content: Any) -> int:
    if isinstance(content, str):
        return _quarter(content)
    if isinstance(content, list):
        return sum(_block_tokens(block) for block in content)
    return 0


def _block_tokens(block: Any) -> int:
    """One content block: its text, a tool call's name and input, a tool result's content (ids
    and types are not counted)."""
    if isinstance(block, str):
        return _quarter(block)
    if not isinstance(block, dict):
        return 0
    kind = block.get("type")
    if kind == "text":
        return _quarter(str(block.get("text", "")))
    if kind == "tool_use":
        return _quarter(str(block.get("name", "")) + json.dumps(block.get("input", {})))
    if kind == "tool_result":
        return _content_tokens(block.get("content", ""))
    if kind == "image":
        return COUNT_PER_IMAGE
    return _quarter(json.dumps(block, sort_keys=True))


def anthropic_message_tokens(message: dict[str, Any]) -> int:
    """What the fake counts for one turn of a request: its blocks plus ``COUNT_PER_MESSAGE``."""
    return COUNT_PER_MESSAGE + _content_tokens(message.get("content"))


def anthropic_token_count(body: dict[str, Any]) -> int:
    """The fake count of a Messages API request body (system, messages and tools)."""
    total = COUNT_PER_REQUEST
    system = body.get("system")
    if system:
        total += COUNT_PER_SYSTEM + _content_tokens(system)
    total += sum(anthropic_message_tokens(m) for m in body.get("messages") or [])
    tools = body.get("tools") or []
    if tools:
        total += COUNT_PER_TOOLS + sum(_quarter(json.dumps(t, sort_keys=True)) for t in tools)
    return total


def _blocks_of(content: Any) -> list[dict[str, Any]]:
    return [b for b in content if isinstance(b, dict)] if isinstance(content, list) else []


def anthropic_request_error(body: dict[str, Any] | None) -> str | None:
    """Why the real API would refuse this request body with a 400 (None: it is valid).

    The checks the real Messages API makes that matter to a token counter: a model; at least one
    message; roles user / assistant; no empty turn except a final assistant one; no empty text
    block; no trailing whitespace in a final assistant turn; every ``tool_result`` answering a
    ``tool_use`` of the previous (assistant) turn; every ``tool_use`` answered in the next turn.
    """
    if not isinstance(body, dict):
        return "request body: expected a JSON object"
    if not isinstance(body.get("model"), str) or not body["model"]:
        return "model: Field required"
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        return "messages: at least one message is required"
    system = body.get("system")
    if system is not None and not isinstance(system, (str, list)):
        return "system: Input should be a valid string or a list of text blocks"
    last = len(messages) - 1
    for i, message in enumerate(messages):
        if not isinstance(message, dict) or message.get("role") not in ("user", "assistant"):
            return f"messages.{i}.role: Input should be 'user' or 'assistant'"
        content = message.get("content")
        if not isinstance(content, (str, list)):
            return f"messages.{i}.content: Input should be a valid string or list"
        empty = not content if isinstance(content, list) else not content.strip()
        if empty and not (i == last and message["role"] == "assistant"):
            return (
                f"messages.{i}: all messages must have non-empty content except for the "
                "optional final assistant message"
            )
        blocks = _blocks_of(content)
        for j, block in enumerate(blocks):
            if block.get("type") == "text" and not str(block.get("text", "")).strip():
                return f"messages.{i}.content.{j}.text: text content blocks must be non-empty"
        if i == last and message["role"] == "assistant":
            text = content if isinstance(content, str) else ""
            if blocks and blocks[-1].get("type") == "text":
                text = str(blocks[-1].get("text", ""))
            if text != text.rstrip():
                return "final assistant content cannot end with trailing whitespace"
        previous = messages[i - 1] if i > 0 else None
        calls = (
            {
                b.get("id")
                for b in _blocks_of(previous.get("content"))
                if b.get("type") == "tool_use"
            }
            if isinstance(previous, dict) and previous.get("role") == "assistant"
            else set()
        )
        results = [b.get("tool_use_id") for b in blocks if b.get("type") == "tool_result"]
        if results and message["role"] != "user":
            return f"messages.{i}: tool_result blocks are only allowed in user messages"
        unexpected = [r for r in results if r not in calls]
        if unexpected:
            return (
                f"messages.{i}.content: unexpected `tool_use_id` found in `tool_result` blocks: "
                f"{unexpected[0]}. Each `tool_result` block must have a corresponding `tool_use` "
                "block in the previous message."
            )
        if calls and i > 0:
            missing = sorted(str(c) for c in calls if c not in results)
            if missing:
                return (
                    f"messages.{i - 1}: `tool_use` ids were found without `tool_result` blocks "
                    f"immediately after: {', '.join(missing)}. Each `tool_use` block must have a "
                    "corresponding `tool_result` block in the next message."
                )
    return None


class FakeLLMServer:
    """An OpenAI + Anthropic compatible HTTP server on 127.0.0.1, in a background thread."""

    def __init__(self, reply: ReplyFn | None = None) -> None:
        self.reply: ReplyFn = reply or echo_markers
        #: answer prompts over about this many tokens with the context-length 400 (None: no limit)
        self.context_limit: int | None = None
        #: (scale, offset): normal Anthropic answers report input_tokens = round(scale * count +
        #: offset), count by :func:`anthropic_token_count` (None: the rough prompt estimate)
        self.usage_bias: tuple[float, float] | None = None
        #: the largest number of requests being handled at once
        self.max_in_flight = 0
        self._in_flight = 0
        self.requests: list[RecordedRequest] = []
        self._faults: deque[Fault] = deque()
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._serial = 0
        self._httpd: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # -- control ---------------------------------------------------------------------------------

    def start(self) -> FakeLLMServer:
        server = self

        class Handler(_Handler):
            owner = server

        httpd = _QuietServer(("127.0.0.1", 0), Handler)
        self._httpd = httpd
        self._thread = threading.Thread(
            target=httpd.serve_forever, kwargs={"poll_interval": 0.01}, daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stopping.set()  # wakes handlers sleeping on a "timeout" or "delay" fault
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def __enter__(self) -> FakeLLMServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def port(self) -> int:
        assert self._httpd is not None, "the server is not started"
        return int(self._httpd.server_address[1])

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def openai_base_url(self) -> str:
        return f"{self.url}/v1"

    @property
    def anthropic_base_url(self) -> str:
        return self.url

    def push(self, *faults: Fault | str) -> None:
        """Queue faults; each request consumes one (in order) until the queue is empty."""
        with self._lock:
            for fault in faults:
                self._faults.append(fault if isinstance(fault, Fault) else Fault(fault))

    def clear(self) -> None:
        """Forget the recorded requests and the pending faults."""
        with self._lock:
            self.requests.clear()
            self._faults.clear()

    @property
    def pending_faults(self) -> int:
        with self._lock:
            return len(self._faults)

    def answered(self) -> list[RecordedRequest]:
        """The requests that got a normal, prompt answer (no fault, or the "ok" placeholder)."""
        with self._lock:
            return [r for r in self.requests if r.fault in (None, "ok")]

    def count(self, *, provider: str | None = None, fault: str | None = "any") -> int:
        """How many requests reached the server: all of them, or those of one provider, or those
        that got one fault (``fault=None``: the normal answers)."""
        with self._lock:
            return sum(
                1
                for r in self.requests
                if (provider is None or r.provider == provider)
                and (fault == "any" or r.fault == fault)
            )

    def markers_seen(self) -> list[str]:
        """Every msg-N marker in the transcripts of all answered requests, in order."""
        return [m for r in self.answered() if r.endpoint == "chat" for m in r.markers]

    def count_requests(self) -> list[RecordedRequest]:
        """The requests to Anthropic's token counting (``/v1/messages/count_tokens``)."""
        with self._lock:
            return [r for r in self.requests if r.endpoint == "count_tokens"]

    def _enter(self) -> None:
        with self._lock:
            self._in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self._in_flight)

    def _leave(self) -> None:
        with self._lock:
            self._in_flight -= 1

    # -- used by the handler ---------------------------------------------------------------------

    def _record(self, request: RecordedRequest) -> Fault | None:
        with self._lock:
            self.requests.append(request)
            fault = self._faults.popleft() if self._faults else None
            limit = self.context_limit
            counting = request.endpoint == "count_tokens"  # counting has no context window
            if (
                fault is None
                and limit is not None
                and not counting
                and _rough_tokens(request.prompt) > limit
            ):
                fault = Fault("context_length")
            request.fault = fault.kind if fault else None
            self._serial += 1
            return fault

    def _next_id(self) -> int:
        with self._lock:
            return self._serial


class _QuietServer(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client hanging up (after a timeout fault, or on a kept-alive connection at the end of
        a test) is expected; anything else is printed as usual."""
        if isinstance(sys.exc_info()[1], (ConnectionError, TimeoutError)):
            return
        super().handle_error(request, client_address)


class _Handler(BaseHTTPRequestHandler):
    owner: FakeLLMServer
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # headers and body go out in two writes: no delayed-ACK stall

    def log_message(self, format: str, *args: Any) -> None:  # quiet
        pass

    def _send(self, status: int, payload: bytes, headers: dict[str, str] | None = None) -> None:
        try:
            self.send_response(status)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(payload)))
            for key, value in (headers or {}).items():
                self.send_header(key, value)
            self.end_headers()
            self.wfile.write(payload)
            self.wfile.flush()
        except OSError:  # the client gave up (e.g. a timeout fault): nothing to answer
            self.close_connection = True

    def _json(self, status: int, data: dict[str, Any], headers: dict[str, str] | None = None):
        self._send(status, json.dumps(data).encode(), headers)

    def do_POST(self) -> None:
        self.owner._enter()
        try:
            self._post()
        finally:
            self.owner._leave()

    def _post(self) -> None:
        owner = self.owner
        length = int(self.headers.get("content-length") or 0)
        raw = self.rfile.read(length) if length else b""
        try:
            body = json.loads(raw) if raw else None
        except ValueError:
            body = None
        path = self.path.split("?", 1)[0]
        endpoint = "chat"
        if path.endswith("/chat/completions"):
            provider = "openai"
        elif path.endswith("/messages/count_tokens"):
            provider, endpoint = "anthropic", "count_tokens"
        elif path.endswith("/messages"):
            provider = "anthropic"
        else:
            self._json(404, {"error": {"message": f"no route {path}", "type": "not_found"}})
            return
        request = RecordedRequest(
            provider=provider,
            path=path,
            headers={k.lower(): v for k, v in self.headers.items()},
            raw=raw,
            body=body if isinstance(body, dict) else None,
            endpoint=endpoint,
        )
        fault = owner._record(request)
        if fault is not None and fault.kind in ("timeout", "hang", "delay"):
            if owner._stopping.wait(fault.seconds):
                self.close_connection = True
                return
            if fault.kind in ("timeout", "hang"):  # the client is gone by now; answer the void
                self.close_connection = True
                self._answer(request, provider)
                return
        if fault is None or fault.kind in ("ok", "delay"):
            self._answer(request, provider)
            return
        self._fault(fault, request, provider)

    # -- answers ---------------------------------------------------------------------------------

    def _count_tokens(self, request: RecordedRequest) -> None:
        """Anthropic's ``/v1/messages/count_tokens``: the fake count, or the real API's 400."""
        error = anthropic_request_error(request.body)
        if error is not None:
            with self.owner._lock:
                request.fault, request.error = "invalid_request", error
            body = {"type": "error", "error": {"type": "invalid_request_error", "message": error}}
            self._json(400, body)
            return
        assert request.body is not None
        self._json(200, {"input_tokens": anthropic_token_count(request.body)})

    def _input_tokens(self, request: RecordedRequest) -> int:
        """The prompt tokens an answer reports: biased by ``usage_bias`` when set."""
        bias = self.owner.usage_bias
        if bias is None or request.provider != "anthropic":
            return _rough_tokens(request.prompt)
        scale, offset = bias
        return math.floor(scale * anthropic_token_count(request.body or {}) + offset + 0.5)

    def _answer(self, request: RecordedRequest, provider: str, *, text: str | None = None) -> None:
        if request.endpoint == "count_tokens":
            self._count_tokens(request)
            return
        if text is None:
            text = self.owner.reply(request)
        request.reply = text
        serial = self.owner._next_id()
        body = request.body or {}
        model = str(body.get("model") or "fake-model")
        prompt_tokens = self._input_tokens(request)
        completion_tokens = _rough_tokens(text)
        if provider == "openai":
            self._json(
                200,
                {
                    "id": f"chatcmpl-fake{serial}",
                    "object": "chat.completion",
                    "created": int(time.time()),
                    "model": model,
                    "choices": [
                        {
                            "index": 0,
                            "message": {"role": "assistant", "content": text, "refusal": None},
                            "logprobs": None,
                            "finish_reason": "stop",
                        }
                    ],
                    "usage": {
                        "prompt_tokens": prompt_tokens,
                        "completion_tokens": completion_tokens,
                        "total_tokens": prompt_tokens + completion_tokens,
                    },
                    "system_fingerprint": "fp_fake",
                },
            )
        else:
            self._json(
                200,
                {
                    "id": f"msg_fake{serial}",
                    "type": "message",
                    "role": "assistant",
                    "model": model,
                    "content": [{"type": "text", "text": text}],
                    "stop_reason": "end_turn",
                    "stop_sequence": None,
                    "usage": {"input_tokens": prompt_tokens, "output_tokens": completion_tokens},
                },
            )

    def _fault(self, fault: Fault, request: RecordedRequest, provider: str) -> None:
        if fault.kind == "malformed":
            self._send(200, b'{"id": "chatcmpl-broken", "choices": [ {"message": ')
            return
        if fault.kind == "malformed_shape":  # JSON, but not a completion of either API
            self._json(200, {"id": "broken", "object": "nonsense", "detail": "upstream garbled"})
            return
        if fault.kind == "empty":
            self._answer(request, provider, text="")
            return
        openai = provider == "openai"
        headers = fault.headers
        if fault.kind == "429":
            if openai:
                error = {"message": "Rate limit reached", "type": "requests", "code": "rate_limit"}
                self._json(429, {"error": error}, headers)
            else:
                error = {"type": "rate_limit_error", "message": "Number of requests too high"}
                self._json(429, {"type": "error", "error": error}, headers)
            return
        if fault.kind == "500":
            if openai:
                error = {"message": "The server had an error", "type": "server_error", "code": None}
                self._json(fault.status, {"error": error}, headers)
            else:
                kind = "overloaded_error" if fault.status == 529 else "api_error"
                error = {"type": kind, "message": "Internal server error"}
                self._json(fault.status, {"type": "error", "error": error}, headers)
            return
        if fault.kind == "context_length":
            if openai:
                error = {
                    "message": (
                        "This model's maximum context length is 128000 tokens. However, your "
                        "messages resulted in 200000 tokens. Please reduce the length of the "
                        "messages."
                    ),
                    "type": "invalid_request_error",
                    "param": "messages",
                    "code": "context_length_exceeded",
                }
                self._json(400, {"error": error})
            else:
                error = {
                    "type": "invalid_request_error",
                    "message": "prompt is too long: 210000 tokens > 200000 maximum",
                }
                self._json(400, {"type": "error", "error": error})
            return
        raise AssertionError(f"unhandled fault {fault}")  # pragma: no cover


# -- fixtures -------------------------------------------------------------------------------------


@pytest.fixture
def llm_server() -> Iterator[FakeLLMServer]:
    """A fresh fake server per test (starting one takes about a millisecond)."""
    with FakeLLMServer() as server:
        yield server


@pytest.fixture
def llm_server_b() -> Iterator[FakeLLMServer]:
    """A second, independent fake server (e.g. for a fallback model)."""
    with FakeLLMServer() as server:
        yield server
