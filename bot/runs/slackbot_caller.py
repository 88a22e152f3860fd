"""Who a Slackbot tool call is for, and whether they may make it: the identity checks of a mention, for ``/mcp``.

Slack names the person in each request's ``_meta.slack`` (``user_id``, ``team_id``, and ``enterprise_id`` in an
Enterprise Grid org), inside the body it signed. Before a tool runs for them, the same questions as before a run::

    gate = CallerGate(RunStart.of(parts), clients, redis, keys, per_minute=30, oauth_mode=False)
    caller = caller_of(ctx.meta)                 # None: the request names nobody (refused)
    admitted = await gate.admit(caller, call=True)  # CallerRefusal, or the workspace's RunPlan

- the app is installed in that workspace (OAuth mode: its installation; one ``SLACK_BOT_TOKEN``: the token's own
  team, from one ``auth.test``), else ``not_installed``;
- the person may start runs there (guests and people of other organisations refused, as for a mention), the
  workspace's limits can be read (fail closed) and the person's, workspace's and org's budgets are not spent;
- a tool call is counted against ``AGENT_SLACKBOT_MCP_CALLS_PER_MINUTE`` for that person (a counter in Redis; when
  it cannot be counted the call is refused).
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from redis.asyncio import Redis
from redis.exceptions import RedisError
from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from agent_core import StoreError
from bot.errors import NotInstalled, SlackLookupError
from bot.identity import Workspace
from bot.keys import AppKeys
from bot.oauth.clients import WorkspaceClients
from bot.runs.start import RunBlocked, RunPlan, RunStart

log = logging.getLogger(__name__)

Reason = Literal[
    "not_installed", "guest", "external", "budget_exhausted", "limit_unreadable", "rate_limited", "unknown_tool",
    "thread_only", "needs_approval", "slack_unavailable", "model_refused",
]
#: A user id as Slack writes it (``U…``/``W…``): it becomes part of a Redis key and of the audit line.
_USER_RE = re.compile(r"[UW][A-Z0-9]{1,31}", re.ASCII)
_PACE_WINDOW_SECONDS = 60

NO_IDENTITY = (
    "This request names no Slack person (`_meta.slack` with `user_id` and `team_id`): the agent's tools answer "
    "Slackbot's calls made with Slack identity auth only."
)
NOT_INSTALLED = (
    "The agent is not installed in this workspace, so its tools can't be used from Slackbot here. "
    "Ask a workspace admin to install the app."
)
SLACK_UNAVAILABLE = "The agent could not check who you are with Slack just now. Try again in a moment."
LIMIT_UNREADABLE = (
    "The agent's limits for this workspace can't be read right now (its store is unavailable), so no tool runs. "
    "Try again in a moment."
)
RATE_LIMITED = (
    "You have made {n} tool calls through Slackbot in the last minute, the most this workspace allows "
    "(AGENT_SLACKBOT_MCP_CALLS_PER_MINUTE). Wait a minute and ask again."
)


@dataclass(frozen=True, slots=True)
class Caller:
    """The person a Slackbot request is for, in the workspace that pays for it."""

    workspace: Workspace
    user_id: str


@dataclass(frozen=True, slots=True)
class CallerRefusal:
    """Nothing runs: ``reason`` for the audit, ``message`` for the person (Slackbot shows it)."""

    reason: Reason
    message: str


def caller_of(meta: Mapping[str, Any] | None) -> Caller | None:
    """The person ``_meta.slack`` names, or None when it names none (or ids that are no Slack ids)."""
    slack = (meta or {}).get("slack")
    if not isinstance(slack, Mapping):
        return None
    user, team, enterprise = (slack.get(k) for k in ("user_id", "team_id", "enterprise_id"))
    if not (isinstance(user, str) and _USER_RE.fullmatch(user)) or not (isinstance(team, str) and team):
        return None
    try:
        return Caller(Workspace.of(team, enterprise if isinstance(enterprise, str) else None), user)
    except ValueError:
        return None


class CallerGate:
    """The checks a Slackbot request passes before anything runs for its person (see the module docstring)."""

    def __init__(
        self, start: RunStart, clients: WorkspaceClients, redis: Redis, keys: AppKeys, *,
        per_minute: int, oauth_mode: bool,
    ) -> None:
        self.start = start  # the run's start: the same preflight as a mention's
        self._clients = clients
        self._redis = redis
        self._keys = keys
        self._per_minute = per_minute
        self._oauth_mode = oauth_mode
        #: ``auth.test`` of the one token (its team and org), asked once; never a failure.
        self._own: Workspace | None = None

    async def admit(self, caller: Caller, *, call: bool) -> RunPlan | CallerRefusal:
        """The workspace's plan when ``caller`` may use its tools now; ``call``: a tool call (counted)."""
        ws = caller.workspace
        try:
            client = await self._installed(ws)
            plan = await self.start.preflight(client, ws, caller.user_id)
        except NotInstalled:
            return CallerRefusal("not_installed", NOT_INSTALLED)
        except StoreError:
            return CallerRefusal("limit_unreadable", LIMIT_UNREADABLE)
        except SlackLookupError:
            return CallerRefusal("slack_unavailable", SLACK_UNAVAILABLE)
        if isinstance(plan, RunBlocked):
            return CallerRefusal(plan.reason, plan.message)
        if call:
            refusal = await self._count(caller)
            if refusal is not None:
                return refusal
        return plan

    async def _installed(self, ws: Workspace) -> AsyncWebClient:
        """The workspace's client; ``NotInstalled`` when the app is not installed there."""
        client = await self._clients.client(ws)  # OAuth mode: NotInstalled without an installation
        if self._oauth_mode:
            return client
        own = self._own or await self._auth_test(client)
        same_org = not own.enterprise_id or not ws.enterprise_id or ws.enterprise_id == own.enterprise_id
        if ws.team_id != own.team_id or not same_org:
            raise NotInstalled("the request names another workspace than the one SLACK_BOT_TOKEN is for")
        return client

    async def _auth_test(self, client: AsyncWebClient) -> Workspace:
        try:
            answer = await client.auth_test()
            own = Workspace.of(answer.get("team_id"), answer.get("enterprise_id"))
        except (SlackApiError, OSError, TimeoutError, ValueError) as exc:
            raise SlackLookupError("", f"auth.test failed: {type(exc).__name__}") from exc
        self._own = own
        return own

    async def _count(self, caller: Caller) -> CallerRefusal | None:
        """Counts one call in the person's minute; a refusal past the cap, or when it cannot be counted."""
        minute = int(time.time() // _PACE_WINDOW_SECONDS)
        key = self._keys.slackbot_mcp_calls(caller.workspace, caller.user_id, minute)
        try:
            async with self._redis.pipeline(transaction=True) as pipe:
                pipe.incr(key)
                pipe.expire(key, 2 * _PACE_WINDOW_SECONDS)
                count, _ = await pipe.execute()
        except (RedisError, OSError) as exc:
            log.warning("slackbot tool call not counted (%s): refused", type(exc).__name__)
            return CallerRefusal("limit_unreadable", LIMIT_UNREADABLE)
        if int(count) > self._per_minute:
            return CallerRefusal("rate_limited", RATE_LIMITED.format(n=self._per_minute))
        return None
