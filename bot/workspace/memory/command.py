"""The grammars of ``/agent memory …`` and of ``/agent-limits memory on|off`` and ``/agent-limits channel memory
add|list|forget``, and the lines their replies are made of. Pure: text in, a typed command out."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

from bot.i18n import _
from bot.markup import escape
from bot.workspace.memory.rules import day
from bot.workspace.memory.store import Memory

Verb = Literal["list", "forget", "export", "on", "off"]
NoteVerb = Literal["add", "list", "forget"]
#: A memory's id (``M…``), a channel note's (``N…``), or ``all``.
_ID = re.compile(r"[MN][0-9A-F]{8}|ALL")
_PLAIN: dict[str, Verb] = {"list": "list", "export": "export", "on": "on", "off": "off"}


@dataclass(frozen=True, slots=True)
class MemoryCommand:
    """``/agent memory [list|forget <id>|all|export|on|off]``."""

    verb: Verb
    #: The memory's id, or ``all`` (``forget`` only).
    target: str = ""


@dataclass(frozen=True, slots=True)
class NoteCommand:
    """``/agent-limits channel memory add <text>|list|forget <id>|all``."""

    verb: NoteVerb
    #: The note's text (``add``) or id or ``all`` (``forget``).
    value: str = ""


@dataclass(frozen=True, slots=True)
class SwitchCommand:
    """``/agent-limits memory on|off``."""

    on: bool


@dataclass(frozen=True, slots=True)
class Unclear:
    """Not understood: the usage line to answer with."""

    problem: str


def is_memory(text: str) -> bool:
    """Is this ``/agent`` text for memory (``memory …``)?"""
    words = text.split(maxsplit=1)
    return bool(words) and words[0].lower() == "memory"


def usage() -> str:
    return _("*Usage:* `/agent memory` (your memories) · `/agent memory forget <id>|all` · `/agent memory export` · "
             "`/agent memory off|on` (for you only).")


def admin_usage() -> str:
    return _("*Usage:* `/agent-limits memory on|off` · `/agent-limits channel memory add <note>` · "
             "`/agent-limits channel memory list` · `/agent-limits channel memory forget <id>|all`.")


def parse(text: str) -> MemoryCommand | Unclear:
    """One ``/agent memory …`` text."""
    words = text.split()[1:]
    verb = words[0].lower() if words else "list"
    if verb in _PLAIN and len(words) <= 1:
        return MemoryCommand(_PLAIN[verb])
    if verb == "forget" and len(words) == 2 and _ID.fullmatch(words[1].upper()):
        return MemoryCommand("forget", "all" if words[1].lower() == "all" else words[1].upper())
    return Unclear(usage())


def parse_admin(text: str) -> SwitchCommand | NoteCommand | Unclear | None:
    """One ``/agent-limits`` text: None when it is not about memory (another handler's)."""
    words = text.split()
    lowered = [w.lower() for w in words[:3]]
    if lowered[:1] == ["memory"]:
        if len(words) == 2 and lowered[1] in ("on", "off"):
            return SwitchCommand(lowered[1] == "on")
        return Unclear(admin_usage())
    if lowered[:2] != ["channel", "memory"]:
        return None
    verb = lowered[2] if len(lowered) > 2 else "list"
    rest = text.split(maxsplit=3)[3].strip() if len(words) > 3 else ""
    if verb == "list" and not rest:
        return NoteCommand("list")
    if verb == "add" and rest:
        return NoteCommand("add", rest)
    if verb == "forget" and _ID.fullmatch(rest.upper()):
        return NoteCommand("forget", "all" if rest.lower() == "all" else rest.upper())
    return Unclear(admin_usage())


def where(memory: Memory) -> str:
    """Where it was said, as a mention Slack renders for whoever may see it."""
    if memory.channel.startswith("D"):
        return _("in your DM with me")
    return _("in <#{channel}>").format(channel=memory.channel)


def line(memory: Memory) -> str:
    """``• `M1A2B3C4D` I deploy to eu-west-3 (in #ops, public, 3 Dec 2026)``."""
    visibility = _("public") if memory.visibility == "public" else _("private")
    return f"• `{memory.id}` {escape(memory.text)} ({where(memory)}, {visibility}, {day(memory.said_at)})"
