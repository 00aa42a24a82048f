"""A long agent turn built by hand (one request, then tool rounds of 1-3 parallel calls), its
replay at every model call of an agent loop, and the per-call checks (valid view within the
budget, the request first, nothing hidden while the summarizer is healthy). Shared by
tests/strategies/test_long_agent_turns.py and test_tool_digest.py."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from fakes import ScriptedSummarizer
from langchain_core.messages import (
    AIMessage,
    BaseMessage,
    HumanMessage,
    SystemMessage,
    ToolMessage,
)

from langmem_ext import (
    MemoryResult,
    MemoryState,
    is_valid,
    split_units,
    validate,
)
from langmem_ext.core.digest import DIGEST_ID_PREFIX, is_digest
from langmem_ext.core.identity import key_at

SYS = SystemMessage("You are a coding agent. Read the code before you change it.", id="sys")
REQUEST = HumanMessage(
    "Find every caller of charge() in the billing service, move them to the new Payments API "
    "and keep the refund behaviour exactly as it is today.",
    id="req",
)


def width(k: int) -> int:
    """Parallel calls in round ``k``: mostly one, some two or three."""
    return 3 if k % 11 == 5 else 2 if k % 7 == 3 else 1


def file_text(k: int, p: int) -> str:
    """What reading file ``p`` of round ``k`` returns: 15-64 words."""
    return f"src/module_{k}_{p}.py: " + " ".join(f"line{i}" for i in range(15 + (k * 37 + p) % 50))


def tool_round(k: int, thought: int = 3) -> list[BaseMessage]:
    calls = [
        {"name": "read_file", "args": {"path": f"src/module_{k}_{p}.py"}, "id": f"call-{k}-{p}"}
        for p in range(width(k))
    ]
    text = f"step {k}: " + " ".join(["reading"] * thought)
    results = [
        ToolMessage(file_text(k, p), tool_call_id=c["id"], name="read_file", id=f"t-{k}-{p}")
        for p, c in enumerate(calls)
    ]
    return [AIMessage(text, tool_calls=calls, id=f"ai-{k}"), *results]


def long_turn(rounds: int, request: HumanMessage = REQUEST, thought: int = 3) -> list[BaseMessage]:
    history: list[BaseMessage] = [SYS, request]
    for k in range(rounds):
        history.extend(tool_round(k, thought))
    return history


@dataclass
class Call:
    """One strategy call of a replay: the history it got, its result, and the ids the
    summarizer had read (successful folds) by then."""

    history: list[BaseMessage]
    result: MemoryResult
    read: list[str]


def read_ids(summarizer: ScriptedSummarizer) -> list[str]:
    return [str(m.id) for batch in summarizer.batches for m in batch]


def recording(strategy: Any, failures: Sequence[bool] = ()) -> ScriptedSummarizer:
    summarizer = ScriptedSummarizer(failures)
    strategy.summarizer = summarizer
    return summarizer


def model_call_ends(history: Sequence[BaseMessage], in_flight: bool = False) -> list[int]:
    """Where an agent loop calls the model: before every AIMessage (so after the request and
    after each round's results). ``in_flight=True`` adds a call right after every AIMessage
    with tool calls, before its results (a view asked for mid-round)."""
    ends = []
    for i, m in enumerate(history):
        if isinstance(m, AIMessage) and i > 1:
            ends.append(i)
            if in_flight and m.tool_calls:
                ends.append(i + 1)
    return ends


def replay(
    strategy: Any, history: list[BaseMessage], ends: Sequence[int] | None = None
) -> list[Call]:
    """``strategy.apply`` at every model call of ``history``, threading the state."""
    summarizer = strategy.summarizer
    state: MemoryState | None = None
    calls = []
    for end in model_call_ends(history) if ends is None else ends:
        result = strategy.apply(history[:end], state)
        calls.append(Call(history[:end], result, read_ids(summarizer)))
        state = result.state
    return calls


def body_of(view: Sequence[BaseMessage]) -> list[BaseMessage]:
    return [m for m in view if not isinstance(m, SystemMessage)]


def shown_ids(history: Sequence[BaseMessage], view: Sequence[BaseMessage]) -> list[str]:
    """Ids of the history messages the view's body shows, a digest (TieredSummary's first tier,
    ToolDigest) standing for every message of its round."""
    rounds = {key_at(history, u.start): u for u in split_units(history)}
    out: list[str] = []
    for m in body_of(view):
        if is_digest(m):
            unit = rounds[str(m.id)[len(DIGEST_ID_PREFIX) :]]
            out.extend(str(history[i].id) for i in range(unit.start, unit.stop))
        else:
            out.append(str(m.id))
    return out


def check_call(strategy: Any, call: Call, request: HumanMessage, *, healthy: bool = True) -> None:
    """One call: a valid view within the budget, the request first and verbatim; at most one
    read per message; folded + shown + not_shown account for every message (and, while
    healthy, not_shown == 0: everything is shown or was summarized)."""
    view, report = call.result.messages, call.result.report
    assert is_valid(view), [str(f) for f in validate(view)]
    body = body_of(view)
    assert isinstance(body[0], HumanMessage) and body[0].content == request.content, body[0]
    cost = strategy.counter.count_messages(view)
    assert cost == report.tokens_after and cost <= report.budget <= strategy.config.max_tokens
    assert len(call.read) == len(set(call.read)), "a message was given to the summarizer twice"
    shown = set(shown_ids(call.history, view))
    unseen = [str(m.id) for m in call.history[1:] if str(m.id) not in shown | set(call.read)]
    assert len(unseen) == report.not_shown, (unseen, report.not_shown)
    if healthy:
        assert report.health == "healthy"
        assert not unseen, f"{len(unseen)} message(s) neither shown nor summarized: {unseen[:8]}"


def check_whole_rounds(summarizer: ScriptedSummarizer) -> None:
    """Every folded batch holds whole tool rounds: each AIMessage's results are in its batch."""
    for batch in summarizer.batches:
        answered = {m.tool_call_id for m in batch if isinstance(m, ToolMessage)}
        for m in batch:
            if isinstance(m, AIMessage):
                missing = [c["id"] for c in m.tool_calls if c["id"] not in answered]
                assert not missing, f"{m.id} folded without its results {missing}"
