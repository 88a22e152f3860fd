"""Wires every listener module into the Bolt app; each module exposes ``register(app, services)``."""

from __future__ import annotations

from slack_bolt.async_app import AsyncApp

from bot.listeners import actions, events
from bot.services import Services

# TODO(limits helper): add `commands` (/agent-limits) and `home` (App Home) here once
# bot/listeners/commands.py and bot/listeners/home.py exist: `from bot.listeners import commands, home`.
MODULES = (events, actions)


def register(app: AsyncApp, services: Services) -> None:
    for module in MODULES:
        module.register(app, services)
