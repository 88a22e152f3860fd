"""Resume within a minute, with real processes: a worker SIGKILLed mid-run is taken over by another worker from
the run's last saved step; a worker SIGTERMed mid-run hands its lease over and exits within 10 s.

Each test runs ``python -m bot web`` and two ``python -m bot worker`` processes on a redis-server of its own, with
short leases (3 s, renewed every second). The fake model answers by the step the conversation is at (the number
of tool results so far), so a resumed run gets the next step whatever was repeated, and holds the chosen step's
call open until its client hangs up.
"""

from __future__ import annotations

import asyncio
import re
import signal
import time
from collections import Counter
from pathlib import Path

import redis.asyncio as aioredis

from tests.bot.service_processes import (
    assert_no_secrets,
    final_answers,
    live_holds,
    log_lines,
    post_mention,
    process,
    service_env,
    thread_texts,
)
from tests.fakes.openai_server import FakeOpenAI, RecordedRequest, Reply, text, tool_calls
from tests.fakes.slack_api import FakeSlack
from tests.processes import RedisServer, until
from tests.signing import next_ts

STEPS = 4
HELD_STEP = 2
RESTARTED = "I was restarted mid-run"
#: Starting a process takes long on a loaded CI machine (imports alone took 17 s at load 5 on 2 cores).
STARTUP = 120.0


class SteppedModel:
    """Step k (k tool results so far) calls the calculator, then a final answer; the first call of
    ``HELD_STEP`` is held until the client hangs up (its worker dies under it)."""

    def __init__(self) -> None:
        self.held = asyncio.Event()
        self.step_calls: Counter[int] = Counter()

    async def __call__(self, request: RecordedRequest) -> Reply:
        step = sum(1 for m in request.messages if m.get("role") == "tool")
        self.step_calls[step] += 1
        if step == HELD_STEP and self.step_calls[step] == 1:
            self.held.set()
            await asyncio.Event().wait()  # cancelled when the worker's connection drops
        if step >= STEPS:
            return text(f"All {STEPS} steps done.")
        return tool_calls(("calculator", {"expression": f"{step}+1"}), content=f"Step {step} of the plan.")


def step_replies(slack: FakeSlack, ts: str) -> Counter[str]:
    return Counter(m for t in thread_texts(slack, ts) for m in re.findall(r"Step \d of the plan\.", t))


async def test_a_sigkilled_worker_s_run_is_resumed_by_another_worker_within_a_minute(
    tmp_path: Path, fake_slack: FakeSlack, fake_openai: FakeOpenAI
) -> None:
    model = SteppedModel()
    fake_openai.script = model
    async with RedisServer(tmp_path / "redis") as server:
        env = service_env(fake_slack, fake_openai, server.url)
        web, doomed, other = (process("web", env, tmp_path, "web"), process("worker", env, tmp_path, "doomed"),
                              process("worker", env, tmp_path, "other"))
        async with web, doomed:
            await asyncio.gather(web.wait_healthy(STARTUP), doomed.wait_healthy(STARTUP))
            ts = next_ts()
            assert await post_mention(web, "count to four", ts) == 200
            await asyncio.wait_for(model.held.wait(), 30)  # the doomed worker is in step 2's LLM call
            async with other:  # the second worker is up before the first dies
                await other.wait_healthy(STARTUP)
                before = len(fake_slack.thread_messages("C1", ts))
                await doomed.stop(signal.SIGKILL)
                killed = time.monotonic()

                async def new_reply() -> bool:
                    other.check_alive()
                    return len(fake_slack.thread_messages("C1", ts)) > before

                await until(new_reply, timeout=60, what="the first reply after the kill")
                first_reply = time.monotonic() - killed

                async def finished() -> bool:
                    other.check_alive()
                    return bool(final_answers(fake_slack, ts))

                await until(finished, timeout=60, what="the resumed run's final answer")
                finished_after = time.monotonic() - killed
                client = aioredis.Redis.from_url(server.url)
                try:
                    holds = await live_holds(client)
                finally:
                    await client.aclose()
        print(f"\nSIGKILL -> first new reply {first_reply:.2f}s, -> final answer {finished_after:.2f}s "
              "(AGENT_LEASE_SECONDS=3)")
        thread = thread_texts(fake_slack, ts)
        assert first_reply <= 60
        assert any(RESTARTED in t for t in thread), thread
        finals = final_answers(fake_slack, ts)
        assert len(finals) == 1 and f"All {STEPS} steps done." in finals[0], thread
        replies = step_replies(fake_slack, ts)
        assert set(replies) == {f"Step {k} of the plan." for k in range(STEPS)}, thread
        repeated = [step for step, n in replies.items() if n > 1]
        assert len(repeated) <= 1 and all(n <= 2 for n in replies.values()), replies  # the in-flight one only
        assert holds == {}, holds  # the dead call's hold was swept, the resumed run's settled
        assert_no_secrets(log_lines(web, doomed, other), fake_slack, fake_openai)


async def test_a_sigtermed_worker_hands_its_run_over_and_exits_within_ten_seconds(
    tmp_path: Path, fake_slack: FakeSlack, fake_openai: FakeOpenAI
) -> None:
    model = SteppedModel()
    fake_openai.script = model
    async with RedisServer(tmp_path / "redis") as server:
        # A long lease: a run that was not handed over would stay locked for 60 s after its worker left.
        env = service_env(fake_slack, fake_openai, server.url, AGENT_LEASE_SECONDS="60",
                          AGENT_LEASE_RENEW_SECONDS="5")
        web, leaving, other = (process("web", env, tmp_path, "web"), process("worker", env, tmp_path, "leaving"),
                               process("worker", env, tmp_path, "other"))
        async with web, leaving:
            await asyncio.gather(web.wait_healthy(STARTUP), leaving.wait_healthy(STARTUP))
            ts = next_ts()
            assert await post_mention(web, "count to four", ts) == 200
            await asyncio.wait_for(model.held.wait(), 30)
            asked = time.monotonic()
            code = await leaving.stop(signal.SIGTERM, timeout=10)
            exited = time.monotonic() - asked
            client = aioredis.Redis.from_url(server.url)
            try:
                expiries = {key.decode(): await client.zrange(key, 0, -1, withscores=True)
                            async for key in client.scan_iter(match="*lease*expiries")}
            finally:
                await client.aclose()
            async with other:  # started after the first left: its start-up scan finds the handed-over run
                await other.wait_healthy(STARTUP)

                async def finished() -> bool:
                    other.check_alive()
                    return bool(final_answers(fake_slack, ts))

                await until(finished, timeout=30, what="the other worker to finish the run")
            web_asked = time.monotonic()
            web_code = await web.stop(signal.SIGTERM, timeout=10)
            web_exited = time.monotonic() - web_asked
        print(f"\nSIGTERM -> worker exited {exited:.2f}s (code {code}), web exited {web_exited:.2f}s")
        assert exited < 10 and code == 0, leaving.log()
        assert web_exited < 10 and web_code == 0, web.log()
        # Handed over: lapsed at once (score 0), not left to run out its 60 s.
        [(_, runs)] = expiries.items()
        assert [score for _, score in runs] == [0.0], expiries
        finals = final_answers(fake_slack, ts)
        assert len(finals) == 1 and f"All {STEPS} steps done." in finals[0]
        replies = step_replies(fake_slack, ts)
        assert len([s for s, n in replies.items() if n > 1]) <= 1, replies
        assert any(RESTARTED in t for t in thread_texts(fake_slack, ts))
        assert await post_mention(web, "still there?", next_ts(), timeout=2) == 0  # the web process is gone
        assert_no_secrets(log_lines(web, leaving, other), fake_slack, fake_openai)
