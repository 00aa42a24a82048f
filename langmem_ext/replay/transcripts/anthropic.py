"""The ``anthropic`` transcript format: Messages API messages.

``tool_use`` blocks become ``AIMessage.tool_calls`` (the other blocks stay the content: a string
when only one plain text block is left, as ``ChatAnthropic`` does); each ``tool_result`` block of
a user message becomes a ``ToolMessage`` (``status="error"`` for ``is_error``), in order, and the
rest of that user message (text, images) a ``HumanMessage`` after them. ``thinking`` and
``redacted_thinking`` blocks are kept in the ``AIMessage`` content list (they carry the signature
Anthropic needs to see them again). A request body's top-level ``system`` becomes a leading
``SystemMessage``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import Any

from langchain_core.messages import (
    AIMessage,
    BaseMessage,
    HumanMessage,
    SystemMessage,
    ToolMessage,
)

from langmem_ext.replay.transcripts.reading import (
    TIME_KEYS,
    Document,
    Loc,
    TranscriptError,
    preview,
    role_items,
)

__all__ = ["is_anthropic", "parse_anthropic"]

_ANTHROPIC_ROLES = ("user", "assistant", "system")
#: content blocks only the Anthropic Messages API has
_ANTHROPIC_BLOCKS = frozenset(
    {"tool_use", "tool_result", "thinking", "redacted_thinking", "document"}
)

_Fail = Callable[[str], TranscriptError]


def _blocks(item: Mapping[str, Any]) -> Iterator[Mapping[str, Any]]:
    content = item.get("content")
    if isinstance(content, list):
        yield from (b for b in content if isinstance(b, Mapping))


def _is_anthropic_block(block: Mapping[str, Any]) -> bool:
    kind = block.get("type")
    return kind in _ANTHROPIC_BLOCKS or (kind == "image" and "source" in block)


def is_anthropic(doc: Document) -> bool:
    """Whether a role-format document is Anthropic's: a top-level ``system``, or a block only
    the Messages API has (otherwise it is read as OpenAI's)."""
    if doc.has_system:
        return True
    return any(
        isinstance(item, dict) and any(_is_anthropic_block(b) for b in _blocks(item))
        for item, _ in doc.items
    )


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


def _anthropic_content(content: Any, fail: _Fail) -> list[Any]:
    if content is None:
        return []
    if isinstance(content, str):
        return [{"type": "text", "text": content}] if content else []
    if not isinstance(content, list):
        raise fail(f"'content' must be a string or a list of blocks, not {preview(content)}")
    for number, block in enumerate(content, start=1):
        if not (isinstance(block, dict) and isinstance(block.get("type"), str)):
            raise fail(f"content block {number} has no 'type': {preview(block)}")
    return content


def _system(doc: Document, source: str) -> list[tuple[BaseMessage, Loc]]:
    """The request body's top-level ``system`` as a leading message (none when empty)."""
    if not doc.system:
        return []
    if isinstance(doc.system, str):
        return [(SystemMessage(content=doc.system), Loc())]
    if isinstance(doc.system, list) and all(
        isinstance(b, dict) and b.get("type") == "text" for b in doc.system
    ):
        return [(SystemMessage(content=_simplify(doc.system)), Loc())]
    raise TranscriptError(
        source,
        f'"system" must be a string or a list of text blocks: {preview(doc.system)}',
    )


def _assistant(blocks: list[Any], fail: _Fail) -> AIMessage:
    """An assistant message: its ``tool_use`` blocks as tool calls, the rest as content."""
    calls: list[dict[str, Any]] = []
    kept: list[Any] = []
    for number, block in enumerate(blocks, start=1):
        if block["type"] == "tool_use":
            if not (isinstance(block.get("id"), str) and isinstance(block.get("name"), str)):
                raise fail(f"tool_use block {number} needs a string 'id' and 'name'")
            args = block.get("input", {})
            if not isinstance(args, dict):
                raise fail(f"tool_use block {number}: 'input' is not a JSON object")
            calls.append(
                {"id": block["id"], "name": block["name"], "args": args, "type": "tool_call"}
            )
        elif block["type"] == "tool_result":
            raise fail("a tool_result block in an assistant message (results are user turns)")
        else:
            kept.append(block)
    return AIMessage(content=_simplify(kept), tool_calls=calls)


def _user(blocks: list[Any], fail: _Fail) -> list[BaseMessage]:
    """A user message: a ToolMessage per ``tool_result`` block, in order, then the rest of it
    (text, images) as a HumanMessage."""
    out: list[BaseMessage] = []
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
        out.append(ToolMessage(content=_simplify(result), tool_call_id=call_id, status=status))
    if rest or not blocks:
        out.append(HumanMessage(content=_simplify(rest)))
    return out


def parse_anthropic(doc: Document, source: str) -> list[tuple[BaseMessage, Loc]]:
    out = _system(doc, source)
    for item, role, loc, fail in role_items(doc, source, "an Anthropic message"):
        if role not in _ANTHROPIC_ROLES:
            raise fail(
                f"unknown role {role!r} (Anthropic roles: user, assistant; the system prompt "
                "is the top-level 'system')"
            )
        blocks = _anthropic_content(item.get("content", ""), fail)
        if role == "system":
            made: list[BaseMessage] = [SystemMessage(content=_simplify(blocks))]
        elif role == "assistant":
            made = [_assistant(blocks, fail)]
        else:
            made = _user(blocks, fail)
        times = {k: item[k] for k in TIME_KEYS if isinstance(item.get(k), (str, int, float))}
        for message in made:
            message.additional_kwargs.update(times)  # when it was said (prompt-cache expiry)
        out += [(message, loc) for message in made]
    return out
