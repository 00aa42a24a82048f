"""The strategies users construct and the engine that runs them.

* :mod:`~langmem_ext.strategies.engine`: the ``Strategy`` base, one sync and one async driver
  that step a pure plan and answer its requests (folds, store batches, retriever calls);
* :mod:`~langmem_ext.strategies.presets`: ``TokenBudget``, ``SlidingWindow``, ``SummaryBuffer``,
  ``Compacting``, ``TieredSummary``, ``ToolDigest``: configurations of the cutting and fold plans;
* :mod:`~langmem_ext.strategies.options`: ``FoldPolicy``, the settings the summarizing ones share
  beyond their budget (placement, overflow, backoff, background folds, callbacks, clock).

The summarizers they call are in :mod:`langmem_ext.summarize`; ``Retrieval``, which wraps any of
them, in :mod:`langmem_ext.retrieval`.
"""

from langmem_ext.strategies.engine import FoldRateWarning, Strategy
from langmem_ext.strategies.options import FoldPolicy
from langmem_ext.strategies.presets import (
    Compacting,
    SlidingWindow,
    SummaryBuffer,
    TieredSummary,
    TokenBudget,
    ToolDigest,
)

__all__ = [
    "Compacting",
    "FoldPolicy",
    "FoldRateWarning",
    "SlidingWindow",
    "Strategy",
    "SummaryBuffer",
    "TieredSummary",
    "TokenBudget",
    "ToolDigest",
]
