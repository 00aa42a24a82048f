"""LocalMiniLMEmbeddings and onnxruntime's CPU memory arena: off by default, so a server does
not keep the largest batch's buffers for good (``bench/embedders.py`` measures it); the vectors
are bit-identical whether the arena is off, shrunk after each call, or kept."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from langmem_ext.retrieval.embeddings import LocalMiniLMEmbeddings

TEXTS = [
    "I adopted a grey cat named Pixel last spring.",
    "The quarterly report is due Friday. " * 30,  # a long text: a large batch buffer
    "",
]


def _loaded(minilm_embeddings: Any, **kw: Any) -> LocalMiniLMEmbeddings:
    model = LocalMiniLMEmbeddings(**kw)
    model.load()
    return model


def test_the_memory_arena_is_off_by_default(minilm_embeddings: Any) -> None:
    model = _loaded(minilm_embeddings)
    assert model.memory_arena == "off"
    runtime = model._runtime
    assert runtime is not None
    assert runtime.session.get_session_options().enable_cpu_mem_arena is False
    assert runtime.run_options is None


def test_shrink_keeps_the_arena_and_shrinks_it_after_each_call(minilm_embeddings: Any) -> None:
    runtime = _loaded(minilm_embeddings, memory_arena="shrink")._runtime
    assert runtime is not None
    assert runtime.session.get_session_options().enable_cpu_mem_arena is True
    entry = runtime.run_options.get_run_config_entry("memory.enable_memory_arena_shrinkage")
    assert entry == "cpu:0"


def test_vectors_are_bit_identical_whatever_the_arena(minilm_embeddings: Any) -> None:
    vectors = {
        mode: np.asarray(_loaded(minilm_embeddings, memory_arena=mode).embed_documents(TEXTS))
        for mode in ("off", "shrink", "on")
    }
    assert vectors["off"].dtype == np.float64 and vectors["off"].shape == (3, 384)
    assert vectors["off"].tobytes() == vectors["on"].tobytes() == vectors["shrink"].tobytes()


def test_an_unknown_arena_mode_is_refused_naming_the_parameter(minilm_embeddings: Any) -> None:
    with pytest.raises(ValueError, match="memory_arena must be 'off', 'shrink' or 'on', got 'no'"):
        LocalMiniLMEmbeddings(memory_arena="no")  # type: ignore[arg-type]
