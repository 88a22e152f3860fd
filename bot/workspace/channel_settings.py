"""A channel's own agent (its instructions, tools, model, display, verbosity and when it answers) and how a run's
settings resolve: run → channel → workspace → org → defaults, in one place. Pure: no I/O.

Stored as one hash per channel (``P:E:T:channel:<C>``, only what was set) and read with the workspace's other
values in the run's preflight (``WorkspaceLimitsStore.for_run``): no extra round trip per run. The workspace's own
choices (``/agent-limits model``, ``run-model``, ``channel-managers``) live in its settings hash
(``P:E:T:settings``), read there too. The org's model (``/agent-limits org-model``) is in its org hash, read with
the org budget in the same preflight HGETALL; the org has no other layer of these.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any, Literal, TypeVar, get_args

from agent_core import ModelChoice
from bot.i18n import _
from bot.redis import as_text
from bot.workspace.models import Models
from bot.workspace.shapes import Display, Verbosity
from bot.workspace.tool_choice import PATTERN_RE, ToolChoice

log = logging.getLogger(__name__)
_T = TypeVar("_T", bound=str)

ChannelSetting = Literal["prompt", "tools", "model", "display", "verbosity", "respond"]
SETTINGS: tuple[ChannelSetting, ...] = get_args(ChannelSetting)
Respond = Literal["mention", "all"]
RESPONDS: tuple[Respond, ...] = get_args(Respond)
#: A channel's instructions, characters at most: they go into every request of the channel's runs.
PROMPT_MAX_CHARS = 2000
#: The hash field recording who set the instructions (``admin:U1`` / ``creator:U2``): the model is told whose
#: words they are, and a channel creator's are not an admin's.
PROMPT_BY = "prompt_by"
#: The audit field of a channel's setting: ``channel:<channel id>:<setting>``.
CHANNEL_FIELD_PREFIX = "channel:"
#: The workspace's own fields in its settings hash, and their audit fields.
WS_MODEL, WS_RUN_MODEL, WS_CHANNEL_MANAGERS = "model", "run-model", "channel-managers"
#: Stored only as ``off`` (runs read files from outside the workspace unless its admins say no).
WS_EXTERNAL_FILES = "external-files"


def channel_field(channel_id: str, setting: str) -> str:
    return f"{CHANNEL_FIELD_PREFIX}{channel_id}:{setting}"


@dataclass(frozen=True, slots=True, kw_only=True)
class ChannelSettings:
    """What a channel overrides; empty fields follow the workspace."""

    prompt: str = ""
    #: The channel's allow-list within the workspace's tools (names or ``server__*``); empty: the workspace's.
    tools: tuple[str, ...] = ()
    model: str = ""
    display: Display | None = None
    verbosity: Verbosity | None = None
    respond: Respond = "mention"
    #: Who set the instructions: ``admin:<user id>`` or ``creator:<user id>`` ("" when not recorded).
    prompt_by: str = ""

    @classmethod
    def decode(cls, raw: Mapping[Any, Any]) -> ChannelSettings:
        """From the hash as HGETALL returns it; a value this code could not have written is ignored (logged)."""
        fields = {as_text(k) or "": as_text(v) or "" for k, v in raw.items()}
        tools = tuple(fields.get("tools", "").split())
        if not all(PATTERN_RE.fullmatch(t) for t in tools):
            log.warning("ignoring a channel's unreadable stored tools %.80r", fields.get("tools"))
            tools = ()
        return cls(
            prompt=fields.get("prompt", "")[:PROMPT_MAX_CHARS],
            tools=tools,
            model=fields.get("model", ""),
            display=_one_of(fields.get("display"), get_args(Display)),
            verbosity=_one_of(fields.get("verbosity"), get_args(Verbosity)),
            respond=_one_of(fields.get("respond"), RESPONDS) or "mention",
            prompt_by=fields.get(PROMPT_BY, ""),
        )

    def stored(self, setting: ChannelSetting) -> str:
        """The setting as stored ("" when the channel follows the workspace)."""
        value = getattr(self, setting)
        if setting == "tools":
            return " ".join(value)
        if setting == "respond":
            return "" if value == "mention" else value
        return value or ""

    def shown(self, setting: ChannelSetting) -> str:
        """As people read it (``show`` and the audit log)."""
        return self.stored(setting) or ("mention" if setting == "respond" else "(workspace's)")

    def is_empty(self) -> bool:
        return self == ChannelSettings()


@dataclass(frozen=True, slots=True)
class WorkspaceChoices:
    """The workspace's model, and what it lets others choose (stored in its settings hash)."""

    model: str = ""
    #: ``@agent /model <name> <task>`` may pick one run's model.
    run_model: bool = False
    #: A channel's creator may change its settings, not only admins.
    channel_managers: bool = False
    #: Runs read files Slack serves from another organisation (Slack Connect) or another workspace of the org,
    #: as untrusted input.
    external_files: bool = True

    @classmethod
    def decode(cls, raw: Mapping[Any, Any]) -> WorkspaceChoices:
        fields = {as_text(k) or "": as_text(v) or "" for k, v in raw.items()}
        return cls(fields.get(WS_MODEL, ""), fields.get(WS_RUN_MODEL) == "on",
                   fields.get(WS_CHANNEL_MANAGERS) == "on", fields.get(WS_EXTERNAL_FILES) != "off")


@dataclass(frozen=True, slots=True)
class Resolved:
    """A run's settings once every layer is applied."""

    model: ModelChoice
    tools: ToolChoice
    display: Display
    verbosity: Verbosity


def first_allowed(models: Models, *names: str | None) -> ModelChoice:
    """The first of ``names`` (layers, most specific first) the operator allows, else ``AGENT_MODELS``' first: a
    stored model the operator has since removed is skipped, and the next layer's holds."""
    return next((m for name in names if name and (m := models.get(name)) is not None), models.default)


def resolve(
    models: Models,
    *,
    run_model: str | None,
    channel: ChannelSettings,
    workspace: WorkspaceChoices,
    org_model: str,
    tools: ToolChoice,
    shape: tuple[Display, Verbosity],
) -> Resolved | str:
    """Run → channel → workspace → org (its model only) → defaults. A run's own model that the workspace forbids
    or the operator does not allow is refused (the text says why); a stored model the operator has since removed
    is skipped (the next layer's holds)."""
    if run_model is not None:
        if not workspace.run_model:
            return _("This workspace does not let a run pick its own model (`/model`); its admins can allow it "
                     "with `/agent-limits run-model on`. Nothing was started.")
        if models.get(run_model) is None:
            return _("`{name}` is not a model this deployment allows; pick one of: {models}. Nothing was started."
                     ).format(name=run_model[:40].replace("`", "'"), models=models.listed())
    return Resolved(
        model=first_allowed(models, run_model, channel.model, workspace.model, org_model),
        tools=replace(tools, only=channel.tools),
        display=channel.display or shape[0],
        verbosity=channel.verbosity or shape[1],
    )


def _one_of(value: str | None, choices: tuple[_T, ...]) -> _T | None:
    return next((c for c in choices if c == value), None)
