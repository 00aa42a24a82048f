"""Detecting a transcript's format, and the entry points for text and files:
:func:`parse_transcript` and :func:`load_transcript`."""

from __future__ import annotations

import os
from typing import Literal, get_args

from langmem_ext.replay.transcripts.anthropic import is_anthropic, parse_anthropic
from langmem_ext.replay.transcripts.langchain import is_langchain, parse_langchain
from langmem_ext.replay.transcripts.limits import DEFAULT_MAX_BYTES, read_bounded
from langmem_ext.replay.transcripts.openai import parse_openai
from langmem_ext.replay.transcripts.reading import (
    ACCEPTED,
    Document,
    Transcript,
    TranscriptError,
    check_tool_results,
    decode,
    id_stem,
    preview,
    read_items,
    with_ids,
)

__all__ = ["Format", "detect", "load_transcript", "parse_transcript"]

Format = Literal["auto", "langchain", "openai", "anthropic"]

_FORMATS: tuple[str, ...] = get_args(Format)


def detect(doc: Document, source: str) -> str:
    """The format of ``doc``: the first item decides between LangChain and a role format."""
    first, loc = doc.items[0]
    if is_langchain(first):
        return "langchain"
    if isinstance(first, dict) and "role" in first:
        return "anthropic" if is_anthropic(doc) else "openai"
    raise TranscriptError(
        source,
        f"not a message in any known format: {preview(first)} ({ACCEPTED})",
        line=loc.line,
        item=loc.item,
    )


def parse_transcript(
    data: str | bytes, *, format: Format = "auto", source: str = "<string>"
) -> Transcript:
    """Parse a transcript held in memory (formats and detection: see
    :mod:`langmem_ext.replay.transcripts`).

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
    doc = read_items(decode(data, source), source)
    if not doc.items:
        raise TranscriptError(source, "no messages")
    chosen = detect(doc, source) if format == "auto" else format
    if chosen == "langchain":
        parsed = parse_langchain(doc, source)
    elif chosen == "openai":
        parsed = parse_openai(doc, source)
    else:
        parsed = parse_anthropic(doc, source)
    checked = check_tool_results(parsed, source, fill_names=chosen != "langchain")
    return Transcript(with_ids(checked, id_stem(source)), chosen, source)


def load_transcript(
    path: str | os.PathLike[str], *, format: Format = "auto", max_bytes: int = DEFAULT_MAX_BYTES
) -> Transcript:
    """Read the transcript file at ``path`` (JSON or JSONL; formats: see
    :mod:`langmem_ext.replay.transcripts`).

    The transcript's ``source`` is ``path`` as given. Raises :class:`TranscriptError` for a
    missing or unreadable file, one that is not a regular file (a named pipe, a device), one
    over ``max_bytes``, and for everything :func:`parse_transcript` rejects.
    """
    source = os.fspath(path)
    data = read_bounded(source, max_bytes, lambda problem: TranscriptError(source, problem))
    return parse_transcript(data, format=format, source=source)
