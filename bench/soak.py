"""Soak: many agent conversations on PostgreSQL across worker processes, one worker killed.

Run ``python -m bench.soak`` from the repository root (``--quick``: 2 workers x 20 threads x 10
turns; ``--out DIR``). It writes ``bench/results/soak.md`` and ``soak.json``. The database is
the machine's PostgreSQL (``LANGMEM_EXT_TEST_PG``, default 127.0.0.1:5432, db ``test``), in a
fresh schema dropped at the end.

Set-up. ``workers`` processes (``bench/soak_worker.py``), each a ``create_agent`` with a fake
chat model (a tool call on every other turn; the tool writes a note to the store) and
``MemoryMiddleware(SummaryBuffer(600, max_summary_tokens=120, policy=FoldPolicy(
prefetch_tokens=450)))``, background compaction on, on ``PostgresSaver`` + ``PostgresStore``;
each runs ``pool`` turns at once. The fake summarizer sleeps ``delay`` seconds (a model's
latency, no CPU). Every thread's turns are serialized (one in flight, any worker: each turn goes
to a random worker, so a thread's folds start in one process and its next turn may land in
another). Half way through, one worker is killed with SIGKILL and restarted; the turns it had
are sent again marked as retries (the worker resumes a turn found half done from its checkpoint,
or finds it finished).

Measured: turns/s and model calls/s; per ``apply`` (each model call) the time memory added,
summarizer time inside the call excluded (and the whole apply); RSS per worker over time. Checked
from the final checkpoints and the summarizer's reports: turns lost or duplicated, messages
folded but never shown to the summarizer (lost), messages shown to it more than once
(double-folded: wasted summarizer work, or two workers folding the same thread), views or
summarizer inputs that show another thread's markers or summary (leaked), errors, summarizer
calls per fold. These must all be 0. **Goal**: p99 added latency per call <= 50 ms (summarizer
excluded, background compaction on). The fold a thread's last turn starts in the background is
adopted by no one (the conversation ends): those calls are counted apart, not as calls per fold.
"""

from __future__ import annotations

import contextlib
import json
import queue
import random
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import IO, Any

import numpy as np

from bench import harness
from bench.pgserver import fresh_schema, postgres_packages, setup_langgraph
from bench.soak_worker import MARKER, thread_of

__all__ = ["ADDED_P99_GOAL_MS", "FULL", "QUICK", "SoakConfig", "main", "run_soak", "write_results"]

#: the goal: the time memory adds to a model call (summarizer excluded, background compaction
#: on), p99, in milliseconds
ADDED_P99_GOAL_MS = 50.0


@dataclass(frozen=True)
class SoakConfig:
    mode: str
    workers: int = 4
    threads_per_worker: int = 500
    turns: int = 40
    #: turns a worker runs at once
    pool: int = 4
    #: the fake summarizer's latency (seconds, sleeping)
    delay: float = 0.05
    #: the SummaryBuffer's budget (its summary a fifth, background folds from three quarters)
    budget: int = 600
    #: FoldPolicy.fold_wait: how long a call that must fold waits for a fold running elsewhere
    #: (None, the default: until it ends, or until the lease of a killed worker expires)
    fold_wait: float | None = None
    #: kill one worker when this share of the turns is done (None: no kill)
    kill_at: float | None = 0.5
    #: give up after this many seconds (the report says so)
    time_limit_s: float = 900.0
    seed: int = 0


#: 80,000 turns at about 80 turns/s here (2 cores): about 17 minutes
FULL = SoakConfig(mode="full", time_limit_s=1_800.0)
QUICK = replace(FULL, mode="quick", workers=2, threads_per_worker=20, turns=10, pool=3)


@dataclass
class _Proc:
    """One incarnation of a worker process."""

    wid: int
    inc: int
    proc: subprocess.Popen[str]
    started: float
    ready_s: float | None = None
    rss: list[tuple[float, float]] = field(default_factory=list)
    bye: dict[str, Any] | None = None
    killed: bool = False


class _Fleet:
    """The worker processes: start, feed, kill; their lines land on one queue."""

    def __init__(self, dsn: str, config: SoakConfig, stderr: IO[str]) -> None:
        self.dsn, self.config, self.stderr = dsn, config, stderr
        self.lines: queue.Queue[tuple[int, int, dict[str, Any]]] = queue.Queue()
        self.procs: dict[int, _Proc] = {}
        self.history: list[_Proc] = []

    def start(self, wid: int) -> _Proc:
        inc = sum(1 for p in self.history if p.wid == wid)
        c = self.config
        cmd = [
            sys.executable,
            "-m",
            "bench.soak_worker",
            "--dsn",
            self.dsn,
            "--worker",
            str(wid),
            "--pool",
            str(c.pool),
            "--delay",
            str(c.delay),
            "--budget",
            str(c.budget),
        ]
        if c.fold_wait is not None:
            cmd += ["--fold-wait", str(c.fold_wait)]
        proc = subprocess.Popen(
            cmd,
            cwd=harness.ROOT,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self.stderr,
            text=True,
            bufsize=1,
        )
        p = _Proc(wid, inc, proc, time.perf_counter())
        self.procs[wid] = p
        self.history.append(p)
        threading.Thread(target=self._read, args=(p,), daemon=True).start()
        return p

    def _read(self, p: _Proc) -> None:
        assert p.proc.stdout is not None
        for line in p.proc.stdout:
            try:
                self.lines.put((p.wid, p.inc, json.loads(line)))
            except json.JSONDecodeError:  # a line cut by SIGKILL
                continue

    def send(self, wid: int, task: dict[str, Any]) -> None:
        stdin = self.procs[wid].proc.stdin
        assert stdin is not None
        stdin.write(json.dumps(task) + "\n")
        stdin.flush()

    def kill(self, wid: int) -> _Proc:
        p = self.procs[wid]
        p.proc.send_signal(signal.SIGKILL)
        p.proc.wait()
        p.killed = True
        return self.start(wid)

    def stop(self, timeout: float = 120.0) -> None:
        for wid in list(self.procs):
            with contextlib.suppress(BrokenPipeError, OSError):
                self.send(wid, {"quit": True})
        deadline = time.monotonic() + timeout
        for p in self.procs.values():
            try:
                p.proc.wait(max(1.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                p.proc.kill()


@dataclass
class _Tally:
    """What the turns, folds and samples said, as they came in."""

    #: per apply: seconds, the summarizer's seconds in that worker, wall start and end, thread
    applies: list[tuple[float, float, float, float, int]] = field(default_factory=list)
    #: thread -> wall (start, end) of every summarizer call for it, in any worker
    spans: dict[int, list[tuple[float, float]]] = field(default_factory=dict)
    turn_s: list[float] = field(default_factory=list)
    leaks: int = 0
    errors: Counter[str] = field(default_factory=Counter)
    how: Counter[str] = field(default_factory=Counter)
    shown: dict[int, Counter[int]] = field(default_factory=dict)
    #: thread -> (worker, incarnation, markers) of each summarizer call for it
    calls_by_thread: dict[int, list[tuple[int, int, list[int]]]] = field(default_factory=dict)
    #: the (worker, incarnation) killed
    killed: set[tuple[int, int]] = field(default_factory=set)
    fold_calls: int = 0
    fold_leaks: int = 0
    given_up: int = 0
    #: thread -> turns it finished (the checks expect those)
    completed: dict[int, int] = field(default_factory=dict)


# long: the dispatch loop: serialized turns, the kill and the re-sends, kept in one place
def _drive(
    fleet: _Fleet, config: SoakConfig, tally: _Tally, log: Callable[[str], None]
) -> dict[str, Any]:
    rng = random.Random(config.seed)
    threads = config.workers * config.threads_per_worker
    total = threads * config.turns
    inflight: dict[int, tuple[int, int, int, int]] = {}  # thread -> (wid, inc, turn, attempt)
    done_threads, done_turns = 0, 0
    kill: dict[str, Any] = {}

    def dispatch(tid: int, turn: int, retry: bool, attempt: int = 0) -> None:
        wid = rng.randrange(config.workers)
        fleet.send(wid, {"thread": tid, "turn": turn, "retry": retry})
        inflight[tid] = (wid, fleet.procs[wid].inc, turn, attempt)

    started = time.perf_counter()
    for tid in range(threads):
        dispatch(tid, 0, False)
    next_log = started + 30.0
    last_turn = started
    while done_threads < threads:
        if time.perf_counter() - started > config.time_limit_s:
            kill.setdefault("time_limit_hit", True)
            break
        if time.perf_counter() - last_turn > 30.0:  # stuck: say where (worker stacks on stderr)
            stuck = sorted(inflight.items())[:8]
            log(f"[soak] no turn finished for 30 s; in flight (thread: worker, turn): {stuck}")
            for p in fleet.procs.values():
                p.proc.send_signal(signal.SIGUSR1)
            last_turn = time.perf_counter()
        try:
            wid, inc, msg = fleet.lines.get(timeout=5.0)
        except queue.Empty:
            continue
        kind = msg.get("kind")
        if kind == "rss":
            _proc(fleet, wid, inc).rss.append((msg["t"], msg["rss_mb"]))
            continue
        if kind == "fold":
            tally.fold_calls += 1
            ts = set(msg["threads"])
            tally.fold_leaks += 1 if len(ts) > 1 else 0
            for n in msg["markers"]:
                tally.shown.setdefault(thread_of(n), Counter())[n] += 1
            for t in {thread_of(n) for n in msg["markers"]}:
                tally.spans.setdefault(t, []).append((msg["start"], msg["end"]))
                tally.calls_by_thread.setdefault(t, []).append((wid, inc, msg["markers"]))
            continue
        if kind == "ready":  # a restarted worker
            p = fleet.procs[wid]
            p.ready_s = time.perf_counter() - p.started
            p.rss.append((msg["t"], msg["rss_mb"]))
        if kind != "turn":
            continue
        tid, turn = msg["thread"], msg["turn"]
        last_turn = time.perf_counter()
        if inflight.get(tid, (None, None, None, 0))[:3] != (wid, inc, turn):
            continue  # a stale answer (a re-sent turn answered twice)
        tally.applies += [(a, b, s, e, tid) for a, b, s, e in msg["applies"]]
        tally.leaks += msg["leaks"]
        tally.how[msg["how"]] += 1
        if msg["error"]:
            tally.errors[msg["error"][:120]] += 1
            attempt = inflight[tid][3] + 1
            if attempt < 5:
                dispatch(tid, turn, True, attempt)
                continue
            tally.given_up += 1
        else:
            tally.turn_s.append(msg["seconds"])
        done_turns += 1
        tally.completed[tid] = turn + 1
        if turn + 1 < config.turns:
            dispatch(tid, turn + 1, False)
        else:
            del inflight[tid]
            done_threads += 1
        if config.kill_at is not None and not kill and done_turns >= config.kill_at * total:
            victim = 0
            lost = [
                t
                for t, (w, i, _, _) in inflight.items()
                if w == victim and i == fleet.procs[victim].inc
            ]
            at = time.perf_counter() - started
            tally.killed.add((victim, fleet.procs[victim].inc))
            fresh = fleet.kill(victim)
            for t in lost:
                dispatch(t, inflight[t][2], True)
            kill = {
                "worker": victim,
                "at_s": at,
                "at_turns": done_turns,
                "resent": len(lost),
                "restarted_inc": fresh.inc,
            }
            log(f"[soak] killed worker {victim} at {done_turns:,} turns; {len(lost)} turns resent")
        if time.perf_counter() > next_log:
            next_log += 30.0
            log(f"[soak] {done_turns:,} / {total:,} turns, {time.perf_counter() - started:.0f} s")
    return {
        "wall_s": time.perf_counter() - started,
        "turns_done": done_turns,
        "threads_done": done_threads,
        "kill": kill,
    }


def _proc(fleet: _Fleet, wid: int, inc: int) -> _Proc:
    return next(p for p in fleet.history if p.wid == wid and p.inc == inc)


def _shown_twice(
    calls: Sequence[tuple[int, int, list[int]]], killed: set[tuple[int, int]]
) -> Counter[str]:
    """Messages shown to the summarizer more than once: ``after_kill`` when an earlier showing
    was by a worker killed later (its fold died with it: folding again is the recovery),
    ``double`` otherwise (wasted work, or two workers folding one thread)."""
    by: dict[int, list[tuple[int, int]]] = {}
    for wid, inc, markers in calls:
        for n in markers:
            by.setdefault(n, []).append((wid, inc))
    out: Counter[str] = Counter()
    for shows in by.values():
        if len(shows) > 1:
            out["after_kill" if any(w in killed for w in shows[:-1]) else "double"] += 1
    return out


def _check(dsn: str, config: SoakConfig, tally: _Tally) -> dict[str, Any]:
    """The final checkpoints against what was asked and what the summarizer was shown."""
    import psycopg
    from langgraph.checkpoint.postgres import PostgresSaver

    from langmem_ext import MemoryState

    threads = config.workers * config.threads_per_worker
    out: Counter[str] = Counter()
    examples: list[str] = []
    with PostgresSaver.from_conn_string(dsn) as saver:
        for tid in range(threads):
            found = saver.get_tuple({"configurable": {"thread_id": f"t{tid}"}})
            values = found.checkpoint["channel_values"] if found else {}
            messages = list(values.get("messages", []))
            ids = [m.id for m in messages]
            asked = {f"t{tid}-{j}" for j in range(tally.completed.get(tid, 0))}
            out["lost_turns"] += len(asked - set(ids))
            out["duplicated_messages"] += len(ids) - len(set(ids))
            unanswered = {f"{a}-a3" for a in asked} - set(ids)
            out["unanswered_turns"] += len(unanswered)
            if unanswered and len(examples) < 5:
                examples.append(f"t{tid}: {sorted(unanswered)} of {ids[-6:]}")
            memory = MemoryState.coerce(values["memory"]) if values.get("memory") else None
            shown = tally.shown.get(tid, Counter())
            twice = _shown_twice(tally.calls_by_thread.get(tid, []), tally.killed)
            out["double_folded"] += twice["double"]
            out["refolded_after_kill"] += twice["after_kill"]
            out["marker_leaks"] += sum(1 for n in shown if thread_of(n) != tid)
            if memory is None:
                continue
            out["folds"] += memory.folds
            folded: set[int] = set()
            for m in messages[: memory.folded]:
                text = m.content if isinstance(m.content, str) else str(m.content)
                for n in MARKER.findall(text):
                    folded.add(int(n))
                    out["folded_messages"] += 1
                    out["lost_messages"] += 0 if shown[int(n)] else 1
            # the background fold of the thread's last turn: adopted by no one
            calls = tally.calls_by_thread.get(tid, [])
            out["unadopted_at_end"] += sum(1 for _, _, c in calls if not folded.intersection(c))
    with psycopg.connect(dsn) as conn:
        row = conn.execute("SELECT count(*) FROM store WHERE prefix LIKE 'soak.%%'").fetchone()
    out["store_notes"] = int(row[0]) if row else 0
    out["store_notes_expected"] = threads * ((config.turns + 1) // 2)
    return {**out, "unanswered_examples": examples}


def _added(
    row: tuple[float, float, float, float, int], spans: dict[int, list[tuple[float, float]]]
) -> float:
    """An apply's seconds without the summarizer's: its calls for the thread in this worker
    (an inline fold, a wait for its own background fold) or in any other (a wait for a fold
    shared by another worker), by wall clock (one machine)."""
    seconds, local, start, end, thread = row
    covered, reach = 0.0, start
    for s, e in sorted(spans.get(thread, ())):
        s, e = max(s, reach), min(e, end)
        if e > s:
            covered += e - s
            reach = e
    return max(0.0, seconds - max(local, covered))


def _ms(values: Sequence[float], q: float) -> float | None:
    return float(np.percentile(np.asarray(values) * 1_000.0, q)) if values else None


def _rss(history: Sequence[_Proc], t0: float) -> list[dict[str, Any]]:
    out = []
    for p in history:
        series = [(t - t0, mb) for t, mb in p.rss]
        picks = [series[int(i * (len(series) - 1) / 4)] for i in range(5)] if series else []
        out.append(
            {
                "worker": p.wid,
                "incarnation": p.inc,
                "killed": p.killed,
                "ready_s": p.ready_s,
                "samples": [[round(t, 1), round(mb, 1)] for t, mb in picks],
                "max_mb": max((mb for _, mb in series), default=None),
                "bye": p.bye,
            }
        )
    return out


# long: set-up, the drive, the checks and the results, in order
def run_soak(
    config: SoakConfig,
    log: Callable[[str], None] = harness.log_progress,
    command: str = "",
    dsn: str | None = None,
) -> dict[str, Any]:
    """Run the soak on ``dsn`` (default: a fresh schema on the machine's server)."""
    if dsn is None:
        with fresh_schema(prefix="langmem_soak") as fresh:
            return run_soak(config, log, command, fresh)
    clock = harness.RunClock()
    setup_langgraph(dsn)
    tally = _Tally()
    (harness.ROOT / ".cache").mkdir(exist_ok=True)
    with open(
        harness.ROOT / ".cache" / f"soak_workers_{config.mode}.log", "w", encoding="utf-8"
    ) as stderr:
        fleet = _Fleet(dsn, config, stderr)
        t0 = time.time()
        for wid in range(config.workers):
            fleet.start(wid)
        _await_ready(fleet)
        driven = _drive(fleet, config, tally, log)
        fleet.stop()
        _drain(fleet)
    checks = _check(dsn, config, tally)
    added = [_added(row, tally.spans) for row in tally.applies]
    whole = [row[0] for row in tally.applies]
    results: dict[str, Any] = {
        "meta": clock.meta(
            config,
            command or "python -m bench.soak",
            **postgres_packages(),
            langchain=harness.package_version("langchain"),
        ),
        "run": driven,
        "throughput": {
            "turns_per_s": driven["turns_done"] / driven["wall_s"],
            "calls_per_s": len(tally.applies) / driven["wall_s"],
            "model_calls": len(tally.applies),
        },
        "latency_ms": {
            "added_p50": _ms(added, 50),
            "added_p99": _ms(added, 99),
            "apply_p50": _ms(whole, 50),
            "apply_p99": _ms(whole, 99),
            "turn_p50": _ms(tally.turn_s, 50),
            "turn_p99": _ms(tally.turn_s, 99),
            "turn_max": max(tally.turn_s, default=0.0) * 1_000.0,
            "turns_over_10s": sum(1 for t in tally.turn_s if t > 10.0),
        },
        "checks": checks,
        "errors": dict(tally.errors.most_common(10)),
        "error_count": sum(tally.errors.values()),
        "given_up": tally.given_up,
        "view_leaks": tally.leaks,
        "fold_input_leaks": tally.fold_leaks,
        "turn_outcomes": dict(tally.how),
        "summarizer_calls": tally.fold_calls,
        "summarizer_calls_per_fold": (tally.fold_calls - checks.get("unadopted_at_end", 0))
        / checks["folds"]
        if checks.get("folds")
        else None,
        "rss": _rss(fleet.history, t0),
    }
    return clock.finish(results)


def _await_ready(fleet: _Fleet, timeout: float = 120.0) -> None:
    waiting = {p.wid for p in fleet.procs.values()}
    deadline = time.monotonic() + timeout
    while waiting and time.monotonic() < deadline:
        try:
            wid, _, msg = fleet.lines.get(timeout=1.0)
        except queue.Empty:
            continue
        if msg.get("kind") == "ready":
            p = fleet.procs[wid]
            p.ready_s = time.perf_counter() - p.started
            p.rss.append((msg["t"], msg["rss_mb"]))
            waiting.discard(wid)
    if waiting:
        raise RuntimeError(f"soak workers {sorted(waiting)} did not start")


def _drain(fleet: _Fleet) -> None:
    """The lines left after the stop (each worker's ``bye``)."""
    while True:
        try:
            wid, inc, msg = fleet.lines.get(timeout=0.5)
        except queue.Empty:
            return
        p = _proc(fleet, wid, inc)
        if msg.get("kind") == "bye":
            p.bye = {k: msg[k] for k in ("running", "summarizer_calls", "model_calls", "rss_mb")}
            p.rss.append((msg["t"], msg["rss_mb"]))
        elif msg.get("kind") == "rss":
            p.rss.append((msg["t"], msg["rss_mb"]))


def _f(value: float | None, digits: int = 1) -> str:
    return "n/a" if value is None else f"{value:,.{digits}f}"


def _goal_lines(latency_ms: dict[str, Any]) -> list[str]:
    """The report's ``Goals`` section: the added latency's p99 against :data:`ADDED_P99_GOAL_MS`
    (no verdict where the run measured none)."""
    p99 = latency_ms.get("added_p99")
    return [
        "",
        "## Goals",
        "",
        *harness.md_table(
            ["goal", "value", "verdict"],
            [
                [
                    f"p99 added latency per call ≤ {ADDED_P99_GOAL_MS:.0f} ms "
                    "(summarizer excluded, background compaction on)",
                    "n/a" if p99 is None else f"{p99:.2f} ms",
                    "n/a" if p99 is None else harness.verdict(p99 <= ADDED_P99_GOAL_MS),
                ]
            ],
            "l--",
        ),
    ]


# long: the report, section by section
def render_markdown(results: dict[str, Any]) -> str:
    meta, c = results["meta"], results["meta"]["config"]
    lines = [
        "# Soak: agents on PostgreSQL across worker processes",
        "",
        *harness.provenance_lines(meta),
    ]
    lines.append(
        f"- {c['workers']} workers x {c['threads_per_worker']} threads x {c['turns']} turns, "
        f"{c['pool']} turns at once per worker, summarizer latency {c['delay']} s (sleep); "
        f"load {harness.load_span(meta)}"
    )
    k = results["run"]["kill"]
    if k.get("worker") is not None:
        lines.append(
            f"- Worker {k['worker']} killed (SIGKILL) at {k['at_s']:.0f} s "
            f"({k['at_turns']:,} turns done), restarted; {k['resent']} turns re-sent"
        )
    if k.get("time_limit_hit"):
        lines.append("- **Stopped at the time limit**: not every turn ran.")
    ch = results["checks"]
    zero = [
        ("lost turns", ch.get("lost_turns", 0)),
        ("unanswered turns", ch.get("unanswered_turns", 0)),
        ("duplicated messages", ch.get("duplicated_messages", 0)),
        ("lost messages (folded, never summarized)", ch.get("lost_messages", 0)),
        ("leaked (views)", results["view_leaks"]),
        ("leaked (summarizer inputs)", results["fold_input_leaks"] + ch.get("marker_leaks", 0)),
        ("errors", results["error_count"]),
        ("turns given up", results["given_up"]),
        ("double-folded messages (shown to the summarizer twice)", ch.get("double_folded", 0)),
    ]
    refolded = ch.get("refolded_after_kill", 0)
    lines += ["", "## Invariants", ""]
    lines += harness.md_table(
        ["check", "count", "verdict"],
        [[n, str(v), harness.verdict(v == 0)] for n, v in zero]
        + [
            [
                "folded again after the kill (the killed worker's fold died with it)",
                f"{refolded}",
                "-",
            ]
        ],
        "l--",
    )
    lines += _goal_lines(results["latency_ms"])
    t, lat = results["throughput"], results["latency_ms"]
    lines += ["", "## Throughput and latency", ""]
    lines += harness.md_table(
        ["measure", "value"],
        [
            ["turns/s", _f(t["turns_per_s"])],
            ["model calls/s", _f(t["calls_per_s"])],
            ["model calls", f"{t['model_calls']:,}"],
            [
                "added per call p50 / p99 (ms, summarizer excluded)",
                f"{_f(lat['added_p50'], 2)} / {_f(lat['added_p99'], 2)}",
            ],
            ["apply p50 / p99 (ms)", f"{_f(lat['apply_p50'], 2)} / {_f(lat['apply_p99'], 2)}"],
            [
                "turn p50 / p99 / max (ms, whole agent turn)",
                f"{_f(lat['turn_p50'])} / {_f(lat['turn_p99'])} / {_f(lat['turn_max'])}",
            ],
            ["turns over 10 s", str(lat["turns_over_10s"])],
            [
                "summarizer calls / committed folds",
                f"{results['summarizer_calls']:,} / {ch.get('folds', 0):,}",
            ],
            [
                "summarizer calls per fold (not counting the last turn's fold, adopted by no one)",
                f"{_f(results['summarizer_calls_per_fold'], 2)} "
                f"({ch.get('unadopted_at_end', 0):,} not counted)",
            ],
            ["messages folded (committed)", f"{ch.get('folded_messages', 0):,}"],
            [
                "store notes / expected",
                f"{ch.get('store_notes', 0):,} / {ch.get('store_notes_expected', 0):,}",
            ],
        ],
    )
    lines += ["", "## RSS per worker (MB at 0/25/50/75/100% of its life; t in s)", ""]
    lines += harness.md_table(
        ["worker", "killed", "start (s)", "samples (t: MB)", "max MB"],
        [
            [
                f"{r['worker']}.{r['incarnation']}",
                "yes" if r["killed"] else "no",
                _f(r["ready_s"]),
                ", ".join(f"{t:.0f}: {mb:.0f}" for t, mb in r["samples"]),
                _f(r["max_mb"], 0),
            ]
            for r in results["rss"]
        ],
    )
    if results["errors"]:
        lines += ["", "## Errors", ""] + [f"- {n} x `{e}`" for e, n in results["errors"].items()]
    lines += ["", f"Turn outcomes: {results['turn_outcomes']}"]
    return "\n".join(lines) + "\n"


#: ``write_results(results, out_dir, stem)``: ``<stem>.md`` and ``<stem>.json``
write_results = harness.results_writer(render_markdown)


def main(argv: Sequence[str] | None = None) -> int:
    return harness.bench_main(
        argv,
        module="bench.soak",
        description="Soak: agents with MemoryMiddleware on PostgreSQL, worker processes, a kill.",
        quick_help="smoke run: 2 workers x 20 threads x 10 turns (~30 s)",
        configs=(FULL, QUICK),
        run=run_soak,
        write=write_results,
    )


if __name__ == "__main__":
    raise SystemExit(main())
