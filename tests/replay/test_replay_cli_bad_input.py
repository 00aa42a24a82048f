"""``langmem-ext replay`` / ``compare`` on hostile input: one line on stderr naming the file (and
the line or message), exit status 2, never a traceback, a hang or reading without end."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from subprocesses import without_api_keys

from langmem_ext.cli import main
from langmem_ext.replay.prices import PriceError, load_prices
from langmem_ext.replay.transcripts import MAX_JSON_DEPTH, TranscriptError, load_transcript

GOOD = [{"role": "user", "content": "hi ☃ ÷"}, {"role": "assistant", "content": "hello ☃"}]


def _replay(path: Path, *extra: str) -> list[str]:
    return ["replay", str(path), "--strategy", "token_budget:8000", "--no-progress", *extra]


def _one_error_line(capsys: pytest.CaptureFixture[str], code: int) -> str:
    out, err = capsys.readouterr()
    assert code == 2, (out, err)
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("langmem-ext: error: "), err
    assert "Traceback" not in err
    return lines[0]


def _write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


# --- JSON that breaks parsers ------------------------------------------------------------------


@pytest.mark.parametrize("depth", [MAX_JSON_DEPTH + 1, 100_000])
def test_replay_refuses_deeply_nested_json_naming_file_and_line(
    depth: int, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _write(tmp_path, "deep.json", "\n" + "[" * depth + "]" * depth)
    line = _one_error_line(capsys, main(_replay(path)))
    assert f"{path} line 2: JSON nested deeper than {MAX_JSON_DEPTH} levels" in line


def test_replay_refuses_deep_json_on_one_jsonl_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rows = [
        json.dumps(GOOD[0]),
        '{"role": "assistant", "content": ' + "[" * 5_000 + "]" * 5_000 + "}",
    ]
    path = _write(tmp_path, "chat.jsonl", "\n".join(rows))
    line = _one_error_line(capsys, main(_replay(path)))
    assert f"{path} line 2: JSON nested deeper" in line


def test_replay_refuses_deeply_nested_tool_arguments_naming_the_message(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    arguments = '{"a": ' + "[" * 100_000 + "]" * 100_000 + "}"
    messages = [
        {"role": "user", "content": "look it up"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "f", "arguments": arguments}}
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "content": "ok"},
        {"role": "assistant", "content": "done"},
    ]
    path = _write(tmp_path, "tools.json", json.dumps(messages))
    line = _one_error_line(capsys, main(_replay(path)))
    assert f"{path} message 2: tool call 'c1' (f): arguments: JSON nested deeper" in line


def test_replay_refuses_a_dumpd_placeholder_naming_the_message(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    placeholder = {"lc": 1, "type": "not_implemented", "id": ["x", "Thing"], "repr": "Thing()"}
    ok = {"type": "human", "data": {"content": "hi"}}
    path = _write(tmp_path, "dumpd.json", json.dumps([ok, placeholder]))
    line = _one_error_line(capsys, main(_replay(path)))
    assert f"{path} message 2: a dumpd placeholder" in line and "not_implemented" in line


def test_replay_refuses_a_5000_digit_number_naming_file_and_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    text = json.dumps(GOOD[:1])[:-1] + ",\n" + '{"role": "assistant", "n": ' + "9" * 5_000 + "}]"
    path = _write(tmp_path, "big.json", text)
    line = _one_error_line(capsys, main(_replay(path)))
    assert f"{path} line 2: a 5,000-digit number" in line


# --- files that never end ----------------------------------------------------------------------


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="named pipes are POSIX")
def test_replay_refuses_a_fifo_without_waiting_for_a_writer(tmp_path: Path) -> None:
    fifo = tmp_path / "chat.json"
    os.mkfifo(fifo)
    # in a subprocess: a regression would block in open() forever, so the timeout is the guard
    done = subprocess.run(
        [sys.executable, "-m", "langmem_ext", *_replay(fifo)],
        capture_output=True,
        text=True,
        timeout=60,
        env=without_api_keys(),
    )
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip() == (
        f"langmem-ext: error: {fifo}: is a named pipe (FIFO), not a regular file: reading it "
        "could wait forever or never end; save the transcript to a file first"
    )


@pytest.mark.skipif(not Path("/dev/zero").exists(), reason="needs /dev/zero")
def test_replay_refuses_a_device_up_front(capsys: pytest.CaptureFixture[str]) -> None:
    line = _one_error_line(capsys, main(_replay(Path("/dev/zero"))))
    assert "/dev/zero: is a character device, not a regular file" in line


def test_replay_refuses_a_file_over_max_bytes_and_the_flag_raises_the_limit(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _write(tmp_path, "chat.json", json.dumps(GOOD))
    size = path.stat().st_size
    line = _one_error_line(capsys, main(_replay(path, "--max-bytes", str(size - 1))))
    assert f"{path}: is {size:,} bytes, over the limit of {size - 1:,} bytes" in line
    assert "--max-bytes" in line
    assert main(_replay(path, "--max-bytes", str(size))) == 0
    capsys.readouterr()


@pytest.mark.parametrize("bad", ["0", "-1", "x", "9" * 5_000])
def test_replay_max_bytes_flag_refuses_a_bad_value(
    bad: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _write(tmp_path, "chat.json", json.dumps(GOOD))
    with pytest.raises(SystemExit) as info:
        main(_replay(path, "--max-bytes", bad))
    assert info.value.code == 2
    assert "argument --max-bytes: must be an integer >= 1" in capsys.readouterr().err


def test_load_transcript_and_prices_take_max_bytes(tmp_path: Path) -> None:
    path = _write(tmp_path, "chat.json", json.dumps(GOOD))
    with pytest.raises(TranscriptError, match="over the limit of 10 bytes"):
        load_transcript(path, max_bytes=10)
    prices = _write(tmp_path, "prices.json", '{"models": {}}' + " " * 50)
    with pytest.raises(PriceError, match="over the limit of 10 bytes"):
        load_prices(prices, max_bytes=10)


def test_prices_file_that_is_deep_or_a_device_is_one_error_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _write(tmp_path, "chat.json", json.dumps(GOOD))
    deep = _write(tmp_path, "prices.json", "[" * 10_000 + "]" * 10_000)
    line = _one_error_line(capsys, main([*_replay(path), "--prices", str(deep)]))
    assert f"{deep} line 1: JSON nested deeper" in line
    if Path("/dev/zero").exists():
        line = _one_error_line(capsys, main([*_replay(path), "--prices", "/dev/zero"]))
        assert "/dev/zero: is a character device" in line


# --- output and specs --------------------------------------------------------------------------


@pytest.mark.parametrize(
    "env", [{"PYTHONIOENCODING": "ascii"}, {"LANG": "C", "LC_ALL": "C", "PYTHONUTF8": "0"}]
)
def test_replay_prints_on_an_ascii_terminal(env: dict[str, str], tmp_path: Path) -> None:
    path = _write(tmp_path, "chat.json", json.dumps(GOOD))
    done = subprocess.run(
        [sys.executable, "-m", "langmem_ext", "compare", str(path), "--no-progress"],
        capture_output=True,
        timeout=120,
        env={**without_api_keys(), "PYTHONIOENCODING": "", **env},
    )
    assert done.returncode == 0, done.stderr.decode("ascii", "replace")
    assert b"token_budget:8000" in done.stdout
    done.stdout.decode("ascii")  # nothing the terminal cannot show


def test_retrieval_plus_full_says_what_is_wrong(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _write(tmp_path, "chat.json", json.dumps(GOOD))
    argv = ["replay", str(path), "--strategy", "retrieval+full", "--no-progress"]
    line = _one_error_line(capsys, main(argv))
    assert "did you mean full" not in line
    assert (
        "retrieval wraps a strategy that leaves turns out of the view, and 'full' does not" in line
    )


def test_unknown_strategy_hint_never_repeats_the_name(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _write(tmp_path, "chat.json", json.dumps(GOOD))
    line = _one_error_line(capsys, main(["replay", str(path), "--strategy", "token_budgt:800"]))
    assert "did you mean token_budget?" in line
