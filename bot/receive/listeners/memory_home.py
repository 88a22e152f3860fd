"""App Home's Forget button on one of the viewer's memories: only their own (the store is keyed by the presser, so a
button value naming someone else's id forgets nothing), then the Home tab again saying what was done."""

from __future__ import annotations

from typing import Any

from slack_bolt.async_app import AsyncAck, AsyncApp, AsyncBoltContext

from bot.i18n import _
from bot.receive.deps import Services
from bot.receive.listeners.home import HomeParts, publish_home, user_of, viewer
from bot.receive.listeners.memory import AgentMemory, emit_forgotten
from bot.receive.views.memory import FORGET_ACTION


def register(app: AsyncApp, services: Services, rules: HomeParts, memory: AgentMemory) -> None:
    @app.action(FORGET_ACTION)
    async def on_forget(ack: AsyncAck, body: dict[str, Any], action: dict[str, Any],
                        context: AsyncBoltContext) -> None:
        await ack()
        async with viewer(rules, services, context, user_of(body)) as (client, ws, user_id):
            memory_id = str(action.get("value", ""))[:20]
            if await memory.store.forget(ws, "user", user_id, [memory_id]):
                emit_forgotten(ws, user_id, [memory_id], "by_person")
                notice = _("Forgotten: `{id}`.").format(id=memory_id)
            else:
                notice = _("That memory is gone already.")
            await publish_home(rules, client, ws, user_id, notice=notice)
