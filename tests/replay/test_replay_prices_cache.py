"""Prompt-cache pricing in replays: a cache entry is written (and billed at the write premium)
only from the provider's minimum cacheable prompt on, a request under it is billed uncached and
reads nothing, and an entry expires ``cache_ttl`` seconds after its last use when the transcript
carries timestamps."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, messages_to_dict

from langmem_ext import ApproximateCounter
from langmem_ext.cli import main
from langmem_ext.replay import PriceError, load_prices, load_transcript, message_time, replay

PRICES = load_prices()
SONNET = PRICES.get("anthropic:claude-sonnet-4")
HAIKU = PRICES.get("anthropic:claude-3-5-haiku-20241022")
GPT = PRICES.get("openai:gpt-4o")


def test_a_cache_entry_is_written_only_from_the_providers_minimum() -> None:
    assert (SONNET.min_cached_tokens, HAIKU.min_cached_tokens, GPT.min_cached_tokens) == (
        1_024,
        2_048,
        1_024,
    )
    # under the minimum: no write premium, no read, whatever repeats
    assert SONNET.cache_use(1_000, 900) == (0, 0)
    assert SONNET.cost(input_tokens=1_000, output_tokens=0, cached_tokens=900) == pytest.approx(
        1_000 * 3.0 / 1e6
    )
    # from the minimum on: the repeated prefix read, the rest written at 1.25x
    assert SONNET.cache_use(1_500, 0) == (0, 1_500)
    assert SONNET.cost(input_tokens=1_500, output_tokens=0, cached_tokens=0) == pytest.approx(
        1_500 * 3.75 / 1e6
    )
    assert SONNET.cache_use(3_000, 2_000) == (2_000, 1_000)
    assert SONNET.cost(input_tokens=3_000, output_tokens=0, cached_tokens=2_000) == pytest.approx(
        (2_000 * 0.3 + 1_000 * 3.75) / 1e6
    )
    # Haiku caches from 2,048 tokens: 1,500 is billed as uncached
    assert HAIKU.cache_use(1_500, 1_400) == (0, 0)
    assert HAIKU.cost(input_tokens=1_500, output_tokens=0, cached_tokens=0) == pytest.approx(
        1_500 * 0.8 / 1e6
    )
    assert HAIKU.cache_use(2_500, 0) == (0, 2_500)
    # OpenAI: automatic caching, no write premium; reads in 128-token steps
    assert GPT.cache_use(1_500, 1_100) == (1_024, 476)
    assert GPT.cost(input_tokens=1_500, output_tokens=0, cached_tokens=1_100) == pytest.approx(
        (1_024 * 1.25 + 476 * 2.5) / 1e6
    )


def _chat(
    turns: int, words: int, *, start: float | None = None, gaps: dict[int, float] | None = None
) -> list[BaseMessage]:
    """``turns`` human/AI pairs of ``words`` words each; with ``start``, timestamps 30 s apart
    (plus ``gaps[turn]`` seconds before that turn) in ``additional_kwargs``."""
    messages: list[BaseMessage] = []
    now = start
    for turn in range(turns):
        if now is not None:
            now += 30 + (gaps or {}).get(turn, 0)
        stamp = {} if now is None else {"timestamp": now}
        text = " ".join(f"word{turn}x{i}" for i in range(words))
        messages.append(HumanMessage(text, id=f"h{turn}", additional_kwargs=stamp))
        answer_stamp = {} if now is None else {"timestamp": now + 5}
        messages.append(AIMessage(f"ok {turn}", id=f"a{turn}", additional_kwargs=answer_stamp))
    return messages


def test_calls_under_the_minimum_are_billed_uncached_in_a_replay() -> None:
    small = replay(_chat(4, 20), None, model="anthropic:claude-sonnet-4", progress=False)
    assert all(c.view_tokens < 1_024 for c in small.calls)
    assert all(c.cached_tokens == 0 and c.cache_write_tokens == 0 for c in small.calls)
    assert all(c.cost_cached == pytest.approx(c.cost) for c in small.calls)
    assert small.totals()["cached_share"] == 0.0
    big = replay(_chat(4, 600), None, model="anthropic:claude-sonnet-4", progress=False)
    first, second = big.calls[0], big.calls[1]
    assert first.view_tokens >= 1_024
    assert (first.cached_tokens, first.cache_write_tokens) == (0, first.view_tokens)
    assert first.cost_cached > first.cost  # written at 1.25x, nothing read yet
    # the next request repeats the first one (its prompt, not its answer): read from the cache
    counter = ApproximateCounter()
    assert second.cached_tokens == counter.count_messages(_chat(4, 600)[:1])
    assert second.cache_write_tokens == second.view_tokens - second.cached_tokens
    assert second.cost_cached < second.cost


def test_a_call_longer_than_the_ttl_after_the_last_use_misses() -> None:
    # 10 minutes of silence before turn 3: the entry (5 minutes) has expired
    timed = _chat(5, 400, start=1_750_000_000.0, gaps={3: 600})
    result = replay(timed, None, model="anthropic:claude-sonnet-4", progress=False)
    expired = [c.call for c in result.calls if c.cache_expired]
    assert expired == [4]  # the call that answers turn 3
    miss = result.calls[3]
    assert miss.cached_tokens == 0 and miss.cache_write_tokens == miss.view_tokens
    assert result.calls[4].cached_tokens > 0  # the miss wrote a fresh entry
    assert result.calls[2].cached_tokens > 0
    assert "modelled from the transcript's timestamps (ttl 300 s)" in result.cache_expiry
    assert result.totals()["cache_expired"] == 1
    # a longer ttl keeps the entry; the same chat without timestamps cannot tell
    longer = replay(timed, None, model="anthropic:claude-sonnet-4", cache_ttl=900, progress=False)
    assert not any(c.cache_expired for c in longer.calls)
    assert longer.calls[3].cached_tokens > 0
    untimed = replay(_chat(5, 400), None, model="anthropic:claude-sonnet-4", progress=False)
    assert not any(c.cache_expired for c in untimed.calls)
    assert "not modelled: the transcript has no timestamps" in untimed.cache_expiry
    with pytest.raises(ValueError, match="cache_ttl must be a number of seconds >= 0"):
        replay(timed, None, cache_ttl=-1, progress=False)


def test_every_format_keeps_the_messages_time(tmp_path: Path) -> None:
    iso, epoch_ms = "2025-06-01T12:00:00Z", 1_748_779_260_000
    openai = [
        {"role": "user", "content": "hi", "timestamp": iso},
        {"role": "assistant", "content": "hello", "created_at": epoch_ms},
    ]
    anthropic = {
        "system": "be brief",
        "messages": [
            {"role": "user", "content": [{"type": "text", "text": "hi"}], "timestamp": iso},
            {"role": "assistant", "content": [{"type": "text", "text": "yo"}], "created": 1.5e9},
        ],
    }
    langchain = messages_to_dict(
        [HumanMessage("hi", additional_kwargs={"time": iso}), AIMessage("yo")]
    )
    expected = {
        "openai.json": [1_748_779_200.0, 1_748_779_260.0],
        "anthropic.json": [None, 1_748_779_200.0, 1.5e9],
        "langchain.json": [1_748_779_200.0, None],
    }
    for name, data in (
        ("openai.json", openai),
        ("anthropic.json", anthropic),
        ("langchain.json", langchain),
    ):
        path = tmp_path / name
        path.write_text(json.dumps(data), encoding="utf-8")
        transcript = load_transcript(path)
        assert [message_time(m) for m in transcript.messages] == expected[name], name


def test_a_prices_file_may_set_cache_rules_per_model(tmp_path: Path) -> None:
    path = tmp_path / "prices.json"
    path.write_text(
        json.dumps(
            {
                "providers": {"local": {"min_cached_tokens": 10, "cache_ttl": 60}},
                "models": {
                    "local:small": {"input": 1, "cached_input": 0.1, "output": 2},
                    "local:big": {
                        "input": 1,
                        "cached_input": 0.1,
                        "output": 2,
                        "min_cached_tokens": 4096,
                        "cache_ttl": 3600,
                    },
                },
            }
        )
    )
    prices = load_prices(path)
    small, big = prices.get("local:small"), prices.get("local:big")
    assert (small.min_cached_tokens, small.cache_ttl) == (10, 60.0)
    assert (big.min_cached_tokens, big.cache_ttl) == (4_096, 3_600.0)
    assert prices.get("openai:gpt-4o").cache_ttl == 300.0  # the built-in providers' rules stay
    path.write_text(json.dumps({"models": {"x:y": {"input": 1, "output": 1, "cache_ttl": "5m"}}}))
    with pytest.raises(PriceError, match=r"'cache_ttl' must be a number >= 0"):
        load_prices(path)


def test_the_command_line_takes_a_cache_ttl(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "timed.json"
    path.write_text(json.dumps(messages_to_dict(_chat(5, 400, start=1.75e9, gaps={3: 100}))))
    argv = ["replay", str(path), "--strategy", "full", "--model", "anthropic:claude-sonnet-4"]
    assert main([*argv, "--cache-ttl", "60", "--every", "0"]) == 0
    out = capsys.readouterr().out
    assert "modelled from the transcript's timestamps (ttl 60 s)" in out
    with pytest.raises(SystemExit) as refused:
        main([*argv, "--cache-ttl", "soon"])
    assert refused.value.code == 2
    assert "must be a number of seconds >= 0" in capsys.readouterr().err
