"""A run's outcome as Slack message metadata (``event_type: agent_run``) on its final message, so other apps and
workflows can read how it ended. Pure.

Anyone who reads the message can read its metadata (Slack's reference), so it holds ids and numbers only: the
run id, its stop reason, steps, tokens and cost, never a word of the conversation.
"""

from __future__ import annotations

from typing import Any

from agent_core import MICROS_PER_USD, Stopped

#: The ``event_type`` other apps subscribe to (``message_metadata_posted``) or read on the message.
EVENT_TYPE = "agent_run"


def run_metadata(event: Stopped) -> dict[str, Any]:
    """``{"event_type": "agent_run", "event_payload": {...}}`` for ``chat.postMessage`` / ``chat.stopStream``."""
    usage = event.usage
    return {"event_type": EVENT_TYPE, "event_payload": {
        "run_id": event.run_id,
        "stop_reason": str(event.reason),
        "steps": event.steps,
        "prompt_tokens": usage.prompt_tokens,
        "completion_tokens": usage.completion_tokens,
        "total_tokens": usage.total_tokens,
        "cost_micros": usage.cost_micros,
        "cost_usd": f"{usage.cost_micros / MICROS_PER_USD:.6f}",
    }}
