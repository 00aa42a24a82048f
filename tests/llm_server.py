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

Each provider gets its own error format (OpenAI ``{"error": {...}}``, Anthropic ``{"type": "error",
"error": {...}}``); the fixtures ``llm_server`` and ``llm_server_b`` give a fresh server per test.
"""

from __future__ import annotations

import json
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
    #: the fault this request got, or None for a normal answer
    fault: str | None = None
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


class FakeLLMServer:
    """An OpenAI + Anthropic compatible HTTP server on 127.0.0.1, in a background thread."""

    def __init__(self, reply: ReplyFn | None = None) -> None:
        self.reply: ReplyFn = reply or echo_markers
        #: answer prompts over about this many tokens with the context-length 400 (None: no limit)
        self.context_limit: int | None = None
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
        return [m for r in self.answered() for m in r.markers]

    # -- used by the handler ---------------------------------------------------------------------

    def _record(self, request: RecordedRequest) -> Fault | None:
        with self._lock:
            self.requests.append(request)
            fault = self._faults.popleft() if self._faults else None
            limit = self.context_limit
            if fault is None and limit is not None and _rough_tokens(request.prompt) > limit:
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
        owner = self.owner
        length = int(self.headers.get("content-length") or 0)
        raw = self.rfile.read(length) if length else b""
        try:
            body = json.loads(raw) if raw else None
        except ValueError:
            body = None
        path = self.path.split("?", 1)[0]
        if path.endswith("/chat/completions"):
            provider = "openai"
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

    def _answer(self, request: RecordedRequest, provider: str, *, text: str | None = None) -> None:
        if text is None:
            text = self.owner.reply(request)
        request.reply = text
        serial = self.owner._next_id()
        body = request.body or {}
        model = str(body.get("model") or "fake-model")
        prompt_tokens = _rough_tokens(request.prompt)
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
