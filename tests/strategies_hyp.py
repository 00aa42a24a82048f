"""Hypothesis generators for conversation histories and strategy configurations.

Two history generators:

* :func:`histories` builds *valid-ish* conversations, the shape an agent loop produces: an optional
  SystemMessage first, then always a HumanMessage, then human turns, plain AI replies and tool
  rounds (an AIMessage with 1-3 parallel calls answered by ToolMessages, the results sometimes in
  another order than the calls and, with ``interleave=True``, sometimes with plain human or AI
  messages sitting between the call and a result). With ``in_flight=True`` the history sometimes
  ends on an AIMessage whose calls are (partly) unanswered: a call still in flight. Sometimes
  an assistant greeting (a plain AIMessage) comes before the first HumanMessage; the views must
  leave it out, as :func:`langmem_ext.repair` does.
* :func:`malformed_histories` is a "soup" of the same kinds of messages in any order: orphan
  ToolMessages (for calls made later or never), duplicate results, unanswered calls in the middle,
  results separated from their call, SystemMessages anywhere, histories that start on an
  AIMessage or have no HumanMessage at all.

Contents mix plain strings and multimodal block lists (text and low-detail image_url blocks),
unicode and emoji; ids are present or absent per message (always unique when present); names
appear sometimes; tool call ids are unique within a history.

The building blocks are public for other harnesses (``property_harness.py`` grows conversations
turn by turn from them): :data:`SNIPPETS` and :data:`TOOLS` (the texts and tool names drawn
from), :class:`Ids` (serial numbers for ids within one history), :func:`ints` (cached integer
strategies) and the message makers :func:`human`, :func:`plain_ai`, :func:`calling_ai`,
:func:`result` and :func:`system`.
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass
from typing import Any

from hypothesis import strategies as st
from langchain_core.messages import (
    AIMessage,
    BaseMessage,
    HumanMessage,
    SystemMessage,
    ToolMessage,
)

from langmem_ext import ApproximateCounter, SlidingWindow, TiktokenCounter, TokenBudget

MAX_MESSAGES = 40
MAX_TEXT = 300

#: Precomposed snippets (one draw each): scripts, combining marks, RTL, CJK, emoji with ZWJ and
#: variation selectors, flags, JSON-ish and markup text, whitespace and the empty string.
SNIPPETS = (
    "",
    " ",
    "the order shipped to Berlin yesterday",
    "invoice #4411 was refunded",
    "café naïve résumé Zürich",
    "e\u0301 a\u0308 o\u0302",  # combining marks
    "東京の天気は晴れです",
    "데이터베이스 지연",
    "ключ к данным",
    "مرحبا بالعالم",
    "שלום עולם",
    "नमस्ते दुनिया",
    "🙂🚀✅🔥🧪",
    "👩‍💻👨‍👩‍👧‍👦",
    "🇩🇪🇯🇵🏳️‍🌈",
    "❤️\ufe0f ✌🏽",
    '{"query": "status", "limit": 5}',
    "<tool>call</tool> [link](https://example.com)",
    "line one\nline two\n\ttabbed",
    "42 3.14 -7 1e10 null true",
    "a" * 7,
    "ZWJ\u200dZWNJ\u200cNBSP\u00a0",
    "𝔘𝔫𝔦𝔠𝔬𝔡𝔢 𝟙𝟚𝟛",
    "clipped by langmem_ext",  # the marker's words in user text
)
_NAMES = ("alice", "bob", "assistant_1", "ünï", "tool-runner")
TOOLS = ("search_orders", "get_weather", "lookup_customer", "run_sql", "fetch_invoice")

_alphabet = st.characters(codec="utf-8", categories=("L", "M", "N", "P", "S", "Zs"))
_snippet = st.sampled_from(SNIPPETS)

#: Text of 0-300 characters: a snippet, a snippet repeated to lengths that matter for token
#: budgets, or short arbitrary unicode. Few draws per text, so 500 histories generate quickly.
texts = st.one_of(
    _snippet,
    st.tuples(_snippet, st.integers(1, 40)).map(lambda pair: " ".join([pair[0]] * pair[1])),
    st.text(_alphabet, max_size=16),
).map(lambda s: s[:MAX_TEXT])

short_texts = st.one_of(_snippet, st.text(_alphabet, max_size=8))


@dataclass
class Ids:
    """Serial numbers for message ids and tool call ids within one generated history."""

    serial: int = 0

    def next(self) -> int:
        self.serial += 1
        return self.serial


def _message_id(draw: Any, ids: Ids, prefix: str) -> str | None:
    style = draw(_id_styles)
    if style == "none":
        return None
    n = ids.next()
    return f"{prefix}-{n}" if style == "plain" else f"run-{n:08x}-ü"


@functools.cache
def ints(lo: int, hi: int) -> st.SearchStrategy[int]:
    """``st.integers(lo, hi)``, built once per bounds (building strategies costs per draw)."""
    return st.integers(lo, hi)


_bools = st.booleans()
_tools = st.sampled_from(TOOLS)
_statuses = st.sampled_from(("success", "success", "error"))
_block_kinds = st.lists(st.sampled_from(("text", "image")), min_size=1, max_size=3)
_step_kinds = st.sampled_from(("human", "ai", "tools", "tools"))
_id_styles = st.sampled_from(("none", "plain", "uuidish"))
_maybe_name = st.sampled_from((None, None, None, None, *_NAMES))


def _content(draw: Any, ids: Ids, *, multimodal: bool = True) -> str | list[dict[str, Any]]:
    if not multimodal or draw(ints(0, 3)) > 0:
        return draw(texts)
    blocks: list[dict[str, Any]] = []
    for kind in draw(_block_kinds):
        if kind == "text":
            blocks.append({"type": "text", "text": draw(texts)})
        else:
            url = f"https://example.com/img-{ids.next()}.png"
            blocks.append({"type": "image_url", "image_url": {"url": url, "detail": "low"}})
    return blocks


def _name(draw: Any) -> str | None:
    return draw(_maybe_name)


def human(draw: Any, ids: Ids) -> HumanMessage:
    return HumanMessage(
        content=_content(draw, ids),
        id=_message_id(draw, ids, "h"),
        name=_name(draw),
    )


def plain_ai(draw: Any, ids: Ids) -> AIMessage:
    return AIMessage(
        content=_content(draw, ids, multimodal=draw(ints(0, 5)) == 0),
        id=_message_id(draw, ids, "ai"),
        name=_name(draw),
    )


def _calls(draw: Any, ids: Ids, k: int) -> list[dict[str, Any]]:
    calls = []
    for _ in range(k):
        call_id = f"call_{ids.next()}"
        args = {"q": draw(short_texts), "limit": draw(ints(0, 100))}
        calls.append({"name": draw(_tools), "args": args, "id": call_id})
    return calls


def calling_ai(draw: Any, ids: Ids, k: int) -> AIMessage:
    content = draw(texts) if draw(ints(0, 2)) == 0 else ""
    return AIMessage(
        content=content,
        tool_calls=_calls(draw, ids, k),
        id=_message_id(draw, ids, "ai"),
        name=_name(draw),
    )


def result(draw: Any, ids: Ids, call: dict[str, Any]) -> ToolMessage:
    if draw(ints(0, 3)) == 0:
        content: Any = _content(draw, ids)
    else:
        content = json.dumps({"result": draw(texts)}, ensure_ascii=False)
    return ToolMessage(
        content=content,
        tool_call_id=call["id"],
        name=call["name"],
        id=_message_id(draw, ids, "t"),
        status=draw(_statuses),
    )


def system(draw: Any, ids: Ids) -> SystemMessage:
    return SystemMessage(content=_content(draw, ids), id=_message_id(draw, ids, "sys"))


def _tool_round(draw: Any, ids: Ids, interleave: bool) -> list[BaseMessage]:
    ai = calling_ai(draw, ids, draw(ints(1, 3)))
    order = draw(st.permutations(range(len(ai.tool_calls))))
    results: list[BaseMessage] = [result(draw, ids, ai.tool_calls[i]) for i in order]
    out: list[BaseMessage] = [ai, *results]
    if interleave and draw(ints(0, 3)) == 0:
        # other messages between the call and (some of) its results
        for _ in range(draw(ints(1, 2))):
            at = draw(ints(1, len(out) - 1))
            between = human(draw, ids) if draw(_bools) else plain_ai(draw, ids)
            out.insert(at, between)
    return out


@st.composite
def histories(
    draw: Any,
    *,
    interleave: bool = True,
    in_flight: bool = True,
    max_messages: int = MAX_MESSAGES,
) -> list[BaseMessage]:
    """A valid-ish conversation (see the module docstring). Always holds a HumanMessage."""
    ids = Ids()
    out: list[BaseMessage] = []
    if draw(_bools):
        out.append(system(draw, ids))
    if draw(ints(0, 5)) == 0:
        out.append(plain_ai(draw, ids))  # an assistant greeting before the first question
    out.append(human(draw, ids))
    steps = draw(ints(0, 20))
    for _ in range(steps):
        kind = draw(_step_kinds)
        if kind == "human":
            group: list[BaseMessage] = [human(draw, ids)]
        elif kind == "ai":
            group = [plain_ai(draw, ids)]
        else:
            group = _tool_round(draw, ids, interleave)
        if len(out) + len(group) > max_messages:
            break
        out.extend(group)
    if in_flight and len(out) + 4 <= max_messages and draw(ints(0, 4)) == 0:
        ai = calling_ai(draw, ids, draw(ints(1, 3)))
        answered = draw(ints(0, len(ai.tool_calls) - 1))
        order = draw(st.permutations(range(len(ai.tool_calls))))
        out.append(ai)
        out.extend(result(draw, ids, ai.tool_calls[i]) for i in order[:answered])
    return out


_CALL_POOL = 10  # results may answer any of the first calls made, or calls never made


def _soup_items() -> st.SearchStrategy[tuple[Any, ...]]:
    content = st.one_of(short_texts, _snippet.map(lambda s: [{"type": "text", "text": s}]))
    ident = st.sampled_from((None, None, "x"))
    return st.one_of(
        st.tuples(st.just("human"), content, ident),
        st.tuples(st.just("ai"), content, ident),
        st.tuples(st.just("system"), content, ident),
        st.tuples(st.just("call"), st.integers(1, 3), ident),  # AIMessage, results left to chance
        st.tuples(st.just("round"), st.integers(1, 3), ident),  # AIMessage and all its results
        st.tuples(st.just("result"), st.integers(0, _CALL_POOL - 1), ident),  # may be orphan
    )


_soup = st.lists(_soup_items(), max_size=30)


@st.composite
def malformed_histories(draw: Any) -> list[BaseMessage]:
    """A "soup" of messages in any order: orphan results (for calls made later or never),
    duplicate results, unanswered calls in the middle, results separated from their call by
    other messages, SystemMessages anywhere, histories starting on an AIMessage or without a
    HumanMessage. Built from a flat list of items, so it shrinks well (by deleting items).
    Message ids, when present, are unique; each call id is made by at most one AIMessage."""
    items = draw(_soup)
    out: list[BaseMessage] = []
    made = 0
    for n, (kind, arg, ident) in enumerate(items):
        mid = f"{ident}{n}" if ident else None
        if kind == "human":
            out.append(HumanMessage(arg, id=mid))
        elif kind == "ai":
            out.append(AIMessage(arg, id=mid))
        elif kind == "system":
            out.append(SystemMessage(arg, id=mid))
        elif kind in ("call", "round"):
            calls = [
                {
                    "name": TOOLS[(made + i) % len(TOOLS)],
                    "args": {"i": made + i},
                    "id": f"c{made + i}",
                }
                for i in range(arg)
            ]
            made += arg
            out.append(AIMessage("", tool_calls=calls, id=mid))
            if kind == "round":
                out.extend(
                    ToolMessage(f"result {c['id']}", tool_call_id=c["id"], name=c["name"])
                    for c in calls
                )
        else:
            out.append(ToolMessage(f"result c{arg}", tool_call_id=f"c{arg}", id=mid))
    return out


# --------------------------------------------------------------------------------------------
# strategy configurations


@dataclass(frozen=True)
class Spec:
    """A strategy configuration that can build fresh, independent instances (own counter cache)."""

    kind: str  # "budget" or "window"
    kwargs: tuple[tuple[str, Any], ...]
    counter: str = "approximate"

    def build(self) -> TokenBudget | SlidingWindow:
        counter: Any = ApproximateCounter() if self.counter == "approximate" else _tiktoken()
        cls = TokenBudget if self.kind == "budget" else SlidingWindow
        return cls(**dict(self.kwargs), counter=counter)

    def get(self, key: str, default: Any = None) -> Any:
        return dict(self.kwargs).get(key, default)


def _tiktoken() -> TiktokenCounter:
    # a fresh counter (own cache); tiktoken caches the loaded encoding itself
    return TiktokenCounter("gpt-4o")


def _max_tokens() -> st.SearchStrategy[int]:
    return st.one_of(st.integers(1, 150), st.integers(150, 1500), st.integers(1500, 6000))


@st.composite
def token_budget_specs(
    draw: Any,
    *,
    overflow: str | None = None,
    target: bool = True,
    counter: str = "approximate",
    start_on: str | None = "human",
    max_tokens: st.SearchStrategy[int] | None = None,
    reserve: bool = True,
) -> Spec:
    top = draw(max_tokens if max_tokens is not None else _max_tokens())
    kwargs: dict[str, Any] = {"max_tokens": top}
    if reserve:
        kwargs["reserve_tokens"] = draw(
            st.one_of(st.just(0), st.integers(0, max(top // 4, 0)), st.integers(0, top - 1))
        )
        kwargs["safety_margin"] = draw(st.sampled_from((0.0, 0.0, 0.05, 0.1, 0.25, 0.5)))
    kwargs["min_messages"] = draw(st.integers(0, 6))
    if target:
        kwargs["target_tokens"] = draw(st.none() | st.integers(1, top))
    kwargs["overflow"] = overflow or draw(st.sampled_from(("error", "clip")))
    kwargs["keep_system"] = draw(st.integers(0, 4)) > 0
    kwargs["start_on"] = start_on or draw(st.sampled_from(("human", "any")))
    return Spec("budget", tuple(sorted(kwargs.items())), counter)


@st.composite
def sliding_window_specs(
    draw: Any,
    *,
    overflow: str | None = None,
    with_tokens: bool | None = None,
    start_on: str | None = "human",
    max_tokens: st.SearchStrategy[int] | None = None,
) -> Spec:
    kwargs: dict[str, Any] = {"max_messages": draw(st.integers(1, 30))}
    if with_tokens if with_tokens is not None else draw(st.booleans()):
        kwargs["max_tokens"] = draw(max_tokens if max_tokens is not None else _max_tokens())
    kwargs["min_messages"] = draw(st.integers(0, 6))
    kwargs["overflow"] = overflow or draw(st.sampled_from(("error", "clip")))
    kwargs["keep_system"] = draw(st.integers(0, 4)) > 0
    kwargs["start_on"] = start_on or draw(st.sampled_from(("human", "any")))
    return Spec("window", tuple(sorted(kwargs.items())))


def any_specs(**kwargs: Any) -> st.SearchStrategy[Spec]:
    return st.one_of(token_budget_specs(**kwargs), sliding_window_specs(**kwargs))
