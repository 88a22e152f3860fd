"""``GET <PUBLIC_URL>/mcp/oauth/callback``: where a person's browser comes back from an MCP server's sign-in.

The web process's only route under ``/mcp/oauth/``. It takes the ``state`` (once), exchanges the ``code`` and
stores the token for the person the state names (``McpSignIn.finish``); anything wrong (a state forged, replayed,
expired or another's, an authorization server that fails) is a page saying so, and nothing is stored. The page
never echoes the code or the state, and is neither cached nor sent on as a referrer.
"""

from __future__ import annotations

import html
import logging

from aiohttp import web
from redis.exceptions import RedisError

from bot.errors import McpSignInError
from bot.oauth.mcp_signin import McpSignIn
from bot.oauth.mcp_vault import CALLBACK_PATH

log = logging.getLogger(__name__)

SIGNIN_KEY = web.AppKey("mcp_signin", McpSignIn)
_HEADERS = {"Cache-Control": "no-store", "Referrer-Policy": "no-referrer", "X-Content-Type-Options": "nosniff",
            "Content-Security-Policy": "default-src 'none'"}


def add_mcp_routes(web_app: web.Application, signin: McpSignIn) -> None:
    web_app[SIGNIN_KEY] = signin
    web_app.router.add_get(CALLBACK_PATH, callback)


async def callback(request: web.Request) -> web.Response:
    signin = request.app[SIGNIN_KEY]
    query = request.query
    if "error" in query:
        # The person declined, or the server refused: the state is spent so the link cannot be replayed.
        await signin.vault.take(query.get("state", ""))
        return _page(400, "Not connected", "The sign-in was cancelled or refused. Connect again from Slack if you "
                     "want to (/agent connect).")
    try:
        sign_in = await signin.finish(query.get("state", ""), query.get("code", ""), query.get("iss"))
    except McpSignInError as exc:
        log.info("MCP sign-in refused: %s", exc)
        return _page(400, "Not connected", f"{exc}. Nothing was stored.")
    except RedisError as exc:
        log.warning("MCP sign-in not finished: %s", exc)
        return _page(503, "Not connected", "The service's store is unavailable; connect again from Slack shortly.")
    return _page(200, f"Connected to {sign_in.server}",
                 f"You can close this tab. In Slack, press Retry (or ask again): the {sign_in.server} tools now "
                 "act as you. /agent disconnect removes the connection.")


def _page(status: int, title: str, text: str) -> web.Response:
    body = (f"<!doctype html><meta charset=utf-8><title>{html.escape(title)}</title>"
            f"<h1>{html.escape(title)}</h1><p>{html.escape(text)}</p>")
    return web.Response(status=status, text=body, content_type="text/html", headers=_HEADERS)
