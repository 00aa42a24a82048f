"""SummaryBuffer, Compacting and TieredSummary with exact messages and a one-token-per-word counter.

Figures used below: the summary block is ``<conversation_summary>`` + an 8-word title line +
the summary + ``</conversation_summary>``, so with the counter here it costs 10 words plus the
summary's own words.
"""

from __future__ import annotations

import asyncio
import itertools
import re
from typing import Any

import pytest
from fakes import words
from langchain_core.messages import (
    AIMessage,
    BaseMessage,
    HumanMessage,
    SystemMessage,
    ToolMessage,
)

from langmem_ext import (
    CallableCounter,
    Compacting,
    FoldPolicy,
    MemoryBudgetExceeded,
    MemoryState,
    Summarizer,
    SummaryBuffer,
    TieredSummary,
    validate,
)


def W() -> CallableCounter:
    return CallableCounter(words)


def H(n: int, mid: str) -> HumanMessage:
    return HumanMessage(" ".join(f"{mid}.{i}" for i in range(n)), id=mid)


def A(n: int, mid: str) -> AIMessage:
    return AIMessage(" ".join(f"{mid}.{i}" for i in range(n)), id=mid)


SYS = SystemMessage("sys0 sys1", id="sys")


class FakeSummarizer:
    """Records what each fold read; answers "summary one", "summary two", ...; can fail."""

    NAMES = ("one", "two", "three", "four", "five", "six", "seven", "eight")

    def __init__(self, fail: int = 0) -> None:
        self.prompts: list[str] = []
        self.fail = fail

    def __call__(self, prompt: list[BaseMessage]) -> str:
        body = str(prompt[-1].content)
        if self.fail:
            self.fail -= 1
            raise ValueError("summarizer down")
        self.prompts.append(body)
        return f"summary {self.NAMES[len(self.prompts) - 1]}"

    def read(self, i: int) -> list[str]:
        """The message ids whose words fold ``i`` read, in order of first appearance."""
        block = re.search(r"<transcript>\n(.*?)\n</transcript>", self.prompts[i], re.S)
        assert block is not None
        return list(dict.fromkeys(re.findall(r"\b([a-z]\d+)\.\d+", block.group(1))))


def conversation(turns: int) -> list[BaseMessage]:
    history: list[BaseMessage] = [SYS]
    for i in range(turns):
        history += [H(9, f"h{i}"), A(9, f"a{i}")]
    return history


def grow(strategy: Any, history: list[BaseMessage], start: int = 2) -> list[Any]:
    """Apply the strategy to every prefix ending on a human message, carrying the state."""
    results, state = [], None
    for end in range(start, len(history) + 1, 2):
        result = strategy.apply(history[:end], state)
        results.append(result)
        state = result.state
    return results


def test_summary_buffer_folds_only_over_max_and_down_to_target() -> None:
    fake = FakeSummarizer()
    strategy = SummaryBuffer(
        60, summarizer=fake, max_summary_tokens=20, counter=W(), min_messages=1
    )
    # the default target is half the trigger
    assert (strategy.config.trigger_tokens, strategy.config.target_tokens) == (60, 30)
    history = conversation(4)
    results = grow(strategy, history)
    # 2 + 9 * 7 = 65 > 60 at the 4th human turn (h3): fold everything that does not fit
    # target 30 - system 2 - summary allowance (20 + 10) < 0 tokens: only h3 (required) stays
    assert [r.report.folded for r in results] == [0, 0, 0, 6]
    assert fake.read(0) == ["h0", "a0", "h1", "a1", "h2", "a2"]
    last = results[-1]
    assert [m.id for m in last.messages] == ["sys", "h3"]
    assert last.messages[0].content == (
        "sys0 sys1\n\n<conversation_summary>\nSummary of the earlier part of this conversation:"
        "\nsummary one\n</conversation_summary>"
    )
    assert last.report.tokens_after == 2 + 10 + 2 + 9
    assert (last.state.folded, last.state.folded_key, last.state.folds) == (6, "a2", 1)
    assert last.state.sections == {"conversation": "summary one"}
    assert last.report.summary_tokens == 12 and last.report.health == "healthy"
    assert [r.report.prefix_kept for r in results] == [False, True, True, False]
    assert validate(last.messages) == []


def test_the_previous_summary_is_in_the_next_fold_and_nothing_is_folded_twice() -> None:
    fake = FakeSummarizer()
    strategy = SummaryBuffer(
        60, summarizer=fake, max_summary_tokens=20, counter=W(), min_messages=1
    )
    results = grow(strategy, conversation(12))
    assert len(fake.prompts) >= 3
    assert "<previous_summary>\n(none yet)\n</previous_summary>" in fake.prompts[0]
    for i in range(1, len(fake.prompts)):
        assert f"<previous_summary>\nsummary {FakeSummarizer.NAMES[i - 1]}\n" in fake.prompts[i]
    seen = [mid for i in range(len(fake.prompts)) for mid in fake.read(i)]
    assert len(seen) == len(set(seen))  # each message folded exactly once
    final = results[-1].state
    folded_ids = [m.id for m in conversation(12)[1 : 1 + final.folded]]
    assert seen == folded_ids
    for r in results:
        assert r.report.tokens_after <= 60 and validate(r.messages) == []
        assert r.messages[-1].id == f"h{len(results[: results.index(r)])}"  # newest human last


def test_between_folds_the_view_only_grows_at_the_end() -> None:
    strategy = SummaryBuffer(
        60, summarizer=FakeSummarizer(), max_summary_tokens=20, counter=W(), min_messages=1
    )
    results = grow(strategy, conversation(12))
    for before, after in itertools.pairwise(results):
        if after.report.folded == 0:
            assert after.messages[: len(before.messages)] == before.messages
            assert after.report.prefix_kept


def test_summary_as_a_marked_human_message() -> None:
    strategy = SummaryBuffer(
        60,
        summarizer=FakeSummarizer(),
        max_summary_tokens=20,
        counter=W(),
        min_messages=1,
        policy=FoldPolicy(placement="human"),
    )
    last = grow(strategy, conversation(4))[-1]
    assert [type(m).__name__ for m in last.messages] == [
        "SystemMessage",
        "HumanMessage",
        "HumanMessage",
    ]
    assert last.messages[0] is SYS and last.messages[1].id == "langmem-ext-summary"
    assert "summary one" in str(last.messages[1].content)
    assert W().count_messages(last.messages) <= 60 and validate(last.messages) == []


def test_a_failed_fold_loses_nothing_and_is_retried_after_the_backoff() -> None:
    now = [1000.0]
    fake = FakeSummarizer(fail=1)
    health: list[tuple[str, str]] = []
    strategy = SummaryBuffer(
        60,
        summarizer=Summarizer(fake, max_summary_tokens=20, counter=W(), max_attempts=1),
        counter=W(),
        min_messages=1,
        policy=FoldPolicy(
            retry_initial=2.0,
            clock=lambda: now[0],
            on_health_changed=lambda old, new: health.append((old, new)),
        ),
    )
    history = conversation(6)
    state = grow(strategy, history[:8])[-1].state  # the first fold (at h3) fails
    assert (state.health, state.failures, state.folded, state.retry_at) == (
        "retrying",
        1,
        0,
        1002.0,
    )
    assert state.last_error == "SummarizerError: summarizing the 'conversation' section " + (
        "failed after 1 attempt(s): ValueError: summarizer down"
    )
    degraded = strategy.apply(history[:10], state)  # before retry_at: no new attempt
    assert fake.prompts == [] and degraded.state.folded == 0
    view = degraded.messages
    assert W().count_messages(view) <= 60 and validate(view) == []
    assert view[-1].id == "h4" and degraded.report.not_shown > 0
    assert f"{degraded.report.not_shown} earlier message(s)" in str(view[0].content)
    assert "not shown and not yet summarized; the summarizer is retrying" in str(view[0].content)
    now[0] = 1003.0  # the backoff has passed: the whole backlog is folded at once
    healed = strategy.apply(history[:12], degraded.state)
    assert healed.state.health == "healthy" and healed.state.folded > 0
    assert fake.read(0)[0] == "h0" and healed.report.not_shown == 0
    assert health == [("healthy", "retrying"), ("retrying", "healthy")]


def test_health_degrades_after_repeated_failures_and_callbacks_cannot_break_a_turn() -> None:
    now = [0.0]

    def broken(old: Any, new: Any) -> None:
        raise RuntimeError("callback bug")

    strategy = SummaryBuffer(
        60,
        summarizer=Summarizer(FakeSummarizer(fail=99), max_summary_tokens=20, max_attempts=1),
        counter=W(),
        min_messages=1,
        policy=FoldPolicy(
            degrade_after=2,
            retry_initial=1.0,
            clock=lambda: now[0],
            on_health_changed=broken,
            on_summary_updated=broken,
        ),
    )
    history = conversation(8)
    state: MemoryState | None = None
    seen: list[str] = []
    for end in range(8, 18, 2):
        now[0] += 10
        result = strategy.apply(history[:end], state)
        state = result.state
        seen.append(state.health)
        assert result.messages[-1].id == history[end - 1].id
    assert seen[:2] == ["retrying", "degraded"] and state is not None and state.folded == 0
    assert state.retry_at is not None and state.retry_at - now[0] <= 300


def test_overflow_error_raises_memory_budget_exceeded_with_numbers() -> None:
    strategy = SummaryBuffer(
        40,
        summarizer=FakeSummarizer(),
        max_summary_tokens=16,
        counter=W(),
        policy=FoldPolicy(overflow="error"),
    )
    with pytest.raises(MemoryBudgetExceeded) as info:
        strategy.apply([SYS, H(80, "huge")])
    assert info.value.needed == 80 and info.value.max_tokens == 40


def test_overflow_truncate_summary_ends_by_clipping_the_newest_message_within_budget() -> None:
    strategy = SummaryBuffer(40, summarizer=FakeSummarizer(), max_summary_tokens=16, counter=W())
    result = strategy.apply([SYS, H(80, "huge")])
    assert W().count_messages(result.messages) <= 40
    assert "clipped by langmem_ext" in str(result.messages[-1].content)
    assert result.report.clipped == ("huge",)


def test_compacting_calls_no_model_until_the_budget_is_passed() -> None:
    fake = FakeSummarizer()
    strategy = Compacting(200, summarizer=fake, counter=W(), min_messages=1)
    # budget 200 * (1 - 0.15) = 170; a fold goes down to 100 with a 20-token summary budget
    results = grow(strategy, conversation(20))
    first_fold = next(i for i, r in enumerate(results) if r.report.folded)
    assert first_fold > 0 and all(not r.report.folded for r in results[:first_fold])
    assert results[first_fold - 1].report.tokens_after <= 170
    assert results[first_fold].report.tokens_after <= 100
    assert fake.prompts and all(r.report.tokens_after <= 170 for r in results)


def test_tiered_summary_clips_old_tool_output_first_and_summarizes_the_original() -> None:
    fake = FakeSummarizer()
    strategy = TieredSummary(
        400,
        summarizer=fake,
        counter=W(),
        max_summary_tokens=30,
        truncate_chars=300,
        min_messages=1,
    )
    big = " ".join(f"r0.{i}" for i in range(150))  # about 900 characters
    history: list[BaseMessage] = [
        SYS,
        H(5, "h0"),
        AIMessage("", tool_calls=[{"name": "fetch", "args": {}, "id": "k"}], id="c0"),
        ToolMessage(big, tool_call_id="k", id="t0"),
        A(5, "a0"),
        H(40, "h1"),
    ]
    # 2 + 5 + 1 + 150 + 5 + 40 = 203 > tier 1 (200): the old tool output is clipped, no model call
    result = strategy.apply(history)
    tool = next(m for m in result.messages if isinstance(m, ToolMessage))
    assert str(tool.content).endswith("characters clipped by langmem_ext]")
    assert fake.prompts == [] and result.report.tokens_after < 200
    assert validate(result.messages) == [] and result.state.clipped > 0
    # past tier 2 (340): fold, and the summarizer reads the unclipped original
    more = list(history)
    state = result.state
    for i in range(2, 8):
        more += [A(40, f"a{i - 1}"), H(40, f"h{i}")]
        result = strategy.apply(more, state)
        state = result.state
        assert result.report.tokens_after <= 400 and validate(result.messages) == []
    assert state.folds >= 1
    assert "r0.149" in fake.prompts[0]


def test_aapply_gives_the_same_result_as_apply() -> None:
    async def afake(prompt: list[BaseMessage]) -> str:
        return "summary one"

    sync = SummaryBuffer(60, summarizer=lambda p: "summary one", max_summary_tokens=20, counter=W())
    async_ = SummaryBuffer(60, summarizer=afake, max_summary_tokens=20, counter=W())
    history = conversation(5)
    assert sync.apply(history) == asyncio.run(async_.aapply(history))


def test_a_cancelled_aapply_leaves_the_callers_state_usable() -> None:
    async def slow(prompt: list[BaseMessage]) -> str:
        await asyncio.sleep(5)
        return "late"

    strategy = SummaryBuffer(60, summarizer=slow, max_summary_tokens=20, counter=W())
    history = conversation(5)
    state = strategy.apply(history[:3]).state
    snapshot = state.to_json()

    async def run() -> None:
        with pytest.raises(asyncio.TimeoutError):
            await asyncio.wait_for(strategy.aapply(history, state), timeout=0.05)

    asyncio.run(run())
    assert state.to_json() == snapshot
    quick = SummaryBuffer(
        60, summarizer=lambda p: "summary one", max_summary_tokens=20, counter=W()
    )
    assert quick.apply(history, state).state.folds == 1


def test_removing_folded_messages_from_the_history_keeps_the_summary() -> None:
    strategy = SummaryBuffer(
        60, summarizer=FakeSummarizer(), max_summary_tokens=20, counter=W(), min_messages=1
    )
    history = conversation(4)
    result = grow(strategy, history)[-1]
    assert result.state.folded == 6
    rewritten = [SYS, history[7]]  # what a rewrite-mode node keeps: the unfolded part
    again = strategy.apply(rewritten, result.state)
    assert again.report.history_rewritten and again.state.folded == 0
    assert again.messages == result.messages and again.state.sections == result.state.sections


def test_configuration_errors_name_the_numbers() -> None:
    with pytest.raises(ValueError, match=r"target_tokens \(50\) must be above max_summary_tokens"):
        SummaryBuffer(100, summarizer=FakeSummarizer(), max_summary_tokens=50, target_tokens=50)
    with pytest.raises(ValueError, match="tier1_ratio"):
        TieredSummary(100, summarizer=FakeSummarizer(), tier1_ratio=0.9, tier2_ratio=0.5)
    with pytest.raises(ValueError, match="summary_ratio"):
        Compacting(100, summarizer=FakeSummarizer(), summary_ratio=0.6)
    with pytest.raises(ValueError, match="overflow must be"):
        SummaryBuffer(
            100,
            summarizer=FakeSummarizer(),
            max_summary_tokens=20,
            policy=FoldPolicy(overflow="drop"),  # type: ignore[arg-type]
        )


@pytest.mark.parametrize("policy", ["truncate_summary", "truncate_oldest", "error"])
def test_every_overflow_policy_terminates(policy: str) -> None:
    # the case that loops forever elsewhere: dropping the oldest message never makes a single
    # oversized newest message fit. Here each policy ends in a fixed number of steps.
    strategy = SummaryBuffer(
        60,
        summarizer=FakeSummarizer(),
        max_summary_tokens=20,
        counter=W(),
        min_messages=3,
        policy=FoldPolicy(overflow=policy),  # type: ignore[arg-type]
    )
    history = [*conversation(6), H(500, "huge")]
    if policy == "error":
        with pytest.raises(MemoryBudgetExceeded):
            strategy.apply(history)
    else:
        result = strategy.apply(history)
        assert W().count_messages(result.messages) <= 60
        assert result.messages[-1].id == "huge" and result.report.clipped == ("huge",)
    # a system message larger than the whole budget cannot be helped: a clear error, at once
    too_big = [SystemMessage(" ".join(["rule"] * 100), id="sys"), H(3, "q")]
    with pytest.raises(MemoryBudgetExceeded, match=r"does not fit|do not fit"):
        strategy.apply(too_big)


def test_truncate_summary_shortens_the_summary_in_the_view_only() -> None:
    long_summary = " ".join(f"fact{i}" for i in range(40))
    # the canned answer shares no word with the conversation: summary checks off
    summarizer = Summarizer(
        lambda p: long_summary, max_summary_tokens=40, counter=W(), validate=None
    )
    strategy = SummaryBuffer(80, summarizer=summarizer, counter=W(), min_messages=1)
    history = conversation(5)
    state = grow(strategy, history)[-1].state
    assert state.sections["conversation"] == long_summary  # the state keeps it whole
    squeezed = strategy.apply([*history, H(50, "long")], state)
    assert W().count_messages(squeezed.messages) <= 80
    assert "summary shortened by langmem_ext" in str(squeezed.messages[0].content)
    assert squeezed.state.sections["conversation"] == long_summary


def test_view_is_read_only_it_never_calls_the_summarizer_and_defers_the_fold() -> None:
    fake = FakeSummarizer()
    strategy = SummaryBuffer(
        60, summarizer=fake, max_summary_tokens=20, counter=W(), min_messages=1
    )
    history = conversation(4)[:8]  # ends with h3
    state = strategy.apply(history[:6]).state  # 3 turns fit: no fold yet
    # with the 4th turn the view is over budget: apply would fold, view must not
    seen = strategy.view(history, state)
    assert fake.prompts == []
    assert seen.state.health == "healthy" and seen.state.failures == 0
    assert seen.state.folds == 0 and seen.state.summary == ()
    assert seen.messages[-1].id == "h3" and validate(seen.messages) == []
    assert seen.report.tokens_after <= 60
    note = str(seen.messages[0].content)
    assert f"{seen.report.not_shown} earlier message(s)" in note and seen.report.not_shown > 0
    # after a real fold, the read-only view is exactly what apply showed
    folded = strategy.apply(history, state)
    assert len(fake.prompts) == 1
    again = strategy.view(history, folded.state)
    assert again.messages == folded.messages and again.state == folded.state
    assert asyncio.run(strategy.aview(history, folded.state)).messages == folded.messages
    assert len(fake.prompts) == 1
