"""Who a request is for: the ``Workspace`` Bolt resolved, read once per request by one middleware.

Every listener reads ``context["workspace"]``; nobody rebuilds it from payload fields. The rule, for plain and
Enterprise Grid installs alike: the team the request names (``context.team_id``, as Bolt resolved it), inside
its enterprise when there is one. An org-wide install's events name their workspace only in the envelope's
``team_id`` (their authorization has no team, so Bolt resolves none): that team, never the token's. A workspace
install without a team in the payload is its own installation's team; an org-wide request without any team is
the enterprise's own (team part ``-``). A request with neither is not Slack's and is refused.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

from slack_bolt.context.async_context import AsyncBoltContext
from slack_bolt.middleware.async_middleware import AsyncMiddleware
from slack_bolt.request.async_request import AsyncBoltRequest
from slack_bolt.response import BoltResponse

__all__ = [
    "DM_THREAD",
    "Conversation",
    "IdentityMiddleware",
    "Workspace",
    "conversation",
    "conversation_of",
    "from_context",
    "is_human",
    "workspace",
]

#: Message subtypes that are a person writing; every other subtype (edits, deletions, bots, joins) is ignored.
HUMAN_SUBTYPES = frozenset({None, "thread_broadcast", "file_share"})
#: The whole DM is one conversation: its thread id uses this in place of a thread ts.
DM_THREAD = "dm"

_ID_RE = re.compile(r"[A-Za-z0-9_-]+", re.ASCII)
#: Channel ids and ts values: anything but the characters the thread id and key layout use.
_PART_RE = re.compile(r"[^{}/: ]+")
_SEP = "/"


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


@dataclass(frozen=True, slots=True)
class Conversation:
    """One Slack thread inside one workspace: where a run reads and replies.

    ``id`` (``E/T/C/ts``, ``-`` for no enterprise) is the opaque thread id the engine, the run ids and the arq
    job ids carry; ``parse`` reads it back.
    """

    workspace: Workspace
    channel_id: str
    thread_ts: str

    def __post_init__(self) -> None:
        if not _PART_RE.fullmatch(self.channel_id):
            raise ValueError(f"Conversation.channel_id must be a Slack channel id, got {self.channel_id!r}")
        if not _PART_RE.fullmatch(self.thread_ts):
            raise ValueError(f"Conversation.thread_ts must be a Slack message ts, got {self.thread_ts!r}")

    @property
    def id(self) -> str:
        ws = self.workspace
        return _SEP.join((ws.enterprise_id or "-", ws.team_id, self.channel_id, self.thread_ts))

    @classmethod
    def parse(cls, thread: str) -> Conversation:
        parts = thread.split(_SEP)
        if len(parts) != 4:
            raise ValueError(f"not a thread id (enterprise/team/channel/ts): {thread!r}")
        enterprise, team, channel, ts = parts
        return cls(Workspace(team, "" if enterprise == "-" else enterprise), channel, ts)


def from_context(context: AsyncBoltContext, body: Mapping[str, Any] | None = None) -> Workspace | None:
    """The one reader of Bolt's context: the workspace of this request (``body``, its payload), or None when
    it names none."""
    result = context.authorize_result
    team = context.team_id or None
    if not team and context.is_enterprise_install:
        team = _event_team(body or {})  # the org's token has no workspace of its own: never charge to it
    elif not team:
        team = result.team_id if result else None  # a workspace install: the one team it serves
    enterprise = context.enterprise_id or (result.enterprise_id if result else None) or None
    try:
        return Workspace.of(team, enterprise)
    except ValueError:
        return None


def _event_team(body: Mapping[str, Any]) -> str | None:
    """The workspace an org-wide install's event happened in: the envelope's ``team_id``. Not in a channel shared
    with another organisation, where that may be the other side's team (the request is then the org's own)."""
    if body.get("type") != "event_callback" or body.get("is_ext_shared_channel"):
        return None
    team = body.get("team_id")
    return team if isinstance(team, str) and team else None


def conversation_of(ws: Workspace, event: Mapping[str, Any]) -> Conversation | None:
    """The conversation a message event belongs to: its thread, or the whole DM; None when it names none."""
    channel, ts = str(event.get("channel") or ""), str(event.get("thread_ts") or event.get("ts") or "")
    if not (channel and ts):
        return None
    dm = event.get("channel_type") == "im" or channel.startswith("D")
    try:
        return Conversation(ws, channel, DM_THREAD if dm else ts)
    except ValueError:
        return None


def is_human(event: Mapping[str, Any]) -> bool:
    """A person wrote this message (not a bot, an edit, a deletion or a join)."""
    return (
        event.get("subtype") in HUMAN_SUBTYPES
        and not event.get("bot_id")
        and not event.get("bot_profile")
        and bool(event.get("user"))
        and "edited" not in event
    )


def workspace(context: AsyncBoltContext) -> Workspace:
    """``context["workspace"]``, put there by :class:`IdentityMiddleware` before any listener runs."""
    value = context["workspace"]
    assert isinstance(value, Workspace)
    return value


def conversation(context: AsyncBoltContext) -> Conversation | None:
    """``context["conversation"]``: set for message and mention events that name a channel and a ts."""
    value = context.get("conversation")
    return value if isinstance(value, Conversation) else None


class IdentityMiddleware(AsyncMiddleware):
    """Puts ``context["workspace"]`` (and, for messages and mentions, ``context["conversation"]``) in place for
    every listener, and drops message events no person wrote (cf. Bolt's attaching_conversation_kwargs)."""

    async def async_process(
        self, *, req: AsyncBoltRequest, resp: BoltResponse, next: Callable[[], Awaitable[BoltResponse]]
    ) -> BoltResponse:
        ws = from_context(req.context, req.body)
        if ws is None:
            return BoltResponse(status=400, body="the request names no workspace")
        req.context["workspace"] = ws
        event = req.body.get("event") if req.body.get("type") == "event_callback" else None
        if isinstance(event, dict) and event.get("type") in ("message", "app_mention"):
            if not is_human(event):
                return BoltResponse(status=200, body="")  # a bot's own reply, an edit, a join: nothing to do
            req.context["conversation"] = conversation_of(ws, event)
        return await next()
