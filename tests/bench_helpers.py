"""What the benchmark smoke tests (``test_bench_*_smoke.py``) share.

``bench`` is a top-level folder, not part of the installed package: ``tests/conftest.py`` puts
the repository root on ``sys.path`` so that ``import bench`` works from any test.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any


def assert_results_written(
    write_results: Callable[[dict[str, Any], Path, str], tuple[Path, Path]],
    results: dict[str, Any],
    out_dir: Path,
    stem: str,
    headings: Sequence[str],
) -> None:
    """``write_results`` writes ``<stem>.md`` holding every heading of ``headings`` and
    ``<stem>.json`` whose ``meta.mode`` is the smoke mode."""
    md_path, json_path = write_results(results, out_dir, stem)
    markdown = md_path.read_text(encoding="utf-8")
    missing = [heading for heading in headings if heading not in markdown]
    assert not missing, f"{md_path.name} lacks the headings {missing}"
    assert json.loads(json_path.read_text(encoding="utf-8"))["meta"]["mode"] == "smoke"
