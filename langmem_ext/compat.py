"""The drop-in for LangChain's deprecated ``ConversationSummaryBufferMemory``.

This module is the import path migrating code uses (``from langmem_ext.compat import
ConversationSummaryBufferMemory``, in place of ``langchain.memory``); the class lives in
:mod:`langmem_ext.integrations.legacy` with the other integrations.
"""

from langmem_ext.integrations.legacy import (
    HAS_CLASSIC,
    SUMMARY_PROMPT,
    ConversationSummaryBufferMemory,
    HistoryRewrittenWarning,
    StoredStateError,
    SummaryBufferState,
    UnpersistedSummaryWarning,
)

__all__ = [
    "HAS_CLASSIC",
    "SUMMARY_PROMPT",
    "ConversationSummaryBufferMemory",
    "HistoryRewrittenWarning",
    "StoredStateError",
    "SummaryBufferState",
    "UnpersistedSummaryWarning",
]
