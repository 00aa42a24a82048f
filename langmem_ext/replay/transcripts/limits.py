"""Reading a transcript file or JSON text without letting a hostile one hang or exhaust us.

:func:`read_bounded` reads a regular file up to a byte limit (a named pipe, a device or a socket
is refused before it is read); :func:`loads_bounded` parses JSON after refusing nesting deeper
than :data:`MAX_JSON_DEPTH` and numbers past Python's integer digit limit. Both report a problem
through a ``fail`` callback, so each caller raises its own error type (transcripts raise
``TranscriptError``, the price file ``PriceError``).
"""

from __future__ import annotations

import json
import os
import re
import stat
import sys
from collections.abc import Callable
from typing import Any

from langmem_ext.core.checks import require_int
from langmem_ext.core.text import json_too_deep

__all__ = [
    "DEFAULT_MAX_BYTES",
    "MAX_JSON_DEPTH",
    "loads_bounded",
    "read_bounded",
    "read_text_bounded",
]

#: the largest transcript file read by default (``max_bytes``; the CLI's ``--max-bytes``)
DEFAULT_MAX_BYTES = 256 * 1024 * 1024
#: the deepest JSON nesting read: messages nest a few levels (content blocks, tool arguments);
#: far deeper is hostile, and ``json.loads`` (then LangChain) would recurse once per level
MAX_JSON_DEPTH = 100


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
    require_int("max_bytes", max_bytes, 1)
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


def read_text_bounded(
    path: str | os.PathLike[str], max_bytes: int, fail: Callable[[str], Exception]
) -> str:
    """:func:`read_bounded`, decoded as UTF-8 (a byte-order mark dropped); text that is not
    UTF-8 goes through ``fail`` too, with the offset of its first bad byte."""
    raw = read_bounded(path, max_bytes, fail)
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise fail(f"not UTF-8 text (at byte offset {exc.start})") from None
