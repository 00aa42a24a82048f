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
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, fields
from typing import Any, Literal

__all__ = ["STATE_VERSION", "Health", "MemoryState"]

STATE_VERSION = 2

Health = Literal["healthy", "retrying", "degraded"]


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

    @property
    def sections(self) -> dict[str, str]:
        """The summary as a dict, section -> text."""
        return dict(self.summary)

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON types only (lists, not tuples), so a dict read back from any checkpointer
        compares equal to the one written."""
        data = asdict(self)
        data["summary"] = [list(pair) for pair in self.summary]
        return data

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> MemoryState:
        """Read a dict written by :meth:`to_dict` of this or an older version.

        Unknown keys (from a newer minor addition) are ignored; a newer *version* is refused,
        because silently misreading it could fold or drop the wrong messages.
        """
        if not isinstance(data, dict):
            raise TypeError(f"MemoryState.from_dict expects a dict, got {type(data).__name__}")
        version = data.get("version", STATE_VERSION)
        if not isinstance(version, int) or version > STATE_VERSION:
            raise ValueError(
                f"MemoryState version {version!r} is newer than this langmem_ext understands "
                f"({STATE_VERSION}); upgrade langmem_ext to read it"
            )
        known = {f.name for f in fields(cls)}
        values = {k: v for k, v in data.items() if k in known}
        values["version"] = STATE_VERSION
        summary = values.get("summary")
        if summary is not None:
            pairs = summary.items() if isinstance(summary, dict) else summary
            values["summary"] = tuple((str(k), str(v)) for k, v in pairs)
        if values.get("health", "healthy") not in ("healthy", "retrying", "degraded"):
            raise ValueError(f"MemoryState health {values['health']!r} is not a known state")
        return cls(**values)

    @classmethod
    def from_json(cls, text: str) -> MemoryState:
        return cls.from_dict(json.loads(text))

    @classmethod
    def coerce(cls, value: MemoryState | dict[str, Any] | None) -> MemoryState:
        """``None`` → a fresh state; a dict (e.g. from a checkpoint) → parsed; a state → itself."""
        if value is None:
            return cls()
        if isinstance(value, cls):
            return value
        if isinstance(value, dict):
            return cls.from_dict(value)
        raise TypeError(
            f"state must be a MemoryState, a dict from MemoryState.to_dict(), or None; "
            f"got {type(value).__name__}"
        )
