"""App Home's memory part: the person's own memories (nobody else's, admins' included), each with a Forget button.
Pure: memories in, Block Kit blocks out."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from bot.i18n import _
from bot.thread import mrkdwn
from bot.workspace.memory import Memory, line

FORGET_ACTION = "agent_memory_forget"
#: Memories the Home tab shows (one block each; Slack's cap is 100 blocks a view); ``/agent memory`` lists them all.
HOME_MEMORIES = 20


def memory_blocks(memories: Sequence[Memory]) -> list[dict[str, Any]]:
    """The Home tab's memories: the viewer's own."""
    blocks: list[dict[str, Any]] = [{"type": "header", "text": {"type": "plain_text", "text": _("Your memories")}}]
    state = (_("What you asked me to remember; only you see this list. `/agent memory off` stops me keeping or "
               "using anything for you.") if memories else _(
        "None kept. Where memory is on, ask me to remember something (\"remember that I deploy to eu-west-3\")."))
    blocks.append({"type": "context", "elements": [{"type": "mrkdwn", "text": state}]})
    for memory in memories[:HOME_MEMORIES]:
        blocks.append({"type": "section", "text": {"type": "mrkdwn", "text": mrkdwn.shorten(line(memory), 2900)},
                       "accessory": {"type": "button", "action_id": FORGET_ACTION, "value": memory.id,
                                     "style": "danger", "text": {"type": "plain_text", "text": _("Forget")}}})
    more = len(memories) - HOME_MEMORIES
    if more > 0:
        blocks.append({"type": "context", "elements": [{"type": "mrkdwn", "text": _(
            "…and {n} more: `/agent memory` lists them all.").format(n=more)}]})
    return blocks
