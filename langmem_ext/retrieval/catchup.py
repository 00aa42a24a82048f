"""Catching up: keeping a process's in-process index of a thread (or of a user's threads) current
with the store. A first use builds it (from the thread's index blocks and the turns after them,
or from every stored turn); later queries read the marks and fetch only the turns written since
(see :mod:`~langmem_ext.retrieval.layout`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from langgraph.store.base import GetOp, Item, Op, PutOp

from langmem_ext.retrieval import layout
from langmem_ext.retrieval.codec import Block, block_rows, decode_block
from langmem_ext.retrieval.flows import Embed, Io
from langmem_ext.retrieval.index import BAD_BLOCK, STALE_MARK, IndexSetup, Lexical
from langmem_ext.retrieval.layout import (
    BLOCK_GETS,
    BLOCKS,
    TAIL,
    Mark,
    is_stale,
    mark_of,
    parts_of,
    read_tail,
    seq_of,
    seq_order,
    token_of,
)
from langmem_ext.retrieval.reads import pages_io, pages_together, read_marks


def lexical_io(
    setup: IndexSetup,
    prefix: tuple[str, ...],
    marks_ns: tuple[str, ...],
    thread: str,
    mark: Item | None,
    dims: int | None = None,
    known: int = 0,
) -> Io[Lexical]:
    """The BM25 index of ``prefix``, current with the store as of ``mark`` (read just
    before): built from every stored turn on first use, else caught up with the turns of
    each thread whose mark changed since the index last saw it. ``dims``: the dimensions
    of the query's vector (stored vectors of others are re-embedded). ``known``: the turns
    the caller's state says were indexed in this thread (``is_stale``)."""
    lexical = setup.cache.get(prefix)
    if lexical is not None and lexical.expect is None:
        lexical.expect = dims
    token: str | None = None
    if setup.config.scope == "thread":
        thread_mark = mark_of(mark)
        if lexical is not None and lexical.marks.get(thread) == thread_mark:
            return lexical
        seen = {thread: thread_mark} if thread_mark is not None else {}
    else:
        token = token_of(mark)
        if lexical is not None and lexical.user_token == token:
            return lexical
        seen = yield from read_marks(setup, marks_ns)
    if lexical is None:  # first use in this process: everything (older items too)
        fresh = Lexical(setup.local, setup.keeps_prev, model=setup.model, faults=setup.faults)
        fresh.expect = dims
        covered = 0
        if setup.config.scope == "thread" and thread_mark is not None:
            stale = is_stale(thread_mark, known)
            if stale:
                setup.faults.note(STALE_MARK)
            covered = yield from load_blocks(setup, fresh, prefix, thread_mark, stale)
        if not covered:  # (else the blocks' load read the turns after them)
            yield from load(setup, fresh, [(prefix, None)])
        fresh.marks, fresh.user_token = seen, token
        setup.cache.install(prefix, fresh)
        return fresh
    scans, fetches = catch_up(setup, prefix, lexical, seen)
    yield from load(setup, lexical, scans, fetches)
    with setup.cache.lock:
        lexical.marks.update(seen)
        lexical.user_token = token
    return lexical


def load_blocks(
    setup: IndexSetup, lexical: Lexical, prefix: tuple[str, ...], mark: Mark, stale: bool = False
) -> Io[int]:
    """Load the thread's index blocks into ``lexical``, and the turns after them: the blocks
    that chain from turn 0 and count under the thread's numbering (the next turn number of
    its ``mark``: a block counts when the turn after it was written, which rewrote it).
    Returns the first turn number the blocks do not cover (0: none counts, and nothing was
    loaded). A ``stale`` mark (``is_stale``) still says which blocks count, but the turns
    after them are scanned for: the tail written with it lists none of those since."""
    blocks_ns = ("langmem_ext", BLOCKS, *prefix[2:])
    # every block that could count, by key: a get each (no scan, no sort of megabytes of
    # values by the store), in batches that double while every block asked for is there:
    # the mark's number is read from the store, and the gets stop at the first block that
    # is not, so the work is bounded by the blocks that exist, never by that number
    firsts = range(0, max(mark[1] - layout.BLOCK, 0), layout.BLOCK)
    if not firsts:
        return 0
    ttl = setup.refresh_ttl
    got: list[Any] = []
    tail: Any = None
    size = BLOCK_GETS
    while len(got) < len(firsts):
        asked = firsts[len(got) : len(got) + size]
        ops: list[Op] = [GetOp(blocks_ns, seq_order(first), ttl) for first in asked]
        if not got:
            ops.append(GetOp(blocks_ns, TAIL, ttl))
        answers = yield ops
        if not got:
            tail = answers.pop()
        got += answers
        if not all(isinstance(item, Item) for item in answers):
            break
        size *= 2
    if not isinstance(got[0], Item):  # no block (turns written before they were kept)
        return 0
    reserve_rows(lexical, got)
    hoped = len(firsts) * layout.BLOCK  # if every block counts
    after = yield from after_io(setup, prefix, None if stale else tail, hoped, mark)
    chain: list[Block] = []
    for first, item in zip(firsts, got, strict=False):
        block = (
            decode_block(item, setup.local, dims=lexical.dims, model=setup.model)
            if isinstance(item, Item)
            else None
        )
        if block is None or block.first != first:
            if isinstance(item, Item):
                setup.faults.note(BAD_BLOCK)
            break
        chain.append(block)
    del got
    if not chain:
        return 0
    lexical.add_blocks(prefix, chain)
    covered = len(chain) * layout.BLOCK
    if covered < hoped:  # a block missing or damaged: its turns are read one by one
        where = {"order": {"$gte": seq_order(covered), "$lt": seq_order(hoped)}}
        after = [*(yield from pages_io(setup, prefix, where)), *after]
    yield from add_io(setup, lexical, after)
    return covered


def reserve_rows(lexical: Lexical, got: Sequence[Any]) -> None:
    """Room in ``lexical``'s dense index for the rows of the index blocks ``got`` (read, not yet
    decoded), and for the turns after them: the matrix's memory is touched while the turns after
    the blocks are read and the blocks decode."""
    if lexical.vectors is None:
        return
    sizes = [block_rows(item) for item in got]
    if lexical.dims is not None:  # (blocks of another model are read turn by turn)
        sizes = [(rows, d) for rows, d in sizes if d == lexical.dims]
    total = sum(rows for rows, _ in sizes)
    if total:
        dims = next(d for rows, d in sizes if rows)
        # room for the turns read after the blocks, and for a while after
        room = total + total // 4 + 8 * layout.BLOCK
        lexical.vectors.reserve(room, dims, prefault=min(total + 2 * layout.BLOCK, room))


def after_io(
    setup: IndexSetup, prefix: tuple[str, ...], tail: Item | None, hoped: int, mark: Mark
) -> Io[list[Item]]:
    """The stored turns of the thread numbered ``hoped`` or more (those after its index
    blocks): fetched by the keys its tail lists (one batch of gets) when what they fetch
    accounts for every number from ``hoped`` to the one before the next the thread's
    ``mark`` announces; else (no tail, or not the one the mark's write left; a turn gone,
    or a numbering that went back) scanned for. A scan filters on every stored turn's value
    (SqliteStore: ``json_extract`` over megabytes, 0.2 s at 50k turns); the gets read only
    the tail's turns."""
    listed, following = read_tail(tail, mark), mark[1]
    if listed is not None and listed.high <= following:  # (else a reset: see tail_value)
        keys = list(dict.fromkeys(k for n, k in listed.pairs if n >= hoped))
        got = (yield [GetOp(prefix, k, setup.refresh_ttl) for k in keys]) if keys else []
        # what the scan's filter keeps, by the turn's number (its ``order``, damaged, may
        # not sort: the turn is still the tail's)
        items = [it for it in got if isinstance(it, Item) and (seq_of(it.value) or 0) >= hoped]
        numbers = {seq_of(it.value) for it in items}
        if all(n in numbers for n in range(hoped, following)):
            return items
    return (yield from pages_io(setup, prefix, {"order": {"$gte": seq_order(hoped)}}))


def catch_up(
    setup: IndexSetup, prefix: tuple[str, ...], lexical: Lexical, seen: dict[str, Mark]
) -> tuple[list[tuple[tuple[str, ...], dict[str, Any] | None]], list[tuple[tuple[str, ...], str]]]:
    """What ``lexical`` lacks given the marks just ``seen``, per thread whose mark changed:
    the keys the last write listed, when its turns reach back to what the index had seen
    (then they are all it lacks: turn numbers are the same for every writer of a thread);
    else (its namespace, a filter on the turn numbers it has not seen), a scan."""
    scans: list[tuple[tuple[str, ...], dict[str, Any] | None]] = []
    fetches: list[tuple[tuple[str, ...], str]] = []
    for label, now in seen.items():
        before = lexical.marks.get(label)
        if before == now:
            continue
        # the last turn seen may have been written unfinished and completed since (same
        # number); a numbering that went back (state reset) reloads the thread
        since = 0 if before is None or now[1] < before[1] else max(before[1] - 1, 0)
        namespace = prefix if setup.config.scope == "thread" else (*prefix, label)
        written = now[2]
        # the write starts at or before the first number the index never saw: the turns it
        # lists are all the index lacks (a completed unfinished turn is rewritten, listed)
        if before is not None and since and written is not None and written[0] <= before[1]:
            fetches += [(namespace, k) for k in written[1]]
            continue
        scans.append((namespace, {"order": {"$gte": seq_order(since)}} if since else None))
    return scans, fetches


def load(
    setup: IndexSetup,
    lexical: Lexical,
    loads: Sequence[tuple[tuple[str, ...], dict[str, Any] | None]],
    fetches: Sequence[tuple[tuple[str, ...], str]] = (),
) -> Io[None]:
    """Add the stored turns under each (namespace prefix, filter) to ``lexical``, every
    prefix's pages in one batch per round (large pages: stores page by OFFSET), and those
    of ``fetches`` (see ``add_io``)."""
    pending = [(namespace, where, 0) for namespace, where in loads]
    loaded: list[Item] = []
    if fetches:  # the turns a mark listed: one get each, in one batch
        got = yield [GetOp(ns, k, setup.refresh_ttl) for ns, k in fetches]
        loaded += [it for it in got if isinstance(it, Item)]
    try:
        loaded += yield from pages_together(setup, pending)
    except Exception:  # a filter the store could not apply (see pages_io)
        for namespace, where in loads:
            loaded += yield from pages_io(setup, namespace, where)
    yield from add_io(setup, lexical, loaded)


def add_io(setup: IndexSetup, lexical: Lexical, items: Sequence[Item]) -> Io[None]:
    """Add stored turns to ``lexical``. Turns stored without vectors (written before they
    were kept, or by a store-side index) are embedded once, together, for a local dense
    index."""
    unembedded = lexical.add_many(items) if items else []
    if unembedded:
        parts = [parts_of(PutOp(it.namespace, it.key, it.value)) for it in unembedded]
        texts = tuple(dict.fromkeys(p for group in parts for p in group))
        vectors = dict(zip(texts, (yield Embed(texts)), strict=True))
        for item, group in zip(unembedded, parts, strict=True):
            uid = "/".join((*item.namespace, item.key))
            lexical.add_vectors(uid, [vectors[p] for p in group])
