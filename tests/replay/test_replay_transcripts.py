"""Transcript loaders for ``langmem-ext replay/compare``.

LangChain (``messages_to_dict`` and ``dumpd``), OpenAI Chat Completions and Anthropic Messages
files, as one JSON document or JSONL, are detected and parsed into LangChain messages with tool
calls, tool results, statuses, names and images intact and a stable id on every message; bad
files give one-line :class:`TranscriptError` naming the line or message. LangGraph threads are
read from SQLite and PostgreSQL checkpointers, read only.
"""

from __future__ import annotations

import operator
import sqlite3
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, Any

import pytest
from langchain_core.messages import (
    AIMessage,
    BaseMessage,
    HumanMessage,
    SystemMessage,
    ToolMessage,
    messages_to_dict,
)
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import START, MessagesState, StateGraph
from typing_extensions import TypedDict

from langmem_ext.core.messages import validate
from langmem_ext.errors import LangmemExtError
from langmem_ext.replay.transcripts import (
    Transcript,
    TranscriptError,
    load_postgres_thread,
    load_sqlite_thread,
    load_transcript,
    messages_from_checkpointer,
    parse_transcript,
)

FIXTURES = Path(__file__).parents[1] / "fixtures" / "transcripts"
GOOD = {
    "langchain.json": "langchain",
    "langchain.jsonl": "langchain",
    "openai.json": "openai",
    "openai.jsonl": "openai",
    "anthropic.json": "anthropic",
}


def load(name: str, **kwargs: Any) -> Transcript:
    return load_transcript(FIXTURES / name, **kwargs)


def error_of(data: str, **kwargs: Any) -> TranscriptError:
    with pytest.raises(TranscriptError) as info:
        parse_transcript(data, **kwargs)
    return info.value


def assert_one_line(error: TranscriptError) -> None:
    assert "\n" not in str(error) and str(error).strip() == str(error)


# --------------------------------------------------------------------------------------------
# the good fixtures


@pytest.mark.parametrize(("name", "fmt"), GOOD.items())
def test_detects_format_and_gives_a_valid_history(name: str, fmt: str) -> None:
    transcript = load(name)
    assert transcript.format == fmt
    assert transcript.source == str(FIXTURES / name)
    assert all(isinstance(m, BaseMessage) for m in transcript.messages)
    errors = [f for f in validate(transcript.messages) if f.severity == "error"]
    assert errors == []


@pytest.mark.parametrize("name", GOOD)
def test_every_message_has_a_stable_unique_id(name: str) -> None:
    first, second = load(name), load(name)
    ids = [m.id for m in first.messages]
    assert all(ids) and len(set(ids)) == len(ids)
    assert ids == [m.id for m in second.messages]
    stem = name.split(".")[0]
    assert ids[0] == f"{stem}-0"


def test_langchain_json() -> None:
    messages = load("langchain.json").messages
    assert [type(m) for m in messages] == [
        SystemMessage,
        HumanMessage,
        AIMessage,
        ToolMessage,
        ToolMessage,
        AIMessage,
        HumanMessage,
    ]
    assert messages[1].id == "lc-h1"  # ids in the file are kept
    ai = messages[2]
    assert isinstance(ai, AIMessage)
    assert [(c["id"], c["name"], c["args"]) for c in ai.tool_calls] == [
        ("call_1", "get_weather", {"city": "Paris"}),
        ("call_2", "get_weather", {"city": "Oslo"}),
    ]
    ok, failed = messages[3], messages[4]
    assert isinstance(ok, ToolMessage) and isinstance(failed, ToolMessage)
    assert (ok.tool_call_id, ok.status, ok.name) == ("call_1", "success", "get_weather")
    assert (failed.tool_call_id, failed.status) == ("call_2", "error")
    assert messages[6].content[1] == {  # type: ignore[index]
        "type": "image_url",
        "image_url": {"url": "https://example.com/paris.png"},
    }


def test_langchain_jsonl_reads_dumpd_and_messages_to_dict_lines() -> None:
    messages = load("langchain.jsonl").messages
    assert [type(m) for m in messages] == [
        SystemMessage,
        HumanMessage,
        AIMessage,
        ToolMessage,
        AIMessage,
    ]
    ai = messages[2]
    assert isinstance(ai, AIMessage) and ai.id == "ai-1"
    assert ai.tool_calls[0]["args"] == {"a": 6, "b": 7}
    assert messages[3].name == "multiply" and messages[4].content == "42."


def test_langchain_round_trips_messages_to_dict() -> None:
    original: list[BaseMessage] = [
        HumanMessage("hi", id="a"),
        AIMessage("", id="b", tool_calls=[{"id": "c1", "name": "f", "args": {"x": [1, 2]}}]),
        ToolMessage("done", tool_call_id="c1", id="c", artifact={"raw": 1}),
        AIMessage("bye", id="d"),
    ]
    import json

    transcript = parse_transcript(json.dumps(messages_to_dict(original)))
    assert transcript.messages == original


def test_openai_json() -> None:
    transcript = load("openai.json")
    messages = transcript.messages
    assert [type(m) for m in messages] == [
        SystemMessage,
        HumanMessage,
        AIMessage,
        ToolMessage,
        ToolMessage,
        AIMessage,
        HumanMessage,
    ]
    image = messages[1].content[1]  # type: ignore[index]
    assert image == {
        "type": "image_url",
        "image_url": {"url": "data:image/png;base64,iVBORw0KGgo=", "detail": "low"},
    }
    ai = messages[2]
    assert isinstance(ai, AIMessage) and ai.content == ""
    assert [(c["id"], c["name"], c["args"]) for c in ai.tool_calls] == [
        ("call_eur", "price", {"sku": "S-1", "currency": "EUR"}),
        ("call_gbp", "price", {"sku": "S-1", "currency": "GBP"}),
    ]
    results = messages[3:5]
    assert [(m.tool_call_id, m.name, m.content) for m in results] == [  # type: ignore[attr-defined]
        ("call_eur", "price", "89.00"),
        ("call_gbp", "price", "76.50"),
    ]


def test_openai_jsonl_developer_parts_and_call_in_flight() -> None:
    messages = load("openai.jsonl").messages
    assert isinstance(messages[0], SystemMessage)
    assert messages[0].additional_kwargs == {"__openai_role__": "developer"}
    assert messages[3].content == [{"type": "text", "text": "a.txt\nb.txt"}]
    last = messages[-1]
    assert isinstance(last, AIMessage) and last.tool_calls[0]["id"] == "call_rm"
    kinds = {f.kind for f in validate(messages)}
    assert kinds == {"in_flight_tool_call"}


def test_anthropic_json() -> None:
    messages = load("anthropic.json").messages
    assert [type(m) for m in messages] == [
        SystemMessage,  # the top-level "system"
        HumanMessage,
        AIMessage,  # text + two parallel tool_use
        ToolMessage,
        ToolMessage,
        HumanMessage,  # the text after the tool_results of that user turn
        AIMessage,  # thinking + tool_use
        ToolMessage,
        AIMessage,
        HumanMessage,  # text + image
    ]
    assert messages[0].content == "You are a travel agent."
    parallel = messages[2]
    assert isinstance(parallel, AIMessage) and parallel.content == "Searching both."
    assert [(c["id"], c["name"], c["args"]) for c in parallel.tool_calls] == [
        ("toolu_f", "flights", {"to": "FCO"}),
        ("toolu_h", "hotels", {"city": "Rome", "nights": 2}),
    ]
    flights, hotels = messages[3], messages[4]
    assert isinstance(flights, ToolMessage) and isinstance(hotels, ToolMessage)
    assert (flights.tool_call_id, flights.name, flights.status) == ("toolu_f", "flights", "success")
    assert flights.content == "AZ123 at 09:10"
    assert (hotels.tool_call_id, hotels.name, hotels.status) == ("toolu_h", "hotels", "error")
    assert hotels.content == "hotel API timeout"
    assert messages[5].content == "Try hotels once more."
    thinking = messages[6]
    assert isinstance(thinking, AIMessage)  # thinking blocks are kept, tool_use moves out
    assert thinking.content == [
        {"type": "thinking", "thinking": "Retry the hotel search.", "signature": "sig-1"}
    ]
    assert thinking.tool_calls[0]["id"] == "toolu_h2"
    assert messages[7].name == "hotels"
    assert messages[8].content == "Flight AZ123 and Hotel Roma."
    image = messages[9].content[1]  # type: ignore[index]
    assert image == {
        "type": "image",
        "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="},
    }


@pytest.mark.parametrize(
    ("data", "fmt"),
    [
        ('[{"role": "user", "content": "hi"}]', "openai"),
        ('{"messages": [{"role": "user", "content": "hi"}], "system": "be brief"}', "anthropic"),
        ('[{"role": "user", "content": [{"type": "image", "source": {}}]}]', "anthropic"),
        ('{"role": "user", "content": "one message"}', "openai"),
        ('[{"type": "human", "data": {"content": "hi"}}]', "langchain"),
        ('{"messages": [{"type": "human", "data": {"content": "hi"}}]}', "langchain"),
        ('{"role": "user", "content": "a"}\n\n{"role": "assistant", "content": "b"}\n', "openai"),
    ],
)
def test_detection(data: str, fmt: str) -> None:
    assert parse_transcript(data).format == fmt


def test_plain_text_anthropic_system_only_wrapper() -> None:
    transcript = parse_transcript(
        '{"system": "be brief", "messages": [{"role": "user", "content": "hi"}]}'
    )
    assert [type(m) for m in transcript.messages] == [SystemMessage, HumanMessage]
    assert [m.id for m in transcript.messages] == ["message-0", "message-1"]


def test_explicit_format_wins() -> None:
    data = '[{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]'
    assert parse_transcript(data).format == "openai"
    assert parse_transcript(data, format="anthropic").format == "anthropic"
    error = error_of(data, format="langchain", source="chat.json")
    assert str(error).startswith("chat.json message 1: not a LangChain message")


def test_bytes_with_bom_and_jsonl_by_name() -> None:
    data = '\ufeff{"role": "user", "content": "hi"}'.encode()
    assert parse_transcript(data).messages[0].content == "hi"
    one = parse_transcript('{"role": "user", "content": "hi"}', source="x.jsonl")
    assert one.format == "openai" and one.messages[0].id == "x-0"


def test_assigned_ids_do_not_collide_with_existing_ones() -> None:
    data = (
        '[{"role": "user", "content": "a", "id": "chat-1"}, {"role": "assistant", "content": "b"}]'
    )
    ids = [m.id for m in parse_transcript(data, source="chat.json").messages]
    assert ids[0] == "chat-1" and ids[1] != "chat-1" and ids[1].startswith("chat-1")


# --------------------------------------------------------------------------------------------
# errors


def test_truncated_json_names_the_line() -> None:
    with pytest.raises(TranscriptError) as info:
        load("truncated.json")
    error = info.value
    assert_one_line(error)
    assert error.line == 3
    assert str(error) == (
        f"{FIXTURES / 'truncated.json'} line 3: not valid JSON "
        "(Unterminated string starting at column 36)"
    )


def test_bad_jsonl_line_names_the_line() -> None:
    with pytest.raises(TranscriptError) as info:
        load("bad_line.jsonl")
    error = info.value
    assert_one_line(error)
    assert error.line == 3 and error.source.endswith("bad_line.jsonl")
    assert "bad_line.jsonl line 3: not valid JSON (Expecting ',' delimiter at column" in str(error)


def test_orphan_tool_result() -> None:
    with pytest.raises(TranscriptError) as info:
        load("orphan_tool_result.json")
    error = info.value
    assert_one_line(error)
    assert error.item == 4 and error.line is None
    assert str(error).endswith(
        "orphan_tool_result.json message 4: a tool result (tool_call_id 'call_9') with no "
        "tool call before it"
    )


def test_orphan_in_jsonl_names_the_line_and_anthropic_orphans_too() -> None:
    lines = (
        '{"role": "user", "content": "hi"}\n\n{"role": "tool", "tool_call_id": "x", "content": ""}'
    )
    error = error_of(lines, source="c.jsonl")
    assert (
        str(error) == "c.jsonl line 3: a tool result (tool_call_id 'x') with no tool call before it"
    )
    anthropic = '[{"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1"}]}]'
    assert "(tool_call_id 'toolu_1') with no tool call" in str(error_of(anthropic))


def test_duplicate_tool_result() -> None:
    data = """[
      {"role": "user", "content": "go"},
      {"role": "assistant", "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "f", "arguments": ""}}]},
      {"role": "tool", "tool_call_id": "c1", "content": "one"},
      {"role": "tool", "tool_call_id": "c1", "content": "two"}
    ]"""
    error = error_of(data, source="d.json")
    assert str(error) == (
        "d.json message 4: a second tool result for tool_call_id 'c1' (the first is at message 3)"
    )


def test_unknown_format_names_the_item_and_the_accepted_formats() -> None:
    with pytest.raises(TranscriptError) as info:
        load("unknown_format.json")
    text = str(info.value)
    assert_one_line(info.value)
    assert "unknown_format.json message 1: not a message in any known format" in text
    assert '"speaker": "alice"' in text
    for fmt in ("langchain", "openai", "anthropic"):
        assert fmt in text


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        (
            '{"role": "user", "content": "a"}\n{"role": "robot", "content": "b"}',
            "t.jsonl line 2: unknown role 'robot' (OpenAI roles: system, developer, user, "
            "assistant, tool)",
        ),
        (
            '{"type": "human", "data": {"content": "a"}}\n{"type": "alien", "data": {}}',
            "t.jsonl line 2: cannot build a LangChain message of type 'alien'",
        ),
        (
            '{"type": "remove", "data": {"id": "m1"}}',
            "t.jsonl line 1: a RemoveMessage (id 'm1') is an instruction",
        ),
        (
            '{"role": "function", "name": "f", "content": "x"}',
            "t.jsonl line 1: legacy OpenAI function calling",
        ),
        (
            '{"role": "assistant", "content": "", "tool_calls": [{"id": "c", "type": "function",'
            ' "function": {"name": "f", "arguments": "{oops"}}]}',
            "t.jsonl line 1: tool call 'c' (f): arguments are not valid JSON",
        ),
        ('{"role": "user", "content": "a"}\n[1, 2]', "t.jsonl line 2: expected one message"),
        ("\n \n", "t.jsonl: empty"),
    ],
)
def test_item_errors(data: str, expected: str) -> None:
    error = error_of(data, source="t.jsonl")
    assert_one_line(error)
    assert str(error).startswith(expected), str(error)


def test_anthropic_unknown_role_names_the_message() -> None:
    data = '{"system": "s", "messages": [{"role": "user", "content": "a"}, {"role": "bot"}]}'
    error = error_of(data, source="a.json")
    assert str(error).startswith("a.json message 2: unknown role 'bot' (Anthropic roles: user")


def test_other_errors(tmp_path: Path) -> None:
    assert str(error_of("[]", source="e.json")) == "e.json: no messages"
    assert str(error_of('"hello"', source="s.json")).startswith("s.json: a JSON str is not")
    bad_utf8 = error_of(b'[{"role": "user", "content": "\xff"}]', source="b.json")  # type: ignore[arg-type]
    assert str(bad_utf8) == "b.json: not UTF-8 text (byte 0xff at offset 30)"
    assert "unknown format 'xml'" in str(error_of("[]", format="xml"))  # type: ignore[arg-type]
    validation = error_of('[{"type": "human", "data": {"id": "x"}}]')
    assert_one_line(validation)
    assert "message 1: cannot build a LangChain message of type 'human'" in str(validation)
    missing = tmp_path / "nope.json"
    with pytest.raises(TranscriptError, match=r"nope\.json: no such file$"):
        load_transcript(missing)
    with pytest.raises(TranscriptError, match="is a directory"):
        load_transcript(tmp_path)
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    with pytest.raises(TranscriptError, match=r"empty\.jsonl: empty"):
        load_transcript(empty)


def test_transcript_error_is_a_value_error_and_a_package_error() -> None:
    error = error_of("{")
    assert isinstance(error, ValueError) and isinstance(error, LangmemExtError)
    assert (error.source, error.line, error.item) == ("<string>", 1, None)


# --------------------------------------------------------------------------------------------
# LangGraph checkpointers


def _graph() -> StateGraph[Any]:
    def answer(state: MessagesState) -> dict[str, Any]:
        return {"messages": [AIMessage(f"echo: {state['messages'][-1].content}")]}

    graph: StateGraph[Any] = StateGraph(MessagesState)
    graph.add_node("answer", answer)
    graph.add_edge(START, "answer")
    return graph


def _write_thread(checkpointer: Any, thread_id: str, turns: int = 2) -> None:
    app = _graph().compile(checkpointer=checkpointer)
    config: Any = {"configurable": {"thread_id": thread_id}}
    for turn in range(turns):
        app.invoke({"messages": [HumanMessage(f"turn {turn}")]}, config)


def _check_thread(transcript: Transcript, turns: int = 2) -> None:
    kinds = [type(m) for m in transcript.messages]
    assert kinds == [HumanMessage, AIMessage] * turns
    assert transcript.messages[-1].content == f"echo: turn {turns - 1}"
    assert all(m.id for m in transcript.messages)
    assert not [f for f in validate(transcript.messages) if f.severity == "error"]


@pytest.fixture
def sqlite_db(tmp_path: Path) -> Iterator[Path]:
    from langgraph.checkpoint.sqlite import SqliteSaver

    path = tmp_path / "threads.db"
    conn = sqlite3.connect(path, check_same_thread=False)
    try:
        saver = SqliteSaver(conn)
        _write_thread(saver, "t-1")
        for n in range(12):
            _write_thread(saver, f"other-{n:02d}", turns=1)
    finally:
        conn.close()
    yield path


def test_sqlite_thread(sqlite_db: Path) -> None:
    before = sqlite_db.read_bytes()
    transcript = load_sqlite_thread(sqlite_db, "t-1")
    _check_thread(transcript)
    assert transcript.format == "langgraph-sqlite"
    assert transcript.source == f"sqlite {sqlite_db} thread t-1"
    assert sqlite_db.read_bytes() == before  # read only


def test_sqlite_thread_not_found_lists_ten_threads(sqlite_db: Path) -> None:
    with pytest.raises(TranscriptError) as info:
        load_sqlite_thread(sqlite_db, "missing")
    text = str(info.value)
    assert_one_line(info.value)
    assert text.startswith(
        f"sqlite {sqlite_db} thread missing: thread 'missing' not found; threads: "
    )
    assert text.count("'other-") + text.count("'t-1'") == 10 and text.endswith(" ...")


def test_sqlite_missing_channel(sqlite_db: Path) -> None:
    with pytest.raises(TranscriptError) as info:
        load_sqlite_thread(sqlite_db, "t-1", channel="history")
    assert str(info.value).endswith(
        "no channel 'history' in the thread's latest checkpoint; channels: messages"
    )


def test_sqlite_missing_file_is_not_created(tmp_path: Path) -> None:
    path = tmp_path / "absent.db"
    with pytest.raises(TranscriptError) as info:
        load_sqlite_thread(path, "t-1")
    assert str(info.value) == f"sqlite {path} thread t-1: no such file"
    assert not path.exists()


def test_sqlite_without_checkpoint_tables_is_left_alone(tmp_path: Path) -> None:
    path = tmp_path / "plain.db"
    sqlite3.connect(path).close()
    with pytest.raises(TranscriptError, match="no LangGraph checkpoint tables in"):
        load_sqlite_thread(path, "t-1")
    with sqlite3.connect(path) as conn:
        assert conn.execute("SELECT count(*) FROM sqlite_master").fetchone() == (0,)
    junk = tmp_path / "junk.db"
    junk.write_text("not a database")
    with pytest.raises(TranscriptError, match="not a SQLite database"):
        load_sqlite_thread(junk, "t-1")


def test_missing_extra_names_the_install_command(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setitem(sys.modules, "langgraph.checkpoint.sqlite", None)
    with pytest.raises(TranscriptError, match=r"pip install 'langmem-ext\[sqlite\]'"):
        load_sqlite_thread(tmp_path / "x.db", "t")
    monkeypatch.setitem(sys.modules, "langgraph.checkpoint.postgres", None)
    with pytest.raises(TranscriptError, match=r"pip install 'langmem-ext\[postgres\]'"):
        load_postgres_thread("host=127.0.0.1 port=1", "t")


class _ListState(TypedDict):
    messages: Annotated[list[BaseMessage], operator.add]
    notes: str


def test_any_checkpointer_ids_for_idless_messages_and_bad_channels() -> None:
    def node(state: _ListState) -> dict[str, Any]:
        return {"messages": [AIMessage("plain list channel, no ids")], "notes": "n"}

    graph: StateGraph[Any] = StateGraph(_ListState)
    graph.add_node("node", node)
    graph.add_edge(START, "node")
    saver = InMemorySaver()
    app = graph.compile(checkpointer=saver)
    app.invoke({"messages": [HumanMessage("hi")]}, {"configurable": {"thread_id": "mem"}})
    transcript = messages_from_checkpointer(saver, "mem")
    assert transcript.format == "langgraph" and transcript.source == "InMemorySaver thread mem"
    assert [m.id for m in transcript.messages] == ["mem-0", "mem-1"]
    with pytest.raises(TranscriptError, match="channel 'notes' holds a str, not a list"):
        messages_from_checkpointer(saver, "mem", channel="notes", source="mem db")
    with pytest.raises(TranscriptError, match=r"^empty db: thread 'x' not found: there are no"):
        messages_from_checkpointer(InMemorySaver(), "x", source="empty db")


def test_postgres_thread(pg_schema_dsn: str) -> None:
    from langgraph.checkpoint.postgres import PostgresSaver

    thread = f"pg-{uuid.uuid4().hex[:8]}"
    with PostgresSaver.from_conn_string(pg_schema_dsn) as saver:
        saver.setup()
        _write_thread(saver, thread)
    transcript = load_postgres_thread(pg_schema_dsn, thread)
    _check_thread(transcript)
    assert transcript.format == "langgraph-postgres"
    with pytest.raises(TranscriptError) as info:
        load_postgres_thread(pg_schema_dsn, "no-such-thread")
    assert "thread 'no-such-thread' not found; threads: " in str(info.value)
    assert f"'{thread}'" in str(info.value)
    with pytest.raises(TranscriptError, match="no channel 'history'"):
        load_postgres_thread(pg_schema_dsn, thread, channel="history")


def test_postgres_without_tables_is_not_set_up(pg_schema_dsn: str) -> None:
    import psycopg
    from psycopg.conninfo import make_conninfo

    schema = f"langmem_ext_empty_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(pg_schema_dsn, autocommit=True) as admin:
        admin.execute(f'CREATE SCHEMA "{schema}"')
        try:
            dsn = make_conninfo(pg_schema_dsn, options=f"-csearch_path={schema}")
            with pytest.raises(TranscriptError) as info:
                load_postgres_thread(dsn, "t")
            assert str(info.value).endswith(f"no LangGraph checkpoint tables at {dsn}")
            tables = admin.execute(
                "SELECT count(*) FROM information_schema.tables WHERE table_schema = %s",
                (schema,),
            ).fetchone()
            assert tables == (0,)
        finally:
            admin.execute(f'DROP SCHEMA "{schema}" CASCADE')


def test_postgres_unreachable_is_one_clean_line() -> None:
    dsn = "postgresql://me:s3cret@127.0.0.1:1/db?connect_timeout=3"
    with pytest.raises(TranscriptError) as info:
        load_postgres_thread(dsn, "t")
    text = str(info.value)
    assert_one_line(info.value)
    assert "s3cret" not in text
    assert text.startswith(
        "postgres postgresql://me:***@127.0.0.1:1/db?connect_timeout=3 thread t: "
        "cannot connect to PostgreSQL (connection failed: "
    )
    assert "port 1" in text
