"""Who a request is for: the ``Workspace`` Bolt resolved, read once per request by one middleware.

Every listener reads ``context["workspace"]``; nobody rebuilds it from payload fields. The rule, for plain and
Enterprise Grid installs alike: the team of the installation Bolt resolved (``context.team_id``, else the
authorize result's), inside its enterprise when there is one; an org-wide request without any team is the
enterprise's own (team part ``-``). A request with neither is not Slack's and is refused.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from slack_bolt.context.async_context import AsyncBoltContext
from slack_bolt.middleware.async_middleware import AsyncMiddleware
from slack_bolt.request.async_request import AsyncBoltRequest
from slack_bolt.response import BoltResponse

from bot.workspace_limits import Workspace

__all__ = ["IdentityMiddleware", "Workspace", "from_context", "workspace"]


def from_context(context: AsyncBoltContext) -> Workspace | None:
    """The one reader of Bolt's context: the workspace of this request, or None when Bolt resolved none."""
    result = context.authorize_result
    team = context.team_id or (result.team_id if result else None) or None
    enterprise = context.enterprise_id or (result.enterprise_id if result else None) or None
    try:
        return Workspace.of(team, enterprise)
    except ValueError:
        return None


def workspace(context: AsyncBoltContext) -> Workspace:
    """``context["workspace"]``, put there by :class:`IdentityMiddleware` before any listener runs."""
    value = context["workspace"]
    assert isinstance(value, Workspace)
    return value


class IdentityMiddleware(AsyncMiddleware):
    """Puts ``context["workspace"]`` in place for every listener (cf. Bolt's attaching_conversation_kwargs)."""

    async def async_process(
        self, *, req: AsyncBoltRequest, resp: BoltResponse, next: Callable[[], Awaitable[BoltResponse]]
    ) -> BoltResponse:
        ws = from_context(req.context)
        if ws is None:
            return BoltResponse(status=400, body="the request names no workspace")
        req.context["workspace"] = ws
        return await next()
