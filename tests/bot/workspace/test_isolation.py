"""Isolation between workspaces: nothing of workspace A (its runs, feedback, limits, App Home) is reachable from
workspace B's buttons, commands or App Home. Already covered elsewhere: a mention in B with A's thread ts starts a
separate conversation (test_runs.py), an approval button of A pressed from B decides nothing (test_approvals.py).

B's views are compared with those of workspace C, which nothing ever happened in: equal means nothing of A leaked.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from tests.bot.conftest import SECRET, App
from tests.bot.service_processes import IN_PROCESS_SECRETS, assert_no_secrets, emitted, final_answers
from tests.fakes.openai_server import FakeOpenAI, delay, text
from tests.fakes.slack_api import FakeSlack
from tests.signing import action_body, command_body, event_body, mention, next_ts, signed_headers

A, B, C = "TA", "TB", "TC"
A_SECRET = "the vault code is 8675309"


async def limits(app: App, team: str, user: str, words: str = "") -> str:
    """``/agent-limits WORDS`` typed by ``user`` of ``team``: the ephemeral answer."""
    body = command_body(command="/agent-limits", text=words, user=user, team_id=team)
    headers = signed_headers(SECRET, body, content_type="application/x-www-form-urlencoded")
    async with app.http.post(f"{app.url}/slack/events", data=body, headers=headers) as resp:
        assert resp.status == 200
        return str((await resp.json())["text"])


async def home(app: App, fake_slack: FakeSlack, team: str, user: str) -> list[dict[str, Any]]:
    before = len(fake_slack.calls_of("views.publish"))
    await app.post_event(event_body({"type": "app_home_opened", "user": user, "channel": "D1", "tab": "home",
                                     "event_ts": next_ts()}, team_id=team))
    calls = await fake_slack.wait_for("views.publish", count=before + 1)
    blocks: list[dict[str, Any]] = calls[-1].params["view"]["blocks"]
    return blocks


def same_but_team(one: str, other: str, ids: tuple[tuple[str, str], ...]) -> bool:
    for mine, theirs in ids:
        other = other.replace(theirs, mine)
    return one == other


async def test_nothing_of_one_workspace_is_reachable_from_another(
    app: App, fake_slack: FakeSlack, fake_openai: FakeOpenAI, caplog: pytest.LogCaptureFixture
) -> None:
    fake_slack.users.update({"UA": {"team_id": A, "is_admin": True}, "UB": {"team_id": B, "is_admin": True},
                             "UC": {"team_id": C, "is_admin": True}})
    # A sets a limit of its own; B and C are untouched.
    assert "7" in await limits(app, A, "UA", "max-steps 7")
    # A's run: held long enough for B to press its Stop button first.
    fake_openai.queue(delay(2, text(f"Noted: {A_SECRET}.")))
    ts = next_ts()
    await app.post_event(event_body(mention(text=f"<@UBOT> remember: {A_SECRET}", ts=ts, team=A, user="UA"),
                                    team_id=A))
    drain = asyncio.create_task(app.drain())
    started = (await fake_slack.wait_for("chat.postMessage", count=1))[0]
    stop = started.params["blocks"][-1]["elements"][0]
    await fake_openai.wait_for_requests(1)
    resp = await app.post_form(action_body(action_id=stop["action_id"], value=stop["value"], user="UB",
                                           team_id=B, message_ts=started.response["ts"], thread_ts=ts))
    assert resp.status == 200
    await drain
    [final] = final_answers(fake_slack, ts)
    assert "`final_answer`" in final and A_SECRET in final  # B's press stopped nothing

    # B presses A's feedback buttons: counted nowhere.
    answer = fake_slack.thread_messages("C1", ts)[-1]
    [buttons] = [e for b in answer.blocks if b["type"] == "context_actions" for e in b["elements"]]
    for value in (buttons["positive_button"]["value"], buttons["negative_button"]["value"]):
        await app.post_form(action_body(action_id=buttons["action_id"], value=value, user="UB", team_id=B,
                                        message_ts=answer.ts, thread_ts=ts))

    shown_a = await limits(app, A, "UA")
    shown_b, shown_c = await limits(app, B, "UB"), await limits(app, C, "UC")
    assert ":+1: 1" not in shown_a and ":-1: 1" not in shown_a, shown_a
    assert same_but_team(shown_c, shown_b, ((C, B), ("UC", "UB"))), (shown_b, shown_c)  # B sees only B
    home_b, home_c = await home(app, fake_slack, B, "UB"), await home(app, fake_slack, C, "UC")
    dumped_b = json.dumps(home_b)
    assert A_SECRET not in dumped_b and ts.replace(".", "") not in dumped_b
    assert same_but_team(json.dumps(home_c), dumped_b, ((C, B), ("UC", "UB"))), (home_b, home_c)
    # ...while A's own views do show its run and its limit.
    assert "Max steps per run: 7" in shown_a and "Max steps per run: 15" in shown_b
    assert "Spent this month: $0.00\n" in shown_b
    assert len(json.dumps(await home(app, fake_slack, A, "UA"))) > len(json.dumps(home_c))
    assert_no_secrets(emitted(caplog.records), fake_slack, fake_openai, IN_PROCESS_SECRETS)
