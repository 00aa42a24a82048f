"""What the retrieval tests read off a strategy result: the text of the retrieved-context
message (``RETRIEVED_ID``), empty when the view has none."""

from __future__ import annotations

from typing import Any

from langmem_ext.core.shape import RETRIEVED_ID


def context(result: Any) -> str:
    """The retrieved-context message's text in ``result.messages`` ("" when there is none)."""
    return next((str(m.content) for m in result.messages if m.id == RETRIEVED_ID), "")
