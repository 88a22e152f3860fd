"""Settings: the whole service's configuration in one typed object, composed of each stage's piece.

Each stage owns its piece (``bot/<stage>/settings.py``; the kernel's in ``bot.slack_client``, ``bot.redis``,
``bot.logs`` and ``bot.telemetry``; the engine's ``AgentSettings`` and the tools' ``ToolSettings``), and a part takes
the piece it reads. A stage that builds the next stage's parts inherits their pieces, so the drawing runs
``ServeSettings → ReceiveSettings → QueueSettings → RunsSettings → ThreadSettings, WorkspaceDefaults,
OAuthSettings`` and ends here, with the pieces every process reads besides. Field names are the environment
names, lower-cased (Slack's own names for Slack settings); adding a setting is one field in one piece.
"""

from __future__ import annotations

from pydantic_settings import SettingsConfigDict

from bot.logs import LogSettings
from bot.serve.settings import ServeSettings
from bot.telemetry import TelemetrySettings
from tools import secret_values


class Settings(ServeSettings, LogSettings, TelemetrySettings):
    """Every setting of ``python -m bot``; the README's settings table documents each with its default."""

    model_config = SettingsConfigDict(env_file=".env", extra="ignore", populate_by_name=True)

    def secrets(self) -> list[str]:
        """Every secret of every piece of the service's settings (found by type: none can be forgotten)."""
        return secret_values(self)
