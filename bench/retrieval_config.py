"""The retrieval benchmark's settings: its configs (full and quick), targets and anchors, the
small-talk turns, and the end-to-end configurations it compares (``bench/retrieval.py`` runs
them).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from bench.retrieval_planted import PlantedSettings
from langmem_ext.core.keys import MemoryKey
from langmem_ext.retrieval.config import DENSE_WEIGHT, RRF_K
from langmem_ext.retrieval.strategy import Retrieval

__all__ = [
    "ALL_FACTS_TARGET",
    "ANCHOR_ALL_FACTS_BEFORE",
    "ANCHOR_FACTS_BEFORE",
    "ANCHOR_HYBRID_SHARE",
    "ANCHOR_HYBRID_TOKENS",
    "ANCHOR_TRIMMED_SHARE",
    "BASELINE",
    "BEFORE",
    "BEFORE_SETTINGS",
    "BENCH_KEY",
    "DATASET_TITLES",
    "EVIDENCE_TARGET",
    "FACTS_TARGET",
    "FULL",
    "GATE_ALWAYS",
    "GOALS_DATASET",
    "HEADLINE",
    "JOINED_DATASET",
    "LENDING",
    "MULTI_FACTS",
    "QUICK",
    "RANKINGS",
    "RANKING_LABELS",
    "REF_RANKINGS",
    "ROUND2_ALL_FACTS_TARGET",
    "ROUND2_FACTS_TARGET",
    "ROUND2_PLANTED_TARGET",
    "SMALL_TALK",
    "SMALL_TALK_TARGET",
    "TARGET_DATASETS",
    "WHOLE_TURNS",
    "RetrievalBenchConfig",
    "resolved_candidates",
    "resolved_context_tokens",
]


#: the issue's targets and goals (issue 15: on CRI first person, A', at <= 4,500 tokens)
EVIDENCE_TARGET = 0.70


FACTS_TARGET = 0.85


ALL_FACTS_TARGET = 0.70


#: median tokens retrieval may add on a turn that needs nothing from the past
SMALL_TALK_TARGET = 50


#: the second round's goals (retrieval recall), with the defaults: on A' every fact and the share
#: of facts, the same on its multi-fact questions; on B evidence available, the same on its
#: paraphrased questions
ROUND2_ALL_FACTS_TARGET = 0.80


ROUND2_FACTS_TARGET = 0.90


ROUND2_PLANTED_TARGET = 0.96


#: a multi-fact question has at least this many expected facts (A')
MULTI_FACTS = 2


#: the data set the issue's goals are set on
GOALS_DATASET = "cri_facts_1p"


#: A' questions joined two by two ("What do I do for work, and where do I live?"): the ideas
#: table measures query decomposition on them
JOINED_DATASET = "cri_facts_1p_joined"


#: the issue's anchors
ANCHOR_TRIMMED_SHARE = 0.018


ANCHOR_HYBRID_SHARE = 0.47


ANCHOR_HYBRID_TOKENS = 150


#: the issue's stricter readings before issue 15 (A', hybrid with k=5, 600 tokens, neighbours)
ANCHOR_FACTS_BEFORE = 0.686


ANCHOR_ALL_FACTS_BEFORE = 0.466


RANKINGS = ("dense", "bm25", "hybrid")


#: the reference pipeline also tries fusion with the dense ranking counted twice
REF_RANKINGS = (*RANKINGS, "hybrid_rrf60")


RANKING_LABELS = {"hybrid_rrf60": "hybrid, textbook RRF (k=60, equal weights; not the default)"}


#: the memory key every Retrieval here runs under
BENCH_KEY = MemoryKey("bench", "retrieval", "thread")


#: Turns that need nothing from the past: small talk, acknowledgements and general-knowledge
#: requests. Written for this bench (not drawn from any data set); each is asked on its own after
#: the end of a conversation, where retrieval should add (next to) nothing.
SMALL_TALK: tuple[str, ...] = (
    "thanks, that helps a lot",
    "good morning! how are you today?",
    "sounds good, let's go with that",
    "can you write a haiku about autumn leaves?",
    "what's 17 times 23?",
    "translate good night into French please",
    "tell me a joke about cats",
    "perfect, that works for me",
    "what is the capital of Australia?",
    "how do I boil an egg?",
    "explain what a black hole is in simple terms",
    "recommend a good sci-fi novel",
    "convert 5 miles to kilometers",
    "who painted the Mona Lisa?",
    "yes please do that",
    "let's move on to something else",
    "ok thanks",
    "great, thank you so much!",
    "what does the word serendipity mean?",
    "give me a synonym for happy",
    "how many days are in a leap year?",
    "what's the difference between weather and climate?",
    "write a limerick about a sleepy dog",
    "how do you say thank you in Japanese?",
    "what is the boiling point of water in Fahrenheit?",
    "summarize the plot of Romeo and Juliet in two sentences",
    "never mind, forget about it",
    "that's hilarious, tell me another one",
    "who wrote Pride and Prejudice?",
    "explain photosynthesis to a ten-year-old",
)


@dataclass(frozen=True)
class RetrievalBenchConfig:
    mode: str
    #: CRI thread cut after this message id (None: all of it)
    cri_upto: int | None
    planted: PlantedSettings
    #: the whole request: inner view plus retrieved context
    budget: int = 4_500
    #: Retrieval's max_retrieved_tokens (held back from the inner strategy's budget); None:
    #: Retrieval's default (a quarter of the inner budget, 1,125 at 4,500)
    context_tokens: int | None = None
    #: Retrieval's k; None: Retrieval's default (as many turns as fit the context budget)
    k: int | None = None
    #: the reference pipeline's depths, and the one its by-group tables and tokens show
    ks: tuple[int, ...] = (1, 3, 5, 10)
    recall_k: int = 5
    #: how deep each ranking goes before fusion in the reference pipeline
    candidates: int = 40
    #: Retrieval's fusion (its defaults); the reference pipeline also shows textbook RRF
    rrf_k: int = RRF_K
    dense_weight: float = DENSE_WEIGHT
    #: CRI user turns replayed through Retrieval turn by turn (None: all)
    replay_turns: int | None = None
    latency_sizes: tuple[int, ...] = (1_000, 10_000)
    latency_queries: int = 40
    index_turns: int = 100
    #: the fake summary's size for SummaryBuffer + Retrieval
    summary_tokens: int = 300
    #: CRI's 20 queries with fact-level evidence are asked after each of these messages (None:
    #: the last); the thread is cut there and so is the evidence
    cri_fact_cuts: tuple[int | None, ...] = (1_200, 1_800, 2_400, None)
    #: the min_score floors measured on small talk, A' and B (None: no floor, the default)
    min_scores: tuple[float | None, ...] = (None, 0.3, 0.4, 0.5)


FULL = RetrievalBenchConfig(mode="full", cri_upto=None, planted=PlantedSettings())


QUICK = replace(
    FULL,
    mode="quick",
    cri_upto=600,
    planted=PlantedSettings(lengths=(200,), depths=(10, 40, 100), seeds=(0,), pool=150),
    replay_turns=120,
    cri_fact_cuts=(400, 600),
    latency_sizes=(300,),
    latency_queries=8,
    index_turns=8,
)


def resolved_context_tokens(config: RetrievalBenchConfig) -> int:
    """The context budget the run uses: ``config.context_tokens``, else Retrieval's default for
    ``TokenBudget(config.budget)`` (asked of Retrieval itself, so it follows the library)."""
    if config.context_tokens is not None:
        return config.context_tokens
    from langgraph.store.memory import InMemoryStore

    from langmem_ext import TokenBudget

    probe = Retrieval(TokenBudget(config.budget), store=InMemoryStore(), key=BENCH_KEY)
    return probe.max_retrieved_tokens


def resolved_candidates(config: RetrievalBenchConfig) -> int:
    """How deep each ranking of the default Retrieval goes (``per_ranking``)."""
    from langgraph.store.memory import InMemoryStore

    from langmem_ext import TokenBudget

    kwargs: dict[str, Any] = {} if config.k is None else {"k": config.k}
    probe = Retrieval(TokenBudget(config.budget), store=InMemoryStore(), key=BENCH_KEY, **kwargs)
    return probe.config.per_ranking


HEADLINE = "TokenBudget + Retrieval hybrid"


BASELINE = "TokenBudget alone"


#: the hybrid row with the budget that follows the question (``past_tokens``: twice the default
#: context budget at 4,500 tokens)
LENDING = f"{HEADLINE}, past_tokens=2,250"


#: the hybrid row with every default as it was before issue 15 (the per-message vectors of the
#: dense index cannot be switched off: this row ranks with them); the label stays short for the
#: docs plot, the tables spell the settings out (``BEFORE_SETTINGS``)
BEFORE = "TokenBudget + Retrieval hybrid as before issue 15"


BEFORE_SETTINGS = "k=5, 600 tokens, neighbors=1, whole turns, no gate; per-message vectors kept"


#: the hybrid row with whole turns (compact=False); short for the docs plot, like ``BEFORE``
WHOLE_TURNS = "TokenBudget + Retrieval hybrid, whole turns"


#: the hybrid row searching the memory for every query (no gate)
GATE_ALWAYS = "TokenBudget + Retrieval hybrid, gate='always'"


_DISPLAY = {BEFORE: f"{BEFORE} ({BEFORE_SETTINGS})", WHOLE_TURNS: f"{WHOLE_TURNS} (compact=False)"}


def _display(label: str) -> str:
    """A configuration's label as the tables show it (the short labels with their settings)."""
    return _DISPLAY.get(label, label)


@dataclass(frozen=True)
class _E2E:
    label: str
    ranking: str | None  # None: no retrieval
    neighbors: int = 0
    inner: str = "TokenBudget"
    #: Retrieval's max_retrieved_tokens (None: the run's config, else Retrieval's default)
    context_tokens: int | None = None
    #: Retrieval's k (None: the run's config, else Retrieval's default)
    k: int | None = None
    compact: bool = True
    min_score: float | None = None
    #: Retrieval's gate ("auto": the default; "always": every query searched)
    gate: str = "auto"
    #: which default this row puts to the test ("How the defaults were chosen"; "" for none)
    choice: str = ""
    #: an idea tried (``bench/retrieval_ideas.py``: the class it runs as; "" for Retrieval)
    idea: str = ""
    #: RetrievalConfig.feedback (pseudo-relevance feedback on the dense side; None: Retrieval's
    #: default, on)
    feedback: bool | None = None
    #: RetrievalConfig.past_tokens (None: Retrieval's default, no lending)
    past_tokens: int | None = None
    #: RetrievalConfig.decompose (query decomposition; on by default)
    decompose: bool = True
    #: RetrievalConfig.query_messages (the messages before the question that join its query)
    query_messages: int = 0


def _e2e_configs() -> list[_E2E]:
    return [
        _E2E(BASELINE, None),
        *(
            _E2E(f"TokenBudget + Retrieval {r}", r, choice="the defaults" if r == "hybrid" else "")
            for r in RANKINGS
        ),
        _E2E(f"{HEADLINE}, neighbors=1", "hybrid", neighbors=1, choice="neighbours off"),
        _E2E(f"{HEADLINE}, 600 tokens", "hybrid", context_tokens=600, choice="context budget"),
        _E2E(f"{HEADLINE}, 1,500 tokens", "hybrid", context_tokens=1_500, choice="context budget"),
        _E2E(WHOLE_TURNS, "hybrid", compact=False, choice="compact packing"),
        _E2E(f"{HEADLINE}, k=5", "hybrid", k=5, choice="k by budget"),
        _E2E(GATE_ALWAYS, "hybrid", gate="always", choice="gate"),
        _E2E(LENDING, "hybrid", past_tokens=2_250, choice="budget follows the question"),
        _E2E(
            BEFORE,
            "hybrid",
            neighbors=1,
            context_tokens=600,
            k=5,
            compact=False,
            gate="always",
            feedback=False,
            decompose=False,
            choice="all five, as before",
        ),
        _E2E("SummaryBuffer (fake) + Retrieval hybrid", "hybrid", inner="Summary"),
    ]


def _min_score_spec(value: float | None) -> _E2E:
    """The default hybrid row with a ``min_score`` floor (None: the default row itself)."""
    if value is None:
        return next(s for s in _e2e_configs() if s.label == HEADLINE)
    # the floor alone decides (the gate would hide what it saves)
    return _E2E(
        f"{HEADLINE}, gate='always', min_score={value:g}",
        "hybrid",
        min_score=value,
        gate="always",
        choice="min_score",
    )


#: the data sets the issue's target is checked on; CRI's key-message records ("cri", "cri_1p")
#: name only a few of the turns that answer a question, so they are reported, not judged
TARGET_DATASETS = ("cri_facts", "cri_facts_1p", "planted")


DATASET_TITLES = {
    "cri_facts": "A. CRI facts, CRI's wording",
    "cri_facts_1p": "A'. CRI facts, first person",
    "cri": "C. CRI key messages, CRI's wording",
    "cri_1p": "C'. CRI key messages, first person",
    "planted": "B. planted facts",
}
