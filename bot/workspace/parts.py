"""The workspace's parts, wired once per process: ``bot.serve`` builds one :class:`WorkspaceParts` and each
consumer is handed the parts it uses (the run's start ``bot.runs.start``, ``/agent-limits``, App Home, the
buttons), never the whole::

    parts = WorkspaceParts.create(redis, LimitsPolicy.from_settings(settings), key_prefix=...)
    reply = await parts.commands.run_command(client, ws, user_id, "budget 25")
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from functools import partial

import redis.asyncio as aioredis

from agent_core import utc_now
from bot.keys import DEFAULT_KEY_PREFIX, AppKeys
from bot.workspace.admin import (
    ApprovalsAdmin,
    ChannelAdmin,
    LimitsCommands,
    LimitsParts,
    OrgAdmin,
    Places,
    SlackUsers,
    UsageReports,
    change_refusal,
    file_caps_line,
)
from bot.workspace.memory import MemoryStore
from bot.workspace.settings import (
    ApprovalPolicies,
    DisplaySettings,
    DomainStore,
    LimitsPolicy,
    SearchAccess,
    ToolCatalog,
    WorkspaceLimitsStore,
    WorkspaceTools,
)
from bot.workspace.spend import Budgets, FeedbackStore, OrgBudgetStore, RunLedger


@dataclass(frozen=True, slots=True)
class WorkspaceParts:
    """Every part of the workspace's rules, built once (its users.info cache is per instance)."""

    store: WorkspaceLimitsStore
    #: The runs' budget ledger and records.
    runs: RunLedger
    users: SlackUsers
    display: DisplaySettings
    tools: WorkspaceTools
    domains: DomainStore
    org: OrgBudgetStore
    budgets: Budgets
    search: SearchAccess
    #: What kind of conversation each channel is (who reads it), for what a run may show there.
    places: Places
    channels: ChannelAdmin
    approvals: ApprovalsAdmin
    commands: LimitsCommands
    feedback: FeedbackStore
    #: What people asked the agent to remember, and channels' notes (``/agent memory``, App Home's Forget).
    memories: MemoryStore

    @classmethod
    def create(
        cls,
        redis: aioredis.Redis,
        policy: LimitsPolicy,
        *,
        key_prefix: str = DEFAULT_KEY_PREFIX,
        clock: Callable[[], datetime] = utc_now,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> WorkspaceParts:
        keys = AppKeys(key_prefix)
        store = WorkspaceLimitsStore(redis, defaults=policy.defaults, key_prefix=key_prefix, clock=clock)
        users = SlackUsers(admin_user_ids=policy.admin_user_ids, allow_guests=policy.allow_guests,
                           allow_external=policy.allow_external, clock=monotonic)
        runs = RunLedger(redis, keys, clock=clock, hold_seconds=policy.hold_seconds,
                         renew_seconds=policy.renew_seconds, usage_retention_days=policy.usage_retention_days)
        display = DisplaySettings(redis, keys, default=policy.verbosity, display=policy.display)
        feedback = FeedbackStore(redis, keys, clock=clock, usage_retention_days=policy.usage_retention_days)
        tools = WorkspaceTools(ToolCatalog(redis, keys), store, policy.builtin_tools)
        domains, search = DomainStore(redis, keys), SearchAccess(redis, keys)
        org = OrgBudgetStore(redis, keys, clock=clock)
        budgets = Budgets(runs, org)
        channels = ChannelAdmin(store, users, policy.models, tools.of, org)
        approvals = ApprovalsAdmin(users, ApprovalPolicies(redis, keys), tools.deployment,
                                   partial(change_refusal, users), policy.approval_timeouts)
        commands = LimitsCommands(LimitsParts(
            users, store, display, domains, search, tools, budgets, org, channels,
            OrgAdmin(org, users, policy.models), UsageReports(runs, users), approvals, feedback,
            file_caps_line(*policy.file_caps)))
        return cls(store, runs, users, display, tools, domains, org, budgets, search, Places(), channels,
                   approvals, commands, feedback, MemoryStore(redis, keys))
