"""The graph the MemoryNode tests run: ``START -> memory -> model`` in an explicit
``StateGraph``, where ``memory`` is the node under test and ``model`` a fake that records the
view it was given and answers. Shared by the tests and by ``tests/graph_worker.py`` (which also
runs as a subprocess: its folder is then ``sys.path[0]``)."""

from __future__ import annotations

from typing import Any

from langgraph.graph import START, StateGraph

from langmem_ext import MemoryMessagesState


def memory_graph(
    memory: Any,
    model: Any,
    checkpointer: Any,
    schema: Any = MemoryMessagesState,
) -> Any:
    """``START -> memory -> model`` on ``schema``, compiled with ``checkpointer``."""
    builder = StateGraph(schema)
    builder.add_node("memory", memory)
    builder.add_node("model", model)
    builder.add_edge(START, "memory")
    builder.add_edge("memory", "model")
    return builder.compile(checkpointer=checkpointer)
