"""Conversations with known evidence turns, for the retrieval benchmark (``bench/retrieval.py``).

Two sources, one shape (:class:`Conversation`: LangChain messages with ids, in order, and
:class:`Question` s asked right after the last message, each with the ids of its evidence turns):

**A. CRI persona data** (:func:`load_cri`), read from the installed ``cri-benchmark`` package
(``pip install --no-deps cri-benchmark==0.1.2``; nothing is vendored here). Its
``persona-1-base`` is one persona's 2,862 messages (user / assistant alternating, 665 sessions over
289 simulated days), replayed here as one thread. CRI's ground truth carries message ids in two
places: ``changes[].key_messages`` (a belief that changed: occupation, city, relationship, diet)
and ``conflicts[].introduced_at_messages`` (two statements that contradict each other); its
``signal_examples[].text`` are verbatim message openings, located here by prefix. CRI's own 20
natural-language queries (``query_relevance_pairs``) name relevant *facts*, not messages, so each
is joined to the records on the same topic by :data:`CRI_QUERY_TOPICS` (a hand-written map; five
queries, e.g. "How old is Marcus?", have no message-level record and are left out). The questions
are then:

* ``cri-query``: CRI's query text verbatim, evidence = the ids of the mapped records;
* ``cri-change``: one per changed fact (CRI lists a fact once per change; merged), a templated
  question, evidence = the union of ``key_messages``;
* ``cri-conflict``: one per conflict, a templated question, evidence = ``introduced_at_messages``.

All are asked after the last message (CRI's own protocol: ingest everything, then query), or
after message ``upto`` with the evidence cut to what was said by then (the ``--quick`` subset).
CRI's queries are about "Marcus" in the third person while the thread is his own first-person
chat; ``first_person=True`` asks the same questions as he would ("What's my diet?").

CRI's message-level ground truth is sparse: it names the key messages of each change or
conflict, not every turn that answers a question (for "What is Marcus's diet?", a turn saying
"I've been eating more plant-based" is not among them), so recall against it is a lower bound.

**B. Planted facts** (:func:`planted_conversations`): seeded synthetic conversations of everyday
assistant chat (cooking, travel, code, money, ...; user turns of ~15-60 words, assistant turns of
~50-130 words) with facts planted at known depths ("my locker code is 4471") and, at the end, one
question per fact. The questions are paraphrases picked by the RNG from two to four per fact, some
sharing a content word with the planted turn and some sharing none (see
:attr:`Question.overlap`), so lexical search cannot find them all. Some facts are told by the
assistant (a password it suggested, a code it picked): the evidence is then the AI turn and the
words of the question mostly match the user turn before it (what ``neighbors=1`` is for). Each
fact also has a distractor on the same topic somewhere else in the conversation. Filler turns
come from a shared pool, so identical texts recur across conversations and an embedding cache
pays for each once.
"""

from __future__ import annotations

import importlib.util
import json
import random
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage

from langmem_ext.retrieval.bm25 import tokenize

__all__ = [
    "CRI_DATASET",
    "CRI_FIRST_PERSON",
    "CRI_FIRST_PERSON_MORE",
    "CRI_INSTALL",
    "CRI_QUERY_TOPICS",
    "Conversation",
    "PlantedSettings",
    "Question",
    "cri_dataset_dir",
    "load_cri",
    "load_cri_facts",
    "planted_conversations",
]

CRI_DATASET = "persona-1-base"
CRI_INSTALL = "pip install --no-deps cri-benchmark==0.1.2"


@dataclass(frozen=True)
class Question:
    """A question asked after the conversation's last message."""

    qid: str
    text: str
    #: ids of the messages that hold the answer (any one of them is evidence)
    relevant: tuple[str, ...]
    #: ``cri-query`` / ``cri-change`` / ``cri-conflict`` / ``planted-user`` / ``planted-ai``
    kind: str
    topic: str
    #: messages between the newest evidence turn and the question (1 = the last message)
    depth: int
    #: content words (``ranking.tokenize``) the question shares with its evidence turns
    overlap: int = 0
    #: fact-level evidence (CRI's expected facts): (fact, ids of the messages stating it); a
    #: question with facts has ``relevant`` = the union of their ids
    facts: tuple[tuple[str, tuple[str, ...]], ...] = ()


@dataclass(frozen=True)
class Conversation:
    name: str
    source: str
    messages: tuple[BaseMessage, ...]
    questions: tuple[Question, ...]
    info: dict[str, Any] = field(default_factory=dict)


def _overlap(question: str, texts: Iterable[str]) -> int:
    words = set(tokenize(question))
    evidence: set[str] = set()
    for text in texts:
        evidence.update(tokenize(text))
    return len(words & evidence)


# --------------------------------------------------------------------------------------------
# A. CRI


def cri_dataset_dir(name: str = CRI_DATASET) -> Path:
    """The dataset folder inside the installed ``cri`` package (found without importing it: the
    package's ``__init__`` is not needed, nor its dependencies)."""
    spec = importlib.util.find_spec("cri")
    locations = list(spec.submodule_search_locations or []) if spec is not None else []
    for location in locations:
        folder = Path(location) / "datasets" / name
        if (folder / "conversations.jsonl").is_file() and (folder / "ground_truth.json").is_file():
            return folder
    raise FileNotFoundError(
        f"the CRI dataset {name!r} is not installed (looked in {locations or 'no cri package'}); "
        f"install it with: {CRI_INSTALL}"
    )


#: CRI's queries joined to its message-level records on the same topic. ``change:FACT`` is every
#: change of that fact, ``change:FACT:NEW`` the one whose new value starts with NEW,
#: ``conflict:ID`` a conflict, ``signal:TARGET`` a signal example by its target fact. Queries
#: whose topic has no such record (age, hobbies, daily routine, communication style, ethnicity:
#: its signal text is not a message) are left out.
CRI_QUERY_TOPICS: dict[str, tuple[str, ...]] = {
    "qrp-adv-01": (
        "change:occupation",
        "conflict:conflict-adv-04",
        "signal:occupation: Corporate Architect in NYC",
    ),
    "qrp-adv-02": ("change:city", "conflict:conflict-adv-03"),
    "qrp-adv-03": ("change:relationship_status", "conflict:conflict-adv-08"),
    "qrp-adv-04": ("conflict:conflict-adv-02",),
    "qrp-adv-05": (
        "change:diet",
        "conflict:conflict-adv-01",
        "signal:diet change: vegan → flexitarian",
    ),
    "qrp-adv-07": ("signal:motivation: affordable housing design",),
    "qrp-adv-08": ("conflict:conflict-adv-06",),
    "qrp-adv-09": ("conflict:conflict-adv-07", "signal:tech change: deleted social media"),
    "qrp-adv-11": ("change:city",),
    "qrp-adv-12": ("change:occupation", "conflict:conflict-adv-04"),
    "qrp-adv-15": ("change:city:rural Vermont",),
    "qrp-adv-16": ("change:diet", "conflict:conflict-adv-01"),
    "qrp-adv-17": (
        "change:relationship_status:separated",
        "conflict:conflict-adv-08",
        "signal:relationship change: separation",
    ),
    "qrp-adv-18": ("signal:motivation: affordable housing design",),
    "qrp-adv-20": ("change:relationship_status:beginning",),
}

_CHANGE_QUESTION = "Has Marcus's {topic} changed over time? What was it before, and what is it now?"
_CONFLICT_QUESTION = "What has Marcus said about his {topic}, and has his position shifted?"

#: CRI's queries as the user would ask them in the chat (the thread is in the first person; in
#: the third person, "Marcus" matches the turns where the assistant says his name)
CRI_FIRST_PERSON: dict[str, str] = {
    "qrp-adv-01": "What do I do for work?",
    "qrp-adv-02": "Where do I live?",
    "qrp-adv-03": "What's my relationship status?",
    "qrp-adv-04": "Do I have children?",
    "qrp-adv-05": "What's my diet?",
    "qrp-adv-07": "What projects am I working on?",
    "qrp-adv-08": "What are my political views?",
    "qrp-adv-09": "How do I feel about technology?",
    "qrp-adv-11": "Where have I lived?",
    "qrp-adv-12": "Why did I leave corporate architecture?",
    "qrp-adv-15": "Tell me about my property.",
    "qrp-adv-16": "Has my diet changed?",
    "qrp-adv-17": "What happened with my marriage?",
    "qrp-adv-18": "What motivates me?",
    "qrp-adv-20": "Who is Elena?",
}
#: the five queries with no message-level record, in the first person (fact-level data only)
CRI_FIRST_PERSON_MORE: dict[str, str] = {
    "qrp-adv-06": "What are my hobbies?",
    "qrp-adv-10": "What's my daily routine?",
    "qrp-adv-13": "How do I communicate?",
    "qrp-adv-14": "What's my ethnic background?",
    "qrp-adv-19": "How old am I?",
}
_CHANGE_QUESTION_1P = "Has my {topic} changed over time? What was it before, and what is it now?"
_CONFLICT_QUESTION_1P = "What have I said about my {topic}, and has my position shifted?"


def _cri_refs(ground_truth: dict[str, Any], by_prefix: dict[str, int]) -> dict[str, set[int]]:
    """Every record reference of :data:`CRI_QUERY_TOPICS` to its message ids."""
    refs: dict[str, set[int]] = {}
    for change in ground_truth["changes"]:
        ids = set(change["key_messages"])
        refs.setdefault(f"change:{change['fact']}", set()).update(ids)
        refs[f"change:{change['fact']}:{change['new_value']}"] = ids
    for conflict in ground_truth["conflicts"]:
        refs[f"conflict:{conflict['conflict_id']}"] = set(conflict["introduced_at_messages"])
    for signal in ground_truth["signal_examples"]:
        found = by_prefix.get(signal["text"][:120].strip())
        if found is not None:
            refs[f"signal:{signal['target_fact']}"] = {found}
    return refs


def _resolve(ref: str, refs: dict[str, set[int]]) -> set[int]:
    if ref in refs:
        return refs[ref]
    matches = [ids for key, ids in refs.items() if key.startswith(ref)]
    if len(matches) != 1:
        raise KeyError(f"CRI record reference {ref!r} matches {len(matches)} records")
    return matches[0]


def _cri_rows(folder: Path) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    rows = [
        json.loads(line)
        for line in (folder / "conversations.jsonl").read_text(encoding="utf-8").splitlines()
        if line.strip()
    ]
    rows.sort(key=lambda row: row["message_id"])
    ground_truth = json.loads((folder / "ground_truth.json").read_text(encoding="utf-8"))
    return rows, ground_truth


def _cri_thread(
    rows: list[dict[str, Any]], upto: int | None
) -> tuple[list[dict[str, Any]], list[BaseMessage]]:
    """The rows kept (1..``upto``, ending on an AI turn) and their messages."""
    if upto is not None:
        rows = [row for row in rows if row["message_id"] <= upto]
    while rows and rows[-1]["role"] != "assistant":  # the question must follow an AI turn
        rows.pop()
    messages: list[BaseMessage] = []
    for row in rows:
        cls = HumanMessage if row["role"] == "user" else AIMessage
        messages.append(cls(row["content"], id=f"cri-{row['message_id']}"))
    return rows, messages


def load_cri(
    dataset: str = CRI_DATASET, *, upto: int | None = None, first_person: bool = False
) -> Conversation:
    """The CRI persona thread as LangChain messages (ids ``cri-<message_id>``) and its questions.

    ``upto``: keep messages 1..``upto`` only, and the questions whose evidence was said by then
    (evidence cut to those messages). ``first_person``: the same questions as the user would ask
    them ("What's my diet?" for CRI's "What is Marcus's diet?", :data:`CRI_FIRST_PERSON`).
    """
    folder = cri_dataset_dir(dataset)
    rows, ground_truth = _cri_rows(folder)
    by_prefix: dict[str, int] = {}
    for row in rows:  # the whole thread: records resolve the same with or without ``upto``
        by_prefix.setdefault(row["content"][:120].strip(), row["message_id"])
    refs = _cri_refs(ground_truth, by_prefix)
    rows, messages = _cri_thread(rows, upto)
    position = {int(str(m.id).removeprefix("cri-")): i for i, m in enumerate(messages)}
    text_of = {mid: str(messages[i].content) for mid, i in position.items()}

    candidates: list[tuple[str, str, str, str, set[int]]] = []  # qid, kind, topic, text, ids
    for pair in ground_truth["query_relevance_pairs"]:
        topic_refs = CRI_QUERY_TOPICS.get(pair["query_id"])
        if topic_refs is None:
            continue
        ids: set[int] = set()
        for ref in topic_refs:
            ids |= _resolve(ref, refs)
        text = CRI_FIRST_PERSON[pair["query_id"]] if first_person else pair["query"]
        candidates.append((pair["query_id"], "cri-query", pair["query"], text, ids))
    merged: dict[str, set[int]] = {}
    for change in ground_truth["changes"]:
        merged.setdefault(change["fact"], set()).update(change["key_messages"])
    for fact, ids in merged.items():
        topic = fact.replace("_", " ")
        text = (_CHANGE_QUESTION_1P if first_person else _CHANGE_QUESTION).format(topic=topic)
        candidates.append((f"change-{fact}", "cri-change", topic, text, ids))
    for conflict in ground_truth["conflicts"]:
        template = _CONFLICT_QUESTION_1P if first_person else _CONFLICT_QUESTION
        text = template.format(topic=conflict["topic"])
        ids = set(conflict["introduced_at_messages"])
        candidates.append((conflict["conflict_id"], "cri-conflict", conflict["topic"], text, ids))

    questions: list[Question] = []
    for qid, kind, topic, text, ids in candidates:
        present = sorted(i for i in ids if i in position)
        if not present:
            continue
        newest = max(position[i] for i in present)
        questions.append(
            Question(
                qid=qid,
                text=text,
                relevant=tuple(f"cri-{i}" for i in present),
                kind=kind,
                topic=topic,
                depth=len(messages) - newest,
                overlap=_overlap(text, (text_of[i] for i in present)),
            )
        )
    sessions = {row["session_id"] for row in rows}
    return Conversation(
        name=f"cri-{dataset}"
        + ("-1p" if first_person else "")
        + (f"-upto{upto}" if upto is not None else ""),
        source="cri",
        messages=tuple(messages),
        questions=tuple(questions),
        info={
            "dataset": dataset,
            "messages": len(messages),
            "sessions": len(sessions),
            "days": max((row["day"] for row in rows), default=0),
            "queries_mapped": sum(1 for q in questions if q.kind == "cri-query"),
            "queries_in_dataset": len(ground_truth["query_relevance_pairs"]),
            "first_person": first_person,
        },
    )


def load_cri_facts(
    dataset: str = CRI_DATASET, *, upto: int | None = None, first_person: bool = False
) -> Conversation:
    """The CRI persona thread with CRI's 20 queries and fact-level evidence.

    Each query's ``expected_relevant_facts`` are located in the thread by the hand-written
    matchers of ``bench/cri_facts.py`` (a deterministic stand-in for CRI's LLM judge; see its
    audit, ``bench/cri_facts_audit.md``). ``Question.facts`` holds each fact with the ids of the
    messages that state it, ``relevant`` their union. Facts no message states are left out, and
    so are queries left with none.
    """
    from bench.cri_facts import fact_evidence

    folder = cri_dataset_dir(dataset)
    rows, ground_truth = _cri_rows(folder)
    evidence = fact_evidence(rows)
    rows, messages = _cri_thread(rows, upto)
    position = {int(str(m.id).removeprefix("cri-")): i for i, m in enumerate(messages)}
    wording = {**CRI_FIRST_PERSON, **CRI_FIRST_PERSON_MORE}
    questions: list[Question] = []
    dropped: list[str] = []
    for pair in ground_truth["query_relevance_pairs"]:
        qid = pair["query_id"]
        facts: list[tuple[str, tuple[str, ...]]] = []
        for fact in pair["expected_relevant_facts"]:
            ids = tuple(f"cri-{i}" for i in evidence[qid][fact] if i in position)
            if ids:
                facts.append((fact, ids))
            else:
                dropped.append(f"{qid}: {fact}")
        if not facts:
            continue
        relevant = tuple(dict.fromkeys(mid for _, ids in facts for mid in ids))
        text = wording[qid] if first_person else pair["query"]
        newest = max(position[int(mid.removeprefix("cri-"))] for mid in relevant)
        at = "end" if upto is None else f"{len(messages)}"
        questions.append(
            Question(
                qid=f"{qid}@{at}",
                text=text,
                relevant=relevant,
                kind=f"asked after message {at}",
                topic=pair["query"],
                depth=len(messages) - newest,
                overlap=_overlap(
                    text, (str(messages[position[int(m[4:])]].content) for m in relevant)
                ),
                facts=tuple(facts),
            )
        )
    return Conversation(
        name=f"cri-{dataset}-facts"
        + ("-1p" if first_person else "")
        + (f"-upto{upto}" if upto is not None else ""),
        source="cri",
        messages=tuple(messages),
        questions=tuple(questions),
        info={
            "dataset": dataset,
            "messages": len(messages),
            "sessions": len({row["session_id"] for row in rows}),
            "days": max((row["day"] for row in rows), default=0),
            "facts": sum(len(q.facts) for q in questions),
            "facts_in_dataset": sum(
                len(p["expected_relevant_facts"]) for p in ground_truth["query_relevance_pairs"]
            ),
            "facts_without_evidence": dropped,
            "first_person": first_person,
        },
    )


# --------------------------------------------------------------------------------------------
# B. planted facts

_NAMES = (
    "Priya Amina Tomasz Ingrid Mateo Keiko Olu Siobhan Rafael Leila Henrik Chiara Dmitri Nadia "
    "Joaquin Freya Ravi Marguerite Emeka Sunniva"
).split()
_SURNAMES = (
    "Okafor Lindqvist Moreau Castellanos Nakamura Brennan Kowalczyk Haddad Oyelaran Fitzgerald "
    "Varga Albrecht"
).split()
_CITIES = (
    "Porto Tallinn Valparaíso Ljubljana Hobart Kraków Oaxaca Bergen Marrakesh Halifax Cluj "
    "Trondheim Medellín Bruges"
).split()
_WEEKDAYS = "Monday Tuesday Wednesday Thursday Friday Saturday Sunday".split()
_MONTHS = (
    "January February March April May June July August September October November December"
).split()
_WORDS = (
    "maple otter copper lantern harbor velvet meadow thistle comet pepper walnut glacier cobalt "
    "saffron juniper falcon"
).split()


def _time(rng: random.Random) -> str:
    return f"{rng.randint(5, 21)}:{rng.choice(('05', '15', '20', '35', '40', '50'))}"


@dataclass(frozen=True)
class _Fact:
    key: str
    #: (user text, AI text or None for a generic acknowledgement); AI text given = the AI holds it
    plant: tuple[str, str | None]
    questions: tuple[str, ...]
    distractor: str
    #: (value, what it is): the fact may also be told in two turns, the bare value first and
    #: what it is for in the next turn (the one the question's words match)
    split: tuple[str, str] | None = None


def _facts(rng: random.Random) -> list[_Fact]:
    """Every fact template with fresh values from ``rng``."""
    name, surname, city = rng.choice(_NAMES), rng.choice(_SURNAMES), rng.choice(_CITIES)
    locker = f"{rng.randint(1000, 9999)}"
    flight = f"{_time(rng)} on {rng.choice(_WEEKDAYS)}"
    plate = (
        f"{rng.choice('BKMRTW')}{rng.choice('AELNS')}-{rng.randint(100, 999)}-"
        f"{rng.choice('CDHPX')}{rng.choice('AJQZ')}"
    )
    dentist = f"{rng.choice(_WEEKDAYS)} at {_time(rng)}"
    anniversary = f"{rng.choice(_MONTHS)} {rng.randint(1, 28)}"
    staff = f"E-{rng.randint(100000, 999999)}"
    door = f"{rng.randint(1000, 9999)}"
    policy = f"HX-{rng.randint(1000, 9999)}-{rng.randint(100, 999)}"
    birthday = f"{rng.choice(_MONTHS)} {rng.randint(1, 28)}"
    return [
        _Fact(
            "locker",
            (
                f"Before I forget: my locker at the climbing gym is number {rng.randint(10, 99)} "
                f"and the code is {locker}. I keep losing the sticky note I wrote it on, so please "
                "hang on to it for me.",
                None,
            ),
            (
                "What was the code for my gym locker again?",
                "Remind me of the combination that opens the place I keep my stuff while I "
                "boulder.",
                "I'm standing in the changing room and blanked - which digits did I give you?",
            ),
            "The climbing gym was packed tonight, I waited twenty minutes for the overhang wall.",
            (locker, "That number is the code for my locker at the climbing gym, by the way."),
        ),
        _Fact(
            "sister_city",
            (
                f"Big family news: my sister {name} finally moved to {rng.choice(_CITIES)} last "
                "weekend. She found a flat near the old town, so I'll probably be visiting a lot "
                "more often this year.",
                None,
            ),
            (
                "Which city did my sister move to?",
                "Where does my sibling live these days, after the relocation?",
                "I want to book a trip to see her - remind me where she settled?",
            ),
            f"My sister {name} called about our parents' anniversary party, nothing decided yet.",
        ),
        _Fact(
            "allergy",
            (
                f"Just so you know for any recipes: I'm allergic to "
                f"{rng.choice(('shellfish', 'sesame', 'hazelnuts', 'kiwi', 'mustard'))}. I found "
                "out the hard way at a friend's wedding and spent the night in the ER.",
                None,
            ),
            (
                "What am I allergic to?",
                "Is there any ingredient I have to avoid for medical reasons?",
                "Which food could send me to the hospital if you put it in a dish?",
            ),
            "I've been trying to eat less sugar, but the office keeps bringing in pastries.",
        ),
        _Fact(
            "flight",
            (
                f"Travel update: my flight to {city} leaves at {flight}. I still need to figure "
                "out how to get to the airport that early.",
                None,
            ),
            (
                f"When does my flight to {city} leave?",
                "What time does my plane take off on the trip?",
                "Remind me of my departure slot, I need to set an alarm.",
            ),
            "Airport lounges are overrated, honestly, I just want a quiet corner and a socket.",
            (flight, f"That's when my flight to {city} leaves; I still need a ride there."),
        ),
        _Fact(
            "wifi",
            (
                "My parents are visiting next week and I want a guest wifi password that's easy "
                "to read aloud over the phone. Can you suggest one?",
                f"How about '{rng.choice(_WORDS)}-{rng.choice(_WORDS)}-{rng.randint(10, 99)}'? "
                "Two ordinary words and a number are easy to say and to type on a phone, and "
                "still much harder to guess than a birthday.",
            ),
            (
                "What wifi password did you suggest for my guests?",
                "My dad is asking how to get online at my place - what did you come up with?",
                "Which passphrase did you propose for the visitors' network?",
            ),
            "The internet at home dropped out three times during my call today, so annoying.",
        ),
        _Fact(
            "dog",
            (
                f"We adopted a dog yesterday! A scruffy "
                f"{rng.choice(('terrier mix', 'greyhound', 'beagle', 'collie'))} named "
                f"{rng.choice(('Biscuit', 'Pickle', 'Juniper', 'Waffles', 'Nacho'))}. The kids "
                "are over the moon.",
                None,
            ),
            (
                "What's our new dog called?",
                "What name did we give the pet we just brought home?",
                "Remind me what the kids call the animal we adopted?",
            ),
            "The neighbour's dog barked all night again, I barely slept.",
        ),
        _Fact(
            "plate",
            (
                f"For the parking permit form: my new car's licence plate is {plate}. The form "
                "wants it exactly like that.",
                None,
            ),
            (
                "What's my car's licence plate?",
                "What is the registration number of my vehicle?",
                "The permit office is on the phone - what are the characters on my plate?",
            ),
            "Car insurance went up again this year, I should compare quotes.",
            (plate, "It's the licence plate of my new car, for the parking permit form."),
        ),
        _Fact(
            "dentist",
            (
                f"The dental practice just called and moved my appointment to {dentist}. Not "
                "ideal, but better than waiting another month.",
                None,
            ),
            (
                "When is my dentist appointment?",
                "When am I seeing the tooth doctor now?",
                "What day and time did my checkup get rescheduled to?",
            ),
            "I should really floss more, my gums were bleeding a bit this morning.",
            (dentist, "That's the new slot the dental practice gave me after they rescheduled."),
        ),
        _Fact(
            "anniversary",
            (
                f"Our wedding anniversary is on {anniversary}, and "
                "I somehow manage to forget it every year. This time I want to plan something "
                "proper.",
                None,
            ),
            (
                "When is our wedding anniversary?",
                "What date did my partner and I get married?",
                "Which day do I need to plan the celebration for us as a couple?",
            ),
            "A friend of mine is getting married in the spring and asked me to give a speech.",
            (anniversary, "That's our wedding anniversary, and I forget it every single year."),
        ),
        _Fact(
            "coffee",
            (
                f"If you ever order for me: my usual is a "
                f"{rng.choice(('small', 'medium', 'large'))} oat "
                f"{rng.choice(('flat white', 'cortado', 'latte', 'cappuccino'))} with an extra "
                "shot, no sugar.",
                None,
            ),
            (
                "What's my usual coffee order?",
                "How do I take my espresso drink?",
                "If you pick up a drink for me at the café, what should you get?",
            ),
            "I've cut down to two coffees a day and honestly I sleep better.",
        ),
        _Fact(
            "employee_id",
            (
                f"HR keeps asking, so for the record: my staff number at work is "
                f"{staff}. Please keep it handy for the expense forms.",
                None,
            ),
            (
                "What's my staff number at work?",
                "Which employee identifier should go on the expense claim?",
                "Payroll needs my ID - what is it?",
            ),
            "HR sent another survey about the office move, I ignored it again.",
            (staff, "That's my staff number at work, HR and payroll keep asking for it."),
        ),
        _Fact(
            "landlord",
            (
                f"Good news, my landlord {rng.choice(_NAMES)} {surname} finally fixed the heater "
                "after three weeks. I'll send him a thank-you note anyway.",
                None,
            ),
            (
                "What's my landlord's name?",
                "Who owns the flat I rent?",
                "Who should I write to about the lease renewal?",
            ),
            "Rent prices in my area are going up fast, I might have to move next year.",
        ),
        _Fact(
            "book_club",
            (
                f"For book club this month we're reading "
                f"'{rng.choice(('The Salt Path', 'Piranesi', 'Stoner', 'The Remains of the Day'))}"
                "'. I'm already behind, as usual.",
                None,
            ),
            (
                "Which book is my book club reading?",
                "What novel does my reading group have on the list right now?",
                "What am I supposed to finish before the next literary meetup?",
            ),
            "I started three books this summer and finished none of them.",
        ),
        _Fact(
            "teacher",
            (
                f"Parents' evening went well. My daughter's teacher this year is Ms. "
                f"{rng.choice(_SURNAMES)}, and she says the reading has really improved.",
                None,
            ),
            (
                "What's the name of my daughter's teacher?",
                "Who is in charge of my kid's class this year?",
                "Who should I email at school about the field trip form?",
            ),
            "School starts at eight, and getting everyone out of the door is chaos.",
        ),
        _Fact(
            "bike_lock",
            (
                "I bought a combination lock for my bike. Pick a random 3-digit code for me so "
                "I don't use my birthday again.",
                f"Let's go with {rng.randint(100, 999)}. It isn't a date or a repeated digit, so "
                "it's a decent choice; set it before you lock up the first time.",
            ),
            (
                "Which code did you pick for my bike lock?",
                "I'm at the rack outside - what numbers open my bicycle?",
                "What combination did you choose for me yesterday for the cycle chain?",
            ),
            "Someone stole the front wheel of a bike outside the library, scary.",
        ),
        _Fact(
            "meeting_room",
            (
                f"Quick note: the quarterly review is in room {rng.randint(2, 9)}."
                f"{rng.randint(10, 40)} on {rng.choice(_WEEKDAYS)}, and I'm presenting the "
                "budget slides.",
                None,
            ),
            (
                "Where is the quarterly review?",
                "In which room do I present the numbers to management?",
                "Where do I need to be for the big meeting with the budget slides?",
            ),
            "Meetings at work are getting longer and longer, nobody keeps to the agenda.",
        ),
        _Fact(
            "restaurant",
            (
                f"Our go-to place for date night is a little "
                f"{rng.choice(('Georgian', 'Ethiopian', 'Basque', 'Sichuan'))} restaurant "
                f"called {rng.choice(('Tamada', 'Lalibela', 'Txoko', 'Red Lantern'))}. We've been "
                "going there since our second date.",
                None,
            ),
            (
                "What's our favourite restaurant?",
                "Where do my partner and I usually go out to eat?",
                "Which place should I book for a romantic evening out?",
            ),
            "We tried a new pizza place downtown, it was fine but nothing special.",
        ),
        _Fact(
            "door_code",
            (
                f"The door code for my building changed today, it's now {door} "
                "followed by the hash key. The courier couldn't get in this morning.",
                None,
            ),
            (
                "What's the door code for my building?",
                "How does someone get through the entrance of my apartment block?",
                "A delivery driver is downstairs - what should they type to get in?",
            ),
            "The lift in my building has been broken for a week now.",
            (door, "That's the new door code for my building; the courier couldn't get in."),
        ),
        _Fact(
            "policy",
            (
                f"For the claim later: my home insurance policy number is "
                f"{policy}. The broker said to quote "
                "it in every email.",
                None,
            ),
            (
                "What's my insurance policy number?",
                "Which reference should I quote to the broker about the water damage?",
            ),
            "The broker's office never picks up the phone before ten.",
            (policy, "It's my home insurance policy number, for the water damage claim."),
        ),
        _Fact(
            "mom_birthday",
            (
                f"Mom's birthday is on {birthday}. I want to "
                "order flowers a week ahead this time instead of panicking the day before.",
                None,
            ),
            (
                "When is my mother's birthday?",
                "What date do I need to order the bouquet for?",
                "When is Mum's special day this year?",
            ),
            "My mom finally learned to use video calls, so we talk every Sunday now.",
            (birthday, "That's Mom's birthday - I want to order flowers a week ahead this time."),
        ),
        _Fact(
            "plant_watering",
            (
                f"The nursery said the fiddle leaf fig needs water every {rng.randint(6, 12)} days "
                "and should stay away from the radiator.",
                None,
            ),
            (
                "How often should I water the fiddle leaf fig?",
                "How many days between drinks for my big houseplant?",
            ),
            "Half of my balcony herbs died in the heatwave.",
        ),
        _Fact(
            "recipe_swap",
            (
                "I'm making your lentil soup for ten people on Saturday. What can I use instead "
                "of cream so it stays vegan?",
                f"Blend in {rng.choice(('soaked cashews', 'silken tofu', 'coconut milk'))}: about "
                "a cup for ten servings. Add it at the end and warm it through without boiling, "
                "or it can split.",
            ),
            (
                "What did you say to use instead of cream in the soup?",
                "For the big pot on Saturday, which dairy-free replacement did you recommend?",
                "What was your trick to keep the lentil dish plant-based?",
            ),
            "I burned the garlic again, the whole kitchen smelled for hours.",
        ),
        _Fact(
            "vet",
            (
                f"The vet clinic we use is {rng.choice(('Oakbridge', 'Riverside', 'Northgate'))} "
                f"Animal Care, and our vet is Dr. {rng.choice(_SURNAMES)}. Their emergency line "
                "is open all night.",
                None,
            ),
            (
                "Which vet clinic do we use?",
                "Who looks after our animals when they're sick?",
            ),
            "Pet food prices have gone up a lot this year.",
        ),
        _Fact(
            "gift_idea",
            (
                f"Note to self: {name} mentioned she really wants a "
                f"{rng.choice(('pasta maker', 'film camera', 'bread proofing basket'))} for her "
                "birthday. Don't let me forget that.",
                None,
            ),
            (
                f"What did {name} say she wants for her birthday?",
                "What present was I supposed to remember for my sister?",
            ),
            "Wrapping paper is such a waste, I've switched to cloth bags.",
        ),
    ]


#: the first turn of a split fact: the bare value (the next turn says what it is)
_HOLD = (
    "Can you hold on to something for me? {value}. I'll explain in a second.",
    "Quick, write this down before I forget: {value}.",
    "Please keep this for me: {value}.",
)
_HOLD_AI = "Sure, I've noted it: {value}. What is it for?"

_ACKS = (
    "Got it, I'll keep that in mind.",
    "Noted! Let me know if you want me to remind you later.",
    "Thanks for telling me, I've made a note of it.",
    "Understood. Anything else you want me to keep track of?",
    "Okay, that's noted. Good luck with it!",
)

# filler: a topic's user openers, follow-ups and assistant sentences
_TOPICS: dict[str, tuple[tuple[str, ...], tuple[str, ...], tuple[str, ...]]] = {
    "cooking": (
        (
            "What can I make for dinner with chickpeas, spinach and a tin of tomatoes?",
            "How long should I roast a tray of root vegetables?",
            "My risotto always turns out gluey. What am I doing wrong?",
            "Can you suggest a quick lunch I can prep on Sunday for the whole week?",
            "Is it worth buying a cast iron pan, or is non-stick fine?",
            "How do I get crispy tofu without deep frying it?",
        ),
        (
            "I only have about thirty minutes.",
            "Nothing too spicy please, the kids are eating too.",
            "I have an oven and two burners, that's it.",
            "Ideally something that reheats well.",
        ),
        (
            "A chickpea and spinach stew is a good fit: soften an onion, add garlic and cumin, "
            "then the tomatoes and drained chickpeas.",
            "Roast at 200°C for 35 to 45 minutes, turning once halfway through.",
            "Risotto goes gluey when the rice is stirred too hard or overcooked; add the stock "
            "a ladle at a time and stop while it still has a slight bite.",
            "Press the tofu for twenty minutes, toss it in cornstarch and bake it on a hot tray.",
            "Cast iron lasts for decades and handles high heat, but it needs to be dried and "
            "oiled after washing.",
            "Grain bowls keep well for four days if you store the dressing separately.",
            "Season at the end; tinned tomatoes vary a lot in salt.",
            "A squeeze of lemon just before serving brightens almost any stew.",
            "If you double the recipe, use a wider pan rather than a deeper one.",
        ),
    ),
    "travel": (
        (
            "I have four days in Lisbon in October. How should I split them?",
            "Is it cheaper to take the train or fly between Milan and Rome?",
            "What should I pack for a week of hiking in the Scottish Highlands?",
            "Any tips for dealing with jet lag on a flight to Tokyo?",
            "How far in advance should I book accommodation for a summer trip to Croatia?",
        ),
        (
            "I'm travelling with hand luggage only.",
            "My budget is fairly tight this time.",
            "I don't mind early starts.",
        ),
        (
            "Spend the first day in Alfama and Baixa on foot, then take the tram up to the "
            "castle in the late afternoon.",
            "The high-speed train takes about three hours city centre to city centre, which "
            "usually beats flying once you count the airport transfers.",
            "Pack layers: a base layer, a fleece and a proper waterproof shell matter more than "
            "one heavy coat.",
            "Shift your sleep by an hour a day in the week before you leave and get daylight "
            "in the morning once you arrive.",
            "For the coast in July and August, booking three to four months ahead gives you the "
            "best choice.",
            "Day passes for public transport often pay for themselves after three rides.",
            "Keep a photo of your passport in your email in case the original goes missing.",
            "Midges can be bad in summer, so a head net is worth its weight.",
        ),
    ),
    "code": (
        (
            "Why does my Python script say 'list index out of range' on the last line of the file?",
            "How do I read a CSV file with pandas and skip the first two rows?",
            "What's the difference between a list and a tuple in Python?",
            "My SQL query with a LEFT JOIN returns duplicate rows. Why?",
            "How do I undo my last git commit but keep the changes?",
            "Can you explain what a race condition is in simple terms?",
        ),
        (
            "I'm fairly new to this.",
            "It's for a small script at work, nothing fancy.",
            "I'd like to understand it, not just copy a fix.",
        ),
        (
            "That error means you access an index past the end of the list, often because the "
            "file ends with an empty line.",
            "Use pd.read_csv with skiprows=2, and check the header row afterwards.",
            "Lists can be changed after they're created and tuples cannot, which makes tuples "
            "usable as dictionary keys.",
            "A LEFT JOIN repeats a row once for every match on the right side, so a one-to-many "
            "relationship multiplies your rows.",
            "git reset --soft HEAD~1 moves the branch back one commit and leaves your changes "
            "staged.",
            "A race condition happens when two threads touch the same data and the result "
            "depends on which one gets there first.",
            "Adding a small test that reproduces the bug first makes the fix much easier to trust.",
            "Print the length of the list just before the failing line to see what's going on.",
        ),
    ),
    "money": (
        (
            "How much of my salary should I be putting into savings each month?",
            "Is it better to pay off my student loan early or invest the extra money?",
            "What's a simple way to track my spending without a complicated app?",
            "Should I switch to a fixed-rate energy tariff right now?",
            "How do index funds actually work?",
        ),
        (
            "I'm in my early thirties.",
            "I don't have much of an emergency fund yet.",
            "Keep it simple please, I'm not a finance person.",
        ),
        (
            "A common rule of thumb is to save around twenty percent, but building an emergency "
            "fund of three to six months of expenses comes first.",
            "If the loan's interest rate is lower than what you could reasonably expect from "
            "investing, investing usually comes out ahead over the long run.",
            "A spreadsheet with one row per week and five spending categories is enough for "
            "most people.",
            "Fixed tariffs trade a slightly higher price for predictability; compare the unit "
            "rates and the exit fees.",
            "An index fund buys every company in an index, so you own a small slice of the "
            "whole market at a low fee.",
            "Automating the transfer on payday makes saving much easier to stick to.",
            "Check whether your employer matches pension contributions; that's free money.",
        ),
    ),
    "fitness": (
        (
            "I want to start running. How do I avoid getting injured in the first month?",
            "What's a good beginner strength routine I can do at home?",
            "How many rest days should I take per week?",
            "Is stretching before a run actually useful?",
            "My knees hurt after cycling. Is my saddle too low?",
        ),
        (
            "I used to play football but haven't exercised in years.",
            "I can do about three sessions a week.",
            "I don't have any equipment apart from a yoga mat.",
        ),
        (
            "Start with run-walk intervals three times a week and increase the total time by no "
            "more than ten percent a week.",
            "Squats, push-ups, lunges, glute bridges and planks cover most of the body without "
            "equipment.",
            "One or two rest days a week is plenty for most beginners, and easy walks count as "
            "rest.",
            "A short dynamic warm-up such as leg swings and a few minutes of easy jogging helps "
            "more than static stretching.",
            "Knee pain at the front often means the saddle is too low; at full extension your "
            "leg should be almost straight.",
            "Sleep and protein matter as much as the workouts themselves.",
            "Keep a short log of what you did so you can see progress after a few weeks.",
        ),
    ),
    "writing": (
        (
            "Can you help me write a polite email asking my manager for a day off next Friday?",
            "How do I make my cover letter sound less generic?",
            "Could you shorten this paragraph for a newsletter?",
            "What's a good way to open a speech at a retirement party?",
            "How do I say no to a colleague's request without sounding rude?",
        ),
        (
            "The tone should be friendly but professional.",
            "It needs to fit in about a hundred words.",
            "My manager is quite formal.",
        ),
        (
            "Keep it short: state the date, offer to hand over anything urgent, and thank them.",
            "Open with one concrete achievement that matches the job ad instead of a general "
            "statement about being passionate.",
            "Cut the filler phrases and lead with the most important sentence.",
            "A short personal story about the person usually lands better than a joke.",
            "Acknowledge the request, explain briefly that you can't take it on, and suggest an "
            "alternative if you have one.",
            "Reading the text aloud once is the quickest way to catch clumsy sentences.",
            "End with a clear next step so the reader knows what you need from them.",
        ),
    ),
    "home": (
        (
            "How do I fix a dripping kitchen tap?",
            "What's the best way to get rid of mould on a bathroom ceiling?",
            "Should I paint the walls or the skirting boards first?",
            "How do I bleed a radiator?",
            "Any tips for soundproofing a bedroom that faces a busy street?",
        ),
        (
            "I rent, so nothing too permanent.",
            "I'm not very handy, to be honest.",
            "I have a basic toolbox.",
        ),
        (
            "A dripping tap usually needs a new washer or cartridge; turn off the water under "
            "the sink first.",
            "Clean the mould with a diluted bleach solution and improve ventilation, otherwise "
            "it comes back.",
            "Paint the ceiling first, then the walls, and do the skirting boards last.",
            "Turn the heating off, hold a cloth under the valve and open it a quarter turn with "
            "a radiator key until water comes out.",
            "Heavy curtains and sealing gaps around the window frame make a noticeable difference.",
            "Take a photo before you take anything apart so you know how it goes back together.",
            "Most hardware stores will match a part if you bring the old one in.",
        ),
    ),
    "garden": (
        (
            "When should I plant tomatoes outside?",
            "Why are the leaves on my basil turning yellow?",
            "What vegetables are easy to grow on a small balcony?",
            "How do I start a compost bin?",
        ),
        (
            "The balcony gets sun in the afternoon.",
            "I've never grown anything before.",
            "I'd rather not use chemicals.",
        ),
        (
            "Plant tomatoes out once night temperatures stay above ten degrees, usually late "
            "spring.",
            "Yellow basil leaves usually mean too much water; let the top of the soil dry out "
            "between waterings.",
            "Lettuce, radishes, cherry tomatoes and herbs do well in containers.",
            "Mix green material like vegetable scraps with brown material like cardboard, and "
            "turn it every couple of weeks.",
            "Containers dry out fast in summer, so check them every day.",
            "A layer of mulch keeps the soil moist and the weeds down.",
        ),
    ),
}


def _filler_pair(rng: random.Random) -> tuple[str, str]:
    topic = rng.choice(sorted(_TOPICS))
    openers, followups, answers = _TOPICS[topic]
    user = [rng.choice(openers)]
    if rng.random() < 0.7:
        user.append(rng.choice(followups))
    ai = rng.sample(answers, k=rng.randint(3, min(6, len(answers))))
    return " ".join(user), " ".join(ai)


@dataclass(frozen=True)
class PlantedSettings:
    #: conversation lengths in messages (even: human/AI pairs)
    lengths: tuple[int, ...] = (200, 500, 1_000)
    #: depths in messages before the question at which facts are planted (those < length)
    depths: tuple[int, ...] = (10, 40, 100, 200, 400, 800)
    #: facts planted at each depth (a couple of turns apart)
    facts_per_depth: int = 2
    #: conversations per length, each with its own seed
    seeds: tuple[int, ...] = (0, 1, 2, 3)
    #: distinct filler pairs shared by all conversations
    pool: int = 600
    #: share of the facts that can be split that are told in two turns (value, then meaning)
    split_rate: float = 0.5


def planted_conversations(settings: PlantedSettings = PlantedSettings()) -> list[Conversation]:
    """One conversation per (length, seed), facts at every depth below the length."""
    pool_rng = random.Random(1_000_003)
    pool: list[tuple[str, str]] = []
    seen: set[str] = set()
    while len(pool) < settings.pool:
        pair = _filler_pair(pool_rng)
        if pair[1] not in seen:
            seen.add(pair[1])
            pool.append(pair)
    out: list[Conversation] = []
    for length in settings.lengths:
        if length % 2 or length < 4:
            raise ValueError(f"conversation length must be even and >= 4, got {length}")
        for seed in settings.seeds:
            out.append(_planted(length, seed, settings, pool))
    return out


def _planted(
    length: int, seed: int, settings: PlantedSettings, pool: Sequence[tuple[str, str]]
) -> Conversation:
    rng = random.Random(seed * 7_919 + length)
    name = f"planted-{length}-s{seed}"
    pairs = length // 2
    if pairs > len(pool):
        raise ValueError(f"a pool of {len(pool)} filler pairs is too small for {length} messages")
    chosen = rng.sample(range(len(pool)), pairs)
    texts: list[list[str]] = [list(pool[i]) for i in chosen]
    facts = _facts(rng)
    rng.shuffle(facts)
    # plant slots: pair index counted from the end; depth d (messages before the question, even)
    # is the pair whose human message is d messages before the end. Facts at one depth are three
    # pairs apart, so a split fact's second turn and every neighbour stay filler.
    plans: list[tuple[int, _Fact, int, bool]] = []  # (pair index, fact, depth, split)
    taken: set[int] = set()
    for depth in settings.depths:
        for j in range(settings.facts_per_depth):
            d = depth + 6 * j
            d += d % 2
            index = pairs - d // 2
            if index < 1 or index in taken or not facts:
                continue
            fact = facts.pop()
            split = fact.split is not None and index + 1 < pairs
            split = split and rng.random() < settings.split_rate
            taken.update((index, index + 1) if split else (index,))
            plans.append((index, fact, d, split))
    for index, fact, _, split in plans:
        if split:
            assert fact.split is not None
            value, meaning = fact.split
            texts[index] = [rng.choice(_HOLD).format(value=value), _HOLD_AI.format(value=value)]
            texts[index + 1] = [meaning, rng.choice(_ACKS)]
        else:
            user, ai = fact.plant
            texts[index] = [user, ai if ai is not None else rng.choice(_ACKS)]
    # one distractor per fact, prepended to a filler user turn away from every plant
    free = [i for i in range(pairs) if all(abs(i - t) > 1 for t in taken)]
    for _, fact, _, _ in plans:
        if not free:
            break
        i = free.pop(rng.randrange(len(free)))
        texts[i][0] = f"{fact.distractor} {texts[i][0]}"
    messages: list[BaseMessage] = []
    for i, (user, ai) in enumerate(texts):
        messages.append(HumanMessage(user, id=f"{name}-h{i}"))
        messages.append(AIMessage(ai, id=f"{name}-a{i}"))
    questions: list[Question] = []
    for n, (index, fact, d, split) in enumerate(sorted(plans, key=lambda p: -p[2])):
        ai_holds = fact.plant[1] is not None and not split
        if ai_holds:
            relevant: tuple[str, ...] = (f"{name}-a{index}",)
        else:
            relevant = (f"{name}-h{index}", f"{name}-a{index}") if split else (f"{name}-h{index}",)
        evidence = [str(messages[2 * index + (1 if ai_holds else 0)].content)]
        text = rng.choice(fact.questions)
        questions.append(
            Question(
                qid=f"{name}-q{n}-{fact.key}",
                text=text,
                relevant=relevant,
                kind="planted-split" if split else "planted-ai" if ai_holds else "planted-user",
                topic=fact.key,
                depth=d - 1 if ai_holds or split else d,
                overlap=_overlap(text, evidence),
            )
        )
    return Conversation(
        name=name,
        source="planted",
        messages=tuple(messages),
        questions=tuple(questions),
        info={
            "length": length,
            "seed": seed,
            "facts": len(plans),
            "split": sum(1 for p in plans if p[3]),
        },
    )
