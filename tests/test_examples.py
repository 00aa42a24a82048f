"""The examples run offline with no API key (the README's main job runs examples/agent.py)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_the_agent_example_runs_offline_on_sqlite_and_compacts(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY")}
    db = tmp_path / "agent.sqlite"
    done = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "agent.py"), "--turns", "30", "--db", str(db)],
        capture_output=True,
        text=True,
        env=env,
        timeout=180,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "offline scripted model" in done.stdout
    assert "compaction #1" in done.stdout
    rows = [line.split() for line in done.stdout.splitlines() if line[:4].strip().isdigit()]
    assert len(rows) == 30
    state_msgs, view_msgs, view_tokens = (
        [int(r[1]) for r in rows],
        [int(r[3]) for r in rows],
        [int(r[4]) for r in rows],
    )
    assert all(v > 0 for v in view_msgs) and all(0 < t <= 1_500 for t in view_tokens)
    assert max(state_msgs) < 2 * 30  # rewrite mode: folded messages leave the state
    assert db.exists() and db.stat().st_size > 0
