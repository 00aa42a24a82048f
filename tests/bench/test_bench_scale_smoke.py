"""The scale benchmark runs end to end with ``--quick`` and fills every section with sane values;
its thread builder and its embedding counts say what they claim. No timing thresholds: a run
this small (300 turns, a fresh process at 600) says nothing about the goals."""

from __future__ import annotations

import json
from pathlib import Path

from langchain_core.embeddings import Embeddings
from langchain_core.messages import AIMessage, HumanMessage

from bench.scale import QUICK, main
from bench.scale_restart import _embed_counts
from bench.scale_setup import _Probe, _ProbedEmbeddings, build_thread


class _Fixed(Embeddings):
    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        return [[1.0, 0.0] for _ in texts]

    def embed_query(self, text: str) -> list[float]:
        return [0.0, 1.0]


def test_thread_repeats_the_turns_with_fresh_ids() -> None:
    groups = [
        [HumanMessage("hi", id="h1"), AIMessage("hello", id="a1")],
        [HumanMessage("bye", id="h2")],
    ]
    messages, ends = build_thread(groups, 5)
    assert ends == [2, 3, 5, 6, 8] and len(messages) == 8
    assert [m.content for m in messages[:3]] == ["hi", "hello", "bye"]
    assert messages[3].content == "hi" and messages[3].id == "scale-2-0"
    assert len({m.id for m in messages}) == len(messages)
    smaller, _ = build_thread(groups, 3)
    assert [m.id for m in smaller] == [m.id for m in messages[: ends[2]]]  # a prefix


def test_embeddings_are_counted_by_who_asked() -> None:
    probe = _Probe()
    embeddings = _ProbedEmbeddings(_Fixed(), probe)
    embeddings.embed_query("where is my car?")  # Retrieval's own
    probe.in_store = True  # the store's search: SqliteStore embeds the query as a document
    embeddings.embed_documents(["where is my car?"])
    probe.in_store = False
    embeddings.embed_documents(["user: an old turn"])  # a stored turn embedded again
    assert _embed_counts(probe, "where is my car?") == {
        "query_embeddings": 1,
        "store_query_embeddings": 1,
        "texts_embedded": 3,
        "other_texts_embedded": 1,
    }


def test_quick_run_writes_every_section(tmp_path: Path) -> None:
    assert main(["--quick", "--out", str(tmp_path)]) == 0
    md = (tmp_path / "scale_quick.md").read_text(encoding="utf-8")
    results = json.loads((tmp_path / "scale_quick.json").read_text(encoding="utf-8"))
    for heading in (
        "## Goals",
        "## 1. Per-turn latency",
        "### Live turns",
        "## 2. Recall@10 of the local index against exact search",
        "## 3. First turn of a fresh process",
        "## 4. Indexing cost per evicted turn",
    ):
        assert heading in md
    assert results["meta"]["mode"] == "quick"
    assert results["data"]["distinct_turns"] == QUICK.max_groups

    # 1. latency: both dense indexes, every part measured, the timed calls index nothing
    assert set(results["latency"]) == {str(size) for size in QUICK.sizes}
    for size, cell in results["latency"].items():
        assert 0 < cell["indexed_turns"] < int(size) and cell["ratio_p50"] > 0
        for mode in ("local", "store"):
            c = cell[mode]
            assert c["queries"] == len(c["apply_ms"]) > 0
            assert 0 < c["total"]["median"] <= c["total"]["p90"]
            assert c["embed"]["median"] > 0 and c["embed_calls"]["median"] >= 1
            assert c["bm25"]["median"] > 0 and c["store"]["median"] > 0
            assert c["indexed_total"] == 0
            assert c["build_s"] > 0
        assert cell["local"]["vector"]["median"] > 0
        live = cell["local"]["live"]
        assert live["queries"] == QUICK.queries and live["total"]["median"] > 0

    # 2. recall: shares, the twin holds what the index holds
    for r in results["recall"].values():
        assert r["queries"] == QUICK.queries and r["k"] == 10
        for share in (r["recall"], r["recall_min"], r["strict_recall"], r["jittered"]["recall"]):
            assert 0.0 <= share <= 1.0
        assert (r["keys"], r["rows"]) == (r["twin_keys"], r["twin_rows"]) and r["rows"] >= r["keys"]
        assert r["search_ms"]["local"]["median"] > 0

    # 3. fresh process: the stored vectors are loaded, only the queries are embedded
    restart = results["restart"]
    assert restart["turns"] == QUICK.restart_turns
    for where in ("memory", "sqlite"):
        c = restart[where]
        calls = c["calls"]
        assert len(calls) == QUICK.restart_queries and c["first_apply_s"] > 0
        assert sum(call["query_embeddings"] for call in calls) == QUICK.restart_queries
        assert all(call["other_texts_embedded"] == 0 for call in calls)
        assert all(call["indexed"] == 0 for call in calls)
        split = c["split"]
        assert split["turns_loaded"] == c["indexed_turns"] > 0
        for part in ("total_s", "store_read_s", "bm25_build_s", "vectors_s", "inner_cold_s"):
            assert split[part] > 0
    sqlite = restart["sqlite"]
    assert sqlite["file_bytes"] > 0 and sqlite["model_load_s"] > 0
    assert sqlite["process_s"] > sqlite["first_apply_s"]

    # 4. indexing: at least the turns asked for, every part measured
    for mode in ("local", "store"):
        c = results["indexing"][mode]
        assert c["evicted_turns"] >= QUICK.index_turns
        assert c["embed"]["median"] > 0 and c["texts_per_turn"] >= 1
        assert c["sum"]["median"] >= c["embed"]["median"] and c["bm25_add"]["median"] > 0
    assert results["indexing"]["local"]["vector_add"]["median"] > 0

    # the goals: named, judged only on what was measured
    goals = results["goals"]
    assert len(goals) == 4
    assert goals[1]["value"] is not None and 0.0 <= goals[1]["value"] <= 1.0
    assert [g["met"] for g in goals if g["value"] is None] == [None, None, None]
