"""Audited changes: what one is (who, when, what, before and after), how its field reads, and where every one is
written: the capped Redis audit list ``show`` and App Home read, and one ``limits.changed`` line on the audit
stream (:mod:`bot.audit`) per change once it is committed."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Literal

from redis.asyncio.client import Pipeline

from bot import audit
from bot.workspace.settings.config import LABELS

AUDIT_CAP = 100
"""Limit changes kept per workspace (newest first)."""

#: The audit field of a workspace tool choice: ``tool:<name or server__*>`` (old/new are ``on``/``off``).
TOOL_FIELD_PREFIX = "tool:"
#: Audit field of an outbound host list change: ``domain:docs.example.com``.
DOMAIN_FIELD_PREFIX = "domain:"


def label_of(audit_field: str) -> str:
    """How an audited field reads: ``max-steps``, or ``tool time__*``."""
    if audit_field.startswith(TOOL_FIELD_PREFIX):
        return f"tool {audit_field.removeprefix(TOOL_FIELD_PREFIX)}"
    if audit_field.startswith(DOMAIN_FIELD_PREFIX):
        return f"domain {audit_field.removeprefix(DOMAIN_FIELD_PREFIX)}"
    if audit_field.startswith("channel:"):  # channel:<id>:<setting> (bot.workspace.settings.channel_settings)
        _, channel, setting = audit_field.split(":", 2)
        return f"<#{channel}> {setting}"
    return LABELS.get(audit_field, audit_field)


@dataclass(frozen=True, slots=True)
class Change:
    """One audited change: who, when, what (a limit, or ``tool:<pattern>``), the effective values before and after."""

    actor: str
    at: datetime
    field: str
    old: str
    new: str

    def to_json(self) -> str:
        data = {
            "who": self.actor,
            "at": self.at.isoformat(),
            "field": self.field,
            "old": self.old,
            "new": self.new,
        }
        return json.dumps(data)

    @classmethod
    def from_json(cls, raw: str | bytes) -> Change:
        data = json.loads(raw)
        return cls(str(data["who"]), datetime.fromisoformat(data["at"]), data["field"], data["old"], data["new"])

    def describe(self) -> str:
        return f"{when(self.at)} <@{self.actor}>: {label_of(self.field)} {self.old} → {self.new}"


def when(t: datetime) -> str:
    return t.astimezone(UTC).strftime("%Y-%m-%d %H:%M UTC")


async def commit(
    pipe: Pipeline, audit_key: str, changes: Sequence[Change], *, team: str, enterprise: str | None,
    scope: Literal["workspace", "org"] = "workspace",
) -> None:
    """Queue ``changes`` on the audit list, run the caller's transaction (``pipe``, in MULTI with its writes),
    then log them: a change whose transaction failed or was retried is never logged."""
    if changes:
        pipe.lpush(audit_key, *(c.to_json() for c in changes))
        pipe.ltrim(audit_key, 0, AUDIT_CAP - 1)
    await pipe.execute()
    for change in changes:
        audit.emit("limits.changed", team=team, enterprise=enterprise or "", scope=scope, actor=change.actor,
                   field=change.field, old=change.old, new=change.new)
