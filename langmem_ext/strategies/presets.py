"""The strategies users construct: presets of the two pure plans.

* Trimming: :class:`TokenBudget` and :class:`SlidingWindow` configure the cutting plan
  (:func:`langmem_ext.core.plan.plan_cut`, a :class:`~langmem_ext.core.limits.CutConfig`);
  :class:`ToolDigest` the same plan with tool-round digests first
  (:func:`langmem_ext.core.digest.plan_digest`).
* Summarizing: :class:`SummaryBuffer`, :class:`Compacting` and :class:`TieredSummary` configure
  the fold plan (:func:`langmem_ext.core.fold.plan_fold`, a
  :class:`~langmem_ext.core.fold_config.FoldConfig`); they differ only in how their parameters
  set the trigger, the target and the first tier (digests and clipped bodies).

The summarizing constructors keep explicit keyword signatures (for type checkers, IDEs and
``help()``) for the budget and its sizing; the settings a first user never needs are one
``policy=``:class:`~langmem_ext.strategies.options.FoldPolicy`, checked when it is built. The
parameters they share are documented once (``_SUMMARIZING_ARGS_DOC``, appended to each class's
docstring) and resolved once (``_Summarizing._setup``, handed the constructor's ``locals()``
and the values it derives, so no constructor forwards its parameters one by one; the trimming
constructors build their config the same way, ``_config_of``); a keyword that moved to the
policy is refused once, naming its new place (``_refuse_moved``).
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from dataclasses import fields, replace
from typing import Any, NoReturn, TypeVar

from langchain_core.messages import BaseMessage

from langmem_ext.core.checks import require_budget, require_int
from langmem_ext.core.digest import DigestCutConfig, DigestSettings, plan_digest
from langmem_ext.core.fold import plan_fold
from langmem_ext.core.fold_config import FoldConfig
from langmem_ext.core.limits import CutConfig, Overflow, StartOn, ViewLimits
from langmem_ext.core.plan import plan_cut
from langmem_ext.core.state import MemoryState
from langmem_ext.core.tokens import TokenCounter
from langmem_ext.counting.resolve import CounterLike, as_counter
from langmem_ext.strategies.engine import Plan, Strategy, finished
from langmem_ext.strategies.folding import Folding
from langmem_ext.strategies.options import POLICY_FIELDS, FoldPolicy
from langmem_ext.summarize.summarizer import Summarizer, SummarizerLike

__all__ = [
    "Compacting",
    "SlidingWindow",
    "SummaryBuffer",
    "TieredSummary",
    "TokenBudget",
    "ToolDigest",
]


ConfigT = TypeVar("ConfigT", bound=ViewLimits)

_DEFAULT_SUMMARY_TOKENS = 1_000
_DEFAULT_INPUT_TOKENS = 16_000
_SUMMARY_FLOOR_WHY = "(a summary needs room to say anything)"


def _with_counter(summarizer: Summarizer, counter: TokenCounter) -> Summarizer:
    """The summarizer (and its fallbacks) measuring with ``counter``; the caller's object is not
    changed."""
    if summarizer.counter is counter and (
        summarizer.fallback is None or summarizer.fallback.counter is counter
    ):
        return summarizer
    copied = copy.copy(summarizer)
    copied.counter = counter
    if summarizer.fallback is not None:
        copied.fallback = _with_counter(summarizer.fallback, counter)
    return copied


def _config_of(config_type: type[ConfigT], given: Mapping[str, Any], **worked_out: Any) -> ConfigT:
    """A ``config_type`` from a constructor's arguments (its ``locals()``): each one named like a
    field of the config, then ``worked_out`` (the values the constructor derived itself)."""
    names = _field_names(config_type)
    return config_type(**{**{k: v for k, v in given.items() if k in names}, **worked_out})


def _field_names(config_type: type[ViewLimits]) -> frozenset[str]:
    return frozenset(f.name for f in fields(config_type))


def _reserving(config: ConfigT, extra: int) -> ConfigT:
    """The config with ``extra`` more tokens held back (tool schemas of this request)."""
    if not extra:
        return config
    return replace(config, reserve_tokens=config.reserve_tokens + extra)


class _Trimming(Strategy):
    """Shared plan of the trimming strategies: the cutting plan under their config."""

    config: CutConfig

    def _plan(
        self, messages: Sequence[BaseMessage], state: MemoryState, now: float, extra: int
    ) -> Plan:
        return finished(plan_cut, messages, state, _reserving(self.config, extra), self.counter)


class TokenBudget(_Trimming):
    """The newest whole units of the conversation that fit in ``max_tokens``.

    Args:
        max_tokens: what the whole request may cost: system message, kept messages, the counter's
            per-request overhead and ``reserve_tokens``.
        counter: a :class:`~langmem_ext.core.tokens.TokenCounter`, a chat model, a callable
            ``(BaseMessage) -> int``, a model or tiktoken encoding name, or ``"approximate"``
            (the default: :class:`~langmem_ext.core.tokens.ApproximateCounter`).
        safety_margin: fraction of ``max_tokens`` held back for counter error (0.1 = 10%).
        reserve_tokens: room held back for tool schemas and the model's output.
        min_messages: the view holds at least this many messages (whole units); if they cannot
            fit, the overflow policy applies.
        target_tokens: turns on hysteresis. When the view would pass ``max_tokens`` it is cut down
            to ``target_tokens``; that cut is then kept while the view stays under ``max_tokens``,
            so the prompt prefix stays the same and provider prompt caches keep hitting.
        start_on: ``"human"`` (the view's first non-system message is a HumanMessage, as
            Anthropic and Gemini require) or ``"any"`` (any unit boundary).
        keep_system: keep the leading SystemMessage (always first, always counted).
        overflow: when the required messages (the newest human turn, the newest unit,
            ``min_messages``) do not fit: ``"error"`` raises
            :class:`~langmem_ext.errors.ContextOverflowError` with the numbers; ``"clip"`` clips
            the newest human message (then the largest required messages) with a visible marker.

    Example:
        >>> from langchain_core.messages import HumanMessage, AIMessage
        >>> strategy = TokenBudget(max_tokens=30)
        >>> history = [HumanMessage("hello " * 20), AIMessage("hi"), HumanMessage("and now?")]
        >>> result = strategy.apply(history)
        >>> [m.content for m in result.messages]
        ['and now?']
    """

    def __init__(
        self,
        max_tokens: int,
        *,
        counter: CounterLike = None,
        safety_margin: float = 0.0,
        reserve_tokens: int = 0,
        min_messages: int = 1,
        target_tokens: int | None = None,
        start_on: StartOn = "human",
        keep_system: bool = True,
        overflow: Overflow = "error",
    ) -> None:
        require_budget(max_tokens)
        self.config = _config_of(CutConfig, locals())
        self.counter = as_counter(counter)

    def __repr__(self) -> str:
        c = self.config
        target = f", target_tokens={c.target_tokens}" if c.target_tokens else ""
        return f"TokenBudget(max_tokens={c.max_tokens}{target}, counter={self.counter!r})"


class SlidingWindow(_Trimming):
    """The last ``max_messages`` messages, moved to unit and human-turn boundaries.

    Counted in messages, not pairs; the pinned system message is not counted. The cut moves
    forward to the next boundary, so the window never splits a tool call from its results and
    (with ``start_on="human"``) always begins on a HumanMessage. The newest human message is
    always kept: when the current turn alone is longer than the window (a long tool loop), the
    view is that human message plus the newest units that fit (``report.gap``).

    ``max_tokens`` optionally adds a token budget on top (same meaning as in
    :class:`TokenBudget`); ``counter`` is used for it and for the report's token figures. With
    ``max_messages=None`` the token budget is the only limit, so one of the two must be given.

    Example:
        >>> from langchain_core.messages import HumanMessage, AIMessage
        >>> history = [HumanMessage("1"), AIMessage("2"), HumanMessage("3"), AIMessage("4")]
        >>> [m.content for m in SlidingWindow(max_messages=3).apply(history).messages]
        ['3', '4']
    """

    def __init__(
        self,
        max_messages: int = 20,
        *,
        max_tokens: int | None = None,
        counter: CounterLike = None,
        min_messages: int = 1,
        start_on: StartOn = "human",
        keep_system: bool = True,
        overflow: Overflow = "error",
    ) -> None:
        if max_tokens is not None:
            require_budget(max_tokens)
        elif max_messages is None:
            raise ValueError(
                "SlidingWindow needs a limit: max_messages (an integer >= 1) or max_tokens (an "
                "integer >= 1), got max_messages=None and max_tokens=None"
            )
        self.config = _config_of(CutConfig, locals())
        self.counter = as_counter(counter)

    def __repr__(self) -> str:
        tokens = f", max_tokens={self.config.max_tokens}" if self.config.max_tokens else ""
        return f"SlidingWindow(max_messages={self.config.max_messages}{tokens})"


class ToolDigest(Strategy):
    """Older tool rounds shown as short digests, no model call; then the newest units that fit.

    For agent loops without a summarizer: when the view passes ``trigger_tokens`` (default
    three quarters of ``max_tokens``), every completed tool round older than the newest
    ``keep_rounds`` is shown as one digest message (tool names, arguments, and each output clipped
    to about ``observation_tokens`` tokens with a visible marker; see
    :mod:`langmem_ext.core.digest`). A digest is computed once and kept in the state; the digest
    point only moves at the next crossing, so the prompt prefix holds in between. What still does
    not fit under ``max_tokens`` is cut as :class:`TokenBudget` cuts (oldest first; the newest
    human message, the request of the turn, always stays). The history is never changed: a
    digest is a view of the round, and ``report.digested`` says how many rounds are shown so.

    Args:
        max_tokens: what the whole request may cost.
        keep_rounds: completed tool rounds always shown verbatim (3, at least 1).
        observation_tokens: tokens each text of a digest keeps (48).
        trigger_tokens: the view's level at which older rounds are digested (once there, the
            point moves again when the verbatim rounds after it cost more than
            ``max_tokens - trigger_tokens``, so it moves every few rounds, not every call).
        overflow: ``"clip"`` (default: an agent loop must not stop because one tool returned a
            huge result) clips the largest required message first, the request last;
            ``"error"`` raises :class:`~langmem_ext.errors.ContextOverflowError`.
        counter, safety_margin, reserve_tokens, min_messages, target_tokens, start_on,
        keep_system: as for :class:`TokenBudget`.

    Example:
        >>> from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
        >>> history = [HumanMessage("fix the tests")]
        >>> for i in range(6):
        ...     call = {"name": "read_file", "args": {"path": f"f{i}.py"}, "id": f"c{i}"}
        ...     history.append(AIMessage("", tool_calls=[call]))
        ...     history.append(ToolMessage("x = 1\\n" * 200, tool_call_id=f"c{i}"))
        >>> strategy = ToolDigest(max_tokens=1_500, keep_rounds=2, observation_tokens=8)
        >>> result = strategy.apply(history)
        >>> result.report.digested, result.report.messages_dropped
        (4, 0)
        >>> print(result.messages[1].content)
        [langmem_ext digest of an earlier tool round: 1 call, outputs clipped]
        → read_file({"path": "f0.py"})
        ← read_file: x = 1 x = 1 x = 1 x = 1 x = 1 x [... 1167 characters clipped by langmem_ext]
    """

    config: DigestCutConfig

    def __init__(
        self,
        max_tokens: int,
        *,
        keep_rounds: int = 3,
        observation_tokens: int = 48,
        trigger_tokens: int | None = None,
        counter: CounterLike = None,
        safety_margin: float = 0.0,
        reserve_tokens: int = 0,
        min_messages: int = 1,
        target_tokens: int | None = None,
        start_on: StartOn = "human",
        keep_system: bool = True,
        overflow: Overflow = "clip",
    ) -> None:
        require_budget(max_tokens)
        self.config = _config_of(
            DigestCutConfig,
            locals(),
            trigger_tokens=trigger_tokens if trigger_tokens is not None else max_tokens * 3 // 4,
            digest=DigestSettings(keep_rounds=keep_rounds, observation_tokens=observation_tokens),
            clip_request_last=True,
        )
        self.counter = as_counter(counter)

    def __repr__(self) -> str:
        c = self.config
        return (
            f"ToolDigest(max_tokens={c.max_tokens}, digest at {c.trigger_tokens}, "
            f"keep_rounds={c.digest.keep_rounds}, counter={self.counter!r})"
        )

    def _plan(
        self, messages: Sequence[BaseMessage], state: MemoryState, now: float, extra: int
    ) -> Plan:
        return finished(plan_digest, messages, state, _reserving(self.config, extra), self.counter)


class _Summarizing(Strategy, Folding):
    """Shared set-up of the summarizing strategies: one fold pipeline, different presets. Each
    answers its folds with its own fold machinery
    (:class:`~langmem_ext.strategies.engine.Folding`), set from its
    :class:`~langmem_ext.strategies.options.FoldPolicy`."""

    config: FoldConfig
    #: the settings of :class:`~langmem_ext.strategies.options.FoldPolicy` this strategy runs with
    policy: FoldPolicy

    def _setup(self, given: Mapping[str, Any], **worked_out: Any) -> None:
        """Resolve the counter, summarizer and policy, then build the fold config: from a
        constructor's arguments (its ``locals()``) and ``worked_out`` (the values it derived
        itself), the fold sizing (:data:`_SIZING`) and ``summarizer``, ``max_summary_tokens``,
        ``counter`` and ``policy``.

        Defaults scale with ``max_tokens`` (a 600-token budget gets a 150-token summary, not the
        1,000-token default), and a combination that cannot work is refused here, naming the
        parameter to change, instead of at the first ``apply``."""
        args = {**given, **worked_out}
        fold = {k: v for k, v in args.items() if k in _SIZING}
        self.policy = policy = _checked_policy(args["policy"])
        max_tokens = fold["max_tokens"]
        self.counter: TokenCounter = as_counter(args["counter"])
        max_summary_tokens, source = self._use_summarizer(
            args["summarizer"], args["max_summary_tokens"], max_tokens
        )
        self.on_summary_updated = policy.on_summary_updated
        self.on_health_changed = policy.on_health_changed
        self.on_turn_added = policy.on_turn_added
        trigger_messages, target_messages = policy.message_triggers(fold["min_messages"])
        if policy.clock is not None:
            self.clock = policy.clock
        if max_summary_tokens >= fold["trigger_tokens"]:
            raise ValueError(
                f"{source} ({max_summary_tokens:,}) must be below the fold trigger "
                f"({fold['trigger_tokens']:,}, from max_tokens={max_tokens:,}): raise max_tokens "
                "or lower max_summary_tokens"
            )
        if fold.get("target_tokens") is None:  # default: half the trigger (see SummaryBuffer)
            trigger = fold["trigger_tokens"]
            fold["target_tokens"] = max(
                trigger // 2, max_summary_tokens + (trigger - max_summary_tokens) // 4
            )
        elif fold["target_tokens"] <= max_summary_tokens:
            raise ValueError(
                f"target_tokens ({fold['target_tokens']:,}) must be above {source} "
                f"({max_summary_tokens:,}), or a fold could never make room: raise target_tokens "
                "or lower max_summary_tokens"
            )
        self.config = FoldConfig(
            max_summary_tokens=max_summary_tokens,
            trigger_messages=trigger_messages,
            target_messages=target_messages,
            **{name: getattr(policy, name) for name in _FROM_POLICY},
            **fold,
        )
        # the fold machinery's settings (Folding)
        self.folds_in_background = policy.prefetch_tokens is not None
        self.fold_wait = policy.fold_wait
        self.retry_in_call = policy.retry_in_call

    def _use_summarizer(
        self, summarizer: SummarizerLike, max_summary_tokens: int | None, max_tokens: int
    ) -> tuple[int, str]:
        """Set ``self.summarizer`` (measuring with ``self.counter``); the summary's budget and
        where it came from (for the errors that name it)."""
        if isinstance(summarizer, Summarizer):
            # the summary's bound must hold by the strategy's counter (the one the view is
            # measured with), not by whatever counter the Summarizer was built with
            self.summarizer = _with_counter(summarizer, self.counter)
            source = "the Summarizer's max_summary_tokens"
            if max_summary_tokens is None:
                max_summary_tokens = summarizer.max_summary_tokens
        else:
            source = "max_summary_tokens"
            if max_summary_tokens is None:
                source = "the default max_summary_tokens (max_tokens // 4, at most 1,000)"
                max_summary_tokens = min(_DEFAULT_SUMMARY_TOKENS, max_tokens // 4)
                if max_summary_tokens < 16:
                    raise ValueError(
                        f"max_tokens ({max_tokens:,}) is too small for a summarizing strategy: "
                        f"the default summary budget (max_tokens // 4 = {max_summary_tokens}) "
                        "is under the 16-token minimum; use max_tokens >= 64, or TokenBudget"
                    )
            require_int("max_summary_tokens", max_summary_tokens, 16, _SUMMARY_FLOOR_WHY)
            self.summarizer = Summarizer(
                summarizer,
                max_summary_tokens=max_summary_tokens,
                max_input_tokens=max(_DEFAULT_INPUT_TOKENS, 4 * max_summary_tokens),
                counter=self.counter,
            )
        return max_summary_tokens, source

    def __repr__(self) -> str:
        c = self.config
        return (
            f"{type(self).__name__}(max_tokens={c.max_tokens}, fold at {c.trigger_tokens} "
            f"down to {c.target_tokens}, max_summary_tokens={c.max_summary_tokens})"
        )

    def _plan(
        self, messages: Sequence[BaseMessage], state: MemoryState, now: float, extra: int
    ) -> Plan:
        return plan_fold(messages, state, _reserving(self.config, extra), self.counter, now)


#: the fold config's settings a summarizing constructor sizes (the budget and the first tier)
_SIZING = _field_names(FoldConfig) - {
    "max_summary_tokens",
    "trigger_messages",
    "target_messages",
    *POLICY_FIELDS,
}
#: the fold config's settings the policy gives as they are (placement, overflow, backoff ...)
_FROM_POLICY = _field_names(FoldConfig) & frozenset(POLICY_FIELDS)


def _checked_policy(policy: FoldPolicy | None) -> FoldPolicy:
    if policy is None:
        return FoldPolicy()
    if not isinstance(policy, FoldPolicy):
        raise TypeError(
            f"policy must be a FoldPolicy (from langmem_ext import FoldPolicy) or None, "
            f"got {policy!r}"
        )
    return policy


def _refuse_moved(strategy: str, moved: Mapping[str, object]) -> None:
    """The constructors' ``**moved`` catch: a keyword that now lives on :class:`FoldPolicy` is
    refused naming its new place (all of them at once), any other unknown keyword as Python
    refuses it. (Typed ``NoReturn``, the bottom type, in the signatures, so a type checker
    flags both at the call.)"""
    if not moved:
        return
    unknown = [name for name in moved if name not in POLICY_FIELDS]
    if unknown:
        raise TypeError(f"{strategy}.__init__() got an unexpected keyword argument {unknown[0]!r}")
    given = ", ".join(f"{name}=..." for name in moved)
    raise TypeError(f"{strategy}({given}) moved: pass policy=FoldPolicy({given})")


_SUMMARIZING_ARGS_DOC = """
    Shared arguments (every summarizing strategy):
        summarizer: a :class:`~langmem_ext.summarize.summarizer.Summarizer`, or a chat model /
            ``"provider:model"`` string / callable to build one. A Summarizer is copied to measure
            with this strategy's ``counter``; the caller's object is not changed.
        counter: how tokens are counted, as for :class:`TokenBudget` (default: approximate).
        reserve_tokens: room held back for tool schemas and the model's output.
        safety_margin: share of ``max_tokens`` held back for counter error.
        min_messages: recent messages kept verbatim while they fit the fold target.
        policy: a :class:`~langmem_ext.strategies.options.FoldPolicy` (default: its defaults):
            where the summary goes (``placement``), what gives when it cannot fit
            (``overflow``), a message-count trigger (``max_messages``, ``keep_messages``), the
            failure policy below (``degrade_after``, ``retry_initial``, ``retry_max``,
            ``retry_in_call``), background compaction (``prefetch_tokens``, ``fold_wait``),
            the callbacks and the ``clock``.
        **moved: one of those passed here as a keyword (the constructors took them before
            ``FoldPolicy``) raises ``TypeError`` naming its place on the policy.
"""

_FAILURE_DOC = """
    Failure: if the summarizer fails (its one attempt and the fallback's, or with the policy's
    ``retry_in_call`` all its retries), nothing is marked folded; the view is the last good
    summary plus the newest messages that fit, with a visible note of how many earlier messages
    are not shown. ``report.health`` and ``state.health`` go to
    ``"retrying"`` (``"degraded"`` after the policy's ``degrade_after`` failures) and the fold is
    tried again on a later call once the backoff (``retry_initial`` doubling up to ``retry_max``
    seconds) has passed; the first success makes it ``"healthy"`` again.

    The policy's ``on_summary_updated(old, new)`` and ``on_health_changed(old, new)`` are called
    after a turn that changed them, ``on_turn_added(messages)`` after a call that saw new
    messages (the messages added since the previous call, oldest first); an exception in a
    callback is logged and never breaks the turn.

    Long agent turns: when one request is followed by more tool rounds than fit, the oldest whole
    rounds of that turn are folded (an in-flight call never is) and the request stays in every
    view, verbatim, right after the summary; ``report.not_shown`` is 0 while the summarizer is
    healthy. ``templates=["task"]`` on the :class:`~langmem_ext.summarize.summarizer.Summarizer`
    keeps a summary fit for such turns (progress, files touched, results, open problems).
"""

_SUMMARIZING_DOC = _SUMMARIZING_ARGS_DOC + _FAILURE_DOC


class SummaryBuffer(_Summarizing):
    """A running summary plus the most recent messages verbatim; ``max_tokens`` bounds it all.

    The successor of LangChain's ``ConversationSummaryBufferMemory``: when the view (system
    message, summary, recent messages) would pass ``max_tokens``, the oldest whole units are
    folded into the summary until the view, with a full-size summary, fits ``target_tokens``
    (default: half of ``max_tokens``, as :class:`Compacting`; at least a quarter of the way from
    ``max_summary_tokens`` to ``max_tokens``), so each fold frees a fixed share of the budget and
    folds stay rare. Between folds the summary, and with it the prompt prefix, does not change.
    Each message is folded exactly once, and the previous summary is always part of the next
    fold's input.

    Args:
        max_tokens: what the whole request may cost (system, summary, messages, reserve).
        max_summary_tokens: the summary's budget (default: the Summarizer's, or
            ``max_tokens // 4`` up to 1,000).
        target_tokens: the level a fold goes down to.
        min_messages: recent messages kept verbatim (2) while they fit ``target_tokens``;
            a fold never goes into the newest human turn.
        start_on, keep_system: as for :class:`TokenBudget`.
    """

    __doc__ = (__doc__ or "") + _SUMMARIZING_DOC

    def __init__(
        self,
        max_tokens: int,
        *,
        summarizer: SummarizerLike,
        max_summary_tokens: int | None = None,
        target_tokens: int | None = None,
        min_messages: int = 2,
        counter: CounterLike = None,
        reserve_tokens: int = 0,
        safety_margin: float = 0.0,
        start_on: StartOn = "human",
        keep_system: bool = True,
        policy: FoldPolicy | None = None,
        **moved: NoReturn,
    ) -> None:
        _refuse_moved("SummaryBuffer", moved)
        require_budget(max_tokens)
        self._setup(locals(), trigger_tokens=max_tokens)


class Compacting(_Summarizing):
    """Does nothing while the conversation fits; once over, folds the oldest units into a summary.

    The cheapest summarizing strategy to run: no model call at all until the view passes
    ``max_tokens`` (less ``safety_margin``, which absorbs counting error); then one fold takes it
    down to ``target_ratio`` of the budget, with ``summary_ratio`` of the budget for the summary.

    Args:
        max_tokens: the request budget.
        summary_ratio: share of ``max_tokens`` for the summary (0.10).
        safety_margin: share of ``max_tokens`` held back for counter error (0.15).
        min_messages: recent messages kept verbatim (5) while they fit the fold target.
        target_ratio: share of ``max_tokens`` a fold goes down to (0.5).
    """

    __doc__ = (__doc__ or "") + _SUMMARIZING_DOC

    def __init__(
        self,
        max_tokens: int,
        *,
        summarizer: SummarizerLike,
        summary_ratio: float = 0.10,
        safety_margin: float = 0.15,
        min_messages: int = 5,
        target_ratio: float = 0.5,
        counter: CounterLike = None,
        reserve_tokens: int = 0,
        policy: FoldPolicy | None = None,
        **moved: NoReturn,
    ) -> None:
        _refuse_moved("Compacting", moved)
        require_budget(max_tokens)
        if not 0 < summary_ratio < target_ratio <= 1:
            raise ValueError(
                f"need 0 < summary_ratio ({summary_ratio}) < target_ratio ({target_ratio}) <= 1"
            )
        self._setup(
            locals(),
            max_summary_tokens=int(max_tokens * summary_ratio),
            trigger_tokens=max_tokens,
            target_tokens=int(max_tokens * target_ratio),
        )


class TieredSummary(_Summarizing):
    """Cheap first, expensive later: digest and clip above tier 1, summarize above tier 2.

    Above ``tier1_ratio`` of the budget, large bodies (tool outputs, pasted documents) of
    messages older than the newest turn are clipped to ``truncate_chars`` with a visible marker;
    when the view would pass ``tier2_ratio``, completed tool rounds older than the newest
    ``keep_rounds`` are first shown as one digest message each (tool names, arguments, outputs
    clipped to ``observation_tokens``; see :class:`ToolDigest`), inside a long agent turn too:
    no model call. Only when that is not enough, above
    ``tier2_ratio``, the oldest units are folded into the summary, down to ``target_ratio``
    (below tier 1, so clipping has room to work again before the next fold). The summarizer
    always reads the original content, never a digest or a clip. The digest and clip points,
    like the fold point, only move when a tier is crossed, so the prompt prefix holds in between.

    Args:
        max_tokens: the request budget.
        tier1_ratio: share of ``max_tokens`` above which older bodies are clipped (0.50).
        tier2_ratio: share of ``max_tokens`` above which the oldest units are folded (0.85).
        target_ratio: share of ``max_tokens`` a fold goes down to (0.35).
        truncate_chars: characters a clipped body keeps (2,000).
        keep_rounds: completed tool rounds always verbatim (3); ``None`` turns digests off
            (tier 1 then only clips bodies, as in 0.1).
        observation_tokens: tokens each text of a digest keeps (48).
        max_summary_tokens: the summary's budget (default: the Summarizer's, or
            ``max_tokens // 4`` up to 1,000).
        min_messages: recent messages kept verbatim (5) while they fit the fold target.
    """

    __doc__ = (__doc__ or "") + _SUMMARIZING_DOC

    def __init__(
        self,
        max_tokens: int,
        *,
        summarizer: SummarizerLike,
        tier1_ratio: float = 0.50,
        tier2_ratio: float = 0.85,
        target_ratio: float = 0.35,
        truncate_chars: int = 2_000,
        keep_rounds: int | None = 3,
        observation_tokens: int = 48,
        max_summary_tokens: int | None = None,
        min_messages: int = 5,
        counter: CounterLike = None,
        reserve_tokens: int = 0,
        safety_margin: float = 0.0,
        policy: FoldPolicy | None = None,
        **moved: NoReturn,
    ) -> None:
        _refuse_moved("TieredSummary", moved)
        require_budget(max_tokens)
        if not 0 < target_ratio <= tier1_ratio < tier2_ratio <= 1:
            raise ValueError(
                f"need 0 < target_ratio ({target_ratio}) <= tier1_ratio ({tier1_ratio}) < "
                f"tier2_ratio ({tier2_ratio}) <= 1"
            )
        self._setup(
            locals(),
            trigger_tokens=int(max_tokens * tier2_ratio),
            target_tokens=int(max_tokens * target_ratio),
            clip_tokens=int(max_tokens * tier1_ratio),
            digest=(
                None
                if keep_rounds is None
                else DigestSettings(keep_rounds=keep_rounds, observation_tokens=observation_tokens)
            ),
        )
