"""Command line: ``python -m langmem_ext demo`` (also installed as ``langmem-ext``).

``demo`` replays a long synthetic agent conversation (seeded, offline, no API key) through the
strategies and prints, for every model call, what the model would see and the token figures.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage, ToolMessage

from langmem_ext.errors import LangmemExtError
from langmem_ext.messages import validate
from langmem_ext.result import MemoryResult
from langmem_ext.strategies import SlidingWindow, TokenBudget
from langmem_ext.testing import agent_loop

__all__ = ["main"]

_LETTER = {SystemMessage: "S", HumanMessage: "H", AIMessage: "A", ToolMessage: "T"}


def shape(messages: Sequence[BaseMessage], limit: int = 28) -> str:
    """A compact picture of a view: S system, H human, A assistant, T tool result, c a call."""
    letters = []
    for m in messages:
        letter = _LETTER.get(type(m), "?")
        if isinstance(m, AIMessage) and m.tool_calls:
            letter = "c"
        letters.append(letter)
    text = "".join(letters)
    return text if len(text) <= limit else f"{text[:3]}…{text[-(limit - 4) :]}"


def _demo(args: argparse.Namespace) -> int:
    counter: str = args.counter
    budget = TokenBudget(
        args.max_tokens,
        target_tokens=args.target_tokens,
        counter=counter,
        reserve_tokens=args.reserve_tokens,
    )
    window = SlidingWindow(args.window, counter=budget.counter)
    print(
        f"langmem_ext demo: a seeded synthetic agent conversation (seed {args.seed}), "
        f"{args.messages:,} messages, counter {budget.counter!r}"
    )
    print(f"  {budget!r}   vs   {window!r}")
    print("  view shapes: S system, H human, A assistant, c assistant calling tools, T tool result")
    print()
    header = (
        f"{'call':>5} {'history':>8} {'hist tok':>9} | {'budget view':<28} {'msgs':>4} "
        f"{'tokens':>7} {'cache':>5} | {'window view':<20} {'tokens':>7}"
    )
    print(header)
    print("-" * len(header))
    b_state = w_state = None
    calls = kept = invalid = over = 0
    peak = 0
    last_b: MemoryResult | None = None
    for history in agent_loop(args.messages, seed=args.seed):
        b = budget.apply(history, b_state)
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
            print(
                f"{calls:>5} {len(history):>8,} {b.report.tokens_before:>9,} | "
                f"{shape(b.messages):<28} {len(b.messages):>4} {b.report.tokens_after:>7,} "
                f"{mark:>5} | {shape(w.messages, 20):<20} {w.report.tokens_after:>7,}"
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


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="langmem-ext", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    demo = sub.add_parser("demo", help="replay a synthetic agent conversation through strategies")
    demo.add_argument("--messages", type=int, default=600, help="conversation length")
    demo.add_argument("--seed", type=int, default=7)
    demo.add_argument("--max-tokens", type=int, default=8_000)
    demo.add_argument("--target-tokens", type=int, default=4_000)
    demo.add_argument("--reserve-tokens", type=int, default=500)
    demo.add_argument("--window", type=int, default=12, help="SlidingWindow max_messages")
    demo.add_argument(
        "--counter",
        default="approximate",
        help="'approximate' (default, offline) or an OpenAI model / tiktoken encoding name",
    )
    demo.add_argument("--every", type=int, default=1, help="print every Nth call (0: summary)")
    args = parser.parse_args(argv)
    try:
        return _demo(args)
    except (LangmemExtError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
