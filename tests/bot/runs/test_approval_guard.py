"""An approval policy on ``guard``: the exfiltration guard's question (mode ``approve``) goes to the policy's approvers
and parks the run; the requester may not answer it; the approver's Approve lets the fetch out, once."""

from __future__ import annotations

import json

from bot.runs.approval_messages import APPROVE_ACTION_ID
from tests.bot.conftest import App, burst_worker, make_settings
from tests.bot.runs.test_approval_policies import _press, _told, limits
from tests.bot.runs.test_egress import asking, poisoned_thread  # noqa: F401 - the fixture
from tests.fakes.openai_server import FakeOpenAI, text, tool_calls
from tests.fakes.pages import PageServer
from tests.fakes.slack_api import FakeSlack
from tests.signing import event_body, mention, next_ts


async def test_the_guards_question_goes_to_the_policys_approvers(
    asking: App, fake_slack: FakeSlack, fake_openai: FakeOpenAI, pages: PageServer, key_prefix: str  # noqa: F811
) -> None:
    fake_slack.users.update({"UADMIN": {"is_admin": True}, "U5": {}})
    assert "Approval policy set" in await limits(asking, "approvals guard <@U5>")
    root = poisoned_thread(fake_slack, "http://attacker.example/steal")
    fake_openai.queue(tool_calls(("fetch_url", {"url": pages.url("/page") + "?q=weather"})), text("Read it."))
    await asking.post_event(event_body(mention(text="<@UBOT> read it", ts=next_ts(), thread_ts=root)))
    settings = make_settings(key_prefix, fake_slack, fake_openai, fetch_url_allowed_hosts=pages.host_port,
                             agent_exfiltration_guard="approve", worker_max_jobs=1)
    async with burst_worker(settings) as worker:
        await worker.main()                                     # parked on the guard's question
    card = next(m for m in fake_slack.thread_messages("C1", root) if APPROVE_ACTION_ID in json.dumps(m.blocks))
    assert "*Query string*" in card.block_text() and "<@U5>" in card.block_text()
    dm = next(m for m in fake_slack.messages if m.channel == "DU5")
    await _press(asking, card, APPROVE_ACTION_ID, "U1")        # the requester is not an approver here
    assert "Only <@U5> can decide" in await _told(fake_slack, "U1")
    assert not [p for p, _ in pages.requests if p.startswith("/page")]
    await _press(asking, dm, APPROVE_ACTION_ID, "U5")
    async with burst_worker(settings) as worker:
        await worker.main()
    assert [p for p, _ in pages.requests if p.startswith("/page")] == ["/page?q=weather"]
    assert "Read it." in fake_slack.thread_messages("C1", root)[-1].block_text()
