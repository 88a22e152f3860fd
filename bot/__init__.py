"""The Slack app: mentions become agent runs, every step a thread reply, follow-ups continue from Redis."""

from bot.serve.app import create_app
from bot.settings import Settings

__all__ = ["Settings", "create_app"]
