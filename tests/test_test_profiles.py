"""The test profiles of tests/conftest.py, each collected (``--collect-only``) in a subprocess:
the whole suite once (under CI), two files in the other profiles.

* ``make test`` (``LANGMEM_EXT_FAST_TESTS=1``) leaves out exactly the tests tests/slow_tests.txt
  lists and the ones marked ``slow`` in their file;
* CI (``CI=true``) and ``LANGMEM_EXT_FULL_TESTS=1`` leave out none, whatever else is set;
* every entry of tests/slow_tests.txt still names a collected test, so a renamed or deleted test
  cannot leave a dead entry behind (nor a renamed one run in the fast profile unnoticed).
"""

from __future__ import annotations

import os
import re
import subprocess
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from types import SimpleNamespace

import pytest
from conftest import SLOW_TESTS, cap_examples, matches_prefix, read_slow_tests
from hypothesis import given, settings
from hypothesis import strategies as st
from subprocesses import run_python

ROOT = Path(__file__).resolve().parent.parent
_PROFILE_VARS = ("CI", "LANGMEM_EXT_FAST_TESTS", "LANGMEM_EXT_FULL_TESTS", "PYTEST_ADDOPTS")
_SUMMARY = re.compile(r"^(?:(\d+)/)?(\d+) tests? collected(?: \((\d+) deselected\))?", re.M)


@dataclass(frozen=True)
class Collected:
    selected: frozenset[str]
    total: int
    deselected: int


@cache
def collect(env_items: tuple[tuple[str, str], ...], *paths: str) -> Collected:
    """``pytest --collect-only -q`` of ``paths`` (default: the suite) with the profile variables
    unset but ``env_items``."""
    env = {key: value for key, value in os.environ.items() if key not in _PROFILE_VARS}
    env.update(env_items)
    done = run_python(
        "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", *paths,
        env=env, cwd=ROOT, timeout=300,
    )  # fmt: skip
    found = _SUMMARY.search(done.stdout)
    assert done.returncode == 0 and found, f"collection failed:\n{done.stdout}\n{done.stderr}"
    selected = frozenset(line for line in done.stdout.splitlines() if "::" in line)
    total, deselected = int(found.group(2)), int(found.group(3) or 0)
    assert len(selected) == total - deselected, done.stdout[-2000:]
    return Collected(selected, total, deselected)


FAST = (("LANGMEM_EXT_FAST_TESTS", "1"),)
CI_OVER_FAST = (("CI", "true"), ("LANGMEM_EXT_FAST_TESTS", "1"))
FULL_OVER_FAST = (("LANGMEM_EXT_FULL_TESTS", "1"), ("LANGMEM_EXT_FAST_TESTS", "1"))


def _listed(nodeid: str, entries: dict[str, str]) -> bool:
    return any(matches_prefix(nodeid, prefix) for prefix in entries)


def _sample_files() -> list[str]:
    """The file of the list's first entry and this one (both cheap to collect)."""
    first = next(iter(read_slow_tests())).split("::")[0]
    return sorted({first, str(Path(__file__).relative_to(ROOT))})


def test_ci_collects_every_test_even_with_the_fast_profile_asked_for() -> None:
    ci = collect(CI_OVER_FAST)
    entries = read_slow_tests()
    assert ci.deselected == 0 and len(ci.selected) == ci.total
    assert any(_listed(nodeid, entries) for nodeid in ci.selected)


def test_every_slow_list_entry_names_a_collected_test() -> None:
    every = collect(CI_OVER_FAST).selected
    dead = [p for p in read_slow_tests() if not any(matches_prefix(n, p) for n in every)]
    assert not dead, f"{SLOW_TESTS.name} names no collected test with: {dead}"


def test_fast_profile_leaves_out_exactly_the_listed_and_marked_tests() -> None:
    """On two files (the whole suite is collected once, above, under CI)."""
    entries = read_slow_tests()
    full, fast = collect(FULL_OVER_FAST, *_sample_files()), collect(FAST, *_sample_files())
    assert full.deselected == 0 and full.total == fast.total
    left_out = full.selected - fast.selected
    assert fast.selected < full.selected and fast.deselected == len(left_out)
    assert {n for n in full.selected if _listed(n, entries)} <= left_out
    # the rest carry `@pytest.mark.slow` (or a slow parameter) in their own file
    for nodeid in sorted(n for n in left_out if not _listed(n, entries)):
        source = (ROOT / nodeid.split("::")[0]).read_text(encoding="utf-8")
        assert "mark.slow" in source, f"{nodeid} left out of the fast profile, not marked slow"


@pytest.mark.parametrize(
    ("nodeid", "prefix", "expected"),
    [
        ("tests/x/test_a.py::test_b", "tests/x", True),
        ("tests/x/test_a.py::test_b", "tests/x/", True),
        ("tests/x/test_a.py::test_b", "tests/x/test_a.py", True),
        ("tests/x/test_a.py::test_b[1-2]", "tests/x/test_a.py::test_b", True),
        ("tests/x/test_a.py::Case::test_b", "tests/x/test_a.py::Case", True),
        ("tests/x/test_a.py::test_b", "tests/x/test_a.py::test_b", True),
        ("tests/x/test_a.py::test_bc", "tests/x/test_a.py::test_b", False),
        ("tests/x/test_ab.py::test_b", "tests/x/test_a", False),
        ("tests/xy/test_a.py::test_b", "tests/x", False),
    ],
)
def test_a_prefix_names_a_test_only_at_a_node_boundary(
    nodeid: str, prefix: str, expected: bool
) -> None:
    assert matches_prefix(nodeid, prefix) is expected


@pytest.mark.parametrize(
    ("text", "error"),
    [
        ("tests/x.py::test_a\n", "expected 'NODE_ID_PREFIX  # REASON'"),
        ("tests/x.py::test_a  #\n", "expected 'NODE_ID_PREFIX  # REASON'"),
        ("tests/x.py  # 9 s\ntests/x.py  # 9 s\n", "listed twice"),
    ],
)
def test_slow_list_line_without_reason_or_listed_twice_is_refused(
    tmp_path: Path, text: str, error: str
) -> None:
    path = tmp_path / "slow_tests.txt"
    path.write_text(f"# a comment\n\n{text}", encoding="utf-8")
    with pytest.raises(pytest.UsageError, match=re.escape(error)):
        read_slow_tests(path)


def test_slow_list_reads_prefixes_and_reasons(tmp_path: Path) -> None:
    path = tmp_path / "slow_tests.txt"
    path.write_text("# why\ntests/a.py::test_b  # 12 s: a subprocess\n", encoding="utf-8")
    assert read_slow_tests(path) == {"tests/a.py::test_b": "12 s: a subprocess"}


def test_fast_profile_caps_a_property_that_asks_for_more_examples() -> None:
    calls: list[int] = []

    @settings(max_examples=200, deadline=None, database=None)
    @given(st.integers())
    def prop(number: int) -> None:
        calls.append(number)

    cap_examples([SimpleNamespace(obj=prop)], 7)  # type: ignore[list-item]
    prop()
    assert 0 < len(calls) <= 7
    calls.clear()

    @settings(max_examples=5, deadline=None, database=None)
    @given(st.integers())
    def small(number: int) -> None:
        calls.append(number)

    cap_examples([SimpleNamespace(obj=small)], 7)  # type: ignore[list-item]
    small()
    assert 0 < len(calls) <= 5


def _make_dry_run(*args: str) -> str:
    """What ``make -n ARGS`` would run (the venv is taken as installed)."""
    skip = ("MAKEFLAGS", "MAKELEVEL", "MFLAGS", "TEST_WORKERS", "PYTEST_ARGS")  # an outer make's
    env = {k: v for k, v in os.environ.items() if k not in skip}
    done = subprocess.run(
        ["make", "-n", "--no-print-directory", "-o", ".venv/.installed", *args],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=60, check=True,
    )  # fmt: skip
    return done.stdout


@pytest.mark.parametrize("target", ["test", "test-full"])
def test_make_test_runs_the_suite_on_one_worker_more_than_the_cores(target: str) -> None:
    """``make test`` spreads the tests over pytest-xdist workers (a worker often waits on a
    subprocess or PostgreSQL): ``min(cores + 1, 8)`` of them; ``TEST_WORKERS=0`` runs them in one
    process, and ``PYTEST_ARGS`` still reaches pytest."""
    workers = min((os.cpu_count() or 1) + 1, 8)
    line = _make_dry_run(target, "PYTEST_ARGS=-x").strip().splitlines()[-1]
    assert f"-m pytest -n {workers} --dist worksteal -x" in line
    assert "-m pytest -n 0 " in _make_dry_run(target, "TEST_WORKERS=0")
