"""Each StopReason triggered by the behaviour that should trigger it, and not by a near miss."""

from __future__ import annotations

from agent_core import InMemoryBudget, InMemoryThreadStore, Limits, Price, RunRequest, StopReason
from agent_core.stopper import Stopper
from tests.agent_core.conftest import AgentFactory
from tests.fakes.openai_server import FakeOpenAI, text, tool_calls
from tools import Outcome, ToolResult


def echo_call(text_: str, times: int = 1, raw: str | None = None):  # type: ignore[no-untyped-def]
    return ("echo", raw if raw is not None else {"text": text_, "times": times})


async def test_final_answer(fake_openai: FakeOpenAI, make_agent: AgentFactory) -> None:
    fake_openai.queue(text("42"))
    stopped = await make_agent().run(RunRequest("answer"))
    assert stopped.reason is StopReason.FINAL_ANSWER and stopped.steps == 1


async def test_third_identical_call_is_not_executed(fake_openai: FakeOpenAI, make_agent: AgentFactory) -> None:
    store = InMemoryThreadStore()
    fake_openai.queue(
        tool_calls(echo_call("a", 2)),
        tool_calls(("echo", '{"times": 2, "text": "a"}')),  # same arguments, other key order
        tool_calls(("echo", '{ "text" :"a",   "times":2 }')),  # and other whitespace
        text("never reached"),
    )
    stopped = await make_agent(store=store).run(RunRequest("loop", thread="T"))
    assert stopped.reason is StopReason.DANGEROUS_LOOP
    assert "3 times in a row" in stopped.detail
    assert len(fake_openai.requests) == 3
    history = (await store.load("T")).history
    tool_messages = [m for m in history if m["role"] == "tool"]
    assert len(tool_messages) == 3
    assert "a a" in tool_messages[0]["content"] and "a a" in tool_messages[1]["content"]
    assert tool_messages[2]["content"].startswith("[not executed: dangerous_loop")


async def test_two_identical_calls_do_not_stop(fake_openai: FakeOpenAI, make_agent: AgentFactory) -> None:
    fake_openai.queue(tool_calls(echo_call("a")), tool_calls(echo_call("a")), tool_calls(echo_call("b")), text("ok"))
    stopped = await make_agent().run(RunRequest("twice is fine"))
    assert stopped.reason is StopReason.FINAL_ANSWER


async def test_a_short_cycle_is_caught(fake_openai: FakeOpenAI, make_agent: AgentFactory) -> None:
    fake_openai.queue(
        tool_calls(echo_call("a")), tool_calls(("lookup", {"key": "paris"})),
        tool_calls(echo_call("a")), tool_calls(("lookup", {"key": "paris"})), text("never"),
    )
    stopped = await make_agent().run(RunRequest("cycle"))
    assert stopped.reason is StopReason.DANGEROUS_LOOP and "cycle" in stopped.detail
    assert len(fake_openai.requests) == 4


async def test_unknown_tools_stop_with_no_progress(fake_openai: FakeOpenAI, make_agent: AgentFactory) -> None:
    fake_openai.queue(
        tool_calls(("lookupp", {"key": "x"})), tool_calls(("search", {"q": "x"})), tool_calls(("browse", {"u": 1})),
        text("never"),
    )
    stopped = await make_agent().run(RunRequest("missing tools"))
    assert stopped.reason is StopReason.NO_PROGRESS
    assert "unknown_tool" in stopped.detail and len(fake_openai.requests) == 3
    first_observation = [m for m in fake_openai.requests[1].messages if m["role"] == "tool"][0]["content"]
    assert "lookup" in first_observation  # the suggestion and the available list reach the model


async def test_empty_and_repeated_results_count_as_no_progress(
    fake_openai: FakeOpenAI, make_agent: AgentFactory
) -> None:
    fake_openai.queue(
        tool_calls(echo_call("same words here")),  # new: progress
        tool_calls(("lookup", {"key": "empty"})),  # []: idle 1
        tool_calls(("echo", '{"times": 1, "text": "same words here"}')),  # a repeat of the first result: idle 2
        text("never"),
    )
    stopped = await make_agent(limits=Limits(no_progress_steps=2)).run(RunRequest("nothing new"))
    assert stopped.reason is StopReason.NO_PROGRESS
    assert "empty result" in stopped.detail and "repeated result" in stopped.detail
    assert len(fake_openai.requests) == 3


async def test_errors_then_success_resets_no_progress(fake_openai: FakeOpenAI, make_agent: AgentFactory) -> None:
    fake_openai.queue(
        tool_calls(("nope", {})), tool_calls(("echo", {"text": 1})),  # unknown tool, invalid arguments
        tool_calls(echo_call("fresh")),
        tool_calls(("nope2", {})), tool_calls(("nope3", {})),
        text("done"),
    )
    stopped = await make_agent().run(RunRequest("near miss"))
    assert stopped.reason is StopReason.FINAL_ANSWER


async def test_error_words_inside_a_good_result_are_not_failures(
    fake_openai: FakeOpenAI, make_agent: AgentFactory
) -> None:
    fake_openai.queue(*[tool_calls(echo_call(f"error failed exception {i}")) for i in range(4)], text("done"))
    stopped = await make_agent().run(RunRequest("words"))
    assert stopped.reason is StopReason.FINAL_ANSWER


async def test_max_steps(fake_openai: FakeOpenAI, make_agent: AgentFactory) -> None:
    store = InMemoryThreadStore()
    fake_openai.queue(*[tool_calls(echo_call(f"step {i}")) for i in range(5)])
    stopped = await make_agent(limits=Limits(max_steps=3), store=store).run(RunRequest("keep going", thread="T"))
    assert stopped.reason is StopReason.MAX_STEPS and stopped.steps == 3
    assert len(fake_openai.requests) == 3
    assert "step 2" in stopped.answer  # the graceful answer reports what was found
    assert (await store.load("T")).history[-1]["content"] == stopped.answer


async def test_max_tokens_refuses_the_call_that_would_cross_it(
    fake_openai: FakeOpenAI, make_agent: AgentFactory
) -> None:
    fake_openai.queue(tool_calls(echo_call("x"), prompt_tokens=900, completion_tokens=50), text("never"))
    stopped = await make_agent(limits=Limits(max_tokens=1200)).run(RunRequest("tokens"))
    assert stopped.reason is StopReason.MAX_TOKENS and "1,200 cap" in stopped.detail
    assert len(fake_openai.requests) == 1


async def test_cost_cap_refuses_a_call_before_it_is_made(fake_openai: FakeOpenAI, make_agent: AgentFactory) -> None:
    dear = Price(prompt=10_000_000, cached_prompt=10_000_000, completion=100_000_000)  # $10 / $100 per 1M
    stopped = await make_agent(price=dear, limits=Limits(max_cost_micros=5_000)).run(RunRequest("expensive"))
    assert stopped.reason is StopReason.MAX_COST
    assert stopped.detail.startswith("max_cost: $0.0050 cap")
    assert fake_openai.requests == []


async def test_cost_cap_lowers_the_completion_cap(fake_openai: FakeOpenAI, make_agent: AgentFactory) -> None:
    price = Price(prompt=0, cached_prompt=0, completion=1_000_000)  # $1 per 1M completion tokens
    fake_openai.queue(text("ok"))
    await make_agent(price=price, limits=Limits(max_cost_micros=300)).run(RunRequest("cheap"))
    assert fake_openai.requests[0].max_tokens == 300


async def test_budget_exhausted_before_any_call(fake_openai: FakeOpenAI, make_agent: AgentFactory) -> None:
    budget = InMemoryBudget(limit_micros=10)
    stopped = await make_agent(budget=budget).run(RunRequest("no money"))
    assert stopped.reason is StopReason.BUDGET_EXHAUSTED
    assert fake_openai.requests == []
    assert budget.spent_micros == 0


async def test_budget_is_settled_to_the_real_cost(fake_openai: FakeOpenAI, make_agent: AgentFactory) -> None:
    budget = InMemoryBudget(limit_micros=1_000_000)
    fake_openai.queue(text("ok", prompt_tokens=1000, completion_tokens=100))
    stopped = await make_agent(budget=budget).run(RunRequest("spend"))
    assert budget.spent_micros == stopped.usage.cost_micros > 0
    assert await budget.remaining() == 1_000_000 - stopped.usage.cost_micros


async def test_a_failed_call_releases_its_reservation(fake_openai: FakeOpenAI, make_agent: AgentFactory) -> None:
    from tests.fakes.openai_server import error

    budget = InMemoryBudget(limit_micros=1_000_000)
    fake_openai.queue(error(400, "bad request"))
    stopped = await make_agent(budget=budget).run(RunRequest("fail"))
    assert stopped.reason is StopReason.ERROR
    assert budget.spent_micros == 0 and await budget.remaining() == 1_000_000


def test_stopper_near_identical_observations() -> None:
    stopper = Stopper(Limits(no_progress_steps=2), Price(0, 0, 0))
    base = "The quick brown fox jumps over the lazy dog " * 20
    ok = ToolResult("t", Outcome.OK, base, base)
    almost = ToolResult("t", Outcome.OK, base + " today", base + " today")
    other = ToolResult("t", Outcome.OK, "an entirely different text about tokyo", "x y z")
    assert stopper.record_step([ok]) is None
    assert stopper.record_step([almost]) is None  # idle 1 (near-identical)
    assert stopper.record_step([other]) is None   # progress resets
    assert stopper.record_step([almost]) is None
    stop = stopper.record_step([ToolResult("t", Outcome.ERROR, "boom", "boom")])
    assert stop is not None and stop.reason is StopReason.NO_PROGRESS


def test_a_repeated_observation_is_found_as_by_comparing_it_with_every_one_in_the_window() -> None:
    import random

    from agent_core.stopper import NEAR_IDENTICAL, SEEN_WINDOW, _shingles

    rng = random.Random(32)
    words = [f"w{i}" for i in range(40)]
    stopper, window = Stopper(Limits(), Price(0, 0, 0)), []  # the window kept by hand: every set compared
    texts: list[str] = []
    for _ in range(150):
        texts.append(" ".join(rng.choice(words) for _ in range(rng.choice((2, 4, 12, 40, 300)))))
        if rng.random() < 0.5:  # one a word longer than a recent one (or one out of the window by now)
            texts.append(f"{texts[rng.randrange(max(0, len(texts) - 90), len(texts))]} {rng.choice(words)}")
    repeats = 0
    for observation in texts:
        shingles = _shingles(observation)
        expected = any(len(shingles & seen) / len(shingles | seen) >= NEAR_IDENTICAL for seen in window)
        assert stopper._is_repeat(observation) is expected
        if not expected:
            window = [*window, shingles][-SEEN_WINDOW:]
        repeats += expected
    assert 20 < repeats < len(texts) - 20  # both answers were tested, many times


def test_a_set_just_alike_enough_is_found_even_without_its_lowest_hashed_shingles() -> None:
    from agent_core.stopper import _Seen

    first = sorted((f"s{i}" for i in range(100)), key=hash)
    late = [s for s in (f"t{i}" for i in range(1000)) if hash(s) > hash(first[20])][:5]
    seen = _Seen()
    assert not seen.near(frozenset(first))
    assert seen.near(frozenset(first[5:] + late))  # 95 of 105 shingles shared: 0.905
    assert not seen.near(frozenset(first[6:] + late + ["u"]))  # 94 of 106: 0.887


async def test_budget_lowers_the_completion_cap(fake_openai: FakeOpenAI, make_agent: AgentFactory) -> None:
    price = Price(prompt=0, cached_prompt=0, completion=1_000_000)  # $1 per 1M completion tokens
    budget = InMemoryBudget(limit_micros=250)
    fake_openai.queue(text("ok", completion_tokens=10))
    stopped = await make_agent(price=price, budget=budget).run(RunRequest("cheap"))
    assert stopped.reason is StopReason.FINAL_ANSWER
    assert fake_openai.requests[0].max_tokens == 250
    assert budget.spent_micros == 10
