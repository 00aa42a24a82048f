"""What ``Retrieval`` adds to the context. It packs evidence, not padding; k is decided by the
budget; each message of a turn is embedded; a score floor can skip retrieval. Turns that need
nothing from the past add nothing (``gate="auto"``), questions about the past still retrieve, and
the gate can be switched off or replaced."""

from __future__ import annotations

import re
import zlib
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from langchain_core.documents import Document
from langchain_core.embeddings import Embeddings
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langchain_core.retrievers import BaseRetriever
from langgraph.store.memory import InMemoryStore
from retrieval_views import context

from langmem_ext import ApproximateCounter, MemoryKey, Retrieval, TokenBudget, validate
from langmem_ext.retrieval import RetrievalConfig
from langmem_ext.retrieval.codec import distinct_texts as _distinct_texts
from langmem_ext.retrieval.text import asks_about_the_past, clip_turn_before
from langmem_ext.retrieval.text import compact_turn as _compact
from langmem_ext.retrieval.text import message_parts as _parts
from langmem_ext.retrieval.writes import turn_write

KEY = MemoryKey("acme", "ann", "t1")
FILLER = "we talked about the weather, the sea and the boats in the harbour"
WORDS = ["locker", "invoice", "garden", "piano", "harbour", "visa", "recipe", "budget", "train"]


class BagOfWords(Embeddings):
    """Deterministic embeddings: one dimension per word of ``WORDS``, and a text with none of
    them points along a dimension of its own (a hash of it), so the cosine of two texts is how
    much of that vocabulary they share."""

    def _one(self, text: str) -> list[float]:
        low = text.lower()
        vector = [float(low.count(w)) for w in WORDS] + [0.0] * _OTHER
        if not any(vector):
            vector[len(WORDS) + zlib.crc32(low.encode()) % _OTHER] = 1.0
        norm = sum(v * v for v in vector) ** 0.5
        return [v / norm for v in vector]

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        return [self._one(t) for t in texts]

    def embed_query(self, text: str) -> list[float]:
        return self._one(text)


_OTHER = 997


def store(embed: Embeddings | None = None) -> InMemoryStore:
    if embed is None:
        return InMemoryStore()
    return InMemoryStore(index={"dims": len(WORDS) + _OTHER, "embed": embed, "fields": ["text"]})


def chat(turns: int, facts: dict[int, tuple[str, str]]) -> list[BaseMessage]:
    """``turns`` user/assistant turns; ``facts[i] = (user text, reply)`` at turn ``i``."""
    out: list[BaseMessage] = []
    for i in range(turns):
        user, reply = facts.get(i, (f"Topic {i}: {FILLER} and more of it", f"Noted {i}. {FILLER}."))
        out += [HumanMessage(user, id=f"h{i}"), AIMessage(reply, id=f"a{i}")]
    return out


def ask(strategy: Retrieval, history: list[BaseMessage], question: str) -> Any:
    state = strategy.apply(history).state
    return strategy.apply([*history, HumanMessage(question, id="q")], state)


# -- what is stored and how it is packed -----------------------------------------------------


def test_each_message_of_a_turn_is_embedded_and_found_by_its_best_message() -> None:
    """A turn is found through the message that matches, however long the rest of it is."""
    s = store(BagOfWords())
    strategy = Retrieval(TokenBudget(900), store=s, ranking="dense", key=KEY)
    long_reply = "Sure. " + " ".join(f"{FILLER}, then the garden and the piano." for _ in range(6))
    history = chat(30, {2: ("My locker code is 4417, please remember it for me.", long_reply)})
    result = ask(strategy, history, "what is the code of my locker?")
    item = s.get(KEY.namespace("turns"), "h2")
    assert item is not None and item.value["parts"] == _parts(history[4:6])
    assert "user: My locker code is 4417" in context(result)


def test_compact_packing_keeps_the_user_message_and_the_matching_sentences() -> None:
    parts = [
        "user: Please book the train to Lyon for Friday, the early one if possible.",
        "assistant: Done. Your train leaves at 07:12 from platform 4. Enjoy the trip!",
    ]
    packed = _compact(parts, 8, frozenset({"train", "leave"}))
    assert packed == f"{parts[0]}\nassistant: … Your train leaves at 07:12 from platform 4."
    assert _compact(parts, 8, frozenset({"weather"})) == parts[0]  # the reply adds nothing
    assert _compact(["user: ok", parts[1]], 8, frozenset()) is None  # a short ask: whole turn
    tool_round = [parts[0], "assistant called book({'to': 'Lyon'})", "tool book result: ok"]
    assert _compact(tool_round, 8, frozenset()) is None  # a tool round comes back whole


def test_the_budget_decides_how_many_turns_come_back() -> None:
    facts = {
        i: (f"My {w} note: the {w} number is {1000 + i}.", "Noted.") for i, w in enumerate(WORDS)
    }
    history = chat(60, facts)
    question = "what were the numbers of my " + ", ".join(WORDS) + " notes?"
    small = ask(
        Retrieval(TokenBudget(2_000), store=store(), max_retrieved_tokens=120, key=KEY),
        history,
        question,
    )
    large = ask(
        Retrieval(TokenBudget(2_000), store=store(), max_retrieved_tokens=500, key=KEY),
        history,
        question,
    )
    assert 1 <= len(small.report.retrieved) < len(large.report.retrieved)
    assert len(large.report.retrieved) > 5  # not a fixed k
    assert small.report.retrieved_tokens <= 120 and large.report.retrieved_tokens <= 500
    fixed = ask(
        Retrieval(TokenBudget(2_000), store=store(), max_retrieved_tokens=500, k=2, key=KEY),
        history,
        question,
    )
    assert len(fixed.report.retrieved) == 2


def test_the_default_context_budget_is_a_quarter_of_the_inner_budget() -> None:
    assert Retrieval(TokenBudget(4_500), store=store(), key=KEY).max_retrieved_tokens == 1_125
    assert (
        Retrieval(
            TokenBudget(4_500), store=store(), key=KEY, max_retrieved_tokens=300
        ).max_retrieved_tokens
        == 300
    )


# -- the floor -------------------------------------------------------------------------------


def test_a_score_floor_skips_retrieval_when_nothing_evicted_is_close() -> None:
    history = chat(30, {3: ("My locker code is 4417 and my visa expires in May.", "Noted.")})

    def strategy(floor: float | None) -> Retrieval:
        return Retrieval(
            TokenBudget(900),
            store=store(BagOfWords()),
            ranking="dense",
            key=KEY,
            config=RetrievalConfig(min_score=floor),
            gate="always",  # the floor alone decides here (gate="auto": see the gate tests below)
        )

    small_talk = "thanks a lot, that was very helpful indeed"
    assert ask(strategy(None), history, small_talk).report.retrieved_tokens > 0  # no floor
    skipped = ask(strategy(0.5), history, small_talk)
    assert skipped.report.retrieved_tokens == 0 and context(skipped) == ""
    kept = ask(strategy(0.5), history, "what was the code of my locker again?")
    assert "4417" in context(kept)


def test_bad_floor_and_compact_values_are_refused() -> None:
    import pytest

    with pytest.raises(ValueError, match=r"min_score must be a similarity between -1 and 1"):
        Retrieval(TokenBudget(900), store=store(), key=KEY, config=RetrievalConfig(min_score=2))
    with pytest.raises(TypeError, match=r"compact must be a bool"):
        Retrieval(TokenBudget(900), store=store(), key=KEY, config=RetrievalConfig(compact="yes"))  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"k must be an integer >= 1"):
        Retrieval(TokenBudget(900), store=store(), key=KEY, k=0)


def test_writes_never_embed_one_text_twice_in_a_batch() -> None:
    """langchain-ai/langgraph#8822: a batch that embeds the same text twice fails; two turns
    that share a message ("ok") go in different batches."""
    history = [
        HumanMessage("ok", id="h0"),
        AIMessage("fine", id="a0"),
        HumanMessage("ok", id="h1"),
        AIMessage("good", id="a1"),
    ]
    strategy = Retrieval(TokenBudget(900), store=store(BagOfWords()), key=KEY)
    ops = [
        turn_write(
            strategy._setup, KEY, i, "t", "", [f"h{i}"], 0.0, _parts(history[2 * i : 2 * i + 2])
        )
        for i in range(2)
    ]
    batches = _distinct_texts(ops)
    assert len(batches) == 2


# -- the property: packing never exceeds the budget and never splits a tool round ----------


def _turns(draw: Any) -> list[BaseMessage]:
    out: list[BaseMessage] = []
    n = draw(st.integers(8, 30))
    for i in range(n):
        word = WORDS[i % len(WORDS)]
        out.append(
            HumanMessage(f"About the {word}: " + "words " * draw(st.integers(0, 30)), id=f"h{i}")
        )
        if draw(st.booleans()):
            call = {"name": "look", "args": {"q": word}, "id": f"c{i}"}
            out.append(AIMessage("", tool_calls=[call], id=f"a{i}c"))
            out.append(
                ToolMessage(
                    f"{word} result " * draw(st.integers(1, 40)),
                    tool_call_id=f"c{i}",
                    name="look",
                    id=f"t{i}",
                )
            )
        out.append(
            AIMessage(f"The {word} is fine. " + "more " * draw(st.integers(0, 40)), id=f"a{i}")
        )
    return out


@settings(max_examples=25, deadline=None)
@given(data=st.data(), share=st.integers(60, 600), inner=st.integers(900, 2_500))
def test_packing_never_exceeds_the_budget_and_never_splits_a_tool_round(
    data: Any, share: int, inner: int
) -> None:
    history = _turns(data.draw)
    word = data.draw(st.sampled_from(WORDS))
    strategy = Retrieval(
        TokenBudget(inner, overflow="clip", counter=ApproximateCounter()),
        store=store(BagOfWords()),
        max_retrieved_tokens=min(share, inner // 2),
        key=KEY,
    )
    result = ask(strategy, history, f"what happened with the {word} and its result?")
    report = result.report
    # beyond max_retrieved_tokens only on what the view's oldest turns lent (past_tokens)
    assert report.retrieved_tokens <= (strategy.config.past_tokens or 0)
    assert report.retrieved_tokens <= strategy.max_retrieved_tokens or report.lent > 0
    assert result.report.tokens_after <= result.report.budget
    assert not [f for f in validate(result.messages) if f.severity == "error"]
    text = context(result)
    for block in re.findall(r"<turn n=\d+>\n(.*?)\n</turn>", text, flags=re.S):
        calls = re.findall(r"assistant called look\(\{'q': '(\w+)'\}\)", block)
        results = re.findall(r"tool look result(?: \(excerpts\))?: (\w+) result", block)
        # a long result is shown as excerpts ("tool look result (excerpts): ...")
        assert calls == results, block  # every call with its result, none without


def test_a_question_about_what_the_assistant_said_gets_its_replies_whole() -> None:
    reply = "How about garden-piano-54? Two ordinary words and a number are easy to type."
    history = chat(30, {2: ("Can you suggest a wifi password for the guests at my place?", reply)})
    strategy = Retrieval(TokenBudget(900), store=store(BagOfWords()), ranking="dense", key=KEY)
    about_you = ask(strategy, history, "which wifi password did you come up with for the garden?")
    assert reply in context(about_you)  # the suggestion comes back with the question
    about_me = ask(
        Retrieval(TokenBudget(900), store=store(BagOfWords()), ranking="dense", key=KEY),
        history,
        "what did I ask about the wifi for the garden guests?",
    )
    assert "user: Can you suggest a wifi password" in context(about_me)
    assert "Two ordinary words" not in context(about_me)  # padding left out


def test_a_short_answer_comes_with_the_question_it_answers() -> None:
    history = chat(
        30,
        {
            4: (
                "Please keep this for me: HX-5830-585.",
                "Sure, noted: HX-5830-585. What is it for?",
            ),
            5: ("It is the visa reference for the broker.", "Got it, the visa reference."),
        },
    )
    strategy = Retrieval(TokenBudget(900), store=store(BagOfWords()), ranking="dense", key=KEY)
    result = ask(strategy, history, "which visa reference should I quote to the broker?")
    text = context(result)
    assert "(the turn before)" in text and "HX-5830-585" in text


# -- the gate: small talk adds nothing, questions about the past still retrieve ---------------

LOCKER = ("My locker code is 4417, please remember it for me.", "Noted: locker 4417.")
SMALL_TALK = [
    "what is the capital of Australia?",
    "explain what a black hole is in simple terms",
    "sounds good, let's go with that",
    "who painted the Mona Lisa?",
    "convert 5 miles to kilometers",
]


def history() -> list[Any]:
    return chat(40, {3: LOCKER, 7: ("Elena from the Oslo office sent the visa papers.", "Ok.")})


@pytest.mark.parametrize("question", SMALL_TALK)
def test_small_talk_adds_no_tokens(question: str) -> None:
    strategy = Retrieval(TokenBudget(900), store=store(BagOfWords()), key=KEY)
    result = ask(strategy, history(), question)
    assert result.report.retrieved == () and result.report.retrieved_tokens == 0
    assert context(result) == ""


@pytest.mark.parametrize(
    "question",
    [
        "what was the code of my locker?",  # the speaker
        "remind me what we said about the harbour",  # the conversation
        "Who is Elena?",  # a name the memory holds
        "did you note the locker number?",  # what the assistant said
    ],
)
def test_questions_about_the_past_still_retrieve(question: str) -> None:
    strategy = Retrieval(TokenBudget(900), store=store(BagOfWords()), key=KEY)
    result = ask(strategy, history(), question)
    assert result.report.retrieved, question
    assert result.report.retrieved_tokens > 0


def test_a_name_the_memory_does_not_hold_is_small_talk() -> None:
    known = {"elena", "oslo"}
    assert asks_about_the_past("Who is Elena?", known.__contains__)
    assert not asks_about_the_past("Who is Beatrice?", known.__contains__)
    # the first word of a sentence is not a name
    assert not asks_about_the_past("Explain. Tell a story about trains", known.__contains__)


@pytest.mark.parametrize(
    ("question", "searched"),
    [
        ("Which employee identifier should go on the expense claim?", True),
        ("A delivery driver is downstairs - what should they type to get in?", True),
        ("what should a beginner read about black holes?", True),  # the cost: searched too
        ("How long should a warm-up before squats take?", False),  # advice, not a value
        ("how much water should an adult drink a day?", False),
        ("that should work, thanks", False),  # no question word: not a question
        ("It should rain. What is the capital of Australia?", False),  # another sentence
    ],
)
def test_a_question_about_what_should_be_done_is_searched(question: str, searched: bool) -> None:
    """What or which thing should be given or done is often the speaker's own value, told
    earlier; how long or how much something should take is advice."""
    assert asks_about_the_past(question, known=lambda term: False) is searched


def test_a_strong_match_retrieves_without_any_cue() -> None:
    """A question worded like an evicted turn (dense similarity >= 0.6) is answered from it even
    without a personal word."""
    strategy = Retrieval(TokenBudget(900), store=store(BagOfWords()), key=KEY)
    result = ask(strategy, history(), "the locker code")
    assert result.report.retrieved


def test_gate_always_and_a_function() -> None:
    always = Retrieval(TokenBudget(900), store=store(BagOfWords()), key=KEY, gate="always")
    assert ask(always, history(), SMALL_TALK[0]).report.retrieved
    seen: list[str] = []

    def mine(query: str) -> bool:
        seen.append(query)
        return "capital" in query

    custom = Retrieval(TokenBudget(900), store=store(BagOfWords()), key=KEY, gate=mine)
    assert ask(custom, history(), SMALL_TALK[0]).report.retrieved
    assert not ask(custom, history(), SMALL_TALK[1]).report.retrieved
    assert SMALL_TALK[0] in seen and SMALL_TALK[1] in seen  # asked with the query's text
    with pytest.raises(ValueError, match="gate must be 'auto', 'always' or a function"):
        Retrieval(TokenBudget(900), store=store(), key=KEY, gate="never")  # type: ignore[arg-type]


def test_a_query_in_another_language_is_always_searched() -> None:
    assert asks_about_the_past("quel est le code du casier ?")  # no English function word
    assert asks_about_the_past("Schließfachcode 4417")


class _Docs(BaseRetriever):
    def _get_relevant_documents(self, query: str, *, run_manager: Any) -> list[Document]:
        return [Document(page_content="Canberra is the capital of Australia.", id="doc1")]


def test_knowledge_sources_are_searched_even_for_small_talk() -> None:
    strategy = Retrieval(TokenBudget(900), store=store(BagOfWords()), key=KEY, sources=[_Docs()])
    result = ask(strategy, history(), SMALL_TALK[0])
    assert "Canberra" in context(result)
    assert all("locker" not in r for r in result.report.retrieved)
    assert "4417" not in context(result)


ROUND = (
    "user: and the recipe?\nassistant called look({'q': 'recipe'})\ntool look result: "
    + ("recipe result " * 40).strip()
)


@pytest.mark.parametrize(
    ("chars", "expected"),
    [
        (2_000, ROUND + "\nassistant: The recipe is fine."),  # fits: whole
        (40, "assistant: The recipe is fine."),  # the round does not fit: left out, not cut
        (12, "assistant: …"),  # the last message alone is longer: its start, cut at a word
        (0, ""),
    ],
)
def test_the_turn_before_is_clipped_to_whole_messages_and_never_splits_a_round(
    chars: int, expected: str
) -> None:
    assert clip_turn_before(ROUND + "\nassistant: The recipe is fine.", chars) == expected


def test_the_turn_before_ending_in_a_long_round_keeps_the_call_with_the_start_of_its_result() -> (
    None
):
    clipped = clip_turn_before(ROUND, 200)
    assert clipped.startswith("assistant called look({'q': 'recipe'})\ntool look result: recipe")
    assert clipped.endswith(" …") and len(clipped) <= 200 + 2


@settings(max_examples=200, deadline=None)
@given(
    lines=st.lists(
        st.tuples(
            st.sampled_from(("user: ", "assistant: ", "assistant called f({})", "tool f result: ")),
            st.text(alphabet="ab .\n", max_size=80),
        ),
        min_size=1,
        max_size=8,
    ),
    chars=st.integers(0, 300),
)
def test_a_clipped_turn_before_fits_starts_at_a_message_and_never_opens_on_a_result(
    lines: list[tuple[str, str]], chars: int
) -> None:
    text = "\n".join(head + body for head, body in lines)
    clipped = clip_turn_before(text, chars)
    assert len(clipped) <= chars + len(" …")
    if len(text) <= chars:
        assert clipped == text
        return
    assert ("\n" + clipped.removesuffix(" …")) in ("\n" + text)  # from a line's start
    assert not clipped.startswith("tool ")  # a result never comes without its call
