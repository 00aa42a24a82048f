"""The pgvector scale benchmark's data and loading: a deterministic cheap embedder, synthetic
distinct turns, and a ``PostgresStore`` that bulk-loads the turns ``Retrieval`` writes.

Why synthetic: embedding 100k-1M texts with a real model does not fit on 2 cores, so the stored
vectors come from :class:`HashEmbeddings` (signed feature hashing of words and word pairs,
normalised): texts that share words are near, as with a real model, and no two turns are equal
(no ties in the recall). The query embedding's cost with the real local MiniLM is measured
apart (``bench/pgvector_scale.py``).

Why a bulk path: ``PostgresStore.batch`` inserts row by row into a table whose HNSW index is
updated on every insert (about a millisecond a vector here). :class:`BulkPostgresStore` takes
the very writes ``Retrieval`` makes (``PutOp`` of its turns, ``index=["parts[*]"]``) and COPYs
them into ``store`` and ``store_vectors`` with the vectors PostgresStore would have computed
(same field names, same embedder); the HNSW index is dropped before and built once after.
Everything else (marks, tails, reads) goes through ``PostgresStore`` as usual.
"""

from __future__ import annotations

import json
import struct
import zlib
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np
from langchain_core.embeddings import Embeddings
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage
from langgraph.store.base import Op, PutOp, Result
from langgraph.store.postgres import PostgresStore

__all__ = [
    "DIMS",
    "INDEX_NAME",
    "BulkPostgresStore",
    "HashEmbeddings",
    "build_index",
    "drop_index",
    "make_query",
    "synthetic_turns",
    "vocabulary",
]

DIMS = 384
#: the HNSW index PostgresStore's migrations create
INDEX_NAME = "store_vectors_embedding_idx"

_SYLLABLES = ("ka", "lo", "mi", "ren", "sa", "tor", "vi", "del", "por", "qua", "zen", "bri")


def vocabulary(size: int = 5_000, seed: int = 0) -> list[str]:
    """``size`` distinct pseudo-words (2-4 syllables), in a fixed order."""
    rng = np.random.default_rng(seed)
    words: dict[str, None] = {}
    while len(words) < size:
        n = int(rng.integers(2, 5))
        words["".join(_SYLLABLES[int(i)] for i in rng.integers(0, len(_SYLLABLES), n))] = None
    return list(words)


class HashEmbeddings(Embeddings):
    """Signed feature hashing of words (weight 1) and adjacent word pairs (weight 0.5), L2
    normalised: deterministic, microseconds a text, and near for texts that share words."""

    def __init__(self, dims: int = DIMS) -> None:
        self.dims = dims
        self._slots: dict[str, tuple[int, float]] = {}

    def _slot(self, token: str) -> tuple[int, float]:
        slot = self._slots.get(token)
        if slot is None:
            h = zlib.crc32(token.encode())
            slot = (h % self.dims, 1.0 if (h >> 20) & 1 else -1.0)
            if len(self._slots) < 1_000_000:
                self._slots[token] = slot
        return slot

    def matrix(self, texts: Sequence[str]) -> np.ndarray:
        """The vectors of ``texts`` as a float32 matrix (one row a text)."""
        out = np.zeros((len(texts), self.dims), dtype=np.float32)
        for row, text in enumerate(texts):
            words = text.lower().split()
            for i, word in enumerate(words):
                col, sign = self._slot(word)
                out[row, col] += sign
                if i:
                    col, sign = self._slot(words[i - 1] + "_" + word)
                    out[row, col] += 0.5 * sign
        norms = np.linalg.norm(out, axis=1, keepdims=True)
        norms[norms == 0] = 1.0
        result: np.ndarray = out / norms
        return result

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        rows: list[list[float]] = self.matrix(texts).tolist()
        return rows

    def embed_query(self, text: str) -> list[float]:
        return self.embed_documents([text])[0]


def synthetic_turns(threads: int, turns_per_thread: int, seed: int) -> dict[str, list[BaseMessage]]:
    """``threads`` conversations of ``turns_per_thread`` turns (a human message of 10-24 words
    and a reply of 14-30, words drawn Zipf-like from :func:`vocabulary`), ids unique."""
    vocab = np.array(vocabulary(seed=seed))
    weights = 1.0 / (np.arange(len(vocab)) + 10.0)
    weights /= weights.sum()
    rng = np.random.default_rng(seed)
    out: dict[str, list[BaseMessage]] = {}
    for t in range(threads):
        lengths = rng.integers(10, 25, turns_per_thread), rng.integers(14, 31, turns_per_thread)
        drawn = rng.choice(len(vocab), int(lengths[0].sum() + lengths[1].sum()), p=weights)
        words = vocab[drawn].tolist()
        messages: list[BaseMessage] = []
        pos = 0
        for i in range(turns_per_thread):
            h, a = int(lengths[0][i]), int(lengths[1][i])
            human = " ".join(words[pos : pos + h])
            reply = " ".join(words[pos + h : pos + h + a])
            pos += h + a
            messages.append(HumanMessage(human, id=f"pv-{t}-{i}-h"))
            messages.append(AIMessage(reply, id=f"pv-{t}-{i}-a"))
        out[f"thread-{t}"] = messages
    return out


def make_query(message: BaseMessage, vocab: Sequence[str], rng: np.random.Generator) -> str:
    """A question near one stored message: about 60% of its words, shuffled, and three others."""
    words = str(message.content).split()
    keep = [w for w in words if rng.random() < 0.6] or words[:3]
    rng.shuffle(keep)
    extra = [vocab[int(i)] for i in rng.integers(0, len(vocab), 3)]
    return " ".join(["what", "about", *keep, *extra])


def _vector_rows_binary(rows: Iterable[tuple[str, str, str, np.ndarray]]) -> Iterable[bytes]:
    """COPY BINARY rows of ``store_vectors (prefix, key, field_name, embedding)``: pgvector's
    binary form is int16 dims, int16 0, then big-endian float4s."""
    yield b"PGCOPY\n\xff\r\n\x00" + struct.pack("!ii", 0, 0)
    for prefix, key, field, vector in rows:
        parts = [p.encode() for p in (prefix, key, field)]
        vec = struct.pack("!hh", vector.shape[0], 0) + vector.astype(">f4").tobytes()
        chunk = [struct.pack("!h", 4)]
        for p in [*parts, vec]:
            chunk.append(struct.pack("!i", len(p)))
            chunk.append(p)
        yield b"".join(chunk)
    yield struct.pack("!h", -1)


class BulkPostgresStore(PostgresStore):
    """``PostgresStore`` whose indexed turn writes are COPYed (see the module docstring) while
    ``bulk`` is on; every other operation, and every write once ``bulk`` is off, is the
    store's own."""

    bulk: bool = False
    #: vectors written by the bulk path (for the report)
    bulk_vectors: int = 0

    def batch(self, ops: Iterable[Op]) -> list[Result]:
        ops = list(ops)
        if not self.bulk:
            return super().batch(ops)
        mine = [
            i
            for i, op in enumerate(ops)
            if isinstance(op, PutOp) and isinstance(op.index, list) and op.value is not None
        ]
        rest = [op for i, op in enumerate(ops) if i not in set(mine)]
        self._copy([ops[i] for i in mine])  # type: ignore[misc]
        results = iter(super().batch(rest) if rest else [])
        mine_set = set(mine)
        return [None if i in mine_set else next(results) for i in range(len(ops))]

    def _copy(self, ops: Sequence[PutOp]) -> None:
        if not ops:
            return
        embed = self.embeddings
        assert isinstance(embed, HashEmbeddings)
        latest = {(op.namespace, op.key): op for op in ops}
        texts: list[str] = []
        where: list[tuple[str, str, str]] = []
        for (namespace, key), op in latest.items():
            prefix = ".".join(namespace)
            parts = list((op.value or {}).get("parts", []))
            assert op.index == ["parts[*]"], op.index
            for i, text in enumerate(parts):
                field = f"parts[*].{i}" if len(parts) > 1 else "parts[*]"
                texts.append(str(text))
                where.append((prefix, key, field))
        vectors = embed.matrix(texts)
        with self._cursor() as cur:
            with cur.copy("COPY store (prefix, key, value) FROM STDIN") as copy:
                for (namespace, key), op in latest.items():
                    copy.write_row((".".join(namespace), key, json.dumps(op.value)))
            sql = "COPY store_vectors (prefix, key, field_name, embedding) FROM STDIN BINARY"
            with cur.copy(sql) as copy:
                rows = ((p, k, f, vectors[n]) for n, (p, k, f) in enumerate(where))
                for chunk in _vector_rows_binary(rows):
                    copy.write(chunk)
        self.bulk_vectors += len(where)


def drop_index(store: PostgresStore) -> None:
    """Drop the HNSW index (before a bulk load) and empty the tables."""
    with store._cursor() as cur:
        cur.execute(f"DROP INDEX IF EXISTS {INDEX_NAME}")
        cur.execute("TRUNCATE store CASCADE")


def build_index(store: PostgresStore, maintenance_mem: str | None = None) -> dict[str, Any]:
    """Build the HNSW index PostgresStore would have (cosine, m=16, ef_construction=64: its
    defaults) over what was loaded; return its size, the rows it covers, the session's
    ``maintenance_work_mem`` and ``max_parallel_maintenance_workers`` and the build's notices
    (pgvector says when the graph no longer fits in memory). ``maintenance_mem`` overrides
    the server's ``maintenance_work_mem`` (``bench/pgserver.py`` sets it) for this build."""
    notices: list[str] = []

    def notice(diag: Any) -> None:
        notices.append(str(diag.message_primary))

    with store._cursor() as cur:
        conn = cur.connection
        conn.add_notice_handler(notice)
        try:
            if maintenance_mem is not None:
                cur.execute(f"SET maintenance_work_mem = '{maintenance_mem}'")
            settings: dict[str, str] = {}
            for name in ("maintenance_work_mem", "max_parallel_maintenance_workers"):
                cur.execute(f"SHOW {name}")
                shown = cur.fetchone()
                settings[name] = str(next(iter(shown.values()))) if shown else ""
            cur.execute(
                f"CREATE INDEX IF NOT EXISTS {INDEX_NAME} ON store_vectors "
                "USING hnsw (embedding vector_cosine_ops)"
            )
        finally:
            conn.remove_notice_handler(notice)
        cur.execute("ANALYZE store")
        cur.execute("ANALYZE store_vectors")
        cur.execute(f"SELECT pg_relation_size('{INDEX_NAME}')")
        row = cur.fetchone()
        size = int(next(iter(row.values()))) if row else 0
        cur.execute("SELECT count(*) AS n FROM store_vectors")
        row = cur.fetchone()
        count = int(row["n"]) if row else 0
    return {"index_bytes": size, "vectors": count, "notices": notices, **settings}
