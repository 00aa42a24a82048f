"""`python -m langmem_ext demo` (a smaller demo than `make demo`) runs offline with no API key."""

from __future__ import annotations

import pytest
from subprocesses import run_python, without_api_keys

from langmem_ext import SlidingWindow, TokenBudget
from langmem_ext.cli import main
from langmem_ext.core.shape import SHAPE_LEGEND, view_shape
from langmem_ext.testing import agent_loop


def test_demo_runs_offline_without_api_keys_in_a_fresh_process() -> None:
    done = run_python(
        "-m", "langmem_ext", "demo", "--messages", "200", "--every", "25", env=without_api_keys()
    )
    assert done.returncode == 0, done.stderr
    assert "over budget: 0" in done.stdout
    assert "provider-invalid views: 0" in done.stdout
    assert "model calls:" in done.stdout


def test_demo_with_exact_tiktoken_counting(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["demo", "--messages", "150", "--counter", "gpt-4o", "--every", "0"]) == 0
    out = capsys.readouterr().out
    assert "TiktokenCounter(model='gpt-4o', encoding='o200k_base')" in out
    assert "over budget: 0" in out


def test_demo_reports_configuration_errors_clearly(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["demo", "--max-tokens", "100", "--target-tokens", "200"]) == 2
    assert (
        "langmem-ext: error: --target-tokens must be between 1 and --max-tokens (100), got 200"
        in capsys.readouterr().err
    )
    assert main(["demo", "--messages", "1"]) == 0
    assert "no model calls" in capsys.readouterr().out


def test_demo_table_draws_each_view_with_view_shape_under_its_legend(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The demo's view columns are :func:`view_shape` of the views the two strategies return
    (cut to the column), under the one legend line :data:`SHAPE_LEGEND`."""
    assert main(["demo", "--messages", "160", "--every", "10"]) == 0
    out = capsys.readouterr().out
    assert f"\n  {SHAPE_LEGEND}\n" in out
    rows = [line.split(" | ") for line in out.splitlines() if line[:5].strip().isdigit()]
    budget = TokenBudget(8_000, target_tokens=4_000, reserve_tokens=500)
    window = SlidingWindow(12, counter=budget.counter)
    expected = []
    b_state = w_state = None
    for call, history in enumerate(agent_loop(160, seed=7)):
        b, w = budget.apply(history, b_state), window.apply(history, w_state)
        b_state, w_state = b.state, w.state
        if call % 10 == 0:
            expected.append((view_shape(b.messages, width=32), view_shape(w.messages, width=22)))
    drawn = [(r[1][:32].rstrip(), r[2][:22].rstrip()) for r in rows]
    assert drawn == expected
    assert drawn[0] == ("S H", "S H") and any("×(" in b for b, _ in drawn)


def test_help_tells_how_to_replay_the_thread_make_demo_writes(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """`make demo` (examples/agent.py) and `compare` share one flag, ``--sqlite PATH``: the
    top-level help says so, and compare's help lists it."""
    with pytest.raises(SystemExit):
        main(["--help"])
    top = " ".join(capsys.readouterr().out.split())
    assert "make demo" in top and "--sqlite PATH --thread demo" in top
    with pytest.raises(SystemExit):
        main(["compare", "--help"])
    assert "--sqlite PATH" in capsys.readouterr().out
