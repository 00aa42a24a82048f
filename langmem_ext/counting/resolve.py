"""Anything the API accepts as a token counter, turned into a ``TokenCounter``.

:func:`as_counter` is the one place a name, a chat model, a function or ``None`` becomes a
counter; :class:`CallableCounter` wraps a plain ``(BaseMessage) -> int`` function.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, cast

from langchain_core.language_models import BaseLanguageModel
from langchain_core.messages import BaseMessage, HumanMessage
from langchain_core.runnables import Runnable

from langmem_ext.core.tokens import TokenCounter, checked_count
from langmem_ext.counting.cache import CachedCounter
from langmem_ext.counting.chat_model import ChatModelCounter, ModelTokenCounts, _model_inside
from langmem_ext.counting.local import ApproximateCounter, TiktokenCounter, tiktoken_encoding_for

__all__ = ["CallableCounter", "CounterLike", "as_counter"]


class CallableCounter(CachedCounter):
    """Wraps a plain ``(BaseMessage) -> int`` function; cached like every counter."""

    def __init__(
        self,
        fn: Callable[[BaseMessage], int],
        *,
        text_fn: Callable[[str], int] | None = None,
        cache_size: int = 65_536,
    ) -> None:
        super().__init__(cache_size=cache_size)
        self.fn = fn
        self.text_fn = text_fn

    def __repr__(self) -> str:
        return f"CallableCounter({getattr(self.fn, '__name__', self.fn)!r})"

    def count_text(self, text: str) -> int:
        if self.text_fn is not None:
            return checked_count(self.text_fn(text), self, "a text (text_fn)")
        return checked_count(self.fn(HumanMessage(content=text)), self, "a text")

    def count_uncached(self, message: BaseMessage) -> int:
        return checked_count(self.fn(message), self, "a message")


CounterLike = (
    TokenCounter
    | BaseLanguageModel[Any]
    | Runnable[Any, Any]
    | ModelTokenCounts
    | Callable[[BaseMessage], int]
    | str
    | None
)


def _counts_tokens(spec: Any) -> bool:
    """``spec`` has the three counting methods (``is_blocking`` may be missing: see
    :class:`TokenCounter`)."""
    names = ("count_message", "count_messages", "count_text")
    return all(callable(getattr(spec, name, None)) for name in names)


def as_counter(spec: CounterLike) -> TokenCounter:
    """Turn anything the API accepts as a counter into a :class:`TokenCounter`.

    * ``None`` or ``"approximate"``: :class:`ApproximateCounter`;
    * a tiktoken encoding name (``"o200k_base"``) or an OpenAI model name tiktoken knows
      (``"gpt-4o"``, ``"openai:gpt-4o"``): :class:`TiktokenCounter`. Any other string raises
      ``ValueError`` listing what is accepted (a misspelt ``"aproximate"`` or a
      ``"claude-..."`` name never silently becomes an OpenAI encoding);
    * a LangChain chat model, also bound (``model.bind_tools(...)``, ``model.bind(...)``, a
      ``RunnableBinding``, ``with_structured_output``), or anything with
      ``get_num_tokens_from_messages``: :class:`ChatModelCounter`;
    * a callable ``(BaseMessage) -> int``: :class:`CallableCounter`;
    * anything implementing :class:`TokenCounter`: used as is.
    """
    if spec is None:
        return ApproximateCounter()
    if isinstance(spec, str):
        if spec.strip().lower() == "approximate":
            return ApproximateCounter()
        import tiktoken

        encoding = tiktoken_encoding_for(spec)  # ValueError naming what is accepted
        if spec.strip().lower() in tiktoken.list_encoding_names():
            return TiktokenCounter(model=None, encoding=encoding)
        return TiktokenCounter(model=spec)
    if isinstance(spec, BaseLanguageModel):
        return ChatModelCounter(spec)
    if _counts_tokens(spec):
        return cast(TokenCounter, spec)
    if _model_inside(spec) is not None or callable(
        getattr(spec, "get_num_tokens_from_messages", None)
    ):
        return ChatModelCounter(cast(Any, spec))
    if callable(spec):
        return CallableCounter(spec)
    raise TypeError(
        f"cannot use {type(spec).__name__} as a token counter: pass a TokenCounter, a chat model "
        "(or a runnable wrapping one, e.g. model.bind_tools(...)), a callable "
        "(BaseMessage) -> int, a model or encoding name, or 'approximate'"
    )
