"""What the exfiltration guard needs from Slack for one run: the thread's messages split into the requester's own
(their URLs may be fetched) and everyone else's (private data), the workspace's host lists, and a thread
notice each time an outbound call is held back."""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping
from typing import Any

from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from bot import audit
from bot.i18n import N_, _
from bot.markup import escape
from bot.thread import render
from bot.thread.poster import Poster
from bot.turn import Target, Turn
from bot.workspace.domains import DomainLists
from tools import EgressPolicy, HeldBack

log = logging.getLogger(__name__)

#: Thread messages read per run (Slack's page size); a longer thread's older part counts as unreadable.
THREAD_PAGE = 200
#: Stands for thread messages that could not be read: the guard then treats the thread as private (fail closed).
UNREAD = "(this thread's other messages could not be read)"
#: What a run read, as the guard names it in English (``tools.exfiltration``, ``tools.destinations``,
#: ``agent_core.files_in``: the model reads those names too), worded for the thread; a tool's name is shown as it is.
SOURCES = (
    (re.compile(r"thread messages from others"), N_("thread messages from others")),
    (re.compile(r"internal pages \((?P<tool>[^)]*)\)"), N_("internal pages ({tool})")),
    (re.compile(r"attached file (?P<name>.*)", re.DOTALL), N_("attached file {name}")),
)


class ThreadNotices:
    """Tells the thread that an outbound call was held back: the tool and host, never the URL (it may carry
    the data), and how an admin can allow the host; and the audit stream (``guard.decided``), which names the
    host's registrable domain only (its other labels may carry the data)."""

    def __init__(self, poster: Poster, turn: Turn) -> None:
        self.poster = poster
        self.target: Target = turn.target
        self.turn = turn

    async def held_back(self, event: HeldBack) -> None:
        ws = self.turn.workspace
        audit.emit("guard.decided", team=ws.team_id, enterprise=ws.enterprise_id or "",
                   channel=self.turn.conversation.channel_id, run_id=self.turn.run_id, tool=event.tool,
                   decision="held_back", reason=event.reason.value,
                   host=audit.registrable_domain(event.host) if event.host else "", service=event.service)
        # Every name here (tool, host, service, file) came from a model, a page or a person: shown inert.
        host = escape(event.host)
        where = host and f"`{host}`" or escape(event.service)
        read = ", ".join(escape(source_words(s)) for s in event.sources) or _("private data")
        said = (_(":shield: I held back a `{tool}` call to {where} after reading {read} ({reason}).") if where
                else _(":shield: I held back a `{tool}` call after reading {read} ({reason})."))
        text = said.format(tool=escape(event.tool), where=where, read=read, reason=event.reason.value)
        if host and event.reason.value == "not_allowed":
            text += " " + _("An admin can allow the host with `/agent-limits allow-domain {host}`.").format(host=host)
        await self.poster.post(self.target, render.notice(text))


def source_words(source: str) -> str:
    """One thing a run read, in the current locale."""
    for pattern, words in SOURCES:
        if found := pattern.fullmatch(source):
            return _(words).format(**found.groupdict())
    return source


async def egress_policy(
    client: AsyncWebClient, turn: Turn, domains: DomainLists, notices: ThreadNotices
) -> EgressPolicy:
    """The guard's view of this run's thread. A top-level mention or a DM has nobody else's words in it."""
    mine: list[str] = []
    others: list[str] = []
    if turn.reply_thread_ts != turn.message_ts and not turn.conversation.channel_id.startswith("D"):
        try:
            replies = await client.conversations_replies(
                channel=turn.conversation.channel_id, ts=turn.reply_thread_ts, limit=THREAD_PAGE
            )
            for message in replies.get("messages") or []:
                _sort(message, turn.user_id, mine, others)
            if replies.get("has_more"):
                others.append(UNREAD)
        except SlackApiError as exc:
            log.warning("thread %s unreadable for the exfiltration guard (%s): treated as private",
                        turn.thread, exc.response.get("error"))
            others.append(UNREAD)
    return EgressPolicy(
        requester_texts=tuple(mine), private_texts=tuple(others),
        allowed_domains=domains.allowed, denied_domains=domains.denied, notices=notices,
    )


def _sort(message: Mapping[str, Any], requester: str, mine: list[str], others: list[str]) -> None:
    if message.get("bot_id") or message.get("subtype") == "bot_message":
        return  # the bot's own replies: what it read is already in the guard's transcript
    text = str(message.get("text") or "")
    if text:
        (mine if message.get("user") == requester else others).append(text)
