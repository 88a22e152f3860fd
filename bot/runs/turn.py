"""A turn: one human message to answer, the unit a run runs (stored in its thread's queue, :mod:`bot.queue.turns`)."""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass

from bot.identity import Conversation, Workspace
from bot.thread.poster import Target


@dataclass(frozen=True, slots=True)
class Turn:
    """One human message to answer: the conversation it continues and where to reply.

    Stored as JSON in the thread's ``turns`` hash; the field names are that stored shape.
    """

    thread: str
    """The conversation's id (``Conversation.id``): a channel thread, or a whole DM."""
    turn_id: str
    """The message's ts: unique in its channel, so retries and double deliveries map to one turn."""
    text: str
    user_id: str
    team_id: str
    enterprise_id: str
    channel_id: str
    reply_thread_ts: str
    """The Slack thread the replies go in (a DM conversation spans many)."""
    message_ts: str

    @classmethod
    def of(
        cls, conversation: Conversation, *, turn_id: str, text: str, user_id: str, reply_thread_ts: str,
        message_ts: str,
    ) -> Turn:
        ws = conversation.workspace
        return cls(
            conversation.id, turn_id, text, user_id, ws.team_id, ws.enterprise_id, conversation.channel_id,
            reply_thread_ts, message_ts,
        )

    def to_json(self) -> str:
        return json.dumps(asdict(self), ensure_ascii=False)

    @classmethod
    def from_json(cls, raw: str | bytes) -> Turn:
        return cls(**json.loads(raw))

    @property
    def workspace(self) -> Workspace:
        return Workspace.of(self.team_id, self.enterprise_id)

    @property
    def target(self) -> Target:
        """Where this turn's replies go."""
        return Target(self.team_id, self.enterprise_id, self.channel_id, self.reply_thread_ts, self.message_ts)

    @property
    def run_id(self) -> str:
        # A ts is unique within its channel only: the thread goes in too, so two workspaces' (or channels')
        # runs never share budget holds or trace bindings.
        digest = hashlib.sha256(f"{self.thread}|{self.turn_id}".encode()).hexdigest()[:12]
        return f"run-{self.turn_id}-{digest}"
