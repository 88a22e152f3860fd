"""Interactivity: the Stop button and the approval buttons, each for the run's requester or a workspace admin.

Stop ends its run with ``cancelled``; Approve/Deny decide one pending tool call (``bot.runs.approvals``). Anyone else
is told so privately and nothing changes.
"""

from __future__ import annotations

import logging
from typing import Any

from redis.exceptions import RedisError
from slack_bolt.async_app import AsyncApp
from slack_bolt.context.ack.async_ack import AsyncAck
from slack_bolt.context.async_context import AsyncBoltContext

from bot import identity
from bot.i18n import _, speaking
from bot.identity import Conversation
from bot.queue.parked import parked_turn, wake
from bot.queue.turns import request_cancel
from bot.receive.deps import Services
from bot.receive.listeners.control import may_control
from bot.runs.approval_messages import APPROVE_ACTION_ID, APPROVE_RUN_ACTION_ID, DENY_ACTION_ID, describe
from bot.runs.approval_state import ApprovalRef, Decision, Verdict, decide
from bot.runs.approval_votes import cast_vote
from bot.thread.render import STOP_ACTION_ID
from bot.thread.stop_text import pressed_by
from bot.turn import RunRef
from bot.workspace.admin import SlackUsers
from bot.workspace.settings import ApprovalPolicies

log = logging.getLogger(__name__)
_VERDICTS = {APPROVE_ACTION_ID: Verdict.APPROVED, APPROVE_RUN_ACTION_ID: Verdict.APPROVED_FOR_RUN}


def register(app: AsyncApp, services: Services, users: SlackUsers, policies: ApprovalPolicies) -> None:
    """The buttons; ``users`` is the process's admin list and users.info cache, ``policies`` the
    workspaces' approval policies."""

    @app.action(STOP_ACTION_ID)
    async def on_stop(ack: AsyncAck, body: dict[str, Any], context: AsyncBoltContext) -> None:
        await ack()
        # What the presser is told is in their language (the users.info answer the admin check reads anyway).
        with speaking(await users.locale(context.client, identity.workspace(context), _who(body)[0])):
            await _stop_pressed(services, users, context, body)

    async def on_decision(ack: AsyncAck, body: dict[str, Any], context: AsyncBoltContext) -> None:
        await ack()
        with speaking(await users.locale(context.client, identity.workspace(context), _who(body)[0])):
            await _decision(services, users, policies, context, body)

    app.action(APPROVE_ACTION_ID)(on_decision)
    app.action(APPROVE_RUN_ACTION_ID)(on_decision)
    app.action(DENY_ACTION_ID)(on_decision)


async def _stop_pressed(services: Services, users: SlackUsers, context: AsyncBoltContext, body: dict[str, Any]) -> None:
    """Stop: the run's requester or an admin stops it, from the workspace it belongs to."""
    action = _action(body)
    user, channel = _who(body)
    try:
        run = RunRef.parse(action.get("value"))
    except ValueError:
        log.warning("Stop button with a malformed value ignored")
        return
    if run.workspace != identity.workspace(context):
        log.warning("Stop button for another workspace's thread ignored")
        return  # a run is stopped only from the workspace it belongs to
    if not await _may_control(services, users, context, run.thread, run.run_id, user, channel, _("stop this run")):
        return
    await _stop(services, run.thread, run.run_id, user)


async def _decision(
    services: Services, users: SlackUsers, policies: ApprovalPolicies, context: AsyncBoltContext, body: dict[str, Any]
) -> None:
    """Approve, Approve for this run or Deny: a policy's approvers vote, else the requester or an admin decides."""
    action = _action(body)
    user, channel = _who(body)
    try:
        ref = ApprovalRef.parse(action.get("value"))
    except ValueError as exc:
        log.warning("approval button with a malformed value: %s", exc)
        await _tell(context, channel, user, _("This approval button is malformed; nothing was decided."))
        return
    if Conversation.parse(ref.thread).workspace != identity.workspace(context):
        await _tell(context, channel, user, _("This approval belongs to another workspace; nothing was decided."))
        return
    verdict = _VERDICTS.get(str(action.get("action_id")), Verdict.DENIED)
    try:
        if await _policy_vote(services, policies, context, ref, user, channel, verdict):
            return  # the request was made under a policy: its approvers decide
        if not await _may_control(
            services, users, context, ref.thread, ref.run_id, user, channel, _("approve or deny this tool call"),
        ):
            return
        standing = await decide(services.redis, services.keys, ref, Decision(verdict, user))
    except RedisError as exc:
        log.warning("approval decision not recorded: %s", exc)
        await _tell(context, channel, user, _("Your decision could not be recorded; please try again."))
        return
    if standing is not None:
        await _tell(context, channel, user, describe(standing))


async def _stop(services: Services, thread: str, run_id: str, user: str) -> None:
    """Stop the run; a parked one has no worker watching its Stop flag: it is queued, and stops as it starts."""
    await request_cancel(services.redis, services.keys, thread, run_id, pressed_by(user))
    if turn_id := await parked_turn(services.redis, services.keys, thread, run_id):
        await wake(services.queue, services.keys, thread, turn_id, "stop")


async def _policy_vote(
    services: Services, policies: ApprovalPolicies, context: AsyncBoltContext, ref: ApprovalRef, user: str,
    channel: str, verdict: Verdict,
) -> bool:
    """A press on a policy's request (``bot.runs.approval_votes``): told privately, the run woken once decided;
    False when the request was made under no policy."""
    vote = await cast_vote(services.redis, services.keys, context.client, policies,
                           identity.workspace(context), ref, user, verdict)
    if vote is None:
        return False
    if vote.reply:
        await _tell(context, channel, user, vote.reply)
    if vote.wake:
        await wake(services.queue, services.keys, ref.thread, vote.wake, ref.request_id)
    return True


def _action(body: dict[str, Any]) -> dict[str, Any]:
    actions = body.get("actions")
    first = actions[0] if isinstance(actions, list) and actions else None
    return first if isinstance(first, dict) else {}


def _who(body: dict[str, Any]) -> tuple[str, str]:
    """(the presser's user id, the channel of the message pressed)."""
    return str((body.get("user") or {}).get("id") or ""), str((body.get("channel") or {}).get("id") or "")


async def _may_control(
    services: Services, users: SlackUsers, context: AsyncBoltContext, thread: str, run_id: str, user: str,
    channel: str, what: str,
) -> bool:
    """The run's requester or a workspace admin; anyone else is told privately (False)."""
    ws = identity.workspace(context)
    refusal = await may_control(services, users, context.client, ws, thread, run_id, user, what)
    if refusal is not None:
        await _tell(context, channel, user, refusal)
    return refusal is None


async def _tell(context: AsyncBoltContext, channel: str, user: str, text: str) -> None:
    if channel and user:
        await context.client.chat_postEphemeral(channel=channel, user=user, text=text)
