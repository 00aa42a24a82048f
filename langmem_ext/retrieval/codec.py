"""How vectors and index blocks are encoded in the store, and read back checked: a turn's
vectors (unit, float16, base64, with the embedding model's identity), an index block (BM25
postings and int8 vector codes of a range of turns), and the embedding of turn writes."""

from __future__ import annotations

import binascii
from collections.abc import Sequence
from typing import Any, NamedTuple, cast

import numpy as np
import pybase64
from langchain_core.embeddings import Embeddings
from langgraph.store.base import Item, PutOp

from langmem_ext.core.checks import is_int
from langmem_ext.retrieval import layout
from langmem_ext.retrieval.bm25 import Postings, encode_postings
from langmem_ext.retrieval.flows import Embed, Io
from langmem_ext.retrieval.layout import parts_of, seq_of, text_of


def with_vectors(ops: Sequence[PutOp], model: str | None = None) -> Io[list[PutOp]]:
    """``ops`` with the vectors of their messages stored in their values (each distinct text
    embedded once, in one step), marked with the embedding ``model`` that made them."""
    texts = tuple(dict.fromkeys(p for op in ops for p in parts_of(op)))
    vectors = dict(zip(texts, (yield Embed(texts)), strict=True))
    return [
        op._replace(
            value={
                **(op.value or {}),
                "vectors": encode_vectors([vectors[p] for p in parts_of(op)], model),
            }
        )
        for op in ops
    ]


def _embedded(op: PutOp) -> set[str]:
    return set(parts_of(op))


def distinct_texts(ops: Sequence[PutOp]) -> list[list[PutOp]]:
    """The writes split so that no batch embeds the same text twice: ``InMemoryStore.batch``
    fails when one batch embeds a text twice (langchain-ai/langgraph#8822)."""
    batches: list[list[PutOp]] = []
    texts: list[set[str]] = []
    for op in ops:
        mine = _embedded(op)
        for batch, seen in zip(batches, texts, strict=True):
            if seen.isdisjoint(mine):
                batch.append(op)
                seen.update(mine)
                break
        else:
            batches.append([op])
            texts.append(set(mine))
    return batches


def encode_vectors(vectors: Sequence[Sequence[float]], model: str | None = None) -> dict[str, Any]:
    """A turn's vectors as stored with it: normalised (cosine is all that is used, and a unit
    vector fits float16 whatever the model's scale), float16, base64 (2 bytes a dimension;
    cosine ranking does not notice the rounding), so a fresh process loads them instead of
    embedding again. ``model`` (the embedding model's identity, see ``model_id``) is stored
    beside them: vectors of another model are re-embedded, never compared with this one's."""
    rows = np.asarray(vectors, dtype=np.float64)
    norms = np.linalg.norm(rows, axis=1, keepdims=True)
    unit = np.divide(rows, norms, out=np.zeros_like(rows), where=norms > 0).astype("<f2")
    value: dict[str, Any] = {
        "dims": int(unit.shape[1]),
        "f16": pybase64.b64encode(unit.tobytes()).decode("ascii"),
    }
    if model is not None:
        value["model"] = model
    return value


def model_id(embeddings: Embeddings | None) -> str | None:
    """The identity of an embedding model as stored with its vectors: its class and the model
    name it reports (``model`` / ``model_name`` / ``model_id``), e.g.
    ``"langchain_openai.embeddings.base.OpenAIEmbeddings:text-embedding-3-small"``. Two models
    of the same dimensions are still two spaces: vectors are compared within one only."""
    if embeddings is None:
        return None
    embeddings = unwrapped(embeddings)
    kind = type(embeddings)
    name = next(
        (
            value
            for attr in ("model", "model_name", "model_id")
            if isinstance(value := getattr(embeddings, attr, None), str) and value
        ),
        "",
    )
    return f"{kind.__module__}.{kind.__qualname__}" + (f":{name}" if name else "")


#: where a wrapper of an embedding model keeps the model it wraps (LangChain's
#: ``CacheBackedEmbeddings.underlying_embeddings``, and the usual names of one's own wrappers)
_WRAPPED_ATTRS = ("underlying_embeddings", "inner", "_inner", "wrapped", "embeddings")


def unwrapped(embeddings: Embeddings) -> Embeddings:
    """The model under wrappers that only add caching, timing or retries: a wrapper gives the
    same vectors as the model it wraps, so it must not make stored vectors look foreign (every
    turn would be embedded again). At most 8 levels."""
    for _ in range(8):
        inner = next(
            (
                value
                for attr in _WRAPPED_ATTRS
                if (value := getattr(embeddings, attr, None)) is not None
                and value is not embeddings
                and callable(getattr(value, "embed_query", None))
            ),
            None,
        )
        if inner is None:
            break
        embeddings = inner
    return embeddings


def stored_vectors(
    stored: object, *, dims: int | None = None, model: str | None = None
) -> np.ndarray[Any, Any] | None:
    """The vectors stored with a turn (``item.value["vectors"]``: one row per message, float16
    in the store), as float32 rows; None when absent or unreadable: damaged (not base64, a
    length ``dims`` does not divide, ``dims`` not an integer, NaN or infinity) or foreign (not
    ``dims`` dimensions, or stored by another ``model`` than the one given). What the local
    dense index searches, for recomputing its scores. Takes the item's value or its
    ``"vectors"``."""
    found = stored_bytes(stored, dims=dims, model=model)
    if found is None:
        return None
    width, raw = found
    return np.frombuffer(raw, dtype="<f2").reshape(-1, width).astype(np.float32)


def stored_bytes(
    stored: object, *, dims: int | None = None, model: str | None = None
) -> tuple[int, bytes] | None:
    """The dimensions and the float16 bytes of the vectors stored with a turn (its value or its
    ``"vectors"``), checked (see ``stored_vectors``); None when absent, unreadable or
    foreign."""
    if isinstance(stored, dict) and "vectors" in stored:
        stored = stored["vectors"]
    if not isinstance(stored, dict):
        return None
    width, data = stored.get("dims"), stored.get("f16")
    if not isinstance(width, int) or not is_int(width, 1) or not isinstance(data, str):
        return None
    if dims is not None and width != dims:
        return None  # another model's (or a damaged count that still divides the data)
    if model is not None and "model" in stored and stored["model"] != model:
        return None
    raw = b64decode(data)
    if not raw or len(raw) % (2 * width):
        return None
    if not np.isfinite(np.frombuffer(raw, dtype="<f2")).all():
        return None
    return width, raw


def to_b64(array: np.ndarray[Any, Any]) -> str:
    return pybase64.b64encode(np.ascontiguousarray(array).tobytes()).decode("ascii")


def b64decode(text: str) -> bytes | None:
    """Strict base64, None for anything else: pybase64's SIMD decoder, 6x faster than the
    standard library's on the megabytes of index blocks a fresh process reads (41 vs 247 ms
    for 74 MB here). The length check stays as a second guard (a skipped character shortens
    the output)."""
    if len(text) % 4:
        return None
    try:
        raw = pybase64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        return None
    padding = 2 if text.endswith("==") else 1 if text.endswith("=") else 0
    return raw if len(raw) == len(text) // 4 * 3 - padding else None


def from_b64(value: object, dtype: str) -> np.ndarray[Any, Any] | None:
    if not isinstance(value, str) or (raw := b64decode(value)) is None:
        return None
    size = np.dtype(dtype).itemsize
    return np.frombuffer(raw, dtype=dtype) if len(raw) % size == 0 else None


def encode_block(
    items: Sequence[Item], first: int, dense: bool, model: str | None = None
) -> dict[str, Any] | None:
    """An index block: the turns numbered ``first`` to ``first + BLOCK - 1`` (``items``, every
    item stored with those numbers) as BM25 postings and (``dense``) their stored vectors, by
    key, marked with the embedding ``model``. None when a turn has no vectors of that model to
    copy (written before they were kept, damaged, or another model's)."""
    items = sorted(items, key=lambda it: (seq_of(it.value) or 0, it.key))
    postings = encode_postings(text_of(it.value) for it in items)
    value: dict[str, Any] = {
        "v": 1,
        "first": first,
        "size": layout.BLOCK,
        "keys": [it.key for it in items],
        "bm25": {
            "vocab": postings.vocab,
            "ptr": to_b64(postings.ptr.astype("<i4")),
            "ids": to_b64(postings.ids.astype("<i4")),
            "tfs": to_b64(postings.tfs.astype("<i4")),
        },
    }
    if dense:
        rows = [stored_vectors(it.value, model=model) for it in items]
        if any(r is None for r in rows):
            return None
        blocks = [cast(np.ndarray, r) for r in rows]
        dims = {b.shape[1] for b in blocks}
        if len(dims) > 1:
            return None
        # "rows", not "vectors": a block must never read as a turn's stored vectors
        value["rows"] = {
            "dims": dims.pop() if dims else 0,
            "counts": to_b64(np.asarray([len(b) for b in blocks], dtype="<i4")),
            "i8": to_b64(int8_codes(np.concatenate(blocks)) if blocks else np.zeros(0, "i1")),
        }
        if model is not None:
            value["rows"]["model"] = model
    return value


def int8_codes(rows: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    """Each row as int8 codes, scaled so that its largest value is 127: half the bytes of
    float16, and the scale is not kept (the dense index compares directions only). The codes
    are close (about 0.001 of a cosine), not exact: a search reads the rows it finds back from
    their turns before ranking them (see ``search.held_io``)."""
    rows = rows.astype(np.float32)
    peak = np.abs(rows).max(axis=1, keepdims=True)
    scale = np.divide(127.0, peak, out=np.zeros_like(peak), where=peak > 0)
    codes: np.ndarray[Any, Any] = np.rint(rows * scale).astype("i1")
    return codes


def block_rows(item: Item | None) -> tuple[int, int]:
    """How many vector rows an index block holds, and of how many dimensions, from the length
    of its text (nothing decoded); (0, 0) when it holds none that could be read."""
    rows = item.value.get("rows") if isinstance(item, Item) else None
    if not isinstance(rows, dict) or not is_int(rows.get("dims"), 1):
        return 0, 0
    data, dims = rows.get("i8"), int(rows["dims"])
    size = 1
    if not isinstance(data, str):
        data, size = rows.get("f16"), 2
    if not isinstance(data, str):
        return 0, 0
    return len(data) // 4 * 3 // (size * dims), dims


class Block(NamedTuple):
    """An index block as read back (see ``encode_block``)."""

    first: int
    keys: list[str]
    postings: Postings
    counts: np.ndarray[Any, Any] | None
    rows: np.ndarray[Any, Any] | None
    #: the rows are int8 codes (close, not exact: see ``int8_codes``)
    approximate: bool = False


def decode_block(
    item: Item, dense: bool, *, dims: int | None = None, model: str | None = None
) -> Block | None:
    """An index block read from the store; None when it is not one this version wrote whole
    (a foreign or damaged value is ignored: the turns it would cover are read one by one), or
    (``dense``) when its rows are not ``dims``-dimensional, were stored by another ``model``,
    or hold NaN or infinity (its turns are then read, and re-embedded, one by one)."""
    value = item.value
    keys, bm25 = value.get("keys"), value.get("bm25")
    if (
        value.get("v") != 1
        or value.get("size") != layout.BLOCK
        or not is_int(value.get("first"), 0)
    ):
        return None
    if not isinstance(keys, list) or not all(isinstance(k, str) for k in keys):
        return None
    if not isinstance(bm25, dict) or not isinstance(bm25.get("vocab"), list):
        return None
    vocab: list[str] = bm25["vocab"]
    try:  # every term a string (checked at C speed)
        "".join(vocab)
    except TypeError:
        return None
    ptr, ids, tfs = (from_b64(bm25.get(name), "<i4") for name in ("ptr", "ids", "tfs"))
    if ptr is None or ids is None or tfs is None or len(ptr) != len(keys) + 1:
        return None
    if len(ids) != len(tfs) or (len(ptr) and int(ptr[-1]) != len(ids)):
        return None
    if len(ids) and (int(ids.min()) < 0 or int(ids.max()) >= len(vocab)):
        return None
    postings = Postings(vocab, ptr.astype(np.int64), ids.astype(np.int32), tfs.astype(np.int32))
    counts = rows = None
    approximate = False
    if dense:
        vectors = value.get("rows")
        if not isinstance(vectors, dict) or not is_int(vectors.get("dims"), 0):
            return None
        counts = from_b64(vectors.get("counts"), "<i4")
        codes = "i8" in vectors  # else float16 rows, as the first blocks were written
        flat = from_b64(vectors.get("i8"), "i1") if codes else from_b64(vectors.get("f16"), "<f2")
        width = int(vectors["dims"])
        if counts is None or flat is None or len(counts) != len(keys) or (counts < 1).any():
            return None
        if width == 0 or len(flat) != int(counts.sum()) * width:
            return None
        if dims is not None and width != dims:
            return None
        if model is not None and "model" in vectors and vectors["model"] != model:
            return None
        if not codes and not np.isfinite(flat).all():
            return None
        rows = flat.reshape(-1, width)
        approximate = codes
    return Block(int(value["first"]), keys, postings, counts, rows, approximate)
