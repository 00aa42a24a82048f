"""Sans-I/O flows that read stored items in pages (a whole namespace, or the turns a filter on
their numbers keeps) and a user's thread marks: what catching up, sealing index blocks and
listing a thread's tail read the store with."""

from __future__ import annotations

from typing import Any

from langgraph.store.base import Item, Op, SearchOp

from langmem_ext.retrieval.flows import Io
from langmem_ext.retrieval.index import BAD_FILTER, IndexSetup
from langmem_ext.retrieval.layout import LOAD_PAGE, PAGE, USER_MARK, Mark, kept_by, mark_of


def pages_io(
    setup: IndexSetup,
    namespace: tuple[str, ...],
    where: dict[str, Any] | None,
    *,
    refresh: bool = True,
) -> Io[list[Item]]:
    """Every stored item under ``namespace`` that ``where`` keeps, in large pages (stores
    page by OFFSET). A store that cannot apply the filter to a damaged value
    (``InMemoryStore`` compares ``$gte`` as floats: a damaged ``order`` raises) is scanned
    without it, and the filter applied here (a turn whose number cannot be read is kept:
    indexed, never lost)."""
    ttl = setup.refresh_ttl if refresh else False
    if where is None:
        return (yield from scan_io(setup, namespace, None, ttl))
    try:
        return (yield from scan_io(setup, namespace, where, ttl))
    except Exception:  # (a store failing for good fails the scan below too)
        setup.faults.note(BAD_FILTER)
        items = yield from scan_io(setup, namespace, None, ttl)
        return [it for it in items if kept_by(where, it.value)]


def scan_io(
    setup: IndexSetup, namespace: tuple[str, ...], where: dict[str, Any] | None, ttl: bool
) -> Io[list[Item]]:
    items: list[Item] = []
    while True:
        (page,) = yield [SearchOp(namespace, where, LOAD_PAGE, len(items), None, ttl)]
        assert isinstance(page, list)
        items += [it for it in page if isinstance(it, Item)]
        if len(page) < LOAD_PAGE:
            return items


def read_marks(setup: IndexSetup, marks_ns: tuple[str, ...]) -> Io[dict[str, Mark]]:
    """Every thread mark of the user (one page per 500 threads)."""
    found: dict[str, Mark] = {}
    offset = 0
    while True:
        (page,) = yield [SearchOp(marks_ns, None, PAGE, offset, None, setup.refresh_ttl)]
        assert isinstance(page, list)
        for item in page:
            if isinstance(item, Item) and item.key != USER_MARK:
                mark = mark_of(item)
                assert mark is not None
                found[item.key] = mark
        if len(page) < PAGE:
            return found
        offset += PAGE


def pages_together(
    setup: IndexSetup, pending: list[tuple[tuple[str, ...], dict[str, Any] | None, int]]
) -> Io[list[Item]]:
    """The pages of several scans, one batch per round."""
    loaded: list[Item] = []
    while pending:
        ops: list[Op] = [
            SearchOp(namespace, where, LOAD_PAGE, offset, None, setup.refresh_ttl)
            for namespace, where, offset in pending
        ]
        pages = yield ops
        more = []
        for (namespace, where, offset), page in zip(pending, pages, strict=True):
            assert isinstance(page, list)
            loaded += [it for it in page if isinstance(it, Item)]
            if len(page) == LOAD_PAGE:
                more.append((namespace, where, offset + LOAD_PAGE))
        pending = more
    return loaded
