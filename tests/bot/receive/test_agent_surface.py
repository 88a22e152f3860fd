"""Slack's agent surface through the running service: ``agent_session_title_changed`` as Slack's event page shows
it, App Home's run list published by the app, a drained worker between."""

from __future__ import annotations

from typing import Any

from tests.bot.conftest import App
from tests.fakes.openai_server import FakeOpenAI, text
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
