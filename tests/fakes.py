"""The shared fake models of the test suite: one of each kind, named after what it stands in for.

* :class:`RecordingChatModel`: the *agent's* chat model (a LangChain chat model). It answers
  from an iterator of replies (see :func:`numbered_replies`) and records the messages of every
  request, so a test can assert what the model was sent: the view, never the full history.
* :class:`SummaryModel`: the *summarizer's* model, the plain callable ``(prompt messages) ->
  str`` a strategy's ``summarizer=`` accepts. It answers a fixed text or a numbered summary,
  can fail its first calls, and records the prompts it answered.
* :class:`TokenCountingChatModel`: a chat model used as a *token counter* (what
  ``ChatModelCounter`` and ``as_counter`` wrap): its provider-side count is a rule the test
  sets, and it records how often and from which threads it was asked.
* :class:`ScriptedSummarizer`: stands in for a strategy's whole :class:`langmem_ext.Summarizer`
  (``fold``/``afold``), below the prompt level: fails when its schedule says so and records the
  batches of messages it folded.
* :class:`Concepts`: the *embedding model* of the retrieval tests: deterministic, synonyms share a
  dimension (a paraphrase still matches), and it records what it embedded.
* :func:`words`: the *token count* of the strategy unit tests (for ``CallableCounter``): one
  token per word, at least one per message, so the tests can work the figures out by hand.
* :class:`HideBlocks`: a *store* wrapper that hides ``Retrieval``'s index blocks, the reference of
  a fresh process that reads every turn.

Why shared: the suite grew about seven of these, two of them with the same class name and
different behaviour; a test that needs something else subclasses one of these (see
``on_fold``) rather than writing an eighth. The benchmark's fakes (which must keep producing
the same figures) are in ``bench/fakes.py``.
"""

from __future__ import annotations

import itertools
import re
import threading
import zlib
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any

import numpy as np
from langchain_core.embeddings import Embeddings
from langchain_core.language_models import BaseChatModel
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langgraph.store.base import BaseStore, GetOp, Op, Result, SearchOp
from pydantic import Field

__all__ = [
    "DIMS",
    "Concepts",
    "HideBlocks",
    "RecordingChatModel",
    "ScriptedSummarizer",
    "SummaryModel",
    "TokenCountingChatModel",
    "numbered_replies",
    "transcript_of",
    "words",
]

_TRANSCRIPT = re.compile(r"<transcript>\n(.*?)\n</transcript>", re.S)


def numbered_replies(
    text: str, *, first: int = 0, separator: str = " ", ids: bool = True
) -> Iterator[AIMessage]:
    """``AIMessage(f"reply {i}{separator}{text}", id=f"r{i}")`` for ``i = first, first + 1, ...``
    (no ids with ``ids=False``): an endless, deterministic supply of answers whose number says
    which call produced them."""
    for i in itertools.count(first):
        yield AIMessage(f"reply {i}{separator}{text}", id=f"r{i}" if ids else None)


class RecordingChatModel(GenericFakeChatModel):
    """The agent's chat model: appends the messages of every request to ``requests`` and
    answers with the next of ``messages`` (an iterator of AIMessage or str, e.g.
    :func:`numbered_replies`), or, when ``respond`` is given, with ``respond(request)`` (for a
    model whose answer depends on what it was sent). ``bind_tools`` returns the model itself, so
    agents that bind tools (``create_agent``) can use it; the answers never call a tool.
    Streaming goes through the same ``_generate`` (GenericFakeChatModel splits its answer)."""

    messages: Iterator[AIMessage | str] = Field(default_factory=lambda: iter(()))
    respond: Callable[[list[BaseMessage]], AIMessage | str] | None = None
    requests: list[list[BaseMessage]] = Field(default_factory=list)

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: Any = None,
        **kwargs: Any,
    ) -> ChatResult:
        self.requests.append(list(messages))
        if self.respond is None:
            return super()._generate(messages, stop, run_manager, **kwargs)
        reply = self.respond(list(messages))
        message = AIMessage(reply) if isinstance(reply, str) else reply
        return ChatResult(generations=[ChatGeneration(message=message)])

    def bind_tools(self, tools: Any, **kwargs: Any) -> RecordingChatModel:
        return self


def _words(text: str) -> int:
    return len(text.split())


def words(message: BaseMessage) -> int:
    """One token per word (at least one per message): exact figures for the unit tests."""
    return max(1, len(str(message.content).split()))


class TokenCountingChatModel(BaseChatModel):
    """A chat model whose provider-side token count is ``per_request + sum(per_message(m))``
    (``get_num_tokens_from_messages``) and ``per_text(text)`` (``get_num_tokens``, default: one
    per word); it answers "ok". ``calls`` and ``threads`` record every count request, so a test
    can check caching and that counting happens off the event loop."""

    per_request: int = 0
    per_message: Callable[[BaseMessage], int] = Field(default=lambda m: _words(str(m.content)))
    per_text: Callable[[str], int] = Field(default=_words)
    calls: int = 0
    threads: list[str] = Field(default_factory=list)

    @property
    def _llm_type(self) -> str:
        return "token-counting-fake"

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: Any = None,
        **kwargs: Any,
    ) -> ChatResult:
        return ChatResult(generations=[ChatGeneration(message=AIMessage("ok"))])

    def get_num_tokens_from_messages(self, messages: Any, tools: Any = None) -> int:
        self.calls += 1
        self.threads.append(threading.current_thread().name)
        return self.per_request + sum(self.per_message(m) for m in messages)

    def get_num_tokens(self, text: str) -> int:
        return self.per_text(text)


def transcript_of(prompt: Sequence[BaseMessage] | str) -> str:
    """The ``<transcript>`` block of a summarizer prompt (the messages it asks to summarize)."""
    body = prompt if isinstance(prompt, str) else str(prompt[-1].content)
    found = _TRANSCRIPT.search(body)
    assert found is not None, f"no <transcript> block in the prompt: {body[:200]!r}"
    return found.group(1)


class SummaryModel:
    """The summarizer's model, a callable ``(prompt messages) -> str``.

    ``answer`` is the text of every answer, or ``answer(n, prompt)`` with ``n`` the answer's
    number (1 for the first successful call), or None for ``"summary <n>"``. The first
    ``fail`` calls raise ``error`` (default ``ValueError("summarizer down")``) and are not
    recorded. ``prompts`` holds the prompts it answered, in order; ``calls`` counts every call,
    failed or not.
    """

    def __init__(
        self,
        answer: str | Callable[[int, Sequence[BaseMessage]], str] | None = None,
        *,
        fail: int = 0,
        error: Exception | None = None,
    ) -> None:
        self.answer = answer
        self.fail = fail
        self.error = error
        self.calls = 0
        self.prompts: list[list[BaseMessage]] = []

    def __call__(self, prompt: Sequence[BaseMessage]) -> str:
        self.calls += 1
        if self.fail:
            self.fail -= 1
            raise self.error or ValueError("summarizer down")
        self.prompts.append(list(prompt))
        n = len(self.prompts)
        if self.answer is None:
            return f"summary {n}"
        return self.answer if isinstance(self.answer, str) else self.answer(n, prompt)

    def transcript(self, i: int) -> str:
        """The ``<transcript>`` block of the ``i``-th answered prompt."""
        return transcript_of(self.prompts[i])


class ScriptedSummarizer:
    """Stands in for a strategy's Summarizer (the ``fold``/``afold`` protocol), set with
    ``strategy.summarizer = ScriptedSummarizer(...)`` after construction.

    Each call takes the next entry of ``failures`` (cycled; True: raise
    ``RuntimeError("summarizer down")``); a successful call appends its batch to ``batches``,
    calls :meth:`on_fold` (the hook for a test that needs more, e.g. which messages were read)
    and answers ``"summary #<call> of <messages folded so far> messages"`` for the
    ``conversation`` section.
    """

    def __init__(self, failures: Sequence[bool] = (), *, max_summary_tokens: int = 60) -> None:
        self.schedule = itertools.cycle(failures or (False,))
        self.calls = 0
        self.batches: list[list[BaseMessage]] = []
        self.max_summary_tokens = max_summary_tokens
        self.fallback = None
        self.counter: Any = None

    @property
    def folded(self) -> int:
        """Messages folded by successful calls, over all calls."""
        return sum(len(batch) for batch in self.batches)

    def on_fold(self, messages: Sequence[BaseMessage]) -> None:
        """Called with the batch of every successful call; does nothing here."""

    def fold(self, previous: Mapping[str, str], messages: Sequence[BaseMessage]) -> dict[str, str]:
        self.calls += 1
        if next(self.schedule):
            raise RuntimeError("summarizer down")
        self.batches.append(list(messages))
        self.on_fold(messages)
        return {"conversation": f"summary #{self.calls} of {self.folded} messages"}

    async def afold(
        self, previous: Mapping[str, str], messages: Sequence[BaseMessage]
    ) -> dict[str, str]:
        return self.fold(previous, messages)


# -- retrieval: an embedding model and a store wrapper -----------------------------------------

#: synonyms share a dimension, so a paraphrase with no word in common still matches (BM25 misses it)
CONCEPTS = {
    "storage": ("locker", "cabinet"),
    "secret": ("code", "combination", "pin"),
    "sport": ("gym", "fitness"),
    "family": ("sister", "sibling"),
    "move": ("moved", "relocated"),
    "city": ("porto", "oporto"),
}
JITTER = 24
DIMS = len(CONCEPTS) + JITTER


class Concepts(Embeddings):
    """Deterministic embeddings that record what they embed: one dimension per concept (a count
    of its synonyms) plus a small pseudo-random part seeded by the text, so distinct texts never
    tie. ``documents``: the texts of each ``embed_documents`` call; ``queries``: each query."""

    def __init__(self, scale: float = 1.0) -> None:
        self.scale = scale
        self.documents: list[list[str]] = []
        self.queries: list[str] = []
        self._lock = threading.Lock()

    def vector(self, text: str) -> list[float]:
        words = re.findall(r"\w+", text.lower())
        v = np.zeros(DIMS)
        for i, synonyms in enumerate(CONCEPTS.values()):
            v[i] = sum(word in synonyms for word in words)
        v[len(CONCEPTS) :] = np.random.default_rng(zlib.crc32(text.encode())).normal(size=JITTER)
        v[len(CONCEPTS) :] *= 0.15
        return (self.scale * v / np.linalg.norm(v)).tolist()

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        with self._lock:
            self.documents.append(list(texts))
        return [self.vector(t) for t in texts]

    def embed_query(self, text: str) -> list[float]:
        with self._lock:
            self.queries.append(text)
        return self.vector(text)

    @property
    def embedded(self) -> list[str]:
        return [text for call in self.documents for text in call]

    def reset(self) -> None:
        self.documents.clear()
        self.queries.clear()


class HideBlocks(BaseStore):
    """The same store with its index blocks hidden: the reference of a fresh process that reads
    every turn (writes pass through, so nothing else differs)."""

    def __init__(self, inner: BaseStore) -> None:
        self.inner = inner

    def batch(self, ops: Iterable[Op]) -> list[Result]:
        ops = list(ops)
        results = self.inner.batch(ops)
        return [hidden(op, r) for op, r in zip(ops, results, strict=True)]

    async def abatch(self, ops: Iterable[Op]) -> list[Result]:
        return self.batch(ops)


def hidden(op: Op, result: Result) -> Result:
    """``result``, or nothing when ``op`` reads the index blocks (by key or by search)."""
    if isinstance(op, GetOp) and op.namespace[1:2] == ("turn_blocks",):
        return None
    if isinstance(op, SearchOp) and op.namespace_prefix[1:2] == ("turn_blocks",):
        return []
    return result
