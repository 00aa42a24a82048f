"""Units, validate and repair, with exact messages."""

from __future__ import annotations

import copy

import pytest
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage, ToolMessage

from langmem_ext import is_valid, repair, split_units, validate
from langmem_ext.core.messages import CLIP_MARKER, MISSING_RESULT_TEXT, clip_message


def call(*ids: str, text: str = "", mid: str | None = None) -> AIMessage:
    return AIMessage(
        text, tool_calls=[{"name": f"tool_{i}", "args": {"q": i}, "id": i} for i in ids], id=mid
    )


def result(call_id: str, text: str = "ok") -> ToolMessage:
    return ToolMessage(text, tool_call_id=call_id, id=f"r-{call_id}-{text}")


def spans(messages: list[BaseMessage]) -> list[tuple[int, int, str]]:
    return [(u.start, u.stop, u.kind) for u in split_units(messages)]


def test_parallel_calls_and_their_results_form_one_unit() -> None:
    history = [HumanMessage("q"), call("a", "b"), result("b"), result("a"), AIMessage("done")]
    assert spans(history) == [(0, 1, "human"), (1, 4, "tool"), (4, 5, "ai")]
    unit = split_units(history)[1]
    assert unit.messages == tuple(history[1:4]) and not unit.repaired


def test_messages_between_a_call_and_its_result_join_the_unit() -> None:
    history = [HumanMessage("q"), call("a"), HumanMessage("while waiting"), result("a")]
    assert spans(history) == [(0, 1, "human"), (1, 4, "tool")]
    unit = split_units(history)[1]
    assert unit.has_human and unit.reordered
    assert unit.messages == (history[1], history[3], history[2])  # result moved after its call


def test_units_tile_the_input_and_orphans_are_units_without_messages() -> None:
    history = [HumanMessage("q"), result("ghost"), AIMessage("a")]
    units = split_units(history)
    assert [(u.start, u.stop, u.kind, u.messages) for u in units] == [
        (0, 1, "human", (history[0],)),
        (1, 2, "orphan", ()),
        (2, 3, "ai", (history[2],)),
    ]


def test_validate_reports_each_problem_at_its_index() -> None:
    history = [
        HumanMessage("first"),  # 0
        SystemMessage("late system"),  # 1
        call("a", "b", mid="ai-1"),  # 2: b never answered
        result("a"),  # 3
        result("a", "again"),  # 4: duplicate
        result("zzz"),  # 5: orphan
        HumanMessage("next"),  # 6
        call("c"),  # 7: in flight (last)
    ]
    found = [(f.kind, f.index, f.tool_call_id, f.severity) for f in validate(history)]
    assert found == [
        ("system_not_first", 1, None, "error"),
        ("unanswered_tool_call", 2, "b", "error"),
        ("duplicate_tool_result", 4, "a", "error"),
        ("orphan_tool_result", 5, "zzz", "error"),
        ("in_flight_tool_call", 7, "c", "info"),
    ]
    assert not is_valid(history)
    assert "orphan_tool_result at index 5" in str(validate(history)[3])


def test_validate_first_not_human_multiple_system_and_no_human() -> None:
    assert [(f.kind, f.index) for f in validate([SystemMessage("s"), AIMessage("hi")])] == [
        ("no_human_message", 1)
    ]
    found = validate([SystemMessage("a"), SystemMessage("b"), AIMessage("x"), HumanMessage("y")])
    assert [(f.kind, f.index) for f in found] == [
        ("system_not_first", 1),
        ("multiple_system", 1),
        ("first_not_human", 2),
    ]
    interleaved = validate([HumanMessage("q"), call("a"), AIMessage("hm"), result("a")])
    assert [(f.kind, f.index) for f in interleaved] == [("interleaved_tool_result", 1)]
    assert validate([]) == [] and is_valid([HumanMessage("x"), call("a")])


def test_validate_rejects_non_messages_with_the_fix() -> None:
    with pytest.raises(TypeError, match=r"messages\[1\] is a dict.*convert_to_messages"):
        validate([HumanMessage("x"), {"role": "user", "content": "y"}])  # type: ignore[list-item]


def test_repair_applies_each_documented_repair_without_mutating_input() -> None:
    history: list[BaseMessage] = [
        AIMessage("greeting before any human", id="g"),
        SystemMessage("rules", id="sys"),
        HumanMessage("question", id="h1"),
        call("a", "b", mid="ai-1"),
        HumanMessage("interleaved", id="h2"),
        result("a"),
        result("a", "dup"),
        result("orphan"),
        SystemMessage("more rules", id="sys2"),
        HumanMessage("last", id="h3"),
        call("c", mid="ai-2"),
    ]
    snapshot = copy.deepcopy(history)
    fixed = repair(history)
    assert history == snapshot
    assert [(type(m).__name__, m.content) for m in fixed] == [
        ("SystemMessage", "rules\n\nmore rules"),
        ("HumanMessage", "question"),
        ("AIMessage", ""),
        ("ToolMessage", "ok"),
        ("ToolMessage", MISSING_RESULT_TEXT.format(name="tool_b")),
        ("HumanMessage", "interleaved"),
        ("HumanMessage", "last"),
        ("AIMessage", ""),
    ]
    placeholder = fixed[4]
    assert isinstance(placeholder, ToolMessage)
    assert (placeholder.tool_call_id, placeholder.status) == ("b", "error")
    assert fixed[0].id == "sys" and fixed[1] is history[2]
    assert [f.kind for f in validate(fixed)] == ["in_flight_tool_call"]
    assert repair(fixed) == fixed


def test_repair_of_a_valid_history_returns_the_same_messages() -> None:
    history = [SystemMessage("s"), HumanMessage("q"), call("a"), result("a"), AIMessage("x")]
    fixed = repair(history)
    assert fixed == history and all(a is b for a, b in zip(fixed, history, strict=True))
    assert fixed is not history


def test_repair_keeps_a_history_without_any_human_message() -> None:
    history = [SystemMessage("s"), AIMessage("monologue")]
    assert repair(history) == history


def test_clip_message_keeps_the_longest_prefix_that_fits() -> None:
    def count(m: BaseMessage) -> int:
        return len(str(m.content))

    message = HumanMessage("x" * 500, id="big")
    clipped = clip_message(message, 200, count)
    assert clipped is not None and count(clipped) <= 200
    marker = CLIP_MARKER.format(removed=500 - (200 - len(CLIP_MARKER.format(removed=400))))
    assert str(clipped.content).endswith(marker)
    assert count(clipped) == 200
    assert clipped.id == "big"
    assert clipped.response_metadata["langmem_ext"] == {"clipped_from_tokens": 500}
    assert clip_message(message, 1000, count) is message
    blocks = HumanMessage(
        [{"type": "text", "text": "y" * 300}, {"type": "image_url", "image_url": {"url": "u"}}]
    )
    clipped_blocks = clip_message(blocks, 100, lambda m: len(str(m.content)))
    assert clipped_blocks is not None and isinstance(clipped_blocks.content, list)
    assert clipped_blocks.content[1] == {"type": "image_url", "image_url": {"url": "u"}}
    assert "clipped by langmem_ext" in clipped_blocks.content[0]["text"]  # type: ignore[index]
    assert clip_message(AIMessage(""), 5, lambda m: 10) is None  # nothing to clip


def test_a_result_that_came_before_its_call_is_the_orphan_not_the_real_one() -> None:
    # regression: the real result at index 3 used to be dropped with the stray ones
    history = [
        HumanMessage("q"),
        result("c1", "early"),
        call("c1"),
        result("c1", "real result"),
        result("g", "ghost"),
    ]
    assert [(f.kind, f.index) for f in validate(history)] == [
        ("orphan_tool_result", 1),
        ("orphan_tool_result", 4),
    ]
    assert [m.content for m in repair(history)] == ["q", "", "real result"]


def test_repair_when_the_only_human_message_sat_inside_a_tool_round() -> None:
    # regression: repair returned [AI, Tool, Human] (first_not_human) and was not idempotent
    history = [call("c0"), HumanMessage("q", id="q"), result("c0")]
    fixed = repair(history)
    assert [m.id for m in fixed] == ["q"]
    assert validate(fixed) == [] and repair(fixed) == fixed
