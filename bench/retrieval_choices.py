"""Two sections of the retrieval benchmark's report: how Retrieval's defaults were chosen (each
default against the settings it beat) and the turns that need nothing from the past (small talk,
the min_score floor, the best dense scores); ``bench/retrieval_report.py`` renders the rest.
"""

from __future__ import annotations

from typing import Any

from bench.harness import md_table, median_p90, num, pct
from bench.retrieval_config import (
    ALL_FACTS_TARGET,
    ANCHOR_ALL_FACTS_BEFORE,
    ANCHOR_FACTS_BEFORE,
    BEFORE,
    DATASET_TITLES,
    EVIDENCE_TARGET,
    FACTS_TARGET,
    GATE_ALWAYS,
    GOALS_DATASET,
    HEADLINE,
    LENDING,
    SMALL_TALK_TARGET,
    WHOLE_TURNS,
    _display,
)


def _short(label: str) -> str:
    """A hybrid row's label without the wrapper's name (the default row: "hybrid, defaults")."""
    if label == HEADLINE:
        return "hybrid, defaults"
    return _display(label).removeprefix("TokenBudget + Retrieval ")


def _points(value: float | None, reference: float | None) -> str:
    if value is None or reference is None:
        return "n/a"
    return f"{(value - reference) * 100:+.1f} points"


def _meets_goals(cell: dict[str, Any]) -> bool:
    return (cell.get("fact_recall") or 0.0) >= FACTS_TARGET and (
        cell.get("all_facts_available") or 0.0
    ) >= ALL_FACTS_TARGET


def _yes(flag: bool) -> str:
    return "yes" if flag else "no"


def _choices(results: dict[str, Any]) -> list[tuple[str, str, dict[str, Any], dict[str, Any]]]:
    """The rows that put a default to the test: (default, label, A' cell, B cell), the default
    row first, then the e2e rows, then the min_score floors."""
    a_cells, b_cells = results["evidence"][GOALS_DATASET], results["evidence"]["planted"]
    rows = [
        (cell["retrieval"]["choice"], label, cell, b_cells[label])
        for label, cell in a_cells.items()
        if cell.get("retrieval") and cell["retrieval"]["choice"]
    ]
    for entry in results["small_talk"]["min_score_sweep"]:
        if entry["min_score"] is not None:
            rows.append(("min_score", entry["label"], entry[GOALS_DATASET], entry["planted"]))
    return rows


#: the headers of :func:`_goal_cells`
GOAL_HEADERS = ("A' evidence", "A' facts", "A' all facts", "A' tokens", "B evidence", "B tokens")


def _goal_cells(a: dict[str, Any], b: dict[str, Any]) -> list[str]:
    """A' (``a``: evidence, facts, all facts, tokens retrieved) and B (``b``: evidence, tokens
    retrieved) of one configuration, as table cells."""
    return [
        pct(a["evidence_available"]),
        pct(a["fact_recall"]),
        pct(a["all_facts_available"]),
        num(a["retrieved_tokens"]["median"]),
        pct(b["evidence_available"]),
        num(b["retrieved_tokens"]["median"]),
    ]


def _defaults_section(results: dict[str, Any], context: int, budget: int) -> list[str]:
    small = results["small_talk"]["configs"]
    rows = []
    for choice, label, a, b in _choices(results):
        rows.append(
            [
                choice,
                _short(label),
                *_goal_cells(a, b),
                num(small.get(label, {}).get("cri", {}).get("tokens_added", {}).get("median")),
            ]
        )
    lines = [
        "### How the defaults were chosen",
        "",
        "Every default of `Retrieval` was chosen on CRI first person (A') and the planted data "
        "(B) only, never on LoCoMo. Each row below changes one default of the hybrid row (all "
        "figures from this run; tokens = the context message, median over the questions; small "
        "talk = the median over the turns of the next section, asked after the CRI thread).",
        "",
    ]
    lines += md_table(
        [
            "default",
            "configuration",
            *GOAL_HEADERS,
            "small talk tokens",
        ],
        rows,
    )
    lines.append("")
    sentences = _default_sentences(budget, context, results)
    return [*lines, *sentences, ""]


# long: one sentence per default, each written only when its row was measured
def _default_sentences(budget: int, context: int, results: dict[str, Any]) -> list[str]:
    """One sentence per default: what it buys against its alternatives."""
    a_cells, b_cells = results["evidence"][GOALS_DATASET], results["evidence"]["planted"]
    d, db = a_cells[HEADLINE], b_cells[HEADLINE]

    def against(label: str) -> str:
        a, b = a_cells[label], b_cells[label]
        return (
            f"A' facts {pct(a['fact_recall'])} ({_points(a['fact_recall'], d['fact_recall'])}), "
            f"every fact {pct(a['all_facts_available'])} "
            f"({_points(a['all_facts_available'], d['all_facts_available'])}), B evidence "
            f"{pct(b['evidence_available'])} "
            f"({_points(b['evidence_available'], db['evidence_available'])})"
        )

    def tokens(label: str) -> str:
        return num(a_cells[label]["retrieved_tokens"]["median"])

    low, high = f"{HEADLINE}, 600 tokens", f"{HEADLINE}, 1,500 tokens"
    whole = WHOLE_TURNS
    five, near = f"{HEADLINE}, k=5", f"{HEADLINE}, neighbors=1"
    small = results["small_talk"]["configs"]

    def small_talk(label: str) -> str:
        return num(small.get(label, {}).get("cri", {}).get("tokens_added", {}).get("median"))

    sentences = [
        f"- **The defaults** (k=None, {context:,} context tokens, compact packing, no "
        f"neighbours, no min_score): A' facts {pct(d['fact_recall'])}, every fact "
        f"{pct(d['all_facts_available'])}, B evidence {pct(db['evidence_available'])}, "
        f"{tokens(HEADLINE)} tokens added (median, A').",
    ]
    if low in a_cells and high in a_cells:
        sentences.append(
            f"- **Context budget: a quarter of the request** ({context:,} of {budget:,} tokens). "
            f"At 600 tokens: {against(low)}; at 1,500 tokens: {against(high)}, for "
            f"{tokens(high)} tokens added against {tokens(HEADLINE)}. A' goals (facts >= "
            f"{FACTS_TARGET:.0%}, every fact >= {ALL_FACTS_TARGET:.0%}) met at 600 / "
            f"{context:,} / 1,500 tokens: {_yes(_meets_goals(a_cells[low]))} / "
            f"{_yes(_meets_goals(d))} / {_yes(_meets_goals(a_cells[high]))}."
        )
    if whole in a_cells:
        kinds = "planted-ai", "planted-split", "planted-user"

        def by_kind(label: str) -> str:
            return " / ".join(pct(b_cells[label]["by_kind"].get(kd)) for kd in kinds)

        sentences.append(
            "- **Compact packing** (a turn whose user message says enough comes back as that "
            "message and the reply's sentences that share a word with the query; a short "
            "follow-up or a short answer comes with the turn before it; tool rounds, and every "
            "turn when the question is about what the assistant said, come back whole): whole "
            f"turns at the same budget give {against(whole)}. On B by kind "
            f"({' / '.join(kinds)}): {by_kind(HEADLINE)} compact, {by_kind(whole)} whole turns."
        )
    if five in a_cells:
        sentences.append(
            "- **k by budget** (k=None: as many turns as fit, from "
            f"{results['meta'].get('resolved', {}).get('candidates', 'n/a')} candidates per "
            f"ranking): k=5 gives {against(five)}, with {tokens(five)} tokens added against "
            f"{tokens(HEADLINE)}."
        )
    if near in a_cells:
        sentences.append(
            f"- **Neighbours off**: neighbors=1 gives {against(near)}, with {tokens(near)} "
            f"tokens added against {tokens(HEADLINE)}: a neighbour only takes the budget the "
            "results leave, and with k=None the results fill it."
        )
    if BEFORE in a_cells:
        sentences.append(
            "- **All five as before issue 15** (k=5, 600 tokens, neighbours, whole turns, "
            f"no gate): "
            f"{against(BEFORE)}. The issue's figures before were {ANCHOR_FACTS_BEFORE:.1%} / "
            f"{ANCHOR_ALL_FACTS_BEFORE:.1%} (facts / every fact, A'); this row cannot switch off "
            "the per-message vectors of the dense index, so it ranks with them."
        )
    if LENDING in a_cells:
        sentences.append(
            "- **Budget that follows the question** (`past_tokens`, opt-in): with "
            "past_tokens=2,250, a question about the past may spend twice the context budget, "
            "lent by the view's oldest turns for that request only: "
            f"{against(LENDING)}, with {tokens(LENDING)} tokens added against "
            f"{tokens(HEADLINE)}. Not a default: on the requests it lends, the lent turns are "
            "neither folded nor retrievable (B loses the facts told a few dozen messages "
            "before the question, which sit in the view's oldest turns), and the prompt's "
            "prefix changes (DESIGN's invariants 3 and 6)."
        )
    if GATE_ALWAYS in a_cells:
        sentences.append(
            "- **gate='auto'** (the memory is searched when the question refers to the speaker "
            "or the conversation, names something the memory holds, or matches an evicted turn "
            f"with a dense similarity >= 0.6): small talk {small_talk(HEADLINE)} tokens "
            f"(median) against {small_talk(GATE_ALWAYS)} with gate='always', which gives "
            f"{against(GATE_ALWAYS)}. The cue words were written on CRI's and the planted "
            "questions' wording (English); a query without an English function word is "
            "always searched."
        )
    sentences.append("- **min_score off** (no floor): " + _floor_sentence(results) + ".")
    return sentences


def _floor_sentence(results: dict[str, Any]) -> str:
    sweep = [e for e in results["small_talk"]["min_score_sweep"] if e["min_score"] is not None]
    if not sweep:
        return "no floor was measured in this run"
    parts = []
    good = []
    for e in sweep:
        small = e["small_talk"]["cri"]["tokens_added"]["median"]
        a, b = e[GOALS_DATASET], e["planted"]
        parts.append(
            f"at {e['min_score']:g}, small talk {num(small)} tokens (median), A' facts "
            f"{pct(a['fact_recall'])} / every fact {pct(a['all_facts_available'])}, B "
            f"evidence {pct(b['evidence_available'])}"
        )
        if (
            small is not None
            and small <= SMALL_TALK_TARGET
            and _meets_goals(a)
            and (b["evidence_available"] or 0.0) > EVIDENCE_TARGET
        ):
            good.append(f"{e['min_score']:g}")
    verdict = (
        "no floor measured here (with gate='always') brings small talk to the goal while "
        "keeping the A' goals and B's target, so the default is no floor"
        if not good
        else f"min_score={', '.join(good)} meets every goal on this data, but a floor depends on "
        "the embedder and the data (see the scores below), so the default stays None"
    )
    return "; ".join(parts) + f": {verdict}"


def _small_talk_section(results: dict[str, Any]) -> list[str]:
    st = results["small_talk"]
    turns = st["turns"]
    default = st["configs"][HEADLINE]
    where_label = {
        "cri": f"after the CRI thread (`{st['places']['cri']}`)",
        "planted": f"after a planted conversation (`{st['places']['planted']}`)",
    }
    searched = default["cri"]["searched"]
    lines = [
        "## Turns that need nothing from the past",
        "",
        f"{len(turns)} turns that need nothing from the conversation (small talk, thanks, "
        "general knowledge), written for this bench and not drawn from any data set "
        "(`SMALL_TALK` in `bench/retrieval.py`), each asked on its own after the end of the CRI "
        "thread and after the first planted conversation, through the default hybrid "
        f"`Retrieval`. {searched} of them have at least 3 words and are searched at all "
        "(`min_query_length`); the others add nothing by design.",
        "",
    ]
    rows = []
    for where, agg in default.items():
        rows.append(
            [
                where_label.get(where, where),
                f"{agg['with_context']} of {agg['asks']}",
                median_p90(agg["tokens_added"], digits=0),
                num(agg["tokens_added_mean"]),
                num(agg["retrieved_turns_median"]),
            ]
        )
    lines += md_table(
        [
            "asked",
            "with a context message",
            "tokens added (median / p90)",
            "mean",
            "retrieved turns (median)",
        ],
        rows,
    )
    lines.append("")
    lines += _min_score_lines(default, st)
    lines += _top_score_lines(st, turns)
    return lines


def _min_score_lines(default: Any, st: Any) -> list[str]:
    """Section: what a min_score floor saves and what it costs."""
    lines: list[str] = []
    median = default["cri"]["tokens_added"]["median"]
    met = median is not None and median <= SMALL_TALK_TARGET
    lines += [
        f"The issue's goal, a median of at most {SMALL_TALK_TARGET} tokens added on such turns "
        f"(CRI first person), is {'met' if met else '**not met**'} with the defaults: "
        f"{num(median)} tokens after the CRI thread, "
        f"{num(default['planted']['tokens_added']['median'])} after the planted conversation. "
        "The gate (`gate='auto'`) searches the memory only when a turn refers to the speaker "
        "or the conversation, names something the memory holds or matches an evicted turn "
        "strongly; with `gate='always'` every searched query retrieves the best evicted turns, "
        "however poor the match, and with k=None they fill the context budget.",
        "",
        "### min_score: what a floor saves and what it costs",
        "",
        "The default hybrid row with `gate='always'` and a floor on the dense similarity "
        "(`min_score`: when no evicted turn or fact reaches it, nothing is retrieved), so the "
        "floor alone decides. Small talk: median tokens "
        "added and how many of the turns still get a context message; A' and B: as in the "
        "evidence tables.",
        "",
    ]
    rows = []
    for e in st["min_score_sweep"]:
        a, b = e[GOALS_DATASET], e["planted"]
        cri, planted = e["small_talk"]["cri"], e["small_talk"]["planted"]
        rows.append(
            [
                "None (default)" if e["min_score"] is None else f"{e['min_score']:g}",
                f"{num(cri['tokens_added']['median'])} ({cri['with_context']} of {cri['asks']})",
                f"{num(planted['tokens_added']['median'])} "
                f"({planted['with_context']} of {planted['asks']})",
                *_goal_cells(a, b),
            ]
        )
    lines += md_table(
        [
            "min_score",
            "small talk after CRI: tokens (with context)",
            "small talk after planted",
            *GOAL_HEADERS,
        ],
        rows,
    )
    return lines


def _top_score_lines(st: Any, turns: Any) -> list[str]:
    """Section: the best dense score of real questions against small talk."""
    lines: list[str] = []
    lines += ["", "### Best dense score: real questions against small talk", ""]
    scores = st["top_scores"]
    lines += [
        "The best dense similarity (MiniLM cosine, max-pooled over a turn's messages) among the "
        "evicted turns and facts each query was ranked against: the value `min_score` is "
        "compared with (default hybrid row; queries too short to be searched have none).",
        "",
    ]
    named = [
        (f"questions, {DATASET_TITLES[GOALS_DATASET]}", scores["questions"][GOALS_DATASET]),
        (f"questions, {DATASET_TITLES['planted']}", scores["questions"]["planted"]),
        ("small talk after the CRI thread", scores["small_talk"]["cri"]),
        ("small talk after a planted conversation", scores["small_talk"]["planted"]),
    ]
    lines += md_table(
        ["queries", "n", "min", "median", "max"],
        [
            [label, str(c["n"]), num(c["min"], 2), num(c["median"], 2), num(c["max"], 2)]
            for label, c in named
        ],
    )
    lows = [c["min"] for _, c in named[:2] if c["min"] is not None]
    highs = [c["max"] for _, c in named[2:] if c["max"] is not None]
    if lows and highs:
        separable = max(highs) < min(lows)
        lines += [
            "",
            f"The lowest score of a real question is {min(lows):.2f} and the highest of small "
            f"talk {max(highs):.2f}: "
            + (
                "a floor between them would separate the two on this data."
                if separable
                else "the two overlap, so no single floor keeps every question and drops all "
                "the small talk."
            ),
        ]
    lines += ["", "The turns: " + " · ".join(f"“{t}”" for t in turns) + ".", ""]
    return lines
