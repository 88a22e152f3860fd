"""``ServeSettings``: the serve stage's piece of ``Settings``: the processes and their listeners."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from agent_core import ConfigError
from bot.receive.http_guard import ACCEPT_BATCH, LISTEN_BACKLOG
from bot.receive.settings import ReceiveSettings
from bot.serve.process_count import ProcessCount
from bot.settings_base import Role

DEFAULT_PORT = 3000


class ServeSettings(ReceiveSettings, ProcessCount):
    """Ports, the HTTP server's limits and the worker processes."""

    port: int = Field(
        default=DEFAULT_PORT, ge=0, lt=65536, description="HTTP port of /slack/events and /healthz (0: any free)."
    )
    worker_health_port: int | None = Field(
        default=None, ge=0, lt=65536,
        description="Port of a worker process's /healthz (unset: PORT + 1, so never PORT; 0: any free).",
    )
    host: str = Field(default="0.0.0.0", description="Address the HTTP server binds.")
    http_listen_backlog: int = Field(
        default=LISTEN_BACKLOG, gt=0, description="Kernel queue of connections waiting for accept() (≤ somaxconn)."
    )
    http_accept_batch: int = Field(
        default=ACCEPT_BATCH, gt=0, description="Connections accepted per event-loop pass."
    )
    http_max_connections_per_ip: int = Field(
        default=0, ge=0, description="Open connections per peer address (0: no cap; keep 0 behind a load balancer)."
    )
    agent_slackbot_mcp: Literal["on", "off"] = Field(
        default="on",
        description="Serve the workspace's tools to Slackbot at /mcp (Slack-signed requests only); off: no /mcp route.",
    )
    http_reuse_port: bool = Field(
        default=False,
        description="Bind PORT (a worker: WORKER_HEALTH_PORT) with SO_REUSEPORT: the supervisor's children share it.",
    )

    def listen_port(self, role: Role) -> tuple[str, int]:
        """The setting naming the port a process of ``role`` listens on, and the port.

        ``all`` and ``web`` serve ``/slack/events`` and ``/healthz`` on PORT; a worker process serves its own
        ``/healthz`` on WORKER_HEALTH_PORT, by default the port after PORT, so a worker started beside the web
        process from the same settings never asks for the web's port.
        """
        if role != "worker":
            return "PORT", self.port
        if self.worker_health_port is not None:
            return "WORKER_HEALTH_PORT", self.worker_health_port
        if self.port >= 65535:
            raise ConfigError("WORKER_HEALTH_PORT is not set and PORT is 65535, so PORT + 1 is no port: set it")
        return "WORKER_HEALTH_PORT", self.port + 1 if self.port else 0
