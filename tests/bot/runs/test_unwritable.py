"""A thread nobody can write to: the run stops with ``error`` instead of paying for every LLM call."""

from __future__ import annotations

import aiohttp
import pytest

from bot.identity import Workspace
from bot.serve.service import Service
from bot.workspace import WorkspaceParts
from bot.workspace.settings import LimitsPolicy
from bot.workspace.spend import RunRecord
from tests.bot.conftest import App, make_settings
from tests.fakes.openai_server import FakeOpenAI, tool_calls
from tests.fakes.slack_api import FakeSlack
from tests.signing import event_body, mention, next_ts

STEPS = [tool_calls(("calculator", {"expression": f"{i}+1"}), content=f"Step {i}.") for i in range(12)]


async def recent(app: App) -> list[RunRecord]:
    """The runs App Home lists for the test workspace."""
    services = app.service.services
    assert services is not None
    policy = LimitsPolicy.from_settings(app.service.settings)
    limits = WorkspaceParts.create(services.redis, policy, key_prefix=services.keys.prefix)
    return list(await limits.runs.recent_runs(Workspace.of("T0001", "")))


@pytest.mark.parametrize("failure", [
    {"error": "channel_not_found"}, {"error": "not_in_channel"}, {"status": 500, "error": "internal_error"},
    # Retry-After: 0, so that its eight retries of each post (as for a 429) wait no second each.
    {"error": "ratelimited", "retry_after": 0},
], ids=["channel_not_found", "not_in_channel", "http-500", "ratelimited-200"])
async def test_a_run_that_cannot_post_stops_with_error(
    app: App, fake_slack: FakeSlack, fake_openai: FakeOpenAI, failure: dict[str, object]
) -> None:
    fake_openai.queue(*STEPS)
    fake_slack.fail("chat.postMessage", times=1000, **failure)  # type: ignore[arg-type]
    await app.post_event(event_body(mention(text="<@UBOT> count to twelve", ts=next_ts())))
    await app.drain()
    # A few steps at most, not the twelve the model wanted.
    assert 1 <= len(fake_openai.requests) <= 4
    runs = await recent(app)
    assert len(runs) == 1
    run = runs[0]
    assert run.stop_reason == "error" and "refused 3 posts in a row" in run.note


async def test_a_slack_call_that_never_answers_is_timed_out(
    key_prefix: str, fake_slack: FakeSlack, fake_openai: FakeOpenAI
) -> None:
    settings = make_settings(key_prefix, fake_slack, fake_openai, slack_timeout_seconds=1)
    fake_openai.queue(*STEPS)
    fake_slack.fail("chat.postMessage", hang=True)
    async with Service(settings, "web") as service, aiohttp.ClientSession() as http:
        app = App(service, http)
        await app.post_event(event_body(mention(text="<@UBOT> count", ts=next_ts())))
        await app.drain()
        runs = await recent(app)
    assert len(fake_openai.requests) <= 4
    assert runs and runs[0].stop_reason == "error"
