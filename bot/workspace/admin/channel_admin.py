"""What ``/agent-limits channel ...``, ``model``, ``run-model`` and ``channel-managers`` do: who may, what is
valid, the audited write, the reply; and a deleted or archived channel's settings removed.

Who may change a channel's settings: the workspace's admins and owners (``SlackUsers.is_admin``), and, where the
workspace turned ``channel-managers on``, the channel's creator (``conversations.info`` ``creator``: Slack gives
bots no list of a channel's managers). The workspace's own choices are its admins' alone.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

from redis.exceptions import RedisError
from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from bot.i18n import _
from bot.identity import Workspace
from bot.markup import escape
from bot.redis import awaited
from bot.workspace.admin.channel_command import (
    ChannelCommand,
    ChannelReset,
    ChannelSet,
    ChannelShow,
    ModelList,
    Switch,
    WorkspaceModel,
)
from bot.workspace.admin.org_admin import org_model_line
from bot.workspace.admin.people import SlackUsers
from bot.workspace.admin.react_command import ReactList, ReactSet, listed, plan, reply
from bot.workspace.settings import (
    PROMPT_BY,
    SETTINGS,
    WS_CHANNEL_MANAGERS,
    WS_EXTERNAL_FILES,
    WS_MODEL,
    WS_RUN_MODEL,
    CatalogEntry,
    Change,
    ChannelSetting,
    ChannelSettings,
    GrantedScopes,
    Models,
    SearchAccess,
    ToolChoice,
    WorkspaceChoices,
    WorkspaceLimitsStore,
    channel_field,
    first_allowed,
    needs,
    unavailable,
    unknown_pattern,
)
from bot.workspace.spend import OrgBudgetStore

log = logging.getLogger(__name__)
#: The deployment's tools and the workspace's rules, for checking a channel's list against them.
ToolsOf = Callable[[Workspace], Awaitable[tuple[list[CatalogEntry], ToolChoice]]]


@dataclass(frozen=True, slots=True)
class ChannelInfo:
    """What ``conversations.info`` says that matters here."""

    creator: str
    #: Why ``respond all`` is refused there ("" where it may be set).
    no_respond_all: str


class ChannelAdmin:
    """The channel and model commands, with one set of rules."""

    def __init__(
        self, store: WorkspaceLimitsStore, users: SlackUsers, models: Models, tools_of: ToolsOf, org: OrgBudgetStore,
    ) -> None:
        self.store = store
        self.users = users
        self.models = models
        self.tools_of = tools_of
        self.org = org

    def key(self, ws: Workspace, channel_id: str) -> str:
        """The channel's hash (also read with the workspace's other values by the run's preflight)."""
        return self.store.keys.channel_settings(ws, channel_id)

    async def run(
        self, client: AsyncWebClient, ws: Workspace, user_id: str, channel_id: str, command: ChannelCommand
    ) -> str:
        """The ephemeral reply; nothing changes unless the command is valid and allowed."""
        if isinstance(command, ModelList | WorkspaceModel | Switch):
            return await self._workspace_wide(client, ws, user_id, command)
        if not channel_id:
            return _("Run `/agent-limits channel ...` in the channel it is for.")
        if isinstance(command, ChannelShow):
            return self.shown(channel_id, await self.settings(ws, channel_id))
        if isinstance(command, ReactList | ReactSet):
            return await self._react(client, ws, user_id, channel_id, command)
        refusal = await self.refusal(client, ws, user_id, channel_id)
        if refusal:
            return refusal
        if isinstance(command, ChannelReset):
            done = await self.store.write_audited(ws, self.key(ws, channel_id), lambda raw: _reset(
                ChannelSettings.decode(raw), channel_id, user_id, self.store.clock()))
            return changed_text(done) if done else _("This channel already follows the workspace; nothing changed.")
        return await self._set(client, ws, user_id, channel_id, command)

    async def _workspace_wide(
        self, client: AsyncWebClient, ws: Workspace, user_id: str, command: ModelList | WorkspaceModel | Switch
    ) -> str:
        """``model`` lists the models (anyone); ``model <name>`` and the switches change the workspace (admins)."""
        if isinstance(command, ModelList):
            model, org_line = await self._models_of(ws)
            return " ".join(filter(None, [_("Models this deployment allows: {models}. This workspace uses "
                                            "`{model}`.").format(models=self.models.listed(), model=model), org_line]))
        if not await self.users.is_admin(client, ws, user_id):
            return _("Only {who} can change the workspace's model choices.").format(who=self.users.who_may_change())
        return await self._workspace(ws, user_id, command)

    async def _set(self, client: AsyncWebClient, ws: Workspace, user_id: str, channel_id: str, command: ChannelSet
                   ) -> str:
        """One channel setting, by someone allowed: checked, then written (audited)."""
        problem = await self.invalid(client, ws, channel_id, command)
        if problem:
            return _("Nothing changed: {problem}").format(problem=problem)
        done = await self.write(client, ws, user_id, channel_id, [command])
        if not done:
            return _("That is this channel's setting already; nothing changed.")
        if command.setting == "prompt" and command.value:
            return _("This channel's instructions, from the next run:\n```{prompt}```").format(
                prompt=escape(command.value))
        return changed_text(done)

    async def _react(
        self, client: AsyncWebClient, ws: Workspace, user_id: str, channel_id: str, command: ReactList | ReactSet
    ) -> str:
        """Emoji triggers: anyone lists them; who may change the channel's agent sets them, audited."""
        if isinstance(command, ReactList):
            return listed(channel_id, await self._raw(ws, channel_id))
        if channel_id.startswith("D"):
            return _("Emoji triggers are for channels: run `/agent-limits channel react` in one.")
        refusal = await self.refusal(client, ws, user_id, channel_id)
        if refusal:
            return refusal
        scopes = GrantedScopes(self.store.redis, self.store.keys, SearchAccess(self.store.redis, self.store.keys))
        if command.task and await scopes.missing(client, ws, "reactions:read"):
            return needs("reactions:read")  # Slack would never send the reactions
        done = await self.store.write_audited(ws, self.key(ws, channel_id), plan(
            command, channel_id, user_id, self.store.clock()))
        return reply(command, done, await self._raw(ws, channel_id))

    async def write(
        self, client: AsyncWebClient, ws: Workspace, user_id: str, channel_id: str, commands: Sequence[ChannelSet]
    ) -> list[Change]:
        """Set valid, allowed values, audited, in one transaction; the changes (none when all were set already).
        Instructions are stored with who set them: an admin, or (``channel-managers on``) the channel's creator."""
        role = "admin" if await self.users.is_admin(client, ws, user_id) else "creator"
        return await self.store.write_audited(ws, self.key(ws, channel_id), lambda raw: _set(
            ChannelSettings.decode(raw), commands, channel_id, f"{role}:{user_id}", self.store.clock()))

    async def may_open(self, client: AsyncWebClient, ws: Workspace, user_id: str) -> bool:
        """Whether ``user_id`` may change some channel's agent: an admin, or anyone where channel creators may
        (which channels a person created, Slack says only channel by channel)."""
        return await self.users.is_admin(client, ws, user_id) or (await self.choices(ws)).channel_managers

    async def summary(self, ws: Workspace) -> str:
        """The workspace's model choices, for ``show`` and App Home."""
        choices = await self.choices(ws)
        model, org_line = await self._models_of(ws, choices)
        return " ".join(filter(None, [_(
            "*Model:* `{model}` (allowed: {models}). A run may pick its own with `@agent /model <name> <task>`: "
            "{run_model}. Channel creators may change their channel's agent: {managers}. Each channel's own "
            "agent: `/agent-limits channel show` in it.").format(
            model=model, models=self.models.listed(), run_model=_on_off(choices.run_model),
            managers=_on_off(choices.channel_managers)), org_line]))

    async def _models_of(self, ws: Workspace, choices: WorkspaceChoices | None = None) -> tuple[str, str]:
        """The model the workspace's runs use unless a channel or run picks one (its own, else its org's, else
        the deployment's default), and the line about the org's model ("" when it has none)."""
        choices = choices or await self.choices(ws)
        org = await self.org.of(ws)
        org_model = org.model if org else ""
        return first_allowed(self.models, choices.model, org_model).name, org_model_line(self.models, org_model)

    async def settings(self, ws: Workspace, channel_id: str) -> ChannelSettings:
        return ChannelSettings.decode(await self._raw(ws, channel_id))

    async def _raw(self, ws: Workspace, channel_id: str) -> dict[Any, Any]:
        try:
            return dict(await awaited(self.store.redis.hgetall(self.key(ws, channel_id))))
        except RedisError as exc:
            raise unavailable(exc) from exc

    async def choices(self, ws: Workspace) -> WorkspaceChoices:
        try:
            return WorkspaceChoices.decode(await awaited(self.store.redis.hgetall(self.store.keys.settings(ws))))
        except RedisError as exc:
            raise unavailable(exc) from exc

    async def forget(self, ws: Workspace, channel_id: str) -> None:
        """The channel was deleted or archived: its settings go, whole."""
        try:
            await self.store.redis.delete(self.key(ws, channel_id))
        except RedisError as exc:
            raise unavailable(exc) from exc

    def shown(self, channel_id: str, settings: ChannelSettings) -> str:
        lines = [_("*This channel's agent* (<#{channel}>):").format(channel=channel_id)]
        for setting in SETTINGS:
            value = settings.shown(setting)
            if setting == "prompt" and settings.prompt:
                value = "\n```" + escape(settings.prompt) + "```"
            lines.append(f"• {setting}: {value if setting == 'prompt' else escape(value)}")
        return "\n".join(lines)

    async def info(self, client: AsyncWebClient, channel_id: str) -> ChannelInfo | str:
        """What Slack says of the channel, or its error when it will not say."""
        try:
            answer = await client.conversations_info(channel=channel_id)
        except SlackApiError as exc:
            log.info("conversations.info of %s refused: %s", channel_id, exc.response.get("error"))
            return str(exc.response.get("error", "unknown_error"))
        channel: dict[str, Any] = answer.get("channel") or {}
        why = ""
        if channel.get("is_im") or channel.get("is_mpim") or channel_id.startswith("D"):
            why = _("this is a direct message, where the agent answers every message already")
        elif channel.get("is_ext_shared") or channel.get("is_shared"):
            why = _("this channel is shared with another organisation, whose people would start runs on this "
                    "workspace's budget without asking the agent")
        return ChannelInfo(str(channel.get("creator") or ""), why)

    async def refusal(self, client: AsyncWebClient, ws: Workspace, user_id: str, channel_id: str) -> str:
        """Why ``user_id`` may not change the channel's agent ("" when they may)."""
        if await self.users.is_admin(client, ws, user_id):
            return ""
        if (await self.choices(ws)).channel_managers:
            info = await self.info(client, channel_id)
            if isinstance(info, str):
                return _("Slack would not say who created this channel ({error}), so only {who} can change its "
                         "agent now.").format(error=info, who=self.users.who_may_change())
            if info.creator == user_id:
                return ""
        return _("Only {who} can change this channel's agent. Anyone can see it with "
                 "`/agent-limits channel show`.").format(who=self.users.who_may_change())

    async def invalid(self, client: AsyncWebClient, ws: Workspace, channel_id: str, command: ChannelSet) -> str:
        """Why the value cannot be set here ("" when it can)."""
        if not command.value:
            return ""
        if command.setting == "model" and self.models.get(command.value) is None:
            return _("`{name}` is not a model this deployment allows; pick one of: {models}.").format(
                name=command.value, models=self.models.listed())
        if command.setting == "respond":
            info = await self.info(client, channel_id)
            why = (_("Slack would not say what kind of channel this is ({error})").format(error=info)
                   if isinstance(info, str) else info.no_respond_all)
            return _("`respond all` is refused here: {why}.").format(why=why) if why else ""
        if command.setting == "tools":
            catalog, choice = await self.tools_of(ws)
            names = [e.name for e in catalog]
            for pattern in command.value.split():
                if unknown_pattern(pattern, catalog) is not None:
                    return _("`{tool}` is not a tool this deployment offers (see `/agent-limits tools`).").format(
                        tool=pattern)
                if choice.state(pattern, names) == "off":
                    return _("`{tool}` is off in this workspace; a channel's list only narrows the workspace's."
                             ).format(tool=pattern)
        return ""

    async def _workspace(self, ws: Workspace, user_id: str, command: WorkspaceModel | Switch) -> str:
        if isinstance(command, WorkspaceModel):
            if command.name and self.models.get(command.name) is None:
                return _("Nothing changed: `{name}` is not a model this deployment allows; pick one of: {models}."
                         ).format(name=command.name, models=self.models.listed())
            field, value, fallback = WS_MODEL, command.name, self.models.default.name
        elif command.name == "external-files":  # on unless turned off: only "off" is stored
            field, value, fallback = WS_EXTERNAL_FILES, "" if command.on else "off", "on"
        else:
            field = WS_RUN_MODEL if command.name == "run-model" else WS_CHANNEL_MANAGERS
            value, fallback = "on" if command.on else "", "off"

        def plan(raw: dict[str, str]) -> tuple[dict[str, str | None], list[Change]]:
            old = raw.get(field, "")
            if old == value:
                return {}, []
            change = Change(user_id, self.store.clock(), field, old or fallback, value or fallback)
            return {field: value or None}, [change]

        done = await self.store.write_audited(ws, self.store.keys.settings(ws), plan)
        return changed_text(done) if done else _("That is the current value already; nothing changed.")


def _set(
    before: ChannelSettings, commands: Sequence[ChannelSet], channel_id: str, by: str, at: Any
) -> tuple[dict[str, str | None], list[Change]]:
    """``by``: ``<role>:<user id>`` of the person setting them."""
    actor = by.partition(":")[2]
    writes: dict[str, str | None] = {}
    audit: list[Change] = []
    for command in commands:
        if before.stored(command.setting) == command.value:
            continue
        after = ChannelSettings.decode({**_stored(before), command.setting: command.value})
        audit.append(Change(actor, at, channel_field(channel_id, command.setting), before.shown(command.setting),
                            after.shown(command.setting)))
        writes[command.setting] = command.value or None
        if command.setting == "prompt":
            writes[PROMPT_BY] = by if command.value else None
    return writes, audit


def _reset(
    before: ChannelSettings, channel_id: str, actor: str, at: Any
) -> tuple[dict[str, str | None], list[Change]]:
    empty = ChannelSettings()
    changed: list[ChannelSetting] = [s for s in SETTINGS if before.stored(s)]
    audit = [Change(actor, at, channel_field(channel_id, s), before.shown(s), empty.shown(s)) for s in changed]
    return {**{s: None for s in changed}, **({PROMPT_BY: None} if "prompt" in changed else {})}, audit


def _on_off(on: bool) -> str:
    return _("on") if on else _("off")


def _stored(settings: ChannelSettings) -> dict[str, str]:
    return {s: v for s in SETTINGS if (v := settings.stored(s))}


def changed_text(done: list[Change]) -> str:
    lines = "\n".join(f"• {_label(c.field)}: {escape(_short(c.old))} → {escape(_short(c.new))}" for c in done)
    return _("Changed (applies from the next run):\n{lines}").format(lines=lines)


def _label(audit_field: str) -> str:
    return audit_field.split(":", 2)[2] if audit_field.startswith("channel:") else audit_field


def _short(text: str) -> str:
    one_line = " ".join(text.split())
    return one_line if len(one_line) <= 60 else one_line[:57] + "..."
