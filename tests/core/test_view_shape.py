"""view_shape: one letter per message, a turn's letters together, repeated turns counted, the
summary and the retrieved context recognised on the views the strategies really make."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from langchain_core.messages import (
    AIMessage,
    BaseMessage,
    ChatMessage,
    FunctionMessage,
    HumanMessage,
    SystemMessage,
    ToolMessage,
)
from langgraph.store.memory import InMemoryStore

from langmem_ext import FoldPolicy, MemoryKey, Retrieval, SummaryBuffer, TokenBudget
from langmem_ext.core.fold_config import SUMMARY_ID, render_summary
from langmem_ext.core.shape import RETRIEVED_ID, SHAPE_LEGEND, view_shape
from langmem_ext.testing import FakeSummaryModel

ROOT = Path(__file__).resolve().parents[2]
FILLER = "we talked about the weather, the sea and the boats in the harbour " * 4
LETTER = re.compile(r"S\+|[SRHAcT?]")


def expand(shape: str) -> list[str]:
    """``S+ 2×(HA) H`` -> ``['S+', 'H', 'A', 'H', 'A', 'H']``, every character accounted for."""
    letters: list[str] = []
    for part in shape.split(" ") if shape else []:
        group = re.fullmatch(r"(\d+)×\((.+)\)", part)
        count, turn = (int(group.group(1)), group.group(2)) if group else (1, part)
        assert re.fullmatch(rf"(?:{LETTER.pattern})+", turn), (shape, part)
        letters += LETTER.findall(turn) * count
    return letters


def call(i: int) -> AIMessage:
    return AIMessage("", tool_calls=[{"name": "track", "args": {}, "id": f"c{i}"}])


def result(i: int) -> ToolMessage:
    return ToolMessage("in transit", tool_call_id=f"c{i}")


def chat(history: list[BaseMessage], strategy: SummaryBuffer | Retrieval) -> list[BaseMessage]:
    """Apply ``strategy`` at every human message, as an agent would; the last view."""
    state, view = None, []
    for end, message in enumerate(history, start=1):
        if isinstance(message, HumanMessage):
            done = strategy.apply(history[:end], state)
            state, view = done.state, done.messages
    return view


def turns(n: int, system: str | None = "Be brief.") -> list[BaseMessage]:
    history: list[BaseMessage] = [SystemMessage(system)] if system else []
    for i in range(n):
        history += [HumanMessage(f"Topic {i}: {FILLER}", id=f"h{i}")]
        history += [AIMessage(f"Noted ({i}). {FILLER}", id=f"a{i}")]
    return [*history, HumanMessage("And now?", id="q")]


# --- the notation -----------------------------------------------------------------------------


def test_turns_are_written_together_and_consecutive_identical_turns_counted() -> None:
    summary = SystemMessage(render_summary({"conversation": "Orders 4711, 4712."}), id=SUMMARY_ID)
    ha = [HumanMessage("hi"), AIMessage("hello")]
    view = [summary, *ha, *ha, *ha, HumanMessage("where?"), call(1), result(1), call(2)]
    view += [result(2), result(3), AIMessage("there"), HumanMessage("thanks")]
    assert view_shape(view) == "S+ 3×(HA) HcTcTTA H"


def test_only_adjacent_identical_turns_are_grouped_and_a_single_turn_has_no_count() -> None:
    ha = [HumanMessage("hi"), AIMessage("hello")]
    tool_turn = [HumanMessage("where?"), call(1), result(1), AIMessage("there")]
    assert view_shape([*ha, *tool_turn, *ha]) == "HA HcTA HA"
    assert view_shape([SystemMessage("s"), *tool_turn, *tool_turn]) == "S 2×(HcTA)"


def test_every_message_kind_has_its_letter() -> None:
    view = [
        ChatMessage(content="rules", role="developer"),
        ChatMessage(content="hi", role="user"),
        ChatMessage(content="hello", role="assistant"),
        HumanMessage("ctx", id=RETRIEVED_ID),
        HumanMessage("q"),
        ChatMessage(content="hmm", role="critic"),
        FunctionMessage(content="out", name="f"),
    ]
    assert view_shape(view) == "S HA R H??"


def test_an_empty_view_has_the_empty_shape() -> None:
    assert view_shape([]) == ""
    assert view_shape([], width=5) == ""


def test_the_legend_is_one_line_that_names_every_letter() -> None:
    assert "\n" not in SHAPE_LEGEND
    for letter in ("S ", "S+ ", "R ", "H ", "A ", "c ", "T ", "? ", "3×(HA)"):
        assert letter in SHAPE_LEGEND


def test_the_quickstart_notebook_quotes_the_legend_verbatim() -> None:
    """Notebook 01 explains the letters by quoting :data:`SHAPE_LEGEND`: a changed legend must
    change the quote."""
    notebook = json.loads((ROOT / "notebooks" / "01_quickstart_langgraph.ipynb").read_text("utf-8"))
    text = "".join(
        "".join(cell["source"]) for cell in notebook["cells"] if cell["cell_type"] == "markdown"
    )
    assert f"> {SHAPE_LEGEND}\n" in text


# --- the summary and the retrieved context, as the strategies place them ------------------------


def test_summary_buffer_views_lead_with_the_summary_carrying_system_message() -> None:
    """With a system prompt the summary is appended to it (the prompt's id is kept); without
    one, the summary is a system message of its own: both are ``S+``, and only after a fold."""
    for system in ("Be brief.", None):
        view = chat(turns(25, system), SummaryBuffer(900, summarizer=FakeSummaryModel()))
        shape = view_shape(view)
        assert shape.startswith("S+ ") and shape.endswith(" H"), shape
        assert len(expand(shape)) == len(view)
        assert expand(shape)[1:] == ["H", "A"] * ((len(view) - 2) // 2) + ["H"]
    unfolded = chat(turns(2), SummaryBuffer(900, summarizer=FakeSummaryModel()))
    assert view_shape(unfolded) == "S 2×(HA) H"


def test_a_summary_placed_as_its_own_human_message_is_s_plus_and_stands_alone() -> None:
    strategy = SummaryBuffer(
        900, summarizer=FakeSummaryModel(), policy=FoldPolicy(placement="human")
    )
    view = chat(turns(25), strategy)
    assert view[1].id == SUMMARY_ID
    assert view_shape(view).startswith("S S+ "), view_shape(view)


def test_a_retrieval_view_shows_the_retrieved_context_before_the_question() -> None:
    history = turns(25)
    history[9] = HumanMessage("my locker code at the gym is 4471.", id="h4")
    history[-1] = HumanMessage("what is my locker code at the gym?", id="q")
    strategy = Retrieval(
        TokenBudget(900),
        store=InMemoryStore(),
        ranking="bm25",
        key=MemoryKey("acme", "ann", "chat"),
        k=1,
        max_retrieved_tokens=600,
    )
    view = chat(history, strategy)
    assert any(m.id == RETRIEVED_ID for m in view)
    assert view_shape(view).endswith(" R H"), view_shape(view)
    assert len(expand(view_shape(view))) == len(view)


# --- width --------------------------------------------------------------------------------------


def test_a_shape_over_the_width_keeps_its_start_and_end_around_an_ellipsis() -> None:
    view = [SystemMessage("s")] + [HumanMessage("h"), AIMessage("a"), HumanMessage("x")] * 6
    full = view_shape(view)
    assert full == "S " + " ".join(["HA", "H"] * 6)
    for width in range(1, len(full)):
        cut = view_shape(view, width=width)
        assert len(cut) <= width and cut.count("…") == 1, (width, cut)
        head, tail = cut.split("…")
        assert full.startswith(head) and full.endswith(tail)
        assert len(head) + len(tail) == width - 1
    assert view_shape(view, width=len(full)) == full
    assert view_shape(view, width=12)[-5:] == full[-5:]  # the newest turns stay readable


def test_a_width_below_one_is_refused() -> None:
    with pytest.raises(ValueError, match="width must be at least 1, got 0"):
        view_shape([HumanMessage("h")], width=0)


# --- property: one letter per message -----------------------------------------------------------

_SUMMARY_TEXT = render_summary({"conversation": "earlier"})
MESSAGES: list[tuple[BaseMessage, str]] = [
    (SystemMessage("Be brief."), "S"),
    (SystemMessage(f"Be brief.\n\n{_SUMMARY_TEXT}"), "S+"),
    (SystemMessage(_SUMMARY_TEXT, id=SUMMARY_ID), "S+"),
    (HumanMessage(_SUMMARY_TEXT, id=SUMMARY_ID), "S+"),
    (HumanMessage("context", id=RETRIEVED_ID), "R"),
    (HumanMessage("hi"), "H"),
    (AIMessage("hello"), "A"),
    (call(1), "c"),
    (result(1), "T"),
    (ChatMessage(content="hmm", role="critic"), "?"),
]


@given(st.lists(st.sampled_from(MESSAGES), max_size=40), st.integers(1, 60))
def test_any_view_expands_to_exactly_one_letter_per_message(
    pairs: list[tuple[BaseMessage, str]], width: int
) -> None:
    view = [m for m, _ in pairs]
    shape = view_shape(view)
    assert expand(shape) == [letter for _, letter in pairs]
    assert "  " not in shape and shape == shape.strip()
    assert len(view_shape(view, width=width)) <= width
