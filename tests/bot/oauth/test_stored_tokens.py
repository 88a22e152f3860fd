"""Tokens at rest, as an operator lives with them: an installation no configured key reads, key rotation with
``python -m bot rekey``, and a revoked bot token gone from every stored record."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path
from urllib.parse import parse_qsl, urlencode

import aiohttp
import redis.asyncio as aioredis
from cryptography.fernet import Fernet

from bot.keys import AppKeys
from bot.oauth.installations import RedisInstallationStore
from bot.oauth.token_crypto import TokenCipher
from tests.bot.conftest import SECRET
from tests.bot.oauth.test_installations import installed
from tests.bot.oauth_helpers import KEY, oauth_rig
from tests.bot.service_processes import process, service_env
from tests.conftest import TEST_REDIS_URL
from tests.fakes.openai_server import FakeOpenAI
from tests.fakes.slack_api import FakeSlack, Grant
from tests.processes import ROOT
from tests.signing import command_body, event_body, mention, next_ts, signed_headers

#: The key the installations were written with (``KEY``) is dropped; only this one is configured.
NEW_KEY = Fernet.generate_key().decode()
UNREADABLE_LINE = "cannot be read with any key in SLACK_TOKEN_ENCRYPTION_KEY"


async def stored_values(redis: aioredis.Redis, key_prefix: str) -> dict[bytes, dict[bytes, bytes]]:
    return {k: await redis.hgetall(k) async for k in redis.scan_iter(match=f"{key_prefix}:*:installation")}


async def test_an_install_no_key_reads_is_acknowledged_with_nothing_started_and_logged_once(
    tmp_path: Path, key_prefix: str, fake_slack: FakeSlack, fake_openai: FakeOpenAI, redis_client: aioredis.Redis
) -> None:
    async with oauth_rig(key_prefix, fake_slack, redis_client) as rig:
        await installed(rig, fake_slack, "c1", Grant("T1"))
    env = service_env(fake_slack, fake_openai, TEST_REDIS_URL, REDIS_KEY_PREFIX=key_prefix,
                      ARQ_QUEUE_NAME=f"{key_prefix}:queue", SLACK_CLIENT_ID=fake_slack.client_id,
                      SLACK_CLIENT_SECRET=fake_slack.client_secret, SLACK_TOKEN_ENCRYPTION_KEY=NEW_KEY)
    del env["SLACK_BOT_TOKEN"]
    command = dict(parse_qsl(command_body(command="/agent-limits", text="show", team_id="T1").decode()))
    command["response_url"] = fake_slack.response_url("limits")
    form = urlencode(command).encode()
    async with process("all", env, tmp_path, "bot") as bot, aiohttp.ClientSession() as http:
        await bot.wait_healthy()
        url = f"{bot.url}/slack/events"
        statuses = []
        # One mention and Slack's three retries of it, another mention, then a command.
        first = event_body(mention(ts=next_ts(), team="T1"), team_id="T1")
        for retry in (None, 1, 2, 3):
            async with http.post(url, data=first, headers=signed_headers(SECRET, first, retry_num=retry)) as resp:
                statuses.append(resp.status)
        second = event_body(mention(ts=next_ts(), team="T1"), team_id="T1")
        async with http.post(url, data=second, headers=signed_headers(SECRET, second)) as resp:
            statuses.append(resp.status)
        headers = signed_headers(SECRET, form, content_type="application/x-www-form-urlencoded")
        async with http.post(url, data=form, headers=headers) as resp:
            statuses.append(resp.status)
            answer = await resp.text()
        assert statuses == [200] * 6  # before: 500 and a traceback each, and Slack retried them all
        log = bot.log()
    # The command is answered in its HTTP response (no token needed), saying what the operator must do.
    assert "can't be read" in answer and "operator must put back" in answer and "reinstall" in answer, answer
    assert not fake_slack.responses.get("limits")  # said once, not again on the response_url
    assert fake_openai.requests == [] and fake_slack.calls_of("chat.postMessage") == []
    assert await redis_client.zcard(f"{key_prefix}:queue") == 0  # nothing queued
    assert log.count(UNREADABLE_LINE) == 1, log
    assert "Traceback" not in log and "Although the app should be installed" not in log


async def rekey(key_prefix: str, keys: str) -> tuple[int, str, str]:
    """``python -m bot rekey`` as an operator runs it: exit code, stdout, stderr."""
    env = {"PATH": os.environ.get("PATH", ""), "PYTHONPATH": str(ROOT), "REDIS_URL": TEST_REDIS_URL,
           "REDIS_KEY_PREFIX": key_prefix, "SLACK_TOKEN_ENCRYPTION_KEY": keys}
    child = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "bot", "rekey", env=env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
    )
    out, err = await asyncio.wait_for(child.communicate(), 60)
    assert child.returncode is not None
    return child.returncode, out.decode(), err.decode()


async def test_rekey_re_encrypts_every_installation_with_the_newest_key_and_refuses_what_no_key_reads(
    key_prefix: str, fake_slack: FakeSlack, redis_client: aioredis.Redis
) -> None:
    async with oauth_rig(key_prefix, fake_slack, redis_client) as rig:
        await installed(rig, fake_slack, "c1", Grant("T1", rotating=True))
        await installed(rig, fake_slack, "c2", Grant(None, enterprise_id="E1", is_enterprise_install=True))
    issued = {fake_slack.tokens[t].grant.team_id: t for t in fake_slack.tokens}
    before = await stored_values(redis_client, key_prefix)
    assert len(before) == 2

    # The old key already dropped: refused, naming both installations, and nothing written.
    code, out, err = await rekey(key_prefix, NEW_KEY)
    assert code == 1 and out == ""
    assert "2 installation(s) cannot be read" in err and "team T1 (bot, latest, user:UADMIN)" in err
    assert "enterprise E1 (org-wide)" in err and "Nothing was changed" in err
    assert await stored_values(redis_client, key_prefix) == before

    # Rotation as the README says: the new key first, the old one after it.
    code, out, err = await rekey(key_prefix, f"{NEW_KEY},{KEY}")
    assert code == 0, err
    assert "re-encrypted 2 installation(s) (6 stored values)" in out
    for secret in (KEY, NEW_KEY, *issued.values()):
        assert secret not in out + err

    # Now the new key alone reads everything, and the tokens are the ones Slack issued.
    store = RedisInstallationStore(redis_client, AppKeys(key_prefix), TokenCipher([NEW_KEY.encode()]))
    one = await store.async_find_installation(enterprise_id=None, team_id="T1", user_id="UADMIN")
    org = await store.async_find_bot(enterprise_id="E1", team_id=None, is_enterprise_install=True)
    assert one is not None and one.bot_token == issued["T1"] and one.bot_refresh_token
    assert org is not None and org.bot_token == issued[None]


async def test_a_revoked_bot_token_is_gone_from_every_stored_record(
    key_prefix: str, fake_slack: FakeSlack, redis_client: aioredis.Redis
) -> None:
    async with oauth_rig(key_prefix, fake_slack, redis_client) as rig:
        await installed(rig, fake_slack, "c1", Grant("T1"))
        [token] = fake_slack.tokens
        revoked = {"type": "event_callback", "team_id": "T1", "api_app_id": "AFAKE", "event_id": "Ev9",
                   "event": {"type": "tokens_revoked", "tokens": {"bot": ["UB1"]}}}
        assert await rig.event(revoked) == 200
        assert await rig.oauth.resolver.token(None, "T1") is None
    cipher = TokenCipher([KEY.encode()])
    [stored] = (await stored_values(redis_client, key_prefix)).values()
    plain = {field.decode(): json.loads(cipher.decrypt(value)) for field, value in stored.items()}
    assert set(plain) == {"latest", "user:UADMIN"}  # the installer's records stay, without the bot's token
    assert not [field for field, record in plain.items() if token in json.dumps(record)]
    assert all(record["bot_id"] for record in plain.values())
