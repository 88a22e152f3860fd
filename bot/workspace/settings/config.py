"""A workspace's limits as values: the config, its defaults and bounds.

Pure: no I/O. The defaults come from one place, ``WorkspaceDefaults`` (``AGENT_MAX_STEPS`` ... ``AGENT_BUDGET_PERIOD``):
``WorkspaceConfig()`` is what a workspace nobody configured runs with, and ``LimitsPolicy.from_settings``
reads the deployment's own values.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from decimal import Decimal
from typing import Literal, get_args

from agent_core import MICROS_PER_USD, ConfigError, Limits, Period, format_usd, usd_to_micros
from bot.errors import InvalidValue
from bot.workspace.defaults import MAX_CONCURRENT_RUNS_CAP, WorkspaceDefaults
from bot.workspace.settings.models import DEFAULT_MODELS, Models
from bot.workspace.settings.tool_choice import CatalogEntry, catalog_of
from bot.workspace.shapes import Display, Verbosity
from tools import ToolPolicy, builtin_registry

_DEFAULTS = WorkspaceDefaults.model_fields
DEFAULT_MAX_STEPS: int = _DEFAULTS["agent_max_steps"].default
DEFAULT_MAX_TOKENS: int = _DEFAULTS["agent_max_tokens"].default
DEFAULT_MAX_COST_MICROS = usd_to_micros(_DEFAULTS["agent_max_cost_usd"].default, setting="AGENT_MAX_COST_USD")
DEFAULT_BUDGET_MICROS = usd_to_micros(Decimal(_DEFAULTS["agent_budget_usd"].default), setting="AGENT_BUDGET_USD")
DEFAULT_PERIOD: Period = _DEFAULTS["agent_budget_period"].default
DEFAULT_USER_BUDGET_MICROS: int | None = None  # AGENT_USER_BUDGET_USD's default, empty: no per-person cap
DEFAULT_MAX_CONCURRENT: int = _DEFAULTS["agent_max_concurrent_runs_per_workspace"].default
DEFAULT_MAX_CONCURRENT_PER_USER: int = _DEFAULTS["agent_max_concurrent_runs_per_user"].default

ConfigField = Literal[
    "max_steps", "max_tokens", "max_cost_micros", "budget_micros", "period", "user_budget_micros", "max_concurrent",
    "max_concurrent_per_user",
]
ConfigValue = int | str | None
FIELDS: tuple[ConfigField, ...] = get_args(ConfigField)

#: What people type and read for each field.
LABELS: dict[str, str] = {
    "max_steps": "max-steps",
    "max_tokens": "max-tokens",
    "max_cost_micros": "max-cost",
    "budget_micros": "budget",
    "period": "budget period",
    "user_budget_micros": "user-budget",
    "max_concurrent": "max-concurrent",
    "max_concurrent_per_user": "max-concurrent-per-user",
}
#: Fields that may be "none" (no budget, no cap).
OPTIONAL_FIELDS: frozenset[str] = frozenset({"budget_micros", "user_budget_micros"})
#: Money fields, in micro-dollars.
MONEY_FIELDS: frozenset[str] = frozenset({"budget_micros", "max_cost_micros", "user_budget_micros"})


@dataclass(frozen=True, slots=True)
class Bound:
    low: int
    high: int


#: Sane bounds. Money in micro-dollars. A budget of 0 is allowed: it freezes spending without removing limits.
BOUNDS: dict[ConfigField, Bound] = {
    "budget_micros": Bound(0, 100_000 * MICROS_PER_USD),
    "user_budget_micros": Bound(0, 100_000 * MICROS_PER_USD),
    "max_cost_micros": Bound(10_000, 100 * MICROS_PER_USD),
    "max_steps": Bound(1, 200),
    "max_tokens": Bound(1_000, 2_000_000),
    "max_concurrent": Bound(1, MAX_CONCURRENT_RUNS_CAP),
    "max_concurrent_per_user": Bound(1, MAX_CONCURRENT_RUNS_CAP),
}
PERIODS: tuple[Period, ...] = get_args(Period)
#: What fixes each field, named in messages about it.
FIX_COMMANDS: dict[str, str] = {
    "max_steps": "/agent-limits max-steps <n>",
    "max_tokens": "/agent-limits max-tokens <n>",
    "max_cost_micros": "/agent-limits max-cost <usd>",
    "budget_micros": "/agent-limits budget <usd>",
    "period": "/agent-limits budget <usd> monthly|daily",
    "user_budget_micros": "/agent-limits user-budget <usd>|none",
    "max_concurrent": "/agent-limits max-concurrent <n>",
    "max_concurrent_per_user": "/agent-limits max-concurrent-per-user <n>",
}


#: How a stored value that cannot be read is shown ("budget: unreadable → $25.00").
UNREADABLE = "unreadable"


# A stored number: ASCII digits, no sign or leading zero (int() would take '١٢٣', '1_000', ' 5').
_STORED_INT_RE = re.compile(r"0|[1-9][0-9]*", re.ASCII)


def in_bounds(config_field: ConfigField, value: int) -> bool:
    bound = BOUNDS[config_field]
    return bound.low <= value <= bound.high


def decode_value(config_field: ConfigField, raw: str) -> ConfigValue:
    """A stored value back; raises :class:`InvalidValue` for one :func:`encode_value` could not have written.

    The one definition of a valid stored value: writing (``encode_value``) checks its own text with it, so
    whatever is accepted is read back the same, at every bound (a budget of $100,000 is 12 digits of micros).
    """
    if config_field in OPTIONAL_FIELDS and raw == "none":
        return None
    if config_field == "period":
        if raw not in PERIODS:
            raise InvalidValue(f"{LABELS[config_field]}: stored value {raw[:40]!r} is not one of {PERIODS}")
        return raw
    bound = BOUNDS[config_field]
    # The length first: no int() of a megabyte of digits.
    if len(raw) > len(str(bound.high)) or not _STORED_INT_RE.fullmatch(raw) or not in_bounds(config_field, int(raw)):
        raise InvalidValue(f"{LABELS[config_field]}: stored value {raw[:40]!r} is not a whole number within bounds")
    return int(raw)


def encode_value(config_field: ConfigField, value: ConfigValue) -> str:
    """``value`` as stored; raises :class:`InvalidValue` unless :func:`decode_value` reads it back as ``value``."""
    text = "none" if value is None else str(value)
    if isinstance(value, bool) or decode_value(config_field, text) != value:
        raise InvalidValue(f"{LABELS[config_field]}: {value!r} cannot be stored")
    return text


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
    user_budget_micros: int | None = DEFAULT_USER_BUDGET_MICROS
    """What one person's runs may spend per period (the same period); None = no cap; 0 stops them."""
    max_concurrent: int = DEFAULT_MAX_CONCURRENT
    """Runs of the workspace in flight at once, across all workers; the rest wait their turn (``bot.queue.fair``)."""
    max_concurrent_per_user: int = DEFAULT_MAX_CONCURRENT_PER_USER
    """Runs of one person in flight at once in the workspace; their others wait behind their own
    (``bot.queue.fair``)."""
    unreadable: tuple[ConfigField, ...] = ()
    """Fields whose stored value could not be read (hand-written, or by another version): they hold the default
    only as a placeholder. No run starts while any is here: a limit nobody can read is never taken as none."""


#: Budget layers' names in messages ("the org budget has $0.00 left") and in ``BudgetUsage.layers``.
ORG_LAYER = "org"
PERSON_LAYER = "per-person"


def limits_for(config: WorkspaceConfig, base: Limits | None = None) -> Limits:
    """The engine's ``Limits`` for a run of this workspace; the fields it cannot set come from ``base``."""
    return replace(
        base or Limits(),
        max_steps=config.max_steps,
        max_tokens=config.max_tokens,
        max_cost_micros=config.max_cost_micros,
    )


def display(config_field: ConfigField, value: ConfigValue) -> str:
    """A field's value as people read it: ``$0.50``, ``50,000``, ``monthly``, ``none``."""
    if value is None:
        return "none"
    if config_field in MONEY_FIELDS and isinstance(value, int):
        return format_usd(value)
    if isinstance(value, int):
        return f"{value:,}"
    return value


def shown(config: WorkspaceConfig, config_field: ConfigField) -> str:
    """A field's effective value as people read it; ``unreadable`` when its stored value could not be read (the
    placeholder it holds is no real value)."""
    return UNREADABLE if config_field in config.unreadable else display(config_field, getattr(config, config_field))


@dataclass(frozen=True, slots=True, kw_only=True)
class LimitsPolicy:
    """The settings the limits need, as plain values (built once from ``WorkspaceDefaults`` at start-up)."""

    defaults: WorkspaceConfig = WorkspaceConfig()
    """AGENT_MAX_STEPS, AGENT_MAX_TOKENS, AGENT_MAX_COST_USD, AGENT_BUDGET_USD, AGENT_BUDGET_PERIOD,
    AGENT_MAX_CONCURRENT_RUNS_PER_WORKSPACE, AGENT_MAX_CONCURRENT_RUNS_PER_USER."""
    admin_user_ids: frozenset[str] = frozenset()
    """AGENT_ADMIN_USER_IDS: may change limits in every workspace, whatever Slack says."""
    allow_guests: bool = False
    """AGENT_ALLOW_GUESTS: guests may start runs paid by the workspace's budget."""
    allow_external: bool = False
    """AGENT_ALLOW_EXTERNAL_USERS: people of other organisations in shared channels may start runs."""
    verbosity: Verbosity = _DEFAULTS["agent_verbosity"].default
    """AGENT_VERBOSITY: the thread shape of workspaces that chose none."""
    hold_seconds: float = _DEFAULTS["agent_lease_seconds"].default
    """AGENT_LEASE_SECONDS: a budget hold lives this long unless its run renews it."""
    renew_seconds: float = _DEFAULTS["agent_lease_renew_seconds"].default
    """AGENT_LEASE_RENEW_SECONDS: how often a running call renews its hold."""
    builtin_tools: tuple[CatalogEntry, ...] = ()
    """The built-ins AGENT_TOOLS leaves on: what ``/agent-limits tools`` lists before any worker published."""
    display: Display = _DEFAULTS["agent_display"].default
    """AGENT_DISPLAY: replies, timeline or plan for workspaces that chose none."""
    file_caps: tuple[int, int] = (_DEFAULTS["agent_file_max_bytes"].default,
                                  _DEFAULTS["agent_files_max_bytes_per_run"].default)
    """AGENT_FILE_MAX_BYTES and AGENT_FILES_MAX_BYTES_PER_RUN: what ``show`` lists."""
    usage_retention_days: int = _DEFAULTS["agent_usage_retention_days"].default
    """AGENT_USAGE_RETENTION_DAYS: how long the usage counters are kept."""
    models: Models = DEFAULT_MODELS
    """AGENT_MODELS: what a workspace, a channel or a run may pick, the default first."""
    approval_timeouts: tuple[float, float] = (_DEFAULTS["agent_approval_timeout_seconds"].default,
                                              _DEFAULTS["agent_approval_max_timeout_seconds"].default)
    """AGENT_APPROVAL_TIMEOUT_SECONDS and AGENT_APPROVAL_MAX_TIMEOUT_SECONDS: an approval policy's default and
    longest ``timeout``."""

    @classmethod
    def from_settings(cls, settings: WorkspaceDefaults) -> LimitsPolicy:
        budget = settings.agent_budget_usd.strip()
        per_person = settings.agent_user_budget_usd.strip()
        if settings.agent_budget_period not in ("monthly", "daily"):
            raise ConfigError(f"AGENT_BUDGET_PERIOD must be 'monthly' or 'daily', got {settings.agent_budget_period!r}")
        defaults = WorkspaceConfig(
            max_steps=settings.agent_max_steps,
            max_tokens=settings.agent_max_tokens,
            max_cost_micros=usd_to_micros(settings.agent_max_cost_usd, setting="AGENT_MAX_COST_USD"),
            budget_micros=None if budget == "" else usd_to_micros(budget, setting="AGENT_BUDGET_USD"),
            period=settings.agent_budget_period,
            user_budget_micros=None if per_person == "" else usd_to_micros(
                per_person, setting="AGENT_USER_BUDGET_USD"
            ),
            max_concurrent=settings.agent_max_concurrent_runs_per_workspace,
            max_concurrent_per_user=settings.agent_max_concurrent_runs_per_user,
        )
        ids = settings.agent_admin_user_ids.replace(",", " ").split()
        return cls(
            defaults=defaults,
            admin_user_ids=frozenset(ids),
            allow_guests=settings.agent_allow_guests,
            allow_external=settings.agent_allow_external_users,
            verbosity=settings.agent_verbosity,
            hold_seconds=settings.agent_lease_seconds,
            renew_seconds=settings.agent_lease_renew_seconds,
            builtin_tools=tuple(catalog_of(ToolPolicy(settings.allowlist()).enabled(builtin_registry(settings)))),
            display=settings.agent_display,
            file_caps=(settings.agent_file_max_bytes, settings.agent_files_max_bytes_per_run),
            usage_retention_days=settings.agent_usage_retention_days,
            models=Models.from_settings(settings),
            approval_timeouts=(settings.agent_approval_timeout_seconds, settings.agent_approval_max_timeout_seconds),
        )
