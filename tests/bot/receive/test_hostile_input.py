"""Hostile and malformed input at the front door: never a 500, never a traceback, never a run started.

Unauthenticated junk gets 401 (or 400/408/413 before the body is read); signed but malformed payloads get 400,
or 200 with nothing started. A hypothesis fuzz over Slack's payload shapes runs for a bounded time.
"""

from __future__ import annotations

import json
import logging
import time
from typing import Any
from urllib.parse import urlencode

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.bot.conftest import SECRET, App
from tests.fakes.openai_server import FakeOpenAI
from tests.fakes.slack_api import FakeSlack
from tests.signing import action_body, command_body, event_body, mention, signed_headers

FORM = "application/x-www-form-urlencoded"


async def post_raw(app: App, body: bytes, headers: dict[str, str]) -> tuple[int, str]:
    async with app.http.post(f"{app.url}/slack/events", data=body, headers=headers) as resp:
        return resp.status, await resp.text()


async def post_signed(app: App, body: bytes, content_type: str = "application/json") -> int:
    status, _ = await post_raw(app, body, signed_headers(SECRET, body, content_type=content_type))
    return status


def no_traceback(caplog: pytest.LogCaptureFixture) -> None:
    assert not [r for r in caplog.records if r.exc_info or "Traceback" in r.getMessage()]


async def test_unauthenticated_junk_gets_401_and_one_short_line(
    app: App, caplog: pytest.LogCaptureFixture
) -> None:
    body = b"\xff\xfe not utf-8 \x80"
    now = str(int(time.time()))
    cases = [
        {"X-Slack-Request-Timestamp": "9" * 5000, "X-Slack-Signature": "v0=" + "0" * 64},
        {"X-Slack-Request-Timestamp": now, "X-Slack-Signature": "v0=" + "0" * 64},
        {"X-Slack-Request-Timestamp": now, "X-Slack-Signature": "v0=short"},
        {"X-Slack-Request-Timestamp": "", "X-Slack-Signature": ""},
    ]
    with caplog.at_level(logging.DEBUG):
        for headers in cases * 3:
            status, _ = await post_raw(app, body, {"Content-Type": "application/json", **headers})
            assert status == 401
    no_traceback(caplog)
    refusals = [r for r in caplog.records if "refused" in r.getMessage()]
    # One line per reason, not one per request.
    assert 1 <= len(refusals) <= 3
    assert all(len(r.getMessage()) < 200 for r in refusals)


def _event(**event: Any) -> bytes:
    return event_body({"type": "app_mention", "user": "U1", "text": "<@UBOT> hi", "ts": "1.1", **event})


def _envelope(**fields: Any) -> bytes:
    data = json.loads(event_body(mention()))
    data.update(fields)
    return json.dumps(data).encode()


def _payload(**fields: Any) -> bytes:
    data = json.loads(_form_value(action_body(action_id="agent_stop", value="x|y"), "payload"))
    for key, value in fields.items():
        if value is None:
            data.pop(key, None)
        else:
            data[key] = value
    return urlencode({"payload": json.dumps(data)}).encode()


def _form_value(body: bytes, name: str) -> str:
    from urllib.parse import parse_qs

    return parse_qs(body.decode())[name][0]


MALFORMED_JSON = [
    b"[" * 100_000 + b"]" * 100_000,
    b'{"type": "event_callback", "event": {"type": "app_mention", "text": "\\ud800"}}',
    _envelope(event="not an object"),
    _envelope(event=["a", "list"]),
    _event(channel="C1:evil"),
    _envelope(team_id="T/1", authorizations=[{"team_id": "T/1", "user_id": "UBOT", "is_bot": True}]),
    _event(channel={"id": "C1"}),
    _event(ts=["1.1"]),
    _event(user=7),
    json.dumps({"type": "event_callback", "team_id": "T0001", "event": {"type": "app_home_opened"}}).encode(),
]
def _qs(body: bytes) -> dict[str, str]:
    from urllib.parse import parse_qsl

    return dict(parse_qsl(body.decode()))


COMMAND_WITHOUT_TEAM = urlencode(
    {k: v for k, v in _qs(command_body(command="/agent-limits", text="show")).items() if k != "team_id"}
).encode()


@pytest.mark.parametrize("body", MALFORMED_JSON, ids=lambda b: repr(b[:40]))
async def test_signed_malformed_events_never_get_a_500_or_start_a_run(
    app: App, fake_slack: FakeSlack, fake_openai: FakeOpenAI, caplog: pytest.LogCaptureFixture, body: bytes
) -> None:
    with caplog.at_level(logging.WARNING):
        status = await post_signed(app, body)
    assert status in (200, 400)
    await app.drain()
    assert fake_openai.requests == [] and fake_slack.calls_of("chat.postMessage") == []
    no_traceback(caplog)


@pytest.mark.parametrize("body", [b"{a=b", _payload(trigger_id=None), _payload(user="U1"), _payload(actions="nope"),
                                  _payload(channel="C1"), _payload(team=None), COMMAND_WITHOUT_TEAM],
                         ids=["form", "no-trigger", "user-string", "actions-string", "channel-string", "no-team",
                              "command-no-team"])
async def test_signed_malformed_forms_never_get_a_500(
    app: App, fake_slack: FakeSlack, fake_openai: FakeOpenAI, caplog: pytest.LogCaptureFixture, body: bytes
) -> None:
    with caplog.at_level(logging.WARNING):
        status = await post_signed(app, body, FORM)
    assert status in (200, 400)
    await app.drain()
    assert fake_openai.requests == []
    no_traceback(caplog)


_ids = st.one_of(
    st.sampled_from(["T0001", "C1", "U1", "UBOT", "1.1", "", "-", "T/1", "C:1", "{x}"]), st.text(max_size=8)
)
_json = st.recursive(
    st.none() | st.booleans() | st.integers() | _ids,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_ids, inner, max_size=4),
    max_leaves=12,
)


@st.composite
def slack_events(draw: st.DrawFn) -> bytes:
    event = draw(st.fixed_dictionaries(
        {"type": st.sampled_from(["app_mention", "message", "app_home_opened", "agent_session_stopped",
                                  "assistant_thread_started", "app_context_changed", "x"])},
        optional={"user": _json, "text": _json, "ts": _json, "channel": _json, "thread_ts": _json,
                  "subtype": _json, "channel_type": _json, "bot_id": _json, "tab": _json, "context": _json},
    ))
    envelope = draw(st.fixed_dictionaries(
        {"type": st.just("event_callback"), "event": st.just(event) | _json},
        optional={"team_id": _json, "enterprise_id": _json, "event_id": _json, "authorizations": _json,
                  "api_app_id": _json},
    ))
    return json.dumps(envelope).encode()


@st.composite
def slack_forms(draw: st.DrawFn) -> bytes:
    if draw(st.booleans()):
        fields = draw(st.dictionaries(
            st.sampled_from(["command", "text", "team_id", "user_id", "channel_id", "enterprise_id", "trigger_id"]),
            st.text(max_size=20), max_size=7))
        fields.setdefault("command", "/agent-limits")
        return urlencode(fields).encode()
    payload = draw(st.fixed_dictionaries(
        {"type": st.sampled_from(["block_actions", "view_submission", "shortcut", "x"])},
        optional={"actions": _json, "user": _json, "team": _json, "channel": _json, "trigger_id": _json,
                  "view": _json, "container": _json, "message": _json},
    ))
    return urlencode({"payload": json.dumps(payload)}).encode()


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(body=slack_events())
async def test_fuzzed_events_never_get_a_500(app: App, body: bytes) -> None:
    assert await post_signed(app, body) in (200, 400)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(body=slack_forms())
async def test_fuzzed_commands_and_buttons_never_get_a_500(app: App, body: bytes) -> None:
    assert await post_signed(app, body, FORM) in (200, 400)
