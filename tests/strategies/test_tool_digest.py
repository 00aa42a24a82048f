"""Tool-round digests, with no model call.

Completed tool rounds older than the newest ``keep_rounds`` are shown as one digest message each
(tool names, arguments, each text clipped to about ``observation_tokens`` with the clip marker),
computed once and kept in ``MemoryState.digests``; alone (:class:`ToolDigest`) and as the first
tier of :class:`TieredSummary`, whose summarizer still reads the original rounds.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from agent_turns import (
    REQUEST,
    SYS,
    Call,
    long_turn,
    model_call_ends,
    read_ids,
    shown_ids,
    tool_round,
)
from fakes import ScriptedSummarizer, SummaryModel, words
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage

from langmem_ext import (
    CallableCounter,
    MemoryState,
    TieredSummary,
    ToolDigest,
    is_valid,
    validate,
)
from langmem_ext.core import digest as digest_module
from langmem_ext.core.digest import DIGEST_ID_PREFIX, digest_text, is_digest
from langmem_ext.core.messages import Unit, iter_units_reverse


def counter() -> CallableCounter:
    return CallableCounter(words)


def big_round(k: int) -> list[BaseMessage]:
    """Round ``k`` of the long-turn helper with outputs 8x longer (120-500 words), as file
    reads and test runs are."""
    out: list[BaseMessage] = []
    for m in tool_round(k):
        if isinstance(m, ToolMessage):
            m = m.model_copy(update={"content": " ".join([str(m.content)] * 8)})
        out.append(m)
    return out


def big_turn(rounds: int, request: HumanMessage = REQUEST) -> list[BaseMessage]:
    return [SYS, request, *(m for k in range(rounds) for m in big_round(k))]


def run(strategy: Any, history: list[BaseMessage], ends: list[int] | None = None) -> list[Call]:
    """``strategy.apply`` before every model call, threading the state through JSON (as a
    checkpointer would)."""
    summarizer = getattr(strategy, "summarizer", None)
    state: MemoryState | None = None
    calls = []
    for end in model_call_ends(history) if ends is None else ends:
        result = strategy.apply(history[:end], state)
        read = read_ids(summarizer) if isinstance(summarizer, ScriptedSummarizer) else []
        calls.append(Call(history[:end], result, read))
        state = MemoryState.from_json(result.state.to_json())
    return calls


def represented(call: Call) -> list[str]:
    """Ids of the history messages the view shows, a digest standing for its whole round."""
    return shown_ids(call.history, call.result.messages)


# --------------------------------------------------------------------------------------------
# the digest itself


def round_unit(messages: list[BaseMessage]) -> Unit:
    return next(iter_units_reverse(messages))


def test_digest_names_every_call_its_arguments_and_clips_each_result_with_the_marker() -> None:
    """A round with three parallel calls, one failed: the digest says the count, each call's
    name and arguments, each result under its tool's name (the failure marked), the assistant's
    words; every text over the limit ends with the package's clip marker."""
    ai = AIMessage(
        "I will read the two modules and run the failing test. " * 8,
        tool_calls=[
            {"name": "read_file", "args": {"path": "billing/charge.py"}, "id": "a"},
            {"name": "read_file", "args": {"path": "billing/refund.py"}, "id": "b"},
            {"name": "run_tests", "args": {"k": "test_refund", "verbose": True}, "id": "c"},
        ],
        id="ai",
    )
    results = [
        ToolMessage("def charge(amount):\n    " + "x = 1\n    " * 300, tool_call_id="a", id="r1"),
        ToolMessage("def refund(): pass", tool_call_id="b", name="read_file", id="r2"),
        ToolMessage(
            "FAILED test_refund - AssertionError " * 40, tool_call_id="c", status="error", id="r3"
        ),
    ]
    text = digest_text(round_unit([HumanMessage("go"), ai, *results]), 12, counter().count_text)
    lines = text.splitlines()
    assert lines[0] == "[langmem_ext digest of an earlier tool round: 3 calls, outputs clipped]"
    assert (
        lines[1].startswith("I will read the two modules") and "clipped by langmem_ext" in lines[1]
    )
    assert '→ read_file({"path": "billing/charge.py"})' in lines
    assert '→ run_tests({"k": "test_refund", "verbose": true})' in lines
    assert any(x.startswith("← read_file: def charge(amount): x = 1") for x in lines)
    assert "← read_file: def refund(): pass" in lines  # short: verbatim, no marker
    failed = [x for x in lines if x.startswith("← run_tests (error): FAILED test_refund")]
    assert failed and failed[0].endswith("characters clipped by langmem_ext]")
    assert sum("clipped by langmem_ext" in x for x in lines) == 3  # words, charge.py, the test
    # every clipped text keeps about observation_tokens words (12, plus the marker's)
    for line in lines[1:]:
        body = line.split("[...")[0]
        assert len(body.split()) <= 12 + 3, line


def test_digest_settings_are_refused_with_the_parameter_named() -> None:
    with pytest.raises(ValueError, match="keep_rounds must be an integer >= 1"):
        ToolDigest(1_000, keep_rounds=0)
    with pytest.raises(ValueError, match="observation_tokens must be an integer >= 4"):
        ToolDigest(1_000, observation_tokens=2)
    with pytest.raises(ValueError, match=r"trigger_tokens \(2,000\) must not exceed max_tokens"):
        ToolDigest(1_000, trigger_tokens=2_000)
    with pytest.raises(ValueError, match="keep_rounds must be an integer >= 1"):
        TieredSummary(1_000, summarizer=SummaryModel(), keep_rounds=0)


# --------------------------------------------------------------------------------------------
# ToolDigest alone: a long agent turn with no summarizer


def test_tool_digest_keeps_a_300_round_turn_valid_within_budget_and_mostly_shown(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """300 rounds at 8,000 tokens (over 10x), no summarizer: every view is valid, within
    budget, starts with the request verbatim, shows the newest 3 rounds verbatim and everything
    in history order; older rounds are digests; the prefix is kept on most calls until digests
    fill the budget; a digest is made once per round over the whole run."""
    made: list[str] = []
    real = digest_module.digest_text

    def spy(unit: Unit, tokens: int, count: Any) -> str:
        made.append(str(unit.messages[0].id))
        return real(unit, tokens, count)

    strategy = ToolDigest(8_000, counter=counter())
    history = big_turn(300)
    assert strategy.counter.count_messages(history) > 10 * 8_000
    monkeypatch.setattr(digest_module, "digest_text", spy)
    calls = run(strategy, history)
    assert len(made) == len(set(made)), "a round was digested twice"
    for call in calls:
        view, report = call.result.messages, call.result.report
        assert is_valid(view), [str(f) for f in validate(view)]
        assert view[1].content == REQUEST.content and view[1].id == REQUEST.id
        assert strategy.counter.count_messages(view) == report.tokens_after <= 8_000
        ids = represented(call)
        order = {str(m.id): i for i, m in enumerate(call.history)}
        assert [order[i] for i in ids] == sorted(order[i] for i in ids)
        verbatim = [m for m in view if isinstance(m, AIMessage) and not is_digest(m)]
        rounds_done = sum(1 for m in call.history if isinstance(m, AIMessage))
        assert len(verbatim) >= min(3, rounds_done), "fewer than keep_rounds rounds verbatim"
        assert len(call.result.state.digests) == report.digested  # only the view's digests
    # until digests alone fill the budget nothing is cut, and the prefix holds between the
    # digest point's moves; after that the oldest digests are cut as TokenBudget cuts
    whole = [c for c in calls if c.result.report.messages_dropped == 0]
    assert len(whole) > 50
    assert max(c.result.report.digested for c in whole) > 40
    held = sum(c.result.report.prefix_kept for c in whole[1:])
    assert held > 2 * len(whole) // 3, f"prefix kept on {held} of {len(whole)} uncut calls"
    last = calls[-1]
    assert last.result.report.digested > 50  # the budget holds ~77 digests, ~24 whole rounds


def test_tool_digest_reads_stored_digests_back_instead_of_recomputing_them() -> None:
    """A digest comes from the state when it is there: a stored text (here altered) is what the
    view shows, and the new state keeps only the digests of its view."""
    strategy = ToolDigest(1_500, keep_rounds=2, counter=counter())
    history = big_turn(12)
    first = strategy.apply(history)
    assert first.report.digested > 0
    key, text = first.state.digests[0]
    altered = MemoryState.from_dict(
        {**first.state.to_dict(), "digests": [[key, text + " (stored)"], *first.state.digests[1:]]}
    )
    again = strategy.apply(history, altered)
    shown = [m for m in again.messages if is_digest(m)]
    assert shown[0].content == text + " (stored)"
    assert dict(again.state.digests)[key] == text + " (stored)"
    assert {k for k, _ in again.state.digests} == {
        str(m.id)[len(DIGEST_ID_PREFIX) :] for m in shown
    }


def test_tool_digest_never_digests_the_newest_rounds_a_call_in_flight_or_short_chat() -> None:
    """Views asked for mid-round too: the trailing call in flight and the newest round are
    verbatim; a chat with no tool rounds is cut like TokenBudget and never digested."""
    strategy = ToolDigest(1_200, keep_rounds=1, counter=counter())
    history = long_turn(40)
    calls = run(strategy, history, model_call_ends(history, in_flight=True))
    for call in calls:
        tail = call.history[-1]
        if isinstance(tail, AIMessage):  # in flight: shown as it is
            assert call.result.messages[-1] is tail or call.result.messages[-1].id == tail.id
        assert not is_digest(call.result.messages[-1])
    chat: list[BaseMessage] = [SYS]
    for k in range(60):
        chat += [HumanMessage(f"question {k} " + "word " * 30), AIMessage("answer " * 30)]
    result = ToolDigest(500, counter=counter()).apply(chat)
    assert result.report.digested == 0 and not any(is_digest(m) for m in result.messages)
    assert result.report.tokens_after <= 500


def test_tool_digest_apply_and_aapply_agree() -> None:
    strategy = ToolDigest(2_000, counter=counter())
    history = long_turn(60)
    state_sync: MemoryState | None = None
    state_async: MemoryState | None = None
    for end in model_call_ends(history):
        a = strategy.apply(history[:end], state_sync)
        b = asyncio.run(strategy.aapply(history[:end], state_async))
        assert [m.model_dump() for m in a.messages] == [m.model_dump() for m in b.messages]
        assert a.state == b.state and a.report == b.report
        state_sync, state_async = a.state, b.state


# --------------------------------------------------------------------------------------------
# TieredSummary: digests as the first tier


def tiered(max_tokens: int, **kwargs: Any) -> tuple[TieredSummary, ScriptedSummarizer]:
    strategy = TieredSummary(
        max_tokens,
        summarizer=SummaryModel(),
        counter=counter(),
        **{"max_summary_tokens": 200, "observation_tokens": 8, **kwargs},
    )
    summarizer = ScriptedSummarizer()
    strategy.summarizer = summarizer  # type: ignore[assignment]
    return strategy, summarizer


def test_tiered_digests_first_and_its_summarizer_reads_the_original_rounds() -> None:
    """300 rounds at 8,000 tokens: views hold digests; the summarizer is called less often than
    with digests off, every batch it reads is the original messages (never a digest or a clip),
    each message at most once; and, at every call, every message is shown (verbatim or as part
    of a digest) or was summarized."""
    history = long_turn(300)
    strategy, summarizer = tiered(8_000)
    calls = run(strategy, history)
    plain, plain_summarizer = tiered(8_000, keep_rounds=None)
    run(plain, history)
    assert 0 < summarizer.calls < plain_summarizer.calls
    originals = {str(m.id): m for m in history}
    for batch in summarizer.batches:
        for m in batch:
            assert not is_digest(m) and m is originals[str(m.id)]
    for call in calls:
        assert len(call.read) == len(set(call.read))
        shown = set(represented(call))
        unseen = [str(m.id) for m in call.history[1:] if str(m.id) not in shown | set(call.read)]
        assert not unseen and call.result.report.not_shown == 0, unseen[:5]
        assert call.result.messages[1].content == REQUEST.content
    assert max(c.result.report.digested for c in calls) > 10


def test_tiered_never_clips_a_long_pinned_request() -> None:
    """A 3,000-character request (over ``truncate_chars``) in a long turn: once its turn's
    rounds are folded it is pinned, and stays verbatim (tier 1 never clips it)."""
    request = HumanMessage("Port the billing module. " + "Keep refunds exact. " * 150, id="req")
    history = long_turn(200, request=request)
    strategy, summarizer = tiered(8_000, truncate_chars=200)
    calls = run(strategy, history)
    assert summarizer.calls > 0
    pinned = [c for c in calls if c.result.state.folded > 0]
    assert pinned
    for call in calls:
        assert call.result.messages[1].content == request.content


def test_tiered_digest_point_moves_with_a_rewrite_removal() -> None:
    """Rewrite mode (the surfaces remove folded messages): the digest point moves down with the
    removed messages, so the next call sees the same digests."""
    from langmem_ext.core.transitions import removals_for_rewrite

    strategy, _ = tiered(3_000)
    history = long_turn(120)
    state = None
    for end in model_call_ends(history):
        result = strategy.apply(history[:end], state)
        state = result.state
        if state.folded and state.digested > state.folded + 5:
            break
    assert state is not None and state.folded and state.digested
    current = history[:end]
    ids, rebased = removals_for_rewrite(current, state, strategy.counter)
    kept = [m for m in current if str(m.id) not in set(ids)]
    assert rebased.digested == state.digested - len(ids)
    before = [m.content for m in result.messages if is_digest(m)]
    after = strategy.apply(kept, rebased)
    assert [m.content for m in after.messages if is_digest(m)][: len(before)] == before
    assert not after.report.history_rewritten


def test_a_digest_stands_for_a_whole_round_with_its_parallel_results() -> None:
    """No result of a digested round is left verbatim in the view, parallel ones included."""
    history: list[BaseMessage] = [SYS, REQUEST]
    for k in range(20):
        history.extend(big_round(5 + 11 * k))  # 3 parallel calls when k is even
    result = ToolDigest(4_000, keep_rounds=2, counter=counter()).apply(history)
    view = result.messages
    assert is_valid(view) and result.report.digested > 5
    digested = {str(m.id)[len(DIGEST_ID_PREFIX) :] for m in view if is_digest(m)}
    for m in view:
        if isinstance(m, ToolMessage):
            assert f"ai-{m.tool_call_id.split('-')[1]}" not in digested
    assert any(c.count("→ read_file") == 3 for c in (str(m.content) for m in view if is_digest(m)))
