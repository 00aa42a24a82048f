"""Seeded synthetic conversations for demos, benchmarks and your own tests.

``synthetic_history(n)`` is a finished conversation of ``n`` messages; ``agent_loop(n)`` replays
one as an agent would see it, yielding the history at every model call. Both are deterministic for
a seed. The shape follows a tool-using assistant: a human turn, then an assistant reply that in
about 30% of turns calls 1-3 tools (parallel calls answered by ToolMessages) before answering.
Message bodies are 20-400 words of plain English with some numbers, names and the odd emoji.
"""

from __future__ import annotations

import json
import random
from collections.abc import Iterator

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage, ToolMessage

__all__ = ["agent_loop", "synthetic_history"]

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


def _text(rng: random.Random, low: int, high: int) -> str:
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
        yield [HumanMessage(_text(rng, low, high), id=mid("h"))]
        while rng.random() < tool_rate:
            calls = []
            for _ in range(rng.randint(1, 3)):
                serial += 1
                calls.append(
                    {
                        "name": rng.choice(_TOOLS),
                        "args": {"query": _text(rng, 2, 8), "limit": rng.randint(1, 50)},
                        "id": f"call-{serial}",
                    }
                )
            note = _text(rng, 3, 12) if rng.random() < 0.3 else ""
            ai = AIMessage(note, tool_calls=calls, id=mid("ai"))
            results: list[BaseMessage] = [
                ToolMessage(
                    json.dumps({"result": _text(rng, low, high)}, ensure_ascii=False),
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
        yield [AIMessage(_text(rng, low, high), id=mid("ai"))]


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
                out.append(HumanMessage(_text(rng, *words), id=f"h-tail-{seed}" if ids else None))
            if len(out) < target:
                out.append(AIMessage(_text(rng, *words), id=f"ai-tail-{seed}" if ids else None))
            while len(out) < target:
                out.append(HumanMessage(_text(rng, *words)))
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
