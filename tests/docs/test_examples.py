"""The examples run offline with no API key (`make demo`, the README's main job, runs
examples/agent.py; docs/agents.md describes it)."""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from subprocesses import run_command, run_python, without_api_keys

from langmem_ext import SHAPE_LEGEND

ROOT = Path(__file__).resolve().parents[2]
TURNS = 30


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, Path]:
    """One offline run of ``make demo``'s script: (its stdout, its SQLite file)."""
    db = tmp_path_factory.mktemp("demo") / "agent.sqlite"
    script = str(ROOT / "examples" / "agent.py")
    done = run_python(
        script, "--turns", str(TURNS), "--sqlite", str(db), env=without_api_keys(), timeout=180
    )
    assert done.returncode == 0, done.stderr
    return done.stdout, db


def test_the_agent_example_runs_offline_on_sqlite_and_compacts(demo: tuple[str, Path]) -> None:
    stdout, db = demo
    assert "offline scripted model" in stdout
    assert "compaction #1" in stdout
    rows = [line.split() for line in stdout.splitlines() if line[:4].strip().isdigit()]
    assert len(rows) == TURNS
    state_msgs, view_msgs, view_tokens = (
        [int(r[1]) for r in rows],
        [int(r[3]) for r in rows],
        [int(r[4]) for r in rows],
    )
    assert all(v > 0 for v in view_msgs) and all(0 < t <= 1_500 for t in view_tokens)
    assert max(state_msgs) < 2 * TURNS  # rewrite mode: folded messages leave the state
    assert db.exists() and db.stat().st_size > 0


def test_the_demo_prints_where_it_writes_and_how_to_replay_it(
    demo: tuple[str, Path], tmp_path: Path
) -> None:
    """One flag, ``--sqlite PATH``, for the demo and for ``langmem-ext compare``: the demo prints
    the file it wrote and the compare command for its thread, and that command runs; the
    columns say what they count (``memory bytes``, not ``memory B``)."""
    stdout, db = demo
    assert f"checkpoints of thread 'demo' in {db}" in stdout
    header = next(line for line in stdout.splitlines() if line.lstrip().startswith("turn"))
    assert header.split() == [
        "turn",
        "state",
        "msgs",
        "memory",
        "bytes",
        "view",
        "msgs",
        "view",
        "tokens",
        "event",
    ]
    assert "memory B" not in stdout and "the `memory` channel as JSON, bytes" in stdout
    command = stdout.splitlines()[-1].split(": ", 1)[1].split()
    assert command[1:7] == ["compare", "--sqlite", str(db), "--thread", "demo", "--strategy"]
    done = run_python("-m", "langmem_ext", *command[1:], "--no-progress", env=without_api_keys())
    assert done.returncode == 0, done.stderr
    assert any(line.startswith("| summary_buffer:1500 |") for line in done.stdout.splitlines())


def test_the_demo_writes_a_temporary_file_by_default_and_documents_sqlite_in_help(
    tmp_path: Path,
) -> None:
    script = str(ROOT / "examples" / "agent.py")
    helped = run_python(script, "--help", env=without_api_keys())
    assert helped.returncode == 0, helped.stderr
    assert "--sqlite PATH" in helped.stdout and "--db" not in helped.stdout
    assert "langmem-ext compare --sqlite PATH --thread demo" in " ".join(helped.stdout.split())
    done = run_python(script, "--turns", "1", env=without_api_keys(), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    where = re.search(r"checkpoints of thread 'demo' in (\S+agent\.sqlite)", done.stdout)
    assert where is not None and Path(where.group(1)).is_file()
    assert not Path(where.group(1)).is_relative_to(tmp_path)  # not the working directory
    old = run_python(
        script, "--turns", "1", "--db", str(tmp_path / "old.sqlite"), env=without_api_keys()
    )
    assert old.returncode == 0 and (tmp_path / "old.sqlite").is_file()  # the old name still works


def _expand(shape: str) -> list[str]:
    """``S+ 2×(HA) H`` -> the letters, one per message: ``['S+', 'H', 'A', 'H', 'A', 'H']``."""
    letters: list[str] = []
    for part in shape.split(" "):
        group = re.fullmatch(r"(\d+)×\((.+)\)", part)
        count, turn = (int(group.group(1)), group.group(2)) if group else (1, part)
        assert re.fullmatch(r"(?:S\+|[SRHAcT?])+", turn), (shape, part)
        letters += re.findall(r"S\+|[SRHAcT?]", turn) * count
    return letters


def test_demo_prints_the_view_shape_and_the_summary_text(demo: tuple[str, Path]) -> None:
    """`make demo` promised "the view the model got" but printed only counts: it now prints
    each view's shape (``view_shape``, one line per turn, one letter per message of the view,
    under the package's one-line legend) and the summary text whenever it changes."""
    stdout, _ = demo
    lines = stdout.splitlines()
    assert f"view {SHAPE_LEGEND}" in lines
    rows = [i for i, line in enumerate(lines) if line[:4].strip().isdigit()]
    assert all(lines[i + 1].strip().startswith("view: ") for i in rows), lines[rows[0] + 1]
    shapes = [lines[i + 1].strip().removeprefix("view: ") for i in rows]
    for i, s in zip(rows, shapes, strict=True):
        letters = _expand(s)
        assert len(letters) == int(lines[i].split()[3]), (lines[i], s)  # the shape is the view
        assert letters[0] in ("S", "S+") and "H" in letters
        assert set(letters) <= {"S", "S+", "H", "A", "c", "T"}
    # a tool round is shown as call then result; after the first fold the summary leads the view
    assert any("HcTA" in s for s in shapes)
    first_fold = next(n for n, i in enumerate(rows) if "compaction #1" in lines[i])
    assert all(s.startswith("S+ ") for s in shapes[first_fold:])
    assert not any("S+" in s for s in shapes[:first_fold])
    # the summary text is printed when it changes, right after the turn that changed it
    summaries = [line.strip() for line in lines if line.strip().startswith("summary: ")]
    folds = sum("compaction #" in line for line in lines)
    assert len(summaries) == folds >= 1
    assert summaries[0].startswith("summary: Orders discussed: 1001")
    assert lines[rows[first_fold] + 2].strip() == summaries[0]


def _seed_command(how: str, tmp_path: Path) -> list[str]:
    """The three ways a user runs the seeder: the CLI of the installed package, the checkout's
    script, and the module file copied to a machine without langmem_ext."""
    if how == "cli":
        return [sys.executable, "-m", "langmem_ext", "seed-tiktoken"]
    if how == "script":
        return [sys.executable, str(ROOT / "scripts" / "seed_tiktoken.py")]
    copied = tmp_path / "copied" / "tiktoken_seed.py"
    copied.parent.mkdir(exist_ok=True)
    shutil.copy(ROOT / "langmem_ext" / "counting" / "seeding.py", copied)
    return [sys.executable, str(copied)]


@pytest.mark.parametrize("how", ["cli", "script", "copied"])
def test_seed_tiktoken_is_a_user_facing_offline_script(tmp_path: Path, how: str) -> None:
    """The README tells users behind a firewall to run `langmem-ext seed-tiktoken`: it writes the
    encodings under the sha1 of their download URL, prints the export line, and tiktoken then
    loads them with no network (a dead proxy makes any download attempt fail)."""
    command = _seed_command(how, tmp_path)

    def _seed_script(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
        return run_command([*command, *args], env=env, cwd=tmp_path)

    offline = {
        **{k: v for k, v in os.environ.items() if k != "TIKTOKEN_CACHE_DIR"},
        "HTTPS_PROXY": "http://127.0.0.1:9",
        "https_proxy": "http://127.0.0.1:9",
    }
    listed = _seed_script("--urls", env=offline)
    assert listed.returncode == 0, listed.stderr
    urls = dict(re.findall(r"^(\w+)\s+(https://\S+)", listed.stdout, flags=re.M))
    assert set(urls) == {"cl100k_base", "o200k_base"}

    cache = tmp_path / "tiktoken"
    seeded = _seed_script(str(cache), env=offline)
    assert seeded.returncode == 0, seeded.stderr
    assert seeded.stdout.strip() == f"export TIKTOKEN_CACHE_DIR={cache.resolve()}"
    names = {hashlib.sha1(url.encode()).hexdigest() for url in urls.values()}
    assert {p.name for p in cache.iterdir()} == names

    # --from: files copied from a machine that could download them, named as in the URL
    source = tmp_path / "downloaded"
    source.mkdir()
    o200k = hashlib.sha1(urls["o200k_base"].encode()).hexdigest()
    (source / "o200k_base.tiktoken").write_bytes((cache / o200k).read_bytes())
    other = tmp_path / "other"
    copied = _seed_script(
        str(other), "--from", str(source), "--encoding", "o200k_base", env=offline
    )
    assert copied.returncode == 0, copied.stderr
    assert [p.name for p in other.iterdir()] == [o200k]
    # a corrupted file is refused, naming the encoding and where to get it again
    (source / "o200k_base.tiktoken").write_bytes(b"not a bpe file")
    bad = _seed_script(
        str(tmp_path / "bad"), "--from", str(source), "--encoding", "o200k_base", env=offline
    )
    assert bad.returncode == 1 and "o200k_base" in bad.stderr and urls["o200k_base"] in bad.stderr

    check = (
        "from langmem_ext import TiktokenCounter; "
        "print(TiktokenCounter(model='gpt-4o').count_text('hello world'))"
    )
    counted = run_python("-c", check, env={**offline, "TIKTOKEN_CACHE_DIR": str(cache)})
    assert counted.returncode == 0, counted.stderr
    assert counted.stdout.strip() == "2"
