"""Approval requests as Slack messages (pure): the question with its buttons, the reply once decided, and the
answer to a press on a request already decided."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from bot.i18n import _
from bot.runs.approval_state import ApprovalRef, Decision, Verdict
from bot.thread import mrkdwn
from bot.thread.render import ARGUMENTS_LIMIT, SlackMessage, section
from tools import EgressRequest

#: action_ids of the buttons (matched by bot.receive.listeners.actions). "Approve for this run" is offered on the
#: exfiltration guard's questions: every later call of the run to the same destination goes out unasked.
APPROVE_ACTION_ID = "agent_approve"
APPROVE_RUN_ACTION_ID = "agent_approve_run"
DENY_ACTION_ID = "agent_deny"


def request_message(
    tool: str, arguments: Mapping[str, Any], ref: ApprovalRef, requester: str, note: str = ""
) -> SlackMessage:
    """The reply asking for a decision: the tool, its arguments as code, Approve and Deny (``note``: who may decide,
    when a policy says)."""
    head = _(":raised_hand: Approval needed: I want to run {tool} with").format(tool=mrkdwn.inline_code(tool))
    return _asking(head, f"{head}\n{_arguments_block(arguments)}", ref, requester, note=note)


def egress_message(request: EgressRequest, ref: ApprovalRef, requester: str, note: str = "") -> SlackMessage:
    """The exfiltration guard's question: why, the destination by name, exactly what would be sent (a URL's query
    string on a line of its own), and Approve / Approve for this run / Deny."""
    where = request.destination or request.host
    head = _(":raised_hand: Approval needed: {tool} wants to send data to {where}").format(
        tool=mrkdwn.inline_code(request.tool), where=mrkdwn.escape(where))
    lines = [head, mrkdwn.escape(request.reason)]
    if request.url:
        lines.append(_("Where: {location}").format(location=mrkdwn.inline_code(request.location)))
        if request.query:
            lines.append(_(":warning: *Query string* (what it sends): {query}").format(
                query=mrkdwn.inline_code("?" + request.query)))
    else:
        lines.append(_("*What it would send* to {where}:").format(where=mrkdwn.escape(where)))
        lines.append(mrkdwn.code_block(mrkdwn.shorten(request.payload, ARGUMENTS_LIMIT)))
    run_label = mrkdwn.shorten(_("Approve {where} for this run").format(where=where), 75)
    lines.append(_("_{label}_ lets every later call of this run to {where} go out without asking.").format(
        label=mrkdwn.escape(run_label), where=mrkdwn.escape(where)))
    return _asking(head, "\n".join(lines), ref, requester, run_label=run_label, note=note)


def _asking(
    head: str, text: str, ref: ApprovalRef, requester: str, *, run_label: str = "", note: str = ""
) -> SlackMessage:
    who = f"<@{requester}>" if requester else _("the person who asked")
    elements: list[dict[str, Any]] = [
        {"type": "button", "action_id": APPROVE_ACTION_ID, "style": "primary",
         "text": {"type": "plain_text", "text": _("Approve once") if run_label else _("Approve")},
         "value": ref.value()},
    ]
    if run_label:
        elements.append({"type": "button", "action_id": APPROVE_RUN_ACTION_ID,
                         "text": {"type": "plain_text", "text": run_label}, "value": ref.value()})
    elements.append({"type": "button", "action_id": DENY_ACTION_ID, "style": "danger",
                     "text": {"type": "plain_text", "text": _("Deny")}, "value": ref.value()})
    buttons = {"type": "actions", "block_id": "agent_approval", "elements": elements}
    note = note or _("Only {who} or a workspace admin can decide.").format(who=who)
    return SlackMessage(
        mrkdwn.shorten(_("{head} (approve or deny in Slack)").format(head=head), 1_500),
        (section(text), {"type": "context", "elements": [{"type": "mrkdwn", "text": note}]}, buttons),
    )


def decided_message(
    tool: str, arguments: Mapping[str, Any], decision: Decision, *, timeout_seconds: float
) -> SlackMessage:
    """The request's reply once decided: what became of it and who said so, no buttons."""
    name = mrkdwn.inline_code(tool)
    match decision.verdict:
        case Verdict.APPROVED:
            head = _(":white_check_mark: {tool} approved") + _by(decision)
        case Verdict.APPROVED_FOR_RUN:
            head = _(":white_check_mark: {tool} approved for the rest of this run") + _by(decision)
        case Verdict.DENIED:
            head = _(":no_entry_sign: {tool} denied") + _by(decision)
        case Verdict.TIMED_OUT:
            head = _(":hourglass: {tool} timed out after {seconds}s without a decision: denied")
        case Verdict.STOPPED:
            head = _(":octagonal_sign: {tool} not run: the run stopped before a decision")
        case Verdict.FAILED:
            head = _(":warning: {tool} not run: the approval could not be checked (denied)")
    head = head.format(tool=name, seconds=f"{timeout_seconds:.3g}")
    return SlackMessage(head, (section(f"{head}\n{_arguments_block(arguments)}"),))


def _by(decision: Decision) -> str:
    """`` by <@U1>``: who decided (to be formatted with the rest of the line)."""
    who = ", ".join(f"<@{u}>" for u in decision.user.split(",")) if decision.user else ""  # min 2: all of them
    return _(" by {who}").format(who=who) if who else ""


def _arguments_block(arguments: Mapping[str, Any]) -> str:
    args = json.dumps(dict(arguments), indent=2, ensure_ascii=False, sort_keys=True, default=str)
    return mrkdwn.code_block(mrkdwn.shorten(args, ARGUMENTS_LIMIT))


def describe(decision: Decision) -> str:
    """How a press on an already decided request is answered."""
    words = {
        Verdict.APPROVED: _("This approval request was already approved{by}; nothing changed."),
        Verdict.APPROVED_FOR_RUN: _("This approval request was already approved for the run{by}; nothing changed."),
        Verdict.DENIED: _("This approval request was already denied{by}; nothing changed."),
        Verdict.TIMED_OUT: _("This approval request timed out and was denied; nothing changed."),
        Verdict.STOPPED: _("This approval request ended with its run; nothing changed."),
        Verdict.FAILED: _("This approval request is no longer open; nothing changed."),
    }
    return words[decision.verdict].format(by=_by(decision))

