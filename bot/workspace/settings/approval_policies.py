"""Approval policies: who may approve a tool's calls in a workspace, how many of them, and how long a call waits.

``/agent-limits approvals <tool-or-server> <approvers…> [min <n>] [timeout <duration>]`` stores one policy per
pattern (a tool, ``server__*``, or ``guard``: the calls the exfiltration guard puts to a person); approvers are
people (``<@U…>``) and user groups (``<!subteam^S…>``), whose members are read with ``usergroups.users.list`` when a
call is held, so membership changes apply. A policy's ``version`` changes with every change of it: a decision is
honoured only under the version its request was made with::

    policies = ApprovalPolicies(redis, keys)
    policy = policy_for(await policies.all(ws), "github__create_issue", "tool")   # exact, then server__*
    people = await members(client, policy.approvers)                             # UnknownGroup, SlackLookupError
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Literal

from redis.asyncio import Redis
from redis.asyncio.client import Pipeline
from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from bot.i18n import _
from bot.identity import Workspace
from bot.keys import AppKeys
from bot.redis import as_text
from bot.workspace.settings.changes import Change, commit

#: The audit field of a policy change: ``approvals:<pattern>``.
APPROVALS_FIELD_PREFIX = "approvals:"
#: The pattern of the calls the exfiltration guard holds and puts to a person.
GUARD = "guard"
_DURATION = re.compile(r"([1-9][0-9]{0,5})([smhd])", re.ASCII)
_UNIT_SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86400}
Kind = Literal["tool", "egress"]


@dataclass(frozen=True, slots=True)
class ApprovalPolicy:
    """One pattern's approvers (``U…`` people, ``S…`` groups), how many must approve, and the longest wait."""

    pattern: str
    approvers: tuple[str, ...]
    min: int = 1
    timeout_seconds: int = 0
    version: str = ""
    set_by: str = ""

    def to_json(self) -> str:
        return json.dumps({"approvers": list(self.approvers), "min": self.min, "timeout": self.timeout_seconds,
                           "version": self.version, "by": self.set_by})

    @classmethod
    def from_json(cls, pattern: str, raw: str | bytes) -> ApprovalPolicy | None:
        try:
            data = json.loads(raw)
            return cls(pattern, tuple(str(a) for a in data["approvers"]), int(data["min"]), int(data["timeout"]),
                       str(data["version"]), str(data.get("by") or ""))
        except (ValueError, TypeError, KeyError):
            return None

    def who(self) -> str:
        """The approvers as Slack shows them: ``<@U1>, <!subteam^S1>``."""
        return ", ".join(mention(a) for a in self.approvers)

    def text(self) -> str:
        return _("`{pattern}`: {who}, {n} needed, waits up to {wait}").format(
            pattern=self.pattern, who=self.who(), n=self.min, wait=duration_text(self.timeout_seconds))


def mention(approver: str) -> str:
    return f"<!subteam^{approver}>" if approver.startswith("S") else f"<@{approver}>"


def duration_text(seconds: float) -> str:
    """``8h``, ``90m``, ``45s``: the largest unit that divides it."""
    whole = int(seconds)
    for unit in ("d", "h", "m"):
        if whole and whole % _UNIT_SECONDS[unit] == 0:
            return f"{whole // _UNIT_SECONDS[unit]}{unit}"
    return f"{whole}s"


def parse_duration(text: str) -> int | None:
    """``30m``, ``8h``, ``1d`` in seconds (``duration_text``'s words); None for anything else."""
    match = _DURATION.fullmatch(text.lower())
    return int(match[1]) * _UNIT_SECONDS[match[2]] if match else None


def policy_for(policies: Mapping[str, ApprovalPolicy], tool: str, kind: Kind) -> ApprovalPolicy | None:
    """The policy a held call falls under: ``guard`` for the guard's questions; else the tool's own, then its
    server's (``server__*``); None when no policy names it (the requester or an admin decides)."""
    if kind == "egress":
        return policies.get(GUARD)
    own = policies.get(tool)
    if own is not None or "__" not in tool:
        return own
    return policies.get(tool.split("__", 1)[0] + "__*")


class UnknownGroup(ValueError):
    """A user group Slack does not know (or the app cannot read)."""

    def __init__(self, group: str, error: str) -> None:
        super().__init__(f"user group {group}: {error}")
        self.group = group


class GroupLookupError(Exception):
    """Slack could not say who is in a user group now (an outage, a rate limit): nobody's approval can be checked."""


async def members(client: AsyncWebClient, approvers: Iterable[str]) -> frozenset[str]:
    """The people the approvers name now: each person, and each group's members (``usergroups.users.list``).
    Raises UnknownGroup for a group Slack does not know, GroupLookupError when Slack cannot say."""
    people: set[str] = set()
    for approver in approvers:
        if not approver.startswith("S"):
            people.add(approver)
            continue
        try:
            response = await client.usergroups_users_list(usergroup=approver)
        except SlackApiError as exc:
            error = str(exc.response.get("error") or "")
            if error in ("no_such_subteam", "subteam_not_found", "invalid_usergroup"):
                raise UnknownGroup(approver, error) from exc
            raise GroupLookupError(_("Slack could not list user group {group} ({error}); try again shortly.").format(
                group=mention(approver), error=error or "unknown error")) from exc
        except OSError as exc:
            raise GroupLookupError(_("Slack could not be reached to list user group {group}; try again shortly.")
                                   .format(group=mention(approver))) from exc
        people.update(str(u) for u in response.get("users") or ())
    return frozenset(people)


class ApprovalPolicies:
    """A workspace's policies in one Redis hash (pattern -> policy)."""

    def __init__(self, redis: Redis, keys: AppKeys) -> None:
        self.redis = redis
        self.keys = keys

    async def all(self, ws: Workspace) -> dict[str, ApprovalPolicy]:
        raw = await self.redis.hgetall(self.keys.approval_policies(ws))  # type: ignore[misc]
        found = {}
        for field, value in raw.items():
            pattern = as_text(field) or ""
            policy = ApprovalPolicy.from_json(pattern, value)
            if policy is not None:
                found[pattern] = policy
        return found

    async def put(self, ws: Workspace, policy: ApprovalPolicy, *, old: str) -> ApprovalPolicy:
        """Store ``policy`` under a new version, audited (``approvals:<pattern>``, ``old`` -> the new one)."""
        stored = ApprovalPolicy(policy.pattern, policy.approvers, policy.min, policy.timeout_seconds,
                                uuid.uuid4().hex[:12], policy.set_by)
        await self._audited(ws, stored.set_by, policy.pattern, old, stored.text(),
                            lambda pipe: pipe.hset(self.keys.approval_policies(ws), policy.pattern, stored.to_json()))
        return stored

    async def remove(self, ws: Workspace, pattern: str, *, actor: str, old: str) -> None:
        await self._audited(ws, actor, pattern, old, "off",
                            lambda pipe: pipe.hdel(self.keys.approval_policies(ws), pattern))

    async def _audited(
        self, ws: Workspace, actor: str, pattern: str, old: str, new: str, write: Callable[[Pipeline], object]
    ) -> None:
        async with self.redis.pipeline(transaction=True) as pipe:
            write(pipe)
            change = Change(actor, datetime.now(UTC), f"{APPROVALS_FIELD_PREFIX}{pattern}", old, new)
            await commit(pipe, self.keys.limits_audit(ws), [change], team=ws.team_id, enterprise=ws.enterprise_id)
