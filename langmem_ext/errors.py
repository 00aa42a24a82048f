"""Exceptions: one hierarchy, every class defined here. Each one names the problem and carries
the numbers as attributes.

Every exception this package raises on purpose derives from :class:`LangmemExtError`, and also
from the builtin a caller would naturally catch, so ``except ValueError`` keeps working::

    LangmemExtError
    ├── ContextOverflowError (ValueError)      the required messages do not fit the budget
    │   └── MemoryBudgetExceeded               ... with the summary (summarizing strategies)
    ├── InvalidHistoryError (ValueError)       a history holds what no model may be sent
    ├── InvalidStateError (ValueError)         a MemoryState (or its dict) is not valid
    ├── StoredStateError (ValueError)          a store holds what the legacy class did not write
    ├── GraphSchemaError (ValueError)          a graph state lacks a channel the node writes
    ├── MissingKeyError (KeyError)             a memory-key part is missing and may not default
    ├── SummarizerError (RuntimeError)         a fold failed after retries and the fallback
    │   └── SummaryRejected                    ... because the answers failed the summary checks
    ├── ModelBusyError (TimeoutError)          a local model still runs an abandoned call
    ├── TokenCountError (RuntimeError)         a provider's token-counting endpoint failed
    ├── TokenizerUnavailableError (RuntimeError) a tokenizer could not be loaded
    ├── EmbeddingDependencyError (ImportError) a runtime package of the local embedder is missing
    └── EmbeddingModelNotFoundError (FileNotFoundError) its model files are nowhere to be found

The modules that raise them re-export them under their old names (``langmem_ext.core.keys.
MissingKeyError``, ``langmem_ext.summarize.summarizer.SummarizerError`` ...), so existing imports
keep working; ``from langmem_ext import ...`` is the public way.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

__all__ = [
    "ContextOverflowError",
    "EmbeddingDependencyError",
    "EmbeddingModelNotFoundError",
    "GraphSchemaError",
    "InvalidHistoryError",
    "InvalidStateError",
    "LangmemExtError",
    "MemoryBudgetExceeded",
    "MissingKeyError",
    "ModelBusyError",
    "StoredStateError",
    "SummarizerError",
    "SummaryRejected",
    "TokenCountError",
    "TokenizerUnavailableError",
]


class LangmemExtError(Exception):
    """Base class of every exception this package raises on purpose."""


class TokenizerUnavailableError(LangmemExtError, RuntimeError):
    """A tokenizer could not be loaded (for tiktoken: usually no network and no cached files)."""


class InvalidStateError(LangmemExtError, ValueError):
    """A :class:`~langmem_ext.core.state.MemoryState` (or the dict it is read from) is not valid.

    Raised instead of reading a corrupted or foreign state silently: a wrong guess could fold,
    drop or re-summarize the wrong messages. ``field`` names the offending field (``None`` when
    the value as a whole is wrong) and ``value`` is what was found there.
    """

    def __init__(self, message: str, *, field: str | None = None, value: Any = None) -> None:
        super().__init__(message)
        self.field = field
        self.value = value


class InvalidHistoryError(LangmemExtError, ValueError):
    """A message history holds something a strategy must never send to a model.

    For example a ``RemoveMessage``: it is an instruction to LangGraph's ``add_messages``
    reducer, not a message, and must be applied before a strategy reads the history. ``index``
    is its position in the history and ``message_id`` its id.
    """

    def __init__(self, message: str, *, index: int, message_id: str | None = None) -> None:
        super().__init__(message)
        self.index = index
        self.message_id = message_id


class ContextOverflowError(LangmemExtError, ValueError):
    """The messages that must be in the view do not fit in the budget.

    Raised with ``overflow="error"`` (the default) when, for example, the newest human message
    alone is larger than the budget. ``needed`` is what the required messages cost, ``available``
    what the budget leaves for them after the system message, the reserve, the safety margin and
    the per-request overhead.
    """

    def __init__(
        self,
        message: str,
        *,
        needed: int,
        available: int,
        max_tokens: int,
        reserve_tokens: int = 0,
        system_tokens: int = 0,
    ) -> None:
        super().__init__(message)
        self.needed = needed
        self.available = available
        self.max_tokens = max_tokens
        self.reserve_tokens = reserve_tokens
        self.system_tokens = system_tokens


class MemoryBudgetExceeded(ContextOverflowError):
    """The summary, ``min_messages`` and the newest human message cannot fit together.

    Raised by the summarizing strategies with ``overflow="error"``; the numbers are those of
    :class:`ContextOverflowError`, and ``summary_tokens`` is what the summary costs.
    """

    def __init__(self, message: str, *, summary_tokens: int = 0, **numbers: int) -> None:
        super().__init__(message, **numbers)
        self.summary_tokens = summary_tokens
        #: the MemoryState after this turn (a fold may have succeeded before the view overflowed):
        #: store it like ``result.state`` so the summarizer's work is not lost
        self.state: Any = None


class StoredStateError(LangmemExtError, ValueError):
    """The store holds something that is not a state this class wrote (or a newer version)."""


class GraphSchemaError(LangmemExtError, ValueError):
    """A :class:`MemoryNode` runs in a graph whose state lacks a channel it must write to, so
    LangGraph would silently drop the write and the model would not get the view (or a summary
    would be lost). ``channel`` is the missing key, ``node`` the node's name in the graph."""

    def __init__(self, message: str, *, channel: str, node: str | None) -> None:
        super().__init__(message)
        self.channel = channel
        self.node = node


class MissingKeyError(LangmemExtError, KeyError):
    """A part of the memory key was not given, and falling back to a shared default is not
    allowed (``require_explicit_key=True``, or memory outside the graph state at that scope)."""

    def __init__(
        self,
        missing: tuple[str, ...],
        looked_in: Mapping[str, tuple[str, ...]],
        *,
        reason: str = "require_explicit_key=True",
    ) -> None:
        fields = "; ".join(f"{part}: one of {', '.join(looked_in[part])}" for part in missing)
        super().__init__(
            f"memory key incomplete: {', '.join(missing)} not given and {reason} "
            f"(config['configurable'] fields - {fields})"
        )
        self.missing = missing

    def __str__(self) -> str:  # KeyError would repr() the message
        return str(self.args[0])


class SummarizerError(LangmemExtError, RuntimeError):
    """A fold failed after retries (and after the fallback, if any). Nothing was folded.

    ``section`` is the summary section being written; ``attempts`` is the number of requests
    actually made for the failing call; ``retry_after`` is the wait (seconds) the provider asked
    for in its last answer, if it asked (a caller scheduling its next try should not come back
    sooner).
    """

    def __init__(
        self,
        message: str,
        *,
        section: str | None = None,
        attempts: int = 0,
        retry_after: float | None = None,
    ) -> None:
        super().__init__(message)
        self.section = section
        self.attempts = attempts
        self.retry_after = retry_after


class SummaryRejected(SummarizerError):
    """The summarizer model answered, but a check refused the answer as a summary.

    ``reason`` says why (the check's own words, e.g. "degenerate repetition: 'b' repeated 200
    times (100% of the summary)"). Raised for a fold whose model (and fallback) kept answering
    garbage; like any :class:`SummarizerError`, nothing was folded.
    """

    def __init__(
        self,
        message: str,
        *,
        reason: str,
        section: str | None = None,
        attempts: int = 0,
        retry_after: float | None = None,
    ) -> None:
        super().__init__(message, section=section, attempts=attempts, retry_after=retry_after)
        self.reason = reason


class ModelBusyError(LangmemExtError, TimeoutError):
    """A call could not start within its timeout: the model object is still running another
    call (typically one abandoned at its own timeout), and it is not safe to run two at once.
    A TimeoutError, so transient: retried with backoff, then a failed fold."""


class TokenCountError(LangmemExtError, RuntimeError):
    """A provider's token-counting endpoint failed.

    ``model`` is the model the count was for, ``status_code`` the HTTP status (``None`` when no
    answer came: a connection error or a timeout) and ``error_type`` the provider's error type
    (``"rate_limit_error"``, ``"api_error"`` ...) when it said one.
    """

    def __init__(
        self,
        message: str,
        *,
        provider: str,
        model: str,
        status_code: int | None = None,
        error_type: str | None = None,
    ) -> None:
        super().__init__(message)
        self.provider = provider
        self.model = model
        self.status_code = status_code
        self.error_type = error_type


class EmbeddingDependencyError(LangmemExtError, ImportError):
    """A runtime package of :class:`LocalMiniLMEmbeddings` (numpy, tokenizers, onnxruntime) is not
    installed or does not import. ``missing`` names the import names; the message gives
    :data:`INSTALL_COMMAND`."""

    def __init__(self, message: str, *, missing: Sequence[str]) -> None:
        super().__init__(message)
        self.missing = tuple(missing)


class EmbeddingModelNotFoundError(LangmemExtError, FileNotFoundError):
    """The ONNX model or its ``tokenizer.json`` is neither where it was said to be nor in an
    installed package. ``what`` is ``"model"`` or ``"tokenizer"``, ``searched`` the places tried."""

    def __init__(self, message: str, *, what: str, searched: Sequence[str]) -> None:
        super().__init__(message)
        self.what = what
        self.searched = tuple(searched)
