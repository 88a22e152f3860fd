"""The service as an operator runs it, for the fault suite: ``python -m bot web`` and ``python -m bot worker`` as
separate processes on a redis-server of the test's own, against this process's HTTP fakes.

Also the secret check every fault test ends with: no log line of any process, and no payload Slack received,
carries the bot token, the signing secret or the OpenAI key.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable
from pathlib import Path

import aiohttp
import redis.asyncio as aioredis

from bot.logs import JsonFormatter
from tests.bot.conftest import BOT_TOKEN, SECRET
from tests.fakes.openai_server import FakeOpenAI, RecordedRequest
from tests.fakes.slack_api import FakeSlack, PostedMessage
from tests.processes import BotProcess, free_port
from tests.signing import event_body, mention, signed_headers
from tools import Redactor

OPENAI_KEY = "sk-test-fault-suite-key"
#: Every secret the processes are given: none may appear in a log line or a Slack payload.
SECRETS = (BOT_TOKEN, SECRET, OPENAI_KEY)
#: The same for the in-process service of ``tests.bot.conftest.make_settings``.
IN_PROCESS_SECRETS = (BOT_TOKEN, SECRET, "sk-test")
#: Short leases, so a takeover happens within seconds (the default is 15 s).
LEASE_ENV = {"AGENT_LEASE_SECONDS": "3", "AGENT_LEASE_RENEW_SECONDS": "1"}


def service_env(slack: FakeSlack, openai: FakeOpenAI, redis_url: str, **extra: str) -> dict[str, str]:
    """One process's environment: JSON logs, one worker process per ``worker`` role, a budget (so holds exist)."""
    env = {
        "SLACK_BOT_TOKEN": BOT_TOKEN, "SLACK_SIGNING_SECRET": SECRET, "SLACK_API_URL": slack.base_url,
        "OPENAI_API_KEY": OPENAI_KEY, "OPENAI_BASE_URL": openai.base_url, "OPENAI_MAX_RETRIES": "0",
        "LLM_PRICE_PROMPT_PER_1M": "1", "LLM_PRICE_COMPLETION_PER_1M": "2", "SLACK_POSTS_PER_SECOND": "0",
        "SLACK_UPDATES_PER_MINUTE": "0", "HOST": "127.0.0.1", "PORT": str(free_port()), "REDIS_URL": redis_url,
        "LOG_FORMAT": "json", "LOG_LEVEL": "DEBUG", "WORKER_PROCESSES": "1", "AGENT_BUDGET_USD": "10",
        **LEASE_ENV,
    }
    # A free port of its own for the workers' /healthz: PORT + 1 (the default) may be another process's.
    env["WORKER_HEALTH_PORT"] = str(next(p for p in iter(free_port, None) if str(p) != env["PORT"]))
    env.update(extra)
    return env


def process(role: str, env: dict[str, str], folder: Path, name: str) -> BotProcess:
    """``python -m bot ROLE`` on a port of its own (a worker serves /healthz there: WORKER_HEALTH_PORT)."""
    port = str(free_port())
    return BotProcess(role, {**env, "PORT": port, "WORKER_HEALTH_PORT": port}, folder / f"{name}.log")


async def post_mention(web: BotProcess, task: str, ts: str, *, timeout: float = 10) -> int:
    """A signed app_mention to the web process; the HTTP status it answered (0 when it did not in ``timeout``)."""
    body = event_body(mention(text=f"<@UBOT> {task}", ts=ts))
    try:
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=timeout)) as http:
            async with http.post(f"{web.url}/slack/events", data=body, headers=signed_headers(SECRET, body)) as resp:
                return resp.status
    except (aiohttp.ClientError, TimeoutError):
        return 0


def thread_texts(slack: FakeSlack, ts: str) -> list[str]:
    return [_seen(m) for m in slack.thread_messages("C1", ts)]


def _seen(message: PostedMessage) -> str:
    return message.block_text() or message.text


def final_answers(slack: FakeSlack, ts: str) -> list[str]:
    """The thread's final replies (those naming the stop reason)."""
    return [t for t in thread_texts(slack, ts) if "Stop reason:" in t]


async def live_holds(redis: aioredis.Redis) -> dict[str, dict[bytes, bytes]]:
    """Every budget hold Redis still has, by key (swept holds are gone from the hash)."""
    found: dict[str, dict[bytes, bytes]] = {}
    async for key in redis.scan_iter(match="*:budget:*:held"):
        held = await redis.hgetall(key)  # type: ignore[misc]
        if held:
            found[key.decode()] = held
    return found


def assert_no_secrets(
    logs: Iterable[str], slack: FakeSlack, openai: FakeOpenAI | None = None, secrets: Iterable[str] = SECRETS
) -> int:
    """Zero hits for each secret in the log lines and the Slack payloads (and the LLM request bodies, which carry
    the key only in their Authorization header). Returns the number of lines and payloads checked."""
    texts = [*logs, *(json.dumps(c.params, default=str) for c in slack.calls)]
    if openai is not None:
        texts += [_body(r) for r in openai.requests]
    for secret in secrets:
        hits = [t for t in texts if secret in t]
        assert not hits, f"secret {secret[:6]}... found in {len(hits)} log line(s)/payload(s): {hits[0][:300]}"
    return len(texts)


def _body(request: RecordedRequest) -> str:
    return request.body.decode(errors="replace")


def log_lines(*processes: BotProcess) -> list[str]:
    return [line for p in processes for line in p.log().splitlines()]


def emitted(records: Iterable[logging.LogRecord], secrets: Iterable[str] = IN_PROCESS_SECRETS) -> list[str]:
    """Captured records as the service writes them (``LOG_FORMAT=json``, its redaction of the configured
    secrets and of token shapes): what an in-process test checks for secrets."""
    formatter = JsonFormatter(Redactor(list(secrets)))
    return [formatter.format(record) for record in records]
