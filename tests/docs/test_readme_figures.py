"""README.md and docs/strategies.md: the benchmark figures they quote are the committed results.

The "Which strategy?" table and the paragraph under it quote ``bench.agent_turns`` and
``bench.summaries``; a change to a strategy's defaults re-runs those benchmarks, and these tests
fail until the prose says what the new results say.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
README = " ".join((ROOT / "README.md").read_text(encoding="utf-8").split())
STRATEGIES_PAGE = " ".join((ROOT / "docs" / "strategies.md").read_text(encoding="utf-8").split())


def _results(name: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(
        (ROOT / "bench" / "results" / f"{name}.json").read_text(encoding="utf-8")
    )
    return data


def _percent(share: float) -> str:
    return f"{round(100 * share)}%"


def test_the_agent_loop_figures_are_bench_agent_turns() -> None:
    tools = _results("agent_turns")["tools"]
    tiered, buffer = (
        tools["langmem_ext_TieredSummary_8000"],
        tools["langmem_ext_SummaryBuffer_8000"],
    )
    calls = (tiered["total"]["summarizer_calls"], buffer["total"]["summarizer_calls"])
    prefix = (_percent(tiered["total"]["prefix_share"]), _percent(buffer["total"]["prefix_share"]))
    assert (
        f"{calls[0]} summarizer calls against `SummaryBuffer`'s {calls[1]} at 8k "
        f"(prefix kept on {prefix[0]} of calls against {prefix[1]})"
    ) in README
    assert f"({calls[0]} vs {calls[1]} in `bench.agent_turns` at 8k)" in STRATEGIES_PAGE
    assert f"makes {calls[0]} summarizer calls against `SummaryBuffer`'s {calls[1]}." in (
        STRATEGIES_PAGE
    )
    digest = [
        _percent(tools[f"langmem_ext_ToolDigest_{b}"]["total"]["prefix_share"])
        for b in (32_000, 8_000)
    ]
    assert f"prefix kept on {digest[0]} of calls at 32k, {digest[1]} at 8k" in README


def test_the_fold_rate_paragraph_is_bench_summaries() -> None:
    data = _results("summaries")
    tools, calls = data["tools"], data["conversation"]["model_calls"]
    at_8k = [tools[f"langmem_ext_{name}_8000"] for name in ("SummaryBuffer", "Compacting")]
    every = round(calls / sum(t["summarizer"]["calls"] for t in at_8k) * len(at_8k))
    shares = sorted(round(100 * t["prefix"]["fraction"]) for t in at_8k)
    span = f"{shares[0]}-{shares[-1]}%" if shares[0] != shares[-1] else f"{shares[0]}%"
    assert f"a fold every ~{every} calls at 8,000 tokens caps the kept prefix near {span}" in README
    at_16k = min(
        round(100 * tools[f"langmem_ext_{name}_16000"]["prefix"]["fraction"])
        for name in ("SummaryBuffer", "Compacting")
    )
    assert f"at 16,000 `SummaryBuffer` and `Compacting` keep it on {at_16k}% of calls" in README
