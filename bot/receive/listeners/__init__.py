"""Wires every listener module into the Bolt app; each module exposes ``register(app, services, ...)``."""

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


def register(app: AsyncApp, services: Services) -> None:
    # One rules object per process: /agent-limits, App Home, Stop and the agent-session stop event share its
    # admin list and users.info cache.
    limits = commands.limits_for_services(services)
    events.register(app, services, limits)
    actions.register(app, services, limits)
    memories = memory.register(app, services, limits)  # /agent memory …, /agent-limits … memory …, erasures
    commands.register(app, services, limits, memories)
    schedules = agent_command.register(  # /agent schedule …, /agent memory …, and /agent connect … first
        app, services, limits, memories, other=mcp_connect.command_handler(services, limits))
    schedule_home.register(app, services, limits, schedules)  # App Home's Pause / Delete
    memory_home.register(app, services, limits, memories)  # App Home's Forget
    # A creator leaving, a channel closed: their schedules pause (a person deactivated: their memories go).
    schedule_events.register(app, services, limits, memories)
    assistant.register(app, services, limits)  # before home: its Messages-tab app_home_opened listener must match first
    home.register(app, services, limits)
    home_channel.register(app, services, limits)
    feedback.register(app, limits)
    reactions.register(app, services, limits)  # emoji triggers (/agent-limits channel react)
    mcp_connect.register(app, services, limits)  # a person's MCP connections: Connect, Retry, App Home
