"""Retrieval: evicted turns are indexed once and come back when the question needs them."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

import pytest
from langchain_core.documents import Document
from langchain_core.embeddings import DeterministicFakeEmbedding
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langchain_core.retrievers import BaseRetriever
from langchain_core.vectorstores import InMemoryVectorStore
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.store.base import BaseStore
from langgraph.store.memory import InMemoryStore
from retrieval_views import context

from langmem_ext import (
    ApproximateCounter,
    FoldPolicy,
    MemoryKey,
    MemoryNode,
    MemoryState,
    Retrieval,
    SummaryBuffer,
    TokenBudget,
    validate,
)
from langmem_ext.core.shape import RETRIEVED_ID
from langmem_ext.retrieval import RetrievalConfig

COUNTER = ApproximateCounter()
#: an explicit memory key: Retrieval refuses a defaulted one (it would share memory)
KEY = MemoryKey("acme", "ann", "chat")
FILLER = "we talked about the weather, the sea and the boats in the harbour " * 4


@pytest.fixture(scope="module")
def minilm(minilm_embeddings: Any) -> Any:
    """The session's loaded model (conftest: skipped when not installed, failing under CI)."""
    return minilm_embeddings


def dense_store(embed: Any) -> InMemoryStore:
    return InMemoryStore(index={"dims": 384, "embed": embed, "fields": ["text"]})


class CountingStore(InMemoryStore):
    """Counts the turns written (not the change marks, see test_retrieval_edge_cases.py)."""

    puts: int = 0

    def batch(self, ops: Any) -> Any:
        ops = list(ops)
        self.puts += sum(
            1 for op in ops if type(op).__name__ == "PutOp" and op.namespace[1] == "turns"
        )
        return super().batch(ops)


FACTS = {
    4: "By the way, my locker code at the gym is 4471.",
    11: "My sister Anna moved to Porto last spring.",
    17: "I'm allergic to peanuts, so please keep that in mind for recipes.",
}


def conversation(turns: int) -> list[BaseMessage]:
    history: list[BaseMessage] = []
    for i in range(turns):
        text = FACTS.get(i, f"Topic {i}: {FILLER}")
        history += [HumanMessage(text, id=f"h{i}"), AIMessage(f"Noted ({i}). {FILLER}", id=f"a{i}")]
    return history


def run(strategy: Retrieval, history: list[BaseMessage], **kw: Any) -> Any:
    """Apply at every human message, as an agent would, and return the last result."""
    state = None
    result = None
    for end in range(1, len(history) + 1):
        if isinstance(history[end - 1], HumanMessage):
            result = strategy.apply(history[:end], state, **kw)
            state = result.state
    assert result is not None
    return result


def ask(strategy: Retrieval, history: list[BaseMessage], question: str, **kw: Any) -> Any:
    state = run(strategy, history, **kw).state
    return strategy.apply([*history, HumanMessage(question, id="q")], state, **kw)


# --- indexing ------------------------------------------------------------------------------------


def test_every_evicted_turn_is_indexed_once_under_its_first_message_id() -> None:
    store = CountingStore()
    strategy = Retrieval(
        TokenBudget(900), store=store, ranking="bm25", key=KEY, max_retrieved_tokens=600
    )
    history = conversation(30)
    result = run(strategy, history)
    shown = {m.id for m in result.messages}
    evicted_turns = [m.id for m in history if m.id not in shown and m.id.startswith("h")]
    items = store.search(KEY.namespace("turns"), limit=1_000)
    assert sorted(i.key for i in items) == sorted(evicted_turns)
    assert store.puts == len(evicted_turns)  # once each, never re-written
    seqs = sorted(i.value["seq"] for i in items)
    assert seqs == list(range(len(evicted_turns)))
    assert result.state.indexed_turns == len(evicted_turns)
    # the same history again writes nothing
    again = strategy.apply(history, result.state)
    assert store.puts == len(evicted_turns) and again.report.indexed == 0


def test_a_tool_round_is_stored_with_its_turn_and_comes_back_whole() -> None:
    store = InMemoryStore()
    strategy = Retrieval(TokenBudget(700), store=store, ranking="bm25", k=1, key=KEY)
    history: list[BaseMessage] = [
        HumanMessage("Where is order 8812?", id="h0"),
        AIMessage("", tool_calls=[{"name": "track", "args": {"id": "8812"}, "id": "c1"}], id="a0"),
        ToolMessage("order 8812: held at customs in Rotterdam", tool_call_id="c1", id="t0"),
        AIMessage("It is held at customs in Rotterdam.", id="a0b"),
    ]
    history += conversation(25)[2:]
    result = ask(strategy, history, "Remind me, where was order 8812 held?")
    text = context(result)
    assert "assistant called track({'id': '8812'})" in text
    assert "held at customs in Rotterdam" in text and "user: Where is order 8812?" in text
    assert validate(result.messages) == []
    assert not any(isinstance(m, ToolMessage) for m in result.messages if m.id == "t0")


# --- what comes back ------------------------------------------------------------------------------


@pytest.mark.parametrize("ranking", ["dense", "hybrid"])
def test_a_paraphrased_question_brings_the_planted_fact_back(minilm: Any, ranking: str) -> None:
    strategy = Retrieval(
        TokenBudget(1_500), store=dense_store(minilm), ranking=ranking, k=3, key=KEY
    )
    history = conversation(40)
    result = ask(strategy, history, "What was the combination for my gym locker?")
    assert "4471" in context(result)
    result = ask(strategy, history, "Which city does my sibling live in now?")
    assert "Porto" in context(result)


def test_the_context_message_is_late_marked_and_within_the_budget(minilm: Any) -> None:
    strategy = Retrieval(
        TokenBudget(1_500), store=dense_store(minilm), max_retrieved_tokens=300, key=KEY
    )
    history = conversation(40)
    result = ask(strategy, history, "Any food allergies I told you about?")
    ids = [m.id for m in result.messages]
    assert ids[-2:] == [RETRIEVED_ID, "q"]  # just before the newest human message
    text = context(result)
    assert text.startswith("<retrieved_context>") and text.endswith("</retrieved_context>")
    assert "peanuts" in text
    assert result.report.retrieved_tokens == COUNTER.count_message(result.messages[-2]) <= 300
    assert COUNTER.count_messages(result.messages) == result.report.tokens_after <= 1_500
    assert validate(result.messages) == []
    # nothing already in the view comes back
    shown = {m.id for m in result.messages}
    assert all(uid.rsplit("/", 1)[1] not in shown for uid in result.report.retrieved)


def test_neighbours_only_fill_what_the_results_leave() -> None:
    """With neighbors=1 the same results come back as with neighbors=0 (a neighbour never
    displaces a result), and neighbours are added best first while the budget lasts."""
    history = conversation(40)
    picked: dict[int, Any] = {}
    for neighbors in (0, 1):
        strategy = Retrieval(
            TokenBudget(1_500),
            store=InMemoryStore(),
            ranking="bm25",
            k=4,
            max_retrieved_tokens=800,
            config=RetrievalConfig(neighbors=neighbors, compact=False),
            key=KEY,
            # whole turns: the budget runs out before every neighbour fits
        )
        picked[neighbors] = ask(strategy, history, "locker code, peanuts, Anna and topic 20?")
    assert picked[0].report.retrieved == picked[1].report.retrieved
    assert len(picked[0].report.retrieved) == 4
    with_prev = context(picked[1]).count("(the turn before)")
    assert 1 <= with_prev < len(picked[1].report.retrieved)  # the budget ran out on the way
    assert picked[0].report.retrieved_tokens < picked[1].report.retrieved_tokens <= 800


def test_fusion_defaults_let_a_confident_dense_first_place_win() -> None:
    """Textbook RRF (k=60, equal weights) lets a turn that is middling in both rankings beat
    the dense ranking's clear first place; the defaults (k=5, dense weight 2) do not."""
    from langmem_ext.retrieval.index import Candidate as _Candidate

    def turns(*uids: str) -> list[_Candidate]:
        return [_Candidate(uid=u, text=u, kind="turn", seq=i, ids=(u,)) for i, u in enumerate(uids)]

    dense = turns("fact", *(f"d{i}" for i in range(9)), "both")
    lexical = turns(*(f"b{i}" for i in range(3)), "both", *(f"x{i}" for i in range(6)))
    for kwargs, first in (({}, "fact"), ({"rrf_k": 60, "dense_weight": 1.0}, "both")):
        strategy = Retrieval(
            TokenBudget(900),
            store=InMemoryStore(),
            k=1,
            config=RetrievalConfig(**kwargs),
            key=KEY,
        )
        picked = strategy._fuse([(strategy.config.dense_weight, dense), (1.0, lexical)], [], [])
        assert [c.uid for c in picked] == [first]


def test_turns_in_the_view_do_not_take_a_rank_in_the_fusion() -> None:
    from langmem_ext.retrieval.index import Candidate as _Candidate

    dense = [
        _Candidate(uid="v", text="v", kind="turn", seq=0, ids=("v1",)),
        _Candidate(uid="a", text="a", kind="turn", seq=1, ids=("a1",)),
    ]
    lexical = [_Candidate(uid="b", text="b", kind="turn", seq=2, ids=("b1",))]
    strategy = Retrieval(
        TokenBudget(900),
        store=InMemoryStore(),
        k=2,
        config=RetrievalConfig(dense_weight=1.0),
        key=KEY,
    )
    picked = strategy._fuse([(1.0, dense), (1.0, lexical)], [], {"v1"})
    # "a" is the dense first place once "v" (shown) is set aside: it ties with "b", and
    # ties keep the order of first appearance
    assert [c.uid for c in picked] == ["a", "b"]


def test_short_queries_are_not_searched_and_nothing_evicted_means_no_context() -> None:
    strategy = Retrieval(TokenBudget(900), store=InMemoryStore(), ranking="bm25", key=KEY)
    history = conversation(30)
    assert context(ask(strategy, history, "ok thanks")) == ""
    fresh = Retrieval(TokenBudget(50_000), store=InMemoryStore(), ranking="bm25", key=KEY)
    assert context(ask(fresh, conversation(5), "what was my locker code?")) == ""


def test_the_prefix_is_stable_only_the_late_context_changes() -> None:
    strategy = Retrieval(TokenBudget(2_000, target_tokens=1_400), store=InMemoryStore(), key=KEY)
    history = conversation(40)
    state = run(strategy, history).state
    first = strategy.apply([*history, HumanMessage("my locker code please", id="q1")], state)
    second = strategy.apply(
        [
            *history,
            HumanMessage("my locker code please", id="q1"),
            AIMessage("4471", id="r1"),
            HumanMessage("and where does Anna live?", id="q2"),
        ],
        first.state,
    )
    before = [m.id for m in first.messages if m.id not in (RETRIEVED_ID, "q1")]
    after = [m.id for m in second.messages][: len(before)]
    assert before == after  # hysteresis kept the cut: the cached prefix is the same


# --- knowledge sources ----------------------------------------------------------------------------


class ListRetriever(BaseRetriever):
    docs: list[str]
    delay: float = 0.0
    fail: bool = False
    finished: Any = None  # a threading.Event set when a call returns

    def _get_relevant_documents(self, query: str, *, run_manager: Any = None) -> list[Document]:
        if self.delay:
            time.sleep(self.delay)
            if self.finished is not None:
                self.finished.set()
        if self.fail:
            raise ConnectionError("knowledge base unreachable")
        return [Document(d) for d in self.docs]

    async def _aget_relevant_documents(
        self, query: str, *, run_manager: Any = None
    ) -> list[Document]:
        if self.delay:
            await asyncio.sleep(self.delay)
        if self.fail:
            raise ConnectionError("knowledge base unreachable")
        return [Document(d) for d in self.docs]


def test_sources_are_searched_deduped_and_a_failing_or_slow_one_never_breaks_the_turn() -> None:
    embed = DeterministicFakeEmbedding(size=32)
    vectors = InMemoryVectorStore(embed)
    vectors.add_texts(["Returns are accepted within 30 days.", "Shipping to Norway takes 5 days."])
    good = ListRetriever(docs=["Returns are accepted within 30 days.", "Gift cards never expire."])
    finished = threading.Event()
    slow = ListRetriever(docs=["late"], delay=1.5, finished=finished)
    broken = ListRetriever(docs=[], fail=True)
    store = InMemoryStore()
    strategy = Retrieval(
        TokenBudget(1_500),
        store=store,
        sources=[good, vectors, slow, broken],
        config=RetrievalConfig(source_timeout=0.3, source_k=5),
        key=KEY,
    )
    history = conversation(6)
    state = run(Retrieval(TokenBudget(1_500), store=store, key=KEY), history).state
    question = HumanMessage("what is your returns policy for orders?", id="q")
    result = strategy.apply([*history, question], state)
    assert not finished.is_set()  # the turn did not wait for the slow source
    text = context(result)
    assert text.count("Returns are accepted within 30 days.") == 1  # deduped across sources
    assert "Gift cards never expire." in text and "Shipping to Norway" in text
    errors = result.report.source_errors
    assert len(errors) == 2
    assert any("timed out after 0.3s" in e for e in errors)
    assert any("ConnectionError: knowledge base unreachable" in e for e in errors)

    async def go() -> Any:
        return await strategy.aapply([*history, question], state)

    async_result = asyncio.run(go())
    assert context(async_result) == text and async_result.report.source_errors == errors


# --- isolation ------------------------------------------------------------------------------------


def test_identical_texts_never_cross_tenants_users_or_threads() -> None:
    store = InMemoryStore(index={"dims": 32, "embed": DeterministicFakeEmbedding(size=32)})
    keys = [
        MemoryKey("acme", "ann", "t1"),
        MemoryKey("acme", "ann", "t2"),
        MemoryKey("acme", "bob", "t1"),
        MemoryKey("globex", "ann", "t1"),
        MemoryKey("acme:ann", "t1", "t0"),  # would collide under naive joining
    ]
    results = {}
    for key in keys:
        strategy = Retrieval(TokenBudget(900), store=store, key=key)
        history = [m.model_copy(update={"id": f"{key.encode()}|{m.id}"}) for m in conversation(30)]
        results[key] = ask(strategy, history, "what was my locker code at the gym?")
    for key, result in results.items():
        prefix = "/".join(key.namespace("turns")) + "/"
        assert result.report.retrieved and all(
            u.startswith(prefix) for u in result.report.retrieved
        )
    # scope="user" sees the user's other threads, never another user's or tenant's
    user_scope = Retrieval(TokenBudget(900), store=store, scope="user", k=10)
    key = MemoryKey("acme", "ann", "t3")
    seen = user_scope.apply([HumanMessage("what was my locker code at the gym?")], key=key)
    allowed = ("/".join(MemoryKey("acme", "ann", "x").namespace("turns", scope="user")) + "/",)
    assert seen.report.retrieved and all(u.startswith(allowed) for u in seen.report.retrieved)
    assert {u.split("/")[4] for u in seen.report.retrieved} <= {"t1", "t2"}


# --- surfaces and persistence ---------------------------------------------------------------------


def test_inside_memory_node_in_rewrite_mode_folded_turns_are_indexed_before_removal() -> None:
    from memory_graphs import memory_graph

    from langmem_ext import MemoryMessagesState

    def summarize(prompt: list[BaseMessage]) -> str:
        return "The user chatted about the harbour."

    store = InMemoryStore()
    inner = SummaryBuffer(1_200, summarizer=summarize, max_summary_tokens=60)
    node = MemoryNode(Retrieval(inner, store=store, ranking="bm25"), mode="rewrite")
    views: list[list[BaseMessage]] = []

    def model(state: MemoryMessagesState) -> dict[str, Any]:
        views.append(list(state["llm_input_messages"]))
        return {"messages": [AIMessage(f"Noted. {FILLER}", id=f"a-{len(views)}")]}

    graph = memory_graph(node, model, InMemorySaver())
    config = {"configurable": {"thread_id": "harbour", "user_id": "ann"}}
    for i in range(30):
        text = FACTS.get(i, f"Topic {i}: {FILLER}")
        graph.invoke({"messages": [HumanMessage(text, id=f"h{i}")]}, config)
    values = graph.get_state(config).values
    assert len(values["messages"]) < 60  # folded messages left the state ...
    memory = MemoryState.from_dict(values["memory"])
    assert memory.folds >= 1
    namespace = MemoryKey("default", "ann", "harbour").namespace("turns")
    stored = {i.key for i in store.search(namespace, limit=1_000)}
    assert {"h4", "h11"} <= stored  # ... but not before they were indexed
    graph.invoke({"messages": [HumanMessage("what is my gym locker code?", id="q")]}, config)
    assert "4471" in str([m.content for m in views[-1] if m.id == RETRIEVED_ID])


def test_a_new_process_rebuilds_bm25_from_a_persistent_store(tmp_path: Any) -> None:
    from langgraph.store.sqlite import SqliteStore

    path = str(tmp_path / "turns.sqlite")
    with SqliteStore.from_conn_string(path) as store:
        store.setup()
        first = Retrieval(TokenBudget(900), store=store, ranking="bm25", key=KEY)
        state = run(first, conversation(30)).state
    with SqliteStore.from_conn_string(path) as store:  # a new store and a new strategy
        second = Retrieval(TokenBudget(900), store=store, ranking="bm25", key=KEY)
        result = second.apply(
            [*conversation(30), HumanMessage("remind me of my gym locker code", id="q")],
            MemoryState.from_dict(state.to_dict()),
        )
    assert "4471" in context(result)  # h4 was indexed by the first store only
    assert result.report.indexed == 1  # the new question pushed one more turn out


def test_postgres_store_holds_the_index_bookkeeping(pg_schema_dsn: str) -> None:
    from langgraph.store.postgres import PostgresStore

    with PostgresStore.from_conn_string(pg_schema_dsn) as store:
        store.setup()
        strategy = Retrieval(TokenBudget(900), store=store, ranking="bm25", key=KEY)
        result = ask(strategy, conversation(30), "remind me of my gym locker code")
        assert "4471" in context(result)
        items = store.search(KEY.namespace("turns"), limit=1_000)
        assert len(items) == result.state.indexed_turns > 0


def test_bad_configuration_is_refused_clearly() -> None:
    with pytest.raises(
        ValueError, match=r"needs embeddings: pass embeddings=.*or a store with a vector index"
    ):
        Retrieval(TokenBudget(900), store=InMemoryStore(), ranking="dense")
    with pytest.raises(TypeError, match="BaseStore"):
        Retrieval(TokenBudget(900), store={})  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="wraps one langmem_ext strategy"):
        Retrieval("TokenBudget", store=InMemoryStore())  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="k must be"):
        Retrieval(TokenBudget(900), store=InMemoryStore(), k=0)
    with pytest.raises(ValueError, match="rrf_k must be an integer >= 0, got -1"):
        Retrieval(TokenBudget(900), store=InMemoryStore(), config=RetrievalConfig(rrf_k=-1))
    with pytest.raises(ValueError, match="dense_weight must be > 0, got 0"):
        Retrieval(TokenBudget(900), store=InMemoryStore(), config=RetrievalConfig(dense_weight=0))
    with pytest.raises(TypeError, match="BaseRetriever or a VectorStore"):
        Retrieval(TokenBudget(900), store=InMemoryStore(), sources=[object()])  # type: ignore[list-item]
    assert isinstance(InMemoryStore(), BaseStore)


def test_inside_memory_middleware_the_key_comes_from_the_run_config() -> None:
    from langchain.agents import create_agent
    from langchain_core.language_models import BaseChatModel
    from langchain_core.outputs import ChatGeneration, ChatResult

    requests: list[list[BaseMessage]] = []

    class Recorder(BaseChatModel):
        @property
        def _llm_type(self) -> str:
            return "recorder"

        def _generate(self, messages: Any, stop: Any = None, **kw: Any) -> ChatResult:
            requests.append(list(messages))
            reply = AIMessage(f"Noted. {FILLER}")
            return ChatResult(generations=[ChatGeneration(message=reply)])

    store = InMemoryStore()
    middleware = __import__("langmem_ext").MemoryMiddleware(
        Retrieval(TokenBudget(900), store=store, ranking="bm25")
    )
    agent = create_agent(Recorder(), [], middleware=[middleware], checkpointer=InMemorySaver())
    config = {"configurable": {"thread_id": "gym", "user_id": "ann", "tenant_id": "acme"}}
    for i in range(25):
        text = FACTS.get(i, f"Topic {i}: {FILLER}")
        agent.invoke({"messages": [HumanMessage(text, id=f"h{i}")]}, config)
    agent.invoke({"messages": [HumanMessage("what is my gym locker code?", id="q")]}, config)
    assert "4471" in str([m.content for m in requests[-1] if m.id == RETRIEVED_ID])
    assert store.search(MemoryKey("acme", "ann", "gym").namespace("turns"), limit=5)
    assert not store.search(MemoryKey().namespace("turns"), limit=5)  # never the default key


def test_inside_managed_chat_message_history() -> None:
    from langchain_core.chat_history import InMemoryChatMessageHistory

    from langmem_ext import ManagedChatMessageHistory

    store = InMemoryStore()
    key = MemoryKey("acme", "ann", "chat")
    history = ManagedChatMessageHistory(
        InMemoryChatMessageHistory(),
        Retrieval(TokenBudget(900), store=store, ranking="bm25"),
        store=store,
        key=key,
    )
    for message in conversation(25):
        history.add_messages([message])
    history.add_messages([HumanMessage("what is my gym locker code?", id="q")])
    view = history.messages  # reading searches what is indexed; it writes nothing
    assert "4471" in str([m.content for m in view if m.id == RETRIEVED_ID])
    assert store.search(key.namespace("turns"), limit=5)


def test_identical_turns_leaving_together_are_indexed(minilm: Any) -> None:
    """InMemoryStore.batch fails on a batch embedding one text twice (langgraph#8822)."""
    store = dense_store(minilm)
    strategy = Retrieval(TokenBudget(700), store=store, k=2, max_retrieved_tokens=200, key=KEY)
    history: list[BaseMessage] = []
    for i in range(12):
        history += [HumanMessage("ok thanks", id=f"h{i}"), AIMessage("you're welcome", id=f"a{i}")]
    history += [HumanMessage(FILLER * 2, id="big"), AIMessage(FILLER * 4, id="bigA")]
    history.append(HumanMessage("what did I thank you for earlier?", id="q"))
    result = strategy.apply(history)  # several identical turns leave at once
    left = [m.id for m in history[:24:2] if m.id not in {v.id for v in result.messages}]
    assert result.report.indexed == len(left) >= 2
    stored = store.search(KEY.namespace("turns"), limit=100)
    assert sorted(i.key for i in stored) == sorted(left)


# --- one flow, the clock passed in, a frozen config ---------------------------------------------


def _by_hand(strategy: Retrieval, messages: list[BaseMessage], state: Any) -> tuple[Any, list[str]]:
    """A driver that knows nothing of Retrieval: fold requests go to the summarizer, any other
    request runs itself (what the engine's drivers do once they take I/O requests)."""
    from langmem_ext.core.fold_config import FoldRequest
    from langmem_ext.core.transitions import Folded
    from langmem_ext.strategies.engine import IoRequest

    plan = strategy._plan(messages, MemoryState.coerce(state), strategy.clock(), 0, key=KEY)
    asked: list[str] = []
    value: Any = None
    while True:
        try:
            request = plan.send(value)
        except StopIteration as done:
            return done.value, asked
        asked.append(type(request).__name__)
        if isinstance(request, FoldRequest):
            assert strategy.summarizer is not None
            value = Folded(strategy.summarizer.fold(request.previous, request.messages))
        else:
            assert isinstance(request, IoRequest)
            value = request.run()


def _summarizing(store: BaseStore) -> Retrieval:
    inner = SummaryBuffer(2_000, summarizer=lambda prompt: "We talked about the harbour.")
    strategy = Retrieval(inner, store=store, ranking="bm25", key=KEY, max_retrieved_tokens=300)
    strategy.clock = lambda: 1_700_000_000.0
    return strategy


def test_retrieval_plan_is_one_flow_any_driver_can_run() -> None:
    """``Retrieval._plan`` used to return the inner plan alone (retrieval ran in overridden
    entry points), so a shared driver running it retrieved nothing. It is now the whole flow:
    the inner plan's fold requests pass through, then Retrieval's own I/O requests."""
    history = [*conversation(40), HumanMessage("what is my gym locker code?", id="q")]
    by_apply, by_hand = _summarizing(InMemoryStore()), _summarizing(InMemoryStore())
    state_a: Any = None
    state_b: Any = None
    asked: list[str] = []
    for end in range(1, len(history) + 1):
        if isinstance(history[end - 1], HumanMessage):
            a = by_apply.apply(history[:end], state_a)
            b, steps = _by_hand(by_hand, history[:end], state_b)
            assert [m.content for m in b.messages] == [m.content for m in a.messages]
            assert b.state == a.state
            state_a, state_b, asked = a.state, b.state, asked + steps
    assert "4471" in context(a)
    assert {"FoldRequest", "_StoreFlow", "_Together"} <= set(asked)


def test_the_async_driver_and_the_view_run_the_same_flow() -> None:
    """``aapply`` gives what ``apply`` gives; ``view`` / ``aview`` defer every fold and decline
    every write (nothing is summarized, nothing stored), and notify nobody."""
    history = [*conversation(40), HumanMessage("what is my gym locker code?", id="q")]
    sync, concurrent = _summarizing(CountingStore()), _summarizing(CountingStore())
    updates: list[Any] = []
    concurrent.inner.on_summary_updated = lambda before, after: updates.append(after)
    a = run(sync, history)
    b = asyncio.run(concurrent.aapply(history, run(concurrent, history[:-1]).state))
    assert [m.content for m in b.messages] == [m.content for m in a.messages]
    assert updates  # the inner strategy's callbacks still fire through Retrieval
    reader = _summarizing(CountingStore())
    calls: list[str] = []
    assert reader.summarizer is not None

    def fold(*args: Any) -> dict[str, str]:
        calls.append("fold")
        return {}

    reader.summarizer.fold = fold  # type: ignore[method-assign,assignment]
    seen = reader.view(history)
    aseen = asyncio.run(reader.aview(history))
    assert calls == [] and isinstance(reader.store, CountingStore) and reader.store.puts == 0
    assert seen.state == aseen.state and seen.state.indexed == 0
    assert [m.content for m in seen.messages] == [m.content for m in aseen.messages]


def test_index_stamps_come_from_the_strategy_clock() -> None:
    """``indexed_at`` was read from ``time.time()`` inside the "pure" indexing step; it is the
    ``now`` the driver took from the strategy's clock (by default the inner strategy's)."""
    store = InMemoryStore()
    strategy = Retrieval(TokenBudget(900), store=store, ranking="bm25", key=KEY)
    strategy.clock = lambda: 1_234.5
    run(strategy, conversation(20))
    stamps = {item.value["indexed_at"] for item in store.search(KEY.namespace("turns"), limit=99)}
    assert stamps == {1_234.5}
    inner = SummaryBuffer(
        4_000, summarizer=lambda prompt: "s", policy=FoldPolicy(clock=lambda: 42.0)
    )
    wrapped = Retrieval(inner, store=InMemoryStore(), ranking="bm25", key=KEY)
    assert wrapped.clock() == 42.0  # one clock per call: the inner plan's and the index's


def test_retrieval_config_is_frozen_validated_and_resolved() -> None:
    import dataclasses

    from langmem_ext.retrieval.config import RetrievalConfig

    good = ListRetriever(docs=["Returns are accepted within 30 days."])
    strategy = Retrieval(
        TokenBudget(900),
        store=InMemoryStore(),
        key=KEY,
        k=3,
        sources=[good],
        config=RetrievalConfig(dense_weight=1),
    )
    config = strategy.config
    assert isinstance(config, RetrievalConfig)
    assert (config.max_passages, config.per_ranking, config.ranking) == (3, 12, "bm25")
    assert config.sources == (good,) and config.dense_weight == 1.0
    assert isinstance(config.dense_weight, float) and config.key == KEY
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.k = 9  # type: ignore[misc]
    with pytest.raises(ValueError, match=r"Retrieval: k must be an integer >= 1, got 0"):
        RetrievalConfig(k=0)
    assert RetrievalConfig(k=2, source_k=0, candidates=5).max_passages == 0


def test_sources_given_as_a_generator_are_kept() -> None:
    """The sources were checked by iterating them and then copied: a generator was used up by
    the check, so its sources were never searched. The config copies first, then checks."""
    good = ListRetriever(docs=["Returns are accepted within 30 days."])
    strategy = Retrieval(
        TokenBudget(1_500),
        store=InMemoryStore(),
        key=KEY,
        sources=(s for s in [good]),  # type: ignore[arg-type]
    )
    result = strategy.apply([HumanMessage("what is your returns policy for orders?", id="q")])
    assert "Returns are accepted within 30 days." in context(result)


def test_a_setting_of_the_config_alone_names_its_new_place() -> None:
    """Retrieval takes its common settings as keywords; the others (fusion, candidates,
    neighbours, index placement, prefetch, ...) only through ``config=RetrievalConfig(...)``."""
    with pytest.raises(
        TypeError,
        match=r"Retrieval\(rrf_k=\.\.\.\) moved: pass config=RetrievalConfig\(rrf_k=\.\.\.\)",
    ):
        Retrieval(TokenBudget(900), store=InMemoryStore(), key=KEY, rrf_k=60)
    with pytest.raises(TypeError, match=r"unexpected keyword argument 'fusion'"):
        Retrieval(TokenBudget(900), store=InMemoryStore(), key=KEY, fusion=60)
    given = Retrieval(
        TokenBudget(900), store=InMemoryStore(), key=KEY, k=2, config=RetrievalConfig(rrf_k=60, k=5)
    )
    assert (given.config.rrf_k, given.config.k, given.config.ranking) == (60, 2, "bm25")
