"""Approvals in Slack: a tool marked ``needs_approval`` waits for the requester (or an admin) to press a button.

``SlackApprover`` implements the ``tools.Approver`` port for one run. Asked about a call, it marks the request
pending in Redis, posts a reply in the run's thread (tool name, arguments as code, Approve and Deny buttons)
and waits for the decision, which the button handler (``bot.receive.listeners.actions``) records with ``decide``::

    approver = SlackApprover(redis, keys, poster, target, thread=thread, run_id=run_id, requester="U1",
                             timeout_seconds=300, deadline=time.monotonic() + limits.max_seconds)
    scope = ToolContext(..., approver=approver)

One key per request (``AppKeys.approval``) is both the state and the pub/sub channel: ``pending``, then exactly one
decision (approved, denied, timed out, stopped, failed) set by a compare-and-set script that also publishes it,
so a press racing the timeout either wins (and is honoured) or finds the request closed. The approval reply is
edited once, by the approver, to say what was decided and by whom, buttons removed. Everything that is not an
approval is a refusal: a deny, the timeout, a Redis or Slack error (fail closed).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import re
import secrets
import time
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from redis.asyncio import Redis
from redis.asyncio.client import PubSub
from redis.exceptions import RedisError

from bot.identity import Conversation
from bot.keys import AppKeys
from bot.thread import mrkdwn
from bot.thread.poster import Poster, Target
from bot.thread.render import ARGUMENTS_LIMIT, SlackMessage
from tools import EgressAnswer, EgressRequest, ToolContext

log = logging.getLogger(__name__)

#: action_ids of the buttons (matched by bot.receive.listeners.actions). "Approve for this run" is offered on the
#: exfiltration guard's questions: every later call of the run to the same destination goes out unasked.
APPROVE_ACTION_ID = "agent_approve"
APPROVE_RUN_ACTION_ID = "agent_approve_run"
DENY_ACTION_ID = "agent_deny"
#: How long a request's state outlives it, so a late press is told what became of it.
KEY_TTL_SECONDS = 24 * 3600
#: When the run ends with requests still open, how long ``aclose`` waits for their replies to be edited.
CLOSE_WAIT_SECONDS = 5.0
_PENDING = "pending"
_VALUE_SEP = "|"
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
        return _VALUE_SEP.join((self.thread, self.run_id, self.request_id))

    @classmethod
    def parse(cls, value: object) -> ApprovalRef:
        """Read a button value back; ValueError for anything this service did not write."""
        if not isinstance(value, str):
            raise ValueError(f"approval value must be text, got {type(value).__name__}")
        parts = value.split(_VALUE_SEP)
        if len(parts) != 3:
            raise ValueError(f"approval value must be thread|run|request, got {value[:200]!r}")
        thread, run_id, request_id = parts
        Conversation.parse(thread)
        if not _RUN_ID.fullmatch(run_id) or not _REQUEST_ID.fullmatch(request_id):
            raise ValueError(f"approval value names no run and request: {value[:200]!r}")
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


class SlackApprover:
    """The ``Approver`` of one run: asks in the run's thread, waits for a press, fails closed."""

    def __init__(
        self,
        redis: Redis,
        keys: AppKeys,
        poster: Poster,
        target: Target,
        *,
        thread: str,
        run_id: str,
        requester: str,
        timeout_seconds: float,
        deadline: float,
    ) -> None:
        """``deadline`` is the run's end on ``time.monotonic``'s clock: no request waits beyond it."""
        self._redis = redis
        self._keys = keys
        self._poster = poster
        self._target = target
        self._thread = thread
        self._run_id = run_id
        self._requester = requester
        self._timeout = timeout_seconds
        self._deadline = deadline
        # Parallel calls ask at once: their replies are posted one after another, in call order.
        self._posting = asyncio.Lock()
        self._closed = asyncio.Event()
        self._open: set[asyncio.Future[None]] = set()

    async def approve(self, tool: str, arguments: Mapping[str, Any], ctx: ToolContext) -> bool:
        decision = await self._ask(tool, arguments,
                                   lambda ref: request_message(tool, arguments, ref, self._requester))
        return decision.verdict is Verdict.APPROVED  # "for this run" is never offered here

    async def approve_egress(self, request: EgressRequest, ctx: ToolContext) -> EgressAnswer:
        """The exfiltration guard's question (mode ``approve``): the destination, exactly what would be sent,
        and Approve / Approve for this run / Deny."""
        decision = await self._ask(request.tool, request.arguments,
                                   lambda ref: egress_message(request, ref, self._requester))
        return {Verdict.APPROVED: EgressAnswer.ONCE,
                Verdict.APPROVED_FOR_RUN: EgressAnswer.RUN}.get(decision.verdict, EgressAnswer.DENY)

    async def _ask(
        self, tool: str, arguments: Mapping[str, Any], message: Callable[[ApprovalRef], SlackMessage]
    ) -> Decision:
        timeout = min(self._timeout, self._deadline - time.monotonic())
        if timeout <= 0 or self._closed.is_set():
            return Decision(Verdict.FAILED)
        ref = ApprovalRef(self._thread, self._run_id, secrets.token_hex(8))
        finished: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._open.add(finished)
        ts: str | None = None
        decision = Decision(Verdict.FAILED)
        try:
            async with self._listening(ref.key(self._keys)) as pubsub:
                await self._redis.set(ref.key(self._keys), _PENDING, ex=KEY_TTL_SECONDS)
                async with self._posting:
                    ts = await self._poster.post(self._target, message(ref))
                if ts is None:
                    log.warning("approval request for %s could not be posted: refused", tool)
                    return Decision(Verdict.FAILED)
                decision = await self._wait(ref, pubsub, timeout)
        except (RedisError, OSError) as exc:
            log.warning("approval of %s failed (%s): refused", tool, exc)
        except asyncio.CancelledError:
            decision = Decision(Verdict.STOPPED)  # the Stop button or the run's wall clock
            raise
        finally:
            try:
                if ts is not None:
                    await asyncio.shield(self._settle(ref, ts, tool, arguments, decision, timeout))
            finally:
                finished.set_result(None)
                self._open.discard(finished)
        return decision

    async def aclose(self) -> None:
        """The run ended: close open requests (refused) and wait briefly for their replies to be edited."""
        self._closed.set()
        if self._open:
            await asyncio.wait(set(self._open), timeout=CLOSE_WAIT_SECONDS)

    @contextlib.asynccontextmanager
    async def _listening(self, key: str) -> AsyncIterator[PubSub]:
        pubsub = self._redis.pubsub()
        try:
            # Subscribed before the request exists, so no decision can be published unseen.
            await pubsub.subscribe(key)
            yield pubsub
        finally:
            with contextlib.suppress(RedisError, OSError):
                await pubsub.aclose()  # type: ignore[no-untyped-call]

    async def _wait(self, ref: ApprovalRef, pubsub: PubSub, timeout: float) -> Decision:
        reader = asyncio.ensure_future(_next_decision(pubsub))
        closed = asyncio.ensure_future(self._closed.wait())
        try:
            await asyncio.wait({reader, closed}, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
        finally:
            reader.cancel()
            closed.cancel()
            await asyncio.gather(reader, closed, return_exceptions=True)
        if reader.done() and not reader.cancelled():
            return reader.result()  # a Redis error while listening is raised here: a refusal
        # Nobody decided in time (or the run ended): close the request, unless a press got there first.
        ending = Decision(Verdict.STOPPED if self._closed.is_set() else Verdict.TIMED_OUT)
        return await decide(self._redis, self._keys, ref, ending) or ending

    async def _settle(
        self, ref: ApprovalRef, ts: str, tool: str, arguments: Mapping[str, Any], decision: Decision, timeout: float
    ) -> None:
        """Close the request if it is still open and edit its reply once, saying what happened; never raises."""
        try:
            with contextlib.suppress(RedisError, OSError):
                # A press arriving now is too late: the call already has its answer (this ``decision``).
                await decide(self._redis, self._keys, ref, decision)
            message = decided_message(tool, arguments, decision, timeout_seconds=timeout)
            if not await self._poster.update(self._target, ts, message):
                log.warning("approval reply %s could not be edited to %s", ts, decision.verdict.value)
        except Exception:  # the decision stands; a failed edit must not turn into a tool error
            log.exception("approval reply %s could not be edited", ts)


async def _next_decision(pubsub: PubSub) -> Decision:
    while True:
        message = await pubsub.get_message(ignore_subscribe_messages=True, timeout=None)
        if message is not None and message.get("type") == "message":
            return Decision.from_json(message["data"])


# --------------------------------------------------------------------------------------------- rendering
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

