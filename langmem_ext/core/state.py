"""MemoryState: the small, versioned, JSON-serializable value a strategy carries between turns.

It lives wherever the caller keeps state (LangGraph state, a store, a variable) and is the only
thing a strategy remembers. Everything in it is a plain number or string so checkpointers can
persist it and time travel can rewind it.

Fields (version 1):

* ``seen``, ``seen_tokens``, ``seen_key``: how many messages the last turn saw, what they cost by
  the strategy's counter, and the stable key of the last one. When the next history extends that
  one (same key at ``seen - 1``), only the new messages are counted; otherwise the history was
  rewritten underneath us, which the report says, and everything is recounted once.
* ``cut_index``, ``cut_key``: where the last view started. With hysteresis (``target_tokens``),
  the next turn keeps this cut while the view stays under ``max_tokens``, so the view's prefix,
  and with it the provider's prompt cache, does not change.

Added in version 2, for the summarizing strategies:

* ``summary``: the running summary, as (section, text) pairs (one section per template);
* ``folded``, ``folded_key``, ``folded_tokens``: how many messages after the system message are
  folded into the summary, the stable key of the last of them, and what they cost. A message is
  folded exactly once: the boundary only moves forward, after the summarizer succeeded;
* ``folds``: how many folds succeeded;
* ``health`` (``"healthy"``, ``"retrying"``, ``"degraded"``), ``failures`` (consecutive failed
  folds), ``retry_at`` (epoch seconds of the next attempt) and ``last_error``;
* ``clipped``: (TieredSummary) how many messages after the system message are shown with their
  large bodies clipped;
* ``view_tokens``: what the last view cost (a tier is crossed when it was below and is above);
* ``prefix_key``: a digest of what the last view's prefix was made of (summary, first message).

Added later in version 2 (older readers ignore them; indexing is idempotent, so nothing is lost):

* ``indexed``, ``indexed_key``, ``indexed_turns``: (Retrieval) how many messages from the start
  of the history are in the retrieval index, the stable key of the last of them, and how many
  turns that made.
* ``digested``, ``digests``: (ToolDigest, TieredSummary) how many messages after the system
  message lie before the digest point (completed tool rounds there are shown as one digest
  message each, see :mod:`langmem_ext.core.digest`), and the digests the last view showed, as
  (round key, text) pairs: computed once, then read back, so a digest costs nothing on later
  calls and stays byte-identical across processes and upgrades. Only the digests in the last
  view are kept, so the state stays about the size of one view.
* ``gap_key``: (trimming strategies with ``target_tokens``) the stable key of the oldest unit a
  gap view showed after the newest request (a long agent turn whose older rounds do not fit):
  the next call keeps showing from there while it fits, so hysteresis holds inside a turn too.

Validation: every field is checked when a state is built (``__post_init__``) and when it is read
(:meth:`MemoryState.from_dict`); a wrong type, a negative counter, a non-finite ``retry_at`` or an
unknown ``health`` raises :class:`~langmem_ext.errors.InvalidStateError` naming the field and
the value. A state is never misread silently: a wrong guess could fold, drop or re-summarize the
wrong messages. ``bool`` is not accepted where a number is expected (``True`` is not a count).
"""

from __future__ import annotations

import json
import reprlib
from collections.abc import Mapping
from dataclasses import asdict, dataclass, fields
from typing import Any, Literal

from langmem_ext.core.checks import is_int, is_number
from langmem_ext.core.text import json_too_deep
from langmem_ext.errors import InvalidStateError

__all__ = ["STATE_VERSION", "Health", "MemoryState"]

STATE_VERSION = 2

Health = Literal["healthy", "retrying", "degraded"]

_HEALTH = ("healthy", "retrying", "degraded")

#: counters: an int >= 0 (never a bool, never a float)
_COUNTS = (
    "seen",
    "seen_tokens",
    "folded",
    "folded_tokens",
    "folds",
    "failures",
    "clipped",
    "view_tokens",
    "indexed",
    "indexed_turns",
    "digested",
)
#: optional strings (keys and the last error)
_TEXTS = (
    "seen_key",
    "cut_key",
    "folded_key",
    "last_error",
    "prefix_key",
    "indexed_key",
    "gap_key",
)


#: shows a value nested too deeply for ``repr`` (which would raise ``RecursionError``)
_SHALLOW = reprlib.Repr()
_SHALLOW.maxlevel, _SHALLOW.maxstring, _SHALLOW.maxother = 3, 200, 200


def _shown(value: Any) -> str:
    try:
        text = repr(value)
    except RecursionError:
        text = _SHALLOW.repr(value)
    return text if len(text) <= 200 else text[:200] + "..."


#: a state's JSON nests three deep (object, summary, pair); anything far deeper is not a state
MAX_JSON_DEPTH = 32


def _invalid(name: str, value: Any, expected: str, *, within: Any = None) -> InvalidStateError:
    where = "" if within is None else f" in {name.split('[')[0]}={_shown(within)}"
    return InvalidStateError(
        f"invalid MemoryState: {name} must be {expected}, got {_shown(value)} "
        f"({type(value).__name__}){where}. "
        "The state is corrupted or was not written by MemoryState.to_dict(); start from a fresh "
        "state (None) or restore it from a good checkpoint",
        field=name,
        value=value,
    )


def _check_version(value: Any) -> None:
    if not is_int(value) or value < 1:
        raise _invalid("version", value, f"an int from 1 to {STATE_VERSION}")
    if value > STATE_VERSION:
        raise InvalidStateError(
            f"MemoryState version {value!r} is newer than this langmem_ext understands "
            f"({STATE_VERSION}); upgrade langmem_ext to read it",
            field="version",
            value=value,
        )


def _is_pairs(value: Any) -> bool:
    return isinstance(value, tuple) and all(
        isinstance(p, tuple) and len(p) == 2 and isinstance(p[0], str) and isinstance(p[1], str)
        for p in value
    )


def _read_pairs(value: Any, name: str = "summary") -> tuple[tuple[str, str], ...]:
    """(name, text) pairs (summary sections, digests) from a tuple/list of 2-item tuples/lists,
    or a dict.

    A checkpointer's serializer may hand tuples back as lists; anything else (a list of plain
    strings, a 3-item entry, a number) is refused rather than guessed at.
    """
    if isinstance(value, tuple) and all(
        type(p) is tuple and len(p) == 2 and type(p[0]) is str and type(p[1]) is str for p in value
    ):
        return value  # already the canonical form: no copy
    if isinstance(value, Mapping):
        items: Any = list(value.items())
    elif isinstance(value, (list, tuple)):
        items = value
    else:
        raise _invalid(name, value, "a list of [key, text] pairs")
    pairs: list[tuple[str, str]] = []
    for i, pair in enumerate(items):
        if (
            not isinstance(pair, (list, tuple))
            or len(pair) != 2
            or not isinstance(pair[0], str)
            or not isinstance(pair[1], str)
        ):
            raise _invalid(f"{name}[{i}]", pair, "a [key, text] pair of two strings", within=value)
        pairs.append((str(pair[0]), str(pair[1])))  # plain str (a str subclass is copied)
    return tuple(pairs)


@dataclass(frozen=True, slots=True)
class MemoryState:
    version: int = STATE_VERSION
    seen: int = 0
    seen_tokens: int = 0
    seen_key: str | None = None
    cut_index: int | None = None
    cut_key: str | None = None
    summary: tuple[tuple[str, str], ...] = ()
    folded: int = 0
    folded_key: str | None = None
    folded_tokens: int = 0
    folds: int = 0
    health: Health = "healthy"
    failures: int = 0
    retry_at: float | None = None
    last_error: str | None = None
    clipped: int = 0
    view_tokens: int = 0
    prefix_key: str | None = None
    indexed: int = 0
    indexed_key: str | None = None
    indexed_turns: int = 0
    digested: int = 0
    digests: tuple[tuple[str, str], ...] = ()
    gap_key: str | None = None

    def __post_init__(self) -> None:
        # every construction (``replace`` included) goes through here, so a state that exists
        # is valid and ``to_json`` can always write it. About 20 isinstance checks: cheap.
        _check_version(self.version)
        for name in _COUNTS:
            value = getattr(self, name)
            # ``type(value) is int`` answers the usual case without a call (this runs for every
            # count of every state a plan builds, several per turn); is_int decides the rest
            if (type(value) is not int and not is_int(value)) or value < 0:
                raise _invalid(name, value, "an int >= 0")
        for name in _TEXTS:
            value = getattr(self, name)
            if value is not None and not isinstance(value, str):
                raise _invalid(name, value, "a string or None")
        cut = self.cut_index
        if cut is not None and (not is_int(cut) or cut < 0):
            raise _invalid("cut_index", cut, "an int >= 0 or None")
        if self.health not in _HEALTH:
            raise _invalid("health", self.health, "one of 'healthy', 'retrying', 'degraded'")
        retry = self.retry_at
        if retry is not None and not is_number(retry):
            raise _invalid("retry_at", retry, "a finite number (epoch seconds) or None")
        if not _is_pairs(self.summary):
            raise _invalid("summary", self.summary, "a tuple of (section, text) string pairs")
        if not _is_pairs(self.digests):
            raise _invalid("digests", self.digests, "a tuple of (round key, text) string pairs")

    @property
    def sections(self) -> dict[str, str]:
        """The summary as a dict, section -> text."""
        return dict(self.summary)

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON types only (lists, not tuples), so a dict read back from any checkpointer
        compares equal to the one written."""
        data = asdict(self)
        data["summary"] = [list(pair) for pair in self.summary]
        data["digests"] = [list(pair) for pair in self.digests]
        return data

    def to_json(self) -> str:
        """Strict JSON (``allow_nan=False``): a state never writes ``NaN`` or ``Infinity``,
        which other JSON readers refuse."""
        return json.dumps(self.to_dict(), sort_keys=True, allow_nan=False)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> MemoryState:
        """Read a dict written by :meth:`to_dict` of this or an older version.

        Unknown keys (from a newer minor addition) are ignored and missing ones take their
        defaults; a newer *version* is refused, because silently misreading it could fold or
        drop the wrong messages. Every field is validated: anything else raises
        :class:`~langmem_ext.errors.InvalidStateError` naming the field and the value. Tuples
        that a checkpointer's serializer turned into lists are read back as tuples.
        """
        if not isinstance(data, Mapping):
            raise InvalidStateError(
                f"MemoryState.from_dict expects a dict from MemoryState.to_dict(), got "
                f"{type(data).__name__}",
                value=data,
            )
        version = data.get("version", STATE_VERSION)
        _check_version(version)
        values = {k: data[k] for k in _FIELDS if k in data}
        values["version"] = STATE_VERSION
        for name in ("summary", "digests"):
            if name in values:
                values[name] = _read_pairs(values[name], name)
        return cls(**values)

    @classmethod
    def from_json(cls, text: str | bytes) -> MemoryState:
        """Read the JSON written by :meth:`to_json`. Text that is not JSON, or nests deeper than
        ``MAX_JSON_DEPTH`` (a state nests three deep), raises
        :class:`~langmem_ext.errors.InvalidStateError` (a ``ValueError``), never a
        ``RecursionError`` from the parser."""
        if isinstance(text, (bytes, bytearray)):
            text = text.decode("utf-8", errors="replace")
        if not isinstance(text, str):
            raise TypeError(
                f"MemoryState.from_json expects str or bytes, got {type(text).__name__}"
            )
        if json_too_deep(text, MAX_JSON_DEPTH) is not None:
            raise InvalidStateError(
                f"invalid MemoryState JSON: nested deeper than {MAX_JSON_DEPTH} levels (a state "
                f"nests three deep); it was not written by MemoryState.to_json()",
                value=text[:200],
            )
        try:
            data = json.loads(text)
        except (ValueError, RecursionError) as exc:
            raise InvalidStateError(
                f"invalid MemoryState JSON: {exc}; it was not written by MemoryState.to_json()",
                value=text[:200],
            ) from None
        return cls.from_dict(data)

    @classmethod
    def coerce(cls, value: MemoryState | Mapping[str, Any] | None) -> MemoryState:
        """``None`` → a fresh state; a dict (e.g. from a checkpoint) → parsed; a state → itself."""
        if value is None:
            return cls()
        if isinstance(value, cls):
            return value
        if isinstance(value, Mapping):
            return cls.from_dict(value)
        raise TypeError(
            f"state must be a MemoryState, a dict from MemoryState.to_dict(), or None; "
            f"got {type(value).__name__}"
        )


_FIELDS = tuple(f.name for f in fields(MemoryState))
