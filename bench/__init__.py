"""Benchmarks for langmem_ext against langchain-core's ``trim_messages``.

Run ``python -m bench`` from the repository root (``--quick`` for a smoke run, ``--out DIR`` to
write the results elsewhere). Sections (see ``bench/run.py``):

A. per-call time on static synthetic histories of 100, 1,000 and 10,000 messages;
B. total time over an agent loop that calls the strategy at every model call;
C. prefix stability over that loop (does each view keep the previous view as its prefix?);
D. validity of every view in that loop (within budget, no error-severity findings).

Results go to ``bench/results/latest.md`` and ``bench/results/latest.json`` (quick runs write
``quick.*`` next to them, which git ignores).
"""

from __future__ import annotations

__all__: list[str] = []
