"""Benchmarks for langmem_ext against langchain-core, langmem and langchain.

Every benchmark is a module run as ``python -m bench.<name> [--quick] [--out DIR]`` (the
Makefile's ``bench`` target runs them all) and writes ``bench/results/<name>.md`` and
``<name>.json`` (``--quick``: ``<name>_quick.*``, which git ignores). They share
``bench/harness.py``: the command line, the run's record (machine, versions, load, run time),
writing the results, timing and the markdown helpers; those on PostgreSQL share
``bench/pgserver.py`` (a fresh schema of the machine's server with LangGraph's tables, or an
embedded server with pgvector; the client versions for the run's record). Synthetic sentences
come from ``langmem_ext.testing.random_words``.

* ``python -m bench`` (``bench/run.py``): TokenBudget against ``trim_messages``: per-call time on
  static histories (``static.py``), then an agent loop (``loop.py``) for total time, prefix
  stability and validity; the report is ``report.py``, the counters ``counters.py``. It writes
  ``latest.*`` (``quick.*`` for ``--quick``).
* ``bench.summaries``: the summarizing strategies against langmem and langchain on a marked loop
  (``fakes.py``: the marked conversation and the fake summarizer; ``summaries_tools.py``: the
  tools and their driver; ``summaries_report.py``).
* ``bench.agent_turns``: the same tools over long agent turns of hundreds of tool rounds.
* ``bench.growth``: checkpoint growth of a ``MemoryNode`` graph over 1,000 turns.
* ``bench.retrieval``: retrieval memory (``retrieval_config.py``, ``retrieval_measure.py``,
  ``retrieval_report.py`` and ``retrieval_choices.py``) on CRI's persona (``retrieval_data.py``,
  ``cri_facts.py``) and planted facts (``retrieval_planted.py``, ``retrieval_planted_facts.py``).
* ``bench.crossing``: the call that crosses the summary trigger, inline and in the background.
* ``bench.scale``: retrieval at 100,000 turns (``scale_setup.py``, ``scale_restart.py``,
  ``scale_report.py``).
* ``bench.embedders``: local embedding models (``embedders_models.py``, ``embedders_report.py``).
* ``bench.long_turns``: tool-result facts brought back later in the same long agent turn.
* ``make bench-production`` (PostgreSQL, minutes each): ``bench.pgvector_scale`` (pgvector at
  scale, ``pgvector_data.py``), ``bench.soak`` (agents across worker processes, one killed;
  ``soak_worker.py``) and ``bench.worker_rss`` (a worker's RSS against threads served;
  ``worker_rss_worker.py``).
* ``python -m bench.docs``: ``docs/benchmarks.md`` and its plots (``docs_plots.py``) from the
  committed JSON results.
"""

from __future__ import annotations

__all__: list[str] = []
