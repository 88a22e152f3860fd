"""Wires every listener module into the Bolt app; each module exposes ``register(app, services, ...)`` and is
handed the workspace's parts it uses, never the whole."""

from __future__ import annotations

from slack_bolt.async_app import AsyncApp

from bot.receive.deps import Services
from bot.receive.listeners import (
    actions,
    agent_command,
    assistant,
    commands,
    events,
    feedback,
    home,
    home_channel,
    mcp_connect,
    memory,
    memory_home,
    reactions,
    schedule_events,
    schedule_home,
)
from bot.workspace import WorkspaceParts
from bot.workspace.settings import LimitsPolicy


def register(app: AsyncApp, services: Services, parts: WorkspaceParts | None = None) -> None:
    # One set of parts per process (bot.serve wires it; built here when the listeners stand alone): /agent-limits,
    # App Home, Stop and the agent-session stop event share its admin list and users.info cache.
    parts = parts or WorkspaceParts.create(
        services.redis, LimitsPolicy.from_settings(services.settings), key_prefix=services.keys.prefix
    )
    users, home_parts = parts.users, home.HomeParts.of(parts)
    events.register(app, services, users, parts.channels)
    actions.register(app, services, users, parts.approvals.policies)
    # /agent memory …, /agent-limits … memory …, erasures (and, uninstalled, the people's MCP tokens)
    memories = memory.register(app, services, parts, mcp_connect.on_uninstalled(services))
    commands.register(app, services, users, parts.commands, memories)
    schedules = agent_command.register(  # /agent schedule …, /agent memory …, and /agent connect … first
        app, services, users, memories, other=mcp_connect.command_handler(services, users))
    schedule_home.register(app, services, home_parts, schedules)  # App Home's Pause / Delete
    memory_home.register(app, services, home_parts, memories)  # App Home's Forget
    # A creator leaving, a channel closed: their schedules pause (a person deactivated: their memories go).
    schedule_events.register(app, services, memories)
    assistant.register(app, services, users)  # before home: its Messages-tab app_home_opened listener must match first
    home.register(app, services, home_parts)
    home_channel.register(app, services, home_parts)
    feedback.register(app, users, parts.feedback, parts.store)
    reactions.register(app, services, users, parts.places)  # emoji triggers (/agent-limits channel react)
    mcp_connect.register(app, services, home_parts)  # a person's MCP connections: Connect, Retry, App Home
