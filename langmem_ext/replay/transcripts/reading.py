"""What every transcript format shares: the error and result types, reading a JSON document or
JSON Lines into located items, and the checks and ids every transcript gets before it is
returned (see :mod:`langmem_ext.replay.transcripts` for the rules)."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from langchain_core.messages import AIMessage, BaseMessage, RemoveMessage, ToolMessage
from pydantic import ValidationError

from langmem_ext.core.identity import tool_call_ids
from langmem_ext.errors import LangmemExtError
from langmem_ext.replay.transcripts.limits import loads_bounded

__all__ = [
    "ACCEPTED",
    "TIME_KEYS",
    "Document",
    "Loc",
    "Transcript",
    "TranscriptError",
    "check_tool_results",
    "decode",
    "first_line",
    "id_stem",
    "preview",
    "read_items",
    "role_items",
    "with_ids",
]

#: what an error about an unrecognised item lists
ACCEPTED = (
    "accepted formats: langchain (messages_to_dict {'type', 'data'} or dumpd {'lc', ...}), "
    "openai (Chat Completions {'role', 'content', 'tool_calls'}), "
    "anthropic (Messages API {'role', 'content': [blocks]})"
)
_JSONL_SUFFIXES = (".jsonl", ".ndjson")
#: the fields a message may carry its time in (kept in ``additional_kwargs`` by every format:
#: the replay's prompt-cache expiry reads them)
TIME_KEYS = ("timestamp", "created_at", "created", "time")


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


@dataclass(frozen=True, slots=True)
class Loc:
    """Where an input item is: a line of a JSONL file, or a position (from 1) in a list."""

    line: int | None = None
    item: int | None = None


def first_line(error: BaseException) -> str:
    """One line saying what ``error`` is about (a pydantic error: its first few fields)."""
    if isinstance(error, ValidationError):
        fields = "; ".join(
            f"{'.'.join(map(str, e['loc'])) or 'value'}: {e['msg']}" for e in error.errors()[:3]
        )
        return f"invalid {error.title} ({fields})"
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    return lines[0] if lines else type(error).__name__


def preview(value: Any, limit: int = 80) -> str:
    """``value`` as short JSON for an error message."""
    try:
        text = json.dumps(value, ensure_ascii=False, default=repr)
    except (TypeError, ValueError):  # pragma: no cover - json.dumps with default=repr
        text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def role_items(
    doc: Document, source: str, what: str
) -> Iterator[tuple[dict[str, Any], str, Loc, Callable[[str], TranscriptError]]]:
    """The items of a role-keyed format (OpenAI, Anthropic), in order: each with its role, where
    it is, and a maker of errors located there. An item with no ``role`` is refused as not
    ``what`` (``"an OpenAI chat message"``)."""
    for item, loc in doc.items:

        def fail(problem: str, loc: Loc = loc) -> TranscriptError:
            return TranscriptError(source, problem, line=loc.line, item=loc.item)

        if not isinstance(item, dict) or "role" not in item:
            raise fail(f"not {what} (no 'role'): {preview(item)}")
        yield item, item["role"], loc, fail


def id_stem(source: str) -> str:
    """The id prefix for ``source``: its file name without the extension."""
    if source.startswith("<"):
        return "message"
    name = Path(source).name
    for suffix in (".jsonl", ".ndjson", ".json"):
        if name.lower().endswith(suffix) and len(name) > len(suffix):
            return name[: -len(suffix)]
    return Path(name).stem or "message"


def with_ids(messages: Sequence[BaseMessage], stem: str) -> list[BaseMessage]:
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


def check_tool_results(
    messages: Sequence[tuple[BaseMessage, Loc]], source: str, fill_names: bool
) -> list[BaseMessage]:
    """Every ToolMessage answers exactly one earlier tool call; returns the messages, with the
    tool's name filled in on results that have none when ``fill_names``."""
    calls: dict[str, str] = {}  # tool_call_id -> tool name
    answered: dict[str, Loc] = {}
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
# reading JSON / JSONL


@dataclass(frozen=True, slots=True)
class Document:
    """The items of a transcript text, each with where it is; a request body's top-level
    ``system`` (Anthropic's system prompt) beside them."""

    items: list[tuple[Any, Loc]]
    system: Any = None
    has_system: bool = False


def decode(data: str | bytes, source: str) -> str:
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


def _read_jsonl(text: str, source: str) -> Document:
    items: list[tuple[Any, Loc]] = []
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
                f"{preview(value)}",
                line=number,
            )
        items.append((value, Loc(line=number)))
    return Document(items)


def read_items(text: str, source: str) -> Document:
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
        return Document([(v, Loc(item=i)) for i, v in enumerate(value, start=1)])
    if isinstance(value, dict):
        if "messages" in value:
            messages = value["messages"]
            if not isinstance(messages, list):
                raise TranscriptError(
                    source, f'"messages" is a JSON {type(messages).__name__}, not a list'
                )
            return Document(
                [(v, Loc(item=i)) for i, v in enumerate(messages, start=1)],
                system=value.get("system"),
                has_system="system" in value,
            )
        return Document([(value, Loc(item=1))])  # a single message
    raise TranscriptError(source, f"a JSON {type(value).__name__} is not a transcript ({ACCEPTED})")
