"""``python -m bench.docs``: the benchmarks page and its plots come from the committed results.

The generator runs once (into a temporary copy of the layout: ``bench/results`` and ``docs``) on
the committed JSON. The page must name every anchor the JSON holds, link every plot it writes
(each a real PNG), link the per-benchmark reports, and equal the committed
``docs/benchmarks.md``: the committed page is exactly what the command makes of the committed
results.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path
from typing import Any

import pytest

from bench.docs import BENCHMARKS, IMG_DIR, PAGE, find_results, main
from bench.retrieval_config import BASELINE

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "bench" / "results"
COMMITTED_PAGE = ROOT / "docs" / PAGE
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
#: families of the tools that are ours; any other family in the results is an anchor
OURS = {"langmem_ext", "budget"}


@pytest.fixture(scope="module")
def generated(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """The generator's output directory and page, run on a copy of the committed results."""
    root = tmp_path_factory.mktemp("layout")
    results = root / "bench" / "results"
    results.mkdir(parents=True)
    for path in RESULTS.iterdir():
        if path.suffix in (".json", ".md"):
            shutil.copy2(path, results / path.name)
    out = root / "docs"
    assert main(["--results", str(results), "--out", str(out)]) == 0
    return out, (out / PAGE).read_text(encoding="utf-8")


def _anchor_labels(node: Any) -> list[str]:
    """Every ``label`` of a dict whose ``family`` is not ours, anywhere in a results tree."""
    found: list[str] = []
    if isinstance(node, dict):
        if isinstance(node.get("label"), str) and node.get("family", "langmem_ext") not in OURS:
            found.append(node["label"])
        for value in node.values():
            found += _anchor_labels(value)
    elif isinstance(node, list):
        for value in node:
            found += _anchor_labels(value)
    return found


def test_page_names_every_anchor_in_the_results(generated: tuple[Path, str]) -> None:
    _, page = generated
    chosen = find_results(RESULTS)
    assert {b.module for b in BENCHMARKS} <= set(chosen), "a benchmark has no committed results"
    expected: set[str] = set()
    for found in chosen.values():
        expected.update(_anchor_labels(found.results))
    growth = chosen["bench.growth"].results
    expected.add(growth["configs"]["none"]["label"])  # the baseline: no memory node
    expected.add(BASELINE)  # retrieval's baseline: TokenBudget alone
    # the anchors the benchmarks compare against, whatever their labels say
    assert {
        "trim_messages + tiktoken (uncached)",
        "trim_messages + count_tokens_approximately",
        "langmem summarize_messages",
        "langchain SummarizationMiddleware",
    } <= expected
    missing = sorted(label for label in expected if label not in page)
    assert not missing, f"the page does not name the anchors {missing}"
    # SummarizationNode is not run on its own: the page must say why
    assert "SummarizationNode" in page


def test_page_links_every_plot_and_each_is_a_png(generated: tuple[Path, str]) -> None:
    out, page = generated
    written = sorted(p.name for p in (out / IMG_DIR).glob("*.png"))
    assert written == sorted(b.image for b in BENCHMARKS)
    linked = re.findall(r"!\[[^\]]*\]\(([^)]+\.png)\)", page)
    assert sorted(Path(link).name for link in linked) == written
    for link in linked:
        image = out / link
        data = image.read_bytes()
        assert data.startswith(PNG_MAGIC), f"{link} is not a PNG"
        assert len(data) > 20_000, f"{link} is suspiciously small ({len(data)} bytes)"
        committed = ROOT / "docs" / link
        assert committed.is_file(), f"docs/{link} is missing: run python -m bench.docs"


def test_page_links_the_per_benchmark_reports(generated: tuple[Path, str]) -> None:
    out, page = generated
    links = re.findall(r"\]\((\.\./bench/results/[^)]+)\)", page)
    names = {Path(link).name for link in links}
    for b in BENCHMARKS:
        assert {f"{b.stem}.md", f"{b.stem}.json"} <= names, f"no link to {b.stem}.md/.json"
    for link in links:
        assert (out / link).resolve().is_file(), f"broken link {link}"


def test_committed_page_is_what_the_command_makes(generated: tuple[Path, str]) -> None:
    _, page = generated
    committed = COMMITTED_PAGE.read_text(encoding="utf-8")
    assert page == committed, (
        "docs/benchmarks.md differs from what `python -m bench.docs` makes of bench/results: "
        "run `python -m bench.docs` and commit the page and docs/img"
    )


def test_full_results_win_over_newer_quick_ones(tmp_path: Path) -> None:
    """A quick run written later does not replace the full run on the page; with no full run
    at all, the quick one is used."""
    source = json.loads((RESULTS / "growth.json").read_text(encoding="utf-8"))
    quick = json.loads(json.dumps(source))
    quick["meta"].update(mode="quick", started_utc="2999-01-01 00:00")
    quick["meta"]["command"] += " --quick"
    (tmp_path / "growth_quick.json").write_text(json.dumps(quick), encoding="utf-8")
    (tmp_path / "growth.json").write_text(json.dumps(source), encoding="utf-8")
    assert find_results(tmp_path)["bench.growth"].path.name == "growth.json"
    (tmp_path / "growth.json").unlink()
    only_quick = find_results(tmp_path)["bench.growth"]
    assert only_quick.path.name == "growth_quick.json" and not only_quick.full
