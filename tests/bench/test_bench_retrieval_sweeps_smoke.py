"""The retrieval sweeps (``python -m bench.retrieval_sweeps``): sentence windows, the constants a
row changes and restores, and a quick run that fills every row (its figures are not claims: the
full run's are in bench/results/retrieval_sweeps.md)."""

from __future__ import annotations

import json
from pathlib import Path

from bench.retrieval_sweeps import SWEEPS, Sweep, applied, main, sentence_windows


def test_sentence_windows_overlap_by_one_and_skip_short_messages() -> None:
    part = "user: One fact. Two facts here! Three? Four and more words."
    assert sentence_windows(part, 2, min_words=3) == [
        "One fact. Two facts here!",
        "Two facts here! Three?",
        "Three? Four and more words.",
    ]
    assert sentence_windows(part, 2, min_words=40) == []  # short: its own vector is enough
    assert sentence_windows(part, 4, min_words=3) == []  # no more sentences than a window
    assert sentence_windows(part, 0, min_words=3) == []


def test_a_row_sets_its_constants_and_windows_and_restores_them() -> None:
    from langmem_ext.retrieval import catchup, codec, config, layout, strategy

    sweep = Sweep(
        "x",
        (("langmem_ext.retrieval.strategy", "STRONG_MATCH", 0.1),
         ("langmem_ext.retrieval.config", "_CANDIDATES", 7)),
        window=1, min_words=0, roles=("user",),
    )  # fmt: skip
    before = (strategy.STRONG_MATCH, config._CANDIDATES)
    from langgraph.store.base import PutOp

    op = PutOp(("t",), "k", {"parts": ["user: A. B.", "assistant: C. D."], "text": ""})
    with applied(sweep):
        assert (strategy.STRONG_MATCH, config._CANDIDATES) == (0.1, 7)
        assert codec.parts_of(op) == catchup.parts_of(op) == [*layout.parts_of(op), "A.", "B."]
    assert before == (strategy.STRONG_MATCH, config._CANDIDATES)
    assert codec.parts_of is layout.parts_of and catchup.parts_of is layout.parts_of


def test_quick_run_fills_every_row(tmp_path: Path) -> None:
    assert main(["--quick", "--out", str(tmp_path)]) == 0
    rows = {
        r["label"]: r
        for r in json.loads((tmp_path / "retrieval_sweeps_quick.json").read_text())["rows"]
    }
    assert list(rows) == [s.label for s in SWEEPS]
    for row in rows.values():
        for key in ("every_fact", "share", "planted"):
            assert 0.0 <= row[key] <= 1.0, row
        assert row["every_fact"] <= row["share"]
    # a lower gate threshold searches on a superset of the small-talk turns
    gates = [rows["the defaults"]] + [r for label, r in rows.items() if label.startswith("gate")]
    counts = [r["small_talk_with_context"] for r in gates]
    assert counts == sorted(counts)
    # windows add texts to embed: fewer when only the user's messages get them
    every = rows["windows of 2 sentences, every long message"]["extra_texts_embedded"]
    users = rows["windows of 2 sentences, the user's long messages"]["extra_texts_embedded"]
    assert every > users > rows["the defaults"]["extra_texts_embedded"]
