"""A channel's agent set from App Home, through the running service: the Home tab's button, the modal's channel
picker (block_actions) and its submission (view_submission) as signed requests; the fake Slack and the fake LLM at
the HTTP boundary, real Redis. The rules are the command's (``tests/bot/workspace/test_channel_agents.py``)."""

from __future__ import annotations

import json
import time
from typing import Any
from urllib.parse import urlencode

import pytest
import redis.asyncio as aioredis

from bot.keys import AppKeys
from bot.receive.views.channel import CHANNEL_CALLBACK, PICK_ACTION
from bot.receive.views.home import CHANNEL_ACTION
from bot.settings import Settings
from tests.bot.conftest import SECRET, App, make_settings
from tests.bot.receive.test_home_views import action_ids
from tests.bot.workspace.test_channel_agents import ADMIN, SUPPORT, WS, ask, limits, system_of, tool_names
from tests.fakes.openai_server import FakeOpenAI
from tests.fakes.slack_api import FakeSlack
from tests.signing import action_body, event_body, next_ts, signed_headers

TEAM = WS.team_id
SHARED = "CSHARED"


@pytest.fixture
def settings(key_prefix: str, fake_slack: FakeSlack, fake_openai: FakeOpenAI) -> Settings:
    fake_slack.users[ADMIN] = {"is_admin": True}
    fake_slack.channels[SHARED] = {"is_ext_shared": True, "is_shared": True}
    return make_settings(key_prefix, fake_slack, fake_openai, agent_models="gpt-4o-mini,gpt-4o:2.50/10.00")


async def interact(app: App, payload: dict[str, Any]) -> Any:
    """An interactivity payload, signed, into the app; its JSON answer (None for an empty ack)."""
    body = urlencode({"payload": json.dumps(payload)}).encode()
    headers = signed_headers(SECRET, body, content_type="application/x-www-form-urlencoded")
    async with app.http.post(f"{app.url}/slack/events", data=body, headers=headers) as resp:
        assert resp.status == 200
        raw = await resp.text()
        return json.loads(raw) if raw else None


def _who(user: str) -> dict[str, Any]:
    return {"token": "legacy-verification-token", "api_app_id": "A0001", "team": {"id": TEAM, "domain": "fake"},
            "user": {"id": user, "team_id": TEAM, "username": user}, "trigger_id": "1.2.3"}


def pick(user: str, channel: str, view: dict[str, Any]) -> dict[str, Any]:
    """The modal's channel picker, as Slack sends its block action."""
    return {**_who(user), "type": "block_actions", "container": {"type": "view", "view_id": view["id"]},
            "view": view, "actions": [{"type": "conversations_select", "action_id": PICK_ACTION,
                                       "block_id": "channel", "selected_conversation": channel,
                                       "action_ts": str(time.time())}]}


def submit(user: str, channel: str, values: dict[str, str]) -> dict[str, Any]:
    """The form submitted for ``channel``: text for the prompt, the option value(s) for the selects."""
    state: dict[str, Any] = {}
    for setting, value in values.items():
        if setting == "prompt":
            entry: dict[str, Any] = {"type": "plain_text_input", "value": value}
        elif setting == "tools":
            entry = {"type": "multi_static_select", "selected_options": [{"value": v} for v in value.split()]}
        else:
            entry = {"type": "static_select", "selected_option": {"value": value}}
        state[f"{setting}:{channel}"] = {"value": entry}
    view = {"id": "V2", "hash": "2.V2", "type": "modal", "team_id": TEAM, "callback_id": CHANNEL_CALLBACK,
            "private_metadata": json.dumps({"v": 1, "channel": channel}), "state": {"values": state}}
    return {**_who(user), "type": "view_submission", "view": view}


def view_of(call: Any) -> dict[str, Any]:
    view = call.params["view"]
    return dict(json.loads(view) if isinstance(view, str) else view)


async def home(app: App, fake_slack: FakeSlack, user: str) -> dict[str, Any]:
    await app.post_event(event_body({"type": "app_home_opened", "user": user, "channel": "DHOME", "tab": "home",
                                     "event_ts": next_ts()}))
    return view_of([c for c in fake_slack.calls_of("views.publish") if c.params["user_id"] == user][-1])


def initial(view: dict[str, Any]) -> dict[str, Any]:
    """Each input's prefilled value: text, an option's value, or the options' values."""
    found: dict[str, Any] = {}
    for block in view["blocks"]:
        element = block.get("element") or {}
        if block["type"] == "input":
            found[block["block_id"].split(":")[0]] = (
                [o["value"] for o in element.get("initial_options", [])] if element["type"] == "multi_static_select"
                else element.get("initial_value") or (element.get("initial_option") or {}).get("value"))
    return found


async def audit(redis_client: aioredis.Redis, key_prefix: str) -> list[tuple[str, str, str, str]]:
    raw = await redis_client.lrange(AppKeys(key_prefix).limits_audit(WS), 0, -1)  # type: ignore[misc]
    return [(e["field"], e["old"], e["new"], e["who"]) for e in map(json.loads, reversed(raw))]


async def test_an_admin_sets_a_channels_agent_in_app_home_and_the_next_run_there_uses_it(
    app: App, fake_slack: FakeSlack, fake_openai: FakeOpenAI, redis_client: aioredis.Redis, key_prefix: str,
) -> None:
    await limits(app, "channel verbosity compact", channel=SUPPORT)  # set by command: the form shows them
    await limits(app, "channel tools calculator", channel=SUPPORT)
    assert CHANNEL_ACTION in action_ids(await home(app, fake_slack, ADMIN))

    await app.post_form(action_body(action_id=CHANNEL_ACTION, value="", user=ADMIN, team_id=TEAM))
    [opened] = fake_slack.calls_of("views.open")
    assert opened.params["trigger_id"] == "1.2.3" and view_of(opened)["callback_id"] == CHANNEL_CALLBACK
    await interact(app, pick(ADMIN, SUPPORT, opened.response["view"]))
    [updated] = fake_slack.calls_of("views.update")
    assert updated.params["view_id"] == "V2" and updated.params["hash"] == "1.v2"
    form = view_of(updated)
    assert initial(form) == {"prompt": None, "model": "default", "respond": "mention", "display": "default",
                             "verbosity": "compact", "tools": ["calculator"]}
    prompt_input = next(b for b in form["blocks"] if b.get("block_id") == f"prompt:{SUPPORT}")
    assert prompt_input["element"]["max_length"] == 2000
    model_options = next(b for b in form["blocks"] if b.get("block_id") == f"model:{SUPPORT}")["element"]["options"]
    assert [o["value"] for o in model_options] == ["default", "gpt-4o-mini", "gpt-4o"]
    tools = next(b for b in form["blocks"] if b.get("block_id") == f"tools:{SUPPORT}")["element"]["options"]
    assert "calculator" in [o["value"] for o in tools] and len(tools) > 1  # the workspace's others, to add

    answer = await interact(app, submit(ADMIN, SUPPORT, {
        "prompt": "Answer as the <support> desk & be brief.", "model": "gpt-4o", "respond": "all",
        "display": "default", "verbosity": "compact", "tools": "calculator"}))
    assert answer is None  # an empty ack closes the modal
    assert await audit(redis_client, key_prefix) == [
        (f"channel:{SUPPORT}:verbosity", "(workspace's)", "compact", ADMIN),
        (f"channel:{SUPPORT}:tools", "(workspace's)", "calculator", ADMIN),
        (f"channel:{SUPPORT}:prompt", "(workspace's)", "Answer as the <support> desk & be brief.", ADMIN),
        (f"channel:{SUPPORT}:model", "(workspace's)", "gpt-4o", ADMIN),
        (f"channel:{SUPPORT}:respond", "mention", "all", ADMIN),
    ]
    republished = json.dumps(view_of(fake_slack.calls_of("views.publish")[-1]), ensure_ascii=False)
    assert "model: (workspace's) → gpt-4o" in republished and f"<#{SUPPORT}>" in republished

    [run] = await ask(app, fake_openai, SUPPORT, "what is 2+2?")
    assert run.model == "gpt-4o" and "Answer as the <support> desk & be brief." in system_of(run)
    assert tool_names(run) == ["calculator"]
    shown = await limits(app, "channel show", channel=SUPPORT, user="U1")
    assert "• respond: all" in shown and "• model: gpt-4o" in shown


async def test_a_member_sees_no_button_and_a_forged_submission_changes_nothing(
    app: App, fake_slack: FakeSlack, redis_client: aioredis.Redis, key_prefix: str,
) -> None:
    assert CHANNEL_ACTION not in action_ids(await home(app, fake_slack, "U1"))
    await app.post_form(action_body(action_id=CHANNEL_ACTION, value="", user="U1", team_id=TEAM))
    assert fake_slack.calls_of("views.open") == []
    answer = await interact(app, submit("U1", SUPPORT, {"prompt": "Obey me.", "model": "gpt-4o"}))
    assert answer["response_action"] == "errors"
    assert "Only workspace admins and owners can change this channel's agent" in answer["errors"][f"prompt:{SUPPORT}"]
    assert not await redis_client.exists(AppKeys(key_prefix).channel_settings(WS, SUPPORT))
    assert await audit(redis_client, key_prefix) == []


async def test_where_channel_managers_may_a_channels_creator_gets_its_form_and_no_other(
    app: App, fake_slack: FakeSlack, redis_client: aioredis.Redis, key_prefix: str,
) -> None:
    fake_slack.channels["COTHER"] = {"creator": "USOMEONE"}
    await limits(app, "channel-managers on", channel=SUPPORT)
    assert CHANNEL_ACTION in action_ids(await home(app, fake_slack, "UCREATOR"))
    modal = {"id": "V2", "hash": "1.v2"}
    await interact(app, pick("UCREATOR", "COTHER", modal))  # created by someone else: the reason, no form
    assert "Only workspace admins" in json.dumps(view_of(fake_slack.calls_of("views.update")[-1]))
    await interact(app, pick("UCREATOR", SUPPORT, modal))
    assert f"prompt:{SUPPORT}" in json.dumps(view_of(fake_slack.calls_of("views.update")[-1]))
    assert await interact(app, submit("UCREATOR", SUPPORT, {"prompt": "Be kind."})) is None
    assert (await audit(redis_client, key_prefix))[-1] == (f"channel:{SUPPORT}:prompt", "(workspace's)", "Be kind.",
                                                           "UCREATOR")


@pytest.mark.parametrize(("channel", "values", "why"), [
    (SUPPORT, {"prompt": "x" * 2001}, {"prompt": "2,001 characters"}),
    (SHARED, {"respond": "all"}, {"respond": "shared with another organisation"}),
    (SUPPORT, {"model": "gpt-9", "tools": "no_such_tool", "prompt": "Fine."},
     {"model": "is not a model this deployment allows", "tools": "is not a tool this deployment offers"}),
])
async def test_bad_input_is_an_error_on_its_field_and_changes_nothing(
    app: App, redis_client: aioredis.Redis, key_prefix: str, channel: str, values: dict[str, str],
    why: dict[str, str],
) -> None:
    answer = await interact(app, submit(ADMIN, channel, values))
    assert answer["response_action"] == "errors"
    assert {k.split(":")[0] for k in answer["errors"]} == set(why)
    for setting, text in why.items():
        assert text in answer["errors"][f"{setting}:{channel}"]
    assert not await redis_client.exists(AppKeys(key_prefix).channel_settings(WS, channel))
    assert await audit(redis_client, key_prefix) == []
