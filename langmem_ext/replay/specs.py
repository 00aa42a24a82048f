"""Strategies named on a command line: ``"summary_buffer:max_tokens=8000"``.

A spec is ``NAME[:ARGS]``. ``NAME`` is a strategy of the package in snake case or as its class
name (``token_budget``, ``TokenBudget``, ``sliding_window``, ``tool_digest``,
``summary_buffer``, ``compacting``, ``tiered_summary``), ``full`` (no strategy: the whole
history every call), or ``retrieval+INNER`` (``Retrieval`` wrapping ``INNER``). ``ARGS`` are
``key=value`` pairs separated by commas, passed to the constructor; a bare first value is the
first positional argument (``token_budget:8000``). Values are read as integers (``8000``,
``8_000``, ``8k``), numbers, ``true``/``false``/``none``, or text.

For ``retrieval+INNER``, the keywords ``Retrieval`` takes (``k``, ``max_retrieved_tokens``,
``neighbors`` ...) go to it and the rest to the inner strategy. Summarizing strategies get the
``summarizer`` given to :func:`parse_strategy` unless the spec names one, and take the
:class:`~langmem_ext.strategies.options.FoldPolicy` settings flat (``placement=human``,
``max_messages=40``): they are gathered into its ``policy=``.

A ``retrieval+`` strategy needs a memory key naming whose turns it indexes (it fails closed
rather than share a default memory): it gets the ``key`` given to :func:`parse_strategy`, or a
key of its own (a fresh user and session), so ``strategy.apply(messages)`` works as it is. A
replay passes a fresh key per replay in any case.

Example:
    >>> from langmem_ext import ExtractiveSummarizer
    >>> name, strategy = parse_strategy("summary_buffer:8k,max_summary_tokens=500",
    ...                                 summarizer=ExtractiveSummarizer())
    >>> name, type(strategy).__name__, strategy.config.max_tokens
    ('summary_buffer:8k,max_summary_tokens=500', 'SummaryBuffer', 8000)
    >>> try:
    ...     parse_strategy("token_budget:max_token=100")
    ... except SpecError as error:
    ...     print(str(error)[:96])
    strategy 'token_budget:max_token=100': TokenBudget has no argument 'max_token' (did you mean max
"""

from __future__ import annotations

import difflib
import inspect
import re
import uuid
from collections.abc import Callable
from typing import Any

from langchain_core.embeddings import Embeddings

from langmem_ext.core.keys import MemoryKey
from langmem_ext.counting.resolve import CounterLike
from langmem_ext.errors import LangmemExtError
from langmem_ext.retrieval.config import RetrievalConfig
from langmem_ext.retrieval.strategy import Retrieval
from langmem_ext.strategies import presets
from langmem_ext.strategies.engine import Strategy
from langmem_ext.strategies.options import POLICY_FIELDS, split_policy
from langmem_ext.summarize.summarizer import SummarizerLike

__all__ = ["STRATEGIES", "SpecError", "parse_strategy"]


class SpecError(LangmemExtError, ValueError):
    """A strategy spec that names no strategy or passes arguments it does not take."""


STRATEGIES: dict[str, type[Strategy]] = {
    "token_budget": presets.TokenBudget,
    "sliding_window": presets.SlidingWindow,
    "tool_digest": presets.ToolDigest,
    "summary_buffer": presets.SummaryBuffer,
    "compacting": presets.Compacting,
    "tiered_summary": presets.TieredSummary,
}
_ALIASES = {"trim": "token_budget", "window": "sliding_window", "tiered": "tiered_summary"}
_FULL = ("full", "none", "full_history")
_SUMMARIZING = (presets.SummaryBuffer, presets.Compacting, presets.TieredSummary)
_NUMBER = re.compile(r"[+-]?\d[\d_]*(?:\.\d+)?[kKmM]?")


def _key(name: str) -> str:
    return re.sub(r"[^a-z0-9]", "", name.lower())


_BY_KEY = {_key(n): n for n in STRATEGIES} | {_key(c.__name__): n for n, c in STRATEGIES.items()}
_BY_KEY |= {_key(a): n for a, n in _ALIASES.items()}


def _value(text: str) -> Any:
    lowered = text.strip().lower()
    if lowered in ("true", "yes"):
        return True
    if lowered in ("false", "no"):
        return False
    if lowered in ("none", "null"):
        return None
    if _NUMBER.fullmatch(lowered):
        scale = {"k": 1_000, "m": 1_000_000}.get(lowered[-1], 1)
        digits = lowered.rstrip("km").replace("_", "")
        number = float(digits) * scale
        return int(number) if number.is_integer() and ("." not in digits or scale > 1) else number
    return text.strip()


def _class(name: str, spec: str) -> type[Strategy]:
    found = _BY_KEY.get(_key(name))
    if found is None:
        known = ", ".join([*STRATEGIES, "full", "retrieval+<strategy>"])
        close = difflib.get_close_matches(name.lower(), [*STRATEGIES, *_FULL], n=1)
        # never "did you mean full?" for "full": the hint names a different spelling
        hint = f" (did you mean {close[0]}?)" if close and close[0] != name.lower() else ""
        raise SpecError(f"strategy {spec!r}: unknown strategy {name!r}{hint}; known: {known}")
    return STRATEGIES[found]


def _parameters(cls: type[Any]) -> list[str]:
    names = [
        p.name
        for p in inspect.signature(cls.__init__).parameters.values()
        if p.name != "self" and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)
    ]
    if issubclass(cls, _SUMMARIZING):  # a spec is flat: the policy's settings are named directly
        names = [n for n in names if n != "policy"] + list(POLICY_FIELDS)
    return names


def _arguments(text: str, spec: str) -> tuple[list[Any], dict[str, Any]]:
    positional: list[Any] = []
    keywords: dict[str, Any] = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        key, sep, value = part.partition("=")
        if not sep:
            if keywords or positional:
                raise SpecError(
                    f"strategy {spec!r}: {part!r} needs a name (key=value); only the first "
                    "value may be given without one"
                )
            positional.append(_value(part))
        elif not key.strip().isidentifier():
            raise SpecError(f"strategy {spec!r}: {key.strip()!r} is not an argument name")
        else:
            keywords[key.strip()] = _value(value)
    return positional, keywords


def _check(cls: type[Any], keywords: dict[str, Any], spec: str) -> None:
    accepted = _parameters(cls)
    for name in keywords:
        if name not in accepted:
            close = difflib.get_close_matches(name, accepted, n=1)
            hint = f" (did you mean {close[0]}?)" if close else ""
            listed = ", ".join(a for a in accepted if a not in ("summarizer", "store", "inner"))
            raise SpecError(
                f"strategy {spec!r}: {cls.__name__} has no argument {name!r}{hint}; "
                f"it takes: {listed}"
            )


def _build(cls: type[Any], args: list[Any], keywords: dict[str, Any], spec: str) -> Any:
    try:
        return cls(*args, **keywords)
    except (TypeError, ValueError, LangmemExtError) as exc:
        raise SpecError(f"strategy {spec!r}: {exc}") from None


def default_store(embeddings: Embeddings | None = None) -> Any:
    """The store a ``retrieval+...`` spec indexes into: an ``InMemoryStore`` with the local
    MiniLM embeddings when the ``embeddings`` extra is installed (dense + BM25 ranking), without
    an index otherwise (BM25 only)."""
    from langgraph.store.memory import InMemoryStore

    if embeddings is None:
        try:
            from langmem_ext.retrieval.embeddings import LocalMiniLMEmbeddings

            model = LocalMiniLMEmbeddings()
            model.load()
            embeddings = model
        except Exception:  # no extra, no model files: BM25 ranking only
            return InMemoryStore()
    return InMemoryStore(index={"dims": 384, "embed": embeddings, "fields": ["text"]})


def _wrapped(head: str, spec: str) -> str:
    """The name of the strategy a ``retrieval+NAME`` head wraps."""
    _, plus, inner_name = head.partition("+")
    if not plus or not inner_name.strip():
        raise SpecError(
            f"strategy {spec!r}: retrieval wraps a strategy: write retrieval+<strategy>, "
            "e.g. 'retrieval+token_budget:4500,k=5'"
        )
    inner = inner_name.strip()
    if inner.lower().startswith("retrieval"):
        raise SpecError(f"strategy {spec!r}: retrieval cannot wrap retrieval")
    if _key(inner) in {_key(f) for f in _FULL}:
        raise SpecError(
            f"strategy {spec!r}: retrieval wraps a strategy that leaves turns out of the "
            f"view, and {inner!r} does not (it is not one of: {', '.join(STRATEGIES)}); "
            "e.g. 'retrieval+token_budget:4500,k=5'"
        )
    return inner


def _summarizing(
    cls: type[Any], keywords: dict[str, Any], summarizer: SummarizerLike | None, spec: str
) -> dict[str, Any]:
    """The keywords of a summarizing strategy: the summarizer given unless the spec names one,
    and the fold-policy arguments gathered into its ``policy`` (a ``FoldPolicy``)."""
    if "summarizer" not in keywords:
        if summarizer is None:
            raise SpecError(f"strategy {spec!r}: {cls.__name__} needs a summarizer")
        keywords["summarizer"] = summarizer
    try:
        policy, keywords = split_policy(keywords)
    except (TypeError, ValueError) as exc:
        raise SpecError(f"strategy {spec!r}: {exc}") from None
    if policy is not None:
        keywords["policy"] = policy
    return keywords


def parse_strategy(
    spec: str,
    *,
    counter: CounterLike = None,
    summarizer: SummarizerLike | None = None,
    store: Callable[[], Any] | None = None,
    key: MemoryKey | None = None,
) -> tuple[str, Strategy | None]:
    """``(spec, strategy)`` for ``spec`` (``None`` for ``full``); raises :class:`SpecError`
    naming the spec, the argument and what is accepted.

    Args:
        counter: the counter every strategy gets unless the spec names one.
        summarizer: for the summarizing strategies (required by them).
        store: makes the store of a ``retrieval+`` spec (default: :func:`default_store`).
        key: the memory key of a ``retrieval+`` strategy (default: one of its own, a fresh
            user and session, so it runs without ``key=`` and shares no memory).
    """
    text = spec.strip()
    head, _, rest = text.partition(":")
    head = head.strip()
    if _key(head) in {_key(f) for f in _FULL}:
        if rest.strip():
            raise SpecError(f"strategy {spec!r}: 'full' takes no arguments")
        return text, None
    retrieval = head.lower().startswith("retrieval")
    if retrieval:
        head = _wrapped(head, spec)
    cls = _class(head, text)
    args, keywords = _arguments(rest, text)
    outer: dict[str, Any] = {}
    if retrieval:
        # Retrieval's own keywords and its RetrievalConfig's settings (gathered into config=)
        left_out = {"inner", "max_tokens", "store", "sources", "key", "config"}
        taken = {*_parameters(Retrieval), *RetrievalConfig.__dataclass_fields__} - left_out
        outer = {k: keywords.pop(k) for k in list(keywords) if k in taken}
    _check(cls, keywords, text)
    if counter is not None and "counter" not in keywords:
        keywords["counter"] = counter
    if issubclass(cls, _SUMMARIZING):
        keywords = _summarizing(cls, keywords, summarizer, spec)
    strategy = _build(cls, args, keywords, text)
    if retrieval:
        settings = {k: outer.pop(k) for k in list(outer) if k not in _parameters(Retrieval)}
        settings.setdefault("shared_default", False)
        outer["config"] = _build(RetrievalConfig, [], settings, text)
        if key is None:
            own = f"spec-{uuid.uuid4().hex}"
            key = MemoryKey(user=own, session=own)
        outer["key"] = key
        strategy = _build(
            Retrieval, [strategy], {"store": (store or default_store)(), **outer}, text
        )
    return text, strategy
