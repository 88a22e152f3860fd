"""Who may control a run (stop it, decide its approvals): the person who asked, or a workspace admin.

One rule for the Stop button, the approval buttons and Slack's own stop button (``agent_session_stopped``).
"""

from __future__ import annotations

from slack_sdk.web.async_client import AsyncWebClient

from bot.errors import SlackLookupError
from bot.i18n import _
from bot.identity import Workspace
from bot.receive.deps import Services
from bot.redis import as_text, awaited
from bot.workspace import SlackUsers


async def may_control(
    services: Services, users: SlackUsers, client: AsyncWebClient, ws: Workspace, thread: str, run_id: str,
    user: str, what: str,
) -> str | None:
    """None when ``user`` may do ``what`` to run ``run_id``; else the private reply saying why not."""
    requester = as_text(await awaited(services.redis.hget(services.keys.run(thread, run_id), "requester")))
    if requester is not None and requester == user:
        return None
    try:
        if await users.is_admin(client, ws, user):
            return None
    except SlackLookupError as exc:
        return str(exc)
    who = f"<@{requester}>" if requester else _("the person who asked")
    return _("Only {who} or a workspace admin can {what}.").format(who=who, what=what)
