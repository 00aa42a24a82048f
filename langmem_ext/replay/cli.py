"""``langmem-ext replay`` and ``langmem-ext compare``: strategies over a saved conversation.

The transcript comes from a file (LangChain ``messages_to_dict`` JSON/JSONL, OpenAI Chat
Completions ``messages``, Anthropic Messages; the format is detected) or from a LangGraph
checkpointer thread (``--sqlite PATH --thread ID``, ``--postgres DSN --thread ID``). Bad input
(an unknown format, broken JSON, a tool result with no call, a strategy spec with a typo) is
one line on stderr and exit status 2. Reading is bounded: a file over ``--max-bytes`` (default
256 MiB) or one that is not a regular file (a named pipe, a device) is refused before it is
read, and hostile JSON (nested thousands deep, a 5,000-digit number) is refused naming the file
and line.

``--facts FILE`` (one fact a line) or ``--facts auto`` (codes, numbers and names said once, found
in the transcript) adds which facts survived each strategy: facts in the model's input at the
final call (``k / n``), the mean share of the calls after a fact was said that still had it, and
the summarizer's cost; ``--json`` carries the per-fact rows and ``--csv FILE`` writes them to
``FILE``'s sibling ``<stem>-facts.csv``. Facts are not followed unless asked: a detected set is a
heuristic (tool output full of ids and numbers makes a long list), and the table's columns stay
the same for scripts that read it. ``replay`` without ``--strategy`` replays
:data:`DEFAULT_REPLAY`; ``compare`` without one, :data:`DEFAULT_COMPARE`.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from langmem_ext.replay.comparison import Comparison
from langmem_ext.replay.engine import DEFAULT_MODEL, compare, model_calls, resolve_facts
from langmem_ext.replay.facts import read_facts
from langmem_ext.replay.prices import load_prices
from langmem_ext.replay.specs import STRATEGIES, parse_strategy
from langmem_ext.replay.transcripts.checkpoints import load_postgres_thread, load_sqlite_thread
from langmem_ext.replay.transcripts.limits import DEFAULT_MAX_BYTES
from langmem_ext.replay.transcripts.parse import load_transcript
from langmem_ext.replay.transcripts.reading import Transcript

__all__ = ["DEFAULT_COMPARE", "DEFAULT_REPLAY", "add_commands", "run_command"]

#: what ``replay`` runs when no --strategy is given (one of :data:`DEFAULT_COMPARE`)
DEFAULT_REPLAY = "summary_buffer:8000"

#: what ``compare`` runs when no --strategy is given
DEFAULT_COMPARE = (
    "full",
    "token_budget:8000",
    "tool_digest:8000",
    "summary_buffer:8000",
    "tiered_summary:8000",
)

_SPEC_HELP = (
    "a strategy spec NAME[:ARGS], e.g. 'summary_buffer:max_tokens=8000' or 'token_budget:8k'; "
    f"names: {', '.join(STRATEGIES)}, full (the whole history), retrieval+NAME"
)


class ReplayCliError(Exception):
    """A message for the user: printed as ``langmem-ext: error: ...``, exit 2."""


def _positive_int(text: str) -> int:
    """An argparse ``type=``: an integer >= 1 (digits only, so a 5,000-digit value is an
    argparse error, not a traceback)."""
    value = text.strip().replace("_", "")
    if not value.isdigit() or len(value) > 30 or int(value) < 1:
        raise argparse.ArgumentTypeError(f"must be an integer >= 1, got {text[:40]!r}")
    return int(value)


_positive_int.__name__ = "integer >= 1"


def _seconds(text: str) -> float:
    """An argparse ``type=``: a number of seconds >= 0."""
    try:
        value = float(text.strip())
    except ValueError:
        value = -1.0
    if not 0 <= value < float("inf"):
        raise argparse.ArgumentTypeError(f"must be a number of seconds >= 0, got {text[:40]!r}")
    return value


_seconds.__name__ = "seconds"


def _inputs(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "file",
        nargs="?",
        type=Path,
        help="transcript: LangChain messages_to_dict JSON/JSONL, OpenAI or Anthropic messages",
    )
    source = parser.add_mutually_exclusive_group()
    source.add_argument("--sqlite", metavar="PATH", help="a LangGraph SqliteSaver database")
    source.add_argument("--postgres", metavar="DSN", help="a LangGraph PostgresSaver database")
    parser.add_argument(
        "--thread", metavar="ID", help="the thread_id to read (with a checkpointer)"
    )
    parser.add_argument(
        "--max-bytes",
        type=_positive_int,
        default=DEFAULT_MAX_BYTES,
        metavar="N",
        help="refuse a transcript or prices file larger than N bytes (default: %(default)s, "
        "256 MiB)",
    )
    parser.add_argument(
        "--channel",
        default="messages",
        help="the state key holding the messages (default: %(default)s)",
    )
    parser.add_argument(
        "--format",
        choices=("auto", "langchain", "openai", "anthropic"),
        default="auto",
        help="transcript format (default: detected)",
    )
    parser.add_argument(
        "--model",
        default=DEFAULT_MODEL,
        help="provider:name whose prices the cost columns use (default: %(default)s)",
    )
    parser.add_argument(
        "--counter",
        default="approximate",
        help="token counter for every strategy and figure: 'approximate' (default, offline) or "
        "an OpenAI model / tiktoken encoding name (exact)",
    )
    parser.add_argument(
        "--summarizer",
        default="extractive",
        help="'extractive' (default: offline, no API key) or a chat model 'provider:name' "
        "(init_chat_model; its tokens are priced at its own prices)",
    )
    parser.add_argument("--prices", type=Path, metavar="FILE", help="a prices JSON to overlay")
    _figures(parser)


def _figures(parser: argparse.ArgumentParser) -> None:
    """The options of what is measured and written: outputs, progress, facts, cache expiry."""
    parser.add_argument("--plot", type=Path, metavar="PNG", help="write the plots here")
    parser.add_argument("--csv", type=Path, metavar="FILE", help="write every call as CSV")
    parser.add_argument("--json", type=Path, metavar="FILE", help="write everything as JSON")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    parser.add_argument(
        "--facts",
        metavar="FILE|auto",
        help="follow facts through the views: a file of facts (one a line, matched "
        "case-insensitively) or 'auto' (numbers of 3+ digits, codes like ZX-4471, capitalised "
        "names, each said in one message only); adds 'facts kept at end' and 'mean share of "
        "later calls' to the table (default: no facts followed)",
    )
    parser.add_argument(
        "--cache-ttl",
        type=_seconds,
        metavar="SECONDS",
        help="seconds a prompt-cache entry lives after its last write or read (default: the "
        "provider's, 300 s for Anthropic and OpenAI); applied when the transcript carries "
        "timestamps",
    )


def add_commands(sub: Any) -> None:
    """Add ``replay`` and ``compare`` to the CLI's subparsers."""
    one = sub.add_parser(
        "replay",
        help="replay a saved conversation through one strategy, call by call",
        description="Every model call of the transcript (the history before each AI message), "
        "replayed through the strategy: view tokens, summaries, prefix kept, cost.",
    )
    _inputs(one)
    one.add_argument(
        "--strategy",
        default=DEFAULT_REPLAY,
        metavar="SPEC",
        help=f"the strategy (default: {DEFAULT_REPLAY}); {_SPEC_HELP}",
    )
    one.add_argument(
        "--every", type=int, default=1, metavar="N", help="print every Nth call (0: totals only)"
    )
    many = sub.add_parser(
        "compare",
        help="replay a saved conversation through several strategies side by side",
        description="One table of the strategies side by side over the same transcript; "
        "--plot/--csv/--json for the details.",
    )
    _inputs(many)
    many.add_argument(
        "--strategy",
        action="append",
        metavar="SPEC",
        help=f"repeat for each strategy (default: {' '.join(DEFAULT_COMPARE)}); {_SPEC_HELP}",
    )


def _transcript(args: argparse.Namespace) -> Transcript:
    if args.sqlite or args.postgres:
        if args.file is not None:
            raise ReplayCliError("give a transcript FILE or --sqlite/--postgres, not both")
        if not args.thread:
            raise ReplayCliError("--sqlite/--postgres need --thread ID")
        if args.sqlite:
            return load_sqlite_thread(args.sqlite, args.thread, channel=args.channel)
        return load_postgres_thread(args.postgres, args.thread, channel=args.channel)
    if args.file is None:
        raise ReplayCliError(
            "give a transcript FILE, or --sqlite PATH / --postgres DSN --thread ID"
        )
    if args.thread:
        raise ReplayCliError("--thread goes with --sqlite or --postgres")
    return load_transcript(args.file, format=args.format, max_bytes=args.max_bytes)


def _summarizer(spec: str) -> tuple[Any, str | None]:
    """The summarizer model and the model its tokens are priced at (None: free)."""
    if spec.strip().lower() == "extractive":
        from langmem_ext.summarize.extractive import ExtractiveSummarizer

        return ExtractiveSummarizer(), None
    try:
        from langchain.chat_models import init_chat_model
    except ImportError:
        raise ReplayCliError(
            f"--summarizer {spec!r} needs the 'langchain' package: "
            "pip install 'langmem-ext[agents]'"
        ) from None
    try:
        return init_chat_model(spec), spec
    except Exception as exc:  # an unknown provider, a missing integration package or API key
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ReplayCliError(f"--summarizer {spec!r}: {first}") from None


def _facts(option: str | None, messages: Sequence[Any]) -> list[str] | None:
    """The facts ``--facts`` names: none, ``auto`` (found in the transcript) or a file's."""
    if option is None:
        return None
    if option.strip().lower() == "auto":
        return resolve_facts(messages, "auto")
    return read_facts(option)


def _print_calls(comparison: Comparison, every: int) -> None:
    (r,) = comparison.replays
    if every <= 0 or not r.calls:
        return
    facts = r.facts is not None  # one more column: the followed facts the view holds
    header = (
        f"{'call':>5} {'at msg':>7} {'history':>9} {'hist tok':>9} | {'view':>5} {'tokens':>7} "
        f"{'cached':>7} {'prefix':>6} {'summary':>8} {'cost':>9} {'cached $':>9}"
        + (f" {'facts':>7}" if facts else "")
    )
    print(header)
    print("-" * len(header))
    for c in r.calls:
        if (c.call - 1) % every:
            continue
        summary = f"+{c.folded}" if c.folded else ""
        print(
            f"{c.call:>5} {c.position:>7,} {c.history_messages:>9,} {c.history_tokens:>9,} | "
            f"{c.view_messages:>5,} {c.view_tokens:>7,} {c.cached_tokens:>7,} "
            f"{'kept' if c.prefix_kept else '':>6} {summary:>8} "
            f"{c.cost:>9.5f} {c.cost_cached:>9.5f}" + (f" {c.facts_in_view:>7,}" if facts else "")
        )
    print()


def _outputs(comparison: Comparison, args: argparse.Namespace) -> None:
    if args.plot:
        try:
            import matplotlib
        except ImportError:
            raise ReplayCliError(
                "--plot needs matplotlib: pip install 'langmem-ext[experiment]'"
            ) from None
        matplotlib.use("Agg")  # a file, never a window
    facts_csv = None
    if args.csv is not None and comparison.follows_facts:
        facts_csv = args.csv.with_name(f"{args.csv.stem}-facts.csv")
    writers = (
        ("--csv", args.csv, comparison.to_csv),
        ("--csv", facts_csv, comparison.facts_to_csv),
        ("--json", args.json, comparison.to_json),
        ("--plot", args.plot, comparison.plot),
    )
    for flag, path, write in writers:
        if path is None:
            continue
        try:
            write(path)
        except OSError as exc:
            raise ReplayCliError(f"{flag} {path}: cannot write: {exc.strerror or exc}") from None
        print(f"wrote {path}", file=sys.stderr)


def run_command(args: argparse.Namespace) -> int:
    """Run ``replay`` or ``compare``; errors the user can fix are raised as exceptions the
    caller prints in one line (exit 2)."""
    transcript = _transcript(args)
    calls = len(model_calls(transcript.messages))
    if calls == 0:
        raise ReplayCliError(
            f"{transcript.source}: no AI messages after the first message: no model call to replay"
        )
    prices = load_prices(args.prices, max_bytes=args.max_bytes)
    prices.get(args.model)  # an unknown model fails before any work
    model, summarizer_price = _summarizer(args.summarizer)
    if summarizer_price is not None:
        prices.get(summarizer_price)
    facts = _facts(args.facts, transcript.messages)
    specs: Sequence[str] = (
        [args.strategy] if args.command == "replay" else (args.strategy or DEFAULT_COMPARE)
    )
    strategies = dict(
        parse_strategy(spec, counter=args.counter, summarizer=model) for spec in specs
    )
    if len(strategies) < len(specs):
        raise ReplayCliError("the same --strategy is given twice")
    print(
        f"{transcript.source} ({transcript.format}): {len(transcript.messages):,} messages, "
        f"{calls:,} model calls; prices of {prices.get(args.model).model} ({prices.source}); "
        f"counter {args.counter}; summarizer {args.summarizer}"
    )
    if facts is not None:
        how = "found in the transcript" if args.facts.strip().lower() == "auto" else args.facts
        shown = ", ".join(facts[:8]) + (", ..." if len(facts) > 8 else "")
        print(f"facts followed: {len(facts):,} ({how}){': ' + shown if facts else ''}")
    comparison = compare(
        transcript.messages,
        strategies,
        model=args.model,
        counter=args.counter,
        prices=prices,
        summarizer_model=summarizer_price,
        progress=False if args.no_progress else None,
        source=transcript.source,
        facts=facts,
        cache_ttl=args.cache_ttl,
    )
    notes = {r.cache_expiry for r in comparison.replays if r.cache_expiry}
    for note in sorted(notes):
        print(note[0].upper() + note[1:])
    print()
    if args.command == "replay":
        _print_calls(comparison, args.every)
    print(comparison.table())
    _outputs(comparison, args)
    return 0
