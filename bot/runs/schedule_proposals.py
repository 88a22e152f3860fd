"""The agent's ``schedule_run`` proposals: an ephemeral message to the run's asker with a Confirm button, and the
proposal kept in Redis until they press it (a day at most). Only that press creates the schedule
(:mod:`bot.receive.listeners.agent_command`), so a page or tool result that talks the model into proposing one
schedules nothing by itself."""

from __future__ import annotations

import secrets
import time

from redis.asyncio import Redis

from bot.errors import InvalidValue, SlackLookupError
from bot.i18n import _
from bot.keys import AppKeys
from bot.redis import as_text, awaited
from bot.thread import mrkdwn
from bot.thread.poster import Poster
from bot.thread.render import SlackMessage
from bot.turn import Target
from bot.workspace import SlackUsers
from bot.workspace.schedules import when

CONFIRM_ACTION_ID = "agent_schedule_confirm"
#: How long a proposal waits for its Confirm.
PROPOSAL_TTL_SECONDS = 24 * 3600


class SlackScheduler:
    """``tools.Scheduler`` for one run: proposals go to its asker, in its thread."""

    def __init__(self, redis: Redis, keys: AppKeys, poster: Poster, target: Target, users: SlackUsers, *,
                 asker: str, min_interval: int) -> None:
        self.redis, self.keys, self.poster, self.target, self.users = redis, keys, poster, target, users
        self.asker = asker
        self.min_interval = min_interval

    async def propose(self, when_text: str, task: str) -> str:
        ws = self.target.conversation.workspace
        try:
            tz = str((await self.users.info(self.poster.client, ws, self.asker)).get("tz") or "UTC")
            cadence = when.parse(when_text, tz=tz, now=time.time(), min_interval=self.min_interval)
        except (InvalidValue, SlackLookupError) as exc:
            return f"Not proposed: {exc}"
        nonce = secrets.token_urlsafe(12)
        key = self.keys.schedule_proposal(ws, nonce)
        async with self.redis.pipeline(transaction=True) as pipe:
            pipe.hset(key, mapping={"channel": self.target.channel_id, "user": self.asker, "when": when_text,
                                    "task": task})
            pipe.expire(key, PROPOSAL_TTL_SECONDS)
            await pipe.execute()
        text = _("Shall I schedule this? *{when}*: {task}").format(when=mrkdwn.escape(cadence.text),
                                                                 task=mrkdwn.escape(mrkdwn.shorten(task, 300)))
        blocks = ({"type": "section", "text": {"type": "mrkdwn", "text": text}},
                  {"type": "actions", "elements": [{
                      "type": "button", "style": "primary", "action_id": CONFIRM_ACTION_ID, "value": nonce,
                      "text": {"type": "plain_text", "text": _("Confirm")}}]})
        if not await self.poster.notify(self.target, self.asker, SlackMessage(text, blocks)):
            return "Not proposed: Slack refused to show the proposal to the person."
        return ("Proposed to the person, who sees a Confirm button: nothing is scheduled unless they press it. "
                "Tell them so in your answer.")


async def take_proposal(redis: Redis, key: str, presser: str) -> dict[str, str] | None:
    """The proposal at ``key`` when ``presser`` is its asker, removed as it is taken (of two presses, one gets
    it); None when it is gone or someone else's."""
    raw = await awaited(redis.hgetall(key))
    proposal = {as_text(k) or "": as_text(v) or "" for k, v in raw.items()}
    if not proposal or proposal.get("user") != presser or not await redis.delete(key):
        return None
    return proposal
