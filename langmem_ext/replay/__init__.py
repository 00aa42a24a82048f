"""Replay saved conversations through strategies: what each model call would have seen and cost.

* :func:`load_transcript` reads a conversation saved as LangChain ``messages_to_dict``
  JSON/JSONL, OpenAI Chat Completions ``messages`` or Anthropic Messages (detected), and
  :func:`load_sqlite_thread` / :func:`load_postgres_thread` /
  :func:`messages_from_checkpointer` read a LangGraph thread from a checkpointer;
* :func:`replay` runs one strategy over it, call by call; :func:`compare` several side by side
  (a :class:`Comparison`: ``table()``, ``to_csv()``, ``to_json()``, ``plot()``);
* ``facts=`` (or ``--facts FILE|auto``) follows facts through the views: which survived each
  strategy (:class:`FactRecord`, :func:`detect_facts`);
* :func:`parse_strategy` builds a strategy from a spec like ``"summary_buffer:max_tokens=8000"``
  (as the command line takes it), and :func:`load_prices` the model prices the cost columns use.

The command line: ``langmem-ext replay FILE --strategy SPEC`` and
``langmem-ext compare FILE --strategy A --strategy B --plot out.png``.
"""

from langmem_ext.replay.comparison import Comparison
from langmem_ext.replay.engine import (
    DEFAULT_MODEL,
    areplay,
    compare,
    message_time,
    model_calls,
    replay,
)
from langmem_ext.replay.facts import FactError, FactRecord, detect_facts, read_facts
from langmem_ext.replay.prices import ModelPrice, PriceError, Prices, load_prices
from langmem_ext.replay.results import CallRecord, Replay
from langmem_ext.replay.specs import SpecError, default_store, parse_strategy
from langmem_ext.replay.transcripts import (
    Transcript,
    TranscriptError,
    load_postgres_thread,
    load_sqlite_thread,
    load_transcript,
    messages_from_checkpointer,
    parse_transcript,
)

__all__ = [
    "DEFAULT_MODEL",
    "CallRecord",
    "Comparison",
    "FactError",
    "FactRecord",
    "ModelPrice",
    "PriceError",
    "Prices",
    "Replay",
    "SpecError",
    "Transcript",
    "TranscriptError",
    "areplay",
    "compare",
    "default_store",
    "detect_facts",
    "load_postgres_thread",
    "load_prices",
    "load_sqlite_thread",
    "load_transcript",
    "message_time",
    "messages_from_checkpointer",
    "model_calls",
    "parse_strategy",
    "parse_transcript",
    "read_facts",
    "replay",
]
