"""The start-up checks: everything a role needs, refused in one line naming the setting before anything starts.

One function for every entry point: the supervisor calls it before it starts its children or an embedded Redis,
and ``Service.start`` before it connects anywhere. So ``python -m bot``, ``web`` and ``worker``, at any process
count and in either Slack mode, refuse the same settings the same way, and ``python -m bot`` exits 2 (the
supervisor stops on a child's exit 2) instead of starting processes that would fail, or restart, forever.
"""

from __future__ import annotations

import errno
import os
import socket

from agent_core import ConfigError
from bot.oauth.mcp_signin import check as mcp_check
from bot.oauth.mcp_signin import user_servers
from bot.oauth.token_crypto import TokenCipher
from bot.redis import check_url
from bot.settings import Settings
from bot.settings_base import Role
from bot.workspace.settings import Models

IN_USE = "in use"


def check(settings: Settings, role: Role, *, supervisor: bool = False) -> None:
    """Raise ConfigError naming the first setting a process of ``role`` cannot start with.

    ``supervisor``: the parent of ``role``'s processes is asking, so every port its children will listen on is
    checked (for ``all``: the web's PORT and the workers' WORKER_HEALTH_PORT); a process checks its own.
    """
    settings.check_leases()
    if settings.oauth_mode:
        settings.require_oauth(role)
        TokenCipher.from_settings(settings)  # a malformed SLACK_TOKEN_ENCRYPTION_KEY is refused, naming it
    else:
        settings.require_slack(role)
    if not settings.slack_api_url.endswith("/"):
        raise ConfigError(f"SLACK_API_URL must end with '/', got {settings.slack_api_url!r}")
    if role in ("all", "worker"):
        settings.require_llm()
    key = settings.slack_token_encryption_key
    mcp_check(user_servers(settings.agent_mcp_config, os.environ), settings.public_url,
              key.get_secret_value() if key else None)  # "auth": "user" servers: PUBLIC_URL and the key
    Models.from_settings(settings)  # AGENT_MODELS: every model priced (the web checks names against it too)
    if settings.redis_sentinel() is None and settings.redis_url:
        check_url(settings.redis_url)
    if role != "all" and settings.embedded_redis:
        raise ConfigError(
            f"REDIS_URL is not set: `python -m bot {role}` shares a Redis with the other processes, so set "
            "REDIS_URL (or REDIS_SENTINELS); only `python -m bot` runs an embedded one"
        )
    roles: list[Role] = ["web", "worker"] if supervisor and role == "all" else [role]
    ports = [settings.listen_port(r) for r in roles]
    if len(ports) == 2 and ports[0][1] and ports[0][1] == ports[1][1]:
        raise ConfigError(f"WORKER_HEALTH_PORT is PORT ({settings.port}): the workers' /healthz needs its own port")
    for name, port in ports:
        if port:
            problem = port_problem(settings.host, port, reuse_port=settings.http_reuse_port)
            if problem:
                raise ConfigError(describe_port_problem(name, settings.host, port, problem))


def port_problem(host: str, port: int, *, reuse_port: bool) -> str:
    """Why a server could not listen on ``host:port`` now ("" when it could), found by binding it as asyncio does.

    With SO_REUSEADDR (asyncio's default) a bind fails only where a socket listens already, not on connections
    left in TIME_WAIT by a process that just stopped. With ``reuse_port`` the port may be shared with processes
    of the same user that set it too: the supervisor's children.
    """
    try:
        addresses = socket.getaddrinfo(host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror as exc:
        return f"HOST {host!r} does not resolve ({exc.strerror})"
    for family, kind, proto, _, address in addresses:
        with socket.socket(family, kind, proto) as sock:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if reuse_port:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
            if family == socket.AF_INET6:
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)  # as asyncio binds each family apart
            try:
                sock.bind(address)
            except OSError as exc:
                return _reason(exc)
    return ""


def bind_error(name: str, host: str, port: int, exc: OSError) -> ConfigError:
    """The start-up check's line for a server whose own bind failed (the port was taken since)."""
    return ConfigError(describe_port_problem(name, host, port, _reason(exc)))


def describe_port_problem(name: str, host: str, port: int, problem: str) -> str:
    if problem == IN_USE:
        return (f"{name} {port} is already in use on {host}: another process listens there; stop it or set "
                f"{name} to a free port")
    return f"{name} {port} cannot be listened on at {host}: {problem}"


def _reason(exc: OSError) -> str:
    return IN_USE if exc.errno == errno.EADDRINUSE else (exc.strerror or str(exc)).lower()
