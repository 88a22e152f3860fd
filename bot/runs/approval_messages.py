"""Approval requests as Slack messages (pure): the question with its buttons, the reply once decided, and the
answer to a press on a request already decided."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from bot.runs.approval_state import ApprovalRef, Decision, Verdict
from bot.thread import mrkdwn
from bot.thread.render import ARGUMENTS_LIMIT, SlackMessage
from tools import EgressRequest

#: action_ids of the buttons (matched by bot.receive.listeners.actions). "Approve for this run" is offered on the
#: exfiltration guard's questions: every later call of the run to the same destination goes out unasked.
APPROVE_ACTION_ID = "agent_approve"
APPROVE_RUN_ACTION_ID = "agent_approve_run"
DENY_ACTION_ID = "agent_deny"


def request_message(tool: str, arguments: Mapping[str, Any], ref: ApprovalRef, requester: str) -> SlackMessage:
    """The reply asking for a decision: the tool, its arguments as code, Approve and Deny."""
    head = f":raised_hand: Approval needed: I want to run {mrkdwn.inline_code(tool)} with"
    return _asking(head, f"{head}\n{_arguments_block(arguments)}", ref, requester)


def egress_message(request: EgressRequest, ref: ApprovalRef, requester: str) -> SlackMessage:
    """The exfiltration guard's question: why, the destination by name, exactly what would be sent (a URL's query
    string on a line of its own), and Approve / Approve for this run / Deny."""
    where = request.destination or request.host
    head = (f":raised_hand: Approval needed: {mrkdwn.inline_code(request.tool)} wants to send data to "
            f"{mrkdwn.escape(where)}")
    lines = [head, mrkdwn.escape(request.reason)]
    if request.url:
        lines.append(f"Where: {mrkdwn.inline_code(request.location)}")
        if request.query:
            lines.append(f":warning: *Query string* (what it sends): {mrkdwn.inline_code('?' + request.query)}")
    else:
        lines.append(f"*What it would send* to {mrkdwn.escape(where)}:")
        lines.append(mrkdwn.code_block(mrkdwn.shorten(request.payload, ARGUMENTS_LIMIT)))
    run_label = mrkdwn.shorten(f"Approve {where} for this run", 75)
    lines.append(f"_{mrkdwn.escape(run_label)}_ lets every later call of this run to {mrkdwn.escape(where)} "
                 "go out without asking.")
    return _asking(head, "\n".join(lines), ref, requester, run_label=run_label)


def _asking(head: str, text: str, ref: ApprovalRef, requester: str, *, run_label: str = "") -> SlackMessage:
    who = f"<@{requester}>" if requester else "the person who asked"
    elements: list[dict[str, Any]] = [
        {"type": "button", "action_id": APPROVE_ACTION_ID, "style": "primary",
         "text": {"type": "plain_text", "text": "Approve once" if run_label else "Approve"}, "value": ref.value()},
    ]
    if run_label:
        elements.append({"type": "button", "action_id": APPROVE_RUN_ACTION_ID,
                         "text": {"type": "plain_text", "text": run_label}, "value": ref.value()})
    elements.append({"type": "button", "action_id": DENY_ACTION_ID, "style": "danger",
                     "text": {"type": "plain_text", "text": "Deny"}, "value": ref.value()})
    buttons = {"type": "actions", "block_id": "agent_approval", "elements": elements}
    note = f"Only {who} or a workspace admin can decide."
    return SlackMessage(
        mrkdwn.shorten(f"{head} (approve or deny in Slack)", 1_500),
        (_section(text), {"type": "context", "elements": [{"type": "mrkdwn", "text": note}]}, buttons),
    )


def decided_message(
    tool: str, arguments: Mapping[str, Any], decision: Decision, *, timeout_seconds: float
) -> SlackMessage:
    """The request's reply once decided: what became of it and who said so, no buttons."""
    name = mrkdwn.inline_code(tool)
    by = f" by <@{decision.user}>" if decision.user else ""
    match decision.verdict:
        case Verdict.APPROVED:
            head = f":white_check_mark: {name} approved{by}"
        case Verdict.APPROVED_FOR_RUN:
            head = f":white_check_mark: {name} approved for the rest of this run{by}"
        case Verdict.DENIED:
            head = f":no_entry_sign: {name} denied{by}"
        case Verdict.TIMED_OUT:
            head = f":hourglass: {name} timed out after {timeout_seconds:.3g}s without a decision: denied"
        case Verdict.STOPPED:
            head = f":octagonal_sign: {name} not run: the run stopped before a decision"
        case Verdict.FAILED:
            head = f":warning: {name} not run: the approval could not be checked (denied)"
    return SlackMessage(head, (_section(f"{head}\n{_arguments_block(arguments)}"),))


def _arguments_block(arguments: Mapping[str, Any]) -> str:
    args = json.dumps(dict(arguments), indent=2, ensure_ascii=False, sort_keys=True, default=str)
    return mrkdwn.code_block(mrkdwn.shorten(args, ARGUMENTS_LIMIT))


def _section(text: str) -> dict[str, Any]:
    return {"type": "section", "text": {"type": "mrkdwn", "text": text}}


def describe(decision: Decision) -> str:
    """How a press on an already decided request is answered."""
    by = f" by <@{decision.user}>" if decision.user else ""
    words = {
        Verdict.APPROVED: f"was already approved{by}",
        Verdict.APPROVED_FOR_RUN: f"was already approved for the run{by}",
        Verdict.DENIED: f"was already denied{by}",
        Verdict.TIMED_OUT: "timed out and was denied",
        Verdict.STOPPED: "ended with its run",
        Verdict.FAILED: "is no longer open",
    }
    return f"This approval request {words[decision.verdict]}; nothing changed."

