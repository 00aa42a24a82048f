"""Property-based tests of the DESIGN.md section 2 invariants for the summarizing strategies
(SummaryBuffer, Compacting, TieredSummary), over long random runs.

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

Properties (each test's docstring, and the check functions it calls, state the precise form):

1. every message is folded exactly once (per summary section);
2. nothing is lost: ``history[bs:B]`` (folded) + the view's body + ``report.not_shown`` cover
   ``history[bs:]`` exactly, and messages are hidden while healthy only for documented reasons;
3. the previous summary is the ``<previous_summary>`` of every fold call;
4. the view fits the budget, or overflow is documented (MemoryBudgetExceeded);
5. the view is a valid sequence with one leading system message and the newest human message;
6. failures lose nothing and fold nothing; backoff and health follow the documented rules;
7. determinism (replay of a turn, and apply vs aapply);
8. the state survives JSON/dict round trips, and continuing from the copy gives the same run;
9. stable prefix between folds (TieredSummary's clip point, notes and overflow truncation are
   the documented exceptions).

The last section holds regression tests for library bugs these properties found (since fixed);
each carries its minimal reproduction as an explicit ``@example``.

Runtime: about two minutes for the whole file with 500 examples per test on two cores.
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
from hypothesis import event, example, given, note
from hypothesis import strategies as st
from langchain_core.messages import (
    AIMessage,
    BaseMessage,
    HumanMessage,
    SystemMessage,
    ToolMessage,
)
from strategies_hyp import (
    _SNIPPETS,
    _TOOLS,
    MAX_TEXT,
    _Ids,
    _ints,
    human,
    plain_ai,
    system,
)

from langmem_ext import (
    ApproximateCounter,
    Compacting,
    MemoryBudgetExceeded,
    MemoryResult,
    MemoryState,
    Summarizer,
    SummaryBuffer,
    TieredSummary,
    Unit,
    split_units,
    validate,
)
from langmem_ext._identity import key_at
from langmem_ext.fold import render_summary
from langmem_ext.summarize import TEMPLATES

MAX_TURNS = 40


@pytest.fixture(autouse=True, scope="module")
def _quiet_fold_warnings() -> Iterator[None]:
    """Injected summarizer failures are expected here: keep their warnings out of reports."""
    logger = logging.getLogger("langmem_ext")
    level = logger.level
    logger.setLevel(logging.ERROR)
    yield
    logger.setLevel(level)


@pytest.fixture(autouse=True, scope="module")
def _retries_do_not_sleep() -> Iterator[None]:
    """The strategies here build their Summarizer with the default backoff (1 s, doubling) and
    the fake model raises transient errors on schedule: the retries happen, without the wall-clock
    waits (about 30 s per test at 500 examples). What a retry waits is tested in
    test_hardening_summarizer.py."""

    async def no_async_sleep(seconds: float) -> None:
        return None

    patch = pytest.MonkeyPatch()
    patch.setattr(Summarizer, "sleep", staticmethod(lambda seconds: None))
    patch.setattr(Summarizer, "asleep", staticmethod(no_async_sleep))
    yield
    patch.undo()


TAG = "lmx_test_marker"  # response_metadata key holding a message's marker number
SUMMARY_ID = "langmem-ext-summary"  # id of the summary HumanMessage (placement="human")
_MARK = re.compile(r"mk(\d+):")
_PREVIOUS = re.compile(r"<previous_summary>\n(.*?)\n</previous_summary>", re.S)
_TRANSCRIPT = re.compile(r"<transcript>\n(.*?)\n</transcript>", re.S)
_COMPRESS = re.compile(r"\A<summary>\n(.*)\n</summary>\n\nThis summary is over its budget", re.S)
_NOTE = re.compile(
    r"\[langmem_ext: (\d+) earlier message\(s\) of this conversation are not shown and not yet "
    r"summarized; the summarizer is (healthy|retrying|degraded)"
)
_SUMMARY_CLIPPED = "[... summary clipped by langmem_ext to its token budget]"
_SUMMARY_SHORTENED = "[... summary shortened by langmem_ext to fit the context budget]"


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


def _tagged(message: BaseMessage, n: int) -> BaseMessage:
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
    return int(message.response_metadata[TAG])


_sizes = st.integers(1, 4)
_kinds = st.sampled_from(("human", "human", "ai", "tools", "tools"))
_bools = st.booleans()
_REPEATS = (0, 0, 0, 0, 1, 2, 3, 5, 8, 13, 20, 40)
_ID_STYLES = ("none", "plain", "uuidish")
#: one draw decides a message's shape: snippet, repeats, image block, id style, tool status.
#: Few draws per message keep a 40-turn run cheap to generate; 0 is the simplest shape.
_SHAPES = len(_SNIPPETS) * len(_REPEATS) * 6 * len(_ID_STYLES)
_shapes = st.integers(0, _SHAPES - 1)
_call_shapes = st.integers(0, len(_TOOLS) * len(_SNIPPETS) - 1)


@dataclass(frozen=True)
class _Shape:
    text: str
    image: bool
    error: bool
    id_style: str

    @classmethod
    def of(cls, v: int) -> _Shape:
        snippet = _SNIPPETS[v % len(_SNIPPETS)]
        v //= len(_SNIPPETS)
        repeat = _REPEATS[v % len(_REPEATS)]
        v //= len(_REPEATS)
        text = " ".join([snippet] * repeat)[:MAX_TEXT] if repeat else snippet
        return cls(text, v % 6 == 5, v % 6 == 4, _ID_STYLES[(v // 6) % len(_ID_STYLES)])

    def content(self, ids: _Ids) -> Any:
        if not self.image:
            return self.text
        url = f"https://example.com/img-{ids.next()}.png"
        return [
            {"type": "text", "text": self.text},
            {"type": "image_url", "image_url": {"url": url, "detail": "low"}},
        ]

    def id(self, ids: _Ids, prefix: str) -> str | None:
        if self.id_style == "none":
            return None
        n = ids.next()
        return f"{prefix}-{n}" if self.id_style == "plain" else f"run-{n:08x}-ü"


def _human(draw: Any, ids: _Ids) -> HumanMessage:
    shape = _Shape.of(draw(_shapes))
    return HumanMessage(shape.content(ids), id=shape.id(ids, "h"))


def _ai(draw: Any, ids: _Ids, calls: int = 0) -> AIMessage:
    shape = _Shape.of(draw(_shapes))
    tool_calls = []
    for _ in range(calls):
        v = draw(_call_shapes)
        args = {"q": _SNIPPETS[v // len(_TOOLS)]}
        tool_calls.append({"name": _TOOLS[v % len(_TOOLS)], "args": args, "id": f"c{ids.next()}"})
    content = "" if calls and shape.error else shape.content(ids)
    return AIMessage(content, tool_calls=tool_calls, id=shape.id(ids, "ai"))


def _result(draw: Any, ids: _Ids, call: dict[str, Any]) -> ToolMessage:
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
    ids = _Ids()
    count = 0

    def tag(group: list[BaseMessage]) -> tuple[BaseMessage, ...]:
        nonlocal count
        out = tuple(_tagged(m, count + k) for k, m in enumerate(group))
        count += len(out)
        return out

    turns: list[tuple[BaseMessage, ...]] = []
    pending: list[dict[str, Any]] = []
    n_turns = draw(_ints(1, max_turns))
    for number in range(n_turns):
        group: list[BaseMessage] = []
        if number == 0:
            if draw(_bools):
                group.append(system(draw, ids))
            if draw(_ints(0, 5)) == 0:
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
                ai = _ai(draw, ids, calls=draw(_ints(1, 3)))
                pick, orders = _orders(len(ai.tool_calls))
                calls = [ai.tool_calls[i] for i in orders[draw(pick)]]
                answered = len(calls) if draw(_bools) else draw(_ints(0, len(calls)))
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
                **wrap,
            )
            if self.kind != "compacting":  # they take the Summarizer's budget
                kwargs.pop("max_summary_tokens", None)
        cls = {"buffer": SummaryBuffer, "compacting": Compacting, "tiered": TieredSummary}
        return cls[self.kind](summarizer=summarizer, counter=counter, clock=clock, **kwargs)


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
    return draw(_ints(round(lo * 100), round(hi * 100))) / 100


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
    top = draw(st.one_of(_ints(300, 700), _ints(700, 2000)))
    kwargs: dict[str, Any] = {"max_tokens": top}
    if kind == "buffer":
        budget = draw(_ints(floor, top // 3))
        kwargs["max_summary_tokens"] = budget
        if draw(_bools):
            kwargs["target_tokens"] = draw(_ints(budget + 1, top))
        kwargs["min_messages"] = draw(_ints(0, 6))
        kwargs["safety_margin"] = draw(st.sampled_from((0.0, 0.0, 0.05, 0.2)))
        kwargs["start_on"] = draw(st.sampled_from(("human", "human", "any")))
        kwargs["keep_system"] = draw(_ints(0, 4)) > 0
    elif kind == "compacting":
        ratio = _percent(draw, max(floor / top, 0.03) + 0.01, 0.3)
        kwargs["summary_ratio"] = ratio
        kwargs["target_ratio"] = _percent(draw, ratio + 0.05, 1.0)
        kwargs["safety_margin"] = draw(st.sampled_from((0.0, 0.15, 0.15, 0.3)))
        kwargs["min_messages"] = draw(_ints(1, 6))
        budget = int(top * ratio)
    else:
        tier1 = _percent(draw, 0.3, 0.7)
        kwargs["tier1_ratio"] = tier1
        kwargs["tier2_ratio"] = _percent(draw, tier1 + 0.05, 1.0)
        kwargs["target_ratio"] = target = _percent(draw, 0.2, tier1)
        budget = draw(_ints(floor, int(top * target) - 1))
        kwargs["max_summary_tokens"] = budget
        kwargs["truncate_chars"] = draw(_ints(8, 200))
        kwargs["min_messages"] = draw(_ints(1, 6))
        kwargs["safety_margin"] = draw(st.sampled_from((0.0, 0.0, 0.1)))
    kwargs["reserve_tokens"] = draw(st.sampled_from((0, 0, 10, top // 10)))
    kwargs["placement"] = draw(st.sampled_from(("system", "human")))
    kwargs["overflow"] = draw(st.sampled_from(tuple(overflows)))
    kwargs["degrade_after"] = draw(_ints(1, 4))
    kwargs["retry_initial"] = draw(st.sampled_from((0.5, 1.0, 2.0, 5.0)))
    kwargs["retry_max"] = draw(st.sampled_from((1.0, 10.0, 60.0, 300.0)))
    wrap: tuple[tuple[str, Any], ...] | None = None
    if wrapped:
        share = budget // len(templates)
        # room for the transcript beside a full previous summary, so that a long line is
        # split into pieces that still hold the marker at its start
        least = max(4 * share, _PROMPT_BASE + 2 * share + 40)
        inputs = draw(st.one_of(st.just(16_000), _ints(least, least + 400)))
        wrap = (
            ("templates", templates),
            ("max_summary_tokens", budget),
            ("max_input_tokens", inputs),
            ("max_attempts", draw(_ints(1, 2))),
            ("fallback", draw(_ints(0, 3)) == 0),
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


# --------------------------------------------------------------------------------------------
# reading a view


def text_of(message: BaseMessage) -> str:
    content = message.content
    if isinstance(content, str):
        return content
    return "\n".join(
        b if isinstance(b, str) else str(b.get("text", ""))
        for b in content
        if isinstance(b, str) or b.get("type") == "text"
    )


def leading_text(view: Sequence[BaseMessage]) -> str:
    """The text of what leads the view: the SystemMessage and the summary HumanMessage."""
    parts = [text_of(m) for m in view[:2] if isinstance(m, SystemMessage) or m.id == SUMMARY_ID]
    return "\n".join(parts)


def view_body(view: Sequence[BaseMessage]) -> list[BaseMessage]:
    return [m for m in view if not isinstance(m, SystemMessage) and m.id != SUMMARY_ID]


def tier_clipped(message: BaseMessage, limit: int) -> BaseMessage:
    """The TieredSummary form of an older message (fold.py ``_clip_chars``), as an oracle."""

    def clip(text: str) -> str:
        if len(text) <= limit:
            return text
        return text[:limit] + f"\n[... {len(text) - limit} characters clipped by langmem_ext]"

    content = message.content
    if isinstance(content, str):
        return message.model_copy(update={"content": clip(content)})
    blocks = [
        {**b, "text": clip(str(b.get("text", "")))}
        if isinstance(b, dict) and b.get("type") == "text"
        else b
        for b in content
    ]
    return message.model_copy(update={"content": blocks})


def is_marked_clipped(message: BaseMessage) -> bool:
    meta = message.response_metadata.get("langmem_ext")
    return isinstance(meta, dict) and "clipped_from_tokens" in meta


def shown_indices(run: Run, turn: Turn) -> list[int]:
    """History indices of the view's body, checking each body message is the original message,
    a TieredSummary clipped form of it (older than the clip point), or a marked clipped copy."""
    assert turn.result is not None
    state = turn.result.state
    out = []
    for v in view_body(turn.result.messages):
        assert TAG in v.response_metadata, f"a message not from the history: {v!r}"
        i = marker(v)
        original = turn.history[i]
        out.append(i)
        if v is original:
            continue
        if is_marked_clipped(v):
            assert run.case.get("overflow") != "error"
            event("a clipped copy of a required message")
            continue
        assert run.case.kind == "tiered", f"message {i} changed in the view"
        assert i < turn.bs + state.clipped, (i, turn.bs, state.clipped)
        expected = tier_clipped(original, run.case.get("truncate_chars"))
        assert v.model_dump() == expected.model_dump(), f"message {i} is not its clipped form"
        event("a TieredSummary clipped body")
    return out


def newest_human_index(history: Sequence[BaseMessage]) -> int:
    return max(i for i, m in enumerate(history) if isinstance(m, HumanMessage))


def required_start(run: Run, history: Sequence[BaseMessage], b: int) -> int:
    """Where the required run of ``history[b:]`` starts: the newest units holding
    ``min_messages`` messages and the newest HumanMessage, extended back to a unit that may
    lead a view (plan.py ``select_view``, contiguous case; fold.py ``_fold_boundary``)."""
    units = list(reversed(split_units(history[b:])))  # newest first
    start_on = run.case.get("start_on", "human")

    def leads(unit: Unit) -> bool:
        return unit.kind == "human" if start_on == "human" else unit.kind != "orphan"

    sizes = list(itertools.accumulate(len(u.messages) for u in units))
    t = 0
    while sizes[t] < run.case.get("min_messages") and t + 1 < len(units):
        t += 1
    h = next(p for p, u in enumerate(units) if u.has_human)
    a = next((p for p in range(h, len(units)) if leads(units[p])), h)
    u = max(t, a)
    while not leads(units[u]) and u + 1 < len(units):
        u += 1
    if not leads(units[u]):
        u = max(t, a)
        while u > a and not leads(units[u]):
            u -= 1
    return b + units[u].start


def not_shown_note(count: int, health: str) -> str:
    """The note fold.py puts in the summary block when messages are not shown (its text)."""
    return (
        f"[langmem_ext: {count} earlier message(s) of this conversation are not shown and not yet "
        f"summarized; the summarizer is {health}.]"
    )


def leading_messages(
    run: Run, history: Sequence[BaseMessage], sections: dict[str, str], note: str = ""
) -> list[BaseMessage]:
    """What leads the view with ``sections`` as the summary and ``note`` (fold.py ``leading``),
    as an oracle: the system message with the summary block appended, or the block as its own
    SystemMessage or (placement="human") HumanMessage."""
    keep = run.case.get("keep_system", True)
    system = history[0] if isinstance(history[0], SystemMessage) and keep else None
    out: list[BaseMessage] = [system] if system is not None else []
    if not any(sections.values()) and not note:
        return out
    block = render_summary(sections, note)
    if run.case.get("placement") == "human":
        return [*out, HumanMessage(block, id=SUMMARY_ID)]
    if system is None:
        return [SystemMessage(block, id=SUMMARY_ID)]
    if isinstance(system.content, str):
        text = f"{system.content}\n\n{block}" if system.content else block
        return [system.model_copy(update={"content": text})]
    blocks = [*system.content, {"type": "text", "text": block}]
    return [system.model_copy(update={"content": blocks})]


# --------------------------------------------------------------------------------------------
# the properties, as checks over a run


def check_folded_exactly_once(run: Run) -> None:
    """Per summary section: the markers of the fold calls of committed folds, over the whole
    run, are exactly the markers of ``history[bs:B]`` of the final state, in order, each once;
    and each committed fold read exactly its batch ``history[B_before:B_after]``."""
    committed: dict[str, list[int]] = {s: [] for s in run.case.templates}
    last = None
    for turn in run.turns:
        if turn.after is None:
            if any(c.ok and c.kind == "fold" for c in turn.calls):
                # the fold succeeded, then the view raised and its state was lost with the
                # turn: these messages will be summarized again (see the bug tests below)
                event("fold discarded by MemoryBudgetExceeded")
            continue
        last = turn
        if turn.result is not None:
            assert turn.result.report.folded == turn.folded_now
        if not turn.folded_now:
            continue
        event("fold committed")
        b0 = turn.bs + turn.before.folded
        b1 = b0 + turn.folded_now
        batch = [marker(m) for m in turn.history[b0:b1]]
        assert batch == list(range(b0, b1))
        for section in run.case.templates:
            read = [
                n
                for c in turn.calls
                if c.ok and c.kind == "fold" and c.section == section
                for n in c.markers
            ]
            assert read == batch, (section, read, batch)
            committed[section].extend(read)
    if last is None:
        return
    assert last.after is not None
    folded = list(range(last.bs, last.bs + last.after.folded))
    for section, read in committed.items():
        assert len(read) == len(set(read)), f"{section}: a message was folded twice"
        assert read == folded, (section, read, folded)
    if folded:
        assert last.after.folded_key == key_at(last.history, folded[-1])


def check_nothing_lost(run: Run, turn: Turn) -> None:
    """fold.py: the view is the summary plus ``select_view`` of ``history[B:]``, and
    ``not_shown = (n - B) - kept``. So, exactly:

    * the view's body is distinct messages of ``history[B:]``, in history order (the originals,
      or clipped forms as documented);
    * ``B - bs`` folded + ``len(body)`` shown + ``report.not_shown`` == ``n - bs``;
    * the messages not shown are the oldest unfolded ones, unless ``report.gap`` (the newest
      human turn did not fit contiguously);
    * when ``not_shown > 0`` the view carries the note with exactly that number and the health;
      otherwise no note;
    * ``messages_dropped`` counts every input message not in the view.
    """
    assert turn.result is not None
    view, state, report = turn.result.messages, turn.result.state, turn.result.report
    n, bs = len(turn.history), turn.bs
    b = bs + state.folded
    shown = shown_indices(run, turn)
    assert all(i >= b for i in shown), ("a folded message is in the view", shown, b)
    assert shown == sorted(set(shown)), ("duplicate or reordered", shown)
    assert state.folded + len(shown) + report.not_shown == n - bs, (
        state.folded,
        len(shown),
        report.not_shown,
        n - bs,
    )
    if report.not_shown and not report.gap:
        assert shown == list(range(n - len(shown), n)), "the view is not the newest messages"
    if report.gap:
        event("gap view")
    if report.not_shown and state.health == "healthy" and not report.gap:
        hidden = sorted(set(range(b, n)) - set(shown))
        first_human = next(i for i, m in enumerate(turn.history) if isinstance(m, HumanMessage))
        if hidden[-1] < first_human:
            event("healthy: an assistant greeting before the first question is not shown")
        else:
            # while healthy, a fold would have folded everything before the required run (the
            # newest human turn and min_messages, fold.py _fold_boundary); so messages are
            # hidden only if that run does not fit with the system message, the summary and
            # the note for what precedes it (an unfoldable greeting), and an overflow policy
            # applied
            event("healthy: the required run does not fit (overflow policy)")
            start = required_start(run, turn.history, b)
            note = not_shown_note(start - b, state.health) if start > b else ""
            leading = leading_messages(run, turn.history, state.sections, note)
            cost = run.strategy.counter.count_messages([*leading, *turn.history[start:]])
            assert cost > report.budget, (
                f"{len(hidden)} message(s) hidden while healthy although the required run "
                f"from {start} costs {cost} <= {report.budget} with the summary"
            )
            assert run.case.get("overflow") != "error"
    notes = _NOTE.findall(leading_text(view))
    if report.not_shown:
        event(f"not shown while {state.health}")
        assert notes == [(str(report.not_shown), state.health)], (notes, report.not_shown)
    else:
        assert notes == []
    kept_system = bs == 1 and run.case.get("keep_system", True)
    assert report.messages_dropped == n - len(shown) - (1 if kept_system else 0)
    assert (report.messages_before, report.messages_after) == (n, len(view))
    assert not report.history_rewritten


def check_budget(run: Run, turn: Turn) -> None:
    """The view costs at most ``report.budget`` (max_tokens after margin and reserve) by the
    strategy's counter, and ``tokens_after`` says what it costs. Otherwise the documented
    overflow outcome: MemoryBudgetExceeded, with overflow="error", or (any policy) when even
    without the summary and with the newest human message clipped the view cannot fit."""
    counter = run.strategy.counter
    if turn.error is not None:
        error = turn.error
        assert error.needed > error.available, (error.needed, error.available)
        if run.case.get("overflow") == "error":
            event("MemoryBudgetExceeded (overflow='error')")
        else:
            event("MemoryBudgetExceeded (clipping gave up)")
            assert str(error).startswith("even without the summary"), str(error)
        return
    assert turn.result is not None
    view, report = turn.result.messages, turn.result.report
    cost = counter.count_messages(view)
    assert report.tokens_after == cost
    assert cost <= report.budget, f"view costs {cost}, budget {report.budget}"
    assert turn.result.state.view_tokens == cost
    if report.clipped:
        assert run.case.get("overflow") != "error"
        event("overflow: the newest human message clipped")


def check_valid_view(run: Run, turn: Turn) -> None:
    """No error finding from ``validate``; exactly one SystemMessage, first, when the history
    has a kept system message or (placement="system") a summary or note is shown, else none;
    with placement="human" the summary HumanMessage comes right after it; the first body
    message is a HumanMessage (start_on="human"); the newest HumanMessage is in the view."""
    assert turn.result is not None
    view, report = turn.result.messages, turn.result.report
    case = run.case
    errors = [str(f) for f in validate(view) if f.severity == "error"]
    if case.get("start_on", "human") == "any":
        errors = [e for e in errors if not e.startswith("first_not_human")]
    assert not errors, errors
    has_block = report.summary_tokens > 0 or report.not_shown > 0
    kept_system = turn.bs == 1 and case.get("keep_system", True)
    placement = case.get("placement")
    systems = [i for i, m in enumerate(view) if isinstance(m, SystemMessage)]
    want_system = kept_system or (placement == "system" and has_block)
    assert systems == ([0] if want_system else []), systems
    if kept_system:
        original = turn.history[0]
        if isinstance(original.content, str):
            assert text_of(view[0]).startswith(original.content)
        else:
            assert view[0].content[: len(original.content)] == original.content
        if not (placement == "system" and has_block):
            assert view[0] is original
    summaries = [i for i, m in enumerate(view) if m.id == SUMMARY_ID]
    if placement == "human" and has_block:
        assert summaries == [len(systems)], summaries
        assert isinstance(view[summaries[0]], HumanMessage)
    elif summaries:  # placement="system" and no system message of its own: the summary's
        assert summaries == [0] and has_block and not kept_system
    if has_block:
        assert "<conversation_summary>" in leading_text(view)
    body = view_body(view)
    assert body, "the newest human message is always in the view"
    if case.get("start_on", "human") == "human":
        assert isinstance(body[0], HumanMessage), type(body[0]).__name__
    newest = newest_human_index(turn.history)
    assert newest in [marker(m) for m in body], "the newest HumanMessage is not in the view"


def check_summary_block(run: Run, turn: Turn) -> None:
    """The summary in the view is the state's summary (all sections, verbatim), unless an
    overflow policy shortened it (marked) or left it out; and it changes only on a fold."""
    assert turn.result is not None
    state, report = turn.result.state, turn.result.report
    if not report.folded:
        assert state.summary == turn.before.summary
    sections = state.sections
    if not sections:
        assert report.summary_tokens == 0
        return
    text = leading_text(turn.result.messages)
    if report.summary_tokens == 0:
        event("summary left out of the view (overflow)")
        assert run.case.get("overflow") != "error"
        return
    if _SUMMARY_SHORTENED in text:
        event("summary shortened in the view (overflow)")
        assert run.case.get("overflow") != "error"
        return
    for section_text in sections.values():
        assert section_text in text
    counter = run.strategy.counter
    assert report.summary_tokens == counter.count_text(render_summary(sections))


def check_chained(run: Run, turn: Turn) -> None:
    """Every fold call's ``<previous_summary>`` is the summary so far: the state's section on
    the turn's first call for that section (``(none yet)`` before the first fold), then what
    the previous successful call of the same fold answered. A compress call gets the summary
    the fold calls produced. A committed fold stores the last answer (clipped with the marker
    when it is still over the section budget), which echoes the digest of its own input."""
    summarizer = run.strategy.summarizer
    assert summarizer is not None
    budgets = summarizer.section_budgets
    counter = summarizer.counter
    section: str | None = None
    so_far: dict[str, str] = {}
    for call in turn.calls:
        if call.kind == "fold":
            assert call.section is not None
            section = call.section
            if section not in so_far:
                so_far[section] = turn.before.sections.get(section, "")
            expected = so_far[section] or "(none yet)"
            assert call.previous == expected, (call.previous, expected)
            if turn.before.summary:
                event("chained onto a previous summary")
        else:
            assert section is not None
            assert call.given == so_far[section]
            event("compress call")
        if call.ok:
            assert call.answer is not None
            so_far[section] = call.answer
    if turn.after is None or not turn.folded_now:
        return
    stored = turn.after.sections
    assert set(stored) == set(run.case.templates)
    for name, text in stored.items():
        answer = so_far[name]
        if counter.count_text(answer) <= budgets[name]:
            assert text == answer
            last = [c for c in turn.calls if c.ok and c.answer == answer][-1]
            echo = f"S{last.index} prev={digest(last.previous or last.given or '')}"
            assert text.startswith(echo), (text[:40], echo)
        else:
            event("summary clipped to its budget")
            assert text.endswith(_SUMMARY_CLIPPED) and counter.count_text(text) <= budgets[name]


def check_failure_rules(run: Run, turn: Turn) -> None:
    """fold.py's failure rules. A committed fold: ``folded`` grows by ``report.folded``, health
    is healthy, failures 0, no retry_at, no last_error. No fold: ``folded``, its key and the
    summary are unchanged. A failed attempt (failures + 1): health "retrying", or "degraded"
    from ``degrade_after`` failures on, ``retry_at = now + min(retry_initial * 2**(f-1),
    retry_max)``, last_error set; the markers it read were the oldest unfolded messages. While
    unhealthy and before ``retry_at``, the summarizer is not called."""
    case = run.case
    before = turn.before
    if turn.result is None:
        return
    state, report = turn.result.state, turn.result.report
    assert state.folded >= before.folded
    if before.health != "healthy" and before.retry_at is not None and turn.now < before.retry_at:
        event("backoff: no attempt before retry_at")
        assert turn.calls == []
        assert (state.failures, state.retry_at, state.health) == (
            before.failures,
            before.retry_at,
            before.health,
        )
    if report.folded:
        assert state.folded == before.folded + report.folded
        assert state.folds == before.folds + 1
        assert (state.health, state.failures, state.retry_at, state.last_error) == (
            "healthy",
            0,
            None,
            None,
        )
        if before.health != "healthy":
            event("recovered")
        return
    assert (state.folded, state.folded_key, state.folds) == (
        before.folded,
        before.folded_key,
        before.folds,
    )
    assert state.summary == before.summary
    if state.failures == before.failures:
        assert (state.health, state.retry_at, state.last_error) == (
            before.health,
            before.retry_at,
            before.last_error,
        )
        return
    event(f"failed fold -> {state.health}")
    assert state.failures == before.failures + 1
    degraded = state.failures >= case.get("degrade_after")
    assert state.health == ("degraded" if degraded else "retrying")
    wait = min(case.get("retry_initial") * 2 ** (state.failures - 1), case.get("retry_max"))
    assert state.retry_at == turn.now + wait
    assert state.last_error
    assert report.health == state.health
    b = turn.bs + before.folded
    for section in case.templates:
        read = [
            n
            for c in turn.calls
            if c.ok and c.kind == "fold" and c.section == section
            for n in c.markers
        ]
        assert read == list(range(b, b + len(read))), (section, read, b)


def check_failed_markers_folded_later(run: Run) -> None:
    """A message read by a failed fold is not folded by it; it is folded later by a successful
    fold (read again then), or is still unfolded at the end."""
    pending: set[int] = set()
    for turn in run.turns:
        if turn.after is None:
            continue
        if turn.folded_now:
            b0 = turn.bs + turn.before.folded
            pending -= set(range(b0, b0 + turn.folded_now))
        elif turn.after.failures > turn.before.failures:
            pending |= {n for c in turn.calls if c.ok for n in c.markers}
    last = next((t for t in reversed(run.turns) if t.after is not None), None)
    if last is None or last.after is None:
        return
    b = last.bs + last.after.folded
    assert all(n >= b for n in pending), "a message read by a failed fold was folded unread"
    if pending:
        event("failed fold's messages still unfolded at the end")


def check_prefix(run: Run, prev: Turn | None, turn: Turn) -> None:
    """Between two folds the view's prefix does not change. Precisely: the previous returned
    view is a prefix (same message dumps) of this one when neither turn folded or failed
    (health healthy, report.folded == 0, no rewrite), neither shows a note (not_shown == 0), the
    overflow policy changed nothing (no clipped message, the summary shown in full), and, for
    TieredSummary, the clip point (state.clipped) did not move: it moves when the view crosses
    tier 1 and then re-renders older messages in their clipped form (fold.py, tier 1)."""
    if prev is None or prev.result is None or turn.result is None:
        return
    a, b = prev.result, turn.result
    old = [m.model_dump() for m in a.messages]
    new = [m.model_dump() for m in b.messages[: len(a.messages)]]
    quiet = (
        b.report.folded == 0
        and a.report.health == b.report.health == "healthy"
        and not b.report.history_rewritten
        and a.report.not_shown == b.report.not_shown == 0
        and not a.report.clipped
        and not b.report.clipped
        and a.report.summary_tokens == b.report.summary_tokens
        and _SUMMARY_SHORTENED not in leading_text(a.messages)
        and _SUMMARY_SHORTENED not in leading_text(b.messages)
    )
    if not quiet:
        return
    if run.case.kind == "tiered" and a.state.clipped != b.state.clipped:
        event("tiered: clip point moved (prefix may change)")
        return
    assert len(a.messages) <= len(b.messages), "the view got shorter without a fold"
    assert old == new, "the view's prefix changed between folds"
    event("prefix kept")


def outcome(turn: Turn) -> Any:
    if turn.result is None:
        assert turn.error is not None
        error = turn.error
        return ("raised", str(error), error.needed, error.available, turn.after)
    r = turn.result
    return ([m.model_dump() for m in r.messages], r.state, r.report)


def call_log(turn: Turn) -> list[tuple[Any, ...]]:
    return [(c.index, c.kind, c.section, c.previous, c.markers, c.given) for c in turn.calls]


# --------------------------------------------------------------------------------------------
# the tests


@given(case=cases())
def test_every_message_is_folded_exactly_once_into_a_chained_summary(case):
    """Properties 1 and 3 (DESIGN 2.4): what the summarizer reads. Over the run,
    :func:`check_folded_exactly_once`; every turn, :func:`check_chained` (the previous summary
    is the input of every fold call) and :func:`check_summary_block` (the view shows the
    state's summary). With random summarizer failures, multi-section summaries, chained calls
    (small max_input_tokens), over-budget answers (compress call, clipping) and the fallback."""
    run = simulate(case)
    check_folded_exactly_once(run)
    for turn in run.turns:
        check_chained(run, turn)
        if turn.result is not None:
            check_summary_block(run, turn)


@given(case=cases(), driver=st.sampled_from(("apply", "aapply")))
def test_folded_plus_view_plus_not_shown_cover_the_history(case, driver):
    """Property 2 (DESIGN 2.3), every turn, sync and async: see :func:`check_nothing_lost`."""
    run = simulate(case, driver)
    for turn in run.turns:
        if turn.result is not None:
            check_nothing_lost(run, turn)


@given(case=cases())
def test_view_fits_the_budget_and_is_a_valid_sequence(case):
    """Properties 4 and 5 (DESIGN 2.1, 2.2), every turn: :func:`check_budget` (within budget,
    or MemoryBudgetExceeded as documented) and :func:`check_valid_view`."""
    run = simulate(case)
    for turn in run.turns:
        check_budget(run, turn)
        if turn.result is not None:
            check_valid_view(run, turn)


@given(case=cases(failures=("some", "many")), driver=st.sampled_from(("apply", "aapply")))
def test_failures_lose_nothing_and_fold_nothing(case, driver):
    """Property 6 (DESIGN 2.3): random failure injection (errors, timeouts retried by the
    Summarizer, empty answers, over-budget answers that leave no input room, the fallback
    model), sync and async. Every turn: :func:`check_failure_rules` and
    :func:`check_nothing_lost`; over the run: :func:`check_failed_markers_folded_later` and
    :func:`check_folded_exactly_once`."""
    run = simulate(case, driver)
    for turn in run.turns:
        check_failure_rules(run, turn)
        if turn.result is not None:
            check_nothing_lost(run, turn)
    check_failed_markers_folded_later(run)
    check_folded_exactly_once(run)


@given(case=cases(), driver=st.sampled_from(("apply", "aapply")), data=st.data())
def test_replay_gives_the_same_views_and_states(case, driver, data):
    """Property 7 (DESIGN 2.5). A fresh instance called with a turn's history, state and clock
    value, and a fake model at the same call number (so the same answers), gives the same
    view, state and report and sends the same prompts; checked on every turn that called the
    summarizer, the last turn and a few drawn ones. And a second whole run through ``driver``
    (apply or aapply) gives the same results and prompts turn by turn."""
    run = simulate(case)
    drawn = data.draw(st.sets(_ints(0, len(run.turns) - 1), max_size=3), label="replayed")
    for turn in run.turns:
        if not (turn.calls or turn.number in drawn or turn is run.turns[-1]):
            continue
        model = FakeModel(case.actions, start=turn.call_start, transient=case.wrap is not None)
        strategy = case.build(model, Clock(turn.now))
        try:
            again: Any = strategy.apply(list(turn.history), turn.before)
        except MemoryBudgetExceeded as exc:
            again = exc
        replay = Turn(turn.number, turn.history, turn.before, turn.now, 0, None, None)
        replay.result = again if isinstance(again, MemoryResult) else None
        replay.error = again if isinstance(again, MemoryBudgetExceeded) else None
        replay.calls = model.log
        assert outcome(replay) == outcome(turn)
        assert call_log(replay) == call_log(turn)
    other = simulate(case, driver)
    for a, b in zip(run.turns, other.turns, strict=True):
        assert outcome(a) == outcome(b)
        assert call_log(a) == call_log(b)


@given(case=cases(), carry=st.sampled_from(("json", "dict")))
def test_state_survives_serialization_every_turn(case, carry):
    """Property 8: every turn ``MemoryState.from_json(state.to_json()) == state`` (and the same
    for ``to_dict``/``from_dict``), and a run that carries the serialized copies from turn to
    turn gives the same views, states and reports as the run carrying the live states."""
    live = simulate(case)
    for turn in live.turns:
        if turn.result is not None:
            state = turn.result.state
            assert MemoryState.from_json(state.to_json()) == state
            assert MemoryState.from_dict(state.to_dict()) == state
    copied = simulate(case, carry=carry)
    for a, b in zip(live.turns, copied.turns, strict=True):
        assert outcome(a) == outcome(b)


@given(case=cases())
def test_view_prefix_is_stable_between_folds(case):
    """Property 9 (DESIGN 2.6), every pair of consecutive returned turns: see
    :func:`check_prefix`."""
    run = simulate(case)
    prev: Turn | None = None
    for turn in run.turns:
        check_prefix(run, prev, turn)
        if turn.result is not None:
            prev = turn


# --------------------------------------------------------------------------------------------
# regression tests for library bugs the properties above found
#
# Each test carries the bug's smallest reproduction as an explicit @example, so that a
# regression fails at once (no search, no shrinking), then searches random runs as usual.


def _sized(kind: type[BaseMessage], n: int, tokens: int) -> BaseMessage:
    """Message number ``n`` (marker included) costing exactly ``tokens`` approximate tokens."""
    counter = ApproximateCounter()
    k = 0
    while counter.count_message(_tagged(kind(content="x" * k), n)) < tokens:
        k += 1
    message = _tagged(kind(content="x" * k), n)
    assert counter.count_message(message) == tokens
    return message


def _example(
    kind: str,
    kwargs: dict[str, Any],
    *turns: list[tuple[type, int]],
    actions: tuple[str, ...] = (),
) -> Case:
    """A hand-made case: each turn a list of (message class, approximate tokens)."""
    built: list[tuple[BaseMessage, ...]] = []
    n = 0
    for group in turns:
        built.append(tuple(_sized(cls, n + k, tokens) for k, (cls, tokens) in enumerate(group)))
        n += len(group)
    kinds = tuple(sorted(kwargs.items()))
    return Case(kind, kinds, None, tuple(built), (0.0,) * len(built), actions)


#: the summary block of the fake's first answer ("S0 prev=<6 hex>"), in tokens
_BLOCK = ApproximateCounter().count_text(render_summary({"conversation": "S0 prev=000000"}))
_SMALL = {"max_tokens": 300, "max_summary_tokens": 40, "min_messages": 1}

#: (turns count from 0) turn 2 folds messages 0-3, then the summary and the 278-token question
#: cannot fit: raise; turn 3 (an answer arrives, the question is still the newest) folded 0-3
#: again, paying the summarizer again, when the raise lost the state
_REFOLD = _example(
    "buffer",
    {**_SMALL, "overflow": "error"},
    [(HumanMessage, 48), (AIMessage, 48)],
    [(HumanMessage, 18), (AIMessage, 18)],
    [(HumanMessage, 278)],
    [(AIMessage, 8)],
)
#: turn 1 folds messages 0-1; the summary (its block plus 3 tokens of message framing) and the
#: question are 1 token over the budget; the question was clipped while the whole summary stayed
_CLIP_FIRST = _example(
    "buffer",
    {**_SMALL, "overflow": "truncate_summary"},
    [(HumanMessage, 80), (AIMessage, 80)],
    [(HumanMessage, 300 - (_BLOCK + 3) + 1)],
)
#: turn 1 folds 0-1 and shows summary + question; turn 2 adds a long answer to the same human
#: turn: nothing to fold, the summary is dropped to fit (not_shown 0, no fold, healthy), and
#: report.prefix_kept said the prefix held although the summary left the view's first message
_PREFIX_CLAIM = _example(
    "buffer",
    {**_SMALL, "overflow": "truncate_summary"},
    [(HumanMessage, 80), (AIMessage, 80)],
    [(HumanMessage, 150)],
    [(AIMessage, 135)],
)
#: one turn, the summarizer fails: 12 questions of 19 tokens under a 137-token budget. The note
#: is sized for "12 not shown", 3 fit; re-rendered as "9 not shown" it is one token shorter,
#: which let a fourth question in: 8 were not shown, the note said 9
_NOTE_COUNT = _example(
    "buffer",
    {"max_tokens": 137, "max_summary_tokens": 16, "min_messages": 1},
    [(SystemMessage, 6)] + [(HumanMessage, 19)] * 12,
    actions=("raise",),
)


@example(case=_REFOLD)
@given(case=cases(failures=("none",), overflows=("error",), max_turns=20))
def test_a_fold_is_not_thrown_away_when_the_view_then_overflows(case):
    """DESIGN 2.4, each message is summarized at most once, also across a turn that raises.

    With ``overflow="error"`` a turn may fold (the summarizer is called and succeeds) and then
    raise MemoryBudgetExceeded from the view stage (fold.py ``_view``): unless the exception
    hands the caller the new state (the harness carries ``error.state`` when there is one), the
    summary is lost with the turn and the next call folds the same messages again, and again on
    every retry. Here the summarizer never fails, so every message must be read by fold calls
    at most once per section over the whole run."""
    run = simulate(case)
    for section in case.templates:
        read = [
            n
            for turn in run.turns
            for c in turn.calls
            if c.ok and c.kind == "fold" and c.section == section
            for n in c.markers
        ]
        twice = sorted({n for n in read if read.count(n) > 1})
        assert not twice, f"{section}: messages {twice} were summarized more than once"


@example(case=_CLIP_FIRST)
@given(case=cases(overflows=("truncate_summary",), max_turns=20))
def test_truncate_summary_gives_up_the_summary_before_clipping_the_newest_human_message(case):
    """fold.py: ``"truncate_summary"`` shortens the summary in the view, then clips the newest
    human message. So a view whose newest human message was clipped shows no summary: had any
    shortened summary fitted, a shorter one would have left the human message whole."""
    run = simulate(case)
    for turn in run.turns:
        if turn.result is None or not turn.result.report.clipped:
            continue
        report = turn.result.report
        assert report.summary_tokens == 0, (
            f"turn {turn.number}: {report.clipped} clipped while a summary of "
            f"{report.summary_tokens} tokens was shown"
        )


@example(case=_PREFIX_CLAIM)
@given(case=cases(max_turns=20))
def test_report_prefix_kept_only_when_the_previous_view_is_a_prefix(case):
    """``report.prefix_kept`` (result.py: "the view starts where the previous turn's view
    started") is what a caller reads to know the provider's prompt cache will hit: when it is
    true, the previous view (the result for the state passed in) is a prefix of this one."""
    run = simulate(case)
    prev: Turn | None = None
    for turn in run.turns:
        if turn.result is not None:
            if prev is not None and prev.result is not None and turn.result.report.prefix_kept:
                a, b = prev.result.messages, turn.result.messages
                old = [m.model_dump() for m in a]
                new = [m.model_dump() for m in b[: len(a)]]
                assert len(a) <= len(b) and old == new, (
                    f"turn {turn.number}: report.prefix_kept, but the previous view (summary "
                    f"{prev.result.report.summary_tokens} tokens, {prev.result.report.not_shown} "
                    f"not shown) is not a prefix of this one (summary "
                    f"{turn.result.report.summary_tokens} tokens, "
                    f"{turn.result.report.not_shown} not shown)"
                )
            prev = turn


@example(case=_NOTE_COUNT)
@given(case=cases(failures=("some", "many"), max_turns=20))
def test_not_shown_note_gives_the_number_of_messages_not_shown(case):
    """fold.py: the view carries "a visible note with how many earlier messages are not shown".
    ``_view.attempt`` sizes the note for a first count, selects, then re-renders it with the
    new count and selects again; a shorter note can let more messages in, so the count it
    states must be the final one: ``report.not_shown``."""
    run = simulate(case)
    for turn in run.turns:
        if turn.result is not None and turn.result.report.not_shown:
            notes = _NOTE.findall(leading_text(turn.result.messages))
            assert [int(n) for n, _ in notes] == [turn.result.report.not_shown], (
                f"turn {turn.number}: the note says {notes[0][0]} earlier messages are not "
                f"shown; {turn.result.report.not_shown} are not"
            )
