"""Summarizers: turn folded turns into a summary with a chat model, check it, degrade gracefully.

* :mod:`~langmem_ext.summarize.summarizer`: ``Summarizer`` (chained folds under an input
  budget, retries, timeout, health, fallback);
* :mod:`~langmem_ext.summarize.calls`: one model call (``ModelCall``), the error classification
  its retries use, and running it under a timeout and a per-model lock;
* :mod:`~langmem_ext.summarize.flow`: the call flow's steps (``Invoke``, ``Sleep``), run by the
  drivers of :mod:`langmem_ext.core.steps`;
* :mod:`~langmem_ext.summarize.prompts`: the built-in templates, the system prompt, and each
  section's instruction and budget;
* :mod:`~langmem_ext.summarize.checks`: the checks a summary must pass before it is kept;
* :mod:`~langmem_ext.summarize.extractive`: ``ExtractiveSummarizer``, an offline summarizer
  (no model, deterministic) for keyless runs and as a last-resort ``fallback``.

It imports only :mod:`langmem_ext.core`; the strategies (:mod:`langmem_ext.strategies`) call it.
"""

from langmem_ext.summarize.checks import DEFAULT_CHECKS, SummaryCheck, SummaryContext
from langmem_ext.summarize.extractive import ExtractiveSummarizer
from langmem_ext.summarize.summarizer import Summarizer

__all__ = ["DEFAULT_CHECKS", "ExtractiveSummarizer", "Summarizer", "SummaryCheck", "SummaryContext"]
