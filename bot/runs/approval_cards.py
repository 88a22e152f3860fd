"""The cards of approvals under a policy (pure): who may decide, the approver's DM copy with a link to the thread,
and what every copy says once decided or expired."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from bot.i18n import _
from bot.runs.approval_state import Verdict
from bot.thread import mrkdwn
from bot.thread.render import SlackMessage
from bot.workspace.settings import ApprovalPolicy, duration_text


def policy_note(policy: ApprovalPolicy) -> str:
    """The card's line on who may decide (the policy's approvers only), how many, and for how long."""
    return _("Only {who} can decide ({n} needed); it waits up to {wait}, then it is denied.").format(
        who=policy.who(), n=policy.min, wait=duration_text(policy.timeout_seconds))


def dm_message(card: SlackMessage, permalink: str) -> SlackMessage:
    """The approver's copy: the same card, with a link to the thread it was asked in."""
    if not permalink:
        return card
    link = {"type": "context", "elements": [{"type": "mrkdwn", "text": _("<{link}|Open the thread>").format(
        link=permalink)}]}
    return SlackMessage(card.text, (*card.blocks[:-1], link, *card.blocks[-1:]))


def as_params(message: SlackMessage) -> dict[str, Any]:
    return {"text": message.text, "blocks": list(message.blocks)}


def settled_message(tool: str, verdict: Verdict, deciders: Sequence[str], at: float) -> SlackMessage:
    """Every copy of a request once it is decided (who, and when, in the reader's time zone) or expired."""
    name = mrkdwn.inline_code(tool)
    when = f"<!date^{int(at)}^{{date_short_pretty}} {{time}}|{int(at)}>"
    who = ", ".join(f"<@{u}>" for u in deciders)
    match verdict:
        case Verdict.APPROVED | Verdict.APPROVED_FOR_RUN:
            head = _(":white_check_mark: {tool} approved by {who} at {when}")
        case Verdict.DENIED:
            head = _(":no_entry_sign: {tool} denied by {who} at {when}")
        case Verdict.TIMED_OUT:
            head = _(":hourglass: {tool} expired without a decision at {when}: denied")
        case _:
            head = _(":octagonal_sign: {tool} not run: the run stopped before a decision")
    text = head.format(tool=name, who=who, when=when)
    return SlackMessage(text, ({"type": "section", "text": {"type": "mrkdwn", "text": text}},))
