"""The settings the summarizing strategies share but a first user never needs: :class:`FoldPolicy`.

``SummaryBuffer``, ``Compacting`` and ``TieredSummary`` take their budget and sizing as keywords
and everything else (where the summary goes, what happens on overflow, the failure backoff,
background folds, the message-count trigger, callbacks and the clock) as one
``policy=FoldPolicy(...)``. It is built and checked once, and can be shared by several
strategies. :func:`split_policy` turns flat keywords (a config file, a command-line spec) into
a policy and the rest.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields
from typing import Any

from langmem_ext.core.checks import require_int, require_number
from langmem_ext.core.fold_config import RETRY_WHY, Placement, SummaryOverflow
from langmem_ext.strategies.engine import HealthCallback, SummaryCallback, TurnCallback

__all__ = ["FoldPolicy", "split_policy"]


@dataclass(frozen=True, slots=True, kw_only=True)
class FoldPolicy:
    """How a summarizing strategy folds, fails, waits and reports; the defaults suit most uses.

    Pass it as ``policy=`` to :class:`~langmem_ext.strategies.presets.SummaryBuffer`,
    :class:`~langmem_ext.strategies.presets.Compacting` or
    :class:`~langmem_ext.strategies.presets.TieredSummary`. Every value is checked here, when
    the policy is built, with the messages the strategies used to give; the checks that need the
    strategy's numbers too (``prefetch_tokens`` between the fold target and the trigger,
    ``keep_messages`` at least ``min_messages``) run when the strategy is built.

    ``reserve_tokens`` and ``safety_margin`` are not here: they decide what ``max_tokens`` leaves
    for the messages (``max_tokens * (1 - safety_margin) - reserve_tokens``), so they belong
    beside it, as on ``TokenBudget`` and ``ToolDigest``; and ``Compacting``'s own default margin
    (0.15) is part of that preset, which a shared policy could not express.

    Args:
        placement: the summary goes into the single leading SystemMessage (``"system"``,
            default, fenced and labelled after the original system text) or into a marked
            HumanMessage right after it (``"human"``). Never a second SystemMessage.
        overflow: when summary + ``min_messages`` + the newest human message cannot fit:
            ``"truncate_summary"`` (default), ``"truncate_oldest"`` or ``"error"``
            (:class:`~langmem_ext.errors.MemoryBudgetExceeded`).
        max_messages, keep_messages: a message-count trigger beside the token one (LangChain's
            ``("messages", n)``): fold when more than ``max_messages`` messages are unfolded,
            down to ``keep_messages`` (default ``max_messages // 2``, at least the strategy's
            ``min_messages``); whichever trigger is passed first fires, and ``report.trigger``
            says which (``"tokens"`` or ``"messages"``).
        degrade_after: failed folds in a row after which health is ``"degraded"`` (3).
        retry_initial, retry_max: the backoff after a failed fold: ``retry_initial`` seconds
            (2), doubling up to ``retry_max`` (300).
        retry_in_call: False (default): every fold makes ONE summarizer attempt (of the model,
            then of its fallback), so a failing provider costs a call one attempt at most, and
            later attempts follow the backoff, on later calls (the Summarizer's
            ``max_attempts`` and its retry waits are not used). True: an inline fold runs the
            Summarizer's retries inside the call (the call waits for all of them, then
            shows the last good view if they all fail); not with ``prefetch_tokens``.
        prefetch_tokens: background compaction. When the view passes this level (between
            the fold target and the fold trigger), the fold starts in a worker thread and the
            call returns at once; a later call adopts the finished fold, so the call that
            crosses the trigger usually finds it done instead of waiting for the model. None
            (default): folds run inside the crossing call. ``flush()`` / ``aflush()`` wait for
            the running folds.
        fold_wait: with ``prefetch_tokens``, how long the crossing call waits for a running
            background fold before showing the degraded view (nothing is lost: the fold is
            adopted by a later call); None (default): until it finishes.
        on_summary_updated, on_health_changed, on_turn_added: callbacks
            ``(old_sections, new_sections)``, ``(old_health, new_health)`` and
            ``(new_messages)``, called after a call that changed them; an exception in a
            callback is logged and never breaks the turn.
        clock: where ``now`` comes from (``time.time`` by default; replace it in tests).

    Example:
        >>> from langmem_ext import ExtractiveSummarizer, FoldPolicy, SummaryBuffer
        >>> policy = FoldPolicy(placement="human", max_messages=40, retry_max=60.0)
        >>> memory = SummaryBuffer(4_000, summarizer=ExtractiveSummarizer(), policy=policy)
        >>> memory.config.placement, memory.config.trigger_messages, memory.config.target_messages
        ('human', 40, 20)
        >>> FoldPolicy(fold_wait=-1.0)
        Traceback (most recent call last):
            ...
        ValueError: fold_wait must be a finite number of seconds >= 0 or None, got -1.0 (...)
    """

    placement: Placement = "system"
    overflow: SummaryOverflow = "truncate_summary"
    max_messages: int | None = None
    keep_messages: int | None = None
    degrade_after: int = 3
    retry_initial: float = 2.0
    retry_max: float = 300.0
    retry_in_call: bool = False
    prefetch_tokens: int | None = None
    fold_wait: float | None = None
    on_summary_updated: SummaryCallback | None = None
    on_health_changed: HealthCallback | None = None
    on_turn_added: TurnCallback | None = None
    clock: Callable[[], float] | None = None

    def __post_init__(self) -> None:
        if self.placement not in ("system", "human"):
            raise ValueError(f"placement must be 'system' or 'human', got {self.placement!r}")
        if self.overflow not in ("truncate_summary", "truncate_oldest", "error"):
            raise ValueError(
                "overflow must be 'truncate_summary', 'truncate_oldest' or 'error', "
                f"got {self.overflow!r}"
            )
        self._check_message_trigger()
        require_int("degrade_after", self.degrade_after, 1)
        for name in ("retry_initial", "retry_max"):
            require_number(name, getattr(self, name), above=0, unit="seconds", why=RETRY_WHY)
        if self.prefetch_tokens is not None:
            require_int("prefetch_tokens", self.prefetch_tokens, 1)
        require_number(
            "fold_wait",
            self.fold_wait,
            minimum=0,
            unit="seconds",
            or_none=True,
            why="(how long a call that must fold waits for the background fold)",
        )
        if not isinstance(self.retry_in_call, bool):
            raise TypeError(f"retry_in_call must be True or False, got {self.retry_in_call!r}")
        if self.retry_in_call and self.prefetch_tokens is not None:
            raise ValueError(
                "retry_in_call=True cannot be combined with prefetch_tokens: background folds "
                "make one attempt per call; drop one of them"
            )
        for name in ("on_summary_updated", "on_health_changed", "on_turn_added", "clock"):
            value = getattr(self, name)
            if value is not None and not callable(value):
                raise TypeError(f"{name} must be callable or None, got {value!r}")

    def _check_message_trigger(self) -> None:
        """The message-count trigger on its own; ``keep_messages``'s default and its floor
        (the strategy's ``min_messages``) are settled by :meth:`message_triggers`."""
        if self.max_messages is None:
            if self.keep_messages is not None:
                raise ValueError(
                    "keep_messages needs max_messages (the count that triggers a fold)"
                )
            return
        require_int("max_messages", self.max_messages, 2)
        if self.keep_messages is not None:
            require_int("keep_messages", self.keep_messages, 1)
            if self.keep_messages >= self.max_messages:
                raise ValueError(
                    f"need keep_messages ({self.keep_messages}) < max_messages "
                    f"({self.max_messages}): a fold goes down to keep_messages"
                )

    def message_triggers(self, min_messages: int) -> tuple[int | None, int | None]:
        """``(trigger_messages, target_messages)`` of the fold config for a strategy keeping
        ``min_messages``: ``keep_messages`` defaults to half of ``max_messages``, at least
        ``min_messages``, and must stay below ``max_messages``."""
        if self.max_messages is None:
            return None, None
        keep = self.keep_messages
        if keep is None:
            keep = max(self.max_messages // 2, min_messages, 1)
        if not max(min_messages, 1) <= keep < self.max_messages:
            raise ValueError(
                f"need min_messages ({min_messages}) <= keep_messages ({keep}) < "
                f"max_messages ({self.max_messages}): a fold goes down to keep_messages"
            )
        return self.max_messages, keep


#: the names a :class:`FoldPolicy` takes, in declaration order
POLICY_FIELDS: tuple[str, ...] = tuple(f.name for f in fields(FoldPolicy))


def split_policy(keywords: Mapping[str, Any]) -> tuple[FoldPolicy | None, dict[str, Any]]:
    """``(policy, rest)`` for flat keywords: the :class:`FoldPolicy` fields among ``keywords``
    as a policy (``None`` if there are none) and the other keywords, for code that reads
    strategy settings as one flat mapping (a config file, a command-line spec).

    Example:
        >>> policy, rest = split_policy({"max_tokens": 4_000, "placement": "human"})
        >>> policy.placement, rest
        ('human', {'max_tokens': 4000})
    """
    moved = {k: v for k, v in keywords.items() if k in POLICY_FIELDS}
    rest = {k: v for k, v in keywords.items() if k not in POLICY_FIELDS}
    return (FoldPolicy(**moved) if moved else None), rest
