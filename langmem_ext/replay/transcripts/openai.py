"""The ``openai`` transcript format: Chat Completions messages (roles ``system``,
``developer``, ``user``, ``assistant``, ``tool``); ``tool_calls`` with JSON-string
``arguments`` are parsed into ``AIMessage.tool_calls``, content parts (``text``,
``image_url`` ...) are kept as the content list, and the legacy ``function_call`` / role
``"function"`` is rejected."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from langchain_core.messages import BaseMessage, convert_to_messages

from langmem_ext.replay.transcripts.limits import loads_bounded
from langmem_ext.replay.transcripts.reading import (
    Document,
    Loc,
    TranscriptError,
    first_line,
    preview,
    role_items,
)

__all__ = ["parse_openai"]

_OPENAI_ROLES = ("system", "developer", "user", "assistant", "tool")


def _check_tool_calls(calls: list[Any], fail: Callable[[str], TranscriptError]) -> None:
    """Each call has an ``id`` and ``function: {name, arguments}``, its arguments JSON."""
    for call in calls:
        function = call.get("function") if isinstance(call, dict) else None
        if not (
            isinstance(function, dict)
            and isinstance(call.get("id"), str)
            and isinstance(function.get("name"), str)
        ):
            raise fail(
                f"a tool call needs 'id' and 'function': {{'name', 'arguments'}}: {preview(call)}"
            )
        arguments = function.get("arguments", "{}")
        if not isinstance(arguments, str):
            continue
        label = f"tool call {call['id']!r} ({function['name']}): arguments"

        def bad_arguments(problem: str, line: int | None, label: str = label) -> TranscriptError:
            return fail(f"{label}: {problem}")

        try:
            loads_bounded(arguments or "{}", bad_arguments, strict=False)
        except json.JSONDecodeError as error:
            raise fail(
                f"tool call {call['id']!r} ({function['name']}): arguments are not "
                f"valid JSON ({error.msg.removesuffix(' at')} at column {error.colno})"
            ) from None


def _message(item: dict[str, Any], fail: Callable[[str], TranscriptError]) -> BaseMessage:
    """The message of one checked item (empty tool-call arguments mean no arguments)."""
    item = {**item}
    calls = item.get("tool_calls")
    if calls is not None:
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
        return convert_to_messages([item])[0]
    except (ValueError, TypeError, KeyError, NotImplementedError) as error:
        raise fail(f"cannot convert {item['role']!r} message: {first_line(error)}") from None


def parse_openai(doc: Document, source: str) -> list[tuple[BaseMessage, Loc]]:
    out: list[tuple[BaseMessage, Loc]] = []
    for item, role, loc, fail in role_items(doc, source, "an OpenAI chat message"):
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
            _check_tool_calls(calls, fail)
        out.append((_message(item, fail), loc))
    return out
