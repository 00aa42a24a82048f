"""Retrieval's isolation fails closed for every key, however it was made: an explicit
``MemoryKey`` that leaves out the part the scope needs (the user for ``scope="user"``, the session
for ``scope="thread"``) is refused with ``MissingKeyError`` naming that part, exactly as a key
from a config without it is; full keys never read another user's turns."""

from __future__ import annotations

from typing import Any

import pytest
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage
from langgraph.store.memory import InMemoryStore
from retrieval_views import context

from langmem_ext import MemoryKey, Retrieval, TokenBudget
from langmem_ext.errors import MissingKeyError
from langmem_ext.retrieval import RetrievalConfig

FILLER = "we talked about the weather, the sea and the boats in the harbour"


def alice_history(prefix: str) -> list[BaseMessage]:
    out: list[BaseMessage] = [
        HumanMessage("My locker code at the gym is 4471.", id=f"{prefix}-h0"),
        AIMessage("Noted, 4471.", id=f"{prefix}-a0"),
    ]
    for i in range(1, 30):
        out += [
            HumanMessage(f"Topic {i}: {FILLER}", id=f"{prefix}-h{i}"),
            AIMessage(f"Noted ({i}). {FILLER}", id=f"{prefix}-a{i}"),
        ]
    return out


def retrieval(store: InMemoryStore, scope: str, key: MemoryKey | None = None, **kw: Any) -> Any:
    return Retrieval(TokenBudget(600), store=store, scope=scope, gate="always", key=key, **kw)


QUESTION = HumanMessage("what was my locker code at the gym?", id="q")


@pytest.mark.parametrize("given_as", ["default key", "call key"])
def test_explicit_keys_without_the_user_are_refused_at_user_scope(given_as: str) -> None:
    """alice and bob each pass an explicit key naming only their session: at ``scope="user"``
    both would share the user "default"; bob would be shown alice's locker code."""
    store = InMemoryStore()
    alice, bob = MemoryKey(session="alice-s1"), MemoryKey(session="bob-s1")
    for key, history in ((alice, alice_history("alice")), (bob, [QUESTION])):
        if given_as == "default key":
            strategy, call = retrieval(store, "user", key), {}
        else:
            strategy, call = retrieval(store, "user"), {"key": key}
        with pytest.raises(MissingKeyError) as refused:
            strategy.apply(history, **call)
        assert "user" in str(refused.value)
        assert "session" not in refused.value.missing  # type: ignore[attr-defined]
    assert store.search(("langmem_ext",), limit=10) == []  # nothing was written either


def test_an_explicit_default_value_counts_as_not_given() -> None:
    """``MemoryKey("acme", "default", "s1")`` names the shared default user: refused at
    ``scope="user"``, accepted with ``shared_default=True``."""
    store = InMemoryStore()
    key = MemoryKey("acme", "default", "s1")
    with pytest.raises(MissingKeyError, match="user"):
        retrieval(store, "user", key).apply(alice_history("a"))
    shared = retrieval(store, "user", key, config=RetrievalConfig(shared_default=True)).apply(
        alice_history("a")
    )
    assert shared.messages


def test_explicit_keys_without_the_session_are_refused_at_thread_scope() -> None:
    store = InMemoryStore()
    with pytest.raises(MissingKeyError, match="session"):
        retrieval(store, "thread", MemoryKey("acme", "alice")).apply(alice_history("a"))


def test_a_call_key_fills_only_the_parts_the_default_key_left_out() -> None:
    """The default key names the tenant and user, each call its session: a complete key."""
    store = InMemoryStore()
    strategy = retrieval(store, "user", MemoryKey("acme", "alice"))
    strategy.apply(alice_history("a1"), key=MemoryKey(session="s1"))
    again = strategy.apply([*alice_history("a2"), QUESTION], key=MemoryKey(session="s2"))
    assert "4471" in context(again)


def test_full_keys_never_read_another_users_memory() -> None:
    store = InMemoryStore()
    alice, bob = MemoryKey("acme", "alice", "s1"), MemoryKey("acme", "bob", "s1")
    strategy = retrieval(store, "user")
    strategy.apply(alice_history("alice"), key=alice)
    mine = strategy.apply([*alice_history("alice"), QUESTION], key=alice)
    assert "4471" in context(mine)
    for scope in ("user", "thread"):
        theirs = retrieval(store, scope).apply([QUESTION], key=bob)
        assert "4471" not in context(theirs)
        assert all("/alice/" not in uid for uid in theirs.report.retrieved)
