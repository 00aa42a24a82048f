"""Retrieval's budget that follows the question (``past_tokens``): a question about the past
may spend more on its retrieved context, lent by the view's oldest verbatim turns for that
request only; the newest turns, the system message and the summary are never lent, the request
stays within its budget, and the state keeps every turn."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage, ToolMessage
from langgraph.store.memory import InMemoryStore

from langmem_ext import (
    ApproximateCounter,
    MemoryKey,
    Retrieval,
    SlidingWindow,
    TokenBudget,
    validate,
)
from langmem_ext.core.fold_config import SUMMARY_ID
from langmem_ext.core.shape import RETRIEVED_ID
from langmem_ext.retrieval import RetrievalConfig
from langmem_ext.retrieval.lending import KEEP_TURNS, conversation_start, cuts, lent_view

KEY = MemoryKey("acme", "ann", "t1")
COUNTER = ApproximateCounter()
FILLER = "we talked about the weather, the sea and the boats in the harbour"
CODES = [f"code{i} is {4000 + i}" for i in range(40)]


def chat(turns: int) -> list[BaseMessage]:
    """``turns`` user/assistant turns, each with a fact of its own."""
    out: list[BaseMessage] = []
    for i in range(turns):
        out += [
            HumanMessage(f"Please remember that my {CODES[i]}; {FILLER}.", id=f"h{i}"),
            AIMessage(f"Noted: your {CODES[i]}. {FILLER}.", id=f"a{i}"),
        ]
    return out


def retrieval(max_tokens: int = 1_200, **config: Any) -> Retrieval:
    return Retrieval(
        TokenBudget(max_tokens, counter=COUNTER),
        store=InMemoryStore(),
        ranking="bm25",
        config=RetrievalConfig(compact=False, **config),
        key=KEY,
    )


def ask(strategy: Retrieval, history: list[BaseMessage], question: str) -> Any:
    state = strategy.apply(history).state
    return strategy.apply([*history, HumanMessage(question, id="q")], state)


PAST = "what were all my codes, " + ", ".join(f"code{i}" for i in range(30)) + "?"


# -- the cut points --------------------------------------------------------------------------


def test_cuts_keep_the_system_message_the_summary_and_the_newest_turns() -> None:
    view: list[BaseMessage] = [
        SystemMessage("be brief", id="s"),
        HumanMessage("summary of earlier turns", id=SUMMARY_ID),
        AIMessage("a tail of an older turn", id="x"),
        *chat(4),
    ]
    assert conversation_start(view) == 2
    options = cuts(view, COUNTER)
    # in front of h0, h1, h2; never in front of h3 alone (h2 and h3 are the newest two turns)
    assert [view[c.at].id for c in options] == ["h0", "h1", "h2"]
    for c in options:
        assert c.tokens == sum(COUNTER.count_message(m) for m in view[2 : c.at])
    kept, cut = lent_view(view, options, options[0].tokens + 1)  # more than h0's cut frees
    assert cut == options[1]
    assert [m.id for m in kept] == ["s", SUMMARY_ID, "h1", "a1", "h2", "a2", "h3", "a3"]
    assert lent_view(view, options, 0) == (view, None)
    with pytest.raises(ValueError, match="frees"):
        lent_view(view, options, options[-1].tokens + 1)


def test_a_view_with_no_more_than_the_newest_turns_lends_nothing() -> None:
    assert cuts(chat(KEEP_TURNS), COUNTER) == []
    assert cuts([HumanMessage("hi", id="q")], COUNTER) == []
    assert cuts([], COUNTER) == []


# -- Retrieval: when it lends, and what the request then holds -------------------------------


def test_a_question_about_the_past_gets_a_larger_context_within_the_request_budget() -> None:
    history = chat(40)
    strategy = retrieval(1_200, max_retrieved_tokens=200, past_tokens=400)
    result = ask(strategy, history, PAST)
    report = result.report
    assert 200 < report.retrieved_tokens <= 400
    assert report.lent > 0 and not report.prefix_kept
    assert COUNTER.count_messages(result.messages) == report.tokens_after <= 1_200
    assert validate(result.messages) == []
    ids = [m.id for m in result.messages]
    assert ids[-2:] == [RETRIEVED_ID, "q"] and ids[-4:-2] == ["h39", "a39"]  # newest turn kept
    # without lending, the same question's context stays within max_retrieved_tokens and
    # the view shows the turns that were lent
    fixed = ask(retrieval(1_200, max_retrieved_tokens=200), history, PAST)  # off by default
    assert fixed.report.retrieved_tokens <= 200 and fixed.report.lent == 0
    assert len(fixed.report.retrieved) < len(report.retrieved)
    shown = {m.id for m in fixed.messages}
    lent = shown - set(ids)
    assert len(lent) == report.lent
    assert report.messages_after == fixed.report.messages_after - report.lent


def test_lending_leaves_the_state_alone_and_the_next_request_shows_the_turns_again() -> None:
    history = chat(40)
    strategy = retrieval(1_200, max_retrieved_tokens=200, past_tokens=400)
    state = strategy.apply(history).state
    plain = strategy.apply([*history, HumanMessage("thanks, that is all", id="q0")], state)
    asked = strategy.apply([*history, HumanMessage(PAST, id="q")], state)
    assert asked.report.lent > 0
    assert asked.state == strategy.apply([*history, HumanMessage(PAST, id="q")], state).state
    after = [*history, HumanMessage(PAST, id="q"), AIMessage("They were ...", id="r")]
    nxt = strategy.apply([*after, HumanMessage("thanks, that is all", id="q2")], asked.state)
    assert nxt.report.lent == 0
    # the turns lent on the question are shown again (the window moved by one turn at most)
    lent_ids = {m.id for m in plain.messages} - {m.id for m in asked.messages} - {"q0"}
    assert lent_ids and len(lent_ids - {m.id for m in nxt.messages}) <= 2


def test_small_talk_and_the_defaults_never_lend() -> None:
    history = chat(40)
    talk = ask(
        retrieval(1_200, max_retrieved_tokens=200, past_tokens=400),
        history,
        "what is the capital of Australia?",
    )
    assert talk.report.lent == 0 and talk.report.retrieved_tokens == 0
    for off in (retrieval(1_200, max_retrieved_tokens=200, past_tokens=0), retrieval(1_200)):
        assert off.config.past_tokens == off.max_retrieved_tokens  # nothing lent
        result = ask(off, history, PAST)
        assert result.report.lent == 0
        assert 0 < result.report.retrieved_tokens <= off.max_retrieved_tokens


def test_an_explicit_past_tokens_is_the_cap() -> None:
    history = chat(40)
    strategy = retrieval(1_500, max_retrieved_tokens=150, past_tokens=700)
    result = ask(strategy, history, PAST)
    assert 400 < result.report.retrieved_tokens <= 700  # more than the default (300) allows
    assert COUNTER.count_messages(result.messages) == result.report.tokens_after <= 1_500


def test_past_tokens_is_checked_with_a_fix() -> None:
    with pytest.raises(ValueError, match=r"past_tokens \(100\) must be at least"):
        retrieval(1_200, max_retrieved_tokens=200, past_tokens=100)
    with pytest.raises(ValueError, match="past_tokens"):
        RetrievalConfig(past_tokens=-1)
    with pytest.raises(ValueError, match="has no max_tokens"):
        Retrieval(
            SlidingWindow(10),
            store=InMemoryStore(),
            config=RetrievalConfig(past_tokens=900),
            key=KEY,
        )
    window = Retrieval(SlidingWindow(10), store=InMemoryStore(), key=KEY)
    assert window.config.past_tokens == window.max_retrieved_tokens  # nothing to lend from


# -- the property: any view, any question: valid, within budget, newest turns kept ------------


def _history(draw: Any) -> list[BaseMessage]:
    out: list[BaseMessage] = []
    for i in range(draw(st.integers(6, 30))):
        out.append(
            HumanMessage(f"my {CODES[i]} " + "words " * draw(st.integers(0, 30)), id=f"h{i}")
        )
        if draw(st.booleans()):
            call = {"name": "look", "args": {"q": f"code{i}"}, "id": f"c{i}"}
            out.append(AIMessage("", tool_calls=[call], id=f"a{i}c"))
            out.append(
                ToolMessage("result " * draw(st.integers(1, 40)), tool_call_id=f"c{i}", id=f"t{i}")
            )
        out.append(AIMessage(f"Noted {i}. " + "more " * draw(st.integers(0, 40)), id=f"a{i}"))
    return out


@settings(max_examples=40, deadline=None)
@given(
    data=st.data(),
    inner=st.integers(500, 2_500),
    share=st.integers(50, 400),
    system=st.booleans(),
)
def test_lending_keeps_the_request_valid_within_budget_and_its_newest_turns(
    data: Any, inner: int, share: int, system: bool
) -> None:
    history = _history(data.draw)
    if system:
        history.insert(0, SystemMessage("be brief", id="s"))
    share = min(share, inner // 3)
    strategy = retrieval(inner, max_retrieved_tokens=share, past_tokens=2 * share)
    question = data.draw(st.sampled_from([PAST, "what was my code3 and my code5?", "hi there"]))
    plain = ask(retrieval(inner, max_retrieved_tokens=share), history, question)
    result = ask(strategy, history, question)
    report = result.report
    assert COUNTER.count_messages(result.messages) == report.tokens_after <= inner
    assert not [f for f in validate(result.messages) if f.severity == "error"]
    assert report.retrieved_tokens <= 2 * share
    assert report.retrieved_tokens <= share or report.lent > 0
    ids = [m.id for m in result.messages]
    plain_ids = [m.id for m in plain.messages if m.id != RETRIEVED_ID]
    if system:
        assert ids[0] == "s"
    # what was lent is a run of the plain view's oldest conversation messages: the rest of the
    # plain view (its newest turns among them) is all there, in order
    start = int(system)
    assert [i for i in ids if i != RETRIEVED_ID] == plain_ids[:start] + plain_ids[
        start + report.lent :
    ]
    humans = [m.id for m in plain.messages if isinstance(m, HumanMessage) and m.id != RETRIEVED_ID]
    assert set(humans[-KEEP_TURNS:]) <= set(ids)
