"""Who may do what: users.info answers, cached briefly, and the rules made from them.

An admin (Slack's admin/owner flags, or ``AGENT_ADMIN_USER_IDS``) may change a workspace's limits; members may
start runs on its budget, guests and people of other organisations only when the operator allows it.

Every answer is for one workspace: on Enterprise Grid one person is an admin in one workspace of the org and a
guest in another, so the cache is keyed by workspace and user, and an org-wide token asks with the workspace's
``team_id`` (without it Slack answers for whichever workspace it picks).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from bot.errors import SlackLookupError
from bot.i18n import DEFAULT_LOCALE, _
from bot.identity import Workspace

ADMIN_CACHE_SECONDS = 300.0
"""users.info answers are reused this long: admin changes take effect within five minutes."""


@dataclass(frozen=True, slots=True)
class RunRefusal:
    """Why a user may not start a run on this workspace's budget; ``message`` is the reply."""

    reason: Literal["guest", "external"]
    message: str


def _member_of(user: Mapping[str, Any], team_id: str | None) -> bool:
    """Whether the user belongs to ``team_id`` (directly, or as an Enterprise Grid member of it)."""
    if not team_id or team_id == "-":
        return not user.get("is_stranger", False)
    if user.get("team_id") == team_id:
        return True
    teams = (user.get("enterprise_user") or {}).get("teams") or ()
    return team_id in teams


def run_permission(
    user: Mapping[str, Any], team_id: str | None, *, allow_guests: bool = False, allow_external: bool = False
) -> RunRefusal | None:
    """None when ``user`` (a users.info ``user`` object) may start runs paid by ``team_id``'s budget."""
    if not allow_external and (user.get("is_stranger") or not _member_of(user, team_id)):
        return RunRefusal(
            "external",
            _("Sorry, I can only run for members of this workspace: people from other organisations in a "
              "shared channel can't start runs on its budget. Ask someone from this workspace to mention me."),
        )
    if not allow_guests and (user.get("is_restricted") or user.get("is_ultra_restricted")):
        return RunRefusal(
            "guest",
            _("Sorry, guests can't start runs: they are paid from this workspace's budget. "
              "Ask a full member to mention me; the app's operator can allow guests (AGENT_ALLOW_GUESTS)."),
        )
    return None


def who_may_change(admin_user_ids: Collection[str]) -> str:
    """ "workspace admins and owners (or <@U1>, <@U2>)" for refusals and budget messages."""
    listed = ", ".join(f"<@{u}>" for u in sorted(admin_user_ids))
    if listed:
        return _("workspace admins and owners (or {listed})").format(listed=listed)
    return _("workspace admins and owners")


class SlackUsers:
    """users.info answers, cached briefly, and the decisions made from them (admin, may start a run).

    Args:
        admin_user_ids: ``AGENT_ADMIN_USER_IDS``: may change limits whatever Slack says.
        allow_guests: ``AGENT_ALLOW_GUESTS``; allow_external: ``AGENT_ALLOW_EXTERNAL_USERS``.
        ttl_seconds: how long an answer is reused; clock: monotonic seconds (tests inject one).
    """

    def __init__(
        self,
        *,
        admin_user_ids: Collection[str] = (),
        allow_guests: bool = False,
        allow_external: bool = False,
        ttl_seconds: float = ADMIN_CACHE_SECONDS,
        clock: Callable[[], float] = time.monotonic,
        max_entries: int = 10_000,
    ) -> None:
        self.admin_user_ids = frozenset(admin_user_ids)
        self.allow_guests = allow_guests
        self.allow_external = allow_external
        self._ttl = ttl_seconds
        self._clock = clock
        self._max_entries = max_entries
        self._cache: dict[tuple[Workspace, str], tuple[float, dict[str, Any]]] = {}

    async def info(self, client: AsyncWebClient, ws: Workspace, user_id: str) -> dict[str, Any]:
        """The users.info ``user`` object as ``ws`` sees the user (its admin and guest flags); raises
        :class:`SlackLookupError` when Slack says no."""
        now = self._clock()
        cached = self._cache.get((ws, user_id))
        if cached is not None and cached[0] > now:
            return cached[1]
        # An org-wide token answers for any workspace of the org: name the one asking (a workspace token's own
        # workspace is the same one, and Slack ignores the argument for it).
        where: dict[str, Any] = {"team_id": ws.team_id} if ws.enterprise_id and ws.team_id != "-" else {}
        try:
            response = await client.users_info(user=user_id, include_locale=True, **where)
        except SlackApiError as exc:
            raise SlackLookupError(user_id, str(exc.response.get("error", "unknown_error"))) from exc
        user = response.get("user")
        if not isinstance(user, dict):
            raise SlackLookupError(user_id, "no user in the answer")
        if len(self._cache) >= self._max_entries:
            self._cache.clear()  # crude, but bounded; a refill costs one users.info per active user
        self._cache[(ws, user_id)] = (now + self._ttl, user)
        return user

    async def locale(self, client: AsyncWebClient, ws: Workspace, user_id: str) -> str:
        """The person's Slack locale (``es-ES``; English when Slack cannot say): the language the bot answers in.
        The same cached users.info answer as the permission checks, so it costs no extra call."""
        try:
            user = await self.info(client, ws, user_id)
        except Exception:  # Slack said no or did not answer: English; a check that needs the answer meets it too
            return DEFAULT_LOCALE
        return str(user.get("locale") or DEFAULT_LOCALE)

    async def is_admin(self, client: AsyncWebClient, ws: Workspace, user_id: str) -> bool:
        """May ``user_id`` change ``ws``'s limits? Listed users may; else Slack's admin/owner flags there."""
        if user_id in self.admin_user_ids:
            return True
        user = await self.info(client, ws, user_id)
        if user.get("deleted") or user.get("is_restricted") or user.get("is_ultra_restricted"):
            return False
        if not _member_of(user, ws.team_id):
            return False  # an admin of another organisation is no admin here
        enterprise = user.get("enterprise_user") or {}
        flags = ("is_admin", "is_owner", "is_primary_owner")
        return any(bool(user.get(f)) for f in flags) or any(bool(enterprise.get(f)) for f in flags[:2])

    async def is_org_admin(self, client: AsyncWebClient, ws: Workspace, user_id: str) -> bool:
        """May ``user_id`` change the org budget? Listed users may; else the org's own admin/owner flags
        (``enterprise_user``), not a single workspace's."""
        if user_id in self.admin_user_ids:
            return True
        user = await self.info(client, ws, user_id)
        if user.get("deleted") or user.get("is_restricted") or user.get("is_ultra_restricted"):
            return False
        enterprise = user.get("enterprise_user") or {}
        return bool(enterprise.get("is_admin") or enterprise.get("is_owner"))

    async def run_permission(self, client: AsyncWebClient, ws: Workspace, user_id: str) -> RunRefusal | None:
        """None when the user may start a run on ``ws``'s budget, else the refusal to reply with."""
        user = await self.info(client, ws, user_id)
        return run_permission(user, ws.team_id, allow_guests=self.allow_guests, allow_external=self.allow_external)

    def who_may_change(self) -> str:
        return who_may_change(self.admin_user_ids)
