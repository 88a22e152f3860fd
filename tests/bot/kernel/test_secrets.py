"""Secrets in OAuth mode: installs, runs in two workspaces (one with an LLM failure, one with a tool call), and
an uninstall. Every log line (DEBUG and up) and every payload Slack received is searched for the client secret,
the token encryption key, the signing secret, the OpenAI key and the bot tokens Slack issued: zero hits.

The process-based fault tests (test_resume.py, test_redis_outage.py) run the same check on their processes' JSON
logs, the in-process ones (test_llm_faults.py, test_slack_faults.py, test_isolation.py) on what they logged.
"""

from __future__ import annotations

import json
import logging

import aiohttp
import pytest

from bot.serve.service import Service
from bot.settings import Settings
from tests.bot.conftest import SECRET, drain
from tests.bot.oauth.test_oauth_service import install, oauth_service_settings, post_event  # noqa: F401 (a fixture)
from tests.bot.oauth_helpers import KEY
from tests.bot.service_processes import emitted
from tests.fakes.openai_server import FakeOpenAI, error, text, tool_calls
from tests.fakes.slack_api import FakeSlack, Grant
from tests.signing import event_body, mention, next_ts

#: Methods whose very purpose is to carry the client secret to Slack.
OAUTH_METHODS = frozenset({"oauth.v2.access"})


async def test_no_secret_in_any_log_line_or_slack_payload_in_oauth_mode(
    request: pytest.FixtureRequest, fake_slack: FakeSlack, fake_openai: FakeOpenAI, caplog: pytest.LogCaptureFixture
) -> None:
    settings: Settings = request.getfixturevalue("oauth_service_settings")
    caplog.set_level(logging.DEBUG)
    fake_openai.queue(tool_calls(("calculator", {"expression": "6*7"}), content="Multiply."), text("42."),
                      error(401, "Incorrect API key provided: sk-te***"))
    fake_slack.add_install("c1", Grant("T1"))
    fake_slack.add_install("c2", Grant("T2", rotating=True))
    fake_slack.users.update({"U1": {"team_id": "T1"}, "U2": {"team_id": "T2"}})
    async with Service(settings, "web") as service, \
            aiohttp.ClientSession(cookie_jar=aiohttp.DummyCookieJar()) as http:
        url = f"http://127.0.0.1:{service.port}"
        assert await install(http, url, "c1") == 200 and await install(http, url, "c2") == 200
        assert await post_event(http, url, event_body(mention(ts=next_ts(), channel="C1", team="T1"),
                                                      team_id="T1")) == 200
        await drain(settings)
        assert await post_event(http, url, event_body(mention(ts=next_ts(), channel="C2", team="T2", user="U2"),
                                                      team_id="T2")) == 200
        await drain(settings)
        assert await post_event(http, url, event_body({"type": "app_uninstalled", "event_ts": next_ts()},
                                                      team_id="T1")) == 200
    assert "42." in json.dumps([c.params for c in fake_slack.calls_of("chat.postMessage")])
    secrets = {
        "client secret": fake_slack.client_secret, "encryption key": KEY, "signing secret": SECRET,
        "OpenAI key": "sk-test", **{f"bot token {i}": t for i, t in enumerate(fake_slack.tokens)},
        **{f"refresh token {i}": t for i, t in enumerate(fake_slack.refresh_tokens)},
    }
    assert len(secrets) >= 6
    lines = emitted(caplog.records, settings.secrets())
    payloads = [json.dumps(c.params, default=str) for c in fake_slack.calls if c.method not in OAUTH_METHODS]
    requests = [r.body.decode(errors="replace") for r in fake_openai.requests]
    for name, secret in secrets.items():
        for where, texts in (("log line", lines), ("Slack payload", payloads), ("LLM request body", requests)):
            hits = [t for t in texts if secret in t]
            assert not hits, f"the {name} is in {len(hits)} {where}(s): {hits[0][:300]}"
    assert len(lines) > 20 and len(payloads) > 5  # there was something to search
