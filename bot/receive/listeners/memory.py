"""Memory's commands and erasures: ``/agent memory …`` (a person's own, answered ephemerally; the export as a JSON
file in their DM), ``/agent-limits memory on|off`` and ``/agent-limits channel memory add|list|forget``, and what
erases memories: a person deactivated (``user_change`` with ``deleted``), the app uninstalled or its tokens revoked.

Everything a person sees is their own: the store is keyed by the person asking, and no admin command reads another
person's memories (admins switch memory on or off and keep channel notes; they see nothing of anyone's text).
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

from redis.exceptions import RedisError
from slack_bolt.async_app import AsyncApp, AsyncBoltContext
from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from bot import audit
from bot.errors import SlackLookupError
from bot.i18n import _, speaking
from bot.identity import Workspace
from bot.receive.deps import Services
from bot.runs.memory import MemoryRules
from bot.workspace import WorkspaceParts
from bot.workspace.admin import ChannelAdmin, Places, SlackUsers, run_permission
from bot.workspace.memory import (
    Memory,
    MemoryCommand,
    MemoryStore,
    NoteCommand,
    SwitchCommand,
    Unclear,
    line,
    new_id,
    parse,
    parse_admin,
    records,
    usage,
    visibility_of,
)

log = logging.getLogger(__name__)
ANSWER_WITHIN_SECONDS = 2.5
#: Lines ``/agent memory`` lists (an ephemeral message holds about 40,000 characters).
LIST_CAP = 50
MAX_NOTE_CHARS = 1000


class AgentMemory:
    """The handlers over the store and the workspace's rules (one per process)."""

    def __init__(self, store: MemoryStore, rules: MemoryRules, users: SlackUsers, channels: ChannelAdmin,
                 places: Places, *, now: Callable[[], float] = time.time) -> None:
        self.store, self.rules, self.now = store, rules, now
        #: The users.info cache (locale, admin check, run permission), who may change a channel, what it is.
        self.users, self.channels, self.places = users, channels, places

    @classmethod
    def for_services(cls, services: Services, parts: WorkspaceParts) -> AgentMemory:
        return cls(parts.memories, MemoryRules.of(services.settings), parts.users, parts.channels, parts.places)

    async def is_on(self, ws: Workspace, user: str) -> bool:
        said, person_off = await self.store.switches(ws, user)
        return (said == "on" if said else self.rules.default_on) and not person_off

    async def answer(self, client: AsyncWebClient, ws: Workspace, user: str, channel: str, text: str) -> str:
        """The ephemeral reply to ``/agent memory …``, in the person's language; every failure is a line."""
        return await self._guarded(client, ws, user, self._answer(client, ws, user, channel, text))

    async def admin(self, client: AsyncWebClient, ws: Workspace, user: str, channel: str, text: str) -> str | None:
        """``/agent-limits memory …`` and ``channel memory …``; None for any other ``/agent-limits`` text."""
        command = parse_admin(text)
        if command is None:
            return None
        return await self._guarded(client, ws, user, self._admin(client, ws, user, channel, command))

    async def _guarded(self, client: AsyncWebClient, ws: Workspace, user: str, work: Awaitable[str]) -> str:
        with speaking(await self.users.locale(client, ws, user)):
            try:
                async with asyncio.timeout(ANSWER_WITHIN_SECONDS):
                    return await work
            except SlackLookupError as exc:
                return str(exc)
            except RedisError as exc:
                log.warning("memory command: %s", type(exc).__name__)
                return _("The memory store is unavailable right now, so nothing was shown or changed. Try again "
                         "shortly.")
            except TimeoutError:
                return _("That took too long (Slack or Redis is slow); check with `/agent memory`.")

    async def _answer(self, client: AsyncWebClient, ws: Workspace, user: str, channel: str, text: str) -> str:
        command = parse(text)
        if isinstance(command, Unclear):
            return command.problem
        if command.verb in ("on", "off"):
            return await self._switch_person(client, ws, user, command.verb == "on")
        memories = await self.store.all(ws, "user", user, self.now())
        if command.verb == "list":
            return self._listing(memories)
        if command.verb == "export":
            return await self._export(client, user, memories)
        return await self._forget(ws, user, channel, command, memories)

    def _listing(self, memories: list[Memory]) -> str:
        if not memories:
            return _("I keep no memories of yours here. {usage}").format(usage=usage())
        lines = [line(m) for m in memories[:LIST_CAP]]
        if len(memories) > LIST_CAP:
            lines.append(_("…and {n} more: `/agent memory export` sends them all.").format(
                n=len(memories) - LIST_CAP))
        return "\n".join([_("*What I keep for you* (only you see this):"), *lines, usage()])

    async def _switch_person(self, client: AsyncWebClient, ws: Workspace, user: str, on: bool) -> str:
        if on and run_permission(await self.users.info(client, ws, user), ws.team_id) is not None:
            return _("Memory is not available to guests or to people from other organisations.")
        await self.store.set_person(ws, user, on)
        if on:
            return _("Memory is on for you again (where this workspace has it on).")
        return _("Memory is off for you: I will neither keep nor use anything. What I keep stays until you forget it "
                 "(`/agent memory forget all`).")

    async def _forget(self, ws: Workspace, user: str, channel: str, command: MemoryCommand,
                      memories: list[Memory]) -> str:
        everything = command.target == "all"
        ids = [m.id for m in memories] if everything else [command.target]
        gone = await self.store.forget(ws, "user", user, None if everything else ids) if ids else 0
        if not gone:
            return (_("There was nothing to forget.") if everything
                    else _("No memory `{id}` of yours (`/agent memory` lists them).").format(id=command.target))
        emit_forgotten(ws, user, ids, "by_person", channel=channel)
        return _("Forgotten: all your memories.") if everything else _("Forgotten: `{id}`.").format(id=ids[0])

    async def _export(self, client: AsyncWebClient, user: str, memories: list[Memory]) -> str:
        """The person's memories as JSON in their DM with the app (a message to a user id lands in that DM)."""
        body = json.dumps({"memories": records(memories)}, ensure_ascii=False, indent=2).encode()
        try:
            posted = await client.chat_postMessage(channel=user, text=_("Your memories, as I keep them:"))
            await client.files_upload_v2(channel=str(posted.get("channel") or ""), filename="memories.json",
                                         content=body, title="memories.json")
        except SlackApiError as exc:
            return _("The export could not be sent: Slack said `{error}`.").format(
                error=str(exc.response.get("error") or "error"))
        return _("Sent to our DM as `memories.json` ({n} memories).").format(n=len(memories))

    async def _admin(self, client: AsyncWebClient, ws: Workspace, user: str, channel: str,
                     command: SwitchCommand | NoteCommand | Unclear) -> str:
        if isinstance(command, Unclear):
            return command.problem
        if isinstance(command, SwitchCommand):
            if not await self.users.is_admin(client, ws, user):
                return _("Only workspace admins and owners can turn memory on or off.")
            await self.store.set_workspace(ws, command.on)
            if command.on:
                return _("Memory is on in this workspace: people may ask me to remember things (each can turn it "
                         "off with `/agent memory off`). Admins see none of it.")
            return _("Memory is off in this workspace: nothing is kept or used. What people keep stays until they "
                     "forget it.")
        if command.verb == "list":
            notes = await self.store.all(ws, "channel", channel, self.now())
            return "\n".join([_("*This channel's notes:*"), *(line(n) for n in notes)]) if notes else _(
                "This channel has no notes. Admins add one with `/agent-limits channel memory add <note>`.")
        refusal = await self.channels.refusal(client, ws, user, channel)
        if refusal:
            return refusal
        if command.verb == "add":
            return await self._add_note(client, ws, user, channel, command.value)
        gone = await self.store.forget(ws, "channel", channel, None if command.value == "all" else [command.value])
        return _("Forgotten ({n}).").format(n=gone) if gone else _("No such note in this channel.")

    async def _add_note(self, client: AsyncWebClient, ws: Workspace, user: str, channel: str, text: str) -> str:
        if len(text) > MAX_NOTE_CHARS:
            return _("That note is {n} characters; a note keeps at most {cap}.").format(n=len(text), cap=MAX_NOTE_CHARS)
        visibility = visibility_of(await self.places.of(client, ws, channel)) or "private"
        now = self.now()
        note = Memory(new_id("channel"), text, channel, visibility, now, now + self.rules.ttl_days * 86_400, by=user)
        if await self.store.add(ws, "channel", channel, note, cap=self.rules.per_person,
                                ttl_days=self.rules.ttl_days) == "full":
            return _("This channel has {n} notes already; forget one first.").format(n=self.rules.per_person)
        audit.emit("memory.written", team=ws.team_id, enterprise=ws.enterprise_id or "", channel=channel, run_id="",
                   user=user, kind="channel_note", ids=[note.id], visibility=visibility)
        return _("Noted as `{id}`: used in this channel only, for everyone who asks here.").format(id=note.id)

    async def person_left(self, ws: Workspace, user: str) -> None:
        """``user_change`` with ``deleted``: the person's memories and switch go."""
        await self.store.erase_people(ws, [user])
        emit_forgotten(ws, user, [], "person_left")


async def erase_revoked(store: MemoryStore, enterprise: str | None, team: str | None, event: dict[str, Any]) -> None:
    """``app_uninstalled``, or ``tokens_revoked`` for the bot: every memory of the installation goes (``team`` None:
    an org-wide install's, in all its workspaces); a person's revoked token: that person's."""
    ws = Workspace(team or "-", enterprise or "")
    tokens = event.get("tokens") if event.get("type") == "tokens_revoked" else None
    if isinstance(tokens, dict) and not tokens.get("bot"):
        people = [u for u in tokens.get("oauth") or [] if isinstance(u, str)]
        for person in sorted(await store.erase_people_in(enterprise or "", team, people)):
            emit_forgotten(ws, person, [], "tokens_revoked")
        return
    if await store.erase_installation(enterprise or "", team):  # audited when there was something to erase
        emit_forgotten(ws, "", [], "uninstalled" if tokens is None else "tokens_revoked")


def emit_forgotten(ws: Workspace, user: str, ids: list[str], reason: str, *, channel: str = "") -> None:
    audit.emit("memory.forgotten", team=ws.team_id, enterprise=ws.enterprise_id or "", channel=channel, run_id="",
               user=user, kind="memory", ids=ids, reason=reason)


def register(app: AsyncApp, services: Services, parts: WorkspaceParts,
             uninstalled: Callable[[AsyncBoltContext], Awaitable[None]] | None = None) -> AgentMemory:
    """The handlers; in single-workspace mode (no OAuth) the uninstall events too, and ``uninstalled`` (the people's
    MCP tokens go) after ``app_uninstalled`` (OAuth mode's own listeners call ``erase_revoked`` after they delete
    the tokens: Bolt runs one listener per event)."""
    memory = AgentMemory.for_services(services, parts)
    if services.oauth is None:

        async def on_revoked(event: dict[str, Any], context: AsyncBoltContext) -> None:
            org_wide = bool(context.is_enterprise_install and context.enterprise_id)
            await erase_revoked(memory.store, context.enterprise_id, None if org_wide else context.team_id, event)
            if uninstalled is not None and event.get("type") == "app_uninstalled":
                await uninstalled(context)

        app.event("app_uninstalled")(on_revoked)
        app.event("tokens_revoked")(on_revoked)
    return memory
