"""Replay a saved conversation through a strategy: every model call it made, what the model
would have seen under the strategy, and what that would have cost.

A *model call* is each AI message of the transcript: the call that produced it saw the history
before it. :func:`replay` runs the strategy on each of those histories in order (passing the
state on, as a LangGraph checkpoint would) and records, per call, the view's tokens, the part of
it that repeats the previous view's prefix (what a provider's prompt cache serves), summaries
made, the view's validity for the provider, and the cost at a model's prices with and without
prompt caching. :func:`compare` does that for several strategies side by side and returns a
:class:`~langmem_ext.replay.comparison.Comparison` (a table, CSV, JSON, plots). The records
themselves are in :mod:`langmem_ext.replay.results`.

``strategy=None`` replays the transcript as it was sent: the whole history every call.

Example:
    >>> from langmem_ext import TokenBudget
    >>> from langmem_ext.testing import synthetic_history
    >>> messages = synthetic_history(60, seed=1)
    >>> result = compare(messages, {"full": None, "budget": TokenBudget(600)}, progress=False)
    >>> [r.name for r in result.replays]
    ['full', 'budget']
    >>> full, budget = (r.totals() for r in result.replays)
    >>> budget["input_tokens"] < full["input_tokens"], budget["invalid_views"]
    (True, 0)
"""

from __future__ import annotations

import copy
import time
import uuid
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage

from langmem_ext.core.keys import MemoryKey
from langmem_ext.core.messages import validate
from langmem_ext.core.result import MemoryResult
from langmem_ext.core.steps import Flow, Step, arun, run
from langmem_ext.core.tokens import TokenCounter
from langmem_ext.counting.resolve import CounterLike, as_counter
from langmem_ext.replay.comparison import Comparison
from langmem_ext.replay.prices import ModelPrice, Prices, load_prices
from langmem_ext.replay.results import CallRecord, Replay
from langmem_ext.strategies.engine import Strategy
from langmem_ext.summarize.summarizer import Summarizer

__all__ = [
    "DEFAULT_MODEL",
    "areplay",
    "compare",
    "model_calls",
    "replay",
]

#: the model whose prices the cost columns use when none is named
DEFAULT_MODEL = "openai:gpt-4o-mini"

StrategyLike = Strategy | None


# --------------------------------------------------------------------------------------------
# the summarizer's meter


@dataclass
class _Meter:
    calls: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    seconds: float = 0.0


class _MeteredSummarizer(Summarizer):
    """The strategy's summarizer, measured: calls, tokens read and written, time."""

    def __init__(self, inner: Summarizer, meter: _Meter, counter: TokenCounter) -> None:
        # no Summarizer.__init__: this is the inner summarizer's configuration, shared
        self.__dict__.update(inner.__dict__)
        self._metered = inner
        self._meter = meter
        self._meter_counter = counter

    def _record(
        self,
        previous: Mapping[str, str],
        messages: Sequence[BaseMessage],
        sections: Mapping[str, str],
        start: float,
    ) -> None:
        meter, counter = self._meter, self._meter_counter
        meter.calls += 1
        meter.seconds += time.perf_counter() - start
        meter.input_tokens += counter.count_messages(messages)
        meter.input_tokens += counter.count_text("\n".join(previous.values()))
        meter.output_tokens += counter.count_text("\n".join(sections.values()))

    def fold(self, previous: Mapping[str, str], messages: Sequence[BaseMessage]) -> dict[str, str]:
        start = time.perf_counter()
        try:
            sections = self._metered.fold(previous, messages)
        except Exception:
            self._meter.seconds += time.perf_counter() - start
            raise
        self._record(previous, messages, sections, start)
        return sections

    async def afold(
        self, previous: Mapping[str, str], messages: Sequence[BaseMessage]
    ) -> dict[str, str]:
        start = time.perf_counter()
        try:
            sections = await self._metered.afold(previous, messages)
        except Exception:
            self._meter.seconds += time.perf_counter() - start
            raise
        self._record(previous, messages, sections, start)
        return sections


def _metered(strategy: Strategy, meter: _Meter, counter: TokenCounter) -> Strategy:
    """A shallow copy of ``strategy`` whose summarizer reports to ``meter`` (the caller's
    strategy is not changed)."""
    if strategy.summarizer is None:
        return strategy
    copied = copy.copy(strategy)
    copied.summarizer = _MeteredSummarizer(strategy.summarizer, meter, counter)
    return copied


# --------------------------------------------------------------------------------------------
# one replay


def model_calls(messages: Sequence[BaseMessage]) -> list[int]:
    """The transcript positions of its model calls: each AI message with history before it."""
    return [i for i, m in enumerate(messages) if isinstance(m, AIMessage) and i > 0]


def _same(a: BaseMessage, b: BaseMessage) -> bool:
    return a is b or a == b


def _common_prefix(previous: Sequence[BaseMessage], view: Sequence[BaseMessage]) -> int:
    n = 0
    for a, b in zip(previous, view, strict=False):
        if not _same(a, b):
            break
        n += 1
    return n


def _progress(total: int, label: str, enabled: bool | None) -> Any:
    """A tqdm bar on stderr (auto: only on a terminal), or None without tqdm or when off."""
    if enabled is False:
        return None
    try:
        from tqdm.auto import tqdm  # type: ignore[import-untyped]
    except ImportError:  # the `experiment` extra is not installed: no bar
        return None
    return tqdm(
        total=total,
        desc=label,
        unit="call",
        leave=False,
        disable=None if enabled is None else False,
    )


def _replay_key() -> MemoryKey:
    """A key of its own for one replay: a fresh user and session (both named, so a
    ``Retrieval`` at ``scope="user"`` or ``"thread"`` runs without sharing a default memory)."""
    own = f"replay-{uuid.uuid4().hex}"
    return MemoryKey(user=own, session=own)


@dataclass
class _Replayer:
    """The loop of :func:`replay`, shared by the sync and async entry points."""

    name: str
    messages: Sequence[BaseMessage]
    counter: TokenCounter
    price: ModelPrice
    summarizer_price: ModelPrice | None
    strategy: Strategy | None
    meter: _Meter = field(default_factory=_Meter)
    key: MemoryKey = field(default_factory=_replay_key)

    def __post_init__(self) -> None:
        if self.strategy is not None:
            self.strategy = _metered(self.strategy, self.meter, self.counter)
        self.out = Replay(self.name, self.price.model, description=_describe(self.strategy))
        self.overhead = self.counter.count_messages([])
        self.history_tokens = self.overhead
        self.counted = 0
        self.previous: list[BaseMessage] = []
        self.previous_tokens: list[int] = []
        self.state: Any = None
        self.newest_human: BaseMessage | None = None

    def histories(self) -> Iterator[tuple[int, Sequence[BaseMessage]]]:
        for position in model_calls(self.messages):
            history = self.messages[:position]
            for m in self.messages[self.counted : position]:
                self.history_tokens += self.counter.count_message(m)
                if isinstance(m, HumanMessage):
                    self.newest_human = m
            self.counted = position
            yield position, history

    def _view_tokens(self, report: Any) -> int:
        """The tokens of the call's view, from the strategy's report (the whole history when
        there is none); the report's budget becomes the replay's."""
        if report is None:
            return self.history_tokens
        if report.budget is not None:
            self.out.budget = report.budget
        tokens: int = report.tokens_after
        return tokens

    def _cached_tokens(self, view: Sequence[BaseMessage], shared: int) -> int:
        """The tokens of the first ``shared`` messages of ``view``: the previous call's view
        and answer, which a provider's prompt cache serves."""
        if shared == 0:
            return 0
        if shared == len(self.previous):
            return self.previous_tokens[-1] if self.previous_tokens else 0
        return self.overhead + sum(self.counter.count_message(m) for m in view[:shared])

    def record(
        self,
        position: int,
        history: Sequence[BaseMessage],
        view: list[BaseMessage],
        report: Any,
        seconds: float,
        meter_before: _Meter,
    ) -> None:
        meter = self.meter
        view_tokens = self._view_tokens(report)
        shared = _common_prefix(self.previous, view)
        cached = min(self._cached_tokens(view, shared), view_tokens)
        output = self.counter.count_message(self.messages[position])
        s_in = meter.input_tokens - meter_before.input_tokens
        s_out = meter.output_tokens - meter_before.output_tokens
        summarizing = (
            0.0
            if self.summarizer_price is None
            else self.summarizer_price.cost(input_tokens=s_in, output_tokens=s_out)
        )
        newest = self.newest_human
        findings = validate(view)
        self.out.calls.append(
            CallRecord(
                call=len(self.out.calls) + 1,
                position=position,
                history_messages=len(history),
                history_tokens=self.history_tokens,
                view_messages=len(view),
                view_tokens=view_tokens,
                cached_tokens=cached,
                output_tokens=output,
                prefix_kept=bool(self.previous) and shared == len(self.previous),
                folded=0 if report is None else report.folded,
                summarizer_calls=meter.calls - meter_before.calls,
                summarizer_input_tokens=s_in,
                summarizer_output_tokens=s_out,
                summary_tokens=0 if report is None else report.summary_tokens,
                digested=0 if report is None else report.digested,
                retrieved_tokens=0 if report is None else report.retrieved_tokens,
                dropped=0 if report is None else report.messages_dropped,
                valid=not any(f.severity == "error" for f in findings),
                newest_human_shown=newest is None or any(_same(m, newest) for m in view),
                over_budget=report is not None
                and report.budget is not None
                and view_tokens > report.budget,
                cost=self.price.cost(input_tokens=view_tokens, output_tokens=output) + summarizing,
                cost_cached=self.price.cost(
                    input_tokens=view_tokens, output_tokens=output, cached_tokens=cached
                )
                + summarizing,
                seconds=max(seconds - (meter.seconds - meter_before.seconds), 0.0),
            )
        )
        # the next call's cache holds this view and its answer
        self.previous = [*view, self.messages[position]]
        self.previous_tokens = [view_tokens + output]


def _describe(strategy: Strategy | None) -> str:
    return "the whole history every call" if strategy is None else repr(strategy)


def _replay_flow(
    name: str | None,
    messages: Sequence[BaseMessage],
    strategy: StrategyLike,
    model: str,
    counter: CounterLike,
    prices: Prices | None,
    summarizer_model: str | None,
    progress: bool | None,
) -> Flow[Replay]:
    """The replay of :func:`replay` and :func:`areplay` as a flow of steps (not started)."""
    prices = load_prices() if prices is None else prices
    own = counter is None and strategy is not None
    resolved = strategy.counter if own and strategy is not None else as_counter(counter)
    replayer = _Replayer(
        name=name or _default_name(strategy),
        messages=list(messages),
        counter=resolved,
        price=prices.get(model),
        summarizer_price=None if summarizer_model is None else prices.get(summarizer_model),
        strategy=strategy,
    )
    return _calls(replayer, progress)


def replay(
    messages: Sequence[BaseMessage],
    strategy: StrategyLike,
    *,
    name: str | None = None,
    model: str = DEFAULT_MODEL,
    counter: CounterLike = None,
    prices: Prices | None = None,
    summarizer_model: str | None = None,
    progress: bool | None = None,
) -> Replay:
    """Replay ``messages`` through ``strategy`` (``None``: the whole history every call).

    Args:
        messages: the transcript, oldest first (see :func:`langmem_ext.replay.load_transcript`).
        strategy: any :class:`~langmem_ext.strategies.engine.Strategy`; it is not changed (a
            summarizer is measured through a copy). A ``Retrieval`` gets a memory key of its own
            per replay, so replays never share an index.
        name: the label in tables and plots (default: the strategy's class name).
        model: ``provider:name`` whose prices the cost columns use (see
            :func:`~langmem_ext.replay.prices.load_prices`).
        counter: counts the tokens of every figure; default: the strategy's own counter (the
            approximate counter for ``None``).
        prices: default: the built-in prices.
        summarizer_model: prices the summarizer's tokens at this model's prices (``None``: the
            summarizer costs nothing, as the offline extractive one).
        progress: a progress bar on stderr: ``None`` shows it on a terminal only.

    A strategy that raises (a budget too small for a turn) ends the replay at that call: the
    calls before it are kept and ``Replay.error`` says what happened.
    """
    args = (name, messages, strategy, model, counter, prices, summarizer_model, progress)
    return run(_replay_flow(*args))


async def areplay(
    messages: Sequence[BaseMessage],
    strategy: StrategyLike,
    *,
    name: str | None = None,
    model: str = DEFAULT_MODEL,
    counter: CounterLike = None,
    prices: Prices | None = None,
    summarizer_model: str | None = None,
    progress: bool | None = None,
) -> Replay:
    """Async :func:`replay` (``aapply`` at every call: the summarizer is awaited)."""
    args = (name, messages, strategy, model, counter, prices, summarizer_model, progress)
    return await arun(_replay_flow(*args))


@dataclass(frozen=True, slots=True)
class _Apply(Step):
    """A step: the strategy run on one call's history (``apply``, or ``aapply`` under
    :func:`~langmem_ext.core.steps.arun`: the summarizer is awaited)."""

    strategy: Strategy
    history: Sequence[BaseMessage]
    state: Any
    key: MemoryKey

    def run(self) -> MemoryResult:
        return self.strategy.apply(self.history, self.state, key=self.key)

    async def arun(self) -> MemoryResult:
        return await self.strategy.aapply(self.history, self.state, key=self.key)


def _calls(replayer: _Replayer, progress: bool | None) -> Flow[Replay]:
    """The replay as one flow of steps, for both drivers: yields the strategy's call on each
    history, records what it made of it (timed, the summarizer's time left out; no strategy:
    the history itself), and ends at the first call the strategy gave up on."""
    bar = _progress(len(model_calls(replayer.messages)), replayer.name, progress)
    try:
        for position, history in replayer.histories():
            before = copy.copy(replayer.meter)
            start = time.perf_counter()
            view, report = list(history), None
            if replayer.strategy is not None:
                try:
                    result: MemoryResult = yield _Apply(
                        replayer.strategy, history, replayer.state, replayer.key
                    )
                except Exception as exc:
                    name = type(exc).__name__
                    replayer.out.error = f"call {len(replayer.out.calls) + 1}: {name}: {exc}"
                    break
                replayer.state = result.state
                view, report = result.messages, result.report
            seconds = time.perf_counter() - start
            replayer.record(position, history, view, report, seconds, before)
            if bar is not None:
                bar.update()
    finally:
        if bar is not None:
            bar.close()
    return replayer.out


def _default_name(strategy: StrategyLike) -> str:
    return "full history" if strategy is None else type(strategy).__name__


def _named(
    strategies: Mapping[str, StrategyLike] | Sequence[StrategyLike],
) -> list[tuple[str, StrategyLike]]:
    if isinstance(strategies, Mapping):
        return list(strategies.items())
    named: list[tuple[str, StrategyLike]] = []
    seen: dict[str, int] = {}
    for strategy in strategies:
        base = _default_name(strategy)
        seen[base] = seen.get(base, 0) + 1
        named.append((base if seen[base] == 1 else f"{base} #{seen[base]}", strategy))
    return named


def compare(
    messages: Sequence[BaseMessage],
    strategies: Mapping[str, StrategyLike] | Sequence[StrategyLike],
    *,
    model: str = DEFAULT_MODEL,
    counter: CounterLike = None,
    prices: Prices | None = None,
    summarizer_model: str | None = None,
    progress: bool | None = None,
    source: str = "",
) -> Comparison:
    """:func:`replay` each strategy (a mapping name -> strategy, or a list) over ``messages``.

    Give every strategy the same ``counter`` (or leave it ``None`` to use each strategy's own)
    so that the figures compare. ``None`` as a strategy is the whole history every call.
    """
    prices = load_prices() if prices is None else prices
    shared = None if counter is None else as_counter(counter)
    replays = [
        replay(
            messages,
            strategy,
            name=name,
            model=model,
            counter=shared,
            prices=prices,
            summarizer_model=summarizer_model,
            progress=progress,
        )
        for name, strategy in _named(strategies)
    ]
    return Comparison(replays, prices.get(model).model, source, len(messages))
