"""What a fold is made of: its settings, its request, and the summary as the view shows it.

:class:`FoldConfig` (the fold stage's knobs, validated), :class:`FoldRequest` (what the plan asks
a driver to summarize), the literals a strategy is configured with, and :func:`render_summary`,
the fenced summary block every view places. Shared by the fold plan's modules
(:mod:`~langmem_ext.core.fold`, :mod:`~langmem_ext.core.fold_turn`,
:mod:`~langmem_ext.core.fold_view`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any, Literal

from langchain_core.messages import BaseMessage

from langmem_ext.core.checks import require_int, require_number
from langmem_ext.core.digest import DigestSettings
from langmem_ext.core.fences import neutralize
from langmem_ext.core.limits import CutConfig, ViewLimits
from langmem_ext.core.state import Health
from langmem_ext.core.transitions import (
    RetryPolicy,
)

__all__ = [
    "RETRY_WHY",
    "SUMMARY_ID",
    "TRUNCATED",
    "FoldConfig",
    "FoldRequest",
    "Placement",
    "SummaryOverflow",
    "Trigger",
    "not_shown_note",
    "render_summary",
]

SummaryOverflow = Literal["truncate_summary", "truncate_oldest", "error"]
#: which high-water mark sent a turn into a fold
Trigger = Literal["tokens", "messages"]
Placement = Literal["system", "human"]
#: what ``retry_initial`` / ``retry_max`` are for, said when one is refused (here and by
#: :class:`~langmem_ext.strategies.options.FoldPolicy`, which takes them from the user)
RETRY_WHY = "(it sets when a failed summarizer is tried again)"

_OPEN = "<conversation_summary>"
_CLOSE = "</conversation_summary>"
SUMMARY_ID = "langmem-ext-summary"
TRUNCATED = "\n[... summary shortened by langmem_ext to fit the context budget]"


@dataclass(frozen=True, slots=True)
class FoldRequest:
    """Fold ``messages`` (originals, oldest first) into ``previous`` (section -> text).

    ``background``: the view is past ``prefetch_tokens`` but not over the trigger: the fold may
    run off the critical path (the driver starts it and answers ``FoldDeferred`` until it has
    finished, then ``Folded`` with ``covers``); nothing has to be folded on this call."""

    previous: Mapping[str, str]
    messages: tuple[BaseMessage, ...]
    background: bool = False
    #: a fold due now (not ``background``) must cover at least this many of ``messages`` for
    #: the view to fit under the trigger: a background fold of fewer is not adopted for it
    least: int = 0


@dataclass(frozen=True, slots=True, kw_only=True)
class FoldConfig(ViewLimits):
    """The knobs of the fold stage (the strategies fill them in; see strategies.py). The view's
    limits (reserve, safety margin, ``min_messages``, ``start_on``, ``keep_system``) are
    :class:`~langmem_ext.core.limits.ViewLimits`, shared with the cutting stage's
    :class:`~langmem_ext.core.limits.CutConfig`."""

    max_tokens: int
    trigger_tokens: int
    target_tokens: int
    max_summary_tokens: int
    overflow: SummaryOverflow = "truncate_summary"
    placement: Placement = "system"
    #: TieredSummary: clip large bodies of older messages once the view passes this
    clip_tokens: int | None = None
    truncate_chars: int = 2_000
    #: TieredSummary: when the view passes the trigger, completed tool rounds older than the
    #: newest ``keep_rounds`` are shown as digests first (:mod:`langmem_ext.core.digest`), and
    #: a fold follows only if that is not enough; None: no digests
    digest: DigestSettings | None = None
    #: fold when more than this many messages are unfolded (None: the token trigger only)
    trigger_messages: int | None = None
    #: background compaction: past this level (below the trigger) the fold is asked for as a
    #: background request, so it is usually done before the trigger is crossed; None: off
    prefetch_tokens: int | None = None
    #: a fold keeps at most this many unfolded messages (with ``trigger_messages``)
    target_messages: int | None = None
    degrade_after: int = 3
    retry_initial: float = 2.0
    retry_max: float = 300.0

    def __post_init__(self) -> None:
        for name in ("max_tokens", "trigger_tokens", "target_tokens", "max_summary_tokens"):
            require_int(name, getattr(self, name), 1)
        for name in ("degrade_after", "truncate_chars"):
            require_int(name, getattr(self, name), 1)
        if self.clip_tokens is not None:
            require_int("clip_tokens", self.clip_tokens, 1)
        if self.digest is not None and self.clip_tokens is None:
            raise ValueError("digest needs clip_tokens (the tier at which rounds are digested)")
        self._check_message_triggers()
        for name in ("retry_initial", "retry_max"):
            require_number(name, getattr(self, name), above=0, unit="seconds", why=RETRY_WHY)
        self._check_limits(self.max_tokens)
        if not 0 < self.target_tokens <= self.trigger_tokens <= self.max_tokens:
            raise ValueError(
                f"need 0 < target_tokens ({self.target_tokens:,}) <= trigger ("
                f"{self.trigger_tokens:,}) <= max_tokens ({self.max_tokens:,})"
            )
        if self.prefetch_tokens is not None:
            require_int("prefetch_tokens", self.prefetch_tokens, 1)
            if not self.target_tokens < self.prefetch_tokens < self.trigger_tokens:
                raise ValueError(
                    f"prefetch_tokens ({self.prefetch_tokens:,}) must be between target_tokens "
                    f"({self.target_tokens:,}) and the fold trigger ({self.trigger_tokens:,}): "
                    "a background fold starts past it, before the trigger is crossed"
                )
        if self.max_summary_tokens >= self.target_tokens:
            raise ValueError(
                f"max_summary_tokens ({self.max_summary_tokens:,}) must be below the level a "
                f"fold goes down to ({self.target_tokens:,}), or a fold could never make room"
            )
        if self.overflow not in ("truncate_summary", "truncate_oldest", "error"):
            raise ValueError(
                "overflow must be 'truncate_summary', 'truncate_oldest' or 'error', "
                f"got {self.overflow!r}"
            )
        if self.placement not in ("system", "human"):
            raise ValueError(f"placement must be 'system' or 'human', got {self.placement!r}")

    def _check_message_triggers(self) -> None:
        if self.trigger_messages is None:
            if self.target_messages is not None:
                raise ValueError("target_messages needs trigger_messages (max_messages=)")
            return
        require_int("trigger_messages", self.trigger_messages, 2, "(max_messages)")
        target = self.target_messages
        if target is None:
            raise ValueError("trigger_messages needs target_messages (keep_messages=)")
        require_int("target_messages", target, 1, "(keep_messages)")
        if not max(self.min_messages, 1) <= target < self.trigger_messages:
            raise ValueError(
                f"need min_messages ({self.min_messages}) <= keep_messages ({target}) < "
                f"max_messages ({self.trigger_messages}): a fold goes down to keep_messages"
            )

    @property
    def retry_policy(self) -> RetryPolicy:
        """When a failing summarizer is tried again (see :mod:`langmem_ext.core.transitions`)."""
        return RetryPolicy(self.degrade_after, self.retry_initial, self.retry_max)

    @property
    def digest_slack(self) -> int:
        """Tokens of verbatim rounds after the digest point before it may move again: the gap
        between the two tiers. The point moves only when the view passes the trigger (in place
        of a fold), and then in batches, so the prefix holds longer."""
        return max(self.trigger_tokens - (self.clip_tokens or 0), 0)

    def cut(self, **changes: Any) -> CutConfig:
        """The cutting stage's config for the view under ``max_tokens`` (the shared limits as
        they are here, then ``changes``)."""
        limits = {f.name: getattr(self, f.name) for f in fields(ViewLimits)}
        limits["clip_request_last"] = True  # a huge tool result is clipped before the request
        return CutConfig(max_tokens=self.max_tokens, **{**limits, **changes})


def render_summary(sections: Mapping[str, str], note: str = "") -> str:
    """The summary block as it is placed in the view: fenced, labelled, one part per section."""
    # a summary is model output about untrusted text: it must not be able to close the fence
    # (a "</conversation_summary>" in it would put what follows outside, as an instruction)
    parts = [neutralize(text) for text in sections.values() if text]
    if len(sections) > 1:
        parts = [
            f"## {neutralize(name)}\n{neutralize(text)}" for name, text in sections.items() if text
        ]
    body = "\n\n".join(parts)
    lines = [_OPEN, "Summary of the earlier part of this conversation:"]
    if body:
        lines.append(body)
    if note:
        lines.append(note)
    lines.append(_CLOSE)
    return "\n".join(lines)


def not_shown_note(count: int, health: Health, error: str | None) -> str:
    # the error itself stays in the state and the report: provider error text is not something
    # to put in front of the main model
    return (
        f"[langmem_ext: {count} earlier message(s) of this conversation are not shown and not yet "
        f"summarized; the summarizer is {health}.]"
    )
