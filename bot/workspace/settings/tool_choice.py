"""A workspace's own choice of tools, as values: rules over the deployment's catalog. Pure.

The deployment decides which tools exist (built-ins, ``AGENT_MCP_CONFIG``, ``AGENT_TOOLS``); a workspace can
only turn some of them off, or back on. A rule names one tool (``time__get_current_time``) or a whole server
(``time__*``); the most specific rule wins, and a tool no rule names is on::

    choice = ToolChoice({"time__*": False, "time__get_current_time": True})
    choice.is_on("time__convert_time")      # False: the server rule
    choice.is_on("time__get_current_time")  # True: its own rule is more specific
"""

from __future__ import annotations

import difflib
import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from tools import Registry, ToolListing, matches

#: A tool name (the OpenAI function-name alphabet), or ``<server>__*`` for every tool of a server.
PATTERN_RE = re.compile(r"[A-Za-z0-9_-]{1,64}|[A-Za-z0-9_-]{1,40}__\*", re.ASCII)
#: How alike a mistyped name must be to a real one before it is offered (difflib ratio).
SUGGEST_CUTOFF = 0.5


@dataclass(frozen=True, slots=True)
class CatalogEntry:
    """One tool the deployment offers, as the workers publish it (the web side never starts MCP servers)."""

    name: str
    #: The MCP server, or None for a built-in.
    server: str | None
    summary: str

    def to_dict(self) -> dict[str, str | None]:
        return {"name": self.name, "server": self.server, "summary": self.summary}

    @classmethod
    def from_dict(cls, data: Mapping[str, object]) -> CatalogEntry:
        server = data.get("server")
        return cls(str(data["name"]), None if server is None else str(server), str(data.get("summary", "")))


def catalog_of(registry: Registry) -> list[CatalogEntry]:
    return [CatalogEntry(t.name, t.server, t.summary) for t in registry]


def encode_catalog(entries: Iterable[CatalogEntry]) -> str:
    return json.dumps({"v": 1, "tools": [e.to_dict() for e in entries]}, sort_keys=True)


def decode_catalog(raw: str) -> list[CatalogEntry]:
    """Raises ValueError (or KeyError/TypeError) on anything that is not a catalog."""
    data = json.loads(raw)
    return [CatalogEntry.from_dict(item) for item in data["tools"]]


@dataclass(frozen=True, slots=True)
class ToolChoice:
    """The workspace's rules: pattern -> on (True) or off (False). Empty: every deployment tool is on."""

    rules: Mapping[str, bool] = field(default_factory=dict)
    #: A channel's allow-list on top of the rules (names or ``server__*``): when given, a tool must also match one.
    only: tuple[str, ...] = ()

    def is_on(self, name: str) -> bool:
        if self.only and not any(matches(p, name) for p in self.only):
            return False
        exact = self.rules.get(name)
        if exact is not None:
            return exact
        servers = [p for p in self.rules if p.endswith("__*") and matches(p, name)]
        return self.rules[max(servers, key=len)] if servers else True

    def disabled(self, names: Iterable[str]) -> list[str]:
        return [n for n in names if not self.is_on(n)]

    def state(self, pattern: str, names: Sequence[str]) -> str:
        """``on``, ``off`` or ``mixed``: how ``pattern`` stands now over the catalog's ``names``."""
        if not pattern.endswith("__*"):
            return _word(self.is_on(pattern))
        states = {self.is_on(n) for n in names if matches(pattern, n)} or {self._fallback(pattern)}
        return _word(states.pop()) if len(states) == 1 else "mixed"

    def with_rule(self, pattern: str, on: bool) -> ToolChoice:
        """The choice after ``tools enable|disable <pattern>``: the latest command wins over what it covers.

        A server rule replaces the rules of that server's single tools (``disable time__*`` turns them all
        off); a rule equal to what would hold without it is dropped, so the stored set stays minimal.
        """
        rules = dict(self.rules)
        if pattern.endswith("__*"):
            for p in [p for p in rules if not p.endswith("__*") and matches(pattern, p)]:
                del rules[p]
        rules[pattern] = on
        for p in list(rules):
            rest = ToolChoice({k: v for k, v in rules.items() if k != p})
            if rest._fallback(p) == rules[p]:
                del rules[p]
        return ToolChoice(rules)

    def _fallback(self, pattern: str) -> bool:
        # A name no tool has, under the pattern's server: only server rules (and the default) apply to it.
        return self.is_on(pattern[:-1] + "\0") if pattern.endswith("__*") else self.is_on(pattern)


def _word(on: bool) -> str:
    return "on" if on else "off"


def rows(catalog: Iterable[CatalogEntry], choice: ToolChoice) -> list[ToolListing]:
    """Each catalog tool with its on/off state in this workspace (the ``/agent-limits tools`` list)."""
    return [ToolListing(e.name, e.server, e.summary, choice.is_on(e.name)) for e in catalog]


def unknown_pattern(pattern: str, catalog: Sequence[CatalogEntry]) -> list[str] | None:
    """None when ``pattern`` names a catalog tool or server; else the closest names (maybe none)."""
    names = [e.name for e in catalog]
    if any(matches(pattern, n) for n in names):
        return None
    candidates = names + sorted({f"{e.server}__*" for e in catalog if e.server})
    by_lower = {c.lower(): c for c in candidates}
    close = difflib.get_close_matches(pattern.lower(), list(by_lower), n=3, cutoff=SUGGEST_CUTOFF)
    return [by_lower[c] for c in close]
