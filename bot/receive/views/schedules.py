"""App Home's schedules part: the person's schedules (an admin's: the workspace's), each with Pause and Delete
buttons. Pure: schedules in, Block Kit blocks out."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from bot.i18n import _
from bot.thread import mrkdwn
from bot.workspace.schedules import Schedule
from bot.workspace.schedules.command import list_line

PAUSE_ACTION = "agent_schedule_pause"
DELETE_ACTION = "agent_schedule_delete"
#: Schedules the Home tab shows (two blocks each; Slack's cap is 100 blocks a view).
HOME_SCHEDULES = 10
MAX_BLOCKS = 100


def schedule_blocks(schedules: Sequence[Schedule], *, everyone: bool) -> list[dict[str, Any]]:
    """The Home tab's schedules; ``everyone``: an admin's view of the workspace's, else the person's own."""
    title = _("Schedules in this workspace") if everyone else _("Your schedules")
    blocks: list[dict[str, Any]] = [{"type": "header", "text": {"type": "plain_text", "text": title}}]
    if not schedules:
        blocks.append({"type": "section", "text": {"type": "mrkdwn", "text": _(
            "None yet: `/agent schedule add \"every monday at 09:00\" <task>` in a channel makes one.")}})
        return blocks
    for schedule in schedules[:HOME_SCHEDULES]:
        line = list_line(schedule)
        where = f"<#{schedule.channel_id}> " if not schedule.channel_id.startswith("D") else ""
        blocks.append({"type": "section", "text": {"type": "mrkdwn", "text": mrkdwn.shorten(where + line, 2900)}})
        buttons = [{"type": "button", "action_id": DELETE_ACTION, "value": schedule.id, "style": "danger",
                    "text": {"type": "plain_text", "text": _("Delete")}}]
        if schedule.status == "active":
            buttons.insert(0, {"type": "button", "action_id": PAUSE_ACTION, "value": schedule.id,
                               "text": {"type": "plain_text", "text": _("Pause")}})
        blocks.append({"type": "actions", "elements": buttons})
    return blocks


def with_schedules(view: dict[str, Any], blocks: list[dict[str, Any]]) -> dict[str, Any]:
    """``view`` with the schedules' blocks after its own, as many as fit in Slack's 100."""
    own = list(view.get("blocks", []))
    room = MAX_BLOCKS - len(own)
    if room < 2:
        return view
    fitted = blocks[:room]
    if fitted and fitted[-1].get("type") == "section" and len(fitted) < len(blocks):
        fitted = fitted[:-1]  # a schedule's line without its buttons: leave it for a shorter tab
    return {**view, "blocks": own + fitted}
