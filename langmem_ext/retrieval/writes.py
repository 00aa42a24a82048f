"""Writing the memory: which turns left the view since the last call (anchored to positions by
their keys), their store writes and those of a fold's new facts, and the flow that writes them
with their vectors, the thread's tail and marks, and the index blocks a write completes."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import Any, Literal, NamedTuple

from langchain_core.messages import BaseMessage, HumanMessage
from langgraph.store.base import GetOp, Item, PutOp

from langmem_ext.core.checks import is_int
from langmem_ext.core.identity import keys_between
from langmem_ext.core.keys import MemoryKey
from langmem_ext.core.messages import is_system
from langmem_ext.core.result import MemoryResult
from langmem_ext.core.shape import RETRIEVED_ID
from langmem_ext.core.state import MemoryState
from langmem_ext.core.transitions import indexed_through
from langmem_ext.retrieval import layout
from langmem_ext.retrieval.codec import distinct_texts, encode_block, with_vectors
from langmem_ext.retrieval.config import context_budget
from langmem_ext.retrieval.flows import Io
from langmem_ext.retrieval.index import STALE_MARK, IndexSetup
from langmem_ext.retrieval.layout import (
    BLOCKS,
    FACTS,
    LISTED,
    MARKS,
    TAIL,
    TURNS,
    USER_MARK,
    Tail,
    hoped,
    is_stale,
    mark_of,
    read_tail,
    seq_of,
    seq_order,
    tail_value,
)
from langmem_ext.retrieval.reads import pages_io
from langmem_ext.retrieval.text import (
    clip_turn_before,
    has_rounds,
    message_parts,
    render_turn,
    same_message,
    starts_piece,
    turn_groups,
    turn_pieces,
)


class Indexing(NamedTuple):
    """What indexing this call would do: the turn writes, the state with the index watermark
    moved past them, how many whole turns they ``complete``, the keys of the messages the view
    shows."""

    ops: list[PutOp]
    state: MemoryState
    complete: int
    shown: set[str]
    #: the oldest position the view shows (``len(messages)`` when none)
    kept_from: int


# -- indexing ---------------------------------------------------------------------------------


def turns_to_index(
    setup: IndexSetup,
    messages: Sequence[BaseMessage],
    result: MemoryResult,
    key: MemoryKey,
    now: float,
) -> Indexing:
    """The store writes for the turns that left the view since the last call (stamped
    ``now``), the state with the index watermark moved past them, and the keys of the
    messages the view shows. Pure: ``now`` comes from the driver's clock.

    Everything is anchored to positions: the keys are :func:`key_at` keys, and what the view
    shows is found by walking the view and the history back from their ends together, so a
    repeated text ("continue") in the view never stands for an older copy of itself.

    What left is everything before the view's newest stretch of the history, the request a
    long agent turn pins included (it is shown, so never retrieved while it is): the rounds
    between the request and that stretch leave the view one by one, and each is indexed as
    it leaves (see :func:`index_units`)."""
    state = result.state
    n = len(messages)
    body_start = 1 if n and is_system(messages[0]) else 0
    start, keys = resume_point(messages, state, body_start)
    first_kept, shown = shown_in_view(messages, result.messages, start, keys)
    units, texts, unfinished = index_units(
        messages, start, first_kept, 4 * context_budget(setup.config)
    )
    if not units:
        return Indexing([], state, 0, shown, first_kept)
    chars = setup.config.neighbor_chars
    before = [previous_turn(messages, start, body_start, chars), *texts[:-1]]
    first_seq = state.indexed_turns
    ops = [
        turn_write(
            setup,
            key,
            first_seq + g,
            text,
            prev,
            [keys[i - start] for i in unit],
            now,
            message_parts([messages[i] for i in unit]),
        )
        for g, (unit, text, prev) in enumerate(zip(units, texts, before, strict=True))
    ]
    # an unfinished last unit is indexed now and again (same key and number) once it is whole
    complete = len(units) - (1 if unfinished else 0)
    watermark = units[-1][0] if unfinished else first_kept
    moved = indexed_through(
        state, messages, watermark=watermark, body_start=body_start, turns=first_seq + complete
    )
    return Indexing(ops, moved, complete, shown, first_kept)


def index_units(
    messages: Sequence[BaseMessage], start: int, stop: int, whole_chars: int
) -> tuple[list[list[int]], list[str], bool]:
    """The positions ``start..stop-1`` as the units indexed (each one stored turn), their
    texts, and whether the last one is unfinished (it may still grow: the history goes on
    inside it at ``stop``).

    A turn that left whole is one unit, unless it has tool rounds and its text is over
    ``whole_chars`` (it could never come back in the context message). Such a turn, and a
    turn that leaves piece by piece (a long agent turn: its request pinned in the view, its
    rounds leaving one by one), is split into pieces (:func:`turn_pieces`): the head, then
    one unit per tool round, each written once as it leaves, never the whole turn again."""
    n = len(messages)
    units: list[list[int]] = []
    texts: list[str] = []
    for group in turn_groups(messages, start, stop):
        end = group[-1] + 1
        ended = end < stop or (stop < n and isinstance(messages[stop], HumanMessage))
        if isinstance(messages[group[0]], HumanMessage) and ended:
            text = render_turn([messages[i] for i in group])
            if len(text) <= whole_chars or not has_rounds(messages, group):
                units.append(group)
                texts.append(text)
                continue
        for piece in turn_pieces(messages, group):
            units.append(piece)
            texts.append(render_turn([messages[i] for i in piece]))
    unfinished = bool(units) and stop < n and not starts_piece(messages[stop])
    return units, texts, unfinished


def turn_write(
    setup: IndexSetup,
    key: MemoryKey,
    seq: int,
    text: str,
    prev: str,
    ids: list[str],
    now: float,
    parts: list[str],
) -> PutOp:
    """The write of one turn, under the key of its first message: the dense index embeds
    each message (``parts``), BM25 reads the whole ``text``."""
    value = {
        "text": text,
        "parts": parts,
        "prev": clip_turn_before(prev, setup.config.neighbor_chars) if prev else "",
        "ids": ids,
        "seq": seq,
        "order": seq_order(seq),
        "thread": key.session,
        "indexed_at": now,
    }
    # a local dense index embeds the parts itself (``write_io``): the store must not
    index: list[str] | Literal[False] = False if setup.local else ["parts[*]"]
    return PutOp(key.namespace(TURNS), ids[0], value, index=index)


def resume_point(
    messages: Sequence[BaseMessage], state: MemoryState, body_start: int
) -> tuple[int, list[str]]:
    """Where indexing resumes, and the position-safe keys of ``messages[start:]``: the
    state's watermark when the message before it is still the same one (same key at the
    same position), else the start of the body (first call, or the history was rewritten:
    re-indexing is idempotent)."""
    n = len(messages)
    start = state.indexed
    if body_start < start <= n and state.indexed_key is not None:
        keys = keys_between(messages, start - 1, n)
        if keys[0] == state.indexed_key:
            return start, keys[1:]
    return body_start, keys_between(messages, body_start, n)


def shown_in_view(
    messages: Sequence[BaseMessage], view: Sequence[BaseMessage], start: int, keys: list[str]
) -> tuple[int, set[str]]:
    """Where the view's newest stretch of the history starts, at or after ``start``
    (``len(messages)`` when the view shows nothing since ``start``), and the keys of the
    messages it shows. The stretch is the run of consecutive positions the view ends with:
    a message shown before a gap (the request a long agent turn pins) does not hold back
    the rounds in the gap, which left. O(view + messages since ``start``)."""
    n = len(messages)
    shown = {str(m.id) for m in view if m.id and m.id != RETRIEVED_ID}
    first = n
    j = n - 1
    run = True  # still in the newest stretch
    for v in reversed(view):
        if v.id == RETRIEVED_ID:
            continue
        q = j
        while q >= start and not same_message(messages[q], v):
            q -= 1
        if q < start:  # a summary, a placeholder, a digest, the system message, or older
            continue
        shown.add(keys[q - start])
        run = run and (first == n or q == first - 1)
        if run:
            first = q
        j = q - 1
    return first, shown


def previous_turn(
    messages: Sequence[BaseMessage], start: int, body_start: int, chars: int | None = None
) -> str:
    """The text of the turn before ``start`` (back to its HumanMessage), or of its last
    ``chars`` characters and more: rendered message by message from the end, so a long agent
    turn costs what the stored neighbour keeps, not the whole turn."""
    lines: list[str] = []
    size = 0
    j = start - 1
    while j >= body_start:
        line = render_turn([messages[j]])
        if line:
            lines.append(line)
            size += len(line) + 1
        if isinstance(messages[j], HumanMessage):
            break
        if chars is not None and size > chars:
            return "\n".join(reversed(lines))
        j -= 1
    return "\n".join(reversed(lines)) if j >= body_start else ""


def fact_writes(
    setup: IndexSetup,
    before: dict[str, tuple[str, str]],
    after: dict[str, tuple[str, str]],
    key: MemoryKey,
    now: float,
) -> list[PutOp]:
    """The writes of the facts a fold added to the summary's ``FACT_SECTIONS`` (one item
    per line, keyed by its text: a fact is indexed once however often it is restated)."""
    return [
        PutOp(
            key.namespace(FACTS),
            fact,
            {
                "text": line,
                "parts": [line],
                "section": section,
                "thread": key.session,
                "indexed_at": now,
            },
            index=False if setup.local else ["parts[*]"],
        )
        for fact, (section, line) in after.items()
        if fact not in before
    ]


def facts_io(setup: IndexSetup, ops: Sequence[PutOp]) -> Io[None]:
    if setup.local:  # embedded here, once, and stored with the fact (like turns)
        yield (yield from with_vectors(ops, setup.model))
        return
    for batch in distinct_texts(ops):
        yield list(batch)


def write_io(setup: IndexSetup, ops: Sequence[PutOp], key: MemoryKey) -> Io[list[PutOp]]:
    """Embed the turns' messages (a local dense index: each distinct text once, stored with
    its turn), write the turns, then the thread's mark, then the user's mark, each after the
    last (a reader that sees a mark sees what it announces). Marks are blind writes of a
    fresh token: no read-modify-write, so concurrent writers never undo each other. Returns
    the writes as made (with their vectors)."""
    ops = list(ops)
    if setup.local:
        ops = yield from with_vectors(ops, setup.model)
    marks = key.namespace(MARKS, scope="user")
    # the thread's tail and mark are read with the first turns written (none of them)
    tail_ns = key.namespace(BLOCKS) if setup.config.scope == "thread" else None
    before: Tail | None = None
    numbers = [int((op.value or {}).get("seq", 0)) for op in ops]
    # the blocks a stale mark counts end here (``is_stale``); -1: the mark is not stale
    stale_from = -1
    batches = [list(b) for b in (distinct_texts(ops) if not setup.local else [ops])]
    for n, batch in enumerate(batches):
        if n == 0 and tail_ns is not None:
            got = yield [
                GetOp(tail_ns, TAIL, False),
                GetOp(marks, key.labels()[2], False),
                *batch,
            ]
            last = mark_of(got[1])
            before = read_tail(got[0], last)
            # this write goes on from turns a restored (or lagging) mark does not announce:
            # its tail lists none of them (listed again, from the turns) and the blocks it
            # does not count may be gone or older (sealed again, from the turns)
            if last is not None and is_stale(last, min(numbers)):
                before, stale_from = None, hoped(last[1])
                setup.faults.note(STALE_MARK)
        else:
            yield batch
    token = uuid.uuid4().hex
    following = max(numbers) + 1
    # a write that reaches a multiple of layout.BLOCK closes the block before it: every turn
    # numbered below is final (only the last turn of a write can be completed later)
    boundary = -(-min(numbers) // layout.BLOCK) * layout.BLOCK or layout.BLOCK
    stop = following - following % layout.BLOCK
    start = boundary - layout.BLOCK if boundary < following else stop
    if stale_from >= 0:
        start = min(start, stale_from)
    if start < stop:
        listed = before.pairs if before is not None else []
        yield from seal_io(setup, key, start, stop, listed)
    thread_mark: dict[str, Any] = {"token": token, "next": following, "thread": key.session}
    if len(ops) <= LISTED:  # a reader fetches these by key instead of scanning the thread
        thread_mark |= {"first": min(numbers), "keys": [op.key for op in ops]}
    mark_ops = [PutOp(marks, key.labels()[2], thread_mark, index=False)]
    if tail_ns is not None:  # (in either order: a reader checks the tail against the mark)
        pairs = list(zip(numbers, [op.key for op in ops], strict=True))
        if before is None:  # none, or not the last write's: listed again, from the turns
            pairs += yield from listed_io(setup, key, hoped(following))
            before = Tail(max((n + 1 for n, _ in pairs), default=0), [])
        tail = tail_value(before, pairs, following, token)
        mark_ops.insert(0, PutOp(tail_ns, TAIL, tail, index=False))
    yield mark_ops
    yield [PutOp(marks, USER_MARK, {"token": token}, index=False)]
    return ops


def listed_io(setup: IndexSetup, key: MemoryKey, start: int) -> Io[list[tuple[int, str]]]:
    """(turn number, key) of every stored turn of the thread numbered ``start`` or more
    (every numbering), scanned for: what a thread's tail lists when the last write left
    none to go on from (a scan once, then each write reads the tail and rewrites it)."""
    where = {"order": {"$gte": seq_order(start)}}
    stored = yield from pages_io(setup, key.namespace(TURNS), where, refresh=False)
    return [(it.value["seq"], it.key) for it in stored if is_int(it.value.get("seq"), 0)]


def seal_io(
    setup: IndexSetup, key: MemoryKey, start: int, stop: int, listed: Sequence[tuple[int, str]] = ()
) -> Io[None]:
    """Write the index blocks of the thread's turns numbered ``start`` to ``stop - 1``
    (whole blocks): every stored turn with those numbers (after a reset of the numbering,
    the turns of both numberings), read back in one scan, a few large pages, and the
    turns the tail ``listed`` (number, key) in that range that the scan did not bring (a
    damaged ``order`` the store's filter drops: a block must never leave a turn out). A
    block is rewritten whenever a write reaches the next one, so it is never older than
    the numbering that makes it count (see ``catchup.load_blocks``)."""
    namespace = key.namespace(TURNS)
    where = {"order": {"$gte": seq_order(start), "$lt": seq_order(stop)}}
    items = yield from pages_io(setup, namespace, where, refresh=False)
    found = {it.key for it in items}
    lost = [k for n, k in listed if start <= n < stop and k not in found]
    if lost:
        got = yield [GetOp(namespace, k, False) for k in dict.fromkeys(lost)]
        items += [it for it in got if isinstance(it, Item)]
    groups: dict[int, list[Item]] = {first: [] for first in range(start, stop, layout.BLOCK)}
    for item in items:
        seq = seq_of(item.value)
        first = seq // layout.BLOCK * layout.BLOCK if seq is not None else -1
        if first in groups:
            groups[first].append(item)
    writes = [
        PutOp(key.namespace(BLOCKS), seq_order(first), block, index=False)
        for first, group in groups.items()
        if (block := encode_block(group, first, setup.local, setup.model)) is not None
    ]
    if writes:
        yield writes
