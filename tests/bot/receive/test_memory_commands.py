"""Memory's doors, as signed requests into the running app: ``/agent memory`` (list, export to the DM, forget),
App Home's list and Forget buttons (each person's own only, admins included), channel notes kept by a channel's
admins and used in that channel only, and what a deactivation, an uninstall or a revocation leaves in Redis:
nothing."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest
import redis.asyncio as aioredis

from bot.identity import Workspace
from bot.keys import AppKeys
from bot.receive.views.memory import FORGET_ACTION
from bot.serve.service import Service
from bot.settings import Settings
from bot.workspace.memory import Memory, MemoryStore
from tests.bot.conftest import App, make_settings
from tests.bot.oauth.test_oauth_service import install, oauth_service_settings, post_event, web
from tests.bot.queue.test_schedules import agent
from tests.bot.runs.test_memory import FACT, ask, dm, memory_keys, only, remember
from tests.bot.workspace.test_usage import limits
from tests.fakes.openai_server import FakeOpenAI, text, tool_calls
from tests.fakes.slack_api import FakeSlack, Grant
from tests.signing import action_body, event_body

__all__ = ["oauth_service_settings", "web"]  # fixtures shared with the OAuth tests


@pytest.fixture
def memory_settings(key_prefix: str, fake_slack: FakeSlack, fake_openai: FakeOpenAI) -> Settings:
    fake_slack.users["UADMIN"] = {"is_admin": True}
    return make_settings(key_prefix, fake_slack, fake_openai, agent_memory_default="on")


@pytest.fixture
async def on(memory_settings: Settings) -> AsyncIterator[App]:
    async with Service(memory_settings, "web") as service, aiohttp.ClientSession() as http:
        yield App(service, http)


def home_of(fake_slack: FakeSlack, user: str) -> dict[str, Any]:
    calls = [c for c in fake_slack.calls_of("views.publish") if c.params["user_id"] == user]
    assert calls, f"no Home tab for {user}"
    view = calls[-1].params["view"]
    return json.loads(view) if isinstance(view, str) else view


def forget_buttons(view: dict[str, Any]) -> list[str]:
    return [b["accessory"]["value"] for b in view["blocks"]
            if b.get("accessory", {}).get("action_id") == FORGET_ACTION]


async def open_home(app: App, user: str) -> None:
    await app.post_event(event_body({"type": "app_home_opened", "user": user, "channel": "D1", "tab": "home",
                                     "event_ts": "1800000000.000001"}))


async def test_app_home_lists_the_viewers_own_memories_with_forget_buttons_and_an_admin_sees_none_of_them(
    on: App, fake_slack: FakeSlack, fake_openai: FakeOpenAI
) -> None:
    await remember(on, fake_openai)
    await open_home(on, "U1")
    [memory_id] = forget_buttons(home_of(fake_slack, "U1"))
    assert FACT in json.dumps(home_of(fake_slack, "U1"))
    await open_home(on, "UADMIN")
    admin_view = json.dumps(home_of(fake_slack, "UADMIN"))
    assert "Spinnaker" not in admin_view and forget_buttons(home_of(fake_slack, "UADMIN")) == []
    # The admin's press on U1's id forgets nothing: the store is keyed by the presser.
    await on.post_form(action_body(action_id=FORGET_ACTION, value=memory_id, user="UADMIN"))
    assert "gone already" in json.dumps(home_of(fake_slack, "UADMIN"))
    assert FACT in await agent(on, "memory")
    await on.post_form(action_body(action_id=FORGET_ACTION, value=memory_id, user="U1"))
    view = home_of(fake_slack, "U1")
    assert forget_buttons(view) == [] and f"Forgotten: `{memory_id}`" in json.dumps(view)
    assert "no memories" in await agent(on, "memory")


async def test_the_export_is_a_json_file_in_the_persons_dm(
    on: App, fake_slack: FakeSlack, fake_openai: FakeOpenAI
) -> None:
    await remember(on, fake_openai, where="C1")
    assert "Sent to our DM as `memories.json` (1 memories)" in await agent(on, "memory export")
    [upload] = [f for f in fake_slack.uploads.values() if f.shared_at]
    assert upload.filename == "memories.json" and upload.channel == "DU1"  # the DM the message to U1 landed in
    [kept] = json.loads(upload.text)["memories"]
    assert kept["text"] == FACT and kept["channel"] == "C1" and kept["visibility"] == "public"
    assert "Usage" in await agent(on, "memory sing")  # bad input: the usage, nothing done


async def test_channel_notes_are_kept_by_admins_and_used_in_their_channel_only(
    on: App, fake_slack: FakeSlack, fake_openai: FakeOpenAI
) -> None:
    note = "our on-call rota is in the pinned canvas"
    assert "Only" in await limits(on, f"channel memory add {note}", user="U1")
    added = await limits(on, f"channel memory add {note}", user="UADMIN")
    assert "Noted as `N" in added
    assert note in await limits(on, "channel memory list", user="U2")  # anyone in the channel may read them
    fake_openai.queue(tool_calls(("recall", {"query": "on-call rota"})), text("In the canvas."))
    await ask(on, "where is the on-call rota?", user="U2")
    assert note in only(fake_openai)
    fake_openai.queue(tool_calls(("recall", {"query": "on-call rota"})), text("?"))
    await ask(on, "where is the on-call rota?", user="U2", channel="C2")
    assert "Nothing remembered" in only(fake_openai)
    assert "Forgotten (1)" in await limits(on, "channel memory forget all", user="UADMIN")
    assert "no notes" in await limits(on, "channel memory list", user="U2")


async def test_a_deactivated_person_leaves_no_key(
    on: App, fake_openai: FakeOpenAI, redis_client: aioredis.Redis, key_prefix: str
) -> None:
    await remember(on, fake_openai)
    await remember(on, fake_openai, user="U2", where="D2")
    await on.post_event(event_body({"type": "user_change", "user": {"id": "U1", "deleted": True},
                                    "event_ts": "1800000000.000002"}))
    [left] = await memory_keys(redis_client, key_prefix)
    assert left.endswith(":memory:user:U2")


@pytest.mark.parametrize("event", [
    {"type": "app_uninstalled"},
    {"type": "tokens_revoked", "tokens": {"oauth": [], "bot": ["UBOT"]}},
])
async def test_an_uninstall_or_a_revoked_bot_token_leaves_no_key(
    on: App, fake_openai: FakeOpenAI, redis_client: aioredis.Redis, key_prefix: str, event: dict[str, Any]
) -> None:
    await remember(on, fake_openai)
    await remember(on, fake_openai, user="U2", where="C1")
    await limits(on, "channel memory add the rota is pinned", user="UADMIN")
    await limits(on, "memory on", user="UADMIN")
    assert "memory off" not in await agent(on, "memory off", user="U3")
    assert len(await memory_keys(redis_client, key_prefix)) == 4
    await on.post_event(event_body({**event, "event_ts": "1800000000.000003"}))
    assert await memory_keys(redis_client, key_prefix) == []


async def test_a_grid_sibling_workspace_reads_nothing_of_anothers(
    redis_client: aioredis.Redis, key_prefix: str
) -> None:
    store = MemoryStore(redis_client, AppKeys(key_prefix))
    here, sibling = Workspace("T1", "E1"), Workspace("T2", "E1")
    await store.add(here, "user", "U1", Memory("M00000001", FACT, "D1", "private", 1.0, 9e9), cap=5, ttl_days=1)
    assert [m.text for m in await store.all(here, "user", "U1", 2.0)] == [FACT]
    assert await store.all(sibling, "user", "U1", 2.0) == []
    await store.erase_installation("E1", "T2")  # the sibling's uninstall erases nothing here
    assert len(await store.all(here, "user", "U1", 2.0)) == 1
    await store.erase_installation("E1", None)  # the org-wide install's: everything of the org
    assert await memory_keys(redis_client, key_prefix) == []


async def test_memory_off_for_a_person_keeps_nothing_new_and_their_list_stays(
    on: App, fake_openai: FakeOpenAI
) -> None:
    await remember(on, fake_openai)
    await agent(on, "memory off")
    fake_openai.queue(text("Ok."))
    await dm(on, "remember that I like tea")
    assert not {t["function"]["name"] for t in fake_openai.requests[-1].tools or []} & {"remember", "recall"}
    assert FACT in await agent(on, "memory")
    assert "on for you again" in await agent(on, "memory on")


async def test_in_oauth_mode_an_uninstall_erases_that_workspaces_memories_only(
    web: tuple[Service, aiohttp.ClientSession], fake_slack: FakeSlack, redis_client: aioredis.Redis,
    key_prefix: str,
) -> None:
    service, http = web
    url = f"http://127.0.0.1:{service.port}"
    for team in ("T1", "T2"):
        fake_slack.add_install(f"c-{team}", Grant(team))
        assert await install(http, url, f"c-{team}") == 200
    store = MemoryStore(redis_client, AppKeys(key_prefix))
    for team in ("T1", "T2"):
        await store.add(Workspace(team), "user", "U1", Memory("M00000001", FACT, "D1", "private", 1.0, 9e9),
                        cap=5, ttl_days=1)
    revoked = {"type": "tokens_revoked", "event_ts": "1800000000.000004", "tokens": {"oauth": ["U1"], "bot": []}}
    assert await post_event(http, url, event_body(revoked, team_id="T2")) == 200
    [left] = await memory_keys(redis_client, key_prefix)
    assert ":T1}" in left  # a person's revoked token erased their memories in that workspace only
    assert await post_event(http, url, event_body({"type": "app_uninstalled", "event_ts": "1800000000.000005"},
                                                  team_id="T1")) == 200
    assert await memory_keys(redis_client, key_prefix) == []


async def test_a_deleted_channels_notes_go_with_it(
    on: App, redis_client: aioredis.Redis, key_prefix: str
) -> None:
    assert "Noted as" in await limits(on, "channel memory add the rota is pinned", user="UADMIN")
    assert len(await memory_keys(redis_client, key_prefix)) == 1
    await on.post_event(event_body({"type": "channel_deleted", "channel": "C1", "event_ts": "1800000000.000006"}))
    assert await memory_keys(redis_client, key_prefix) == []
