"""How to sign in to an ``"auth": "user"`` MCP server, found as the MCP authorization specification says.

The server's 401 and its ``WWW-Authenticate`` → its protected-resource metadata (RFC 9728), which must name the
server itself as the resource → the authorization server's metadata (RFC 8414), whose issuer must be the one named
→ our client there: configured (``client_id``), registered before (kept encrypted) or registered now (RFC 7591)
with our callback as its only redirect URI. The SDK's helpers (``mcp.client.auth.utils``) build the URLs and read
the answers; every request here is made without following redirects, with a short timeout.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import httpx2
from mcp.client.auth import OAuthRegistrationError
from mcp.client.auth.oauth2 import check_registration_usable
from mcp.client.auth.utils import (
    build_oauth_authorization_server_metadata_discovery_urls,
    build_protected_resource_metadata_discovery_urls,
    create_client_registration_request,
    create_oauth_metadata_request,
    extract_resource_metadata_from_www_auth,
    extract_scope_from_www_auth,
    get_client_metadata_scopes,
    handle_auth_metadata_response,
    handle_protected_resource_response,
    handle_registration_response,
    issuers_match,
)
from mcp.shared.auth import OAuthClientInformationFull, OAuthClientMetadata, OAuthMetadata, ProtectedResourceMetadata
from mcp.shared.auth_utils import check_resource_allowed, resource_url_from_server_url
from pydantic import AnyUrl

from bot.errors import McpSignInError
from bot.oauth.mcp_vault import McpVault
from tools import ServerConfig

#: Each request to a server or its authorization server: connect and answer within this.
HTTP_TIMEOUT_SECONDS = 10.0
#: What our registration asks for: the code flow with refresh, as a public client unless the server says otherwise.
CLIENT_NAME = "Slack agent"


@dataclass(frozen=True, slots=True)
class Discovered:
    """Everything a sign-in needs to start."""

    resource: str
    issuer: str
    authorization_endpoint: str
    token_endpoint: str
    scope: str | None
    client: OAuthClientInformationFull


def http_client() -> httpx2.AsyncClient:
    """No redirects followed (an authorization server sending us elsewhere is refused), a short timeout."""
    return httpx2.AsyncClient(follow_redirects=False, timeout=httpx2.Timeout(HTTP_TIMEOUT_SECONDS))


async def discover(http: httpx2.AsyncClient, server: ServerConfig, vault: McpVault, redirect_uri: str) -> Discovered:
    """The server's resource, its authorization server and our client there; ``McpSignInError`` saying what failed."""
    assert server.url is not None
    try:
        challenge = await http.post(server.url, json=_initialize(), headers={
            "Accept": "application/json, text/event-stream", **dict(server.headers)})
        resource = resource_url_from_server_url(server.url)
        prm = await _resource_metadata(http, server, challenge)
        if not check_resource_allowed(requested_resource=resource, configured_resource=str(prm.resource)):
            raise McpSignInError(f"its metadata names another resource ({str(prm.resource)[:200]}), not {resource}")
        issuer = str(prm.authorization_servers[0])
        asm = await _server_metadata(http, server.url, issuer)
        _check_endpoints(asm)  # before any registration
        scope = server.scopes or get_client_metadata_scopes(
            extract_scope_from_www_auth(challenge), prm, asm, ["authorization_code", "refresh_token"])
        client = await _client(http, server, vault, asm, redirect_uri, issuer, scope)
    except httpx2.TimeoutException:
        raise McpSignInError("it did not answer in time") from None
    except httpx2.HTTPError as exc:
        raise McpSignInError(f"it could not be reached ({type(exc).__name__})") from None
    return Discovered(prm_resource(prm, resource), str(asm.issuer), str(asm.authorization_endpoint),
                      str(asm.token_endpoint), scope, client)


def _check_endpoints(asm: OAuthMetadata) -> None:
    if asm.authorization_endpoint is None or asm.token_endpoint is None:
        raise McpSignInError("its authorization server names no authorization or token endpoint")
    for endpoint in (str(asm.authorization_endpoint), str(asm.token_endpoint)):
        if not _secure(endpoint):
            raise McpSignInError(f"its authorization server's endpoint {endpoint[:200]} is not https")


def _secure(url: str) -> bool:
    """https, or http on this machine's loopback (a development setup): codes and tokens never cross a network
    in the clear."""
    parts = urlsplit(url)
    return parts.scheme == "https" or (parts.scheme == "http" and parts.hostname in ("127.0.0.1", "localhost", "::1"))


def prm_resource(prm: ProtectedResourceMetadata, resource: str) -> str:
    """The resource a token is asked for: the metadata's (checked to hold the server's URL) or the server's own."""
    return str(prm.resource).rstrip("/") if prm.resource else resource


def _initialize() -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": CLIENT_NAME, "version": "1"}}}


async def _resource_metadata(http: httpx2.AsyncClient, server: ServerConfig, challenge: httpx2.Response
                             ) -> ProtectedResourceMetadata:
    if challenge.status_code != 401:
        raise McpSignInError(f"it answered {challenge.status_code} without signing in, not 401: it does not ask "
                             "people to sign in")
    assert server.url is not None
    www = extract_resource_metadata_from_www_auth(challenge)
    for url in build_protected_resource_metadata_discovery_urls(www, server.url):
        found = await handle_protected_resource_response(await http.send(create_oauth_metadata_request(url)))
        if found is not None:
            return found
    raise McpSignInError("it publishes no protected-resource metadata (RFC 9728)")


async def _server_metadata(http: httpx2.AsyncClient, server_url: str, issuer: str) -> OAuthMetadata:
    for url in build_oauth_authorization_server_metadata_discovery_urls(issuer, server_url):
        response = await http.send(create_oauth_metadata_request(url))
        go_on, found = await handle_auth_metadata_response(response)
        if found is not None:
            if not issuers_match(str(found.issuer), issuer):
                raise McpSignInError(f"its authorization server's metadata names another issuer "
                                     f"({str(found.issuer)[:200]})")
            return found
        if not go_on:
            break
    raise McpSignInError("its authorization server publishes no metadata (RFC 8414)")


async def _client(http: httpx2.AsyncClient, server: ServerConfig, vault: McpVault, asm: OAuthMetadata,
                  redirect_uri: str, issuer: str, scope: str | None) -> OAuthClientInformationFull:
    """The configured client, the one registered before (same issuer, our redirect URI), or a new registration."""
    if server.client_id:
        method = "client_secret_post" if server.client_secret else "none"
        return OAuthClientInformationFull(client_id=server.client_id, client_secret=server.client_secret,
                                          token_endpoint_auth_method=method, redirect_uris=[AnyUrl(redirect_uri)])
    stored = await vault.client(server.name)
    if stored is not None:
        info = _usable(stored, issuer, redirect_uri)
        if info is not None:
            return info
        await vault.forget_client(server.name)
    if asm.registration_endpoint is None:
        raise McpSignInError("its authorization server has no dynamic client registration: set client_id for it "
                             "in AGENT_MCP_CONFIG")
    metadata = OAuthClientMetadata(redirect_uris=[AnyUrl(redirect_uri)], client_name=CLIENT_NAME, scope=scope,
                                   grant_types=["authorization_code", "refresh_token"], response_types=["code"],
                                   token_endpoint_auth_method="none")
    try:
        info = await handle_registration_response(
            await http.send(create_client_registration_request(asm, metadata, issuer)))
        check_registration_usable(info)
    except OAuthRegistrationError as exc:
        raise McpSignInError(f"its client registration failed ({str(exc)[:200]})") from None
    if [str(u) for u in info.redirect_uris or []] != [redirect_uri]:
        raise McpSignInError("its client registration answered with a redirect URI that is not ours")
    record = json.loads(info.model_dump_json(exclude_none=True)) | {"issuer": issuer}
    saved = await vault.save_client(server.name, record)
    return _usable(saved, issuer, redirect_uri) or info


def _usable(record: dict[str, Any], issuer: str, redirect_uri: str) -> OAuthClientInformationFull | None:
    try:
        info = OAuthClientInformationFull.model_validate({k: v for k, v in record.items() if k != "issuer"})
    except ValueError:
        return None
    if not issuers_match(str(record.get("issuer", "")), issuer):
        return None
    if [str(u) for u in info.redirect_uris or []] != [redirect_uri]:
        return None
    return info
