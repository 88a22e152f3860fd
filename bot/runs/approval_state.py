"""An approval request's state in Redis: one key per request, both its state and its pub/sub channel.

The key (``AppKeys.approval``) holds ``pending``, then exactly one decision (approved, denied, timed out, stopped,
failed) set by a compare-and-set script that also publishes it, so a press racing the timeout either wins (and is
honoured) or finds the request closed. A button's value (``ApprovalRef``) names the request, so any web process
can route a press::

    ref = ApprovalRef(thread, run_id, secrets.token_hex(8))
    await open_request(redis, keys, ref)                     # pending (subscribe to ref.key(keys) first)
    await decide(redis, keys, ref, Decision(Verdict.DENIED, "U1"))   # None: decided now; else what stands
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from enum import StrEnum

from redis.asyncio import Redis
from redis.asyncio.client import PubSub

from bot.identity import Conversation
from bot.keys import AppKeys
from bot.turn import join_id, split_id

#: How long a request's state outlives it, so a late press is told what became of it.
KEY_TTL_SECONDS = 24 * 3600
_PENDING = "pending"
_RUN_ID = re.compile(r"[A-Za-z0-9._-]{1,80}")
_REQUEST_ID = re.compile(r"[0-9a-f]{16}")

# Decide a pending request: set ARGV[2] (the decision) and publish it. Returns 1 when this call decided,
# else the current value (an earlier decision), or nil when there is no such request.
_DECIDE = """
local current = redis.call('GET', KEYS[1])
if current ~= ARGV[1] then return current end
redis.call('SET', KEYS[1], ARGV[2], 'EX', ARGV[3])
redis.call('PUBLISH', KEYS[1], ARGV[2])
return 1
"""


class Verdict(StrEnum):
    """What became of a request; only ``approved`` lets the call run."""

    APPROVED = "approved"
    #: Approved, and the same destination for the rest of the run (the guard's questions only).
    APPROVED_FOR_RUN = "approved_for_run"
    DENIED = "denied"
    TIMED_OUT = "timed_out"
    STOPPED = "stopped"
    FAILED = "failed"


@dataclass(frozen=True, slots=True)
class Decision:
    """One request's outcome, as stored in its key and published on it."""

    verdict: Verdict
    #: Who pressed the button (empty for a timeout, a stopped run or a failure).
    user: str = ""

    def to_json(self) -> str:
        return json.dumps({"verdict": self.verdict.value, "user": self.user})

    @classmethod
    def from_json(cls, raw: bytes | str) -> Decision:
        """The stored decision; anything unreadable counts as a failure (a refusal)."""
        try:
            data = json.loads(raw)
            return cls(Verdict(data["verdict"]), str(data.get("user") or ""))
        except (ValueError, TypeError, KeyError):
            return cls(Verdict.FAILED)


@dataclass(frozen=True, slots=True)
class ApprovalRef:
    """Names one request: the buttons' value, so any web process can route a press."""

    thread: str
    run_id: str
    request_id: str

    def value(self) -> str:
        return join_id(self.thread, self.run_id, self.request_id)

    @classmethod
    def parse(cls, value: object) -> ApprovalRef:
        """Read a button value back; ValueError for anything this service did not write."""
        thread, run_id, request_id = split_id(value, "thread|run|request")
        Conversation.parse(thread)
        if not _RUN_ID.fullmatch(run_id) or not _REQUEST_ID.fullmatch(request_id):
            raise ValueError(f"approval value names no run and request: {join_id(run_id, request_id)[:200]!r}")
        return cls(thread, run_id, request_id)

    def key(self, keys: AppKeys) -> str:
        return keys.approval(self.thread, self.run_id, self.request_id)


async def decide(redis: Redis, keys: AppKeys, ref: ApprovalRef, decision: Decision) -> Decision | None:
    """Record ``decision`` if the request is still pending: None when it was, else what stands (a closed
    request that never existed here reads as ``failed``)."""
    script = redis.register_script(_DECIDE)
    result = await script(keys=[ref.key(keys)], args=[_PENDING, decision.to_json(), KEY_TTL_SECONDS])
    if result == 1:
        return None
    return Decision.from_json(result) if result is not None else Decision(Verdict.FAILED)


async def open_request(redis: Redis, keys: AppKeys, ref: ApprovalRef) -> None:
    """Mark ``ref`` pending: from now on exactly one :func:`decide` wins."""
    await redis.set(ref.key(keys), _PENDING, ex=KEY_TTL_SECONDS)


async def next_decision(pubsub: PubSub) -> Decision:
    """The next decision published on the request's key (the caller subscribed to it)."""
    while True:
        message = await pubsub.get_message(ignore_subscribe_messages=True, timeout=None)
        if message is not None and message.get("type") == "message":
            return Decision.from_json(message["data"])
