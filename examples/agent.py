"""A tool-using agent with langmem_ext memory, persisted on SQLite.

Runs a long scripted conversation through ``create_react_agent`` with ``MemoryNode`` as its
``pre_model_hook`` (SummaryBuffer, rewrite mode) and a ``SqliteSaver`` checkpointer, and prints per
turn the messages kept in the graph state, the size of the memory state, the view the model got,
and when a compaction (a fold into the summary) happened.

With ``OPENAI_API_KEY`` or ``ANTHROPIC_API_KEY`` set it uses a real model; otherwise a scripted
offline model that calls the tool now and then, so the demo needs no key and no network.

    python examples/agent.py [--turns 60] [--db path.sqlite] [--max-tokens 3000]
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import sqlite3
import sys
import tempfile
import warnings
from pathlib import Path
from typing import Any

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.tools import tool
from langgraph.checkpoint.sqlite import SqliteSaver

from langmem_ext import ApproximateCounter, MemoryAgentState, MemoryNode, SummaryBuffer

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
    orders = sorted({w.strip("?.,") for w in body.split() if w.strip("?.,").isdigit()})
    return "Orders discussed: " + ", ".join(orders[-20:]) + ". User prefers deliveries after 5 pm."


def make_models() -> tuple[Any, Any, str]:
    if os.environ.get("OPENAI_API_KEY"):
        from langchain_openai import ChatOpenAI

        model = ChatOpenAI(model="gpt-4o-mini")
        return model, model, "ChatOpenAI(gpt-4o-mini)"
    if os.environ.get("ANTHROPIC_API_KEY"):
        from langchain_anthropic import ChatAnthropic

        model = ChatAnthropic(model="claude-3-5-haiku-latest")  # type: ignore[call-arg]
        return model, model, "ChatAnthropic(claude-3-5-haiku-latest)"
    return ScriptedModel(), summarize_offline, "an offline scripted model (no API key set)"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--turns", type=int, default=60)
    parser.add_argument("--db", default=None, help="SQLite file (default: a temporary one)")
    parser.add_argument("--max-tokens", type=int, default=1_500)
    args = parser.parse_args(argv)

    from langgraph.prebuilt import create_react_agent

    model, summarizer, label = make_models()
    db = Path(args.db) if args.db else Path(tempfile.mkdtemp()) / "agent.sqlite"
    conn = sqlite3.connect(str(db), check_same_thread=False)
    strategy = SummaryBuffer(args.max_tokens, summarizer=summarizer, max_summary_tokens=300)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # create_react_agent's move to langchain.agents
        agent = create_react_agent(
            model,
            [track_order],
            pre_model_hook=MemoryNode(strategy, mode="rewrite"),
            state_schema=MemoryAgentState,
            checkpointer=SqliteSaver(conn),
        )
    counter = ApproximateCounter()
    config = {"configurable": {"thread_id": "demo"}}
    print(f"agent on {label}; memory {strategy!r}; checkpoints in {db}")
    print(f"{'turn':>4} {'state msgs':>10} {'memory B':>8} {'view msgs':>9} {'view tok':>8}  event")
    folds = 0
    for turn, template in zip(range(1, args.turns + 1), itertools.cycle(QUESTIONS), strict=False):
        question = {"messages": [HumanMessage(template.format(n=1000 + turn))]}
        view: list[Any] = []
        # the view lives only between the memory step and the model step (an ephemeral channel):
        # read it from the memory node's update; the last one is what the final answer saw
        for update in agent.stream(question, config, stream_mode="updates"):
            view = (update.get("pre_model_hook") or {}).get("llm_input_messages", view)
        out = agent.get_state(config).values
        memory = out.get("memory") or {}
        event = ""
        if memory.get("folds", 0) > folds:
            event = f"compaction #{memory['folds']}: summary updated, folded messages removed"
            folds = memory["folds"]
        if memory.get("health", "healthy") != "healthy":
            event = f"summarizer {memory['health']}: {memory.get('last_error')}"
        print(
            f"{turn:>4} {len(out['messages']):>10} {len(json.dumps(memory)):>8} "
            f"{len(view):>9} {counter.count_messages(view):>8}  {event}"
        )
    conn.close()  # closing checkpoints the write-ahead log into the file
    size = db.stat().st_size
    print(f"done: {folds} compactions; SQLite file {size:,} bytes; state survives in {db}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
