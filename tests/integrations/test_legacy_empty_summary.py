"""The legacy drop-in never prunes on an empty or garbage summary: the failure is raised (as a
summarizer error is), the buffer keeps every message, and the next turn tries again."""

from __future__ import annotations

import warnings
from typing import Any

import pytest
from langchain_core.chat_history import InMemoryChatMessageHistory
from langchain_core.language_models.fake_chat_models import FakeListChatModel

from langmem_ext.errors import SummaryRejected
from langmem_ext.integrations.legacy import ConversationSummaryBufferMemory
from langmem_ext.summarize.checks import SummaryContext

GARBAGE = " ".join(["[b]"] * 150)
TURNS = [
    ("my order 4711 never arrived", "sorry to hear that, I will check order 4711"),
    ("it was sent to Hamburg last Tuesday", "the carrier lost it near Hamburg, refund issued"),
    ("thanks, how long does the refund take", "about five business days"),
]


def model(*answers: str) -> FakeListChatModel:
    return FakeListChatModel(responses=list(answers), custom_get_token_ids=str.split)


def memory(llm: FakeListChatModel, **kwargs: Any) -> ConversationSummaryBufferMemory:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return ConversationSummaryBufferMemory(llm=llm, max_token_limit=20, **kwargs)


def save_all(mem: ConversationSummaryBufferMemory) -> list[SummaryRejected]:
    errors: list[SummaryRejected] = []
    for said, answered in TURNS:
        try:
            mem.save_context({"input": said}, {"output": answered})
        except SummaryRejected as error:
            errors.append(error)
    return errors


@pytest.mark.parametrize("answer", ["", "   \n", GARBAGE, "I'm sorry, but I can't help with that."])
@pytest.mark.parametrize("delete_pruned", [False, True])
def test_legacy_memory_does_not_prune_on_an_empty_or_rejected_summary(
    answer: str, delete_pruned: bool
) -> None:
    mem = memory(model(answer), delete_pruned=delete_pruned)
    errors = save_all(mem)
    assert errors, "the rejected summary must be visible"
    assert errors[0].reason
    assert "no message was pruned" in str(errors[0])
    assert mem.moving_summary_buffer == "" and mem.state.pruned == 0
    assert len(mem.chat_memory.messages) == 2 * len(TURNS)
    history = mem.load_memory_variables({})["history"]
    for said, answered in TURNS:  # every message still in the buffer
        assert said in history and answered in history


async def test_legacy_memory_async_does_not_prune_on_an_empty_summary() -> None:
    mem = memory(model(""))
    with pytest.raises(SummaryRejected, match="empty summary"):
        for said, answered in TURNS:
            await mem.asave_context({"input": said}, {"output": answered})
    assert mem.state.pruned == 0 and mem.moving_summary_buffer == ""
    assert len(await mem.chat_memory.aget_messages()) >= 2


def test_legacy_memory_prunes_once_the_model_answers_a_real_summary() -> None:
    llm = model(GARBAGE, "The order 4711 never arrived in Hamburg; a refund was issued.")
    mem = memory(llm)
    with pytest.raises(SummaryRejected, match="degenerate repetition"):
        mem.save_context({"input": TURNS[0][0]}, {"output": TURNS[0][1]})
        mem.save_context({"input": TURNS[1][0]}, {"output": TURNS[1][1]})
    assert mem.state.pruned == 0
    mem.save_context({"input": TURNS[2][0]}, {"output": TURNS[2][1]})
    assert mem.moving_summary_buffer.startswith("The order 4711 never arrived")
    assert mem.state.pruned > 0


def test_legacy_memory_validate_summary_none_keeps_only_the_empty_check() -> None:
    mem = memory(model(GARBAGE), validate_summary=None)
    assert save_all(mem) == []
    assert mem.moving_summary_buffer == GARBAGE

    empty = memory(model(""), validate_summary=None)
    assert save_all(empty)  # an empty summary is never committed


def test_legacy_memory_runs_custom_checks_with_the_legacy_context() -> None:
    seen: list[SummaryContext] = []

    def no_refunds(summary: str, context: SummaryContext) -> str | None:
        seen.append(context)
        return "mentions a refund" if "refund" in summary else None

    mem = memory(model("A refund was issued."), validate_summary=no_refunds)
    errors = save_all(mem)
    assert errors and errors[0].reason == "mentions a refund"
    context = seen[0]
    assert context.transcript[0] == "Human: my order 4711 never arrived"
    assert "Progressively summarize" in str(context.prompt[0].content)


def test_legacy_memory_refuses_a_validate_summary_that_is_not_checks() -> None:
    with pytest.raises(TypeError, match="validate must"):
        memory(model("x"), validate_summary="check_text")


def test_legacy_memory_keeps_an_in_memory_history_whole_with_delete_pruned() -> None:
    history = InMemoryChatMessageHistory()
    mem = memory(model(GARBAGE), chat_memory=history, delete_pruned=True)
    save_all(mem)
    assert len(history.messages) == 2 * len(TURNS)
