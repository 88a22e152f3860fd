"""Slack's agent surface through the running service: ``agent_session_title_changed`` and ``app_context_changed``
(with its entities) as Slack's event pages show them, App Home's run list published by the app, the pane's runs
reading the channel in view; a drained worker between."""

from __future__ import annotations

from typing import Any

import pytest

from tests.bot.conftest import App
from tests.fakes.openai_server import FakeOpenAI, text, tool_calls
from tests.fakes.slack_api import FakeSlack
from tests.signing import event_body, mention, message, next_ts


def title_changed(channel: str, thread_ts: str, title: str, user: str = "U1", **extra: Any) -> bytes:
    return event_body({"type": "agent_session_title_changed", "channel": channel, "thread_ts": thread_ts,
                       "title": title, "user": user, "team_id": "T0001", "event_ts": next_ts(), **extra})


async def home_of(app: App, fake_slack: FakeSlack, user: str) -> str:
    """The run list of ``user``'s App Home, as the app publishes it."""
    before = len(fake_slack.calls_of("views.publish"))
    await app.post_event(event_body({"type": "app_home_opened", "user": user, "channel": f"D{user}", "tab": "home",
                                     "event_ts": next_ts()}))
    calls = await fake_slack.wait_for("views.publish", count=before + 1)
    view = calls[-1].params["view"]
    return "\n".join(str(b.get("text", {}).get("text", "")) for b in view["blocks"])


async def test_a_title_a_person_gives_a_session_names_its_runs_in_app_home_for_those_who_may_read_it(
    app: App, fake_slack: FakeSlack, fake_openai: FakeOpenAI,
) -> None:
    fake_openai.queue(text("Packed."), text("Deployed."))
    dm, channel = next_ts(), next_ts()
    await app.post_event(event_body(message(text="pack my trip", channel="D1", channel_type="im", ts=dm)))
    await app.post_event(event_body(mention(text="<@UBOT> deploy the site", channel="C1", ts=channel)))
    await app.drain()
    assert (await app.post_event(title_changed("D1", dm, "Bora Bora <trip> prep", previous_title="x"))).status == 200
    assert (await app.post_event(title_changed("C1", channel, "Release 4.2"))).status == 200
    mine = await home_of(app, fake_slack, "U1")
    assert "*Bora Bora &lt;trip&gt; prep* · <@U1>" in mine and "*Release 4.2* · <@U1>" in mine
    # Another person sees the channel thread's title, not the one of U1's direct messages.
    theirs = await home_of(app, fake_slack, "U2")
    assert "Bora Bora" not in theirs and "*Release 4.2* · <@U1>" in theirs


async def test_a_title_event_of_the_wrong_shape_is_refused(app: App) -> None:
    assert (await app.post_event(title_changed("C1", "not a ts", "x"))).status == 400
    assert (await app.post_event(title_changed("C1", next_ts(), ["x"]))).status == 400  # type: ignore[arg-type]


def context_changed(entities: list[dict[str, Any]] | None, user: str = "U1") -> bytes:
    """``app_context_changed`` as the agent pane sends it (``{}`` when nothing is in view)."""
    return event_body({"type": "app_context_changed", "user": user, "channel": "D1", "event_ts": next_ts(),
                       "context": {"entities": entities} if entities is not None else {}})


async def pane_message(app: App, fake_slack: FakeSlack, words: str) -> str:
    """The agent pane opened, then ``words`` typed in it (with the action_token Slack gives a pane message)."""
    fake_slack.agent_view = True
    await app.post_event(event_body({"type": "app_home_opened", "user": "U1", "channel": "D1", "tab": "messages",
                                     "event_ts": next_ts()}))
    await fake_slack.wait_for("assistant.threads.setSuggestedPrompts")
    ts = next_ts()
    await app.post_event(event_body(message(text=words, channel="D1", channel_type="im", ts=ts,
                                            action_token="act-1")))
    return ts


def observations(fake_openai: FakeOpenAI) -> str:
    return " ".join(str(m.get("content")) for m in fake_openai.requests[-1].messages if m.get("role") == "tool")


async def test_summarise_this_channel_from_the_pane_reads_the_channel_in_view_and_searches_from_it(
    app: App, fake_slack: FakeSlack, fake_openai: FakeOpenAI,
) -> None:
    fake_slack.history["C77"] = [{"type": "message", "user": "U2", "text": "the outage ended at 10:05", "ts": "5.1"}]
    fake_openai.queue(tool_calls(("channel_history", {"limit": 5}), ("slack_search", {"query": "outage"})),
                      text("The outage is over."))
    # Slack orders the entities by relevance: the channel first, then the message and canvas in it.
    assert (await app.post_event(context_changed([
        {"type": "slack#/types/channel_id", "value": "C77", "team_id": "T0001"},
        {"type": "slack#/types/message_context", "value": {"channel_id": "C77", "message_ts": "5.1"},
         "team_id": "T0001"},
        {"type": "slack#/types/canvas_id", "value": "F1", "team_id": "T0001"},
    ]))).status == 200
    ts = await pane_message(app, fake_slack, "summarise this channel")
    await app.drain()
    assert "the outage ended at 10:05" in observations(fake_openai)
    assert [c.params["channel"] for c in fake_slack.calls_of("conversations.history")] == ["C77"]
    [search] = fake_slack.calls_of("assistant.search.context")
    assert search.params["context_channel_id"] == "C77"
    assert "The outage is over." in fake_slack.thread_messages("D1", ts)[-1].block_text()


@pytest.mark.parametrize("entities", [
    [{"type": "slack#/types/channel_id", "value": "C88", "team_id": "T0999"}],  # another workspace's channel
    [{"type": "slack#/types/message_context", "value": {"channel_id": "C88", "message_ts": "1.2"},
      "team_id": "T0999"}],
])
async def test_a_channel_of_another_workspace_in_view_is_refused_and_the_person_told(
    app: App, fake_slack: FakeSlack, fake_openai: FakeOpenAI, entities: list[dict[str, Any]],
) -> None:
    fake_slack.history["C88"] = [{"type": "message", "user": "U9", "text": "their secret plan", "ts": "5.1"}]
    fake_openai.queue(tool_calls(("channel_history", {"limit": 5})), text("Nothing there."))
    await app.post_event(context_changed(entities))
    ts = await pane_message(app, fake_slack, "summarise this channel")
    await app.drain()
    assert "their secret plan" not in observations(fake_openai)
    assert [c.params["channel"] for c in fake_slack.calls_of("conversations.history")] == ["D1"]
    [told] = [c for c in fake_slack.calls_of("chat.postEphemeral") if c.params["user"] == "U1"]
    assert "belongs to another workspace" in told.params["text"] and told.params["thread_ts"] == ts


async def test_nothing_in_view_leaves_the_pane_on_its_own_conversation(
    app: App, fake_slack: FakeSlack, fake_openai: FakeOpenAI,
) -> None:
    fake_openai.queue(tool_calls(("channel_history", {"limit": 5})), text("Done."))
    await app.post_event(context_changed([{"type": "slack#/types/channel_id", "value": "C77", "team_id": "T0001"}]))
    await app.post_event(context_changed(None))  # the person left the channel: nothing in view
    await pane_message(app, fake_slack, "summarise this channel")
    await app.drain()
    assert [c.params["channel"] for c in fake_slack.calls_of("conversations.history")] == ["D1"]
