"""``docs/custom_strategy.md``, a strategy of your own checked with the conformance kit.

- (a) every ```python block of the page runs, in order, in one namespace, and prints exactly
  what its ``# ...`` lines say; the example strategy on the page is the code of
  ``examples/custom_strategy.py``, which runs on its own and prints the same views
  (``tests/docs/test_examples.py`` runs only ``examples/agent.py``, so this file runs the new one);
- (b) ``check_strategy`` passes on the example strategy;
- (c) it fails the broken variant of the page, naming the invariant;
- (d) ``check_strategy`` on ``Retrieval(TokenBudget(...))`` over an ``InMemoryStore``: given a
  factory, the kit builds a fresh strategy (and store) for every run, and every invariant holds;
  given one instance, the second run retrieves what the first wrote, and the kit says so.
"""

from __future__ import annotations

import contextlib
import importlib.util
import io
import re
import warnings
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from langchain_core.messages import BaseMessage
from langgraph.store.memory import InMemoryStore
from subprocesses import run_python, without_api_keys

from langmem_ext import MemoryKey, MemoryState, Retrieval, TokenBudget
from langmem_ext.strategies.engine import Plan
from langmem_ext.testing import check_strategy

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "custom_strategy.md"
EXAMPLE = ROOT / "examples" / "custom_strategy.py"


# --- (a) the page runs and prints what it says ---------------------------------------------------


def blocks() -> list[tuple[int, str]]:
    """(line of the block's first code line, code) for every ```python block, in order."""
    text = PAGE.read_text(encoding="utf-8")
    return [
        (text.count("\n", 0, match.start(1)) + 1, match.group(1))
        for match in re.finditer(r"```python\n(.*?)```", text, flags=re.S)
    ]


def claimed_output(code: str) -> list[str]:
    """What a block says it prints: its lines that start with ``# `` at column 0, in order
    (comments inside code are indented or follow code on the same line)."""
    return [line[2:] for line in code.splitlines() if line.startswith("# ")]


@pytest.fixture(scope="module")
def page() -> tuple[dict[str, Any], list[tuple[int, str, str]]]:
    """The page's blocks run in order in one namespace: (the namespace, [(line, code, stdout)])."""
    namespace: dict[str, Any] = {"__name__": "custom_strategy_page"}
    ran: list[tuple[int, str, str]] = []
    for line, code in blocks():
        buffer = io.StringIO()
        with contextlib.redirect_stdout(buffer), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            exec(compile(code, f"{PAGE}:{line}", "exec"), namespace)
        ran.append((line, code, buffer.getvalue()))
    return namespace, ran


def block_with(text: str) -> str:
    found = [code for _, code in blocks() if text in code]
    assert len(found) == 1, f"{len(found)} blocks of the page hold {text!r}"
    return found[0]


def test_every_block_of_the_page_prints_exactly_what_it_claims(
    page: tuple[dict[str, Any], list[tuple[int, str, str]]],
) -> None:
    _, ran = page
    assert len(ran) >= 8
    for line, code, printed in ran:
        assert printed.splitlines() == claimed_output(code), f"{PAGE.name}:{line}"


def test_the_page_shows_the_views_the_fold_protocol_and_the_surfaces(
    page: tuple[dict[str, Any], list[tuple[int, str, str]]],
) -> None:
    namespace, ran = page
    printed = "".join(out for _, _, out in ran)
    # the example's views: the tool round leaves as one unit, the first human message stays
    last_view = (
        "8 messages -> 139/200 tokens, dropped 4\n  [System(sys), Human(h1), AI(a3), Human(h3)]"
    )
    assert last_view + "\n" in printed
    assert "conformance kit: passed\n" in printed
    # the fold protocol: apply answers Folded, a view FoldDeferred
    assert namespace["logged"].log == [(28, "Folded"), (28, "FoldDeferred")]
    # the surfaces: MemoryNode's view, and the requests create_agent's model was sent
    assert [m.id for m in namespace["update"]["llm_input_messages"]] == ["sys", "h1", "a3", "h3"]
    assert namespace["sent"].sizes == [2, 4, 5, 5]
    broken = "validity: chat seed=0 call 10: 1 error finding(s) in the view: orphan_tool_result"
    assert broken in printed


def _from(code: str, start: str, stop: str | None = None) -> str:
    begin = code.index(start)
    return code[begin : code.index(stop, begin) if stop else None].strip()


def test_the_example_file_holds_the_code_the_page_quotes() -> None:
    example = EXAMPLE.read_text(encoding="utf-8")
    strategy = _from(block_with("class KeepFirstAndLast(Strategy)"), "class KeepFirstAndLast")
    helpers = _from(block_with("def replay("), "def conversation()", "\nreplay(")
    assert strategy in example
    assert helpers in example
    # and the imports the page shows for the strategy are the example's
    for name in ("ContextOverflowError", "split_units", "CounterLike, as_counter", "finished"):
        assert name in example


def test_the_example_runs_offline_and_prints_the_views_of_the_page() -> None:
    done = run_python(str(EXAMPLE), env=without_api_keys(), cwd=ROOT, timeout=120)
    assert done.returncode == 0, done.stderr
    views = claimed_output(block_with("\nreplay(KeepFirstAndLast"))
    kit = claimed_output(block_with('print("conformance kit: passed")'))
    assert done.stdout.splitlines() == [*views, *kit]


# --- (b) the kit passes on the example strategy ---------------------------------------------------


def _example() -> ModuleType:
    spec = importlib.util.spec_from_file_location("custom_strategy_example", EXAMPLE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("max_tokens", [800, 1_500, 4_000])
def test_the_kit_passes_on_the_example_strategy(max_tokens: int) -> None:
    strategy = _example().KeepFirstAndLast(max_tokens=max_tokens)
    check_strategy(strategy, seeds=3, messages=40)
    check_strategy(strategy, seeds=2, messages=80)


def test_the_example_strategy_holds_back_extra_tokens_and_refuses_what_cannot_fit() -> None:
    example = _example()
    history = example.conversation()
    result = example.KeepFirstAndLast(max_tokens=200).apply(history, extra_tokens=70)
    assert result.report.budget == 130  # a3 (about 100 tokens) no longer fits
    assert example.KeepFirstAndLast(200).counter.count_messages(result.messages) <= 130
    assert [m.id for m in result.messages] == ["sys", "h1", "h3"]
    with pytest.raises(example.ContextOverflowError, match=r"needs \d+ tokens .* budget is 20$"):
        example.KeepFirstAndLast(max_tokens=20).apply(history)


# --- (c) the kit fails the broken variant, naming the invariant ----------------------------------


def test_the_kit_fails_the_broken_variant_of_the_page_naming_the_invariant(
    page: tuple[dict[str, Any], list[tuple[int, str, str]]],
) -> None:
    namespace, _ = page
    broken = namespace["SplitsToolRounds"]
    first = r"^validity: chat seed=0 call 10: 1 error finding\(s\) in the view: orphan_tool_result"
    with pytest.raises(AssertionError, match=first):
        check_strategy(broken(max_tokens=1_000))
    with pytest.raises(AssertionError, match=r"^validity: .* call \d+: \d+ error finding\(s\)"):
        check_strategy(broken(max_tokens=2_000), seeds=1)


# --- (d) Retrieval wrapping TokenBudget, in-memory store -----------------------------------------
#
# Retrieval's memory is its store: the kit's three runs of a conversation (apply, aapply, apply fed
# the JSON round trip) must each start with an empty one, so Retrieval is checked through a
# factory. Its ``clock`` is a property; the kit restores it with its deleter.

KEY = MemoryKey("acme", "ann", "t1")


class CountingRetrieval(Retrieval):
    """Retrieval that counts the calls whose view held retrieved context."""

    retrieving = 0

    def _plan(  # type: ignore[override]
        self,
        messages: Sequence[BaseMessage],
        state: MemoryState,
        now: float,
        extra: int,
        *,
        key: MemoryKey | None = None,
    ) -> Plan:
        result = yield from super()._plan(messages, state, now, extra, key=key)
        CountingRetrieval.retrieving += bool(result.report.retrieved)
        return result


def test_the_kit_passes_on_retrieval_wrapping_token_budget_given_a_factory() -> None:
    built: list[Retrieval] = []

    def factory() -> Retrieval:
        built.append(
            CountingRetrieval(TokenBudget(2_000), store=InMemoryStore(), ranking="bm25", key=KEY)
        )
        return built[-1]

    CountingRetrieval.retrieving = 0
    check_strategy(factory, seeds=2, messages=30)
    assert len(built) == 3 * 3  # three conversations (two chats, one long turn), three runs
    assert CountingRetrieval.retrieving > 0  # retrieval did happen: the check is not vacuous
    assert all(vars(made)["_clock"] is None for made in built)  # the kit restored each clock


def test_one_retrieval_instance_fails_the_kit_naming_the_shared_store() -> None:
    strategy = Retrieval(TokenBudget(2_000), store=InMemoryStore(), ranking="bm25", key=KEY)
    pattern = (
        r"^sync == async: chat seed=0 call 1: views differ at message 1 "
        r"\('h-1' vs 'langmem_ext:retrieved'\)$"
    )
    with pytest.raises(AssertionError, match=pattern):
        check_strategy(strategy, seeds=2, messages=30)
    assert vars(strategy)["_clock"] is None  # restored even when the check fails


def test_the_kit_refuses_a_factory_that_returns_something_else() -> None:
    with pytest.raises(TypeError, match=r"the factory returned str"):
        check_strategy(lambda: "TokenBudget")  # type: ignore[arg-type,return-value]
