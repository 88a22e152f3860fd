"""Where every audited change is written: the capped Redis audit list ``show`` and App Home read, and one
``limits.changed`` line on the audit stream (:mod:`bot.audit`) per change once it is committed."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

from redis.asyncio.client import Pipeline

from bot import audit
from bot.workspace.config import AUDIT_CAP, Change


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
