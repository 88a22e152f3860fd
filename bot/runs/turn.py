"""A turn: one human message to answer, the unit a run runs (stored in its thread's queue, :mod:`bot.queue.turns`)."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any

from bot.identity import Conversation, Workspace
from bot.thread.poster import Target


@dataclass(frozen=True, slots=True)
class Turn:
    """One human message to answer: the conversation it continues and where to reply.

    Stored as JSON in the thread's ``turns`` hash (``to_json``): the conversation is written out as its id and
    its parts, the shape every version reads (the gate's Lua reads ``user_id`` from it too).
    """

    conversation: Conversation
    """A channel thread, or a whole DM."""
    turn_id: str
    """The message's ts: unique in its channel, so retries and double deliveries map to one turn."""
    text: str
    user_id: str
    reply_thread_ts: str
    """The Slack thread the replies go in (a DM conversation spans many)."""
    message_ts: str

    def to_json(self) -> str:
        conv, ws = self.conversation, self.conversation.workspace
        return json.dumps({
            "thread": conv.id, "turn_id": self.turn_id, "text": self.text, "user_id": self.user_id,
            "team_id": ws.team_id, "enterprise_id": ws.enterprise_id, "channel_id": conv.channel_id,
            "reply_thread_ts": self.reply_thread_ts, "message_ts": self.message_ts,
        }, ensure_ascii=False)

    @classmethod
    def from_json(cls, raw: str | bytes) -> Turn:
        """A stored turn; raises ``ValueError`` or ``TypeError`` for a record this code did not write. The
        conversation is read from its id alone: the copies of its parts beside it are for older readers."""
        record: Any = json.loads(raw)
        if not isinstance(record, dict):
            raise TypeError("a turn record is a JSON object")

        def text(name: str) -> str:
            value = record.get(name)
            if not isinstance(value, str):
                raise TypeError(f"a turn record's {name!r} is a string, got {value!r}")
            return value

        return cls(
            Conversation.parse(text("thread")), text("turn_id"), text("text"), text("user_id"),
            text("reply_thread_ts"), text("message_ts"),
        )

    @property
    def thread(self) -> str:
        """The conversation's id (``Conversation.id``), as the keys, the run ids and the jobs carry it."""
        return self.conversation.id

    @property
    def workspace(self) -> Workspace:
        return self.conversation.workspace

    @property
    def target(self) -> Target:
        """Where this turn's replies go."""
        return Target(self.conversation, self.reply_thread_ts, self.message_ts)

    @property
    def run_id(self) -> str:
        # A ts is unique within its channel only: the thread goes in too, so two workspaces' (or channels')
        # runs never share budget holds or trace bindings.
        digest = hashlib.sha256(f"{self.thread}|{self.turn_id}".encode()).hexdigest()[:12]
        return f"run-{self.turn_id}-{digest}"
