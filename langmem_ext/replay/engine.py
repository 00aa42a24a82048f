"""Replay a saved conversation through a strategy: every model call it made, what the model
would have seen under the strategy, and what that would have cost.

A *model call* is each AI message of the transcript: the call that produced it saw the history
before it. :func:`replay` runs the strategy on each of those histories in order (passing the
state on, as a LangGraph checkpoint would) and records, per call, the view's tokens, the part of
it a provider's prompt cache serves (the prefix it repeats of the last request that wrote or
read the cache, at the provider's rules: minimum size, write premium, expiry when the transcript
has timestamps; see :mod:`~langmem_ext.replay.prices`), summaries made, the view's validity for
the provider, the cost at a model's prices with and without prompt caching, and, with
``facts=``, which of the followed facts the view holds (:mod:`~langmem_ext.replay.facts`).
:func:`compare` does that for several strategies side by side and returns a
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
from datetime import datetime
from typing import Any, Literal, TextIO

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage

from langmem_ext.core.keys import MemoryKey
from langmem_ext.core.messages import validate
from langmem_ext.core.result import MemoryResult
from langmem_ext.core.signatures import bind, same_parameters
from langmem_ext.core.steps import Flow, Step, arun, run
from langmem_ext.core.tokens import TokenCounter
from langmem_ext.counting.resolve import CounterLike, as_counter
from langmem_ext.replay.comparison import Comparison
from langmem_ext.replay.facts import FactTracker, detect_facts
from langmem_ext.replay.prices import ModelPrice, Prices, load_prices
from langmem_ext.replay.progress import CompareProgress
from langmem_ext.replay.results import CallRecord, Replay
from langmem_ext.replay.transcripts.reading import TIME_KEYS
from langmem_ext.strategies.engine import Strategy
from langmem_ext.summarize.summarizer import Summarizer

__all__ = [
    "DEFAULT_MODEL",
    "FactsLike",
    "areplay",
    "compare",
    "message_time",
    "model_calls",
    "replay",
    "resolve_facts",
]

#: the model whose prices the cost columns use when none is named
DEFAULT_MODEL = "openai:gpt-4o-mini"

StrategyLike = Strategy | None
#: facts to follow: given as text, ``"auto"`` (found in the transcript) or None (none)
FactsLike = Sequence[str] | Literal["auto"] | None


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


def message_time(message: BaseMessage) -> float | None:
    """The time ``message`` was sent, in seconds since the epoch, if it says: a ``timestamp``,
    ``created_at``, ``created`` or ``time`` in its ``additional_kwargs`` or
    ``response_metadata``, as epoch seconds (milliseconds when over 1e11) or ISO 8601 text."""
    for holder in (message.additional_kwargs, message.response_metadata):
        for key in TIME_KEYS:
            value = holder.get(key) if isinstance(holder, Mapping) else None
            if isinstance(value, bool) or value is None:
                continue
            if isinstance(value, (int, float)):
                return float(value) / 1000 if value > 1e11 else float(value)
            if isinstance(value, str):
                try:
                    return datetime.fromisoformat(value.strip().replace("Z", "+00:00")).timestamp()
                except ValueError:
                    continue
    return None


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
    facts: FactTracker | None = None
    cache_ttl: float | None = None
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
        self.state: Any = None
        self.newest_human: BaseMessage | None = None
        # the provider's prompt cache: the last request that wrote or read it, and when
        self.cache: list[BaseMessage] = []
        self.cache_tokens = 0
        self.cache_time: float | None = None
        self.clock: float | None = None  # the newest time the transcript gave so far
        self.timed = False

    def histories(self) -> Iterator[tuple[int, Sequence[BaseMessage]]]:
        for position in model_calls(self.messages):
            history = self.messages[:position]
            for m in self.messages[self.counted : position]:
                self.history_tokens += self.counter.count_message(m)
                if isinstance(m, HumanMessage):
                    self.newest_human = m
                self.clock = message_time(m) or self.clock
            self.clock = message_time(self.messages[position]) or self.clock
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

    def _repeated_tokens(self, view: Sequence[BaseMessage]) -> tuple[int, bool]:
        """The tokens of ``view``'s prefix held in the prompt cache (the last request that
        wrote or read it), and whether the cache had expired (``cache_ttl`` passed since)."""
        shared = _common_prefix(self.cache, view)
        if shared == 0:
            return 0, False
        if self.cache_ttl is not None and self.clock is not None and self.cache_time is not None:
            self.timed = True
            if self.clock - self.cache_time > self.cache_ttl:
                return 0, True
        if shared == len(self.cache):
            return self.cache_tokens, False
        return self.overhead + sum(self.counter.count_message(m) for m in view[:shared]), False

    def _cache(self, view: list[BaseMessage], view_tokens: int) -> tuple[int, int, bool]:
        """``(read, written, expired)`` of this call's request at the provider's rules; a
        request that reads or writes the cache becomes its entry."""
        repeated, expired = self._repeated_tokens(view)
        read, written = self.price.cache_use(view_tokens, min(repeated, view_tokens))
        if read or written:
            self.cache, self.cache_tokens, self.cache_time = view, view_tokens, self.clock
        return read, written, expired

    def _summarizer_cost(self, input_tokens: int, output_tokens: int) -> float:
        if self.summarizer_price is None:
            return 0.0
        return self.summarizer_price.cost(input_tokens=input_tokens, output_tokens=output_tokens)

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
        cached, written, expired = self._cache(view, view_tokens)
        output = self.counter.count_message(self.messages[position])
        s_in = meter.input_tokens - meter_before.input_tokens
        s_out = meter.output_tokens - meter_before.output_tokens
        summarizing = self._summarizer_cost(s_in, s_out)
        newest = self.newest_human
        findings = validate(view)
        call = len(self.out.calls) + 1
        self.out.calls.append(
            CallRecord(
                call=call,
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
                cache_write_tokens=written,
                cache_expired=expired,
                summarizer_cost=summarizing,
                facts_in_view=0 if self.facts is None else self.facts.observe(call, position, view),
            )
        )
        # the next view keeps the prefix when it starts with this view and its answer
        self.previous = [*view, self.messages[position]]


def _describe(strategy: Strategy | None) -> str:
    return "the whole history every call" if strategy is None else repr(strategy)


def resolve_facts(messages: Sequence[BaseMessage], facts: FactsLike) -> list[str] | None:
    """The facts a replay follows: ``"auto"`` finds them in ``messages`` before the last model
    call (:func:`~langmem_ext.replay.facts.detect_facts`), a list is taken as given (each once,
    case-insensitively), ``None`` follows none."""
    if facts is None:
        return None
    if isinstance(facts, str):
        if facts != "auto":
            raise ValueError(f"facts must be a list of texts, 'auto' or None, got {facts!r}")
        calls = model_calls(messages)
        # what the final call's input could hold: a fact said in the last answer is in none
        return detect_facts(messages[: calls[-1]] if calls else [])
    given: list[str] = []
    for fact in facts:
        if not isinstance(fact, str) or not fact.strip():
            raise ValueError(f"every fact must be non-empty text, got {fact!r}")
        if fact.strip().lower() not in {g.lower() for g in given}:
            given.append(fact.strip())
    return given


def _ttl(price: ModelPrice, cache_ttl: float | None) -> float | None:
    if cache_ttl is None:
        return price.cache_ttl
    if isinstance(cache_ttl, bool) or not isinstance(cache_ttl, (int, float)) or cache_ttl < 0:
        raise ValueError(f"cache_ttl must be a number of seconds >= 0, got {cache_ttl!r}")
    return float(cache_ttl)


@dataclass(frozen=True)
class _Options:
    """What :func:`replay` takes besides the transcript and the strategy."""

    model: str = DEFAULT_MODEL
    counter: CounterLike = None
    prices: Prices | None = None
    summarizer_model: str | None = None
    progress: bool | None = None
    facts: FactsLike = None
    cache_ttl: float | None = None


def _expiry_note(ttl: float | None, timed: bool) -> str:
    if ttl is None:
        return "prompt-cache expiry not modelled: no cache_ttl for the model"
    if not timed:
        return (
            f"prompt-cache expiry (ttl {ttl:g} s) not modelled: the transcript has no "
            "timestamps; every cache entry is taken as still warm at the next call"
        )
    return f"prompt-cache expiry modelled from the transcript's timestamps (ttl {ttl:g} s)"


def _replay_flow(
    name: str | None,
    messages: Sequence[BaseMessage],
    strategy: StrategyLike,
    options: _Options,
    bar: Any = None,
) -> Flow[Replay]:
    """The replay of :func:`replay` and :func:`areplay` as a flow of steps (not started)."""
    prices = load_prices() if options.prices is None else options.prices
    own = options.counter is None and strategy is not None
    resolved = strategy.counter if own and strategy is not None else as_counter(options.counter)
    messages = list(messages)
    facts = resolve_facts(messages, options.facts)
    price = prices.get(options.model)
    summarizer = options.summarizer_model
    replayer = _Replayer(
        name=name or _default_name(strategy),
        messages=messages,
        counter=resolved,
        price=price,
        summarizer_price=None if summarizer is None else prices.get(summarizer),
        strategy=strategy,
        facts=None if facts is None else FactTracker(facts, messages),
        cache_ttl=_ttl(price, options.cache_ttl),
    )
    timed = any(message_time(m) is not None for m in messages)
    replayer.out.cache_expiry = _expiry_note(replayer.cache_ttl, timed)
    if bar is None:
        bar = _progress(len(model_calls(messages)), replayer.name, options.progress)
    return _calls(replayer, bar)


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
    facts: FactsLike = None,
    cache_ttl: float | None = None,
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
        facts: texts to follow through the views (``Replay.facts``: when each was said, kept at
            the final call, share of later calls that had it), ``"auto"`` to find them in the
            transcript (:func:`~langmem_ext.replay.facts.detect_facts`), or ``None``.
        cache_ttl: seconds a prompt-cache entry lives after its last write or read (default:
            the model's provider's, 300 s). Applied when the messages carry timestamps
            (:func:`message_time`); ``Replay.cache_expiry`` says whether it was.

    A strategy that raises (a budget too small for a turn) ends the replay at that call: the
    calls before it are kept and ``Replay.error`` says what happened.
    """
    options = _Options(model, counter, prices, summarizer_model, progress, facts, cache_ttl)
    return run(_replay_flow(name, messages, strategy, options))


@same_parameters(replay)
async def areplay(*args: Any, **kwargs: Any) -> Replay:
    """Async :func:`replay` (``aapply`` at every call: the summarizer is awaited)."""
    messages, strategy, name, *options = bind(replay, args, kwargs, "areplay")
    return await arun(_replay_flow(name, messages, strategy, _Options(*options)))


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


def _calls(replayer: _Replayer, bar: Any) -> Flow[Replay]:
    """The replay as one flow of steps, for both drivers: yields the strategy's call on each
    history, records what it made of it (timed, the summarizer's time left out; no strategy:
    the history itself), and ends at the first call the strategy gave up on. ``bar`` (a tqdm
    bar, a :class:`CompareProgress` or None) is told of each call."""
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
        if bar is not None and not isinstance(bar, CompareProgress):
            bar.close()
    if replayer.facts is not None:
        replayer.out.facts = replayer.facts.records()
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
    facts: FactsLike = None,
    cache_ttl: float | None = None,
    progress_stream: TextIO | None = None,
) -> Comparison:
    """:func:`replay` each strategy (a mapping name -> strategy, or a list) over ``messages``.

    Give every strategy the same ``counter`` (or leave it ``None`` to use each strategy's own)
    so that the figures compare. ``None`` as a strategy is the whole history every call.
    ``facts`` (found once when ``"auto"``) and ``cache_ttl`` are as in :func:`replay`.

    ``progress``: one status line on ``progress_stream`` (default stderr) naming the strategy
    being replayed, its calls done and an estimate of the time left (:mod:`.progress`);
    ``None`` shows it on a terminal only, ``False`` never.
    """
    prices = load_prices() if prices is None else prices
    messages = list(messages)
    shared = None if counter is None else as_counter(counter)
    followed = resolve_facts(messages, facts)
    options = _Options(model, shared, prices, summarizer_model, False, followed, cache_ttl)
    named = _named(strategies)
    status = CompareProgress(
        [n for n, _ in named],
        len(model_calls(messages)),
        enabled=False if progress is False else progress,
        stream=progress_stream,
    )
    replays = []
    try:
        for index, (name, strategy) in enumerate(named):
            status.start(index)
            replays.append(run(_replay_flow(name, messages, strategy, options, status)))
    finally:
        status.close()
    return Comparison(replays, prices.get(model).model, source, len(messages))
