"""What every stage's piece of ``Settings`` shares: where it reads from, and the process roles its checks take.

A piece is a ``SettingsPiece`` holding one stage's fields (field name = environment name, lower-cased); a stage
that hands its settings on to the parts it builds inherits their pieces, and ``bot.settings.Settings`` is the
top of that drawing. Adding a setting is one field in one piece.
"""

from __future__ import annotations

from typing import Literal

from pydantic_settings import BaseSettings, SettingsConfigDict

#: Which processes one ``python -m bot`` runs: both sides, the HTTP side, or agent runs only.
Role = Literal["all", "web", "worker"]


class SettingsPiece(BaseSettings):
    """One stage's settings, read from the environment and ``.env`` like the whole ``Settings``."""

    model_config = SettingsConfigDict(env_file=".env", extra="ignore", populate_by_name=True)


def blank_is_unset(value: object) -> object:
    """An optional setting left empty (``METRICS_PORT=`` in a copy of .env.example) means unset, not invalid."""
    return None if isinstance(value, str) and not value.strip() else value
