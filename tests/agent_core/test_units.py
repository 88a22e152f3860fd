"""Cost, token counting, history rules and the ReAct parser on their own."""

from __future__ import annotations

import pytest

from agent_core import ConfigError, price_for
from agent_core.cost import Price, format_usd, usd_to_micros
from agent_core.history import repair, trim
from agent_core.text_react import ReactAction, ReactFinal, ReactFormatError, parse
from agent_core.tokens import GENERAL_MARGIN, ByteUpperBound, count_messages, counter_for


def test_prices_are_integer_micro_dollars_and_dated_snapshots_match() -> None:
    mini = price_for("gpt-4o-mini-2024-07-18")
    assert mini == price_for("gpt-4o-mini") and mini != price_for("gpt-4o")
    assert mini.prompt == 150_000 and mini.completion == 600_000
    assert mini.cost_micros(1_000_000, 0) == 150_000
    assert mini.cost_micros(1, 0) == 1  # rounded up, never down to zero
    assert mini.cost_micros(1000, 0, cached_tokens=1000) < mini.cost_micros(1000, 0)


def test_a_table_price_is_the_exact_name_or_a_dated_snapshot_never_a_prefix_of_another_model() -> None:
    assert price_for("gpt-4o-2024-08-06") == price_for("gpt-4o")
    assert price_for("openai/gpt-3.5-turbo-0125") == price_for("gpt-3.5-turbo")
    # Before: each was priced as the longest table name it started with (gpt-4o, gpt-5-mini).
    for name in ("gpt-4o-mini:0.15", "gpt-4o-realtime-preview", "gpt-4o-2024-08", "gpt-5-mini-cheap"):
        with pytest.raises(ConfigError, match="No price known"):
            price_for(name)


def test_unknown_model_without_prices_is_a_clear_start_up_error() -> None:
    with pytest.raises(ConfigError, match="LLM_PRICE_PROMPT_PER_1M"):
        price_for("my-local-llama")
    assert price_for("my-local-llama", prompt_per_1m=usd("0.10"), completion_per_1m=usd("0.20")) == Price(
        100_000, 100_000, 200_000
    )


def usd(text: str):  # type: ignore[no-untyped-def]
    from decimal import Decimal

    return Decimal(text)


def test_money_parsing_is_strict() -> None:
    assert usd_to_micros("0.50", setting="X") == 500_000
    for bad in ("nan", "inf", "-1", "abc", "0.0000001"):
        with pytest.raises(ConfigError):
            usd_to_micros(bad, setting="X")
    assert format_usd(500_000) == "$0.50" and format_usd(5_000) == "$0.0050"


def test_format_usd_prints_what_decimal_prints() -> None:
    import decimal
    import random

    def by_decimal(micros: int) -> str:
        dollars = decimal.Decimal(micros) / 1_000_000
        return f"${dollars:,.2f}" if micros % 10_000 == 0 else f"${dollars:,.4f}"

    rnd = random.Random(5)
    halves = [k * 100 + 50 for k in range(300)]  # rounded half to even, like Decimal
    values = [*range(2_000), *halves, *(rnd.randrange(10**18) for _ in range(3_000)), 10**18 - 1, 10**18, -1, -50]
    assert [format_usd(v) for v in values] == [by_decimal(v) for v in values]
    with decimal.localcontext() as context:  # another rounding: Decimal's own answer
        context.rounding = decimal.ROUND_DOWN
        assert format_usd(99) == by_decimal(99) == "$0.0000"


def test_token_counts_are_exact_offline_for_openai_models() -> None:
    counter = counter_for("gpt-4o-mini")
    assert counter.exact
    assert counter.count("hello world") == 2
    assert counter_for("gpt-4-0613").count("hello world") == 2


def test_unknown_models_are_counted_with_a_general_purpose_tokenizer_and_a_margin() -> None:
    counter = counter_for("my-gateway/llama-3-70b")
    assert not counter.exact and counter.margin == GENERAL_MARGIN
    text = "héllo wörld, ça va? 東京"
    assert counter.count(text) == counter_for("gpt-4o").count(text)  # o200k_base, not one token per byte
    assert count_messages(counter, [{"role": "user", "content": text}]) > counter.count(text)


def test_openai_tokenizer_names_the_counter() -> None:
    text = "hello world " * 50
    assert counter_for("my-model", "cl100k_base").count(text) == counter_for("gpt-4").count(text)
    bytes_counter = counter_for("gpt-4o", "bytes")
    assert isinstance(bytes_counter, ByteUpperBound) and bytes_counter.count(text) == len(text)
    assert counter_for("gpt-4o", "o200k_base").exact  # the model's own encoding named: exact
    with pytest.raises(ValueError, match="OPENAI_TOKENIZER must be one of"):
        counter_for("gpt-4o", "llama3")


def test_repair_answers_dangling_calls_and_drops_orphans() -> None:
    call = {"id": "a", "type": "function", "function": {"name": "x", "arguments": "{}"}}
    messages = [
        {"role": "tool", "tool_call_id": "ghost", "content": "orphan"},
        {"role": "user", "content": "q"},
        {"role": "assistant", "content": None, "tool_calls": [call, {**call, "id": "b"}]},
        {"role": "tool", "tool_call_id": "b", "content": "B"},
        {"role": "tool", "tool_call_id": "b", "content": "B again"},
        {"role": "user", "content": "next"},
    ]
    fixed = repair(messages)
    assert [m["role"] for m in fixed] == ["user", "assistant", "tool", "tool", "user"]
    assert {m["tool_call_id"] for m in fixed if m["role"] == "tool"} == {"a", "b"}
    assert next(m for m in fixed if m.get("tool_call_id") == "a")["content"].startswith("[not executed:")


def test_trim_removes_old_observations_first_then_old_turns() -> None:
    counter = counter_for("gpt-4o-mini")
    call = {"id": "a", "type": "function", "function": {"name": "x", "arguments": "{}"}}
    messages = [
        {"role": "user", "content": "q1"},
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "a", "content": "big " * 2000},
        {"role": "assistant", "content": "a1"},
    ]
    trimmed = trim(messages, 200, counter)
    assert len(trimmed) == 4 and trimmed[2]["content"].startswith("[observation removed")
    assert count_messages(counter, trimmed) <= 200
    tiny = trim(messages, 10, counter)
    assert all(m["role"] != "tool" for m in tiny[:1])


def test_react_parser() -> None:
    assert parse("Thought: t\nFinal Answer: 42") == ReactFinal("t", "42")
    assert parse('Thought: t\nAction: calc\nAction Input: {"a": 1}') == ReactAction("t", "calc", {"a": 1})
    assert isinstance(parse("just words"), ReactFormatError)
    assert isinstance(parse("Thought: t\nAction: calc\nAction Input: not json"), ReactFormatError)


def test_a_window_fits_like_trim_and_the_prompt_counts_its_own_tokens() -> None:
    from agent_core.context import assemble
    from agent_core.history import Window

    counter = counter_for("gpt-4o-mini")
    call = {"id": "a", "type": "function", "function": {"name": "x", "arguments": "{}"}}
    earlier = [m for i in range(40) for m in (
        {"role": "user", "content": f"question {i} " * 5},
        {"role": "assistant", "content": None, "tool_calls": [{**call, "id": f"c{i}"}]},
        {"role": "tool", "tool_call_id": f"c{i}", "content": "result " * 60},
        {"role": "assistant", "content": f"answer {i}"},
    )]
    window = Window(earlier, counter)
    for budget in (0, 50, 400, 1_500, 5_000, 100_000):
        fitted, tokens = window.fit(budget)
        assert fitted == trim(earlier, budget, counter)
        assert tokens == count_messages(counter, fitted) - 3  # the reply priming is counted once, per request
    current = [{"role": "assistant", "content": "thinking"}, {"role": "user", "content": "more"}]
    for role in ("system", "user"):
        prompt = assemble({"role": "system", "content": "sys"}, window, {"role": "user", "content": "task"},
                          current, "note", history_tokens=2_000, counter=counter, note_role=role)
        assert prompt.tokens == count_messages(counter, prompt.messages)


def test_a_runs_own_messages_fit_step_by_step_as_the_whole_list_trimmed_anew() -> None:
    from agent_core.history import Trail

    counter = counter_for("gpt-4o-mini")
    messages: list[dict[str, object]] = []
    steady, varied = Trail(messages, counter), Trail(messages, counter)  # one budget; a budget that changes
    for step in range(60):
        call = {"id": f"c{step}", "type": "function", "function": {"name": "x", "arguments": "{}"}}
        messages.append({"role": "assistant", "content": f"step {step}", "tool_calls": [call]})
        messages.append({"role": "tool", "tool_call_id": f"c{step}", "content": f"result {step} " * (5 + step % 40)})
        if step % 7 == 3:
            messages.append({"role": "user", "content": "Your reply was empty. Call a tool or answer."})
        # The run's budget, then a smaller one (a call near the run's token cap), then the run's again.
        for trail, budget in ((steady, 1_500), (varied, 1_500), (varied, 900)):
            fitted, tokens = trail.fit(budget)
            expected = trim(messages, budget, counter) if count_messages(counter, messages) > budget else messages
            assert fitted == expected and tokens == count_messages(counter, expected)
            assert trail.tokens == count_messages(counter, messages)
    assert fitted[0]["role"] != "tool" and len(fitted) < len(messages)  # the run outgrew its budget long ago
