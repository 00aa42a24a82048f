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

**B. Planted facts** (``planted_conversations`` in ``bench/retrieval_planted.py``): seeded
synthetic conversations of everyday assistant chat (cooking, travel, code, money, ...; user turns
of ~15-60 words, assistant turns of ~50-130 words) with facts planted at known depths ("my locker
code is 4471") and, at the end, one question per fact. The questions are paraphrases picked by the
RNG from two to four per fact, some sharing a content word with the planted turn and some sharing
none (see :attr:`Question.overlap`), so lexical search cannot find them all. Some facts are told
by the assistant (a password it suggested, a code it picked): the evidence is then the AI turn and
the words of the question mostly match the user turn before it (what ``neighbors=1`` is for).
Each fact also has a distractor on the same topic somewhere else in the conversation. Filler
turns come from a shared pool, so identical texts recur across conversations and an embedding
cache pays for each once.
"""

from __future__ import annotations

import importlib.util
import itertools
import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
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
    "Question",
    "cri_dataset_dir",
    "joined_questions",
    "load_cri",
    "load_cri_facts",
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


# long: one pass over CRI's records: the thread, then each kind of question in CRI's order
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
    return _cri_conversation(
        (dataset, "", upto, first_person),
        rows,
        messages,
        questions,
        queries_mapped=sum(1 for q in questions if q.kind == "cri-query"),
        queries_in_dataset=len(ground_truth["query_relevance_pairs"]),
    )


def _cri_conversation(
    how: tuple[str, str, int | None, bool],
    rows: Sequence[dict[str, Any]],
    messages: Sequence[BaseMessage],
    questions: Sequence[Question],
    **info: Any,
) -> Conversation:
    """A CRI conversation named after ``how`` (dataset, name suffix, ``upto``, first person),
    its ``info`` the thread's size followed by ``info`` and ``first_person``."""
    dataset, suffix, upto, first_person = how
    return Conversation(
        name=f"cri-{dataset}{suffix}"
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
            **info,
            "first_person": first_person,
        },
    )


# long: one pass over CRI's queries: each fact located, cut at ``upto`` and worded
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
    return _cri_conversation(
        (dataset, "-facts", upto, first_person),
        rows,
        messages,
        questions,
        facts=sum(len(q.facts) for q in questions),
        facts_in_dataset=sum(
            len(p["expected_relevant_facts"]) for p in ground_truth["query_relevance_pairs"]
        ),
        facts_without_evidence=dropped,
    )


def joined_questions(conversation: Conversation) -> Conversation:
    """``conversation`` with each question that has facts joined to the next one ("What do I
    do for work, and where do I live?"): questions that ask two things, whose facts are both
    questions' (query decomposition is measured on them; CRI's own questions ask one thing)."""
    asked = [q for q in conversation.questions if q.facts]
    joined = tuple(
        replace(
            a,
            qid=f"{a.qid}+{b.qid}",
            text=f"{a.text.rstrip('?. ')}, and {b.text[:1].lower()}{b.text[1:]}",
            relevant=tuple(dict.fromkeys((*a.relevant, *b.relevant))),
            facts=(*a.facts, *b.facts),
            depth=min(a.depth, b.depth),
        )
        for a, b in itertools.pairwise(asked)
    )
    return replace(conversation, name=f"{conversation.name}-joined", questions=joined)
