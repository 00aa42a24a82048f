"""The settings every view obeys: what it keeps back and must hold, and the cutting stage's knobs.

:class:`ViewLimits` (reserve, safety margin, minimum messages, which unit may start a view) is
shared by the cutting stage (:class:`CutConfig`) and the fold stage
(:class:`~langmem_ext.core.fold_config.FoldConfig`). Validated on construction, with messages
that say why (the checks themselves are in :mod:`langmem_ext.core.checks`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

from langmem_ext.core.checks import is_number, require_int

__all__ = ["CutConfig", "Overflow", "StartOn", "ViewLimits"]

StartOn = Literal["human", "any"]
Overflow = Literal["error", "clip"]


@dataclass(frozen=True, slots=True, kw_only=True)
class ViewLimits:
    """What every view keeps back and must hold: the knobs the cutting stage
    (:class:`CutConfig`) and the fold stage (:class:`~langmem_ext.core.fold_config.FoldConfig`)
    share, with their validation and the arithmetic of a token level, written once."""

    #: tokens held back for tool schemas and the model's output
    reserve_tokens: int = 0
    #: share of a token level held back for counter error (0.1 = 10%)
    safety_margin: float = 0.0
    #: the view holds at least this many messages (whole units)
    min_messages: int = 1
    #: ``"human"``: the first non-system message of a view is a HumanMessage; ``"any"``: any unit
    start_on: StartOn = "human"
    #: keep the leading SystemMessage (always first, always counted)
    keep_system: bool = True

    def _check_limits(self, max_tokens: int | None) -> None:
        require_int("reserve_tokens", self.reserve_tokens, 0)
        require_int("min_messages", self.min_messages, 0)
        if (
            not is_number(self.safety_margin, finite=False)
            or not 0.0 <= self.safety_margin < 1.0  # also refuses NaN
        ):
            raise ValueError(f"safety_margin must be in [0, 1), got {self.safety_margin!r}")
        if max_tokens is not None and self.reserve_tokens >= max_tokens:
            raise ValueError(
                f"reserve_tokens ({self.reserve_tokens:,}) leaves nothing of max_tokens "
                f"({max_tokens:,}) for messages"
            )
        if self.start_on not in ("human", "any"):
            raise ValueError(f"start_on must be 'human' or 'any', got {self.start_on!r}")

    def level(self, tokens: int) -> int:
        """What a view may cost under the token level ``tokens``, after the safety margin and
        the reserve."""
        return math.floor(tokens * (1.0 - self.safety_margin)) - self.reserve_tokens

    def ceiling(self, tokens: int | None) -> int | None:
        """:meth:`level`, or ``None`` for no level."""
        return None if tokens is None else self.level(tokens)


@dataclass(frozen=True, slots=True, kw_only=True)
class CutConfig(ViewLimits):
    """The knobs of the cutting stage. Validated on construction, with messages that say why."""

    max_tokens: int | None = None
    target_tokens: int | None = None
    max_messages: int | None = None
    overflow: Overflow = "error"
    #: ``overflow="clip"``: clip the newest human message first (chat: it is what overflows),
    #: or last (the fold stage: a long turn's request stays verbatim unless it alone is over)
    clip_request_last: bool = False

    def __post_init__(self) -> None:
        for name in ("max_tokens", "target_tokens", "max_messages"):
            if getattr(self, name) is not None:
                require_int(name, getattr(self, name), 1)
        self._check_limits(self.max_tokens)
        if self.target_tokens is not None:
            if self.max_tokens is None:
                raise ValueError("target_tokens needs max_tokens")
            if self.target_tokens > self.max_tokens:
                raise ValueError(
                    f"target_tokens ({self.target_tokens:,}) must not exceed max_tokens "
                    f"({self.max_tokens:,}); it is the level a cut goes down to"
                )
        if self.overflow not in ("error", "clip"):
            raise ValueError(f"overflow must be 'error' or 'clip', got {self.overflow!r}")
