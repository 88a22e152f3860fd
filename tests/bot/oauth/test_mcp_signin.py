"""Per-person sign-in to an ``"auth": "user"`` MCP server, through the running service: each person's calls carry
their own token and see their own results; an unconnected person is offered Connect and goes on after it;
disconnect leaves no key; a token past its expiry is renewed before use."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
import redis.asyncio as aioredis

from agent_core import ConfigError
from bot import audit
from bot.identity import Workspace
from bot.keys import AppKeys
from bot.oauth.mcp_vault import McpVault
from bot.oauth.token_crypto import TokenCipher
from bot.serve import startup
from tests.bot.conftest import make_settings
from tests.bot.oauth.mcp_rig import KEY, connect_button, mcp_rig, offers, user_server_config
from tests.bot.queue.test_schedules import schedule_id
from tests.bot.runs.test_mcp_tools import mention_and_wait
from tests.fakes.openai_server import FakeOpenAI, RecordedRequest, text, tool_calls
from tests.fakes.slack_api import FakeSlack
from tests.signing import event_body, mention, next_ts


def observations(request: RecordedRequest) -> str:
    return "\n".join(str(m.get("content")) for m in request.messages if m.get("role") == "tool")


async def test_two_people_connected_to_one_server_each_see_their_own_results(
    tmp_path: Path, key_prefix: str, fake_slack: FakeSlack, fake_openai: FakeOpenAI, redis_client: aioredis.Redis,
    capsys: object,
) -> None:
    audit.configure("stdout")
    async with mcp_rig(tmp_path, key_prefix, fake_slack, fake_openai, redis_client) as rig:
        status, page = await rig.connect("UALICE", login="alice")
        assert status == 200 and "Connected to tickets" in page
        status, _ = await rig.connect("UBOB", login="bob")
        assert status == 200
        answer = await rig.agent("connections", user="UALICE")
        assert "tickets: connected as <@UALICE>" in answer["text"]

        for user, login in (("UALICE", "alice"), ("UBOB", "bob")):
            fake_openai.queue(tool_calls(("tickets__my_tickets", {})), text(f"Here are {login}'s tickets."))
            thread = await mention_and_wait(rig.app, fake_slack, "my open tickets?", user=user)
            assert f"Here are {login}'s tickets." in thread
            assert f"open tickets of {login}: {login.upper()}-1" in observations(fake_openai.requests[-1])
    assert [(who, tool) for who, tool, _ in rig.mcp.calls[-2:]] == [("alice", "my_tickets"), ("bob", "my_tickets")]
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines() if line.startswith("{")]  # type: ignore[attr-defined]
    called = [(e["user"], e["server"], e["tool"]) for e in lines if e["event"] == "tool.called_as"]
    assert ("UALICE", "tickets", "my_tickets") in called and ("UBOB", "tickets", "my_tickets") in called
    assert {e["user"] for e in lines if e["event"] == "connection.created"} == {"UALICE", "UBOB"}
    tokens = [tok for _, _, tok in rig.mcp.calls]
    assert not any(tok in json.dumps(e) for e in lines for tok in tokens)  # never a token in the audit
    assert not any(tok in json.dumps(r.messages) for r in fake_openai.requests for tok in tokens)  # nor to the model


def _final_count(fake_slack: FakeSlack, root: str) -> int:
    return len([c for c in fake_slack.calls_of("chat.postMessage")
                if c.params.get("thread_ts") == root and "Stop reason" in json.dumps(c.params.get("blocks"))])


async def test_an_unconnected_person_gets_connect_and_retry_and_after_connecting_the_run_goes_on(
    tmp_path: Path, key_prefix: str, fake_slack: FakeSlack, fake_openai: FakeOpenAI, redis_client: aioredis.Redis
) -> None:
    async with mcp_rig(tmp_path, key_prefix, fake_slack, fake_openai, redis_client) as rig:
        # Nobody has connected: the server's tools are unknown, its stand-in asks the person to connect.
        fake_openai.queue(tool_calls(("tickets__connect", {})), text("Please connect tickets first."))
        root = next_ts()
        await rig.app.post_event(event_body(mention(text="<@UBOT> my tickets?", ts=root, user="UALICE")))
        await fake_slack.wait_for("chat.postMessage", predicate=lambda c: _final_count(fake_slack, root) >= 1)
        assert "tickets__connect" in {t["function"]["name"] for t in fake_openai.requests[0].tools}
        assert "has not connected" in observations(fake_openai.requests[-1])
        [offer] = offers(fake_slack, "UALICE")
        assert offer.params["thread_ts"] == root  # in the thread, for the asker alone (ephemeral)
        buttons = {e["action_id"]: e for b in offer.params["blocks"] if b["type"] == "actions" for e in b["elements"]}
        assert set(buttons) == {"mcp_connect", "mcp_retry"} and buttons["mcp_connect"]["text"]["text"] == \
            "Connect tickets"
        assert rig.mcp.calls == [] and await rig.token_keys() == []

        status, _ = await rig.callback(await rig.auth.sign_in(rig.app.http, buttons["mcp_connect"]["url"],
                                                              login="alice"))
        assert status == 200
        # Retry: the run goes on in the same thread, now with the server's own tools, as alice.
        fake_openai.queue(tool_calls(("tickets__my_tickets", {})), text("You have ALICE-1 and ALICE-2."))
        await rig.press("mcp_retry", buttons["mcp_retry"]["value"], user="UALICE")
        await fake_slack.wait_for("chat.postMessage", predicate=lambda c: _final_count(fake_slack, root) >= 2)
        assert "tickets__my_tickets" in {t["function"]["name"] for t in fake_openai.requests[-1].tools}
        assert "open tickets of alice" in observations(fake_openai.requests[-1])
        history = json.dumps(fake_openai.requests[-1].messages)
        assert "my tickets?" in history and "Please connect tickets first." in history  # the same conversation
        thread = "\n".join(m.block_text() for m in fake_slack.thread_messages("C1", root))
        assert "You have ALICE-1 and ALICE-2." in thread

        # Bob has not connected; the tools are known now: his call is refused and he alone is offered Connect.
        fake_openai.queue(tool_calls(("tickets__my_tickets", {})), text("Connect first, Bob."))
        await mention_and_wait(rig.app, fake_slack, "and mine?", user="UBOB")
        assert "has not connected" in observations(fake_openai.requests[-1])
        assert len(offers(fake_slack, "UBOB")) == 1 and len(offers(fake_slack, "UALICE")) == 1
        assert [who for who, _, _ in rig.mcp.calls] == ["alice"]
        # Bob pressing Alice's Retry continues nothing.
        before = len(fake_openai.requests)
        await rig.press("mcp_retry", buttons["mcp_retry"]["value"], user="UBOB")
        await rig.app.drain()
        assert len(fake_openai.requests) == before


async def test_disconnect_deactivation_and_uninstall_leave_no_key(
    tmp_path: Path, key_prefix: str, fake_slack: FakeSlack, fake_openai: FakeOpenAI, redis_client: aioredis.Redis
) -> None:
    async with mcp_rig(tmp_path, key_prefix, fake_slack, fake_openai, redis_client) as rig:
        await rig.connect("UALICE", login="alice")
        await rig.connect("UBOB", login="bob")
        assert len(await rig.token_keys()) == 2
        stored = json.dumps({str(k): {str(f): str(v) for f, v in h.items()} for k, h in (await rig.stored()).items()})
        assert "at-alice" not in stored and "rt-" not in stored  # encrypted at rest
        answer = await rig.agent("disconnect tickets", user="UALICE")
        assert "Disconnected tickets" in answer["text"]
        assert len(await rig.token_keys()) == 1
        assert "not connected" in (await rig.agent("connections", user="UALICE"))["text"]
        # Bob leaves the workspace (deactivated): his token goes too.
        await rig.app.post_event(event_body({"type": "user_change", "user": {"id": "UBOB", "deleted": True}}))
        assert await rig.token_keys() == []
        assert (await rig.agent("disconnect tickets", user="UBOB"))["text"] == "You were not connected to tickets."
        # The app is uninstalled: every person's token of the workspace goes.
        await rig.connect("UALICE", login="alice")
        assert len(await rig.token_keys()) == 1
        await rig.app.post_event(event_body({"type": "app_uninstalled", "event_ts": next_ts()}))
        assert await rig.token_keys() == []


async def test_an_expiring_token_is_renewed_before_use_and_invalid_grant_deletes_it(
    tmp_path: Path, key_prefix: str, fake_slack: FakeSlack, fake_openai: FakeOpenAI, redis_client: aioredis.Redis
) -> None:
    async with mcp_rig(tmp_path, key_prefix, fake_slack, fake_openai, redis_client) as rig:
        rig.auth.lifetime = 30  # within the renewal margin: every use renews it first
        await rig.connect("UALICE", login="alice")
        [first] = [t for t, g in rig.auth.tokens.items() if g.login == "alice"]
        fake_openai.queue(tool_calls(("tickets__whoami", {})), text("You are alice."))
        await mention_and_wait(rig.app, fake_slack, "who am I there?", user="UALICE")
        used = [tok for who, tool, tok in rig.mcp.calls if tool == "whoami"]
        assert used and first not in used  # the renewed token, never the expired one
        assert rig.auth.token_requests()[-1]["grant_type"] == "refresh_token"
        assert rig.auth.token_requests()[-1]["resource"] == rig.mcp.url  # RFC 8707 on refresh too
        # The authorization server forgets the grant: the next renewal gets invalid_grant, the token is deleted.
        rig.auth.refresh_tokens.clear()
        fake_openai.queue(tool_calls(("tickets__whoami", {})), text("Connect again."))
        calls = len(rig.mcp.calls)
        await mention_and_wait(rig.app, fake_slack, "who am I now?", user="UALICE")
        assert "has not connected" in observations(fake_openai.requests[-1])
        assert len(rig.mcp.calls) == calls and await rig.token_keys() == []
        assert len(offers(fake_slack, "UALICE")) == 1


@pytest.mark.parametrize(("public_url", "key", "says"), [
    (None, KEY, "PUBLIC_URL is not set: MCP server 'tickets' has \"auth\": \"user\""),
    ("http://agent.example.com", KEY, "PUBLIC_URL must be an https origin"),
    ("https://agent.example.com", None, "SLACK_TOKEN_ENCRYPTION_KEY is not set: MCP server 'tickets'"),
], ids=["no-public-url", "http-public-url", "no-key"])
def test_a_user_server_without_public_url_or_key_is_a_start_up_error_naming_it(
    tmp_path: Path, key_prefix: str, fake_slack: FakeSlack, fake_openai: FakeOpenAI, public_url: str | None,
    key: str | None, says: str,
) -> None:
    settings = make_settings(key_prefix, fake_slack, fake_openai, public_url=public_url,
                             slack_token_encryption_key=key,
                             agent_mcp_config=user_server_config(tmp_path, "https://tickets.example/mcp"))
    with pytest.raises(ConfigError) as raised:
        startup.check(settings, "web")
    assert says in str(raised.value)


def _home_of(fake_slack: FakeSlack, user: str) -> str:
    [*_, last] = [c for c in fake_slack.calls_of("views.publish") if c.params["user_id"] == user]
    return json.dumps(last.params["view"])


async def test_app_home_shows_the_persons_connections_with_connect_and_disconnect(
    tmp_path: Path, key_prefix: str, fake_slack: FakeSlack, fake_openai: FakeOpenAI, redis_client: aioredis.Redis
) -> None:
    async with mcp_rig(tmp_path, key_prefix, fake_slack, fake_openai, redis_client) as rig:
        home = {"type": "app_home_opened", "user": "UALICE", "channel": "D1", "tab": "home", "event_ts": next_ts()}
        await rig.app.post_event(event_body(home))
        assert "tickets: not connected" in _home_of(fake_slack, "UALICE") and "mcp_home_connect" in \
            _home_of(fake_slack, "UALICE")
        # Connect from Home: the link comes by DM, only to her.
        await rig.press("mcp_home_connect", "tickets", user="UALICE")
        [dm] = [c for c in fake_slack.calls_of("chat.postMessage") if c.params.get("channel") == "UALICE"]
        status, _ = await rig.callback(await rig.auth.sign_in(
            rig.app.http, connect_button(dm.params["blocks"])["url"], login="alice"))
        assert status == 200
        await rig.app.post_event(event_body({**home, "event_ts": next_ts()}))
        assert "connected as <@UALICE>" in _home_of(fake_slack, "UALICE")
        # Disconnect from Home: the token goes, the tab says so.
        await rig.press("mcp_home_disconnect", "tickets", user="UALICE")
        assert await rig.token_keys() == []
        assert "Disconnected tickets" in _home_of(fake_slack, "UALICE")


async def test_a_token_is_sent_only_to_the_resource_it_was_issued_for(
    tmp_path: Path, key_prefix: str, fake_slack: FakeSlack, fake_openai: FakeOpenAI, redis_client: aioredis.Redis
) -> None:
    async with mcp_rig(tmp_path, key_prefix, fake_slack, fake_openai, redis_client) as rig:
        await rig.connect("UALICE", login="alice")
        vault = McpVault(redis_client, AppKeys(key_prefix), TokenCipher.from_setting(KEY))
        ws = Workspace.of("T0001", None)
        stored = await vault.get(ws, "UALICE", "tickets")
        assert stored is not None and stored.resource == rig.mcp.url
        # As if the server's URL had changed since she connected: her token names another resource.
        await vault.put(ws, "UALICE", "tickets", replace(stored, resource="https://elsewhere.example/mcp"))
        fake_openai.queue(tool_calls(("tickets__connect", {})), text("Connect again."))
        await mention_and_wait(rig.app, fake_slack, "who am I?", user="UALICE")
        assert "has not connected" in observations(fake_openai.requests[-1])
        assert rig.mcp.calls == [] and await rig.token_keys() == []  # the token went nowhere, and is gone


async def test_a_scheduled_run_calls_as_its_creator_whoever_fires_it(
    tmp_path: Path, key_prefix: str, fake_slack: FakeSlack, fake_openai: FakeOpenAI, redis_client: aioredis.Redis
) -> None:
    fake_slack.users["UADMIN"] = {"is_admin": True}
    async with mcp_rig(tmp_path, key_prefix, fake_slack, fake_openai, redis_client) as rig:
        await rig.connect("UALICE", login="alice")
        await rig.connect("UADMIN", login="admin")
        sid = schedule_id((await rig.agent('schedule add "every day at 09:00" my open tickets', user="UALICE"))["text"])
        fake_openai.queue(tool_calls(("tickets__my_tickets", {})), text("The schedule answered."))
        assert "Running" in (await rig.agent(f"schedule run {sid}", user="UADMIN"))["text"]  # an admin fires it
        await fake_slack.wait_for("chat.postMessage", timeout=30,
                                  predicate=lambda c: "The schedule answered." in json.dumps(c.params))
    assert [(who, tool) for who, tool, _ in rig.mcp.calls] == [("alice", "my_tickets")]


async def test_a_token_the_server_refuses_is_renewed_and_the_call_made_again(
    tmp_path: Path, key_prefix: str, fake_slack: FakeSlack, fake_openai: FakeOpenAI, redis_client: aioredis.Redis
) -> None:
    async with mcp_rig(tmp_path, key_prefix, fake_slack, fake_openai, redis_client) as rig:
        await rig.connect("UALICE", login="alice")
        fake_openai.queue(tool_calls(("tickets__whoami", {})), text("You are alice."))
        await mention_and_wait(rig.app, fake_slack, "who am I?", user="UALICE")
        [(_, _, first)] = rig.mcp.calls
        rig.auth.tokens.clear()  # the server stops accepting the access token (revoked); the refresh token works
        fake_openai.queue(tool_calls(("tickets__whoami", {})), text("Still alice."))
        await mention_and_wait(rig.app, fake_slack, "and now?", user="UALICE")
        assert "you are alice" in observations(fake_openai.requests[-1])
        [(who, _, second)] = rig.mcp.calls[1:]
        assert who == "alice" and second != first
        assert rig.auth.token_requests()[-1]["grant_type"] == "refresh_token"
