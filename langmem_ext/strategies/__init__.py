"""The strategies users construct and the engine that runs them.

* :mod:`~langmem_ext.strategies.engine`: the ``Strategy`` base, one sync and one async driver
  that step a pure plan and answer its requests (folds, store batches, retriever calls);
* :mod:`~langmem_ext.strategies.summarize`: the chat-model ``Summarizer`` (chained folds under
  an input budget, retries, timeout, fallback);
* :mod:`~langmem_ext.strategies.presets`: ``TokenBudget``, ``SlidingWindow``, ``SummaryBuffer``,
  ``Compacting``, ``TieredSummary``, ``ToolDigest``: configurations of the cutting and fold plans;
* :mod:`~langmem_ext.strategies.extractive`: ``ExtractiveSummarizer``, an offline summarizer
  (no model, deterministic) for keyless runs and as a last-resort ``fallback``;
* :mod:`~langmem_ext.strategies.retrieval`: ``Retrieval``, which wraps any of them;
* :mod:`~langmem_ext.strategies.embeddings`: the offline embedder (the ``embeddings`` extra).
"""

from langmem_ext.strategies.engine import Strategy
from langmem_ext.strategies.extractive import ExtractiveSummarizer
from langmem_ext.strategies.presets import (
    Compacting,
    SlidingWindow,
    SummaryBuffer,
    TieredSummary,
    TokenBudget,
    ToolDigest,
)
from langmem_ext.strategies.retrieval import Retrieval, RetrievalConfig
from langmem_ext.strategies.summarize import Summarizer

__all__ = [
    "Compacting",
    "ExtractiveSummarizer",
    "Retrieval",
    "RetrievalConfig",
    "SlidingWindow",
    "Strategy",
    "Summarizer",
    "SummaryBuffer",
    "TieredSummary",
    "TokenBudget",
    "ToolDigest",
]
