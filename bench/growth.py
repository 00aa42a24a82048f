"""Checkpoint growth: how big a LangGraph thread's checkpoints get with and without MemoryNode.

Run ``python -m bench.growth`` from the repository root (``--quick`` for a smoke run, ``--out
DIR`` to write the results elsewhere). It writes ``bench/results/growth.md`` and ``growth.json``
(``growth_quick.*`` for ``--quick``).

One thread of ``turns`` turns (a human message of 50-150 words in, an AI answer of 50-200 words
out; text and ids from a seeded RNG, so every configuration sees the same conversation) runs
through a ``StateGraph`` (memory node, then a fake model node, as
``tests/integrations/test_graph.py``'s ``explicit_graph``) with a ``SqliteSaver`` on a temporary
file, ``durability="sync"``. Three configurations run side by side, turn by turn, each on its
own file:

* **none**: no memory node; the model sees the full history;
* **view**: ``MemoryNode(SummaryBuffer(max_tokens, summarizer=fake), mode="view")``;
* **rewrite**: the same with ``mode="rewrite"`` (folded messages removed from state).

The model's view (``llm_input_messages``) is an ephemeral channel of ``MemoryMessagesState``: it
is stored only in the checkpoint between the memory step and the model step of each turn, and
not in the latest (end-of-turn) checkpoint; it is part of the file sizes below.

The fake summarizer is a deterministic callable answering ~``summary_tokens`` tokens. After every
turn the latest checkpoint row's size is read from SQLite (``length(checkpoint) +
length(metadata)`` plus its pending writes); every ``report_every`` turns the file size (main file
+ WAL), the checkpoints table's blob bytes, the number of messages in state, the state serialized
with the checkpointer's serde and the memory channel's serialized size. After the run the WAL is
checkpointed and ``dbstat`` gives the checkpoints table's size on disk.

Target: in rewrite mode the latest checkpoint stays flat after the first compaction: its maximum
over the late window (turns 501-1,000 of 1,000) is within ``FLAT_LIMIT`` x its maximum over the
early window (turns 101-500, or from the first compaction on if that comes later), while the
unbounded configurations grow (their ratio is reported, and must reach ``GROWTH_MIN`` for the
measurement to be able to show growth at all).
"""

from __future__ import annotations

import os
import random
import sqlite3
import statistics
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage

from bench.harness import (
    RunClock,
    bench_main,
    log_progress,
    machine_info,
    md_table,
    package_version,
    results_writer,
)

__all__ = [
    "CONFIGS",
    "FULL",
    "QUICK",
    "GrowthConfig",
    "RandomWordsSummarizer",
    "main",
    "render_markdown",
    "run_growth",
    "write_results",
]


#: rewrite mode: max latest-checkpoint size over the late window / over the early window
FLAT_LIMIT = 1.5
#: the unbounded configurations must grow at least this much for the contrast to mean anything
GROWTH_MIN = 1.5
#: the configurations, in table order
CONFIGS = ("none", "view", "rewrite")
LABELS = {
    "none": "(a) no memory",
    "view": "(b) MemoryNode view",
    "rewrite": "(c) MemoryNode rewrite",
}

_WORDS = (
    "the of and to in is you that it was for on are as with they at be this have from or one "
    "had by word but not what all were we when your can said there use an each which do how "
    "their if will up other about out many then them these so some would make like into time "
    "has look two more write go see number no way could people than first been call who its now "
    "find long down day did get come made may part over new take only little work know place "
    "year back give most very after thing our just name good order invoice shipment database "
    "latency deploy budget refund customer contract schedule Berlin Tokyo Lisbon quarter revenue "
    "ticket server migration warehouse carrier delay tracking parcel route pallet label"
).split()


@dataclass(frozen=True)
class GrowthConfig:
    mode: str
    turns: int
    report_every: int
    seed: int
    #: SummaryBuffer's max_tokens
    max_tokens: int
    #: the fake summary's size (approximate tokens)
    summary_tokens: int
    human_words: tuple[int, int]
    ai_words: tuple[int, int]
    #: the target's windows as fractions of ``turns``: early = (a, b], late = (b, c]
    windows: tuple[float, float, float]


FULL = GrowthConfig(
    mode="full",
    turns=1_000,
    report_every=100,
    seed=0,
    max_tokens=8_000,
    summary_tokens=300,
    human_words=(50, 150),
    ai_words=(50, 200),
    windows=(0.1, 0.5, 1.0),
)
QUICK = replace(FULL, mode="quick", turns=60, report_every=10)


# --------------------------------------------------------------------------------------------
# the conversation, the fake summarizer and the graphs


def _random_words(rng: random.Random, low: int, high: int) -> str:
    words = [rng.choice(_WORDS) for _ in range(rng.randint(low, high))]
    for _ in range(len(words) // 20):
        words[rng.randrange(len(words))] = str(rng.randint(1, 99_999))
    return " ".join(words).capitalize() + "."


def conversation(config: GrowthConfig) -> list[tuple[HumanMessage, AIMessage]]:
    """``turns`` (human, AI) pairs with ids ``h<i>`` / ``a<i>``, the same for every config."""
    rng = random.Random(config.seed)
    return [
        (
            HumanMessage(_random_words(rng, *config.human_words), id=f"h{i}"),
            AIMessage(_random_words(rng, *config.ai_words), id=f"a{i}"),
        )
        for i in range(config.turns)
    ]


class RandomWordsSummarizer:
    """A deterministic summarizer: ~``summary_tokens`` tokens (4 characters each), numbered."""

    def __init__(self, summary_tokens: int, seed: int = 0) -> None:
        self.summary_tokens = summary_tokens
        self.seed = seed
        self.calls = 0

    def __call__(self, prompt: Any) -> str:
        self.calls += 1
        rng = random.Random(self.seed * 1_000_003 + self.calls)
        head = f"Summary {self.calls} of the conversation so far: "
        chars = self.summary_tokens * 4
        words = [head]
        length = len(head)
        while length < chars:
            word = rng.choice(_WORDS)
            words.append(word)
            length += len(word) + 1
        return " ".join(words)[:chars].rstrip() + "."


@dataclass
class _Probe:
    """What the fake model saw at its last call."""

    view_messages: int = 0


def build_graph(kind: str, config: GrowthConfig, checkpointer: Any) -> tuple[Any, Any, _Probe]:
    """(graph, summarizer or None, probe) for one configuration."""
    from langgraph.graph import START, StateGraph

    from langmem_ext import MemoryMessagesState, MemoryNode, SummaryBuffer

    probe = _Probe()
    answers = {a.id: a for _, a in conversation(config)}

    def model(state: MemoryMessagesState) -> dict[str, Any]:
        messages = state["messages"]
        view = messages if kind == "none" else state["llm_input_messages"]
        probe.view_messages = len(view)
        turn = str(view[-1].id).removeprefix("h")
        return {"messages": [answers[f"a{turn}"]]}

    builder = StateGraph(MemoryMessagesState)
    builder.add_node("model", model)
    summarizer = None
    if kind == "none":
        builder.add_edge(START, "model")
    else:
        summarizer = RandomWordsSummarizer(config.summary_tokens, config.seed)
        strategy = SummaryBuffer(config.max_tokens, summarizer=summarizer)
        builder.add_node("memory", MemoryNode(strategy, mode=kind))  # type: ignore[arg-type]
        builder.add_edge(START, "memory")
        builder.add_edge("memory", "model")
    return builder.compile(checkpointer=checkpointer), summarizer, probe


# --------------------------------------------------------------------------------------------
# measuring


def _file_bytes(path: Path) -> int:
    return sum(
        os.path.getsize(p) for p in (path, Path(f"{path}-wal"), Path(f"{path}-shm")) if p.exists()
    )


def _latest_checkpoint_bytes(conn: sqlite3.Connection, thread: str) -> int:
    row = conn.execute(
        "SELECT checkpoint_id, length(checkpoint) + length(metadata) FROM checkpoints "
        "WHERE thread_id = ? AND checkpoint_ns = '' ORDER BY checkpoint_id DESC LIMIT 1",
        (thread,),
    ).fetchone()
    if row is None:
        return 0
    (writes,) = conn.execute(
        "SELECT coalesce(sum(length(value)), 0) FROM writes "
        "WHERE thread_id = ? AND checkpoint_ns = '' AND checkpoint_id = ?",
        (thread, row[0]),
    ).fetchone()
    return int(row[1]) + int(writes)


def _table_blob_bytes(conn: sqlite3.Connection) -> dict[str, int]:
    (ckpt_rows, ckpt_bytes) = conn.execute(
        "SELECT count(*), coalesce(sum(length(checkpoint) + length(metadata)), 0) FROM checkpoints"
    ).fetchone()
    (write_rows, write_bytes) = conn.execute(
        "SELECT count(*), coalesce(sum(length(value)), 0) FROM writes"
    ).fetchone()
    return {
        "checkpoint_rows": int(ckpt_rows),
        "checkpoints_blob_bytes": int(ckpt_bytes),
        "write_rows": int(write_rows),
        "writes_blob_bytes": int(write_bytes),
    }


def _dbstat(conn: sqlite3.Connection) -> dict[str, int] | None:
    """Bytes on disk per table (with its indexes), or None without the dbstat virtual table."""
    try:
        rows = conn.execute(
            "SELECT coalesce(m.tbl_name, s.name), sum(s.pgsize) FROM dbstat AS s "
            "LEFT JOIN sqlite_master AS m ON m.name = s.name GROUP BY 1"
        ).fetchall()
    except sqlite3.Error:
        return None
    return {str(name): int(size) for name, size in rows}


class _Run:
    """One configuration: its graph, its SQLite file and what was measured."""

    def __init__(self, kind: str, config: GrowthConfig, directory: Path) -> None:
        from langgraph.checkpoint.sqlite import SqliteSaver

        self.kind = kind
        self.path = directory / f"{kind}.sqlite"
        self.conn = sqlite3.connect(str(self.path), check_same_thread=False)
        self.saver = SqliteSaver(self.conn)
        self.saver.setup()
        self.reader = sqlite3.connect(str(self.path))
        self.graph, self.summarizer, self.probe = build_graph(kind, config, self.saver)
        self.thread = f"growth-{kind}"
        self.run_config = {"configurable": {"thread_id": self.thread}}
        self.turn_seconds: list[float] = []
        self.latest_bytes: list[int] = []
        self.reports: list[dict[str, Any]] = []
        self.first_fold_turn: int | None = None

    def turn(self, index: int, messages: list[BaseMessage]) -> None:
        started = time.perf_counter()
        self.graph.invoke({"messages": messages}, self.run_config, durability="sync")
        self.turn_seconds.append(time.perf_counter() - started)
        self.latest_bytes.append(_latest_checkpoint_bytes(self.reader, self.thread))
        if self.first_fold_turn is None and self.summarizer is not None and self.summarizer.calls:
            self.first_fold_turn = index + 1

    def report(self, turn: int) -> dict[str, Any]:
        values = self.graph.get_state(self.run_config).values
        serde = self.saver.serde
        memory = values.get("memory")
        row: dict[str, Any] = {
            "turn": turn,
            "file_bytes": _file_bytes(self.path),
            **_table_blob_bytes(self.reader),
            "latest_checkpoint_bytes": self.latest_bytes[-1],
            "state_serde_bytes": len(serde.dumps_typed(values)[1]),
            "messages_in_state": len(values.get("messages", [])),
            "view_messages": self.probe.view_messages,
            "memory_bytes": len(serde.dumps_typed(memory)[1]) if memory is not None else 0,
            "folds": int(memory.get("folds", 0)) if memory else 0,
            "summarizer_calls": self.summarizer.calls if self.summarizer else 0,
        }
        self.reports.append(row)
        return row

    def finish(self) -> dict[str, Any]:
        self.reader.close()
        self.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        final = {
            "file_bytes": _file_bytes(self.path),
            "main_file_bytes": os.path.getsize(self.path),
            **_table_blob_bytes(self.conn),
            "dbstat_bytes": _dbstat(self.conn),
        }
        self.conn.close()
        return final


def _window_max(values: Sequence[int], lo: int, hi: int) -> int:
    """Max of ``values`` over turns (lo, hi] (1-based turns; ``values[i]`` is turn i + 1)."""
    chunk = values[lo:hi]
    return max(chunk) if chunk else 0


def _summary(r: _Run, config: GrowthConfig, final: dict[str, Any]) -> dict[str, Any]:
    a, b, c = (round(f * config.turns) for f in config.windows)
    if r.kind == "rewrite" and r.first_fold_turn is not None:
        a = min(max(a, r.first_fold_turn), b)  # flat *after* the first compaction
    early, late = _window_max(r.latest_bytes, a, b), _window_max(r.latest_bytes, b, c)
    secs = r.turn_seconds
    tail = secs[-max(len(secs) // 10, 1) :]
    return {
        "label": LABELS[r.kind],
        "windows": {"early": [a, b], "late": [b, c]},
        "early_max_bytes": early,
        "late_max_bytes": late,
        "growth_ratio": late / early if early else None,
        "first_fold_turn": r.first_fold_turn,
        "latest_checkpoint_bytes": r.latest_bytes,
        "reports": r.reports,
        "final": final,
        "timing": {
            "median_turn_s": statistics.median(secs),
            "median_last_tenth_s": statistics.median(tail),
            "max_turn_s": max(secs),
            "total_s": sum(secs),
        },
    }


def evaluate_targets(configs: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    rewrite = configs["rewrite"]
    ratio = rewrite["growth_ratio"]
    _, b = rewrite["windows"]["early"]
    fold = rewrite["first_fold_turn"]
    checks = [
        {
            "name": f"rewrite: first compaction before turn {b}",
            "value": fold,
            "passed": fold is not None and fold < b,
        },
        {
            "name": f"rewrite: late max / early max <= {FLAT_LIMIT}",
            "value": ratio,
            "passed": ratio is not None and ratio <= FLAT_LIMIT,
        },
    ]
    for kind in ("none", "view"):
        grow = configs[kind]["growth_ratio"]
        checks.append(
            {
                "name": f"{kind}: late max / early max >= {GROWTH_MIN} (contrast)",
                "value": grow,
                "passed": grow is not None and grow >= GROWTH_MIN,
            }
        )
    return [
        {
            "target": "rewrite-mode checkpoints stay flat; unbounded ones grow",
            "passed": all(c["passed"] for c in checks),
            "checks": checks,
        }
    ]


def run_growth(
    config: GrowthConfig, log: Callable[[str], None] = log_progress, command: str = ""
) -> dict[str, Any]:
    """Run the three configurations side by side; returns the JSON-ready results with targets."""
    clock = RunClock()
    turns = conversation(config)
    system = SystemMessage("You are a careful assistant for an order-tracking company.", id="sys")
    from langmem_ext import ApproximateCounter

    counter = ApproximateCounter()
    conv_tokens = counter.count_messages([m for pair in turns for m in pair])
    log(
        f"[growth] {config.mode}: {config.turns} turns, {conv_tokens:,} tokens, "
        f"max_tokens={config.max_tokens:,}"
    )
    configs: dict[str, dict[str, Any]] = {}
    with tempfile.TemporaryDirectory(prefix="langmem_growth_") as tmp:
        runs = [_Run(kind, config, Path(tmp)) for kind in CONFIGS]
        for i, (human, _) in enumerate(turns):
            first: list[BaseMessage] = [system] if i == 0 else []
            for r in runs:
                r.turn(i, [*first, human])
            turn = i + 1
            if turn % config.report_every == 0 or turn == config.turns:
                rows = [r.report(turn) for r in runs]
                log(
                    f"  turn {turn:>5}: latest checkpoint "
                    + ", ".join(
                        f"{r.kind} {row['latest_checkpoint_bytes']:,}"
                        for r, row in zip(runs, rows, strict=True)
                    )
                    + f" bytes ({clock.elapsed:.0f} s)"
                )
        for r in runs:
            configs[r.kind] = _summary(r, config, r.finish())
    machine = machine_info()
    machine["packages"]["langgraph-checkpoint-sqlite"] = package_version(
        "langgraph-checkpoint-sqlite"
    )
    machine["sqlite"] = sqlite3.sqlite_version
    results: dict[str, Any] = {
        "meta": clock.meta(config, command or "python -m bench.growth", machine),
        "conversation": {
            "turns": config.turns,
            "messages": 2 * config.turns + 1,
            "tokens": conv_tokens,
        },
        "configs": configs,
    }
    results["targets"] = evaluate_targets(configs)
    return clock.finish(results)


# --------------------------------------------------------------------------------------------
# output


def _bytes(value: float | None) -> str:
    if value is None:
        return "n/a"
    for unit, size in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if value >= size:
            return f"{value / size:,.2f} {unit}"
    return f"{value:,.0f} B"


def _ratio(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.2f}x"


def _window(bounds: list[int]) -> str:
    return f"{bounds[0] + 1:,}-{bounds[1]:,}"


def _ms(seconds: float) -> str:
    return f"{seconds * 1_000:.1f} ms"


def render_markdown(results: dict[str, Any]) -> str:
    meta, cfg, configs = results["meta"], results["meta"]["config"], results["configs"]
    machine = meta["machine"]
    packages = ", ".join(f"{k} {v}" for k, v in machine["packages"].items())
    lines = ["# Checkpoint growth: MemoryNode view and rewrite vs no memory", ""]
    if meta["mode"] != "full":
        lines += [
            f"> **{meta['mode']} run** ({cfg['turns']} turns): a smoke test, not a measurement. "
            "Run `python -m bench.growth` for the real numbers.",
            "",
        ]
    lines += [
        f"One thread of {cfg['turns']:,} turns (human {cfg['human_words'][0]}-"
        f"{cfg['human_words'][1]} words, AI {cfg['ai_words'][0]}-{cfg['ai_words'][1]} words, "
        f"seed {cfg['seed']}; {results['conversation']['tokens']:,} tokens in all) through "
        "`StateGraph(MemoryMessagesState)` with `SqliteSaver` on a temporary file "
        '(`durability="sync"`), the three configurations side by side. (b) and (c) use '
        f"`SummaryBuffer({cfg['max_tokens']:,}, summarizer=fake)`; the fake returns "
        f"~{cfg['summary_tokens']} tokens. Latest checkpoint = the newest checkpoint row "
        "(`length(checkpoint) + length(metadata)` + its pending writes).",
        "",
        f"Machine: {machine['cpu']}, {machine['usable_cores']} usable cores, "
        f"{machine['platform']}, Python {machine['python']}, SQLite {machine['sqlite']}. "
        f"Packages: {packages}. Load average (1/5/15 min) at start "
        f"{' / '.join(map(str, meta['load_average_start']))}, at end "
        f"{' / '.join(map(str, meta['load_average_end']))}. Run time {meta['runtime_s']:.0f} s.",
        "",
        "## Verdict",
        "",
    ]
    for target in results["targets"]:
        lines.append(f"**{'PASS' if target['passed'] else 'FAIL'}**: {target['target']}.")
        lines.append("")
        rows = []
        for check in target["checks"]:
            value = check["value"]
            shown = _ratio(value) if isinstance(value, float) else str(value)
            rows.append([check["name"], shown, "PASS" if check["passed"] else "FAIL"])
        lines += md_table(["check", "value", "result"], rows)
        lines.append("")
    lines += _summary_lines(configs)
    lines += [f"Command: `{meta['command']}`; raw numbers in `{meta['json_name']}`.", ""]
    return "\n".join(lines)


def _summary_lines(configs: Any) -> list[str]:
    """The summary table, then one table per measured quantity over the turns."""
    lines: list[str] = []
    kinds = list(configs)
    labels = [configs[k]["label"] for k in kinds]
    lines += ["## Summary", ""]
    summary_rows = [
        ["early window (turns)"] + [_window(configs[k]["windows"]["early"]) for k in kinds],
        ["max latest checkpoint, early window"]
        + [_bytes(configs[k]["early_max_bytes"]) for k in kinds],
        ["late window (turns)"] + [_window(configs[k]["windows"]["late"]) for k in kinds],
        ["max latest checkpoint, late window"]
        + [_bytes(configs[k]["late_max_bytes"]) for k in kinds],
        ["growth ratio (late / early)"] + [_ratio(configs[k]["growth_ratio"]) for k in kinds],
        ["first compaction at turn"] + [str(configs[k]["first_fold_turn"] or "-") for k in kinds],
        ["SQLite file after the run (WAL checkpointed)"]
        + [_bytes(configs[k]["final"]["file_bytes"]) for k in kinds],
        ["checkpoints table on disk (dbstat)"]
        + [_bytes((configs[k]["final"]["dbstat_bytes"] or {}).get("checkpoints")) for k in kinds],
        ["checkpoints table blob bytes"]
        + [_bytes(configs[k]["final"]["checkpoints_blob_bytes"]) for k in kinds],
        ["checkpoint rows"] + [f"{configs[k]['final']['checkpoint_rows']:,}" for k in kinds],
        ["median time per turn"] + [_ms(configs[k]["timing"]["median_turn_s"]) for k in kinds],
        ["median time per turn, last 10% of turns"]
        + [_ms(configs[k]["timing"]["median_last_tenth_s"]) for k in kinds],
        ["total time in invoke"] + [f"{configs[k]['timing']['total_s']:.1f} s" for k in kinds],
    ]
    lines += md_table(["", *labels], summary_rows)
    lines.append("")
    sections = (
        ("Latest checkpoint", "latest_checkpoint_bytes", _bytes),
        ("State serialized with the checkpointer's serde", "state_serde_bytes", _bytes),
        ("SQLite file (main + WAL) during the run", "file_bytes", _bytes),
        ("Checkpoints table blob bytes during the run", "checkpoints_blob_bytes", _bytes),
        ("Messages in state", "messages_in_state", lambda v: f"{v:,}"),
        ("Messages in the model's view", "view_messages", lambda v: f"{v:,}"),
        ("Memory channel (serialized)", "memory_bytes", _bytes),
    )
    turns = [row["turn"] for row in configs[kinds[0]]["reports"]]
    for title, key, fmt in sections:
        lines += [f"## {title}", ""]
        rows = [
            [f"{turn:,}"] + [fmt(configs[k]["reports"][i][key]) for k in kinds]
            for i, turn in enumerate(turns)
        ]
        lines += md_table(["turn", *labels], rows)
        lines.append("")
    return lines


#: ``write_results(results, out_dir, stem)``: ``<stem>.md`` and ``<stem>.json`` of this benchmark
write_results = results_writer(render_markdown)


def main(argv: Sequence[str] | None = None) -> int:
    return bench_main(
        argv,
        module="bench.growth",
        description=(
            "Benchmark the growth of SqliteSaver checkpoints with no memory and with MemoryNode "
            "in view and rewrite mode."
        ),
        quick_help="smoke run: 60 turns (~10 s)",
        seed_help="seed of the conversation (0)",
        configs=(FULL, QUICK),
        run=run_growth,
        write=write_results,
    )


if __name__ == "__main__":
    raise SystemExit(main())
