"""App Home's handlers: ``app_home_opened`` publishes the Home tab, the admin buttons open the limits modal or
reset the limits, and the modal's submission changes them, with the same validation and authorization as
``/agent-limits``.

The handlers only fetch, authorize and publish; the views are built by the pure ``bot.receive.views.home``.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from typing import Any

from redis.exceptions import RedisError
from slack_bolt.async_app import AsyncAck, AsyncApp, AsyncBoltContext
from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from agent_core import StoreError
from bot.errors import SlackLookupError
from bot.i18n import speaking
from bot.identity import Workspace
from bot.oauth.mcp_signin import home_blocks
from bot.receive.deps import Services
from bot.receive.listeners.commands import workspace_of
from bot.receive.views.home import (
    EDIT_ACTION,
    MODAL_CALLBACK,
    RECENT_RUNS,
    RESET_ACTION,
    HomeState,
    home_view,
    limits_modal,
    read_modal,
    unavailable_view,
)
from bot.receive.views.memory import memory_blocks
from bot.receive.views.schedules import schedule_blocks, with_schedules
from bot.workspace import WorkspaceParts
from bot.workspace.admin import TOP_SPENDERS, ChannelAdmin, LimitsCommands, SlackUsers
from bot.workspace.memory import MemoryStore
from bot.workspace.schedules import ScheduleStore
from bot.workspace.settings import WorkspaceLimitsStore, WorkspaceTools
from bot.workspace.spend import Budgets, FeedbackStore, OrgBudgetStore, RunLedger, SessionTitles

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class HomeParts:
    """What the Home tab reads, and its buttons change (the workspace's parts, wired once per process)."""

    users: SlackUsers
    commands: LimitsCommands
    channels: ChannelAdmin
    store: WorkspaceLimitsStore
    org: OrgBudgetStore
    budgets: Budgets
    runs: RunLedger
    tools: WorkspaceTools
    feedback: FeedbackStore
    schedules: ScheduleStore
    #: The viewer's own memories (and App Home's Forget).
    memories: MemoryStore

    @classmethod
    def of(cls, parts: WorkspaceParts) -> HomeParts:
        return cls(parts.users, parts.commands, parts.channels, parts.store, parts.org, parts.budgets, parts.runs,
                   parts.tools, parts.feedback, ScheduleStore(parts.store.redis, parts.store.keys), parts.memories)


def register(app: AsyncApp, services: Services, rules: HomeParts) -> None:
    """``app_home_opened`` → views.publish; the Change/Reset buttons; the modal's submission."""

    async def on_home_opened(event: dict[str, Any], context: AsyncBoltContext) -> None:
        if event.get("tab", "home") != "home":
            return  # the Messages tab opens this event too
        async with viewer(rules, services, context, str(event["user"])) as (client, ws, user_id):
            await publish_home(rules, client, ws, user_id, extra=await home_blocks(services.mcp, ws, user_id))

    async def on_edit(ack: AsyncAck, body: dict[str, Any], context: AsyncBoltContext) -> None:
        await ack()
        async with viewer(rules, services, context, user_of(body)) as (client, ws, user_id):
            notice = await _authorize(rules, client, ws, user_id)
            if notice:
                await publish_home(rules, client, ws, user_id, notice=notice)
                return
            config = await rules.store.get(ws)
            await client.views_open(trigger_id=str(body["trigger_id"]), view=limits_modal(config))

    async def on_reset(ack: AsyncAck, body: dict[str, Any], context: AsyncBoltContext) -> None:
        await ack()
        async with viewer(rules, services, context, user_of(body)) as (client, ws, user_id):
            try:
                reply = await rules.commands.reset(client, ws, user_id)
            except (SlackLookupError, StoreError) as exc:
                reply = str(exc)
            await publish_home(rules, client, ws, user_id, notice=reply)

    async def on_submit(ack: AsyncAck, body: dict[str, Any], view: dict[str, Any], context: AsyncBoltContext) -> None:
        async with viewer(rules, services, context, user_of(body)) as (client, ws, user_id):
            await _submit(rules, client, ws, user_id, ack, view)

    app.event("app_home_opened")(on_home_opened)
    app.action(EDIT_ACTION)(on_edit)
    app.action(RESET_ACTION)(on_reset)
    app.view(MODAL_CALLBACK)(on_submit)


async def _submit(
    rules: HomeParts, client: AsyncWebClient, ws: Workspace, user_id: str, ack: AsyncAck, view: dict[str, Any]
) -> None:
    """The limits modal's submission: validated and authorized like ``/agent-limits``, then the Home tab again."""
    changes, errors = read_modal(view)
    if not errors:
        # Authorized again on submit: the button is only shown to admins, but a view can be replayed.
        notice = await _authorize(rules, client, ws, user_id)
        if notice:
            errors = {"budget_micros": notice}
    if errors:
        await ack(response_action="errors", errors=errors)
        return
    try:
        reply = await rules.commands.change(client, ws, user_id, changes)
    except (SlackLookupError, StoreError) as exc:
        await ack(response_action="errors", errors={"budget_micros": str(exc)[:150]})
        return
    await ack()
    await publish_home(rules, client, ws, user_id, notice=reply)


@contextlib.asynccontextmanager
async def viewer(
    rules: HomeParts, services: Services, context: AsyncBoltContext, user_id: str
) -> AsyncIterator[tuple[AsyncWebClient, Workspace, str]]:
    """The client, workspace and person of an App Home request; what the block writes is in their language."""
    client, ws = context.client or services.slack, workspace_of(context)
    with speaking(await rules.users.locale(client, ws, user_id)):
        yield client, ws, user_id


def user_of(body: Mapping[str, Any]) -> str:
    return str((body.get("user") or {}).get("id", ""))


async def _authorize(rules: HomeParts, client: AsyncWebClient, ws: Workspace, user_id: str) -> str:
    """Empty when ``user_id`` may change the limits, else what to tell them."""
    try:
        return "" if await rules.commands.may_change(client, ws, user_id) else rules.commands.refusal()
    except SlackLookupError as exc:
        return str(exc)


async def _schedules(rules: HomeParts, ws: Workspace, user_id: str, *, everyone: bool) -> list[dict[str, Any]]:
    """The Home tab's schedules: the person's own, or an admin's view of the workspace's."""
    found = await rules.schedules.of_workspace(ws)
    return schedule_blocks([s for s in found if everyone or s.creator == user_id], everyone=everyone)


async def publish_home(
    rules: HomeParts, client: AsyncWebClient, ws: Workspace, user_id: str, *, notice: str = "",
    extra: list[dict[str, Any]] | None = None,
) -> None:
    """Build and publish ``user_id``'s Home tab (``extra``: blocks of a later part, the person's MCP connections);
    a store or Slack failure is logged, the tab stays as it was."""
    try:
        try:
            is_admin = await rules.commands.may_change(client, ws, user_id)
        except SlackLookupError:
            is_admin = False
        channel_settings = is_admin or (await rules.channels.choices(ws)).channel_managers
        config = await rules.store.get(ws)
        org = await rules.org.of(ws)
        budget = await rules.budgets.of(ws, config, user_id, org=org)
        usage, spenders = await budget.usage_summary(), await budget.top_spenders(TOP_SPENDERS)
        runs = await rules.runs.recent_runs(ws, RECENT_RUNS)
        titles = await SessionTitles(rules.store.redis, rules.store.keys).seen_by(
            ws, user_id, ((r.channel_id, r.thread_ts) for r in runs))
        tools, published = await rules.tools.listing(ws)
        feedback = await rules.feedback.summary(ws, config.period)
        view = home_view(HomeState(
            config, usage, rules.users.who_may_change(), runs, is_admin=is_admin, notice=notice,
            tools=tools, tools_published=published, feedback=feedback, spenders=spenders,
            org_unreadable=org is not None and org.unreadable, models=await rules.channels.summary(ws),
            channel_settings=channel_settings, titles=titles,
        ))
        view = with_schedules(view, await _schedules(rules, ws, user_id, everyone=is_admin))
        view = with_schedules(view, memory_blocks(await rules.memories.all(
            ws, "user", user_id, time.time())))  # the viewer's own memories: nobody else's, whoever views
        view = with_schedules(view, extra or [])
    except (StoreError, RedisError) as exc:
        log.warning("App Home for %s: %s", user_id, exc)
        view = unavailable_view()
    try:
        await client.views_publish(user_id=user_id, view=view)
    except SlackApiError as exc:
        log.warning("views.publish for %s failed: %s", user_id, exc.response.get("error"))
