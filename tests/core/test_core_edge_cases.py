"""Edge cases of the core: state validation, RemoveMessage in the input and the drop-in gaps of
the message and counter layers.

Each test is named after the behaviour it pins.
"""

from __future__ import annotations

import json
import math
from dataclasses import replace
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import (
    AIMessage,
    BaseMessage,
    ChatMessage,
    HumanMessage,
    RemoveMessage,
    SystemMessage,
    ToolMessage,
    trim_messages,
)
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.tools import tool
from langchain_openai import ChatOpenAI
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer
from langgraph.graph.message import REMOVE_ALL_MESSAGES, add_messages
from pydantic import BaseModel
from strategies_hyp import malformed_histories

from langmem_ext import (
    ApproximateCounter,
    ChatModelCounter,
    MemoryState,
    TiktokenCounter,
    TokenBudget,
    as_counter,
    repair,
    split_units,
    validate,
)
from langmem_ext.core.messages import as_standard, is_human, is_system, role_of
from langmem_ext.core.state import STATE_VERSION
from langmem_ext.counting.local import tiktoken_encoding_for
from langmem_ext.errors import InvalidHistoryError, InvalidStateError

# ============================================================================================
# a corrupted or foreign MemoryState is refused with the field and the value


def full_state() -> MemoryState:
    """A state with every field away from its default."""
    return MemoryState(
        seen=12,
        seen_tokens=340,
        seen_key="m12",
        cut_index=4,
        cut_key="m4",
        summary=(("summary", "the user ordered a lamp"), ("facts", "name: Ada")),
        folded=3,
        folded_key="m3",
        folded_tokens=90,
        folds=1,
        health="retrying",
        failures=2,
        retry_at=1_700_000_000.5,
        last_error="RateLimitError: 429",
        clipped=1,
        view_tokens=250,
        prefix_key="p",
        indexed=5,
        indexed_key="m5",
        indexed_turns=2,
        digested=4,
        digests=(("m2", "[langmem_ext digest of an earlier tool round: 1 call, outputs clipped]"),),
        gap_key="m9",
    )


CORRUPTIONS: list[tuple[str, Any]] = [
    ("seen", "3"),
    ("seen", 3.0),
    ("seen", True),
    ("seen", -1),
    ("seen", None),
    ("seen_tokens", [1]),
    ("folded", -7),
    ("failures", False),
    ("indexed_turns", {"n": 1}),
    ("seen_key", 5),
    ("seen_key", ["m12"]),
    ("last_error", {"type": "x"}),
    ("cut_index", -1),
    ("cut_index", "4"),
    ("cut_index", True),
    ("health", "sick"),
    ("health", None),
    ("retry_at", math.nan),
    ("retry_at", math.inf),
    ("retry_at", "soon"),
    ("retry_at", True),
    ("summary", ["ab", "cd"]),
    ("summary", "abcd"),
    ("summary", [["summary", "a", "extra"]]),
    ("summary", [["summary", 3]]),
    ("summary", [[None, "text"]]),
    ("summary", {"summary": 3}),
    ("summary", 7),
]


@pytest.mark.parametrize(("field", "value"), CORRUPTIONS)
def test_a_wrong_field_is_refused_naming_the_field_and_the_value(field: str, value: Any) -> None:
    data = {**full_state().to_dict(), field: value}
    with pytest.raises(InvalidStateError) as info:
        MemoryState.from_dict(data)
    assert info.value.field is not None and info.value.field.split("[")[0] == field
    assert field in str(info.value)
    assert repr(value)[:30] in str(info.value)
    assert isinstance(info.value, ValueError)  # existing `except ValueError` handlers still work


def test_summary_of_plain_strings_is_not_read_as_pairs() -> None:
    # before: ["ab", "cd"] was unpacked character by character into {"a": "b", "c": "d"}
    with pytest.raises(InvalidStateError, match=r"summary\[0\].*'ab'"):
        MemoryState.from_dict({"summary": ["ab", "cd"]})


@pytest.mark.parametrize("version", ["2", None, True, False, 1.0, -7, 0, [2]])
def test_an_invalid_version_is_not_called_newer(version: Any) -> None:
    with pytest.raises(InvalidStateError, match="version must be an int from 1 to") as info:
        MemoryState.from_dict({**MemoryState().to_dict(), "version": version})
    assert "newer" not in str(info.value)
    assert info.value.field == "version" and info.value.value == version


def test_a_newer_version_is_still_refused_as_newer() -> None:
    with pytest.raises(InvalidStateError, match="newer than this langmem_ext") as info:
        MemoryState.from_dict({"version": STATE_VERSION + 1})
    assert info.value.field == "version"


def test_a_non_dict_is_refused_with_the_same_exception() -> None:
    for value in (["version", 2], "{}", 3):
        with pytest.raises(InvalidStateError, match="expects a dict"):
            MemoryState.from_dict(value)  # type: ignore[arg-type]


def test_what_to_dict_writes_round_trips_through_json_and_checkpoint_serde() -> None:
    state = full_state()
    data = state.to_dict()
    assert MemoryState.from_dict(data) == state
    assert MemoryState.from_json(state.to_json()) == state
    assert MemoryState.from_dict(json.loads(json.dumps(data))) == state
    serde = JsonPlusSerializer()
    for value in (data, state.to_dict() | {"summary": tuple(map(tuple, data["summary"]))}):
        back = serde.loads_typed(serde.dumps_typed(value))
        assert MemoryState.from_dict(back) == state
    # tuples that came back as lists, lists that came back as tuples, the dict form
    as_lists = {**data, "summary": [list(p) for p in state.summary]}
    as_tuples = {**data, "summary": tuple(state.summary)}
    as_dict = {**data, "summary": dict(state.summary)}
    assert MemoryState.from_dict(as_lists) == state
    assert MemoryState.from_dict(as_tuples) == state
    assert MemoryState.from_dict(as_dict) == state


def test_unknown_keys_are_ignored_and_older_versions_read() -> None:
    data = {**full_state().to_dict(), "from_the_future": [1, 2], "version": 1}
    state = MemoryState.from_dict(data)
    assert state == full_state() and state.version == STATE_VERSION
    v1 = {"version": 1, "seen": 4, "seen_tokens": 40, "seen_key": "k", "cut_index": 1}
    assert MemoryState.from_dict(v1) == MemoryState(
        seen=4, seen_tokens=40, seen_key="k", cut_index=1
    )
    assert MemoryState.from_dict({}) == MemoryState()


def test_a_state_that_exists_is_valid_so_to_json_is_always_strict_json() -> None:
    with pytest.raises(InvalidStateError, match="retry_at"):
        MemoryState(retry_at=math.nan)
    with pytest.raises(InvalidStateError, match="retry_at"):
        replace(MemoryState(), retry_at=math.inf)
    with pytest.raises(InvalidStateError, match="seen"):
        replace(MemoryState(), seen=-1)
    state = replace(full_state(), retry_at=12)  # an int is a valid epoch time
    text = state.to_json()
    assert "NaN" not in text and "Infinity" not in text
    assert MemoryState.from_json(text) == state


def test_a_strategy_refuses_a_corrupted_state_before_using_it() -> None:
    strategy = TokenBudget(100)
    history = [HumanMessage("hi", id="h")]
    corrupted = {**strategy.apply(history).state.to_dict(), "seen": "1"}
    with pytest.raises(InvalidStateError, match="seen"):
        strategy.apply(history, corrupted)


# -- the fuzz: any corruption loads to the same meaning or raises InvalidStateError ---------

_COUNTS = {
    "seen",
    "seen_tokens",
    "folded",
    "folded_tokens",
    "folds",
    "failures",
    "clipped",
    "view_tokens",
    "indexed",
    "indexed_turns",
    "digested",
}
_TEXTS = {
    "seen_key",
    "cut_key",
    "folded_key",
    "last_error",
    "prefix_key",
    "indexed_key",
    "gap_key",
}


def _is_int(v: Any) -> bool:
    return type(v) is int


def _pairs(v: Any) -> tuple[tuple[str, str], ...] | None:
    """The reference reading of a summary value (None: not valid)."""
    items = list(v.items()) if isinstance(v, dict) else v
    if not isinstance(items, (list, tuple)):
        return None
    out = []
    for p in items:
        if not (
            isinstance(p, (list, tuple)) and len(p) == 2 and type(p[0]) is str and type(p[1]) is str
        ):
            return None
        out.append((p[0], p[1]))
    return tuple(out)


def _expected(field: str, value: Any) -> tuple[bool, Any]:
    """(valid?, the value the loaded state must hold) by an independent reading of the spec."""
    if field in _COUNTS:
        return _is_int(value) and value >= 0, value
    if field in _TEXTS:
        return value is None or type(value) is str, value
    if field == "cut_index":
        return value is None or (_is_int(value) and value >= 0), value
    if field == "health":
        return isinstance(value, str) and value in ("healthy", "retrying", "degraded"), value
    if field == "retry_at":
        ok = value is None or type(value) is int or (type(value) is float and math.isfinite(value))
        return ok, value
    if field in ("summary", "digests"):
        pairs = _pairs(value)
        return pairs is not None, pairs
    if field == "version":
        return _is_int(value) and 1 <= value <= STATE_VERSION, STATE_VERSION
    return True, None  # an unknown key


_json_like = st.recursive(
    st.one_of(
        st.none(),
        st.booleans(),
        st.integers(-5, 5),
        st.integers(),
        st.sampled_from([10**400, -(10**400), 2**63]),  # beyond float range
        st.floats(allow_nan=True, allow_infinity=True),
        st.text(max_size=8),
        st.sampled_from(["healthy", "retrying", "degraded", "2", "ab"]),
    ),
    lambda inner: st.one_of(
        st.lists(inner, max_size=3),
        st.lists(inner, max_size=3).map(tuple),
        st.dictionaries(st.text(max_size=4), inner, max_size=2),
    ),
    max_leaves=6,
)
_FIELD_NAMES = sorted(MemoryState().to_dict())


@given(
    field=st.sampled_from([*_FIELD_NAMES, "unknown_future_key"]),
    value=_json_like,
    delete=st.booleans(),
)
def test_any_corruption_loads_with_the_same_meaning_or_names_the_field(
    field: str, value: Any, delete: bool
) -> None:
    original = full_state()
    data = original.to_dict()
    if delete and field in data:
        del data[field]
        loaded = MemoryState.from_dict(data)  # a missing key takes its default
        default = getattr(MemoryState(), field)
        assert loaded == replace(original, **{field: default})
        return
    data[field] = value
    valid, meaning = _expected(field, value)
    try:
        loaded = MemoryState.from_dict(data)
    except InvalidStateError as exc:
        assert not valid, f"{field}={value!r} is valid but was refused: {exc}"
        assert exc.field is not None and exc.field.split("[")[0] == field
        assert field in str(exc)
        return
    assert valid, f"{field}={value!r} was read as {loaded!r}"
    if field in _FIELD_NAMES:
        assert getattr(loaded, field) == meaning
        assert replace(loaded, **{field: getattr(original, field)}) == original
    else:
        assert loaded == original
    assert MemoryState.from_json(loaded.to_json()) == loaded


# ============================================================================================
# a RemoveMessage in the input never reaches a model


def _history() -> list[BaseMessage]:
    return [
        SystemMessage("be brief", id="sys"),
        HumanMessage("hello", id="h1"),
        AIMessage("hi", id="a1"),
        HumanMessage("what is new?", id="h2"),
    ]


@pytest.mark.parametrize(
    "counter",
    ["approximate", "gpt-4o", lambda m: 5],
    ids=["approximate", "tiktoken", "callable"],
)
def test_a_remove_message_in_the_input_raises_naming_index_and_id(counter: Any) -> None:
    history = [*_history()[:3], RemoveMessage(id="a1"), _history()[3]]
    with pytest.raises(InvalidHistoryError, match=r"messages\[3\].*'a1'.*add_messages") as info:
        TokenBudget(1000, counter=counter).apply(history)
    assert info.value.index == 3 and info.value.message_id == "a1"
    assert isinstance(info.value, ValueError)


async def test_a_remove_message_raises_in_the_async_driver_too() -> None:
    history = [*_history(), RemoveMessage(id=REMOVE_ALL_MESSAGES)]
    with pytest.raises(InvalidHistoryError, match="REMOVE_ALL_MESSAGES"):
        await TokenBudget(1000).aapply(history)


def test_validate_and_repair_refuse_a_remove_message() -> None:
    history = [*_history(), RemoveMessage(id="h1")]
    with pytest.raises(InvalidHistoryError, match=r"messages\[4\]"):
        validate(history)
    with pytest.raises(InvalidHistoryError, match=r"messages\[4\]"):
        repair(history)


def test_the_suggested_fix_works() -> None:
    history = add_messages(_history(), [RemoveMessage(id="a1")])  # type: ignore[arg-type]
    result = TokenBudget(1000).apply(history)  # type: ignore[arg-type]
    assert [m.id for m in result.messages] == ["sys", "h1", "h2"]


# ============================================================================================
# drop-in gaps


# -- an empty tool_call_id is an id -----------------------------------------------------------


def _invalid_call_history() -> list[BaseMessage]:
    """What create_agent's model node sends after a malformed call whose id is ""."""
    from langchain.agents.factory import _patch_invalid_tool_calls

    ai = AIMessage(
        "",
        invalid_tool_calls=[
            {"type": "invalid_tool_call", "name": "lookup", "args": "{bad", "id": "", "error": None}
        ],
        id="ai-1",
    )
    patched = _patch_invalid_tool_calls([HumanMessage("look it up", id="h1"), ai])
    return [*patched, AIMessage("sorry, that failed", id="ai-2")]


def test_empty_tool_call_id_from_create_agent_is_kept_with_its_call() -> None:
    history = _invalid_call_history()
    tool_message = history[2]
    assert isinstance(tool_message, ToolMessage) and tool_message.tool_call_id == ""
    assert validate(history) == []
    assert [(u.start, u.stop, u.kind) for u in split_units(history)] == [
        (0, 1, "human"),
        (1, 3, "tool"),
        (3, 4, "ai"),
    ]
    assert repair(history) == history
    result = TokenBudget(1000).apply(history)
    assert result.messages == history and not result.report.repaired


def test_empty_tool_call_id_on_a_valid_call_is_an_id_too() -> None:
    call = AIMessage("", tool_calls=[{"name": "f", "args": {}, "id": ""}], id="ai")
    history = [HumanMessage("q", id="h"), call, ToolMessage("done", tool_call_id="", id="t")]
    assert validate(history) == []
    unanswered = [HumanMessage("q", id="h"), call, AIMessage("next", id="n")]
    kinds = [f.kind for f in validate(unanswered)]
    assert kinds == ["unanswered_tool_call"]  # before: the call needed no result at all


# -- a bound chat model is a counter ------------------------------------------------------------


@tool
def lookup(query: str) -> str:
    """Look something up."""
    return query


class Answer(BaseModel):
    text: str


class CountingModel(BaseChatModel):
    """A chat model counting 10 tokens per message plus 1 per request."""

    @property
    def _llm_type(self) -> str:
        return "counting"

    def _generate(self, messages: Any, stop: Any = None, **kwargs: Any) -> ChatResult:
        return ChatResult(generations=[ChatGeneration(message=AIMessage("ok"))])

    def get_num_tokens_from_messages(self, messages: Any, tools: Any = None) -> int:
        return 1 + 10 * len(messages)

    def get_num_tokens(self, text: str) -> int:
        return len(text.split())


def test_a_bound_chat_model_is_accepted_as_a_counter_like_trim_messages() -> None:
    model = ChatOpenAI(model="gpt-4o", api_key="sk-test")  # type: ignore[arg-type]
    history = _history()
    expected = model.get_num_tokens_from_messages(history)
    trim_accepts = [
        model.bind(stop=["\n"]),
        model.bind_tools([lookup]),
        model.bind_tools([lookup]).bind(temperature=0),
        model.with_config(tags=["x"]),
    ]
    for bound in trim_accepts:  # the drop-in promise: what trim_messages counts with
        trim_messages(history, max_tokens=1000, token_counter=bound, strategy="last")
    also = [  # wrappers trim_messages refuses, and that hold exactly one chat model too
        model.with_retry(),
        model.with_structured_output(Answer),
        model.with_structured_output(Answer, include_raw=True),
    ]
    for bound in [*trim_accepts, *also]:
        counter = as_counter(bound)
        assert isinstance(counter, ChatModelCounter) and counter.model is model
        assert counter.count_messages(history) == expected
        strategy = TokenBudget(1000, counter=bound)
        assert strategy.apply(history).messages == history


def test_chat_model_counter_unwraps_a_binding_itself() -> None:
    model = CountingModel()
    counter = ChatModelCounter(model.bind(stop=["x"]))
    assert counter.model is model
    assert counter.count_messages([HumanMessage("a"), HumanMessage("b")]) == 21


def test_a_runnable_with_two_models_is_refused_and_fallbacks_count_as_the_primary() -> None:
    first = CountingModel()
    second = ChatOpenAI(model="gpt-4o", api_key="sk-test")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="2 language models"):
        as_counter(first | second)
    with_fallbacks = as_counter(first.with_fallbacks([second]))  # like trim_messages
    assert with_fallbacks.count_messages([HumanMessage("a")]) == 11


def test_chat_model_counter_includes_the_overhead_from_the_first_call() -> None:
    # before: the first count_messages() of a fresh counter left the overhead out
    assert ChatModelCounter(CountingModel()).count_messages([HumanMessage("a")]) == 11
    assert ChatModelCounter(CountingModel()).count_messages([]) == 1


# -- an unknown counter string is an error ------------------------------------------------------


def test_a_misspelt_counter_name_is_an_error_with_a_suggestion() -> None:
    with pytest.raises(ValueError, match=r"unknown token counter 'aproximate' \(did you mean "):
        as_counter("aproximate")
    with pytest.raises(ValueError, match="did you mean 'gpt-4o'"):
        as_counter("gpt4o")
    with pytest.raises(ValueError, match="did you mean 'cl100k_base'"):
        as_counter("cl100k")
    with pytest.raises(ValueError, match="'approximate', a tiktoken encoding name") as info:
        as_counter("no-such-model")
    assert "o200k_base" in str(info.value) and "gpt-4o" in str(info.value)
    with pytest.raises(ValueError, match="unknown token counter"):
        TokenBudget(100, counter="aproximate")  # at construction, not at the first apply


@pytest.mark.parametrize(
    ("name", "provider"),
    [
        ("claude-3-5-sonnet-latest", "Anthropic"),
        ("claude-sonnet-4-5", "Anthropic"),
        ("gemini-1.5-pro", "Google"),
        ("gemini-2.5-flash", "Google"),
        ("anthropic:claude-3-5-sonnet-latest", "'anthropic'"),
        ("google:gemini-2.0-flash", "'google'"),
        ("google_genai:gemini-2.0-flash", "'google_genai'"),
        ("mistral-large-latest", "Mistral"),
    ],
)
def test_a_non_openai_model_name_is_refused_with_the_fix(name: str, provider: str) -> None:
    with pytest.raises(ValueError, match=f"names a model of .*{provider}") as info:
        as_counter(name)
    assert "Pass the chat model itself" in str(info.value)
    assert "'approximate'" in str(info.value)
    with pytest.raises(ValueError, match="names a model of"):
        TiktokenCounter(model=name)  # before: silently cl100k_base


def test_accepted_counter_names_resolve_from_tiktoken_tables_offline(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import tiktoken
    from tiktoken.model import MODEL_TO_ENCODING

    def offline(name: str) -> Any:
        raise AssertionError(f"tiktoken_encoding_for loaded the {name} encoding")

    monkeypatch.setattr(tiktoken, "get_encoding", offline)
    for name in tiktoken.list_encoding_names():
        assert tiktoken_encoding_for(name) == name
    for model, encoding in MODEL_TO_ENCODING.items():
        assert tiktoken_encoding_for(model) == encoding
    for model, encoding in [
        ("gpt-4o-mini", "o200k_base"),
        ("gpt-4.1-nano", "o200k_base"),
        ("gpt-5-mini", "o200k_base"),
        ("gpt-6", "o200k_base"),
        ("o3-mini", "o200k_base"),
        ("gpt-4-0613", "cl100k_base"),
        ("openai:gpt-4o", "o200k_base"),
        ("GPT-4o", "o200k_base"),
        ("ft:gpt-4o-mini:acme::abc123", "o200k_base"),
    ]:
        assert tiktoken_encoding_for(model) == encoding, model


def test_accepted_counter_names_still_build_their_counters() -> None:
    assert isinstance(as_counter("approximate"), ApproximateCounter)
    assert as_counter("gpt-4o-mini").encoding_name == "o200k_base"  # type: ignore[attr-defined]
    assert as_counter("openai:gpt-4").encoding_name == "cl100k_base"  # type: ignore[attr-defined]
    assert as_counter("o200k_base").encoding_name == "o200k_base"  # type: ignore[attr-defined]
    with pytest.raises(ValueError, match="unknown tiktoken encoding"):
        TiktokenCounter(encoding="o300k_base")


# -- ChatMessage with custom roles ----------------------------------------------------------


def test_a_chat_message_system_mid_history_is_flagged_and_merged() -> None:
    late = ChatMessage(role="system", content="answer in French", id="late")
    history = [*_history()[:3], late, _history()[3]]
    kinds = [(f.kind, f.index) for f in validate(history)]
    assert kinds == [("system_not_first", 3), ("multiple_system", 3)]  # before: []
    fixed = repair(history)
    assert validate(fixed) == []
    assert isinstance(fixed[0], SystemMessage)
    assert fixed[0].content == "be brief\n\nanswer in French"
    assert [m.id for m in fixed] == ["sys", "h1", "a1", "h2"]
    view = TokenBudget(1000).apply(history).messages
    assert validate(view) == []
    assert view[0].content == "be brief\n\nanswer in French"
    assert not any(isinstance(m, ChatMessage) for m in view)


def test_chat_message_roles_are_classified_like_the_standard_types() -> None:
    cases = {
        "system": ("system", SystemMessage),
        "developer": ("system", SystemMessage),
        "user": ("human", HumanMessage),
        "human": ("human", HumanMessage),
        "User": ("human", HumanMessage),
        "assistant": ("ai", AIMessage),
        "ai": ("ai", AIMessage),
        "critic": ("other", ChatMessage),
        "tool": ("other", ChatMessage),
    }
    for role, (kind, cls) in cases.items():
        message = ChatMessage(role=role, content="text", id=f"id-{role}", name="n")
        assert role_of(message) == kind, role
        shown = as_standard(message)
        assert type(shown) is cls, role
        assert (shown.id, shown.content, shown.name) == (message.id, "text", "n")
        [unit] = split_units([message])
        assert unit.kind == kind and unit.messages == (shown,)
        assert unit.has_human == (kind == "human")
    raw_calls = {"tool_calls": [{"id": "c1", "type": "function", "function": {"name": "f"}}]}
    shown = as_standard(ChatMessage(role="assistant", content="x", additional_kwargs=raw_calls))
    assert isinstance(shown, AIMessage) and shown.tool_calls == []  # no calls nobody answers
    developer = as_standard(ChatMessage(role="developer", content="rules"))
    assert developer.additional_kwargs["__openai_role__"] == "developer"
    assert is_system(ChatMessage(role="developer", content="x"))
    assert is_human(ChatMessage(role="user", content="x"))


def test_validation_reads_chat_message_roles() -> None:
    user = ChatMessage(role="user", content="hi", id="u")
    critic = ChatMessage(role="critic", content="meh", id="c")
    assert validate([SystemMessage("s"), user, AIMessage("a")]) == []
    [finding] = validate([SystemMessage("s"), critic, user])
    assert finding.kind == "first_not_human" and "ChatMessage(role='critic')" in finding.detail
    [finding] = validate([critic, AIMessage("a")])
    assert finding.kind == "no_human_message"


def test_other_roles_are_kept_but_never_start_a_view() -> None:
    critic = ChatMessage(role="critic", content="the last answer was vague " * 3, id="c")
    history = [
        HumanMessage("first question " * 20, id="h1"),
        AIMessage("first answer " * 20, id="a1"),
        critic,
        ChatMessage(role="user", content="second question", id="h2"),
    ]
    result = TokenBudget(60, counter=ApproximateCounter()).apply(history)
    assert [m.id for m in result.messages] == ["h2"]  # the critic alone cannot lead
    assert isinstance(result.messages[0], HumanMessage)
    roomy = TokenBudget(10_000).apply(history)
    assert [m.id for m in roomy.messages] == ["h1", "a1", "c", "h2"]
    assert roomy.messages[2] is critic


def test_a_chat_message_user_inside_a_tool_round_can_start_the_view() -> None:
    call = AIMessage("", tool_calls=[{"name": "f", "args": {}, "id": "c1"}], id="ai")
    history = [
        AIMessage("greeting", id="g"),
        call,
        ChatMessage(role="user", content="while it runs", id="u"),
        ToolMessage("done", tool_call_id="c1", id="t"),
    ]
    [_, unit] = split_units(history)
    assert unit.kind == "tool" and unit.has_human
    view = TokenBudget(1000).apply(history).messages
    assert validate(view) == []
    assert "u" in [m.id for m in view]


# -- the fuzz: custom roles and empty ids in malformed histories -----------------------------

_ROLE_FOR = {
    "system": ("system", "developer"),
    "human": ("user", "human"),
    "ai": ("assistant", "ai"),
}


@st.composite
def role_histories(draw: Any) -> list[BaseMessage]:
    """malformed_histories with some messages turned into ChatMessages with their role, some
    custom-role messages inserted, and some tool call ids made empty."""
    out: list[BaseMessage] = []
    empty = draw(st.sampled_from([None, "c0", "c1"]))  # this call id becomes ""
    for m in draw(malformed_histories()):
        if isinstance(m, ToolMessage) and m.tool_call_id == empty:
            m = m.model_copy(update={"tool_call_id": ""})
        elif isinstance(m, AIMessage) and any(c["id"] == empty for c in m.tool_calls):
            calls = [{**c, "id": "" if c["id"] == empty else c["id"]} for c in m.tool_calls]
            m = AIMessage(m.content, tool_calls=calls, id=m.id)
        elif (
            not isinstance(m, ToolMessage)
            and not getattr(m, "tool_calls", None)
            and m.type in _ROLE_FOR
            and draw(st.booleans())
        ):
            role = draw(st.sampled_from(_ROLE_FOR[m.type]))
            m = ChatMessage(role=role, content=m.content, id=m.id)
        out.append(m)
        if draw(st.integers(0, 9)) == 0:
            out.append(ChatMessage(role="critic", content="note"))
    return out


@given(history=role_histories(), max_tokens=st.integers(20, 2000))
def test_views_and_repairs_with_custom_roles_and_empty_ids_are_valid(
    history: list[BaseMessage], max_tokens: int
) -> None:
    fixed = repair(history)
    no_human = {"no_human_message", "first_not_human"}  # repair keeps a human-less history
    has_human = any(is_human(m) for m in history)

    def errors(messages: list[BaseMessage]) -> list[Any]:
        return [
            f
            for f in validate(messages)
            if f.severity == "error" and (has_human or f.kind not in no_human)
        ]

    assert errors(fixed) == []
    assert not any(isinstance(m, ChatMessage) and role_of(m) != "other" for m in fixed)
    try:
        result = TokenBudget(max_tokens, overflow="clip").apply(history)
    except ValueError:
        return  # the required messages do not fit even clipped: reported, not our concern here
    view = result.messages
    assert errors(view) == []
    assert sum(isinstance(m, SystemMessage) for m in view) <= 1
    humans = [i for i, m in enumerate(history) if is_human(m)]
    if humans:
        newest = history[humans[-1]]
        assert any(m.id == newest.id and m.content == newest.content for m in view) or (
            newest.id is None
        )
