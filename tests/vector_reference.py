"""The brute-force float64 reference that ``VectorIndex`` (langmem_ext/retrieval/vectors.py) is
checked against, and clustered test data: shared by ``test_retrieval_vector_index.py`` (exact and
approximate regimes) and ``test_retrieval_vector_index_coarse.py`` (coarse regime, bulk loads)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np


def _unit(rows: Any) -> np.ndarray:
    """Rows scaled to length 1 in float64 (a zero row stays zero: it scores 0 against anything)."""
    array = np.asarray(rows, dtype=np.float64)
    norms = np.linalg.norm(array, axis=-1, keepdims=True)
    return np.divide(array, norms, out=np.zeros_like(array), where=norms > 0)


def reference_scores(
    keys: dict[str, Any], query: Any, exclude: Iterable[str] = ()
) -> dict[str, float]:
    """Each key's score: the best cosine of its rows with ``query``."""
    q = _unit(query)
    skip = set(exclude)
    return {key: float((_unit(rows) @ q).max()) for key, rows in keys.items() if key not in skip}


def reference_search(
    keys: dict[str, Any], query: Any, k: int, exclude: Iterable[str] = ()
) -> list[tuple[str, float]]:
    scores = reference_scores(keys, query, exclude)
    return sorted(scores.items(), key=lambda item: (-item[1], item[0]))[: max(k, 0)]


def assert_same_ranking(
    found: list[tuple[str, float]],
    keys: dict[str, Any],
    query: Any,
    k: int,
    exclude: Iterable[str] = (),
    tol: float = 1e-5,
) -> None:
    """``found`` is the reference's ranking: same length, each key's score within ``tol`` of its
    reference score and of the reference score at its rank, ordered by (-score, key) on its own
    scores, and the same key at every rank whose reference score has no rival within ``2 * tol``
    (float32 may order keys whose cosines agree to 1e-7 either way; equal scores go by key)."""
    scores = reference_scores(keys, query, exclude)
    expected = reference_search(keys, query, k, exclude)
    assert len(found) == len(expected), (found, expected)
    assert len({key for key, _ in found}) == len(found), found
    assert found == sorted(found, key=lambda item: (-item[1], item[0]))
    everything = sorted(scores.values())
    for (key, score), (want_key, want_score) in zip(found, expected, strict=True):
        assert key in scores, f"{key!r} is excluded or unknown"
        assert abs(score - scores[key]) <= tol, (key, score, scores[key])
        assert abs(score - want_score) <= tol, (key, score, want_key, want_score)
        rivals = sum(1 for s in everything if abs(s - want_score) <= 2 * tol)
        if rivals == 1:
            assert key == want_key, (found, expected)


def _clustered(rng: np.random.Generator, dims: int = 32, latent: int = 6, clusters: int = 5) -> Any:
    """Clustered vectors of low intrinsic dimension (as sentence embeddings are): cluster centres
    and spread in a ``latent``-dimensional subspace, a little noise in every dimension."""
    basis = np.linalg.qr(rng.normal(size=(dims, latent)))[0]
    centres = rng.normal(size=(clusters, latent)) * 3

    def draw(count: int) -> Any:
        centre = centres[rng.integers(clusters)]
        spread = centre + rng.normal(size=(count, latent))
        return spread @ basis.T + 0.15 * rng.normal(size=(count, dims))

    return draw
