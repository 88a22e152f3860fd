"""Per-workspace tool policy: which tools a run may see (allow-list, dangerous ones left out by default)."""

from __future__ import annotations

from collections.abc import Iterable

from tools.registry import Registry


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
