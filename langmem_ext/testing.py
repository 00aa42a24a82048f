"""Seeded synthetic conversations for demos, benchmarks and your own tests.

``synthetic_history(n)`` is a finished conversation of ``n`` messages; ``agent_loop(n)`` replays
one as an agent would see it, yielding the history at every model call. Both are deterministic for
a seed. The shape follows a tool-using assistant: a human turn, then an assistant reply that in
about 30% of turns calls 1-3 tools (parallel calls answered by ToolMessages) before answering.
Message bodies are 20-400 words of plain English with some numbers, names and the odd emoji:
``random_words(rng, low, high)`` is their generator, one sentence per call.

Test doubles and a conformance kit for strategies (the package's own or your ``Strategy``
subclasses):

* :class:`FakeSummaryModel`: a deterministic offline chat model for ``summarizer=`` (an
  :class:`~langmem_ext.summarize.extractive.ExtractiveSummarizer` that never answers empty and
  counts its calls).
* :class:`RecordingSummarizer`: a :class:`~langmem_ext.summarize.summarizer.Summarizer` that
  records the messages of every successful fold (``batches``), to assert that each message was
  summarized exactly once.
* :class:`MockStrategy`: a ``Strategy`` that records every call (:class:`MockCall`) and returns
  a configurable view (default: the messages unchanged).
* :func:`check_strategy`: runs the package's invariants (budget, valid view, nothing lost,
  sync == async, state round-trip) over seeded conversations and raises ``AssertionError``
  naming the invariant, the call and the numbers; :func:`smallest_budget` is the least
  ``max_tokens`` at which the newest turn of those conversations fits (the kit is expected to
  pass for every strategy from there on).
"""

from __future__ import annotations

import asyncio
import json
import random
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage, ToolMessage

from langmem_ext.core.digest import is_digest
from langmem_ext.core.messages import validate
from langmem_ext.core.result import MemoryReport, MemoryResult
from langmem_ext.core.state import MemoryState
from langmem_ext.counting.resolve import CounterLike, as_counter
from langmem_ext.strategies.engine import Plan, Strategy, finished
from langmem_ext.summarize.calls import ModelLike
from langmem_ext.summarize.extractive import ExtractiveSummarizer
from langmem_ext.summarize.summarizer import Summarizer

__all__ = [
    "FakeSummaryModel",
    "MockCall",
    "MockStrategy",
    "RecordingSummarizer",
    "agent_loop",
    "check_strategy",
    "random_words",
    "smallest_budget",
    "synthetic_history",
]

_WORDS = (
    "the of and to in is you that it he was for on are as with his they at be this have from or "
    "one had by word but not what all were we when your can said there use an each which she do "
    "how their if will up other about out many then them these so some her would make like him "
    "into time has look two more write go see number no way could people my than first water been "
    "call who oil its now find long down day did get come made may part over new sound take only "
    "little work know place year live me back give most very after thing our just name good "
    "sentence man think say great where help through much before line right too mean old any "
    "same tell boy follow came want show also around form three small set put end does another "
    "well large must big even such because turn here why ask went men read need land different "
    "home us move try kind hand picture again change off play spell air away animal house point "
    "page letter mother answer found study still learn should America world invoice shipment "
    "database latency deploy budget refund customer contract schedule Berlin Tokyo Lisbon quarter "
    "revenue ticket server migration café naïve résumé 東京 Zürich"
).split()
_EMOJI = ("🙂", "🚀", "✅", "📦", "🔥")
_TOOLS = ("search_orders", "get_weather", "lookup_customer", "run_sql", "fetch_invoice")


def random_words(rng: random.Random, low: int, high: int) -> str:
    """A sentence of ``low`` to ``high`` words (inclusive) drawn by ``rng``: plain English with
    some names and non-ASCII words, one word in 25 replaced by a number, an emoji at the end of
    15% of them; capitalized, ending in a full stop. Deterministic for the state of ``rng``.

    The message bodies of :func:`synthetic_history` and :func:`agent_loop` are made of it, and
    the benchmarks' synthetic texts too: its output for a seed is part of their recorded
    results, so it does not change.

    >>> import random
    >>> random_words(random.Random(7), 3, 5)
    'There take read on 🔥.'
    """
    if low < 0 or high < low:
        raise ValueError(f"random_words needs 0 <= low <= high, got low={low}, high={high}")
    words = [rng.choice(_WORDS) for _ in range(rng.randint(low, high))]
    for _ in range(len(words) // 25):
        words[rng.randrange(len(words))] = str(rng.randint(1, 99_999))
    if rng.random() < 0.15:
        words.append(rng.choice(_EMOJI))
    return " ".join(words).capitalize() + "."


def _turns(
    rng: random.Random, *, words: tuple[int, int], tool_rate: float, ids: bool
) -> Iterator[list[BaseMessage]]:
    """Endless groups of messages; each group ends where a model call happens next."""
    serial = 0

    def mid(prefix: str) -> str | None:
        nonlocal serial
        serial += 1
        return f"{prefix}-{serial}" if ids else None

    low, high = words
    while True:
        yield [HumanMessage(random_words(rng, low, high), id=mid("h"))]
        while rng.random() < tool_rate:
            calls = []
            for _ in range(rng.randint(1, 3)):
                serial += 1
                calls.append(
                    {
                        "name": rng.choice(_TOOLS),
                        "args": {"query": random_words(rng, 2, 8), "limit": rng.randint(1, 50)},
                        "id": f"call-{serial}",
                    }
                )
            note = random_words(rng, 3, 12) if rng.random() < 0.3 else ""
            ai = AIMessage(note, tool_calls=calls, id=mid("ai"))
            results: list[BaseMessage] = [
                ToolMessage(
                    json.dumps({"result": random_words(rng, low, high)}, ensure_ascii=False),
                    tool_call_id=c["id"],
                    name=c["name"],
                    id=mid("t"),
                )
                for c in calls
            ]
            yield [ai, *results]
            tool_rate_after = tool_rate * 0.6
            if rng.random() >= tool_rate_after:
                break
        yield [AIMessage(random_words(rng, low, high), id=mid("ai"))]


def synthetic_history(
    n: int,
    *,
    seed: int = 0,
    system: bool = True,
    words: tuple[int, int] = (20, 400),
    tool_rate: float = 0.3,
    ids: bool = True,
) -> list[BaseMessage]:
    """A valid conversation of exactly ``n`` messages (plus a system message when ``system``).

    The last group is completed rather than cut, so the history may end on any message type but
    never with an unanswered tool call.
    """
    rng = random.Random(seed)
    out: list[BaseMessage] = (
        [SystemMessage("You are a careful assistant for an order-tracking company.", id="sys")]
        if system
        else []
    )
    target = n + len(out)
    for group in _turns(rng, words=words, tool_rate=tool_rate, ids=ids):
        if len(out) + len(group) > target:
            if len(out) < target:
                out.append(
                    HumanMessage(random_words(rng, *words), id=f"h-tail-{seed}" if ids else None)
                )
            if len(out) < target:
                out.append(
                    AIMessage(random_words(rng, *words), id=f"ai-tail-{seed}" if ids else None)
                )
            while len(out) < target:
                out.append(HumanMessage(random_words(rng, *words)))
            return out
        out.extend(group)
        if len(out) == target:
            return out
    raise AssertionError("unreachable")  # pragma: no cover


def agent_loop(
    n: int,
    *,
    seed: int = 0,
    system: bool = True,
    words: tuple[int, int] = (20, 400),
    tool_rate: float = 0.3,
) -> Iterator[list[BaseMessage]]:
    """Grow a conversation to about ``n`` messages, yielding it at every model call.

    The yielded list is the same object, appended to between yields (as LangGraph state grows);
    copy it if you keep it. A model call happens after each human message and after each batch of
    tool results, so the history seen at a call ends on a HumanMessage or a ToolMessage.
    """
    rng = random.Random(seed)
    history: list[BaseMessage] = (
        [SystemMessage("You are a careful assistant for an order-tracking company.", id="sys")]
        if system
        else []
    )
    for group in _turns(rng, words=words, tool_rate=tool_rate, ids=True):
        history.extend(group)
        if len(history) >= n + (1 if system else 0):
            return
        if not isinstance(group[-1], AIMessage) or group[-1].tool_calls:
            yield history


# --------------------------------------------------------------------------------------------
# test doubles


class FakeSummaryModel(ExtractiveSummarizer):
    """A deterministic offline chat model to pass as a strategy's ``summarizer=``.

    It answers a Summarizer prompt with the previous summary and the transcript's salient
    sentences, within the budget the prompt states (see ``ExtractiveSummarizer``), and never with
    an empty text: when nothing is salient it answers ``fallback_text``. ``calls`` counts its
    answers (sync and async).
    """

    fallback_text: str = "- (conversation so far)"
    calls: int = 0

    def answer(self, messages: Sequence[BaseMessage], max_tokens: int | None = None) -> str:
        self.calls += 1
        text = super().answer(messages, max_tokens)
        return text if text.strip() else self.fallback_text


class RecordingSummarizer(Summarizer):
    """A :class:`~langmem_ext.summarize.summarizer.Summarizer` that records what it folded.

    Every successful ``fold``/``afold`` appends the messages it was given to ``batches`` (a
    failed fold records nothing: the strategy keeps those messages and folds them later).
    ``model`` defaults to a :class:`FakeSummaryModel`; the other arguments are the Summarizer's.
    A strategy may copy the summarizer (to give it its own counter): the copies share
    ``batches``.

    Example:
        >>> from langmem_ext.strategies import SummaryBuffer
        >>> recorder = RecordingSummarizer(max_summary_tokens=100)
        >>> strategy = SummaryBuffer(600, summarizer=recorder)
        >>> state = None
        >>> for history in agent_loop(30, words=(20, 60)):
        ...     state = strategy.apply(history, state).state
        >>> ids = recorder.folded_ids
        >>> len(ids) == len(set(ids)) == state.folded > 0
        True
    """

    def __init__(self, model: ModelLike | None = None, **kwargs: Any) -> None:
        super().__init__(FakeSummaryModel() if model is None else model, **kwargs)
        self.batches: list[list[BaseMessage]] = []

    @property
    def folded(self) -> list[BaseMessage]:
        """Every message folded, in order, over all successful calls."""
        return [m for batch in self.batches for m in batch]

    @property
    def folded_ids(self) -> list[str | None]:
        """The ids of :attr:`folded` (``None`` for a message without one)."""
        return [m.id for m in self.folded]

    def fold(self, previous: Mapping[str, str], messages: Sequence[BaseMessage]) -> dict[str, str]:
        sections = super().fold(previous, messages)
        self.batches.append(list(messages))
        return sections

    async def afold(
        self, previous: Mapping[str, str], messages: Sequence[BaseMessage]
    ) -> dict[str, str]:
        sections = await super().afold(previous, messages)
        self.batches.append(list(messages))
        return sections


@dataclass(frozen=True, slots=True)
class MockCall:
    """One call of a :class:`MockStrategy`: the messages and state it was given."""

    messages: list[BaseMessage]
    state: MemoryState
    extra_tokens: int


ViewSpec = Sequence[BaseMessage] | Callable[[Sequence[BaseMessage]], Sequence[BaseMessage]] | None


class MockStrategy(Strategy):
    """A :class:`~langmem_ext.strategies.engine.Strategy` that records every call in ``calls``
    and returns ``view``: the messages unchanged (``None``, the default), a fixed list, or
    ``view(messages)``. The state comes back with ``seen`` set to the number of messages; the
    report counts tokens with ``counter`` and reports ``budget`` (``None``: no limit).

    Example:
        >>> from langchain_core.messages import HumanMessage
        >>> mock = MockStrategy()
        >>> result = mock.apply([HumanMessage("hi", id="h1")])
        >>> [m.id for m in result.messages], len(mock.calls), result.state.seen
        (['h1'], 1, 1)
    """

    def __init__(
        self, view: ViewSpec = None, *, counter: CounterLike = None, budget: int | None = None
    ) -> None:
        self.counter = as_counter(counter)
        self.view_spec = view
        self.budget = budget
        self.calls: list[MockCall] = []

    def _plan(
        self, messages: Sequence[BaseMessage], state: MemoryState, now: float, extra: int
    ) -> Plan:
        return finished(self._compute, messages, state, extra)

    def _compute(
        self, messages: Sequence[BaseMessage], state: MemoryState, extra: int
    ) -> MemoryResult:
        self.calls.append(MockCall(list(messages), state, extra))
        spec = self.view_spec
        view = list(messages if spec is None else spec(messages) if callable(spec) else spec)
        shown = _Shown(view)
        report = MemoryReport(
            tokens_before=self.counter.count_messages(messages),
            tokens_after=self.counter.count_messages(view),
            messages_before=len(messages),
            messages_after=len(view),
            messages_dropped=sum(1 for m in messages if m not in shown),
            budget=self.budget,
        )
        state = MemoryState.from_dict({**state.to_dict(), "seen": len(messages)})
        return MemoryResult(view, state, report)


# --------------------------------------------------------------------------------------------
# the conformance kit


class _Shown:
    """Membership in a view: by id for messages with one, by equality otherwise."""

    def __init__(self, view: Sequence[BaseMessage]) -> None:
        self.ids = {m.id for m in view if m.id is not None}
        self.view = view

    def __contains__(self, message: object) -> bool:
        assert isinstance(message, BaseMessage)
        if message.id is not None:
            return message.id in self.ids
        return any(m == message for m in self.view)


def _long_agent_turn(n: int, *, seed: int, words: tuple[int, int]) -> Iterator[list[BaseMessage]]:
    """One human request answered by ``n`` tool rounds, yielding the history at every call."""
    rng = random.Random(seed)
    history: list[BaseMessage] = [
        SystemMessage("You are a careful assistant for an order-tracking company.", id="sys"),
        HumanMessage(random_words(rng, *words), id=f"long-h-{seed}"),
    ]
    yield history
    for r in range(n):
        calls = [
            {
                "name": rng.choice(_TOOLS),
                "args": {"query": random_words(rng, 2, 8)},
                "id": f"lc-{r}-{j}",
            }
            for j in range(rng.randint(1, 2))
        ]
        history.append(AIMessage("", tool_calls=calls, id=f"long-ai-{r}"))
        for c in calls:
            body = json.dumps({"result": random_words(rng, *words)}, ensure_ascii=False)
            history.append(ToolMessage(body, tool_call_id=c["id"], name=c["name"], id=c["id"]))
        yield history


def _default_histories(seeds: int, messages: int) -> list[tuple[str, list[list[BaseMessage]]]]:
    out: list[tuple[str, list[list[BaseMessage]]]] = []
    for seed in range(seeds):
        calls = agent_loop(messages, seed=seed, words=(20, 120), tool_rate=0.5)
        out.append((f"chat seed={seed}", [list(h) for h in calls]))
    turn = _long_agent_turn(max(4, messages // 3), seed=0, words=(20, 120))
    out.append(("long agent turn", [list(h) for h in turn]))
    return out


def _newest_human(history: Sequence[BaseMessage]) -> BaseMessage | None:
    return next((m for m in reversed(history) if isinstance(m, HumanMessage)), None)


def _represented(view: Sequence[BaseMessage]) -> int:
    """Messages the digest messages of ``view`` stand for (they count as shown)."""
    total = 0
    for m in view:
        if is_digest(m):
            meta = m.response_metadata.get("langmem_ext", {})
            size = meta.get("digest_of", 0) if isinstance(meta, dict) else 0
            total += size if isinstance(size, int) else 0
    return total


def _repaired_away(history: Sequence[BaseMessage]) -> int:
    """Messages of ``history`` no valid view may show: orphan and duplicate tool results, which
    the documented repair removes (they count in ``messages_dropped``, never as lost)."""
    away = ("orphan_tool_result", "duplicate_tool_result")
    return sum(1 for f in validate(history) if f.kind in away)


def _fail(invariant: str, where: str, detail: str) -> AssertionError:
    return AssertionError(f"{invariant}: {where}: {detail}")


def _check_call(
    strategy: Strategy,
    history: Sequence[BaseMessage],
    result: MemoryResult,
    where: str,
    max_tokens: int | None,
) -> None:
    view, report, state = result.messages, result.report, result.state
    cost = strategy.counter.count_messages(view)
    for limit, name in ((report.budget, "budget"), (max_tokens, "max_tokens")):
        if limit is not None and cost > limit:
            raise _fail("budget", where, f"view costs {cost:,} tokens, {name} {limit:,}")
    errors = [f for f in validate(view) if f.severity == "error"]
    if errors:
        found = "; ".join(str(f) for f in errors)
        raise _fail("validity", where, f"{len(errors)} error finding(s) in the view: {found}")
    shown = _Shown(view)
    newest = _newest_human(history)
    if newest is not None and newest not in shown:
        raise _fail(
            "validity",
            where,
            f"the newest human message (id {newest.id!r}, index {history.index(newest)} of "
            f"{len(history)}) is not in the view",
        )
    missing = (
        sum(1 for m in history if m not in shown) - _represented(view) - _repaired_away(history)
    )
    accounted = report.messages_dropped + report.not_shown
    if missing > accounted:
        raise _fail(
            "nothing lost",
            where,
            f"{missing:,} of {len(history):,} messages are not in the view, but the report "
            f"accounts for {accounted:,} (messages_dropped {report.messages_dropped:,} + "
            f"not_shown {report.not_shown:,})",
        )
    if strategy.summarizer is not None and missing > state.folded + report.not_shown:
        raise _fail(
            "nothing lost",
            where,
            f"{missing:,} of {len(history):,} messages are not in the view, but only "
            f"{state.folded:,} are folded and {report.not_shown:,} reported not shown",
        )
    if report.health == "healthy" and report.not_shown:
        raise _fail(
            "nothing lost",
            where,
            f"health is 'healthy' but {report.not_shown:,} messages are neither folded nor shown",
        )


def _diff(a: MemoryResult, b: MemoryResult) -> str:
    if a.messages != b.messages:
        for i, (x, y) in enumerate(zip(a.messages, b.messages, strict=False)):
            if x != y:
                return f"views differ at message {i} ({x.id!r} vs {y.id!r})"
        return f"views differ in length ({len(a.messages)} vs {len(b.messages)} messages)"
    if a.state != b.state:
        da, db = a.state.to_dict(), b.state.to_dict()
        fields = [f"{k} {da[k]!r} vs {db[k]!r}" for k in da if da[k] != db[k]]
        return "states differ: " + ", ".join(fields)
    return f"reports differ: {a.report} vs {b.report}"


_NO_CLOCK = object()
#: the time every strategy's clock reads at the first call of a check (then one minute a call)
_CHECK_EPOCH = 1_700_000_000.0


@dataclass
class _StrategyCheck:
    """The runs of :func:`check_strategy`: each gets a fresh strategy (from the factory, or the
    one instance) whose clock reads :attr:`now`, a fixed time moved on by :meth:`tick`; the
    instances' own clocks are given back by :meth:`restore`."""

    strategy: Strategy | Callable[[], Strategy]
    max_tokens: int | None
    now: float = _CHECK_EPOCH
    #: each instance and its own clock before the check
    clocks: list[tuple[Strategy, Any]] = field(default_factory=list)

    def fresh(self) -> Strategy:
        strategy = self.strategy
        made = strategy if isinstance(strategy, Strategy) else strategy()
        if not isinstance(made, Strategy):
            raise TypeError(f"check_strategy: the factory returned {type(made).__name__}")
        if all(s is not made for s, _ in self.clocks):
            self.clocks.append((made, vars(made).get("clock", _NO_CLOCK)))
            made.clock = lambda: self.now
        return made

    def tick(self, call: int) -> None:
        """The clock at model call ``call`` (from 0) of the whole check: a minute a call."""
        self.now = _CHECK_EPOCH + 60.0 * call

    def run_sync(
        self, label: str, calls: list[list[BaseMessage]], start: int
    ) -> list[MemoryResult]:
        """``apply`` at every call from a fresh state, each result checked, and its state's
        JSON round trip."""
        out: list[MemoryResult] = []
        state: MemoryState | None = None
        subject = self.fresh()
        for i, history in enumerate(calls):
            self.tick(start + i)
            result = subject.apply(history, state)
            where = f"{label} call {start + i + 1}"
            _check_call(subject, history, result, where, self.max_tokens)
            text = result.state.to_json()
            back = MemoryState.from_json(text)
            if back != result.state:
                raise _fail("state round-trip", where, f"from_json(to_json()) differs: {text}")
            out.append(result)
            state = result.state
        return out

    def run_async(self, calls: list[list[BaseMessage]], start: int) -> list[MemoryResult]:
        """``aapply`` at every call from a fresh state."""
        subject = self.fresh()

        async def run() -> list[MemoryResult]:
            out: list[MemoryResult] = []
            state: MemoryState | None = None
            for i, history in enumerate(calls):
                self.tick(start + i)
                out.append(await subject.aapply(history, state))
                state = out[-1].state
            return out

        return asyncio.run(run())

    def run_round_trip(
        self, label: str, calls: list[list[BaseMessage]], start: int, sync: list[MemoryResult]
    ) -> None:
        """``apply`` fed with the JSON round trip of each state gives what ``sync`` holds."""
        state: MemoryState | None = None
        subject = self.fresh()
        for i, history in enumerate(calls):
            self.tick(start + i)
            fed = None if state is None else MemoryState.from_json(state.to_json())
            result = subject.apply(history, fed)
            if result != sync[i]:
                raise _fail(
                    "state round-trip",
                    f"{label} call {start + i + 1}",
                    "fed the round-tripped state: " + _diff(sync[i], result),
                )
            state = result.state

    def restore(self) -> None:
        for made, own in self.clocks:
            if own is _NO_CLOCK:
                del made.clock  # the class's clock again
            else:
                made.clock = own


def smallest_budget(
    *,
    histories: Iterable[Iterable[Sequence[BaseMessage]]] | None = None,
    seeds: int = 3,
    messages: int = 40,
    counter: CounterLike = None,
) -> int:
    """The smallest ``max_tokens`` at which the newest turn fits at every call of the
    conversations :func:`check_strategy` runs (same arguments, same defaults): the least budget
    at which :class:`~langmem_ext.strategies.presets.TokenBudget` (``overflow="error"``) gives
    a view at every call, the system message, the newest human message and the newest unit
    included. Below it a strategy may only clip or refuse; from it on, :func:`check_strategy`
    is expected to pass for every strategy of the package.

    Example:
        >>> from langmem_ext.strategies import SummaryBuffer
        >>> low = smallest_budget(seeds=1, messages=20)
        >>> check_strategy(lambda: SummaryBuffer(low, summarizer=FakeSummaryModel()), seeds=1,
        ...                messages=20)
    """
    from langmem_ext.errors import ContextOverflowError
    from langmem_ext.strategies.presets import TokenBudget

    conversations = (
        [calls for _, calls in _default_histories(seeds, messages)]
        if histories is None
        else [[list(h) for h in calls] for calls in histories]
    )
    measure = as_counter(counter)
    high = 1 + max((measure.count_messages(h) for calls in conversations for h in calls), default=1)

    def fits(budget: int) -> bool:
        strategy = TokenBudget(budget, counter=measure)
        try:
            for calls in conversations:
                state: MemoryState | None = None
                for history in calls:
                    state = strategy.apply(history, state).state
        except ContextOverflowError:
            return False
        return True

    low = 1
    while low < high:  # fits() is monotonic in the budget: the required part is fixed
        mid = (low + high) // 2
        if fits(mid):
            high = mid
        else:
            low = mid + 1
    return low


# long: the docstring is the reference of every invariant checked; the body is a few lines
def check_strategy(
    strategy: Strategy | Callable[[], Strategy],
    *,
    histories: Iterable[Iterable[Sequence[BaseMessage]]] | None = None,
    max_tokens: int | None = None,
    seeds: int = 3,
    messages: int = 40,
) -> None:
    """Run the package's invariants against ``strategy``; raise ``AssertionError`` on the first
    violation, naming the invariant, the call and the numbers.

    Args:
        strategy: any :class:`~langmem_ext.strategies.engine.Strategy` (the package's or a
            subclass), or a factory returning a fresh one: each run of each conversation
            (``apply``, ``aapply``, round trip) then gets its own, which is what a strategy
            with memory outside its state needs (``Retrieval`` writes its store: check
            ``lambda: Retrieval(inner, store=InMemoryStore(), ...)``). Its ``clock`` is replaced
            by a fixed one while the check runs.
        histories: conversations, each the histories seen at its model calls (what
            :func:`agent_loop` yields). Default: ``seeds`` chats of about ``messages``
            messages from :func:`agent_loop` and one long agent turn (one request, many tool
            rounds).
        max_tokens: when given, every view must also cost at most this (for a strategy whose
            report has no ``budget``).

    Each conversation is run from a fresh state three times (``apply``, ``aapply``, and
    ``apply`` fed with the JSON round trip of each state), and at every call:

    * **budget**: ``strategy.counter.count_messages(view) <= report.budget`` (and
      ``<= max_tokens``);
    * **validity**: ``validate(view)`` has no error finding, and the history's newest
      HumanMessage is in the view (same id; equal message when it has none);
    * **nothing lost**: the history messages not in the view, less those the view's digests stand
      for and the orphan and duplicate tool results a repair removes, are at most
      ``report.messages_dropped + report.not_shown``; for a strategy with a summarizer also at
      most ``state.folded + report.not_shown``; and ``report.not_shown == 0`` while
      ``report.health == "healthy"``;
    * **sync == async**: ``aapply`` gives the same view, state and report as ``apply``;
    * **state round-trip**: ``MemoryState.from_json(state.to_json()) == state``, and the next
      call fed with the round-tripped state gives the same result.

    Callbacks of the strategy fire on every run.

    Example:
        >>> from langmem_ext.strategies import TokenBudget
        >>> check_strategy(TokenBudget(2_000))
        >>> greedy = MockStrategy(budget=300)  # keeps every message, whatever the budget
        >>> check_strategy(greedy, seeds=1)
        Traceback (most recent call last):
        ...
        AssertionError: budget: chat seed=0 call 3: view costs 522 tokens, budget 300
    """
    conversations = (
        _default_histories(seeds, messages)
        if histories is None
        else [(f"history {i}", [list(h) for h in calls]) for i, calls in enumerate(histories)]
    )
    check = _StrategyCheck(strategy, max_tokens)
    try:
        call = 0
        for label, calls in conversations:
            sync = check.run_sync(label, calls, call)
            for i, (a, b) in enumerate(zip(sync, check.run_async(calls, call), strict=True)):
                if a != b:
                    raise _fail("sync == async", f"{label} call {call + i + 1}", _diff(a, b))
            check.run_round_trip(label, calls, call, sync)
            call += len(calls)
    finally:
        check.restore()
