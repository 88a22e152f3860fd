"""The kernel's metrics settings: who sees ``/metrics`` and whether it names workspaces.

Apart from ``bot.metrics`` so that reading the settings does not import prometheus-client: ``python -m bot``'s
supervisor sets ``PROMETHEUS_MULTIPROC_DIR`` after reading them and before prometheus-client is first imported
(it picks file-backed values then), and its children are forked with that import done.
"""

from __future__ import annotations

from pydantic import Field, SecretStr, field_validator

from bot.settings_base import SettingsPiece, blank_is_unset

#: Where a supervisor's processes write their metrics' files (prometheus-client's own setting's name).
MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"

class MetricsSettings(SettingsPiece):
    """The kernel's metrics piece: who sees /metrics (bot/serve/metrics_http.py) and whether it names workspaces."""

    metrics_token: SecretStr | None = Field(
        default=None, description="When set, GET /metrics needs Authorization: Bearer <this token>."
    )
    metrics_port: int | None = Field(
        default=None, ge=0, lt=65536,
        description="Serve /metrics on this port only (not on PORT); one process serves it (0: any free port).",
    )
    metrics_host: str = Field(default="127.0.0.1", description="Address the METRICS_PORT listener binds.")
    metrics_team_labels: bool | None = Field(
        default=None,
        description="Name each workspace (team label) in spend and budget metrics; unset: off in OAuth mode.",
    )

    _blank_is_unset = field_validator("metrics_port", "metrics_team_labels", mode="before")(blank_is_unset)
