"""Load a saved conversation, in any common format, as a list of LangChain messages.

Files (:func:`load_transcript`, or :func:`parse_transcript` for text already in memory) hold
either **one JSON document** or **JSONL** (one JSON value per line; blank lines are ignored; a
``.jsonl``/``.ndjson`` name always means JSONL). A JSON document is a bare list of messages, an
object with a ``"messages"`` list (a request body: ``model``, ``tools`` ... are ignored; for
Anthropic a top-level ``"system"`` becomes a leading ``SystemMessage``), or one message object.
Three message formats are understood:

``langchain``
    ``messages_to_dict`` items (``{"type": "human", "data": {...}}``) and ``dumpd`` objects
    (``{"lc": 1, "type": "constructor", "id": [..., "HumanMessage"], "kwargs": {...}}``, revived
    with ``allowed_objects="messages"``: nothing but message classes can be built from a file).
``openai``
    Chat Completions messages: roles ``system``, ``developer``, ``user``, ``assistant`` and
    ``tool``; ``tool_calls`` with JSON-string ``arguments`` (parsed into ``AIMessage.tool_calls``);
    content parts (``text``, ``image_url`` ...) are kept as the content list. The legacy
    ``function_call`` / role ``"function"`` is rejected.
``anthropic``
    Messages API: ``tool_use`` blocks become ``AIMessage.tool_calls`` (the other blocks stay the
    content: a string when only one plain text block is left, as ``ChatAnthropic`` does);
    each ``tool_result`` block of a user message becomes a ``ToolMessage`` (``status="error"``
    for ``is_error``, ``name`` from the matching ``tool_use``), in order, and the rest of that
    user message (text, images) a ``HumanMessage`` after them. ``thinking`` and
    ``redacted_thinking`` blocks are **kept** in the ``AIMessage`` content list (they carry the
    signature Anthropic needs to see them again, and they are part of what was said).

**Detection** (``format="auto"``; an explicit ``format=`` always wins): the first item decides
between LangChain (``type`` + ``data``, or an ``lc`` key) and a role format (a ``role`` key).
A role-format transcript is ``anthropic`` when there is a top-level ``system`` beside
``messages``, or any message has a ``tool_use``, ``tool_result``, ``thinking``,
``redacted_thinking`` or ``document`` block, or an ``image`` block with a ``source``; otherwise
it is ``openai`` (plain ``role``/``content`` text parses the same either way). Anything else is a
:class:`TranscriptError` naming the first item not recognised and the accepted formats.

Every transcript is checked before it is returned: a tool result must answer a tool call made
by an earlier AI message, and only once (a trailing call still waiting for its result is fine).
Messages without an id get ``f"{stem}-{index}"`` (``stem``: the file name without its
extension, ``index``: the position in the returned list), so the same file always gives the same
ids; ids already present are kept.

LangGraph threads are read from their checkpointer: :func:`messages_from_checkpointer` for any
``BaseCheckpointSaver``, :func:`load_sqlite_thread` and :func:`load_postgres_thread` for the
saved ones (both read only: nothing is created or written, ``.setup()`` is never called).

Every problem is a :class:`TranscriptError` whose text is one line naming the source, the line
or message (counted from 1) and what is wrong, ready for a command line to print. That holds for
hostile files too, and reading one is bounded: a file over ``max_bytes`` (default
``DEFAULT_MAX_BYTES``, 256 MiB) is refused before it is read; anything but a regular file (a
named pipe with no writer, ``/dev/zero``, a socket) is refused up front instead of read forever;
JSON nested deeper than ``MAX_JSON_DEPTH`` levels (the document, or a tool call's ``arguments``
string) is refused before the parser recurses; a number longer than Python's integer digit limit
and a ``dumpd`` placeholder (``{"lc": 1, "type": "not_implemented"}``) are errors naming the
line or message.
"""

from __future__ import annotations

import json
import os
import re
import stat
import sys
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, get_args

from langchain_core.messages import (
    AIMessage,
    BaseMessage,
    HumanMessage,
    RemoveMessage,
    SystemMessage,
    ToolMessage,
    convert_to_messages,
    messages_from_dict,
)
from pydantic import ValidationError

from langmem_ext.core.identity import tool_call_ids
from langmem_ext.core.text import json_too_deep
from langmem_ext.errors import LangmemExtError

if TYPE_CHECKING:
    from langgraph.checkpoint.base import BaseCheckpointSaver

__all__ = [
    "DEFAULT_MAX_BYTES",
    "MAX_JSON_DEPTH",
    "Format",
    "Transcript",
    "TranscriptError",
    "load_postgres_thread",
    "load_sqlite_thread",
    "load_transcript",
    "messages_from_checkpointer",
    "parse_transcript",
]

Format = Literal["auto", "langchain", "openai", "anthropic"]

_FORMATS: tuple[str, ...] = get_args(Format)
_ACCEPTED = (
    "accepted formats: langchain (messages_to_dict {'type', 'data'} or dumpd {'lc', ...}), "
    "openai (Chat Completions {'role', 'content', 'tool_calls'}), "
    "anthropic (Messages API {'role', 'content': [blocks]})"
)
_OPENAI_ROLES = ("system", "developer", "user", "assistant", "tool")
_ANTHROPIC_ROLES = ("user", "assistant", "system")
#: content blocks only the Anthropic Messages API has
_ANTHROPIC_BLOCKS = frozenset(
    {"tool_use", "tool_result", "thinking", "redacted_thinking", "document"}
)
_JSONL_SUFFIXES = (".jsonl", ".ndjson")
_MAX_THREADS_LISTED = 10
#: the largest transcript file read by default (``max_bytes``; the CLI's ``--max-bytes``)
DEFAULT_MAX_BYTES = 256 * 1024 * 1024
#: the deepest JSON nesting read: messages nest a few levels (content blocks, tool arguments);
#: far deeper is hostile, and ``json.loads`` (then LangChain) would recurse once per level
MAX_JSON_DEPTH = 100


class TranscriptError(LangmemExtError, ValueError):
    """A transcript could not be read. ``str(exc)`` is one line for the user, naming the source
    (file, or ``sqlite PATH thread ID`` ...), the line or message when known, and the problem::

        chat.jsonl line 7: not valid JSON (Expecting ',' delimiter at column 12)
        chat.json message 4: a tool result (tool_call_id 'call_9') with no tool call before it

    ``source`` is that source, ``line`` the line of the file (``None`` when unknown: a JSON
    document's messages are counted, not located), ``item`` the position (from 1) of the
    message in the input list when the problem is one message, and ``problem`` the text after
    the location.
    """

    def __init__(
        self, source: str, problem: str, *, line: int | None = None, item: int | None = None
    ) -> None:
        problem = " ".join(problem.split())  # one line, whatever the driver said
        where = f" line {line}" if line is not None else f" message {item}" if item else ""
        super().__init__(f"{source}{where}: {problem}")
        self.source = source
        self.line = line
        self.item = item
        self.problem = problem


@dataclass(frozen=True)
class Transcript:
    """Messages read from ``source``, in order, every one with an id.

    ``format`` is what they were read as: ``"langchain"``, ``"openai"``, ``"anthropic"``, or
    ``"langgraph-sqlite"``, ``"langgraph-postgres"`` (``"langgraph"`` for another checkpointer).
    """

    messages: list[BaseMessage]
    format: str
    source: str


# --------------------------------------------------------------------------------------------
# helpers


@dataclass(frozen=True, slots=True)
class _Loc:
    """Where an input item is: a line of a JSONL file, or a position (from 1) in a list."""

    line: int | None = None
    item: int | None = None


def _first_line(error: BaseException) -> str:
    """One line saying what ``error`` is about (a pydantic error: its first few fields)."""
    if isinstance(error, ValidationError):
        fields = "; ".join(
            f"{'.'.join(map(str, e['loc'])) or 'value'}: {e['msg']}" for e in error.errors()[:3]
        )
        return f"invalid {error.title} ({fields})"
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    return lines[0] if lines else type(error).__name__


def _preview(value: Any, limit: int = 80) -> str:
    try:
        text = json.dumps(value, ensure_ascii=False, default=repr)
    except (TypeError, ValueError):  # pragma: no cover - json.dumps with default=repr
        text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _stem(source: str) -> str:
    """The id prefix for ``source``: its file name without the extension."""
    if source.startswith("<"):
        return "message"
    name = Path(source).name
    for suffix in (".jsonl", ".ndjson", ".json"):
        if name.lower().endswith(suffix) and len(name) > len(suffix):
            return name[: -len(suffix)]
    return Path(name).stem or "message"


def _with_ids(messages: Sequence[BaseMessage], stem: str) -> list[BaseMessage]:
    """``messages`` with ``f"{stem}-{index}"`` given to those without an id (copies)."""
    taken = {m.id for m in messages if m.id}
    out: list[BaseMessage] = []
    for index, message in enumerate(messages):
        if message.id:
            out.append(message)
            continue
        new, n = f"{stem}-{index}", 1
        while new in taken:  # an id in the file already looks like ours: do not collide
            new, n = f"{stem}-{index}.{n}", n + 1
        taken.add(new)
        out.append(message.model_copy(update={"id": new}))
    return out


def _check_tool_results(
    messages: Sequence[tuple[BaseMessage, _Loc]], source: str, fill_names: bool
) -> list[BaseMessage]:
    """Every ToolMessage answers exactly one earlier tool call; returns the messages, with the
    tool's name filled in on results that have none when ``fill_names``."""
    calls: dict[str, str] = {}  # tool_call_id -> tool name
    answered: dict[str, _Loc] = {}
    out: list[BaseMessage] = []
    for message, loc in messages:
        if isinstance(message, RemoveMessage):
            raise TranscriptError(
                source,
                f"a RemoveMessage (id {message.id!r}) is an instruction for LangGraph's "
                "add_messages reducer, not a message",
                line=loc.line,
                item=loc.item,
            )
        if isinstance(message, AIMessage):
            names = {c["id"]: c["name"] for c in message.tool_calls if c.get("id")}
            for call_id in tool_call_ids(message):
                calls[call_id] = names.get(call_id) or calls.get(call_id, "")
        elif isinstance(message, ToolMessage):
            call_id = message.tool_call_id
            if call_id not in calls:
                raise TranscriptError(
                    source,
                    f"a tool result (tool_call_id {call_id!r}) with no tool call before it",
                    line=loc.line,
                    item=loc.item,
                )
            if call_id in answered:
                first = answered[call_id]
                at = f"line {first.line}" if first.line is not None else f"message {first.item}"
                raise TranscriptError(
                    source,
                    f"a second tool result for tool_call_id {call_id!r} (the first is at {at})",
                    line=loc.line,
                    item=loc.item,
                )
            answered[call_id] = loc
            if fill_names and message.name is None and calls[call_id]:
                message = message.model_copy(update={"name": calls[call_id]})
        out.append(message)
    return out


# --------------------------------------------------------------------------------------------
# reading files and JSON, bounded


def _line_of(text: str, offset: int, first: int) -> int:
    return first + text.count("\n", 0, offset)


def loads_bounded(
    text: str, fail: Callable[[str, int | None], Exception], *, line: int = 1, strict: bool = True
) -> Any:
    """``json.loads(text)``, refusing what would make it (or a later reader) blow up, through
    ``fail(problem, line)``: nesting deeper than :data:`MAX_JSON_DEPTH`, a number longer than
    Python's integer digit limit. ``line`` is the line ``text`` starts on in its file. A
    ``json.JSONDecodeError`` is raised as is (callers say where and why)."""
    deep = json_too_deep(text, MAX_JSON_DEPTH)
    if deep is not None:
        raise fail(
            f"JSON nested deeper than {MAX_JSON_DEPTH} levels: not a transcript (refused "
            f"before parsing)",
            _line_of(text, deep, line),
        )
    try:
        return json.loads(text, strict=strict)
    except json.JSONDecodeError:
        raise
    except RecursionError:  # pragma: no cover - the depth check comes first
        raise fail("JSON nested too deeply to read", None) from None
    except ValueError:  # int()'s digit limit: "Exceeds the limit (4300 digits) ..."
        allowed = max(getattr(sys, "get_int_max_str_digits", lambda: 4300)(), 1)
        long = re.search(rf"\d{{{allowed + 1},}}", text)
        digits = f"a {len(long.group()):,}-digit number" if long else "a number too long"
        where = _line_of(text, long.start(), line) if long else None
        raise fail(
            f"{digits}, over Python's limit of {allowed:,} digits for an integer", where
        ) from None


def _file_kind(mode: int) -> str:
    if stat.S_ISFIFO(mode):
        return "a named pipe (FIFO)"
    if stat.S_ISCHR(mode):
        return "a character device"
    if stat.S_ISBLK(mode):
        return "a block device"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "not a regular file"


def read_bounded(
    path: str | os.PathLike[str], max_bytes: int, fail: Callable[[str], Exception]
) -> bytes:
    """The bytes of the regular file at ``path``, at most ``max_bytes``; every problem through
    ``fail(problem)``. The file is opened without blocking and checked before it is read, so a
    named pipe with no writer, a device (``/dev/zero``) or a socket is refused at once, never
    read until a hang or ``MemoryError``; a file growing while read still stops at the limit."""
    if isinstance(max_bytes, bool) or not isinstance(max_bytes, int) or max_bytes < 1:
        raise ValueError(f"max_bytes must be an integer >= 1, got {max_bytes!r}")
    source = os.fspath(path)
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(source, flags)
    except FileNotFoundError:
        raise fail("no such file") from None
    except IsADirectoryError:
        raise fail("is a directory, not a transcript file") from None
    except OSError as error:
        raise fail(f"cannot read it ({error.strerror or error})") from None
    try:
        info = os.fstat(fd)
        if stat.S_ISDIR(info.st_mode):
            raise fail("is a directory, not a transcript file")
        if not stat.S_ISREG(info.st_mode):
            raise fail(
                f"is {_file_kind(info.st_mode)}, not a regular file: reading it could wait "
                "forever or never end; save the transcript to a file first"
            )
        limit = (
            f"over the limit of {max_bytes:,} bytes (max_bytes; the CLI's --max-bytes raises it)"
        )
        if info.st_size > max_bytes:
            raise fail(f"is {info.st_size:,} bytes, {limit}")
        os.set_blocking(fd, True)
        with os.fdopen(fd, "rb") as handle:
            fd = -1  # the file object owns it now
            data = handle.read(max_bytes + 1)
    except OSError as error:
        raise fail(f"cannot read it ({error.strerror or error})") from None
    finally:
        if fd >= 0:
            os.close(fd)
    if len(data) > max_bytes:
        raise fail(f"grew past {max_bytes:,} bytes while read, {limit}")
    return data


# --------------------------------------------------------------------------------------------
# reading JSON / JSONL


@dataclass(frozen=True, slots=True)
class _Document:
    items: list[tuple[Any, _Loc]]
    system: Any = None
    has_system: bool = False


def _decode(data: str | bytes, source: str) -> str:
    if isinstance(data, bytes):
        try:
            return data.decode("utf-8-sig")
        except UnicodeDecodeError as error:
            bad = data[error.start : error.start + 1].hex()
            raise TranscriptError(
                source, f"not UTF-8 text (byte 0x{bad} at offset {error.start})"
            ) from None
    return data.removeprefix("\ufeff")


def _json_error(source: str, error: json.JSONDecodeError, line: int) -> TranscriptError:
    return TranscriptError(
        source,
        f"not valid JSON ({error.msg.removesuffix(' at')} at column {error.colno})",
        line=line,
    )


def _failing_at(source: str) -> Callable[[str, int | None], TranscriptError]:
    return lambda problem, line: TranscriptError(source, problem, line=line)


def _read_jsonl(text: str, source: str) -> _Document:
    items: list[tuple[Any, _Loc]] = []
    for number, raw in enumerate(text.splitlines(), start=1):
        if not raw.strip():
            continue
        try:
            value = loads_bounded(raw, _failing_at(source), line=number)
        except json.JSONDecodeError as error:
            raise _json_error(source, error, number) from None
        if not isinstance(value, dict):
            raise TranscriptError(
                source,
                f"expected one message object per line, got a JSON {type(value).__name__}: "
                f"{_preview(value)}",
                line=number,
            )
        items.append((value, _Loc(line=number)))
    return _Document(items)


def _read(text: str, source: str) -> _Document:
    """The items of ``text`` (JSON document or JSONL), with where each one is."""
    if not text.strip():
        raise TranscriptError(source, "empty (no messages)")
    if source.lower().endswith(_JSONL_SUFFIXES):
        return _read_jsonl(text, source)
    try:
        value = loads_bounded(text, _failing_at(source))
    except json.JSONDecodeError as error:
        lines = [line for line in text.splitlines() if line.strip()]
        if len(lines) > 1:
            try:
                loads_bounded(lines[0], _failing_at(source))
            except (json.JSONDecodeError, TranscriptError):
                pass
            else:  # the first line is a value of its own: JSON Lines
                return _read_jsonl(text, source)
        raise _json_error(source, error, error.lineno) from None
    if isinstance(value, list):
        return _Document([(v, _Loc(item=i)) for i, v in enumerate(value, start=1)])
    if isinstance(value, dict):
        if "messages" in value:
            messages = value["messages"]
            if not isinstance(messages, list):
                raise TranscriptError(
                    source, f'"messages" is a JSON {type(messages).__name__}, not a list'
                )
            return _Document(
                [(v, _Loc(item=i)) for i, v in enumerate(messages, start=1)],
                system=value.get("system"),
                has_system="system" in value,
            )
        return _Document([(value, _Loc(item=1))])  # a single message
    raise TranscriptError(
        source, f"a JSON {type(value).__name__} is not a transcript ({_ACCEPTED})"
    )


# --------------------------------------------------------------------------------------------
# detection


def _is_langchain(item: Any) -> bool:
    return isinstance(item, dict) and (("type" in item and "data" in item) or "lc" in item)


def _blocks(item: Mapping[str, Any]) -> Iterator[Mapping[str, Any]]:
    content = item.get("content")
    if isinstance(content, list):
        yield from (b for b in content if isinstance(b, Mapping))


def _is_anthropic_block(block: Mapping[str, Any]) -> bool:
    kind = block.get("type")
    return kind in _ANTHROPIC_BLOCKS or (kind == "image" and "source" in block)


def _detect(doc: _Document, source: str) -> str:
    first, loc = doc.items[0]
    if _is_langchain(first):
        return "langchain"
    if isinstance(first, dict) and "role" in first:
        if doc.has_system:
            return "anthropic"
        for item, _ in doc.items:
            if isinstance(item, dict) and any(_is_anthropic_block(b) for b in _blocks(item)):
                return "anthropic"
        return "openai"
    raise TranscriptError(
        source,
        f"not a message in any known format: {_preview(first)} ({_ACCEPTED})",
        line=loc.line,
        item=loc.item,
    )


# --------------------------------------------------------------------------------------------
# the three formats


def _parse_langchain(doc: _Document, source: str) -> list[tuple[BaseMessage, _Loc]]:
    from langchain_core.load import load

    out: list[tuple[BaseMessage, _Loc]] = []
    for item, loc in doc.items:
        if not _is_langchain(item):
            raise TranscriptError(
                source,
                "not a LangChain message (expected messages_to_dict {'type', 'data'} or "
                f"dumpd {{'lc': 1, 'type': 'constructor', ...}}): {_preview(item)}",
                line=loc.line,
                item=loc.item,
            )
        try:
            if "lc" in item:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")  # load() is beta
                    message = load(item, allowed_objects="messages")
            else:
                message = messages_from_dict([item])[0]
        except NotImplementedError:  # a dumpd placeholder: {"lc": 1, "type": "not_implemented"}
            raise TranscriptError(
                source,
                f"a dumpd placeholder for an object that could not be serialized (type "
                f"{item.get('type')!r}), not a message: {_preview(item)}",
                line=loc.line,
                item=loc.item,
            ) from None
        except (ValueError, TypeError, KeyError, AttributeError, ImportError) as error:
            kind = item.get("type") if "data" in item else (item.get("id") or [None])[-1]
            raise TranscriptError(
                source,
                f"cannot build a LangChain message of type {kind!r}: {_first_line(error)}",
                line=loc.line,
                item=loc.item,
            ) from None
        if not isinstance(message, BaseMessage):
            raise TranscriptError(
                source,
                f"the dumpd object is a {type(message).__name__}, not a message",
                line=loc.line,
                item=loc.item,
            )
        out.append((message, loc))
    return out


def _parse_openai(doc: _Document, source: str) -> list[tuple[BaseMessage, _Loc]]:
    out: list[tuple[BaseMessage, _Loc]] = []
    for item, loc in doc.items:

        def fail(problem: str, loc: _Loc = loc) -> TranscriptError:
            return TranscriptError(source, problem, line=loc.line, item=loc.item)

        if not isinstance(item, dict) or "role" not in item:
            raise fail(f"not an OpenAI chat message (no 'role'): {_preview(item)}")
        role = item["role"]
        if role == "function" or "function_call" in item:
            raise fail(
                "legacy OpenAI function calling (role 'function' / 'function_call') is not "
                "supported; use tool_calls and role 'tool'"
            )
        if role not in _OPENAI_ROLES:
            raise fail(f"unknown role {role!r} (OpenAI roles: {', '.join(_OPENAI_ROLES)})")
        if role == "tool" and not isinstance(item.get("tool_call_id"), str):
            raise fail("a tool message without a 'tool_call_id'")
        calls = item.get("tool_calls")
        if calls is not None:
            if role != "assistant" or not isinstance(calls, list):
                raise fail("'tool_calls' must be a list on an assistant message")
            for call in calls:
                function = call.get("function") if isinstance(call, dict) else None
                if not (
                    isinstance(function, dict)
                    and isinstance(call.get("id"), str)
                    and isinstance(function.get("name"), str)
                ):
                    raise fail(
                        "a tool call needs 'id' and 'function': {'name', 'arguments'}: "
                        f"{_preview(call)}"
                    )
                arguments = function.get("arguments", "{}")
                if isinstance(arguments, str):
                    label = f"tool call {call['id']!r} ({function['name']}): arguments"

                    def bad_arguments(
                        problem: str, line: int | None, label: str = label
                    ) -> TranscriptError:
                        return fail(f"{label}: {problem}")

                    try:
                        loads_bounded(arguments or "{}", bad_arguments, strict=False)
                    except json.JSONDecodeError as error:
                        raise fail(
                            f"tool call {call['id']!r} ({function['name']}): arguments are not "
                            f"valid JSON ({error.msg.removesuffix(' at')} at column {error.colno})"
                        ) from None
        item = {**item}
        if calls is not None:  # empty arguments mean no arguments
            item["tool_calls"] = [
                {
                    **c,
                    "function": {
                        **c["function"],
                        "arguments": c["function"].get("arguments") or "{}",
                    },
                }
                for c in calls
            ]
        item.setdefault("content", "")
        try:
            message = convert_to_messages([item])[0]
        except (ValueError, TypeError, KeyError, NotImplementedError) as error:
            raise fail(f"cannot convert {role!r} message: {_first_line(error)}") from None
        out.append((message, loc))
    return out


def _simplify(blocks: list[Any]) -> str | list[str | dict[Any, Any]]:
    """One plain text block as its text (as ``ChatAnthropic`` does), else the block list."""
    if not blocks:
        return ""
    if len(blocks) == 1:
        only = blocks[0]
        if isinstance(only, str):
            return only
        if isinstance(only, dict) and only.get("type") == "text" and set(only) <= {"type", "text"}:
            return str(only.get("text", ""))
    return list(blocks)


def _anthropic_content(content: Any, fail: Callable[[str], TranscriptError]) -> list[Any]:
    if content is None:
        return []
    if isinstance(content, str):
        return [{"type": "text", "text": content}] if content else []
    if not isinstance(content, list):
        raise fail(f"'content' must be a string or a list of blocks, not {_preview(content)}")
    for number, block in enumerate(content, start=1):
        if not (isinstance(block, dict) and isinstance(block.get("type"), str)):
            raise fail(f"content block {number} has no 'type': {_preview(block)}")
    return content


def _parse_anthropic(doc: _Document, source: str) -> list[tuple[BaseMessage, _Loc]]:
    out: list[tuple[BaseMessage, _Loc]] = []
    if doc.system:
        if isinstance(doc.system, str):
            out.append((SystemMessage(content=doc.system), _Loc()))
        elif isinstance(doc.system, list) and all(
            isinstance(b, dict) and b.get("type") == "text" for b in doc.system
        ):
            out.append((SystemMessage(content=_simplify(doc.system)), _Loc()))
        else:
            raise TranscriptError(
                source,
                f'"system" must be a string or a list of text blocks: {_preview(doc.system)}',
            )
    for item, loc in doc.items:

        def fail(problem: str, loc: _Loc = loc) -> TranscriptError:
            return TranscriptError(source, problem, line=loc.line, item=loc.item)

        if not isinstance(item, dict) or "role" not in item:
            raise fail(f"not an Anthropic message (no 'role'): {_preview(item)}")
        role = item["role"]
        if role not in _ANTHROPIC_ROLES:
            raise fail(
                f"unknown role {role!r} (Anthropic roles: user, assistant; the system prompt "
                "is the top-level 'system')"
            )
        blocks = _anthropic_content(item.get("content", ""), fail)
        if role == "system":
            out.append((SystemMessage(content=_simplify(blocks)), loc))
        elif role == "assistant":
            calls: list[dict[str, Any]] = []
            kept: list[Any] = []
            for number, block in enumerate(blocks, start=1):
                if block["type"] == "tool_use":
                    if not (
                        isinstance(block.get("id"), str) and isinstance(block.get("name"), str)
                    ):
                        raise fail(f"tool_use block {number} needs a string 'id' and 'name'")
                    args = block.get("input", {})
                    if not isinstance(args, dict):
                        raise fail(f"tool_use block {number}: 'input' is not a JSON object")
                    calls.append(
                        {
                            "id": block["id"],
                            "name": block["name"],
                            "args": args,
                            "type": "tool_call",
                        }
                    )
                elif block["type"] == "tool_result":
                    raise fail(
                        "a tool_result block in an assistant message (results are user turns)"
                    )
                else:
                    kept.append(block)
            out.append((AIMessage(content=_simplify(kept), tool_calls=calls), loc))
        else:
            rest: list[Any] = []
            for number, block in enumerate(blocks, start=1):
                if block["type"] == "tool_use":
                    raise fail("a tool_use block in a user message (calls are assistant turns)")
                if block["type"] != "tool_result":
                    rest.append(block)
                    continue
                call_id = block.get("tool_use_id")
                if not isinstance(call_id, str):
                    raise fail(f"tool_result block {number} has no 'tool_use_id'")
                result = _anthropic_content(block.get("content", ""), fail)
                status = "error" if block.get("is_error") else "success"
                tool = ToolMessage(content=_simplify(result), tool_call_id=call_id, status=status)
                out.append((tool, loc))
            if rest or not blocks:
                out.append((HumanMessage(content=_simplify(rest)), loc))
    return out


# --------------------------------------------------------------------------------------------
# public: files and strings


def parse_transcript(
    data: str | bytes, *, format: Format = "auto", source: str = "<string>"
) -> Transcript:
    """Parse a transcript held in memory (see the module notes for formats and detection).

    ``source`` names it in errors and gives the id prefix of messages without an id (its file
    name without the extension; ``"message"`` for ``"<string>"``); a ``.jsonl`` name means
    JSON Lines. Raises :class:`TranscriptError`.

    >>> t = parse_transcript(
    ...     '[{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]',
    ...     source="chat.json",
    ... )
    >>> t.format, [type(m).__name__ for m in t.messages], [m.id for m in t.messages]
    ('openai', ['HumanMessage', 'AIMessage'], ['chat-0', 'chat-1'])
    """
    if format not in _FORMATS:
        raise TranscriptError(source, f"unknown format {format!r} (one of: {', '.join(_FORMATS)})")
    doc = _read(_decode(data, source), source)
    if not doc.items:
        raise TranscriptError(source, "no messages")
    chosen = _detect(doc, source) if format == "auto" else format
    if chosen == "langchain":
        parsed = _parse_langchain(doc, source)
    elif chosen == "openai":
        parsed = _parse_openai(doc, source)
    else:
        parsed = _parse_anthropic(doc, source)
    checked = _check_tool_results(parsed, source, fill_names=chosen != "langchain")
    return Transcript(_with_ids(checked, _stem(source)), chosen, source)


def load_transcript(
    path: str | os.PathLike[str], *, format: Format = "auto", max_bytes: int = DEFAULT_MAX_BYTES
) -> Transcript:
    """Read the transcript file at ``path`` (JSON or JSONL; see the module notes).

    The transcript's ``source`` is ``path`` as given. Raises :class:`TranscriptError` for a
    missing or unreadable file, one that is not a regular file (a named pipe, a device), one
    over ``max_bytes``, and for everything :func:`parse_transcript` rejects.
    """
    source = os.fspath(path)
    data = read_bounded(source, max_bytes, lambda problem: TranscriptError(source, problem))
    return parse_transcript(data, format=format, source=source)


# --------------------------------------------------------------------------------------------
# public: LangGraph checkpointers


def _thread_ids(checkpointer: BaseCheckpointSaver[Any]) -> tuple[list[str], bool]:
    """Up to 10 thread ids the checkpointer holds, and whether there are more."""
    seen: list[str] = []
    for saved in checkpointer.list(None):
        thread = saved.config.get("configurable", {}).get("thread_id")
        if thread is None or str(thread) in seen:
            continue
        if len(seen) == _MAX_THREADS_LISTED:
            return seen, True
        seen.append(str(thread))
    return seen, False


def _read_thread(
    checkpointer: BaseCheckpointSaver[Any], thread_id: str, channel: str, source: str, fmt: str
) -> Transcript:
    config: Any = {"configurable": {"thread_id": thread_id, "checkpoint_ns": ""}}
    saved = checkpointer.get_tuple(config)
    if saved is None:
        threads, more = _thread_ids(checkpointer)
        if not threads:
            raise TranscriptError(source, f"thread {thread_id!r} not found: there are no threads")
        listed = ", ".join(repr(t) for t in threads) + (" ..." if more else "")
        raise TranscriptError(source, f"thread {thread_id!r} not found; threads: {listed}")
    values = saved.checkpoint.get("channel_values", {})
    if channel not in values:
        present = sorted(k for k in values if not k.startswith(("__", "branch:")))
        raise TranscriptError(
            source,
            f"no channel {channel!r} in the thread's latest checkpoint; channels: "
            f"{', '.join(present) if present else '(none)'}",
        )
    value = values[channel]
    if not isinstance(value, list):
        raise TranscriptError(
            source, f"channel {channel!r} holds a {type(value).__name__}, not a list of messages"
        )
    if not value:
        raise TranscriptError(source, f"channel {channel!r} holds no messages")
    for number, message in enumerate(value, start=1):
        if not isinstance(message, BaseMessage):
            raise TranscriptError(
                source,
                f"item {number} of channel {channel!r} is a {type(message).__name__}, "
                "not a message",
            )
    located = [(m, _Loc(item=i)) for i, m in enumerate(value, start=1)]
    checked = _check_tool_results(located, source, fill_names=False)
    return Transcript(_with_ids(checked, f"{thread_id}"), fmt, source)


def messages_from_checkpointer(
    checkpointer: BaseCheckpointSaver[Any],
    thread_id: str,
    *,
    channel: str = "messages",
    source: str | None = None,
) -> Transcript:
    """The messages in ``channel`` of the latest checkpoint of thread ``thread_id``.

    Works with any LangGraph checkpointer (in memory, SQLite, PostgreSQL ...); the root graph's
    checkpoint (``checkpoint_ns=""``) is read. Messages without an id get
    ``f"{thread_id}-{index}"``. The format is ``"langgraph-sqlite"`` or ``"langgraph-postgres"``
    for those savers, ``"langgraph"`` otherwise. Raises :class:`TranscriptError` when the thread
    is not there (listing up to 10 that are), the channel is not there (listing those that
    are), or the channel does not hold a list of messages.
    """
    kind = type(checkpointer).__name__
    fmt = {"SqliteSaver": "langgraph-sqlite", "PostgresSaver": "langgraph-postgres"}.get(
        kind, "langgraph"
    )
    return _read_thread(
        checkpointer, thread_id, channel, source or f"{kind} thread {thread_id}", fmt
    )


def load_sqlite_thread(
    path: str | os.PathLike[str], thread_id: str, *, channel: str = "messages"
) -> Transcript:
    """The messages of a thread saved by LangGraph's ``SqliteSaver`` in the file ``path``.

    The file is opened read only: a missing file is an error (no empty database is created),
    and a database without checkpoint tables is reported, never set up. Needs the ``sqlite``
    extra (``pip install 'langmem-ext[sqlite]'``).
    """
    name = os.fspath(path)
    source = f"sqlite {name} thread {thread_id}"
    try:
        import sqlite3

        from langgraph.checkpoint.sqlite import SqliteSaver
    except ImportError as error:
        raise TranscriptError(
            source,
            "reading a SQLite checkpoint needs langgraph-checkpoint-sqlite "
            f"({_first_line(error)}): pip install 'langmem-ext[sqlite]'",
        ) from None
    file = Path(name)
    if not file.exists():
        raise TranscriptError(source, "no such file")
    if file.is_dir():
        raise TranscriptError(source, "is a directory, not a SQLite database")
    uri = file.resolve().as_uri() + "?mode=ro"
    try:
        conn = sqlite3.connect(uri, uri=True, check_same_thread=False)
    except sqlite3.Error as error:
        raise TranscriptError(source, f"cannot open it ({_first_line(error)})") from None
    try:
        try:
            rows = conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'").fetchall()
        except sqlite3.DatabaseError as error:
            raise TranscriptError(source, f"not a SQLite database ({_first_line(error)})") from None
        if not {"checkpoints", "writes"} <= {row[0] for row in rows}:
            raise TranscriptError(source, f"no LangGraph checkpoint tables in {name}")
        try:
            return _read_thread(SqliteSaver(conn), thread_id, channel, source, "langgraph-sqlite")
        except sqlite3.Error as error:
            raise TranscriptError(source, f"SQLite error: {_first_line(error)}") from None
    finally:
        conn.close()


_URL_PASSWORD = re.compile(r"(://[^:/@\s]*:)[^@\s]*@")
_KEY_PASSWORD = re.compile(r"(password\s*=\s*)('(?:[^'\\]|\\.)*'|[^\s&]+)", re.IGNORECASE)


def _redact(dsn: str) -> str:
    """``dsn`` with any password replaced by ``***`` (it goes into error messages)."""
    return _KEY_PASSWORD.sub(r"\1***", _URL_PASSWORD.sub(r"\1***@", dsn))


def load_postgres_thread(dsn: str, thread_id: str, *, channel: str = "messages") -> Transcript:
    """The messages of a thread saved by LangGraph's ``PostgresSaver`` in the database ``dsn``.

    The session is read only and ``.setup()`` is never called: a database without the
    checkpoint tables is reported ("no LangGraph checkpoint tables at DSN"). A password in
    ``dsn`` is shown as ``***`` in errors. Needs the ``postgres`` extra
    (``pip install 'langmem-ext[postgres]'``).
    """
    shown = _redact(dsn)
    source = f"postgres {shown} thread {thread_id}"
    try:
        import psycopg
        from langgraph.checkpoint.postgres import PostgresSaver
    except ImportError as error:
        raise TranscriptError(
            source,
            f"reading a PostgreSQL checkpoint needs langgraph-checkpoint-postgres and psycopg "
            f"({_first_line(error)}): pip install 'langmem-ext[postgres]'",
        ) from None
    with ExitStack() as stack:
        try:
            saver = stack.enter_context(PostgresSaver.from_conn_string(dsn))
        except psycopg.Error as error:
            raise TranscriptError(
                source, f"cannot connect to PostgreSQL ({_first_line(error)})"
            ) from None
        conn = saver.conn  # from_conn_string gives a Connection, never a pool
        assert isinstance(conn, psycopg.Connection)
        try:
            conn.execute("SET SESSION CHARACTERISTICS AS TRANSACTION READ ONLY")
            row = conn.execute(
                "SELECT to_regclass('checkpoints') IS NOT NULL"
                " AND to_regclass('checkpoint_blobs') IS NOT NULL"
                " AND to_regclass('checkpoint_writes') IS NOT NULL AS present"
            ).fetchone()
            if not (row and row["present"]):
                raise TranscriptError(source, f"no LangGraph checkpoint tables at {shown}")
            return _read_thread(saver, thread_id, channel, source, "langgraph-postgres")
        except psycopg.Error as error:
            raise TranscriptError(source, f"PostgreSQL error: {_first_line(error)}") from None
    raise AssertionError("unreachable")  # pragma: no cover - ExitStack does not swallow
