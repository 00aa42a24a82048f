"""Retrieval's optional model steps, off by default: a query rewrite and a rerank through any
LangChain chat model.

Without them ``Retrieval`` ranks with BM25 and embeddings only, with no model call. When a model
is affordable, ``RetrievalConfig(model_steps=ModelSteps(rewrite=True, rerank=True))`` adds:

* **rewrite**: before the search, the model turns the question (with the newest turns for
  context) into up to ``max_queries`` short search queries in other words (what a paraphrased
  question with no shared word needs); the search runs on the question and them together;
* **rerank**: after the search, the model orders the best ``candidates`` by how well they answer
  the question; the packing then takes them in that order.

Each step is one model call within ``timeout`` seconds. A step that fails, times out or answers
garbage changes nothing (the question alone, the fused order): a model step never breaks a turn
and never loses evidence. What the calls cost (the provider's ``usage_metadata`` when it reports
it, else counted) is the report's ``model_step_tokens``. The model defaults to the inner
strategy's summarizer model.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from langchain_core.messages import BaseMessage, HumanMessage, SystemMessage
from langchain_core.runnables import Runnable

from langmem_ext.core.checks import require_int, require_number
from langmem_ext.core.steps import Flow, Step
from langmem_ext.core.tokens import TokenCounter
from langmem_ext.summarize.calls import (
    ModelLike,
    acall_on_model,
    as_runnable,
    await_with_timeout,
    call_on_model,
    is_sync_only,
    model_lock,
    model_object,
    without_sdk_retries,
)

__all__ = [
    "AskModel",
    "ModelSteps",
    "model_for",
    "parse_order",
    "parse_queries",
    "rerank_flow",
    "rerank_prompt",
    "rewrite_flow",
    "rewrite_prompt",
]

#: characters of each passage shown to the rerank model, and of each query kept from a rewrite
PASSAGE_CHARS = 600
QUERY_CHARS = 200


@dataclass(frozen=True, slots=True)
class ModelSteps:
    """The optional model steps of :class:`~langmem_ext.retrieval.strategy.Retrieval`.

    Args:
        rewrite: ask the model for search queries in other words before searching.
        rerank: ask the model to order the best ``candidates`` after searching.
        model: a LangChain chat model, a ``"provider:model"`` string or a callable; None: the
            inner strategy's summarizer model (an error at construction when it has none).
        candidates: how many of the fused candidates the rerank sees (2-50).
        max_queries: how many queries a rewrite may add (1-10).
        timeout: seconds each model call may take; after it the step is skipped.

    Example:
        >>> steps = ModelSteps(rewrite=True, rerank=True, candidates=12)
        >>> steps.enabled, steps.candidates
        (True, 12)
    """

    rewrite: bool = False
    rerank: bool = False
    model: Any = None
    candidates: int = 20
    max_queries: int = 3
    timeout: float = 10.0

    def __post_init__(self) -> None:
        for name in ("rewrite", "rerank"):
            if not isinstance(getattr(self, name), bool):
                raise TypeError(f"ModelSteps.{name} must be True or False")
        require_int("candidates", self.candidates, 2, owner="ModelSteps")
        require_int("max_queries", self.max_queries, 1, owner="ModelSteps")
        if self.candidates > 50 or self.max_queries > 10:
            raise ValueError(
                f"ModelSteps: candidates ({self.candidates}) must be at most 50 and "
                f"max_queries ({self.max_queries}) at most 10: the prompt grows with both"
            )
        require_number("timeout", self.timeout, above=0, unit="seconds", owner="ModelSteps")

    @property
    def enabled(self) -> bool:
        """Whether any step runs."""
        return self.rewrite or self.rerank


@dataclass(frozen=True, slots=True)
class _Model:
    """A model made ready to call: its runnable (SDK retries off) and its per-model lock."""

    runnable: Runnable[Any, Any]
    lock: threading.Lock | None
    sync_only: bool


def ready(model: ModelLike) -> _Model:
    """``model`` as :class:`AskModel` calls it."""
    runnable = without_sdk_retries(as_runnable(model))
    return _Model(runnable, model_lock(model_object(runnable)), is_sync_only(runnable))


@dataclass(frozen=True, slots=True)
class AskModel(Step):
    """One model call within ``timeout`` seconds; the answer is the model's output."""

    model: _Model
    messages: tuple[BaseMessage, ...]
    timeout: float

    def run(self) -> Any:
        runnable, messages = self.model.runnable, list(self.messages)
        return call_on_model(lambda: runnable.invoke(messages), self.timeout, self.model.lock)

    async def arun(self) -> Any:
        runnable, messages = self.model.runnable, list(self.messages)
        if self.model.sync_only or self.model.lock is not None:
            return await acall_on_model(
                lambda: runnable.invoke(messages), self.timeout, self.model.lock
            )
        return await await_with_timeout(runnable.ainvoke(messages), self.timeout)


def _text(output: Any) -> str:
    if isinstance(output, BaseMessage):
        return str(output.text)
    return output if isinstance(output, str) else ""


def _cost(output: Any, messages: Sequence[BaseMessage], counter: TokenCounter) -> int:
    """The call's tokens: the provider's ``usage_metadata`` when it reports them, else counted."""
    usage = getattr(output, "usage_metadata", None)
    if isinstance(usage, dict) and isinstance(usage.get("total_tokens"), int):
        return max(int(usage["total_tokens"]), 0)
    return counter.count_messages(list(messages)) + counter.count_text(_text(output))


def rewrite_prompt(query: str, context: Sequence[str], max_queries: int) -> tuple[BaseMessage, ...]:
    """The rewrite call's messages: the newest turns as context, then the question."""
    recent = "\n".join(f"- {line[:QUERY_CHARS]}" for line in context[-6:]) or "(none)"
    return (
        SystemMessage(
            f"Write up to {max_queries} short search queries that find, in an earlier "
            "conversation, what the question needs: other words for the same things, and the "
            "names, numbers and topics it refers to. One query per line, nothing else."
        ),
        HumanMessage(f"Newest turns:\n{recent}\n\nQuestion: {query}"),
    )


def parse_queries(text: str, query: str, max_queries: int) -> list[str]:
    """The queries of a rewrite answer: one per line, list markers and quotes removed, the
    question itself and repeats dropped, at most ``max_queries``; garbage gives none.

    Example:
        >>> parse_queries("1. locker code\\n- gym locker number\\n\\nlocker code", "my code?", 3)
        ['locker code', 'gym locker number']
    """
    seen = {query.strip().lower()}
    out: list[str] = []
    for line in text.splitlines():
        cleaned = re.sub(r"^\s*(?:[-*•]|\d+[.)])\s*", "", line).strip().strip("\"'`").strip()
        if not cleaned or len(cleaned) > QUERY_CHARS or not re.search(r"\w", cleaned):
            continue
        if cleaned.lower() in seen:
            continue
        seen.add(cleaned.lower())
        out.append(cleaned)
        if len(out) == max_queries:
            break
    return out


def rerank_prompt(query: str, passages: Sequence[str]) -> tuple[BaseMessage, ...]:
    """The rerank call's messages: the question and the numbered passages."""
    numbered = "\n\n".join(f"[{i}] {p[:PASSAGE_CHARS]}" for i, p in enumerate(passages, 1))
    return (
        SystemMessage(
            "Rank the numbered passages by how well they help answer the question. Answer "
            "with the passage numbers only, best first, separated by commas."
        ),
        HumanMessage(f"Question: {query}\n\nPassages:\n{numbered}"),
    )


def parse_order(text: str, count: int) -> list[int] | None:
    """The 0-based order of a rerank answer over ``count`` passages: the numbers it names in
    range, first mention first, then the ones it left out in their old order. None (keep the
    old order) when it names none or fewer than half of them: a garbled answer.

    Example:
        >>> parse_order("3, 1", 3)
        [2, 0, 1]
        >>> parse_order("I cannot rank these.", 3) is None
        True
    """
    named: list[int] = []
    for number in re.findall(r"\d+", text):
        index = int(number) - 1
        if 0 <= index < count and index not in named:
            named.append(index)
    if not named or 2 * len(named) < min(count, 2):
        return None
    return named + [i for i in range(count) if i not in named]


def rewrite_flow(
    steps: ModelSteps,
    model: _Model,
    counter: TokenCounter,
    query: str,
    context: Sequence[str],
) -> Flow[tuple[list[str], int]]:
    """The rewrite's queries and its cost in tokens; no queries (and what was spent) when the
    model fails or answers garbage."""
    messages = rewrite_prompt(query, context, steps.max_queries)
    try:
        output = yield AskModel(model, messages, steps.timeout)
    except Exception:  # a failing model step changes nothing
        return [], 0
    return parse_queries(_text(output), query, steps.max_queries), _cost(output, messages, counter)


def rerank_flow(
    steps: ModelSteps,
    model: _Model,
    counter: TokenCounter,
    query: str,
    passages: Sequence[str],
) -> Flow[tuple[list[int] | None, int]]:
    """The rerank's order of ``passages`` (None: keep theirs) and its cost in tokens."""
    if len(passages) < 2:
        return None, 0
    messages = rerank_prompt(query, passages)
    try:
        output = yield AskModel(model, messages, steps.timeout)
    except Exception:
        return None, 0
    return parse_order(_text(output), len(passages)), _cost(output, messages, counter)


def model_for(steps: ModelSteps | None, inner: object) -> _Model | None:
    """The model ``steps`` call (theirs, else ``inner``'s summarizer model); None when no step
    runs. A step with no model to call is refused here, at construction."""
    if steps is None or not steps.enabled:
        return None
    model = steps.model
    if model is None:
        model = getattr(getattr(inner, "summarizer", None), "model", None)
    if model is None:
        raise ValueError(
            "Retrieval: model_steps needs a model: pass ModelSteps(model=...) (a chat model, "
            "'provider:model' or a callable), or wrap a summarizing strategy, whose "
            "summarizer model is then used"
        )
    return ready(model)
