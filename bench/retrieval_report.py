"""The retrieval benchmark's markdown report (``bench/results/retrieval.md``) from its results."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from bench.harness import md_table, median_p90, num, pct
from bench.retrieval_choices import _defaults_section, _small_talk_section
from bench.retrieval_config import (
    ALL_FACTS_TARGET,
    ANCHOR_ALL_FACTS_BEFORE,
    ANCHOR_FACTS_BEFORE,
    ANCHOR_HYBRID_SHARE,
    ANCHOR_HYBRID_TOKENS,
    ANCHOR_TRIMMED_SHARE,
    BASELINE,
    BEFORE,
    DATASET_TITLES,
    EVIDENCE_TARGET,
    FACTS_TARGET,
    GOALS_DATASET,
    HEADLINE,
    JOINED_DATASET,
    RANKING_LABELS,
    RANKINGS,
    REF_RANKINGS,
    SMALL_TALK_TARGET,
    _display,
)


def render_markdown(results: dict[str, Any]) -> str:
    meta, cfg = results["meta"], results["meta"]["config"]
    machine = meta["machine"]
    packages = ", ".join(f"{k} {v}" for k, v in machine["packages"].items())
    data = results["data"]
    resolved = meta.get("resolved", {})
    budget = cfg["budget"]
    context = resolved.get("context_tokens") or cfg["context_tokens"]
    recall_k = cfg.get("recall_k", 5)
    k_text = "None (as many turns as fit)" if cfg["k"] is None else str(cfg["k"])
    lines = ["# Retrieval memory: evicted evidence brought back", ""]
    if meta["mode"] != "full":
        lines += [
            f"> **{meta['mode']} run**: a smoke test on a small subset, not a measurement. Run "
            "`python -m bench.retrieval` for the real numbers.",
            "",
        ]
    lines += _intro_lines(budget, cfg, context, data, k_text, machine, meta, packages)
    lines += _verdict_lines(results)
    lines += _headline_lines(results, budget)
    lines += _defaults_section(results, context, budget)

    # evidence available
    lines += _evidence_lines(results)

    lines += _small_talk_section(results)

    lines += _ideas_lines(results)

    # recall
    lines += _recall_lines(results, budget, cfg, context, recall_k)

    # per turn
    lines += _replay_lines(results, budget, context, k_text)

    # latency
    lines += _latency_lines(results, meta)
    return "\n".join(lines)


# long: one report section: its prose, then its table, in reading order
def _intro_lines(
    budget: Any,
    cfg: Any,
    context: Any,
    data: Any,
    k_text: Any,
    machine: Any,
    meta: Any,
    packages: Any,
) -> list[str]:
    """The data, the method and the settings compared."""
    lines: list[str] = []
    cri_info = data["cri"]["info"][0]
    facts_info = data["cri_facts"]["info"]
    cuts = ", ".join("the end" if c is None else f"{c:,}" for c in cfg.get("cri_fact_cuts", ()))
    lines += [
        f"Data A: CRI `{cri_info['dataset']}` ({data['cri']['messages']:,} messages, "
        f"{cri_info['sessions']} sessions over {cri_info['days']} days, replayed as one thread; "
        f"{data['cri']['tokens']:,} tokens). CRI's own protocol: after the conversation, each "
        "of its 20 queries is judged by whether the memory returns the query's "
        f"*expected relevant facts* ({facts_info[-1]['facts_in_dataset']} facts). We have no LLM "
        "judge, so each fact is located in the thread by hand-written patterns "
        "(`bench/cri_facts.py`, audited message by message in `bench/cri_facts_audit.md`: the "
        "messages that state it); a fact is *available* when one of those messages is in the "
        "model's input. The queries are asked after messages "
        f"{cuts} (the thread and the evidence cut there; facts not yet stated are left out), "
        "twice: in CRI's wording (third person, \"What is Marcus's diet?\") and as the user "
        'would ask in this first-person thread ("What\'s my diet?"). '
        f"Data C: the same thread with {data['cri']['questions']} questions joined to CRI's "
        f"message-level records ({cri_info['queries_mapped']} queries mapped by topic, one "
        "templated question per changed fact and per conflict): CRI names only the two or "
        "three key messages of each change or conflict, not every turn that answers the "
        "question, so these figures are lower bounds; reported, not judged. "
        f"Data B: {data['planted']['conversations']} seeded "
        f"conversation{'s' if data['planted']['conversations'] != 1 else ''} "
        f"({data['planted']['messages']:,} messages, {data['planted']['tokens']:,} tokens) with "
        f"{data['planted']['questions']} planted facts at depths "
        f"{', '.join(map(str, cfg['planted']['depths']))} messages and paraphrased questions. "
        "Every question is asked after the last message. A turn = a human message and the "
        "messages after it up to the next one (what `Retrieval` stores).",
        "",
        f"Budget: {budget:,} tokens for the whole request (tiktoken o200k counts). With "
        f"retrieval, `Retrieval(TokenBudget({budget:,}))` runs with its defaults unless a row "
        f"says otherwise: `max_retrieved_tokens` = a quarter of the inner budget ({context:,} "
        f"tokens, held back for the context message, so the inner view gets "
        f"{budget - context:,}), k={k_text}, compact packing, no neighbours, no `min_score`; "
        "its dense index embeds each message of a turn (max-pooled). Embeddings: "
        f"{meta['embeddings']['model']} (local ONNX), "
        f"{meta['embeddings']['texts_embedded']:,} distinct texts embedded once in "
        f"{meta['embeddings']['seconds']:.0f} s.",
        "",
        f"Machine: {machine['cpu']}, {machine['usable_cores']} usable cores, "
        f"{machine['platform']}, Python {machine['python']}. Packages: {packages}. Load "
        f"average (1/5/15 min) at start {' / '.join(map(str, meta['load_average_start']))}, at "
        f"end {' / '.join(map(str, meta['load_average_end']))}. Run time "
        f"{meta['runtime_s']:.0f} s.",
        "",
        "## Verdict",
        "",
    ]
    return lines


def _ideas_lines(results: dict[str, Any]) -> list[str]:
    """Section: the ideas tried in the second round (retrieval recall), one row each."""
    ideas = results.get("ideas") or []
    if not ideas:
        return []
    lines = [
        "## Ideas tried (second round: retrieval recall)",
        "",
        "Each idea is the default hybrid row with one thing changed (`bench/retrieval_ideas.py`), "
        "measured in this run on A' (CRI facts, first person; multi-fact = its questions with "
        'two facts or more; joined = its questions joined two by two, "What do I do for work, '
        "and where do I live?\", whose facts are both questions') and B (planted facts; "
        "paraphrased = its questions that share no "
        "content word with their evidence), with `gate='auto'`; small talk = the median tokens "
        "added on the small-talk turns after the CRI thread (with a context message: how many "
        "of them). Kept = now one of `Retrieval`'s defaults.",
        "",
    ]
    rows = []
    for idea in ideas:
        a, b, st = idea[GOALS_DATASET], idea["planted"], idea["small_talk"]
        j = idea.get(JOINED_DATASET) or {}
        rows.append(
            [
                idea["what"],
                "yes" if idea["kept"] else "no",
                pct(a["all_facts_available"]),
                pct(a["fact_recall"]),
                pct(a["multi_fact"]["all_facts_available"]),
                pct(a["multi_fact"]["fact_recall"]),
                pct(j.get("all_facts_available")),
                pct(j.get("fact_recall")),
                pct(b["evidence_available"]),
                pct(b["paraphrased"]["evidence_available"]),
                f"{num(st['tokens_added']['median'])} ({st['with_context']} of {st['asks']})",
                num(a["retrieved_tokens"]["median"]),
            ]
        )
    lines += md_table(
        [
            "idea",
            "kept?",
            "A' every fact",
            "A' share",
            "A' multi-fact: every fact",
            "A' multi-fact: share",
            "A' joined: every fact",
            "A' joined: share",
            "B gate=auto",
            "B paraphrased",
            "small talk tokens",
            "A' tokens",
        ],
        rows,
    )
    lines.append("")
    return lines


def _verdict_lines(results: dict[str, Any]) -> list[str]:
    """Section: the verdict of each target."""
    lines: list[str] = []
    rows = []
    for target in results["targets"]:
        for check in target["checks"]:
            value = check["value"]
            shown = check.get("shown") or (pct(value) if isinstance(value, float) else str(value))
            rows.append(
                [
                    DATASET_TITLES[target["dataset"]],
                    check["name"],
                    shown,
                    "PASS" if check["passed"] else "FAIL",
                ]
            )
    lines += md_table(["data", "check", "value", "result"], rows)
    lines.append("")
    return lines


# long: one report section: its prose, then its table, in reading order
def _headline_lines(results: dict[str, Any], budget: Any) -> list[str]:
    """The headline table: each configuration against the issue's figures."""
    lines: list[str] = []
    evidence = results["evidence"]
    names = list(evidence)
    small_talk = results["small_talk"]["configs"][HEADLINE]
    lines += [
        "Against the issue's anchors (its protocol is not known in detail, so these compare in "
        "kind, not to the decimal; CRI's ground truth is sparse, see below). *Before* = the "
        "hybrid row with every default as it was before issue 15, measured in this run; the "
        "issue column quotes the issue:",
        "",
    ]

    def row(label: str, issue: str, pick: Callable[[dict[str, Any]], str]) -> list[str]:
        return [label, issue, *(pick(evidence[n]) for n in names)]

    def small(name: str) -> str:
        where = {GOALS_DATASET: "cri", "planted": "planted"}.get(name)
        return "-" if where is None else num(small_talk[where]["tokens_added"]["median"])

    lines += md_table(
        ["figure", "issue", *(DATASET_TITLES[n] for n in names)],
        [
            row(
                f"answer turns in a trimmed view (TokenBudget({budget:,}) alone)",
                f"{pct(ANCHOR_TRIMMED_SHARE)} (4k view)",
                lambda c: pct(c[BASELINE]["answer_turns_in_view"]),
            ),
            row(
                "answer turns in the input, hybrid",
                f"~{pct(ANCHOR_HYBRID_SHARE)} (hybrid top-5)",
                lambda c: pct(c[HEADLINE]["answer_turns_in_input"]),
            ),
            row(
                "questions with evidence in the input, hybrid",
                f"target > {EVIDENCE_TARGET:.0%}",
                lambda c: pct(c[HEADLINE]["evidence_available"]),
            ),
            row(
                "share of the query's facts in the input, hybrid before issue 15",
                f"{pct(ANCHOR_FACTS_BEFORE)} (A', before)",
                lambda c: pct(c[BEFORE]["fact_recall"]),
            ),
            row(
                "share of the query's facts in the input, hybrid",
                f"goal >= {FACTS_TARGET:.0%} (A')",
                lambda c: pct(c[HEADLINE]["fact_recall"]),
            ),
            row(
                "every fact of the query in the input, hybrid before issue 15",
                f"{pct(ANCHOR_ALL_FACTS_BEFORE)} (A', before)",
                lambda c: pct(c[BEFORE]["all_facts_available"]),
            ),
            row(
                "every fact of the query in the input, hybrid",
                f"goal >= {ALL_FACTS_TARGET:.0%} (A')",
                lambda c: pct(c[HEADLINE]["all_facts_available"]),
            ),
            row(
                "tokens added by retrieval (median at question time), hybrid",
                f"~{ANCHOR_HYBRID_TOKENS}",
                lambda c: num(c[HEADLINE]["retrieved_tokens"]["median"]),
            ),
            [
                "tokens added on turns that need nothing from the past (median), hybrid; A': "
                "after the CRI thread, B: after a planted conversation",
                f"goal <= {SMALL_TALK_TARGET} (A')",
                *(small(n) for n in names),
            ],
        ],
    )
    lines.append("")
    return lines


# long: one report section: its prose, then a table per data set, in reading order
def _evidence_lines(results: dict[str, Any]) -> list[str]:
    """Section: evidence available at a fixed budget, per data set."""
    lines: list[str] = []
    lines += [
        "## Evidence available at a fixed budget",
        "",
        "Share of questions with at least one evidence message in the model's input (inner view, "
        "or the text of the retrieved-context message); *answer turns* = share of all evidence "
        "messages that are in it. With facts (A, A'): *evidence available* = at least one of the "
        "query's facts is; *facts available* = the mean share of its facts that are; *all "
        "facts* = every one is. Tokens added = the context message (median / p90 over the "
        "questions). A message counts when its whole text is in the input: a reply that "
        "compact packing shortened does not count, even when the sentences it kept hold the "
        "answer, so with compact packing these figures are lower bounds (user messages always "
        "come back whole). Rows without a setting use Retrieval's defaults; the *as before "
        "issue 15* row sets k=5, 600 tokens, neighbors=1 and whole turns, and still ranks with "
        "one vector per message (that cannot be switched off). "
        "The SummaryBuffer row's summary is a fake (random words), so only its verbatim tail "
        "and retrieval can hold evidence.",
        "",
    ]
    for name, cells in results["evidence"].items():
        lines += [f"### {DATASET_TITLES[name]}", ""]
        with_facts = cells[BASELINE].get("fact_recall") is not None
        rows = []
        for label, cell in cells.items():
            tokens = cell["retrieved_tokens"]
            fact_cells = (
                [pct(cell["fact_recall"]), pct(cell["all_facts_available"])] if with_facts else []
            )
            rows.append(
                [
                    _display(label),
                    pct(cell["evidence_available"]),
                    *fact_cells,
                    pct(cell["evidence_in_view"]),
                    pct(cell["answer_turns_in_input"]),
                    "-" if cell["ranking"] is None else median_p90(tokens, digits=0),
                    f"{cell['max_tokens_after']:,}",
                ]
            )
        lines += md_table(
            [
                "configuration",
                "evidence available",
                *(["facts available", "all facts"] if with_facts else []),
                "in inner view",
                "answer turns in input",
                "tokens added (median / p90)",
                "max request tokens",
            ],
            rows,
        )
        lines.append("")
        if name == "planted":
            buckets = list(cells[HEADLINE]["by_depth"])
            picked = [BASELINE, *(f"TokenBudget + Retrieval {r}" for r in RANKINGS), BEFORE]
            rows = [
                [_display(label)] + [pct(cells[label]["by_depth"].get(b)) for b in buckets]
                for label in picked
                if label in cells
            ]
            lines += ["Evidence available by depth (messages before the question):", ""]
            lines += md_table(["configuration", *buckets], rows)
            lines.append("")
        kinds = list(cells[HEADLINE]["by_kind"])
        rows = [
            [_display(label)] + [pct(cells[label]["by_kind"].get(kd)) for kd in kinds]
            for label in (BASELINE, HEADLINE, BEFORE)
            if label in cells
        ]
        lines += ["By question kind (A, A': when the question is asked):", ""]
        lines += md_table(["configuration", *kinds], rows)
        lines.append("")
    return lines


# long: one report section: its prose, then a table per data set, in reading order
def _recall_lines(
    results: dict[str, Any], budget: Any, cfg: Any, context: Any, recall_k: Any
) -> list[str]:
    """Section: recall@k over the evicted turns."""
    lines: list[str] = []
    ks = [str(k) for k in cfg["ks"]]
    rk = str(recall_k)
    lines += [
        "## Recall@k over the evicted turns (reference pipeline)",
        "",
        f"`langmem_ext.retrieval.bm25` + `InMemoryStore` with the MiniLM index, independent of "
        f"`Retrieval`; candidates = the turns outside `TokenBudget({budget:,})` with "
        f"{context:,} held back (Retrieval's default), each indexed as `Retrieval` indexes it "
        f"(one vector per message, max-pooled); each ranking {cfg['candidates']} deep before "
        f"fusion (hybrid: RRF k={cfg['rrf_k']}, dense weight {cfg['dense_weight']:g}, as in "
        "`Retrieval`). Recall@k (hit@k in brackets: at least one relevant turn found), "
        "over the questions whose evidence was evicted; +neighbours = each retrieved turn "
        "also brings the turn before it (tokens: median raw tokens of the retrieved turns at "
        f"k={rk}). `Retrieval` itself now takes as many turns as fit its budget (k=None), so "
        "these fixed-k figures describe the rankings, not what a view holds.",
        "",
    ]
    for name, groups in results["recall"].items():
        overall = groups["all"]
        lines += [
            f"### {DATASET_TITLES[name]} ({overall['scored']} of {overall['questions']} "
            f"questions had evicted evidence)",
            "",
        ]
        rows = []
        for ranking in REF_RANKINGS:
            for neighbors in (0, 1):
                cells = overall[ranking][f"n{neighbors}"]
                rows.append(
                    [RANKING_LABELS.get(ranking, ranking) + (" + neighbours" if neighbors else "")]
                    + [f"{pct(cells[k]['recall'])} ({pct(cells[k]['hit'])})" for k in ks]
                    + [num(cells[rk]["tokens_median"])]
                )
        lines += md_table(["ranking", *(f"@{k}" for k in ks), f"tokens @{rk}"], rows)
        lines.append("")
        for title, key in (
            ("By lexical overlap of question and evidence", "by_overlap"),
            ("By question kind", "by_kind"),
            ("By depth", "by_depth"),
        ):
            if key not in groups:
                continue
            rows = []
            for group, agg in groups[key].items():
                if not agg["scored"]:
                    continue
                rows.append(
                    [f"{group} ({agg['scored']})"]
                    + [pct(agg[r]["n0"][rk]["recall"]) for r in REF_RANKINGS]
                    + [pct(agg["hybrid"]["n1"][rk]["recall"])]
                )
            lines += [f"{title}, recall@{rk}:", ""]
            lines += md_table(
                ["group (questions)", *RANKINGS, "hybrid, RRF k=60", "hybrid + neighbours"], rows
            )
            lines.append("")
    return lines


def _replay_lines(results: dict[str, Any], budget: Any, context: Any, k_text: Any) -> list[str]:
    """Section: tokens added per turn in the replay."""
    lines: list[str] = []
    rp = results["replay"]
    lines += [
        "## Tokens added per turn",
        "",
        f"`{rp['conversation']}` replayed turn by turn ({rp['turns']:,} user turns) through "
        f"`Retrieval(TokenBudget({budget:,}))` with its defaults (hybrid, k={k_text}, "
        f"max_retrieved_tokens={context:,}, compact packing, no neighbours); embeddings cached, "
        "so the time per turn leaves out the query embedding (see latency).",
        "",
    ]
    lines += md_table(
        ["figure", "value"],
        [
            ["tokens added per turn (median / p90)", median_p90(rp["tokens_added"], digits=0)],
            ["mean tokens added per turn", num(rp["tokens_added_mean"])],
            [
                "turns with a context message",
                f"{rp['turns_with_context']:,} of {rp['turns']:,}",
            ],
            [
                "tokens added when there is one (median / p90)",
                median_p90(rp["tokens_added_when_retrieving"], digits=0),
            ],
            ["retrieved turns per turn (median)", num(rp["retrieved_turns_median"])],
            ["time per apply, ms (median / p90)", median_p90(rp["apply_ms"], thousands="")],
            ["turns over the budget", str(rp["over_budget"])],
        ],
    )
    lines.append("")
    return lines


def _latency_lines(results: dict[str, Any], meta: Any) -> list[str]:
    """Section: query latency and index time."""
    lines: list[str] = []
    lat = results["latency"]
    lines += [
        "## Query latency and index time",
        "",
        "Milliseconds, median / p90 over the questions. dense = `InMemoryStore.search` with a "
        "fresh query embedding; embed = the query embedding alone; BM25 = `BM25Index.search`; "
        "hybrid = dense + BM25 + RRF; apply = one whole `Retrieval.apply` with the defaults "
        "(hybrid) and a fresh query embedding, after a thread of that many turns was indexed "
        "(the turns of the view itself are not indexed: the index holds the number in "
        "brackets): TokenBudget's cut, the searches, fusion and packing. Turns are indexed as "
        "`Retrieval` indexes them (one vector per message). Indexed texts are real turns, "
        "repeated past the distinct ones. first round = the same `Retrieval.apply` with the "
        "first round's defaults (`feedback=False, decompose=False`), timed side by side (each "
        "question on both, one after the other); ratio = apply's median over it.",
        "",
    ]
    rows = []
    for size, cell in lat["sizes"].items():
        apply, anchor = cell.get("apply"), cell.get("apply_first_round")
        ratio = (
            apply["median"] / anchor["median"] if apply and anchor and anchor["median"] else None
        )
        rows.append(
            [
                f"{int(size):,} ({cell['distinct_texts']:,} distinct)",
                median_p90(cell["dense"], thousands=""),
                median_p90(cell["embed_query"], thousands=""),
                median_p90(cell["bm25"], thousands=""),
                median_p90(cell["hybrid"], thousands=""),
                "n/a"
                if apply is None
                else f"{median_p90(apply, thousands='')} ({cell.get('apply_indexed_turns', 0):,})",
                "n/a" if anchor is None else median_p90(anchor, thousands=""),
                "n/a" if ratio is None else f"{ratio:.2f}x",
            ]
        )
    lines += md_table(
        ["indexed turns", "dense", "embed", "BM25", "hybrid", "apply", "first round", "ratio"],
        rows,
    )
    lines.append("")
    idx = lat["index_per_turn"]
    rate = lat.get("embed_documents_per_s")
    per_turn = idx.get("vectors_per_turn")
    lines += [
        f"Index time per turn ({idx['turns']} turns, one at a time): `store.put` embedding the "
        f"turn's messages afresh ({num(per_turn, 1)} vectors per turn on average) "
        f"{median_p90(idx['store_put_ms'], thousands='')} ms, BM25 add "
        f"{median_p90(idx['bm25_add_ms'], thousands='')} ms. Bulk "
        f"embedding (batches of 32): {num(rate)} texts/s.",
        "",
        f"Command: `{meta['command']}`; raw numbers and every question in `{meta['json_name']}`.",
        "",
    ]
    return lines
