"""Slack faults during a run: nothing hangs, nothing is lost silently, each run's final state is recorded.

Already covered elsewhere: ``channel_not_found``, ``not_in_channel``, HTTP 500 and ``ratelimited`` on every post
and a Slack that never answers (test_unwritable.py), a few 429s on posts (test_runs.py), a refused rich post
posted whole as plain text (test_poster.py). These add ``is_archived``, a 429 storm on every write method, 5xx on
edits, and ``msg_too_long``.
"""

from __future__ import annotations

import re
import time

import pytest

from bot.settings import Settings
from tests.bot.conftest import App
from tests.bot.runs.test_unwritable import recent
from tests.bot.service_processes import IN_PROCESS_SECRETS, assert_no_secrets, emitted, final_answers, thread_texts
from tests.fakes.openai_server import FakeOpenAI, text, tool_calls
from tests.fakes.slack_api import FakeSlack
from tests.signing import event_body, mention, next_ts

STEPS = [tool_calls(("calculator", {"expression": f"{i}+1"}), content=f"Step {i}.") for i in range(3)]
BOUND_SECONDS = 20.0


async def run(app: App, fake_openai: FakeOpenAI, *, steps: int = 3) -> tuple[str, float]:
    fake_openai.queue(*STEPS[:steps], text("All three done."))
    ts = next_ts()
    started = time.monotonic()
    await app.post_event(event_body(mention(text="<@UBOT> count to three", ts=ts)))
    await app.drain()
    return ts, time.monotonic() - started


async def test_an_archived_channel_stops_the_run_with_error_and_records_it(
    app: App, fake_slack: FakeSlack, fake_openai: FakeOpenAI, caplog: pytest.LogCaptureFixture
) -> None:
    fake_slack.fail("chat.postMessage", error="is_archived", times=1000)
    _, took = await run(app, fake_openai)
    assert took < BOUND_SECONDS
    assert len(fake_openai.requests) <= 4  # stopped paying for a thread nobody can read
    [record] = await recent(app)
    assert record.stop_reason == "error" and "is_archived" in record.note
    assert_no_secrets(emitted(caplog.records), fake_slack, fake_openai, IN_PROCESS_SECRETS)


async def test_a_429_storm_on_every_write_is_waited_out_and_everything_is_posted_in_order(
    app: App, fake_slack: FakeSlack, fake_openai: FakeOpenAI, settings: Settings,
    caplog: pytest.LogCaptureFixture,
) -> None:
    # Within what the client retries (8 per call): every write method answers 429 six times running.
    for method in ("chat.postMessage", "chat.update", "assistant.threads.setStatus", "chat.getPermalink"):
        fake_slack.fail(method, status=429, retry_after=0, times=6)
    ts, took = await run(app, fake_openai)
    assert took < BOUND_SECONDS
    limited = [c for c in fake_slack.calls if c.status == 429]
    thread = thread_texts(fake_slack, ts)
    assert len(limited) == 24
    assert re.findall(r"Step (\d)\.", "\n".join(thread)) == ["0", "1", "2"], thread  # each once, in order
    [final] = final_answers(fake_slack, ts)
    assert "All three done." in final
    [record] = await recent(app)
    assert record.stop_reason == "final_answer"
    assert_no_secrets(emitted(caplog.records), fake_slack, fake_openai, IN_PROCESS_SECRETS)


async def test_a_429_storm_beyond_the_retries_stops_the_run_with_error_and_records_it(
    app: App, fake_slack: FakeSlack, fake_openai: FakeOpenAI
) -> None:
    fake_slack.fail("chat.postMessage", status=429, retry_after=0, times=1000)
    _, took = await run(app, fake_openai)
    assert took < BOUND_SECONDS
    assert len(fake_openai.requests) <= 4
    [record] = await recent(app)
    assert record.stop_reason == "error" and "ratelimited" in record.note


@pytest.mark.parametrize("method,failure", [
    ("chat.update", {"status": 503, "error": "service_unavailable"}),
    ("chat.update", {"error": "msg_too_long"}),
    ("chat.postMessage", {"error": "msg_too_long"}),
], ids=["update-503", "update-msg_too_long", "post-msg_too_long"])
async def test_a_refused_edit_or_oversized_post_loses_no_reply(
    app: App, fake_slack: FakeSlack, fake_openai: FakeOpenAI, method: str, failure: dict[str, object],
    caplog: pytest.LogCaptureFixture,
) -> None:
    fake_slack.fail(method, times=2 if method == "chat.postMessage" else 1000, **failure)  # type: ignore[arg-type]
    ts, took = await run(app, fake_openai)
    assert took < BOUND_SECONDS
    seen = "\n".join(thread_texts(fake_slack, ts))
    for i in range(3):
        assert f"Step {i}." in seen, seen  # a refused rich post went out as plain text
    assert "All three done." in seen
    [record] = await recent(app)
    assert record.stop_reason == "final_answer"
    assert_no_secrets(emitted(caplog.records), fake_slack, fake_openai, IN_PROCESS_SECRETS)
