"""Plain-text helpers shared by every module that cuts text to a token budget.

One search, written once: the longest prefix of a text that costs at most N tokens. Token counts
grow with the length of a prefix (a counter that does not is only approximately respected), so
the search is a binary search: O(log length) counts, never one count per character.

The clipping of whole messages (which block of a message holds its text, the marker appended)
lives in :mod:`langmem_ext.core.messages`; this module knows nothing of messages.
"""

from __future__ import annotations

import re
from collections.abc import Callable

__all__ = ["clip_text", "json_too_deep", "last_fitting", "longest_prefix_within"]

#: the JSON tokens that open or close a level (strings matched whole, so their brackets do not)
_JSON_TOKEN = re.compile(r'"(?:\\.|[^"\\])*"|[\[{]|[\]}]')


def json_too_deep(text: str, limit: int) -> int | None:
    """The offset where ``text`` nests JSON arrays/objects deeper than ``limit`` (strings
    skipped), or None. Checked before parsing: ``json.loads`` recurses once per level, and a
    few thousand ``[`` raise ``RecursionError`` from inside the parser."""
    if text.count("[") + text.count("{") <= limit:  # cannot be deeper: skip the scan
        return None
    depth = 0
    for match in _JSON_TOKEN.finditer(text):
        token = match.group()
        if token in "[{":
            depth += 1
            if depth > limit:
                return match.start()
        elif token in "]}":
            depth -= 1
    return None


def last_fitting(low: int, high: int, fits: Callable[[int], bool]) -> int:
    """The largest ``k`` in ``[low, high]`` with ``fits(k)``, assuming ``fits`` is true up to some
    point and false after it; ``low`` when nothing above it fits (``fits(low)`` is never asked:
    ``low`` is the caller's floor, e.g. keep at least one character so a loop always advances).

    >>> last_fitting(0, 10, lambda k: k * k <= 50)
    7
    >>> last_fitting(1, 10, lambda k: False)
    1
    """
    while low < high:
        mid = (low + high + 1) // 2
        if fits(mid):
            low = mid
        else:
            high = mid - 1
    return low


def longest_prefix_within(
    text: str, budget: int, count: Callable[[str], int], *, at_least: int = 0
) -> int:
    """The length of the longest prefix of ``text`` that costs at most ``budget`` by ``count``
    (at least ``at_least`` characters, even when those do not fit).

    >>> longest_prefix_within("one two three", 2, lambda s: len(s.split()))
    8
    >>> longest_prefix_within("abc", -1, len)
    0
    """
    return last_fitting(at_least, len(text), lambda k: count(text[:k]) <= budget)


def clip_text(text: str, budget: int, count: Callable[[str], int], marker: str) -> str:
    """``text`` cut (between characters, trailing whitespace dropped) so that with ``marker``
    appended it costs at most ``budget`` by ``count``; the marker alone when nothing fits.

    >>> clip_text("one two three four", 3, lambda s: len(s.split()), " [cut]")
    'one two [cut]'
    """
    keep = longest_prefix_within(text, budget - count(marker), count)
    return text[:keep].rstrip() + marker
