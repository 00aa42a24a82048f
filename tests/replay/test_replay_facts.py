"""Which facts survived a replay: facts given or found in the transcript, followed call by call
(the call a fact was said at, kept at the final call, share of later calls), in the table, the
JSON and CSV outputs and the command line; and the progress line of ``compare``."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import pytest
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage
from langgraph.store.memory import InMemoryStore

from langmem_ext import SlidingWindow, TokenBudget
from langmem_ext.cli import main
from langmem_ext.replay import (
    FactError,
    compare,
    detect_facts,
    parse_strategy,
    read_facts,
    replay,
)
from langmem_ext.replay.progress import CompareProgress, format_duration
from langmem_ext.testing import synthetic_history

CODE = "ZX-4471"


def _planted_chat() -> list[BaseMessage]:
    """A 300-turn chat (synthetic, no tool calls) whose 40th human turn gives a code and whose
    last turn asks for it again."""
    messages = list(synthetic_history(598, seed=11, words=(20, 60), tool_rate=0.0))
    humans = [i for i, m in enumerate(messages) if isinstance(m, HumanMessage)]
    messages[humans[39]] = HumanMessage(
        f"For the record: the door code of the Lisbon warehouse is {CODE}.", id="planted"
    )
    messages += [
        HumanMessage("What is the door code of the Lisbon warehouse again?", id="ask"),
        AIMessage("Let me look that up.", id="answer"),
    ]
    assert sum(isinstance(m, HumanMessage) for m in messages) == 300
    return messages


def test_a_planted_code_survives_retrieval_and_not_the_plain_budget(tmp_path: Path) -> None:
    messages = _planted_chat()
    _, retrieval = parse_strategy("retrieval+token_budget:2000", store=InMemoryStore)
    result = compare(
        messages,
        {"token_budget": TokenBudget(2_000), "retrieval+token_budget": retrieval},
        facts=[CODE.lower()],  # matched case-insensitively
        progress=False,
    )
    plain, wrapped = result.replays
    assert plain.error is None and wrapped.error is None
    assert plain.facts is not None and wrapped.facts is not None
    (lost,), (kept,) = plain.facts, wrapped.facts
    planted = next(i for i, m in enumerate(messages) if m.id == "planted")
    for record in (lost, kept):
        assert record.said_at_message == planted
        # the first call after the planted message saw it: the 40th
        assert record.said_at_call == 40
        assert record.later_calls == len(plain.calls) - 40
    assert not lost.kept_at_end and kept.kept_at_end
    assert plain.calls[-1].facts_in_view == 0 and wrapped.calls[-1].facts_in_view == 1
    rows = {r["strategy"]: r for r in result.rows()}
    assert rows["token_budget"]["facts_kept_at_end"] == 0
    assert rows["retrieval+token_budget"]["facts_kept_at_end"] == 1
    table = result.table().splitlines()
    header = [c.strip() for c in table[0].strip("|").split("|")]
    assert header[-3:] == ["facts kept at end", "mean share of later calls", "summarizer $"]
    body = {line.split(" | ")[0].strip("| "): line for line in table[2:]}
    assert " 0 / 1 " in body["token_budget"] and " 1 / 1 " in body["retrieval+token_budget"]
    data = json.loads(result.to_json())
    assert data["strategies"][1]["facts"][0]["kept_at_end"] is True
    assert data["strategies"][0]["facts"][0]["said_at_call"] == 40
    facts_csv = list(csv.DictReader(io.StringIO(result.facts_to_csv(tmp_path / "f.csv"))))
    assert [(r["strategy"], r["kept_at_end"]) for r in facts_csv] == [
        ("token_budget", "False"),
        ("retrieval+token_budget", "True"),
    ]


def test_the_call_a_fact_was_said_at_and_the_share_of_later_calls() -> None:
    messages: list[BaseMessage] = [SystemMessage("Be brief.", id="s")]
    for turn in range(5):
        said = "Locker A7K2 is mine." if turn == 1 else f"Question {turn}."
        messages += [HumanMessage(said, id=f"h{turn}"), AIMessage(f"Answer {turn}.", id=f"a{turn}")]
    # calls 1..5 answer turns 0..4; the code is said at turn 1, so at call 2
    full = replay(messages, None, facts=["a7k2"], progress=False)
    window = replay(messages, SlidingWindow(3), facts=["a7k2"], progress=False)
    (whole,), (windowed,) = full.facts or [], window.facts or []
    assert (whole.said_at_message, whole.said_at_call) == (3, 2)
    assert (whole.later_calls, whole.later_calls_with_it, whole.later_share) == (3, 3, 1.0)
    assert whole.kept_at_end
    # a window of the last three messages holds it at calls 2 (h0 a0 h1) and 3 (h1 a1 h2)
    assert [c.facts_in_view for c in window.calls] == [0, 1, 1, 0, 0]
    assert (windowed.later_calls, windowed.later_calls_with_it) == (3, 1)
    assert windowed.later_share == pytest.approx(1 / 3) and not windowed.kept_at_end
    assert window.totals()["facts_later_share"] == pytest.approx(1 / 3)
    assert full.totals()["facts"] == 1 and full.totals()["facts_kept_at_end"] == 1


def test_a_fact_never_said_counts_as_not_kept_and_no_facts_means_no_columns() -> None:
    messages = synthetic_history(20, seed=2, words=(10, 20))
    result = replay(messages, None, facts=["no such fact anywhere"], progress=False)
    (record,) = result.facts or []
    assert record.said_at_message is None and record.said_at_call is None
    assert not record.kept_at_end and record.later_share is None
    plain = compare(messages, [None], progress=False)
    assert plain.replays[0].facts is None and "facts kept" not in plain.table()
    assert json.loads(plain.to_json())["strategies"][0]["facts"] is None


def test_auto_detection_finds_numbers_codes_and_names_said_once() -> None:
    messages: list[BaseMessage] = [
        SystemMessage("You work for Acme. Ticket prefix TK-100.", id="s"),
        HumanMessage("Hi, I am Marta Kowalski and my order 48213 has not arrived.", id="h0"),
        AIMessage("Sorry to hear that. Which address, Marta?", id="a0"),
        HumanMessage("Ship it to Rua Augusta 12, Lisbon. The parcel code is zx-4471.", id="h1"),
        AIMessage("Thanks. I opened ticket TK-100-B7 for order 48213.", id="a1"),
        HumanMessage("Great. Also my locker A7K2 is at Berlin central station.", id="h2"),
        AIMessage("Noted: 12 days ago, 2 parcels.", id="a2"),
    ]
    # "Marta" alone and "48213" are in two messages (no single origin); "Hi", "Ship", "Sorry",
    # "Thanks", "Great", "Also", "Noted" open sentences; "12" and "2" are under 3 digits;
    # "Acme" and "TK-100" are in the system prompt (in every view); the code inside
    # "TK-100-B7" is that one code
    assert detect_facts(messages) == [
        "Marta Kowalski",
        "Rua Augusta",
        "Lisbon",
        "zx-4471",
        "TK-100-B7",
        "A7K2",
        "Berlin",
    ]
    assert detect_facts(messages, limit=2) == ["Marta Kowalski", "Rua Augusta"]
    # auto: found before the final call (a fact said in the last answer is in no input)
    result = replay(messages, None, facts="auto", progress=False)
    assert [f.fact for f in result.facts or []] == [
        "Marta Kowalski",
        "Rua Augusta",
        "Lisbon",
        "zx-4471",
        "TK-100-B7",
        "A7K2",
        "Berlin",
    ]
    assert all(f.kept_at_end for f in result.facts or [])
    with pytest.raises(ValueError, match="'auto' or None"):
        replay(messages, None, facts="automatic", progress=False)


def test_a_facts_file_is_one_fact_a_line(tmp_path: Path) -> None:
    path = tmp_path / "facts.txt"
    path.write_text("# codes to keep\nZX-4471\n\n  zx-4471  \nMarta Kowalski\n", encoding="utf-8")
    assert read_facts(path) == ["ZX-4471", "Marta Kowalski"]
    path.write_text("# nothing\n\n", encoding="utf-8")
    with pytest.raises(FactError, match=r"facts.txt: no facts"):
        read_facts(path)
    with pytest.raises(FactError, match=r"missing.txt"):
        read_facts(tmp_path / "missing.txt")


def test_the_command_line_follows_facts_from_a_file_or_found(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from langchain_core.messages import messages_to_dict

    messages = _planted_chat()[:200] + _planted_chat()[-2:]
    transcript = tmp_path / "chat.json"
    transcript.write_text(json.dumps(messages_to_dict(messages)), encoding="utf-8")
    facts = tmp_path / "facts.txt"
    facts.write_text(f"{CODE}\n", encoding="utf-8")
    argv = ["compare", str(transcript), "--strategy", "full", "--strategy", "token_budget:1500"]
    out_csv, out_json = tmp_path / "calls.csv", tmp_path / "all.json"
    code = main([*argv, "--facts", str(facts), "--csv", str(out_csv), "--json", str(out_json)])
    out, err = capsys.readouterr()
    assert code == 0, err
    assert f"facts followed: 1 ({facts}): {CODE}" in out
    assert "not modelled: the transcript has no timestamps" in out
    rows = [line for line in out.splitlines() if line.startswith("| ")]
    assert "facts kept at end" in rows[0]
    assert " 1 / 1 " in rows[1] and " 0 / 1 " in rows[2]
    facts_rows = (tmp_path / "calls-facts.csv").read_text().splitlines()
    assert facts_rows[0].startswith("strategy,fact,said_at_message,said_at_call,kept_at_end")
    assert len(facts_rows) == 3
    assert json.loads(out_json.read_text())["strategies"][0]["facts"][0]["fact"] == CODE
    assert main([*argv, "--facts", "auto", "--no-progress"]) == 0
    out, _ = capsys.readouterr()
    assert "facts followed: " in out and " (found in the transcript): " in out
    assert main([*argv, "--facts", str(tmp_path / "none.txt")]) == 2
    assert "none.txt" in capsys.readouterr().err


# -- the progress line of compare ------------------------------------------------------------


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_compare_shows_no_progress_when_not_on_a_terminal(
    capsys: pytest.CaptureFixture[str],
) -> None:
    messages = synthetic_history(30, seed=4, words=(10, 30))
    compare(messages, [None, TokenBudget(400)])  # progress=None: a terminal only
    out, err = capsys.readouterr()
    assert out == "" and err == ""
    piped = io.StringIO()
    compare(messages, [None], progress_stream=piped)
    assert piped.getvalue() == ""
    terminal = _Terminal()
    compare(messages, [None], progress=False, progress_stream=terminal)
    assert terminal.getvalue() == ""


def test_compare_names_the_running_strategy_and_an_eta_on_a_terminal() -> None:
    messages = synthetic_history(30, seed=4, words=(10, 30))
    terminal = _Terminal()
    compare(messages, {"whole": None, "budget": TokenBudget(400)}, progress_stream=terminal)
    shown = terminal.getvalue()
    assert "[1/2] whole: call " in shown and "[2/2] budget: call " in shown
    assert "ETA " in shown
    assert shown.endswith("\r")  # the line is cleared for the table


def test_the_eta_weighs_the_running_strategy_at_its_own_pace() -> None:
    now = [0.0]
    status = CompareProgress(
        ["fast", "slow", "next"], 10, enabled=True, stream=io.StringIO(), clock=lambda: now[0]
    )
    status.start(0)
    for _ in range(10):  # 1 s a call
        now[0] += 1
        status.update()
    status.start(1)
    for _ in range(5):  # 3 s a call
        now[0] += 3
        status.update()
    # 5 calls left at 3 s, then 10 calls at the mean pace (25 s / 15 calls)
    assert status.eta() == pytest.approx(5 * 3 + 10 * 25 / 15)
    assert "[2/3] slow: call 5/10, 0:25 so far, ETA 0:32" in status.line()
    assert format_duration(3_723) == "1:02:03"
