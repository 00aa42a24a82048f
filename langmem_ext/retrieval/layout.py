"""How Retrieval keeps its memory in a LangGraph ``BaseStore``: the namespaces and keys of turns,
facts, change marks and index blocks, the constants of that layout, and the readers of what is
stored (a turn's number and text, a mark, a thread's tail).

Turns live under ``("langmem_ext", "turns", tenant, user, thread)``, keyed by the position-safe
key of their first message; the facts remembered from summaries under ``("langmem_ext",
"facts", ...)``; the marks under ``("langmem_ext", "turn_marks", tenant, user)``; the index blocks
and a thread's tail under ``("langmem_ext", "turn_blocks", tenant, user, thread)``.

A long agent turn (one request, many tool rounds) is stored piece by piece as it leaves the
view: its head (the request) and each tool round an item of its own, keyed by its first message
and numbered like a turn (``writes.index_units``), so no item is written twice and each fits the
context message; so is a turn that left whole but could never fit it.

Workers. Several processes (or several ``Retrieval`` objects) may serve one thread or one user.
The BM25 index lives in each process, so every indexing write also leaves a *mark* in the store
(``("langmem_ext", "turn_marks", tenant, user)``): per thread, a fresh token and the next turn
number, and per user a token that changes on every write in any of the user's threads. Each
query reads one mark (one ``GetOp``, batched with the dense search); when it differs from what
the index last saw, the index catches up with only the turns it lacks (per changed thread, the
turns from the last number it saw), or reloads a thread whose numbering went back. Marks are
written after the turns they announce and never read-modified-written, so concurrent writers
cannot hide each other's turns; an index that saw a mark has seen everything written before it.

A mark lists the keys of the turns its write made (up to 64): a reader whose index reaches back
to that write's first turn fetches exactly those (O(turns written)) instead of scanning the
thread; otherwise it scans from the last number it saw.

Index blocks. A fresh process builds its in-process indexes from the store. Reading and
tokenizing every turn costs seconds at 50k turns, so each thread's turns are also kept as index
blocks (``("langmem_ext", "turn_blocks", tenant, user, thread)``): every 512 turns, one item
with their BM25 postings and stored vectors. A fresh process (``scope="thread"``) loads the
blocks and reads only the turns after them one by one, by the keys the thread's tail lists (an
item beside the blocks, rewritten by every write with the thread's mark and checked against it,
so no scan of the thread's values is needed). Values of block turns are read when a search
finds them (one batched ``GetOp``). A turn that is gone from the store (expired, deleted) then
leaves the indexes. Blocks and tail are a cache and the turns stay the source of truth:
- a block is rewritten, from every stored turn in its number range, each time a write reaches
  the turn after it;
- a block counts only when the thread's mark says that turn was written under the current
  numbering;
- the tail counts only when it is the one the last write (the thread's mark) left, when no
  numbering announced more turns than the current one, and when the turns it lists account for
  every number after the blocks; else the turns after the blocks are scanned for, and the next
  write lists them again from a scan;
- a mark that announces fewer turns than the caller's state says were indexed
  (``indexed_turns``: the mark, tail and blocks put back by a restored backup or read from a
  replica that lags) still says which blocks count, but the turns after them are scanned for,
  never taken from its tail; the next write then lists them in the tail again and seals the
  blocks that mark did not count, once;
- so a numbering reset (a new state on the same thread), a fork, a damaged block, a lost tail
  or stale caches never hide a turn. A fresh process with the blocks ranks exactly as one
  reading every turn (a property test). One limit: two processes writing the same thread at the
  same moment under different numberings can each rewrite the tail from the same one, so a
  fresh process may miss the other's turns after the blocks until the block that holds them is
  written.

Damaged and foreign values. Everything read from the store is checked, never trusted: a turn
whose number, text, parts or vectors are damaged (``seq`` ``'x'`` or NaN, NaN or infinite
vectors, ``dims`` that is not an integer or not the index's) is indexed from what is left (its
number from ``order``, its text from ``parts``) and its vectors embedded again; a block, tail or
mark that does not check out is ignored (its turns read one by one); a mark's numbers bound no
work (blocks are fetched while they exist). Vectors and blocks carry the embedding model's
identity (``"model"``) with their ``dims``: another model's are re-embedded, never compared.
What was worked around is counted (``Retrieval.store_faults``) and logged once per kind. A
store that reports itself busy (SQLite's "database is locked" while another process writes the
file) is asked again with a bounded backoff (:func:`batch_retrying`).

Costs: one embedding per message of an evicted turn (written once, stored with the turn, so a
fresh process loads it instead of embedding again), one query embedding per searched turn, a
vector search and a BM25 lookup (in process: about 2 ms at 200k vectors, and O(postings of the
query's terms)), one mark read per query, and per call that evicts something two small mark
writes and (``scope="thread"``) a read and a write of the thread's tail (the keys of at most
about 1,000 turns).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, NamedTuple

from langgraph.store.base import Item, PutOp

from langmem_ext.core.checks import is_int

TURNS = "turns"
#: the namespace kind of the facts remembered from summaries (see ``FACT_SECTIONS``)
FACTS = "facts"
#: summary sections whose lines are remembered as facts when a fold writes them
FACT_SECTIONS: tuple[str, ...] = ("facts", "profile")
#: the namespace kind of the change marks (see the notes above)
MARKS = "turn_marks"
#: the key of the user's mark among the thread marks: "*" is percent-encoded in every label, so
#: it can never be a thread's key
USER_MARK = "*"
PAGE = 500
#: the page size of a whole-index load (few pages: a store pages by OFFSET, so small pages
#: make loading quadratic)
LOAD_PAGE = 10_000
#: the namespace kind of the index blocks: the in-process indexes of a thread's turns, persisted
#: by turn-number range, so a fresh process loads a few large items instead of every turn
BLOCKS = "turn_blocks"
#: turns per index block (a fresh process reads at most this many turns one by one)
BLOCK = 512
#: index blocks asked for in the first batch of gets of a fresh load (then twice as many per
#: batch while all are there)
BLOCK_GETS = 16
#: the key, among a thread's index blocks, of its tail: the keys of the turns after the blocks
#: (a block's key is a turn number: digits only)
TAIL = "tail"


#: what a write's mark names besides: (the first turn number it wrote, the keys it wrote), when
#: it wrote few enough turns to list them (a reader then fetches exactly those)
Written = tuple[int, tuple[str, ...]]
#: what a thread mark says: (token of the last write, the next turn number, what it wrote)
Mark = tuple[str, int, Written | None]
#: a write lists its turns' keys in its mark up to this many
LISTED = 64
#: how the token of a mark read from the store that is not one we wrote starts (ours are hex)
FOREIGN = "foreign:"


def parts_of(op: PutOp) -> list[str]:
    """The texts a turn write embeds, one vector each: its messages (``parts``), or its text
    (older writes, or ``parts`` that are not a list of strings: a damaged value is re-derived
    from the text, never iterated character by character)."""
    value = op.value or {}
    parts = value.get("parts")
    if isinstance(parts, list) and parts and all(type(p) is str for p in parts):
        return list(parts)
    return [text_of(value)]


def text_of(value: Mapping[str, Any]) -> str:
    """A stored turn's text as BM25 reads it: ``text``, or (a damaged or foreign value) its
    ``parts`` joined, or nothing."""
    text = value.get("text")
    if isinstance(text, str):
        return text
    parts = value.get("parts")
    if isinstance(parts, list) and all(type(p) is str for p in parts):
        return "\n".join(parts)
    return ""


def seq_of(value: Mapping[str, Any]) -> int | None:
    """A stored turn's number: ``seq``, else (damaged: a string, NaN, a list ...) the one its
    ``order`` spells; None when neither is readable (the turn is indexed all the same, shown
    as turn 0)."""
    seq = value.get("seq")
    if is_int(seq, 0):
        return seq
    order = value.get("order")
    if isinstance(order, str) and len(order) == 12 and order.isascii() and order.isdigit():
        return int(order)
    return None


def token_of(item: Item | None) -> str | None:
    """A mark's token as read from the store; a foreign value reads as a token that matches
    nothing we wrote."""
    if item is None:
        return None
    token = item.value.get("token")
    return token if isinstance(token, str) else f"{FOREIGN}{item.value!r}"


def mark_of(item: Item | None) -> Mark | None:
    """A thread mark as read from the store; a foreign value reads as a mark that matches
    nothing and starts at turn 0 (so the thread is reloaded, never skipped)."""
    if item is None:
        return None
    token, following = item.value.get("token"), item.value.get("next")
    if not isinstance(token, str) or not isinstance(following, int) or following < 0:
        return (f"{FOREIGN}{item.value!r}", 0, None)
    first, keys = item.value.get("first"), item.value.get("keys")
    written: Written | None = None
    if isinstance(first, int) and isinstance(keys, list) and all(isinstance(k, str) for k in keys):
        written = (first, tuple(keys))
    return (token, following, written)


def is_stale(mark: Mark | None, known: int) -> bool:
    """Whether a thread's ``mark`` announces fewer turns than ``known``, the turns the caller's
    state says were indexed (``MemoryState.indexed_turns``): the mark, and the tail and blocks
    written with it, were put back as they were before those turns (a restored backup, a
    replica that lags) or another numbering wrote last (a fork). The turns are stored all the
    same: the tail is not trusted to list them, they are scanned for. A foreign mark is not
    stale (it already counts for nothing: see ``mark_of``)."""
    return mark is not None and not mark[0].startswith(FOREIGN) and mark[1] < known


def seq_order(seq: int) -> str:
    """A turn number as a string that sorts like the number. The catch-up filters on it with
    ``$gte``, and ``PostgresStore`` compares ``$gte`` as text (``value->>'seq' >= '9'``, so 10
    sorts before 9): zero-padded strings compare the same as text and as values everywhere."""
    return f"{seq:012d}"


def kept_by(where: Mapping[str, Any], value: Mapping[str, Any]) -> bool:
    """Whether a stored turn passes a scan's filter on its ``order`` (``$gte`` / ``$lt``), as
    applied here when the store could not; a turn whose number cannot be read passes."""
    seq = seq_of(value)
    if seq is None:
        return True
    order, bounds = seq_order(seq), where.get("order", {})
    low, high = bounds.get("$gte"), bounds.get("$lt")
    return (low is None or order >= low) and (high is None or order < high)


def hoped(following: int) -> int:
    """The first turn number that the index blocks of a thread whose next turn is ``following``
    leave out when every block that can count does (see ``catchup.load_blocks``)."""
    return len(range(0, max(following - BLOCK, 0), BLOCK)) * BLOCK


class Tail(NamedTuple):
    """A thread's tail as read back (see ``tail_value``)."""

    #: the highest next turn number any write of the thread announced (every numbering)
    high: int
    #: (turn number, key) of the turns after the blocks
    pairs: list[tuple[int, str]]


def read_tail(item: Item | None, mark: Mark | None) -> Tail | None:
    """A thread's tail, when it is the one the write that left ``mark`` (the thread's mark)
    wrote; None when it is absent, not one this version wrote, or another write's (a write
    since that left none: an older version's; a lost update)."""
    value = item.value if isinstance(item, Item) else None
    if not isinstance(value, dict) or value.get("v") != 1 or not is_int(value.get("high"), 0):
        return None
    if mark is None or value.get("token") != mark[0]:
        return None
    seqs, keys = value.get("seqs"), value.get("keys")
    if not isinstance(seqs, list) or not isinstance(keys, list) or len(seqs) != len(keys):
        return None
    if not all(is_int(n, 0) for n in seqs) or not all(isinstance(k, str) for k in keys):
        return None
    return Tail(int(value["high"]), list(zip(seqs, keys, strict=True)))


def tail_value(
    before: Tail, written: Iterable[tuple[int, str]], following: int, token: str
) -> dict[str, Any]:
    """A thread's tail after a write (``token``) of ``written`` (turn number, key) whose next
    turn is ``following``, from the tail ``before`` it: every pair listed before or now whose
    number the blocks do not cover (``hoped``), once, by number, and the highest next turn
    number announced (``high``: a reader whose mark announces less, after a numbering went
    back, scans instead: the other numbering's turns that its blocks covered are listed
    nowhere). A pair whose turn was rewritten with another number stays until the blocks cover
    it (a reader checks each turn's number as stored)."""
    keep = hoped(following)
    pairs = dict.fromkeys(p for p in [*before.pairs, *written] if p[0] >= keep)
    ordered = sorted(pairs)
    return {
        "v": 1,
        "token": token,
        "high": max(following, before.high),
        "seqs": [n for n, _ in ordered],
        "keys": [k for _, k in ordered],
    }
