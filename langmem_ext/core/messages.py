"""Atomic message units, validity findings, documented repairs, and clipping.

The rules every provider enforces, and that every cut in this package respects:

* an ``AIMessage`` that makes tool calls and every ``ToolMessage`` answering them travel together:
  they form one **unit**, also when other messages sit between the call and a result (the unit
  then spans them too), and also for parallel calls;
* no ``ToolMessage`` without the call it answers, no call without its result (except a trailing
  call still in flight);
* at most one ``SystemMessage``, first; the first other message is a ``HumanMessage``.

A ``ChatMessage`` is classified by its role (:func:`role_of`): ``"system"``/``"developer"`` is a
system message, ``"user"``/``"human"`` a human message, ``"assistant"``/``"ai"`` an AI message,
and is shown in a view as that message type (:func:`as_standard`: same id, content, name and
metadata), because providers reject roles such as ``"human"`` and some (Anthropic) accept no
``ChatMessage`` at all. Any other role is ``"other"``: kept, but never counted as the human
message a view must start with.

A ``RemoveMessage`` is an instruction for LangGraph's ``add_messages`` reducer, not a message: any
one a strategy reads raises :class:`~langmem_ext.errors.InvalidHistoryError` (apply it first).

Units are found by walking *backwards* (:func:`iter_units_reverse`): the strategies only look at
the newest part of a history, so the walk stops as soon as the budget is spent and never touches
the old messages. :func:`split_units`, :func:`validate` and :func:`repair` use the same walk over
the whole list, so there is one definition of a unit.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from langchain_core.messages import (
    AIMessage,
    BaseMessage,
    ChatMessage,
    HumanMessage,
    RemoveMessage,
    SystemMessage,
    ToolMessage,
)

from langmem_ext.core.identity import tool_call_ids
from langmem_ext.core.text import last_fitting
from langmem_ext.errors import InvalidHistoryError

__all__ = [
    "CLIP_MARKER",
    "Finding",
    "FindingKind",
    "MessageRole",
    "Unit",
    "UnitKind",
    "as_standard",
    "clip_chars",
    "clip_marker",
    "clip_message",
    "ensure_message",
    "is_human",
    "is_system",
    "is_valid",
    "iter_units_reverse",
    "merge_system_messages",
    "pinned_request",
    "repair",
    "role_of",
    "split_units",
    "validate",
]

UnitKind = Literal["system", "human", "ai", "tool", "orphan", "other"]

#: What a message is to the rules above (a ChatMessage by its role, see :func:`role_of`).
MessageRole = Literal["system", "human", "ai", "tool", "other"]

#: ChatMessage roles (compared lower-cased) that mean one of the standard message types
_CHAT_ROLES: dict[str, MessageRole] = {
    "system": "system",
    "developer": "system",
    "user": "human",
    "human": "human",
    "assistant": "ai",
    "ai": "ai",
}

#: Text appended to a message clipped to a token budget; ``{removed}`` is the number of
#: characters removed (the default member of the :func:`clip_marker` family).
CLIP_MARKER = "\n[... {removed} characters clipped by langmem_ext to fit the context budget]"

#: Content of the ToolMessage that :func:`repair` adds for a call that was never answered.
MISSING_RESULT_TEXT = (
    "[langmem_ext] No result was recorded for this tool call ({name}); treat it as failed."
)


@dataclass(frozen=True, slots=True)
class Unit:
    """A run of input messages that must be kept or dropped together.

    ``start``/``stop`` index the input; ``messages`` is what the unit contributes to a view, with
    the unit-local repairs applied (results moved right after their call, duplicate results and
    orphans dropped, placeholder results for unanswered calls). For a valid unit, ``messages`` is
    exactly ``input[start:stop]``, except that a ``ChatMessage`` with a standard role is shown as
    that message type (:func:`as_standard`).
    """

    start: int
    stop: int
    #: what the unit shows; a ChatMessage with a standard role is shown as that type
    messages: tuple[BaseMessage, ...]
    kind: UnitKind
    has_human: bool = False
    #: (index of the AIMessage, tool_call_id) for calls given a placeholder result
    synthesized: tuple[tuple[int, str], ...] = ()
    #: (index of the AIMessage, tool_call_id) for calls of the trailing message still in flight
    in_flight: tuple[tuple[int, str], ...] = ()
    #: input indices left out, with why ("cut": left out by a strategy, see plan.py)
    dropped: tuple[tuple[int, Literal["orphan", "duplicate", "cut"]], ...] = ()
    #: results were moved to follow their call directly
    reordered: bool = False

    @property
    def size(self) -> int:
        return self.stop - self.start

    @property
    def repaired(self) -> bool:
        return bool(self.synthesized or self.dropped or self.reordered)


def ensure_message(message: Any, index: int) -> BaseMessage:
    """``message`` if it is a BaseMessage a model may see.

    Otherwise a ``TypeError`` naming its index and the fix, or, for a ``RemoveMessage``, an
    :class:`~langmem_ext.errors.InvalidHistoryError`: that is an instruction for LangGraph's
    ``add_messages`` reducer, and passing it on would send it to a model (or store it). The
    strategies call this on every message they read, so the check costs nothing extra: the
    plan stays O(new messages + view).
    """
    if not isinstance(message, BaseMessage):
        raise TypeError(
            f"messages[{index}] is a {type(message).__name__}, not a BaseMessage; convert "
            "dicts, tuples or strings first with langchain_core.messages.convert_to_messages"
        )
    if isinstance(message, RemoveMessage):
        raise InvalidHistoryError(
            f"messages[{index}] is a RemoveMessage (id={message.id!r}): it is an instruction "
            "for LangGraph's add_messages reducer, not a message, and must never reach a model. "
            "Apply it before calling the strategy: "
            "history = langgraph.graph.message.add_messages(history, removals) (a "
            "RemoveMessage(id=REMOVE_ALL_MESSAGES) clears everything before it), then pass the "
            "result",
            index=index,
            message_id=message.id,
        )
    return message


def role_of(message: BaseMessage) -> MessageRole:
    """What ``message`` is to the validity rules: a ``ChatMessage`` by its role (see the
    module notes), every other message by its type; ``"other"`` for anything else."""
    if isinstance(message, SystemMessage):
        return "system"
    if isinstance(message, HumanMessage):
        return "human"
    if isinstance(message, AIMessage):
        return "ai"
    if isinstance(message, ToolMessage):
        return "tool"
    if isinstance(message, ChatMessage):
        return _CHAT_ROLES.get(message.role.lower(), "other")
    return "other"


def is_system(message: BaseMessage) -> bool:
    """A SystemMessage, or a ChatMessage with role ``"system"`` or ``"developer"``."""
    return isinstance(message, SystemMessage) or (
        isinstance(message, ChatMessage) and role_of(message) == "system"
    )


def is_human(message: BaseMessage) -> bool:
    """A HumanMessage, or a ChatMessage with role ``"user"`` or ``"human"``."""
    return isinstance(message, HumanMessage) or (
        isinstance(message, ChatMessage) and role_of(message) == "human"
    )


def as_standard(message: BaseMessage) -> BaseMessage:
    """``message`` as the standard type its role means: a ChatMessage with role ``"system"``
    (``"developer"``), ``"user"`` (``"human"``) or ``"assistant"`` (``"ai"``) becomes a
    SystemMessage, HumanMessage or AIMessage with the same id, content, name and metadata (a
    developer message keeps its role the way langchain-openai marks it,
    ``additional_kwargs["__openai_role__"]``; raw ``tool_calls`` in the additional kwargs of an
    assistant ChatMessage are left out, as a ChatMessage makes no tool calls). Every other
    message is returned as is."""
    if not isinstance(message, ChatMessage):
        return message
    role = role_of(message)
    if role not in ("system", "human", "ai"):
        return message
    extra = dict(message.additional_kwargs)
    if message.role.lower() == "developer":
        extra.setdefault("__openai_role__", "developer")
    if role == "ai":
        # AIMessage would parse raw OpenAI ``tool_calls`` here into calls that this ChatMessage
        # never made to us (no unit holds their results): the view must not grow calls
        extra.pop("tool_calls", None)
        extra.pop("function_call", None)
    cls: type[BaseMessage] = (
        SystemMessage if role == "system" else HumanMessage if role == "human" else AIMessage
    )
    return cls(
        content=message.content,
        id=message.id,
        name=message.name,
        additional_kwargs=extra,
        response_metadata=dict(message.response_metadata),
    )


def _placeholder(ai: AIMessage, call_id: str) -> ToolMessage:
    name = next(
        (c.get("name") for c in (*ai.tool_calls, *ai.invalid_tool_calls) if c.get("id") == call_id),
        None,
    )
    return ToolMessage(
        content=MISSING_RESULT_TEXT.format(name=name or "unknown tool"),
        tool_call_id=call_id,
        name=name,
        status="error",
        id=f"lmx-missing-{call_id}",
    )


def _single(index: int, message: BaseMessage) -> Unit:
    role = role_of(message)
    shown = as_standard(message)
    if role == "human":
        return Unit(index, index + 1, (shown,), "human", has_human=True)
    if role == "system" or role == "ai":
        return Unit(index, index + 1, (shown,), role)
    return Unit(index, index + 1, (shown,), "other")


def _first_results(
    messages: Sequence[BaseMessage], lo: int, hi: int, skip: set[int]
) -> dict[str, int]:
    """tool_call_id -> index of its first result in ``messages[lo:hi]`` (``skip``: orphans)."""
    first: dict[str, int] = {}
    for k in range(lo, hi):
        m = messages[k]
        if k not in skip and isinstance(m, ToolMessage):
            first.setdefault(m.tool_call_id, k)
    return first


def _tool_unit(
    messages: Sequence[BaseMessage], lo: int, hi: int, skip: set[int], trailing: bool
) -> Unit:
    first_result = _first_results(messages, lo, hi, skip)
    out: list[BaseMessage] = []
    order: list[int] = []  # input index of each message of `out` that is not a placeholder
    emitted: set[int] = set()
    dropped: list[tuple[int, Literal["orphan", "duplicate"]]] = []
    synthesized: list[tuple[int, str]] = []
    in_flight: list[tuple[int, str]] = []
    has_human = False
    for k in range(lo, hi):
        m = messages[k]
        if k in skip:
            dropped.append((k, "orphan"))
            continue
        if isinstance(m, ToolMessage):
            if k not in emitted:
                dropped.append((k, "duplicate"))
            continue
        out.append(as_standard(m))
        order.append(k)
        has_human = has_human or is_human(m)
        ids = tool_call_ids(m)
        if not ids:
            continue
        answered = sorted(first_result[c] for c in set(ids) if first_result.get(c, -1) > k)
        for r in answered:
            out.append(messages[r])
            order.append(r)
            emitted.add(r)
        answered_ids = {messages[r].tool_call_id for r in answered}  # type: ignore[attr-defined]
        missing = [c for c in dict.fromkeys(ids) if c not in answered_ids]
        if not missing:
            continue
        only_results_after = all(isinstance(messages[t], ToolMessage) for t in range(k + 1, hi))
        if trailing and only_results_after:
            in_flight.extend((k, c) for c in missing)
        else:
            assert isinstance(m, AIMessage)
            made = [_placeholder(m, c) for c in missing]
            out.extend(made)
            synthesized.extend((k, c) for c in missing)
    gone = {k for k, _ in dropped}
    natural = [k for k in range(lo, hi) if k not in gone]
    reordered = natural != order
    return Unit(
        lo,
        hi,
        tuple(out),
        "tool",
        has_human=has_human,
        synthesized=tuple(synthesized),
        in_flight=tuple(in_flight),
        dropped=tuple(sorted(dropped)),
        reordered=reordered,
    )


def iter_units_reverse(
    messages: Sequence[BaseMessage], start: int = 0, stop: int | None = None
) -> Iterator[Unit]:
    """Yield the units of ``messages[start:stop]`` from the newest to the oldest, lazily.

    A ``ToolMessage`` pulls in everything back to the ``AIMessage`` that made its call. A result
    whose call cannot be found anywhere in ``[start, stop)`` is an orphan: it is yielded as a unit
    of kind ``"orphan"`` with no messages. The cost of the walk is proportional to what the
    consumer takes (plus, only for orphans, one scan down to ``start``).
    """
    total = len(messages)
    hi = total if stop is None else min(stop, total)
    skip: set[int] = set()
    while hi > start:
        i = hi - 1
        if i in skip:
            yield Unit(i, i + 1, (), "orphan", dropped=((i, "orphan"),))
            hi = i
            continue
        m = ensure_message(messages[i], i)
        if not isinstance(m, ToolMessage) and not tool_call_ids(m):
            yield _single(i, m)
            hi = i
            continue
        need: set[str] = set()
        lo = -1
        j = i
        while j >= start:
            if j not in skip:
                mj = ensure_message(messages[j], j)
                if isinstance(mj, ToolMessage):
                    need.add(mj.tool_call_id)
                else:
                    ids = tool_call_ids(mj)
                    if ids:
                        need.difference_update(ids)
                if not need:
                    lo = j
                    break
            j -= 1
        if lo < 0:
            # some result has no call before it: mark exactly the results whose call was not
            # made earlier (a result that came before its call is an orphan too), then retry
            made: set[str] = set()
            for k in range(start, hi):
                mk = messages[k]
                if k in skip:
                    continue
                if isinstance(mk, ToolMessage):
                    if mk.tool_call_id not in made:
                        skip.add(k)
                else:
                    made.update(tool_call_ids(mk))
            continue
        yield _tool_unit(messages, lo, hi, skip, trailing=hi == total)
        hi = lo


def pinned_request(messages: Sequence[BaseMessage], body_start: int, b: int) -> int | None:
    """The human message a view holds right before the unfolded messages (``messages[b:]``), or
    None when they start with one.

    That message was folded (the summarizer read it once) and is shown verbatim in every view
    all the same: it is the request of a long agent turn whose older tool rounds were folded, so
    the model still sees what the newest rounds are working on; or, after the app removed the
    newest turns following a fold (an "undo"), the newest human message left. It depends on the
    boundary alone, so the view's prefix stays the same until the next fold. The scan back stops
    at the first human message, so it costs the folded part of the current turn."""
    if b < len(messages) and is_human(ensure_message(messages[b], b)):
        return None
    for i in range(b - 1, body_start - 1, -1):
        if is_human(ensure_message(messages[i], i)):
            return i
    return None


def split_units(messages: Sequence[BaseMessage]) -> list[Unit]:
    """All units of ``messages``, oldest first. They tile the input exactly."""
    units = list(iter_units_reverse(messages))
    units.reverse()
    return units


# --------------------------------------------------------------------------------------------
# validation

FindingKind = Literal[
    "system_not_first",
    "multiple_system",
    "first_not_human",
    "no_human_message",
    "orphan_tool_result",
    "duplicate_tool_result",
    "unanswered_tool_call",
    "interleaved_tool_result",
    "in_flight_tool_call",
]


@dataclass(frozen=True, slots=True)
class Finding:
    """One problem in a message list. ``index`` points into the list that was validated."""

    kind: FindingKind
    index: int
    detail: str
    tool_call_id: str | None = None

    @property
    def severity(self) -> Literal["error", "info"]:
        """``"info"`` for a trailing call still in flight (normal mid-loop), else ``"error"``."""
        return "info" if self.kind == "in_flight_tool_call" else "error"

    def __str__(self) -> str:
        return f"{self.kind} at index {self.index}: {self.detail}"


def _describe(message: BaseMessage) -> str:
    if isinstance(message, ChatMessage):
        return f"ChatMessage(role={message.role!r})"
    return type(message).__name__


def validate(messages: Sequence[BaseMessage]) -> list[Finding]:
    """Every way ``messages`` breaks the rules providers enforce, in index order.

    A ChatMessage counts as the type its role means (see the module notes): one with role
    ``"system"`` after index 0 is a misplaced system message. Raises ``TypeError`` for an
    element that is not a ``BaseMessage`` and
    :class:`~langmem_ext.errors.InvalidHistoryError` for a ``RemoveMessage``.
    """
    for i, m in enumerate(messages):
        ensure_message(m, i)
    findings: list[Finding] = []
    systems = [i for i, m in enumerate(messages) if is_system(m)]
    for i in systems:
        if i != 0:
            what = _describe(messages[i])
            findings.append(
                Finding("system_not_first", i, f"{what} at index {i}; only index 0 is valid")
            )
    if len(systems) > 1:
        findings.append(
            Finding("multiple_system", systems[1], f"{len(systems)} SystemMessages; at most 1")
        )
    first_other = next((i for i, m in enumerate(messages) if not is_system(m)), None)
    if first_other is not None:
        if not any(is_human(m) for m in messages):
            findings.append(Finding("no_human_message", first_other, "no HumanMessage at all"))
        elif not is_human(messages[first_other]):
            kind = _describe(messages[first_other])
            findings.append(
                Finding("first_not_human", first_other, f"first non-system message is a {kind}")
            )
    for unit in split_units(messages):
        for index, why in unit.dropped:
            call = messages[index].tool_call_id  # type: ignore[attr-defined]
            if why == "orphan":
                detail = f"ToolMessage answers tool_call_id {call!r}, which no earlier call made"
                findings.append(Finding("orphan_tool_result", index, detail, call))
            elif why == "duplicate":
                detail = f"second result for tool_call_id {call!r}"
                findings.append(Finding("duplicate_tool_result", index, detail, call))
        for index, call in unit.synthesized:
            detail = f"tool call {call!r} has no ToolMessage answering it"
            findings.append(Finding("unanswered_tool_call", index, detail, call))
        for index, call in unit.in_flight:
            detail = f"tool call {call!r} of the last message is still waiting for its result"
            findings.append(Finding("in_flight_tool_call", index, detail, call))
        if unit.reordered:
            findings.append(
                Finding(
                    "interleaved_tool_result",
                    unit.start,
                    f"other messages sit between tool calls and their results in "
                    f"[{unit.start}, {unit.stop})",
                )
            )
    findings.sort(key=lambda f: f.index)
    return findings


def is_valid(messages: Sequence[BaseMessage]) -> bool:
    """True when :func:`validate` finds no error (a trailing in-flight call is fine)."""
    return all(f.severity != "error" for f in validate(messages))


# --------------------------------------------------------------------------------------------
# repair


def merge_system_messages(systems: Sequence[BaseMessage]) -> SystemMessage:
    """One SystemMessage holding the text of several, in order (id and metadata of the first).

    ``systems`` may hold ChatMessages with a system role (:func:`is_system`); they are read as
    the SystemMessage they stand for.
    """
    standard: list[SystemMessage] = []
    for i, s in enumerate(systems):
        shown = as_standard(s)
        if not isinstance(shown, SystemMessage):
            raise TypeError(
                f"merge_system_messages: systems[{i}] is a {_describe(s)}, not a system message"
            )
        standard.append(shown)
    systems = standard
    if len(systems) == 1:
        return systems[0]
    if all(isinstance(s.content, str) for s in systems):
        content: str | list[str | dict[Any, Any]] = "\n\n".join(
            str(s.content) for s in systems if s.content
        )
    else:
        blocks: list[str | dict[Any, Any]] = []
        for s in systems:
            if isinstance(s.content, str):
                if s.content:
                    blocks.append({"type": "text", "text": s.content})
            else:
                blocks.extend(s.content)
        content = blocks
    return systems[0].model_copy(update={"content": content})


def repair(messages: Sequence[BaseMessage]) -> list[BaseMessage]:
    """A copy of ``messages`` that :func:`validate` accepts. Never mutates its input.

    The documented repairs, in order:

    1. every SystemMessage (and ChatMessage with a system role) is merged, in order, into one
       SystemMessage at index 0; a ChatMessage with another standard role becomes that type
       (:func:`as_standard`);
    2. orphan tool results are dropped, and so is every second result for the same call;
    3. results are moved to follow their call directly (messages that sat between follow them);
    4. a call that was never answered gets a ToolMessage (``status="error"``) saying so, unless it
       belongs to the last message and is still in flight;
    5. messages before the first HumanMessage (after the system message) are dropped, unless the
       list has no HumanMessage at all.

    Messages that need no change are the same objects in the result (not copies).
    """
    for i, m in enumerate(messages):
        ensure_message(m, i)
    systems = [m for m in messages if is_system(m)]
    body = [m for m in messages if not is_system(m)]
    fixed = [m for unit in split_units(body) for m in unit.messages]
    # the unit repairs moved every result next to its call, so the fixed body splits into
    # clean units; a human message that sat inside a tool round now leads its own unit
    units = split_units(fixed)
    first_human = next((k for k, u in enumerate(units) if u.kind == "human"), None)
    if first_human is not None:
        units = units[first_human:]
    out: list[BaseMessage] = [merge_system_messages(systems)] if systems else []
    for unit in units:
        out.extend(unit.messages)
    return out


# --------------------------------------------------------------------------------------------
# clipping
#
# One clipper, one marker family: every clipped text ends with
# ``[... N characters clipped by langmem_ext<reason>]`` (:func:`clip_marker`), N the characters
# removed, so a reader (and a test) recognises any clip by the same words.


def clip_marker(removed: int, reason: str = " to fit the context budget") -> str:
    """The text appended to a clipped text: ``removed`` characters were cut, for ``reason``.

    >>> clip_marker(12)
    '\\n[... 12 characters clipped by langmem_ext to fit the context budget]'
    >>> clip_marker(3, reason="")
    '\\n[... 3 characters clipped by langmem_ext]'
    """
    return f"\n[... {removed} characters clipped by langmem_ext{reason}]"


def _clippable_text(message: BaseMessage) -> tuple[str, int | None]:
    """The clippable text of a message and, for list content, the index of the block holding it."""
    content = message.content
    if isinstance(content, str):
        return content, None
    best: tuple[str, int | None] = ("", None)
    for i, block in enumerate(content):
        text = block if isinstance(block, str) else None
        if isinstance(block, dict) and block.get("type") == "text":
            text = str(block.get("text", ""))
        if text is not None and len(text) > len(best[0]):
            best = (text, i)
    return best


def _with_block_text(message: BaseMessage, text: str, block: int | None) -> BaseMessage:
    """A copy of ``message`` whose text (block number ``block`` of list content) is ``text``."""
    if block is None:
        content: Any = text
    else:
        content = list(message.content)
        old = content[block]
        content[block] = text if isinstance(old, str) else {**old, "text": text}
    return message.model_copy(update={"content": content})


def clip_chars(message: BaseMessage, limit: int) -> BaseMessage:
    """``message`` with its string content, and every ``{"type": "text"}`` block, cut to at most
    ``limit`` characters plus ``clip_marker(removed, reason="")``. The message itself (not a
    copy) when nothing is longer than ``limit``.

    A character limit, not a token budget: for settings such as ``truncate_chars`` that bound
    what one message may contribute before any counting happens.
    """
    content = message.content
    if isinstance(content, str):
        if len(content) <= limit:
            return message
        return _with_block_text(
            message, content[:limit] + clip_marker(len(content) - limit, ""), None
        )
    clipped = message
    for i, block in enumerate(content):
        if isinstance(block, dict) and block.get("type") == "text":
            text = str(block.get("text", ""))
            if len(text) > limit:
                cut = text[:limit] + clip_marker(len(text) - limit, "")
                clipped = _with_block_text(clipped, cut, i)
    return clipped


def clip_message(
    message: BaseMessage, max_tokens: int, count: Callable[[BaseMessage], int]
) -> BaseMessage | None:
    """The longest prefix of the message's text that, with :data:`CLIP_MARKER` appended, costs at
    most ``max_tokens`` by ``count``; for a tool call whose text cannot make it fit (a large
    argument), its arguments clipped instead (each string cut with the marker, keys, ids and
    names kept, so its results still answer it), and the text too if that is not enough.

    The message itself when it already fits; ``None`` when it has no text and no argument to
    clip; the marker-only version when even that costs more than ``max_tokens`` (callers check
    the count). The clipped
    copy records ``{"clipped_from_tokens": n}`` under ``response_metadata["langmem_ext"]``.
    Binary search (:func:`~langmem_ext.core.text.last_fitting`): O(log length) counts.
    """
    original = count(message)
    if original <= max_tokens:
        return message
    result = _clip_text_of(message, max_tokens, count)
    if (result is None or count(result) > max_tokens) and _longest_argument(message):
        # the text alone cannot make it fit (a tool call with a large argument): clip the
        # arguments first, keeping the text, and the text as well only if that is not enough
        assert isinstance(message, AIMessage)
        longest = _longest_argument(message)

        def fits(limit: int) -> bool:
            return count(_with_clipped_arguments(message, limit)) <= max_tokens

        limit = last_fitting(0, longest - 1, fits)
        result = _with_clipped_arguments(message, limit)
        if count(result) > max_tokens:
            result = _clip_text_of(result, max_tokens, count) or result
    if result is None:
        return None
    meta = {**result.response_metadata, "langmem_ext": {"clipped_from_tokens": original}}
    return result.model_copy(update={"response_metadata": meta})


def _clip_text_of(
    message: BaseMessage, max_tokens: int, count: Callable[[BaseMessage], int]
) -> BaseMessage | None:
    """``message`` with its text cut (marker appended) to cost at most ``max_tokens``, or the
    marker-only version; None when it has no text."""
    text, block = _clippable_text(message)
    if not text:
        return None

    def build(keep: int) -> BaseMessage:
        clipped = text[:keep] + CLIP_MARKER.format(removed=len(text) - keep)
        return _with_block_text(message, clipped, block)

    return build(last_fitting(0, len(text) - 1, lambda keep: count(build(keep)) <= max_tokens))


def _string_leaves(value: Any) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for item in value.values():
            yield from _string_leaves(item)
    elif isinstance(value, (list, tuple)):
        for item in value:
            yield from _string_leaves(item)


def _longest_argument(message: BaseMessage) -> int:
    """The length of the longest string in the arguments of ``message``'s tool calls (a broken
    call's raw argument text included); 0 for a message that makes no call."""
    if not isinstance(message, AIMessage):
        return 0
    leaves = [n for c in message.tool_calls for n in map(len, _string_leaves(c.get("args")))]
    leaves += [len(c.get("args") or "") for c in message.invalid_tool_calls]
    return max(leaves, default=0)


def _clip_leaves(value: Any, limit: int) -> Any:
    """``value`` (tool-call arguments) with every string longer than ``limit`` cut to ``limit``
    characters plus the clip marker (when that makes it shorter); the structure (keys, lists,
    numbers) unchanged."""
    if isinstance(value, str):
        if len(value) <= limit:
            return value
        clipped = value[:limit] + CLIP_MARKER.format(removed=len(value) - limit)
        return clipped if len(clipped) < len(value) else value  # a short path stays as it is
    if isinstance(value, dict):
        return {k: _clip_leaves(v, limit) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_clip_leaves(v, limit) for v in value]
    return value


def _with_clipped_arguments(message: AIMessage, limit: int) -> AIMessage:
    """A copy of ``message`` whose tool-call arguments keep at most ``limit`` characters per
    string, marked as clipped. The same calls (ids, names, argument keys), so their results
    still answer them; the provider-specific copies of the arguments (``tool_use`` blocks in the
    content, raw ``tool_calls`` in the additional kwargs) are clipped alike, so no full copy
    travels beside the clipped one."""
    calls = [{**c, "args": _clip_leaves(c.get("args", {}), limit)} for c in message.tool_calls]
    by_id = {c.get("id"): c["args"] for c in calls}
    broken = [{**c, "args": _clip_leaves(c.get("args"), limit)} for c in message.invalid_tool_calls]
    content: Any = message.content
    if isinstance(content, list):
        content = [
            {**b, "input": by_id[b.get("id")]}
            if isinstance(b, dict) and b.get("type") == "tool_use" and b.get("id") in by_id
            else b
            for b in content
        ]
    extra = dict(message.additional_kwargs)
    raw = extra.get("tool_calls")
    if isinstance(raw, list):
        extra["tool_calls"] = [
            {**r, "function": {**r["function"], "arguments": json.dumps(by_id[r.get("id")])}}
            if isinstance(r, dict) and isinstance(r.get("function"), dict) and r.get("id") in by_id
            else r
            for r in raw
        ]
    return message.model_copy(
        update={
            "tool_calls": calls,
            "invalid_tool_calls": broken,
            "content": content,
            "additional_kwargs": extra,
        }
    )
