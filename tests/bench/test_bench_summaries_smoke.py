"""The summaries benchmark core runs end to end on a tiny loop and fills every field (no timing
or target claims: a loop this short says nothing about them)."""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path

from bench_helpers import assert_results_written
from langchain_core.messages import AIMessage, HumanMessage

from bench.summaries import QUICK, MarkerTrackingSummarizer, run_summaries, write_results

TINY = replace(QUICK, mode="smoke", loop_n=80, budgets=(4_000,), max_summary_tokens=400)

TOOLS = {
    "langmem_ext_SummaryBuffer_4000",
    "langmem_ext_Compacting_4000",
    "langmem_ext_TieredSummary_4000",
    "langmem_summarize_messages_4000",
    "langchain_summarization_middleware_4000",
}


def test_fake_summarizer_records_markers_and_answers_without_them() -> None:
    fake = MarkerTrackingSummarizer(summary_tokens=50)
    first = fake("user: m1: hello\nassistant: m22: hi")
    second = fake([AIMessage(first), HumanMessage("m3: again and m1: once more")])

    assert fake.calls == 2 and fake.input_tokens > 0
    assert fake.seen == {1: 2, 22: 1, 3: 1}
    assert sorted(fake.take_fresh()) == [1, 3, 22] and fake.take_fresh() == []
    assert not re.search(r"\bm\d+:", first + second)
    assert 190 <= len(first) <= 200 and 190 <= len(second) <= 200


def test_summaries_core_produces_every_tool_and_target(tmp_path: Path) -> None:
    results = run_summaries(TINY, log=lambda _: None)

    assert {"meta", "conversation", "tools", "targets"} <= results.keys()
    conversation = results["conversation"]
    assert conversation["model_calls"] > 0 and conversation["tokens"] > 0
    assert set(results["tools"]) == TOOLS
    for tool in results["tools"].values():
        assert tool["error"] is None
        assert {"summarizer", "dropped", "validity", "prefix", "timing"} <= tool.keys()
        assert tool["validity"]["views"] == tool["model_calls"] == conversation["model_calls"]
        assert tool["summarizer"]["calls"] > 0  # the tiny budget makes every tool summarize
        assert {"never_summarized", "left_before_summarized"} == tool["dropped"].keys()
        assert tool["timing"]["excludes_fake_summarizer"] is True
    for key in ("langmem_ext_SummaryBuffer_4000", "langmem_ext_TieredSummary_4000"):
        ext = results["tools"][key]["langmem_ext"]
        assert {"effective_trigger", "effective_target", "expected_calls", "folds"} <= ext.keys()
    assert [t["tool"] for t in results["targets"]] == [
        "langmem_ext_SummaryBuffer_4000",
        "langmem_ext_Compacting_4000",
        "langmem_ext_TieredSummary_4000",
    ]
    for target in results["targets"]:
        assert isinstance(target["passed"], bool) and len(target["checks"]) == 7

    headings = ("## Verdicts", "## Summarizer work", "## Model inputs", "## Time in the tool")
    assert_results_written(write_results, results, tmp_path, "summaries_smoke", headings)
