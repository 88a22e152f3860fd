"""Per-workspace limits and budget: config and change audit in Redis, the strict parser, the admin check.

The pieces, used by ``/agent-limits`` (``bot/listeners/commands.py``), App Home
(``bot/listeners/home.py``) and the run job (``bot/jobs.py``)::

    store = WorkspaceLimitsStore(redis, defaults=WorkspaceConfig(budget_micros=10_000_000))
    ws = Workspace("T123")
    config = await store.get(ws)                       # defaults merged with the workspace's overrides
    limits = limits_for(config, base=settings.limits())  # agent_core.Limits for the next run
    budget = store.budget_for(ws, config)              # a RedisBudget fixed for this run
    match parse_command("budget 25 daily"):
        case UsageError() as bad: reply(bad.text)
        case SetCommand(changes=changes): await store.apply(ws, changes, actor="U1")

Keys, under the workspace namespace ``P:E:T`` of :class:`agent_core.keys.Keys`::

    P:E:T:limits          hash   overrides only (field -> value); absent fields follow the settings' defaults
    P:E:T:limits:audit    list   JSON changes, newest first, capped at AUDIT_CAP
    P:E:T:runs            list   JSON run summaries for App Home, newest first, capped at RUNS_CAP
    {P:E:T}:budget:...    the budget's own keys (see agent_core.redis_budget)

Only overrides are stored, so a workspace nobody configured follows the settings when they change, and
``reset`` is a delete.
"""

from __future__ import annotations

import json
import logging
import re
import time
from collections.abc import Awaitable, Callable, Collection, Iterable, Mapping
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any, Literal, TypeVar, cast, get_args

import redis.asyncio as aioredis
from redis.exceptions import RedisError, WatchError
from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from agent_core.cost import format_usd, usd_to_micros
from agent_core.errors import ConfigError, StoreError
from agent_core.keys import DEFAULT_KEY_PREFIX, Keys
from agent_core.limits import Limits
from agent_core.redis_budget import (
    DEFAULT_RESERVATION_TTL_SECONDS,
    BudgetUsage,
    Period,
    RedisBudget,
    utc_now,
)

log = logging.getLogger(__name__)
T = TypeVar("T")

__all__ = [
    "AUDIT_CAP",
    "RUNS_CAP",
    "Change",
    "Command",
    "ConfigField",
    "InvalidValue",
    "LimitsPolicy",
    "ResetCommand",
    "RunBlocked",
    "RunPlan",
    "RunRecord",
    "RunRefusal",
    "SetCommand",
    "ShowCommand",
    "SlackLookupError",
    "SlackUsers",
    "UsageError",
    "Workspace",
    "WorkspaceConfig",
    "WorkspaceLimits",
    "WorkspaceLimitsStore",
    "budget_exhausted_message",
    "describe_budget",
    "display",
    "format_show",
    "is_exhausted",
    "limits_for",
    "parse_command",
    "parse_value",
    "run_permission",
    "who_may_change",
]

MICROS_PER_USD = 1_000_000
DEFAULT_MAX_STEPS = 15
DEFAULT_MAX_TOKENS = 50_000
DEFAULT_MAX_COST_MICROS = 500_000
DEFAULT_BUDGET_USD = Decimal("10.00")
"""$10.00 per period: small enough that a misconfigured workspace cannot run up a large bill."""
DEFAULT_BUDGET_MICROS = 10_000_000
DEFAULT_PERIOD: Period = "monthly"
ADMIN_CACHE_SECONDS = 300.0
"""users.info answers are reused this long: admin changes take effect within five minutes."""
AUDIT_CAP = 100
#: Optimistic-transaction retries when another admin changes the same workspace at the same moment.
_MAX_WATCH_RETRIES = 20
RUNS_CAP = 50

ConfigField = Literal["max_steps", "max_tokens", "max_cost_micros", "budget_micros", "period"]
ConfigValue = int | str | None
_FIELDS: tuple[ConfigField, ...] = get_args(ConfigField)

#: What people type and read for each field.
LABELS: dict[ConfigField, str] = {
    "max_steps": "max-steps",
    "max_tokens": "max-tokens",
    "max_cost_micros": "max-cost",
    "budget_micros": "budget",
    "period": "budget period",
}


# --------------------------------------------------------------------------------------------- value objects
@dataclass(frozen=True, slots=True)
class Workspace:
    """The installation a run is paid by: the team, inside its enterprise when there is one."""

    team_id: str
    enterprise_id: str = ""

    def __post_init__(self) -> None:
        if not _ID_RE.fullmatch(self.team_id):
            raise ValueError(f"Workspace.team_id must be a Slack team id, got {self.team_id!r}")
        if self.enterprise_id and not _ID_RE.fullmatch(self.enterprise_id):
            raise ValueError(f"Workspace.enterprise_id must be a Slack id, got {self.enterprise_id!r}")

    @classmethod
    def of(cls, team_id: str | None, enterprise_id: str | None = None) -> Workspace:
        """From Bolt's resolved context (``context.team_id``, ``context.enterprise_id``).

        An org-wide install may deliver a request without a team: it is then paid by the enterprise as a whole
        (team part ``-``), never by whichever team id a payload happens to carry.
        """
        if not team_id and not enterprise_id:
            raise ValueError("a workspace needs a team id or an enterprise id; Bolt resolved neither")
        return cls(team_id or "-", enterprise_id or "")


_ID_RE = re.compile(r"[A-Za-z0-9_-]+", re.ASCII)


@dataclass(frozen=True, slots=True, kw_only=True)
class WorkspaceConfig:
    """A workspace's limits. Each run reads it once when it starts; changes apply to the next run."""

    max_steps: int = DEFAULT_MAX_STEPS
    """LLM calls per run (``Limits.max_steps``)."""
    max_tokens: int = DEFAULT_MAX_TOKENS
    """Prompt + completion tokens per run (``Limits.max_tokens``)."""
    max_cost_micros: int = DEFAULT_MAX_COST_MICROS
    """Cost cap of one run in micro-dollars (``Limits.max_cost_micros``); separate from the budget."""
    budget_micros: int | None = DEFAULT_BUDGET_MICROS
    """What all runs of the workspace may spend per period; None = no budget; 0 freezes spending."""
    period: Period = DEFAULT_PERIOD
    """``monthly`` (resets on the 1st, 00:00 UTC) or ``daily`` (resets at 00:00 UTC)."""


@dataclass(frozen=True, slots=True)
class Change:
    """One audited change: who, when, what, and the effective values before and after."""

    actor: str
    at: datetime
    field: ConfigField
    old: str
    new: str

    def to_json(self) -> str:
        data = {
            "who": self.actor,
            "at": self.at.isoformat(),
            "field": self.field,
            "old": self.old,
            "new": self.new,
        }
        return json.dumps(data)

    @classmethod
    def from_json(cls, raw: str | bytes) -> Change:
        data = json.loads(raw)
        return cls(str(data["who"]), datetime.fromisoformat(data["at"]), data["field"], data["old"], data["new"])

    def describe(self) -> str:
        return f"{_when(self.at)} <@{self.actor}>: {LABELS[self.field]} {self.old} → {self.new}"


@dataclass(frozen=True, slots=True, kw_only=True)
class RunRecord:
    """A finished run as App Home lists it."""

    user_id: str
    at: datetime
    stop_reason: str
    steps: int
    cost_micros: int
    channel_id: str
    thread_ts: str
    permalink: str = ""
    run_id: str = ""
    #: Why a run ended badly, for the admin (e.g. Slack refused every post in the thread).
    note: str = ""

    def to_json(self) -> str:
        data = {
            "user": self.user_id,
            "at": self.at.isoformat(),
            "stop_reason": self.stop_reason,
            "steps": self.steps,
            "cost_micros": self.cost_micros,
            "channel": self.channel_id,
            "thread_ts": self.thread_ts,
            "permalink": self.permalink,
            "run_id": self.run_id,
        }
        if self.note:
            data["note"] = self.note
        return json.dumps(data)

    @classmethod
    def from_json(cls, raw: str | bytes) -> RunRecord:
        d = json.loads(raw)
        return cls(
            user_id=str(d["user"]),
            at=datetime.fromisoformat(d["at"]),
            stop_reason=str(d["stop_reason"]),
            steps=int(d["steps"]),
            cost_micros=int(d["cost_micros"]),
            channel_id=str(d["channel"]),
            thread_ts=str(d["thread_ts"]),
            permalink=str(d.get("permalink", "")),
            run_id=str(d.get("run_id", "")),
            note=str(d.get("note", "")),
        )


def limits_for(config: WorkspaceConfig, base: Limits | None = None) -> Limits:
    """The engine's ``Limits`` for a run of this workspace; the fields it cannot set come from ``base``."""
    return replace(
        base or Limits(),
        max_steps=config.max_steps,
        max_tokens=config.max_tokens,
        max_cost_micros=config.max_cost_micros,
    )


# --------------------------------------------------------------------------------------------- parsing
USAGE = """\
*Usage:* `/agent-limits [show]` shows this workspace's limits, budget and spend (anyone).
Workspace admins and owners can change them:
• `/agent-limits budget <usd> [monthly|daily]` what all runs may spend per period, $0.00 to $100,000.00 \
(0 freezes spending; the period stays as it is when not given)
• `/agent-limits max-steps <n>` LLM calls per run, 1 to 200
• `/agent-limits max-tokens <n>` tokens per run, 1,000 to 2,000,000
• `/agent-limits max-cost <usd>` cost cap of one run, $0.01 to $100.00
• `/agent-limits reset` back to the defaults
• `/agent-limits verbosity full|compact` full: a thread reply per step; compact: one status message \
edited per step, then the answer
Amounts are plain dollars with at most two decimals, like `25` or `0.50`."""


class InvalidValue(ValueError):
    """A value someone typed is not acceptable; the message says what is."""


@dataclass(frozen=True, slots=True)
class _Bound:
    low: int
    high: int


#: Sane bounds. Money in micro-dollars. A budget of 0 is allowed: it freezes spending without removing limits.
BOUNDS: dict[ConfigField, _Bound] = {
    "budget_micros": _Bound(0, 100_000 * MICROS_PER_USD),
    "max_cost_micros": _Bound(10_000, 100 * MICROS_PER_USD),
    "max_steps": _Bound(1, 200),
    "max_tokens": _Bound(1_000, 2_000_000),
}

# ASCII digits only (re.ASCII and explicit [0-9]): int()/Decimal() would accept '١٢٣', '1_000', 'nan', '1e3'.
# The digit counts keep the numbers far from anything that could be slow or overflow.
_MONEY_RE = re.compile(r"\$?(0|[1-9][0-9]{0,8})(?:\.([0-9]{1,2}))?", re.ASCII)
_COUNT_RE = re.compile(r"(0|[1-9][0-9]{0,9})", re.ASCII)


def parse_value(config_field: ConfigField, text: str) -> int | str:
    """Validate one value as typed (``"25.00"``, ``"40"``, ``"daily"``); raises :class:`InvalidValue`."""
    text = text.strip()
    if config_field == "period":
        if text.lower() not in ("monthly", "daily"):
            raise InvalidValue(f"The budget period must be `monthly` or `daily`, not `{_quote(text)}`.")
        return text.lower()
    bound = BOUNDS[config_field]
    label = LABELS[config_field]
    if config_field in ("budget_micros", "max_cost_micros"):
        match = _MONEY_RE.fullmatch(text)
        if match is None:
            raise InvalidValue(
                f"`{label}` needs a dollar amount with at most two decimals, like `25` or `0.50`; got `{_quote(text)}`."
            )
        micros = int(match[1]) * MICROS_PER_USD + int((match[2] or "0").ljust(2, "0")) * 10_000
        if not bound.low <= micros <= bound.high:
            raise InvalidValue(
                f"`{label}` must be between {format_usd(bound.low)} and {format_usd(bound.high)}; got `{_quote(text)}`."
            )
        return micros
    match = _COUNT_RE.fullmatch(text)
    if match is None:
        raise InvalidValue(f"`{label}` needs a whole number written with digits 0-9, got `{_quote(text)}`.")
    count = int(match[1])
    if not bound.low <= count <= bound.high:
        raise InvalidValue(f"`{label}` must be between {bound.low:,} and {bound.high:,}; got `{_quote(text)}`.")
    return count


def _quote(text: str) -> str:
    """User text echoed inside backticks: short, and no backtick or Slack control characters to break out."""
    cleaned = text.replace("`", "'").replace("<", "‹").replace(">", "›").replace("&", "＆")
    return cleaned if len(cleaned) <= 40 else cleaned[:37] + "..."


@dataclass(frozen=True, slots=True)
class ShowCommand:
    """``/agent-limits`` or ``/agent-limits show``."""


@dataclass(frozen=True, slots=True)
class SetCommand:
    """A change of one or two fields (``budget 25 daily`` sets the budget and its period)."""

    changes: tuple[tuple[ConfigField, ConfigValue], ...]


@dataclass(frozen=True, slots=True)
class ResetCommand:
    """``/agent-limits reset``: every field back to the settings' defaults."""


@dataclass(frozen=True, slots=True)
class UsageError:
    """The command could not be understood; ``text`` is the reply (the problem, then the usage)."""

    problem: str = ""

    @property
    def text(self) -> str:
        return f"{self.problem}\n\n{USAGE}" if self.problem else USAGE


Command = ShowCommand | SetCommand | ResetCommand

_SUBCOMMANDS: dict[str, ConfigField] = {
    "budget": "budget_micros",
    "max-steps": "max_steps",
    "max-tokens": "max_tokens",
    "max-cost": "max_cost_micros",
}


def parse_command(text: str) -> Command | UsageError:
    """Parse the text after ``/agent-limits``. Strict: anything unexpected is a :class:`UsageError`."""
    words = text.split()
    if not words:
        return ShowCommand()
    name, args = words[0].lower(), words[1:]
    if name == "show" or name == "reset":
        if args:
            return UsageError(f"`{name}` takes no value.")
        return ShowCommand() if name == "show" else ResetCommand()
    if name == "help":
        return UsageError()
    config_field = _SUBCOMMANDS.get(name)
    if config_field is None:
        return UsageError(f"Unknown subcommand `{_quote(words[0])}`.")
    most = 2 if config_field == "budget_micros" else 1
    if not 1 <= len(args) <= most:
        return UsageError(f"`{name}` takes {'an amount and an optional period' if most == 2 else 'one value'}.")
    try:
        changes: list[tuple[ConfigField, ConfigValue]] = [(config_field, parse_value(config_field, args[0]))]
        if len(args) == 2:
            changes.append(("period", parse_value("period", args[1])))
    except InvalidValue as exc:
        return UsageError(str(exc))
    return SetCommand(tuple(changes))


# --------------------------------------------------------------------------------------------- the store
def _text(raw: str | bytes) -> str:
    return raw.decode() if isinstance(raw, bytes) else raw


def _encode(config_field: ConfigField, value: ConfigValue) -> str:
    return "none" if value is None else str(value)


def _decode(config_field: ConfigField, raw: str) -> ConfigValue:
    if config_field == "budget_micros" and raw == "none":
        return None
    if config_field == "period":
        return str(parse_value("period", raw))
    if not _COUNT_RE.fullmatch(raw) or not BOUNDS[config_field].low <= int(raw) <= BOUNDS[config_field].high:
        raise InvalidValue(raw)
    return int(raw)


def display(config_field: ConfigField, value: ConfigValue) -> str:
    """A field's value as people read it: ``$0.50``, ``50,000``, ``monthly``, ``none``."""
    if value is None:
        return "none"
    if config_field in ("budget_micros", "max_cost_micros") and isinstance(value, int):
        return format_usd(value)
    if isinstance(value, int):
        return f"{value:,}"
    return value


class WorkspaceLimitsStore:
    """Per-workspace config, change audit and recent runs in Redis.

    Args:
        redis: the shared client (``decode_responses`` either way).
        defaults: the settings' values (``AGENT_MAX_STEPS`` ... ``AGENT_BUDGET_PERIOD``); ``reset`` goes here.
        key_prefix: the deployment's global key prefix (``REDIS_KEY_PREFIX``; tests pass their own).
        clock: timezone-aware now, for audit times and budget periods.
        reservation_ttl_seconds: handed to every :class:`RedisBudget` this store builds.
    """

    def __init__(
        self,
        redis: aioredis.Redis,
        *,
        defaults: WorkspaceConfig = WorkspaceConfig(),
        key_prefix: str = DEFAULT_KEY_PREFIX,
        clock: Callable[[], datetime] = utc_now,
        reservation_ttl_seconds: int = DEFAULT_RESERVATION_TTL_SECONDS,
    ) -> None:
        self.defaults = defaults
        self._redis = redis
        self._keys = Keys(key_prefix)
        self._clock = clock
        self._reservation_ttl = reservation_ttl_seconds

    def namespace(self, ws: Workspace) -> str:
        return self._keys.namespace(ws.team_id, ws.enterprise_id)

    def _config_key(self, ws: Workspace) -> str:
        return self._keys.limits(ws.team_id, ws.enterprise_id)

    def _audit_key(self, ws: Workspace) -> str:
        return self._keys.limits_audit(ws.team_id, ws.enterprise_id)

    def _runs_key(self, ws: Workspace) -> str:
        return self._keys.recent_runs(ws.team_id, ws.enterprise_id)

    async def get(self, ws: Workspace) -> WorkspaceConfig:
        """The workspace's effective config: its overrides on top of the defaults."""
        try:
            raw = await _awaited(self._redis.hgetall(self._config_key(ws)))
        except RedisError as exc:
            raise _unavailable(exc) from exc
        return self._merge(raw)

    def _merge(self, raw: Mapping[Any, Any]) -> WorkspaceConfig:
        overrides: dict[str, Any] = {}
        for key, value in raw.items():
            name = _text(key)
            if name not in _FIELDS:
                continue
            try:
                overrides[name] = _decode(name, _text(value))
            except InvalidValue:
                # Written by hand or by an older version: ignore it rather than run with a nonsense limit.
                log.warning("ignoring invalid stored limit %s=%r", name, value)
        return replace(self.defaults, **overrides)

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
        for name, value in wanted.items():
            if name not in _FIELDS:
                raise ValueError(f"not a workspace limit: {name!r}")
            if value is not None or name != "budget_micros":
                # The same validation as typed values, so a caller cannot store what a person could not.
                _decode(name, _encode(name, value))

        def plan(before: WorkspaceConfig) -> tuple[dict[str, str], list[Change]]:
            at = self._clock()
            writes: dict[str, str] = {}
            audit: list[Change] = []
            for name, value in wanted.items():
                old = getattr(before, name)
                if old != value:
                    writes[name] = _encode(name, value)
                    audit.append(Change(actor, at, name, display(name, old), display(name, value)))
            return writes, audit

        return await self._transact(ws, plan, delete=False)

    async def reset(self, ws: Workspace, actor: str) -> list[Change]:
        """Drop every override: back to the defaults. Audits each field whose effective value changes."""

        def plan(before: WorkspaceConfig) -> tuple[dict[str, str], list[Change]]:
            at = self._clock()
            audit = [
                Change(actor, at, name, display(name, getattr(before, name)), display(name, default))
                for name in _FIELDS
                if (default := getattr(self.defaults, name)) != getattr(before, name)
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
        # WATCH/MULTI: the old value in the audit entry is the one actually replaced, even when two admins
        # change the same workspace at once (the loser retries against the winner's values).
        key, audit_key = self._config_key(ws), self._audit_key(ws)
        try:
            async with self._redis.pipeline(transaction=True) as pipe:
                for _attempt in range(_MAX_WATCH_RETRIES):
                    try:
                        await pipe.watch(key)
                        writes, audit = plan(self._merge(await _awaited(pipe.hgetall(key))))
                        pipe.multi()  # type: ignore[no-untyped-call]
                        if delete:
                            pipe.delete(key)
                        if writes:
                            pipe.hset(key, mapping=writes)
                        if audit:
                            pipe.lpush(audit_key, *(c.to_json() for c in audit))
                            pipe.ltrim(audit_key, 0, AUDIT_CAP - 1)
                        await pipe.execute()
                        return audit
                    except WatchError:
                        continue
        except RedisError as exc:
            raise _unavailable(exc) from exc
        raise StoreError(
            f"The limits of {self.namespace(ws)!r} kept changing under this update ({_MAX_WATCH_RETRIES} tries); "
            "nothing was changed. Try again."
        )

    async def recent_changes(self, ws: Workspace, n: int = 5) -> list[Change]:
        """The last ``n`` changes, newest first."""
        try:
            raw = await _awaited(self._redis.lrange(self._audit_key(ws), 0, n - 1))
        except RedisError as exc:
            raise _unavailable(exc) from exc
        return [Change.from_json(r) for r in raw]

    # -- budget and runs ----------------------------------------------------------------------------------
    def budget_for(self, ws: Workspace, config: WorkspaceConfig) -> RedisBudget:
        """The workspace's budget, with the limit and period of ``config`` fixed for one run."""
        return RedisBudget(
            self._redis,
            namespace=self.namespace(ws),
            limit_micros=config.budget_micros,
            period=config.period,
            clock=self._clock,
            reservation_ttl_seconds=self._reservation_ttl,
        )

    async def usage(self, ws: Workspace, config: WorkspaceConfig) -> BudgetUsage:
        """Spent, held and remaining this period (raises ``BudgetUnavailable`` when Redis is down)."""
        return await self.budget_for(ws, config).usage_summary()

    async def record_run(self, ws: Workspace, run: RunRecord) -> None:
        """Append a finished run to the workspace's recent runs (App Home shows the last ten)."""
        key = self._runs_key(ws)
        try:
            async with self._redis.pipeline(transaction=True) as pipe:
                pipe.lpush(key, run.to_json())
                pipe.ltrim(key, 0, RUNS_CAP - 1)
                await pipe.execute()
        except RedisError as exc:
            raise _unavailable(exc) from exc

    async def recent_runs(self, ws: Workspace, n: int = 10) -> list[RunRecord]:
        try:
            raw = await _awaited(self._redis.lrange(self._runs_key(ws), 0, n - 1))
        except RedisError as exc:
            raise _unavailable(exc) from exc
        return [RunRecord.from_json(r) for r in raw]


async def _awaited(result: Awaitable[T] | T) -> T:
    # redis-py types each command as "Awaitable[T] | T" (one stub for sync and async clients); on the async
    # client it is always the awaitable.
    return await cast(Awaitable[T], result)


def _unavailable(exc: BaseException) -> StoreError:
    return StoreError(
        f"The limits store (Redis) is unavailable: {type(exc).__name__}: {exc}. "
        "Check that Redis is running and REDIS_URL points at it, then try again."
    )


# ------------------------------------------------------------------------------------------ who may do what
class SlackLookupError(Exception):
    """users.info failed, so nobody's permissions can be decided; the reply asks to try again."""

    def __init__(self, user_id: str, error: str) -> None:
        super().__init__(
            f"Couldn't look up <@{user_id}> in Slack ({error}), so I can't check permissions. "
            "Please try again in a minute."
        )
        self.user_id = user_id
        self.error = error


@dataclass(frozen=True, slots=True)
class RunRefusal:
    """Why a user may not start a run on this workspace's budget; ``message`` is the reply."""

    reason: Literal["guest", "external"]
    message: str


def _member_of(user: Mapping[str, Any], team_id: str | None) -> bool:
    """Whether the user belongs to ``team_id`` (directly, or as an Enterprise Grid member of it)."""
    if not team_id or team_id == "-":
        return not user.get("is_stranger", False)
    if user.get("team_id") == team_id:
        return True
    teams = (user.get("enterprise_user") or {}).get("teams") or ()
    return team_id in teams


def run_permission(
    user: Mapping[str, Any], team_id: str | None, *, allow_guests: bool = False, allow_external: bool = False
) -> RunRefusal | None:
    """None when ``user`` (a users.info ``user`` object) may start runs paid by ``team_id``'s budget."""
    if not allow_external and (user.get("is_stranger") or not _member_of(user, team_id)):
        return RunRefusal(
            "external",
            "Sorry, I can only run for members of this workspace: people from other organisations in a "
            "shared channel can't start runs on its budget. Ask someone from this workspace to mention me.",
        )
    if not allow_guests and (user.get("is_restricted") or user.get("is_ultra_restricted")):
        return RunRefusal(
            "guest",
            "Sorry, guests can't start runs: they are paid from this workspace's budget. "
            "Ask a full member to mention me; the app's operator can allow guests (AGENT_ALLOW_GUESTS).",
        )
    return None


def who_may_change(admin_user_ids: Collection[str]) -> str:
    """ "workspace admins and owners (or <@U1>, <@U2>)" for refusals and budget messages."""
    listed = ", ".join(f"<@{u}>" for u in sorted(admin_user_ids))
    return "workspace admins and owners" + (f" (or {listed})" if listed else "")


class SlackUsers:
    """users.info answers, cached briefly, and the decisions made from them (admin, may start a run).

    Args:
        admin_user_ids: ``AGENT_ADMIN_USER_IDS``: may change limits whatever Slack says.
        allow_guests: ``AGENT_ALLOW_GUESTS``; allow_external: ``AGENT_ALLOW_EXTERNAL_USERS``.
        ttl_seconds: how long an answer is reused; clock: monotonic seconds (tests inject one).
    """

    def __init__(
        self,
        *,
        admin_user_ids: Collection[str] = (),
        allow_guests: bool = False,
        allow_external: bool = False,
        ttl_seconds: float = ADMIN_CACHE_SECONDS,
        clock: Callable[[], float] = time.monotonic,
        max_entries: int = 10_000,
    ) -> None:
        self.admin_user_ids = frozenset(admin_user_ids)
        self.allow_guests = allow_guests
        self.allow_external = allow_external
        self._ttl = ttl_seconds
        self._clock = clock
        self._max_entries = max_entries
        self._cache: dict[str, tuple[float, dict[str, Any]]] = {}

    async def info(self, client: AsyncWebClient, user_id: str) -> dict[str, Any]:
        """The users.info ``user`` object; raises :class:`SlackLookupError` when Slack says no."""
        now = self._clock()
        cached = self._cache.get(user_id)
        if cached is not None and cached[0] > now:
            return cached[1]
        try:
            response = await client.users_info(user=user_id)
        except SlackApiError as exc:
            raise SlackLookupError(user_id, str(exc.response.get("error", "unknown_error"))) from exc
        user = response.get("user")
        if not isinstance(user, dict):
            raise SlackLookupError(user_id, "no user in the answer")
        if len(self._cache) >= self._max_entries:
            self._cache.clear()  # crude, but bounded; a refill costs one users.info per active user
        self._cache[user_id] = (now + self._ttl, user)
        return user

    async def is_admin(self, client: AsyncWebClient, team_id: str | None, user_id: str) -> bool:
        """May ``user_id`` change ``team_id``'s limits? Listed users may; else Slack's admin/owner flags."""
        if user_id in self.admin_user_ids:
            return True
        user = await self.info(client, user_id)
        if user.get("deleted") or user.get("is_restricted") or user.get("is_ultra_restricted"):
            return False
        if not _member_of(user, team_id):
            return False  # an admin of another organisation is no admin here
        enterprise = user.get("enterprise_user") or {}
        flags = ("is_admin", "is_owner", "is_primary_owner")
        return any(bool(user.get(f)) for f in flags) or any(bool(enterprise.get(f)) for f in flags[:2])

    async def run_permission(self, client: AsyncWebClient, team_id: str | None, user_id: str) -> RunRefusal | None:
        """None when the user may start a run on ``team_id``'s budget, else the refusal to reply with."""
        user = await self.info(client, user_id)
        return run_permission(user, team_id, allow_guests=self.allow_guests, allow_external=self.allow_external)

    def who_may_change(self) -> str:
        return who_may_change(self.admin_user_ids)


# --------------------------------------------------------------------------------------------- replies
def _when(t: datetime) -> str:
    return t.astimezone(UTC).strftime("%Y-%m-%d %H:%M UTC")


def _reset_date(usage: BudgetUsage) -> str:
    return usage.resets_at.strftime("%Y-%m-%d") + " (00:00 UTC)"


def describe_budget(config: WorkspaceConfig) -> str:
    if config.budget_micros is None:
        return "no budget"
    frozen = " (spending frozen)" if config.budget_micros == 0 else ""
    return f"{format_usd(config.budget_micros)} per {_unit(config.period)}{frozen}"


def _unit(period: Period) -> str:
    return "month" if period == "monthly" else "day"


def format_show(
    config: WorkspaceConfig,
    usage: BudgetUsage,
    changes: Iterable[Change],
    *,
    can_change: bool,
    admin_user_ids: Collection[str] = (),
) -> str:
    """The ephemeral answer to ``/agent-limits show`` (mrkdwn)."""
    lines = [
        "*Agent limits for this workspace*",
        f"• Max steps per run: {config.max_steps:,}",
        f"• Max tokens per run: {config.max_tokens:,}",
        f"• Max cost per run: {format_usd(config.max_cost_micros)}",
        f"• Budget: {describe_budget(config)}",
        f"• Spent {'this month' if usage.window.period == 'monthly' else 'today'}: {format_usd(usage.spent_micros)}"
        + (f" (+ {format_usd(usage.held_micros)} held by runs in progress)" if usage.held_micros else ""),
    ]
    if usage.remaining_micros is not None:
        lines.append(f"• Remaining: {format_usd(usage.remaining_micros)}")
    lines.append(f"• Period resets on {_reset_date(usage)}")
    recent = list(changes)
    if recent:
        lines.append("*Recent changes*")
        lines.extend(f"• {c.describe()}" for c in recent)
    if not can_change:
        lines.append(f"_Only {who_may_change(admin_user_ids)} can change these._")
    return "\n".join(lines)


def budget_exhausted_message(config: WorkspaceConfig, usage: BudgetUsage, admin_user_ids: Collection[str]) -> str:
    """The immediate reply to a mention when the workspace's budget is used up (stop reason verbatim)."""
    return (
        f"`budget_exhausted`: this workspace's agent budget ({describe_budget(config)}) is used up, "
        f"{format_usd(usage.spent_micros)} spent. It resets on {_reset_date(usage)}. "
        f"{who_may_change(admin_user_ids)[0].upper()}{who_may_change(admin_user_ids)[1:]} can raise it with "
        "`/agent-limits budget <usd>`; then reply in this thread to continue."
    )


def is_exhausted(usage: BudgetUsage) -> bool:
    """Nothing left to reserve: a new run would stop before its first call."""
    return usage.remaining_micros is not None and usage.remaining_micros <= 0


# --------------------------------------------------------------------------------------------- the facade
@dataclass(frozen=True, slots=True, kw_only=True)
class LimitsPolicy:
    """The settings this module needs, as plain values (built once from ``Settings`` at start-up)."""

    defaults: WorkspaceConfig = WorkspaceConfig()
    """AGENT_MAX_STEPS, AGENT_MAX_TOKENS, AGENT_MAX_COST_USD, AGENT_BUDGET_USD, AGENT_BUDGET_PERIOD."""
    admin_user_ids: frozenset[str] = frozenset()
    """AGENT_ADMIN_USER_IDS: may change limits in every workspace, whatever Slack says."""
    allow_guests: bool = False
    """AGENT_ALLOW_GUESTS: guests may start runs paid by the workspace's budget."""
    allow_external: bool = False
    """AGENT_ALLOW_EXTERNAL_USERS: people of other organisations in shared channels may start runs."""

    @classmethod
    def from_settings(cls, settings: Any) -> LimitsPolicy:
        """From the service's ``Settings``; names missing from it fall back to the documented defaults.

        Reads ``agent_max_steps``, ``agent_max_tokens``, ``agent_max_cost_usd`` (Decimal), ``agent_budget_usd``
        (Decimal, None or "" for no budget), ``agent_budget_period``, ``agent_admin_user_ids`` (a list, or one
        string separated by commas or spaces), ``agent_allow_guests``, ``agent_allow_external_users``.
        """
        budget = getattr(settings, "agent_budget_usd", DEFAULT_BUDGET_USD)
        period = getattr(settings, "agent_budget_period", DEFAULT_PERIOD)
        if period not in ("monthly", "daily"):
            raise ConfigError(f"AGENT_BUDGET_PERIOD must be 'monthly' or 'daily', got {period!r}")
        defaults = WorkspaceConfig(
            max_steps=int(getattr(settings, "agent_max_steps", DEFAULT_MAX_STEPS)),
            max_tokens=int(getattr(settings, "agent_max_tokens", DEFAULT_MAX_TOKENS)),
            max_cost_micros=usd_to_micros(
                getattr(settings, "agent_max_cost_usd", Decimal("0.50")), setting="AGENT_MAX_COST_USD"
            ),
            budget_micros=None
            if budget is None or str(budget).strip() == ""
            else usd_to_micros(budget, setting="AGENT_BUDGET_USD"),
            period=period,
        )
        ids = getattr(settings, "agent_admin_user_ids", ())
        if isinstance(ids, str):
            ids = ids.replace(",", " ").split()
        return cls(
            defaults=defaults,
            admin_user_ids=frozenset(str(i).strip() for i in ids if str(i).strip()),
            allow_guests=bool(getattr(settings, "agent_allow_guests", False)),
            allow_external=bool(getattr(settings, "agent_allow_external_users", False)),
        )


@dataclass(frozen=True, slots=True)
class RunPlan:
    """What a run of this workspace starts with; fixed for the whole run."""

    config: WorkspaceConfig
    limits: Limits
    budget: RedisBudget


@dataclass(frozen=True, slots=True)
class RunBlocked:
    """The run must not start; ``message`` is the thread reply (no LLM call is made)."""

    reason: Literal["guest", "external", "budget_exhausted"]
    message: str


class WorkspaceLimits:
    """Everything the command, App Home and the run job do with limits, with one set of rules.

    Build one per process and share it (its users.info cache is per instance)::

        limits = WorkspaceLimits.create(redis, LimitsPolicy.from_settings(settings), key_prefix=...)
        reply = await limits.run_command(client, ws, user_id, "budget 25")
        plan = await limits.preflight(client, ws, user_id, base=settings.limits())
    """

    def __init__(self, store: WorkspaceLimitsStore, users: SlackUsers) -> None:
        self.store = store
        self.users = users

    @classmethod
    def create(
        cls,
        redis: aioredis.Redis,
        policy: LimitsPolicy,
        *,
        key_prefix: str = DEFAULT_KEY_PREFIX,
        clock: Callable[[], datetime] = utc_now,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> WorkspaceLimits:
        store = WorkspaceLimitsStore(redis, defaults=policy.defaults, key_prefix=key_prefix, clock=clock)
        users = SlackUsers(
            admin_user_ids=policy.admin_user_ids,
            allow_guests=policy.allow_guests,
            allow_external=policy.allow_external,
            clock=monotonic,
        )
        return cls(store, users)

    def refusal(self) -> str:
        return (
            f"Only {self.users.who_may_change()} can change the agent's limits. "
            "Anyone can see them with `/agent-limits show`."
        )

    async def may_change(self, client: AsyncWebClient, ws: Workspace, user_id: str) -> bool:
        """Raises :class:`SlackLookupError` when Slack cannot say."""
        return await self.users.is_admin(client, ws.team_id, user_id)

    async def show(self, ws: Workspace, *, can_change: bool) -> str:
        config = await self.store.get(ws)
        usage = await self.store.usage(ws, config)
        changes = await self.store.recent_changes(ws, 5)
        return format_show(config, usage, changes, can_change=can_change, admin_user_ids=self.users.admin_user_ids)

    async def run_command(self, client: AsyncWebClient, ws: Workspace, user_id: str, text: str) -> str:
        """The ephemeral reply to ``/agent-limits <text>``; nothing changes unless it is valid and allowed."""
        command = parse_command(text)
        if isinstance(command, UsageError):
            return command.text
        if isinstance(command, ShowCommand):
            try:
                can_change = await self.may_change(client, ws, user_id)
            except SlackLookupError:
                can_change = False  # showing does not depend on it; the footer then names who may
            return await self.show(ws, can_change=can_change)
        if isinstance(command, ResetCommand):
            return await self.reset(client, ws, user_id)
        return await self.change(client, ws, user_id, command.changes)

    async def change(
        self,
        client: AsyncWebClient,
        ws: Workspace,
        user_id: str,
        changes: Iterable[tuple[ConfigField, ConfigValue]],
    ) -> str:
        """Authorize, then apply validated changes; the reply lists what changed."""
        if not await self.may_change(client, ws, user_id):
            return self.refusal()
        done = await self.store.apply(ws, changes, actor=user_id)
        return _changed_reply(done)

    async def reset(self, client: AsyncWebClient, ws: Workspace, user_id: str) -> str:
        if not await self.may_change(client, ws, user_id):
            return self.refusal()
        done = await self.store.reset(ws, actor=user_id)
        return _changed_reply(done, nothing="The limits already are the defaults; nothing changed.")

    async def preflight(
        self, client: AsyncWebClient, ws: Workspace, user_id: str, *, base: Limits | None = None
    ) -> RunPlan | RunBlocked:
        """Before a run: may this user start it, and is there budget left? Raises ``StoreError`` when Redis is
        down (fail closed: reply with ``error``, make no LLM call) and ``SlackLookupError`` when Slack is."""
        refusal = await self.users.run_permission(client, ws.team_id, user_id)
        if refusal is not None:
            return RunBlocked(refusal.reason, refusal.message)
        config = await self.store.get(ws)
        budget = self.store.budget_for(ws, config)
        usage = await budget.usage_summary()
        if is_exhausted(usage):
            message = budget_exhausted_message(config, usage, self.users.admin_user_ids)
            return RunBlocked("budget_exhausted", message)
        return RunPlan(config, limits_for(config, base), budget)


def _changed_reply(done: list[Change], nothing: str = "That is the current value already; nothing changed.") -> str:
    if not done:
        return nothing
    lines = [f"• {LABELS[c.field]}: {c.old} → {c.new}" for c in done]
    return "Changed (applies to the next run; runs in progress keep their limits):\n" + "\n".join(lines)
