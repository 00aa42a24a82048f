"""``langmem-ext replay`` / ``compare`` on every transcript format, on
checkpointer threads (SQLite and PostgreSQL), and one clear line with exit 2 on bad input."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langgraph.graph import START, MessagesState, StateGraph
from subprocesses import run_python, without_api_keys

from langmem_ext.cli import main

FIXTURES = Path(__file__).parents[1] / "fixtures" / "transcripts"
GOOD = ["langchain.json", "langchain.jsonl", "openai.json", "openai.jsonl", "anthropic.json"]


def _table(out: str) -> list[list[str]]:
    rows = [line for line in out.splitlines() if line.startswith("| ")]
    return [[cell.strip() for cell in row.strip("|").split("|")] for row in rows[1:]]


@pytest.mark.parametrize("name", GOOD)
def test_compare_reads_every_format_and_writes_a_png(
    name: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    png = tmp_path / "out.png"
    code = main(
        [
            "compare",
            str(FIXTURES / name),
            "--strategy",
            "full",
            "--strategy",
            "token_budget:200,overflow=clip",
            "--strategy",
            "summary_buffer:200,max_summary_tokens=40",
            "--plot",
            str(png),
            "--no-progress",
        ]
    )
    out, err = capsys.readouterr()
    assert code == 0, err
    rows = _table(out)
    assert [r[0] for r in rows] == [
        "full",
        "token_budget:200,overflow=clip",
        "summary_buffer:200,max_summary_tokens=40",
    ]
    calls = {r[1] for r in rows}
    assert len(calls) == 1 and int(calls.pop()) >= 2  # every strategy replayed every call
    assert all(r[-2] == "0" for r in rows), "a view that a provider would reject"
    assert png.read_bytes().startswith(b"\x89PNG")
    assert f"wrote {png}" in err


def test_replay_prints_every_call_and_writes_csv_and_json(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    csv_path, json_path = tmp_path / "calls.csv", tmp_path / "all.json"
    code = main(
        [
            "replay",
            str(FIXTURES / "anthropic.json"),
            "--strategy",
            "token_budget:80",
            "--model",
            "anthropic:claude-sonnet-4",
            "--csv",
            str(csv_path),
            "--json",
            str(json_path),
            "--no-progress",
        ]
    )
    out, err = capsys.readouterr()
    assert code == 0, err
    data = json.loads(json_path.read_text())
    (strategy,) = data["strategies"]
    calls = strategy["calls"]
    assert data["model"] == "anthropic:claude-sonnet-4" and data["source"].endswith(
        "anthropic.json"
    )
    lines = [line.split() for line in out.splitlines() if line[:5].strip().isdigit()]
    assert [int(line[0]) for line in lines] == [c["call"] for c in calls]
    assert [int(line[6].replace(",", "")) for line in lines] == [c["view_tokens"] for c in calls]
    assert len(csv_path.read_text().splitlines()) == len(calls) + 1


def test_replay_without_a_strategy_replays_the_default_one(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from langmem_ext.replay.cli import DEFAULT_COMPARE, DEFAULT_REPLAY

    assert DEFAULT_REPLAY in DEFAULT_COMPARE
    code = main(["replay", str(FIXTURES / "openai.json"), "--every", "0", "--no-progress"])
    out, err = capsys.readouterr()
    assert code == 0, err
    assert [row[0] for row in _table(out)] == [DEFAULT_REPLAY]


def test_the_console_script_runs_offline(tmp_path: Path) -> None:
    done = run_python(
        "-m",
        "langmem_ext",
        "compare",
        str(FIXTURES / "openai.json"),
        "--strategy",
        "tiered_summary:300",
        env=without_api_keys(),
    )
    assert done.returncode == 0, done.stderr
    assert "| tiered_summary:300 |" in done.stdout


# -- checkpointer threads --------------------------------------------------------------------


def _run_agent_thread(checkpointer: Any, thread: str) -> list[BaseMessage]:
    """Three turns of a scripted tool-calling agent on ``checkpointer``; the final messages."""
    turn = {"n": 0}

    def agent(state: MessagesState) -> dict[str, list[BaseMessage]]:
        turn["n"] += 1
        n = turn["n"]
        call = {"id": f"c{n}", "name": "lookup", "args": {"q": f"item {n}"}}
        return {
            "messages": [
                AIMessage("looking that up", tool_calls=[call], id=f"a{n}"),
                ToolMessage(f"item {n} is in aisle {n * 7}", tool_call_id=f"c{n}", id=f"t{n}"),
                AIMessage(f"Item {n} is in aisle {n * 7}.", id=f"b{n}"),
            ]
        }

    builder = StateGraph(MessagesState)
    builder.add_node("agent", agent)
    builder.add_edge(START, "agent")
    graph = builder.compile(checkpointer=checkpointer)
    config = {"configurable": {"thread_id": thread}}
    for n in range(1, 4):
        state = graph.invoke(
            {"messages": [HumanMessage(f"where is item {n}?", id=f"h{n}")]}, config
        )
    return list(state["messages"])


def test_compare_reads_a_sqlite_checkpointer_thread(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from langgraph.checkpoint.sqlite import SqliteSaver

    db = tmp_path / "agent.sqlite"
    with sqlite3.connect(db, check_same_thread=False) as conn:
        messages = _run_agent_thread(SqliteSaver(conn), "t-42")
    code = main(["compare", "--sqlite", str(db), "--thread", "t-42", "--strategy", "full"])
    out, err = capsys.readouterr()
    assert code == 0, err
    assert f"{len(messages)} messages" in out.splitlines()[0]
    ((name, calls, *_),) = _table(out)
    assert name == "full" and int(calls) == sum(isinstance(m, AIMessage) for m in messages)
    assert main(["compare", "--sqlite", str(db), "--thread", "nope"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "t-42" in err  # names the threads that exist


def test_compare_reads_a_postgres_checkpointer_thread(
    pg_schema_dsn: str, capsys: pytest.CaptureFixture[str]
) -> None:
    from langgraph.checkpoint.postgres import PostgresSaver

    with PostgresSaver.from_conn_string(pg_schema_dsn) as saver:
        saver.setup()
        messages = _run_agent_thread(saver, "pg-thread")
    code = main(
        ["replay", "--postgres", pg_schema_dsn, "--thread", "pg-thread", "--strategy", "trim:100"]
    )
    out, err = capsys.readouterr()
    assert code == 0, err
    ((name, calls, *_),) = _table(out)
    assert name == "trim:100" and int(calls) == sum(isinstance(m, AIMessage) for m in messages)


# -- bad input: one line, exit 2 -------------------------------------------------------------


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (["compare", str(FIXTURES / "unknown_format.json")], "unknown_format.json"),
        (["compare", str(FIXTURES / "truncated.json")], "line "),
        (["compare", str(FIXTURES / "bad_line.jsonl")], "line 3"),
        (["compare", str(FIXTURES / "orphan_tool_result.json")], "call_9"),
        (["compare", str(FIXTURES / "missing.json")], "missing.json"),
        (["compare", str(FIXTURES / "openai.json"), "--strategy", "tokn_budget:5"], "did you mean"),
        (["compare", str(FIXTURES / "openai.json"), "--model", "acme:big"], "no price for model"),
        (["compare", str(FIXTURES / "openai.json"), "--thread", "t"], "--thread goes with"),
        (["compare", "--sqlite", "x.sqlite"], "need --thread"),
        (["compare"], "give a transcript FILE"),
        (
            ["replay", str(FIXTURES / "openai.json"), "--strategy", "full", "--counter", "claude"],
            "claude",
        ),
        (
            [
                "compare",
                str(FIXTURES / "openai.json"),
                "--strategy",
                "full",
                "--plot",
                "/nonexistent/x.png",
            ],
            "--plot /nonexistent/x.png: cannot write",
        ),
    ],
)
def test_bad_input_is_one_clear_line_and_exit_2(
    argv: list[str], needle: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main([*argv, "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("langmem-ext: error: ") and err.count("\n") == 1, err
    assert needle in err


def test_a_transcript_with_no_model_call_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "only_human.json"
    path.write_text(json.dumps([{"role": "user", "content": "hello?"}]))
    assert main(["compare", str(path)]) == 2
    assert "no model call to replay" in capsys.readouterr().err
