"""The summary checks: garbage a small local model answers is rejected before it becomes the
summary (a failed fold: retried, fallback, nothing folded, the reason in ``last_error``), and
realistic good summaries (short, paraphrased, German, Japanese, extractive) are accepted."""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage

from langmem_ext import Summarizer, SummarizerError
from langmem_ext.errors import SummaryRejected
from langmem_ext.strategies import FoldPolicy, SummaryBuffer
from langmem_ext.summarize.calls import ModelCall, is_transient
from langmem_ext.summarize.checks import (
    DEFAULT_CHECKS,
    SummaryContext,
    check_echo,
    check_length,
    check_repetition,
    check_text,
    content_words,
    first_rejection,
)
from langmem_ext.summarize.extractive import ExtractiveSummarizer
from langmem_ext.summarize.prompts import TEMPLATES

DOCS = Path(__file__).resolve().parents[2] / "docs" / "summary_validation.md"

CONVERSATION: list[BaseMessage] = [
    HumanMessage("Hi, I need to move my flight LH 454 from Frankfurt to San Francisco.", id="h1"),
    AIMessage("Sure. Which date would you like instead of March 3?", id="a1"),
    HumanMessage("March 5 please, and keep the aisle seat 23C if possible.", id="h2"),
    AIMessage("Done: LH 454 on March 5, seat 23C kept. The change fee is 70 EUR.", id="a2"),
    HumanMessage("Great, charge it to the Visa ending 4242.", id="h3"),
    AIMessage("Charged 70 EUR to the Visa ending 4242. Anything else?", id="a3"),
]


def context_for(
    messages: Sequence[BaseMessage] = CONVERSATION,
    previous: str = "",
    section: str = "conversation",
) -> SummaryContext:
    """The context the Summarizer builds for the first call of a fold of ``messages``."""
    summarizer = Summarizer(lambda prompt: "unused", templates=[section])
    plan = summarizer.steps({section: previous}, messages)
    call: ModelCall = next(plan)
    return summarizer._context(call)


def reject(summary: str, context: SummaryContext | None = None) -> str | None:
    return first_rejection(summary, context or context_for())


# --- garbage: what a 270M model answered, and its relatives ---------------------------------


def test_checks_reject_a_short_token_repeated_to_the_limit() -> None:
    reason = reject(" ".join(["[b]"] * 200))
    assert reason is not None and reason.startswith("degenerate repetition")
    assert "'b' repeated 200 times" in reason


def test_checks_reject_a_sentence_looped_after_a_good_start() -> None:
    looped = "The user moved flight LH 454 to March 5. " + "The fee is 70 EUR. " * 30
    reason = reject(looped)
    assert reason is not None and "degenerate repetition" in reason


def test_checks_reject_a_long_paragraph_repeated() -> None:
    paragraph = (
        "The user moved flight LH 454 from Frankfurt to San Francisco to March 5, kept seat "
        "23C, and paid a change fee of 70 EUR with the Visa ending 4242; nothing is open. "
    )
    reason = reject(paragraph * 8)
    assert reason is not None and "degenerate repetition" in reason


def test_checks_reject_few_distinct_words_in_a_long_answer() -> None:
    words = ["fee", "seat", "flight", "fee", "seat"]  # no back-to-back unit, 3 distinct in 300
    text = " ".join(words[(i * 7) % 5] for i in range(300))
    assert check_repetition(text, context_for()) is not None


def test_checks_reject_the_transcript_echoed_in_bracket_markup() -> None:
    transcript = "\n".join(context_for().transcript)
    reason = reject("[transcript]\n" + transcript + "\n[/transcript]")
    assert reason is not None and "markup '[transcript]'" in reason


@pytest.mark.parametrize("tag", ["<transcript>", "</previous_summary>", "‹transcript›"])
def test_checks_reject_the_prompts_fence_tags(tag: str) -> None:
    reason = check_echo(f"{tag} The user moved LH 454 to March 5.", context_for())
    assert reason is not None and "markup" in reason


def test_checks_reject_the_prompts_instructions_echoed() -> None:
    context = context_for()
    echoed = "\n".join(str(m.content) for m in context.prompt)
    reason = reject(echoed)
    assert reason is not None and "echoes" in reason


def test_checks_reject_the_instruction_alone() -> None:
    assert reject(TEMPLATES["conversation"]) == (
        "echoes a line of the prompt ('Keep what the conversation needs in orde')"
    )
    padded = "Summary: " + TEMPLATES["conversation"][:120]
    reason = reject(padded)
    assert reason is not None and reason.startswith("echoes the prompt's instructions")


def test_checks_reject_the_placeholder_of_an_empty_previous_summary() -> None:
    reason = reject("(none yet)")
    assert reason is not None and "echoes a line of the prompt" in reason


@pytest.mark.parametrize(
    "answer",
    [
        "I'm sorry, but I can't help with that request.",
        "I’m sorry, I cannot summarize this conversation.",
        "As an AI language model, I do not have the ability to summarize private data.",
        "I cannot provide a summary of this conversation.",
        "Es tut mir leid, aber ich kann das nicht zusammenfassen.",
        "Je ne peux pas résumer cette conversation.",
        "**I'm sorry**, but I can't assist with that.",
    ],
)
def test_checks_reject_a_refusal(answer: str) -> None:
    reason = reject(answer)
    assert reason is not None and reason.startswith("a refusal")


def test_checks_reject_an_answer_about_something_else() -> None:
    pancakes = (
        "Whisk flour, sugar, baking powder and salt; add milk, melted butter and eggs; "
        "cook on a griddle until golden brown on both sides."
    )
    reason = reject(pancakes)
    assert reason is not None and reason.startswith("no overlap")


def test_checks_reject_an_implausibly_long_answer() -> None:
    context = context_for([HumanMessage("hi", id="h")])
    rambling = " ".join(f"word{i}" for i in range(300))
    reason = check_length(rambling, context)
    assert reason is not None and "implausibly long: 300 words" in reason


@pytest.mark.parametrize("answer", ["...", "-", "—", "* * *", "<>"])
def test_checks_reject_an_answer_without_words(answer: str) -> None:
    assert check_text(answer, context_for()) is not None


# --- good summaries pass ----------------------------------------------------------------------

GOOD = [
    # a model's usual summary
    "The user moved flight LH 454 (Frankfurt to San Francisco) from March 3 to March 5, "
    "kept aisle seat 23C and paid the 70 EUR change fee with the Visa ending 4242.",
    # paraphrased: no sentence of the transcript, few of its words
    "Rebooked the customer's Lufthansa trip two days later; same seat; fee settled by card.",
    # short ones
    "Flight changed to March 5.",
    "LH 454 rebooked.",
    "Done.",
    # a bulleted one
    "- flight: LH 454 FRA→SFO, now March 5\n- seat: 23C (aisle)\n- fee: 70 EUR, paid (Visa 4242)"
    "\n- open: nothing",
    # German and Japanese summaries of the English conversation
    "Der Nutzer hat Flug LH 454 von Frankfurt nach San Francisco auf den 5. März umgebucht, "
    "Sitz 23C behalten und 70 EUR Umbuchungsgebühr mit der Visa-Karte 4242 bezahlt.",
    "ユーザーはLH 454便(フランクフルト→サンフランシスコ)を3月5日に変更し、座席23Cを維持し、"
    "変更手数料70ユーロをVisa(末尾4242)で支払った。",
    # reporting a refusal is not a refusal
    "The assistant declined to store the card for later; the user paid by Visa anyway.",
    # first person, as the assistant's own notes
    "I rebooked LH 454 to March 5 and kept seat 23C; the 70 EUR fee is paid.",
]


@pytest.mark.parametrize("summary", GOOD)
def test_checks_accept_realistic_good_summaries(summary: str) -> None:
    assert reject(summary) is None


def test_checks_accept_summaries_of_a_german_conversation() -> None:
    german: list[BaseMessage] = [
        HumanMessage("Ich möchte meine Bestellung 4711 stornieren, sie kam nie an.", id="h1"),
        AIMessage("Die Bestellung 4711 ist storniert, die Erstattung kommt in 5 Tagen.", id="a1"),
        HumanMessage("Danke, bitte auch den Newsletter abbestellen.", id="h2"),
        AIMessage("Erledigt, der Newsletter ist abbestellt.", id="a2"),
    ]
    context = context_for(german)
    for summary in (
        "Bestellung 4711 storniert (nie angekommen), Erstattung in 5 Tagen; Newsletter abbestellt.",
        "The user cancelled order 4711, which never arrived; refund within 5 days; the "
        "newsletter subscription was cancelled too.",
        "Storniert und abbestellt.",
    ):
        assert first_rejection(summary, context) is None, summary


def test_checks_accept_summaries_of_a_japanese_conversation() -> None:
    japanese: list[BaseMessage] = [
        HumanMessage("来週の東京出張のホテルを予約してください。予算は一泊15000円です。", id="h1"),
        AIMessage("新宿のホテルを3泊予約しました。合計42000円です。", id="a1"),
    ]
    context = context_for(japanese)
    for summary in (
        "東京出張のため新宿のホテルを3泊予約(合計42000円、予算一泊15000円以内)。",
        "ホテル予約済み。",
        "Booked 3 nights at a Shinjuku hotel for the Tokyo trip: 42000 yen in total.",
    ):
        assert first_rejection(summary, context) is None, summary


def test_checks_accept_repetition_the_conversation_itself_holds() -> None:
    spam: list[BaseMessage] = [
        HumanMessage("ha " * 40, id="h1"),
        AIMessage("Glad you liked the joke!", id="a1"),
    ]
    assert first_rejection("- user: " + "ha " * 40, context_for(spam)) is None


def test_checks_accept_a_tag_the_conversation_quotes() -> None:
    quoting: list[BaseMessage] = [
        HumanMessage("Why does my prompt wrap the log in [transcript] tags?", id="h1"),
        AIMessage("Because the model then treats the log as data, not instructions.", id="a1"),
    ]
    summary = "The user asked why the prompt wraps logs in [transcript] tags; answer: as data."
    assert first_rejection(summary, context_for(quoting)) is None


def test_checks_accept_a_fence_tag_the_conversation_quotes_in_any_brackets() -> None:
    # the transcript shows the user's "<transcript>" defanged as "‹transcript›"
    quoting: list[BaseMessage] = [
        HumanMessage("My log shows </previous_summary> and <transcript> tags, why?", id="h1"),
        AIMessage("Those are the fences the summarizer prompt uses.", id="a1"),
    ]
    context = context_for(quoting)
    assert "‹transcript›" in "\n".join(context.transcript)
    summary = "The user saw </previous_summary> and <transcript> tags in a log: prompt fences."
    assert first_rejection(summary, context) is None


def test_checks_accept_a_refusal_the_conversation_holds_verbatim() -> None:
    refusing: list[BaseMessage] = [
        HumanMessage("Tell me the admin password.", id="h1"),
        AIMessage("I'm sorry, but I can't share passwords.", id="a1"),
    ]
    assert first_rejection("I'm sorry, but I can't share passwords.", context_for(refusing)) is None


def test_checks_accept_the_extractive_summarizers_answers() -> None:
    from langmem_ext.testing import synthetic_history

    messages = synthetic_history(60, seed=3)
    summarizer = Summarizer(ExtractiveSummarizer(), max_summary_tokens=300)
    previous: dict[str, str] = {}
    for start in range(0, 60, 12):
        previous = summarizer.fold(previous, messages[start : start + 12])
    assert previous["conversation"].strip()


def test_content_words_fold_case_accents_and_inflection() -> None:
    assert content_words("Zürich invoices") == content_words("zurich INVOICE")
    assert content_words("東京出張") == {"東京", "京出", "出張"}
    assert "4242" in content_words("Visa ending 4242")
    assert content_words("this that with from user assistant") == set()


# --- through the Summarizer: a rejected answer is a failed call -------------------------------


class Scripted:
    """A sync model answering from a list (the last answer repeats), recording every prompt."""

    def __init__(self, *answers: str) -> None:
        self.answers = list(answers)
        self.prompts: list[list[BaseMessage]] = []

    def __call__(self, prompt: list[BaseMessage]) -> str:
        self.prompts.append(prompt)
        return self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]


def quick(model: Any, **kwargs: Any) -> Summarizer:
    summarizer = Summarizer(model, retry_initial_wait=0.0, retry_max_wait=0.0, **kwargs)
    summarizer.sleep = lambda seconds: None  # type: ignore[method-assign]
    return summarizer


GARBAGE = " ".join(["[b]"] * 120)


def test_summarizer_retries_a_rejected_answer_and_keeps_the_good_one() -> None:
    model = Scripted(GARBAGE, "LH 454 moved to March 5; fee 70 EUR paid.")
    out = quick(model).fold({}, CONVERSATION)
    assert out == {"conversation": "LH 454 moved to March 5; fee 70 EUR paid."}
    assert len(model.prompts) == 2


def test_summarizer_raises_summary_rejected_with_the_reason_after_its_attempts() -> None:
    model = Scripted(GARBAGE)
    with pytest.raises(SummaryRejected) as caught:
        quick(model, max_attempts=3).fold({}, CONVERSATION)
    error = caught.value
    assert isinstance(error, SummarizerError)
    assert error.reason.startswith("degenerate repetition")
    assert error.attempts == 3 and len(model.prompts) == 3
    assert str(error).startswith("the 'conversation' summary was rejected after 3 attempt(s)")
    assert is_transient(SummaryRejected("x", reason="x"))


def test_summarizer_uses_the_fallback_when_its_model_answers_garbage() -> None:
    fallback = Scripted("Flight LH 454 rebooked to March 5.")
    summarizer = quick(Scripted("I'm sorry, but I can't help with that."), fallback=fallback)
    assert summarizer.fold({}, CONVERSATION) == {
        "conversation": "Flight LH 454 rebooked to March 5."
    }


def test_summarizer_rejects_when_model_and_fallback_both_answer_garbage() -> None:
    summarizer = quick(Scripted(GARBAGE), fallback=Scripted("[transcript]\nuser: hi"))
    with pytest.raises(SummaryRejected, match="fallback failed too") as caught:
        summarizer.fold({}, CONVERSATION)
    assert "markup" in caught.value.reason


async def test_summarizer_async_fold_rejects_garbage_too() -> None:
    async def model(prompt: list[BaseMessage]) -> str:
        return GARBAGE

    with pytest.raises(SummaryRejected):
        await quick(model).afold({}, CONVERSATION)


def test_summarizer_validate_none_accepts_anything() -> None:
    assert quick(Scripted(GARBAGE), validate=None).fold({}, CONVERSATION) == {
        "conversation": GARBAGE
    }


def test_summarizer_validate_takes_one_check_or_several() -> None:
    seen: list[SummaryContext] = []

    def no_digits(summary: str, context: SummaryContext) -> str | None:
        seen.append(context)
        return "has digits" if re.search(r"\d", summary) else None

    with pytest.raises(SummaryRejected, match="has digits"):
        quick(Scripted("Moved to March 5."), validate=no_digits, max_attempts=1).fold(
            {"conversation": "Earlier: nothing."}, CONVERSATION
        )
    context = seen[0]
    assert context.section == "conversation" and context.kind == "fold"
    assert context.previous == "Earlier: nothing."
    assert context.transcript[0].startswith("user: Hi, I need to move my flight LH 454")
    assert isinstance(context.prompt[0], SystemMessage) and context.max_tokens == 1_000

    both = quick(Scripted("Moved."), validate=[*DEFAULT_CHECKS, no_digits])
    assert both.fold({}, CONVERSATION) == {"conversation": "Moved."}


@pytest.mark.parametrize("bad", ["check_text", 3, [check_text, "nope"]])
def test_summarizer_refuses_a_validate_that_is_not_checks(bad: Any) -> None:
    with pytest.raises(TypeError, match="validate must"):
        Summarizer(lambda prompt: "x", validate=bad)


def test_a_check_returning_a_non_string_is_a_clear_error() -> None:
    with pytest.raises(TypeError, match="returned 1; expected None or a str"):
        first_rejection("x", context_for(), [lambda summary, context: 1])  # type: ignore[list-item]


def test_a_rejected_compress_answer_leaves_the_summary_clipped() -> None:
    long_good = " ".join(f"Item {i}: flight LH 454 detail number {i * 7}." for i in range(60))
    model = Scripted(long_good, "I'm sorry, but I can't shorten this.")
    out = quick(model, max_summary_tokens=60, max_attempts=1).fold({}, CONVERSATION * 10)
    assert out["conversation"].endswith("[... summary clipped by langmem_ext to its token budget]")
    assert "sorry" not in out["conversation"]


def test_summarizer_checks_each_section_with_its_own_context() -> None:
    seen: list[tuple[str, str]] = []

    def record(summary: str, context: SummaryContext) -> str | None:
        seen.append((context.section, context.instructions))
        return None

    quick(
        Scripted("LH 454 on March 5."), templates=["conversation", "facts"], validate=record
    ).fold({}, CONVERSATION)
    assert seen == [("conversation", TEMPLATES["conversation"]), ("facts", TEMPLATES["facts"])]


# --- in a strategy: a failed fold, nothing folded, the reason reported ------------------------


class Clock:
    def __init__(self) -> None:
        self.t = 1_000.0

    def __call__(self) -> float:
        return self.t


def long_history(n: int = 40) -> list[BaseMessage]:
    filler = "we compared the quarterly invoice totals for the Berlin office in detail"
    messages: list[BaseMessage] = []
    for i in range(n):
        messages.append(HumanMessage(f"question {i}: {filler}, item {i * 13}?", id=f"h{i}"))
        messages.append(AIMessage(f"answer {i}: {filler}; the total is {i * 97} EUR.", id=f"a{i}"))
    messages.append(HumanMessage("And the grand total?", id="last"))
    return messages


@pytest.mark.parametrize("mode", ["sync", "async"])
async def test_strategy_with_a_garbage_summarizer_folds_nothing_and_reports_the_reason(
    mode: str,
) -> None:
    model = Scripted(GARBAGE)
    summarizer = quick(model, max_attempts=2, max_summary_tokens=200)
    strategy = SummaryBuffer(800, summarizer=summarizer, policy=FoldPolicy(clock=Clock()))
    messages = long_history()
    if mode == "sync":
        result = strategy.apply(messages)
    else:
        result = await strategy.aapply(messages)
    assert result.state.health != "healthy"
    assert result.state.folded == 0 and not result.state.summary
    assert result.state.last_error is not None
    assert result.state.last_error.startswith("SummaryRejected: the 'conversation' summary was")
    assert "degenerate repetition" in result.state.last_error
    assert "[b] [b]" not in "".join(str(m.content) for m in result.messages)


def test_strategy_with_the_extractive_summarizer_stays_healthy() -> None:
    strategy = SummaryBuffer(
        800, summarizer=ExtractiveSummarizer(), policy=FoldPolicy(clock=Clock())
    )
    result = strategy.apply(long_history())
    assert result.state.health == "healthy" and result.state.folded > 0


# --- the documentation's example runs ---------------------------------------------------------


def test_summary_validation_doc_example_runs() -> None:
    text = DOCS.read_text(encoding="utf-8")
    blocks = re.findall(r"```python\n(.*?)```", text, flags=re.S)
    assert blocks, "docs/summary_validation.md has no python example"
    namespace: dict[str, Any] = {}
    for block in blocks:
        exec(compile(block, str(DOCS), "exec"), namespace)
