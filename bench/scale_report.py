"""The scale benchmark's markdown report (``bench/results/scale.md``) from its results."""

from __future__ import annotations

from typing import Any

from bench.harness import md_table, median_p90, num, provenance_lines


def _med(cell: dict[str, Any] | None, digits: int = 1) -> str:
    if not cell or cell.get("median") is None:
        return "n/a"
    return f"{cell['median']:,.{digits}f}"


def _s(value: float | None) -> str:
    if value is None:
        return "n/a"
    return f"{value * 1_000:,.0f} ms" if value < 1 else f"{value:,.2f} s"


def _goal_value(goal: dict[str, Any]) -> str:
    value = goal["value"]
    if value is None:
        return "not measured in this run"
    if goal["unit"] == "ms":
        return f"{value:.1f} ms"
    if goal["unit"] == "s":
        return _s(value)
    return f"{value:.3f}"


def render_markdown(results: dict[str, Any]) -> str:
    meta, cfg = results["meta"], results["meta"]["config"]
    data = results["data"]
    lines = ["# Retrieval at scale: latency, recall, fresh process, indexing (issue 16)", ""]
    if meta["mode"] != "full":
        lines += [
            f"> **{meta['mode']} run** (tiny sizes, few queries): a smoke test, not a "
            "measurement. Run `python -m bench.scale` for the real numbers.",
            "",
        ]
    lines += provenance_lines(meta)
    lines += [
        f"- Load average {meta['load_average_start']} at the start, "
        f"{meta['load_average_end']} at the end; peak memory {meta['max_rss_mb']:,.0f} MB",
        f"- Data: {data['distinct_turns']:,} distinct real turns (CRI persona-1-base and the "
        f"planted conversations; {data['distinct_messages']:,} distinct messages, "
        f"{data['messages_per_turn']:.2f} messages a turn), repeated with fresh ids; "
        f"{len(data['queries'])} queries (their questions). Model "
        f"{meta['embeddings']['model']}; documents embedded once "
        f"({meta['embeddings']['texts_embedded']:,} texts in "
        f"{meta['embeddings']['seconds']:.0f} s), queries afresh on every call.",
        "",
        "## Goals",
        "",
    ]
    lines += md_table(
        ["goal", "measured", "met"],
        [
            [
                g["name"],
                _goal_value(g),
                "n/a" if g["met"] is None else ("yes" if g["met"] else "**no**"),
            ]
            for g in results["goals"]
        ],
    )
    lines += [""]
    lines += _latency_section(results)
    lines += _recall_section(results)
    lines += _restart_section(results)
    lines += _indexing_section(results)
    lines += [
        f"Command: `{meta['command']}`; every timed call and the configuration in "
        f"`{meta['json_name']}`. Budget {cfg['budget']:,} tokens, `Retrieval` defaults "
        "otherwise.",
        "",
    ]
    return "\n".join(lines)


def _latency_section(results: dict[str, Any]) -> list[str]:
    lines = [
        "## 1. Per-turn latency",
        "",
        "One whole `Retrieval(TokenBudget(4500), store=InMemoryStore(index=MiniLM)).apply` per "
        "query (default hybrid, a fresh query embedding each call), after a thread of that many "
        "turns was indexed (the view's own turns are not: the index holds the number in "
        "brackets). Milliseconds, median / p90, measured inside the same calls: the query "
        "embeddings (how many per call in brackets), the dense search (`VectorIndex.search`; "
        'for the anchor `dense_index="store"`, the store\'s reads without the query embedding: '
        "InMemoryStore's own search), `BM25Index.search`, the store's other reads (the facts "
        "search, the marks, the values of results loaded from index blocks) and the rest (the "
        "inner `TokenBudget`, fusion, packing). Every call starts from the state after the "
        "longest query was asked once, so the timed calls index nothing (see the live turns "
        "below and section 4), and after the `VectorIndex` finished fitting its coarse lists in "
        "the background (past 32,768 rows; until then it searches exactly, sharing the cores "
        "with the fit).",
        "",
    ]
    rows = []
    for size, cell in results["latency"].items():
        for mode in ("local", "store"):
            c = cell[mode]
            rows.append(
                [
                    f"{int(size):,} ({cell['indexed_turns']:,})",
                    _mode(mode),
                    f"**{median_p90(c['total'])}**",
                    f"{median_p90(c['embed'])} ({_med(c['embed_calls'], 0)})",
                    median_p90(c["vector"]) if mode == "local" else median_p90(c["store"]),
                    median_p90(c["bm25"]),
                    median_p90(c["store"]) if mode == "local" else "in dense",
                    median_p90(c["rest"]),
                    str(c["queries"]),
                ]
            )
    lines += md_table(
        [
            "turns (indexed)",
            "dense index",
            "apply",
            "query embedding (calls)",
            "dense search",
            "BM25",
            "store reads",
            "rest",
            "queries",
        ],
        rows,
    )
    lines += _live_lines(results)
    lines.append("")
    return lines


# long: one report section: its prose, then its table, in reading order
def _live_lines(results: dict[str, Any]) -> list[str]:
    """The ratios and build times, then the live turns' table."""
    lines: list[str] = []
    ratios = ", ".join(
        f"{num(cell['ratio_p50'], 1)}x at {int(size):,}"
        + (f" ({cell['store']['queries']} queries)" if cell["anchor_few_queries"] else "")
        for size, cell in results["latency"].items()
    )
    builds = ", ".join(
        f"{_s(cell['local']['build_s'])} local / {_s(cell['store']['build_s'])} store at "
        f"{int(size):,}"
        for size, cell in results["latency"].items()
    )
    fits = ", ".join(
        f"{_s(cell['local'].get('fit_wait_s'))} at {int(size):,}"
        for size, cell in results["latency"].items()
    )
    again = ", ".join(
        f"{_med(cell['local']['again']['total'])} ms local"
        + (
            f" / {_med(cell['store']['again']['total'])} ms store"
            if cell["store"].get("again")
            else ""
        )
        + f" at {int(size):,}"
        for size, cell in results["latency"].items()
        if cell["local"].get("again")
    )
    lines += [
        "",
        f"The anchor's p50 over the local index's: {ratios}. Indexing the whole thread in one "
        f"call (embeddings cached): {builds}. The background fit, waited for after the build: "
        f"{fits}.",
        "",
        "Each query asked again right after its timed call, as every tool round of an agent "
        "loop asks its one request again (`Retrieval` remembers its last 32 query vectors; "
        "the anchor's store embeds the query inside its search, every time): apply p50 "
        f"{again}.",
        "",
        "### Live turns",
        "",
        "The same queries asked as a conversation continuing the thread: each query a new "
        "turn, answered by a real assistant message, the state carried on, so older turns "
        "leave the view and are indexed as they go (their messages embedded on the way: the "
        "thread's from the cache, the new questions afresh) and the next call's BM25 and "
        "vector indexes catch up with the store's marks. Writes = the store writes and the "
        "embedding of the turns they index; store reads include that catch-up. The anchor "
        "is left out where it takes seconds a call.",
        "",
    ]
    rows = []
    for size, cell in results["latency"].items():
        for mode in ("local", "store"):
            c = cell[mode].get("live")
            if not c:
                continue
            rows.append(
                [
                    f"{int(size):,}",
                    _mode(mode),
                    f"**{median_p90(c['total'])}**",
                    str(c["indexed_total"]),
                    median_p90(c["writes"]),
                    median_p90(c["store"]),
                    f"{median_p90(c['embed'])} ({_med(c['embed_calls'], 0)})",
                    median_p90(c["vector"]) if mode == "local" else "in reads",
                    median_p90(c["bm25"]),
                    median_p90(c["rest"]),
                    str(c["queries"]),
                ]
            )
    lines += md_table(
        [
            "turns",
            "dense index",
            "apply",
            "turns indexed (all calls)",
            "writes",
            "store reads",
            "query embedding (calls)",
            "dense search",
            "BM25",
            "rest",
            "calls",
        ],
        rows,
    )
    return lines


def _mode(mode: str) -> str:
    return "`local`" if mode == "local" else "`store` (anchor)"


def _recall_section(results: dict[str, Any]) -> list[str]:
    k = results["meta"]["config"]["recall_k"]
    lines = [
        f"## 2. Recall@{k} of the local index against exact search",
        "",
        f"The `VectorIndex` `Retrieval` searched in section 1 against a "
        f"`VectorIndex(exact_rows=10**9)` twin over the same stored (float16) vectors, for the "
        f"same query vectors. The thread repeats its real turns, so many keys hold equal "
        f"vectors: a result counts when its score reaches the exact {k}th score (tie-aware); "
        f"strict = the share of the exact top {k} keys returned. Distinct texts in the exact "
        f"top {k} (median) shows how much the repeats reduce the question. Jittered: every row "
        f"plus Gaussian noise (sigma {results['meta']['config']['jitter_sigma']:g} a dimension), "
        f"no ties; a default `VectorIndex` and the exact twin built from the same rows. Search "
        f"times: median ms, local / exact.",
        "",
    ]
    rows = []
    for size, r in results["recall"].items():
        if not r.get("queries"):
            continue
        j = r["jittered"]
        rows.append(
            [
                f"{int(size):,}",
                f"{r['keys']:,} / {r['rows']:,}",
                "coarse + rescoring" if r["approximate"] else "exact",
                f"**{r['recall']:.3f}** (min {r['recall_min']:.2f})",
                f"{r['strict_recall']:.3f}",
                _med(r["distinct_texts_in_exact_top"], 0),
                f"{_med(r['search_ms']['local'], 2)} / {_med(r['search_ms']['exact'], 2)}",
                f"{j['recall']:.3f} (min {j['recall_min']:.2f})",
                f"{_med(j['search_ms']['local'], 2)} / {_med(j['search_ms']['exact'], 2)}",
                str(r["queries"]),
            ]
        )
    lines += md_table(
        [
            "turns",
            "keys / rows",
            "regime",
            f"recall@{k}",
            "strict",
            "distinct texts",
            "search ms",
            "jittered recall",
            "jittered search ms",
            "queries",
        ],
        rows,
    )
    lines.append("")
    return lines


# long: one report section: its prose, then its table, in reading order
def _restart_section(results: dict[str, Any]) -> list[str]:
    r = results["restart"]
    memory, sqlite = r["memory"], r["sqlite"]
    lines = [
        f"## 3. First turn of a fresh process ({r['turns']:,} turns)",
        "",
        "(a) a new `Retrieval` (cold token-count cache) on the `InMemoryStore` another one "
        "filled; (b) a subprocess opening the `SqliteStore` file the turns were written to "
        "through `Retrieval` (MiniLM and tiktoken loaded before the clock starts). First = "
        "its first `apply`, which loads the thread's index blocks (every 512 turns, one item "
        "with their BM25 postings and stored vectors) into BM25 and the `VectorIndex`, then "
        "reads the turns after the last block one by one (nothing embedded again; decode = "
        "the blocks and the stored vectors read back); later = the same object's next "
        "calls (median). Texts embedded in the first call: the query by `Retrieval` + the "
        "query again by the store (a store-side dense search) + other texts (turns embedded "
        "again: should be 0). The "
        "split is from a second fresh `Retrieval` on the same store, instrumented; inner = "
        "`TokenBudget` alone on a cold counter, with the same state (it counts the tail only).",
        "",
    ]
    rows = []
    for label, c in (("(a) InMemoryStore", memory), ("(b) SqliteStore, subprocess", sqlite)):
        first = c["calls"][0]
        sp = c["split"]
        rows.append(
            [
                label,
                f"**{_s(c['first_apply_s'])}**",
                _s(c["later_apply_s"]["median"]),
                f"{first['query_embeddings']} + {first['store_query_embeddings']} + "
                f"{first['other_texts_embedded']}",
                _s(sp["total_s"]),
                _s(sp["store_read_s"]),
                _s(sp["bm25_build_s"]),
                f"{_s(sp['vectors_s'])} ({_s(sp['vectors_decode_s'])} decode)",
                _s(sp["query_embedding_s"]),
                _s(sp["searches_s"]),
                _s(sp["rest_s"]),
                _s(sp["inner_cold_s"]),
            ]
        )
    lines += md_table(
        [
            "store",
            "first apply",
            "later",
            "texts embedded (first call)",
            "instrumented",
            "store reads",
            "BM25 build",
            "vectors",
            "query embedding",
            "searches",
            "rest",
            "inner (cold)",
        ],
        rows,
    )
    calls = sqlite["calls"]
    lines += [
        "",
        f"The subprocess: model load {_s(sqlite['model_load_s'])}, tokenizer "
        f"{_s(sqlite['tokenizer_load_s'])}, store open {_s(sqlite['store_open_s'])}, whole "
        f"process {_s(sqlite['process_s'])} (of which rebuilding the thread's messages, the "
        f"checkpointer's job in a real process, {_s(sqlite['thread_rebuild_s'])}); "
        f"{len(calls)} queries asked, "
        f"{sum(c['texts_embedded'] for c in calls)} texts embedded in all "
        f"({sum(c['query_embeddings'] for c in calls)} by Retrieval, "
        f"{sum(c['store_query_embeddings'] for c in calls)} by the store, "
        f"{sum(c['other_texts_embedded'] for c in calls)} others). File "
        f"{sqlite['file_bytes'] / 1e6:,.0f} MB, written through `Retrieval` in "
        f"{_s(sqlite['write_s'])} ({_s(memory['write_s'])} into the InMemoryStore); "
        f"{sqlite['split']['turns_loaded']:,} turns loaded.",
        "",
    ]
    return lines


def _indexing_section(results: dict[str, Any]) -> list[str]:
    lines = [
        "## 4. Indexing cost per evicted turn",
        "",
        "A conversation of distinct real turns replayed turn by turn through `Retrieval` on an "
        "`InMemoryStore` whose MiniLM has no cache; per evicted turn (calls that evicted "
        "several are divided), milliseconds median / p90: the embedding of its messages (by "
        "`Retrieval` for `local`, inside the store's put for `store`), the store writes "
        "(turn + marks, embedding excluded), the BM25 and `VectorIndex` inserts (`add` or "
        "`add_many`; turns inserted per evicted turn in brackets: a turn this process wrote "
        "may be inserted again when the next query catches up with the marks), their sum, and "
        "the whole apply of those calls (query embedding and search included). `local` + "
        "prefetch: `Retrieval(prefetch_embeddings=True)`, which embeds the view's oldest "
        "messages in a worker thread after each call (waited for between calls, as a model's "
        "answer would be): the embedding column is what the calls still embedded themselves.",
        "",
    ]
    rows = []
    labels = {"store": "`store` (anchor)", "prefetch": "`local` + prefetch"}
    for mode, c in results["indexing"].items():
        rows.append(
            [
                labels.get(mode, f"`{mode}`"),
                f"{c['evicted_turns']} ({c['calls']} calls)",
                f"{median_p90(c['embed'])} ({num(c['texts_per_turn'], 1)} texts)",
                median_p90(c["put"], 2),
                f"{median_p90(c['bm25_add'], 2)} ({num(c['bm25_adds_per_turn'], 1)})",
                f"{median_p90(c['vector_add'], 2)} ({num(c['vector_adds_per_turn'], 1)})",
                f"**{median_p90(c['sum'])}**",
                median_p90(c["apply"]),
            ]
        )
    lines += md_table(
        [
            "dense index",
            "evicted turns",
            "embedding",
            "store writes",
            "BM25 insert",
            "VectorIndex insert",
            "sum",
            "whole apply",
        ],
        rows,
    )
    ahead = results["indexing"].get("prefetch")
    if ahead and "texts_taken" in ahead:
        lines += [
            "",
            f"With prefetch, {ahead['texts_embedded_ahead']:,} texts were embedded ahead and "
            f"{ahead['texts_taken']:,} of them taken by the calls that indexed their turns.",
        ]
    lines.append("")
    return lines
