"""Approvals under a policy (``/agent-limits approvals``): the request is made once, shown in the thread and in each
approver's DM, and the run is parked (``tools.Parked``) until they decide or the policy's timeout passes.

A request's id comes from the run, the step and the call, so the resumed run, asking about the same call again,
finds the decision instead of asking twice. Its record (``AppKeys.approval_request``) holds who may decide (the
people the policy named, groups read with ``usergroups.users.list`` now), how many must, the policy's version, the
deadline and every copy of the card; the decision itself is the request's ``approval`` key, set once
(``approval_state.decide``) by the deciding press (``approval_votes``) or the expiry (``bot.queue.approval_expiry``),
which then queue the run again. An approved call runs once: the first runner to reach it after the decision takes
it (``SET NX``); a second one (after a crash in the call) is refused rather than repeating it.
"""

from __future__ import annotations

import hashlib
import json
import logging
import time
from collections.abc import Callable, Mapping
from typing import Any

from redis.asyncio import Redis
from slack_sdk.errors import SlackApiError

from bot import audit
from bot.identity import Conversation
from bot.keys import AppKeys
from bot.redis import as_text
from bot.runs.approval_cards import as_params, dm_message, policy_note, settled_message
from bot.runs.approval_state import KEY_TTL_SECONDS, ApprovalRef, Decision, Verdict, decide
from bot.runs.approval_votes import request_record, settle
from bot.thread.poster import Poster
from bot.thread.render import SlackMessage
from bot.turn import Turn
from bot.workspace.settings import ApprovalPolicy, GroupLookupError, UnknownGroup, members
from bot.workspace.spend import count_approval
from tools import Parked, ToolContext

log = logging.getLogger(__name__)
_PENDING = b"pending"
#: The run's ledger field of each request it made (``approval:<request id>``), so its end closes them.
_MADE = "approval:"


def request_id(run_id: str, step: int, kind: str, tool: str, arguments: Mapping[str, Any]) -> str:
    """The same for the same call of the same step of a run: what a resumed run finds its decision by."""
    args = json.dumps(dict(arguments), sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(f"{run_id}|{step}|{kind}|{tool}|{args}".encode()).hexdigest()[:16]


class PolicyApprovals:
    """One run's requests under approval policies."""

    def __init__(self, redis: Redis, keys: AppKeys, poster: Poster, turn: Turn, *, run_id: str) -> None:
        self._redis = redis
        self._keys = keys
        self._poster = poster
        self._target = turn.target
        self._thread = turn.thread
        self._run_id = run_id
        self._turn_id = turn.turn_id
        self._requester = turn.user_id

    async def ask(
        self, kind: str, tool: str, arguments: Mapping[str, Any], ctx: ToolContext, policy: ApprovalPolicy,
        card: Callable[[ApprovalRef, str], SlackMessage],
    ) -> Decision:
        """The decision on this call; raises ``Parked`` while there is none. ``card(ref, note)``: the request."""
        ref = ApprovalRef(self._thread, self._run_id, request_id(self._run_id, ctx.step, kind, tool, arguments))
        standing = await self._redis.get(ref.key(self._keys))
        if standing is None:
            await self._open(ref, kind, tool, policy)
            standing = _PENDING
        if as_text(standing) == _PENDING.decode():
            record = await self._redis.hmget(self._keys.approval_request(*_parts(ref)), ["deadline", "copies"])  # type: ignore[misc]
            if record[1] is None:  # made, but its cards are not out (the run's first ask, or a crash in between)
                await self._post(ref, policy, card)
            deadline = float(record[0] or 0)
            if deadline and time.time() >= deadline:  # the expiry has not come round yet: decide it here
                ended = Decision(Verdict.TIMED_OUT)
                return await decide(self._redis, self._keys, ref, ended) or ended
            raise Parked(f"{tool} waits for {policy.who()}")
        decision = Decision.from_json(standing)
        if decision.verdict in (Verdict.APPROVED, Verdict.APPROVED_FOR_RUN):
            ran = await self._redis.set(f"{ref.key(self._keys)}:ran", "1", nx=True, ex=KEY_TTL_SECONDS)
            if not ran:  # a runner before this one took the call (and died in it): never twice
                log.warning("approved call %s of run %s was taken before; refused now", tool, self._run_id)
                return Decision(Verdict.FAILED)
        return decision

    async def _open(self, ref: ApprovalRef, kind: str, tool: str, policy: ApprovalPolicy) -> None:
        """Make the request: who may decide (read now), how many, under which policy version, until when; its
        record exists before it can be decided, so no press is ever judged by other rules."""
        try:
            people = sorted(await members(self._poster.client, policy.approvers))
        except (UnknownGroup, GroupLookupError) as exc:
            log.warning("approvers of %s could not be read (%s): refused", tool, exc)
            raise ApproversUnreadable(str(exc)) from exc
        deadline = time.time() + policy.timeout_seconds
        key = self._keys.approval_request(*_parts(ref))
        async with self._redis.pipeline(transaction=True) as pipe:
            pipe.hset(key, mapping={
                "tool": tool, "kind": kind, "requester": self._requester, "turn": self._turn_id,
                "pattern": policy.pattern, "version": policy.version, "min": policy.min,
                "approvers": json.dumps(people), "named": json.dumps(list(policy.approvers)), "deadline": deadline,
            })
            pipe.expire(key, int(policy.timeout_seconds + KEY_TTL_SECONDS))
            pipe.set(ref.key(self._keys), _PENDING, ex=int(policy.timeout_seconds + KEY_TTL_SECONDS))
            pipe.zadd(self._keys.approval_deadlines(), {ref.value(): deadline})
            await pipe.execute()
        await self._redis.hset(self._keys.run(self._thread, self._run_id), f"{_MADE}{ref.request_id}", "1")  # type: ignore[misc]
        where = Conversation.parse(self._thread)
        await count_approval(self._redis, self._keys, where.workspace, tool, "held")
        audit.emit("approval.requested", team=where.workspace.team_id, enterprise=where.workspace.enterprise_id or "",
                   channel=where.channel_id, run_id=self._run_id, kind=kind, tool=tool, requester=self._requester,
                   policy=policy.pattern, approvers=people, min=policy.min)

    async def _post(self, ref: ApprovalRef, policy: ApprovalPolicy, card: Callable[[ApprovalRef, str], SlackMessage],
                    ) -> None:
        """The card in the thread and in each approver's DM (with a link to the thread); every copy kept."""
        note = policy_note(policy)
        key = self._keys.approval_request(*_parts(ref))
        people = json.loads(await self._redis.hget(key, "approvers") or "[]")  # type: ignore[misc]
        ts = await self._poster.post(self._target, card(ref, note))
        copies: list[list[str]] = [[self._target.channel_id, ts]] if ts else []
        link = await self._permalink(ts) if ts else ""
        for person in people:
            try:
                sent = await self._poster.client.chat_postMessage(
                    channel=person, **as_params(dm_message(card(ref, note), link)))
                copies.append([str(sent["channel"]), str(sent["ts"])])
            except (SlackApiError, OSError) as exc:
                log.warning("approval DM to an approver failed: %s", exc)
        await self._redis.hset(key, "copies", json.dumps(copies))  # type: ignore[misc]

    async def close_open(self) -> None:
        """Close the requests this run made that are still undecided (the run ended without them: Stop, its time
        cap): decided ``stopped``, and every copy of their cards says so."""
        made = await self._redis.hkeys(self._keys.run(self._thread, self._run_id))  # type: ignore[misc]
        for field in made:
            name = field.decode() if isinstance(field, bytes) else str(field)
            if not name.startswith(_MADE):
                continue
            ref = ApprovalRef(self._thread, self._run_id, name.removeprefix(_MADE))
            if await decide(self._redis, self._keys, ref, Decision(Verdict.STOPPED)) is None:
                record = await request_record(self._redis, self._keys, ref)
                await settle(self._redis, self._keys, self._poster.client, ref, record,
                             settled_message(record.get("tool", ""), Verdict.STOPPED, (), time.time()))

    async def _permalink(self, ts: str) -> str:
        try:
            found = await self._poster.client.chat_getPermalink(channel=self._target.channel_id, message_ts=ts)
            return str(found.get("permalink") or "")
        except (SlackApiError, OSError):
            return ""


class ApproversUnreadable(Exception):
    """The request could not be made (who may approve could not be read): the call is refused."""


def _parts(ref: ApprovalRef) -> tuple[str, str, str]:
    return ref.thread, ref.run_id, ref.request_id
