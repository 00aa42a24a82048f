"""Counting with a chat model itself: its ``get_num_tokens_from_messages``, one message at a time.

This is how Anthropic (whose counter calls the provider's count-tokens endpoint) and other
providers are counted; a bound model (``model.bind_tools(...)``) is looked into for the model
that counts. Counting may do network I/O, so these counters say ``is_blocking = True``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol, runtime_checkable

from langchain_core.language_models import BaseLanguageModel
from langchain_core.messages import BaseMessage, HumanMessage
from langchain_core.runnables import Runnable

from langmem_ext.core.tokens import checked_count
from langmem_ext.counting.cache import CachedCounter

__all__ = ["ChatModelCounter", "ModelTokenCounts"]


@runtime_checkable
class ModelTokenCounts(Protocol):
    """What :class:`ChatModelCounter` uses of a model: LangChain's counting methods."""

    def get_num_tokens_from_messages(self, messages: list[BaseMessage]) -> int: ...


def _model_inside(spec: Any) -> Any:
    """The language model a runnable wraps, or ``None``.

    ``model.bind(...)``, ``model.bind_tools(...)``, ``with_config``, ``with_retry`` (a
    ``RunnableBinding``) and ``configurable_fields`` (its default) wrap one model; a
    ``RunnableSequence`` or ``RunnableParallel`` (``with_structured_output`` builds
    ``model.bind_tools(...) | parser``) is accepted when exactly one model is in it. Bound
    kwargs (tools, stop ...) are per request, not per message, so counting with the bare model
    is right: reserve the tool schemas with ``reserve_tokens``. ``with_fallbacks`` is not looked
    into: it is used through its own ``get_num_tokens_from_messages`` (the primary model's), as
    ``trim_messages`` does.
    """
    from langchain_core.runnables.base import (
        RunnableBindingBase,
        RunnableParallel,
        RunnableSequence,
    )
    from langchain_core.runnables.configurable import DynamicRunnable

    found: list[Any] = []

    def visit(node: Any, depth: int) -> None:
        if depth > 16:
            return
        if isinstance(node, BaseLanguageModel):
            if not any(node is f for f in found):
                found.append(node)
        elif isinstance(node, RunnableBindingBase):
            visit(node.bound, depth + 1)
        elif isinstance(node, DynamicRunnable):
            visit(node.default, depth + 1)
        elif isinstance(node, RunnableSequence):
            for step in node.steps:
                visit(step, depth + 1)
        elif isinstance(node, RunnableParallel):
            for step in node.steps__.values():
                visit(step, depth + 1)

    visit(spec, 0)
    if len(found) > 1:
        names = ", ".join(type(f).__name__ for f in found)
        raise TypeError(
            f"cannot use {type(spec).__name__} as a token counter: it holds {len(found)} "
            f"language models ({names}); pass the chat model whose tokens count"
        )
    return found[0] if found else None


class ChatModelCounter(CachedCounter):
    """Delegates to a chat model's ``get_num_tokens_from_messages``, one message at a time, cached.

    This is how Anthropic (whose counter calls the provider's count-tokens endpoint) and other
    providers are counted. Counting a message alone includes the request's fixed overhead, so the
    overhead is measured once, on the first message counted, as ``2·n([m]) − n([m, m])`` and
    subtracted from every per-message count. Counting may do network I/O, so the async drivers run
    it in a worker thread.

    ``model`` may be a bound model (``model.bind_tools(...)``, ``model.bind(...)``, a
    ``RunnableBinding``, ``with_structured_output``): the chat model inside is used, as
    ``trim_messages`` does. Any object with ``get_num_tokens_from_messages`` works too.
    """

    is_blocking = True

    def __init__(
        self,
        model: BaseLanguageModel[Any] | Runnable[Any, Any] | ModelTokenCounts,
        *,
        cache_size: int = 65_536,
    ) -> None:
        super().__init__(cache_size=cache_size)
        inner = _model_inside(model)
        if inner is None and not callable(getattr(model, "get_num_tokens_from_messages", None)):
            raise TypeError(
                f"ChatModelCounter needs a chat model (or a runnable wrapping one, e.g. "
                f"model.bind_tools(...)), got {type(model).__name__}"
            )
        #: the chat model that counts (the one inside a binding)
        self.model: Any = inner if inner is not None else model
        #: what was passed (the binding itself, or the model)
        self.source: Any = model
        self._overhead: int | None = None

    def __repr__(self) -> str:
        return f"ChatModelCounter({type(self.model).__name__})"

    def count_text(self, text: str) -> int:
        get_num_tokens = getattr(self.model, "get_num_tokens", None)
        if callable(get_num_tokens):
            return checked_count(get_num_tokens(text), self, "a text (get_num_tokens)")
        # a duck-typed model without get_num_tokens: a human message minus its framing
        message = HumanMessage(content=text)
        return max(0, self.count_uncached(message) - self.count_uncached(HumanMessage(content="")))

    def _model_count(self, messages: list[BaseMessage]) -> int:
        what = f"{len(messages)} message(s) (get_num_tokens_from_messages)"
        return checked_count(self.model.get_num_tokens_from_messages(messages), self, what)

    def _measure_overhead(self, message: BaseMessage) -> int:
        one = self._model_count([message])
        two = self._model_count([message, message])
        return max(0, 2 * one - two)

    def count_uncached(self, message: BaseMessage) -> int:
        if self._overhead is None:
            self._overhead = self._measure_overhead(message)
            self.request_overhead = self._overhead
        return max(0, self._model_count([message]) - self._overhead)

    def count_messages(self, messages: Sequence[BaseMessage]) -> int:
        # the per-message counts first: the first one measures the overhead, which must be in
        # this total too (and the engine reads ``count_messages([])`` as the overhead alone)
        total = sum(self.count_message(m) for m in messages)
        if self._overhead is None:
            self.count_uncached(HumanMessage(content="."))  # measures it on a probe message
        return self.request_overhead + total
