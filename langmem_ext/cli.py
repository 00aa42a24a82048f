"""Command line: ``python -m langmem_ext demo`` (also installed as ``langmem-ext``).

``demo`` replays a long synthetic agent conversation (seeded, offline, no API key) through the
strategies and prints, for every model call, what the model would see and the token figures.
``replay`` and ``compare`` do the same for a saved conversation of yours (a transcript file or a
LangGraph checkpointer thread, ``--sqlite PATH --thread ID`` or ``--postgres DSN --thread ID``):
per call, or strategies side by side with cost, a CSV, JSON and plots (see
:mod:`langmem_ext.replay`). ``make demo`` (examples/agent.py, a ``create_agent`` with memory)
writes its thread ``demo`` to the SQLite file it prints (its own flag is ``--sqlite PATH`` too),
so ``langmem-ext compare --sqlite PATH --thread demo --strategy ...`` replays it.

Every flag is checked before anything runs: a value out of range is reported by argparse as
``argument --flag: ...`` with the range, and anything the library refuses later (a counter it
does not know, a budget too small for the conversation) as ``langmem-ext: error: ...`` naming the
flag to change, exit status 2, never a traceback.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
from collections.abc import Callable, Sequence

from langmem_ext.core.messages import validate
from langmem_ext.core.result import MemoryResult
from langmem_ext.core.shape import SHAPE_LEGEND, view_shape
from langmem_ext.core.tokens import TokenCounter
from langmem_ext.counting.resolve import as_counter
from langmem_ext.errors import ContextOverflowError, LangmemExtError
from langmem_ext.strategies.presets import SlidingWindow, TokenBudget
from langmem_ext.testing import agent_loop

__all__ = ["main"]

PROG = "langmem-ext"
#: the demo's defaults when --max-tokens is 8,000; --target-tokens and --reserve-tokens scale
#: with --max-tokens when not given (half of it, and 1/16 of it up to 500)
DEFAULT_MAX_TOKENS = 8_000
DEFAULT_RESERVE_TOKENS = 500


class CliError(Exception):
    """A message for the user (no traceback): printed as ``langmem-ext: error: ...``, exit 2."""


def _int_at_least(low: int) -> Callable[[str], int]:
    """An argparse ``type=``: an integer >= ``low``, or an error that states the range."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be an integer >= {low}, got {text!r}") from None
        if value < low:
            raise argparse.ArgumentTypeError(f"must be an integer >= {low}, got {value}")
        return value

    parse.__name__ = f"integer >= {low}"  # what argparse calls the type in its messages
    return parse


def _budget_args(args: argparse.Namespace) -> tuple[int, int]:
    """--target-tokens and --reserve-tokens, defaulted from --max-tokens and checked against it
    (the flags each have a range of their own, and these relations between them)."""
    max_tokens: int = args.max_tokens
    target = args.target_tokens if args.target_tokens is not None else max(max_tokens // 2, 1)
    if args.reserve_tokens is not None:
        reserve: int = args.reserve_tokens
    else:
        reserve = _default_reserve(max_tokens)
    if target > max_tokens:
        raise CliError(
            f"--target-tokens must be between 1 and --max-tokens ({max_tokens:,}), "
            f"got {target:,}: it is the level a cut goes down to"
        )
    if reserve >= max_tokens:
        raise CliError(
            f"--reserve-tokens must be between 0 and --max-tokens - 1 ({max_tokens - 1:,}), "
            f"got {reserve:,}: it is held back from the budget for the model's answer"
        )
    return target, reserve


def _counter(spec: str) -> TokenCounter:
    try:
        return as_counter(spec)
    except (LangmemExtError, ValueError) as exc:
        raise CliError(f"--counter {spec!r}: {exc}") from exc


def _default_reserve(max_tokens: int) -> int:
    return min(DEFAULT_RESERVE_TOKENS, max_tokens // 16)


def _too_small(args: argparse.Namespace, call: int, exc: ContextOverflowError) -> str:
    """The library's overflow error in the CLI's terms: the flag to change and the smallest value
    that fits this call (the library's own message advises constructor arguments)."""
    max_tokens: int = args.max_tokens
    fixed = max_tokens - exc.available - exc.reserve_tokens  # system message, overhead
    floor = fixed + exc.needed + exc.reserve_tokens
    if args.reserve_tokens is None:  # the default reserve grows with --max-tokens
        floor = fixed + exc.needed
        while floor - _default_reserve(floor) < fixed + exc.needed:
            floor += 1
    return (
        f"--max-tokens {max_tokens:,} is too small for this conversation: at model call {call} "
        f"the messages that must be in the view (the newest human turn, with any tool calls and "
        f"results it belongs to) need {exc.needed:,} tokens, but --max-tokens {max_tokens:,} "
        f"leaves {max(exc.available, 0):,} after --reserve-tokens ({exc.reserve_tokens:,}) and the "
        f"system message ({exc.system_tokens:,}). Use --max-tokens of at least {floor:,} "
        "(more if a later turn is larger)"
    )


def _demo_strategies(args: argparse.Namespace) -> tuple[TokenBudget, SlidingWindow]:
    """The two strategies the demo compares, from the flags."""
    target_tokens, reserve_tokens = _budget_args(args)
    counter = _counter(args.counter)
    try:
        budget = TokenBudget(
            args.max_tokens,
            target_tokens=target_tokens,
            counter=counter,
            reserve_tokens=reserve_tokens,
        )
    except (LangmemExtError, ValueError) as exc:  # a relation the checks above do not know
        raise CliError(f"--max-tokens/--target-tokens/--reserve-tokens: {exc}") from exc
    return budget, SlidingWindow(args.window, counter=budget.counter)


def _demo(args: argparse.Namespace) -> int:
    budget, window = _demo_strategies(args)
    print(
        f"langmem_ext demo: a seeded synthetic agent conversation (seed {args.seed}), "
        f"{args.messages:,} messages, counter {budget.counter!r}"
    )
    print(f"  {budget!r}   vs   {window!r}")
    print(f"  {SHAPE_LEGEND}")
    print()
    header = (
        f"{'call':>5} {'history':>8} {'hist tok':>9} | {'budget view':<32} {'msgs':>4} "
        f"{'tokens':>7} {'cache':>5} | {'window view':<22} {'tokens':>7}"
    )
    print(header)
    print("-" * len(header))
    b_state = w_state = None
    calls = kept = invalid = over = 0
    peak = 0
    last_b: MemoryResult | None = None
    for history in agent_loop(args.messages, seed=args.seed):
        try:
            b = budget.apply(history, b_state)
        except ContextOverflowError as exc:
            raise CliError(_too_small(args, calls + 1, exc)) from exc
        w = window.apply(history, w_state)
        b_state, w_state = b.state, w.state
        calls += 1
        kept += b.report.prefix_kept
        invalid += any(f.severity == "error" for f in validate(b.messages))
        over += b.report.budget is not None and b.report.tokens_after > b.report.budget
        peak = max(peak, b.report.tokens_after)
        last_b = b
        if args.every and (calls - 1) % args.every == 0:
            mark = "=" if b.report.prefix_kept else "*"
            b_shape, w_shape = view_shape(b.messages, width=32), view_shape(w.messages, width=22)
            print(
                f"{calls:>5} {len(history):>8,} {b.report.tokens_before:>9,} | "
                f"{b_shape:<32} {len(b.messages):>4} {b.report.tokens_after:>7,} "
                f"{mark:>5} | {w_shape:<22} {w.report.tokens_after:>7,}"
            )
    print()
    if last_b is None:
        print("no model calls (try more --messages)")
        return 0
    print(f"model calls: {calls:,}; history at the end: {last_b.report.messages_before:,} messages")
    print(
        f"TokenBudget: every view within {last_b.report.budget:,} tokens "
        f"(peak {peak:,}; over budget: {over}); provider-invalid views: {invalid}; "
        f"calls that kept the previous view as prefix ('='): {kept:,} ({kept / calls:.0%})"
    )
    before, after = last_b.report.tokens_before, last_b.report.tokens_after
    print(f"history tokens at the end: {before:,}; the model saw {after:,} ({after / before:.1%})")
    return 0 if invalid == 0 and over == 0 else 1


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=PROG, description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    demo = sub.add_parser("demo", help="replay a synthetic agent conversation through strategies")
    demo.add_argument(
        "--messages", type=_int_at_least(1), default=600, help="conversation length (>= 1)"
    )
    demo.add_argument("--seed", type=int, default=7, help="any integer")
    demo.add_argument(
        "--max-tokens",
        type=_int_at_least(1),
        default=DEFAULT_MAX_TOKENS,
        help="TokenBudget max_tokens (>= 1; default %(default)s)",
    )
    demo.add_argument(
        "--target-tokens",
        type=_int_at_least(1),
        default=None,
        help="TokenBudget target_tokens (1 .. --max-tokens; default: half of --max-tokens)",
    )
    demo.add_argument(
        "--reserve-tokens",
        type=_int_at_least(0),
        default=None,
        help=(
            "TokenBudget reserve_tokens (0 .. --max-tokens - 1; default: 1/16 of --max-tokens, "
            f"at most {DEFAULT_RESERVE_TOKENS})"
        ),
    )
    demo.add_argument(
        "--window", type=_int_at_least(1), default=12, help="SlidingWindow max_messages (>= 1)"
    )
    demo.add_argument(
        "--counter",
        default="approximate",
        help="'approximate' (default, offline) or an OpenAI model / tiktoken encoding name",
    )
    demo.add_argument(
        "--every", type=_int_at_least(0), default=1, help="print every Nth call (0: summary)"
    )
    from langmem_ext.replay.cli import add_commands

    add_commands(sub)
    sub.add_parser(
        "seed-tiktoken",
        help="seed tiktoken's cache for use behind a firewall (see langmem_ext.counting.seeding)",
        add_help=False,
    )
    return parser


def _tolerant_output() -> None:
    """Make stdout and stderr replace what their encoding cannot show (``?``) instead of
    raising: under ``LANG=C`` or ``PYTHONIOENCODING=ascii`` the tables' ``÷``, ``…`` and the
    transcripts' own text would otherwise end the run with a codec error."""
    for stream in (sys.stdout, sys.stderr):
        reconfigure = getattr(stream, "reconfigure", None)
        # "strict", or "surrogateescape" (what Python picks for the C/POSIX locale)
        if callable(reconfigure) and getattr(stream, "errors", None) in (
            "strict",
            "surrogateescape",
        ):
            with contextlib.suppress(ValueError, OSError):  # a closed or odd stream
                reconfigure(errors="replace")


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit status (2: a usage or configuration error)."""
    _tolerant_output()
    args, rest = _parser().parse_known_args(argv)  # exits 2 with the flag's range on a bad value
    if args.command == "seed-tiktoken":  # its own parser: langmem_ext.counting.seeding
        from langmem_ext.counting.seeding import main as seed_main

        return seed_main(rest, prog=f"{PROG} seed-tiktoken")
    if rest:
        _parser().error(f"unrecognized arguments: {' '.join(rest)}")
    try:
        if args.command in ("replay", "compare"):
            from langmem_ext.replay.cli import ReplayCliError, run_command

            try:
                return run_command(args)
            except ReplayCliError as exc:
                raise CliError(str(exc)) from exc
        return _demo(args)
    except (CliError, LangmemExtError, ValueError) as exc:  # ours, or what the library refuses
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # `langmem-ext demo | head`: the reader left; stop quietly
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())  # so the interpreter's final flush does not fail
        return 1


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
