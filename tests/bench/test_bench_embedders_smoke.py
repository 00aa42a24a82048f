"""The embedder benchmark's code paths on tiny inputs: each adapter embeds (MiniLM always; a
model whose package is absent is skipped, naming the package), the disk cache round-trips, and
the run writes its report. No quality or timing claims: the inputs are far too small."""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path

import pytest
from bench_helpers import assert_results_written

from bench import embedders
from bench.embedders import MODELS, QUICK, DiskCachedEmbeddings, run_embedders, write_results

DOCS = ["I adopted a grey cat named Pixel last spring.", "The quarterly report is due Friday."]


@pytest.mark.parametrize("spec", MODELS, ids=[m.name for m in MODELS])
def test_adapter_embeds_unit_vectors_that_rank_the_related_text_first(spec, tmp_path) -> None:
    if not spec.installed():
        pytest.skip(f"{spec.package} is not installed (model {spec.name})")
    cached = DiskCachedEmbeddings(spec.make(), tmp_path / "cache.pkl")
    docs = cached.embed_documents(DOCS)
    query = cached.embed_query("What is my pet's name?")
    assert [len(v) for v in [*docs, query]] == [spec.dims] * 3
    for v in [*docs, query]:
        assert math.isclose(math.fsum(x * x for x in v), 1.0, rel_tol=1e-3)
    scores = [math.fsum(a * b for a, b in zip(query, d, strict=True)) for d in docs]
    assert scores[0] > scores[1]
    assert all(p.stat().st_size > 1_000_000 for p in spec.files())  # real weights

    cached.save()
    again = DiskCachedEmbeddings(spec.make(), tmp_path / "cache.pkl")
    assert again.embed_documents(DOCS) == docs and again.embed_query("What is my pet's name?")
    assert again.added == 0  # everything came from the pickle


def test_run_on_a_tiny_planted_conversation_writes_the_report(tmp_path, monkeypatch) -> None:
    monkeypatch.setattr(embedders, "CACHE_DIR", tmp_path / "cache")
    tiny = replace(
        QUICK,
        mode="smoke",
        cri_cuts=(),
        planted_lengths=(60,),
        budget=1_500,
        cost_texts=8,
        cost_queries=2,
        models=("minilm-l6-int8",),
    )
    # one short conversation: facts at depths 10 and 40
    monkeypatch.setattr(
        embedders,
        "datasets",
        lambda config: {"cri": [], "planted": _planted(config)},
    )
    results = run_embedders(tiny, log=lambda _: None)
    minilm = results["models"]["minilm-l6-int8"]
    assert set(minilm["results"]) == {"planted"}
    planted = minilm["results"]["planted"]
    assert planted["questions"] > 0 and 0.0 <= planted["evidence"] <= 1.0
    assert planted["facts"] is None  # planted questions have no fact lists
    assert minilm["cost"]["ms_per_turn"] > 0 and minilm["cost"]["model_mb"] > 1
    assert_results_written(
        write_results,
        results,
        tmp_path / "out",
        "embedders_smoke",
        ["## Quality", "## Cost", "## Cross-encoder rerank", "## Survey of PyPI"],
    )


def _planted(config):  # type: ignore[no-untyped-def]
    from bench.retrieval_planted import PlantedSettings, planted_conversations

    settings = replace(
        PlantedSettings(), lengths=config.planted_lengths, depths=(10, 40), seeds=(0,)
    )
    return planted_conversations(settings)


def test_every_model_names_its_package_and_the_survey_covers_them() -> None:
    names = {m.name for m in MODELS}
    assert "minilm-l6-int8" in names and len(names) == len(MODELS)
    surveyed = " ".join(s["package"] for s in embedders.SURVEY)
    assert all(m.package in surveyed for m in MODELS)


def test_cache_keeps_queries_apart_from_stored_texts(tmp_path: Path) -> None:
    class Prefixing:
        def embed_documents(self, texts: list[str]) -> list[list[float]]:
            return [[1.0, 0.0] for _ in texts]

        def embed_query(self, text: str) -> list[float]:
            return [0.0, 1.0]

    cached = DiskCachedEmbeddings(Prefixing(), tmp_path / "c.pkl")  # type: ignore[arg-type]
    assert cached.embed_documents(["same"]) == [[1.0, 0.0]]
    assert cached.embed_query("same") == [0.0, 1.0]
