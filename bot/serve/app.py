"""The Bolt AsyncApp and the aiohttp app around it: signature guard on raw bytes, /slack/events, /healthz.

Bolt parses a request before it verifies it (malformed JSON or a non-numeric timestamp becomes a 500) and
logs the whole body, legacy ``token`` included, when a signature is wrong. So ``slack_events`` has the door
(``bot.receive.verify``) judge the raw bytes first, answers 400/401 with a one-line reason and never logs the body;
only verified, well-formed requests reach ``AsyncApp.async_dispatch`` (whose own verification is then off, as it
would repeat ours).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from functools import partial
from typing import Any, cast

from aiohttp import web
from slack_bolt.adapter.aiohttp import to_aiohttp_response
from slack_bolt.async_app import AsyncApp
from slack_bolt.logger.messages import warning_client_prioritized_and_token_skipped
from slack_bolt.request.async_request import AsyncBoltRequest

from bot import metrics
from bot.identity import IdentityMiddleware
from bot.logs import OncePer
from bot.oauth.flow import add_oauth_routes, register_revocation_listeners
from bot.oauth.mcp_callback import add_mcp_routes
from bot.receive import listeners
from bot.receive.deps import Services
from bot.receive.http_guard import SlowBodies, rearm_after_response
from bot.receive.listeners.memory import erase_revoked
from bot.receive.verify import MAX_BODY_BYTES, check_body, check_headers, check_signature
from bot.serve.health import RedisProbe
from bot.serve.metrics_http import add_public_metrics
from bot.workspace import WorkspaceParts
from bot.workspace.memory import MemoryStore

log = logging.getLogger(__name__)

EVENTS_PATH = "/slack/events"
HEALTH_PATH = "/healthz"
#: English on purpose: without the workspace's token no users.info can say the asker's language.
NO_INSTALLATION_REPLY = (
    ":warning: The agent can't act in this workspace right now: its installation here is missing or can't be read "
    "(its stored token needs an encryption key the app no longer has). The app's operator must put back the key it "
    "was written with (`SLACK_TOKEN_ENCRYPTION_KEY`), or a workspace admin must reinstall the app; the operator has "
    "the details in the log."
)

SERVICES_KEY: web.AppKey[Services] = web.AppKey("services", Services)
BODIES_KEY: web.AppKey[SlowBodies] = web.AppKey("bodies", SlowBodies)
#: One log line per refusal reason every few seconds, per app.
LOG_GATE_KEY: web.AppKey[OncePer] = web.AppKey("log_gate", OncePer)
#: What the process itself knows is wrong (its worker is not polling), or "".
HealthCheck = Callable[[], str]
HEALTH_KEY: web.AppKey[HealthCheck] = web.AppKey("health")
PROBE_KEY: web.AppKey[RedisProbe] = web.AppKey("redis_probe", RedisProbe)


def _no_problem() -> str:
    return ""

BOLT_KEY: web.AppKey[AsyncApp] = web.AppKey("bolt", AsyncApp)


def _not_the_token_warning(record: logging.LogRecord) -> bool:
    # AsyncApp reads SLACK_BOT_TOKEN from the environment by itself and, given our client too, warns at every
    # start that the token is unused: the client carries that very token (or, in OAuth mode, none at all).
    return record.getMessage() != warning_client_prioritized_and_token_skipped()


def create_app(services: Services, parts: WorkspaceParts | None = None) -> AsyncApp:
    """The Bolt app with every listener registered (over the process's workspace ``parts``); acks only after the
    event is safely enqueued."""
    oauth = services.oauth
    logging.getLogger(f"slack_bolt.{AsyncApp.__name__}").addFilter(_not_the_token_warning)  # added once
    app = AsyncApp(
        client=services.slack,
        # OAuth mode: each request's token comes from the installation store (see bot/oauth/flow.py).
        # An AsyncAuthorize instance (Bolt takes it as is); the stub types only the plain-function form.
        authorize=cast(Any, oauth.authorize) if oauth else None,
        oauth_flow=oauth.flow if oauth else None,
        installation_store=oauth.store if oauth else None,
        signing_secret=None,
        # Listeners only dedupe and enqueue (a few Redis round trips), so they finish long before Slack's 3 s,
        # and answering after them means a Redis failure gets a 5xx and Slack's retry instead of a lost event.
        process_before_response=True,
        request_verification_enabled=False,
        name="agent",
        logger=_bolt_logger(),
        # What a command gets (through its response_url) in a workspace with no usable installation.
        user_facing_authorize_error_message=NO_INSTALLATION_REPLY,
    )
    app.use(IdentityMiddleware())
    listeners.register(app, services, parts)
    if oauth is not None:  # its listeners erase the installation's memories too (``bot.receive.listeners.memory``)
        memories = parts.memories if parts is not None else MemoryStore(services.redis, services.keys)
        register_revocation_listeners(app, oauth, partial(erase_revoked, memories))
    return app


class _NoBodies(logging.Filter):
    """Bolt logs the whole body (legacy token included) of a request no listener took: not here. Nor its error
    line for each request of a workspace without a usable installation: ``StoreAuthorize`` logs why, once."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith(("Unhandled request", "Although the app should be installed"))


def _bolt_logger() -> logging.Logger:
    logger = logging.getLogger("slack_bolt.AsyncApp")
    if not any(isinstance(f, _NoBodies) for f in logger.filters):
        logger.addFilter(_NoBodies())
    return logger


def create_web_app(
    app: AsyncApp, services: Services, *, health: HealthCheck = _no_problem, probe: RedisProbe | None = None
) -> web.Application:
    """The HTTP face: ``POST /slack/events`` (guarded) and ``GET /healthz``."""
    web_app = create_health_app(services, health, probe)
    web_app[BODIES_KEY] = SlowBodies()
    web_app[LOG_GATE_KEY] = OncePer()
    web_app[BOLT_KEY] = app
    web_app.router.add_post(EVENTS_PATH, slack_events)
    if services.oauth is not None:
        add_oauth_routes(web_app, services.oauth)  # GET /slack/install and /slack/oauth_redirect
    if services.mcp is not None:
        add_mcp_routes(web_app, services.mcp)  # GET /mcp/oauth/callback: per-person MCP sign-in
    return web_app


def create_health_app(
    services: Services, health: HealthCheck = _no_problem, probe: RedisProbe | None = None
) -> web.Application:
    """``GET /healthz`` (and ``/metrics`` as the settings allow) alone: what a worker process serves; ``health``
    names a problem of the process, ``probe`` asks Redis for a write (by default on the services' client; the
    service gives it a client of its own, which gives up on a silent Redis)."""
    web_app = web.Application(client_max_size=MAX_BODY_BYTES, middlewares=[rearm_after_response])
    web_app[SERVICES_KEY] = services
    web_app[HEALTH_KEY] = health
    web_app[PROBE_KEY] = probe or RedisProbe(services.redis, services.keys.health_probe())
    web_app.router.add_get(HEALTH_PATH, healthz)
    settings = services.settings
    add_public_metrics(web_app, settings, metrics.arq_queue_depth(services.redis, settings.arq_queue_name))
    return web_app


async def healthz(request: web.Request) -> web.Response:
    """200 when Redis takes a write and this process's worker (if any) is polling; else 503 naming what failed.
    Within a second either way (see bot.serve.health)."""
    problem = await request.app[PROBE_KEY].problem() or request.app[HEALTH_KEY]()
    if problem:
        return web.json_response({"ok": False, "error": problem}, status=503)
    return web.json_response({"ok": True})


async def slack_events(request: web.Request) -> web.Response:
    started = time.perf_counter()
    try:
        return await _slack_events(request)
    finally:
        metrics.observe_ack(time.perf_counter() - started)


async def _slack_events(request: web.Request) -> web.Response:
    services = request.app[SERVICES_KEY]
    secret = services.settings.slack_signing_secret
    timestamp = request.headers.get("X-Slack-Request-Timestamp", "")
    signature = request.headers.get("X-Slack-Signature", "")
    # Everything that can be judged from the headers is, before a byte of the body is read.
    key = secret.get_secret_value() if secret else ""
    problem = check_headers(key, timestamp, signature, request.content_length)
    body = b""
    if not problem:
        read = await request.app[BODIES_KEY].read(request)
        if read is None:
            _refused(request, "the body did not arrive in time")
            return web.Response(status=408, text="the request body did not arrive in time",
                                headers={"Connection": "close"})
        body = read
        problem = check_signature(key, body, timestamp, signature)
    if problem:
        # The reason only, and at most one line per reason every few seconds: the body (and its legacy token)
        # is never logged, and a flood of forged requests cannot flood the log.
        _refused(request, problem)
        return web.Response(status=401, text=problem)
    status, problem = check_body(body, request.content_type)
    if status == 200:
        return web.Response(status=200)  # well-formed, but nothing this app listens to
    if status:
        _refused(request, problem, signed=True)
        return web.Response(status=status, text=problem)
    bolt_request = AsyncBoltRequest(
        body=body.decode(), query=request.query_string, headers={k: v for k, v in request.headers.items()}
    )
    response = await request.app[BOLT_KEY].async_dispatch(bolt_request)
    if response.status == 404:
        return web.Response(status=200)  # no listener for it (a button of an old message): acked, dropped
    return await to_aiohttp_response(response)


def _refused(request: web.Request, problem: str, *, signed: bool = False) -> None:
    ok, held = request.app[LOG_GATE_KEY].allow(problem)
    if ok:
        what = "a signed but malformed" if signed else "a"
        more = f" ({held} more since the last line)" if held else ""
        log.warning("refused %s Slack request: %s%s", what, problem, more)
