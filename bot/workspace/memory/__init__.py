"""Memory: what a person asked the agent to keep (``store``: Redis, the cap, the expiry), the rules of where it may be
used and what may be kept (``rules``), and the ``/agent memory`` and ``/agent-limits … memory`` grammars
(``command``). The run's side is ``bot.runs.memory``; the commands' handlers ``bot.receive.listeners.memory``."""

from bot.workspace.memory.command import (
    MemoryCommand,
    NoteCommand,
    SwitchCommand,
    Unclear,
    admin_usage,
    is_memory,
    line,
    parse,
    parse_admin,
    usage,
)
from bot.workspace.memory.rules import day, quoted, relevant, usable, visibility_of
from bot.workspace.memory.store import DAY_SECONDS, Memory, MemoryStore, Visibility, new_id, records

__all__ = [
    "DAY_SECONDS",
    "Memory",
    "MemoryCommand",
    "MemoryStore",
    "NoteCommand",
    "SwitchCommand",
    "Unclear",
    "Visibility",
    "admin_usage",
    "day",
    "is_memory",
    "line",
    "new_id",
    "parse",
    "parse_admin",
    "quoted",
    "records",
    "relevant",
    "usable",
    "visibility_of",
    "usage",
]
