"""Every memory key fails closed, however it was made: a part the scope needs that was not given
(or was given as the shared ``"default"``) is refused with an error naming the part, unless the
caller opts into sharing; a part that cannot be encoded is refused naming the part."""

from __future__ import annotations

import pytest
from langchain_core.chat_history import InMemoryChatMessageHistory
from langchain_core.messages import AIMessage, HumanMessage
from langgraph.store.memory import InMemoryStore

from langmem_ext import Retrieval, RetrievalConfig, SlidingWindow, TokenBudget
from langmem_ext.core.keys import DEFAULT, MemoryKey
from langmem_ext.errors import MissingKeyError
from langmem_ext.integrations.history import ManagedChatMessageHistory

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

FILLER = "We talked about the weather, the trains and the week ahead in some detail. " * 4


# --- the rule ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("key", "scope", "missing"),
    [
        (MemoryKey(session="chat-1"), "user", ("user",)),
        (MemoryKey("acme", DEFAULT, "chat-1"), "user", ("user",)),  # written out, still shared
        (MemoryKey(tenant="acme"), "session", ("session",)),
        (MemoryKey(), "tenant", ("tenant",)),
        (MemoryKey("acme", "ann", "chat-1"), "user", ()),
        (MemoryKey(session="chat-1"), "session", ()),
    ],
)
def test_missing_for_counts_default_parts_as_missing_however_the_key_was_made(
    key: MemoryKey, scope: str, missing: tuple[str, ...]
) -> None:
    assert key.missing_for(scope) == missing


def test_require_names_the_default_part_of_an_explicit_key() -> None:
    with pytest.raises(MissingKeyError, match="user") as caught:
        MemoryKey(session="chat-1").require("user", owner="Thing", opt_out="shared_default")
    assert caught.value.missing == ("user",)
    assert "shared_default=True" in str(caught.value)


def test_from_config_keys_still_fail_closed_on_defaulted_parts() -> None:
    key = MemoryKey.from_config({"configurable": {"thread_id": "t1"}})
    assert key.missing_for("user") == ("user",)
    assert key.missing_for("session") == ()


# --- Retrieval(scope="user") with an explicit session-only key ---------------------------------


def _turns(secret: str) -> list[HumanMessage | AIMessage]:
    messages: list[HumanMessage | AIMessage] = [
        HumanMessage(f"My gym locker code is {secret}.", id="h0"),
        AIMessage("Noted.", id="a0"),
    ]
    for i in range(1, 25):
        messages += [HumanMessage(f"Topic {i}: {FILLER}", id=f"h{i}"), AIMessage("Ok.", id=f"a{i}")]
    return messages


def test_retrieval_user_scope_refuses_an_explicit_key_without_a_user() -> None:
    store = InMemoryStore()
    strategy = Retrieval(TokenBudget(900), store=store, scope="user", ranking="bm25")
    with pytest.raises(MissingKeyError, match="user"):
        strategy.apply(_turns("4471"), key=MemoryKey(session="alice-chat"))
    with pytest.raises(MissingKeyError, match="user"):
        strategy.apply(
            [HumanMessage("what is my gym locker code?")], key=MemoryKey(session="bob-chat")
        )
    assert not store.search(("langmem_ext",), limit=5)  # nothing was written under a shared user


def test_retrieval_user_scope_with_named_users_keeps_them_apart() -> None:
    store = InMemoryStore()
    strategy = Retrieval(TokenBudget(900), store=store, scope="user", ranking="bm25")
    strategy.apply(_turns("4471"), key=MemoryKey("acme", "alice", "alice-chat"))
    question = [HumanMessage("what is my gym locker code?")]
    seen = strategy.apply(question, key=MemoryKey("acme", "bob", "bob-chat")).messages
    assert "4471" not in str([m.content for m in seen])


def test_retrieval_user_scope_shares_a_default_user_only_when_asked() -> None:
    strategy = Retrieval(
        TokenBudget(900),
        store=InMemoryStore(),
        scope="user",
        ranking="bm25",
        config=RetrievalConfig(shared_default=True),
    )
    strategy.apply([HumanMessage("hello")], key=MemoryKey(session="s"))


# --- ManagedChatMessageHistory with explicit keys ----------------------------------------------


def test_history_refuses_an_explicit_key_without_a_session_over_a_store() -> None:
    store = InMemoryStore()
    with pytest.raises(MissingKeyError, match="session"):
        ManagedChatMessageHistory(
            InMemoryChatMessageHistory(),
            SlidingWindow(max_messages=4),
            store=store,
            key=MemoryKey(tenant="acme"),
        )
    with pytest.raises(MissingKeyError, match="session"):
        ManagedChatMessageHistory(
            InMemoryChatMessageHistory(),
            SlidingWindow(max_messages=4),
            store=store,
            key=MemoryKey(),
        )


def test_history_explicit_keys_are_accepted_when_named_shared_or_private() -> None:
    store, strategy = InMemoryStore(), SlidingWindow(max_messages=4)
    named = MemoryKey("acme", "alice", "chat-1")
    assert ManagedChatMessageHistory(
        InMemoryChatMessageHistory(), strategy, store=store, key=named
    ).key == (named)
    shared = ManagedChatMessageHistory(
        InMemoryChatMessageHistory(),
        strategy,
        store=store,
        key=MemoryKey(tenant="acme"),
        shared_default=True,
    )
    assert shared.key == MemoryKey(tenant="acme")
    # without a store the state is private to the object: nothing can be shared
    private = ManagedChatMessageHistory(
        InMemoryChatMessageHistory(), strategy, key=MemoryKey(tenant="acme")
    )
    assert private.key == MemoryKey(tenant="acme")


# --- parts that cannot be encoded --------------------------------------------------------------


@pytest.mark.parametrize("part", ["tenant", "user", "session"])
def test_memory_key_refuses_a_lone_surrogate_naming_the_part(part: str) -> None:
    with pytest.raises(ValueError, match=rf"MemoryKey\.{part}.*surrogate"):
        MemoryKey(**{part: "ann\ud800"})


def test_memory_key_from_config_refuses_a_lone_surrogate_naming_the_part() -> None:
    with pytest.raises(ValueError, match=r"MemoryKey\.user"):
        MemoryKey.from_config({"configurable": {"user_id": "\udcff", "thread_id": "t"}})


# --- the replay tool's own keys ----------------------------------------------------------------


def test_replay_gives_retrieval_a_key_naming_user_and_session() -> None:
    from langmem_ext.replay import replay

    history = [*_turns("4471")[:10], HumanMessage("what is my gym locker code?"), AIMessage("?")]
    for scope in ("thread", "user"):
        strategy = Retrieval(TokenBudget(400), store=InMemoryStore(), scope=scope, ranking="bm25")
        assert replay(history, strategy).calls  # no MissingKeyError: the replay's key is its own
