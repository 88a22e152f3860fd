"""Slackbot, as the tests act it out: the ``mcp`` SDK's Streamable HTTP client, each request signed as Slack signs
the requests it sends to an MCP server declared with ``auth_type: slack_identity_auth``, and the person it calls
for named in ``_meta.slack``::

    async with slackbot(url, SECRET) as session:
        listed = await session.list_tools(params=as_person("U1", "T0001"))
        result = await session.call_tool("calculator", {"expression": "2+3"}, meta=person("U1", "T0001"))
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import AsyncIterator, Generator
from typing import Any

import httpx2
import mcp.types as types
from mcp.client.session import ClientSession
from mcp.client.streamable_http import streamable_http_client
from slack_sdk.signature import SignatureVerifier


class SlackSigning(httpx2.Auth):
    """``X-Slack-Request-Timestamp`` and ``X-Slack-Signature`` over each request's raw body (``skew``: seconds
    the timestamp is off, to act out a replay)."""

    requires_request_body = True

    def __init__(self, secret: str, *, skew: int = 0) -> None:
        self._verifier = SignatureVerifier(secret)
        self._skew = skew

    def auth_flow(self, request: httpx2.Request) -> Generator[httpx2.Request, httpx2.Response, None]:
        timestamp = str(int(time.time()) + self._skew)
        request.headers["X-Slack-Request-Timestamp"] = timestamp
        request.headers["X-Slack-Signature"] = self._verifier.generate_signature(
            timestamp=timestamp, body=request.content)
        yield request


def person(user_id: str, team_id: str, enterprise_id: str | None = None) -> dict[str, Any]:
    """A request's ``_meta`` naming one person, as Slackbot sends it."""
    slack: dict[str, Any] = {"user_id": user_id, "team_id": team_id}
    if enterprise_id:
        slack["enterprise_id"] = enterprise_id
    return {"slack": slack}


def as_person(user_id: str, team_id: str) -> types.PaginatedRequestParams:
    return types.PaginatedRequestParams.model_validate({"_meta": person(user_id, team_id)})


@contextlib.asynccontextmanager
async def slackbot(url: str, secret: str, *, skew: int = 0) -> AsyncIterator[ClientSession]:
    """An initialized MCP session with ``url`` (``…/mcp``), every request signed with ``secret``."""
    async with (
        httpx2.AsyncClient(auth=SlackSigning(secret, skew=skew), timeout=30) as http,
        streamable_http_client(url, http_client=http) as streams,
        ClientSession(*streams[:2]) as session,
    ):
        await session.initialize()
        yield session
