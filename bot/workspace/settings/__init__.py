"""A workspace's stored settings: its limits (values, defaults, bounds) and their audit, its tool rules over the
deployment's catalog, display, outbound host lists, the models it may use, and each channel's own agent.

``config`` (values), ``changes`` (audited changes), ``store`` (Redis: the limits and their audit), ``display``,
``domains``, ``catalog`` and ``tool_choice``, ``models``, ``channel_settings`` (a channel's agent, and how a run's
settings resolve), ``channel_run`` and ``channel_respond`` (how they reach a run), ``search_access``.
"""

from bot.workspace.settings import search_access
from bot.workspace.settings.catalog import ToolCatalog, WorkspaceTools
from bot.workspace.settings.changes import AUDIT_CAP, Change, commit, label_of
from bot.workspace.settings.channel_respond import RespondAll
from bot.workspace.settings.channel_run import about_run, instructions_of
from bot.workspace.settings.channel_settings import (
    PROMPT_BY,
    PROMPT_MAX_CHARS,
    RESPONDS,
    SETTINGS,
    WS_CHANNEL_MANAGERS,
    WS_EXTERNAL_FILES,
    WS_MODEL,
    WS_RUN_MODEL,
    ChannelSetting,
    ChannelSettings,
    WorkspaceChoices,
    channel_field,
    first_allowed,
    resolve,
)
from bot.workspace.settings.config import (
    BOUNDS,
    DEFAULT_PERIOD,
    FIX_COMMANDS,
    LABELS,
    MONEY_FIELDS,
    ORG_LAYER,
    PERSON_LAYER,
    UNREADABLE,
    ConfigField,
    ConfigValue,
    LimitsPolicy,
    WorkspaceConfig,
    decode_value,
    display,
    encode_value,
    in_bounds,
    limits_for,
    quote,
    shown,
)
from bot.workspace.settings.display import DisplaySettings
from bot.workspace.settings.domains import DomainAction, DomainLists, DomainStore, domain_reply, format_domains
from bot.workspace.settings.models import DEFAULT_MODELS, NAME_RE, Models, split_run_model
from bot.workspace.settings.search_access import SearchAccess
from bot.workspace.settings.store import WorkspaceLimitsStore, unavailable
from bot.workspace.settings.tool_choice import (
    PATTERN_RE,
    CatalogEntry,
    ToolChoice,
    catalog_of,
    decode_catalog,
    encode_catalog,
    rows,
    unknown_pattern,
)

__all__ = [
    "AUDIT_CAP",
    "BOUNDS",
    "CatalogEntry",
    "Change",
    "ChannelSetting",
    "ChannelSettings",
    "ConfigField",
    "ConfigValue",
    "DEFAULT_MODELS",
    "DEFAULT_PERIOD",
    "DisplaySettings",
    "DomainAction",
    "DomainLists",
    "DomainStore",
    "FIX_COMMANDS",
    "LABELS",
    "LimitsPolicy",
    "MONEY_FIELDS",
    "Models",
    "NAME_RE",
    "ORG_LAYER",
    "PATTERN_RE",
    "PERSON_LAYER",
    "PROMPT_BY",
    "PROMPT_MAX_CHARS",
    "RESPONDS",
    "RespondAll",
    "SETTINGS",
    "SearchAccess",
    "ToolCatalog",
    "ToolChoice",
    "UNREADABLE",
    "WS_CHANNEL_MANAGERS",
    "WS_EXTERNAL_FILES",
    "WS_MODEL",
    "WS_RUN_MODEL",
    "WorkspaceChoices",
    "WorkspaceConfig",
    "WorkspaceLimitsStore",
    "WorkspaceTools",
    "about_run",
    "catalog_of",
    "channel_field",
    "commit",
    "decode_catalog",
    "decode_value",
    "display",
    "domain_reply",
    "encode_catalog",
    "encode_value",
    "first_allowed",
    "format_domains",
    "in_bounds",
    "instructions_of",
    "label_of",
    "limits_for",
    "quote",
    "resolve",
    "rows",
    "search_access",
    "shown",
    "split_run_model",
    "unavailable",
    "unknown_pattern",
]
