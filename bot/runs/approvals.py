"""Approvals in Slack: a tool marked ``needs_approval`` waits for the requester (or an admin) to press a button.

``SlackApprover`` implements the ``tools.Approver`` port for one run. Asked about a call, it marks the request
pending in Redis (``approval_state``), posts a reply in the run's thread (``approval_messages``: tool name,
arguments as code, Approve and Deny buttons) and waits for the decision, which the button handler
(``bot.receive.listeners.actions``) records with ``decide``::

    approver = SlackApprover(redis, keys, poster, target, thread=thread, run_id=run_id, requester="U1",
                             timeout_seconds=300, deadline=time.monotonic() + limits.max_seconds)
    scope = ToolContext(..., approver=approver)

The approval reply is edited once, by the approver, to say what was decided and by whom, buttons removed.
Everything that is not an approval is a refusal: a deny, the timeout, a Redis or Slack error (fail closed).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from typing import Any, Literal

from redis.asyncio import Redis
from redis.asyncio.client import PubSub
from redis.exceptions import RedisError

from bot import audit
from bot.identity import Conversation
from bot.keys import AppKeys
from bot.runs.approval_messages import decided_message, egress_message, request_message
from bot.runs.approval_park import ApproversUnreadable, PolicyApprovals
from bot.runs.approval_state import ApprovalRef, Decision, Verdict, decide, next_decision, open_request
from bot.thread.poster import Poster, ThreadStatus
from bot.thread.render import SlackMessage
from bot.turn import Target
from bot.workspace.settings import ApprovalPolicy, Kind
from tools import EgressAnswer, EgressRequest, ToolContext

log = logging.getLogger(__name__)
#: The approval policy a call falls under (``bot.workspace.settings.policy_for`` over the workspace's).
PolicyLookup = Callable[[str, Kind], Awaitable[ApprovalPolicy | None]]

#: When the run ends with requests still open, how long ``aclose`` waits for their replies to be edited.
CLOSE_WAIT_SECONDS = 5.0


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
        status: ThreadStatus | None = None,
        policies: PolicyLookup | None = None,
        parked: PolicyApprovals | None = None,
    ) -> None:
        """``deadline`` is the run's end on ``time.monotonic``'s clock: no request waits beyond it; ``status``
        (the thread's agent session) shows ``suspended`` while a request waits. ``policies`` finds the approval
        policy a call falls under; one that has a policy is asked through ``parked`` (the run parks meanwhile)."""
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
        self._status = status
        self._waiting = 0  # requests waiting now: the session is suspended from the first to the last
        self._policies = policies
        self._parked = parked

    async def approve(self, tool: str, arguments: Mapping[str, Any], ctx: ToolContext) -> bool:
        policy = await self._policy(tool, "tool")
        if policy is not None:
            decision = await self._by_policy("tool", tool, arguments, ctx, policy, lambda ref, note: request_message(
                tool, arguments, ref, self._requester, note))
            return decision.verdict is Verdict.APPROVED
        decision = await self._ask("tool", tool, arguments,
                                   lambda ref: request_message(tool, arguments, ref, self._requester))
        return decision.verdict is Verdict.APPROVED  # "for this run" is never offered here

    async def approve_egress(self, request: EgressRequest, ctx: ToolContext) -> EgressAnswer:
        """The exfiltration guard's question (mode ``approve``): the destination, exactly what would be sent,
        and Approve / Approve for this run / Deny."""
        policy = await self._policy(request.tool, "egress")
        if policy is not None:
            decision = await self._by_policy("egress", request.tool, request.arguments, ctx, policy,
                                             lambda ref, note: egress_message(request, ref, self._requester, note))
        else:
            decision = await self._ask("egress", request.tool, request.arguments,
                                       lambda ref: egress_message(request, ref, self._requester))
        return {Verdict.APPROVED: EgressAnswer.ONCE,
                Verdict.APPROVED_FOR_RUN: EgressAnswer.RUN}.get(decision.verdict, EgressAnswer.DENY)

    async def _policy(self, tool: str, kind: Kind) -> ApprovalPolicy | None | Literal[False]:
        """The policy the call falls under (None: none, the requester or an admin decides; False: the policies
        could not be read, so the call is refused)."""
        if self._policies is None:
            return None
        try:
            return await self._policies(tool, kind)
        except (RedisError, OSError) as exc:
            log.warning("approval policies could not be read (%s): %s refused", exc, tool)
            return False

    async def _by_policy(
        self, kind: Kind, tool: str, arguments: Mapping[str, Any], ctx: ToolContext,
        policy: ApprovalPolicy | Literal[False], card: Callable[[ApprovalRef, str], SlackMessage],
    ) -> Decision:
        """The policy's approvers decide, the run parked meanwhile (``Parked`` propagates); anything else refuses."""
        if policy is False or self._parked is None:
            return Decision(Verdict.FAILED)
        try:
            return await self._parked.ask(kind, tool, arguments, ctx, policy, card)
        except (ApproversUnreadable, RedisError, OSError) as exc:
            log.warning("approval of %s by its policy failed (%s): refused", tool, exc)
            return Decision(Verdict.FAILED)

    async def _ask(
        self, kind: Literal["tool", "egress"], tool: str, arguments: Mapping[str, Any],
        message: Callable[[ApprovalRef], SlackMessage],
    ) -> Decision:
        """Ask, wait, and put the outcome on the audit stream (the tool's name, never its arguments)."""
        decision = Decision(Verdict.FAILED)
        try:
            decision = await self._asked(tool, arguments, message)
            return decision
        except asyncio.CancelledError:
            decision = Decision(Verdict.STOPPED)
            raise
        finally:
            where = Conversation.parse(self._thread)
            audit.emit("approval.decided", team=where.workspace.team_id, enterprise=where.workspace.enterprise_id or "",
                       channel=where.channel_id, run_id=self._run_id, kind=kind, tool=tool, requester=self._requester,
                       verdict=decision.verdict.value, decided_by=decision.user)

    async def _asked(
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
                await open_request(self._redis, self._keys, ref)
                async with self._posting:
                    ts = await self._poster.post(self._target, message(ref))
                if ts is None:
                    log.warning("approval request for %s could not be posted: refused", tool)
                    return Decision(Verdict.FAILED)
                decision = await self._waited(ref, pubsub, timeout)
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

    async def ended(self) -> None:
        """The run is over (not parked): requests it made under a policy and left undecided are closed."""
        if self._parked is not None:
            try:
                await self._parked.close_open()
            except (RedisError, OSError) as exc:  # they expire at their deadline instead
                log.warning("run %s: open approval requests not closed (%s)", self._run_id, exc)

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

    async def _waited(self, ref: ApprovalRef, pubsub: PubSub, timeout: float) -> Decision:
        """``_wait`` with the session ``suspended`` meanwhile (a stopped run's session is closed instead)."""
        self._waiting += 1
        if self._waiting == 1 and self._status is not None:
            await self._status.suspend()
        try:
            decision = await self._wait(ref, pubsub, timeout)
        finally:
            self._waiting -= 1
        if self._waiting == 0 and self._status is not None:
            await self._status.resume()
        return decision

    async def _wait(self, ref: ApprovalRef, pubsub: PubSub, timeout: float) -> Decision:
        reader = asyncio.ensure_future(next_decision(pubsub))
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
