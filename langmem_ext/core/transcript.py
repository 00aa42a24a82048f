"""The transcript: messages rendered as compact text lines, for a model to read.

One renderer for every place that shows a conversation to a model as text (the summarizer's
transcript today): role, text, and tool calls as ``name(json args)``. Every line is passed
through :func:`~langmem_ext.core.fences.neutralize`, so no fence tag survives anywhere in it.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from langchain_core.messages import (
    AIMessage,
    BaseMessage,
    ChatMessage,
    HumanMessage,
    SystemMessage,
    ToolMessage,
)

from langmem_ext.core.fences import neutralize
from langmem_ext.core.messages import as_standard

__all__ = ["content_text", "render_message", "render_transcript"]

#: block types that carry no text for a reader (a model's private reasoning, raw tool-use blocks
#: already shown as ``name(args)``)
_SILENT_BLOCKS = frozenset({"tool_use", "thinking", "reasoning", "reasoning_content"})


def content_text(content: Any) -> str:
    """The readable text of a message's ``content``: a string as it is; of a block list, the
    text blocks, ``[image]`` for images, ``[kind]`` for other blocks, joined by spaces.

    >>> content_text(["a", {"type": "text", "text": "b"}, {"type": "image_url"}, {"type": "x"}])
    'a b [image] [x]'
    """
    if isinstance(content, str):
        return content
    parts: list[str] = []
    for block in content:
        if isinstance(block, str):
            parts.append(block)
        elif isinstance(block, dict):
            kind = block.get("type")
            if kind == "text":
                parts.append(str(block.get("text", "")))
            elif kind in ("image", "image_url"):
                parts.append("[image]")
            elif kind not in _SILENT_BLOCKS:
                parts.append(f"[{kind or 'block'}]")
    return " ".join(p for p in parts if p)


def _ai_lines(message: AIMessage, text: str) -> str:
    parts = [f"assistant: {text}"] if text else []
    for call in message.tool_calls:
        args = json.dumps(call["args"], ensure_ascii=False, sort_keys=True)
        parts.append(f"assistant called {call['name']}({args})")
    for bad in message.invalid_tool_calls:
        parts.append(f"assistant called {bad.get('name')}({bad.get('args') or ''})")
    return "\n".join(parts) if parts else "assistant: (no text)"


def _plain_line(message: BaseMessage) -> str:
    message = as_standard(message)  # a ChatMessage with a known role reads as that role
    text = content_text(message.content).strip()
    if isinstance(message, HumanMessage):
        who = f"user ({message.name})" if message.name else "user"
        return f"{who}: {text}"
    if isinstance(message, AIMessage):
        return _ai_lines(message, text)
    if isinstance(message, ToolMessage):
        label = "error" if message.status == "error" else "result"
        return f"tool {message.name or 'call'} {label}: {text}"
    if isinstance(message, SystemMessage):
        return f"system note: {text}"
    if isinstance(message, ChatMessage):
        return f"{message.role}: {text}"
    return f"{message.type}: {text}"


def render_message(message: BaseMessage) -> str:
    """One compact transcript line: role, text, and tool calls as ``name(args)``. Every part
    (text, names, arguments) is neutralised, so no fence tag survives anywhere in the line.

    >>> from langchain_core.messages import AIMessage
    >>> call = {"name": "f", "args": {"q": 1}, "id": "c"}
    >>> print(render_message(AIMessage("", tool_calls=[call])))
    assistant called f({"q": 1})
    """
    return neutralize(_plain_line(message))


def render_transcript(messages: Sequence[BaseMessage]) -> list[str]:
    """The transcript lines for ``messages``, in order."""
    return [render_message(m) for m in messages]
