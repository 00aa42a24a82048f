"""Sweeps of retrieval settings that are constants, not options, on the second round's goals
(issue 33): ``python -m bench.retrieval_sweeps [--quick] [--out DIR]``.

Each row is ``Retrieval``'s default hybrid row (``bench/retrieval.py``) with one setting changed,
measured on A' (CRI facts, first person), B (planted facts, ``gate="auto"``) and the small-talk
turns after the CRI thread, like the "Ideas tried" table of ``bench/results/retrieval.md``:

* the gate's dense threshold (``STRONG_MATCH``: a query whose best evicted turn scores this much
  is searched even without a cue word);
* per-sentence vectors: besides one vector per message, windows of a few sentences of every
  long message (or of the user's only), so a fact in one sentence of a long message is not
  diluted by the rest (what a stored turn embeds is ``layout.parts_of``);
* the fusion (``rrf_k``, ``dense_weight``) and how deep each ranking goes (``_CANDIDATES``);
* some of them without the dense feedback (on by default).

The settings that are constants are changed for one row and restored (``unittest.mock``).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any
from unittest import mock

from bench.harness import RunClock, bench_main, log_progress, md_table, pct, seed_tiktoken
from bench.harness import write_results as write_files
from bench.retrieval import _e2e_cell, _texts_to_embed
from bench.retrieval_config import (
    _E2E,
    FULL,
    GOALS_DATASET,
    HEADLINE,
    QUICK,
    RetrievalBenchConfig,
    resolved_context_tokens,
)
from bench.retrieval_data import load_cri, load_cri_facts
from bench.retrieval_measure import CachedEmbeddings, _aggregate_small_talk, _small_talk
from bench.retrieval_planted import planted_conversations

_SENTENCE = re.compile(r"(?<=[.!?])\s+")


@dataclass(frozen=True)
class Sweep:
    """One row: its label, the constants it sets (module, name, value), the bench config's
    fields it replaces, sentence windows (``window`` sentences of messages over ``min_words``
    words, of ``roles``; 0: none) and whether dense feedback is on."""

    label: str
    constants: tuple[tuple[str, str, Any], ...] = ()
    fields: dict[str, Any] = field(default_factory=dict)
    window: int = 0
    min_words: int = 40
    roles: tuple[str, ...] = ("user", "assistant")
    feedback: bool | None = None


_GATE = "langmem_ext.retrieval.strategy"
_DEPTH = "langmem_ext.retrieval.config"

SWEEPS: tuple[Sweep, ...] = (
    Sweep("the defaults"),
    *(
        Sweep(f"gate threshold {t:g} (default 0.6)", ((_GATE, "STRONG_MATCH", t),))
        for t in (0.55, 0.5, 0.45, 0.4)
    ),
    Sweep("windows of 1 sentence, every long message", window=1),
    Sweep("windows of 2 sentences, every long message", window=2),
    Sweep("windows of 3 sentences, every long message", window=3),
    Sweep("windows of 2 sentences, the user's long messages", window=2, roles=("user",)),
    Sweep("windows of 3 sentences, the user's long messages", window=3, roles=("user",)),
    Sweep("rrf_k 10 (default 5)", fields={"rrf_k": 10}),
    Sweep("rrf_k 20", fields={"rrf_k": 20}),
    Sweep("rrf_k 60 (textbook)", fields={"rrf_k": 60}),
    Sweep("dense_weight 3 (default 2)", fields={"dense_weight": 3.0}),
    Sweep("120 candidates a ranking (default 60)", ((_DEPTH, "_CANDIDATES", 120),)),
    Sweep("250 candidates a ranking", ((_DEPTH, "_CANDIDATES", 250),)),
    Sweep("feedback=False", feedback=False),
    Sweep("feedback=False, rrf_k 10", fields={"rrf_k": 10}, feedback=False),
    Sweep(
        "feedback=False, windows of 3 sentences, the user's long messages",
        window=3,
        roles=("user",),
        feedback=False,
    ),
    Sweep("feedback=False, 120 candidates", ((_DEPTH, "_CANDIDATES", 120),), feedback=False),
    Sweep("feedback=False, gate threshold 0.45", ((_GATE, "STRONG_MATCH", 0.45),), feedback=False),
)


def sentence_windows(part: str, window: int, min_words: int) -> list[str]:
    """``part`` (a rendered message, ``role: text``) as windows of ``window`` sentences,
    overlapping by one (none when it has ``min_words`` words or fewer, or ``window`` sentences
    or fewer)."""
    if window < 1 or len(part.split()) <= min_words:
        return []
    sentences = [s for s in _SENTENCE.split(part.partition(": ")[2]) if s.strip()]
    if len(sentences) <= window:
        return []
    step = max(1, window - 1)
    return [
        " ".join(sentences[i : i + window]) for i in range(0, len(sentences) - window + 1, step)
    ]


def _with_windows(sweep: Sweep, parts_of: Callable[[Any], list[str]]) -> Callable[[Any], list[str]]:
    def windowed(op: Any) -> list[str]:
        parts = parts_of(op)
        extra = [
            w
            for p in parts
            if p.partition(": ")[0] in sweep.roles
            for w in sentence_windows(p, sweep.window, sweep.min_words)
        ]
        return parts + [w for w in dict.fromkeys(extra) if w not in parts]

    return windowed


class _Asked(CachedEmbeddings):
    """The bench's cached embeddings, noting every document text asked for (``asked``): how
    many more texts a row embeds than the defaults, whatever the cache already holds."""

    asked: set[str]

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        getattr(self, "asked", set()).update(texts)
        return super().embed_documents(texts)


@contextmanager
def applied(sweep: Sweep) -> Iterator[None]:
    """``sweep``'s constants and sentence windows in force, restored on exit."""
    import importlib

    from langmem_ext.retrieval import layout

    with ExitStack() as stack:
        for module, name, value in sweep.constants:
            stack.enter_context(mock.patch.object(importlib.import_module(module), name, value))
        if sweep.window:
            windowed = _with_windows(sweep, layout.parts_of)
            for module in ("langmem_ext.retrieval.codec", "langmem_ext.retrieval.catchup"):
                target = importlib.import_module(module)
                stack.enter_context(mock.patch.object(target, "parts_of", windowed))
        yield


def run_sweeps(
    config: RetrievalBenchConfig, log: Callable[[str], None] = log_progress, command: str = ""
) -> dict[str, Any]:
    seed_tiktoken()
    from langmem_ext import TiktokenCounter
    from langmem_ext.retrieval.embeddings import LocalMiniLMEmbeddings

    clock = RunClock()
    counter = TiktokenCounter()
    context_tokens = resolved_context_tokens(config)
    cri_1p = load_cri(upto=config.cri_upto, first_person=True)
    facts_1p = [load_cri_facts(upto=cut, first_person=True) for cut in config.cri_fact_cuts]
    planted = planted_conversations(config.planted)
    datasets = {GOALS_DATASET: facts_1p, "planted": planted}
    model = LocalMiniLMEmbeddings()
    model.load()
    embeddings = _Asked(model)
    base = _texts_to_embed([cri_1p, *facts_1p, *planted], cri_1p)
    embeddings.embed_documents(base)
    rows: list[dict[str, Any]] = []
    for sweep in SWEEPS:
        cfg = replace(config, **sweep.fields)
        spec = _E2E(HEADLINE, "hybrid", feedback=sweep.feedback)
        embeddings.asked = set()
        with applied(sweep):
            cells = {
                name: _e2e_cell(datasets, cfg, counter, embeddings, context_tokens, name, spec)[0]
                for name in datasets
            }
            small = _aggregate_small_talk(_small_talk(cri_1p, spec, cfg, counter, embeddings))
        a, b = cells[GOALS_DATASET], cells["planted"]
        rows.append(
            {
                "label": sweep.label,
                "every_fact": a["all_facts_available"],
                "share": a["fact_recall"],
                "multi_every_fact": (a.get("multi_fact") or {}).get("all_facts_available"),
                "planted": b["evidence_available"],
                "paraphrased": (b.get("paraphrased") or {}).get("evidence_available"),
                "small_talk_median": small["tokens_added"]["median"],
                "small_talk_with_context": small["with_context"],
                "small_talk_asks": small["asks"],
                "extra_texts_embedded": len(embeddings.asked.difference(base)),
            }
        )
        log(f"[retrieval_sweeps] {sweep.label} ({clock.elapsed:.0f} s)")
    return clock.finish({"meta": clock.meta(config, command), "rows": rows})


def render_markdown(results: dict[str, Any]) -> str:
    rows = results["rows"]
    lines = [
        "# Retrieval: sweeps of settings that are constants (second round of recall)",
        "",
        "Each row is `Retrieval`'s default hybrid row with one setting changed (`python -m "
        "bench.retrieval_sweeps`; what each changes: `bench/retrieval_sweeps.py`). A' = CRI "
        "facts, first person (every fact of the query in the input; the share of its facts; "
        "multi-fact = its questions with two facts or more); B = planted facts with "
        "`gate='auto'` (paraphrased = its questions that share no content word with their "
        "evidence); small talk = tokens the context message adds on the small-talk turns after "
        "the CRI thread (median, and how many got one). Goals: every fact >= 80%, share >= 90%, "
        "B >= 96%, small talk median 0.",
        "",
        *md_table(
            (
                "setting",
                "A' every fact",
                "A' share",
                "A' multi-fact: every fact",
                "B",
                "B paraphrased",
                "small talk (median; with a context)",
                "texts embedded beyond the data set's messages",
            ),
            (
                (
                    r["label"],
                    pct(r["every_fact"]),
                    pct(r["share"]),
                    pct(r["multi_every_fact"]),
                    pct(r["planted"]),
                    pct(r["paraphrased"]),
                    f"{r['small_talk_median']:,.0f} ({r['small_talk_with_context']} of "
                    f"{r['small_talk_asks']})",
                    f"{r['extra_texts_embedded']:,}",
                )
                for r in rows
            ),
        ),
        "",
    ]
    return "\n".join(lines)


def write_results(results: dict[str, Any], out_dir: Path, stem: str) -> tuple[Path, Path]:
    return write_files(results, out_dir, stem, render_markdown)


def main(argv: Sequence[str] | None = None) -> int:
    return bench_main(
        argv,
        module="bench.retrieval_sweeps",
        description="Sweeps of retrieval constants on the second round's recall goals.",
        quick_help="smoke run: CRI's first 600 messages, one planted conversation",
        configs=(FULL, QUICK),
        run=run_sweeps,
        write=write_results,
    )


if __name__ == "__main__":
    raise SystemExit(main())
