"""A fake OAuth 2.1 authorization server for MCP sign-in (RFC 8414 metadata, RFC 7591 registration, the code flow
with PKCE S256 and RFC 8707 resources, refresh with rotation), on loopback, recording every request.

    async with FakeAuthServer() as auth:
        callback = await auth.sign_in(http, authorization_url, login="alice")   # the person's browser
        auth.token_mode = "garbage"          # "ok" | "garbage" | "500" | "hang" | "redirect": the token endpoint
        auth.lifetime = 30                   # expires_in of the next tokens
        auth.tokens                          # access token -> Grant(login, resource, client_id)

A person signs in by ``login`` (the account they use at the server); codes and tokens are bound to it, to the
client, the redirect URI, the PKCE challenge and the resource, and checked like a real server checks them.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import secrets
from dataclasses import dataclass, field
from typing import Any, Literal
from urllib.parse import urlencode

import aiohttp
from aiohttp import web

TokenMode = Literal["ok", "garbage", "500", "hang", "redirect"]


@dataclass
class Grant:
    login: str
    resource: str
    client_id: str
    scope: str = ""
    challenge: str = ""
    redirect_uri: str = ""


@dataclass
class FakeAuthServer:
    lifetime: int = 3600
    token_mode: TokenMode = "ok"
    #: Set: the registration answers these redirect URIs instead of the client's own.
    registered_redirects: list[str] | None = None
    #: Set: the metadata endpoint redirects to this URL (another host) instead of answering.
    metadata_redirect: str | None = None
    #: Set: the token endpoint the metadata names (its own by default).
    token_endpoint: str | None = None
    clients: dict[str, list[str]] = field(default_factory=dict)
    codes: dict[str, Grant] = field(default_factory=dict)
    tokens: dict[str, Grant] = field(default_factory=dict)
    refresh_tokens: dict[str, Grant] = field(default_factory=dict)
    requests: list[tuple[str, dict[str, str]]] = field(default_factory=list)
    _runner: web.AppRunner | None = None
    port: int = 0

    @property
    def issuer(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def __aenter__(self) -> FakeAuthServer:
        app = web.Application()
        app.router.add_get("/.well-known/oauth-authorization-server", self._metadata)
        app.router.add_post("/register", self._register)
        app.router.add_get("/authorize", self._authorize)
        app.router.add_post("/token", self._token)
        # A hanging token request (``token_mode = "hang"``) is cut at the end, not waited for (aiohttp's 60 s).
        self._runner = web.AppRunner(app, shutdown_timeout=1.0)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._runner is not None
        await self._runner.cleanup()

    def verify(self, token: str) -> Grant | None:
        return self.tokens.get(token)

    def token_requests(self) -> list[dict[str, str]]:
        return [form for path, form in self.requests if path == "/token"]

    async def sign_in(self, http: aiohttp.ClientSession, url: str, *, login: str) -> str:
        """What the person's browser does: open the authorization URL, sign in as ``login``; the redirect's URL."""
        async with http.get(url, params={"login": login}, allow_redirects=False) as resp:
            assert resp.status == 302, await resp.text()
            return resp.headers["Location"]

    async def _metadata(self, request: web.Request) -> web.Response:
        if self.metadata_redirect:
            raise web.HTTPFound(self.metadata_redirect)
        return web.json_response({
            "issuer": self.issuer, "authorization_endpoint": f"{self.issuer}/authorize",
            "token_endpoint": self.token_endpoint or f"{self.issuer}/token",
            "registration_endpoint": f"{self.issuer}/register",
            "response_types_supported": ["code"], "grant_types_supported": ["authorization_code", "refresh_token"],
            "code_challenge_methods_supported": ["S256"], "token_endpoint_auth_methods_supported": ["none"],
        })

    async def _register(self, request: web.Request) -> web.Response:
        body: dict[str, Any] = await request.json()
        self.requests.append(("/register", {"redirect_uris": " ".join(body.get("redirect_uris", []))}))
        client_id = f"client-{secrets.token_hex(4)}"
        self.clients[client_id] = list(body.get("redirect_uris", []))
        return web.json_response({**body, "client_id": client_id, "token_endpoint_auth_method": "none",
                                  "redirect_uris": self.registered_redirects or body.get("redirect_uris", [])},
                                 status=201)

    async def _authorize(self, request: web.Request) -> web.Response:
        q = request.query
        self.requests.append(("/authorize", dict(q)))
        redirect = q.get("redirect_uri", "")
        if q.get("client_id") not in self.clients or redirect not in self.clients[q["client_id"]]:
            return web.Response(status=400, text="unknown client or redirect_uri")
        if q.get("response_type") != "code" or q.get("code_challenge_method") != "S256" or not q.get("resource"):
            return web.Response(status=400, text="code flow with PKCE S256 and a resource only")
        code = secrets.token_urlsafe(16)
        self.codes[code] = Grant(q["login"], q["resource"], q["client_id"], q.get("scope", ""),
                                 q["code_challenge"], redirect)
        raise web.HTTPFound(f"{redirect}?{urlencode({'code': code, 'state': q.get('state', '')})}")

    async def _token(self, request: web.Request) -> web.Response:
        form = {k: str(v) for k, v in (await request.post()).items()}
        self.requests.append(("/token", form))
        if self.token_mode == "garbage":
            return web.Response(text="<html>not a token</html>", content_type="application/json")
        if self.token_mode == "500":
            return web.Response(status=500, text="oops")
        if self.token_mode == "hang":
            await asyncio.Event().wait()
        if self.token_mode == "redirect":
            raise web.HTTPFound("http://127.0.0.2:9/token")
        if form.get("grant_type") == "authorization_code":
            return self._exchange(form)
        if form.get("grant_type") == "refresh_token":
            return self._refresh(form)
        return _error("unsupported_grant_type")

    def _exchange(self, form: dict[str, str]) -> web.Response:
        grant = self.codes.pop(form.get("code", ""), None)
        if grant is None or grant.client_id != form.get("client_id") or grant.redirect_uri != form.get("redirect_uri"):
            return _error("invalid_grant")
        if _s256(form.get("code_verifier", "")) != grant.challenge or grant.resource != form.get("resource"):
            return _error("invalid_grant")
        return self._issue(grant)

    def _refresh(self, form: dict[str, str]) -> web.Response:
        grant = self.refresh_tokens.pop(form.get("refresh_token", ""), None)
        if grant is None or grant.client_id != form.get("client_id"):
            return _error("invalid_grant")
        return self._issue(grant)

    def _issue(self, grant: Grant) -> web.Response:
        access, refresh = f"at-{grant.login}-{secrets.token_hex(6)}", f"rt-{secrets.token_hex(8)}"
        self.tokens[access] = grant
        self.refresh_tokens[refresh] = grant
        return web.json_response({"access_token": access, "token_type": "bearer", "expires_in": self.lifetime,
                                  "refresh_token": refresh, "scope": grant.scope or None})


def _s256(verifier: str) -> str:
    return base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest()).decode().rstrip("=")


def _error(code: str) -> web.Response:
    return web.json_response({"error": code}, status=400)
