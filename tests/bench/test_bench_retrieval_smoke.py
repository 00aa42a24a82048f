"""The retrieval benchmark runs end to end with ``--quick`` and fills every field; its data sets
have the shape the benchmark relies on (no claims about recall or timing: a run this small says
nothing about them)."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

from langchain_core.embeddings import Embeddings
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage

from bench.retrieval import main
from bench.retrieval_config import (
    BEFORE,
    GOALS_DATASET,
    HEADLINE,
    REF_RANKINGS,
    SMALL_TALK,
    TARGET_DATASETS,
    _e2e_configs,
)
from bench.retrieval_data import load_cri, load_cri_facts
from bench.retrieval_measure import CachedEmbeddings, turns_of
from bench.retrieval_planted import PlantedSettings, planted_conversations


class _Counting(Embeddings):
    def __init__(self) -> None:
        self.seen: list[str] = []

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        self.seen += texts
        return [[float(len(t)), 1.0] for t in texts]

    def embed_query(self, text: str) -> list[float]:
        return self.embed_documents([text])[0]


def test_cached_embeddings_embed_each_text_once() -> None:
    inner = _Counting()
    cached = CachedEmbeddings(inner)
    assert cached.embed_documents(["a", "bb", "a"]) == [[1.0, 1.0], [2.0, 1.0], [1.0, 1.0]]
    assert cached.embed_query("bb") == [2.0, 1.0]
    assert inner.seen == ["a", "bb"] and cached.embedded == 2
    assert cached.uncached().embed_query("bb") == [2.0, 1.0] and inner.seen[-1] == "bb"


def test_turns_are_a_human_message_and_what_follows_it() -> None:
    ai = AIMessage("", id="a1", tool_calls=[{"name": "t", "args": {}, "id": "c1"}])
    messages = [
        HumanMessage("hi", id="h1"),
        ai,
        ToolMessage("42", tool_call_id="c1", id="t1"),
        AIMessage("it is 42", id="a2"),
        HumanMessage("thanks", id="h2"),
    ]
    turns = turns_of(messages)
    assert [t.ids for t in turns] == [("h1", "a1", "t1", "a2"), ("h2",)]
    assert turns[0].text.startswith("user: hi") and "it is 42" in turns[0].text
    # one vector per message, as Retrieval embeds them
    assert turns[0].parts == (
        "user: hi",
        "assistant called t({})",
        "tool result: 42",
        "assistant: it is 42",
    )


def test_cri_thread_and_questions_come_from_the_installed_package() -> None:
    cri = load_cri()
    assert cri.info["messages"] == len(cri.messages) == 2_862 and cri.info["sessions"] == 665
    ids = {str(m.id) for m in cri.messages}
    assert len(ids) == len(cri.messages)
    assert len(cri.questions) >= 20 and {q.kind for q in cri.questions} == {
        "cri-query",
        "cri-change",
        "cri-conflict",
    }
    for q in cri.questions:
        assert q.relevant and set(q.relevant) <= ids and 1 <= q.depth <= len(cri.messages)


def test_cri_facts_are_located_by_the_audited_matchers() -> None:
    """CRI's 20 queries with fact-level evidence: 63 of its 64 expected facts are stated in the
    thread ("reflective" is not); spot checks against messages read in the audit."""
    end = load_cri_facts()
    assert len(end.questions) == 20 and end.info["facts_in_dataset"] == 64
    assert end.info["facts"] == 63 and end.info["facts_without_evidence"] == [
        "qrp-adv-13: reflective"
    ]
    ids = {str(m.id) for m in end.messages}
    for q in end.questions:
        assert q.facts and set(q.relevant) == {i for _, fact_ids in q.facts for i in fact_ids}
        assert set(q.relevant) <= ids and q.kind == "asked after message end"
    facts = {
        (q.qid.split("@")[0], fact): set(fact_ids)
        for q in end.questions
        for fact, fact_ids in q.facts
    }
    text = {str(m.id): str(m.content) for m in end.messages}
    assert "cri-37" in facts[("qrp-adv-19", "41")]
    assert "41" in text["cri-37"]
    assert facts[("qrp-adv-15", "purchased for $368K")] <= {"cri-2461", "cri-2472"}
    assert all("368" in text[i] for i in facts[("qrp-adv-15", "purchased for $368K")])
    assert all("flex" in text[i].lower() for i in facts[("qrp-adv-05", "flexitarian")])
    # asked earlier, the thread and the evidence are cut there: nothing about Elena yet
    early = load_cri_facts(upto=1_200, first_person=True)
    assert len(early.messages) == 1_200 and all(q.qid.endswith("@1200") for q in early.questions)
    assert "qrp-adv-20" not in {q.qid.split("@")[0] for q in early.questions}
    assert all(int(i[4:]) <= 1_200 for q in early.questions for i in q.relevant)
    assert {q.text for q in early.questions} >= {"How old am I?", "What's my diet?"}


def test_planted_questions_point_at_their_fact_at_the_stated_depth() -> None:
    settings = PlantedSettings(lengths=(200,), depths=(10, 40, 100), seeds=(0, 1), pool=150)
    conversations = planted_conversations(settings)
    assert conversations == planted_conversations(settings)  # seeded
    for conversation in conversations:
        position = {str(m.id): i for i, m in enumerate(conversation.messages)}
        assert len(position) == len(conversation.messages) == 200
        assert len(conversation.questions) == 6
        for q in conversation.questions:
            newest = max(position[mid] for mid in q.relevant)
            assert len(conversation.messages) - newest == q.depth


def test_quick_run_writes_complete_results(tmp_path: Path) -> None:
    assert main(["--quick", "--out", str(tmp_path)]) == 0
    md = (tmp_path / "retrieval_quick.md").read_text(encoding="utf-8")
    results = json.loads((tmp_path / "retrieval_quick.json").read_text(encoding="utf-8"))

    for heading in (
        "## Verdict",
        "### How the defaults were chosen",
        "## Evidence available at a fixed budget",
        "## Turns that need nothing from the past",
        "### min_score: what a floor saves and what it costs",
        "## Recall@k over the evicted turns",
        "## Tokens added per turn",
        "## Query latency and index time",
    ):
        assert heading in md
    assert results["meta"]["mode"] == "quick"
    datasets = {"cri_facts", "cri_facts_1p", "cri", "cri_1p", "planted"}
    assert set(results["recall"]) == set(results["evidence"]) == datasets

    def share(value: float | None) -> None:
        assert value is None or 0.0 <= value <= 1.0

    for groups in results["recall"].values():
        overall = groups["all"]
        assert overall["questions"] > 0 and 0 <= overall["scored"] <= overall["questions"]
        for ranking in REF_RANKINGS:
            for neighbors in ("n0", "n1"):
                for k in ("1", "3", "5", "10"):
                    share(overall[ranking][neighbors][k]["recall"])
                    share(overall[ranking][neighbors][k]["hit"])
    labels = [spec.label for spec in _e2e_configs()]
    assert HEADLINE in labels and BEFORE in labels and len(labels) == len(set(labels))
    for cells in results["evidence"].values():
        assert list(cells) == labels and "TokenBudget alone" in cells
        for cell in cells.values():
            assert cell["questions"] > 0 and cell["within_budget"] is True
            for key in ("evidence_available", "evidence_in_view", "answer_turns_in_input"):
                share(cell[key])
            assert cell["evidence_available"] >= cell["evidence_in_view"]
    # Retrieval's defaults, resolved by asking Retrieval: a quarter of the 4,500-token request
    resolved = results["meta"]["resolved"]
    assert results["meta"]["config"]["context_tokens"] is None
    assert resolved["context_tokens"] == 4_500 // 4 and results["meta"]["config"]["k"] is None
    replay = results["replay"]
    assert replay["turns"] > 0 and replay["over_budget"] == 0
    assert replay["tokens_added"]["p90"] <= resolved["context_tokens"]
    for size in results["latency"]["sizes"].values():
        for name in ("dense", "embed_query", "bm25", "hybrid", "apply"):
            assert size[name]["median"] > 0
    # small talk: every turn asked after both conversations, under every defaults-choice row
    small = results["small_talk"]
    assert small["turns"] == list(SMALL_TALK) and len(SMALL_TALK) >= 25
    for places in small["configs"].values():
        for agg in places.values():
            assert agg["asks"] == len(SMALL_TALK) and 0 <= agg["with_context"] <= agg["asks"]
    sweep = small["min_score_sweep"]
    assert [e["min_score"] for e in sweep] == [None, 0.3, 0.4, 0.5]
    assert (
        sweep[0][GOALS_DATASET]["fact_recall"]
        == (results["evidence"][GOALS_DATASET][HEADLINE]["fact_recall"])
    )
    floors = sweep[1:]  # gate='always' with a floor: a higher floor only ever retrieves less
    for lower, higher in itertools.pairwise(floors):
        assert (
            higher["small_talk"]["cri"]["with_context"]
            <= lower["small_talk"]["cri"]["with_context"]
        )
    # the default row (gate='auto') brings back less small talk than no gate at all
    no_gate = small["configs"]["TokenBudget + Retrieval hybrid, gate='always'"]["cri"]
    assert sweep[0]["small_talk"]["cri"]["with_context"] < no_gate["with_context"]
    for scores in (
        *small["top_scores"]["questions"].values(),
        *small["top_scores"]["small_talk"].values(),
    ):
        assert scores["n"] == 0 or -1.0 <= scores["min"] <= scores["median"] <= scores["max"] <= 1.0
    goals = next(t for t in results["targets"] if t["dataset"] == GOALS_DATASET)
    assert len(goals["checks"]) == 5 and goals["checks"][0]["name"].startswith("evidence")
    assert {t["dataset"] for t in results["targets"]} == set(TARGET_DATASETS)
    for name in ("cri_facts", "cri_facts_1p"):
        for cell in results["evidence"][name].values():
            for key in ("fact_recall", "all_facts_available", "half_facts_available"):
                share(cell[key])
            assert cell["evidence_available"] >= cell["fact_recall"] >= cell["all_facts_available"]
    assert all(isinstance(t["passed"], bool) for t in results["targets"])
