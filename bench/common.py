"""Helpers every benchmark here uses: progress logging, the prefix test of two views, and the
command line (``--quick``, ``--out``, ``--seed``) around a benchmark's run. (Package versions
and the machine are in ``bench/env.py``.)

One of each, so the four benchmarks (``bench``, ``bench.summaries``, ``bench.growth``,
``bench.retrieval``) cannot drift apart: they used to carry their own copies, and the two copies
of the prefix test had come to disagree (identity only vs identity or equality).
"""

from __future__ import annotations

import argparse
import shlex
import sys
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from langchain_core.messages import BaseMessage

from bench.env import ROOT

__all__ = ["bench_main", "is_prefix", "log_progress"]


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


def bench_main(
    argv: Sequence[str] | None,
    *,
    module: str,
    description: str,
    quick_help: str,
    configs: tuple[Any, Any],
    run: Callable[..., dict[str, Any]],
    write: Callable[[dict[str, Any], Path, str], tuple[Path, Path]],
    stem: Callable[[str], str],
    default_out: Path,
    seed_help: str | None = None,
) -> int:
    """The command line of one benchmark: parse ``--quick``, ``--out`` and (when ``seed_help``
    is given) ``--seed``; run ``run(config, command=...)`` on the full or quick config (a frozen
    dataclass with ``mode`` and, with ``--seed``, ``seed``); write the results under
    ``stem(mode)`` in the output directory; print the markdown report and log where it went."""
    full, quick = configs
    parser = argparse.ArgumentParser(prog=f"python -m {module}", description=description)
    parser.add_argument("--quick", action="store_true", help=quick_help)
    parser.add_argument(
        "--out",
        type=Path,
        default=default_out,
        help=f"directory for the results (default: {default_out.relative_to(ROOT)})",
    )
    if seed_help is not None:
        parser.add_argument("--seed", type=int, default=None, help=seed_help)
    args = parser.parse_args(argv)
    config = quick if args.quick else full
    if getattr(args, "seed", None) is not None:
        config = replace(config, seed=args.seed)
    command = shlex.join(["python", "-m", module, *(sys.argv[1:] if argv is None else argv)])
    results = run(config, command=command)
    md_path, json_path = write(results, args.out, stem(config.mode))
    print(md_path.read_text(encoding="utf-8"))
    name = module.removeprefix("bench.") if module != "bench" else "bench"
    log_progress(
        f"[{name}] wrote {md_path} and {json_path} in {results['meta']['runtime_s']:.0f} s"
    )
    return 0
