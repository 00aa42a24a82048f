"""The ``langchain`` transcript format: ``messages_to_dict`` items (``{"type": "human", "data":
{...}}``) and ``dumpd`` objects (``{"lc": 1, "type": "constructor", ...}``, revived with
``allowed_objects="messages"``: nothing but message classes can be built from a file)."""

from __future__ import annotations

import warnings
from typing import Any

from langchain_core.messages import BaseMessage, messages_from_dict

from langmem_ext.replay.transcripts.reading import (
    Document,
    Loc,
    TranscriptError,
    first_line,
    preview,
)

__all__ = ["is_langchain", "parse_langchain"]


def is_langchain(item: Any) -> bool:
    """Whether ``item`` looks like a LangChain message (``type`` + ``data``, or ``lc``)."""
    return isinstance(item, dict) and (("type" in item and "data" in item) or "lc" in item)


def parse_langchain(doc: Document, source: str) -> list[tuple[BaseMessage, Loc]]:
    from langchain_core.load import load

    out: list[tuple[BaseMessage, Loc]] = []
    for item, loc in doc.items:
        if not is_langchain(item):
            raise TranscriptError(
                source,
                "not a LangChain message (expected messages_to_dict {'type', 'data'} or "
                f"dumpd {{'lc': 1, 'type': 'constructor', ...}}): {preview(item)}",
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
                f"{item.get('type')!r}), not a message: {preview(item)}",
                line=loc.line,
                item=loc.item,
            ) from None
        except (ValueError, TypeError, KeyError, AttributeError, ImportError) as error:
            kind = item.get("type") if "data" in item else (item.get("id") or [None])[-1]
            raise TranscriptError(
                source,
                f"cannot build a LangChain message of type {kind!r}: {first_line(error)}",
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
