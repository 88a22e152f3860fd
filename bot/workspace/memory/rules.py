"""The memory rules, decided here and nowhere else (pure): where a memory may be used, what may be kept, and which
memories answer a question.

=====================================  =====================================================================
The run is in                          It may use
=====================================  =====================================================================
the person's DM with the app           every memory of theirs
a public channel                       their public memories, and the private ones said in this channel
a private channel or group DM          their public memories, and the private ones said in this channel
a channel shared with another org      only the memories said in this channel (the other organisation's
                                       people read it, and cannot read this workspace's channels)
a place Slack will not describe        nothing
=====================================  =====================================================================

A memory is ``private`` when said in a DM, group DM or private channel, or in a channel shared with another
organisation; ``public`` when said in a public channel of the workspace.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Sequence
from datetime import UTC, datetime

from bot.workspace.admin import Place
from bot.workspace.memory.store import Memory, Visibility

_WORD = re.compile(r"\w+", re.UNICODE)
#: Quotes and dashes that clients and models spell differently: one spelling for the comparison.
_FOLD = str.maketrans({"\u2018": "'", "\u2019": "'", "\u201c": '"', "\u201d": '"', "\u2013": "-", "\u2014": "-"})
_MENTION = re.compile(r"<[@#!][^>]*>")
#: Slack's link markup, ``<https://x.example|x.example>``: the person wrote the URL.
_LINK = re.compile(r"<((?:https?|mailto):[^|>]+)(?:\|[^>]*)?>")
_ENTITIES = (("&lt;", "<"), ("&gt;", ">"), ("&amp;", "&"))


def visibility_of(place: Place) -> Visibility | None:
    """The visibility of what is said in ``place``; None when Slack would not describe it (nothing is kept)."""
    if place.kind is None:
        return None
    return "public" if place.kind == "public_channel" and not place.external else "private"


def usable(memory: Memory, place: Place) -> bool:
    """May ``memory`` be used in a run in ``place``?"""
    if place.kind is None:
        return False
    if memory.channel == place.channel_id:
        return True
    if place.external:
        return False
    return place.kind == "im" or memory.visibility == "public"


def _folded(text: str) -> str:
    text = _LINK.sub(r"\1", _MENTION.sub(" ", text))
    for entity, char in _ENTITIES:  # Slack escapes these three in message text
        text = text.replace(entity, char)
    text = unicodedata.normalize("NFKC", text).translate(_FOLD).casefold()
    return " ".join(text.split())


def quoted(text: str, said: str) -> bool:
    """Does ``text`` quote ``said`` (the asker's own message), up to case, spacing and quote marks? The edges'
    punctuation does not count ("I deploy to eu-west-3." quotes "remember that I deploy to eu-west-3")."""
    core = _folded(text).strip(" .,;:!?\"'`")
    return bool(core) and core in _folded(said)


def relevant(memories: Sequence[Memory], query: str, *, limit: int) -> list[Memory]:
    """The memories sharing most words with ``query`` (all, newest first, when it has none in common or is empty)."""
    words = {w.casefold() for w in _WORD.findall(query)}
    scored = [(len(words & {w.casefold() for w in _WORD.findall(m.text)}), m.said_at, m) for m in memories]
    hits = [s for s in scored if s[0] > 0]
    chosen = sorted(hits or scored, key=lambda s: (-s[0], -s[1]))
    return [m for _score, _at, m in chosen[:limit]]


def day(epoch: float) -> str:
    """``3 Dec 2026``: when a memory was said, as the person reads it (UTC)."""
    when = datetime.fromtimestamp(epoch, UTC)
    return f"{when.day} {when:%b %Y}"
