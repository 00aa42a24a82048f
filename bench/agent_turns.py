"""Long agent turns: one human request followed by hundreds of tool rounds, every memory tool
called before every model call.

Run ``python -m bench.agent_turns`` from the repository root (``--quick`` for a smoke run,
``--out DIR`` to write the results elsewhere, ``--seed N``). It writes
``bench/results/agent_turns.md`` and ``agent_turns.json`` (``agent_turns_quick.*`` for
``--quick``).

**Workload** (seeded, deterministic): one conversation per entry of ``requests`` (1, 3 and 10
human requests). Each request is followed by ``rounds`` (100-400) tool rounds: an AIMessage with
tool calls (2-3 parallel calls in ``parallel_rate`` of the rounds, else one), then one
ToolMessage per call. Observations are 20-1,200 words, log-uniform (most are short, some long);
in ``huge_rate`` of the rounds one result is HUGE (6-10k tokens). After the last round the
assistant answers, and the next request comes. Every message has an id and its text starts with
a unique marker ``m<N>:`` (as in ``bench.summaries``).

A **model call** happens before every AIMessage: after each request and after each round's
results. At every call each tool is asked for the view the model would receive:

* langmem_ext ``SummaryBuffer``, ``Compacting``, ``TieredSummary`` (tool-round digests as its
  first tier), ``ToolDigest`` (digests only, no summarizer) and ``TokenBudget`` with
  ``target_tokens`` at 5/8 of the budget (hysteresis, no summarizer): ``strategy.apply(history,
  previous_state)``;
* langmem ``summarize_messages`` and langchain ``SummarizationMiddleware``: driven exactly as
  ``bench.summaries`` drives them (the same builders, imported from there).

Each tool has its own instance of the same fake summarizer (``MarkerTrackingSummarizer``), which
records the markers it reads. So at each call we know, for every message of the history, whether
it is in the view (verbatim, or inside a tool-round digest, which carries the marker of every
message of its round), was read by a summarizer call, or neither (*left unseen*). Token figures use
langchain-core ``count_tokens_approximately`` (``langmem_ext.ApproximateCounter`` counts the same).
"""

from __future__ import annotations

import json
import math
import random
import statistics
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from functools import partial
from typing import Any

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage, ToolMessage
from langchain_core.messages.utils import count_tokens_approximately

from bench.fakes import Conversation, _mark
from bench.harness import (
    RunClock,
    bench_main,
    format_seconds,
    git_source,
    is_prefix,
    load_span,
    log_progress,
    machine_info,
    md_table,
    newest_human,
    provenance_lines,
    results_writer,
)
from bench.summaries import PACKAGES
from bench.summaries_tools import (
    ModelCall,
    Tool,
    ViewTracker,
    _langmem_ext_tool,
    drive,
    tool_factories,
)
from langmem_ext import validate
from langmem_ext.testing import random_words

__all__ = [
    "FULL",
    "QUICK",
    "TOOLS",
    "AgentTurnsConfig",
    "agent_conversation",
    "main",
    "render_markdown",
    "run_agent_turns",
    "write_results",
]


#: goals (from issue 13): summarizer input per conversation token, and the rest zero / every call
INPUT_RATIO_GOAL = 1.3


@dataclass(frozen=True)
class AgentTurnsConfig:
    mode: str
    seed: int
    #: one conversation per entry: its number of human requests
    requests: tuple[int, ...]
    #: tool rounds after each request (inclusive range)
    rounds: tuple[int, int]
    #: words of an ordinary observation (log-uniform in the range)
    observation_words: tuple[int, int]
    #: share of rounds with 2-3 parallel tool calls (the others have one)
    parallel_rate: float
    #: share of rounds with one HUGE result, and its size in tokens
    huge_rate: float
    huge_tokens: tuple[int, int]
    budgets: tuple[int, ...]
    #: as in bench.summaries: the summary budget, and the fake summary's share of it
    max_summary_tokens: int
    summary_fill: float


FULL = AgentTurnsConfig(
    mode="full",
    seed=0,
    requests=(1, 3, 10),
    rounds=(100, 400),
    observation_words=(20, 1_200),
    parallel_rate=0.15,
    huge_rate=0.01,
    huge_tokens=(6_000, 10_000),
    budgets=(8_000, 16_000, 32_000),
    max_summary_tokens=1_000,
    summary_fill=0.8,
)
QUICK = replace(FULL, mode="quick", rounds=(30, 60), budgets=(8_000,))


# --------------------------------------------------------------------------------------------
# the workload

TOOLS = ("search_orders", "read_file", "run_sql", "fetch_invoice", "grep_logs", "http_get")


def _observation(rng: random.Random, config: AgentTurnsConfig, huge: bool) -> str:
    if huge:
        chars = 4 * rng.randint(*config.huge_tokens)  # count_tokens_approximately: chars / 4
        parts: list[str] = []
        while sum(map(len, parts)) < chars:
            parts.append(random_words(rng, 200, 200))
        text = " ".join(parts)[:chars]
    else:
        low, high = config.observation_words
        n = round(math.exp(rng.uniform(math.log(low), math.log(high))))
        text = random_words(rng, n, n)
    return json.dumps({"result": text}, ensure_ascii=False)


def agent_conversation(requests: int, config: AgentTurnsConfig) -> Conversation:
    """``requests`` human requests, each followed by its tool rounds and a final answer; every
    message marked and with an id. ``lengths`` are the history's lengths at the model calls."""
    rng = random.Random(f"{config.seed}:{requests}")
    messages: list[BaseMessage] = [
        SystemMessage("You are an operations agent. Use the tools; report what you find.", id="sys")
    ]
    lengths: list[int] = []
    serial = 0

    def add(message: BaseMessage) -> None:
        nonlocal serial
        serial += 1
        messages.append(
            _mark(message.model_copy(update={"id": f"{message.type}-{serial}"}), serial)
        )

    for _ in range(requests):
        add(HumanMessage(random_words(rng, 20, 150)))
        lengths.append(len(messages))
        for _ in range(rng.randint(*config.rounds)):
            width = rng.randint(2, 3) if rng.random() < config.parallel_rate else 1
            huge = rng.randrange(width) if rng.random() < config.huge_rate else -1
            calls = [
                {
                    "name": rng.choice(TOOLS),
                    "args": {"query": random_words(rng, 2, 8), "limit": rng.randint(1, 50)},
                    "id": f"call-{serial}-{i}",
                }
                for i in range(width)
            ]
            add(AIMessage(random_words(rng, 3, 20) if rng.random() < 0.3 else "", tool_calls=calls))
            for i, call in enumerate(calls):
                content = _observation(rng, config, huge == i)
                add(ToolMessage(content, tool_call_id=call["id"], name=call["name"]))
            lengths.append(len(messages))
        add(AIMessage(random_words(rng, 20, 200)))
    return Conversation(tuple(messages), tuple(lengths))


def conversation_name(requests: int) -> str:
    return f"{requests} request" + ("" if requests == 1 else "s")


def _shape(conversation: Conversation, requests: int, config: AgentTurnsConfig) -> dict[str, Any]:
    body = conversation.body
    results = [m for m in body if isinstance(m, ToolMessage)]
    sizes = [count_tokens_approximately([m]) for m in results]
    rounds = [m for m in body if isinstance(m, AIMessage) and m.tool_calls]
    return {
        "requests": requests,
        "model_calls": len(conversation.lengths),
        "messages": len(body),
        "tokens": count_tokens_approximately(list(body)),
        "tool_rounds": len(rounds),
        "parallel_rounds": sum(len(m.tool_calls) > 1 for m in rounds),
        "tool_results": len(results),
        "huge_results": sum(s >= config.huge_tokens[0] for s in sizes),
        "median_result_tokens": statistics.median(sizes) if sizes else 0,
        "max_result_tokens": max(sizes, default=0),
    }


# --------------------------------------------------------------------------------------------
# one tool over one conversation


@dataclass
class _Checks:
    """What the checks of one tool over one conversation found, call by call."""

    #: the newest human request, and the previous call's view
    request: BaseMessage | None = None
    previous: list[BaseMessage] | None = None
    view_tokens: list[int] = field(default_factory=list)
    hidden: list[int] = field(default_factory=list)
    request_kept: int = 0
    request_clipped: int = 0
    over_budget: int = 0
    invalid: int = 0
    invalid_kinds: Counter[str] = field(default_factory=Counter)
    prefix_kept: int = 0
    seconds: float = 0.0


def run_tool(tool: Tool, conversation: Conversation) -> dict[str, Any]:
    """Drive ``tool`` over ``conversation`` and check the view of every call."""
    calls = _Checks()
    tracker = ViewTracker()

    def check(call: ModelCall) -> None:
        view = call.view
        for message in call.new:
            tracker.add(message)
        calls.request = newest_human(call.new) or calls.request
        calls.seconds += call.seconds
        tokens = count_tokens_approximately(view)
        calls.view_tokens.append(tokens)
        calls.over_budget += tokens > tool.max_tokens
        errors = {f.kind for f in validate(view) if f.severity == "error"}
        if errors:
            calls.invalid += 1
            calls.invalid_kinds.update(errors)
        human = calls.request
        if human is None or any(m is human or m == human for m in view):
            calls.request_kept += 1
        else:
            calls.request_clipped += any(m.id == human.id for m in view)
        if calls.previous is not None:
            calls.prefix_kept += is_prefix(calls.previous, view)
        calls.previous = view
        calls.hidden.append(tracker.update(tool.fake.take_fresh(), view))

    error = drive(tool, conversation, check)
    n = len(calls.view_tokens)
    return {
        "error": error,
        "model_calls": n,
        "conversation_tokens": count_tokens_approximately(list(conversation.body)),
        "summarizer_calls": tool.fake.calls,
        "summarizer_input_tokens": tool.fake.input_tokens,
        "messages_read": len(tool.fake.seen),
        "left_unseen": len(tracker.left_unseen),
        "never_read": len(tracker.left_unseen - set(tool.fake.seen)),
        "max_unseen_at_a_call": max(calls.hidden, default=0),
        "calls_with_unseen": sum(h > 0 for h in calls.hidden),
        "request_kept": calls.request_kept,
        "request_clipped": calls.request_clipped,
        "over_budget": calls.over_budget,
        "max_view_tokens": max(calls.view_tokens, default=0),
        "invalid": calls.invalid,
        "invalid_kinds": dict(sorted(calls.invalid_kinds.items())),
        "prefix_kept": calls.prefix_kept,
        "prefix_pairs": max(n - 1, 0),
        "median_view_tokens": statistics.median(calls.view_tokens) if n else 0,
        "tokens_sent": sum(calls.view_tokens),
        "tool_seconds": calls.seconds,
        "view_tokens": calls.view_tokens,
    }


_SUMMED = (
    "model_calls",
    "conversation_tokens",
    "summarizer_calls",
    "summarizer_input_tokens",
    "messages_read",
    "left_unseen",
    "never_read",
    "calls_with_unseen",
    "request_kept",
    "request_clipped",
    "over_budget",
    "invalid",
    "prefix_kept",
    "prefix_pairs",
    "tokens_sent",
    "tool_seconds",
)


#: the share of calls whose view extends the previous one (prompt caching) a tool should reach
PREFIX_GOAL = 0.85


def _aggregate(per_conversation: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """One tool at one budget over every conversation: totals, shares of calls, the median
    tokens per call over all calls, the worst single call."""
    runs = list(per_conversation.values())
    out: dict[str, Any] = {key: sum(r[key] for r in runs) for key in _SUMMED}
    calls, pairs = out["model_calls"], out["prefix_pairs"]
    kinds: Counter[str] = Counter()
    for r in runs:
        kinds.update(r["invalid_kinds"])
    tokens = [t for r in runs for t in r["view_tokens"]]
    out.update(
        errors=[r["error"] for r in runs if r["error"]],
        input_ratio=out["summarizer_input_tokens"] / out["conversation_tokens"],
        max_unseen_at_a_call=max(r["max_unseen_at_a_call"] for r in runs),
        request_kept_share=out["request_kept"] / calls if calls else 0.0,
        invalid_kinds=dict(sorted(kinds.items())),
        max_view_tokens=max(r["max_view_tokens"] for r in runs),
        prefix_share=out["prefix_kept"] / pairs if pairs else 0.0,
        median_view_tokens=statistics.median(tokens) if tokens else 0,
    )
    out["goals"] = {
        "no error": not out["errors"],
        f"input <= {INPUT_RATIO_GOAL:g}x": out["input_ratio"] <= INPUT_RATIO_GOAL,
        "0 left unseen": out["left_unseen"] == 0,
        "request in every view": out["request_kept"] == calls,
        "0 over budget": out["over_budget"] == 0,
        "0 invalid": out["invalid"] == 0,
        f"prefix kept >= {PREFIX_GOAL:.0%}": out["prefix_share"] >= PREFIX_GOAL,
    }
    return out


# --------------------------------------------------------------------------------------------
# the run


def digest_factories(config: AgentTurnsConfig) -> list[Callable[[], Tool]]:
    """``ToolDigest`` and ``TokenBudget`` with a target (no summarizer) at every budget, beside
    the summarizing tools."""
    return [
        partial(_langmem_ext_tool, kind, budget, config)
        for kind in ("ToolDigest", "TokenBudget")
        for budget in config.budgets
    ]


def run_agent_turns(
    config: AgentTurnsConfig, log: Callable[[str], None] = log_progress, command: str = ""
) -> dict[str, Any]:
    """Every tool at every budget over every conversation; returns the JSON-ready results."""
    clock = RunClock()
    conversations = {conversation_name(n): agent_conversation(n, config) for n in config.requests}
    shapes = {
        name: _shape(conv, n, config)
        for (name, conv), n in zip(conversations.items(), config.requests, strict=True)
    }
    for name, shape in shapes.items():
        log(
            f"[agent_turns] {config.mode}: {name}: {shape['model_calls']:,} model calls, "
            f"{shape['messages']:,} messages, {shape['tokens']:,} tokens, "
            f"{shape['huge_results']} huge results"
        )
    tools: dict[str, dict[str, Any]] = {}
    for factory in [*tool_factories(config), *digest_factories(config)]:
        per_conversation: dict[str, dict[str, Any]] = {}
        begun = time.perf_counter()
        for name, conversation in conversations.items():
            tool = factory()  # a fresh tool (state, fake summarizer) per conversation
            per_conversation[name] = run_tool(tool, conversation)
        total = _aggregate(per_conversation)
        for r in per_conversation.values():
            del r["view_tokens"]  # the JSON keeps the figures, not every call
        tools[tool.key] = {
            "label": tool.label,
            "family": tool.family,
            "max_tokens": tool.max_tokens,
            "summary_budget": tool.summary_budget,
            "fake_summary_tokens": tool.fake.summary_tokens,
            "total": total,
            "conversations": per_conversation,
        }
        log(f"  {tool.label} @ {tool.max_tokens:,}: {time.perf_counter() - begun:.1f} s")
    machine = machine_info(PACKAGES)
    results: dict[str, Any] = {
        "meta": clock.meta(
            config, command or "python -m bench.agent_turns", machine, source=git_source()
        ),
        "conversations": shapes,
        "tools": tools,
    }
    return clock.finish(results)


# --------------------------------------------------------------------------------------------
# output


def _request(r: dict[str, Any]) -> str:
    if not r["model_calls"]:
        return "–"
    share = f"{r['request_kept'] / r['model_calls']:.1%}"
    return share + (f" ({r['request_clipped']:,} clipped)" if r["request_clipped"] else "")


def _row(label: str, r: dict[str, Any]) -> list[str]:
    unseen = f"{r['left_unseen']:,}"
    if r["left_unseen"]:
        unseen += f" ({r['never_read']:,} never read)"
    invalid = f"{r['invalid']:,}"
    if r["invalid_kinds"]:
        invalid += " (" + ", ".join(f"{k} {n}" for k, n in r["invalid_kinds"].items()) + ")"
    return [
        label,
        f"{r['summarizer_calls']:,}",
        f"{r['summarizer_input_tokens'] / r['conversation_tokens']:.2f}x",
        unseen,
        f"{r['max_unseen_at_a_call']:,}",
        _request(r),
        f"{r['over_budget']:,}" + (f" (max {r['max_view_tokens']:,})" if r["over_budget"] else ""),
        invalid,
        f"{r['prefix_kept'] / r['prefix_pairs']:.1%}" if r["prefix_pairs"] else "–",
        f"{r['median_view_tokens']:,.0f}",
        f"{r['tokens_sent']:,}",
        format_seconds(r["tool_seconds"]),
    ]


_HEADER = [
    "summarizer calls",
    "summarizer input ÷ conversation",
    "left unseen",
    "max unseen at one call",
    "request verbatim",
    "over budget",
    "invalid",
    "prefix kept",
    "tokens per call (median)",
    "tokens sent (total)",
    "time in tool",
]


# long: the method and column notes are one block of prose; the tables are helpers
def render_markdown(results: dict[str, Any]) -> str:
    meta, shapes, tools = results["meta"], results["conversations"], results["tools"]
    cfg = meta["config"]
    lines = ["# Long agent turns: memory tools over hundreds of tool rounds per request", ""]
    if meta["mode"] != "full":
        lines += [
            f"> **{meta['mode']} run** (shorter turns): a smoke test, not a measurement. Run "
            "`python -m bench.agent_turns` for the real numbers.",
            "",
        ]
    source = meta["source"]
    lines += [
        *provenance_lines(meta),
        f"- Source: commit {source['commit']}"
        + (" with uncommitted changes in langmem_ext" if source["langmem_ext_modified"] else ""),
        f"- Load average (1/5/15 min) at start {load_span(meta, ', at end ')}",
        "",
        "## Method",
        "",
        f"Seeded conversations (seed {cfg['seed']}) in the agent-loop shape: "
        + ", ".join(str(n) for n in cfg["requests"])
        + f" human requests, each followed by {cfg['rounds'][0]}–{cfg['rounds'][1]} tool rounds "
        f"(an AIMessage with tool calls, then its ToolMessages; {cfg['parallel_rate']:.0%} of "
        f"the rounds make 2–3 parallel calls) and a final answer. Observations are "
        f"{cfg['observation_words'][0]}–{cfg['observation_words'][1]:,} words (log-uniform); "
        f"{cfg['huge_rate']:.0%} of the rounds return one HUGE result of "
        f"{cfg['huge_tokens'][0]:,}–{cfg['huge_tokens'][1]:,} tokens. Every message has an id "
        "and a unique marker `m<N>:` at the start of its text. Before every model call (before "
        "every AIMessage) each tool is asked for the model's view: langmem_ext strategies by "
        "`strategy.apply(history, previous_state)` (`ToolDigest` and `TokenBudget(max_tokens, "
        "target_tokens=5/8 of it)` have no summarizer: what they cut is left unseen by design; "
        "a message inside a tool-round digest counts as in the "
        "view, since the digest carries its marker and gist), langmem's `summarize_messages` and "
        "langchain's `SummarizationMiddleware` as `bench.summaries` drives them. Each tool has "
        "its own instance of the same deterministic fake summarizer, which answers "
        f"{cfg['summary_fill']:.0%} of the summary budget ({cfg['max_summary_tokens']:,} tokens; "
        "Compacting: 10% of max_tokens) and records every marker it reads. Tokens are counted "
        "with `count_tokens_approximately` throughout.",
        "",
        "Columns (totals over the conversations unless said): *summarizer input ÷ conversation*: "
        "input tokens of every summarizer call over the conversations' tokens (goal ≤ "
        f"{INPUT_RATIO_GOAL:g}x). *Left unseen*: distinct messages that, at some call, were "
        "neither in the view nor read by any summarizer call so far (goal 0 while the summarizer "
        "is healthy); *never read*: of those, the ones no summarizer call read by the end. "
        "*Max unseen at one call*: the most such messages at a single call. *Request verbatim*: "
        "share of calls whose view holds the newest human request exactly as sent (goal: every "
        "call); *clipped*: calls whose view holds it shortened (same id, other text). *Over "
        "budget*: views over max_tokens by the same counter (goal 0). *Invalid*: "
        "views with an error from `langmem_ext.validate` (orphaned or unanswered tool calls, "
        "first non-system message not human, ...; goal 0). *Prefix kept*: share of consecutive "
        "calls whose previous view is a prefix of the next (`bench.harness.is_prefix`). *Tokens "
        "per call*: median view tokens over every call; *tokens sent*: their sum. *Time in "
        "tool*: wall time of the tool's calls, the fake summarizer's own time excluded "
        "(informational).",
        "",
        "## Conversations",
        "",
    ]
    lines += _conversation_lines(shapes)
    lines += _budget_lines(cfg, tools)
    lines += ["", "---", "", f"Machine-readable results: `{meta['json_name']}`.", ""]
    return "\n".join(lines)


def _conversation_lines(shapes: Any) -> list[str]:
    """The table of the conversations' shapes."""
    lines: list[str] = []
    rows = [
        [
            name,
            f"{s['model_calls']:,}",
            f"{s['messages']:,}",
            f"{s['tokens']:,}",
            f"{s['tool_rounds']:,}",
            f"{s['parallel_rounds']:,}",
            f"{s['huge_results']:,}",
            f"{s['median_result_tokens']:,.0f}",
            f"{s['max_result_tokens']:,}",
        ]
        for name, s in shapes.items()
    ]
    lines += md_table(
        [
            "conversation",
            "model calls",
            "messages",
            "tokens",
            "tool rounds",
            "parallel rounds",
            "huge results",
            "median result tokens",
            "largest result tokens",
        ],
        rows,
    )
    return lines


def _budget_lines(cfg: Any, tools: Any) -> list[str]:
    """One section per budget, then any errors."""
    lines: list[str] = []
    for budget in cfg["budgets"]:
        at = [t for t in tools.values() if t["max_tokens"] == budget]
        lines += [
            "",
            f"## Budget {budget:,} tokens",
            "",
            "All conversations together:",
            "",
            *md_table(["tool", *_HEADER], [_row(t["label"], t["total"]) for t in at]),
            "",
            "Goals met (✓) or not (✗):",
            "",
        ]
        goals = list(at[0]["total"]["goals"]) if at else []
        lines += md_table(
            ["tool", *goals],
            [[t["label"]] + ["✓" if t["total"]["goals"][g] else "✗" for g in goals] for t in at],
        )
        lines += ["", "Per conversation:", ""]
        rows = [
            _row(f"{t['label']} · {name}", r) for t in at for name, r in t["conversations"].items()
        ]
        lines += md_table(["tool · conversation", *_HEADER], rows)
    errors = [
        (key, name, r["error"])
        for key, t in tools.items()
        for name, r in t["conversations"].items()
        if r["error"]
    ]
    if errors:
        lines += ["", "## Errors", ""]
        lines += [f"- `{key}` on {name}: {e}" for key, name, e in errors]
    return lines


#: ``write_results(results, out_dir, stem)``: ``<stem>.md`` and ``<stem>.json`` of this benchmark
write_results = results_writer(render_markdown)


def main(argv: Sequence[str] | None = None) -> int:
    return bench_main(
        argv,
        module="bench.agent_turns",
        description=(
            "Benchmark memory tools over long agent turns (hundreds of tool rounds per human "
            "request): langmem_ext's summarizing strategies, langmem's summarize_messages and "
            "langchain's SummarizationMiddleware."
        ),
        quick_help="smoke run: 30-60 rounds per request, one budget (well under a minute)",
        seed_help="seed of the conversations (0)",
        configs=(FULL, QUICK),
        run=run_agent_turns,
        write=write_results,
    )


if __name__ == "__main__":
    raise SystemExit(main())
