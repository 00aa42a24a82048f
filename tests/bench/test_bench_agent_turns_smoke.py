"""The long-agent-turn benchmark runs end to end on a tiny config and fills every field (no timing
or goal claims: turns this short say nothing about them)."""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path

from bench_helpers import assert_results_written
from langchain_core.messages import AIMessage, HumanMessage, SystemMessage, ToolMessage

from bench.agent_turns import QUICK, agent_conversation, run_agent_turns, write_results
from langmem_ext import is_valid

TINY = replace(
    QUICK,
    mode="smoke",
    requests=(1, 2),
    rounds=(12, 20),
    budgets=(4_000,),
    max_summary_tokens=400,
    huge_rate=0.1,
    huge_tokens=(2_000, 3_000),
)

TOOLS = {
    "langmem_ext_SummaryBuffer_4000",
    "langmem_ext_Compacting_4000",
    "langmem_ext_TieredSummary_4000",
    "langmem_summarize_messages_4000",
    "langchain_summarization_middleware_4000",
    "langmem_ext_ToolDigest_4000",
    "langmem_ext_TokenBudget_4000",
}


def test_conversation_has_the_agent_loop_shape_with_unique_ids_and_markers() -> None:
    conversation = agent_conversation(2, TINY)
    body = conversation.body

    assert conversation == agent_conversation(2, TINY)  # seeded
    assert isinstance(conversation.messages[0], SystemMessage)
    ids = [m.id for m in conversation.messages]
    assert None not in ids and len(set(ids)) == len(ids)
    markers = [re.match(r"m(\d+):", str(m.content)) for m in body]
    assert all(markers) and len({m.group(1) for m in markers if m}) == len(body)
    assert sum(isinstance(m, HumanMessage) for m in body) == 2
    rounds = [m for m in body if isinstance(m, AIMessage) and m.tool_calls]
    assert any(len(m.tool_calls) > 1 for m in rounds)  # parallel calls
    assert 2 * TINY.rounds[0] <= len(rounds) <= 2 * TINY.rounds[1]
    # a model call before every AIMessage: each history ends on the request or a round's results
    for length in conversation.lengths:
        history = conversation.messages[:length]
        assert isinstance(history[-1], (HumanMessage, ToolMessage)) and is_valid(history)
        assert isinstance(conversation.messages[length], AIMessage)
    assert len(conversation.lengths) == 2 + len(rounds)


def test_agent_turns_core_runs_every_tool_and_fills_every_field(tmp_path: Path) -> None:
    results = run_agent_turns(TINY, log=lambda _: None)

    assert {"meta", "conversations", "tools"} <= results.keys()
    shapes = results["conversations"]
    assert list(shapes) == ["1 request", "2 requests"]
    assert sum(s["huge_results"] for s in shapes.values()) > 0
    calls = sum(s["model_calls"] for s in shapes.values())
    assert set(results["tools"]) == TOOLS
    for tool in results["tools"].values():
        total = tool["total"]
        assert total["errors"] == [] and total["model_calls"] == calls  # every call ran
        if not tool["label"].startswith(("langmem_ext ToolDigest", "langmem_ext TokenBudget")):
            assert total["summarizer_calls"] > 0  # the tiny budget makes every tool summarize
        assert all(value is not None for value in total.values())
        assert set(total["goals"].values()) <= {True, False}
        assert 0.0 <= total["request_kept_share"] <= 1.0
        assert 0.0 <= total["prefix_share"] <= 1.0
        assert total["tokens_sent"] > 0 and total["median_view_tokens"] > 0
        assert total["max_unseen_at_a_call"] <= total["left_unseen"]
        assert set(tool["conversations"]) == set(shapes)
        for name, run in tool["conversations"].items():
            assert run["error"] is None and run["model_calls"] == shapes[name]["model_calls"]
            assert all(value is not None for key, value in run.items() if key != "error")

    headings = ("## Method", "## Conversations", "## Budget 4,000 tokens")
    assert_results_written(write_results, results, tmp_path, "agent_turns_smoke", headings)
