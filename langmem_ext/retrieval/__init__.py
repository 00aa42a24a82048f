"""Retrieval: bring evicted turns and knowledge back into the view.

* :mod:`~langmem_ext.retrieval.strategy`: ``Retrieval``, which wraps any strategy, and
  ``RetrievalConfig``;
* :mod:`~langmem_ext.retrieval.vectors`: ``VectorIndex``, the in-process dense index;
* what ``Retrieval`` is made of, one concern a module: ``layout`` (the store schema), ``config``,
  ``flows`` (the I/O requests and their driver), ``text``, ``codec``, ``index``, ``reads``,
  ``catchup``, ``search``, ``writes``, ``compose``, ``prefetch``, ``vectors_coarse``,
  ``model_steps`` (the optional rewrite and rerank calls, ``ModelSteps``);
* :mod:`~langmem_ext.retrieval.bm25`: the in-process lexical index;
* :mod:`~langmem_ext.retrieval.embeddings`: the offline embedder (the ``embeddings`` extra, so
  it is not imported here).

Retrieval sits above :mod:`langmem_ext.strategies` (it wraps a strategy and is driven by the same
engine) and below :mod:`langmem_ext.integrations`. See ``docs/architecture.md``.
"""

from langmem_ext.retrieval.config import RetrievalConfig
from langmem_ext.retrieval.model_steps import ModelSteps
from langmem_ext.retrieval.strategy import Retrieval
from langmem_ext.retrieval.vectors import VectorIndex

__all__ = ["ModelSteps", "Retrieval", "RetrievalConfig", "VectorIndex"]
