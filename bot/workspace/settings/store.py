"""The workspace's settings in Redis: limit overrides and their audit, tool rules, other audited hashes.

Keys, under the workspace namespace ``P:E:T`` (see :mod:`bot.keys`)::

    P:E:T:limits          hash   overrides only (field -> value); absent fields follow the settings' defaults
    P:E:T:limits:audit    list   JSON changes, newest first, capped at AUDIT_CAP
    P:E:T:settings        hash   display settings (verbosity, display): bot.workspace.settings.display; the workspace's
                                 model, run-model and channel-managers (audited): bot.workspace.admin.channel_admin
    P:E:T:channel:<C>     hash   a channel's own settings (audited): bot.workspace.settings.channel_settings
    P:E:T:tools           hash   the workspace's tool rules (name or server__* -> on/off); audited in limits:audit
    P:tools:catalog       string the tools the workers offer (JSON), deployment-wide: bot.workspace.settings.catalog

The runs' keys (recent runs, usage counters, the budget) are :mod:`bot.workspace.spend.ledger`'s.

Only overrides are stored, so a workspace nobody configured follows the settings when they change, and
``reset`` is a delete.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import replace
from datetime import datetime
from typing import Any

import redis.asyncio as aioredis
from redis.exceptions import RedisError, WatchError

from agent_core import StoreError, utc_now
from bot.errors import InvalidValue
from bot.identity import Workspace
from bot.keys import DEFAULT_KEY_PREFIX, AppKeys
from bot.redis import as_text, awaited
from bot.workspace.settings.changes import TOOL_FIELD_PREFIX, Change, commit
from bot.workspace.settings.config import (
    FIELDS,
    ConfigField,
    ConfigValue,
    WorkspaceConfig,
    decode_value,
    display,
    encode_value,
    shown,
)
from bot.workspace.settings.tool_choice import (
    PATTERN_RE,
    ToolChoice,
)

log = logging.getLogger(__name__)
#: Optimistic-transaction retries when another admin changes the same workspace at the same moment.
_MAX_WATCH_RETRIES = 20


class WorkspaceLimitsStore:
    """Per-workspace config and its change audit in Redis.

    Args:
        redis: the shared client (``decode_responses`` either way).
        defaults: the settings' values (``AGENT_MAX_STEPS`` ... ``AGENT_BUDGET_PERIOD``); ``reset`` goes here.
        key_prefix: the deployment's global key prefix (``REDIS_KEY_PREFIX``; tests pass their own).
        clock: timezone-aware now, for audit times.
    """

    def __init__(
        self,
        redis: aioredis.Redis,
        *,
        defaults: WorkspaceConfig | None = None,
        key_prefix: str = DEFAULT_KEY_PREFIX,
        clock: Callable[[], datetime] = utc_now,
    ) -> None:
        self.defaults = defaults or WorkspaceConfig()
        self.redis = redis
        self.keys = AppKeys(key_prefix)
        self._redis, self._keys = redis, self.keys
        self._clock = self.clock = clock

    def namespace(self, ws: Workspace) -> str:
        return self._keys.namespace(ws)

    def _config_key(self, ws: Workspace) -> str:
        return self._keys.limits(ws)

    def _audit_key(self, ws: Workspace) -> str:
        return self._keys.limits_audit(ws)

    async def get(self, ws: Workspace) -> WorkspaceConfig:
        """The workspace's effective config: its overrides on top of the defaults."""
        try:
            raw = await awaited(self._redis.hgetall(self._config_key(ws)))
        except RedisError as exc:
            raise unavailable(exc) from exc
        return self._merge(raw)

    async def for_run(
        self, ws: Workspace, *also: str, values: tuple[str, ...] = ()
    ) -> tuple[WorkspaceConfig, ToolChoice, list[Any]]:
        """The config and the tool choice a run starts with, then the hashes ``also`` names and the plain
        ``values``, in one round trip."""
        try:
            async with self._redis.pipeline(transaction=False) as pipe:
                pipe.hgetall(self._config_key(ws))
                pipe.hgetall(self._keys.tool_choice(ws))
                for key in also:
                    pipe.hgetall(key)
                for key in values:
                    pipe.get(key)
                raw = await pipe.execute()
        except RedisError as exc:
            raise unavailable(exc) from exc
        return self._merge(raw[0]), _choice_of(raw[1]), raw[2:]

    def _merge(self, raw: Mapping[Any, Any]) -> WorkspaceConfig:
        overrides: dict[str, Any] = {}
        unreadable: list[ConfigField] = []
        for key, value in raw.items():
            name = as_text(key) or ""
            if name not in FIELDS:
                continue
            try:
                overrides[name] = decode_value(name, as_text(value) or "")
            except InvalidValue:
                # Written by hand or by another version. Not ignored: a limit nobody can read is not "none";
                # the run refuses (``bot.runs.start``'s preflight) until an admin sets it again.
                log.warning("unreadable stored limit %s=%.80r: runs are refused until it is set again", name, value)
                unreadable.append(name)
        return replace(self.defaults, **overrides, unreadable=tuple(sorted(unreadable)))

    async def set(self, ws: Workspace, config_field: ConfigField, value: ConfigValue, actor: str) -> list[Change]:
        """Set one field (validated, e.g. by :func:`parse_value`); returns the audited change, if any."""
        return await self.apply(ws, ((config_field, value),), actor)

    async def apply(
        self, ws: Workspace, changes: Iterable[tuple[ConfigField, ConfigValue]], actor: str
    ) -> list[Change]:
        """Set several fields at once, with their audit entries, in one transaction.

        Values equal to the current effective value are no change and are not audited. Returns the changes.
        """
        wanted = dict(changes)
        for name in wanted:
            if name not in FIELDS:
                raise ValueError(f"not a workspace limit: {name!r}")
        # Encoded (and so read back) before anything is written: what cannot be read back is never stored.
        encoded = {name: encode_value(name, value) for name, value in wanted.items()}

        def plan(before: WorkspaceConfig) -> tuple[dict[str, str], list[Change]]:
            at = self._clock()
            writes: dict[str, str] = {}
            audit: list[Change] = []
            for name, value in wanted.items():
                old = getattr(before, name)
                if old != value or name in before.unreadable:
                    writes[name] = encoded[name]
                    audit.append(Change(actor, at, name, shown(before, name), display(name, value)))
            return writes, audit

        return await self._transact(ws, plan, delete=False)

    async def reset(self, ws: Workspace, actor: str) -> list[Change]:
        """Drop every override: back to the defaults. Audits each field whose effective value changes."""

        def plan(before: WorkspaceConfig) -> tuple[dict[str, str], list[Change]]:
            at = self._clock()
            audit = [
                Change(actor, at, name, shown(before, name), display(name, default))
                for name in FIELDS
                if (default := getattr(self.defaults, name)) != getattr(before, name) or name in before.unreadable
            ]
            return {}, audit

        return await self._transact(ws, plan, delete=True)

    async def _transact(
        self,
        ws: Workspace,
        plan: Callable[[WorkspaceConfig], tuple[dict[str, str], list[Change]]],
        *,
        delete: bool,
    ) -> list[Change]:
        key = self._config_key(ws)

        def write(pipe: Any, raw: Mapping[Any, Any]) -> list[Change]:
            writes, audit = plan(self._merge(raw))
            pipe.multi()
            if delete:
                pipe.delete(key)
            if writes:
                pipe.hset(key, mapping=writes)
            return audit

        return await self._watched(ws, key, write, "limits")

    async def write_audited(
        self,
        ws: Workspace,
        key: str,
        plan: Callable[[dict[str, str]], tuple[dict[str, str | None], list[Change]]],
    ) -> list[Change]:
        """Change fields of one of the workspace's hashes (a channel's settings, its model choices) with their audit
        entries, in one transaction: ``plan`` gets the hash as it is and returns the writes (None deletes a
        field) and the changes; nothing is written when it returns no change."""

        def write(pipe: Any, raw: Mapping[Any, Any]) -> list[Change] | None:
            writes, audit = plan({as_text(k) or "": as_text(v) or "" for k, v in raw.items()})
            if not audit:
                return None
            pipe.multi()
            gone = [name for name, value in writes.items() if value is None]
            if gone:
                pipe.hdel(key, *gone)
            kept = {name: value for name, value in writes.items() if value is not None}
            if kept:
                pipe.hset(key, mapping=kept)
            return audit

        return await self._watched(ws, key, write, "settings")

    async def _watched(
        self, ws: Workspace, key: str, write: Callable[[Any, Mapping[Any, Any]], list[Change] | None], what: str
    ) -> list[Change]:
        """One audited update of the hash ``key``: ``write`` gets the pipeline and the hash as it is, queues its
        writes after MULTI and returns the changes (None: nothing to write). WATCH/MULTI: the old value in an audit
        entry is the one actually replaced, even when two admins change it at once (the loser retries against the
        winner's values)."""
        audit_key = self._audit_key(ws)
        try:
            async with self._redis.pipeline(transaction=True) as pipe:
                for _attempt in range(_MAX_WATCH_RETRIES):
                    try:
                        await pipe.watch(key)
                        audit = write(pipe, await awaited(pipe.hgetall(key)))
                        if audit is None:
                            return []  # the pipeline's exit unwatches
                        await commit(pipe, audit_key, audit, team=ws.team_id, enterprise=ws.enterprise_id)
                        return audit
                    except WatchError:
                        continue
        except RedisError as exc:
            raise unavailable(exc) from exc
        raise StoreError(
            f"The {what} of {self.namespace(ws)!r} kept changing under this update ({_MAX_WATCH_RETRIES} tries); "
            "nothing was changed. Try again."
        )

    async def recent_changes(self, ws: Workspace, n: int = 5) -> list[Change]:
        """The last ``n`` changes, newest first."""
        try:
            raw = await awaited(self._redis.lrange(self._audit_key(ws), 0, n - 1))
        except RedisError as exc:
            raise unavailable(exc) from exc
        return [Change.from_json(r) for r in raw]

    # -- tools --------------------------------------------------------------------------------------------
    async def tool_choice(self, ws: Workspace) -> ToolChoice:
        try:
            raw = await awaited(self._redis.hgetall(self._keys.tool_choice(ws)))
        except RedisError as exc:
            raise unavailable(exc) from exc
        return _choice_of(raw)

    async def set_tool_rule(
        self, ws: Workspace, pattern: str, on: bool, actor: str, names: Sequence[str]
    ) -> list[Change]:
        """Apply ``tools enable|disable <pattern>`` and audit it (``names``: the catalog's, for the old state)."""
        key = self._keys.tool_choice(ws)

        def write(pipe: Any, raw: Mapping[Any, Any]) -> list[Change]:
            before = _choice_of(raw)
            after = before.with_rule(pattern, on)
            old, new = before.state(pattern, names), after.state(pattern, names)
            pipe.multi()
            pipe.delete(key)
            if after.rules:
                pipe.hset(key, mapping={p: "on" if v else "off" for p, v in after.rules.items()})
            return [] if old == new else [Change(actor, self._clock(), f"{TOOL_FIELD_PREFIX}{pattern}", old, new)]

        return await self._watched(ws, key, write, "tools")


def _choice_of(raw: Mapping[Any, Any]) -> ToolChoice:
    rules: dict[str, bool] = {}
    for key, value in raw.items():
        pattern, state = as_text(key) or "", as_text(value)
        if PATTERN_RE.fullmatch(pattern) and state in ("on", "off"):
            rules[pattern] = state == "on"
        else:  # written by hand or by an older version: a rule nobody could have typed is ignored
            log.warning("ignoring invalid stored tool rule %r=%r", key, value)
    return ToolChoice(rules)


def unavailable(exc: BaseException) -> StoreError:
    return StoreError(
        f"The limits store (Redis) is unavailable: {type(exc).__name__}: {exc}. "
        "Check that Redis is running and REDIS_URL points at it, then try again."
    )
