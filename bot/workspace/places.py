"""Where a thread is read, and so what may be shown in it: a conversation's kind (``conversations.info``, cached per
workspace and channel) and the audience rule for what a search finds, decided here and nowhere else.

The rule (design.md, "Audience and authority"): a thread shows only what its readers could already see.

==================================  ======================================  ============================================
The thread is in                    Slack is asked for                      A result is shown when it comes from
==================================  ======================================  ============================================
the asker's DM with the app         what the model asks (default: all)      anywhere: they are the asker's own results
a public channel                    public channels                         a public channel
a private channel or group DM       public channels and its own kind        a public channel, or this conversation
a channel shared with another org   its own kind                            this conversation (the other org's people
                                                                            cannot read this workspace's channels)
==================================  ======================================  ============================================

A channel Slack will not describe counts as nobody's: its results are withheld, and a thread whose own kind is
unknown is not searched at all. A result naming no conversation (a file) is shown only where Slack was asked for
public channels alone (or in the DM).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Literal

from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from bot.identity import Workspace

log = logging.getLogger(__name__)

#: Slack's own names of the conversation kinds (``channel_types`` of a search).
ChannelType = Literal["public_channel", "private_channel", "mpim", "im"]
ALL_TYPES: tuple[ChannelType, ...] = ("public_channel", "private_channel", "mpim", "im")
#: conversations.info answers are reused this long: a channel made private is searched as one within it.
PLACE_CACHE_SECONDS = 300.0
PLACE_CACHE_ENTRIES = 10_000


@dataclass(frozen=True, slots=True)
class Place:
    """One conversation as Slack describes it."""

    channel_id: str
    #: ``None``: Slack would not say (not found, no access): nobody's, so nothing from it is shown.
    kind: ChannelType | None
    #: Shared with another organisation (Slack Connect): people outside the workspace read it.
    external: bool = False

    @classmethod
    def of(cls, channel_id: str, channel: dict[str, Any]) -> Place:
        """From a ``conversations.info`` ``channel`` object."""
        kind: ChannelType = "public_channel"
        if channel.get("is_im") or channel_id.startswith("D"):
            kind = "im"
        elif channel.get("is_mpim"):
            kind = "mpim"
        elif channel.get("is_private") or channel.get("is_group"):
            kind = "private_channel"
        return cls(channel_id, kind, external=bool(channel.get("is_ext_shared")))


class Places:
    """``conversations.info`` answers, cached briefly per workspace and channel (one per process)."""

    def __init__(self, *, ttl_seconds: float = PLACE_CACHE_SECONDS,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._ttl = ttl_seconds
        self._clock = clock
        self._cache: dict[tuple[Workspace, str], tuple[float, Place]] = {}

    async def of(self, client: AsyncWebClient, ws: Workspace, channel_id: str) -> Place:
        now = self._clock()
        cached = self._cache.get((ws, channel_id))
        if cached is not None and cached[0] > now:
            return cached[1]
        try:
            answer = await client.conversations_info(channel=channel_id)
            channel = answer.get("channel")
            place = Place.of(channel_id, channel) if isinstance(channel, dict) else Place(channel_id, None)
        except SlackApiError as exc:
            log.info("conversations.info of %s refused: %s", channel_id, exc.response.get("error"))
            return Place(channel_id, None)  # not cached: a passing failure must not hide a channel for long
        if len(self._cache) >= PLACE_CACHE_ENTRIES:
            self._cache.clear()  # crude, but bounded; a refill costs one call per active channel
        self._cache[(ws, channel_id)] = (now + self._ttl, place)
        return place

    def audience(self, client: AsyncWebClient, ws: Workspace, channel_id: str) -> ThreadAudience:
        """The audience of a thread in ``channel_id``."""
        return ThreadAudience(self, client, ws, channel_id)


@dataclass(frozen=True, slots=True)
class SearchScope:
    """What a search run from ``thread`` may ask Slack for, and which of its results the thread may show."""

    thread: Place

    @property
    def allowed(self) -> tuple[ChannelType, ...]:
        """The kinds of conversation whose results this thread's readers may see."""
        kind = self.thread.kind
        if kind is None:
            return ()
        if self.thread.external:
            return (kind,)
        if kind == "im":
            return ALL_TYPES
        return ("public_channel",) if kind == "public_channel" else ("public_channel", kind)

    def channel_types(self, requested: Iterable[str]) -> tuple[ChannelType, ...]:
        """The ``channel_types`` to send: what the model asked for within ``allowed`` (all of it when it asked
        for none, or only for kinds it may not have)."""
        allowed = self.allowed
        asked = tuple(t for t in allowed if t in set(requested))
        return asked or allowed

    def shows(self, source: Place | None) -> bool:
        """Whether a result from ``source`` (None: the result names no conversation) may be shown here."""
        kind = self.thread.kind
        if kind == "im" and not self.thread.external:
            return True
        if source is None:
            # A result that names no conversation (a file) is from where Slack was asked: safe only when that
            # was public channels alone.
            return self.allowed == ("public_channel",)
        if source.channel_id == self.thread.channel_id:
            return True
        return not self.thread.external and source.kind == "public_channel"

    def words(self) -> str:
        """For the model: what was searched, and why no more (English, as tools speak)."""
        kind = self.thread.kind
        if kind == "im" and not self.thread.external:
            return "Searched everything the asker can see (this is the asker's own DM with the app)."
        if self.thread.external:
            return ("Searched this conversation only: it is shared with another organisation, whose people cannot "
                    "read this workspace's other channels.")
        if kind == "public_channel":
            return ("Searched public channels only: this thread is in a public channel, so results from DMs and "
                    "private channels cannot be shown here (the asker can ask in a DM with the app for those).")
        return ("Searched public channels and this conversation only: results from other private conversations "
                "cannot be shown to this conversation's members.")


class ThreadAudience:
    """The audience of one run's thread: its scope, read once, and the kinds of the channels its results name."""

    def __init__(self, places: Places, client: AsyncWebClient, ws: Workspace, channel_id: str) -> None:
        self._places = places
        self._client = client
        self._ws = ws
        self.channel_id = channel_id

    async def scope(self) -> SearchScope:
        return SearchScope(await self._places.of(self._client, self._ws, self.channel_id))

    async def sources(self, channel_ids: Iterable[str]) -> dict[str, Place]:
        """The results' conversations, described (each asked once, together)."""
        wanted = sorted({c for c in channel_ids if c})
        found = await asyncio.gather(*(self._places.of(self._client, self._ws, c) for c in wanted))
        return dict(zip(wanted, found, strict=True))
