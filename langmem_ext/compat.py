"""The drop-in for LangChain's deprecated ``ConversationSummaryBufferMemory``.

This module is the import path migrating code uses (``from langmem_ext.compat import
ConversationSummaryBufferMemory``, in place of ``langchain.memory``); the class lives in
:mod:`langmem_ext.integrations.legacy` with the other integrations, and this module exports
exactly what that one does (its ``__all__``; each name imported as itself, so type checkers see
it re-exported).
"""

from langmem_ext.integrations import legacy
from langmem_ext.integrations.legacy import HAS_CLASSIC as HAS_CLASSIC
from langmem_ext.integrations.legacy import SUMMARY_PROMPT as SUMMARY_PROMPT
from langmem_ext.integrations.legacy import (
    ConversationSummaryBufferMemory as ConversationSummaryBufferMemory,
)
from langmem_ext.integrations.legacy import HistoryRewrittenWarning as HistoryRewrittenWarning
from langmem_ext.integrations.legacy import StoredStateError as StoredStateError
from langmem_ext.integrations.legacy import SummaryBufferState as SummaryBufferState
from langmem_ext.integrations.legacy import UnpersistedSummaryWarning as UnpersistedSummaryWarning

__all__ = list(legacy.__all__)
