"""Write a sample transcript to try ``langmem-ext replay`` / ``compare`` on (offline, seeded).

The conversation is the package's synthetic agent chat (``langmem_ext.testing.synthetic_history``:
human turns, answers, tool calls and tool results of 20-400 words), saved in the OpenAI Chat
Completions format, the way many applications log their requests::

    python examples/make_transcript.py transcript.json [--messages 800] [--seed 3]
    langmem-ext compare transcript.json --strategy full --strategy summary_buffer:8000

Your own logs work the same way: LangChain ``messages_to_dict`` JSON/JSONL, OpenAI or Anthropic
``messages``, or a LangGraph thread (``--sqlite agent.sqlite --thread demo``).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from langchain_core.messages import convert_to_openai_messages

from langmem_ext.testing import synthetic_history


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("out", type=Path, help="the JSON file to write")
    parser.add_argument("--messages", type=int, default=800, help="conversation length")
    parser.add_argument("--seed", type=int, default=3, help="any integer")
    args = parser.parse_args(argv)
    messages = synthetic_history(args.messages, seed=args.seed)
    body = {"model": "gpt-4o-mini", "messages": convert_to_openai_messages(messages)}
    args.out.write_text(json.dumps(body, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    print(f"wrote {args.out}: {len(messages):,} messages (OpenAI Chat Completions format)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
