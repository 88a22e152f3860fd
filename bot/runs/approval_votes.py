"""A press on a policy's approval card (``approval_park``), checked again at the click: the presser is one of the
approvers the request was made for, the policy is the one it was made under (same version), and the request still
waits. With ``min 2``, approvals of different people are counted (one person pressing twice counts once) and the
one that reaches ``min`` decides; a deny decides at once. Once decided, every copy of the card says who decided
and when, and the parked run's turn is to be queued again (:class:`Vote`'s ``wake``)::

    vote = await cast_vote(redis, keys, client, policies, ws, ref, "U1", Verdict.APPROVED)
    # None: no policy request (the requester-or-admin rules apply); else what to tell the presser, what to wake
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass

from redis.asyncio import Redis
from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from bot import audit
from bot.i18n import _
from bot.identity import Conversation, Workspace
from bot.keys import AppKeys
from bot.redis import as_text
from bot.runs.approval_cards import as_params, settled_message
from bot.runs.approval_messages import describe
from bot.runs.approval_state import KEY_TTL_SECONDS, ApprovalRef, Decision, Verdict, decide
from bot.thread.render import SlackMessage
from bot.workspace.settings import ApprovalPolicies, mention
from bot.workspace.spend import count_approval

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Vote:
    """What became of a press: ``reply`` for the presser alone ("" for none), ``wake`` the turn to queue again."""

    reply: str = ""
    wake: str = ""


async def request_record(redis: Redis, keys: AppKeys, ref: ApprovalRef) -> dict[str, str]:
    raw = await redis.hgetall(keys.approval_request(ref.thread, ref.run_id, ref.request_id))  # type: ignore[misc]
    return {as_text(k) or "": as_text(v) or "" for k, v in raw.items()}


async def cast_vote(
    redis: Redis, keys: AppKeys, client: AsyncWebClient, policies: ApprovalPolicies, ws: Workspace,
    ref: ApprovalRef, user: str, verdict: Verdict,
) -> Vote | None:
    record = await request_record(redis, keys, ref)
    if not record:
        return None
    if user not in json.loads(record["approvers"]):
        who = ", ".join(mention(a) for a in json.loads(record["named"]))
        return Vote(_("Only {who} can decide on this call (the approval policy for `{pattern}` says so); nothing "
                      "changed.").format(who=who, pattern=record["pattern"]))
    current = (await policies.all(ws)).get(record["pattern"])
    if current is None or current.version != record["version"]:
        return Vote(_("The approval policy for `{pattern}` changed after this request was made, so this button no "
                      "longer decides it; nothing changed.").format(pattern=record["pattern"]))
    state = await redis.get(ref.key(keys))
    if state is None or (as_text(state) or "") != "pending":
        return Vote(describe(Decision.from_json(state) if state is not None else Decision(Verdict.FAILED)))
    deciders = [user]
    if verdict is not Verdict.DENIED:
        votes = f"{keys.approval_request(ref.thread, ref.run_id, ref.request_id)}:votes"
        async with redis.pipeline(transaction=True) as pipe:
            pipe.sadd(votes, user)
            pipe.expire(votes, KEY_TTL_SECONDS)
            pipe.smembers(votes)
            *_rest, members = await pipe.execute()
        deciders = sorted(as_text(m) or "" for m in members)
        if len(deciders) < int(record["min"]):
            return Vote(_("Your approval is counted: {n} of the {needed} needed. It runs once enough approve.").format(
                n=len(deciders), needed=record["min"]))
    decision = Decision(verdict, ",".join(deciders))
    standing = await decide(redis, keys, ref, decision)
    if standing is not None:
        return Vote(describe(standing))
    await settle(redis, keys, client, ref, record, settled_message(record["tool"], verdict, deciders, time.time()))
    where = Conversation.parse(ref.thread)
    if verdict is Verdict.DENIED:
        await count_approval(redis, keys, where.workspace, record["tool"], "denied")
    audit.emit("approval.decided", team=where.workspace.team_id, enterprise=where.workspace.enterprise_id or "",
               channel=where.channel_id, run_id=ref.run_id, kind=record["kind"], tool=record["tool"],
               requester=record["requester"], verdict=verdict.value, decided_by=decision.user)
    return Vote(wake=record["turn"])


async def settle(
    redis: Redis, keys: AppKeys, client: AsyncWebClient, ref: ApprovalRef, record: dict[str, str],
    message: SlackMessage,
) -> None:
    """The request is decided: off the expiry list, and every copy of its card (thread, DMs) says how."""
    await redis.zrem(keys.approval_deadlines(), ref.value())
    for channel, ts in json.loads(record.get("copies") or "[]"):
        try:
            await client.chat_update(channel=channel, ts=ts, **as_params(message))
        except (SlackApiError, OSError) as exc:  # the decision stands; a stale card says so when pressed
            log.warning("approval card %s could not be updated: %s", ts, exc)
