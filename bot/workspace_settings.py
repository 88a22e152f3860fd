"""Per-workspace display settings of the Slack app (verbosity), in Redis beside the workspace's limits."""

from __future__ import annotations

from typing import get_args

from redis.asyncio import Redis

from agent_core.keys import Keys
from bot.redis import as_text, awaited
from bot.settings import Verbosity

VERBOSITIES: tuple[Verbosity, ...] = get_args(Verbosity)


class WorkspaceSettings:
    """``full`` (a reply per step) or ``compact`` (one edited status + the answer), per workspace."""

    def __init__(self, redis: Redis, keys: Keys, *, default: Verbosity = "full") -> None:
        self._redis = redis
        self._keys = keys
        self.default = default

    async def verbosity(self, team_id: str, enterprise_id: str = "") -> Verbosity:
        raw = await awaited(self._redis.hget(self._keys.workspace_settings(team_id, enterprise_id), "verbosity"))
        value = as_text(raw)
        return next((v for v in VERBOSITIES if v == value), self.default)

    async def set_verbosity(self, team_id: str, enterprise_id: str, value: str) -> Verbosity:
        """Store ``value`` (``full`` or ``compact``); raises ValueError naming the choices otherwise."""
        if value not in VERBOSITIES:
            raise ValueError(f"verbosity must be one of {', '.join(VERBOSITIES)}, got {value!r}")
        await awaited(self._redis.hset(self._keys.workspace_settings(team_id, enterprise_id), "verbosity", value))
        return value
