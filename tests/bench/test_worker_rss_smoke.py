"""The worker RSS benchmark at a tiny size on PostgreSQL (the tests' schema): every setting's
worker serves its threads, reports RSS and the index cache at each checkpoint, revisits its
early threads with views equal to a fresh Retrieval's, and the report has every row. No memory
thresholds: a run this small says nothing about the goals."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from bench.worker_rss import MIB, QUICK, render_markdown, run_worker_rss, write_results
from bench.worker_rss_worker import PoolEmbeddings, thread_messages


class _Model:
    def __init__(self) -> None:
        self.seen: list[str] = []

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        self.seen += texts
        return [[9.0] for _ in texts]


def test_pool_vectors_are_used_and_other_texts_go_to_the_model() -> None:
    import numpy as np

    model = _Model()
    embed = PoolEmbeddings(["a", "b"], np.array([[1.0], [2.0]], dtype=np.float32), model)  # type: ignore[arg-type]
    assert embed.embed_documents(["b", "c", "a"]) == [[2.0], [9.0], [1.0]]
    assert embed.embed_query("a") == [1.0]
    assert model.seen == ["c"] and embed.model_texts == 1


def test_threads_alternate_user_and_assistant_with_ids_of_their_own() -> None:
    pool = [{"role": "user" if i % 2 == 0 else "assistant", "content": f"m{i}"} for i in range(40)]
    messages = thread_messages(pool, 3, 5)
    assert [m.type for m in messages] == ["human", "ai"] * 5
    assert len({m.id for m in messages}) == 10 and all(
        str(m.id).startswith("t3-") for m in messages
    )
    assert [m.content for m in messages] == [m.content for m in thread_messages(pool, 3, 5)]


def test_quick_worker_rss_reports_every_setting(pg_schema_dsn: str, tmp_path: Path) -> None:
    config = replace(
        QUICK, threads=6, turns=6, checkpoints=(2, 4, 6), revisit=2, cache_bytes=(MIB, 0),
        pool_messages=40,
    )  # fmt: skip
    results = run_worker_rss(config, dsn=pg_schema_dsn)
    settings = results["settings"]
    assert [s["label"] for s in settings] == ["1 MiB", "0"]
    for s in settings:
        assert s["complete"] and s["exit_code"] == 0, s
        assert [p["threads"] for p in s["checkpoints"]] == [2, 4, 6]
        assert all(p["VmRSS"] > 0 and p["apply_p50_ms"] > 0 for p in s["checkpoints"])
        assert s["revisit"]["threads"] == 2 and s["revisit"]["equal"] == 2
        assert s["checkpoints"][-1]["sizes"]["model_texts"] == 0  # every text from the pool
    kept, none = (s["checkpoints"][-1]["cache"] for s in settings)
    assert kept["entries"] > 0 and kept["hits"] > 0
    assert none["entries"] == 0 and none["hits"] == 0 and none["misses"] > 0
    md_path, json_path = write_results(results, tmp_path, "worker_rss_quick")
    md = md_path.read_text(encoding="utf-8")
    assert md == render_markdown(results) and json_path.exists()
    for label in ("1 MiB", "0"):
        assert f"RSS(6) / RSS(2) ≤ 1.10, cache {label} |" in md
        assert f"max RSS < 400 MB, cache {label} |" in md
        assert f"revisited views equal a fresh Retrieval's, cache {label} | 2 / 2 | PASS |" in md
    assert "## RSS (MB) by threads served" in md and "## Revisits" in md
