"""How a message is recognised: a fast in-process fingerprint and a stable cross-process key.

Two different needs, two functions:

* :func:`fingerprint` keys the token-count cache. It runs for every message the engine looks at on
  every turn, so it must be cheap: it hashes a tuple built from the message's own string objects,
  and CPython caches a string's hash inside the string, so a long message that was seen before
  costs O(number of parts), not O(length). It is only meaningful inside one process.
* :func:`stable_key` anchors :class:`~langmem_ext.state.MemoryState` to a message across processes
  (checkpoints, restarts). It is the message id when there is one, else a BLAKE2 digest of the
  message's canonical JSON. It is computed for a handful of anchor messages per turn only.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any

from langchain_core.messages import AIMessage, BaseMessage, ChatMessage, ToolMessage

__all__ = ["digest", "fingerprint", "freeze", "stable_key", "tool_call_ids"]


def freeze(value: Any) -> Any:
    """A hashable mirror of a JSON-like value that reuses the original string objects."""
    if isinstance(value, str):
        return value
    if isinstance(value, Mapping):
        return tuple(sorted((str(k), freeze(v)) for k, v in value.items()))
    if isinstance(value, (list, tuple)):
        return tuple(freeze(v) for v in value)
    if value is None or isinstance(value, (int, float, bool)):
        return value
    return repr(value)


def tool_call_ids(message: BaseMessage) -> tuple[str, ...]:
    """Ids of every tool call an AIMessage makes (valid and invalid calls alike).

    Invalid tool calls are included because chat-completions providers receive them as ordinary
    ``tool_calls`` and then demand a result for each, exactly as for valid ones.
    """
    if not isinstance(message, AIMessage):
        return ()
    calls = message.tool_calls
    invalid = message.invalid_tool_calls
    if not calls and not invalid:
        return ()
    ids: list[str] = [c["id"] for c in calls if c.get("id")]  # type: ignore[misc]
    ids.extend(c["id"] for c in invalid if c.get("id"))  # type: ignore[misc]
    return tuple(ids)


def _calls_part(message: BaseMessage) -> Any:
    if not isinstance(message, AIMessage) or not (message.tool_calls or message.invalid_tool_calls):
        return None
    valid = tuple((c.get("id"), c["name"], freeze(c["args"])) for c in message.tool_calls)
    invalid = tuple((c.get("id"), c.get("name"), c.get("args")) for c in message.invalid_tool_calls)
    return valid, invalid


def _extra(message: BaseMessage) -> str | None:
    # isinstance checks: getattr with a default on a pydantic model that lacks the field goes
    # through its slow __getattr__, and this runs for every message of every view.
    if isinstance(message, ToolMessage):
        return message.tool_call_id
    if isinstance(message, ChatMessage):
        return message.role
    return None


def fingerprint(message: BaseMessage) -> int:
    """In-process fingerprint of everything about a message that affects its token count."""
    return hash(
        (
            message.type,
            freeze(message.content),
            message.name,
            _extra(message),
            _calls_part(message),
        )
    )


def _canonical(message: BaseMessage) -> str:
    payload = {
        "type": message.type,
        "content": message.content,
        "name": message.name,
        "tool_call_id": message.tool_call_id if isinstance(message, ToolMessage) else None,
        "role": message.role if isinstance(message, ChatMessage) else None,
        "tool_calls": [
            {"id": c.get("id"), "name": c["name"], "args": c["args"]}
            for c in getattr(message, "tool_calls", ()) or ()
        ],
    }
    return json.dumps(payload, sort_keys=True, ensure_ascii=False, default=repr)


def stable_key(message: BaseMessage) -> str:
    """The message id, or ``"fp:"`` plus a content digest for messages without one.

    Stable across processes and Python versions, so it can be stored in checkpoints.
    """
    if message.id:
        return str(message.id)
    digest = hashlib.blake2b(_canonical(message).encode(), digest_size=12).hexdigest()
    return f"fp:{digest}"


def digest(*parts: object) -> str:
    """A short stable digest of JSON-like parts (for state fields that must survive restarts)."""
    text = json.dumps(parts, sort_keys=True, ensure_ascii=False, default=repr)
    return hashlib.blake2b(text.encode(), digest_size=12).hexdigest()
