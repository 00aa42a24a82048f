"""The harness of the summarizing-strategy property tests: random runs, a fake summarizer model
that logs what it read, and the simulation of a conversation turn by turn.

Used by ``test_properties_summary.py`` (the DESIGN.md section 2 properties) and
``test_properties_summary_regressions.py`` (the library bugs those properties found); the checks
of each property over a run are in ``property_checks.py``.

A run grows a conversation turn by turn (1-4 messages a turn, tool calls answered in the same or
the next turn, so every history is valid), calls the strategy on every turn, and carries
``result.state`` to the next turn. Budgets are small (300-2,000 approximate tokens) so folds happen
often, and the strategy's ``clock=`` is a fake clock that advances by a random amount per turn, so
the failure backoff (``retry_at``) is exercised.

The summarizer is a deterministic fake (:class:`FakeModel`), a plain callable
``(prompt messages) -> str``. Every generated message carries a unique marker ``mk<N>:`` at the
start of its text (N is its index in the full history; the same N is kept in
``response_metadata`` so a message in a view can be traced back even when its text was clipped).
The fake parses the ``<transcript>`` and ``<previous_summary>`` blocks of each prompt and logs
which markers it read and which previous summary it was given; it answers
``S<call> prev=<digest of the previous summary>``. A hypothesis-drawn schedule decides per call
whether it answers normally, answers over the section budget (forcing the compress call), wraps
its answer in an AIMessage, answers with nothing, or raises (a plain error, or a transient one
that the Summarizer retries when it is built with ``max_attempts=2``).

Vocabulary, read off fold.py:

* ``bs`` (body start) is 1 when the history starts with a SystemMessage, else 0;
* ``B = bs + state.folded`` is the first unfolded message; ``history[bs:B]`` is folded;
* a fold is *committed* on a turn when ``report.folded > 0``; a fold attempt that fails leaves
  ``state.folded`` as it was and raises ``state.failures`` by one.

A test module using the harness imports :func:`property_run_environment` (an autouse fixture):
it keeps the expected failure warnings out of reports and makes the Summarizer's retries not
sleep.
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
import itertools
import json
import logging
import re
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import pytest
from hypothesis import note
from hypothesis import strategies as st
from langchain_core.messages import (
    AIMessage,
    BaseMessage,
    HumanMessage,
    SystemMessage,
    ToolCall,
    ToolMessage,
)
from strategies_hyp import MAX_TEXT, SNIPPETS, TOOLS, Ids, human, ints, plain_ai, system

from langmem_ext import (
    ApproximateCounter,
    Compacting,
    MemoryBudgetExceeded,
    MemoryResult,
    MemoryState,
    Summarizer,
    SummaryBuffer,
    TieredSummary,
)
from langmem_ext.strategies.options import split_policy
from langmem_ext.summarize.prompts import TEMPLATES

MAX_TURNS = 40


@pytest.fixture(autouse=True, scope="module")
def property_run_environment() -> Iterator[None]:
    """Autouse in the modules that import it. Injected summarizer failures are expected: keep
    their warnings out of reports. And the strategies build their Summarizer with the default
    backoff (1 s, doubling) while the fake model raises transient errors on schedule: the retries
    happen, without the wall-clock waits (about 30 s per test at 500 examples). What a retry
    waits is tested in test_summarizer_provider_faults.py."""

    async def no_async_sleep(seconds: float) -> None:
        return None

    logger = logging.getLogger("langmem_ext")
    level = logger.level
    logger.setLevel(logging.ERROR)
    patch = pytest.MonkeyPatch()
    patch.setattr(Summarizer, "sleep", staticmethod(lambda seconds: None))
    patch.setattr(Summarizer, "asleep", staticmethod(no_async_sleep))
    yield
    patch.undo()
    logger.setLevel(level)


TAG = "lmx_test_marker"  # response_metadata key holding a message's marker number
SUMMARY_ID = "langmem-ext-summary"  # id of the summary HumanMessage (placement="human")
_MARK = re.compile(r"mk(\d+):")
_PREVIOUS = re.compile(r"<previous_summary>\n(.*?)\n</previous_summary>", re.S)
_TRANSCRIPT = re.compile(r"<transcript>\n(.*?)\n</transcript>", re.S)
_COMPRESS = re.compile(r"\A<summary>\n(.*)\n</summary>\n\nThis summary is over its budget", re.S)
NOT_SHOWN_NOTE = re.compile(
    r"\[langmem_ext: (\d+) earlier message\(s\) of this conversation are not shown and not yet "
    r"summarized; the summarizer is (healthy|retrying|degraded)"
)
SUMMARY_CLIPPED = "[... summary clipped by langmem_ext to its token budget]"
SUMMARY_SHORTENED = "[... summary shortened by langmem_ext to fit the context budget]"


# --------------------------------------------------------------------------------------------
# conversations: valid histories grown turn by turn, every message with a unique marker


def _clean(value: Any) -> Any:
    """Generated text with any ``mk`` broken up, so only our markers match ``mk<N>:``."""
    if isinstance(value, str):
        return value.replace("mk", "m.k")
    if isinstance(value, dict):
        return {k: _clean(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_clean(v) for v in value]
    return value


def tagged(message: BaseMessage, n: int) -> BaseMessage:
    label = f"mk{n}:"
    content = message.content
    new: Any
    if isinstance(content, str):
        new = f"{label} {_clean(content)}"
    else:
        new = [{"type": "text", "text": label}, *_clean(list(content))]
    update: dict[str, Any] = {"content": new, "response_metadata": {TAG: n}}
    if isinstance(message, AIMessage) and message.tool_calls:
        update["tool_calls"] = [{**c, "args": _clean(c["args"])} for c in message.tool_calls]
    return message.model_copy(update=update)


def marker(message: BaseMessage) -> int:
    """The history index of a view message; -1 for a tool-round digest, which stands for a
    whole round (``property_checks.digest_indices`` reads it)."""
    if TAG not in message.response_metadata and str(message.id).startswith("langmem-ext-digest:"):
        return -1
    return int(message.response_metadata[TAG])


_sizes = st.integers(1, 4)
_kinds = st.sampled_from(("human", "human", "ai", "tools", "tools"))
_bools = st.booleans()
_REPEATS = (0, 0, 0, 0, 1, 2, 3, 5, 8, 13, 20, 40)
_ID_STYLES = ("none", "plain", "uuidish")
#: one draw decides a message's shape: snippet, repeats, image block, id style, tool status.
#: Few draws per message keep a 40-turn run cheap to generate; 0 is the simplest shape.
_SHAPES = len(SNIPPETS) * len(_REPEATS) * 6 * len(_ID_STYLES)
_shapes = st.integers(0, _SHAPES - 1)
_call_shapes = st.integers(0, len(TOOLS) * len(SNIPPETS) - 1)


@dataclass(frozen=True)
class _Shape:
    text: str
    image: bool
    error: bool
    id_style: str

    @classmethod
    def of(cls, v: int) -> _Shape:
        snippet = SNIPPETS[v % len(SNIPPETS)]
        v //= len(SNIPPETS)
        repeat = _REPEATS[v % len(_REPEATS)]
        v //= len(_REPEATS)
        text = " ".join([snippet] * repeat)[:MAX_TEXT] if repeat else snippet
        return cls(text, v % 6 == 5, v % 6 == 4, _ID_STYLES[(v // 6) % len(_ID_STYLES)])

    def content(self, ids: Ids) -> Any:
        if not self.image:
            return self.text
        url = f"https://example.com/img-{ids.next()}.png"
        return [
            {"type": "text", "text": self.text},
            {"type": "image_url", "image_url": {"url": url, "detail": "low"}},
        ]

    def id(self, ids: Ids, prefix: str) -> str | None:
        if self.id_style == "none":
            return None
        n = ids.next()
        return f"{prefix}-{n}" if self.id_style == "plain" else f"run-{n:08x}-ü"


def _human(draw: Any, ids: Ids) -> HumanMessage:
    shape = _Shape.of(draw(_shapes))
    return HumanMessage(shape.content(ids), id=shape.id(ids, "h"))


def _ai(draw: Any, ids: Ids, calls: int = 0) -> AIMessage:
    shape = _Shape.of(draw(_shapes))
    tool_calls = []
    for _ in range(calls):
        v = draw(_call_shapes)
        args = {"q": SNIPPETS[v // len(TOOLS)]}
        tool_calls.append({"name": TOOLS[v % len(TOOLS)], "args": args, "id": f"c{ids.next()}"})
    content = "" if calls and shape.error else shape.content(ids)
    return AIMessage(content, tool_calls=tool_calls, id=shape.id(ids, "ai"))


def _result(draw: Any, ids: Ids, call: ToolCall) -> ToolMessage:
    shape = _Shape.of(draw(_shapes))
    return ToolMessage(
        json.dumps({"result": shape.text}, ensure_ascii=False),
        tool_call_id=call["id"],
        name=call["name"],
        id=shape.id(ids, "t"),
        status="error" if shape.error else "success",
    )


@functools.cache
def _orders(k: int) -> tuple[st.SearchStrategy[int], tuple[tuple[int, ...], ...]]:
    orders = tuple(itertools.permutations(range(k)))
    return st.integers(0, len(orders) - 1), orders


@st.composite
def conversations(draw: Any, max_turns: int = MAX_TURNS) -> tuple[tuple[BaseMessage, ...], ...]:
    """Turns of a valid conversation: an optional SystemMessage and (sometimes) an assistant
    greeting, then a HumanMessage; then 1-4 messages per turn: human messages, plain AI replies
    and tool rounds (1-3 parallel calls, results in any order). A round may end a turn with some
    calls still in flight; their results open the next turn. The first turn uses the
    strategies_hyp message makers (arbitrary unicode, multimodal blocks, names); later turns
    draw one :class:`_Shape` per message over the same snippets, so that a 40-turn run
    generates quickly."""
    ids = Ids()
    count = 0

    def tag(group: list[BaseMessage]) -> tuple[BaseMessage, ...]:
        nonlocal count
        out = tuple(tagged(m, count + k) for k, m in enumerate(group))
        count += len(out)
        return out

    turns: list[tuple[BaseMessage, ...]] = []
    pending: list[ToolCall] = []
    n_turns = draw(ints(1, max_turns))
    for number in range(n_turns):
        group: list[BaseMessage] = []
        if number == 0:
            if draw(_bools):
                group.append(system(draw, ids))
            if draw(ints(0, 5)) == 0:
                group.append(plain_ai(draw, ids))  # an assistant greeting before the question
            group.append(human(draw, ids))
        if pending:
            group.extend(_result(draw, ids, call) for call in pending)
            pending = []
        size = len(group) + draw(_sizes) - (1 if group else 0)
        while len(group) < size:
            kind = draw(_kinds)
            if kind == "human":
                group.append(_human(draw, ids))
            elif kind == "ai":
                group.append(_ai(draw, ids))
            else:
                ai = _ai(draw, ids, calls=draw(ints(1, 3)))
                pick, orders = _orders(len(ai.tool_calls))
                calls = [ai.tool_calls[i] for i in orders[draw(pick)]]
                answered = len(calls) if draw(_bools) else draw(ints(0, len(calls)))
                group.append(ai)
                group.extend(_result(draw, ids, call) for call in calls[:answered])
                pending = calls[answered:]
                if pending:
                    break  # a call in flight ends the turn; its results open the next one
        turns.append(tag(group))
    return tuple(turns)


# --------------------------------------------------------------------------------------------
# the fake summarizer model


def digest(text: str) -> str:
    return hashlib.blake2b(text.encode(), digest_size=3).hexdigest()


#: what the fake does on a call: answer, answer over budget, answer wrapped in an AIMessage with
#: <summary> tags, answer with nothing (SummarizerError), raise, raise a transient error
OK_ACTIONS = ("ok", "long", "message")


@dataclass
class Call:
    index: int
    action: str
    kind: str  # "fold" or "compress"
    section: str | None  # None for a compress call (it follows its section's fold calls)
    previous: str | None  # the <previous_summary> block (fold calls)
    markers: tuple[int, ...]  # markers in the <transcript> block, in order
    given: str | None  # the <summary> block (compress calls)
    answer: str | None  # the text the Summarizer gets (after unwrapping), None if none

    @property
    def ok(self) -> bool:
        return self.action in OK_ACTIONS


class FakeModel:
    """A deterministic ``(prompt messages) -> str`` summarizer model that logs what it read.

    ``actions[i]`` decides call ``i`` (calls past the schedule answer normally); ``start`` lets a
    replay begin at the same call number, so it gets the same answers."""

    def __init__(self, actions: Sequence[str], start: int = 0, transient: bool = True) -> None:
        self.actions = tuple(actions)
        self.index = start
        self.transient = transient
        self.log: list[Call] = []

    def __call__(self, prompt: Sequence[BaseMessage]) -> Any:
        i = self.index
        self.index += 1
        action = self.actions[i] if i < len(self.actions) else "ok"
        body = str(prompt[-1].content)
        squeezed = _COMPRESS.match(body)
        markers: tuple[int, ...]
        if squeezed is not None:
            kind, section, previous, markers = "compress", None, None, ()
            given: str | None = squeezed.group(1)
        else:
            kind, given = "fold", None
            section = next(name for name, text in TEMPLATES.items() if text in body)
            found = _PREVIOUS.search(body)
            lines = _TRANSCRIPT.search(body)
            assert found is not None and lines is not None, body
            previous = found.group(1)
            markers = tuple(int(n) for n in _MARK.findall(lines.group(1)))
        text = f"S{i} prev={digest(previous or given or '')}"
        if action == "long":  # over any section budget: the compress call follows
            text = " ".join([text, *["filler"] * 700])  # ~1,200 tokens
        answer = {"ok": text, "long": text, "message": text}.get(action)
        self.log.append(Call(i, action, kind, section, previous, markers, given, answer))
        if action == "raise":
            raise RuntimeError(f"injected failure on call {i}")
        if action == "transient":
            if self.transient:
                raise TimeoutError(f"injected timeout on call {i}")
            raise ValueError(f"injected failure on call {i}")
        if action == "empty":
            return "   "
        if action == "message":
            return AIMessage(f"<summary>\n{text}\n</summary>")
        return text


@dataclass
class Clock:
    now: float

    def __call__(self) -> float:
        return self.now


# --------------------------------------------------------------------------------------------
# configurations


@dataclass(frozen=True)
class Case:
    """One random run: a strategy configuration, the conversation, the clock and the schedule."""

    kind: str  # "buffer", "compacting", "tiered"
    kwargs: tuple[tuple[str, Any], ...]
    #: Summarizer kwargs when the strategy gets a Summarizer; None: it gets the bare callable
    wrap: tuple[tuple[str, Any], ...] | None
    turns: tuple[tuple[BaseMessage, ...], ...]
    deltas: tuple[float, ...]
    actions: tuple[str, ...]
    start: float = 1_000.0

    def get(self, key: str, default: Any = None) -> Any:
        return dict(self.kwargs).get(key, default)

    @property
    def templates(self) -> tuple[str, ...]:
        if self.wrap is None:
            return ("conversation",)
        return tuple(dict(self.wrap)["templates"])

    def build(
        self, model: FakeModel, clock: Callable[[], float]
    ) -> SummaryBuffer | Compacting | TieredSummary:
        counter = ApproximateCounter()
        summarizer: Any = model
        kwargs = dict(self.kwargs)
        if self.wrap is not None:
            wrap = dict(self.wrap)
            fallback = model if wrap.pop("fallback") else None
            summarizer = Summarizer(
                model,
                counter=counter,
                fallback=fallback,
                retry_initial_wait=0.0,
                retry_max_wait=0.0,  # retries of transient errors do not sleep
                validate=None,
                **wrap,
            )
            if self.kind != "compacting":  # they take the Summarizer's budget
                kwargs.pop("max_summary_tokens", None)
        cls = {"buffer": SummaryBuffer, "compacting": Compacting, "tiered": TieredSummary}
        policy, kwargs = split_policy({**kwargs, "clock": clock})
        strategy: SummaryBuffer | Compacting | TieredSummary = cls[self.kind](
            summarizer=summarizer, counter=counter, policy=policy, **kwargs
        )
        # the fake's answers are markers and filler, not summaries: these properties check the
        # fold mechanics, and summary validation has its own tests (test_summary_checks.py)
        built = strategy.summarizer
        while built is not None:
            built.validate = ()
            built = built.fallback
        return strategy


def _prompt_base(template: str) -> int:
    """What one summarizer call costs without transcript and previous summary (approximately)."""
    counter = ApproximateCounter()
    plan = Summarizer(lambda p: "x", templates=(template,), counter=counter).steps(
        {}, [HumanMessage("x")]
    )
    return counter.count_messages(list(next(plan).prompt))


_PROMPT_BASE = max(_prompt_base(t) for t in ("conversation", "facts"))
_DELTAS = st.sampled_from((0.0, 0.5, 1.0, 2.0, 3.0, 7.5, 30.0, 120.0, 400.0))
_ACTION_MIXES = {
    "none": ("ok",),
    "some": ("ok",) * 8 + ("raise", "empty", "long", "message", "transient"),
    "many": ("ok", "ok", "raise", "raise", "empty", "long", "message", "transient", "transient"),
}


@functools.cache
def _schedules(mix: str) -> st.SearchStrategy[list[str]]:
    return st.lists(st.sampled_from(_ACTION_MIXES[mix]), max_size=30)


def _percent(draw: Any, lo: float, hi: float) -> float:
    """A ratio in [lo, hi] in steps of 0.01 (integers shrink better than floats)."""
    return int(draw(ints(round(lo * 100), round(hi * 100)))) / 100


@st.composite
def cases(
    draw: Any,
    kinds: Sequence[str] = ("buffer", "compacting", "tiered"),
    failures: Sequence[str] = ("none", "some", "many"),
    overflows: Sequence[str] = ("truncate_summary", "truncate_oldest", "error"),
    max_turns: int = MAX_TURNS,
) -> Case:
    kind = draw(st.sampled_from(tuple(kinds)))
    wrapped = draw(_bools)
    templates = ("conversation", "facts") if wrapped and draw(_bools) else ("conversation",)
    floor = 16 * len(templates)  # every section needs >= 16 tokens
    top = draw(st.one_of(ints(300, 700), ints(700, 2000)))
    kwargs: dict[str, Any] = {"max_tokens": top}
    if kind == "buffer":
        budget = draw(ints(floor, top // 3))
        kwargs["max_summary_tokens"] = budget
        if draw(_bools):
            kwargs["target_tokens"] = draw(ints(budget + 1, top))
        kwargs["min_messages"] = draw(ints(0, 6))
        kwargs["safety_margin"] = draw(st.sampled_from((0.0, 0.0, 0.05, 0.2)))
        kwargs["start_on"] = draw(st.sampled_from(("human", "human", "any")))
        kwargs["keep_system"] = draw(ints(0, 4)) > 0
    elif kind == "compacting":
        ratio = _percent(draw, max(floor / top, 0.03) + 0.01, 0.3)
        kwargs["summary_ratio"] = ratio
        kwargs["target_ratio"] = _percent(draw, ratio + 0.05, 1.0)
        kwargs["safety_margin"] = draw(st.sampled_from((0.0, 0.15, 0.15, 0.3)))
        kwargs["min_messages"] = draw(ints(1, 6))
        budget = int(top * ratio)
    else:
        tier1 = _percent(draw, 0.3, 0.7)
        kwargs["tier1_ratio"] = tier1
        kwargs["tier2_ratio"] = _percent(draw, tier1 + 0.05, 1.0)
        kwargs["target_ratio"] = target = _percent(draw, 0.2, tier1)
        budget = draw(ints(floor, int(top * target) - 1))
        kwargs["max_summary_tokens"] = budget
        kwargs["truncate_chars"] = draw(ints(8, 200))
        kwargs["min_messages"] = draw(ints(1, 6))
        kwargs["safety_margin"] = draw(st.sampled_from((0.0, 0.0, 0.1)))
        kwargs["keep_rounds"] = draw(st.sampled_from((None, 1, 2, 3, 3)))
        kwargs["observation_tokens"] = draw(st.sampled_from((4, 12, 48)))
    kwargs["reserve_tokens"] = draw(st.sampled_from((0, 0, 10, top // 10)))
    kwargs["placement"] = draw(st.sampled_from(("system", "human")))
    kwargs["overflow"] = draw(st.sampled_from(tuple(overflows)))
    kwargs["degrade_after"] = draw(ints(1, 4))
    kwargs["retry_initial"] = draw(st.sampled_from((0.5, 1.0, 2.0, 5.0)))
    kwargs["retry_max"] = draw(st.sampled_from((1.0, 10.0, 60.0, 300.0)))
    wrap: tuple[tuple[str, Any], ...] | None = None
    if wrapped:
        share = budget // len(templates)
        # room for the transcript beside a full previous summary, so that a long line is
        # split into pieces that still hold the marker at its start
        least = max(4 * share, _PROMPT_BASE + 2 * share + 40)
        inputs = draw(st.one_of(st.just(16_000), ints(least, least + 400)))
        wrap = (
            ("templates", templates),
            ("max_summary_tokens", budget),
            ("max_input_tokens", inputs),
            ("max_attempts", draw(ints(1, 2))),
            ("fallback", draw(ints(0, 3)) == 0),
        )
    turns = draw(conversations(max_turns))
    deltas = tuple(draw(_DELTAS) for _ in turns)  # the clock advances by this before a turn
    actions = tuple(draw(_schedules(draw(st.sampled_from(tuple(failures))))))
    case = Case(kind, tuple(sorted(kwargs.items())), wrap, turns, deltas, actions)
    note(f"{kind} {dict(case.kwargs)} wrap={wrap} actions={actions}")
    return case


# --------------------------------------------------------------------------------------------
# running a conversation


@dataclass
class Turn:
    number: int
    history: list[BaseMessage]
    before: MemoryState
    now: float
    call_start: int  # the fake's call number when the turn began
    result: MemoryResult | None
    error: MemoryBudgetExceeded | None
    calls: list[Call] = field(default_factory=list)

    @property
    def bs(self) -> int:
        return 1 if self.history and isinstance(self.history[0], SystemMessage) else 0

    @property
    def after(self) -> MemoryState | None:
        """The state the caller carries on: ``result.state``, or the state a
        MemoryBudgetExceeded carries (``error.state``, where the library offers it)."""
        if self.result is not None:
            return self.result.state
        state = getattr(self.error, "state", None)
        return state if isinstance(state, MemoryState) else None

    @property
    def folded_now(self) -> int:
        """Messages folded on this turn (committed to the state the caller carries on)."""
        return self.after.folded - self.before.folded if self.after is not None else 0


@dataclass
class Run:
    case: Case
    strategy: SummaryBuffer | Compacting | TieredSummary
    model: FakeModel
    turns: list[Turn]


def _carry(state: MemoryState, how: str) -> Any:
    if how == "json":
        return MemoryState.from_json(state.to_json())
    if how == "dict":
        return state.to_dict()
    return state


def simulate(case: Case, driver: str = "apply", carry: str = "live") -> Run:
    """Run the whole conversation, one strategy call per turn, carrying the state (as the live
    object, or through ``to_json``/``to_dict`` copies). A turn that raises MemoryBudgetExceeded
    keeps the previous state, as a caller catching it would."""
    model = FakeModel(case.actions, transient=case.wrap is not None)
    clock = Clock(case.start)
    strategy = case.build(model, clock)
    turns: list[Turn] = []

    def record(history: list[BaseMessage], state: Any, mark: int, out: Any) -> Any:
        before = MemoryState.coerce(state)
        result = out if isinstance(out, MemoryResult) else None
        error = out if isinstance(out, MemoryBudgetExceeded) else None
        turn = Turn(len(turns), history, before, clock.now, mark, result, error, model.log[mark:])
        turns.append(turn)
        return _carry(turn.after, carry) if turn.after is not None else state

    def steps() -> Any:
        history: list[BaseMessage] = []
        for group, delta in zip(case.turns, case.deltas, strict=True):
            history = [*history, *group]
            clock.now += delta
            yield history

    if driver == "apply":
        state: Any = None
        for history in steps():
            mark = len(model.log)
            try:
                out: Any = strategy.apply(history, state)
            except MemoryBudgetExceeded as exc:
                out = exc
            state = record(history, state, mark, out)
    else:

        async def main() -> None:
            state: Any = None
            for history in steps():
                mark = len(model.log)
                try:
                    out: Any = await strategy.aapply(history, state)
                except MemoryBudgetExceeded as exc:
                    out = exc
                state = record(history, state, mark, out)

        asyncio.run(main())
    return Run(case, strategy, model, turns)
