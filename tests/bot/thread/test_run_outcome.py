"""A run's outcome where other apps read it: message metadata ``event_type: agent_run`` on its final message, and
``chat.stopStream``'s ``session_status`` where a streamed run ends (``closed``) or waits for an approval
(``suspended``). Signed events into the running service, the fake Slack checking the metadata as Slack's reference
describes it, a drained worker."""

from __future__ import annotations

import json
from typing import Any

import pytest

from bot.runs.approval_messages import APPROVE_ACTION_ID
from bot.settings import Settings
from tests.bot.conftest import SECRET, App, burst_worker
from tests.bot.runs.test_approval_policies import RAN, deploy_agent
from tests.fakes.openai_server import FakeOpenAI, text, tool_calls
from tests.fakes.slack_api import FakeSlack
from tests.signing import command_body, event_body, mention, next_ts, signed_headers

TASK = "summarise the release notes of version 4.2"
ANSWER = "Version 4.2 fixes the checkout bug."


async def limits(app: App, words: str, user: str = "UADMIN") -> str:
    body = command_body(command="/agent-limits", text=words, user=user)
    headers = signed_headers(SECRET, body, content_type="application/x-www-form-urlencoded")
    async with app.http.post(f"{app.url}/slack/events", data=body, headers=headers) as resp:
        return str((await resp.json())["text"])


def outcome_of(metadata: dict[str, Any] | None, ts: str) -> dict[str, Any]:
    """The ``agent_run`` payload of the run the message ``ts`` asked for, checked to hold ids and numbers only,
    never the conversation."""
    assert metadata is not None and metadata["event_type"] == "agent_run"
    payload: dict[str, Any] = metadata["event_payload"]
    assert payload["run_id"].startswith(f"run-{ts}-")
    assert TASK not in json.dumps(metadata) and "checkout" not in json.dumps(metadata)
    return payload


@pytest.fixture(autouse=True)
def _admin(fake_slack: FakeSlack) -> None:
    fake_slack.users.update({"UADMIN": {"is_admin": True}, "U5": {}, "U1": {}})


async def test_the_final_reply_carries_the_runs_outcome_as_metadata(
    app: App, fake_slack: FakeSlack, fake_openai: FakeOpenAI,
) -> None:
    fake_openai.queue(text(ANSWER, prompt_tokens=1000, completion_tokens=100))
    ts = next_ts()
    await app.post_event(event_body(mention(text=f"<@UBOT> {TASK}", ts=ts)))
    await app.drain()
    thread = fake_slack.thread_messages("C1", ts)
    assert [m.metadata for m in thread[:-1]] == [None] * (len(thread) - 1)  # only the last one
    payload = outcome_of(thread[-1].metadata, ts)
    assert (payload["stop_reason"], payload["steps"], payload["prompt_tokens"], payload["completion_tokens"],
            payload["total_tokens"]) == ("final_answer", 1, 1000, 100, 1100)
    assert payload["cost_micros"] > 0 and float(payload["cost_usd"]) == payload["cost_micros"] / 1e6


async def test_a_streamed_run_stops_its_stream_closed_with_the_outcome(
    app: App, fake_slack: FakeSlack, fake_openai: FakeOpenAI,
) -> None:
    fake_slack.agent_sessions_refusal = ""  # an app declared as an agent
    assert "timeline" in await limits(app, "display timeline")
    fake_openai.queue(text(ANSWER))
    ts = next_ts()
    await app.post_event(event_body(mention(text=f"<@UBOT> {TASK}", ts=ts)))
    await app.drain()
    [stream] = fake_slack.thread_streams("C1", ts)
    assert stream.stopped and stream.session_status == "closed"
    assert outcome_of(stream.metadata, ts)["stop_reason"] == "final_answer"
    assert fake_slack.session_status("C1", ts) == "closed"


async def test_a_streamed_run_that_waits_for_an_approval_stops_its_stream_suspended(
    app: App, fake_slack: FakeSlack, fake_openai: FakeOpenAI, settings: Settings,
) -> None:
    RAN.clear()
    fake_slack.agent_sessions_refusal = ""
    await limits(app, "display timeline")
    await limits(app, "approvals deploy <@U5>")
    fake_openai.queue(tool_calls(("deploy", {"service": "api"})))
    ts = next_ts()
    await app.post_event(event_body(mention(text="<@UBOT> deploy api", ts=ts, user="U1")))
    async with burst_worker(settings, deploy_agent) as worker:
        await worker.main()
    assert any(APPROVE_ACTION_ID in json.dumps(m.blocks) for m in fake_slack.thread_messages("C1", ts))
    [stream] = fake_slack.thread_streams("C1", ts)
    assert stream.stopped and stream.session_status == "suspended" and stream.metadata is None
    assert "Waiting for an approval" in stream.markdown
    assert fake_slack.session_status("C1", ts) == "suspended" and RAN == []
