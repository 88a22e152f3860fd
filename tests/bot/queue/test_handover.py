"""A SIGTERMed worker hands its runs back at once: another worker resumes them within seconds, not minutes.

Real processes: ``python -m bot web``, two ``python -m bot worker`` (one after the other, as a machine going down
and another one taking the load) and a redis-server of the test's own.
"""

from __future__ import annotations

import signal
import time
from pathlib import Path

from tests.bot.serve.test_processes import answered, post_mention, service_env
from tests.bot.service_processes import process
from tests.fakes.openai_server import FakeOpenAI, delay, text, tool_calls
from tests.fakes.slack_api import FakeSlack
from tests.processes import BotProcess, RedisServer
from tests.signing import next_ts

#: Far below what a run left behind would wait: arq's in-progress key lives AGENT_MAX_SECONDS + 130 s.
HANDOVER_WITHIN_SECONDS = 30.0


async def test_a_sigtermed_worker_hands_its_run_to_the_next_one_at_once(
    tmp_path: Path, fake_slack: FakeSlack, fake_openai: FakeOpenAI
) -> None:
    fake_openai.queue(
        delay(3, tool_calls(("calculator", {"expression": "1+1"}), content="First step.")),  # cut off by SIGTERM
        tool_calls(("calculator", {"expression": "1+1"}), content="First step."),
        text("Finished after the handover."),
    )
    async with RedisServer(tmp_path / "redis") as redis_server:
        env = service_env(fake_slack, fake_openai, redis_server.url, WORKER_PROCESSES="1")
        async with BotProcess("web", env, tmp_path / "web.log") as web, \
                process("worker", env, tmp_path, "a") as first:
            await web.wait_healthy()
            await first.wait_healthy()
            ts = next_ts()
            assert await post_mention(web, "add one and one", ts) == 200
            await fake_openai.wait_for_requests(1)  # the run is in flight on the first worker
            assert await first.stop(signal.SIGTERM) == 0
            handed_over = time.monotonic()
            async with process("worker", env, tmp_path, "b") as second:
                await second.wait_healthy()
                await fake_slack.wait_for(
                    "chat.postMessage", predicate=lambda c: "Finished after the handover." in str(c.params),
                    timeout=HANDOVER_WITHIN_SECONDS,
                )
            assert time.monotonic() - handed_over < HANDOVER_WITHIN_SECONDS
            assert answered(fake_slack, ts, "restarted mid-run")
            finals = [m for m in fake_slack.thread_messages("C1", ts) if "Finished after the handover." in m.text]
            assert len(finals) == 1
