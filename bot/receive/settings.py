"""``ReceiveSettings``: the receive stage's piece of ``Settings``, and the slice its listeners get (``Services``)."""

from __future__ import annotations

import json

from pydantic import Field, field_validator

from agent_core import ConfigError
from bot.queue.settings import QueueSettings

#: Suggested prompts of a new assistant thread (AGENT_SUGGESTED_PROMPTS overrides them; at most 4 are shown).
DEFAULT_SUGGESTED_PROMPTS = (
    '[{"title": "Summarise a page", "message": "Summarise https://example.com in three bullet points."},'
    ' {"title": "Do the maths", "message": "What is 17% of 2,340, rounded to the cent?"},'
    ' {"title": "What can you do?", "message": "Which tools can you use, and what are your limits?"}]'
)
#: Slack shows up to four suggested prompts; a title is a short label, a message is what gets sent.
MAX_SUGGESTED_PROMPTS = 4


class ReceiveSettings(QueueSettings):
    """What the listeners answer without a run: the assistant's suggested prompts, the `respond all` pace."""

    agent_respond_all_per_minute: int = Field(
        default=5, ge=1, description="Runs one person may start per minute in a `respond all` channel without "
        "mentioning the agent (more are not answered).",
    )
    agent_suggested_prompts: str = Field(
        default=DEFAULT_SUGGESTED_PROMPTS,
        description='Suggested prompts of a new assistant thread: a JSON list of {"title", "message"}.',
    )

    @field_validator("agent_suggested_prompts")
    @classmethod
    def _prompts(cls, value: str) -> str:
        parse_suggested_prompts(value)
        return value

    def suggested_prompts(self) -> list[dict[str, str]]:
        return parse_suggested_prompts(self.agent_suggested_prompts)


def parse_suggested_prompts(raw: str) -> list[dict[str, str]]:
    """AGENT_SUGGESTED_PROMPTS as Slack takes them; raises ConfigError naming the setting when it is malformed."""
    try:
        data = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise ConfigError(f"AGENT_SUGGESTED_PROMPTS is not valid JSON ({exc.msg} at char {exc.pos})") from None
    shape = 'a JSON list of {"title": "...", "message": "..."} objects'
    if not isinstance(data, list) or not 1 <= len(data) <= MAX_SUGGESTED_PROMPTS:
        raise ConfigError(f"AGENT_SUGGESTED_PROMPTS must be {shape}, 1 to {MAX_SUGGESTED_PROMPTS} of them")
    prompts: list[dict[str, str]] = []
    for i, item in enumerate(data):
        ok = isinstance(item, dict) and set(item) == {"title", "message"}
        if not ok or not all(isinstance(v, str) and v.strip() for v in item.values()):
            raise ConfigError(f"AGENT_SUGGESTED_PROMPTS item {i} must be {{\"title\": str, \"message\": str}}")
        prompts.append({"title": item["title"][:75], "message": item["message"]})
    return prompts
