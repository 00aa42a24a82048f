"""Long turns: facts planted in early tool results of one long agent turn, asked for later in the
same turn, through ``Retrieval`` at an 8k budget.

Run ``python -m bench.long_turns`` from the repository root (``--quick`` for a smoke run,
``--out DIR`` to write elsewhere, ``--seed N``, ``--baseline FILE``: the JSON of a run on older
code, shown beside this one). It writes ``bench/results/long_turns.md`` and ``long_turns.json``
(``long_turns_quick.*`` for ``--quick``).

**Workload** (seeded, deterministic): per seed, one human request followed by ``rounds`` tool
rounds (an AIMessage with one tool call, sometimes a line of reasoning, and its ToolMessage;
observations as in ``bench.agent_turns``: 20-1,200 words, log-uniform). ``facts`` facts are
planted in tool results of the early rounds (a sentence such as "the build id is K7-19" inside
an ordinary observation), and a later result mentions each fact's subject without its value (a
distractor). Later in the same turn the agent asks for each fact in its own words, as agents do
between tool calls: the round's AIMessage says "Now I need the build id from the earlier CI run"
with its call. No new human message arrives: the turn's one request stays the newest.

**Measured**: at the model call after each asking round (its result in), whether the planted
value is in the view's retrieved context (*recall*), or still in the view itself (then the
question does not count: it tests nothing); every call's view is checked for validity
(``langmem_ext.validate``) and budget (the view's tokens by the strategy's counter), and timed
(wall clock of ``apply``); the store's turn writes are counted (items and characters: a turn
written again on every call would show here). Variants: Retrieval as it is (*default*: inside a
turn some of whose rounds left the view, the agent's newest step,
:func:`~langmem_ext.retrieval.text.turn_query`, searched always) and the query it used before
(*request*: the newest human message, the unchanged request, gated); BM25, and hybrid with the
bundled MiniLM (local dense index).
"""

from __future__ import annotations

import json
import random
import statistics
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage, ToolMessage
from langgraph.store.base import Op, PutOp, Result
from langgraph.store.memory import InMemoryStore

from bench.agent_turns import TOOLS
from bench.harness import (
    RunClock,
    bench_main,
    load_span,
    log_progress,
    md_table,
    pct,
    provenance_lines,
    results_writer,
)
from langmem_ext import MemoryKey, TokenBudget, validate
from langmem_ext.core.shape import RETRIEVED_ID
from langmem_ext.retrieval.layout import TURNS
from langmem_ext.retrieval.strategy import Retrieval
from langmem_ext.retrieval.text import message_text
from langmem_ext.testing import random_words

__all__ = ["FULL", "QUICK", "LongTurnsConfig", "long_turn", "main", "run_long_turns"]

#: the goal: planted tool-result facts brought back when asked later in the same turn
RECALL_GOAL = 0.9


@dataclass(frozen=True)
class LongTurnsConfig:
    mode: str
    seed: int
    #: one long turn per seed (``seed``, ``seed + 1``, ...)
    turns: int
    rounds: int
    #: facts planted per turn (at most ``len(_FACTS)``), in rounds ``plant_rounds``
    facts: int
    plant_rounds: tuple[int, int]
    #: the first round that asks; questions are spread from there to the last round
    ask_from: int
    observation_words: tuple[int, int]
    budget: int
    #: rankings run (``"hybrid"`` embeds with the bundled MiniLM), and the query variants each
    #: runs (a ranking not listed: every variant)
    rankings: tuple[str, ...]
    queries: tuple[tuple[str, tuple[str, ...]], ...] = (("hybrid", ("request", "default")),)
    #: turns the dense rankings run on (the first ones: embedding is the slow part)
    dense_turns: int = 1


FULL = LongTurnsConfig(
    mode="full",
    seed=0,
    turns=3,
    rounds=320,
    facts=16,
    plant_rounds=(3, 100),
    ask_from=160,
    observation_words=(20, 1_200),
    budget=8_000,
    rankings=("bm25", "hybrid"),
)
QUICK = replace(FULL, mode="quick", turns=1, rounds=120, facts=6, plant_rounds=(3, 30),
                ask_from=70, rankings=("bm25",))  # fmt: skip


# --------------------------------------------------------------------------------------------
# the workload


@dataclass(frozen=True)
class _Fact:
    key: str
    #: the sentence planted in a tool result
    plant: str
    #: what must come back
    value: str
    #: the agent's step that needs it
    ask: str
    #: a later result that names the subject without the value
    distractor: str


_FACTS = (
    _Fact("build", "The nightly CI run finished; the build id is K7-19.", "K7-19",
          "Now I need the build id from the earlier CI run.",
          "Note: the build id of a job is not shown in this view."),
    _Fact("db_host", "Connection target: the staging database host is db-stg-04.internal.",
          "db-stg-04.internal", "Which staging database host did the config point to?",
          "The staging database host can be overridden per job."),
    _Fact("migration", "Applying migrations failed at 0042_add_invoice_index (lock timeout).",
          "0042_add_invoice_index", "I should look at the migration that failed earlier.",
          "Migrations are applied in order; none failed in this dry run."),
    _Fact("oncall", "Pager: the on-call engineer this week is Priya Natarajan.",
          "Priya Natarajan", "Who was the on-call engineer in the pager output?",
          "Pager escalation goes to the on-call engineer after 15 minutes."),
    _Fact("tag", "Release notes drafted for the release tag v3.8.2-rc1.", "v3.8.2-rc1",
          "I need the release tag we drafted notes for.",
          "Release tags are created by the pipeline, not by hand."),
    _Fact("account", "The failing requests all come from customer account ACC-550913.",
          "ACC-550913", "Which customer account were the failing requests from?",
          "Customer account data is redacted in these logs."),
    _Fact("gateway", "The payment gateway answered with error code PGW-4107 (card network).",
          "PGW-4107", "What error code did the payment gateway return?",
          "Gateway error codes are documented in the vendor portal."),
    _Fact("bucket", "Artifacts are uploaded to the bucket acme-artifacts-eu-west-1.",
          "acme-artifacts-eu-west-1", "Where were the artifacts uploaded? I need the bucket.",
          "Artifact upload retried twice before succeeding."),
    _Fact("flag", "The change is guarded by the feature flag checkout_v2_rollout.",
          "checkout_v2_rollout", "Which feature flag guards the checkout change?",
          "Feature flag evaluation is cached for 30 seconds."),
    _Fact("latency", "Before the incident the p99 latency was 412 ms on the orders endpoint.",
          "412 ms", "What was the p99 latency before the incident?",
          "Latency percentiles are computed over 5-minute windows."),
    _Fact("commit", "git bisect: the first bad commit is 9f3c2ab (refactor retry policy).",
          "9f3c2ab", "I need the first bad commit that bisect found.",
          "Bisect needs a known good commit to start from."),
    _Fact("ticket", "The outage is tracked in ticket OPS-2291.", "OPS-2291",
          "Which ticket tracks the outage? I'll link it in the report.",
          "Tickets are created automatically for sev-2 alerts."),
    _Fact("namespace", "Pods are running in the Kubernetes namespace payments-canary.",
          "payments-canary", "What was the Kubernetes namespace of the pods?",
          "Namespace quotas were not reached."),
    _Fact("rotation", "The API key was last rotated on 2026-03-14.", "2026-03-14",
          "When was the API key last rotated?",
          "API key rotation is due every 90 days."),
    _Fact("queue", "The backlog is in the queue invoice-retry-q (48,113 messages).",
          "invoice-retry-q", "Which queue had the backlog?",
          "Queue depth alarms are set at 10,000 messages."),
    _Fact("owner", "CODEOWNERS: the billing service is owned by team Falcon.", "team Falcon",
          "Who owns the billing service according to CODEOWNERS?",
          "The billing service has two maintainers on leave."),
)  # fmt: skip


@dataclass(frozen=True)
class LongTurn:
    """One long turn: ``messages[:length]`` is the history at each model call; ``asks`` maps
    the index of a model call to the fact asked for in the round just before it."""

    name: str
    messages: tuple[BaseMessage, ...]
    lengths: tuple[int, ...]
    asks: dict[int, _Fact]
    planted: dict[str, int]


def _observation(rng: random.Random, config: LongTurnsConfig, sentence: str = "") -> str:
    low, high = config.observation_words
    n = round(2 ** rng.uniform(low.bit_length() - 1, high.bit_length() - 1))
    text = random_words(rng, max(n, low), max(n, low))
    if sentence:
        words = text.split(" ")
        at = rng.randrange(len(words) + 1)
        text = " ".join([*words[:at], sentence, *words[at:]])
    return json.dumps({"result": text}, ensure_ascii=False)


# long: one seeded pass (the order of the RNG draws fixes the data)
def long_turn(config: LongTurnsConfig, seed: int) -> LongTurn:
    """One request, ``config.rounds`` rounds, facts planted early and asked for late."""
    rng = random.Random(f"long-turns:{seed}")
    facts = rng.sample(_FACTS, min(config.facts, len(_FACTS)))
    low, high = config.plant_rounds
    plants = dict(zip(sorted(rng.sample(range(low, high + 1), len(facts))), facts, strict=True))
    # every later round is free for a distractor or a question
    later = list(range(high + 1, config.rounds))
    asked = [round(config.ask_from + i * (config.rounds - 1 - config.ask_from) / len(facts))
             for i in range(len(facts))]  # fmt: skip
    order = facts[:]
    rng.shuffle(order)
    asks = dict(zip(asked, order, strict=True))
    free = [r for r in later if r not in asks]
    distractors = dict(zip(rng.sample(free, len(facts)), facts, strict=True))
    messages: list[BaseMessage] = [
        SystemMessage(
            "You are an operations agent. Use the tools; report what you find.", id="sys"
        ),
        HumanMessage(
            "The nightly release failed and checkout errors are up since this morning. "
            "Investigate, find the cause, and prepare a rollback plan with everything the "
            "on-call team will need.",
            id="request",
        ),
    ]
    lengths: list[int] = []
    call_asks: dict[int, _Fact] = {}
    planted: dict[str, int] = {}
    for r in range(config.rounds):
        fact = asks.get(r)
        say = fact.ask if fact else (random_words(rng, 3, 20) if rng.random() < 0.3 else "")
        tool = rng.choice(TOOLS)
        call = {"name": tool, "args": {"query": random_words(rng, 2, 6)}, "id": f"call-{r}"}
        messages.append(AIMessage(say, tool_calls=[call], id=f"ai-{r}"))
        sentence = plants[r].plant if r in plants else ""
        if r in distractors:
            sentence = distractors[r].distractor
        if r in plants:
            planted[plants[r].key] = len(messages)
        messages.append(
            ToolMessage(
                _observation(rng, config, sentence),
                tool_call_id=f"call-{r}",
                name=tool,
                id=f"tool-{r}",
            )
        )
        lengths.append(len(messages))
        if fact is not None:
            call_asks[len(lengths) - 1] = fact
    return LongTurn(f"turn-s{seed}", tuple(messages), tuple(lengths), call_asks, planted)


# --------------------------------------------------------------------------------------------
# the strategies


class _CountingStore(InMemoryStore):
    """An InMemoryStore that counts the turn writes (items and characters) it is asked for."""

    def __init__(self) -> None:
        super().__init__()
        self.turn_puts = 0
        self.turn_chars = 0

    def batch(self, ops: Any) -> list[Result]:
        ops = list(ops)
        self._count(ops)
        return super().batch(ops)

    def _count(self, ops: Sequence[Op]) -> None:
        for op in ops:
            if isinstance(op, PutOp) and op.namespace[1:2] == (TURNS,) and op.value:
                self.turn_puts += 1
                self.turn_chars += len(str(op.value.get("text", "")))


#: query variants: ``default`` is Retrieval as it is (inside a long turn: the agent's newest
#: step, ``retrieval.text.turn_query``, searched always); ``request`` reads the newest human
#: message only, gated (what Retrieval searched for before)
QUERIES = ("default", "request")


def _strategy(config: LongTurnsConfig, ranking: str, query: str, embeddings: Any) -> Retrieval:
    """Retrieval over TokenBudget at the budget, with the query variant ``query``."""

    class _Request(Retrieval):
        def _query(
            self, messages: Sequence[BaseMessage], kept_from: int
        ) -> tuple[str | None, bool]:
            return super()._query(messages, 0)  # as if no round of the turn had left

    kind = Retrieval if query == "default" else _Request
    return kind(
        TokenBudget(config.budget),
        store=_CountingStore(),
        key=MemoryKey("bench", "agent", "long-turn"),
        ranking=ranking,  # type: ignore[arg-type]
        embeddings=embeddings if ranking != "bm25" else None,
    )


# --------------------------------------------------------------------------------------------
# the run


def _context(view: Sequence[BaseMessage]) -> str:
    return "\n".join(message_text(m) for m in view if m.id == RETRIEVED_ID)


def _shown(view: Sequence[BaseMessage]) -> str:
    return "\n".join(message_text(m) for m in view if m.id != RETRIEVED_ID)


def play(turn: LongTurn, strategy: Retrieval, budget: int) -> dict[str, Any]:
    """Every model call of ``turn`` through ``strategy``: recall, validity, budget, cost."""
    store = strategy.store
    assert isinstance(store, _CountingStore)
    state = None
    times: list[float] = []
    found, in_view, misses = 0, 0, []
    invalid = over = 0
    retrieved_tokens: list[int] = []
    for call, length in enumerate(turn.lengths):
        history = list(turn.messages[:length])
        start = time.perf_counter()
        result = strategy.apply(history, state)
        times.append(time.perf_counter() - start)
        state = result.state
        view = result.messages
        invalid += any(f.severity == "error" for f in validate(view))
        over += strategy.counter.count_messages(view) > budget
        retrieved_tokens.append(result.report.retrieved_tokens)
        fact = turn.asks.get(call)
        if fact is None:
            continue
        if fact.value in _shown(view):
            in_view += 1
        elif fact.value in _context(view):
            found += 1
        else:
            misses.append(fact.key)
    asked = len(turn.asks) - in_view
    return {
        "calls": len(turn.lengths),
        "asked": asked,
        "found": found,
        "in_view": in_view,
        "misses": misses,
        "invalid_views": invalid,
        "over_budget": over,
        "ms_per_call": _spread([t * 1e3 for t in times]),
        "turn_writes": store.turn_puts,
        "turn_chars_written": store.turn_chars,
        "retrieved_tokens": _spread([float(t) for t in retrieved_tokens]),
    }


def _spread(values: Sequence[float]) -> dict[str, float]:
    ordered = sorted(values)
    p90 = ordered[min(len(ordered) - 1, int(0.9 * len(ordered)))]
    return {"median": statistics.median(ordered), "p90": p90, "max": ordered[-1]}


def _embeddings(config: LongTurnsConfig) -> Any:
    if all(r == "bm25" for r in config.rankings):
        return None
    from bench.retrieval_measure import CachedEmbeddings
    from langmem_ext.retrieval.embeddings import LocalMiniLMEmbeddings

    model = LocalMiniLMEmbeddings()
    model.load()
    # each text embedded once for every variant (the vectors are the model's: the rankings
    # are the same; the first variant to meet a text pays for it)
    return CachedEmbeddings(model)


def run_long_turns(
    config: LongTurnsConfig, command: str = "", baseline: Path | None = None
) -> dict[str, Any]:
    """Every (ranking, query) variant over every turn; the results, JSON-ready."""
    clock = RunClock()
    embeddings = _embeddings(config)
    turns = [long_turn(config, config.seed + i) for i in range(config.turns)]
    chars = sum(len(message_text(m)) for t in turns for m in t.messages)
    log_progress(f"[long_turns] {config.mode}: {len(turns)} turns, {chars:,} characters")
    variants: dict[str, Any] = {}
    only = dict(config.queries)
    for ranking in config.rankings:
        for query in only.get(ranking, tuple(QUERIES)):
            some = turns if ranking == "bm25" else turns[: config.dense_turns]
            per_turn = {
                t.name: play(t, _strategy(config, ranking, query, embeddings), config.budget)
                for t in some
            }
            variants[f"{ranking}/{query}"] = _total(ranking, query, per_turn)
            recall = variants[f"{ranking}/{query}"]["recall"]
            log_progress(f"[long_turns] {ranking}/{query}: {recall} ({clock.elapsed:.0f} s)")
    results: dict[str, Any] = {
        "meta": clock.meta(config, command or "python -m bench.long_turns"),
        "turns": {t.name: _shape(t) for t in turns},
        "variants": variants,
        "baseline": json.loads(baseline.read_text()) if baseline is not None else None,
    }
    return clock.finish(results)


def _total(ranking: str, query: str, per_turn: dict[str, dict[str, Any]]) -> dict[str, Any]:
    rows = list(per_turn.values())
    asked = sum(r["asked"] for r in rows)
    found = sum(r["found"] for r in rows)
    calls = sum(r["calls"] for r in rows)
    return {
        "ranking": ranking,
        "query": query,
        "asked": asked,
        "found": found,
        "recall": found / asked if asked else None,
        "in_view": sum(r["in_view"] for r in rows),
        "invalid_views": sum(r["invalid_views"] for r in rows),
        "over_budget": sum(r["over_budget"] for r in rows),
        "turn_writes_per_call": sum(r["turn_writes"] for r in rows) / calls,
        "turn_chars_per_call": sum(r["turn_chars_written"] for r in rows) / calls,
        "ms_per_call_median": statistics.median(r["ms_per_call"]["median"] for r in rows),
        "ms_per_call_p90": max(r["ms_per_call"]["p90"] for r in rows),
        "goal_met": bool(asked) and found / asked >= RECALL_GOAL,
        "turns": per_turn,
    }


def _shape(turn: LongTurn) -> dict[str, Any]:
    return {
        "messages": len(turn.messages),
        "model_calls": len(turn.lengths),
        "characters": sum(len(message_text(m)) for m in turn.messages),
        "facts": len(turn.planted),
        "planted_at_message": turn.planted,
        "asked_at_call": {str(call): fact.key for call, fact in sorted(turn.asks.items())},
    }


# --------------------------------------------------------------------------------------------
# the report


def render_markdown(results: dict[str, Any]) -> str:
    meta, cfg = results["meta"], results["meta"]["config"]
    lines = [
        "# Long agent turns: tool results brought back later in the same turn",
        "",
        *provenance_lines(meta),
        f"- Load average: {load_span(meta, ' at the start, ')} at the end",
        "",
        f"{cfg['turns']} turn(s) of one request and {cfg['rounds']} tool rounds each; "
        f"{cfg['facts']} facts planted in tool results of rounds {cfg['plant_rounds'][0]}-"
        f"{cfg['plant_rounds'][1]}, asked for by the agent's own step from round "
        f"{cfg['ask_from']} on. Retrieval(TokenBudget({cfg['budget']:,})), defaults otherwise "
        "(context budget: a quarter). *Recall*: asked facts whose value is in the retrieved "
        f"context at the next model call (goal ≥ {RECALL_GOAL:.0%}; a fact still in the view "
        "is not counted). *Writes*: turn items written per model call, and their characters "
        "(a turn rewritten on every call would show). *ms / call*: median of the turns' "
        "medians, and the largest p90.",
        "",
        "Queries: *default*: Retrieval as it is: inside a turn some of whose rounds left the "
        "view, the agent's newest step (`retrieval.text.turn_query`: its newest AIMessage's "
        "text and tool calls), searched at every call (the gate reads a user's question; an "
        "agent's step is about the turn's own past); *request*: the query before, the newest "
        "human message (the turn's request, the same for every round), gate auto. "
        "Hybrid runs on the first turn only (MiniLM embedding is "
        "the slow part), every text embedded once for both variants: the first variant's "
        "times include embedding the rounds, the second's do not.",
        "",
    ]
    lines += _variant_lines("This code", results["variants"])
    base = results.get("baseline")
    if base:
        lines += ["", f"Before (`{base['meta']['command']}`):", ""]
        lines += _variant_lines("Before", base["variants"])
    lines += ["", "---", "", f"Machine-readable results: `{meta['json_name']}`.", ""]
    return "\n".join(lines)


def _variant_lines(title: str, variants: dict[str, Any]) -> list[str]:
    header = ["ranking / query", "recall", "found / asked", "in view", "invalid", "over budget",
              "writes / call", "chars / call", "ms / call", "p90 ms", "goal"]  # fmt: skip
    rows = [
        [
            name,
            pct(v["recall"]),
            f"{v['found']} / {v['asked']}",
            str(v["in_view"]),
            str(v["invalid_views"]),
            str(v["over_budget"]),
            f"{v['turn_writes_per_call']:.2f}",
            f"{v['turn_chars_per_call']:,.0f}",
            f"{v['ms_per_call_median']:.1f}",
            f"{v['ms_per_call_p90']:.1f}",
            "✓" if v["goal_met"] else "✗",
        ]
        for name, v in variants.items()
    ]
    return [f"**{title}**", "", *md_table(header, rows)]


write_results = results_writer(render_markdown)


def main(argv: Sequence[str] | None = None) -> int:
    import sys

    args = list(sys.argv[1:] if argv is None else argv)
    baseline: Path | None = None
    if "--baseline" in args:
        at = args.index("--baseline")
        baseline = Path(args[at + 1])
        del args[at : at + 2]
    return bench_main(
        args,
        module="bench.long_turns",
        description="Facts in early tool results of one long agent turn, asked for later in it.",
        quick_help="smoke run: one turn of 120 rounds, BM25 only",
        seed_help="seed of the first turn (0)",
        configs=(FULL, QUICK),
        run=lambda config, command: run_long_turns(config, command, baseline),
        write=write_results,
    )


if __name__ == "__main__":
    raise SystemExit(main())
