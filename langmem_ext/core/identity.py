"""How a message is recognised: a fast in-process fingerprint and a stable cross-process key.

Two different needs, two functions:

* :func:`fingerprint` keys the token-count cache. It runs for every message the engine looks at on
  every turn, so it must be cheap: it hashes a tuple built from the message's own string objects,
  and CPython caches a string's hash inside the string, so a long message that was seen before
  costs O(number of parts), not O(length). It is only meaningful inside one process.
* :func:`key_at` anchors :class:`~langmem_ext.core.state.MemoryState` to a *position* of a history
  across processes (checkpoints, restarts). It is the message id when there is one. A message
  without an id is identified by a BLAKE2 digest chained over its content and the key of the
  message before it, back to the nearest message with an id (or the start of the history). So
  two id-less messages with the same text ("continue", "Sure.") have different keys unless
  everything back to that anchor is the same too: a key found again means "this message, after
  the same history", never "some message with the same words". Chains are memoized in process
  on (previous key, fingerprint), so a turn over an id-less history costs one fingerprint and a
  dict look-up per message, and one digest per new message.
* :func:`stable_key` is the content-only key of a single message (its id, or a digest of its
  canonical JSON). It says *what* a message is, not *where*: use it to compare messages, and
  :func:`key_at` to anchor state to a position.
"""

from __future__ import annotations

import functools
import hashlib
import json
import weakref
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from typing import Any

from langchain_core.messages import AIMessage, BaseMessage, ChatMessage, SystemMessage, ToolMessage

__all__ = [
    "digest",
    "fingerprint",
    "freeze",
    "key_at",
    "keys_between",
    "stable_key",
    "tool_call_ids",
]


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
    ``tool_calls`` and then demand a result for each, exactly as for valid ones. An empty id
    ``""`` is an id: ``create_agent`` answers an invalid call whose id is ``""`` with a
    ``ToolMessage(tool_call_id="")``, which must stay with its call. Only a missing id
    (``None``) means there is nothing to answer.
    """
    if not isinstance(message, AIMessage):
        return ()
    calls = message.tool_calls
    invalid = message.invalid_tool_calls
    if not calls and not invalid:
        return ()
    ids: list[str] = [c["id"] for c in calls if c.get("id") is not None]  # type: ignore[misc]
    ids.extend(c["id"] for c in invalid if c.get("id") is not None)  # type: ignore[misc]
    return tuple(ids)


def _calls_part(message: BaseMessage) -> Any:
    if not isinstance(message, AIMessage) or not (message.tool_calls or message.invalid_tool_calls):
        return None
    valid = tuple((c.get("id"), c["name"], freeze(c["args"])) for c in message.tool_calls)
    invalid = tuple((c.get("id"), c.get("name"), c.get("args")) for c in message.invalid_tool_calls)
    return valid, invalid


def _type_specific_field(message: BaseMessage) -> str | None:
    """The one field of a ToolMessage (its call id) or ChatMessage (its role) that counts."""
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
            _type_specific_field(message),
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


_CHAIN_MEMO: OrderedDict[tuple[str, int], str] = OrderedDict()
_CHAIN_MEMO_SIZE = 200_000


#: the same message object after the same key has the same key, as a message with an id keeps
#: its id: this skips the fingerprint for a history passed again (the list an app appends to).
#: Entries hold a weak reference and leave with their message, so the memo keeps nothing alive.
_OBJECT_MEMO: dict[int, tuple[weakref.ref[BaseMessage], str, str]] = {}


def _forget(ref: weakref.ref[BaseMessage], *, address: int) -> None:
    entry = _OBJECT_MEMO.get(address)
    if entry is not None and entry[0] is ref:
        _OBJECT_MEMO.pop(address, None)  # another thread may have replaced it: a memo miss


def _chained(previous: str, message: BaseMessage) -> str:
    """The key of an id-less message that follows a message keyed ``previous``."""
    address = id(message)
    seen = _OBJECT_MEMO.get(address)
    if seen is not None and seen[0]() is message and seen[1] == previous:
        return seen[2]
    key = _chained_by_content(previous, message)
    if len(_OBJECT_MEMO) < _CHAIN_MEMO_SIZE:
        ref = weakref.ref(message, functools.partial(_forget, address=address))
        _OBJECT_MEMO[address] = (ref, previous, key)
    return key


def _chained_by_content(previous: str, message: BaseMessage) -> str:
    memo_key = (previous, fingerprint(message))
    found = _CHAIN_MEMO.get(memo_key)
    if found is not None:
        return found
    text = previous + "\x1f" + _canonical(message)
    key = "fp:" + hashlib.blake2b(text.encode(), digest_size=12).hexdigest()
    _CHAIN_MEMO[memo_key] = key
    if len(_CHAIN_MEMO) > _CHAIN_MEMO_SIZE:
        _CHAIN_MEMO.popitem(last=False)
    return key


def _leads_as_system(message: BaseMessage) -> bool:
    # messages.is_system, which this module cannot import (messages imports it)
    return isinstance(message, SystemMessage) or (
        isinstance(message, ChatMessage) and message.role.lower() in ("system", "developer")
    )


class KeyChain:
    """:func:`key_at` over one history, computing each id-less run once however many positions
    are asked for (a plan asks for several anchors per turn).

    A leading SystemMessage does not take part in the chain: applications often change their
    system prompt (a date, a persona), and that must not make the whole history look rewritten.
    """

    __slots__ = ("_known", "messages")

    def __init__(self, messages: Sequence[BaseMessage]) -> None:
        self.messages = messages
        self._known: dict[int, str] = {}

    def __call__(self, index: int) -> str:
        messages = self.messages
        if index < 0:
            index += len(messages)
        message = messages[index]
        if message.id:
            return str(message.id)
        known = self._known
        found = known.get(index)
        if found is not None:
            return found
        barrier = 0 if messages and _leads_as_system(messages[0]) else -1
        j = index - 1  # back to the nearest position whose key is known or is an id
        while j > barrier and not messages[j].id and j not in known:
            j -= 1
        if j in known:
            previous = known[j]
        elif j >= 0 and messages[j].id:
            previous = str(messages[j].id)
        else:  # the start of the history, or the leading system message
            previous = ""
        for i in range(j + 1, index + 1):
            previous = _chained(previous, messages[i])
            known[i] = previous
        return previous


def keys_between(messages: Sequence[BaseMessage], start: int, stop: int) -> list[str]:
    """:func:`key_at` for every position in ``range(start, stop)``, sharing one walk."""
    chain = KeyChain(messages)
    return [chain(i) for i in range(start, stop)]


def key_at(messages: Sequence[BaseMessage], index: int) -> str:
    """The stable, position-safe key of ``messages[index]`` (see the module notes).

    The message id when it has one; otherwise a digest chained over the id-less messages back
    to the nearest message with an id, so repeated texts never share a key unless their whole
    history (back to that anchor) is the same.
    """
    return KeyChain(messages)(index)
