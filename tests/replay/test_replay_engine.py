"""Replaying a transcript through strategies (engine, specs, prices, output)."""

from __future__ import annotations

import asyncio
import json
from dataclasses import asdict, replace
from pathlib import Path

import pytest
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage
from langgraph.store.memory import InMemoryStore

from langmem_ext import (
    ApproximateCounter,
    ExtractiveSummarizer,
    Retrieval,
    SummaryBuffer,
    TieredSummary,
    TokenBudget,
    ToolDigest,
)
from langmem_ext.replay import (
    CallRecord,
    PriceError,
    SpecError,
    areplay,
    compare,
    load_prices,
    model_calls,
    parse_strategy,
    replay,
)
from langmem_ext.testing import RecordingSummarizer, synthetic_history

MESSAGES = synthetic_history(160, seed=5, words=(20, 120))
PRICE = load_prices().get("openai:gpt-4o-mini")


def _without_time(record: CallRecord) -> dict[str, object]:
    return {k: v for k, v in asdict(record).items() if k != "seconds"}


# -- the replay loop -------------------------------------------------------------------------


def test_full_history_replays_every_model_call_with_exact_figures() -> None:
    counter = ApproximateCounter()
    result = replay(MESSAGES, None, progress=False)
    positions = [i for i, m in enumerate(MESSAGES) if isinstance(m, AIMessage) and i > 0]
    assert [c.position for c in result.calls] == positions == model_calls(MESSAGES)
    previous: list[BaseMessage] = []
    entry: list[BaseMessage] = []  # the last request that wrote or read the prompt cache
    for c in result.calls:
        history = MESSAGES[: c.position]
        assert c.history_messages == c.view_messages == len(history)
        assert c.history_tokens == c.view_tokens == counter.count_messages(history)
        assert c.output_tokens == counter.count_message(MESSAGES[c.position])
        # the cached request is this request's prefix: read at the provider's rules (nothing
        # under its 1,024-token minimum), the rest written
        read, written = PRICE.cache_use(
            c.view_tokens, counter.count_messages(entry) if entry else 0
        )
        assert (c.cached_tokens, c.cache_write_tokens) == (read, written)
        assert (read + written == c.view_tokens) == (c.view_tokens >= 1_024)
        if c.view_tokens >= 1_024:
            entry = list(history)
        assert c.prefix_kept == bool(previous)
        assert c.cost == pytest.approx(
            PRICE.cost(input_tokens=c.view_tokens, output_tokens=c.output_tokens)
        )
        assert c.cost_cached == pytest.approx(
            PRICE.cost(
                input_tokens=c.view_tokens,
                output_tokens=c.output_tokens,
                cached_tokens=c.cached_tokens,
            )
        )
        previous = list(MESSAGES[: c.position + 1])
    totals = result.totals()
    assert totals["input_vs_full"] == 1.0
    assert totals["cost_cached"] < totals["cost"]


def test_a_budget_strategy_is_replayed_within_budget_and_valid() -> None:
    result = replay(MESSAGES, TokenBudget(1_500), progress=False)
    assert result.budget == 1_500 and result.error is None
    assert result.calls and all(c.view_tokens <= 1_500 for c in result.calls)
    assert all(c.valid and c.newest_human_shown and not c.over_budget for c in result.calls)
    # cached tokens never exceed the view; the cut breaks the prefix now and then
    assert all(0 <= c.cached_tokens <= c.view_tokens for c in result.calls)
    assert any(not c.prefix_kept for c in result.calls[1:])
    assert result.totals()["input_vs_full"] < 0.5


def test_summaries_are_counted_from_the_summarizer_itself() -> None:
    recorder = RecordingSummarizer(max_summary_tokens=200)
    strategy = SummaryBuffer(1_500, summarizer=recorder)
    own = strategy.summarizer
    result = replay(MESSAGES, strategy, progress=False, summarizer_model="openai:gpt-4o-mini")
    assert strategy.summarizer is own  # the caller's strategy is not changed
    folds = [c for c in result.calls if c.folded]
    assert folds, "the conversation is several budgets long: it must fold"
    assert sum(c.summarizer_calls for c in result.calls) == len(recorder.batches)
    assert len(folds) == len(recorder.batches)
    assert sum(c.folded for c in result.calls) == len(recorder.folded)
    read = sum(c.summarizer_input_tokens for c in result.calls)
    assert read >= ApproximateCounter().count_messages(recorder.folded) - 3 * len(folds)
    first = folds[0]
    # the summarizer's tokens are billed at the summarizer model's prices
    call_only = PRICE.cost(input_tokens=first.view_tokens, output_tokens=first.output_tokens)
    assert first.cost > call_only
    assert result.totals()["summary_events"] == len(folds)


def test_sync_and_async_replays_agree() -> None:
    def make() -> TieredSummary:
        return TieredSummary(2_000, summarizer=ExtractiveSummarizer())

    sync = replay(MESSAGES, make(), progress=False)
    async_ = asyncio.run(areplay(MESSAGES, make(), progress=False))
    assert [_without_time(c) for c in sync.calls] == [_without_time(c) for c in async_.calls]


def test_a_strategy_that_gives_up_ends_the_replay_with_the_reason() -> None:
    huge = [
        HumanMessage("hi " * 50, id="h0"),
        AIMessage("ok", id="a0"),
        HumanMessage("word " * 3_000, id="h1"),
        AIMessage("ok", id="a1"),
    ]
    result = replay(huge, TokenBudget(500, overflow="error"), progress=False)
    assert len(result.calls) == 1
    assert result.error is not None and result.error.startswith("call 2: ContextOverflowError")
    assert "stopped at call 2" in compare(huge, [TokenBudget(500, overflow="error")]).table()


def test_retrieval_replays_do_not_share_memory_and_stay_within_their_budget() -> None:
    def make() -> Retrieval:
        return Retrieval(TokenBudget(1_500), store=InMemoryStore(), max_retrieved_tokens=300)

    store_shared = InMemoryStore()
    strategy = Retrieval(TokenBudget(1_500), store=store_shared, max_retrieved_tokens=300)
    first = replay(MESSAGES, strategy, progress=False)
    second = replay(MESSAGES, strategy, progress=False)  # same store: a fresh key per replay
    fresh = replay(MESSAGES, make(), progress=False)
    assert [_without_time(c) for c in first.calls] == [_without_time(c) for c in second.calls]
    assert [_without_time(c) for c in first.calls] == [_without_time(c) for c in fresh.calls]
    assert first.budget == 1_500  # the report's budget is the whole request's
    assert sum(c.retrieved_tokens for c in first.calls) > 0
    assert not any(c.over_budget for c in first.calls)


# -- strategy specs --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("spec", "kind", "max_tokens"),
    [
        ("token_budget:8000", TokenBudget, 8_000),
        ("TokenBudget:max_tokens=8_000", TokenBudget, 8_000),
        ("trim:8k", TokenBudget, 8_000),
        ("tool-digest:2k,keep_rounds=2", ToolDigest, 2_000),
        ("summary_buffer:max_tokens=1.5k", SummaryBuffer, 1_500),
        ("tiered:4000,keep_rounds=none", TieredSummary, 4_000),
    ],
)
def test_specs_build_the_named_strategy(spec: str, kind: type, max_tokens: int) -> None:
    name, strategy = parse_strategy(spec, summarizer=ExtractiveSummarizer())
    assert name == spec and isinstance(strategy, kind)
    assert strategy.config.max_tokens == max_tokens


def test_spec_values_and_the_shared_counter() -> None:
    _, window = parse_strategy("sliding_window:6,start_on=any", counter="approximate")
    assert window is not None and window.config.max_messages == 6
    assert window.config.start_on == "any"
    assert isinstance(window.counter, ApproximateCounter)
    assert parse_strategy(" full ") == ("full", None)
    _, wrapped = parse_strategy(
        "retrieval+token_budget:3000,k=7,max_retrieved_tokens=500", store=InMemoryStore
    )
    assert isinstance(wrapped, Retrieval) and isinstance(wrapped.inner, TokenBudget)
    assert wrapped.config.k == 7 and wrapped.config.max_retrieved_tokens == 500
    assert wrapped.inner.config.max_tokens == 3_000


def test_a_retrieval_spec_gets_a_key_of_its_own_or_the_one_given() -> None:
    from langmem_ext import MemoryKey

    history = MESSAGES[:60]
    _, own = parse_strategy("retrieval+token_budget:1500", store=InMemoryStore)
    _, other = parse_strategy("retrieval+token_budget:1500", store=InMemoryStore)
    assert isinstance(own, Retrieval) and isinstance(other, Retrieval)
    assert own.config.key is not None and own.config.key != other.config.key
    assert own.apply(history).report.budget == 1_500  # no key= needed
    given = MemoryKey(user="ana", session="s1")
    _, keyed = parse_strategy("retrieval+token_budget:1500", store=InMemoryStore, key=given)
    assert isinstance(keyed, Retrieval) and keyed.config.key == given


@pytest.mark.parametrize(
    ("spec", "needle"),
    [
        ("token_bugdet:8000", "unknown strategy 'token_bugdet' (did you mean token_budget?)"),
        ("token_budget:max_token=5", "no argument 'max_token' (did you mean max_tokens?)"),
        ("token_budget:target_tokens=5,8000", "'8000' needs a name (key=value)"),
        ("summary_buffer:8000", "SummaryBuffer needs a summarizer"),
        ("retrieval:k=5", "write retrieval+<strategy>"),
        ("full:8000", "'full' takes no arguments"),
        ("token_budget:0", "strategy 'token_budget:0': "),
        ("token_budget:8000,2x=1", "'2x' is not an argument name"),
    ],
)
def test_bad_specs_name_the_problem(spec: str, needle: str) -> None:
    with pytest.raises(SpecError) as caught:
        parse_strategy(spec)
    assert needle in str(caught.value)
    assert "\n" not in str(caught.value)


# -- prices ----------------------------------------------------------------------------------


def test_prices_resolve_the_names_people_write() -> None:
    prices = load_prices()
    assert prices.get("gpt-4o-mini").model == "openai:gpt-4o-mini"
    assert prices.get("openai:gpt-4o-2024-08-06").model == "openai:gpt-4o"
    assert prices.get("anthropic:claude-3-5-haiku-20241022").model == "anthropic:claude-3-5-haiku"
    with pytest.raises(PriceError, match=r"no price for model 'mistral:large'.*known: "):
        prices.get("mistral:large")


def test_prompt_cache_rules_follow_the_providers() -> None:
    prices = load_prices()
    openai, anthropic = prices.get("openai:gpt-4o"), prices.get("anthropic:claude-sonnet-4")
    assert openai.cacheable(1_000) == 0  # under the 1,024-token minimum
    assert openai.cacheable(1_100) == 1_024  # whole 128-token steps
    assert anthropic.cacheable(1_100) == 1_100
    # Anthropic bills the uncached part as a cache write (1.25x input)
    assert anthropic.cost(input_tokens=2_000, output_tokens=0, cached_tokens=0) == pytest.approx(
        2_000 * 3.75 / 1e6
    )
    assert anthropic.cost(input_tokens=2_000, output_tokens=0) == pytest.approx(2_000 * 3 / 1e6)


def test_a_prices_file_overlays_the_built_in_prices(tmp_path: Path) -> None:
    path = tmp_path / "prices.json"
    path.write_text(
        json.dumps(
            {
                "models": {
                    "openai:gpt-4o-mini": {"input": 1, "output": 2},
                    "local:llama": {"input": 0, "output": 0},
                }
            }
        )
    )
    prices = load_prices(path)
    assert prices.get("openai:gpt-4o-mini").input == 1.0
    assert prices.get("openai:gpt-4o-mini").cached_input is None  # no caching in the override
    assert prices.get("local:llama").output == 0.0
    assert prices.get("openai:gpt-4o").input == 2.5  # the rest stay
    path.write_text('{"models": {\n  "x:y": {"input": 1,}\n}}')
    with pytest.raises(PriceError, match=r"prices.json line 2: not valid JSON"):
        load_prices(path)
    path.write_text(json.dumps({"models": {"x:y": {"input": -1, "output": 1}}}))
    with pytest.raises(PriceError, match=r"'x:y': prices must be >= 0"):
        load_prices(path)
    path.write_text(json.dumps({"models": {"gpt": {"input": 1, "output": 1}}}))
    with pytest.raises(PriceError, match=r"must be named provider:name"):
        load_prices(path)


# -- the comparison and its outputs ----------------------------------------------------------


def test_compare_tabulates_and_writes_csv_json_and_a_plot(tmp_path: Path) -> None:
    result = compare(
        MESSAGES,
        {"full": None, "budget": TokenBudget(1_500), "digest": ToolDigest(1_500)},
        progress=False,
        source="synthetic",
    )
    table = result.table().splitlines()
    assert table[0].startswith("| strategy | calls |") and len(table) == 2 + 3
    assert [line.split(" | ")[0] for line in table[2:]] == ["| full", "| budget", "| digest"]
    plain = result.table(markdown=False).splitlines()
    assert plain[0].startswith("strategy") and "|" not in plain[0]
    calls = sum(len(r.calls) for r in result.replays)
    csv_text = result.to_csv(tmp_path / "calls.csv")
    assert (tmp_path / "calls.csv").read_text() == csv_text
    assert len(csv_text.splitlines()) == calls + 1
    data = json.loads(result.to_json(tmp_path / "all.json"))
    assert [s["name"] for s in data["strategies"]] == ["full", "budget", "digest"]
    assert data["strategies"][1]["totals"]["invalid_views"] == 0
    assert len(data["strategies"][2]["calls"]) == len(result.replays[2].calls)
    figure = result.plot(tmp_path / "plot.png")
    png = (tmp_path / "plot.png").read_bytes()
    assert png.startswith(b"\x89PNG\r\n\x1a\n") and len(png) > 20_000
    assert len(figure.axes) == len(result.replays) + 2  # a panel per strategy, 2 bar charts


def test_unnamed_strategies_get_distinct_names() -> None:
    result = compare(MESSAGES[:30], [TokenBudget(900), TokenBudget(1_200), None], progress=False)
    assert [r.name for r in result.replays] == ["TokenBudget", "TokenBudget #2", "full history"]


def test_identical_messages_compare_equal_for_the_cache() -> None:
    # a strategy that rebuilds equal messages every call (another library's copies) still
    # keeps the prefix: equality, not identity, decides
    copies = [replace_id(m) for m in MESSAGES[:40]]
    result = replay(copies, None, progress=False)
    assert all(c.prefix_kept for c in result.calls[1:])


def replace_id(message: BaseMessage) -> BaseMessage:
    return message.model_copy()


def test_records_are_frozen() -> None:
    record = replay(MESSAGES[:20], None, progress=False).calls[0]
    with pytest.raises(AttributeError):
        record.view_tokens = 1  # type: ignore[misc]
    assert replace(record, view_tokens=1).view_tokens == 1
