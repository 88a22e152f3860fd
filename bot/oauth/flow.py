"""OAuth mode wiring: Bolt's AsyncOAuthFlow over the Redis stores, its pages, routes, authorize and clean-up.

``build_oauth`` makes every part from the settings; the app then hands them to Bolt::

    oauth = build_oauth(settings, redis, slack_client)          # slack_client: token None, SLACK_API_URL
    app = AsyncApp(client=slack_client, authorize=oauth.authorize, oauth_flow=oauth.flow,
                   installation_store=oauth.store, ...)
    register_revocation_listeners(app, oauth)                     # app_uninstalled, tokens_revoked
    add_oauth_routes(web_app, oauth)                              # GET /slack/install, /slack/oauth_redirect
"""

from __future__ import annotations

import html
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import aiohttp
import redis.asyncio as aioredis
from aiohttp import web
from redis.exceptions import RedisError
from slack_bolt.adapter.aiohttp import to_aiohttp_response, to_bolt_request
from slack_bolt.async_app import AsyncApp
from slack_bolt.authorization import AuthorizeResult
from slack_bolt.authorization.async_authorize import AsyncAuthorize
from slack_bolt.context.async_context import AsyncBoltContext
from slack_bolt.oauth.async_callback_options import AsyncCallbackOptions, AsyncFailureArgs, AsyncSuccessArgs
from slack_bolt.oauth.async_oauth_flow import AsyncOAuthFlow
from slack_bolt.oauth.async_oauth_settings import AsyncOAuthSettings
from slack_bolt.request.async_request import AsyncBoltRequest
from slack_bolt.response import BoltResponse
from slack_sdk.oauth.installation_store import Installation
from slack_sdk.oauth.token_rotation.async_rotator import AsyncTokenRotator
from slack_sdk.web.async_client import AsyncWebClient

from bot import audit
from bot.errors import StateSpent, TokenUnavailable, UnreadableToken
from bot.identity import Workspace
from bot.keys import AppKeys
from bot.logs import OncePer
from bot.oauth.installations import RedisInstallationStore
from bot.oauth.mcp_vault import forget_workspace
from bot.oauth.settings import OAuthSettings
from bot.oauth.state import SignedStateStore, state_key
from bot.oauth.token_crypto import SETTING, TokenCipher
from bot.oauth.token_resolver import TokenResolver

log = logging.getLogger(__name__)
#: What else an uninstall or a revocation erases: ``(enterprise, team, event)``, ``team`` None for an org-wide install.
Revoked = Callable[[str | None, str | None, dict[str, Any]], Awaitable[None]]

INSTALL_PATH = "/slack/install"
REDIRECT_PATH = "/slack/oauth_redirect"
#: Teams already logged as "no installation" by this process (bounded: a flood of strangers logs once each).
_MAX_WARNED = 1000
#: An installation no configured key reads is logged once per workspace this often.
UNREADABLE_LOG_SECONDS = 3600.0


@dataclass
class OAuth:
    """Everything OAuth mode adds to the service, built once per process."""

    flow: AsyncOAuthFlow
    store: RedisInstallationStore
    states: SignedStateStore
    resolver: TokenResolver
    authorize: StoreAuthorize


def build_oauth(
    settings: OAuthSettings, redis: aioredis.Redis, client: AsyncWebClient, *, clock: Callable[[], float] = time.time
) -> OAuth:
    """The OAuth parts for ``settings`` (``require_oauth`` passed); ``client`` reaches SLACK_API_URL."""
    keys = AppKeys(settings.redis_key_prefix)
    secret = settings.slack_client_secret.get_secret_value() if settings.slack_client_secret else ""
    client_id = settings.slack_client_id or ""
    resolver = token_resolver(settings, redis, client)
    store = resolver.store
    lifetime = settings.slack_state_expiration_seconds
    states = SignedStateStore(redis, keys, state_key(secret), expiration_seconds=lifetime, clock=clock)
    pages = InstallPages(states, lifetime)
    oauth_settings = AsyncOAuthSettings(
        client_id=client_id,
        client_secret=secret,
        scopes=_scopes(settings.slack_scopes),
        user_scopes=_scopes(settings.slack_user_scopes),
        redirect_uri=settings.slack_redirect_uri,
        install_path=INSTALL_PATH,
        redirect_uri_path=REDIRECT_PATH,
        installation_store=store,
        state_store=states,
        state_expiration_seconds=lifetime,
        callback_options=AsyncCallbackOptions(success=pages.success, failure=pages.failure),
        logger=log,
    )
    flow = SingleUseFlow(states, client=client, logger=log, settings=oauth_settings)
    return OAuth(flow, store, states, resolver, StoreAuthorize(resolver))


class SingleUseFlow(AsyncOAuthFlow):
    """Bolt's flow, with the state spent only once Slack has accepted the code (``oauth.v2.access`` answered
    with tokens), just before the one write of the installation: a redirect that fails earlier costs no Redis
    write, and of two redirects with one state only the first stores its install."""

    def __init__(
        self, states: SignedStateStore, *, client: AsyncWebClient, logger: logging.Logger, settings: AsyncOAuthSettings
    ) -> None:
        super().__init__(client=client, logger=logger, settings=settings)
        self.states = states

    async def store_installation(self, request: AsyncBoltRequest, installation: Installation) -> None:
        await self.states.spend(next(iter(request.query.get("state") or []), None))
        await super().store_installation(request, installation)
        scopes = installation.bot_scopes or []
        audit.emit("app.installed", team=installation.team_id or "", enterprise=installation.enterprise_id or "",
                   org_wide=bool(installation.is_enterprise_install), installer=installation.user_id or "",
                   scopes=[scopes] if isinstance(scopes, str) else list(scopes))


def token_resolver(settings: OAuthSettings, redis: aioredis.Redis, client: AsyncWebClient) -> TokenResolver:
    """What a worker needs of OAuth mode: each workspace's bot token, from the store, refreshed when due."""
    secret = settings.slack_client_secret.get_secret_value() if settings.slack_client_secret else ""
    rotator = AsyncTokenRotator(client_id=settings.slack_client_id or "", client_secret=secret, client=client)
    keys = AppKeys(settings.redis_key_prefix)
    store = RedisInstallationStore(redis, keys, TokenCipher.from_settings(settings))
    return TokenResolver(store, redis, keys, rotator)


def _scopes(value: str) -> list[str]:
    return [s.strip() for s in value.split(",") if s.strip()]


class StoreAuthorize(AsyncAuthorize):
    """Bolt's authorize step: the installation's bot token from the resolver, never from the payload.

    No auth.test per request (Bolt's default authorize makes one): the stored Bot already has the ids. A team
    without an installation gets None, which Bolt acknowledges with a 200 and runs no listener.
    """

    def __init__(self, resolver: TokenResolver) -> None:
        super().__init__()  # type: ignore[no-untyped-call]
        self.resolver = resolver
        self._warned: set[tuple[str | None, str | None]] = set()
        self._unreadable_gate = OncePer(UNREADABLE_LOG_SECONDS)

    async def __call__(
        self,
        *,
        context: AsyncBoltContext,
        enterprise_id: str | None,
        team_id: str | None,
        user_id: str | None,
        actor_enterprise_id: str | None = None,
        actor_team_id: str | None = None,
        actor_user_id: str | None = None,
    ) -> AuthorizeResult | None:
        try:
            bot = await self.resolver.bot(enterprise_id, team_id, context.is_enterprise_install)
        except TokenUnavailable as exc:
            log.warning("no usable token for enterprise %s team %s: %s", enterprise_id, team_id, exc)
            return None
        except UnreadableToken:
            self._unreadable(enterprise_id, team_id)
            # Bolt then answers with its user-facing message in the HTTP response (a command's ephemeral reply,
            # which needs no token) rather than on a response_url after an empty one.
            context["response_url"] = None
            return None  # acknowledged (Slack would retry a 5xx three times, to no avail), nothing started
        if bot is None:
            self._warn_once(enterprise_id, team_id)
            return None
        return AuthorizeResult(
            enterprise_id=enterprise_id or bot.enterprise_id,
            team_id=team_id or bot.team_id,
            team=bot.team_name,
            bot_user_id=bot.bot_user_id,
            bot_id=bot.bot_id,
            bot_token=bot.bot_token,
            bot_scopes=bot.bot_scopes,
            user_id=user_id,
        )

    def _unreadable(self, enterprise_id: str | None, team_id: str | None) -> None:
        """One line per workspace and hour: each of its events would say the same."""
        ok, held = self._unreadable_gate.allow(f"{enterprise_id}/{team_id}")
        if ok:
            more = f" ({held} more events since the last line)" if held else ""
            log.error(
                "the installation of enterprise %s team %s cannot be read with any key in %s: its events are "
                "acknowledged and not run%s. Put the key it was written with back in %s (after the new one), then "
                "run `python -m bot rekey`; or reinstall the app there.", enterprise_id, team_id, SETTING, more,
                SETTING,
            )

    def _warn_once(self, enterprise_id: str | None, team_id: str | None) -> None:
        if (enterprise_id, team_id) in self._warned:
            return
        if len(self._warned) >= _MAX_WARNED:
            self._warned.clear()
        self._warned.add((enterprise_id, team_id))
        log.warning("no installation for enterprise %s team %s: its events are acknowledged and not run",
                    enterprise_id, team_id)


def register_revocation_listeners(app: AsyncApp, oauth: OAuth, also: Revoked | None = None) -> None:
    """``app_uninstalled`` deletes the installation; ``tokens_revoked`` the revoked tokens; then ``also`` erases what
    else they cover (people's memories). Nothing else goes: limits, budget ledger and audit log stay for a
    reinstall."""

    async def app_uninstalled(context: AsyncBoltContext) -> None:
        enterprise, team = _installation_of(context)
        await oauth.store.async_delete_all(enterprise_id=enterprise, team_id=team)
        oauth.resolver.invalidate(enterprise, team)
        # Every person's MCP tokens of the workspace go too (bot.oauth.mcp_vault).
        await forget_workspace(oauth.store.redis, oauth.store.keys, Workspace.of(team, enterprise))
        audit.emit("app.uninstalled", team=team or "", enterprise=enterprise or "")
        if also is not None:
            await also(enterprise, team, {"type": "app_uninstalled"})
        log.info("app uninstalled from enterprise %s team %s: its tokens are deleted", enterprise, team)

    async def tokens_revoked(event: dict[str, Any], context: AsyncBoltContext) -> None:
        enterprise, team = _installation_of(context)
        tokens = event.get("tokens") or {}
        for user_id in tokens.get("oauth") or []:
            await oauth.store.async_delete_installation(enterprise_id=enterprise, team_id=team, user_id=user_id)
        if tokens.get("bot"):
            await oauth.store.async_delete_bot(enterprise_id=enterprise, team_id=team)
        oauth.resolver.invalidate(enterprise, team)
        audit.emit("app.tokens_revoked", team=team or "", enterprise=enterprise or "",
                   user_tokens=len(tokens.get("oauth") or []), bot_token=bool(tokens.get("bot")))
        if also is not None:
            await also(enterprise, team, event)
        log.info("tokens revoked in enterprise %s team %s: deleted", enterprise, team)

    app.event("app_uninstalled")(app_uninstalled)
    app.event("tokens_revoked")(tokens_revoked)


def _installation_of(context: AsyncBoltContext) -> tuple[str | None, str | None]:
    """An org-wide install is the enterprise's, whichever of its teams the event names."""
    enterprise = context.enterprise_id or None
    return enterprise, None if context.is_enterprise_install and enterprise else context.team_id or None


def add_oauth_routes(web_app: web.Application, oauth: OAuth) -> None:
    """``GET /slack/install`` (the 'Add to Slack' page, a fresh state) and ``GET /slack/oauth_redirect``."""

    async def install(request: web.Request) -> web.Response:
        return await _serve(request, oauth.flow.handle_installation, "could not start the installation")

    async def redirect(request: web.Request) -> web.Response:
        return await _serve(request, oauth.flow.handle_callback, "could not finish the installation")

    web_app.router.add_get(INSTALL_PATH, install)
    web_app.router.add_get(REDIRECT_PATH, redirect)


async def _serve(
    request: web.Request, handle: Callable[[AsyncBoltRequest], Awaitable[BoltResponse]], doing: str
) -> web.Response:
    try:
        response = await handle(await to_bolt_request(request))
    except (TimeoutError, RedisError, OSError, aiohttp.ClientError) as exc:
        # Redis or Slack did not answer; Bolt's flow stores nothing before both have (one HSET at the end).
        log.warning("OAuth %s: %s: %s", request.path, doing, type(exc).__name__)
        body = _page("Installation failed", f"The app {doing}: a service it needs did not answer. Nothing was "
                     "stored. Try again in a minute.", INSTALL_PATH)
        return web.Response(status=503, text=body, content_type="text/html")
    return await to_aiohttp_response(response)


class InstallPages:
    """The pages an admin lands on after Slack sends them back: installed, or why not."""

    def __init__(self, states: SignedStateStore, state_seconds: int) -> None:
        self._states = states
        self._state_minutes = max(1, state_seconds // 60)

    async def success(self, args: AsyncSuccessArgs) -> BoltResponse:
        inst = args.installation
        if inst.is_enterprise_install:
            where = f"the organisation {inst.enterprise_name or inst.enterprise_id}"
            then = "An org admin can now add it to the organisation's workspaces."
        else:
            where = f"the workspace {inst.team_name or inst.team_id}"
            then = "Invite it to a channel (/invite @agent) and mention it with a question."
        link = f"https://slack.com/app_redirect?app={inst.app_id}&team={inst.team_id or ''}"
        body = _page("Installed", f"The agent is installed in {where}. {then}", link, "Open Slack")
        return self._response(args.settings, 200, body)

    async def failure(self, args: AsyncFailureArgs) -> BoltResponse:
        # A state spent by another redirect meanwhile reaches here as a storage error carrying StateSpent.
        spent = isinstance(args.error, StateSpent)
        reason = "invalid_state" if spent else args.reason
        why = await self._why(reason, args.request)
        log.info("OAuth redirect refused: %s", reason)
        body = _page("Installation failed", f"{why} Nothing was installed.", INSTALL_PATH, "Start again")
        return self._response(args.settings, 401 if spent else args.suggested_status_code, body)

    async def _why(self, reason: str, request: AsyncBoltRequest) -> str:
        if reason == "invalid_state":
            refusal = await self._states.refusal(next(iter(request.query.get("state") or []), None))
            return {
                "expired": f"This install link expired (links last {self._state_minutes} minutes).",
                "reused": "This install link was already used; each link works once.",
                "forged": "This install link was not issued by this app (forged or altered state).",
            }[refusal]
        return _REASONS.get(reason, f"Slack reported {reason!r}.")

    @staticmethod
    def _response(settings: AsyncOAuthSettings, status: int, body: str) -> BoltResponse:
        cookie = settings.state_utils.build_set_cookie_for_deletion()
        return BoltResponse(status=status, body=body,
                            headers={"Content-Type": "text/html; charset=utf-8", "Set-Cookie": cookie})


_REASONS = {
    "access_denied": "You cancelled the installation.",
    "invalid_browser": "This install link was not started in this browser, or it was already used (reloading the "
                       "page does that).",
    "missing_code": "Slack sent no authorization code back.",
    "invalid_code": "Slack refused the installation (oauth.v2.access failed).",
    "storage_error": "The app could not save the installation: its database did not answer. Try again in a minute.",
}


def _page(title: str, text: str, link: str, label: str = "Start again") -> str:
    t, x, h, a = (html.escape(v) for v in (title, text, link, label))
    return (
        f'<!DOCTYPE html><html><head><meta charset="utf-8"><title>{t}</title></head>'
        f'<body style="font-family:sans-serif;text-align:center;padding:2em"><h2>{t}</h2><p>{x}</p>'
        f'<p><a href="{h}">{a}</a></p></body></html>'
    )
