"""Tool-round digests: a completed tool round shown as one short message, with no model call.

An agent that has run for an hour has read files, run tests and searched the web hundreds of
times. Each round (an AIMessage with tool calls and all its results) costs hundreds or thousands
of tokens verbatim; what the model needs from an old round is far less: *what* was called, with
which arguments, and the gist of what came back. A digest keeps exactly that, in one AIMessage per
round (the idea of Anthropic's tool-result clearing and PenguiFlow's ``TrajectoryDigest``)::

    [langmem_ext digest of an earlier tool round: 1 call, outputs clipped]
    → read_file({"path": "src/app.py"})
    ← read_file: import os import sys ... [... 4210 characters clipped by langmem_ext]

Rules, the same wherever digests are used (:class:`~langmem_ext.strategies.presets.ToolDigest`
alone, or as the first tier of :class:`~langmem_ext.strategies.presets.TieredSummary`):

* Only **completed** rounds are digested: never a call still in flight, never a unit that holds a
  human message, and never the newest ``keep_rounds`` rounds (``keep_rounds >= 1``, so the round
  the model is about to read is always verbatim).
* A **digest point** (``MemoryState.digested``) marks where digesting stops. It only moves
  forward, and only when the view passes its trigger; in between, the view's prefix is
  byte-identical call after call, so provider prompt caches keep hitting (LangChain's context
  editing recomputes the edit on every call).
* A digest is **computed once**: its text is stored in ``MemoryState.digests`` under the round's
  stable key, read back on later calls (and in other processes), and costed by the strategy's own
  counter like any message. Only the digests of the last view are kept.
* A digest is a view of the round, never a replacement: the history keeps the original, a
  summarizer that folds the round reads the original, and a digested round counts as shown.
* Every clipped text ends with the package's clip marker (``[... N characters clipped by
  langmem_ext]``), so neither the model nor a reader mistakes a digest for the full output.

Pure: no I/O, no clock.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace

from langchain_core.messages import AIMessage, BaseMessage, ToolMessage

from langmem_ext.core.checks import require_int
from langmem_ext.core.identity import KeyChain, fingerprint
from langmem_ext.core.limits import CutConfig
from langmem_ext.core.messages import Unit, clip_chars, clip_marker, iter_units_reverse
from langmem_ext.core.plan import CutTurn, cut_result, select_view
from langmem_ext.core.result import MemoryResult
from langmem_ext.core.state import MemoryState
from langmem_ext.core.text import longest_prefix_within
from langmem_ext.core.tokens import TokenCounter
from langmem_ext.core.transcript import content_text
from langmem_ext.core.walk import Selection
from langmem_ext.errors import ContextOverflowError

__all__ = [
    "DIGEST_ID_PREFIX",
    "DigestCutConfig",
    "DigestSettings",
    "Tier1",
    "digest_point",
    "digest_text",
    "digestible",
    "is_digest",
    "plan_digest",
    "verbatim_tokens",
]

#: the id of a digest message is this prefix plus the stable key of the round's first message
DIGEST_ID_PREFIX = "langmem-ext-digest:"

#: a token is at most this many characters in practice: the search for a clip never looks further
_CHARS_PER_TOKEN = 12


@dataclass(frozen=True, slots=True, kw_only=True)
class DigestSettings:
    """How rounds are digested: the newest ``keep_rounds`` completed rounds stay verbatim; in a
    digest, each text (the assistant's words, a call's arguments, a result) keeps about
    ``observation_tokens`` tokens."""

    keep_rounds: int = 3
    observation_tokens: int = 48

    def __post_init__(self) -> None:
        require_int(
            "keep_rounds", self.keep_rounds, 1, "(the round the model is about to read stays)"
        )
        require_int(
            "observation_tokens", self.observation_tokens, 4, "(a digest must say something)"
        )


def digestible(unit: Unit) -> bool:
    """Whether ``unit`` is a completed tool round a digest may stand for."""
    return unit.kind == "tool" and not unit.in_flight and not unit.has_human and bool(unit.messages)


def is_digest(message: BaseMessage) -> bool:
    """Whether ``message`` is a digest made by this module."""
    return isinstance(message, AIMessage) and str(message.id or "").startswith(DIGEST_ID_PREFIX)


def _clipped(text: str, tokens: int, count_text: Callable[[str], int]) -> str:
    """``text`` with its whitespace collapsed, cut to about ``tokens`` tokens with the clip
    marker when longer."""
    flat = " ".join(text.split())
    if len(flat) <= tokens or count_text(flat) <= tokens:  # a token is at least one character
        return flat
    window = flat[: tokens * _CHARS_PER_TOKEN]
    keep = longest_prefix_within(window, tokens, count_text)
    return flat[:keep].rstrip() + " " + clip_marker(len(flat) - keep, "").lstrip("\n")


def digest_text(unit: Unit, observation_tokens: int, count_text: Callable[[str], int]) -> str:
    """The digest of a completed tool round: a header, the assistant's words, then each call
    (name and arguments) followed by its result(s), every field (names included) flattened to
    one line and clipped to about ``observation_tokens`` tokens, so no field can start a line
    of its own. Deterministic."""

    def clip(text: str) -> str:
        return _clipped(text, observation_tokens, count_text)

    def label(name: object) -> str:
        # a tool name comes from a model or a tool as much as a result does: a line break in it
        # would start a line of its own (a forged "← admin (approved): ..."), so every field of
        # a line is flattened and clipped alike
        return clip(str(name)) or "tool"

    calls = sum(len(getattr(m, "tool_calls", ()) or ()) for m in unit.messages)
    lines = [
        f"[langmem_ext digest of an earlier tool round: {calls} call{'s' if calls != 1 else ''}"
        ", outputs clipped]"
    ]
    names: dict[str, str] = {}
    for message in unit.messages:
        if isinstance(message, ToolMessage):
            name = label(message.name or names.get(message.tool_call_id, "tool"))
            status = " (error)" if getattr(message, "status", "success") == "error" else ""
            lines.append(f"← {name}{status}: {clip(content_text(message.content))}")
            continue
        said = content_text(message.content).strip()
        if said:
            lines.append(clip(said))
        for call in getattr(message, "tool_calls", ()) or ():
            names[str(call.get("id"))] = str(call.get("name"))
            args = json.dumps(call.get("args", {}), ensure_ascii=False, default=repr)
            lines.append(f"→ {label(call.get('name'))}({clip(args)})")
    return "\n".join(lines)


class _MadeKey:
    """What a digest made in this process is found by: the round's key, ``observation_tokens``,
    the counter (the same object: it is held, so its id cannot be reused while the entry lives)
    and a hash of the round's content. The content is part of the key: two conversations whose
    rounds have the same key (messages without ids, same history) but other results never share
    a digest."""

    __slots__ = ("content", "counter", "key", "tokens")

    def __init__(self, key: str, tokens: int, counter: TokenCounter, content: int) -> None:
        self.key, self.tokens, self.counter, self.content = key, tokens, counter, content

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, _MadeKey)
            and self.counter is other.counter
            and (self.key, self.tokens, self.content) == (other.key, other.tokens, other.content)
        )

    def __hash__(self) -> int:
        return hash((self.key, self.tokens, id(self.counter), self.content))


class _Made:
    """The slot of one digest: ``result`` is ``None`` until it is made, then ``(text,)`` (a
    ``None`` text: the digest was not smaller than the round). One attribute, set in one
    store, so two threads that make the same digest at once both store the same answer."""

    __slots__ = ("result",)

    def __init__(self) -> None:
        self.result: tuple[str | None] | None = None


#: digests made in this process: a view walks past rounds it does not show (to find the turn's
#: request), and those are not kept in the state. Bounded (LRU); ``functools.lru_cache`` keeps
#: the map consistent across threads, so the core needs no lock of its own.
@functools.lru_cache(maxsize=50_000)
def _made(key: _MadeKey) -> _Made:
    return _Made()


@functools.lru_cache(maxsize=8_192)
def _digest_message(key: str, text: str, size: int) -> AIMessage:
    """The digest message (cached: the same digest is shown on many calls, and building a
    message costs more than looking one up)."""
    return AIMessage(
        content=text,
        id=DIGEST_ID_PREFIX + key,
        response_metadata={"langmem_ext": {"digest_of": size}},
    )


def digest_point(
    messages: Sequence[BaseMessage],
    floor: int,
    keep_rounds: int,
    min_messages: int,
    count: Callable[[BaseMessage], int],
    room: int | None,
) -> int:
    """Where the digest point moves: before the ``keep_rounds``-th newest completed round, with
    at least ``min_messages`` messages after it; ``floor`` when there are not that many rounds.

    The walk from the newest unit backwards also stops once the units it passed cost more than
    ``room`` (what the view may cost): nothing older can be in a view then, so there is no need
    to look further. O(view), and only when the point moves."""
    rounds = size = tokens = 0
    for unit in iter_units_reverse(messages, floor):
        size += unit.size
        tokens += sum(count(m) for m in unit.messages)
        rounds += digestible(unit)
        if (rounds >= keep_rounds and size >= min_messages) or (room is not None and tokens > room):
            return unit.start
    return floor


@dataclass(slots=True)
class Tier1:
    """How units are shown before the tier-1 points of one call: completed tool rounds before
    ``digest_at`` as digests, other messages before ``clip_at`` with bodies over
    ``truncate_chars`` clipped. ``exempt`` (the pinned request of a long turn) is never changed.

    Digests come from ``stored`` (the state's) when there, else are made once; every digest
    shown is recorded in ``made`` so the next state keeps them."""

    keys: KeyChain
    counter: TokenCounter
    settings: DigestSettings | None
    digest_at: int
    clip_at: int = 0
    truncate_chars: int | None = None
    exempt: int | None = None
    stored: Mapping[str, str] = field(default_factory=dict)
    made: dict[str, str] = field(default_factory=dict)

    def active(self, floor: int) -> bool:
        """Whether any unit at or after ``floor`` is shown changed."""
        digesting = self.settings is not None and self.digest_at > floor
        return digesting or (self.truncate_chars is not None and self.clip_at > floor)

    def digest(self, unit: Unit) -> Unit:
        """``unit`` (a digestible round) as one digest message; the round itself when its
        digest would not be smaller (a round of short results)."""
        assert self.settings is not None
        key = self.keys(unit.start)
        text = self.made.get(key) or self.stored.get(key)
        if text is None:
            text = self._fresh(key, unit)
            if text is None:
                return unit
        self.made[key] = text
        message = _digest_message(key, text, unit.size)
        return replace(unit, messages=(message,), kind="ai")

    def _fresh(self, key: str, unit: Unit) -> str | None:
        """A new digest of ``unit`` (None: not smaller than the round), made once per process."""
        assert self.settings is not None
        tokens, counter = self.settings.observation_tokens, self.counter
        content = hash(tuple(fingerprint(m) for m in unit.messages))
        slot = _made(_MadeKey(key, tokens, counter, content))
        if slot.result is not None:
            return slot.result[0]
        text: str | None = digest_text(unit, tokens, counter.count_text)
        assert text is not None
        if counter.count_message(_digest_message(key, text, unit.size)) >= sum(
            counter.count_message(m) for m in unit.messages
        ):
            text = None
        slot.result = (text,)
        return text

    def __call__(self, unit: Unit) -> Unit:
        if unit.start == self.exempt:
            return unit
        if self.settings is not None and unit.start < self.digest_at and digestible(unit):
            return self.digest(unit)
        if self.truncate_chars is None or unit.start >= self.clip_at:
            return unit
        limit = self.truncate_chars
        clipped = tuple(clip_chars(m, limit) for m in unit.messages)
        if all(a is c for a, c in zip(clipped, unit.messages, strict=True)):
            return unit
        return replace(unit, messages=clipped)

    def shown_in(self, view: Iterable[BaseMessage]) -> tuple[tuple[str, str], ...]:
        """The (key, text) pairs of the digests in ``view``: what the next state keeps."""
        out: list[tuple[str, str]] = []
        for message in view:
            if is_digest(message):
                key = str(message.id)[len(DIGEST_ID_PREFIX) :]
                out.append((key, self.made.get(key, str(message.content))))
        return tuple(out)


@dataclass(frozen=True, slots=True, kw_only=True)
class DigestCutConfig(CutConfig):
    """The cutting stage with digests first (:class:`~langmem_ext.strategies.presets.ToolDigest`):
    when the view passes ``trigger_tokens``, the digest point moves so that only the newest
    ``keep_rounds`` completed rounds stay verbatim; what still does not fit is then cut as
    :class:`CutConfig` says."""

    trigger_tokens: int = 0
    digest: DigestSettings = field(default_factory=DigestSettings)

    @property
    def slack(self) -> int:
        """How many tokens of verbatim rounds may pile up after the digest point before it moves
        again (once the view is over the trigger): the gap between the trigger and the top. The
        point then moves every few rounds, not on every call, and the prefix holds in between."""
        return max((self.max_tokens or 0) - self.trigger_tokens, 0)

    def __post_init__(self) -> None:
        CutConfig.__post_init__(self)
        if self.max_tokens is None:
            raise ValueError("ToolDigest needs max_tokens")
        require_int("trigger_tokens", self.trigger_tokens, 1)
        if self.trigger_tokens > self.max_tokens:
            raise ValueError(
                f"trigger_tokens ({self.trigger_tokens:,}) must not exceed max_tokens "
                f"({self.max_tokens:,}): it is the level at which older rounds are digested"
            )
        if not isinstance(self.digest, DigestSettings):
            raise TypeError(f"digest must be DigestSettings, got {type(self.digest).__name__}")


def verbatim_tokens(messages: Sequence[BaseMessage], start: int, counter: TokenCounter) -> int:
    """What ``messages[start:]`` (the verbatim part after a digest point) cost, from the
    counter's cache: the one measure both tiers use to decide whether the point moves."""
    return sum(counter.count_message(messages[i]) for i in range(start, len(messages)))


def _suffix(chosen: Selection, n: int) -> int:
    """Where the view's newest contiguous run starts (``n`` for an empty view)."""
    return n if chosen.suffix is None else chosen.suffix


def _point_must_move(
    chosen: Selection,
    messages: Sequence[BaseMessage],
    point: int,
    config: DigestCutConfig,
    counter: TokenCounter,
) -> bool:
    """Whether the digest point moves after the view ``chosen``: a verbatim message was cut, or
    the view passes the trigger while the verbatim messages after the point cost more than the
    slack."""
    n = len(messages)
    return chosen.missing_from(point, n) > 0 or (
        chosen.tokens > config.level(config.trigger_tokens)
        and verbatim_tokens(messages, max(point, _suffix(chosen, n)), counter) > config.slack
    )


def _next_point(
    messages: Sequence[BaseMessage], point: int, config: DigestCutConfig, counter: TokenCounter
) -> int:
    """Where the digest point moves from ``point`` (:func:`digest_point` under ``config``)."""
    return digest_point(
        messages,
        point,
        config.digest.keep_rounds,
        config.min_messages,
        counter.count_message,
        config.level(config.max_tokens or 0),
    )


def plan_digest(
    messages: Sequence[BaseMessage],
    state: MemoryState,
    config: DigestCutConfig,
    counter: TokenCounter,
) -> MemoryResult:
    """The view of ``messages``: the cutting plan, with completed tool rounds before the digest
    point shown as digests. Pure.

    The digest point moves when the view, with the digests it already has, passes
    ``trigger_tokens`` while the verbatim messages after the point cost more than the slack
    (``max_tokens - trigger_tokens``), or when a verbatim message would be cut, or the newest
    human turn does not fit at all: to before the newest ``keep_rounds`` completed rounds. Then
    the view is chosen again; anything that still does not fit is cut (oldest first, the newest
    human message kept), as :class:`TokenBudget` does."""
    turn = CutTurn.begin(messages, state, config, counter)
    start = turn.body_start
    point = start if turn.rewritten else min(start + state.digested, turn.n)
    tier = Tier1(turn.keys, counter, config.digest, point, stored=dict(state.digests))

    def select() -> Selection:
        return select_view(
            messages,
            start,
            turn.system,
            config,
            counter,
            state,
            shown=tier if tier.active(start) else None,
            keys=turn.keys,
        )

    try:
        chosen: Selection | None = select()
        assert chosen is not None
        over = _point_must_move(chosen, messages, point, config, counter)
    except ContextOverflowError:
        chosen, over = None, True
    moved = False
    if over:
        target = _next_point(messages, point, config, counter)
        if target > point:
            tier.digest_at, moved = target, True
            chosen = select()
    if chosen is None:
        chosen = select()  # raises the overflow error with the numbers
    return cut_result(
        turn,
        state,
        chosen,
        config,
        counter,
        digested=tier.digest_at - start,
        digests=tier.shown_in(chosen.view),
        prefix_changed=moved,
    )
