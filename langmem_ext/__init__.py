"""langmem_ext: budget-exact, tool-safe context management for LangChain and LangGraph.

Strategies decide, before the model runs, which messages it sees: they trim, clip, summarize and
retrieve so that every request is valid for the provider and within budget.
"""

from langmem_ext.engine import Strategy
from langmem_ext.errors import (
    ContextOverflowError,
    GraphSchemaError,
    InvalidHistoryError,
    InvalidStateError,
    LangmemExtError,
    MemoryBudgetExceeded,
    MissingKeyError,
    SummarizerError,
    TokenizerUnavailableError,
)
from langmem_ext.graph import (
    GraphSchemaWarning,
    MemoryAgentState,
    MemoryMessagesState,
    MemoryNode,
)
from langmem_ext.history import ManagedChatMessageHistory
from langmem_ext.keys import MemoryKey
from langmem_ext.messages import Finding, Unit, is_valid, repair, split_units, validate
from langmem_ext.result import MemoryReport, MemoryResult
from langmem_ext.retrieval import Retrieval, RetrievalConfig
from langmem_ext.state import MemoryState
from langmem_ext.strategies import (
    Compacting,
    SlidingWindow,
    SummaryBuffer,
    TieredSummary,
    TokenBudget,
)
from langmem_ext.summarize import Summarizer
from langmem_ext.tokens import (
    ApproximateCounter,
    CachedCounter,
    CallableCounter,
    ChatModelCounter,
    TiktokenCounter,
    TokenCounter,
    as_counter,
)

__version__ = "0.1.0"

__all__ = [
    "ApproximateCounter",
    "CachedCounter",
    "CallableCounter",
    "ChatModelCounter",
    "Compacting",
    "ContextOverflowError",
    "Finding",
    "GraphSchemaError",
    "GraphSchemaWarning",
    "InvalidHistoryError",
    "InvalidStateError",
    "LangmemExtError",
    "ManagedChatMessageHistory",
    "MemoryAgentState",
    "MemoryBudgetExceeded",
    "MemoryKey",
    "MemoryMessagesState",
    "MemoryMiddleware",
    "MemoryNode",
    "MemoryReport",
    "MemoryResult",
    "MemoryState",
    "MissingKeyError",
    "Retrieval",
    "RetrievalConfig",
    "SlidingWindow",
    "Strategy",
    "Summarizer",
    "SummarizerError",
    "SummaryBuffer",
    "TieredSummary",
    "TiktokenCounter",
    "TokenBudget",
    "TokenCounter",
    "TokenizerUnavailableError",
    "Unit",
    "__version__",
    "as_counter",
    "is_valid",
    "repair",
    "split_units",
    "validate",
]


def __getattr__(name: str) -> object:
    # MemoryMiddleware needs the optional `langchain` package: import it only when asked for
    if name == "MemoryMiddleware":
        try:
            from langmem_ext.agents import MemoryMiddleware
        except ImportError as exc:  # pragma: no cover - depends on the environment
            raise ImportError(
                "MemoryMiddleware needs the 'langchain' package (create_agent's middleware): "
                "pip install 'langmem-ext[agents]'"
            ) from exc
        return MemoryMiddleware
    raise AttributeError(f"module 'langmem_ext' has no attribute {name!r}")
