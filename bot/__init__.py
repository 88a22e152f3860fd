"""The Slack app: mentions become agent runs, every step a thread reply, follow-ups continue from Redis.

``create_app`` and ``Settings`` are loaded on first use (PEP 562): ``python -m bot``'s supervisor imports only
what it needs before it sets up the processes' shared metrics folder, which must come before prometheus-client
is first imported (``bot.metrics``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from bot.serve.app import create_app
    from bot.settings import Settings

__all__ = ["Settings", "create_app"]


def __getattr__(name: str) -> Any:
    if name == "create_app":
        from bot.serve.app import create_app

        return create_app
    if name == "Settings":
        from bot.settings import Settings

        return Settings
    raise AttributeError(f"module 'bot' has no attribute {name!r}")
