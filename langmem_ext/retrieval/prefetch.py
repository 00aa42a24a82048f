"""Embedding ahead (``prefetch_embeddings``): after a call, the view's oldest messages are
embedded in one worker thread while the caller talks to its model, and the call whose view they
leave takes their vectors instead of embedding them. Nothing a call decides depends on whether
that work finished."""

from __future__ import annotations

import concurrent.futures
import logging
import threading
from collections import OrderedDict
from collections.abc import Sequence

from langchain_core.embeddings import Embeddings
from langchain_core.messages import BaseMessage

from langmem_ext.core.messages import is_system
from langmem_ext.retrieval.text import message_parts

logger = logging.getLogger("langmem_ext")

#: ``prefetch_embeddings``: the view's oldest messages embedded ahead after a call, at most
_PREFETCH_MESSAGES = 8
#: ``prefetch_embeddings``: texts whose vectors wait for their turn to leave the view, at most
_PREFETCHED = 1_024


def upcoming(messages: Sequence[BaseMessage], kept_from: int) -> list[str]:
    """The texts the next calls are likeliest to index: the parts (``message_parts``) of the view's
    oldest messages (not system messages), at most ``_PREFETCH_MESSAGES``, never the newest two
    (the request and what answers it stay in view longest)."""
    end = min(kept_from + _PREFETCH_MESSAGES, len(messages) - 2)
    return message_parts([m for m in messages[kept_from:end] if not is_system(m)])


class Prefetch:
    """Vectors embedded ahead (``prefetch_embeddings``) by one worker thread, kept until the
    call that indexes their turn takes them (at most ``_PREFETCHED`` texts, oldest dropped).
    A failure is only logged: the call embeds the text itself, as without prefetching."""

    def __init__(self, embeddings: Embeddings) -> None:
        self.embeddings = embeddings
        self._vectors: OrderedDict[str, list[float]] = OrderedDict()
        self._pending: set[str] = set()
        self._futures: set[concurrent.futures.Future[None]] = set()
        self._lock = threading.Lock()
        self._executor: concurrent.futures.ThreadPoolExecutor | None = None
        #: texts embedded ahead / taken by a call / embeddings that failed (for tests, benches)
        self.embedded = self.taken = self.failures = 0

    def start(self, texts: Sequence[str]) -> None:
        with self._lock:
            missing = tuple(
                t for t in dict.fromkeys(texts) if t not in self._vectors and t not in self._pending
            )
            if not missing:
                return
            if self._executor is None:
                self._executor = concurrent.futures.ThreadPoolExecutor(
                    max_workers=1, thread_name_prefix="langmem_ext-prefetch"
                )
            self._pending.update(missing)
            future = self._executor.submit(self._embed, missing)
            self._futures.add(future)
        future.add_done_callback(self._done)

    def _done(self, future: concurrent.futures.Future[None]) -> None:
        with self._lock:
            self._futures.discard(future)

    def _embed(self, texts: tuple[str, ...]) -> None:
        try:
            vectors = self.embeddings.embed_documents(list(texts))
            if len(vectors) != len(texts):
                raise ValueError(f"{len(vectors)} vectors for {len(texts)} texts")
        except Exception as exc:  # the call that needs them embeds them itself
            logger.debug("langmem_ext: embedding ahead failed: %r", exc)
            with self._lock:
                self._pending.difference_update(texts)
                self.failures += 1
            return
        with self._lock:
            self._pending.difference_update(texts)
            self._vectors.update(zip(texts, (list(v) for v in vectors), strict=True))
            self.embedded += len(texts)
            while len(self._vectors) > _PREFETCHED:
                self._vectors.popitem(last=False)

    def take(self, texts: Sequence[str]) -> dict[str, list[float]]:
        """The vectors ready for ``texts`` (each handed out once: its turn is being indexed)."""
        with self._lock:
            found = {t: v for t in texts if (v := self._vectors.pop(t, None)) is not None}
            self.taken += len(found)
            return found

    def running(self) -> list[concurrent.futures.Future[None]]:
        with self._lock:
            return list(self._futures)


class Prefetched(Embeddings):
    """``inner``, answering documents from the vectors embedded ahead where it can."""

    def __init__(self, inner: Embeddings, prefetch: Prefetch) -> None:
        self.inner = inner
        self.prefetch = prefetch

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        ready, missing = self._split(texts)
        return _joined(
            texts, ready, missing, self.inner.embed_documents(missing) if missing else []
        )

    async def aembed_documents(self, texts: list[str]) -> list[list[float]]:
        ready, missing = self._split(texts)
        fresh = await self.inner.aembed_documents(missing) if missing else []
        return _joined(texts, ready, missing, fresh)

    def _split(self, texts: list[str]) -> tuple[dict[str, list[float]], list[str]]:
        """The vectors ready for ``texts``, and the texts still to embed."""
        ready = self.prefetch.take(texts)
        return ready, [t for t in texts if t not in ready]

    def embed_query(self, text: str) -> list[float]:
        return self.inner.embed_query(text)

    async def aembed_query(self, text: str) -> list[float]:
        return await self.inner.aembed_query(text)


def _joined(
    texts: Sequence[str],
    ready: dict[str, list[float]],
    missing: Sequence[str],
    fresh: Sequence[list[float]],
) -> list[list[float]]:
    """The vectors of ``texts``, in order: ``ready`` ones and those just made for ``missing``."""
    made = dict(zip(missing, fresh, strict=True))
    return [ready[t] if t in ready else made[t] for t in texts]
