"""A counter calibrated by what a provider reported: :class:`CalibratedCounter`.

It wraps any counter and corrects it with the ``input_tokens`` the provider reported for
requests that were really sent: a per-model line ``provider ≈ scale · ours + offset`` (a
:class:`Correction`), fitted robustly over a bounded window and lifted so that it lies on or
above every observation, so budgets computed with it do not overshoot. Needs nothing at import
time.
"""

from __future__ import annotations

import asyncio
import math
import statistics
import threading
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from langchain_core.messages import BaseMessage

from langmem_ext.core.checks import is_int
from langmem_ext.core.signatures import bind, same_parameters
from langmem_ext.core.tokens import TokenCounter
from langmem_ext.counting.resolve import CounterLike, as_counter

__all__ = ["CalibratedCounter", "Correction"]


@dataclass(frozen=True)
class Correction:
    """One model's learnt correction, from ``samples`` observations.

    Two lines, each lifted onto the highest of the observations (so neither under-counts
    them): ``provider ≈ scale · ours + offset`` with the steepest slope the observations allow
    and ``low_scale · ours + low_offset`` with the shallowest. A request counts the higher of
    the two: the steep line for requests larger than those seen, the shallow one for smaller
    ones, and about the same inside the range seen. A message or a text (no request framing)
    is scaled by ``scale``.
    """

    model: str
    scale: float
    offset: float
    samples: int
    low_scale: float
    low_offset: float

    def tokens(self, raw: int) -> int:
        """A message's or a text's count, corrected (scaled, rounded up)."""
        return max(0, math.ceil(self.scale * raw - 1e-9))

    def request(self, raw: int) -> int:
        """A whole request's count (its messages and overhead), corrected: the higher of the
        two lines, rounded up."""
        steep = self.scale * raw + self.offset
        shallow = self.low_scale * raw + self.low_offset
        return max(0, math.ceil(max(steep, shallow) - 1e-9))


def _median(values: Sequence[float]) -> float:
    return float(statistics.median(values))


def _lift(xs: Sequence[float], ys: Sequence[float], scale: float, margin: float) -> float:
    """The offset that puts the line of slope ``scale`` on or above every inlying sample, plus
    ``margin``. Residuals above the median by more than a few median absolute deviations (and
    2% of a request) are outliers: a report we could not have predicted must not lift the line
    for every later request."""
    residuals = [y - scale * x for x, y in zip(xs, ys, strict=True)]
    middle = _median(residuals)
    deviation = _median([abs(r - middle) for r in residuals])
    tolerance = max(4 * 1.4826 * deviation, 2.0, 0.02 * _median(ys))
    offset = max(r for r in residuals if r <= middle + tolerance) + margin
    # an offset below minus half the smallest request would count small requests as nothing
    return max(offset, -0.5 * min(ys))


def _fit(
    samples: Sequence[tuple[float, int]],
    *,
    scale_bounds: tuple[float, float],
    margin: float,
) -> tuple[float, float, float, float]:
    """The two lines of a :class:`Correction` (steep slope and offset, shallow slope and
    offset) through (ours, provider) samples.

    When the requests' sizes are spread out, the slopes are the median of the slopes between
    well-separated samples (at least half the spread apart; robust to outliers, as Theil-Sen)
    plus and minus ``2 / spread``: with a provider that rounds to whole tokens, each of those
    slopes is within ``2 / spread`` of the true one, so the true slope lies between the two.
    While they are all about one size, the steep slope is the largest ratio, rounding allowed
    for, and the shallow one the lower bound of ``scale_bounds`` (nothing is known yet about
    smaller requests). Both are clamped to ``scale_bounds``.
    """
    xs = [float(x) for x, _ in samples]
    ys = [float(y) for _, y in samples]
    low, high = scale_bounds
    spread = max(xs) - min(xs)
    if len(samples) >= 2 and spread >= max(4.0, 0.02 * _median(xs)):
        slopes = [
            (ys[j] - ys[i]) / (xs[j] - xs[i])
            for i in range(len(xs))
            for j in range(i + 1, len(xs))
            if abs(xs[j] - xs[i]) >= spread / 2
        ]
        middle = _median(slopes)
        steep, shallow = middle + 2 / spread, middle - 2 / spread
    else:
        steep, shallow = max((y + 0.5) / x for x, y in zip(xs, ys, strict=True)), low
    steep = min(high, max(low, steep))
    shallow = min(steep, max(low, shallow))
    return steep, _lift(xs, ys, steep, margin), shallow, _lift(xs, ys, shallow, margin)


def _input_tokens(usage: Any) -> int | None:
    """The prompt tokens a provider reported: from an AIMessage's ``usage_metadata``, a usage
    dict (LangChain's ``input_tokens``, Anthropic's raw ``input_tokens`` plus its cache
    fields, OpenAI's ``prompt_tokens``), an object with those attributes, or an int."""
    if is_int(usage):
        return usage  # a bool is no count: it falls through to None below
    if isinstance(usage, BaseMessage):
        metadata = getattr(usage, "usage_metadata", None)
        if isinstance(metadata, Mapping) and metadata.get("input_tokens"):
            return _input_tokens(dict(metadata))
        raw = usage.response_metadata.get("usage")
        return _input_tokens(raw) if raw is not None else None
    if not isinstance(usage, Mapping):
        fields = ("input_tokens", "cache_creation_input_tokens", "cache_read_input_tokens")
        found = {f: getattr(usage, f) for f in (*fields, "prompt_tokens") if hasattr(usage, f)}
        return _input_tokens(found) if found else None
    value = usage.get("input_tokens")
    if is_int(value):
        extra = (usage.get(f) for f in ("cache_creation_input_tokens", "cache_read_input_tokens"))
        return value + sum(v for v in extra if is_int(v))
    value = usage.get("prompt_tokens")
    if is_int(value):
        return value
    return None


def _model_of(usage: Any) -> str | None:
    if isinstance(usage, BaseMessage):
        for key in ("model_name", "model"):
            name = usage.response_metadata.get(key)
            if isinstance(name, str) and name:
                return name
    return None


class CalibratedCounter:
    """Any counter, corrected by what the provider reported for requests that were sent.

    Wrap the counter the strategy uses and feed it responses with :meth:`observe` (the
    :class:`~langmem_ext.integrations.agents.MemoryMiddleware` does this by itself after every
    model call)::

        counter = CalibratedCounter(ApproximateCounter())
        strategy = TokenBudget(8_000, counter=counter)
        ...
        counter.observe(messages_sent, ai_message)  # reads usage_metadata["input_tokens"]

    Per model (the ``model=`` given to :meth:`observe`, else the ``model`` this counter is for,
    else the one the response names in its ``response_metadata``) it keeps the last ``window``
    pairs (our count, the provider's ``input_tokens``) and fits ``provider ≈ scale · ours +
    offset`` (a :class:`Correction`): a robust slope (the median of the slopes between
    well-separated observations) with the error bars the provider's rounding allows, clamped to
    ``scale_bounds``, each bar's line lifted on or above every inlying observation, plus
    ``margin`` tokens. A request counts the higher line: the steeper one for requests larger
    than those seen, the shallower one for smaller ones. Zero or missing usage is ignored.

    Counting applies the correction of this counter's ``model`` when it has one, else of the
    model observed last. ``count_messages(messages)`` corrects the whole request as one number
    (so ``count_messages([])``, the overhead, carries the offset); ``count_message`` and
    ``count_text`` are scaled and rounded up. Rounding each message up makes the parts add up
    to slightly more than the whole (about one token a message), never less, so a plan that
    sums per-message counts stays within what ``count_messages`` says. Counts are exact or
    slightly over, never systematically under. Before any observation it counts exactly as the
    wrapped counter. Thread-safe.
    """

    def __init__(
        self,
        counter: TokenCounter | CounterLike = None,
        *,
        model: str | None = None,
        window: int = 64,
        scale_bounds: tuple[float, float] = (0.5, 3.0),
        margin: float = 1.0,
    ) -> None:
        low, high = scale_bounds
        if not 0 < low <= 1 <= high:
            raise ValueError(f"scale_bounds must satisfy 0 < low <= 1 <= high, got {scale_bounds}")
        if window < 1:
            raise ValueError(f"window must be >= 1, got {window}")
        #: the wrapped counter
        self.inner: TokenCounter = as_counter(counter)
        #: counting may block on I/O exactly when the wrapped counter's may
        self.is_blocking: bool = bool(getattr(self.inner, "is_blocking", False))
        self.model = model
        self.window = window
        self.scale_bounds = (float(low), float(high))
        self.margin = margin
        self._lock = threading.Lock()
        self._samples: dict[str, deque[tuple[float, int]]] = {}
        self._corrections: dict[str, Correction] = {}
        self._last: str | None = None

    def __repr__(self) -> str:
        return f"CalibratedCounter({self.inner!r})"

    # -- corrections ------------------------------------------------------------------------------

    @property
    def corrections(self) -> dict[str, Correction]:
        """The current correction of every observed model (a copy)."""
        with self._lock:
            return dict(self._corrections)

    def correction(self, model: str | None = None) -> Correction | None:
        """The correction counting uses: ``model``'s, else this counter's ``model``'s, else the
        one of the model observed last; None before any observation."""
        with self._lock:
            name = model or self.model or self._last
            return self._corrections.get(name) if name is not None else None

    def reset(self, model: str | None = None) -> None:
        """Forget the observations and correction of ``model`` (of every model when None)."""
        with self._lock:
            if model is None:
                self._samples.clear()
                self._corrections.clear()
                self._last = None
                return
            self._samples.pop(model, None)
            self._corrections.pop(model, None)
            if self._last == model:
                self._last = None

    def _raw_extra(self, extra_tokens: int, model: str | None) -> float:
        """``extra_tokens`` (counted by this counter, so corrected) in the wrapped counter's
        units: divided by the scale in force."""
        if extra_tokens <= 0:
            return 0.0
        correction = self.correction(model)
        return extra_tokens / correction.scale if correction is not None else float(extra_tokens)

    def _record(self, raw: float, usage: Any, model: str | None) -> Correction | None:
        reported = _input_tokens(usage)
        if reported is None or reported <= 0 or raw <= 0:
            return None
        name = model or self.model or _model_of(usage) or "default"
        with self._lock:
            samples = self._samples.setdefault(name, deque(maxlen=self.window))
            samples.append((raw, reported))
            scale, offset, low_scale, low_offset = _fit(
                list(samples), scale_bounds=self.scale_bounds, margin=self.margin
            )
            correction = Correction(name, scale, offset, len(samples), low_scale, low_offset)
            self._corrections[name] = correction
            self._last = name
            return correction

    def observe(
        self,
        messages: Sequence[BaseMessage],
        usage_or_message: Any,
        *,
        model: str | None = None,
        extra_tokens: int = 0,
    ) -> Correction | None:
        """Learn from one request that was sent: ``messages`` as sent (system prompt included)
        and the response (an ``AIMessage``, its usage dict, or the prompt tokens as an int).

        ``extra_tokens`` are what the request held besides ``messages`` (the tool schemas) as
        this counter counted them when the budget reserved them (``count_text``, so already
        corrected): they are part of what the provider counted, so they join our side of the
        fit, back in the wrapped counter's units. Returns the model's new correction, or None
        when the response reported no usage.
        """
        if _input_tokens(usage_or_message) is None:
            return None
        raw = self.inner.count_messages(list(messages)) + self._raw_extra(extra_tokens, model)
        return self._record(raw, usage_or_message, model)

    @same_parameters(observe)
    async def aobserve(self, *args: Any, **kwargs: Any) -> Correction | None:
        """:meth:`observe`, counting off the event loop when the wrapped counter blocks."""
        _, messages, usage_or_message, model, extra_tokens = bind(
            CalibratedCounter.observe, (self, *args), kwargs, "aobserve"
        )
        if _input_tokens(usage_or_message) is None:
            return None
        raw = await self._araw(list(messages)) + self._raw_extra(extra_tokens, model)
        return self._record(raw, usage_or_message, model)

    async def _araw(self, messages: list[BaseMessage]) -> int:
        acount = getattr(self.inner, "acount_messages", None)
        if callable(acount):
            return int(await acount(messages))
        if self.is_blocking:
            return await asyncio.to_thread(self.inner.count_messages, messages)
        return self.inner.count_messages(messages)

    # -- counting ---------------------------------------------------------------------------------

    @property
    def request_overhead(self) -> int:
        """What every request costs beyond its messages, corrected."""
        return self.count_messages(())

    def count_message(self, message: BaseMessage) -> int:
        raw = self.inner.count_message(message)
        correction = self.correction()
        return correction.tokens(raw) if correction is not None else raw

    def count_text(self, text: str) -> int:
        raw = self.inner.count_text(text)
        correction = self.correction()
        return correction.tokens(raw) if correction is not None else raw

    def count_messages(self, messages: Sequence[BaseMessage]) -> int:
        raw = self.inner.count_messages(messages)  # a batching counter counts its misses at once
        correction = self.correction()
        return correction.request(raw) if correction is not None else raw

    async def acount_messages(self, messages: Sequence[BaseMessage]) -> int:
        """:meth:`count_messages` with the wrapped counter's async counting when it has one."""
        raw = await self._araw(list(messages))
        correction = self.correction()
        return correction.request(raw) if correction is not None else raw

    def cache_info(self) -> Any:
        """The wrapped counter's cache statistics (None when it has no cache)."""
        info = getattr(self.inner, "cache_info", None)
        return info() if callable(info) else None
