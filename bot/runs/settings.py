"""``RunsSettings``: the runs stage's piece of ``Settings``, and the slice a run is built from.

A run writes its thread, works within its workspace's limits, reaches Slack with the workspace's own token and
counts its spend in the metrics (naming its workspace or not), so the piece builds on those stages' pieces.
"""

from __future__ import annotations

from pydantic import Field

from bot.metrics_settings import MetricsSettings
from bot.oauth.settings import OAuthSettings
from bot.thread.settings import ThreadSettings
from bot.workspace.defaults import WorkspaceDefaults

#: How long one file's download (bot/runs/downloads.py) may take.
DEFAULT_FILE_DOWNLOAD_TIMEOUT_SECONDS = 30.0
#: The tool calls one person may make through Slackbot (``/mcp``) per minute.
DEFAULT_SLACKBOT_MCP_CALLS_PER_MINUTE = 30


class RunsSettings(ThreadSettings, WorkspaceDefaults, OAuthSettings, MetricsSettings):
    """File downloads and the spend metrics of a run (its approvals' settings are the workspace stage's)."""

    agent_file_download_timeout_seconds: float = Field(
        default=DEFAULT_FILE_DOWNLOAD_TIMEOUT_SECONDS, gt=0, description="How long one file's download may take."
    )

    agent_slackbot_mcp_calls_per_minute: int = Field(
        default=DEFAULT_SLACKBOT_MCP_CALLS_PER_MINUTE, ge=0,
        description="Tool calls one person may make through Slackbot (/mcp) per minute (0: none).",
    )

    @property
    def metrics_name_teams(self) -> bool:
        """METRICS_TEAM_LABELS, whose default follows the mode: one team (the operator's own) is named, many are not."""
        return self.metrics_team_labels if self.metrics_team_labels is not None else not self.oauth_mode
