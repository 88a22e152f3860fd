"""End to end: signed HTTP requests into the running app, a drained worker, the fake Slack's thread."""

from __future__ import annotations

import asyncio
import json
import logging

import aiohttp
import pytest
import redis.asyncio as aioredis

from bot.serve.service import Service
from bot.settings import Settings
from tests.bot.conftest import SECRET, App, make_settings
from tests.fakes.openai_server import FakeOpenAI, text, tool_calls
from tests.fakes.slack_api import FakeSlack
from tests.processes import free_port, redis_binary, until
from tests.signing import event_body, mention, message, next_ts, signed_headers


async def test_mention_becomes_thread_replies_in_order(
    app: App, fake_slack: FakeSlack, fake_openai: FakeOpenAI
) -> None:
    fake_openai.queue(
        tool_calls(("calculator", {"expression": "2+2"}), content="I should add the numbers."),
        text("The answer is **4**."),
    )
    ts = next_ts()
    resp = await app.post_event(event_body(mention(text="<@UBOT> what is 2+2?", ts=ts)))
    assert resp.status == 200
    await app.drain()

    thread = fake_slack.thread_messages("C1", ts)
    texts = [m.block_text() or m.text for m in thread]
    assert len(thread) == 3, texts
    started, step, final = thread
    # The first reply carried the Stop button; it was edited once, at the end, to drop it.
    assert started.params["blocks"][-1]["elements"][0]["action_id"] == "agent_stop"
    assert started.edits == 1 and not started.buttons() and "Finished: `final_answer`" in started.block_text()
    assert "I should add the numbers." in step.block_text()
    assert "`calculator`" in step.block_text() and '"expression": "2+2"' in step.block_text()
    assert "→ ok" in step.block_text() and "4" in step.block_text()
    assert "The answer is *4*." in final.block_text()
    assert "`final_answer` (answered)" in final.block_text()
    assert "2 steps" in final.block_text() and "tokens" in final.block_text() and "$" in final.block_text()
    for m in thread:
        assert m.params["unfurl_links"] is False and m.params["unfurl_media"] is False
        assert m.text, "every message carries a fallback text"
    # The model saw the task without the bot's mention.
    prompt = str(fake_openai.requests[0].messages)
    assert "what is 2+2?" in prompt and "<@UBOT>" not in prompt


async def test_bad_signature_is_401_and_enqueues_nothing(
    app: App, fake_slack: FakeSlack, redis_client: aioredis.Redis, key_prefix: str, settings: Settings
) -> None:
    body = event_body(mention())
    headers = {"Content-Type": "application/json", "X-Slack-Request-Timestamp": "1", "X-Slack-Signature": "v0=00"}
    for hdrs in (
        headers,
        {**headers, "X-Slack-Request-Timestamp": "not-a-number"},
    ):
        async with app.http.post(f"{app.url}/slack/events", data=body, headers=hdrs) as resp:
            assert resp.status == 401
            assert "Signature" in await resp.text() or "Timestamp" in await resp.text()
    wrong = signed_headers("not-the-secret", body)
    async with app.http.post(f"{app.url}/slack/events", data=body, headers=wrong) as resp:
        assert resp.status == 401
    malformed = b'{"type": "event_callback", '
    signed = signed_headers(SECRET, malformed)
    async with app.http.post(f"{app.url}/slack/events", data=malformed, headers=signed) as resp:
        assert resp.status == 400
    assert [k async for k in redis_client.scan_iter(match=f"*{key_prefix}*")] == []
    assert await redis_client.zcard(settings.arq_queue_name) == 0


async def test_duplicate_deliveries_start_one_run(app: App, fake_slack: FakeSlack, fake_openai: FakeOpenAI) -> None:
    fake_openai.queue(text("Hi!"))
    ts = next_ts()
    event = mention(text="<@UBOT> hello", ts=ts)
    first = event_body(event, event_id="EvSAME")
    assert (await app.post_event(first)).status == 200
    # Slack's retry of the same event, and the same human message delivered again as a `message` event.
    assert (await app.post_event(first, retry_num=1)).status == 200
    as_message = event_body(message(text="<@UBOT> hello", ts=ts), event_id="EvOTHER")
    assert (await app.post_event(as_message)).status == 200
    await app.drain()
    assert len(fake_openai.requests) == 1
    assert len([m for m in fake_slack.thread_messages("C1", ts) if "Stop reason" in m.block_text()]) == 1


async def test_healthz(app: App) -> None:
    async with app.http.get(f"{app.url}/healthz") as resp:
        assert resp.status == 200
        assert (await resp.json())["ok"] is True


async def test_refused_requests_never_log_the_body(app: App, caplog: pytest.LogCaptureFixture) -> None:
    body = event_body(mention(text="<@UBOT> secret-body-text"))
    with caplog.at_level(logging.DEBUG):
        async with app.http.post(f"{app.url}/slack/events", data=body,
                                 headers=signed_headers("wrong-secret", body)) as resp:
            assert resp.status == 401
    logged = "\n".join(r.getMessage() for r in caplog.records)
    assert "refused a Slack request" in logged
    assert "secret-body-text" not in logged and "legacy-verification-token" not in logged


async def test_url_verification_challenge(app: App) -> None:
    body = json.dumps({"type": "url_verification", "challenge": "abc123", "token": "t"}).encode()
    resp_text = ""
    async with app.http.post(f"{app.url}/slack/events", data=body, headers=signed_headers(SECRET, body)) as resp:
        assert resp.status == 200
        resp_text = await resp.text()
    assert "abc123" in resp_text


async def test_healthz_is_503_when_redis_is_down(key_prefix: str, fake_slack: FakeSlack) -> None:
    port = free_port()
    server = await asyncio.create_subprocess_exec(
        redis_binary(), "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
        stdout=asyncio.subprocess.PIPE,
    )
    url = f"redis://127.0.0.1:{port}/0"
    try:
        assert server.stdout is not None
        while b"Ready to accept connections" not in await asyncio.wait_for(server.stdout.readline(), 10):
            pass
        settings = make_settings(key_prefix, fake_slack, None, redis_url=url)
        async with Service(settings, "web") as service, aiohttp.ClientSession() as http:
            async with http.get(f"http://127.0.0.1:{service.port}/healthz") as resp:
                assert resp.status == 200
            server.terminate()
            await server.wait()

            async def unhealthy() -> bool:
                # The last good probe's answer stands for a second (bot.serve.health), then each check says 503.
                async with http.get(f"http://127.0.0.1:{service.port}/healthz") as resp:
                    return resp.status == 503

            await until(unhealthy, timeout=5, what="/healthz to say 503 once Redis is gone")
    finally:
        if server.returncode is None:
            server.terminate()
            await server.wait()
