"""A person's MCP connections: ``/agent connect|disconnect|connections``, the Connect and Retry buttons of a run's
offer, and App Home's Connect/Disconnect. Each acts for its presser alone: a Connect button pressed by anyone but
its person voids that sign-in (their browser's return is refused), and Retry continues only its person's thread.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from functools import partial
from typing import Any

from redis.exceptions import RedisError
from slack_bolt.async_app import AsyncAck, AsyncApp, AsyncBoltContext
from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from bot import identity
from bot.errors import McpSignInError
from bot.i18n import _, speaking
from bot.identity import Conversation, Workspace
from bot.markup import escape
from bot.oauth.mcp_blocks import (
    CONNECT_ACTION,
    HOME_CONNECT_ACTION,
    HOME_DISCONNECT_ACTION,
    RETRY_ACTION,
    connect_offer,
    connections_text,
    read_connect_value,
    read_retry_value,
)
from bot.oauth.mcp_signin import McpSignIn, home_blocks
from bot.oauth.mcp_vault import forget_workspace
from bot.queue.turns import enqueue_turn
from bot.receive.deps import Services
from bot.receive.listeners.home import HomeParts, publish_home
from bot.turn import Turn
from bot.workspace.admin import SlackUsers

log = logging.getLogger(__name__)

VERBS = ("connect", "disconnect", "connections")
#: What ``/agent connect`` may take to discover the server and register (Slack wants its answer within 3 s).
CONNECT_WITHIN_SECONDS = 2.5
#: What a Retry asks the agent: the thread's history holds the request it continues.
RETRY_TEXT = "I have connected my account now: please go on with my last request."


def is_mcp_command(text: str) -> bool:
    words = text.split()
    return bool(words) and words[0].lower() in VERBS


async def answer(signin: McpSignIn | None, ws: Workspace, user: str, text: str) -> tuple[str, list[dict[str, Any]]]:
    """The ephemeral answer to ``/agent connect|disconnect <server>`` or ``/agent connections``: text and blocks."""
    words = text.split()
    verb, name = words[0].lower(), (words[1] if len(words) > 1 else "")
    if signin is None:
        return _("No MCP server here acts as the person asking: there is nothing to connect."), []
    if verb == "connections" or not name:
        return connections_text(signin.names(), await signin.connections(ws, user), user), []
    if name not in signin.servers:
        return _("No MCP server `{name}` acts as the person asking here; these do: {names}").format(
            name=escape(name[:40]), names=", ".join(signin.names())), []
    if verb == "disconnect":
        if await signin.disconnect(ws, user, name):
            return _("Disconnected {server}: your token for it is deleted.").format(server=name), []
        return _("You were not connected to {server}.").format(server=name), []
    try:
        async with asyncio.timeout(CONNECT_WITHIN_SECONDS):
            url = await signin.begin(ws, user, name)
    except TimeoutError:
        return _("{server} is slow to answer; try `/agent connect {server}` again.").format(server=name), []
    except McpSignInError as exc:
        return _("Signing in to {server} cannot start: {why}").format(server=name, why=escape(str(exc))), []
    return connect_offer(name, url, user)


def command_handler(services: Services, users: SlackUsers
                    ) -> Callable[[AsyncAck, dict[str, Any], AsyncBoltContext], Awaitable[bool]]:
    """``/agent connect|disconnect|connections``, answered privately in the ack, in the asker's language; False
    (untouched) for any other ``/agent`` text."""

    async def on_command(ack: AsyncAck, command: dict[str, Any], context: AsyncBoltContext) -> bool:
        if not is_mcp_command(str(command.get("text", ""))):
            return False
        client, ws = context.client or services.slack, identity.workspace(context)
        user = str(command.get("user_id", ""))
        with speaking(await users.locale(client, ws, user)):
            try:
                text, blocks = await answer(services.mcp, ws, user, str(command.get("text", "")))
            except RedisError as exc:
                log.warning("/agent connections: %s", exc)
                text, blocks = _("The connections store is unavailable right now; try again shortly."), []
        await ack(text=text, blocks=blocks, response_type="ephemeral")
        return True

    return on_command


def register(app: AsyncApp, services: Services, rules: HomeParts) -> None:
    """The Connect, Retry and App Home buttons."""
    app.action(CONNECT_ACTION)(partial(_on_connect, services, rules.users))
    app.action(RETRY_ACTION)(partial(_on_retry, services, rules.users))
    app.action(HOME_CONNECT_ACTION)(partial(_on_home, services, rules))
    app.action(HOME_DISCONNECT_ACTION)(partial(_on_home, services, rules))


def on_uninstalled(services: Services) -> Callable[[AsyncBoltContext], Awaitable[None]] | None:
    """With one SLACK_BOT_TOKEN, what ``app_uninstalled`` does here: no installation to delete, but the people's
    MCP tokens go (in OAuth mode the installation store's listener deletes them with the installation). Handed to
    the one listener of that event (``bot.receive.listeners.memory``): Bolt runs one listener per event."""
    if services.oauth is not None or services.mcp is None:
        return None

    async def forget(context: AsyncBoltContext) -> None:
        await forget_workspace(services.redis, services.keys, identity.workspace(context))

    return forget


async def _on_connect(services: Services, users: SlackUsers, ack: AsyncAck, body: dict[str, Any],
                      action: dict[str, Any], context: AsyncBoltContext) -> None:
    await ack()  # the URL opens in the presser's browser whatever we answer: the check is the state's
    presser, client, ws = _user(body), context.client or services.slack, identity.workspace(context)
    try:
        owner, server, state = read_connect_value(action.get("value"))
    except ValueError:
        return
    if presser == owner or services.mcp is None:
        return
    await services.mcp.vault.take(state)  # that sign-in now fails: it would store another's account as theirs
    with speaking(await users.locale(client, ws, presser)):
        await _tell(client, body, presser, _(
            "That Connect button is <@{owner}>'s; the sign-in it started is cancelled. Use `/agent connect "
            "{server}` to connect your own account.").format(owner=owner, server=server))


async def _on_retry(services: Services, users: SlackUsers, ack: AsyncAck, body: dict[str, Any],
                    action: dict[str, Any], context: AsyncBoltContext) -> None:
    await ack()
    presser, client, ws = _user(body), context.client or services.slack, identity.workspace(context)
    try:
        thread, reply_ts, owner = read_retry_value(action.get("value"))
        conversation = Conversation.parse(thread)
    except ValueError:
        return
    if conversation.workspace != ws or presser != owner:
        return  # only its person continues their own thread
    turn = Turn(conversation, turn_id=str(action.get("action_ts") or ""), text=RETRY_TEXT, user_id=owner,
                reply_thread_ts=reply_ts, message_ts=reply_ts)
    try:
        await enqueue_turn(services.redis, services.queue, services.keys, turn,
                           ttl_seconds=services.settings.thread_ttl_seconds)
    except RedisError as exc:
        log.warning("Retry not queued: %s", exc)
        with speaking(await users.locale(client, ws, presser)):
            await _tell(client, body, presser, _("That did not go through (the queue is unavailable); "
                                                 "ask again in the thread."))


async def _on_home(services: Services, rules: HomeParts, ack: AsyncAck, body: dict[str, Any],
                   action: dict[str, Any], context: AsyncBoltContext) -> None:
    await ack()
    presser, client, ws = _user(body), context.client or services.slack, identity.workspace(context)
    verb = "connect" if action.get("action_id") == HOME_CONNECT_ACTION else "disconnect"
    with speaking(await rules.users.locale(client, ws, presser)):
        text, blocks = await answer(services.mcp, ws, presser, f"{verb} {action.get('value', '')}")
        if verb == "connect":
            await _dm(client, presser, text, blocks)  # the link, where only they read it
        await publish_home(rules, client, ws, presser, notice=text if verb == "disconnect" else "",
                           extra=await home_blocks(services.mcp, ws, presser))


def _user(body: dict[str, Any]) -> str:
    return str((body.get("user") or {}).get("id", ""))


async def _tell(client: AsyncWebClient, body: dict[str, Any], user: str, text: str) -> None:
    channel = str((body.get("channel") or {}).get("id", ""))
    try:
        if channel:
            await client.chat_postEphemeral(channel=channel, user=user, text=text)
        else:
            await client.chat_postMessage(channel=user, text=text)
    except SlackApiError as exc:
        log.warning("Connect notice refused: %s", exc.response.get("error"))


async def _dm(client: AsyncWebClient, user: str, text: str, blocks: list[dict[str, Any]]) -> None:
    try:
        await client.chat_postMessage(channel=user, text=text, blocks=blocks, unfurl_links=False,
                                      unfurl_media=False)
    except SlackApiError as exc:
        log.warning("Connect link refused: %s", exc.response.get("error"))
