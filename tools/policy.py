"""Per-workspace tool policy and the per-run tool list.

``ToolPolicy`` is a workspace's allow-list. ``run_registry`` then fits the enabled tools to one run: only
the ones that can work where it runs (``read_file`` only in a run given files), and, past
``AGENT_TOOLS_PER_RUN``, the ones most relevant to the task (BM25 over names and descriptions; built-ins always
kept). The rest stay callable: a call to one is accepted and adds it to the run's list.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Literal

from tools.registry import Registry
from tools.settings import DEFAULT_TOOLS_PER_RUN
from tools.tool import Tool

Environment = Literal["slack", "terminal"]
#: Built-ins that need a Slack workspace behind them.
SLACK_ONLY_TOOLS = frozenset({"channel_history", "attach_file", "slack_search"})
#: Built-ins that need files given to the run.
FILE_TOOLS = frozenset({"read_file"})
#: Built-ins that need Slack's Real-time Search for this run (the event's ``action_token``).
SEARCH_TOOLS = frozenset({"slack_search"})
#: Built-ins offered only to a run whose asker has memory on there (``ToolContext.memory``).
MEMORY_TOOLS = frozenset({"remember", "recall", "forget"})
_WORD_RE = re.compile(r"[a-z0-9]+")
_BM25_K1, _BM25_B = 1.2, 0.75


class ToolPolicy:
    """A workspace's allow-list over a registry.

    ``ToolPolicy()`` enables every tool not marked dangerous; ``ToolPolicy(["calculator", "shell"])``
    enables exactly the named tools that exist, dangerous ones included because they were named::

        run_tools = ToolPolicy(settings.allowlist()).enabled(registry)
    """

    def __init__(self, allowlist: Iterable[str] | None = None) -> None:
        self.allowlist: tuple[str, ...] | None = None if allowlist is None else tuple(allowlist)

    def enabled(self, registry: Registry) -> Registry:
        """The view of ``registry`` this policy allows."""
        if self.allowlist is None:
            return registry.select(t.name for t in registry if not t.dangerous)
        return registry.select(self.allowlist)

    def unknown(self, registry: Registry) -> list[str]:
        """Allow-list names that match no registered tool (worth a start-up warning: likely typos)."""
        return [name for name in self.allowlist or () if registry.get(name) is None]

    def __repr__(self) -> str:
        return f"ToolPolicy({self.allowlist!r})"


def matches(pattern: str, name: str) -> bool:
    """``tools enable``/``disable`` patterns: an exact name, or ``<server>__*`` for a whole server."""
    if pattern.endswith("__*"):
        return name.startswith(pattern[:-1])
    return pattern == name


@dataclass(frozen=True, slots=True)
class ToolListing:
    """One row of ``/agent-limits tools``."""

    name: str
    #: The MCP server, or None for a built-in.
    server: str | None
    description: str
    enabled: bool


def run_registry(
    enabled: Registry,
    *,
    task: str,
    environment: Environment,
    limit: int = DEFAULT_TOOLS_PER_RUN,
    has_files: bool = False,
    can_search: bool = False,
    has_memory: bool = False,
) -> Registry:
    """The run's tools: those that work in ``environment`` (and with or without files, with or without Slack's
    search, with or without the asker's memory), offering at most ``limit`` (built-ins kept)."""
    usable = [
        t
        for t in enabled
        if (environment == "slack" or t.name not in SLACK_ONLY_TOOLS) and (has_files or t.name not in FILE_TOOLS)
        and (can_search or t.name not in SEARCH_TOOLS) and (has_memory or t.name not in MEMORY_TOOLS)
    ]
    if len(usable) <= limit:
        return Registry(usable)
    builtins = [t for t in usable if t.server is None]
    others = [t for t in usable if t.server is not None]
    room = max(limit - len(builtins), 0)
    ranked = sorted(zip(bm25(task, others), range(len(others)), others, strict=True), key=lambda r: (-r[0], r[1]))
    chosen = {t.name for t in builtins} | {t.name for _, _, t in ranked[:room]}
    return Registry(usable, offered=chosen)


def bm25(query: str, docs: Sequence[Tool]) -> list[float]:
    """Okapi BM25 of each tool's name + description against the query."""
    texts = [_words(f"{t.name} {t.description}") for t in docs]
    if not texts:
        return []
    avg = sum(map(len, texts)) / len(texts) or 1.0
    df = Counter(w for words in texts for w in set(words))
    terms = set(_words(query))
    scores = []
    for words in texts:
        tf = Counter(words)
        score = 0.0
        for term in terms & tf.keys():
            idf = math.log(1 + (len(texts) - df[term] + 0.5) / (df[term] + 0.5))
            norm = tf[term] + _BM25_K1 * (1 - _BM25_B + _BM25_B * len(words) / avg)
            score += idf * tf[term] * (_BM25_K1 + 1) / norm
        scores.append(score)
    return scores


def _words(text: str) -> list[str]:
    # Tool names are snake_case: split them so "get_current_time" matches "current time".
    return _WORD_RE.findall(text.lower().replace("_", " "))
