"""`python -m langmem_ext demo` (a smaller demo than `make demo`) runs offline with no API key."""

from __future__ import annotations

import pytest
from subprocesses import run_python, without_api_keys

from langmem_ext.cli import main, shape


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


def test_shape_draws_a_view() -> None:
    from langchain_core.messages import AIMessage, HumanMessage, SystemMessage, ToolMessage

    view = [
        SystemMessage("s"),
        HumanMessage("h"),
        AIMessage("", tool_calls=[{"name": "f", "args": {}, "id": "1"}]),
        ToolMessage("r", tool_call_id="1"),
        AIMessage("a"),
    ]
    assert shape(view) == "SHcTA"
    assert shape(view * 10, limit=10) == "SHc…ASHcTA"


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
