"""A tool-using agent with langmem_ext memory, persisted on SQLite.

Runs a long scripted conversation through ``langchain.agents.create_agent`` with
``MemoryMiddleware(SummaryBuffer(...), mode="rewrite")`` and a ``SqliteSaver`` checkpointer, and
prints per turn: the messages kept in the graph state, the size of the memory state, the view the
model got (its size, and its shape by :func:`~langmem_ext.core.shape.view_shape`, e.g.
``S+ 2×(HcTA) HA H``: the system message with the summary, two order look-ups, an answer, the new
question), each compaction (a fold into the summary) and the summary text whenever it changes.

With ``OPENAI_API_KEY`` or ``ANTHROPIC_API_KEY`` set it uses a real model; otherwise a scripted
offline model that calls the tool now and then, so the demo needs no key and no network.

    python examples/agent.py [--turns 60] [--sqlite PATH] [--mode rewrite] [--max-tokens 1500]

The thread (id ``demo``) is written to the SQLite file ``--sqlite`` names, by default
``agent.sqlite`` in a new temporary directory; the demo prints the path, and at the end the
``langmem-ext compare --sqlite PATH --thread demo`` command that replays the thread through other
strategies (docs/experimenting.md).
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import sqlite3
import sys
import tempfile
import textwrap
from pathlib import Path
from typing import Any

from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import (
    AIMessage,
    BaseMessage,
    HumanMessage,
    ToolMessage,
)
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.tools import tool
from langgraph.checkpoint.sqlite import SqliteSaver

from langmem_ext import ApproximateCounter, MemoryState, SummaryBuffer
from langmem_ext.core.shape import SHAPE_LEGEND, view_shape
from langmem_ext.integrations.agents import (
    MemoryMiddleware,  # also `from langmem_ext import MemoryMiddleware`
)

#: the thread the demo writes (``langmem-ext compare --sqlite PATH --thread demo`` reads it)
THREAD = "demo"

QUESTIONS = [
    "Where is order {n}? It was supposed to arrive last week.",
    "Can you check the shipping status of order {n} for me?",
    "My invoice for order {n} looks wrong, the total should be lower. Why?",
    "Please remember that I prefer deliveries after 5 pm.",
    "What did we decide about order {n} earlier?",
]


@tool
def track_order(order_id: str) -> str:
    """Look up where an order is and when it will arrive."""
    return json.dumps({"order": order_id, "status": "in transit", "eta_days": int(order_id) % 5})


class ScriptedModel(BaseChatModel):
    """Offline stand-in: calls track_order when asked about an order's status, else answers."""

    step: int = 0

    @property
    def _llm_type(self) -> str:
        return "scripted"

    def bind_tools(self, tools: Any, **kwargs: Any) -> ScriptedModel:
        return self

    def _generate(
        self, messages: Any, stop: Any = None, run_manager: Any = None, **kwargs: Any
    ) -> ChatResult:
        self.step += 1
        last = messages[-1]
        text = str(last.content)
        if isinstance(last, HumanMessage) and ("status" in text or "Where is" in text):
            order = "".join(ch for ch in text if ch.isdigit()) or "0"
            call = {"name": "track_order", "args": {"order_id": order}, "id": f"c{self.step}"}
            reply = AIMessage("", tool_calls=[call])
        elif isinstance(last, ToolMessage):
            reply = AIMessage(f"Good news: {last.content}. Anything else I can check? " * 2)
        else:
            reply = AIMessage(f"Noted. Here is what I know so far about that ({self.step}). " * 4)
        return ChatResult(generations=[ChatGeneration(message=reply)])


def summarize_offline(prompt: list[BaseMessage]) -> str:
    """Offline summarizer: keeps the previous summary's facts and adds the order numbers seen."""
    body = str(prompt[-1].content)
    words = {w.strip("?.,") for w in body.split()}
    orders = sorted(w for w in words if w.isdigit() and len(w) == 4)  # order numbers
    return "Orders discussed: " + ", ".join(orders[-20:]) + ". User prefers deliveries after 5 pm."


def make_models() -> tuple[Any, Any, str]:
    if os.environ.get("OPENAI_API_KEY"):
        from langchain_openai import ChatOpenAI

        model = ChatOpenAI(model="gpt-4o-mini")
        return model, model, "ChatOpenAI(gpt-4o-mini)"
    if os.environ.get("ANTHROPIC_API_KEY"):
        from langchain_anthropic import ChatAnthropic

        claude = ChatAnthropic(model="claude-3-5-haiku-latest")  # type: ignore[call-arg]
        return claude, claude, "ChatAnthropic(claude-3-5-haiku-latest)"
    return ScriptedModel(), summarize_offline, "an offline scripted model (no API key set)"


class ViewRecorder(BaseCallbackHandler):
    """Keeps the messages of the latest chat-model call: with ``MemoryMiddleware`` the view is
    passed straight to the model and is not stored in the graph state, so this is where to see it.
    A summarizer call (when the summarizer is a chat model) comes before the model call it makes
    room for, so after a turn ``view`` is what the model saw for its final answer."""

    def __init__(self) -> None:
        self.view: list[BaseMessage] = []

    def on_chat_model_start(
        self, serialized: Any, messages: list[list[BaseMessage]], **kwargs: Any
    ) -> None:
        self.view = list(messages[0])


def compare_command() -> str:
    """How to run ``langmem-ext compare`` with this interpreter's installation: the script next to
    the interpreter (``.venv/bin/langmem-ext`` from the repository root), else ``python -m``."""
    script = Path(sys.executable).with_name("langmem-ext")
    if script.is_file():
        relative = os.path.relpath(script)
        return relative if not relative.startswith("..") else str(script)
    return f"{sys.executable} -m langmem_ext"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--turns", type=int, default=60, help="turns to run (default %(default)s)")
    parser.add_argument(
        "--sqlite",
        metavar="PATH",
        default=None,
        help=(
            f"the SQLite file the thread {THREAD!r} is checkpointed to (default: agent.sqlite in "
            "a new temporary directory; the path is printed); "
            f"`langmem-ext compare --sqlite PATH --thread {THREAD}` replays it"
        ),
    )
    parser.add_argument("--db", dest="sqlite", help=argparse.SUPPRESS)  # the old name
    parser.add_argument(
        "--mode",
        choices=("rewrite", "view"),
        default="rewrite",
        help=(
            "MemoryMiddleware mode: 'rewrite' removes folded messages from the thread (bounded "
            "checkpoints), 'view' keeps the whole thread (default %(default)s)"
        ),
    )
    parser.add_argument("--max-tokens", type=int, default=1_500, help="SummaryBuffer max_tokens")
    args = parser.parse_args(argv)

    from langchain.agents import create_agent

    model, summarizer, model_name = make_models()
    db = Path(args.sqlite) if args.sqlite else Path(tempfile.mkdtemp()) / "agent.sqlite"
    conn = sqlite3.connect(str(db), check_same_thread=False)
    strategy = SummaryBuffer(args.max_tokens, summarizer=summarizer, max_summary_tokens=300)
    agent = create_agent(
        model,
        [track_order],
        system_prompt="You are a support agent for an online shop. Use track_order for status.",
        middleware=[MemoryMiddleware(strategy, mode=args.mode)],
        checkpointer=SqliteSaver(conn),
    )
    counter = ApproximateCounter()
    recorder = ViewRecorder()
    config: Any = {"configurable": {"thread_id": THREAD}, "callbacks": [recorder]}
    print(f"agent on {model_name}; memory {strategy!r}, mode={args.mode!r}")
    print(f"checkpoints of thread {THREAD!r} in {db}")
    print(
        "columns: messages in the graph state; the memory state's size (the `memory` channel as "
        "JSON, bytes); the model's view (messages, tokens), then its shape"
    )
    print(f"view {SHAPE_LEGEND}")
    print(
        f"{'turn':>4} {'state msgs':>10} {'memory bytes':>12} {'view msgs':>9} "
        f"{'view tokens':>11}  event"
    )
    folds, summary = 0, ""
    for turn, template in zip(range(1, args.turns + 1), itertools.cycle(QUESTIONS), strict=False):
        agent.invoke({"messages": [HumanMessage(template.format(n=1000 + turn))]}, config)
        view = recorder.view
        out = agent.get_state(config).values
        memory = MemoryState.coerce(out.get("memory"))  # the channel holds a dict
        event = ""
        if memory.folds > folds:
            event = f"compaction #{memory.folds}: summary updated, folded messages removed"
            folds = memory.folds
        if memory.health != "healthy":
            event = f"summarizer {memory.health}: {memory.last_error}"
        print(
            f"{turn:>4} {len(out['messages']):>10} {len(memory.to_json()):>12} "
            f"{len(view):>9} {counter.count_messages(view):>11}  {event}".rstrip()
        )
        print(f"{'':>6}view: {view_shape(view)}")
        text = "\n\n".join(memory.sections.values())
        if text != summary:
            summary = text
            print(textwrap.indent(textwrap.fill(f"summary: {text}", width=94), " " * 6))
    conn.close()  # closing checkpoints the write-ahead log into the file
    size = db.stat().st_size
    print(f"done: {folds} compactions; SQLite file {size:,} bytes; state survives in {db}")
    print(
        f"replay the thread through other strategies: {compare_command()} compare --sqlite {db} "
        f"--thread {THREAD} --strategy full --strategy summary_buffer:{args.max_tokens}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
