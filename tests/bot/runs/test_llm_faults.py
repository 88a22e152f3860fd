"""LLM faults against the service: each run ends in a bounded time with a clear reply in the thread and a record in
App Home. The engine's own handling is tested in tests/agent_core (test_loop.py, test_llm_endpoint.py); these
check what a person in Slack sees.

The model is the fake OpenAI server, or, for what that fake cannot send (a body cut short, a body that is not
JSON), a few lines of aiohttp on loopback that misbehave on purpose.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from bot.serve.service import Service
from bot.workspace import RunRecord
from tests.bot.conftest import App, make_settings
from tests.bot.runs.test_unwritable import recent
from tests.bot.service_processes import IN_PROCESS_SECRETS, assert_no_secrets, emitted, final_answers
from tests.fakes.openai_server import FakeOpenAI, Reply, delay, error, text, tool_calls
from tests.fakes.slack_api import FakeSlack
from tests.signing import event_body, mention, next_ts

#: Every fault here ends well within this (the slowest waits out a 1 s timeout or two 1 s Retry-Afters).
BOUND_SECONDS = 20.0


@pytest.fixture
async def broken_model() -> AsyncIterator[str]:
    """A Chat Completions endpoint that answers ``/v1/<mode>/chat/completions`` badly on purpose."""

    async def cut(request: web.Request) -> web.StreamResponse:
        # Promises a whole completion, sends its first bytes and hangs up.
        response = web.StreamResponse(headers={"Content-Type": "application/json", "Content-Length": "2000"})
        await response.prepare(request)
        await response.write(b'{"id": "chatcmpl-1", "object": "chat.completion", "choices": [{"index": 0, "mes')
        assert request.transport is not None
        request.transport.close()
        return response

    async def garbage(request: web.Request) -> web.Response:
        return web.Response(text='{"id": "chatcmpl-1", "choices": [oops', content_type="application/json")

    app = web.Application()
    app.router.add_post("/v1/cut/chat/completions", cut)
    app.router.add_post("/v1/garbage/chat/completions", garbage)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    try:
        yield f"http://127.0.0.1:{port}/v1/"
    finally:
        await runner.cleanup()


async def run_once(key_prefix: str, slack: FakeSlack, openai: FakeOpenAI, **overrides: Any
                   ) -> tuple[list[str], list[RunRecord], float, list[str]]:
    """One mention through the web side and a worker: the thread, App Home's records, seconds taken, the log."""
    settings = make_settings(key_prefix, slack, openai, **overrides)
    ts = next_ts()
    async with Service(settings, "web") as service, aiohttp.ClientSession() as http:
        app = App(service, http)
        started = time.monotonic()
        await app.post_event(event_body(mention(text="<@UBOT> what is 6*7?", ts=ts)))
        await app.drain()
        took = time.monotonic() - started
        records = await recent(app)
    thread = [m.block_text() or m.text for m in slack.thread_messages("C1", ts)]
    return thread, records, took, final_answers(slack, ts)


FAULTS: dict[str, tuple[tuple[Reply, ...], dict[str, Any], str, str]] = {
    # name: (replies, settings, stop reason recorded, words the final reply must show)
    "500s": ((error(500, "The server had an error"),) * 3, {"openai_max_retries": 2}, "error",
             "The server had an error"),
    "429 with Retry-After": (
        (error(429, "Rate limit reached", headers={"Retry-After": "1"}),) * 2 + (text("It is 42."),),
        {"openai_max_retries": 2}, "final_answer", "It is 42."),
    "never answers": ((delay(600, text("too late")),), {"openai_timeout_seconds": 1}, "error",
                      "did not answer in time"),
    "far over max_tokens": ((text("y" * 1_000_000, completion_tokens=900),), {"agent_max_completion_tokens": 256},
                            "error", "max_tokens"),
    "tool-call arguments not JSON": (
        (tool_calls(("calculator", '{"expression": "6*7'), content="Let me compute."), text("It is 42.")),
        {}, "final_answer", "It is 42."),
}


@pytest.mark.parametrize("fault", list(FAULTS))
async def test_an_llm_fault_ends_the_run_in_bounded_time_with_a_clear_reply(
    key_prefix: str, fake_slack: FakeSlack, fake_openai: FakeOpenAI, fault: str, caplog: pytest.LogCaptureFixture
) -> None:
    replies, overrides, reason, words = FAULTS[fault]
    fake_openai.queue(*replies)
    thread, records, took, finals = await run_once(key_prefix, fake_slack, fake_openai, **overrides)
    assert took < BOUND_SECONDS, took
    assert len(finals) == 1 and words in finals[0] and f"`{reason}`" in finals[0], thread
    assert [r.stop_reason for r in records] == [reason]
    if fault == "tool-call arguments not JSON":
        # The model was told its arguments did not parse, and answered on its next step.
        told = [str(m.get("content")) for m in fake_openai.requests[1].messages if m.get("role") == "tool"]
        assert len(told) == 1 and "JSON" in told[0], told
    assert_no_secrets(emitted(caplog.records), fake_slack, fake_openai,
                      IN_PROCESS_SECRETS)


@pytest.mark.parametrize("mode", ["cut", "garbage"], ids=["stream cut mid-body", "garbage JSON"])
async def test_a_broken_answer_body_ends_the_run_with_a_clear_error(
    key_prefix: str, fake_slack: FakeSlack, fake_openai: FakeOpenAI, broken_model: str, mode: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    thread, records, took, finals = await run_once(key_prefix, fake_slack, fake_openai,
                                                   openai_base_url=f"{broken_model}{mode}/", openai_max_retries=1)
    assert took < BOUND_SECONDS, took
    assert len(finals) == 1 and "`error`" in finals[0], thread
    assert "LLM" in finals[0] or "model" in finals[0], finals[0]  # says what failed
    assert [r.stop_reason for r in records] == ["error"]
    assert_no_secrets(emitted(caplog.records), fake_slack, secrets=IN_PROCESS_SECRETS)
