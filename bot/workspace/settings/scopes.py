"""Optional scopes (the manifest's ``bot_optional``): an installer may decline them, and the feature each one serves
is then off in that workspace, with a line in ``/agent-limits show`` naming the scope that would turn it on.

The granted set comes from the OAuth answer at install (``bot.oauth.flow`` writes it), else from the
``X-OAuth-Scopes`` header Slack sends on every Web API answer (read with ``auth.test``); it is kept an hour, so a
reinstall that grants more is picked up. When Slack does not say, nothing is turned off: the features then meet
Slack's own refusal (``missing_scope``) and step back as before.
"""

from __future__ import annotations

import logging

import redis.asyncio as aioredis
from redis.exceptions import RedisError
from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from bot.i18n import N_, _
from bot.identity import Workspace
from bot.keys import AppKeys
from bot.redis import as_text
from bot.workspace.settings.search_access import SearchAccess

log = logging.getLogger(__name__)

#: Each optional scope and what it turns on (manifest.json's ``oauth_config.scopes.bot_optional``).
OPTIONAL = {
    "files:write": N_("files out (a long answer as a file, `attach_file`)"),
    "canvases:write": N_("long answers as canvases (`AGENT_ANSWER_CANVAS`)"),
    "search:read.public": N_("the `slack_search` tool"),
    "reactions:read": N_("emoji triggers (`/agent-limits channel react`)"),
    "usergroups:read": N_("approval policies naming user groups"),
}
#: How long a granted set read from Slack is kept.
SCOPES_TTL_SECONDS = 3600
#: Kept in its place when Slack named no scopes (no header): asked again only once it expires.
UNKNOWN = "?"


class GrantedScopes:
    """What the workspace's install granted, as far as Slack says."""

    def __init__(self, redis: aioredis.Redis, keys: AppKeys, search: SearchAccess) -> None:
        self._redis, self._keys, self._search = redis, keys, search

    async def of(self, client: AsyncWebClient, ws: Workspace) -> frozenset[str] | None:
        """The granted bot scopes, or None when neither the install nor Slack said."""
        key = self._keys.granted_scopes(ws)
        try:
            kept = as_text(await self._redis.get(key))
        except RedisError:
            kept = None
        if kept is not None:
            return None if kept == UNKNOWN else frozenset(kept.split())
        try:
            header = (await client.auth_test()).headers.get("x-oauth-scopes")
        except SlackApiError as exc:
            log.info("auth.test refused: %s", exc.response.get("error"))
            return None
        granted = None if header is None else frozenset(s.strip() for s in str(header).split(",") if s.strip())
        try:
            await self._redis.set(key, UNKNOWN if granted is None else " ".join(sorted(granted)),
                                  ex=SCOPES_TTL_SECONDS)
        except RedisError as exc:
            log.warning("granted scopes of %s not kept: %s", ws, exc)
        if granted is None:
            return None
        if "search:read.public" not in granted:
            await self._search.refuse(ws, "missing_scope")  # runs are not offered slack_search
        return granted

    async def missing(self, client: AsyncWebClient, ws: Workspace, *scopes: str) -> list[str]:
        """Which of ``scopes`` (all the optional ones when none is named) the install did not grant."""
        granted = await self.of(client, ws)
        return [] if granted is None else [s for s in (scopes or tuple(OPTIONAL)) if s not in granted]


def off_line(missing: list[str]) -> str:
    """``show``'s line about the features off for want of their scope ("" when none is)."""
    if not missing:
        return ""
    features = "; ".join(_("{feature} needs `{scope}`").format(feature=_(OPTIONAL[s]), scope=s) for s in missing)
    return _("*Off in this workspace* (its install did not grant the scope): {features}. An admin turns them on by "
             "reinstalling the app and granting them.").format(features=features)


def needs(scope: str) -> str:
    """A command refused for want of an optional scope."""
    return _("Nothing changed: {feature} needs the `{scope}` scope, which this workspace's install did not grant. "
             "An admin turns it on by reinstalling the app and granting it.").format(feature=_(OPTIONAL[scope]),
                                                                                     scope=scope)
