"""The Bolt AsyncApp and the aiohttp app around it: signature guard on raw bytes, /slack/events, /healthz.

Bolt parses a request before it verifies it (malformed JSON or a non-numeric timestamp becomes a 500) and
logs the whole body, legacy ``token`` included, when a signature is wrong. So ``slack_events`` checks the
raw bytes first, answers 400/401 with a one-line reason and never logs the body; only verified, well-formed
requests reach ``AsyncApp.async_dispatch`` (whose own verification is then off, as it would repeat ours).
"""

from __future__ import annotations

import json
import logging
import time
from urllib.parse import parse_qs

from aiohttp import web
from slack_bolt.adapter.aiohttp import to_aiohttp_response
from slack_bolt.async_app import AsyncApp
from slack_bolt.request.async_request import AsyncBoltRequest
from slack_sdk.signature import SignatureVerifier

from bot import listeners
from bot.redis import redis_ok
from bot.services import Services

log = logging.getLogger(__name__)

EVENTS_PATH = "/slack/events"
HEALTH_PATH = "/healthz"
#: Slack's replay window: a request signed longer ago than this is refused.
MAX_CLOCK_SKEW_SECONDS = 300
#: Slack's payloads are small; anything bigger is not from Slack.
MAX_BODY_BYTES = 1_000_000

SERVICES_KEY: web.AppKey[Services] = web.AppKey("services", Services)
BOLT_KEY: web.AppKey[AsyncApp] = web.AppKey("bolt", AsyncApp)


def create_app(services: Services) -> AsyncApp:
    """The Bolt app with every listener registered; acks only after the event is safely enqueued."""
    app = AsyncApp(
        client=services.slack,
        signing_secret=None,
        # Listeners only dedupe and enqueue (a few Redis round trips), so they finish long before Slack's 3 s,
        # and answering after them means a Redis failure gets a 5xx and Slack's retry instead of a lost event.
        process_before_response=True,
        request_verification_enabled=False,
        name="agent",
    )
    listeners.register(app, services)
    return app


def create_web_app(app: AsyncApp, services: Services) -> web.Application:
    """The HTTP face: ``POST /slack/events`` (guarded) and ``GET /healthz``."""
    web_app = web.Application(client_max_size=MAX_BODY_BYTES)
    web_app[SERVICES_KEY] = services
    web_app[BOLT_KEY] = app
    web_app.router.add_post(EVENTS_PATH, slack_events)
    web_app.router.add_get(HEALTH_PATH, healthz)
    return web_app


async def healthz(request: web.Request) -> web.Response:
    services = request.app[SERVICES_KEY]
    if await redis_ok(services.redis):
        return web.json_response({"ok": True})
    return web.json_response({"ok": False, "error": "redis is not answering"}, status=503)


async def slack_events(request: web.Request) -> web.Response:
    services = request.app[SERVICES_KEY]
    secret = services.settings.slack_signing_secret
    body = await request.read()
    problem = check_signature(
        secret.get_secret_value() if secret else "",
        body,
        request.headers.get("X-Slack-Request-Timestamp", ""),
        request.headers.get("X-Slack-Signature", ""),
    )
    if problem:
        # The reason only: the body (and its legacy token) is never logged.
        log.warning("refused a Slack request: %s", problem)
        return web.Response(status=401, text=problem)
    problem = check_body(body, request.content_type)
    if problem:
        log.warning("refused a signed but malformed Slack request: %s", problem)
        return web.Response(status=400, text=problem)
    bolt_request = AsyncBoltRequest(
        body=body.decode(), query=request.query_string, headers={k: v for k, v in request.headers.items()}
    )
    response = await request.app[BOLT_KEY].async_dispatch(bolt_request)
    return await to_aiohttp_response(response)


def check_signature(secret: str, body: bytes, timestamp: str, signature: str) -> str:
    """Why the request is not Slack's (empty when it is)."""
    if not secret:
        return "SLACK_SIGNING_SECRET is not set: refusing every request"
    if not timestamp.isascii() or not timestamp.isdigit():
        return "X-Slack-Request-Timestamp is missing or not a number"
    if abs(time.time() - int(timestamp)) > MAX_CLOCK_SKEW_SECONDS:
        return "X-Slack-Request-Timestamp is more than 5 minutes off: stale or replayed request"
    if not signature.startswith("v0="):
        return "X-Slack-Signature is missing"
    if not SignatureVerifier(secret).is_valid(body=body, timestamp=timestamp, signature=signature):
        return "X-Slack-Signature does not match the body"
    return ""


def check_body(body: bytes, content_type: str) -> str:
    """Why a verified body cannot be parsed (empty when it can): JSON events, forms, ``payload=`` JSON."""
    try:
        text = body.decode()
        if content_type == "application/json":
            if not isinstance(json.loads(text), dict):
                return "the JSON body is not an object"
            return ""
        form = parse_qs(text, keep_blank_values=True, strict_parsing=bool(text))
        if "payload" in form and not isinstance(json.loads(form["payload"][0]), dict):
            return "the payload field is not a JSON object"
    except (UnicodeDecodeError, ValueError):
        return f"the body is not valid {'JSON' if content_type == 'application/json' else 'form data'}"
    return ""
