"""langmem_ext: budget-exact, tool-safe context management for LangChain and LangGraph.

Strategies decide, before the model runs, which messages it sees: they trim, clip, summarize and
retrieve so that every request is valid for the provider and within budget.
"""

from langmem_ext.core.keys import MemoryKey
from langmem_ext.core.messages import Finding, Unit, is_valid, repair, split_units, validate
from langmem_ext.core.result import MemoryReport, MemoryResult
from langmem_ext.core.shape import SHAPE_LEGEND, view_shape
from langmem_ext.core.state import MemoryState
from langmem_ext.core.tokens import TokenCounter
from langmem_ext.counting.anthropic import AnthropicCounter
from langmem_ext.counting.cache import CachedCounter
from langmem_ext.counting.calibrated import CalibratedCounter
from langmem_ext.counting.chat_model import ChatModelCounter
from langmem_ext.counting.local import ApproximateCounter, TiktokenCounter
from langmem_ext.counting.resolve import CallableCounter, as_counter
from langmem_ext.errors import (
    ContextOverflowError,
    GraphSchemaError,
    InvalidHistoryError,
    InvalidStateError,
    LangmemExtError,
    MemoryBudgetExceeded,
    MissingKeyError,
    ModelBusyError,
    SummarizerError,
    SummaryRejected,
    TokenCountError,
    TokenizerUnavailableError,
)
from langmem_ext.integrations.graph import (
    GraphSchemaWarning,
    MemoryAgentState,
    MemoryMessagesState,
    MemoryNode,
)
from langmem_ext.integrations.history import ManagedChatMessageHistory
from langmem_ext.retrieval.config import RetrievalConfig
from langmem_ext.retrieval.index import IndexCacheStats
from langmem_ext.retrieval.model_steps import ModelSteps
from langmem_ext.retrieval.strategy import Retrieval
from langmem_ext.retrieval.vectors import VectorIndex
from langmem_ext.strategies import (
    Compacting,
    FoldPolicy,
    FoldRateWarning,
    SlidingWindow,
    Strategy,
    SummaryBuffer,
    TieredSummary,
    TokenBudget,
    ToolDigest,
)
from langmem_ext.summarize.checks import DEFAULT_CHECKS as DEFAULT_SUMMARY_CHECKS
from langmem_ext.summarize.checks import SummaryCheck, SummaryContext
from langmem_ext.summarize.extractive import ExtractiveSummarizer
from langmem_ext.summarize.summarizer import Summarizer

__version__ = "0.1.0"

__all__ = [
    "DEFAULT_SUMMARY_CHECKS",
    "SHAPE_LEGEND",
    "AnthropicCounter",
    "ApproximateCounter",
    "CachedCounter",
    "CalibratedCounter",
    "CallableCounter",
    "ChatModelCounter",
    "Compacting",
    "ContextOverflowError",
    "ExtractiveSummarizer",
    "Finding",
    "FoldPolicy",
    "FoldRateWarning",
    "GraphSchemaError",
    "GraphSchemaWarning",
    "IndexCacheStats",
    "InvalidHistoryError",
    "InvalidStateError",
    "LangmemExtError",
    "LocalMiniLMEmbeddings",
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
    "ModelBusyError",
    "ModelSteps",
    "Retrieval",
    "RetrievalConfig",
    "SlidingWindow",
    "Strategy",
    "Summarizer",
    "SummarizerError",
    "SummaryBuffer",
    "SummaryCheck",
    "SummaryContext",
    "SummaryRejected",
    "TieredSummary",
    "TiktokenCounter",
    "TokenBudget",
    "TokenCountError",
    "TokenCounter",
    "TokenizerUnavailableError",
    "ToolDigest",
    "Unit",
    "VectorIndex",
    "__version__",
    "as_counter",
    "is_valid",
    "repair",
    "split_units",
    "validate",
    "view_shape",
]


def __getattr__(name: str) -> object:
    # MemoryMiddleware needs the optional `langchain` package: import it only when asked for
    if name == "MemoryMiddleware":
        try:
            from langmem_ext.integrations.agents import MemoryMiddleware
        except ImportError as exc:  # pragma: no cover - depends on the environment
            raise ImportError(
                "MemoryMiddleware needs the 'langchain' package (create_agent's middleware): "
                "pip install 'langmem-ext[agents]'"
            ) from exc
        return MemoryMiddleware
    if name == "LocalMiniLMEmbeddings":
        # needs the optional `embeddings` extra (onnxruntime, tokenizers): imported when asked for
        from langmem_ext.retrieval.embeddings import LocalMiniLMEmbeddings

        return LocalMiniLMEmbeddings
    raise AttributeError(f"module 'langmem_ext' has no attribute {name!r}")
