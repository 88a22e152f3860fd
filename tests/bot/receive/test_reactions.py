"""Emoji triggers through the running service: ``/agent-limits channel react ...`` as signed slash commands,
``reaction_added`` as Slack's event page shows it, the message read back from the fake Slack, a drained worker."""

from __future__ import annotations

import json
from typing import Any

import pytest
import redis.asyncio as aioredis

from bot.identity import Workspace
from bot.keys import AppKeys
from bot.settings import Settings
from tests.bot.conftest import SECRET, App, make_settings
from tests.fakes.openai_server import FakeOpenAI, text
from tests.fakes.slack_api import FakeFile, FakeSlack
from tests.signing import command_body, event_body, next_ts, reaction, signed_headers

ADMIN = "UADMIN"
TASK = "find the root cause of this error"
ERROR = "checkout fails with HTTP 500 since 09:12"


@pytest.fixture
def settings(key_prefix: str, fake_slack: FakeSlack, fake_openai: FakeOpenAI) -> Settings:
    fake_slack.users[ADMIN] = {"is_admin": True}
    return make_settings(key_prefix, fake_slack, fake_openai, agent_respond_all_per_minute=2)


async def limits(app: App, words: str, *, user: str = ADMIN, channel: str = "C1") -> str:
    body = command_body(command="/agent-limits", text=words, user=user, channel=channel)
    headers = signed_headers(SECRET, body, content_type="application/x-www-form-urlencoded")
    async with app.http.post(f"{app.url}/slack/events", data=body, headers=headers) as resp:
        assert resp.status == 200
        return str((await resp.json())["text"])


def posted(fake_slack: FakeSlack, channel: str = "C1", *, text_: str = ERROR, user: str = "U2",
           **extra: Any) -> str:
    """A person's top-level message in the channel's history (newest first, as Slack answers); its ts."""
    ts = next_ts()
    fake_slack.history.setdefault(channel, []).insert(0, {"type": "message", "user": user, "text": text_, "ts": ts,
                                                          **extra})
    return ts


def ephemerals(fake_slack: FakeSlack, user: str) -> list[str]:
    return [str(c.params.get("text")) for c in fake_slack.calls_of("chat.postEphemeral") if c.params["user"] == user]


async def test_an_admin_sets_lists_and_turns_off_a_trigger_and_others_may_only_list(app: App) -> None:
    said = await limits(app, f"channel react :mag: {TASK}")
    assert ":mag: on a message in this channel starts a run on it" in said and TASK in said
    assert "Only workspace admins" in await limits(app, "channel react :bug: triage", user="U9")
    listed = await limits(app, "channel react list", user="U9")
    assert f"• :mag: → {TASK}" in listed and ":bug:" not in listed
    assert "no longer starts a run" in await limits(app, "channel react :mag: off")
    assert "No emoji starts a run" in await limits(app, "channel react list")


@pytest.mark.parametrize("words", ["channel react :notanemoji: do it", "channel react mag do it",
                                   "channel react :mag:", "channel react"])
async def test_an_unknown_emoji_or_a_missing_task_is_refused_with_what_was_wrong(app: App, words: str) -> None:
    said = await limits(app, words)
    assert "is not an emoji Slack knows" in said or "`channel react` takes" in said, said
    assert "No emoji starts a run" in await limits(app, "channel react list")


async def test_a_reaction_runs_the_task_on_the_message_in_its_thread_as_the_person_who_reacted(
    app: App, fake_slack: FakeSlack, fake_openai: FakeOpenAI, redis_client: aioredis.Redis, key_prefix: str,
) -> None:
    await limits(app, f"channel react :mag: {TASK}")
    ts = posted(fake_slack)
    fake_openai.queue(text("The root cause is the expired TLS certificate."))
    # A reaction no trigger names starts nothing and says nothing.
    assert (await app.post_event(event_body(reaction(name="+1", user="U3", ts=ts)))).status == 200
    assert (await app.post_event(event_body(reaction(name="mag", user="U3", ts=ts)))).status == 200
    await app.drain()
    [request] = fake_openai.requests
    asked = json.dumps(request.messages)
    assert TASK in asked and ERROR in asked and "<@U2>" in asked
    [call] = fake_slack.calls_of("conversations.history")
    assert (call.params["latest"], str(call.params["inclusive"]), int(call.params["limit"])) == (ts, "1", 1)
    assert "expired TLS certificate" in fake_slack.thread_messages("C1", ts)[-1].block_text()
    # The run is the reacting person's: their name on it in the workspace's run list.
    [run] = [json.loads(r) for r in await redis_client.lrange(AppKeys(key_prefix).recent_runs(Workspace("T0001")),
                                                              0, -1)]
    assert run["user"] == "U3" and run["thread_ts"] == ts
    assert ephemerals(fake_slack, "U3") == []


async def test_a_second_reaction_the_bots_own_and_a_reaction_on_the_bots_message_start_nothing(
    app: App, fake_slack: FakeSlack, fake_openai: FakeOpenAI,
) -> None:
    await limits(app, f"channel react :mag: {TASK}")
    ts = posted(fake_slack)
    fake_openai.queue(text("Looked."))
    await app.post_event(event_body(reaction(user="U3", ts=ts)))
    await app.post_event(event_body(reaction(user="U4", ts=ts)))  # a second person, the same message
    await app.post_event(event_body(reaction(user="UBOT", ts=posted(fake_slack))))  # the bot's own reaction
    bots = posted(fake_slack, user="UBOT", text_="an answer", bot_id="BBOT")
    await app.post_event(event_body(reaction(user="U5", ts=bots, item_user="UBOT")))
    webhook = posted(fake_slack, user="", text_="deploy done", bot_id="BHOOK", subtype="bot_message")
    await app.post_event(event_body(reaction(user="U6", ts=webhook, item_user=None)))
    await app.drain()
    assert len(fake_openai.requests) == 1
    assert ephemerals(fake_slack, "U4") == []  # its run is in the thread already
    [own] = ephemerals(fake_slack, "U5")
    assert "on my own messages starts nothing" in own
    [app_message] = ephemerals(fake_slack, "U6")
    assert "on an app's message starts nothing" in app_message


async def test_a_reply_inside_a_thread_is_read_from_the_thread_and_answered_there(
    app: App, fake_slack: FakeSlack, fake_openai: FakeOpenAI,
) -> None:
    await limits(app, f"channel react :mag: {TASK}")
    root = posted(fake_slack, text_="incident channel for checkout")
    reply_ts = next_ts()
    fake_slack.replies[("C1", root)] = [
        {"type": "message", "user": "U2", "text": "incident channel for checkout", "ts": root},
        {"type": "message", "user": "U7", "text": ERROR, "ts": reply_ts, "thread_ts": root},
    ]
    fake_openai.queue(text("Certificate."))
    await app.post_event(event_body(reaction(user="U3", ts=reply_ts, item_user="U7")))
    await app.drain()
    assert ERROR in json.dumps(fake_openai.requests[0].messages)
    [call] = fake_slack.calls_of("conversations.replies")[:1]
    assert call.params["ts"] == reply_ts
    assert "Certificate." in fake_slack.thread_messages("C1", root)[-1].block_text()


async def test_a_shared_channel_and_an_unreadable_message_start_nothing_and_say_why(
    app: App, fake_slack: FakeSlack, fake_openai: FakeOpenAI,
) -> None:
    for channel in ("CEXT", "CGONE"):
        await limits(app, f"channel react :mag: {TASK}", channel=channel)
    fake_slack.channels["CEXT"] = {"is_ext_shared": True}
    fake_slack.unreadable["CGONE"] = "not_in_channel"
    await app.post_event(event_body(reaction(user="U3", channel="CEXT", ts=posted(fake_slack, "CEXT"))))
    await app.post_event(event_body(reaction(user="U4", channel="CGONE", ts=next_ts())))
    await app.drain()
    # conversations.info refused: who reads the channel is unknown, so nothing starts either (fail closed).
    await limits(app, f"channel react :mag: {TASK}", channel="CWHO")
    fake_slack.fail("conversations.info", error="channel_not_found", times=3)
    await app.post_event(event_body(reaction(user="U5", channel="CWHO", ts=posted(fake_slack, "CWHO"))))
    await app.drain()
    assert fake_openai.requests == []
    [shared] = ephemerals(fake_slack, "U3")
    assert "shared with another organisation" in shared
    [unreadable] = ephemerals(fake_slack, "U4")
    assert "I cannot read that message (not_in_channel)" in unreadable
    [unknown] = ephemerals(fake_slack, "U5")
    assert "Slack would not say who can read this channel" in unknown


async def test_reactions_are_paced_as_respond_all_and_the_person_is_told_once(
    app: App, fake_slack: FakeSlack, fake_openai: FakeOpenAI,
) -> None:
    await limits(app, f"channel react :mag: {TASK}")
    fake_openai.queue(text("One."), text("Two."))
    for _ in range(4):
        await app.post_event(event_body(reaction(user="U3", ts=posted(fake_slack))))
    await app.drain()
    assert len(fake_openai.requests) == 2  # AGENT_RESPOND_ALL_PER_MINUTE=2
    [told] = ephemerals(fake_slack, "U3")
    assert "I start 2 runs a minute for you without a mention" in told


@pytest.mark.parametrize("item", ["C1", {"type": "message", "channel": "C1"}, {"type": "message", "ts": "1.2"},
                                  {"type": "message", "channel": "not an id", "ts": "1.2"}])
async def test_a_reaction_event_of_the_wrong_shape_is_refused(app: App, item: Any) -> None:
    event = {"type": "reaction_added", "user": "U3", "reaction": "mag", "item": item, "event_ts": next_ts()}
    assert (await app.post_event(event_body(event))).status == 400


async def test_the_reacted_messages_files_come_with_it_and_a_custom_emoji_starts_nothing(
    app: App, fake_slack: FakeSlack, fake_openai: FakeOpenAI,
) -> None:
    await limits(app, f"channel react :mag: {TASK}")
    log = fake_slack.add_file(FakeFile("F1", "error.log", b"Traceback: TLS handshake failed", "text/plain"))
    ts = posted(fake_slack, files=[log])
    fake_openai.queue(text("The handshake."))
    await app.post_event(event_body(reaction(name="partyparrot", user="U3", ts=ts)))  # custom: no trigger
    await app.post_event(event_body(reaction(name="mag::skin-tone-2", user="U3", ts=ts)))  # one emoji, any tone
    await app.drain()
    assert [d[0] for d in fake_slack.downloads] == ["F1"]
    assert len(fake_openai.requests) == 1 and ephemerals(fake_slack, "U3") == []


async def test_a_guest_who_reacts_is_refused_as_for_a_mention_and_dms_take_no_trigger(
    app: App, fake_slack: FakeSlack, fake_openai: FakeOpenAI,
) -> None:
    fake_slack.users["UGUEST"] = {"is_restricted": True}
    await limits(app, f"channel react :mag: {TASK}")
    ts = posted(fake_slack)
    await app.post_event(event_body(reaction(user="UGUEST", ts=ts)))
    await app.drain()
    assert fake_openai.requests == []
    assert "guest" in " ".join(m.block_text() + m.text for m in fake_slack.thread_messages("C1", ts)).lower()
    assert "Emoji triggers are for channels" in await limits(app, f"channel react :mag: {TASK}", channel="D1")
